"""GPUs and the one notion of fit: names, memory and capabilities (data/gpus.json), and the verdict
every front door gives (estimate, plan, check, diff, %memcheck): fits, tight, over, or unsupported.

A run *fits* when its peak leaves at least `min_headroom` of the GPU's memory free (10 % unless
`[tool.memlint.options.low-headroom] min-headroom` says otherwise), is *tight* when it fits with
less, and is *over* past the GPU's memory. A GPU without a capability the run needs (bf16 on a
T4) is *unsupported* whatever the memory says.
"""

from __future__ import annotations

from typing import NamedTuple

from memlint import data
from memlint.errors import MemlintError
from memlint.vocab import GIB, gib, size_text

MIN_HEADROOM = 0.10   # fraction of the GPU's memory a run should leave free
# The CUDA context (and kernel images) outside PyTorch's allocator: one figure for every GPU,
# so a configuration has one peak whether or not a GPU is named (gpus.json's per-GPU context
# figures are what a real device reads; they are within this figure's ±100 MiB).
DEFAULT_CONTEXT = 512 << 20
# What a run needs of the GPU, by the capability's key in gpus.json, in words for a message.
CAPABILITIES = {"bf16": "bf16", "flash_attention_2": "FlashAttention-2"}


class Gpu(NamedTuple):
    """A GPU to check against: its label, memory in bytes and CUDA context in bytes."""

    label: str
    total: int
    context: int

    @property
    def entry(self) -> dict | None:
        """Its gpus.json entry (None for a size given in GiB)."""
        return table().get(self.label)

    def supports(self, capability: str) -> bool | None:
        """Whether it has `capability` (a gpus.json key); None when memlint does not know."""
        entry = self.entry
        if entry is None or capability not in entry:
            return None
        return bool(entry[capability])


def table() -> dict[str, dict]:
    return data.load("gpus.json")["gpus"]


def _norm(name: str) -> str:
    return name.strip().lower().replace(" ", "").replace("_", "-")


def find_gpu(name: str) -> Gpu:
    """A GPU name or alias (or a size in GiB) -> Gpu. A name that starts several GPUs' names
    (`A100`, `RTX`) is ambiguous: an error that lists them, never a silent pick."""
    key = _norm(name)
    names: dict[str, str] = {}
    for label, g in table().items():
        for n in (label, *g["aliases"]):
            names[_norm(n)] = label
    if key in names:
        label = names[key]
        g = table()[label]
        return Gpu(label, g["total_bytes"], g["context_bytes"])
    starts = sorted({label for n, label in names.items() if key and n.startswith(key)})
    if len(starts) > 1:
        raise MemlintError(f"ambiguous GPU {name!r}: {', '.join(starts)} (name one, or a size in GiB)")
    try:
        gib = float(key.removesuffix("gib").removesuffix("gb"))
    except ValueError:
        import difflib

        close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(dict.fromkeys(names[c] for c in close))}?)" if close else ""
        raise MemlintError(f"unknown GPU {name!r}{hint}; known: {', '.join(table())} or a size in GiB (e.g. 24)") from None
    if not 0 < gib <= 1 << 20:  # NaN, inf and 1e999 included
        raise MemlintError(f"--gpu {name!r}: a size is a number of GiB above 0, at most {1 << 20:,}")
    return Gpu(f"{gib:g} GiB", int(gib * GIB), DEFAULT_CONTEXT)


def _family(name: str, key: str) -> set:
    """The values of gpus.json's `key` over every GPU a name stands for (`V100`: the 16 and 32 GB boards)."""
    norm = _norm(name)
    return {g[key] for label, g in table().items() if g.get(key) is not None
            and any(_norm(n) == norm or _norm(n).startswith(norm) for n in (label, *g["aliases"]))} if norm else set()


