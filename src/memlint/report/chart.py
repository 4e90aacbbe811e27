"""The component chart: one stacked bar per configuration (weights, gradients, optimizer, activations, logits,
overhead) against GPU capacities, drawn with matplotlib (png/svg, or SVG text for a notebook) or with rich in a
terminal."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from memlint.errors import MemlintError
from memlint.estimate import COMPONENTS, GIB, Estimate, Setup
from memlint.gpu import MIN_HEADROOM

# One colour per component everywhere (png, svg, terminal). Weights blue and optimizer
# yellow follow the seed article's figure.
COLOURS = {
    "weights": "#4C72B0",
    "gradients": "#DD8452",
    "optimizer": "#E8C547",
    "activations": "#55A868",
    "logits": "#8172B3",
    "overhead": "#A5A5A5",
}
TERMINAL_COLOURS = {
    "weights": "#4C72B0",
    "gradients": "#DD8452",
    "optimizer": "#E8C547",
    "activations": "#55A868",
    "logits": "#8172B3",
    "overhead": "grey50",
}
# What the seed article draws when no GPU is named: a 24 GB consumer card and an H100.
DEFAULT_CAPACITIES = ("RTX4090", "H100-80GB")
PLOT_EXTRA = "pip install 'torch-memlint[plot]'"


@dataclass(frozen=True)
class Bar:
    """One configuration: its components in bytes and its peak.

    In the real accounting the peak is the largest live total over the step's phases
    plus overhead, so it can differ from the components' sum; both are drawn.
    """

    label: str
    components: Mapping[str, int]
    peak: int
    measured: int | None = None   # a measured peak (max_memory_allocated + context), drawn as a marker
    suggested: bool = False       # an alternative memlint computed, not the user's configuration
    setup: Mapping[str, Any] = field(default_factory=dict)
    beyond: str = ""              # what the peak holds beyond the buckets: "recomputed layer (eager attention)"

    @property
    def total(self) -> int:
        return sum(self.components[c] for c in COMPONENTS)


def bar_from_estimate(est: Estimate, label: str | None = None, *, suggested: bool = False,
                      measured: int | None = None) -> Bar:
    s = est.setup
    return Bar(label or short_label(s), {c: est.bytes(c) for c in COMPONENTS}, est.peak, measured, suggested,
               {"method": s.method, "quant": s.quant, "batch": s.batch, "seq": s.seq, "grad_accum": s.grad_accum,
                "recompute": s.recompute, "precision": s.precision, "optim": s.optim}, beyond_buckets(est))


def beyond_buckets(est: Estimate) -> str:
    """The terms the peak holds beyond the buckets, by name (estimate.core.peak_terms): 'recomputed layer
    (eager attention)', 'logits in backward'; empty when the buckets hold the whole peak."""
    names = [label + (" (eager attention)" if "eager attention" in words else "")
             for label, b, words in getattr(est, "peak_terms", ()) if b > 0]
    return ", ".join(names)


def _beyond_legend(bars: Sequence[Bar]) -> str:
    names = list(dict.fromkeys(n for b in bars if b.peak > b.total and b.beyond for n in b.beyond.split(", ")))
    return "at the peak: " + ", ".join(names) if names else "peak beyond the buckets"


def short_label(s: Setup) -> str:
    name = {"full": "full", "lora": f"LoRA r={s.lora_r}", "qlora": f"QLoRA r={s.lora_r} {s.quant}"}[s.method]
    parts = [name, f"{s.batch} × {s.seq}"]
    if s.grad_accum > 1:
        parts.append(f"accum {s.grad_accum}")
    if s.recompute:
        parts.append("recompute")
    return ", ".join(parts)


