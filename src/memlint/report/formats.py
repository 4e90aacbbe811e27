"""The `--output-format`s of `memlint check`: concise, full, json, github and sarif, plus
`--statistics`, following Ruff's emitters wherever Ruff has an equivalent.

Pure rendering: results in, text out. Nothing here imports torch, libcst or user code.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence, TextIO

from memlint.errors import MemlintError
from memlint.plan import Span
from memlint.rules.base import FileResult, Finding, Rule
from memlint.vocab import COMPONENTS, GIB, gib, printable

FORMATS = ("concise", "full", "json", "json-lines", "github", "gitlab", "junit", "sarif")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# Where the rule pages (docs/rules/, generated from the rule classes) are published; json `url`
# and SARIF `helpUri` are absolute links under it, as Ruff's point at docs.astral.sh.
# `[tool.memlint] docs-url` sets another base (a fork's, an internal mirror).
from memlint import __url__ as HOME_URL  # noqa: E402 - one place says where this project lives

DOCS_URL = f"{HOME_URL}/blob/main/docs/rules/"
GITLAB_SEVERITIES = {"error": "major", "warning": "minor", "note": "info"}
CONTEXT_LINES = 2  # source lines shown above and below a finding in the full format
LEVELS = {"error": "error", "warning": "warning", "note": "note"}           # SARIF
GITHUB_LEVELS = {"error": "error", "warning": "warning", "note": "notice"}
SEVERITY_STYLE = {"error": ("red", "bold"), "warning": ("yellow", "bold"), "note": ("cyan",)}


def write_results(results: Sequence[FileResult], fmt: str, out: TextIO, *, color: bool = False,
                  show_fixes: bool = False, rules: Sequence[type[Rule]] | None = None,
                  docs_url: str | None = None, width: int | None = None) -> None:
    """Render `results` in `fmt` to `out`. `rules` (SARIF's rule table) defaults to the registry;
    `docs_url` is the base of the rule pages' links (default DOCS_URL); `width` the terminal's
    columns, which the full format's long lines wrap to (None: no wrapping, as when piped).

    A finding with a safe fix is marked `[*]` (Ruff's marker); `show_fixes` marks findings
    with unsafe fixes too. The full format names every fix under its finding.
    """
    base = docs_url or DOCS_URL
    if fmt == "concise":
        _concise(results, out, color, show_fixes)
    elif fmt == "full":
        _full(results, out, color, show_fixes, width)
    elif fmt == "json":
        out.write(json.dumps([_json_finding(r, f, base) for r, f in _ordered(results)], indent=2,
                             sort_keys=True, default=_jsonable) + "\n")
    elif fmt == "json-lines":
        for r, f in _ordered(results):
            out.write(json.dumps(_json_finding(r, f, base), sort_keys=True, default=_jsonable) + "\n")
    elif fmt == "github":
        _github(results, out)
    elif fmt == "gitlab":
        out.write(json.dumps(gitlab_report(results), indent=2) + "\n")
    elif fmt == "junit":
        out.write(junit_report(results))
    elif fmt == "sarif":
        out.write(json.dumps(sarif_log(results, rules, base), indent=2, default=_jsonable) + "\n")
    else:
        raise MemlintError(f"unknown output format {fmt!r} (choose from {', '.join(FORMATS)})")


# ---- shared helpers ------------------------------------------------------------------


def _ordered(results: Iterable[FileResult]) -> list[tuple[FileResult, Finding]]:
    pairs = [(r, f) for r in results for f in r.findings]
    return sorted(pairs, key=lambda p: p[1].sort_key())


def _line_text(result: FileResult | None, span: Span) -> str | None:
    if result is None or span.path != result.path or not 1 <= span.line <= len(result.lines):
        return None
    return result.lines[span.line - 1].rstrip("\r\n")


def _end_col(text: str | None, col: int) -> int:
    """One past the last column the finding covers.

    Findings carry only a start (the line that set a value); the covered text runs from
    there to the end of that argument or statement on the same line: up to a comma or a
    closing bracket at its own nesting level, a comment, or the end of the line.
    """
    if text is None or col > len(text):
        return col
    depth, quote, i = 0, "", col - 1
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif (ch == "," and depth == 0) or ch == "#":
            break
        i += 1
    covered = text[col - 1:i].rstrip()
    return col + max(len(covered), 1)


def _end(result: FileResult | None, span: Span) -> tuple[int, int]:
    return span.line, _end_col(_line_text(result, span), span.col)


def _fixable(f: Finding, show_fixes: bool) -> bool:
    return f.fix is not None and (f.fix.applicability == "safe" or show_fixes)


def _jsonable(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=str)
    if isinstance(o, Mapping):
        return dict(o)
    return str(o)


def _doc_path(code: str, name: str) -> str:
    return f"docs/rules/{code}-{name}.md"


def rule_url(code: str, name: str, base: str | None = None) -> str:
    """The absolute link to a rule's page: `<base>/<CODE>-<name>.md`."""
    return f"{(base or DOCS_URL).rstrip('/')}/{code}-{name}.md"


class _Paint:
    """ANSI styles in Ruff's colours, or nothing: piped output stays plain and stable."""

    CODES = {"bold": "1", "red": "31", "cyan": "36", "blue": "34", "green": "32", "yellow": "33",
             "dim": "2"}

    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self, text: str, *styles: str) -> str:
        if not self.on or not styles:
            return text
        return f"\x1b[{';'.join(self.CODES[s] for s in styles)}m{text}\x1b[0m"


def _head(f: Finding, paint: _Paint, show_fixes: bool, r: FileResult | None = None) -> str:
    s = f.span
    sep = paint(":", "cyan")
    mark = f"{paint('[', 'bold')}{paint('*', 'cyan')}{paint(']', 'bold')} " if _fixable(f, show_fixes) else ""
    cell, row = r.position(s.line) if r is not None and s.path == r.path else (None, s.line)
    where = f"cell {cell}{sep}{row}" if cell is not None else str(row)  # Ruff's notebook form
    level = paint(f"{f.severity}:", *SEVERITY_STYLE.get(f.severity, ()))
    return (f"{paint(printable(s.path), 'bold')}{sep}{where}{sep}{s.col}{sep} "
            f"{paint(f.code, 'red', 'bold')} {mark}{level} {printable(f.message)}")


def fit_line(r: FileResult, paint: _Paint | None = None) -> str | None:
    """The answer for one file, in one line: 'train.py: peak 15.7 GiB, fits RTX4090 with 8.3 GiB free' (the
    configured GPU, in memlint.gpu's words), the smallest common GPU it fits without one, or why there is no
    estimate. None for a file that is no training run (nothing to answer)."""
    from memlint.gpu import fit_of, smallest_fitting

    paint = paint or _Paint(False)
    ctx = r.context
    est = getattr(ctx, "estimate", None)
    if getattr(r, "noqa_file", False):
        return None
    name = paint(printable(r.plan.shown if r.plan.path == r.path else r.path), "bold")
    if est is None:
        if r.plan.kind in ("deepspeed", "accelerate"):  # a launcher's config: no plan of its own to size
            return None
        cond = getattr(ctx, "conditional", None)
        if getattr(ctx, "model_error", None) or getattr(getattr(ctx, "planned", None), "missing", ()) or cond:
            tail = f"; {printable(cond.text())}" if cond is not None else ""
            return f"{name}: no estimate, {printable(_why_no_estimate(ctx))}{tail}"
        return None
    gpus = getattr(est.setup, "gpus", 1) or 1
    peak = f"peak {gib(est.peak, 1)} GiB" + (f" per GPU of {gpus}" if gpus > 1 else "")
    headroom = getattr(ctx, "min_headroom", 0.10)
    if ctx.gpu is not None:
        f = fit_of(est, ctx.gpu, headroom)
        style = {"fits": ("green",), "tight": ("yellow",)}.get("unsupported" if f.missing else f.status, ("red", "bold"))
        return f"{name}: {peak}, {paint(f.sentence(), *style)}"
    best = smallest_fitting(est, headroom)
    where = (f"smallest common GPU that fits: {best.gpu.label} ({gib(best.gpu.total, 1)} GiB)" if best is not None
             else "fits none of the common GPUs")
    return f"{name}: {peak}, {where} (--gpu NAME checks one)"


# ---- concise --------------------------------------------------------------------------


def _by_file(results: Sequence[FileResult]) -> list[FileResult]:
    return sorted(results, key=lambda r: r.path)


def _concise(results: Sequence[FileResult], out: TextIO, color: bool, show_fixes: bool) -> None:
    """Each file's findings, then its answer (fit_line): a run that fits says so."""
    paint = _Paint(color)
    for r in _by_file(results):
        for f in sorted(r.findings, key=Finding.sort_key):
            out.write(_head(f, paint, show_fixes, r) + "\n")
        line = fit_line(r, paint)
        if line is not None:
            out.write(line + "\n")


# ---- full -----------------------------------------------------------------------------


def _full(results: Sequence[FileResult], out: TextIO, color: bool, show_fixes: bool, width: int | None = None) -> None:
    paint = _Paint(color)
    first = True
    for r in _by_file(results):
        table = estimate_table(r, paint)
        if not r.findings and table is None:
            continue
        for f in sorted(r.findings, key=Finding.sort_key):
            if not first:
                out.write("\n")
            first = False
            head = _head(f, paint, show_fixes, r)
            if width:
                plain = _head(f, _Paint(False), show_fixes, r)
                lead = len(plain) - len(f.message)
                head = head[: len(head) - len(f.message)] + _wrap(f.message, width, lead, 4)
            out.write(head + "\n")
            out.write(_snippet(r, f, paint, width))
        if table is not None:
            if not first:
                out.write("\n")
            first = False
            out.write(table)


def _wrap(text: str, width: int, first: int, indent: int) -> str:
    """`text` wrapped to `width` columns when its first line starts at column `first` and the next
    ones are indented by `indent`: the full format follows the terminal's width."""
    import textwrap

    lines = textwrap.wrap(text, width=max(20, width), initial_indent="\0" * first, subsequent_indent=" " * indent,
                          break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines).replace("\0", "") if lines else text


def _snippet(r: FileResult, f: Finding, paint: _Paint, width: int | None = None) -> str:
    s = f.span
    text = _line_text(r, s)
    rows: list[str] = []
    if text is not None:
        lo, hi = max(1, s.line - CONTEXT_LINES), min(len(r.lines), s.line + CONTEXT_LINES)
        if r.cells:  # a notebook: the window stays in the finding's cell, numbered as the cell is
            k = r.position(s.line)[0] - 1
            lo = max(lo, r.cells[k] + 1)
            hi = min(hi, r.cells[k + 1] if k + 1 < len(r.cells) else hi)
        # Ruff trims blank context lines at the edges of the window
        while lo < s.line and not r.lines[lo - 1].strip():
            lo += 1
        while hi > s.line and not r.lines[hi - 1].strip():
            hi -= 1
        gw = len(str(r.position(hi)[1]))
        gutter = paint(" " * gw + " |", "blue", "bold")
        rows.append(gutter)
        for n in range(lo, hi + 1):
            line = printable(r.lines[n - 1].rstrip("\r\n"))
            rows.append(f"{paint(str(r.position(n)[1]).rjust(gw) + ' |', 'blue', 'bold')}{' ' + line if line else ''}")
            if n == s.line:
                carets = "^" * (_end_col(text, s.col) - s.col)
                rows.append(f"{gutter} {' ' * (s.col - 1)}{paint(carets + ' ' + f.code, 'red', 'bold')}")
        rows.append(gutter)
        pad = " " * gw
    else:
        pad = "  "
    for rel in f.related:
        cell, row = r.position(rel.span.line) if rel.span.path == r.path else (None, rel.span.line)
        where = f"{rel.span.path}:{f'cell {cell}:' if cell is not None else ''}{row}:{rel.span.col}"
        src = _line_text(r, rel.span)
        tail = f": {src.strip()}" if src and src.strip() else ""
        rows.append(f"{pad} {paint('=', 'blue', 'bold')} {printable(f'{rel.label}: {where}{tail}')}")
    if f.fix is not None:
        rows.append(f"{pad} {paint('=', 'blue', 'bold')} {paint('fix', 'cyan', 'bold')}: {printable(f.fix.title)}"
                    f" ({f.fix.applicability})")
    if f.hint:
        hint = _wrap(printable(f.hint), width, len(pad) + 9, len(pad) + 9) if width else printable(f.hint)
        rows.append(f"{pad} {paint('=', 'blue', 'bold')} {paint('help', 'cyan', 'bold')}: {hint}")
    return "".join(row + "\n" for row in rows)


def estimate_table(r: FileResult, paint: _Paint | None = None) -> str | None:
    """The estimate behind a file's findings, compact: components and peak, ending with the file's
    answer (fit_line). Without an estimate, just that line (why there is none); None for a file
    that is no training run."""
    paint = paint or _Paint(False)
    ctx = r.context
    est = getattr(ctx, "estimate", None)
    last = fit_line(r, paint)
    if est is None:
        return None if last is None else last + "\n"
    title = paint(f"{printable(r.path)}: estimate", "bold")
    setup = getattr(est, "setup", None)
    model = getattr(getattr(setup, "model", None), "id", None)
    model = printable(model) if model else model
    shape = f", micro-batch {setup.batch} × {setup.seq}" if setup is not None else ""
    gpus = getattr(setup, "gpus", 1) or 1
    if gpus > 1:  # sharded or data-parallel: every number is one rank's
        shape += f", per GPU (rank) of {gpus}, {setup.shard}"
    rows = [f"{title} ({est.accounting} accounting{', ' + model if model else ''}{shape})"]
    names = [c for c in COMPONENTS if c in est.components]
    names[-1:-1] = [c for c in est.components if c not in COMPONENTS]  # e.g. buffers, before overhead
    # what the peak holds beyond the components, before the overhead: the rows add up to the peak
    terms = [(f"{'+' if b > 0 else '−'} {label}", b, words) for label, b, words in getattr(est, "peak_terms", ())]
    width = max(len(c) for c in [*names, *(t[0] for t in terms)])
    for name in names:
        if name == "overhead":
            for label, b, words in terms:
                why = "  (eager attention)" if b > 0 and "eager attention" in words else ""
                rows.append(f"  {label.ljust(width)}  {gib(abs(b)).rjust(8)} GiB{why}")
        rows.append(f"  {name.ljust(width)}  {gib(est.components[name].bytes).rjust(8)} GiB")
    phase = f"  at the {est.peak_phase} phase" if est.peak_phase not in ("sum", None) else ""
    rows.append(paint(f"  {'peak'.ljust(width)}  {gib(est.peak).rjust(8)} GiB{phase}", "bold"))
    paged = getattr(est, "paged_optimizer", 0)
    if paged:
        rows.append(f"  {'paged'.ljust(width)}  {gib(paged).rjust(8)} GiB  optimizer state in unified "
                    "memory, not in the peak")
    rows.append(last)
    return "".join(row + "\n" for row in rows)


def _why_no_estimate(ctx: Any) -> str:
    if getattr(ctx, "model_error", None):
        return str(ctx.model_error)
    missing = tuple(getattr(getattr(ctx, "planned", None), "missing", ()) or ())
    if missing:
        assume = " ".join(f"--assume {m}=…" for m in missing)
        return f"unknown {', '.join(missing)} ({assume})"
    return "the script does not say enough to estimate"


# ---- json -----------------------------------------------------------------------------


def _loc(line: int, col: int) -> dict[str, int]:
    return {"column": col, "row": line}


def _json_finding(r: FileResult, f: Finding, base: str | None = None) -> dict[str, Any]:
    s = f.span
    end_line, end_col = _end(r, s)
    fix = None
    if f.fix is not None:
        fix = {"applicability": f.fix.applicability, "codemod": f.fix.codemod,
               "edits": [{"content": text, "end_location": _loc(er, ec), "location": _loc(sr, sc)}
                         for sr, sc, er, ec, text in f.fix.edits],
               "message": f.fix.title, "params": dict(f.fix.params)}
    cell, row = r.position(s.line)
    if cell is not None:  # Ruff's notebook convention: rows count within the cell
        end_line -= s.line - row
    return {
        "cell": cell,
        "code": f.code,
        "data": dict(f.data),
        "end_location": _loc(end_line, end_col),
        "filename": s.path,
        "fix": fix,
        "hint": f.hint,
        "location": _loc(row, s.col),
        "message": f.message,
        "name": f.name,
        "noqa_row": row,
        "related": [_json_related(r, rel) for rel in f.related],
        "severity": f.severity,
        "url": rule_url(f.code, f.name, base),
    }


def _json_related(r: FileResult, rel) -> dict[str, Any]:
    """A related location numbered as the finding's own: in a notebook, the cell and the row in it."""
    cell, row = r.position(rel.span.line) if rel.span.path == r.path else (None, rel.span.line)
    return {"cell": cell, "filename": rel.span.path, "location": _loc(row, rel.span.col), "message": rel.label}


# ---- github ---------------------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (escapeData)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (escapeProperty): also `:` and `,`."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _on_disk(r: FileResult, span: Span) -> tuple[int, int, int, int]:
    """(line, column, end line, end column) of a finding in the file as it is on disk: a notebook's
    raw .ipynb JSON (what a pull request shows), else the source line it points at."""
    end_line, end_col = _end(r, span)
    line, col = r.raw(span)
    if (line, col) != (span.line, span.col):
        return line, col, line, col + (end_col - span.col)
    return span.line, span.col, end_line, end_col


def _github(results: Sequence[FileResult], out: TextIO) -> None:
    for r, f in _ordered(results):
        s = f.span
        line, col, end_line, end_col = _on_disk(r, s)
        level = GITHUB_LEVELS.get(f.severity, "warning")
        props = ",".join([
            f"title={escape_property(f'memlint ({f.code})')}",
            f"file={printable(escape_property(s.path))}",
            f"line={line}", f"col={col}", f"endLine={end_line}", f"endColumn={end_col}",
        ])
        cell, row = r.position(s.line) if s.path == r.path else (None, s.line)
        where = f"cell {cell}:{row}" if cell is not None else str(row)
        out.write(f"::{level} {props}::{printable(escape_data(f'{s.path}:{where}:{s.col}: {f.code} {f.message}'))}\n")


# ---- gitlab ---------------------------------------------------------------------------


def gitlab_report(results: Sequence[FileResult]) -> list[dict[str, Any]]:
    """GitLab Code Quality (a list of issues): each finding with a fingerprint that stays the same
    while the finding does (its code, file and the text of its line, not its line number or figures)."""
    import hashlib

    seen: Counter[str] = Counter()
    out = []
    for r, f in _ordered(results):
        s = f.span
        line, col, end_line, end_col = _on_disk(r, s)
        text = (_line_text(r, s) or "").strip()
        base = hashlib.sha256(f"{f.code}\0{s.path}\0{text}".encode("utf-8", "surrogateescape")).hexdigest()
        seen[base] += 1  # the same code twice on the same text: still two issues
        fingerprint = hashlib.sha256(f"{base}\0{seen[base]}".encode()).hexdigest()[:32]
        out.append({
            "check_name": f.code,
            "description": f"{f.code} {f.message}",
            "fingerprint": fingerprint,
            "severity": GITLAB_SEVERITIES.get(f.severity, "minor"),
            "location": {"path": s.path.replace(os.sep, "/").removeprefix("./"),
                         "positions": {"begin": {"line": line, "column": col},
                                       "end": {"line": end_line, "column": end_col}}},
        })
    return out


# ---- junit ----------------------------------------------------------------------------


def junit_report(results: Sequence[FileResult]) -> str:
    """JUnit XML, as Ruff writes it: a test suite per file with findings, a failed test case per finding."""
    from xml.sax.saxutils import quoteattr

    pairs = _ordered(results)
    by_file: dict[str, list[tuple[FileResult, Finding]]] = {}
    for r, f in pairs:
        by_file.setdefault(f.span.path, []).append((r, f))
    rows = ['<?xml version="1.0" encoding="UTF-8"?>',
            f'<testsuites name="memlint" tests="{max(len(pairs), 1)}" failures="{len(pairs)}" errors="0">']
    if not pairs:
        rows += ['  <testsuite name="memlint" tests="1" failures="0" errors="0">',
                 '    <testcase name="No errors found" classname="memlint"/>', "  </testsuite>"]
    for path, items in by_file.items():
        rows.append(f'  <testsuite name={quoteattr(path)} tests="{len(items)}" failures="{len(items)}" errors="0">')
        for r, f in items:
            cell, row = r.position(f.span.line) if f.span.path == r.path else (None, f.span.line)
            where = f"cell {cell}, line {row}" if cell is not None else f"line {row}"
            rows.append(f'    <testcase name={quoteattr(f"org.memlint.{f.code}")} classname={quoteattr(path)} '
                        f'line="{row}" column="{f.span.col}">')
            rows.append(f"      <failure message={quoteattr(f.message)}>"
                        f"{_xml_text(f'{where}, col {f.span.col}, {f.message}')}</failure>")
            rows.append("    </testcase>")
        rows.append("  </testsuite>")
    rows.append("</testsuites>")
    return "\n".join(rows) + "\n"


def _xml_text(text: str) -> str:
    from xml.sax.saxutils import escape

    return escape(text)


# ---- sarif ----------------------------------------------------------------------------


def _registry_rules() -> list[type[Rule]]:
    from memlint.rules.registry import all_rules

    return list(all_rules())


def _uri(path: str) -> tuple[str, str | None]:
    """A relative URI under %SRCROOT% for a path the user named; absolute paths outside
    the working directory become file: URIs."""
    from urllib.parse import quote

    p = path.replace(os.sep, "/")
    if os.path.isabs(path):
        rel = os.path.relpath(path)
        if rel.startswith(".."):
            return "file://" + quote((p if p.startswith("/") else "/" + p).encode("utf-8", "surrogateescape"),
                                     safe="/:"), None
        p = rel.replace(os.sep, "/")
    if p.startswith("./"):
        p = p[2:]
    return quote(p.encode("utf-8", "surrogateescape"), safe="/"), "%SRCROOT%"


def _physical(span: Span, end: tuple[int, int] | None = None, r: FileResult | None = None) -> dict[str, Any]:
    uri, base = _uri(span.path)
    art: dict[str, Any] = {"uri": uri}
    if base:
        art["uriBaseId"] = base
    line, col = span.line, span.col
    if r is not None:  # a notebook: the raw .ipynb line, where the cell's text is
        line, col, *rest = _on_disk(r, span)
        end = tuple(rest) if end is not None else None
    region: dict[str, int] = {"startLine": line, "startColumn": col}
    if end is not None:
        region["endLine"], region["endColumn"] = end
    return {"physicalLocation": {"artifactLocation": art, "region": region}}


def rule_descriptor(rule: type[Rule], base: str | None = None) -> dict[str, Any]:
    doc = rule.doc()
    desc: dict[str, Any] = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": doc or rule.summary},
        "help": {"text": doc or rule.summary, "markdown": doc or rule.summary},
        "defaultConfiguration": {"enabled": bool(rule.default_enabled),
                                 "level": LEVELS.get(rule.severity, "warning")},
        "properties": {"fixable": rule.fix is not None, "docs": _doc_path(rule.code, rule.name),
                       "tags": [f"MEM{rule.category()}xx"]},
    }
    desc["helpUri"] = rule_url(rule.code, rule.name, base)
    return desc


