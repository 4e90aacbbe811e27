"""`memlint plan`: each script's plan field by field with provenance, then its estimate."""

from __future__ import annotations

import json
from typing import Any

from memlint.errors import MemlintError
from memlint.plan import PLAN_FIELDS, TrainingPlan


def _estimate_json(plan: TrainingPlan, extra, gpu: str | None, accounting: str) -> tuple[dict | None, Any]:
    from memlint.estimate import estimate
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.report.estimate_view import gpu_targets, to_json

    planned = setup_from_plan(plan, extra)
    if planned.setup is None:
        return None, planned
    targets = gpu_targets(gpu)
    est = estimate(planned.setup, accounting, targets[0][2] if gpu else None)
    doc = to_json(est, targets)
    doc["assumptions"] = list(planned.notes) + doc["assumptions"]
    return doc, (planned, est, targets)


def _fmt(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return "—" if value is None else str(value)


def run_plan(args, console) -> int:
    from memlint.estimate.from_plan import apply_assumptions
    from memlint.extract import extract_paths
    from memlint.report.chart import check_flags, emit

    check_flags(args)
    plans = extract_paths(args.paths)
    if not plans:
        raise MemlintError("no Python scripts or notebooks found in the given paths")
    docs = []
    charted = []  # (path, Estimate) for --plot / --compare
    for raw in plans:
        plan, extra = apply_assumptions(raw, args.assume)
        if getattr(args, "gpus", None) is not None:  # --gpus N: per-rank estimate over N GPUs
            if args.gpus < 1:
                raise MemlintError("--gpus must be at least 1")
            extra["gpus"] = args.gpus
        try:
            est_doc, detail = _estimate_json(plan, extra, args.gpu, args.accounting)
        except MemlintError as exc:  # e.g. the script's model id is not known offline
            est_doc, detail = None, exc
        if est_doc is not None:
            charted.append((plan.path, detail[1]))
        if args.format == "json":
            docs.append({"path": plan.path, "plan": plan.to_json(), "estimate": est_doc})
            continue
        _render(plan, est_doc, detail, console)
    if args.format == "json":
        print(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2))
    emit(args, charted, console, terminal=args.format != "json")
    return 0


def _render(plan: TrainingPlan, est_doc, detail, console) -> None:
    from rich.table import Table

    from memlint.report.estimate_view import render

    console.print(f"[bold]{plan.path}[/bold]")
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col in ("field", "value", "source", "line"):
        table.add_column(col)
    for name in PLAN_FIELDS:
        v = plan.get(name)
        style = "dim" if v.source in ("unknown", "library-default") else ""
        table.add_row(name, _fmt(v.value), v.source, str(v.line or ""), style=style)
    console.print(table)
    for note in plan.notes:
        console.print(f"[dim]- {note}[/dim]")
    if isinstance(detail, MemlintError):
        console.print(f"[yellow]no estimate: {detail}[/yellow]")
    elif est_doc is None:
        keys = " ".join(f"--assume {k}=…" for k in detail.missing)
        console.print(f"[yellow]no estimate: unknown {', '.join(detail.missing)}; pass {keys}[/yellow]")
    else:
        planned, est, targets = detail
        for note in planned.notes:
            console.print(f"[dim]- {note}[/dim]")
        render(est, targets, console)
    console.print()
