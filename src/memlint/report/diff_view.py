"""`memlint diff` output: concise lines, JSON, GitHub annotations on the changed lines, and
one markdown table a reviewer pastes into a pull request."""

from __future__ import annotations

import json
from typing import Any, TextIO

from memlint.diff import DiffResult, FieldChange, FileDiff
from memlint.vocab import GIB, gib, printable, signed_gib

# A component change smaller than this (bytes) is noise in a review: 0.01 GiB.
_SHOWN = GIB // 100


_gib = gib
_signed = signed_gib


def _value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return "none" if v is None else str(v)


def _where(c: FieldChange) -> str:
    return c.where


def distinct(changes) -> list[FieldChange]:
    """One line can set two fields (axolotl's micro_batch_size is also the eval batch): say it once."""
    seen, out = set(), []
    for c in changes:
        k = (c.key, c.kind, _value(c.before), _value(c.after), c.line)
        if k not in seen:
            seen.add(k)
            out.append(c)
    return out


def change_text(c: FieldChange, *, at: bool = True) -> str:
    what = f"{c.key} removed" if c.kind == "removed" else f"{c.key} {_value(c.before)} → {_value(c.after)}"
    return f"{what} at {_where(c)}" if at else what


def _pct(f: FileDiff) -> str:
    d, b = f.peak_delta, f.before.peak
    return f", {d * 100 / b:+.0f}%" if d is not None and b else ""


def _fit_change(f: FileDiff, r: DiffResult) -> str:
    """How the verdict on the GPU moved (memlint.gpu's notion, with the headroom)."""
    after = r.fit(f.after.peak, f.after)
    if after is None:
        return ""
    label = r.gpu[0]
    before = r.fit(f.before.peak, f.before)
    now = "unsupported" if after.missing else after.status
    if before is None:
        return f"does not fit {label}" if now in ("over", "unsupported") else ""
    was = "unsupported" if before.missing else before.status
    if was == now:
        return ""
    if now == "over":
        return f"no longer fits {label}"
    if now == "unsupported":
        return f"no longer runs on {label}: {after.lacks()}"
    if now == "tight":
        return (f"now tight on {label} ({gib(after.free)} GiB free, under the {r.min_headroom:.0%} headroom)"
                if was == "fits" else f"now fits {label}, tightly")
    return f"now fits {label}"


def headline(f: FileDiff, r: DiffResult) -> str:
    """'peak 18.20 → 31.50 GiB (+13.30, +73%) on A100-80GB'."""
    on = f" on {r.gpu[0]}" if r.gpu else ""
    b, a = f.before, f.after
    if b.peak is not None and a.peak is not None:
        text = f"peak {_gib(b.peak)} → {_gib(a.peak)} GiB ({_signed(f.peak_delta)}{_pct(f)}){on}"
    elif a.peak is not None:
        text = f"peak {_gib(a.peak)} GiB{on}" + (" (new)" if b.plan is None else f" (no estimate before: {b.why})")
    elif b.peak is not None:
        text = f"peak was {_gib(b.peak)} GiB{on}" + (" (deleted)" if a.plan is None else f"; no estimate now: {a.why}")
    else:
        text = f"no estimate: {a.why or b.why}"
    fit = _fit_change(f, r)
    return f"{text}; {fit}" if fit else text


def component_text(f: FileDiff) -> str:
    deltas = [(c, d) for c, d in f.component_deltas().items() if abs(d) >= _SHOWN]
    deltas.sort(key=lambda cd: -abs(cd[1]))
    return ", ".join(f"{c} {_signed(d)}" for c, d in deltas)


def _budget(r: DiffResult) -> str:
    return f"over the budget of {r.budget}" if r.budget else ""


def _failing(f: FileDiff, r: DiffResult) -> str:
    """Why this file fails the diff (exit 1): the budget, or the fit it lost."""
    why = [_budget(r)] if f.over_budget else []
    if f.worse_fit:
        why.append(_fit_change(f, r))
    return "; ".join(w for w in why if w)


def concise(r: DiffResult, out: TextIO) -> None:
    for f in r.files:
        why = "; ".join(change_text(c) for c in distinct(f.changes))
        line = f"{f.path}: {headline(f, r)}" + (f": {why}" if why else "")
        if f.over_budget or f.worse_fit:
            line += f" [fails: {_failing(f, r)}]"
        out.write(line + "\n")
        comps = component_text(f)
        if comps:
            out.write(f"  {comps} GiB\n")


def _verdict(r: DiffResult, side) -> str | None:
    f = r.fit(side.peak, side)
    if f is None:
        return None
    return "unsupported" if f.missing else f.status


