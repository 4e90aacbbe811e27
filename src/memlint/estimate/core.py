"""Setup -> Estimate: per-GPU bytes for each component, the peak and where it happens."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from memlint.estimate import activations as act
from memlint.estimate import model_state as ms
from memlint.estimate import reserved
from memlint import data
from memlint.library.api import attention
from memlint.vocab import COMPONENTS, DTYPE_BYTES, GIB  # noqa: F401 - re-exported by memlint.estimate
from memlint.estimate import sharding
from memlint.estimate import tensor_parallel as tp
from memlint.estimate.setup import PARAM_SHARDS, PURE, Setup
from memlint.gpu import DEFAULT_CONTEXT, find_gpu  # noqa: F401 - re-exported by memlint.estimate
from memlint.gpu import table as gpus  # noqa: F401 - re-exported by memlint.estimate


@dataclass(frozen=True)
class Component:
    name: str
    bytes: int
    formula: str


@dataclass(frozen=True)
class Estimate:
    setup: Setup
    accounting: str
    components: Mapping[str, Component]
    peak: int                 # per GPU, overhead included
    peak_phase: str           # forward | backward | optimizer | sum (textbook)
    phases: Mapping[str, int]  # allocated bytes per phase, overhead excluded
    paged_optimizer: int      # bitsandbytes paged state: unified memory, outside the allocator
    trainable_params: int
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    context: int = 0          # the CUDA context inside `overhead` (outside the caching allocator)
    # (row label, signed bytes, words): what the allocated peak holds beyond the component rows, and rows not live
    # at that moment; the rows and these add up to allocated_peak (core.peak_terms)
    peak_terms: tuple[tuple[str, int, str], ...] = ()

    @property
    def allocated_peak(self) -> int:
        """Comparable to torch.cuda.max_memory_allocated()."""
        return self.peak - self.components["overhead"].bytes

    @property
    def reserved_peak(self) -> int:
        """Comparable to torch.cuda.max_memory_reserved(): the allocated peak plus the caching
        allocator's slack (the overhead without the CUDA context)."""
        return self.peak - self.context

    def bytes(self, name: str) -> int:
        return self.components[name].bytes

    @property
    def ranks(self) -> int:
        """GPUs in the run; every figure is per GPU (rank)."""
        return self.setup.gpus


def _reference_weights(s: Setup, accounting: str) -> tuple[int, str]:
    """A frozen second copy of the weights (TRL's create_reference_model, or an explicit
    ref_model), in the dtype the policy was loaded in: no gradients, no optimizer state."""
    if s.reference != "copy":
        return 0, ""
    base = s.with_(method="full", objective="sft", ref_model="none", quant="none") if s.quant == "none" else None
    if base is not None:
        if accounting == "real":
            n, _ = ms.weight_bytes(base, accounting)
        else:
            n = s.model.params * 2
        return n, f" + frozen reference copy {n / GIB:.2f} GiB ({s.model.params:,} × {n // s.model.params} B)"
    w, _ = ms.weight_bytes(s, accounting)
    n = w - ms.trainable_params(s) * (4 if accounting == "real" and s.precision not in PURE else 2)
    return n, f" + frozen reference copy {n / GIB:.2f} GiB (the quantized base again)"


# encoders whose attention is their own eager code in transformers 5.x (no SDPA / flash path)
_EAGER_ONLY = ("deberta-v2",)


