"""Progress for long work (a traced step's phases, the allocator replay, a walk over many files): a rich
display on stderr that appears only after a second, only in a terminal, never with -q or in CI.

The work itself only names where it is (`note`, `advance`); this module decides whether anyone sees it, so
the core stays free of printing: with no display active both calls do nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any, Iterator

DELAY_S = 1.0  # work shorter than this shows nothing
# Environment variables CI systems set: no terminal to draw on, logs that keep every redraw.
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "TF_BUILD", "PRE_COMMIT")

_active: "_Display | None" = None


def wanted(quiet: bool = False, stream: Any = None) -> bool:
    """Whether to show progress: a terminal on `stream` (stderr), not quiet, not in CI (or under pre-commit)."""
    stream = sys.stderr if stream is None else stream
    if quiet or any(os.environ.get(v) for v in CI_VARIABLES):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class _Display:
    def __init__(self, label: str, total: int | None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if total is not None:
            columns += [BarColumn(), MofNCompleteColumn()]
        columns.append(TimeElapsedColumn())
        self.progress = Progress(*columns, console=Console(file=sys.stderr), transient=True)
        self.label = label
        self.task = self.progress.add_task(label, total=total)
        self.lock = threading.Lock()
        self.started = False
        self.timer = threading.Timer(DELAY_S, self._start)
        self.timer.daemon = True

    def _start(self) -> None:
        with self.lock:
            if not self.started:
                self.progress.start()
                self.started = True

    def note(self, text: str) -> None:
        self.progress.update(self.task, description=f"{self.label}: {text}")

    def advance(self, n: int = 1) -> None:
        self.progress.advance(self.task, n)

    def stop(self) -> None:
        self.timer.cancel()
        with self.lock:
            if self.started:
                self.progress.stop()
            self.started = True  # a timer already running finds it done


@contextlib.contextmanager
def showing(label: str, *, enabled: bool, total: int | None = None) -> Iterator[None]:
    """A progress display named `label` (a bar of `total` items, else a spinner) while the block runs, from
    DELAY_S on, when `enabled` (see `wanted`). Nested displays: the outer one keeps the screen."""
    global _active
    if not enabled or _active is not None:
        yield
        return
    display = _Display(label, total)
    _active = display
    display.timer.start()
    try:
        yield
    finally:
        _active = None
        display.stop()


def note(text: str) -> None:
    """Say where the work is ("step 2: backward"); nothing without a display."""
    if _active is not None:
        _active.note(text)


def advance(n: int = 1) -> None:
    """One more item of a bar done; nothing without a display."""
    if _active is not None:
        _active.advance(n)
