"""`memlint plan PATH…`: each script's plan field by field with provenance, then its estimate."""

from __future__ import annotations

from pathlib import Path

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


def _named(paths: list[str]) -> list:
    from memlint.files import collect

    return collect(paths) if paths else []


def run(args) -> int:
    from memlint import files
    from memlint.commands.check import allow_named
    from memlint.commands.common import check_chart_flags, go_online, min_headroom

    check_chart_flags(args)
    if getattr(args, "fields", False):
        from memlint.commands.common import console
        from memlint.report.plan_view import render_fields

        render_fields(console())
        return 0
    headroom = min_headroom()
    go_online(args)
    allow_named(args)
    roots = [files.checkout_root(p) for p in args.paths] or [files.checkout_root(".")]
    with files.checked_root(*roots):  # a plan's estimate reads a local model's config.json only inside them
        return _run(args, headroom)


def _run(args, headroom) -> int:
    from memlint.commands.common import console, emit_chart
    from memlint.estimate.from_plan import apply_assumptions
    from memlint.extract import extract_paths
    from memlint.report.plan_view import render_plan

    if getattr(args, "launch_words", None):
        from memlint.extract import extract_targets
        from memlint.extract.shell import command_targets

        plans = extract_targets([*command_targets(args.launch_words), *_named(args.paths)])
    else:
        plans = extract_paths(args.paths, readme=not args.no_readme_command)
    if not plans:
        if not args.paths and not getattr(args, "launch_words", None):
            raise MemlintError("give a script, a config or a folder (or -- LAUNCH COMMAND)")
        from memlint.extract import unreadable
        from memlint.extract.shell import is_launcher, unfollowed

        # a launcher named alone that runs no Python command: its plan is all unknown, as a script's without a
        # trainer is, with a note saying so
        plans = [unreadable(p, unfollowed(p, [])) for p in args.paths
                 if Path(p).is_file() and is_launcher(Path(p))]
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
        cond = None
        if est_doc is None and plan.get("trainer").known:
            from memlint.estimate import find_gpu
            from memlint.estimate.conditional import conditional

            try:
                cond = conditional(plan, extra, find_gpu(args.gpu) if args.gpu else None, args.accounting, headroom)
            except MemlintError:
                cond = None
        if args.format == "json":
            doc = {"path": plan.path, "plan": plan.to_json(), "estimate": est_doc}
            if plan.notes:  # what the reading said: a file not followed, a value not read, an assumption
                doc["notes"] = list(plan.notes)
            if plan.via:
                doc["via"] = plan.via
            if plan.versions:  # the versions library defaults were read at, and the checkout file that pins each
                doc["library_versions"] = [{"package": p.package, "version": p.version, "pin": p.spec,
                                            "source": p.source} for p in plan.versions]
            if est_doc is None:
                doc["no_estimate"] = str(detail) if isinstance(detail, MemlintError) else \
                    f"unknown {', '.join(detail.missing)}"
                doc["conditional"] = cond.to_json() if cond is not None else None
            docs.append(doc)
            continue
        render_plan(plan, est_doc, detail, out, cond, show_all=args.all)
    if args.format == "json":
        print(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2))
    emit_chart(args, charted, out, terminal=args.format != "json")
    return 0


def add_parser(sub) -> None:
    from memlint.commands.common import add_chart_flags

    pl = sub.add_parser("plan", help="show the training plan read from scripts, and its estimate")
    pl.add_argument("paths", nargs="*", metavar="PATH",
                    help="scripts, configs or folders; or `-- COMMAND` (the launch command, read with its arguments)")
    pl.add_argument("--assume", action="append", default=[], metavar="KEY=VALUE",
                    help="value for a field the script leaves unknown (repeatable)")
    pl.add_argument("--gpu", metavar="NAME|GiB")
    pl.add_argument("--gpus", type=int, metavar="N", help="GPUs the run spans: the estimate is per GPU (rank)")
    pl.add_argument("--accounting", choices=("real", "textbook"), default="real")
    from memlint.commands.check import add_read_outside

    add_read_outside(pl)
    pl.add_argument("--no-readme-command", action="store_true",
                    help="read a file named alone as it is, not as the command its README documents for it runs it")
    pl.add_argument("--format", choices=("table", "json"), default="table")
    pl.add_argument("--fields", action="store_true",
                    help="list the plan's fields: what each means, the names --assume takes for it (short and "
                         "Hugging Face argument names) and the estimate flag that sets it")
    pl.add_argument("--all", action="store_true",
                    help="show every plan field (default: those that matter for the run: the core fields, what the "
                         "estimate lacks, and what the script sets)")
    add_chart_flags(pl)
    from memlint.commands.common import add_online_flag

    add_online_flag(pl)
    pl.set_defaults(func=run)
