"""`%memcheck` / `%%memcheck`: the estimate from live notebook objects, the rules' risks,
and the worst-case step measured on the attached GPU (or traced on CPU without one).

Load with `%load_ext memlint`. IPython, torch and transformers are imported here only.
"""

from __future__ import annotations

import html
import io
import os
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Integer, Unicode

from memlint.errors import MemlintError

GIB = 1 << 30
COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")
STATIC_SUFFIXES = (".py", ".ipynb", ".yaml", ".yml", ".json")


def _gib(n: int | None, unit: int = GIB) -> str:
    return "" if n is None else f"{n / unit:,.3f}"


# --------------------------------------------------------------------------- the result
@dataclass
class Section:
    """One block of the report, rendered the same way as text and as HTML."""

    title: str
    columns: tuple[str, ...] = ()
    rows: list[tuple[str, ...]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


@dataclass
class MemcheckResult:
    """What `%memcheck` found. `r = %memcheck trainer` keeps it: `r.estimate`, `r.measured`,
    `r.fits`, `r.findings`, `r.to_dict()`; in Jupyter it renders as an HTML table."""

    target: str
    kind: str                               # trainer | model | file | cell
    setup: Any = None
    estimate: Any = None
    facts: Any = None                       # memlint.live.LiveFacts
    confirmation: Any = None                # memlint.live.Confirmation
    findings: list[Any] = field(default_factory=list)
    gpu: tuple[str, int, int] | None = None
    notes: list[str] = field(default_factory=list)
    files: list[Any] = field(default_factory=list)  # FileResults of a static check
    _shown_in: int | None = None

    # ---- the numbers ------------------------------------------------------------------
    @property
    def measured(self) -> Any:
        return self.confirmation.measurement if self.confirmation is not None else None

    @property
    def oom(self) -> str | None:
        return self.confirmation.oom if self.confirmation is not None else None

    @property
    def fits(self) -> bool | None:
        """Does the worst-case step fit the GPU? An OOM or a measured peak decides over
        the estimate; None when no GPU was named and none is attached."""
        if self.oom:
            return False
        if self.gpu is None or self.estimate is None:
            return None
        m = self.measured
        if m is not None and m.method == "cuda-allocator":
            # what the allocator reserved, plus the CUDA context it does not count
            return m.measured_peak + m.components["overhead"] + self.gpu[2] <= self.gpu[1]
        return self.estimate.peak <= self.gpu[1]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": self.target, "kind": self.kind, "fits": self.fits,
                               "findings": [{"code": f.code, "severity": f.severity, "message": f.message,
                                             "line": f.span.line} for f in self.findings],
                               "notes": list(self.notes)}
        if self.gpu:
            out["gpu"] = {"name": self.gpu[0], "total_bytes": self.gpu[1]}
        if self.estimate is not None:
            e = self.estimate
            out["estimate"] = {"components": {k: e.bytes(k) for k in COMPONENTS}, "peak": e.peak,
                               "allocated_peak": e.allocated_peak, "phase": e.peak_phase}
        if self.facts is not None:
            f = self.facts
            out["live"] = {"params": f.params, "trainable": f.trainable, "micro_batch": [f.worst_batch, f.worst_seq],
                           "longest_sample": f.lengths.longest if f.lengths else None,
                           "longest_index": f.lengths.longest_index if f.lengths else None}
        if self.confirmation is not None:
            c = self.confirmation
            out["confirmation"] = {"mode": c.mode, "how": c.how, "oom": c.oom, "restored": list(c.restored),
                                   "measured": c.measurement.to_json() if c.measurement is not None else None}
        return out

    # ---- rendering ----------------------------------------------------------------------
    def sections(self) -> list[Section]:
        if self.kind in ("file", "cell"):
            return _static_sections(self)
        return _live_sections(self)

    def chart_bars(self) -> list[Any]:
        """The four-bucket bar of this estimate, with the measured peak as a marker."""
        from memlint.report.chart import bars_for

        if self.estimate is None:
            return []
        marker = None
        m = self.measured
        if m is not None:
            if m.method == "cuda-allocator" and self.gpu is not None:
                marker = m.measured_peak + m.components["overhead"] + self.gpu[2]
            else:  # a trace counts allocated bytes: add the estimate's context and slack
                marker = m.measured_peak + self.estimate.bytes("overhead")
        return bars_for(self.estimate, self.gpu[2] if self.gpu else None, measured=marker)

    def chart_svg(self) -> str | None:
        """The chart as SVG (None without matplotlib, the `plot` extra, or without an estimate)."""
        import importlib.util

        if self.estimate is None or importlib.util.find_spec("matplotlib") is None:
            return None
        from memlint.report.chart import capacities_for, chart_svg

        return chart_svg(self.chart_bars(), capacities_for(self.gpu[0] if self.gpu else None))

    def _repr_html_(self) -> str:
        html = _html(self.sections())
        svg = self.chart_svg()
        return html + (f'<div class="memlint-chart">{svg}</div>' if svg else "")

    def __repr__(self) -> str:
        return _text(self.sections())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.__repr__())

    def _ipython_display_(self) -> None:
        from IPython import get_ipython
        from IPython.display import display

        ip = get_ipython()
        if ip is not None and self._shown_in is not None and self._shown_in == ip.execution_count:
            return  # the magic already showed it (or was told -q) in this cell
        if ip is not None and type(ip).__name__ == "TerminalInteractiveShell":
            console = _rich_console()  # a terminal: rich's colours
            for part in _rich(self.sections()):
                console.print(part)
            if self.estimate is not None:
                from memlint.report.chart import capacities_for, render_terminal

                render_terminal(self.chart_bars(), capacities_for(self.gpu[0] if self.gpu else None), console)
            return
        display({"text/plain": self.__repr__(), "text/html": self._repr_html_()}, raw=True)


