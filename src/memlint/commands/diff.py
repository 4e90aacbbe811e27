"""`memlint diff [BASE] [PATH…]`: flags -> the diff engine (memlint.diff) -> report/diff_view."""

from __future__ import annotations

from pathlib import Path

FORMATS = ("concise", "json", "github", "markdown")


def add_parser(sub) -> None:
    d = sub.add_parser("diff", help="what a change does to memory: each changed script estimated at BASE and now")
    d.add_argument("items", nargs="*", metavar="[BASE] [PATH]",
                   help="BASE (default: the merge base with the default branch), then paths to limit the diff to")
    d.add_argument("--gpu", metavar="NAME|GiB", help="GPU the peaks are checked against")
    d.add_argument("--assume", action="append", default=[], metavar="KEY=VALUE",
                   help="value for a field a script leaves unknown, at both ends (repeatable)")
    d.add_argument("--accounting", choices=("real", "textbook"), default=None)
    d.add_argument("--max-increase", metavar="SIZE|PCT",
                   help="exit 1 when a script's peak grows by more (2GiB, 500MiB, 10%%); default: [tool.memlint] max-increase")
    d.add_argument("--output-format", "--format", dest="format", choices=FORMATS, default="concise")
    d.add_argument("--config", metavar="PATH|KEY=VALUE", action="append",
                   help="settings file (default: the closest pyproject.toml / memlint.toml), or a KEY = VALUE "
                        "setting that overrides it (repeatable)")
    from memlint.commands.common import add_online_flag

    add_online_flag(d)
    from memlint.commands.check import add_read_outside

    add_read_outside(d)
    d.set_defaults(func=run)
    _intermixed(d)


def _intermixed(parser) -> None:
    """Let options sit between BASE and the paths (`memlint diff main --gpu H100 train.py`), as
    git allows. The subparsers action calls parse_known_args, so that call is routed through
    argparse's intermixed parser, which in turn calls the plain one."""
    import argparse

    plain = parser.parse_known_args
    busy = []

    def parse_known_args(args=None, namespace=None):
        if busy:
            return plain(args, namespace)
        busy.append(True)
        try:
            return argparse.ArgumentParser.parse_known_intermixed_args(parser, args, namespace)
        finally:
            busy.pop()

    parser.parse_known_args = parse_known_args


def run(args) -> int:
    import sys

    from memlint.config import load_settings, split_config_args, with_overrides
    from memlint.diff import repo_root, run_diff
    from memlint.report.diff_view import write_diff
    from memlint.vocab import printable

    from memlint.commands.check import allow_named

    cwd = Path.cwd()
    repo_root(cwd)  # a non-git directory is the first thing to say
    allow_named(args)
    path, overrides = split_config_args(args.config)
    settings = with_overrides(load_settings(cwd, path), overrides)
    from memlint.commands.common import go_online

    go_online(args, settings)
    result = run_diff(
        args.items, cwd=cwd, gpu=args.gpu or settings.gpu, assume=[*settings.assume_list(), *args.assume],
        accounting=args.accounting or settings.accounting, budget=args.max_increase or settings.max_increase,
        min_headroom=settings.min_headroom,
    )
    write_diff(result, args.format, sys.stdout)
    for path, why in result.skipped:
        print(printable(f"memlint diff: skipped {path}: {why}"), file=sys.stderr)
    n = len(result.files)
    print(f"memlint diff: {n} training script{'s' if n != 1 else ''} changed against {result.base[:10]} "
          f"({result.base_name})" + (_why_failing(result) if result.exceeded else ""), file=sys.stderr)
    return 1 if result.exceeded else 0


def _why_failing(result) -> str:
    over = any(f.over_budget for f in result.files)
    lost = any(f.worse_fit for f in result.files)
    return "; " + " and ".join(w for w, on in (("over the budget", over), (f"a script stops fitting {result.gpu[0]}"
                                                                            if lost else "", lost)) if on)
