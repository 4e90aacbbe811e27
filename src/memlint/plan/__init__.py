"""The training plan: what a script says it will do, each value with its provenance.

Plain frozen data. `extract/` produces it, `estimate/` and `rules/` read it; nothing
here knows about syntax trees or torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from memlint.plan.fields import PLAN_FIELDS, SOURCES  # one declaration per field: plan/fields.py

METHODS = ("full", "lora", "qlora")


@dataclass(frozen=True)
class Span:
    """A 1-based position in a source file."""

    path: str
    line: int
    col: int = 1


@dataclass(frozen=True)
class Value:
    """One plan field: its value (None when unknown), where it came from, and how.

    `candidates` holds every value the field may take when branches disagree (the
    estimator takes the worst); `chain` says in words how the value was resolved,
    e.g. ("args.max_len", "add_argument('--max_len', default=MAX_LEN)", "MAX_LEN = 2048").
    """

    value: Any
    source: str
    span: Span | None = None
    chain: tuple[str, ...] = ()
    candidates: tuple[Any, ...] = ()
    # model_id only: a model class of the script's own checkout, as the (key, value) pairs of the
    # Hugging Face config.json it counts as (extract/custom_model.py); () for a checkpoint id
    shape: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown provenance {self.source!r}")

    @property
    def known(self) -> bool:
        """Settled statically. None can be a real value (quant_bits=None: not quantized). A placeholder
        (`<your_model_path>`) is what the script says, shown as written, but settles nothing."""
        return self.source not in ("unknown", "placeholder")

    @property
    def line(self) -> int | None:
        return self.span.line if self.span else None

    def to_json(self, script: str | None = None) -> dict:
        out: dict[str, Any] = {"value": self.value, "source": self.source, "line": self.line}
        if self.span and script is not None and self.span.path != script:
            # set in a sibling module the script imports; named relative to the script
            out["path"] = os.path.relpath(self.span.path, os.path.dirname(script) or ".")
        if self.candidates:
            out["candidates"] = list(self.candidates)
        if self.shape:
            out["shape"] = dict(self.shape)
        return out


UNKNOWN = Value(None, "unknown")


@dataclass(frozen=True)
class Diagnostic:
    """Something the reader met that a rule should report, with where it is.

    kind: "syntax-error" (the file does not parse), "unknown-key" (a config key the
    framework does not know), "bad-value" (a config value of the wrong type), "unreadable".
    """

    kind: str
    message: str
    span: Span | None = None


@dataclass(frozen=True)
class TrainingPlan:
    """Everything the estimator needs from one script, field by field."""

    path: str
    fields: Mapping[str, Value] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # extraction notes: what could not be resolved and why
    diagnostics: tuple[Diagnostic, ...] = ()
    kind: str = "python"  # python | notebook | axolotl | llama-factory | trl-recipe | torchtune | deepspeed | accelerate
    via: str | None = None  # the launcher this plan runs the script with: "scripts/finetune_7b.sh:12"
    # Other files the plan was read from (sibling modules the script imports, a DeepSpeed JSON a
    # config follows): a cached result is only as fresh as every one of them.
    sources: tuple[str, ...] = ()
    # The library versions the script's checkout pins (library.pins.Pin): defaults are read at
    # these instead of the installed versions, by extract and by the estimate alike.
    versions: tuple[Any, ...] = ()
    # The commands the script runs itself (subprocess, os.system): (words, line). A script that trains nothing
    # itself is read as the commands it runs (extract.extract_targets).
    spawns: tuple[tuple[tuple[str, ...], int | None], ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.fields) - set(PLAN_FIELDS)
        if unknown:
            raise ValueError(f"not plan fields: {sorted(unknown)}")

    def get(self, name: str) -> Value:
        if name not in PLAN_FIELDS:
            raise KeyError(name)
        return self.fields.get(name, UNKNOWN)

    def value(self, name: str, default: Any = None) -> Any:
        v = self.get(name)
        return v.value if v.known else default

    def with_values(self, **values: Value) -> "TrainingPlan":
        merged = dict(self.fields)
        merged.update(values)
        return replace(self, fields=merged)

    @property
    def shown(self) -> str:
        """How reports name the plan: `train.py`, or `train.py via scripts/finetune_7b.sh:12`."""
        return f"{self.path} via {self.via}" if self.via else self.path

    def to_json(self) -> dict:
        return {name: self.get(name).to_json(self.path) for name in PLAN_FIELDS}


def assume_args(values: Mapping[str, Any]) -> list[str]:
    """Plan values as `--assume key=value` arguments (booleans lower-case, lists comma-joined)."""
    out = []
    for k, v in values.items():
        if isinstance(v, bool):
            v = str(v).lower()
        elif isinstance(v, (list, tuple)):
            v = ",".join(map(str, v))
        out.append(f"{k}={v}")
    return out
