"""`%memcheck`'s report: sections of lines and tables, rendered the same way as text (rich) and HTML.

Takes a notebook.result.MemcheckResult; imports neither IPython nor torch.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass, field
from typing import Any

from memlint.vocab import COMPONENTS, GIB, printable


def _gib(n: int | None, unit: int = GIB) -> str:
    return "" if n is None else f"{n / unit:,.3f}"


@dataclass
class Section:
    """One block of the report, rendered the same way as text and as HTML."""

    title: str
    columns: tuple[str, ...] = ()
    rows: list[tuple[str, ...]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def sections(r: Any) -> list[Section]:
    """The report's sections, every string through vocab.printable (paths, model ids and
    messages come from the user's files and objects): the text and the HTML show the same."""
    out = static_sections(r) if r.kind in ("file", "cell") else live_sections(r)
    for s in out:
        s.title = printable(s.title)
        s.lines = [printable(x) for x in s.lines]
        s.rows = [tuple(printable(c) for c in row) for row in s.rows]
    return out


def live_sections(r: Any) -> list[Section]:
    from memlint.report.estimate_view import describe

    out: list[Section] = []
    f, e, c = r.facts, r.estimate, r.confirmation
    head = Section(f"%memcheck {r.target}")
    if f is not None:
        dtypes = ", ".join(f"{k} {v:,}" for k, v in f.dtypes.items())
        head.lines.append(f"{f.model_id} ({f.model_class}): {f.params:,} params, {f.trainable:,} trainable "
                          f"[{dtypes}] on {f.device}")
    if e is not None:
        head.lines.append(describe(e))
    out.append(head)
    if f is not None:
        out.append(_read_section(f))
    if e is not None:
        out.append(_estimate_section(e, r.measured))
    out.append(_verdict(r))
    if c is not None:
        out.append(_confirmation_section(c))
    if r.findings:
        risks = Section("risks", ("code", "severity", "message"))
        for fd in r.findings:
            risks.rows.append((fd.code, fd.severity, fd.message + (f" ({fd.hint})" if fd.hint else "")))
        out.append(risks)
    notes = list(r.notes) + (list(e.assumptions) if e is not None else [])
    if c is not None and c.measurement is not None:
        notes += c.measurement.notes
    if notes:
        out.append(Section("notes", lines=[f"- {n}" for n in dict.fromkeys(notes)]))
    return out


def _read_section(f: Any) -> Section:
    read = Section("read from the live objects", ("what", "value"))
    read.rows.append(("worst micro-batch", f"{f.worst_batch} × {f.worst_seq} tokens"))
    if f.lengths is not None:
        L = f.lengths
        read.rows.append(("longest sample", f"#{L.longest_index}: {L.longest} tokens "
                                            f"({L.count} samples, median {L.median}, p95 {L.p95})"))
    if f.padding:
        read.rows.append(("padding", f.padding + (f", multiple of {f.pad_to_multiple_of}"
                                                  if f.pad_to_multiple_of else "")))
    if f.lora:
        read.rows.append(("LoRA", f"r={f.lora['r']} alpha={f.lora['alpha']} dropout={f.lora['dropout']} on "
                                  + ", ".join(f.lora["targets"])))
    if f.quant != "none":
        read.rows.append(("quantization", f.quant + (" + double quant" if f.double_quant else "")))
    read.rows.append(("gradient checkpointing", f.recompute_from))
    read.rows.append(("optimizer / precision", f"{f.optim} / {f.precision}"))
    if f.grad_accum > 1:
        read.rows.append(("gradient accumulation", str(f.grad_accum)))
    return read


def _estimate_section(e: Any, m: Any) -> Section:
    # GiB as everywhere; MiB only so a tiny model's numbers are not all 0.000
    u, uname = (GIB, "GiB") if e.allocated_peak >= GIB // 4 else (1 << 20, "MiB")
    cols = ("component", f"estimate {uname}") + ((f"measured {uname}", "error") if m is not None else ()) + ("how",)
    est = Section("estimate" + (" vs measured" if m is not None else ""), cols)
    on_cuda = m is not None and m.method == "cuda-allocator"
    for name in COMPONENTS:
        row: tuple[str, ...] = (name, _gib(e.bytes(name), u))
        if m is not None:
            if name == "overhead" and not on_cuda:
                row += ("not measured", "")
            else:
                row += (_gib(m.components[name], u), _err(e.bytes(name), m.components[name]))
        est.rows.append(row + (e.components[name].formula,))
    row = ("allocated peak", _gib(e.allocated_peak, u))
    if m is not None:
        row += (_gib(m.measured_peak, u), _err(e.allocated_peak, m.measured_peak))
    est.rows.append(row + (f"at the {e.peak_phase} phase" + (f" (measured: {m.phase})" if m is not None else ""),))
    row = ("peak", _gib(e.peak, u))
    if m is not None:
        row += (_gib(m.measured_peak + m.components["overhead"], u) if on_cuda else "", "")
    est.rows.append(row + ("allocated peak + overhead (max_memory_reserved on CUDA)",))
    return est


def _on(f: Any) -> str:
    """'fits on RTX4090', 'tight on RTX4090 (1.20 GiB free, under the 10% headroom)', 'does not fit on RTX4090'."""
    label = f.gpu.label
    if f.missing:
        return f"does not run on {label} ({f.lacks()})"
    if f.status == "tight":
        return f"tight on {label} ({f.free / GIB:.2f} GiB free, under the {f.min_headroom:.0%} headroom)"
    return f"{'fits' if f.status == 'fits' else 'does not fit'} on {label}"