def _live_sections(r: MemcheckResult) -> list[Section]:
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
        out.append(read)
    if e is not None:
        m = r.measured
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
        out.append(est)
    verdict = Section("verdict")
    if r.oom:
        verdict.lines.append(r.oom)
    elif r.gpu is not None and e is not None:
        label, total, _ = r.gpu
        m = r.measured
        basis = (f"measured {(m.measured_peak + m.components['overhead']) / GIB:.2f} GiB reserved + context"
                 if m is not None and m.method == "cuda-allocator" else f"estimated peak {e.peak / GIB:.2f}")
        verdict.lines.append(f"{'fits' if r.fits else 'does not fit'} on {label}: {basis} of {total / GIB:.2f} GiB")
    else:
        verdict.lines.append("no GPU named: set one with --gpu, c.MemcheckMagics.gpu or [tool.memlint] gpu")
    out.append(verdict)
    if c is not None:
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
        out.append(conf)
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


def _static_sections(r: MemcheckResult) -> list[Section]:
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
                sec.lines.append(f"{'fits' if est.peak <= r.gpu[1] else 'does not fit'} on {r.gpu[0]}")
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


def _rich(sections: list[Section]) -> list[Any]:
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
                t.add_row(*row)
            out.append(t)
    return out


def _rich_console(file: Any = None, width: int | None = None) -> Any:
    from rich.console import Console

    # force_jupyter=False: in a kernel rich would otherwise display() each print itself
    plain = {"force_jupyter": False, "color_system": None} if file is not None else {}
    return Console(file=file, width=width, highlight=False, soft_wrap=False, **plain)


def _text(sections: list[Section]) -> str:
    buf = io.StringIO()
    console = _rich_console(file=buf, width=120)
    for part in _rich(sections):
        console.print(part)
    return buf.getvalue().rstrip()


def _html(sections: list[Section]) -> str:
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


