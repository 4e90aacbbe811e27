"""What `memlint check` says on stderr beside the report: the fit on common GPUs when no GPU is set."""

from __future__ import annotations

from typing import TextIO

from memlint.vocab import gib, printable


def fit_summary(results, out: TextIO, min_headroom: float | None = None) -> None:
    """Without a configured GPU: the fit on common GPUs (memlint.gpu's notion: with the headroom),
    per file, never failing."""
    from memlint.gpu import MIN_HEADROOM, common_gpus, fit_of

    headroom = MIN_HEADROOM if min_headroom is None else min_headroom
    shown = [r for r in results if r.context.estimate is not None]
    for r in shown[:10]:
        est = r.context.estimate
        ok = [(g.total, g.label) for g in common_gpus() if fit_of(est, g, headroom).ok]
        if ok:
            size, label = min(ok)
            where = f"smallest common GPU that fits: {label} ({gib(size, 1)} GiB)"
        else:
            where = "fits none of the common GPUs"
        per = f" per GPU of {est.setup.gpus}" if est.setup.gpus > 1 else ""
        out.write(f"{printable(r.plan.shown)}: peak {gib(est.peak, 1)} GiB{per}; {where} (pass --gpu to check one)\n")
    if len(shown) > 10:
        out.write(f"… and {len(shown) - 10} more files with an estimate (pass --gpu to check them)\n")
