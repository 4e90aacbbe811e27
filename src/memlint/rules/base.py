"""What a rule is and what it yields: plain data, no syntax trees, no torch.

A rule is a small class over the plan and the estimate (not over CST nodes). Its class
attributes are its identity and documentation; `check(ctx)` yields Findings that point at
the line that set the offending value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Mapping, Sequence

from memlint.gpu import MIN_HEADROOM, Fit, fit_of
from memlint.gpu import fit as gpu_fit
from memlint.plan import Span, TrainingPlan

SEVERITIES = ("note", "warning", "error")
CATEGORIES = {  # hundreds digit -> what the codes in it are about
    0: "notes (could not read or resolve; never fail a run), and MEM004: a misspelt config key (a warning)",
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
    """A rewrite a rule offers. `codemod` names a function in memlint.fix (the syntax tree lives there)."""

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
    (None: any line); `severity` the finding's severity where it is below the rule's (advice
    without a GPU is a note); `source` is the script (samples.script() builds the usual shapes).
    """

    source: str
    gpu: str | None = None
    assume: tuple[str, ...] = ()
    at: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    severity: str | None = None


class Rule:
    """Base class. Subclasses set the class attributes and implement `check`."""

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[str] = "warning"
    default_enabled: ClassVar[bool] = True
    # Memory advice (a lever that lowers the peak): at the rule's severity only where the run does
    # not fit or is tight on the configured GPU, a note without a GPU, silent where it fits with room.
    advice: ClassVar[bool] = False
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
                fix: Fix | None = None, severity: str | None = None, **data: Any) -> Finding:
        """A finding at the line that set plan field `at` (or a Span; else line 1), at the rule's
        severity or a lower one (`severity`: a memory lever without a GPU to weigh it is a note)."""
        span = ctx.span_of(at)
        rel = []
        for where, label in related:
            s = ctx.span_of(where, fallback=False)
            if s is not None and s != span:
                rel.append(Related(s, label))
        level = severity or self.severity
        if SEVERITIES.index(level) > SEVERITIES.index(self.severity):
            raise ValueError(f"{self.code}: a finding cannot be more severe than its rule")
        return Finding(self.code, self.name, message, level, span, tuple(rel), fix, hint, data)

    def advice_severity(self, ctx: "Context") -> str | None:
        """The severity of advice that saves memory: the rule's where the run is over or tight on
        the configured GPU, a note where no GPU is configured to weigh it, None (silent) where the
        run fits with the headroom: a saving that changes no verdict is not worth a warning."""
        f = ctx.fit
        if f is None:
            return "note" if ctx.gpu is None else None
        return self.severity if f.status in ("over", "tight") else None


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
    known), `gpu` the memlint.gpu.Gpu the user configured, or None, and `min_headroom` the
    fraction of its memory a run should leave free (`fit` says whether it does).
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
    min_headroom: float = MIN_HEADROOM
    cells: Sequence[int] = ()   # a notebook's cell starts (0-based lines of the joined code)

    def where(self, span: Span) -> str:
        """A span as a message names it: `train.py:13`, or `nb.ipynb:cell 4:3` in a notebook."""
        if self.cells and span.path == self.plan.path:
            k = max(i for i, start in enumerate(self.cells) if start < span.line or i == 0)
            return f"{span.path}:cell {k + 1}:{span.line - self.cells[k]}"
        return f"{span.path}:{span.line}"

    @property
    def setup(self):
        return self.planned.setup if self.planned is not None else None

    @property
    def fit(self) -> Fit | None:
        """The estimate against the configured GPU (memlint.gpu's one notion of fit), or None."""
        if self.estimate is None or self.gpu is None:
            return None
        return fit_of(self.estimate, self.gpu, self.min_headroom)

    def fit_of(self, peak: int) -> Fit | None:
        """Another peak of this run against the configured GPU."""
        if self.gpu is None:
            return None
        s = self.setup
        return gpu_fit(peak, self.gpu, self.min_headroom, s.compute_dtype if s else None, s.attn if s else None)

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
    # notebooks: where each line of the joined code sits in the raw .ipynb JSON, (line, column)
    raw_positions: list[tuple[int, int]] = field(default_factory=list)
    # every path the check probed or read, found or not (files.lookups): what a cached result depends on
    looked_up: list[str] = field(default_factory=list)
    # no answer line: `# memlint: noqa` (the file asked for silence), or a script that trains nothing
    noqa_file: bool = False

    def raw(self, span: Span) -> tuple[int, int]:
        """A span's (line, column) in the file as it is on disk: a notebook's raw JSON line (what a
        pull request's diff shows), else the span's own."""
        if span.path == self.path and self.raw_positions and 1 <= span.line <= len(self.raw_positions):
            line, col = self.raw_positions[span.line - 1]
            return line, col + span.col - 1
        return span.line, span.col

    def position(self, line: int) -> tuple[int | None, int]:
        """(1-based cell or None, line within it) for a line of the file's concatenated code."""
        if not self.cells:
            return None, line
        k = max(i for i, start in enumerate(self.cells) if start < line or i == 0)
        return k + 1, line - self.cells[k]
