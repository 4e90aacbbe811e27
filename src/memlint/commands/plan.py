"""`memlint plan PATH…`: each script's plan field by field with provenance, then its estimate."""

from __future__ import annotations

import json
from typing import Any

from memlint.errors import MemlintError
from memlint.plan import TrainingPlan


def _estimate_json(plan: TrainingPlan, extra, gpu: str | None, accounting: str,
                   min_headroom: float) -> tuple[dict | None, Any]:
    from memlint.estimate import estimate
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.report.estimate_view import gpu_targets, to_json

    planned = setup_from_plan(plan, extra)
    if planned.setup is None:
        return None, planned
    targets = gpu_targets(gpu)
    est = estimate(planned.setup, accounting)  # one peak, whichever GPU it is checked against
    doc = to_json(est, targets, min_headroom)
    doc["assumptions"] = list(planned.notes) + doc["assumptions"]
    return doc, (planned, est, targets)


def run(args) -> int:
    from memlint.commands.common import check_chart_flags, console, emit_chart
    from memlint.estimate.from_plan import apply_assumptions
    from memlint.extract import extract_paths
    from memlint.report.plan_view import render_plan

    from memlint.commands.common import min_headroom

    check_chart_flags(args)
    headroom = min_headroom()
    plans = extract_paths(args.paths)
    if not plans:
        raise MemlintError("no Python scripts or notebooks found in the given paths")
    out = console()
    docs = []
    charted = []  # (path, Estimate) for --plot / --compare
    for raw in plans:
        plan, extra = apply_assumptions(raw, args.assume)
        if getattr(args, "gpus", None) is not None:  # --gpus N: per-rank estimate over N GPUs
            if args.gpus < 1:
                raise MemlintError("--gpus must be at least 1")
            extra["gpus"] = args.gpus
        try:
            est_doc, detail = _estimate_json(plan, extra, args.gpu, args.accounting, headroom)
        except MemlintError as exc:  # e.g. the script's model id is not known offline
            est_doc, detail = None, exc
        if est_doc is not None:
            charted.append((plan.path, detail[1]))
        if args.format == "json":
            docs.append({"path": plan.path, "plan": plan.to_json(), "estimate": est_doc})
            continue
        render_plan(plan, est_doc, detail, out)
    if args.format == "json":
        print(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2))
    emit_chart(args, charted, out, terminal=args.format != "json")
    return 0


def add_parser(sub) -> None:
    from memlint.commands.common import add_chart_flags

    pl = sub.add_parser("plan", help="show the training plan read from scripts, and its estimate")
    pl.add_argument("paths", nargs="+", metavar="PATH")
    pl.add_argument("--assume", action="append", default=[], metavar="KEY=VALUE",
                    help="value for a field the script leaves unknown (repeatable)")
    pl.add_argument("--gpu", metavar="NAME|GiB")
    pl.add_argument("--gpus", type=int, metavar="N", help="GPUs the run spans: the estimate is per GPU (rank)")
    pl.add_argument("--accounting", choices=("real", "textbook"), default="real")
    pl.add_argument("--format", choices=("table", "json"), default="table")
    add_chart_flags(pl)
    pl.set_defaults(func=run)
