"""`memlint check --fix`: apply the rewrites that rules declare (Fix.codemod) to a script's text,
keeping its formatting and comments; `unified_diff` shows them for `--diff`.

Fixes are located in libcst's tree of the text (extract/parsed.py, the parse the extraction reads), and
applied as text edits at libcst's ranges, so nothing outside an edit changes.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Sequence

from memlint.rules.base import Finding, Fix

__all__ = ["FixResult", "apply_fixes", "effective_fix", "unified_diff", "CODEMOD_NAMES"]

CODEMOD_NAMES = ("dynamic-padding", "group-by-length", "gradient-checkpointing", "double-quant", "nf4-quant-type",
                 "suggestion")


@dataclass
class FixResult:
    """The fixed text, the findings whose fixes went in, and the others with the reason why not."""

    source: str
    applied: list[Finding] = field(default_factory=list)
    skipped: list[tuple[Finding, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def _plan(source: str, finding: Finding, line: int | None = None):
    """(Planned, None) or (None, reason) for one finding's fix against `source` (at `line`, where
    earlier fixes moved the finding's line)."""
    from memlint.extract.parsed import ParserSyntaxError
    from memlint.fix.codemods import CODEMODS
    from memlint.fix.doc import Doc, Skip

    fix = finding.fix
    if fix is None:
        return None, "the finding offers no fix"
    codemod = CODEMODS.get(fix.codemod)
    if codemod is None:
        return None, f"unknown codemod {fix.codemod!r}"
    ipython = None
    try:
        doc = Doc.of(source)
    except (ParserSyntaxError, RecursionError):
        # an exported notebook (`!pip install`, `%env`): locate in the text IPython would run,
        # which keeps every other line as it is, and edit only those lines
        ipython = _ipython_text(source)
        try:
            if ipython is None:
                raise ValueError
            doc = Doc.of(ipython)
        except (ParserSyntaxError, RecursionError, ValueError):
            return None, "the file does not parse"
    try:
        planned = codemod(doc, finding.span.line if line is None else line, fix.params or {})
        if ipython is not None:
            planned = type(planned)(_map_edits(ipython, source, planned.edits), planned.applicability, planned.title)
    except Skip as s:
        return None, str(s)
    except Exception as exc:  # a codemod bug must not stop the other fixes or crash the CLI
        return None, f"internal error in codemod {fix.codemod}: {type(exc).__name__}: {exc}"
    if fix.applicability == "unsafe" and planned.applicability == "safe":
        planned = type(planned)(planned.edits, "unsafe", planned.title)
    return planned, None


def effective_fix(source: str, finding: Finding) -> Fix | None:
    """The finding's fix as it would apply to this text: applicability computed from the source
    (never safer than the rule declared) and a title that says what it does and why it is unsafe;
    None when the fix cannot be made here."""
    planned, _ = _plan(source, finding)
    if planned is None or finding.fix is None:
        return None
    from memlint.fix.doc import line_starts, row_col

    starts = line_starts(source)
    edits = tuple((*row_col(starts, e.start), *row_col(starts, e.end), e.text)
                  for e in sorted(planned.edits, key=lambda e: (e.start, e.end)))
    return Fix(planned.title, planned.applicability, finding.fix.codemod, finding.fix.params, edits)


