"""An Estimate as the JSON document and the rich table that `memlint estimate` prints."""

from __future__ import annotations

from typing import Any, Mapping

from memlint.estimate import GIB, Estimate, estimate, find_gpu, gpus, max_batch, max_seq
from memlint.report import markup
from memlint.vocab import gib


def gpu_targets(gpu: str | None) -> list[tuple[str, int, int]]:
    if gpu:
        return [find_gpu(gpu)]
    return [(label, g["total_bytes"], g["context_bytes"]) for label, g in gpus().items()]


def verdicts(est: Estimate, targets) -> tuple[dict[str, bool], dict[str, int]]:
    s, acc = est.setup, est.accounting
    fit: dict[str, bool] = {}
    best: dict[str, int] = {}
    for label, total, ctx in targets:
        e = estimate(s, acc, ctx) if acc == "real" else est
        fit[label] = e.peak <= total
        best[label] = max_batch(s, acc, total, ctx)
    return fit, best


def to_json(est: Estimate, targets) -> dict[str, Any]:
    fit, best = verdicts(est, targets)
    doc = {
        "model": {"id": est.setup.model.id, "params": est.setup.model.params,
                  "trainable_params": est.trainable_params},
        "components": {name: c.bytes for name, c in est.components.items()},  # + "buffers" on many GPUs
        "peak": est.peak,
        "paged_optimizer": est.paged_optimizer,
        "fits": fit,
        "max_batch": best,
        "assumptions": list(est.assumptions),
    }
    if est.ranks > 1:  # every figure above is per GPU (rank)
        doc["per_rank"] = {"gpus": est.ranks, "nodes": est.setup.nodes, "shard": est.setup.shard,
                           "offload": est.setup.offload}
    return doc


def describe(est: Estimate) -> str:
    s = est.setup
    parts = [s.method]
    if s.method != "full":
        t = s.lora_targets if isinstance(s.lora_targets, str) else ",".join(s.lora_targets)
        parts.append(f"r={s.lora_r} on {t}")
    if s.quant != "none":
        parts.append(s.quant + (" double-quant" if s.double_quant and s.quant != "int8" else ""))
    parts += [f"{s.dtype} weights", s.precision, s.optim, f"micro-batch {s.batch} × {s.seq}"]
    if s.grad_accum > 1:
        parts.append(f"accumulation {s.grad_accum}")
    parts.append("recompute" if s.recompute else "no recompute")
    parts.append(s.attn)
    if s.gpus > 1:
        engine = "DDP" if s.shard == "none" else s.shard
        nodes = f" over {s.nodes} nodes" if s.nodes > 1 else ""
        offload = f" offload {s.offload}" if s.offload != "none" else ""
        parts.append(f"per GPU (rank) of {s.gpus}{nodes}, {engine}{offload}")
    return ", ".join(parts)


def render(est: Estimate, targets, console, extra: Mapping[str, int] | None = None) -> None:
    from rich.table import Table

    m = est.setup.model
    console.print(f"[bold]{markup(m.id)}[/bold]  {m.params:,} params, {est.trainable_params:,} trainable "
                  f"([dim]{m.source}[/dim])")
    console.print(f"{markup(describe(est))}  [dim]accounting: {est.accounting}[/dim]")
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("component")
    table.add_column("GiB / GPU" if est.ranks == 1 else f"GiB per GPU (rank) of {est.ranks}", justify="right")
    table.add_column("how", overflow="fold")
    for name, c in est.components.items():
        table.add_row(name, gib(c.bytes), markup(c.formula))
    if est.paged_optimizer:
        table.add_row("[dim]paged optimizer[/dim]", f"[dim]{gib(est.paged_optimizer)}[/dim]",
                      "[dim]unified memory, not in the peak[/dim]")
    phase = "" if est.peak_phase == "sum" else f" (at the {est.peak_phase} phase)"
    table.add_row("[bold]peak[/bold]", f"[bold]{gib(est.peak)}[/bold]", f"largest live total{phase} + overhead"
                  if est.accounting == "real" else "sum of the components")
    console.print(table)
    fit, best = verdicts(est, targets)
    rows = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    rows.add_column("GPU")
    rows.add_column("GiB", justify="right")
    rows.add_column("fits", justify="center")
    rows.add_column("max micro-batch", justify="right")
    if len(targets) == 1:
        rows.add_column(f"max seq at batch {est.setup.batch}", justify="right")
    for label, total, ctx in targets:
        cells = [markup(label), gib(total), "[green]yes[/green]" if fit[label] else "[red]no[/red]", str(best[label])]
        if len(targets) == 1:
            cells.append(str(max_seq(est.setup, est.accounting, total, ctx)))
        rows.add_row(*cells)
    console.print(rows)
    for note in est.assumptions:
        console.print(f"[dim]- {markup(note)}[/dim]")
