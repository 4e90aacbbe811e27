"""`memlint check --add-noqa`: a `# noqa: CODE` comment on every line with a finding, as Ruff's
`--add-noqa` adds them. Codes already on the line's noqa comment are kept (merged, sorted); a bare
`# noqa` already suppresses everything. Python lines that end inside a string or on a backslash
continuation are left alone (a comment there would change the code); JSON cannot carry comments.
In a notebook the comment goes into the code cell's source (as Ruff does), the JSON kept as
Jupyter writes it (its indent, one string per source line where the cell had a list).
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
        if suffix == ".json":
            skipped += [(f"{path}:{n}", "JSON has no comments") for n in sorted(lines_codes)]
            continue
        if suffix == ".ipynb":
            n_added, why_not = _notebook_noqa(Path(path), lines_codes)
            added += n_added
            skipped += why_not
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


def _notebook_noqa(path: Path, lines_codes: dict[int, set[str]]) -> tuple[int, list[tuple[str, str]]]:
    """`# noqa` in a notebook's code cells: `lines_codes` numbers the lines of the code cells joined in order
    (extract/source.notebook_cells), each edited in its cell's source."""
    import json

    from memlint.extract.source import transform_lines
    from memlint.files import source_lines

    try:
        text = path.read_bytes().decode("utf-8")
        nb = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return 0, [(f"{path}:{n}", f"cannot read ({exc.__class__.__name__})") for n in sorted(lines_codes)]
    cells = [c for c in nb.get("cells", []) if isinstance(c, dict) and c.get("cell_type") == "code"]
    added, skipped, start = 0, [], 0
    for k, cell in enumerate(cells, 1):
        src = cell.get("source") or ""
        as_list = isinstance(src, list)
        src = "".join(src) if as_list else src
        if not isinstance(src, str):
            return added, skipped
        lines = source_lines(src) or [""]
        mine = {n - start: codes for n, codes in lines_codes.items() if start < n <= start + len(lines)}
        start += len(lines)
        if not mine:
            continue
        unsafe = _unsafe_lines(transform_lines(lines, cells=[0]))
        kept = src.splitlines(keepends=True) or [""]
        for row, codes in sorted(mine.items()):
            line = kept[row - 1]
            body = line.rstrip("\r\n")
            if row in unsafe or body.lstrip().startswith(("!", "%")):
                skipped.append((f"{path}:cell {k}:{row}", "the line is a magic, or ends inside a string or a "
                                                          "backslash continuation"))
                continue
            new = with_noqa(body, codes) + line[len(body):]
            if new != line:
                kept[row - 1] = new
                added += 1
        joined = "".join(kept)
        cell["source"] = joined.splitlines(keepends=True) if as_list else joined
    if added:
        indent = _json_indent(text)
        out = json.dumps(nb, indent=indent, ensure_ascii=False) + ("\n" if text.endswith("\n") else "")
        path.write_text(out, encoding="utf-8", newline="")
    return added, skipped


def _json_indent(text: str) -> int | None:
    """The indent a notebook was written with (Jupyter: 1), to write it back the same way."""
    m = re.search(r"\n( +)\S", text)
    return len(m.group(1)) if m else None