def alternatives(est: Estimate, capacities: Sequence[tuple] = (), min_headroom: float = MIN_HEADROOM) -> list[tuple[str, Estimate]]:
    """The alternatives memlint suggests, each estimated (memlint.estimate.levers, the same levers as
    MEM101's advice): every lever alone, the levers stacked (QLoRA with recompute, ...), the cheapest
    set that fits each GPU drawn, and the largest micro-batch each GPU fits. None is worse than the
    configuration itself: an alternative that holds as much memory is left out (the largest micro-batch
    is the exception: it spends the room on throughput, and says so)."""
    from memlint.estimate.levers import cheapest, largest_batch_option, singles, stacked

    s, acc = est.setup, est.accounting
    base = est.peak + est.paged_optimizer
    found: list[tuple[str, object]] = [("+ " + o.short, o) for o in singles(s, acc)]
    found += [("+ " + o.short, o) for o in stacked(s, acc)]
    gpus = [g for g in capacities if len(g) >= 2]
    for g in gpus:
        o = cheapest(s, _as_gpu(g), acc, min_headroom)
        if o is not None and o.steps:
            found.append((f"fits {g[0]}: " + o.short, o))
    shown: dict[tuple, list] = {_key(s): ["", est]}
    for label, o in found:
        if o.estimate.paged_optimizer and not est.paged_optimizer:
            label += f" ({o.estimate.paged_optimizer / GIB:.1f} GiB paged)"  # held beside the peak drawn
        k = _key(o.setup)
        if k in shown and label.startswith("fits "):
            shown[k][0] = label  # the cheapest set that fits a GPU keeps its place and says so
        elif o.held < base and k not in shown:
            shown[k] = [label, o.estimate]
    for g in gpus:
        o = largest_batch_option(s, _as_gpu(g), acc, min_headroom)
        if o is not None and _key(o.setup) not in shown and o.setup.batch > s.batch:
            shown[_key(o.setup)] = [f"largest on {g[0]}: " + o.short, o.estimate]
    return [(label, e) for label, e in list(shown.values())[1:]]


def _key(s: Setup) -> tuple:
    """A configuration's identity (the model is the same throughout)."""
    from dataclasses import fields

    return tuple(getattr(s, f.name) for f in fields(s) if f.name != "model")


def _as_gpu(g: tuple):
    from memlint.gpu import Gpu, find_gpu

    return g if isinstance(g, Gpu) else find_gpu(g[0]) if len(g) == 2 else Gpu(*g)


def bars_for(est: Estimate, context_bytes: int | None = None, *, compare: bool = False,
             label: str | None = None, measured: int | None = None, capacities: Sequence[tuple] = (),
             min_headroom: float = MIN_HEADROOM) -> list[Bar]:
    """The configuration's bar, then (with compare) one bar per suggested alternative, each
    estimated in the same accounting (`context_bytes` is kept for callers; every front door
    estimates with memlint.gpu's one CUDA context)."""
    bars = [bar_from_estimate(est, label, measured=measured)]
    if compare:
        for alt_label, alt_est in alternatives(est, capacities, min_headroom):
            bars.append(bar_from_estimate(alt_est, alt_label, suggested=True))
    return bars


def capacities_for(gpu: str | None) -> list[tuple[str, int]]:
    from memlint.gpu import find_gpu

    names = [gpu] if gpu else list(DEFAULT_CAPACITIES)
    return [(g.label, g.total) for g in map(find_gpu, names)]


def chart_data(bars: Sequence[Bar], capacities: Sequence[tuple[str, int]]) -> dict[str, Any]:
    """The chart as plain data, bytes throughout: what the drawings and docs/seed_chart.json hold."""
    return {
        "components": list(COMPONENTS),
        "bars": [{"label": b.label, "components": dict(b.components), "peak": b.peak, "measured": b.measured,
                  "suggested": b.suggested, "setup": dict(b.setup), "beyond": b.beyond} for b in bars],
        "capacities": [{"label": label, "bytes": total} for label, total in capacities],
    }


def _with_measured(bars: Sequence[Bar], measured: int | Mapping[str, int] | None) -> list[Bar]:
    if measured is None:
        return list(bars)
    from dataclasses import replace

    if isinstance(measured, int):
        return [replace(bars[0], measured=measured), *bars[1:]]
    return [replace(b, measured=measured.get(b.label, b.measured)) for b in bars]


