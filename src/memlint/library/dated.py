"""Library versions of a script its checkout does not pin: the newest release before the script's last commit
(the issue's rule: code written in 2023 ran 2023's TRL, not today's). The commit date comes from the checkout's own
git history (`git log -1 -- FILE`, no network), else from the file's modification time when it is before today (an
archive keeps the commit's time); the release dates are data (data/releases.json). A file nothing dates, a package the
data does not list, or a file changed after the last release listed: no assumption (the installed version is read)."""

from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path

from memlint.library.pins import Pin


@lru_cache(maxsize=1)
def _releases() -> dict[str, list[tuple[str, str]]]:
    from memlint.data import load

    doc = load("releases.json")
    return {k: [tuple(r) for r in v] for k, v in doc["packages"].items()}


@lru_cache(maxsize=256)
def last_commit_date(path: str) -> str | None:
    """YYYY-MM-DD of the last commit that changed `path`, from its checkout's git history; None without one."""
    p = Path(path).resolve()
    folder = p.parent
    top = next((d for d in (folder, *folder.parents) if os.path.lexists(d / ".git")), None)
    if top is None:
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_OPTIONAL_LOCKS": "0"})
    try:
        # a checkout's own git config may name programs (core.fsmonitor, a pager): none of them runs here
        out = subprocess.run(["git", "-C", str(top), "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
                              "--no-pager", "log", "-1", "--no-show-signature", "--format=%cs", "--",
                              str(p.relative_to(top))],
                             capture_output=True, text=True, timeout=5, env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    date = out.stdout.strip()
    return date if out.returncode == 0 and len(date) == 10 else None


@lru_cache(maxsize=256)
def last_change(path: str) -> tuple[str, str] | None:
    """(YYYY-MM-DD, how it was read) of the last change of `path`: its last commit, else, with no git history, the
    file's modification time when it is before today (a GitHub archive or zip keeps each file's commit time; a
    clone or a fresh edit carries today's date, which dates nothing); None when neither dates it."""
    date = last_commit_date(path)
    if date is not None:
        return date, "last commit"
    import datetime

    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    day = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).date()
    if day >= datetime.datetime.now(datetime.timezone.utc).date():
        return None
    return day.isoformat(), "modification time (no git history)"


def dated_pins(path: str | os.PathLike, pinned: set[str], shown: str | None = None) -> tuple[Pin, ...]:
    """A Pin (dated) for each package of data/releases.json that `pinned` lacks: its newest release on or before the
    last change of `path` (last_change); () when nothing dates the file or it changed after every release listed."""
    change = last_change(os.path.abspath(path))  # cached by the absolute path: a launcher's origin is relative
    if change is None:
        return ()
    date, how = change
    out = []
    for package, releases in _releases().items():
        if package in pinned or not releases or date > releases[-1][1]:
            continue
        before = [v for v, d in releases if d <= date]
        if before:
            out.append(Pin(package, "", before[-1], f"{shown or Path(path).name}'s {how} ({date})", dated=True))
    return tuple(out)
