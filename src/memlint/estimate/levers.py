"""The levers that lower a training step's peak, and the search for the cheapest set that fits.

One list for MEM101's advice and for `--compare`'s alternatives: the levers of Hugging Face's
efficient-training guide (fused/chunked cross-entropy, 8-bit and paged optimizers, activation
recompute and offloading, a smaller micro-batch with more accumulation, LoRA and QLoRA, double
quantization, SDPA, a shorter maximum length). Packing and padding-free batches are not here on
purpose: the worst-case micro-batch holds `batch × max_length` tokens either way, so they change
what a typical step costs, not the peak (MEM201 and MEM202 say so).

Each lever says what it changes in the Setup, which plan fields say it in a script (so the advice
can name the line), and what it costs the run; `cost` ranks them from better in every way (SDPA
instead of eager attention) and free (a fused loss) to a different experiment (a shorter max_length). Every candidate is re-estimated, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any, Callable, Mapping, Sequence

from memlint.errors import MemlintError
from memlint.estimate.core import Estimate, estimate
from memlint.estimate.setup import Setup, optimizers
from memlint.gpu import MIN_HEADROOM, Fit, Gpu, fit

MAX_LEVERS = 4          # levers combined in one suggestion, besides the micro-batch and max_length
BATCH_COST = 2          # a smaller micro-batch with more accumulation: same optimisation, slower steps
SEQ_COST = 8            # a shorter max_length: truncates the longest samples, a different experiment


@dataclass(frozen=True)
class Step:
    """One lever applied to one configuration."""

    lever: str                          # the Lever's key
    changes: Mapping[str, Any]          # Setup fields -> values
    plan: Mapping[str, Any] | None      # plan fields -> values that say it in a script (None: none does)
    words: str                          # how a script says it: "gradient_checkpointing=True"
    cost: int


@dataclass(frozen=True)
class Lever:
    key: str
    title: str              # "gradient checkpointing"
    cost: int               # 0 (better in every way) .. 8 (a different experiment)
    why: str                # what it costs the run
    make: Callable[[Setup], Step | None]  # None where it is already on or does not apply


def _step(lever: str, changes: Mapping[str, Any], plan: Mapping[str, Any] | None, words: str) -> Step:
    return Step(lever, dict(changes), None if plan is None else dict(plan), words, LEVER_COST[lever])


def _fused(s: Setup) -> Step | None:
    if s.fused_loss or s.objective != "sft":
        return None
    # a fused loss replaces torchtune's chunked one
    return _step("fused-loss", {"fused_loss": True, "chunked_loss": 0}, {"fused_loss": True}, "use_liger_kernel=True")


def _double_quant(s: Setup) -> Step | None:
    if s.quant not in ("nf4", "fp4") or s.double_quant:
        return None
    return _step("double-quant", {"double_quant": True}, {"double_quant": True}, "bnb_4bit_use_double_quant=True")


def _sdpa(s: Setup) -> Step | None:
    if s.attn != "eager":
        return None
    return _step("sdpa", {"attn": "sdpa"}, {"attn_implementation": "sdpa"}, 'attn_implementation="sdpa"')


# An optimizer's 8-bit and paged counterparts (bitsandbytes), by what the Trainer calls them.
_EIGHT_BIT = {"lion_32bit": "lion_8bit", "paged_lion_32bit": "paged_lion_8bit", "paged_adamw_32bit": "paged_adamw_8bit"}
_PAGED = {"lion_8bit": "paged_lion_8bit", "lion_32bit": "paged_lion_8bit"}


def _adam(name: str) -> bool:
    o = optimizers()[name]
    return o["states"] == 2


def _eight_bit(s: Setup) -> Step | None:
    o = s.optimizer
    if o["state_dtype"] not in ("param", "fp32") or o["states"] in (0, "factored"):  # already block-quantized
        return None
    new = _EIGHT_BIT.get(s.optim) or ("adamw_bnb_8bit" if _adam(s.optim) else None)
    if new is None:
        return None
    return _step("8bit-optimizer", {"optim": new}, {"optimizer": new}, f'optim="{new}"')


def _paged(s: Setup) -> Step | None:
    o = s.optimizer
    if o["paged"] or o["states"] in (0, "factored"):
        return None
    new = _PAGED.get(s.optim) or ("paged_adamw_8bit" if _adam(s.optim) else None)
    if new is None:
        return None
    return _step("paged-optimizer", {"optim": new}, {"optimizer": new}, f'optim="{new}"')


def _recompute(s: Setup) -> Step | None:
    if s.recompute:
        return None
    return _step("recompute", {"recompute": True}, {"gradient_checkpointing": True}, "gradient_checkpointing=True")


def _offload(s: Setup) -> Step | None:
    if s.offload_activations:
        return None
    # No plan field reads it yet (a plan note says so): memlint would not see it applied, so the
    # advice on a script leaves it out and `--compare` shows it.
    return _step("offload-activations", {"offload_activations": True}, None, "activation_offloading=True")


def _half(s: Setup) -> tuple[str, str]:
    """The (precision, load dtype) an adapter run keeps: bf16 autocast, fp16 where the run is fp16."""
    if s.precision in ("amp-fp16", "pure-fp16"):
        return s.precision, s.dtype
    return "amp-bf16", "bf16"


def _dtype_words(s: Setup, dtype: str) -> str:
    return f", torch_dtype=torch.{'bfloat16' if dtype == 'bf16' else 'float16'}" if dtype != s.dtype else ""


def _lora(s: Setup) -> Step | None:
    if s.method != "full" or s.offload != "none":
        return None
    precision, dtype = _half(s)
    changes = {"method": "lora", "lora_r": 16, "lora_targets": "all-linear", "precision": precision, "dtype": dtype}
    plan = {"method": "lora", "lora_r": 16, "lora_targets": "all-linear", "precision": precision, "torch_dtype": dtype}
    return _step("lora", changes, plan, "LoRA (r=16 on all linear layers)" + _dtype_words(s, dtype))


def _qlora(s: Setup) -> Step | None:
    if s.method == "qlora" or s.offload != "none":
        return None
    precision, dtype = _half(s)
    changes: dict[str, Any] = {"method": "qlora", "quant": "nf4", "double_quant": True, "precision": precision,
                               "dtype": dtype}
    plan: dict[str, Any] = {"method": "qlora", "quant_bits": 4, "quant_type": "nf4", "double_quant": True,
                            "precision": precision, "torch_dtype": dtype}
    words = "QLoRA: a 4-bit NF4 base with double quantization" + _dtype_words(s, dtype)
    if s.method == "full":
        changes.update(lora_r=16, lora_targets="all-linear")
        plan.update(lora_r=16, lora_targets="all-linear")
        words = "QLoRA (r=16 on all linear layers, a 4-bit NF4 base)" + _dtype_words(s, dtype)
    return Step("qlora", changes, plan, words, LEVER_COST["qlora"] + (2 if s.method == "full" else 0))


LEVERS: tuple[Lever, ...] = (
    Lever("fused-loss", "fused cross-entropy", 1, "a Liger/Cut Cross-Entropy kernel; the loss is the same", _fused),
    Lever("double-quant", "double quantization", 1, "none (the QLoRA paper's default)", _double_quant),
    # free and faster: every other lever costs something, so SDPA comes first wherever it helps
    Lever("sdpa", "SDPA attention", 0, "none; faster than eager", _sdpa),
    Lever("8bit-optimizer", "8-bit optimizer", 2, "bitsandbytes' blockwise 8-bit state", _eight_bit),
    Lever("paged-optimizer", "paged optimizer", 3, "state in unified memory, paged to CPU under pressure", _paged),
    Lever("recompute", "gradient checkpointing", 3, "about a third more compute", _recompute),
    Lever("offload-activations", "activation offloading", 4, "CPU-GPU copies every layer", _offload),
    Lever("qlora", "QLoRA", 5, "adapters over a 4-bit base: a different model to train", _qlora),
    Lever("lora", "LoRA", 6, "trains adapters, not the whole model", _lora),
)
LEVER_COST = {lv.key: lv.cost for lv in LEVERS}
# What a chart bar calls each lever (short: a label sits beside its bar).
SHORT = {"fused-loss": "fused CE", "double-quant": "double quant", "sdpa": "SDPA", "8bit-optimizer": "8-bit optim",
         "paged-optimizer": "paged optim", "recompute": "recompute", "offload-activations": "offload activations",
         "qlora": "QLoRA", "lora": "LoRA"}
LEVER_TITLE = {lv.key: lv.title for lv in LEVERS} | {"micro-batch": "smaller micro-batch", "max-length": "shorter max_length"}


def batch_steps(s: Setup) -> list[Step]:
    """Smaller micro-batches that keep the effective batch (divisors of it), largest first."""
    out = []
    for b in range(s.batch - 1, 0, -1):
        if s.batch % b:
            continue
        acc = s.grad_accum * (s.batch // b)
        out.append(Step("micro-batch", {"batch": b, "grad_accum": acc}, {"per_device_batch": b, "grad_accum": acc},
                        f"micro-batch {s.batch} → {b} (gradient accumulation {s.grad_accum} → {acc})", BATCH_COST))
    return out


def seq_step(s: Setup, seq: int) -> Step:
    return Step("max-length", {"seq": seq}, {"max_length": seq}, f"max_length {s.seq} → {seq}", SEQ_COST)


@dataclass(frozen=True)
class Option:
    """A configuration memlint suggests: the steps, the Setup they make and its estimate."""

    steps: tuple[Step, ...]
    estimate: Estimate
    fit: Fit | None = None

    @property
    def setup(self) -> Setup:
        return self.estimate.setup

    @property
    def peak(self) -> int:
        return self.estimate.peak

    @property
    def held(self) -> int:
        """What the GPU holds: the peak and, for a paged optimizer, its state in unified memory (a
        paged state that does not fit beside the peak is paged out every step: not a fit)."""
        return self.estimate.peak + self.estimate.paged_optimizer

    @property
    def cost(self) -> int:
        return sum(st.cost for st in self.steps)

    @property
    def plan(self) -> dict[str, Any] | None:
        """The plan values that say every step in a script (None when one has no plan field)."""
        out: dict[str, Any] = {}
        for st in self.steps:
            if st.plan is None:
                return None
            out.update(st.plan)
        return out

    @property
    def label(self) -> str:
        """In words: 'gradient checkpointing + micro-batch 8 → 4 (gradient accumulation 1 → 2)'."""
        return " + ".join(LEVER_TITLE[st.lever] if st.lever not in ("micro-batch", "max-length") else st.words
                          for st in self.steps)

    @property
    def short(self) -> str:
        """For a chart bar: 'QLoRA + recompute', 'micro-batch 2, accum 4'."""
        def one(st: Step) -> str:
            if st.lever == "micro-batch":
                return f"micro-batch {st.changes['batch']}, accum {st.changes['grad_accum']}"
            if st.lever == "max-length":
                return f"max_length {st.changes['seq']}"
            return SHORT[st.lever]

        return " + ".join(one(st) for st in self.steps)

    def rank(self) -> tuple:
        """Cheapest first; then fewer changes, the larger micro-batch and the lower peak."""
        return (self.cost, len(self.steps), -self.setup.batch, -self.setup.seq, self.held)


def applicable(s: Setup, plan_only: bool = False) -> list[Step]:
    """Every lever that is not already on, as one step each (plan_only: those a script can say)."""
    steps = [st for lv in LEVERS if (st := lv.make(s)) is not None]
    return [st for st in steps if st.plan is not None] if plan_only else steps


def _compatible(steps: Sequence[Step]) -> bool:
    seen: set[str] = set()
    for st in steps:
        keys = set(st.changes) - {"precision", "dtype", "double_quant", "lora_r", "lora_targets"}
        if keys & seen:
            return False
        seen |= keys
    return True


def _merge(s: Setup, steps: Sequence[Step]) -> Setup | None:
    changes: dict[str, Any] = {}
    for st in steps:
        changes.update(st.changes)
    try:
        return s.with_(**changes)
    except MemlintError:  # a combination the estimator rejects
        return None


def apply(s: Setup, steps: Sequence[Step], accounting: str = "real") -> Option | None:
    """The configuration with `steps` applied, estimated (None when the combination is invalid)."""
    new = _merge(s, steps)
    if new is None:
        return None
    return Option(tuple(steps), estimate(new, accounting))


def singles(s: Setup, accounting: str = "real", plan_only: bool = False) -> list[Option]:
    """Each lever alone (and micro-batch 1 with accumulation), by what it saves here, largest first;
    levers that save nothing here are left out."""
    e = estimate(s, accounting)
    base = e.peak + e.paged_optimizer
    opts = [o for st in applicable(s, plan_only) + batch_steps(s)[-1:] if (o := apply(s, [st], accounting)) is not None]
    opts = [o for o in opts if o.held < base]
    return sorted(opts, key=lambda o: (o.held, o.cost))


def _first_fit(s: Setup, combo: tuple[Step, ...], accounting: str, ok: Callable[[int], bool],
               seq: bool) -> Option | None:
    """`combo` alone, else with the largest smaller micro-batch that fits, else (seq) with the
    longest max_length (a multiple of 128) that fits, at the micro-batch and then at 1."""
    opt = apply(s, combo, accounting)
    if opt is None:
        return None
    if ok(opt.held):
        return opt
    for b in batch_steps(s):
        o = apply(s, combo + (b,), accounting)
        if o is not None and ok(o.held):
            return o
    if not seq:
        return None
    for extra in ((), tuple(batch_steps(s)[-1:])):
        base = _merge(s, combo + extra)
        if base is None:
            continue
        lo, hi = 0, s.seq // 128  # the longest multiple of 128 below s.seq that fits
        while hi - lo > 1:
            mid = (lo + hi) // 2
            e = estimate(base.with_(seq=mid * 128), accounting)
            if ok(e.peak + e.paged_optimizer):
                lo = mid
            else:
                hi = mid
        if lo:
            return apply(s, combo + extra + (seq_step(s, lo * 128),), accounting)
    return None


def cheapest(s: Setup, gpu: Gpu | tuple, accounting: str = "real", min_headroom: float = MIN_HEADROOM,
             plan_only: bool = False, seq: bool = True, limit: int = MAX_LEVERS) -> Option | None:
    """The cheapest set of levers (at most `limit`, plus a micro-batch and a max_length) with which
    the run fits `gpu` with the headroom; failing that, the cheapest that fits at all (tight).
    None when nothing memlint knows fits."""
    steps = applicable(s, plan_only)
    combos = [c for k in range(limit + 1) for c in combinations(steps, k) if _compatible(c)]
    combos.sort(key=lambda c: (sum(st.cost for st in c), len(c)))
    total = gpu[1]
    floor = _floor(s, steps, accounting, seq)
    for margin in (min_headroom, 0.0):
        if floor is None or floor > total * (1 - margin):
            continue
        best: Option | None = None
        for combo in combos:
            if best is not None and sum(st.cost for st in combo) > best.cost:
                break
            o = _first_fit(s, combo, accounting, lambda p: total - p >= margin * total, seq)
            if o is not None and (best is None or o.rank() < best.rank()):
                best = o
        if best is not None:
            return Option(best.steps, best.estimate, fit(best.held, gpu, min_headroom))
    return None


def _floor(s: Setup, steps: Sequence[Step], accounting: str, seq: bool) -> int | None:
    """The lowest peak any combination reaches (micro-batch 1 and, with `seq`, max_length 128 under
    every compatible set of levers): a bound that skips the search where nothing can fit. A lever
    can raise the peak (QLoRA's fp32 upcasts on a small model), so every set is tried."""
    best = None
    last = tuple(batch_steps(s)[-1:]) + ((seq_step(s, 128),) if seq and s.seq > 128 else ())
    for k in range(len(steps) + 1):
        for combo in combinations(steps, k):
            if not _compatible(combo):
                continue
            o = apply(s, combo + last, accounting)
            if o is not None and (best is None or o.held < best):
                best = o.held
    return best


def _fits(s: Setup, accounting: str, gpu: Gpu | tuple, min_headroom: float) -> bool:
    e = estimate(s, accounting)
    return fit(e.peak + e.paged_optimizer, gpu, min_headroom).status == "fits"


def largest_batch(s: Setup, gpu: Gpu | tuple, accounting: str = "real", min_headroom: float = MIN_HEADROOM,
                  limit: int = 4096) -> int:
    """The largest micro-batch that fits `gpu` with the headroom (0 when not even 1 does)."""
    if not _fits(s.with_(batch=1), accounting, gpu, min_headroom):
        return 0
    lo, hi = 1, 2
    while hi <= limit and _fits(s.with_(batch=hi), accounting, gpu, min_headroom):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _fits(s.with_(batch=mid), accounting, gpu, min_headroom):
            lo = mid
        else:
            hi = mid
    return lo


def longest_seq(s: Setup, gpu: Gpu | tuple, accounting: str = "real", min_headroom: float = MIN_HEADROOM,
                step: int = 128) -> int:
    """The longest sequence (a multiple of `step`) that fits `gpu` with the headroom at this micro-batch."""
    cap = s.model.arch.get("max_position_embeddings") or 131072
    if not _fits(s.with_(seq=step), accounting, gpu, min_headroom):
        return 0
    lo, hi = 1, 2
    while hi * step <= cap and _fits(s.with_(seq=hi * step), accounting, gpu, min_headroom):
        lo, hi = hi, hi * 2
    hi = min(hi, cap // step + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _fits(s.with_(seq=mid * step), accounting, gpu, min_headroom):
            lo = mid
        else:
            hi = mid
    return lo * step


def largest_batch_option(s: Setup, gpu: Gpu | tuple, accounting: str = "real",
                         min_headroom: float = MIN_HEADROOM) -> Option | None:
    """The largest micro-batch that fits, at the same effective batch where the accumulation allows
    (fewer, larger steps): a throughput lever, shown by --compare when it differs from the run's."""
    b = largest_batch(s, gpu, accounting, min_headroom, limit=max(64, s.batch * s.grad_accum))
    if b in (0, s.batch):
        return None
    eff = s.batch * s.grad_accum
    # the largest divisor of the effective batch that fits keeps it exact; else the largest that fits
    b = max((d for d in range(s.batch + 1, b + 1) if eff % d == 0), default=b)
    acc = max(1, -(-eff // b))
    step = Step("micro-batch", {"batch": b, "grad_accum": acc}, {"per_device_batch": b, "grad_accum": acc},
                f"micro-batch {s.batch} → {b} (gradient accumulation {s.grad_accum} → {acc})", BATCH_COST)
    return apply(s, [step], accounting)


def stacked(s: Setup, accounting: str = "real") -> list[Option]:
    """Levers stacked, for `--compare`: every lever that saves memory alone (but the method and the
    micro-batch), together; then LoRA and QLoRA each with recompute, and with that whole stack."""
    one = singles(s, accounting)
    cheap: list[Step] = []
    for o in sorted(one, key=lambda o: o.held):
        st = o.steps[0]
        if st.lever not in ("lora", "qlora", "micro-batch") and _compatible(cheap + [st]):
            cheap.append(st)
    cheap.sort(key=lambda st: st.cost)
    out = []
    if len(cheap) >= 2:
        out.append(apply(s, cheap, accounting))
    recompute = [st for st in cheap if st.lever == "recompute"] or [st for st in applicable(s) if st.lever == "recompute"]
    for st in applicable(s):
        if st.lever in ("lora", "qlora"):
            for extra in (recompute, [x for x in cheap if x.lever != "recompute"] + recompute):
                if extra:
                    out.append(apply(s, [st, *extra], accounting))
    return [o for o in out if o is not None]