def _verdict(r: Any) -> Section:
    verdict = Section("verdict")
    e = r.estimate
    if r.oom:
        verdict.lines.append(r.oom)
    elif r.gpu is not None and e is not None:
        label, total, _ = r.gpu
        m = r.measured
        agree = r.agreement
        if m is not None and m.method == "cuda-allocator":
            basis = f"measured {(m.measured_peak + m.components['overhead']) / GIB:.2f} GiB reserved + context"
        elif agree is not None and agree.source == "trace":
            basis = f"{'traced' if m.method == 'fake-tensor-trace' else 'measured'} peak {r.fit.peak / GIB:.2f} (larger than the estimate's)"
        else:
            basis = f"estimated peak {e.peak / GIB:.2f}"
        verdict.lines.append(f"{_on(r.fit)}: {basis} of {total / GIB:.2f} GiB")
    if r.agreement is not None and r.agreement.disagrees:
        what = "trace" if r.measured.method == "fake-tensor-trace" else "CPU run"
        verdict.lines.append("warning: " + r.agreement.words(what))
    else:
        verdict.lines.append("no GPU named: set one with --gpu, c.MemcheckMagics.gpu or [tool.memlint] gpu")
    return verdict


def _confirmation_section(c: Any) -> Section:
    conf = Section("confirmation")
    m = c.measurement
    conf.lines.append(c.how)
    if m is not None:
        conf.lines.append(f"measured on {m.device} ({m.method}): allocated peak {m.measured_peak / GIB:.3f} GiB "
                          f"at the {m.phase} phase, {len(m.steps)} steps, {m.runtime_s:.1f} s")
        if c.mode == "trace":
            conf.lines.append("no CUDA device: this is the fake-tensor trace on CPU, not a GPU measurement")
    if c.restored:
        conf.lines.append("restored: " + ", ".join(c.restored))
    conf.lines += c.notes
    return conf


def static_sections(r: Any) -> list[Section]:
    from memlint.report.estimate_view import describe

    out: list[Section] = [Section(f"%memcheck {r.target}" if r.kind == "file" else "%%memcheck (the cell, read "
                                  "statically: nothing was run)")]
    for fr in r.files:
        sec = Section(fr.path)
        ctx = fr.context
        est = getattr(ctx, "estimate", None)
        if est is not None:
            sec.lines.append(f"{est.setup.model.id}: {describe(est)}")
            sec.lines.append(f"estimated peak {est.peak / GIB:.2f} GiB at the {est.peak_phase} phase "
                             f"(allocated {est.allocated_peak / GIB:.2f} GiB)")
            if r.gpu is not None:
                from memlint.gpu import fit_of

                sec.lines.append(_on(fit_of(est, r.gpu, r.min_headroom)))
        elif getattr(ctx, "model_error", None):
            sec.lines.append(f"no estimate: {ctx.model_error}")
        elif getattr(ctx, "planned", None) is not None and ctx.planned.missing:
            sec.lines.append("no estimate: unknown " + ", ".join(ctx.planned.missing)
                             + " (pass --assume KEY=VALUE)")
        out.append(sec)
        if fr.findings:
            risks = Section("risks", ("where", "code", "severity", "message"))
            for fd in fr.findings:
                risks.rows.append((f"{fd.span.line}:{fd.span.col}", fd.code, fd.severity,
                                   fd.message + (f" ({fd.hint})" if fd.hint else "")))
            out.append(risks)
    if r.notes:
        out.append(Section("notes", lines=[f"- {n}" for n in r.notes]))
    return out


def _err(est: int, measured: int) -> str:
    if not measured:
        return "" if not est else "n/a"
    return f"{(est - measured) / measured:+.1%}"


def rich_parts(sections: list[Section]) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    out: list[Any] = []
    for s in sections:
        out.append(Text(s.title, style="bold"))
        for line in s.lines:
            out.append(Text("  " + line))
        if s.columns:
            t = Table(box=None, header_style="bold", pad_edge=False, show_edge=False)
            for col in s.columns:
                t.add_column(col, justify="right" if col.endswith(("GiB", "MiB")) or col == "error" else "left",
                             overflow="fold")
            for row in s.rows:
                t.add_row(*(Text(c) for c in row))  # a cell is text, never rich markup
            out.append(t)
    return out


def rich_console(file: Any = None, width: int | None = None) -> Any:
    from rich.console import Console

    # force_jupyter=False: in a kernel rich would otherwise display() each print itself
    plain = {"force_jupyter": False, "color_system": None} if file is not None else {}
    return Console(file=file, width=width, highlight=False, soft_wrap=False, **plain)


def text(sections: list[Section]) -> str:
    buf = io.StringIO()
    console = rich_console(file=buf, width=120)
    for part in rich_parts(sections):
        console.print(part)
    return buf.getvalue().rstrip()


def html_of(sections: list[Section]) -> str:
    e = html.escape
    parts = ['<div class="memcheck">']
    for s in sections:
        parts.append(f"<h4>{e(s.title)}</h4>")
        parts += [f"<div>{e(line)}</div>" for line in s.lines]
        if s.columns:
            parts.append("<table><thead><tr>" + "".join(f"<th>{e(c)}</th>" for c in s.columns) + "</tr></thead><tbody>")
            for row in s.rows:
                parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
            parts.append("</tbody></table>")
    parts.append("</div>")
    return "\n".join(parts)