# --------------------------------------------------------------------------- the magics
@magics_class
class MemcheckMagics(Magics):
    """`%memcheck trainer`, `%memcheck model --batch 4 --seq 2048`, `%memcheck train.py`,
    `%%memcheck` (the cell, statically; `--run` runs it afterwards)."""

    gpu = Unicode(None, allow_none=True,
                  help="GPU to check against (a name from memlint's table or a size in GiB); "
                       "default: [tool.memlint] gpu, else the attached GPU").tag(config=True)
    confirm = Bool(True, help="Measure the worst-case step after estimating it (CUDA when available, "
                              "else the fake-tensor trace on CPU)").tag(config=True)
    device = Unicode("auto", help="auto | cuda | cpu | trace").tag(config=True)
    steps = Integer(2, help="training steps to measure (step 1 creates the optimizer state)").tag(config=True)

    @magic_arguments()
    @argument("target", nargs="?", default=None,
              help="a Trainer, a model (with --seq), or a script/config path; omit for %%%%memcheck")
    @argument("--gpu", default=None, help="GPU name or size in GiB (e.g. A100-80GB, 24)")
    @argument("--batch", type=int, default=None, help="micro-batch (default: the Trainer's; 1 for a model)")
    @argument("--seq", type=int, default=None, help="sequence length (default: the dataset's worst micro-batch)")
    @argument("--confirm", dest="confirm", action="store_const", const=True, default=None,
              help="measure the worst-case step (default on)")
    @argument("--no-confirm", dest="confirm", action="store_const", const=False, help="estimate only")
    @argument("--device", default=None, choices=("auto", "cuda", "cpu", "trace"),
              help="where to confirm: cuda, cpu (real tensors, in place) or trace (fake tensors)")
    @argument("--steps", type=int, default=None, help="training steps to measure (1-3)")
    @argument("--assume", action="append", default=[], metavar="KEY=VALUE",
              help="value for a field a script leaves unknown (static checks)")
    @argument("--run", action="store_true", help="%%%%memcheck: run the cell after checking it")
    @argument("-q", "--quiet", action="store_true", help="display nothing; the result is still returned")
    @line_cell_magic
    def memcheck(self, line: str, cell: str | None = None) -> MemcheckResult | None:
        """Will this fine-tuning run fit on the GPU? Estimate from the live objects, then measure."""
        args = parse_argstring(self.memcheck, line)
        # magic_arguments formats usage as reST ("::" and a wrapped block); one line reads better
        usage = "usage: " + " ".join(self.memcheck.parser.format_usage().replace("::", " ").split())
        if args.steps is not None and not 1 <= args.steps <= 3:
            raise UsageError(f"--steps must be 1, 2 or 3\n{usage}")
        try:
            if cell is not None:
                if args.target is not None:
                    raise UsageError(f"%%memcheck reads the cell; it takes no target\n{usage}")
                result = self._static(args, cell=cell)
            elif args.target is None:
                raise UsageError(f"%memcheck needs a target: a Trainer, a model or a script path\n{usage}")
            elif args.run:
                raise UsageError(f"--run is for %%memcheck (a cell)\n{usage}")
            else:
                result = self._dispatch(args, usage)
        except MemlintError as exc:
            raise UsageError(f"memlint: {exc}") from None
        ip = self.shell
        if args.quiet:
            result._shown_in = ip.execution_count
        else:
            from IPython.display import display

            display(result)
            result._shown_in = ip.execution_count
        if cell is not None and args.run:
            ip.run_cell(cell)
        return result

    # ---- settings ---------------------------------------------------------------------
    def _settings(self) -> Any:
        try:
            from memlint.config import load_settings
        except ImportError:  # an older memlint without [tool.memlint] support
            return None
        return load_settings(os.getcwd())

    def _gpu(self, args: Any, settings: Any) -> tuple[str, int, int] | None:
        from memlint.estimate import find_gpu

        name = args.gpu or self.gpu or (getattr(settings, "gpu", None) if settings is not None else None)
        return find_gpu(name) if name else None

    # ---- static: a file or a cell -------------------------------------------------------
    def _static(self, args: Any, cell: str | None = None, path: str | None = None) -> MemcheckResult:
        settings = self._settings()
        gpu = self._gpu(args, settings)
        try:
            from memlint.check import check_paths, check_source
            from memlint.config import Settings
        except ImportError:  # pragma: no cover - an install without the rules engine
            raise MemlintError("checking a script needs memlint.check (the rules engine)") from None

        settings = settings or Settings()
        if cell is not None:
            files = [check_source(cell, "<cell>", settings=settings, gpu=gpu[0] if gpu else None,
                                  assume=tuple(args.assume))]
            return MemcheckResult("<cell>", "cell", gpu=gpu, files=files)
        assert path is not None
        files = check_paths([path], settings, gpu=gpu[0] if gpu else None, assume=tuple(args.assume))
        notes = [] if files else [f"{path}: not a training script (it names no training framework)"]
        return MemcheckResult(path, "file", gpu=gpu, files=files, notes=notes)

    # ---- live objects -----------------------------------------------------------------------
    def _dispatch(self, args: Any, usage: str) -> MemcheckResult:
        target = args.target
        ns = self.shell.user_ns
        if target not in ns and (target.endswith(STATIC_SUFFIXES) or os.path.sep in target):
            if not os.path.exists(target):
                raise UsageError(f"{target}: no such file\n{usage}")
            return self._static(args, path=target)
        try:
            obj = ns[target] if target in ns else self.shell.ev(target)
        except Exception as exc:  # any error evaluating the user's expression is a usage error
            raise UsageError(f"{target}: {type(exc).__name__}: {exc}\n{usage}") from None
        from memlint import live

        if isinstance(obj, (str, os.PathLike)) and os.path.isfile(obj):  # a variable naming a script
            return self._static(args, path=os.fspath(obj))
        if hasattr(obj, "args") and hasattr(obj, "train_dataset") and hasattr(obj, "model"):
            lp = live.from_trainer(obj, batch=args.batch, seq=args.seq)
            kind = "trainer"
        elif hasattr(obj, "config") and hasattr(obj, "named_parameters"):
            if args.seq is None:
                raise UsageError(f"a bare model needs --seq (and --batch, default 1)\n{usage}")
            lp = live.from_model(obj, batch=args.batch or 1, seq=args.seq)
            kind = "model"
        else:
            raise UsageError(f"{target} is a {type(obj).__name__}: expected a Trainer, a model or a script path"
                             f"\n{usage}")
        return self._live(args, lp, target, kind)

    def _live(self, args: Any, lp: Any, target: str, kind: str) -> MemcheckResult:
        import torch

        from memlint import live
        from memlint.estimate import estimate

        settings = self._settings()
        gpu = self._gpu(args, settings)
        device = args.device or self.device
        confirm = self.confirm if args.confirm is None else args.confirm
        notes = list(lp.notes)
        cuda = torch.cuda.is_available()
        if gpu is None and cuda and device in ("auto", "cuda"):
            from memlint.estimate import find_gpu

            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            try:
                gpu = find_gpu(props.name)
            except MemlintError:
                gpu = (props.name, props.total_memory, find_gpu(f"{props.total_memory / GIB}")[2])
        est = estimate(lp.setup, "real", gpu[2] if gpu else None)
        confirmation = None
        if confirm:
            if not cuda and device == "auto" and not args.quiet:
                print("memcheck: no CUDA device; confirming with the fake-tensor trace on CPU (no real memory used)")
            confirmation = live.confirm(lp, device=device, steps=args.steps or self.steps)
        findings = self._risks(lp, est, gpu, settings)
        return MemcheckResult(target, kind, setup=lp.setup, estimate=est, facts=lp.facts,
                              confirmation=confirmation, findings=findings, gpu=gpu, notes=notes)

    def _risks(self, lp: Any, est: Any, gpu: Any, settings: Any) -> list[Any]:
        """The rules over the live plan: check_plan's own context when it can estimate the
        model from its id, else the same rules over the live Setup and estimate."""
        try:
            from memlint.check import check_plan, run_rules
            from memlint.config import Settings
            from memlint.estimate.from_plan import PlannedSetup
            from memlint.rules.base import Context
            from memlint.rules.registry import select
        except ImportError:
            return []
        settings = settings or Settings()
        result = check_plan(lp.plan, settings=settings, gpu=gpu[0] if gpu and _known_gpu(gpu[0]) else None)
        if result.context.estimate is not None:
            return list(result.findings)
        ctx = Context(lp.plan, planned=PlannedSetup(lp.setup, (), tuple(lp.notes)), estimate=est, gpu=gpu,
                      accounting=settings.accounting)
        rules = select(settings.select, settings.extend_select, settings.ignore)
        return sorted(run_rules(ctx, rules, settings), key=lambda f: (f.span.line, f.code))


def _known_gpu(name: str) -> bool:
    from memlint.estimate import find_gpu

    try:
        find_gpu(name)
    except MemlintError:
        return False
    return True


def load_ipython_extension(ip: Any) -> None:
    """`%load_ext memlint`: register %memcheck / %%memcheck."""
    ip.register_magics(MemcheckMagics)
