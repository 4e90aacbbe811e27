"""What several commands share: the console, the chart flags (`--plot`, `--compare`) and their output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from memlint.errors import MemlintError

if TYPE_CHECKING:
    from memlint.estimate import Estimate


def console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, emoji=False)


def min_headroom() -> float:
    """The headroom `[tool.memlint]` of the working directory sets (MEM102's min-headroom), as check uses it."""
    from memlint.config import load_settings

    return load_settings(Path.cwd()).min_headroom


def add_chart_flags(p) -> None:
    p.add_argument("--plot", metavar="PATH", help="draw the chart to PATH (.png or .svg): one stacked bar of the "
                                                  "components (weights, gradients, optimizer, activations, logits, "
                                                  "overhead) against the GPUs' memory; needs the plot extra "
                                                  "(pip install 'torch-memlint[plot]')")
    p.add_argument("--compare", action="store_true",
                   help="add bars for the alternatives memlint suggests: each lever alone (recompute, fused "
                        "cross-entropy, 8-bit/paged optimizer, activation offloading, smaller micro-batch, LoRA/QLoRA), "
                        "stacked, the cheapest set that fits each GPU and the largest micro-batch it fits")


def check_chart_flags(args) -> None:
    """Bad --plot usage fails before any work is printed."""
    import importlib.util

    plot = getattr(args, "plot", None)
    if not plot:
        return
    if Path(plot).suffix.lower() not in (".png", ".svg"):
        raise MemlintError(f"--plot {plot}: the file name must end in .png or .svg")
    from memlint.report.chart import PLOT_EXTRA

    if importlib.util.find_spec("matplotlib") is None:
        raise MemlintError(f"--plot needs matplotlib: {PLOT_EXTRA}")


def emit_chart(args, estimates: Sequence[tuple[str | None, "Estimate"]], console, terminal: bool = True) -> None:
    """`--plot` / `--compare` for estimate and plan: the terminal chart and the file. The
    alternatives (memlint.estimate.levers) include the cheapest set that fits each GPU drawn."""
    from memlint.report.chart import bars_for, capacities_for, render_terminal, write_chart

    if not (getattr(args, "plot", None) or getattr(args, "compare", False)):
        return
    check_chart_flags(args)
    capacities = capacities_for(getattr(args, "gpu", None))
    headroom = min_headroom()
    bars: list = []
    for label, est in estimates:
        bars += bars_for(est, compare=args.compare, label=label, capacities=capacities, min_headroom=headroom)
    if not bars:
        return
    if terminal:
        console.print()
        render_terminal(bars, capacities, console)
    if args.plot:
        title = ", ".join(dict.fromkeys(est.setup.model.id for _, est in estimates)) + f"  ({estimates[0][1].accounting} accounting)"
        write_chart(args.plot, bars, capacities, title=title)
        print(f"memlint: chart written to {args.plot}", file=sys.stderr)


def add_online_flag(p) -> None:
    p.add_argument("--online", action="store_true", default=None,
                   help="look a model id memlint does not know up on the Hugging Face Hub: only its config.json is "
                        "fetched (huggingface_hub, into the HF cache), never code (default: offline; online = true in "
                        "[tool.memlint])")


def go_online(args, settings=None) -> None:
    """--online or [tool.memlint] online: the Hub lookup for unknown model ids (catalog/online.py), for this run."""
    if settings is None:
        from memlint.config import load_settings

        settings = load_settings(Path.cwd())
    if getattr(args, "online", None) or settings.online:
        from memlint.catalog import online

        online.enable(True)