def estimate(s: Setup, accounting: str = "real", context_bytes: int | None = None) -> Estimate:
    notes: list[str] = []
    s_in = s
    s, (w, w_f), (g, g_f), (o, o_f), tmp, a, n_train = _model_terms(s, accounting)

    lay = sharding.layout(s, accounting, w, g)
    notes += lay.notes
    if s.steps_in_backward:  # no gradient buffer: one parameter's gradient and one parameter's step at a time
        g, tmp, g_f = ms.in_backward_step(s, accounting)
    (w, w_f), (g, g_f), (o, o_f), tmp = _per_rank(s, lay, (w, w_f), (g, g_f), (o, o_f), tmp, notes)
    dw = lay.divisors[0]
    ref_w, ref_f = _reference_weights(s, accounting)
    if ref_w and dw > 1 and s.shard in PARAM_SHARDS:  # TRL shards the reference like the policy (prepare_deepspeed / prepare_fsdp)
        ref_w = -(-ref_w // dw)
        ref_f += f" ÷ {dw} GPUs"
    w += ref_w
    w_f += ref_f
    gath = lay.gathered
    gath_b = gath if lay.gathered_backward is None else lay.gathered_backward
    w_f += lay.gathered_formula

    paged = 0
    if s.optimizer["paged"]:
        paged, o = o, 0
        o_f = f"paged ({paged / GIB:.2f} GiB in unified memory, outside the allocator; evicted to CPU under pressure)"
        tmp = 0

    ctx = 0
    if accounting == "textbook":
        peak_alloc = w + gath + g + o + a.body + a.logits_forward
        phases = {"sum": peak_alloc}
        phase = "sum"
        overhead, ov_f = 0, "not modelled by the article's accounting"
        notes.append("textbook: the four buckets and logits are summed, as in the seed article")
    else:
        parts = _phase_parts(s, lay, a, w, g, o, tmp, gath, gath_b)
        phases = {p: sum(v.values()) for p, v in parts.items()}
        phase = max(phases, key=phases.get)
        peak_alloc = phases[phase]
        ctx = DEFAULT_CONTEXT if context_bytes is None else context_bytes
        # what max_memory_reserved adds: the caching allocator's cached, unusable blocks (estimate/reserved.py)
        frag, frag_f = reserved.slack(reserved.features(s, a, gath), phases)
        overhead = ctx + frag
        ov_f = (f"CUDA context {ctx / GIB:.2f} GiB + caching-allocator slack {frag / GIB:.2f} GiB "
                f"(reserved − allocated: {frag_f})")
        notes += _real_notes(s, tmp)
        notes += _compiled_range(s, peak_alloc)
        notes += _size_range(s, peak_alloc + overhead)
    notes += tp.notes(s)
    notes += _setup_notes(s, accounting)
    counted, s = s, s_in

    comps = {
        "weights": Component("weights", w + gath, w_f),
        "gradients": Component("gradients", g, g_f),
        "optimizer": Component("optimizer", o, o_f),
        "activations": Component("activations", a.body, a.formula),
        "logits": Component("logits", a.logits_forward, a.logits_formula),
    }
    if lay.buffers:  # only multi-GPU runs have communication buffers
        comps["buffers"] = Component("buffers", lay.buffers, lay.buffers_formula)
    terms: tuple = ()
    if accounting != "textbook":
        rows = {name: c.bytes for name, c in comps.items()}
        terms = peak_terms(counted, parts[phase], rows, phase, accounting)
    comps["overhead"] = Component("overhead", overhead, ov_f)
    return Estimate(
        setup=s,
        accounting=accounting,
        components=comps,
        peak=peak_alloc + overhead,
        peak_phase=phase,
        phases=phases,
        paged_optimizer=paged,
        trainable_params=n_train,
        assumptions=tuple(notes),
        context=ctx,
        peak_terms=terms,
    )


def _model_terms(s_in: Setup, accounting: str) -> tuple:
    """(the setup counted: the reward / encoder-head / TP rank's model, weights, gradients, optimizer state, step
    temporaries, activation terms, trainable parameters of the whole model) before sharding over data parallelism."""
    s = s_in
    if s.objective == "reward":
        s = s.with_(model=ms.reward_spec(s.model))
    if s.encoder:  # the encoder with the head the script loads (its parameters are the head class's)
        s = s.with_(model=ms.encoder_spec(s.model, s.head, s.num_labels))
        if s.model.arch.get("model_type") in _EAGER_ONLY:  # DeBERTa's own attention, whatever attn_implementation
            s = s.with_(attn="eager")
        if s.method != "full" and s.lora_task:
            # LoRA with LoraConfig(task_type=SEQ_CLS/TOKEN_CLS): peft adds the classifier to modules_to_save
            from memlint.library.defaults import peft_task_modules_to_save

            s = s.with_(modules_to_save=tuple(dict.fromkeys(s.modules_to_save
                                                            + peft_task_modules_to_save(s.lora_task))))
    if s.tp > 1:  # everything below is counted on the model one tensor-parallel rank holds
        s = s.with_(model=tp.rank_spec(s))
    w, w_f = ms.weight_bytes(s, accounting)
    g, g_f = ms.gradient_bytes(s, accounting)
    extra_g = tp.embedding_grad_extra(s, DTYPE_BYTES[ms.trainable_dtype(s, accounting)]) if accounting == "real" else 0
    if extra_g:
        g += extra_g
        g_f += f" + the vocab-parallel embedding's gradient kept at full V × h ({extra_g:,} B more; torch RowwiseParallel)"
    o, o_f = ms.optimizer_bytes(s, accounting)
    tmp = ms.optimizer_step_temporaries(s, accounting)
    a = act.activations(s if s.cp == 1 else s.with_(seq=-(-s.seq // s.cp)), accounting)
    if s.model.vision:
        a = _with_vision(s, a, accounting)
    if s.cp > 1:  # context parallel: the rank's ⌈s/c⌉ tokens, and ring attention's K/V chunks in flight
        a = replace(a, transient=a.transient + tp.cp_transient(s),
                    formula=a.formula + f" (context parallel: ⌈s/{s.cp}⌉ tokens per rank)")
    n_train = ms.trainable_params(s if s.tp == 1 else s_in if s_in.objective != "reward" else
                                   s_in.with_(model=ms.reward_spec(s_in.model)))  # the whole model's, not a TP rank's
    if s.tp > 1:
        w_f, g_f, o_f = (f"TP rank's share (1/{s.tp} of the split linears): {f}" for f in (w_f, g_f, o_f))

    return s, (w, w_f), (g, g_f), (o, o_f), tmp, a, n_train


def _with_vision(s: Setup, a, accounting: str):
    """A vision-language model: the text model over its text and image tokens (estimate/vision.py), and the vision
    tower's saved activations beside them; a recomputed vision block is counted like a recomputed decoder layer."""
    from memlint.estimate import vision

    seq = vision.text_seq(s)
    if seq != s.seq:
        a = act.activations(s.with_(seq=seq, images=0), accounting)
        a = replace(a, formula=a.formula + f" (s = {seq:,}: {s.seq:,} text + {seq - s.seq:,} image tokens)")
    v = vision.terms(s)
    if not v.formula:
        return a
    if vision.kind(s.model) in ("llava", "mllama"):
        # the text model's backward ends (its recomputed layer, its tail) before the tower's gradients exist, beside
        # what the tower holds; the tower's own end (its one layer) is a candidate of its own (traced on LLaVA; Qwen2-VL
        # keeps the single end-of-backward term it was traced with)
        # Mllama: a recomputed cross-attention layer re-creates its text part and its keys / values over the vision
        # tokens (per_block)
        gb = DTYPE_BYTES[ms.trainable_dtype(s, accounting)]
        return replace(a, body=a.body + v.body, end_of_backward=v.tail, vision_end=max(0, v.end - gb * v.end_params),
                       late_grads=gb * v.late,
                       per_layer=a.per_layer + (v.per_block if vision.kind(s.model) == "mllama" else 0),
                       formula=a.formula + "; " + v.formula)
    return replace(a, body=a.body + v.body, per_layer=max(a.per_layer, v.per_block), end_of_backward=v.tail,
                   formula=a.formula + "; " + v.formula)


def _per_rank(s: Setup, lay, w: tuple[int, str], g: tuple[int, str], o: tuple[int, str], tmp: int,
              notes: list[str]) -> tuple[tuple[int, str], tuple[int, str], tuple[int, str], int]:
    """Weights, gradients and optimizer state (bytes, formula) as one rank holds them: divided by
    the sharding, and zero where ZeRO-Offload / FSDP CPU offload keeps them in host memory."""
    (wb, w_f), (gb, g_f), (ob, o_f) = w, g, o
    dw, dg, do = lay.divisors
    if dw > 1:
        w_f += f" ÷ {dw} GPUs"
    if dg > 1:
        g_f += f" ÷ {dg} GPUs"
    if do > 1:
        o_f += f" ÷ {do} GPUs"
    wb, gb, ob, tmp = -(-wb // dw), -(-gb // dg), -(-ob // do), -(-tmp // do)
    offloaded = sharding.offloaded_to_cpu(s)
    if offloaded:
        cpu = {"weights": wb, "gradients": gb, "optimizer": ob}
        notes.append("CPU offload: " + ", ".join(f"{k} {cpu[k] / GIB:.2f} GiB" for k in offloaded)
                     + " per rank in host memory")
    if "optimizer" in offloaded:
        ob, tmp = 0, 0
        o_f = "offloaded to CPU (ZeRO-Offload): 0 B on the GPU"
    if "gradients" in offloaded:
        gb = 0
        g_f = "offloaded to CPU with the parameters (FSDP CPUOffloadPolicy): 0 B on the GPU"
    if "weights" in offloaded:
        wb = 0
        w_f = "offloaded to CPU: only the layers being computed are on the GPU"
    return (wb, w_f), (gb, g_f), (ob, o_f), tmp


# What is live at a phase's peak beyond the component rows, by key: (row label, words for the "how" column).
PEAK_TERMS = {
    "recompute": ("recomputed layer", "one layer's activations re-created by recompute during backward"),
    "logits-grad": ("logits in backward", "the logits, their fp32 copies and their gradient at the start of backward"),
    "layer-transient": ("layer working set", "one layer's working memory in forward, beside the saved activations"),
    "encoder-transient": ("layer working set", "an encoder layer's own working memory in forward"),
    "backward-transient": ("layer working set", "one layer's backward working memory beside what is still saved"),
    "backward-end": ("end of backward", "saved tensors still alive beside the last gradients"),
    "vision-end": ("tower's backward", "the vision tower's end of backward, beside every gradient"),
    "tied-grads": ("tied gradients", "the tied embedding's two gradients, summed out of place"),
    "shared-embedding": ("shared embedding", "the shared embedding's backward: every gradient but the encoder's, the "
                                             "encoder's saved tensors and V·d gradients in autograd's buffer"),
    "step-temporaries": ("step temporaries", "the optimizer step's temporaries"),
}


def _real_phases(s: Setup, lay, a, w: int, g: int, o: int, tmp: int, gath: int, gath_b: int) -> dict[str, int]:
    """Live bytes at the peak of each phase: forward (activations and logits saved), backward
    (the largest of the logits' gradients, one recomputed layer, the gradients arriving) and the
    optimizer step (its temporaries)."""
    return {phase: sum(parts.values()) for phase, parts in _phase_parts(s, lay, a, w, g, o, tmp, gath, gath_b).items()}


def _phase_parts(s: Setup, lay, a, w: int, g: int, o: int, tmp: int, gath: int,
                 gath_b: int) -> dict[str, dict[str, int]]:
    """What is live at each phase's peak, by component row (weights, gradients, optimizer, activations, logits,
    buffers) or PEAK_TERMS key: the largest candidate of each phase, so the parts add up to its total."""
    g_fwd = g if s.grad_accum > 1 else 0
    keep = lay.persistent

    def largest(*cands: dict[str, int]) -> dict[str, int]:
        return max(cands, key=lambda c: sum(c.values()))

    fwd = {"weights": w + gath, "optimizer": o, "gradients": g_fwd, "buffers": keep, "activations": a.body,
           **largest({"logits": a.logits_forward}, {"layer-transient": a.transient},
                     {"encoder-transient": a.forward_transient})}
    transient = (a.per_layer + a.transient) if s.recompute else 0
    base = {"weights": w + gath_b, "optimizer": o, "buffers": keep + lay.backward}
    if s.steps_in_backward:
        # g is one parameter's gradient and tmp its step's temporaries, alive while backward still holds the
        # activations; nothing is left for a step after backward
        bwd = largest({"activations": a.body, "logits-grad": a.logits_backward},
                      {"activations": a.body, "recompute": transient, "gradients": g, "step-temporaries": tmp},
                      {"gradients": g, "step-temporaries": tmp, "recompute": transient, "buffers": lay.backward_tail})
        return {"forward": fwd, "backward": _plus(base, bwd),
                "optimizer": {"weights": w, "optimizer": o, "buffers": keep}}
    bwd = largest({"activations": a.body, "logits-grad": a.logits_backward, "gradients": g_fwd},
                  {"activations": a.body, "recompute": transient, "gradients": g_fwd},
                  {"activations": a.body, "backward-transient": a.backward_transient, "gradients": g_fwd},
                  {"gradients": g - a.late_grads, "recompute": transient, "buffers": lay.backward_tail,
                   "backward-end": a.recompute_keep + a.end_of_backward},
                  {"gradients": g, "vision-end": a.vision_end},
                  {"gradients": g, "tied-grads": tied_accumulation(s)},
                  {"shared-embedding": shared_embedding_moment(s, a, g)})
    opt = {"weights": w, "gradients": g, "optimizer": o, "step-temporaries": tmp, "buffers": keep}
    return {"forward": fwd, "backward": _plus(base, bwd), "optimizer": opt}


def _plus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}}


def peak_terms(s: Setup, parts: Mapping[str, int], rows: Mapping[str, int], phase: str,
               accounting: str) -> tuple[tuple[str, int, str], ...]:
    """(row label, signed bytes, words): what the allocated peak holds beyond the component rows (a recomputed
    layer, the logits' gradient, step temporaries) and the rows not live at that moment (no gradients yet at the
    start of backward), so that the rows and these add up to the allocated peak."""
    out: list[tuple[str, int, str]] = []
    for key, b in parts.items():
        if key in rows or key in COMPONENTS or key == "buffers" or not b:
            continue
        label, words = PEAK_TERMS[key]
        if key == "backward-transient" and s.recompute:  # with recompute, backward's working set is a layer re-run
            label, words = PEAK_TERMS["recompute"][0], "one layer's activations re-created by recompute and its " \
                                                       "backward working memory, beside what is still saved"
        if label == PEAK_TERMS["recompute"][0]:
            words = _recompute_words(s, accounting, words)
        out.append((label, b, words))
    for name, shown in rows.items():
        d = parts.get(name, 0) - shown
        if d < 0:
            when = {"gradients": "not allocated yet at", "weights": "gathered layers released by"}.get(name, "freed by")
            out.append((f"{name} not live", d, f"{when} the {phase} peak"))
        elif d > 0:
            out.append((f"more {name}", d, f"live at the {phase} peak beyond the {name} row"))
    return tuple(out)


def _recompute_words(s: Setup, accounting: str, words: str) -> str:
    """The recomputed layer in words, with eager attention's share where it has one (SDPA keeps no s² tensors)."""
    if attention()[s.attn].kernel != "eager":
        return words
    try:
        eager = act.activations(s, accounting).per_layer - act.activations(s.with_(attn="sdpa"), accounting).per_layer
    except Exception:  # noqa: BLE001 - a model without an SDPA path: say it without the share
        return words + " (eager attention)"
    if eager <= 0:
        return words + " (eager attention)"
    return (words + f"; {eager / GIB:.2f} GiB of it is eager attention's b·heads·s² scores and probabilities "
            "(SDPA and FlashAttention keep none)")


def tied_accumulation(s: Setup) -> int:
    """A trained tied embedding gets two gradients, lm_head's first and the embedding's last in
    backward; autograd's input buffer sums them out of place (aten::add, seen in the trace and in
    torch.profiler on plain tensors), so the embedding's own gradient and the sum are alive beside
    every other gradient for a moment: two V·h tensors in the gradient dtype. An encoder-decoder's shared
    embedding is read by both stacks (and a tied lm_head): the encoder's embedding gradient, last, meets the sum
    of the others the same way, tied or not."""
    m = s.model
    if s.method != "full" or not (m.tied_embeddings or s.seq2seq) or s.model_code == "litgpt":  # LitGPT unties
        return 0
    return 2 * m.arch.get("embedding_rows", m.vocab) * m.hidden * DTYPE_BYTES[ms.trainable_dtype(s, "real")]


def shared_embedding_moment(s: Setup, a, g: int) -> int:
    """An encoder-decoder's full fine-tune, when the decoder's embedding backward runs (after the decoder's layers,
    before the encoder's): every gradient but the encoder's and the shared embedding's, the encoder's saved tensors,
    and the shared embedding's V·d gradients in autograd's input buffer: the decoder embedding's own, and with a tied
    lm_head also lm_head's (held since the loss) and their out-of-place sum (measured: bart-base, mt5-small at
    batch 4, 256 / 64 tokens)."""
    m = s.model
    if not s.seq2seq or s.method != "full" or not a.encoder_body:
        return 0
    gb = DTYPE_BYTES[ms.trainable_dtype(s, "real")]
    vd = m.vocab * m.hidden * gb
    enc = sum(l.in_features * l.out_features * l.count for l in m.layer_linears() if l.name.startswith("encoder.")) * gb
    return g - vd - enc + a.encoder_body + (3 if m.tied_embeddings else 1) * vd


def _compiled_range(s: Setup, peak_alloc: int) -> list[str]:
    """A compiled run (the flags that set compiled_loss: torchtune compile, torchtitan [compile], torch_compile)
    whose layers are costed as eager: the range down to the compiled layers' figure (--compiled-layers)."""
    from memlint.estimate.activations import compiled_layers_modelled

    if not s.compiled_loss or s.compiled_layers or not compiled_layers_modelled(s.with_(compiled_layers=True)):
        return []
    low = estimate(s.with_(compiled_layers=True)).allocated_peak
    if low >= peak_alloc:
        return []
    return [f"torch.compile: the layers are costed as eager modules; inductor's compiled layers save less (each "
            f"RMSNorm its rsqrt only, the MLP activation recomputed: measured on CPU inductor), which would put the "
            f"allocated peak at {low / GIB:.2f} GiB ({100 * (low - peak_alloc) / peak_alloc:+.0f} %); published compiled "
            "runs sit between the two (--compiled-layers counts it)"]


def _size_range(s: Setup, peak: int) -> list[str]:
    """A model sized by the parameter count its name gives (catalog.spec.sized_by_name): the peak each catalogued
    checkpoint of that size gives, with the script's settings, where its LoRA targets name its layers."""
    from memlint.catalog.spec import entries, size_candidates, spec_from_entry
    from memlint.errors import MemlintError

    others = size_candidates(s.model.assumed_from) if s.model.source == "size-name" else ()
    if len(others) < 2:
        return []
    peaks = {s.model.id: peak}
    for mid in others:
        if mid in peaks:
            continue
        cand = spec_from_entry(mid, entries()[mid])
        if s.method != "full" and not isinstance(s.lora_targets, str) and not ms.lora_modules(cand, s.lora_targets):
            continue  # the script's target_modules name none of its layers: not a model it trains
        try:
            peaks[mid] = estimate(s.with_(model=cand)).peak
        except (MemlintError, KeyError, ValueError):
            continue
    if len(peaks) < 2:
        return []
    lo, hi = min(peaks, key=peaks.get), max(peaks, key=peaks.get)
    return [f"the catalogued checkpoints of the size {s.model.assumed_from!r} names put the peak between "
            f"{peaks[lo] / GIB:.2f} GiB ({lo}) and {peaks[hi] / GIB:.2f} GiB ({hi}): its own config.json decides "
            f"(--online reads it; --assume model_id= sizes one of them)"]


def _real_notes(s: Setup, tmp: int) -> list[str]:
    notes = []
    if s.optimizer.get("galore"):
        notes.append(f"GaLore rank {s.galore_rank} on the linear weights optim_target_modules {s.galore_targets!r} "
                     "names: the moments of the projected gradient and the projection; step 1 refreshes the "
                     "projection (a thin SVD of an fp32 copy of each gradient, one parameter at a time)")
        if s.optimizer["state_dtype"] == "int8" or s.optimizer["states"] == "factored":
            notes.append(f"{s.optim}: not validated by a trace (the 8-bit variant does not run under memlint's trace; "
                         "the Adafactor variant measured 8-17 % above this estimate on small models)")
    if s.grad_accum > 1:
        notes.append("gradient accumulation: gradients stay alive through the next micro-batch's forward")
    if s.optimizer.get("step_note"):  # what the table knows about the step of this optimizer but no trace checked
        notes.append(f"{s.optim}: {s.optimizer['step_note']}")
    if s.steps_in_backward and s.optimizer.get("tensor_hook") and not s.optimizer_in_bwd:
        notes.append(f"{s.optim} updates inside backward (a Tensor hook per parameter): the arriving gradient and the "
                     f"previous one, and one update's fp32 copies ({tmp / GIB:.2f} GiB), are counted next to all of "
                     "backward's activations (an upper bound); no gradient survives backward")
    elif s.steps_in_backward:
        notes.append("optimizer in backward (torchtune optimizer_in_bwd / register_post_accumulate_grad_hook): one "
                     "optimizer per parameter steps as its gradient arrives; the largest gradient and one step's "
                     f"temporaries ({tmp / GIB:.2f} GiB) are counted next to all of backward's activations (an upper "
                     "bound: that gradient may arrive later); step 1 creates the optimizer state during backward")
    elif tmp:
        notes.append(f"optimizer step temporaries: {tmp / GIB:.2f} GiB ({s.optimizer['impl']} kernel)")
    if s.method != "full":
        fp32 = s.adapter_dtype == "fp32" if s.adapter_dtype is not None else s.precision not in PURE
        notes.append("peft keeps LoRA adapters in fp32 on a half-precision base (autocast_adapter_dtype)"
                     if fp32 else f"adapters kept in {s.adapter_dtype or PURE.get(s.precision, 'bf16')} ({s.precision})")
    if s.quant in ("gptq", "awq"):
        notes.append(quant_kernel_note(s))
    if s.quant == "hqq":
        notes.append(hqq_note(s))
    if s.float8 != "none":
        from memlint.estimate.activations import float8_transients

        f, b = float8_transients(s)
        notes.append(f"float8 training (torchao Float8Linear on {'every linear' if s.float8 == 'all' else 'the decoder linears'}"
                     "; dynamic tensorwise scaling): weights, gradients, optimizer state and saved activations as in "
                     f"high precision (it saves the hp input and weight); eager float8 casts add {f / GIB:.2f} GiB in "
                     f"forward and {b / GIB:.2f} GiB in backward (approximate: torch.compile fuses them)"
                     + ("; FSDP2 all-gathers the converted linears in float8 (enable_fsdp_float8_all_gather): their "
                        "unsharded weights are 1 B an element and not cast again (approximate: not traced)"
                        if s.float8_all_gather else ""))
    if s.quant in ("gptq", "hqq") and s.kbit_prep:
        notes.append(f"prepare_model_for_kbit_training leaves a {s.quant.upper()} model's weights in their dtype "
                     "(peft skips the upcast)")
    elif s.upcasts_kbit:
        notes.append("prepare_model_for_kbit_training casts embeddings, norms and lm_head to fp32")
    elif s.quant != "none":
        notes.append("no prepare_model_for_kbit_training upcast: embeddings, norms and lm_head stay in the load dtype "
                     "(TRL's SFT/GRPO/Reward trainers stopped calling it at 0.26; --kbit-prep counts it)")
    if s.model.arch.get("num_experts"):
        notes.append("MoE: activations use the routed top-k experts per token; expert weights are not quantized")
    gap = _family_gap(s)
    if gap:
        notes.append(f"{s.model.model_type}: its own layer terms are not modelled yet ({gap}); the activations are "
                     "a generic decoder layer's, not checked against a trace of this family (an approximation)")
    return notes


def _family_gap(s: Setup) -> str | None:
    """What a catalogued decoder family does that the accounting does not model yet (catalog/families.json)."""
    from memlint.catalog.families import family

    mt = s.model.arch.get("model_type")
    return family(mt).get("not_modelled") if isinstance(mt, str) else None


def hqq_note(s: Setup) -> str:
    """What an HQQ estimate assumes (hqq 0.2.x HQQLinear through transformers 4.x's HqqConfig)."""
    from memlint.estimate.activations import hqq_transient
    from memlint.library.api import quantize_on_load

    works, why = quantize_on_load("hqq")
    return (f"HQQ {s.quant_bits}-bit base (group {s.quant_group_size}, axis 1; hqq's HQQLinear, scale and zero in "
            f"{s.dtype}); its default backend (HQQMatmulNoCacheMul) saves each quantized linear's input and "
            f"dequantizes the weight again in backward ({hqq_transient(s) / GIB:.2f} GiB transient); peft's all-linear "
            "does not match HQQLinear (name the modules); HqqConfig: "
            + (why if works else why + ": from_pretrained raises, the estimate is of transformers 4.x"))


def quant_kernel_note(s: Setup) -> str:
    """What a GPTQ / AWQ estimate assumes about the kernel that trains it (not validated by a trace)."""
    from memlint.estimate.activations import awq_transient, gptq_saved_per_layer

    if s.quant == "gptq":
        return (f"GPTQ int4 base (group {s.quant_group_size}) trained through gptqmodel's torch kernel, which saves each "
                f"quantized linear's dequantized weight for backward ({gptq_saved_per_layer(s) / GIB:.2f} GiB per layer"
                f"{', one layer at a time under recompute' if s.recompute else ''}); not validated by a trace")
    return (f"AWQ int4 base (group {s.quant_group_size}) through the GEMM kernel (saves only the packed weight; "
            f"{awq_transient(s) / GIB:.2f} GiB dequantized weight in forward); the torch fallback kernel would save "
            "it per layer like GPTQ; not validated by a trace")


def _setup_notes(s: Setup, accounting: str) -> list[str]:
    """What the estimate says about the configuration whatever the accounting."""
    notes = []
    attn_note = attention()[s.attn].note
    if attn_note and accounting == "real":
        notes.append(attn_note)
    if s.encoder:
        cls = (s.model.task_heads or {})[s.head]["class"]
        labels = f", {s.num_labels} labels" if s.head != "masked-lm" else ""
        notes.append(f"encoder with transformers' {s.model.model_type}'s {cls} head{labels}"
                     + (" (the head assumed: --head)" if s.task_head == "auto" else "")
                     + "; dropout 0.1 in every layer (CUDA's fused dropout keeps a 1-byte mask)")
        if s.method != "full" and s.lora_task and s.peft_task_type == "auto":
            notes.append(f"LoRA on {s.model.model_type}: peft's task_type {s.lora_task} assumed (the classifier "
                         "trained as a modules_to_save copy; without task_type peft leaves it frozen)")
        elif s.method != "full" and not s.lora_task:
            notes.append(f"LoRA on {s.model.model_type} without task_type SEQ_CLS/TOKEN_CLS: peft trains no "
                         "classifier copy (the randomly initialised head stays frozen)")
        if s.model.arch.get("model_type") in _EAGER_ONLY:
            notes.append(f"{s.model.model_type}: disentangled attention (c2p/p2c) runs its own eager code: the "
                         "s x s scores per head and the s x 2k position scores are kept, whatever --attn says")
    if s.seq2seq:
        notes.append(f"encoder-decoder: the encoder at the source length ({s.seq}), the decoder at the target length "
                     + (f"({s.tgt})" if s.target_len is not None else
                        f"assumed = the source length ({s.seq}; approximate: the target length is unknown, pass "
                        "--target-len)")
                     + ("" if s.model.arch.get("post_norm")
                        else "; dropout 0.1 in every layer (CUDA's fused dropout keeps a 1-byte mask)")
                     + ("; bf16 weights not trace-validated (fp32 weights, with and without bf16 autocast, are)"
                        if s.dtype != "fp32" else "")
                     + ("; the backward of autocast with recompute measured up to 5 % above this estimate"
                        if s.recompute and s.precision in ("amp-bf16", "amp-fp16") else "")
                     + ("; the textbook accounting has no encoder-decoder formula: T5's real terms are used"
                        if accounting == "textbook" else ""))
        if s.model.arch.get("post_norm"):
            from memlint.estimate.seq2seq import _adapted

            arch = s.model.arch
            notes.append(f"BART: post-LN layers with dropout {arch.get('dropout_rate')}, attention dropout "
                         f"{arch.get('attention_dropout')}, activation dropout {arch.get('activation_dropout')} (the "
                         "config's); final_logits_bias a [1, V] buffer in the weights"
                         + ("; LoRA on out_proj / fc1 / fc2 under autocast with SDPA measured up to 5.5 % above "
                            "this estimate's activations (approximate)"
                            if s.method != "full" and s.precision in ("amp-bf16", "amp-fp16") and s.attn != "eager"
                            and any(n.split(".")[-1] in ("out_proj", "fc1", "fc2") for n in _adapted(s)) else ""))
    if s.model.text_only:
        notes.append(f"{s.model.id}: multimodal checkpoint counted as its text tower")
    if s.model.vision:
        from memlint.estimate.vision import notes as vision_notes

        notes += vision_notes(s)
    if s.modules_to_save:
        from memlint.estimate.model_state import saved_copies, unsized_saved

        if saved_copies(s):
            notes.append("modules_to_save: peft's ModulesToSaveWrapper keeps each frozen original and trains a full copy "
                         "in the base's dtype (weights, gradients and optimizer state of the copy counted)"
                         + ("; with tied embeddings the copy is counted untied (not trace-validated)" if s.model.tied_embeddings else ""))
        if unsized_saved(s):
            notes.append(f"modules_to_save {', '.join(unsized_saved(s))}: not sized; their copies are not counted")
    if s.objective != "sft":
        obj = data.load("preference.json")["objectives"][s.objective]
        notes.append(f"{obj['trainer']}: " + {
            "dpo": f"chosen and rejected stacked ({obj['rows']} × micro-batch rows); reference: {s.reference}",
            "kto": f"unpaired rows plus a no-grad KL pass; reference: {s.reference}",
            "reward": "chosen and rejected stacked; scalar score head, no vocabulary logits",
        }.get(s.objective, "chosen and rejected stacked (2 × micro-batch rows); no reference model"))
        if s.objective == "kto":
            notes.append("KTO's KL pass is counted like a reference pass; not validated by a trace")
    if s.recompute and s.recompute_policy == "op-sac" and accounting == "real":
        from memlint.estimate.activations import op_sac_policy

        notes.append("op-level selective checkpointing as torchtitan's policy (" + op_sac_policy()["ref"].split(" torchtitan/")[0]
                     + "): mms counted in the order the layer's linears are registered, eager (uncompiled) ops, no "
                     "float8 amax, no MoE router; one layer comes back in backward; checked by a CPU trace only")
    return notes
