"""An answer for a plan memlint cannot size exactly, conditional on what it does not know (never a guess):

- the maximum sequence length is unknown (no truncation, data-dependent): the longest sequence per
  sample that fits on the target GPU(s) at the script's micro-batch (at micro-batch 1 when that is
  unknown too: the most any micro-batch allows);
- the model is unknown (from the command line, a private checkpoint): what the rest of the plan costs
  on common checkpoints (and the catalog ids closest to the one the script names), at micro-batch 1 when the
  micro-batch is unknown too (the least any run holds: "does not fit" is then certain, "fits" is not);
- only the micro-batch is unknown (a batch memlint could not follow): the largest micro-batch that fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from memlint import data
from memlint.errors import MemlintError
from memlint.plan import TrainingPlan, Value
from memlint.gpu import MIN_HEADROOM
from memlint.vocab import gib

_SEQ_STEP = 128


@dataclass(frozen=True)
class Row:
    model: str
    gpu: str | None
    peak: int | None = None       # bytes per GPU, when the sequence length is known
    fits: bool | None = None
    max_seq: int | None = None    # the longest sequence that fits, when it is not
    max_batch: int | None = None  # the largest micro-batch that fits, when the micro-batch is unknown


@dataclass(frozen=True)
class Conditional:
    unknown: tuple[str, ...]
    kind: str                     # max_seq | max_batch | checkpoints
    batch: int
    seq: int | None
    rows: tuple[Row, ...]

    def to_json(self) -> dict[str, Any]:
        return {"unknown": list(self.unknown), "answer": {
            "kind": self.kind, "micro_batch": self.batch, "seq": self.seq,
            "rows": [{k: v for k, v in r.__dict__.items() if v is not None} for r in self.rows]}}

    def text(self) -> str:
        """One line: what the plan costs, conditional on the unknowns."""
        if self.kind == "max_batch":
            parts = [f"{r.max_batch} on {r.gpu}" if r.max_batch else f"not even 1 on {r.gpu}" for r in self.rows]
            return f"largest micro-batch that fits at {self.seq:,} tokens (the micro-batch is unknown): " + ", ".join(parts)
        if self.kind == "max_seq":
            parts = [f"{r.max_seq:,} tokens on {r.gpu}" if r.max_seq else f"not even {_SEQ_STEP} tokens on {r.gpu}"
                     for r in self.rows]
            if "per_device_batch" in self.unknown:
                return ("longest sequence per sample that fits at micro-batch 1 (the micro-batch is unknown; a larger "
                        "one fits less): " + ", ".join(parts))
            return f"longest sequence per sample that fits at micro-batch {self.batch}: " + ", ".join(parts)
        on = f" on {self.rows[0].gpu}" if self.rows and self.rows[0].gpu else ""
        parts = []
        for r in self.rows:
            name = r.model.rsplit("/", 1)[-1]
            if r.peak is not None:
                verdict = "" if r.fits is None else (" fits" if r.fits else " does not fit")
                parts.append(f"{name} {gib(r.peak, 1)} GiB{verdict}")
            else:
                parts.append(f"{name} up to {r.max_seq:,} tokens" if r.max_seq else f"{name} does not fit")
        at1 = " at micro-batch 1 (the micro-batch is unknown; a larger one needs more)" if "per_device_batch" in \
            self.unknown else ""
        return f"with this plan{on}{at1}, conditional on the model: " + ", ".join(parts)


def _targets(gpu: tuple[str, int, int] | None) -> list[tuple[str, int, int]]:
    from memlint.gpu import find_gpu

    if gpu is not None:
        return [gpu]
    return [find_gpu(g) for g in data.load("conditional.json")["gpus"]]


def _with(plan: TrainingPlan, **values: Any) -> TrainingPlan:
    return plan.with_values(**{k: Value(v, "assumed", chain=(f"conditional: {k}={v}",)) for k, v in values.items()})


def conditional(plan: TrainingPlan, extra: Mapping[str, Any] | None = None, gpu: tuple[str, int, int] | None = None,
                accounting: str = "real", min_headroom: float = MIN_HEADROOM) -> Conditional | None:
    """The conditional answer for `plan`, or None when it can be sized (or too much is unknown)."""
    from memlint.catalog import closest_ids
    from memlint.estimate.core import estimate
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.estimate.levers import longest_seq
    from memlint.gpu import fit_of

    extra = dict(extra or {})
    try:
        planned = setup_from_plan(plan, extra)
        model_known = True
    except MemlintError:  # the model id is not one memlint can resolve offline
        planned, model_known = None, False
    missing = set(planned.missing) if planned is not None else {"model_id"}
    if planned is not None and planned.setup is not None:
        return None
    if not model_known or "model_id" in missing:
        missing.add("model_id")
    elif "max_length" in missing:  # a model id memlint cannot resolve offline, the length unknown too: the table
        try:
            setup_from_plan(_with(plan, max_length=_SEQ_STEP), extra)
        except MemlintError:
            missing.add("model_id")
    if missing - {"model_id", "max_length", "per_device_batch"}:
        return None  # an unknown sharding leaves nothing to condition on
    if missing == {"per_device_batch"}:  # model and length known: the largest micro-batch that fits
        return _max_batch(plan, extra, gpu, accounting, min_headroom)
    lone = "per_device_batch" in missing and "model_id" in missing
    if lone:  # the model and the micro-batch unknown: the checkpoints' table at micro-batch 1, the least any run holds
        plan = _with(plan, per_device_batch=1)
        missing.discard("per_device_batch")
    if "per_device_batch" in missing:
        if missing != {"per_device_batch", "max_length"}:
            return None  # an unknown micro-batch with a known length (or model) leaves nothing to condition on
        # the micro-batch and the length both unknown (a data-dependent length, a batch memlint could not follow):
        # the longest sequence per sample at micro-batch 1, the most any micro-batch allows
        one = _with(plan, per_device_batch=1)
        rows = []
        for g in _targets(gpu):
            s = setup_from_plan(_with(one, max_length=_SEQ_STEP), extra).setup
            rows.append(Row(plan.value("model_id"), g[0], max_seq=longest_seq(s, g, accounting, min_headroom, _SEQ_STEP)))
        return Conditional(("max_length", "per_device_batch"), "max_seq", 1, None, tuple(rows))
    batch = plan.value("per_device_batch")
    seq = None if "max_length" in missing else plan.value("max_length")
    batch = max(batch) if isinstance(batch, list) else batch
    if "model_id" not in missing:
        rows = []
        for g in _targets(gpu):
            s = setup_from_plan(_with(plan, max_length=_SEQ_STEP), extra).setup
            rows.append(Row(plan.value("model_id"), g[0], max_seq=longest_seq(s, g, accounting, min_headroom, _SEQ_STEP)))
        return Conditional(("max_length",), "max_seq", int(batch), None, tuple(rows))
    cfg = data.load("conditional.json")
    named = plan.value("model_id")
    ids = list(closest_ids(str(named), cfg["closest"])) if isinstance(named, str) else []
    ids = list(dict.fromkeys([*ids, *cfg["checkpoints"]]))
    target = gpu if gpu is not None else None
    rows = []
    for mid in ids:
        try:
            p = _with(plan, model_id=mid, **({"max_length": _SEQ_STEP} if seq is None else {}))
            s = setup_from_plan(p, extra).setup
        except MemlintError:
            continue
        if s is None:
            continue
        if seq is None:
            g = target or _targets(None)[0]
            rows.append(Row(mid, g[0], max_seq=longest_seq(s, g, accounting, min_headroom, _SEQ_STEP)))
        else:
            est = estimate(s, accounting)
            rows.append(Row(mid, target[0] if target else None, peak=est.peak,
                            fits=fit_of(est, target, min_headroom).ok if target else None))
    if not rows:
        return None
    unknown = sorted(missing | ({"per_device_batch"} if lone else set()))
    return Conditional(tuple(unknown), "checkpoints", int(batch), seq, tuple(rows))


def _max_batch(plan: TrainingPlan, extra: Mapping[str, Any], gpu: tuple[str, int, int] | None, accounting: str,
               min_headroom: float) -> Conditional:
    """The largest micro-batch that fits each target GPU, the model and the length known."""
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.estimate.levers import largest_batch

    seq = plan.value("max_length")
    seq = max(seq) if isinstance(seq, list) else seq
    s = setup_from_plan(_with(plan, per_device_batch=1), extra).setup
    rows = tuple(Row(plan.value("model_id"), g[0], max_batch=largest_batch(s, g, accounting, min_headroom, limit=1024))
                 for g in _targets(gpu))
    return Conditional(("per_device_batch",), "max_batch", 1, int(seq), rows)
