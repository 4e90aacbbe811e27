"""What a rule is and what it yields: plain data, no libcst, no torch.

A rule is a small class over the plan and the estimate (not over CST nodes). Its class
attributes are its identity and documentation; `check(ctx)` yields Findings that point at
the line that set the offending value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Mapping, Sequence

from memlint.plan import Span, TrainingPlan

SEVERITIES = ("note", "warning", "error")
CATEGORIES = {  # hundreds digit -> what the codes in it are about
    0: "notes (could not read or resolve; never fail a run)",
    1: "capacity (does it fit on the GPU)",
    2: "sequence, padding, batch and recompute",
    3: "PEFT and quantization",
    4: "noisy heuristics (off by default)",
}
CODE_RE = re.compile(r"^MEM[0-4]\d\d$")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
DOC_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead")


@dataclass(frozen=True)
class Related:
    """Another line that matters for a finding: "batch set here"."""

    span: Span
    label: str


@dataclass(frozen=True)
class Fix:
    """A rewrite a rule offers. `codemod` names a function in memlint.fix (libcst lives there)."""

    title: str
    applicability: str  # "safe" | "unsafe" (as in Ruff: unsafe may change behaviour)
    codemod: str
    params: Mapping[str, Any] = field(default_factory=dict)
    # The text edits it makes in this file, once located (memlint.fix.effective_fix):
    # (row, column, end_row, end_column, content), 1-based rows and columns as Ruff's JSON.
    edits: tuple[tuple[int, int, int, int, str], ...] = ()


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    message: str
    severity: str
    span: Span            # 1-based line and column
    related: tuple[Related, ...] = ()
    fix: Fix | None = None
    hint: str | None = None           # one line: what to change
    data: Mapping[str, Any] = field(default_factory=dict)  # numbers (bytes), for json/sarif

    @property
    def path(self) -> str:
        return self.span.path

    def sort_key(self) -> tuple:
        return (self.span.path, self.span.line, self.span.col, self.code)


@dataclass(frozen=True)
class Sample:
    """A rule's own test case: a script (and how to run it) that must, or must not, fire.

    `at` on an INVALID sample is text that the line the finding points at must contain
    (None: any line); `source` is the script (samples.script() builds the usual shapes).
    """

    source: str
    gpu: str | None = None
    assume: tuple[str, ...] = ()
    at: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


class Rule:
    """Base class. Subclasses set the class attributes and implement `check`."""

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[str] = "warning"
    default_enabled: ClassVar[bool] = True
    summary: ClassVar[str]                      # one line, shown by `memlint rule --all`
    options: ClassVar[Mapping[str, Any]] = {}    # per-rule options and their defaults
    fix: ClassVar[Fix | None] = None
    VALID: ClassVar[tuple[Sample, ...]] = ()
    INVALID: ClassVar[tuple[Sample, ...]] = ()

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.opts = {**self.options, **(options or {})}

    def check(self, ctx: "Context") -> Iterator[Finding]:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def category(cls) -> int:
        return int(cls.code[3])

    @classmethod
    def doc(cls) -> str:
        import inspect

        return inspect.cleandoc(cls.__doc__ or "")

    # ---- helpers for check() ---------------------------------------------------------

    def finding(self, ctx: "Context", message: str, at: "str | Span | tuple[str, ...] | None" = None,
                related: tuple[tuple[str | Span, str], ...] = (), hint: str | None = None,
                fix: Fix | None = None, **data: Any) -> Finding:
        """A finding at the line that set plan field `at` (or a Span; else line 1)."""
        span = ctx.span_of(at)
        rel = []
        for where, label in related:
            s = ctx.span_of(where, fallback=False)
            if s is not None and s != span:
                rel.append(Related(s, label))
        return Finding(self.code, self.name, message, self.severity, span, tuple(rel), fix, hint, data)


# The words that set each plan field, to point the column at the keyword, not the line start.
_FIELD_WORDS = {
    "model_id": ("from_pretrained", "model_name_or_path", "base_model", "MODEL"),
    "per_device_batch": ("per_device_train_batch_size", "per_gpu_train_batch_size", "micro_batch_size", "batch_size"),
    "eval_batch": ("per_device_eval_batch_size", "eval_batch_size"),
    "grad_accum": ("gradient_accumulation_steps",),
    "max_length": ("max_seq_length", "max_length", "sequence_len", "cutoff_len", "max_seq_len", "model_max_length"),
    "padding": ("padding", "pad_to_multiple_of", "DataCollator"),
    "gradient_checkpointing": ("gradient_checkpointing", "activation_checkpointing", "enable_activation_checkpointing"),
    "optimizer": ("optim", "optimizer"),
    "precision": ("fp16", "bf16", "mixed_precision"),
    "attn_implementation": ("attn_implementation", "flash_attention"),
    "double_quant": ("bnb_4bit_use_double_quant",),
    "quant_type": ("bnb_4bit_quant_type", "load_in_4bit"),
    "quant_bits": ("load_in_4bit", "load_in_8bit", "BitsAndBytesConfig", "quantization_bit"),
    "compute_dtype": ("bnb_4bit_compute_dtype",),
    "group_by_length": ("group_by_length",),
    "method": ("from_pretrained", "get_peft_model", "LoraConfig"),
}


def keyword_column(text: str, field: str) -> int:
    """1-based column of the keyword that sets `field` on a source line (else its indent)."""
    for word in _FIELD_WORDS.get(field, ()):
        i = text.find(word)
        if i >= 0:
            return i + 1
    return len(text) - len(text.lstrip()) + 1


@dataclass
class Context:
    """Everything a rule may read. Built once per file by the engine.

    `planned` is the PlannedSetup (setup + missing + notes), `estimate` the Estimate of
    the worst case (None when a value the estimate needs is unknown, or the model is not
    known), `gpu` the (name, total_bytes, context_bytes) the user configured, or None.
    """

    plan: TrainingPlan
    planned: Any = None
    estimate: Any = None
    gpu: tuple[str, int, int] | None = None
    model_error: str | None = None
    accounting: str = "real"
    extra: Mapping[str, Any] = field(default_factory=dict)
    lines: Sequence[str] = ()
    conditional: Any = None       # estimate.conditional.Conditional: the answer when the plan cannot be sized
    require_estimate: bool = False  # [tool.memlint] require-estimate: an unsized training script is an error

    @property
    def setup(self):
        return self.planned.setup if self.planned is not None else None

    def span_of(self, at: "str | Span | tuple[str, ...] | None", fallback: bool = True) -> Span | None:
        """Where field `at` was set (the first of several that has a position), else 1:1."""
        if isinstance(at, Span):
            return at
        if isinstance(at, tuple):
            for name in at:
                s = self.span_of(name, fallback=False)
                if s is not None:
                    return s
            return Span(self.plan.path, 1, 1) if fallback else None
        if isinstance(at, str):
            v = self.plan.get(at)
            if v.span is not None:
                s = v.span
                if s.col == 1 and s.path == self.plan.path and 1 <= s.line <= len(self.lines):
                    s = Span(s.path, s.line, keyword_column(self.lines[s.line - 1], at))
                return s
        return Span(self.plan.path, 1, 1) if fallback else None

    def known(self, name: str) -> bool:
        return self.plan.get(name).known

    def value(self, name: str, default: Any = None) -> Any:
        return self.plan.value(name, default)


@dataclass
class FileResult:
    """One checked file: its plan, the context rules saw, and the findings that survived
    selection and suppression (sorted by position). `lines` is the file's text by line
    (empty for stdin-less or unreadable input), used by the full format and noqa."""

    path: str
    plan: TrainingPlan
    context: Context
    findings: list[Finding]
    lines: list[str] = field(default_factory=list)
    suppressed: int = 0
    cells: list[int] = field(default_factory=list)  # notebooks: 0-based line where each code cell starts

    def position(self, line: int) -> tuple[int | None, int]:
        """(1-based cell or None, line within it) for a line of the file's concatenated code."""
        if not self.cells:
            return None, line
        k = max(i for i, start in enumerate(self.cells) if start < line or i == 0)
        return k + 1, line - self.cells[k]
