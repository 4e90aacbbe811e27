"""Where each line of a notebook's code sits in the raw `.ipynb` JSON: the formats that annotate the
file itself (github, SARIF) point there, since that is what a pull request's diff shows.

A small JSON scanner that keeps positions (the standard library's parser does not): it walks the
document once and, for every code cell's `source` (a list of strings, or one string), records the
raw line and column where each line of the cell's text starts.
"""

from __future__ import annotations

import json
import re

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


class _Scanner:
    def __init__(self, text: str) -> None:
        from memlint.extract.budget import MAX_JSON_DEPTH

        self.text = text
        self.i = 0
        self.depth = MAX_JSON_DEPTH  # levels of nesting still allowed (a notebook's metadata nested 700 deep)
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def pos(self, i: int) -> tuple[int, int]:
        """1-based (line, column) of offset i."""
        import bisect

        k = bisect.bisect_right(self.starts, i) - 1
        return k + 1, i - self.starts[k] + 1

    def ws(self) -> None:
        self.i = _WS.match(self.text, self.i).end()

    def value(self, want_source: bool = False):
        """Parse a value at self.i; strings come back as (decoded, offset of their first character)."""
        self.ws()
        ch = self.text[self.i]
        if ch in "{[":
            if self.depth <= 0:
                raise ValueError("nested too deeply")
            self.depth -= 1
            try:
                return self.obj() if ch == "{" else self.arr()
            finally:
                self.depth += 1
        if ch == '"':
            m = _STRING.match(self.text, self.i)
            self.i = m.end()
            return (json.loads(m.group()), m.start() + 1)
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.i):
                self.i += len(word)
                return val
        m = _NUMBER.match(self.text, self.i)
        self.i = m.end()
        return float(m.group())

    def obj(self) -> dict:
        self.i += 1
        out = {}
        self.ws()
        if self.text[self.i] == "}":
            self.i += 1
            return out
        while True:
            self.ws()
            key, _ = self.value()
            self.ws()
            self.i += 1  # :
            out[key] = self.value()
            self.ws()
            ch = self.text[self.i]
            self.i += 1
            if ch == "}":
                return out

    def arr(self) -> list:
        self.i += 1
        out = []
        self.ws()
        if self.text[self.i] == "]":
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            ch = self.text[self.i]
            self.i += 1
            if ch == "]":
                return out


def _plain(v):
    if isinstance(v, tuple):
        return v[0]
    return v


def _offsets(text: str, s: str, off: int) -> list[int]:
    """The raw offset of each character of the decoded string `s` that starts at `off` (escapes
    take more than one raw character); the string's start for all of them where they do not line up."""
    raw = _STRING.match(text, off - 1).group()[1:-1]
    out: list[int] = []
    for piece in re.finditer(r'\\u[0-9a-fA-F]{4}|\\.|[^\\]', raw, re.S):
        try:
            n = len(json.loads(f'"{piece.group()}"'))
        except ValueError:  # half of a surrogate pair
            n = 1
        out += [off + piece.start()] * n
    return out if len(out) == len(s) else [off] * len(s)


def raw_positions(text: str) -> list[tuple[int, int]]:
    """For each line of the notebook's code cells joined in order (as extract/source.notebook_cells
    joins them), the 1-based (line, column) in `text` where it starts. Empty when `text` is not a
    notebook this scanner reads (the formats then fall back to the code's own lines)."""
    try:
        doc = _Scanner(text).value()
    except (IndexError, AttributeError, ValueError, RecursionError):
        return []
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        return []
    scanner = _Scanner(text)
    out: list[tuple[int, int]] = []
    for cell in doc["cells"]:
        if not isinstance(cell, dict) or _plain(cell.get("cell_type")) != "code":
            continue
        src = cell.get("source", ("", 0))
        pieces = src if isinstance(src, list) else [src]
        pieces = [p for p in pieces if isinstance(p, tuple)]
        joined, where = "", []
        for s, off in pieces:
            where += _offsets(text, s, off)
            joined += s
        lines = joined.splitlines(keepends=True) or [""]
        at = 0
        for line in lines:
            out.append(scanner.pos(where[at]) if at < len(where) else (scanner.pos(pieces[-1][1]) if pieces else (1, 1)))
            at += len(line)
    return out
