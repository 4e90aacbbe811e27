"""Which files memlint reads: the paths named on the command line, and the readable files a walk of
a folder finds (.gitignore respected, tool and build folders skipped, symlinks not followed).

One walker for every command: `check`, `plan` and the pre-commit hook see the same files.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from memlint.errors import MemlintError
from memlint.vocab import LAUNCHER_NAMES, LAUNCHER_SUFFIXES, READABLE_SUFFIXES

_SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".nox",
              ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist", "site-packages", ".ipynb_checkpoints"}


@dataclass(frozen=True)
class Target:
    path: Path
    shown: str       # as the user named it (relative), for output
    explicit: bool   # named on the command line, not found by a walk
    launch: Any = None  # the command that runs it (extract.launch.Launch), when one is known


def _git_files(root: Path) -> set[Path] | None:
    """Files under `root` that git does not ignore (tracked or untracked), or None outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
            capture_output=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {(root / p.decode("utf-8", "surrogateescape")).resolve() for p in out.split(b"\0") if p}


def _gitignore_patterns(folder: Path) -> list[str]:
    try:
        text = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def _ignored(rel: str, name: str, patterns: list[str]) -> bool:
    hit = False
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        p = p.rstrip("/")
        target = rel if "/" in p.lstrip("/") else name
        if fnmatch.fnmatch(target, p.lstrip("/")):
            hit = not neg
    return hit


def walk(root: Path, exclude: Sequence[str] = ()) -> Iterable[Path]:
    """Readable candidate files under `root`, .gitignore respected, symlinks not followed."""
    allowed = _git_files(root)
    stack: list[tuple[Path, list[str]]] = [(root, _gitignore_patterns(root))]
    while stack:
        folder, patterns = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            p = Path(e.path)
            rel = p.relative_to(root).as_posix()
            if any(fnmatch.fnmatch(rel, x) or fnmatch.fnmatch(e.name, x) for x in exclude):
                continue
            if e.is_symlink():
                continue  # a link may point outside the tree or back into it
            if e.is_dir(follow_symlinks=False):
                if e.name in _SKIP_DIRS or e.name.startswith(".") or (allowed is None and _ignored(rel, e.name, patterns)):
                    continue
                stack.append((p, patterns + _gitignore_patterns(p)))
            elif e.is_file(follow_symlinks=False) and (p.suffix in READABLE_SUFFIXES or p.suffix in LAUNCHER_SUFFIXES
                                                         or p.name in LAUNCHER_NAMES):
                if allowed is not None and p.resolve() not in allowed:
                    continue
                if allowed is None and _ignored(rel, e.name, patterns):
                    continue
                yield p


def collect(paths: Sequence[str], exclude: Sequence[str] = ()) -> list[Target]:
    """The files to read, in order, once each: named files as given, folders walked."""
    targets: list[Target] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in walk(p, exclude):
                targets.append(Target(f, os.path.normpath(str(f)), False))
        elif p.exists() or p.is_symlink():
            targets.append(Target(p, os.path.normpath(raw), True))
        else:
            raise MemlintError(f"{raw}: no such file or directory")
    seen, out = set(), []
    for t in targets:
        key = os.path.abspath(t.path)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out
