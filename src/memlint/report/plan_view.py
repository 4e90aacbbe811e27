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


def render_plan(plan: TrainingPlan, est_doc, detail, console, conditional=None) -> None:
    """One plan as `memlint plan` prints it: the fields, the notes, then the estimate or why there is none."""
    from rich.table import Table

    from memlint.report.estimate_view import render

    console.print(f"[bold]{markup(plan.shown)}[/bold]")
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col in ("field", "value", "source", "line"):
        table.add_column(col)
    for name in PLAN_FIELDS:
        v = plan.get(name)
        style = "dim" if v.source in ("unknown", "library-default") else ""
        table.add_row(name, markup(_fmt(v.value)), v.source, str(v.line or ""), style=style)
    console.print(table)
    for pin in plan.versions:  # library defaults read at the checkout's pins, not the installed versions
        console.print(f"[dim]- library defaults at {markup(pin.describe())}[/dim]")
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

