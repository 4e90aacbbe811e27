"""What `%memcheck` returns: `r = %memcheck trainer` keeps the estimate, the measurement and the
findings; in Jupyter it renders as an HTML table (report/memcheck_view.py), in a terminal with rich."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memlint.gpu import MIN_HEADROOM, Fit, fit_of, fit_reconciled, reconcile
from memlint.gpu import fit as gpu_fit
from memlint.report import memcheck_view as view
from memlint.vocab import COMPONENTS


@dataclass
class MemcheckResult:
    """What `%memcheck` found. `r = %memcheck trainer` keeps it: `r.estimate`, `r.measured`,
    `r.fits`, `r.findings`, `r.to_dict()`; in Jupyter it renders as an HTML table."""

    target: str
    kind: str                               # trainer | model | file | cell
    setup: Any = None
    estimate: Any = None
    facts: Any = None                       # memlint.notebook.live.LiveFacts
    confirmation: Any = None                # memlint.notebook.confirm.Confirmation
    findings: list[Any] = field(default_factory=list)
    gpu: tuple[str, int, int] | None = None
    notes: list[str] = field(default_factory=list)
    files: list[Any] = field(default_factory=list)  # FileResults of a static check
    min_headroom: float = MIN_HEADROOM      # [tool.memlint]'s, as check and estimate use it
    _shown_in: int | None = None

    # ---- the numbers ------------------------------------------------------------------
    @property
    def measured(self) -> Any:
        return self.confirmation.measurement if self.confirmation is not None else None

    @property
    def oom(self) -> str | None:
        return self.confirmation.oom if self.confirmation is not None else None

    @property
    def fit(self) -> Fit | None:
        """The worst-case step against the GPU (memlint.gpu's notion, with the headroom): the
        measured peak on CUDA decides over the estimate; None when no GPU was named and none is attached."""
        if self.gpu is None or self.estimate is None:
            return None
        m = self.measured
        s = self.estimate.setup
        if m is not None and m.method == "cuda-allocator":
            # what the allocator reserved, plus the CUDA context it does not count
            held = m.measured_peak + m.components["overhead"] + self.gpu[2]
            return gpu_fit(held, self.gpu, self.min_headroom, s.compute_dtype, s.attn)
        if m is not None:  # a trace or a CPU run: the larger of it and the estimate where they disagree
            return fit_reconciled(self.estimate, m.measured_peak, self.gpu, self.min_headroom)
        return fit_of(self.estimate, self.gpu, self.min_headroom)

    @property
    def agreement(self) -> Any:
        """The estimate against a trace or CPU run of the same step (memlint.gpu.Reconciled), None without one."""
        m = self.measured
        if m is None or self.estimate is None or m.method == "cuda-allocator":
            return None
        return reconcile(self.estimate, m.measured_peak)

    @property
    def fits(self) -> bool | None:
        """Does the worst-case step fit the GPU with the headroom? An OOM says no."""
        if self.oom:
            return False
        f = self.fit
        return None if f is None else f.ok

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
            agree = self.agreement
            if agree is not None:
                out["confirmation"]["agreement"] = {"error": round(agree.error, 4), "disagrees": agree.disagrees,
                                                    "verdict_uses": agree.source}
        return out

    # ---- rendering ----------------------------------------------------------------------
    def sections(self) -> list[view.Section]:
        return view.sections(self)

    def chart_bars(self) -> list[Any]:
        """The stacked component bar of this estimate, with the measured peak as a marker."""
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
        html = view.html_of(self.sections())
        svg = self.chart_svg()
        return html + (f'<div class="memlint-chart">{svg}</div>' if svg else "")

    def __repr__(self) -> str:
        return view.text(self.sections())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.__repr__())

    def _ipython_display_(self) -> None:
        from IPython import get_ipython
        from IPython.display import display

        ip = get_ipython()
        if ip is not None and self._shown_in is not None and self._shown_in == ip.execution_count:
            return  # the magic already showed it (or was told -q) in this cell
        if ip is not None and type(ip).__name__ == "TerminalInteractiveShell":
            console = view.rich_console()  # a terminal: rich's colours
            for part in view.rich_parts(self.sections()):
                console.print(part)
            if self.estimate is not None:
                from memlint.report.chart import capacities_for, render_terminal

                render_terminal(self.chart_bars(), capacities_for(self.gpu[0] if self.gpu else None), console)
            return
        display({"text/plain": self.__repr__(), "text/html": self._repr_html_()}, raw=True)
