"""`memlint check --add-noqa`: a `# noqa: CODE` comment on every line with a finding, as Ruff's
`--add-noqa` adds them. Codes already on the line's noqa comment are kept (merged, sorted); a bare
`# noqa` already suppresses everything. Python lines that end inside a string or on a backslash
continuation are left alone (a comment there would change the code); JSON cannot carry comments
and a notebook's cells live inside JSON, so neither is edited.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections import defaultdict
from pathlib import Path
from typing import Iterable

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)


def _unsafe_lines(source: str) -> set[int]:
    """1-based lines where a comment cannot be appended: inside a multi-line string, or ending in `\\`."""
    bad: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.STRING and tok.start[0] != tok.end[0]:
                bad.update(range(tok.start[0], tok.end[0]))
            if getattr(tokenize, "FSTRING_MIDDLE", None) == tok.type and tok.start[0] != tok.end[0]:
                bad.update(range(tok.start[0], tok.end[0]))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return set(range(1, source.count("\n") + 2))
    from memlint.files import source_lines

    for i, line in enumerate(source_lines(source), 1):
        if line.rstrip().endswith("\\"):
            bad.add(i)
    return bad


def with_noqa(line: str, codes: Iterable[str]) -> str:
    """`line` with `codes` in its noqa comment (added, or merged into the one it has)."""
    codes = set(codes)
    m = _NOQA.search(line)
    if m is not None:
        if not m.group("codes"):
            return line  # a bare noqa suppresses every code already
        have = {c.upper() for c in re.split(r"[\s,]+", m.group("codes")) if c}
        if codes <= have:
            return line
        return line[:m.start()] + f"# noqa: {', '.join(sorted(have | codes))}" + line[m.end():]
    return f"{line.rstrip()}  # noqa: {', '.join(sorted(codes))}"


def add_noqa(findings) -> tuple[int, list[tuple[str, str]]]:
    """Edit the files the findings point at. Returns (directives added, [(path:line, why not)])."""
    by_file: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for f in findings:
        by_file[f.span.path][f.span.line].add(f.code)
    added = 0
    skipped: list[tuple[str, str]] = []
    for path, lines_codes in sorted(by_file.items()):
        suffix = Path(path).suffix.lower()
        if suffix in (".json", ".ipynb"):
            why = "JSON has no comments" if suffix == ".json" else "a notebook's cells are JSON: add the noqa in the cell"
            skipped += [(f"{path}:{n}", why) for n in sorted(lines_codes)]
            continue
        try:
            raw = Path(path).read_bytes()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            skipped += [(f"{path}:{n}", f"cannot read ({exc.__class__.__name__})") for n in sorted(lines_codes)]
            continue
        lines = text.splitlines(keepends=True)
        unsafe = _unsafe_lines(text) if suffix == ".py" else set()
        for n, codes in sorted(lines_codes.items()):
            if not 1 <= n <= len(lines):
                continue
            if n in unsafe:
                skipped.append((f"{path}:{n}", "the line ends inside a string or a backslash continuation"))
                continue
            end = lines[n - 1][len(lines[n - 1].rstrip("\r\n")):]
            new = with_noqa(lines[n - 1].rstrip("\r\n"), codes) + end
            if new != lines[n - 1]:
                lines[n - 1] = new
                added += 1
        new_text = "".join(lines)
        if new_text != text:
            Path(path).write_text(new_text, encoding="utf-8", newline="")
    return added, skipped
