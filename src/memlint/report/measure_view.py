"""`memlint measure`'s output: the measured step beside the estimate, component by component."""

from __future__ import annotations

from typing import Any

from memlint.estimate import Estimate
from memlint.vocab import COMPONENTS, gib


def _judged(doc: dict) -> int | None:
    """The measured allocated peak a verdict weighs against the estimate: a trace's or a CPU run's (a CUDA run's own
    figure is reported as measured, its verdict is the allocator's)."""
    return None if doc["method"] == "cuda-allocator" else doc["measured_peak"]


def _fits(est: Estimate, doc: dict, targets, min_headroom: float) -> dict[str, Any]:
    from memlint.gpu import fit_reconciled

    out = {}
    for g in targets:
        f = fit_reconciled(est, _judged(doc), g, min_headroom)
        out[g.label] = {"verdict": "unsupported" if f.missing else f.status, "free": f.free, "peak": f.peak}
    return out


def agreement(est: Estimate, doc: dict) -> dict[str, Any]:
    """The estimate's allocated peak against the measured one, and what the verdict judges (gpu.reconcile)."""
    from memlint.gpu import DISAGREEMENT, reconcile

    r = reconcile(est, doc["measured_peak"])
    judged = _judged(doc) is not None
    return {"error": round(r.error, 4), "disagrees": r.disagrees, "threshold": DISAGREEMENT,
            "verdict_uses": (r.source if judged else "estimate"), "message": r.words(_what(doc)) if judged else
            (f"the CUDA run and the estimate disagree by {r.error:+.1%}" if r.disagrees else "")}


def _what(doc: dict) -> str:
    return "trace" if doc["method"] == "fake-tensor-trace" else "CPU run"


def to_json(setup: Any, doc: dict, est: Estimate, targets=(), min_headroom: float = 0.10) -> dict:
    return {
        "model": {"id": setup.model.id, "params": setup.model.params, "trainable_params": est.trainable_params},
        "components": doc["components"],
        "peak": est.peak,
        "paged_optimizer": est.paged_optimizer,
        "measured_peak": doc["measured_peak"],
        "phase": doc["phase"],
        "device": doc["device"],
        "method": doc["method"],
        "steps": doc["steps"],
        "estimate": {"components": {k: est.bytes(k) for k in COMPONENTS}, "allocated_peak": est.allocated_peak,
                     "reserved_peak": est.reserved_peak, "phase": est.peak_phase, "accounting": est.accounting},
        "reserved": doc.get("reserved"),
        "fits": _fits(est, doc, targets, min_headroom),
        "agreement": agreement(est, doc),
        "notes": doc.get("notes", []),
    }


def render(setup: Any, doc: dict, est: Estimate, console, targets=(), min_headroom: float = 0.10) -> None:
    from rich.table import Table

    traced = doc["method"] == "fake-tensor-trace"
    console.print(f"[bold]{setup.model.id}[/bold]  measured on {doc['device']}"
                  + ("  [yellow](no CUDA: traced on CPU with FakeTensorMode, no real memory used)[/yellow]" if traced else ""))
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col, just in (("component", "left"), ("measured GiB", "right"), ("estimate GiB", "right")):
        t.add_column(col, justify=just)
    for name in COMPONENTS:
        t.add_row(name, gib(doc["components"][name]), gib(est.bytes(name)))
    err = (est.allocated_peak - doc["measured_peak"]) / doc["measured_peak"]
    t.add_row("[bold]allocated peak[/bold]", f"[bold]{gib(doc['measured_peak'])}[/bold]",
              f"[bold]{gib(est.allocated_peak)}[/bold] ({err:+.1%})")
    res = doc.get("reserved")
    if res:
        rerr = (est.reserved_peak - res["peak"]) / res["peak"]
        how = " (allocator model)" if res["method"] == "allocator-model" else ""
        t.add_row(f"[bold]reserved peak[/bold]{how}", f"[bold]{gib(res['peak'])}[/bold]",
                  f"[bold]{gib(est.reserved_peak)}[/bold] ({rerr:+.1%})")
        if "expandable_segments" in res:
            t.add_row("[dim]reserved, expandable_segments:True[/dim]", f"[dim]{gib(res['expandable_segments']['peak'])}[/dim]",
                      "")
    console.print(t)
    reserved_steps = {r["step"]: r["phases"] for r in res["steps"]} if res else {}
    for s in doc["steps"]:
        phases = ", ".join(f"{k} {gib(v)}" + (f" / {gib(reserved_steps[s['step']][k])} reserved"
                                              if s["step"] in reserved_steps else "") for k, v in s["phases"].items())
        console.print(f"step {s['step']}: peak {gib(s['peak'])} GiB at {s['phase']} ({phases})")
    if est.accounting != "real":
        console.print(f"[dim]estimate in the {est.accounting} accounting[/dim]")
    from memlint.gpu import fit_reconciled

    agree = agreement(est, doc)
    if agree["message"]:
        console.print(f"[bold yellow]warning:[/bold yellow] {agree['message']}")
    for g in targets:
        f = fit_reconciled(est, _judged(doc), g, min_headroom)
        which = "estimated" if agree["verdict_uses"] == "estimate" else f"{_what(doc)} (larger)"
        console.print(f"{which} peak {gib(f.peak)} GiB on {g.label} ({gib(g.total)} GiB): {f.text()}")
    for note in doc.get("notes", []):
        console.print(f"[dim]- {note}[/dim]")