def sarif_log(results: Sequence[FileResult], rules: Sequence[type[Rule]] | None = None,
              base: str | None = None) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run: every known rule, then the findings."""
    from memlint import __version__

    descriptors = [rule_descriptor(r, base) for r in sorted(rules if rules is not None else _registry_rules(),
                                                            key=lambda r: r.code)]
    index = {d["id"]: i for i, d in enumerate(descriptors)}
    sarif_results = []
    for r, f in _ordered(results):
        if f.code not in index:  # a code outside the rule table still gets a descriptor
            index[f.code] = len(descriptors)
            descriptors.append({"id": f.code, "name": f.name, "shortDescription": {"text": f.name},
                                "helpUri": rule_url(f.code, f.name, base),
                                "defaultConfiguration": {"level": LEVELS.get(f.severity, "warning")}})
        res: dict[str, Any] = {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": LEVELS.get(f.severity, "warning"),
            "message": {"text": f.message + (f" Help: {f.hint}" if f.hint else "")},
            "locations": [_physical(f.span, _end(r, f.span), r)],
        }
        if f.related:
            res["relatedLocations"] = [{"id": i, **_physical(rel.span, None, r), "message": {"text": rel.label}}
                                       for i, rel in enumerate(f.related, 1)]
        props: dict[str, Any] = {"name": f.name, "severity": f.severity}
        if f.hint:
            props["hint"] = f.hint
        if f.data:
            props["data"] = dict(f.data)
        if f.fix is not None:
            props["fix"] = {"title": f.fix.title, "applicability": f.fix.applicability,
                            "codemod": f.fix.codemod}
        res["properties"] = props
        sarif_results.append(res)
    driver: dict[str, Any] = {"name": "memlint", "version": __version__, "semanticVersion": __version__,
                              "rules": descriptors}
    driver["informationUri"] = HOME_URL if base in (None, DOCS_URL) else base
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": driver}, "columnKind": "unicodeCodePoints",
                  "results": sarif_results}],
    }


# ---- statistics and summary -----------------------------------------------------------


def statistics(results: Sequence[FileResult]) -> list[tuple[str, str, int, bool]]:
    """(code, name, count, fixable) per code, most frequent first, then by code (Ruff's order)."""
    counts: Counter[str] = Counter()
    names: dict[str, str] = {}
    fixable: dict[str, bool] = {}
    for r in results:
        for f in r.findings:
            counts[f.code] += 1
            names.setdefault(f.code, f.name)
            fixable[f.code] = fixable.get(f.code, False) or f.fix is not None
    rows = sorted(counts)
    rows.sort(key=lambda c: -counts[c])  # stable: ties stay in code order
    return [(c, names[c], counts[c], fixable[c]) for c in rows]


def write_statistics(stats: Sequence[tuple[str, str, int, bool]], out: TextIO, fmt: str = "concise", *,
                     color: bool = False) -> None:
    """`--statistics` as Ruff prints it: `count<TAB>code<TAB>[*] name`, or a JSON list."""
    if fmt == "json":
        out.write(json.dumps([{"code": c, "count": n, "fixable": fx, "name": name}
                              for c, name, n, fx in stats], indent=2) + "\n")
        return
    if fmt not in ("concise", "full"):
        raise MemlintError(f"--statistics supports the concise, full and json formats, not {fmt!r}")
    if not stats:
        return
    paint = _Paint(color)
    count_w = max(len(str(n)) for _, _, n, _ in stats)
    code_w = max(len(c) for c, _, _, _ in stats)
    any_fix = any(fx for *_, fx in stats)
    for code, name, n, fx in stats:
        mark = (f"[{paint('*', 'cyan')}] " if fx else "[ ] ") if any_fix else ""
        out.write(f"{paint(str(n).rjust(count_w), 'bold')}\t{paint(code.ljust(code_w), 'red', 'bold')}"
                  f"\t{mark}{printable(name)}\n")


SEVERITY_RANK = {"note": 0, "warning": 1, "error": 2}


def summary(results: Sequence[FileResult], show_fixes: bool = False, fail_on: str | None = None) -> str:
    """Ruff's closing lines (for stderr): how many findings, and how many `--fix` would fix;
    unsafe fixes count only with `show_fixes` (`--unsafe-fixes`), else they are a hint. The count is
    split by severity; with `fail_on`, a run whose findings are all below it says why it exits 0."""
    findings = [f for r in results for f in r.findings]
    if not findings:
        return "All checks passed!\n"
    n = len(findings)
    counts = Counter(f.severity for f in findings)
    levels = ", ".join(f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in ("error", "warning", "note")
                       if counts[s])
    text = f"Found {n} finding{'s' if n != 1 else ''} ({levels}).\n"
    if fail_on is not None and not any(SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on] for f in findings):
        text += f"None at or above fail-on ({fail_on}): exit 0.\n"
    safe = sum(f.fix is not None and f.fix.applicability == "safe" for f in findings)
    unsafe = sum(f.fix is not None and f.fix.applicability != "safe" for f in findings)
    if show_fixes:
        safe, unsafe = safe + unsafe, 0
    hidden = (f"{unsafe} hidden fix{'es' if unsafe != 1 else ''} can be enabled with the "
              "`--unsafe-fixes` option")
    if safe and unsafe:
        text += f"[*] {safe} fixable with the `--fix` option ({hidden}).\n"
    elif safe:
        text += f"[*] {safe} fixable with the `--fix` option.\n"
    elif unsafe:
        text += f"No fixes available ({hidden}).\n"
    return text