def family_supports(name: str, capability: str) -> bool | None:
    """Whether every GPU a name stands for (`V100`: the 16 and 32 GB boards; `T4`) has `capability` (a gpus.json key);
    None when the name stands for none, or for GPUs that differ in it."""
    found = {bool(v) for v in _family(name, capability)}
    return found.pop() if len(found) == 1 else None


def family_capability(name: str) -> tuple[int, int] | None:
    """The CUDA compute capability (major, minor) every GPU a name stands for has (gpus.json "compute_capability");
    None when the name stands for none, or for GPUs that differ in it."""
    found = _family(name, "compute_capability")
    if len(found) != 1:
        return None
    major, _, minor = found.pop().partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() and (minor or "0").isdigit() else None


def common_gpus() -> list[Gpu]:
    """The GPUs shown when none is named (gpus.json "common"): the estimate's table, the smallest that fits."""
    return [Gpu(label, g["total_bytes"], g["context_bytes"]) for label, g in table().items() if g.get("common", True)]


def all_gpus() -> list[Gpu]:
    """Every GPU memlint knows, smallest first (`memlint estimate --list-gpus`)."""
    return [Gpu(label, g["total_bytes"], g["context_bytes"]) for label, g in table().items()]


def needs(compute_dtype: str | None = None, attn: str | None = None) -> tuple[str, ...]:
    """The capabilities a run needs of its GPU: bf16 compute, FlashAttention-2."""
    out = []
    if compute_dtype == "bf16":
        out.append("bf16")
    if attn == "flash_attention_2":
        out.append("flash_attention_2")
    return tuple(out)


class Fit(NamedTuple):
    """A peak against a GPU: `status` is fits | tight | over; `missing` the capabilities it lacks.
    (A NamedTuple, not a dataclass: the warm path of `memlint check` builds no dataclass it can avoid.)"""

    gpu: Gpu
    peak: int
    min_headroom: float = MIN_HEADROOM
    missing: tuple[str, ...] = ()

    @property
    def free(self) -> int:
        return self.gpu.total - self.peak

    @property
    def margin(self) -> int:
        """The bytes the headroom asks to leave free."""
        return int(self.min_headroom * self.gpu.total)

    @property
    def status(self) -> str:
        if self.peak > self.gpu.total:
            return "over"
        return "tight" if self.free < self.margin else "fits"

    @property
    def ok(self) -> bool:
        """Fits with the headroom on a GPU that can run it: what every front door calls "fits"."""
        return self.status == "fits" and not self.missing

    @property
    def runs(self) -> bool:
        """Fits at all (tight included) on a GPU that can run it."""
        return self.status != "over" and not self.missing

    def lacks(self) -> str:
        """'T4 has no bf16' (empty when it has everything)."""
        if not self.missing:
            return ""
        return f"{self.gpu.label} has no {' or '.join(CAPABILITIES[c] for c in self.missing)}"

    def verdict(self) -> str:
        """The words of a fit column: 'yes', 'tight', 'no' (and why when unsupported)."""
        if self.missing:
            return f"no ({self.lacks()})"
        return {"fits": "yes", "tight": "tight", "over": "no"}[self.status]

    def text(self, places: int | None = None) -> str:
        """A sentence: 'fits, 6.2 GiB to spare' (`places`: GiB with that many decimals, as a table shows them)."""
        def size(n: int) -> str:
            return size_text(n) if places is None else f"{gib(n, places)} GiB"

        if self.missing:
            return f"not supported: {self.lacks()}"
        if self.status == "over":
            return f"does not fit, {size(-self.free)} over"
        if self.status == "tight":
            return (f"tight: {size(self.free)} ({self.free / self.gpu.total:.0%}) to spare, under the "
                    f"{self.min_headroom:.0%} headroom")
        return f"fits, {size(self.free)} to spare"

    def sentence(self) -> str:
        """The verdict as the last line of a file's report says it: 'fits RTX4090 with 8.3 GiB free'."""
        label = self.gpu.label
        if self.missing:
            return f"cannot run on {label}: {self.lacks()}"
        if self.status == "over":
            return f"does not fit {label}: {size_text(-self.free)} over its {size_text(self.gpu.total)}"
        if self.status == "tight":
            return (f"tight on {label}: {size_text(self.free)} ({self.free / self.gpu.total:.0%}) free, under the "
                    f"{self.min_headroom:.0%} headroom")
        return f"fits {label} with {size_text(self.free)} free"


