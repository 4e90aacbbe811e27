"""Command line: parse the arguments and hand them to the subcommand's module (memlint.commands).

`memlint PATH…` is `memlint check PATH…`. Imports stay lazy so the lint path starts without
torch or transformers.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from memlint import __version__
from memlint.commands import COMMANDS
from memlint.errors import MemlintError


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; `only` builds just that subcommand's (a warm `memlint check` imports nothing else)."""
    import importlib

    p = _Parser(prog="memlint", description="Will this fine-tuning run fit on the GPU, and which line do I change?")
    p.add_argument("--version", action="version", version=f"memlint {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"memlint.commands.{name}").add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `memlint check -- torchrun ... train.py --lr 1e-4`: everything after `--` is the launch command
    launch_words: list[str] | None = None
    if "--" in argv:
        i = argv.index("--")
        argv, launch_words = argv[:i], argv[i + 1:]
    # `memlint train.py` is shorthand for `memlint check train.py` (Ruff's `ruff check`).
    if (argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")) or (not argv and launch_words):
        argv = ["check", *argv]
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    if launch_words is not None:
        if getattr(args, "command", None) not in ("check", "plan"):
            parser.error("a launch command after -- is read by `memlint check` and `memlint plan`")
        if not launch_words:
            parser.error("nothing after --: give the launch command (torchrun ... train.py --lr 1e-4)")
    args.launch_words = launch_words
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    from memlint import files
    from memlint.vocab import printable

    files.configure(None)  # each run starts from the default limits (main may be called again in-process)
    if "memlint.catalog.online" in sys.modules:  # and offline, whatever an earlier in-process run asked
        sys.modules["memlint.catalog.online"].enable(False)
    try:
        with files.once_per_run():  # a file several readers need (a notebook, a launcher's target) is read once
            return args.func(args)
    except MemlintError as exc:
        print(f"memlint: error: {printable(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM while -j workers run (check.Terminated: 143)
        return getattr(exc, "code", 130)
    except Exception as exc:  # noqa: BLE001 - exit 2 and one line, as the contract says
        if os.environ.get("MEMLINT_DEBUG"):
            raise
        text = printable(" ".join(str(exc).split())[:300])
        print(f"memlint: internal error: {type(exc).__name__}: {text} (MEMLINT_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 2
