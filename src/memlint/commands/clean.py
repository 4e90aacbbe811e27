"""`memlint clean`: remove the result cache (.memlint_cache/), as `ruff clean` does.

Only a memlint cache is removed: a real directory holding the CACHEDIR.TAG memlint writes. A
`.memlint_cache` that is a link or another folder (a checkout can ship one) is left alone, and
`--cache-dir` naming a folder that is no memlint cache is refused. Names are printed escaped.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from memlint.cache import CACHE_DIR, clean, remove_cache
    from memlint.errors import MemlintError
    from memlint.vocab import printable

    removed, refused = clean(".")
    for extra, how in ((args.cache_dir, "--cache-dir"), (os.environ.get("MEMLINT_CACHE_DIR"), "MEMLINT_CACHE_DIR")):
        if not extra or not os.path.lexists(extra):
            continue
        if remove_cache(extra):
            removed.append(Path(extra))
        elif how == "--cache-dir":
            raise MemlintError(f"--cache-dir {extra}: not a memlint cache (no CACHEDIR.TAG written by memlint, or a "
                               "link); not removed")
        else:
            refused.append(Path(extra))
    for p in refused:
        sys.stderr.write(f"memlint: not removing {printable(str(p))}: not a memlint cache (a link, or no CACHEDIR.TAG "
                         "written by memlint)\n")
    if not args.quiet:
        for p in removed:
            sys.stderr.write(f"Removing cache at: {printable(str(p))}\n")
        if not removed and not refused:
            sys.stderr.write(f"No {CACHE_DIR} found.\n")
    return 0


def add_parser(sub) -> None:
    k = sub.add_parser("clean", help="remove the cache (.memlint_cache/) in this directory and below")
    k.add_argument("--cache-dir", metavar="PATH", help="also remove this cache directory (a memlint cache only)")
    k.add_argument("-q", "--quiet", action="store_true")
    k.set_defaults(func=run)