def figure(bars: Sequence[Bar], capacities: Sequence[tuple[str, int]], measured: int | Mapping[str, int] | None = None,
           title: str | None = None):
    """A matplotlib Figure (no pyplot, so no global state and no display backend)."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        raise MemlintError(f"the chart needs matplotlib: {PLOT_EXTRA}") from None
    if not bars:
        raise MemlintError("nothing to draw: no configuration has an estimate")
    bars = _with_measured(bars, measured)
    n = len(bars)
    fig = Figure(figsize=(10, 1.6 + 0.62 * n), layout="constrained")
    ax = fig.add_subplot()
    ys = list(range(n))
    xmax = max([b.total / GIB for b in bars] + [b.peak / GIB for b in bars] + [b.measured / GIB for b in bars
                if b.measured] + [total / GIB for _, total in capacities])
    transient = False
    for y, b in zip(ys, bars):
        left = 0.0
        alpha = 0.7 if b.suggested else 1.0
        for name in COMPONENTS:
            w = b.components[name] / GIB
            if w <= 0:
                continue
            ax.barh(y, w, left=left, height=0.62, color=COLOURS[name], alpha=alpha, edgecolor="white", linewidth=0.6)
            if w >= 0.07 * xmax:
                ax.text(left + w / 2, y, f"{w:.1f}", ha="center", va="center", fontsize=8, color="white")
            left += w
        if b.peak / GIB > left:
            # Live only at the peak phase and in no bucket: optimizer-step temporaries,
            # the logits' gradient in the backward pass.
            transient = True
            ax.barh(y, b.peak / GIB - left, left=left, height=0.62, color="none", edgecolor="#777777",
                    hatch="///", linewidth=0.6)
        end = max(left, b.peak / GIB)
        ax.plot([b.peak / GIB] * 2, [y - 0.38, y + 0.38], color="black", linewidth=1.6)
        ax.annotate(f"peak {b.peak / GIB:.1f}", (end, y), xytext=(5, 0), textcoords="offset points",
                    va="center", fontsize=9, zorder=6, bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0})
        if b.measured is not None:
            ax.plot(b.measured / GIB, y, marker="D", color="#C44E52", markersize=7, zorder=5)
            ax.annotate(f"measured {b.measured / GIB:.1f}", (b.measured / GIB, y + 0.31), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8, color="#C44E52")
    for i, (label, total) in enumerate(sorted(capacities, key=lambda c: c[1])):
        x = total / GIB
        ax.axvline(x, color="#444444", linestyle="--", linewidth=1.1)
        # Labels sit above the plot; alternating heights keep close capacities readable.
        ax.annotate(f"{label} {x:.1f} GiB", (x, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 3 + 11 * (i % 2)),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8.5, color="#333333")
    ax.set_xlim(0, xmax * 1.16)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_yticks(ys, [b.label for b in bars], fontsize=9)
    for tick, b in zip(ax.get_yticklabels(), bars):
        if b.suggested:
            tick.set_fontstyle("italic")
            tick.set_color("#555555")
    ax.set_xlabel("GiB per GPU (2^30 bytes)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="x", color="#E5E5E5", linewidth=0.6)
    ax.set_axisbelow(True)
    handles = [Patch(color=COLOURS[c], label=c) for c in COMPONENTS]
    if transient:
        handles.append(Patch(facecolor="none", edgecolor="#777777", hatch="///", label=_beyond_legend(bars)))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False, fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10.5, x=0.01, ha="left")
    return fig


def _save(fig, target, fmt: str) -> None:
    import matplotlib

    # Fixed ids and no timestamps so the same chart gives the same file.
    with matplotlib.rc_context({"svg.hashsalt": "memlint", "svg.fonttype": "none"}):
        meta = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(target, format=fmt, dpi=150, metadata=meta)


def chart_svg(bars: Sequence[Bar], capacities: Sequence[tuple[str, int]],
              measured: int | Mapping[str, int] | None = None, title: str | None = None) -> str:
    """SVG text a notebook's HTML result can embed."""
    buf = io.StringIO()
    _save(figure(bars, capacities, measured, title), buf, "svg")
    return buf.getvalue()