def to_json(r: DiffResult) -> dict[str, Any]:
    def side(s) -> dict[str, Any] | None:
        if s.plan is None:
            return None
        return {"components": s.components(), "peak": s.peak, "why_no_estimate": s.why}

    return {
        "base": r.base,
        "base_name": r.base_name,
        "gpu": {"name": r.gpu[0], "bytes": r.gpu[1]} if r.gpu else None,
        "accounting": r.accounting,
        "max_increase": r.budget,
        "exceeded": r.exceeded,
        "files": [{
            "path": f.path,
            "old_path": f.old_path,
            "status": f.status,
            "before": side(f.before),
            "after": side(f.after),
            "delta": {"components": f.component_deltas() or None, "peak": f.peak_delta},
            "over_budget": f.over_budget,
            "worse_fit": f.worse_fit,
            "fit": {"before": _verdict(r, f.before), "after": _verdict(r, f.after)},
            # in a notebook, as `memlint check --output-format json` numbers it: the cell, and the row in it
            "changes": [{"field": c.field, "key": c.key, "kind": c.kind, "before": c.before, "after": c.after,
                         "path": c.path, "line": c.row if c.cell is not None else c.line, "cell": c.cell}
                        for c in f.changes],
        } for f in r.files],
        "skipped": [{"path": p, "why": why} for p, why in r.skipped],
    }


def github(r: DiffResult, out: TextIO) -> None:
    from memlint.report.formats import escape_data, escape_property

    for f in r.files:
        d = f.peak_delta
        level = "error" if f.over_budget or f.worse_fit else "warning" if d is None or d > 0 else "notice"
        head = headline(f, r) + (f" [fails: {_failing(f, r)}]" if f.over_budget or f.worse_fit else "")
        comps = component_text(f)
        title = escape_property("memlint diff")
        located = [c for c in distinct(f.changes) if c.line]
        if not located:
            why = "; ".join(change_text(c) for c in distinct(f.changes))
            msg = f"{f.path}: {head}" + (f": {why}" if why else "") + (f" ({comps} GiB)" if comps else "")
            out.write(f"::{level} title={title},file={escape_property(f.path)}::{escape_data(msg)}\n")
            continue
        for c in located:
            msg = f"{c.where}: {change_text(c, at=False)}: {head}" + (f" ({comps} GiB)" if comps else "")
            line = c.raw_line or c.line  # a notebook: the raw JSON line of the cell's text, which the PR shows
            out.write(f"::{level} title={title},file={escape_property(c.path)},line={line}::{escape_data(msg)}\n")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(r: DiffResult, out: TextIO) -> None:
    on = f", checked against {r.gpu[0]} ({_gib(r.gpu[1])} GiB)" if r.gpu else ""
    out.write(f"#### memlint diff: peak GPU memory per GPU, `{r.base[:10]}` ({_cell(r.base_name)}) → working tree"
              f"{on}, {r.accounting} accounting\n\n")
    if not r.files:
        out.write("No training script or config changes its memory estimate.\n")
        return
    out.write("| script | peak before | peak after | change | by component (GiB) | caused by |\n")
    out.write("|---|--:|--:|--:|---|---|\n")
    for f in r.files:
        b = f"{_gib(f.before.peak)} GiB" if f.before.peak is not None else ("—" if f.before.plan is None
                                                                            else f"? ({f.before.why})")
        a = f"{_gib(f.after.peak)} GiB" if f.after.peak is not None else ("—" if f.after.plan is None
                                                                         else f"? ({f.after.why})")
        if f.peak_delta is None:
            change = {"added": "new", "deleted": "deleted"}.get(f.status, "")
        else:
            change = f"{_signed(f.peak_delta)} GiB{' (' + _pct(f)[2:] + ')' if _pct(f) else ''}"
            if f.peak_delta > 0:
                change = f"**{change}**"
        fit_note = _fit_change(f, r)
        notes = [(fit_note, f.worse_fit), (_budget(r) if f.over_budget else "", True)]
        notes = [(n, bad) for n, bad in notes if n]
        if notes:
            change += "<br>" + "<br>".join(("❌ " if bad else "") + n for n, bad in notes)
        why = "<br>".join(f"`{c.key}` " + ("removed" if c.kind == "removed" else f"{_value(c.before)} → {_value(c.after)}")
                          + f" ({_where(c)})" for c in distinct(f.changes))
        out.write(f"| `{_cell(f.path)}` | {_cell(b)} | {_cell(a)} | {_cell(change)} | {_cell(component_text(f))} "
                  f"| {_cell(why)} |\n")
    if r.budget:
        verdict = "exceeded" if r.exceeded else "within"
        out.write(f"\nBudget: a script's peak may grow by at most {r.budget} ({verdict}).\n")


class _Printable:
    """A stream whose lines are written through vocab.printable: paths, keys and values come
    from the repository under review."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, text: str) -> int:
        return self.out.write("\n".join(printable(part) for part in text.split("\n")))


def write_diff(r: DiffResult, fmt: str, out: TextIO) -> None:
    if fmt != "json":
        out = _Printable(out)  # type: ignore[assignment]
    if fmt == "json":
        out.write(json.dumps(to_json(r), indent=2) + "\n")
    elif fmt == "github":
        github(r, out)
    elif fmt == "markdown":
        markdown(r, out)
    else:
        concise(r, out)

