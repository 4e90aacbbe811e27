"""Read a script or notebook into plain Python source, the way IPython would run it.

`!cmd`, `%magic` and `%%cell` lines become `get_ipython()` calls, one line for one line, so
line numbers survive. IPython itself is never imported.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from memlint.errors import MemlintError
from memlint.files import Refused, read_bytes, source_lines

# Cell magics whose body is Python that IPython runs; any other cell magic's body is data.
_PYTHON_CELL_MAGICS = {"capture", "time", "timeit", "prun", "debug"}
_CELL_MARKER = re.compile(r"^\s*#\s*(%%|In\s*\[)")


def read_source(path: Path) -> str:
    """The Python text to analyse for `path` (.py or .ipynb); raises MemlintError on bad input."""
    try:
        raw = read_bytes(path)
    except Refused as exc:
        raise MemlintError(f"{path}: {exc.why}") from None
    except FileNotFoundError:
        raise MemlintError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise MemlintError(f"{path}: is a directory") from None
    except OSError as exc:
        raise MemlintError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MemlintError(f"{path}: not UTF-8 (byte {exc.start})") from None
    if path.suffix == ".ipynb":
        return notebook_source(text, path)
    return transform_lines(source_lines(text), cells=None)


def notebook_source(text: str, path: Path) -> str:
    """Code cells joined in order; a line number counts the lines of all code cells before it."""
    lines, starts = notebook_cells(text, path)
    return transform_lines(lines, cells=starts)


def notebook_cells(text: str, path: Path) -> tuple[list[str], list[int]]:
    """The code cells' lines, concatenated, and the 0-based index where each cell starts."""
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MemlintError(f"{path}: not a notebook (invalid JSON at line {exc.lineno})") from None
    except RecursionError:
        raise MemlintError(f"{path}: not read: nested too deeply") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise MemlintError(f"{path}: not a notebook (no cells)")
    from memlint.extract.budget import MAX_NOTEBOOK_CELLS

    lines: list[str] = []
    starts: list[int] = []
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if len(starts) == MAX_NOTEBOOK_CELLS:
            raise MemlintError(f"{path}: not analysed: more than {MAX_NOTEBOOK_CELLS:,} code cells, over memlint's "
                               "budget for one notebook")
        src = cell.get("source") or ""  # null: an empty cell
        if isinstance(src, list) and all(isinstance(x, str) for x in src):
            src = "".join(src)
        if not isinstance(src, str):
            raise MemlintError(f"{path}: not a notebook (a code cell's source is {type(src).__name__}, not text)")
        starts.append(len(lines))
        lines.extend(source_lines(src) or [""])
    return lines, starts


def _magic_call(stripped: str) -> str:
    """The one-line Python that IPython runs for a `!` / `%` / `%%` / `?` line."""
    if stripped.startswith("%%"):
        name, _, rest = stripped[2:].partition(" ")
        return f"get_ipython().run_cell_magic({name!r}, {rest!r}, '')"
    if stripped.startswith("%"):
        name, _, rest = stripped[1:].partition(" ")
        return f"get_ipython().run_line_magic({name!r}, {rest!r})"
    if stripped.startswith("!"):
        return f"get_ipython().system({stripped.lstrip('!')!r})"
    return f"get_ipython().run_line_magic('pinfo', {stripped.strip('?')!r})"


_ASSIGN_MAGIC = re.compile(r"^([A-Za-z_][\w\s,]*)=\s*([!%].*)$")


def transform_lines(lines: list[str], cells: list[int] | None) -> str:
    """Rewrite IPython syntax line by line; only at the start of a logical line."""
    out: list[str] = []
    state = _LineState()
    cell_starts = set(cells or ())
    drop_body = False  # inside a non-Python cell magic (%%bash, %%writefile)
    skip = 0  # continuation lines of a `!` / `%` line already joined into it (blank, so line numbers hold)
    for i, line in enumerate(lines):
        at_cell_start = i in cell_starts or (cells is None and bool(_CELL_MARKER.match(line)))
        if at_cell_start:
            drop_body = False
            state = _LineState()
            skip = 0
        if skip:
            skip -= 1
            out.append("")
            continue
        if drop_body:
            if cells is None and not line.strip():
                drop_body = False  # an exported script has no cell ends: a blank line ends the body
            out.append("")
            continue
        if state.at_statement_start():
            stripped = line.strip()
            indent = line[: len(line) - len(line.lstrip())]
            if stripped.startswith(("!", "%")) or (stripped.endswith("?") and _is_help(stripped)):
                if stripped.startswith("%%"):
                    name = stripped[2:].split(" ", 1)[0]
                    drop_body = name not in _PYTHON_CELL_MAGICS
                else:  # `%pip install \` / `!python train.py \`: IPython joins the backslash-continued lines
                    j = i
                    while stripped.endswith("\\") and j + 1 < len(lines) and (j + 1) not in cell_starts:
                        j += 1
                        stripped = stripped[:-1].rstrip() + " " + lines[j].strip()
                    skip = j - i
                out.append(indent + _magic_call(stripped))
                continue
            m = _ASSIGN_MAGIC.match(stripped)
            if m and not stripped.startswith(("!=", "%=")):
                target, magic = m.group(1).rstrip(), m.group(2)
                call = (f"get_ipython().getoutput({magic[1:]!r})" if magic.startswith("!")
                        else _magic_call(magic))
                out.append(f"{indent}{target} = {call}")
                continue
        state.feed(line)
        out.append(line)
    return "\n".join(out) + "\n"


def _is_help(stripped: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][\w.]*\?{1,2}", stripped))


class _LineState:
    """Tracks open brackets, strings and backslash continuations across physical lines."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: str | None = None  # the open triple quote, if any
        self.backslash = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.backslash

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if self.quote:
                if ch == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    continue
                if len(self.quote) == 1 and i == n - 1:
                    self.quote = None
                i += 1
                continue
            if ch == "#":
                break
            if ch in "\"'":
                q = line[i : i + 3] if line[i : i + 3] in ('"""', "'''") else ch
                self.quote = q
                i += len(q)
                continue
            if ch in "([{":
                self.depth += 1
            elif ch in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        if self.quote and len(self.quote) == 1:
            self.quote = None  # an unterminated one-quote string ends with the line
        self.backslash = line.rstrip().endswith("\\") and self.quote is None
