"""One way to lay out a synthetic checkout for the tests: files by relative path, optionally dedented (a test's
indented triple-quoted text, leading newlines dropped) and marked as a git checkout (an empty .git folder)."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_checkout(root: Path, files: dict[str, str], *, dedent: bool = False, git: bool = False) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n") if dedent else text, encoding="utf-8")
    if git:
        (root / ".git").mkdir(exist_ok=True)
    return root