def smallest_fitting(est, min_headroom: float = MIN_HEADROOM) -> "Fit | None":
    """The smallest common GPU `est` fits with the headroom (None: none of them)."""
    ok = [f for g in common_gpus() if (f := fit_of(est, g, min_headroom)).ok]
    return min(ok, key=lambda f: (f.gpu.total, f.gpu.label)) if ok else None


def fit(peak: int, gpu: Gpu | tuple, min_headroom: float = MIN_HEADROOM, compute_dtype: str | None = None,
        attn: str | None = None) -> Fit:
    """The verdict for `peak` bytes on `gpu`, the run computing in `compute_dtype` with `attn`."""
    g = gpu if isinstance(gpu, Gpu) else Gpu(*gpu)
    missing = tuple(c for c in needs(compute_dtype, attn) if g.supports(c) is False)
    return Fit(g, peak, float(min_headroom), missing)


def fit_of(est, gpu: Gpu | tuple, min_headroom: float = MIN_HEADROOM) -> Fit:
    """`fit` for an Estimate (anything with `.peak` and a `.setup`)."""
    s = est.setup
    return fit(est.peak, gpu, min_headroom, getattr(s, "compute_dtype", None), getattr(s, "attn", None))


# A traced (or CPU-measured) step and the estimate of the same run should agree; past this fraction they disagree,
# and every front door says so and judges the fit by the larger of the two.
DISAGREEMENT = 0.05


class Reconciled(NamedTuple):
    """An estimate beside a measurement of the same step that is not a CUDA run (a fake-tensor trace, real tensors on
    the CPU): `peak` is what the verdict judges (the estimate's; where the two disagree by more than DISAGREEMENT, the
    larger of it and the measurement's allocated peak plus the estimate's overhead), `error` the estimate's allocated
    peak against the measured one."""

    peak: int
    error: float
    source: str          # "estimate" | "trace" (the measurement's figure is the larger)

    @property
    def disagrees(self) -> bool:
        return abs(self.error) > DISAGREEMENT

    def words(self, what: str = "trace") -> str:
        """One sentence for a report, or '' when they agree."""
        if not self.disagrees:
            return ""
        larger = "the estimate's" if self.source == "estimate" else f"the {what}'s"
        return (f"the {what} and the estimate disagree by {self.error:+.1%} (more than {DISAGREEMENT:.0%}): the fit "
                f"verdict uses the larger figure, {larger}")


def reconcile(est, measured_allocated: int) -> Reconciled:
    """The figure a fit verdict uses when an estimate meets a non-CUDA measurement of the same step (Reconciled)."""
    overhead = est.peak - est.allocated_peak
    traced = measured_allocated + overhead
    error = (est.allocated_peak - measured_allocated) / measured_allocated if measured_allocated else 0.0
    if abs(error) > DISAGREEMENT and traced > est.peak:
        return Reconciled(traced, error, "trace")
    return Reconciled(est.peak, error, "estimate")


def fit_reconciled(est, measured_allocated: int | None, gpu: Gpu | tuple, min_headroom: float = MIN_HEADROOM) -> Fit:
    """`fit_of`, judging the larger of the estimate and a non-CUDA measurement of the same step."""
    if measured_allocated is None:
        return fit_of(est, gpu, min_headroom)
    s = est.setup
    return fit(reconcile(est, measured_allocated).peak, gpu, min_headroom, getattr(s, "compute_dtype", None),
               getattr(s, "attn", None))
