"""`memlint plan`'s table: each plan field with its value, provenance and line, then the estimate."""

from __future__ import annotations

from typing import Any

from memlint.errors import MemlintError
from memlint.plan import PLAN_FIELDS, TrainingPlan
from memlint.report import markup


def _fmt(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return "—" if value is None else str(value)


# Shown whatever they hold: what every run has, and what the answer turns on.
CORE_FIELDS = ("model_id", "torch_dtype", "method", "per_device_batch", "grad_accum", "max_length", "padding",
               "gradient_checkpointing", "optimizer", "precision", "attn_implementation", "trainer", "distributed")
# Fields that only mean something for some runs: a group's fields are shown where the plan says it applies.
GROUPS = {
    "adapters": ("lora_r", "lora_alpha", "lora_targets", "lora_dropout", "lora_modules_to_save", "lora_task_type",
                 "use_dora", "adapter_dtype"),
    "quantization": ("quant_bits", "quant_type", "quant_group_size", "double_quant", "compute_dtype", "kbit_prep"),
    "parallelism": ("num_gpus", "tp_size", "sequence_parallel", "cp_size", "tp_stack", "offload"),
}
# A group's fields the answer turns on: shown, unknown or not, where the group applies.
NEEDED_IN_GROUP = ("lora_r", "lora_targets", "quant_type", "num_gpus")


def _applies(group: str, plan: TrainingPlan) -> bool:
    method = plan.value("method")
    if group == "adapters":
        return method in (None, "lora", "qlora")
    if group == "quantization":
        return method == "qlora" or plan.value("quant_bits") is not None
    return plan.value("distributed") not in (None, "none") or (plan.value("num_gpus") or 1) > 1 \
        or (plan.value("tp_size") or 1) > 1


def relevant_fields(plan: TrainingPlan, missing: tuple[str, ...] = ()) -> list[str]:
    """The plan fields `memlint plan` shows for this run: the core fields; what the estimate lacks (`missing`);
    a known field of a group that applies (LoRA on an adapter run, quantization on a quantized one, parallelism on
    a sharded one), and any other field the script or a library default sets. Unknown fields nothing here needs
    (image pixels, GaLore, TP on a single-GPU text LoRA run) are left to `--all`; a group's NEEDED_IN_GROUP fields
    are shown unknown (the GPU count of a sharded run)."""
    grouped = {f: g for g, names in GROUPS.items() for f in names}
    out = []
    for name in PLAN_FIELDS:
        v = plan.get(name)
        if name in CORE_FIELDS or name in missing:
            out.append(name)
        elif name in grouped:
            if (v.known or name in NEEDED_IN_GROUP) and _applies(grouped[name], plan):
                out.append(name)
        elif v.known:
            out.append(name)
    return out


def render_plan(plan: TrainingPlan, est_doc, detail, console, conditional=None, show_all: bool = False) -> None:
    """One plan as `memlint plan` prints it: the fields that matter for it (all of them with `show_all`), the
    notes, then the estimate or why there is none."""
    from rich.table import Table

    from memlint.report.estimate_view import render

    console.print(f"[bold]{markup(plan.shown)}[/bold]")
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col in ("field", "value", "source", "line"):
        table.add_column(col)
    missing = tuple(getattr(detail, "missing", ()) or ()) if not isinstance(detail, (MemlintError, tuple)) else ()
    shown = list(PLAN_FIELDS) if show_all else relevant_fields(plan, missing)
    for name in shown:
        v = plan.get(name)
        style = "dim" if v.source in ("unknown", "library-default") else ""
        table.add_row(name, markup(_fmt(v.value)), v.source, str(v.line or ""), style=style)
    console.print(table)
    hidden = len(PLAN_FIELDS) - len(shown)
    if hidden:
        console.print(f"[dim]({hidden} more fields, unknown or not used by this run: --all shows them)[/dim]")
    from memlint.library.pins import describe_pins

    for line in describe_pins(plan.versions):  # library defaults read at the checkout's pins, not the installed versions
        console.print(f"[dim]- library defaults at {markup(line)}[/dim]")
    for note in plan.notes:
        console.print(f"[dim]- {markup(note)}[/dim]")
    if isinstance(detail, MemlintError):
        console.print(f"[yellow]no estimate: {markup(detail)}[/yellow]")
    elif est_doc is None:
        keys = " ".join(f"--assume {k}=…" for k in detail.missing)
        console.print(f"[yellow]no estimate: unknown {', '.join(detail.missing)}; pass {keys}[/yellow]")
    if est_doc is None and conditional is not None:
        console.print(f"[yellow]conditional answer: {markup(conditional.text())}[/yellow]")
    elif est_doc is not None:
        planned, est, targets = detail
        for note in planned.notes:
            console.print(f"[dim]- {markup(note)}[/dim]")
        render(est, targets, console, min_headroom=est_doc["min_headroom"])
    console.print()


def render_fields(console) -> None:
    """`memlint plan --fields`: every plan field, its kind, the names --assume takes for it and its estimate flag."""
    from rich.table import Table

    from memlint.plan.fields import rows

    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    cols = ("field", "also --assume", "estimate flag", *(("group", "meaning") if console.width >= 140 else ()))
    for col in cols:
        table.add_column(col, overflow="fold", no_wrap=col in ("field", "estimate flag"))
    for r in rows():
        table.add_row(*(markup(r[c]) for c in cols))
    console.print(table)