def write_chart(path: str | Path, bars: Sequence[Bar], capacities: Sequence[tuple[str, int]],
                measured: int | Mapping[str, int] | None = None, title: str | None = None) -> Path:
    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise MemlintError(f"--plot {path}: the file name must end in .png or .svg")
    fig = figure(bars, capacities, measured, title)
    try:
        _save(fig, p, fmt)
    except OSError as exc:
        raise MemlintError(f"--plot {path}: cannot write: {exc.strerror or exc}") from None
    return p


# Without colour every component still reads apart: one fill character each (the legend says which).
FILLS = {"weights": "█", "gradients": "▓", "optimizer": "▒", "activations": "░", "logits": "▚", "overhead": "·"}
BEYOND = "╌"  # the peak beyond the buckets (live only at the peak phase)


def render_terminal(bars: Sequence[Bar], capacities: Sequence[tuple[str, int]], console, width: int | None = None) -> None:
    """The same chart with block characters, as wide as the terminal: one stacked row per bar, one
    fill character per component (readable without colour), ╌ for the peak beyond the buckets, ┆ at
    each capacity (┃ where a bar crosses it), ◆ at a measured peak. Labels are never cut: where the
    longest does not fit beside a bar, each label goes on its own line above its bar."""
    from rich.text import Text

    if not bars:
        return
    label_w = max(len(b.label) for b in bars)
    tail = 10 + max((len(f" (measured {b.measured / GIB:.1f})") for b in bars if b.measured is not None), default=0)
    room = console.width - tail - 1
    above = width is None and room - label_w - 1 < 24  # too narrow for labels beside the bars
    if width is None:
        width = max(20, room if above else room - label_w - 1)
    top = max([b.total for b in bars] + [b.peak for b in bars] + [t for _, t in capacities])
    scale = width / top

    def col(n: int) -> int:
        return min(width - 1, int(round(n * scale)))

    marks = sorted({col(t) for _, t in capacities})
    for b in bars:
        cells: list[tuple[str, str]] = []
        acc = 0
        # Rounded at the running total, so the bar's length is its total's, not the sum of rounded parts.
        for name in COMPONENTS:
            acc += b.components[name]
            cells += [(FILLS[name], TERMINAL_COLOURS[name])] * (int(round(acc * scale)) - len(cells))
        cells += [(BEYOND, "grey50")] * max(0, int(round(b.peak * scale)) - len(cells))
        cells = cells[:width]
        cells += [(" ", "")] * (width - len(cells))
        for c in marks:
            ch, style = cells[c]
            cells[c] = ("┆", "bold") if ch == " " else ("┃", f"bold white on {style}")
        if b.measured is not None:
            cells[col(b.measured)] = ("◆", "bold red")
        style = "italic dim" if b.suggested else ""
        if above:
            console.print(Text(b.label, style=style), no_wrap=True, overflow="ignore")
            line = Text()
        else:
            line = Text(f"{b.label:<{label_w}} ", style=style)
        for ch, st in cells:
            line.append(ch, style=st)
        line.append(f" {b.peak / GIB:6.1f} GiB")
        if b.measured is not None:
            line.append(f" (measured {b.measured / GIB:.1f})", style="red")
        console.print(line, no_wrap=True, overflow="ignore")
    console.print(Text("  ".join(f"┆ {label} {t / GIB:.1f} GiB" for label, t in capacities), style="dim"))
    legend = Text()
    for name in COMPONENTS:
        legend.append(FILLS[name] + " ", style=TERMINAL_COLOURS[name])
        legend.append(name + " ")
    if any(b.peak > b.total for b in bars):
        legend.append(BEYOND + " ", style="grey50")
        legend.append(_beyond_legend(bars))
    console.print(legend)