def apply_fixes(source: str, findings: Sequence[Finding], *, unsafe: bool = False,
                path: str | None = None) -> FixResult:
    """Apply every fix whose applicability is allowed (safe; unsafe too with `unsafe=True`).

    Findings without a fix are ignored. Fixes go in from the bottom of the file up, each located
    again in the text the previous ones left (the lines of the findings still to do follow the
    lines that earlier fixes added above them), so one that no longer finds its target (it
    conflicts, or is already applied) is skipped with the reason. `path`, when given, skips
    findings located in another file. Never raises on user code.
    """
    from memlint.fix.doc import Skip, apply_edits

    result = FixResult(source)
    todo = [f for f in findings if f.fix is not None]
    # bottom-up keeps the lines above each edit where the findings say; ties in a fixed order
    todo.sort(key=lambda f: (f.span.line, f.span.col, f.code, f.fix.codemod), reverse=True)
    line = {id(f): f.span.line for f in todo}
    for finding in todo:
        if path is not None and finding.span.path != path:
            result.skipped.append((finding, f"set in another file ({finding.span.path})"))
            continue
        planned, reason = _plan(result.source, finding, line[id(finding)])
        if planned is None:
            result.skipped.append((finding, reason))
            continue
        if planned.applicability == "unsafe" and not unsafe:
            result.skipped.append((finding, f"unsafe fix, not applied without --unsafe-fixes: {planned.title}"))
            continue
        try:
            new = apply_edits(result.source, planned.edits)
        except Skip as s:
            result.skipped.append((finding, str(s)))
            continue
        if not _parses(new):
            result.skipped.append((finding, "the rewritten text would not parse"))
            continue
        moved = _line_shift(result.source, planned.edits)
        for f in todo:
            line[id(f)] = moved(line[id(f)])
        result.source = new
        result.applied.append(finding)
    result.applied.reverse()
    return result


def _ipython_text(source: str) -> str | None:
    """The source with IPython syntax made Python, line for line; None when there is none."""
    from memlint.extract.source import transform_lines

    from memlint.files import source_lines

    text = transform_lines(source_lines(source), cells=None)
    return None if source_lines(text) == source_lines(source) else text


def _parses(text: str) -> bool:
    for candidate in (text, _ipython_text(text)):
        if candidate is None:
            continue
        try:
            compile(candidate, "<fix>", "exec", flags=0x400, dont_inherit=True)  # ast.PyCF_ONLY_AST
            return True
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return False


def _map_edits(ipython: str, source: str, edits):
    """Edits located in the IPython-transformed text, moved onto the original text; the lines
    they touch must read the same in both."""
    import re

    from memlint.fix.doc import Edit, Skip

    def starts(text: str) -> list[int]:
        return [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]

    ts, ss = starts(ipython), starts(source)
    from memlint.files import source_lines

    tl, sl = source_lines(ipython), source_lines(source)

    def where(off: int) -> tuple[int, int]:
        i = max(k for k, st in enumerate(ts) if st <= off)
        return i, off - ts[i]

    out = []
    for e in edits:
        (l1, c1), (l2, c2) = where(e.start), where(e.end)
        touched = range(l1, l2 + 1) if not (e.start == e.end and c1 == 0) else range(0)
        for i in touched:
            if i >= len(tl) or i >= len(sl) or tl[i] != sl[i]:
                raise Skip(f"the fix would edit line {i + 1}, which IPython rewrites")
        if l1 >= len(ss) or l2 >= len(ss):
            raise Skip("the fix would edit past the end of the file")
        out.append(Edit(ss[l1] + c1, ss[l2] + c2, e.text))
    return tuple(out)


def _line_shift(source: str, edits):
    """Where line L of `source` lands once `edits` are applied: it moves by the newlines that the
    edits before its start add or remove (an insertion at its very start goes above it)."""
    import re

    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", source)]
    moves = []
    for e in edits:
        delta = len(re.findall(r"\r\n|\r|\n", e.text)) - len(re.findall(r"\r\n|\r|\n", source[e.start:e.end]))
        if delta:
            moves.append((e.start if e.start == e.end else e.end, e.start == e.end, delta))

    def moved(line: int) -> int:
        if not 1 <= line <= len(starts):
            return line
        at = starts[line - 1]
        return line + sum(d for off, insert, d in moves if off < at or (insert and off == at))

    return moved


def unified_diff(path: str, before: str, after: str) -> str:
    """A unified diff of one file, as `git diff` shows it (empty when nothing changed)."""
    if before == after:
        return ""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=path if path.startswith("/") else f"a/{path}",
                                 tofile=path if path.startswith("/") else f"b/{path}")
    out = []
    for line in lines:
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)
