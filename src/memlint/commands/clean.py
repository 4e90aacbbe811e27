"""`memlint clean`: remove the result cache (.memlint_cache/), as `ruff clean` does."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from memlint.cache import CACHE_DIR, clean

    removed = clean(".")
    for extra in (args.cache_dir, os.environ.get("MEMLINT_CACHE_DIR")):
        if extra and os.path.isdir(extra):
            shutil.rmtree(extra, ignore_errors=True)
            removed.append(Path(extra))
    if not args.quiet:
        for p in removed:
            sys.stderr.write(f"Removing cache at: {p}\n")
        if not removed:
            sys.stderr.write(f"No {CACHE_DIR} found.\n")
    return 0


def add_parser(sub) -> None:
    k = sub.add_parser("clean", help="remove the cache (.memlint_cache/) in this directory and below")
    k.add_argument("--cache-dir", metavar="PATH", help="also remove this cache directory")
    k.add_argument("-q", "--quiet", action="store_true")
    k.set_defaults(func=run)
