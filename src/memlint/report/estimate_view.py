"""An Estimate as the JSON document and the rich table that `memlint estimate` prints."""

from __future__ import annotations

from typing import Any, Mapping

from memlint.estimate import Estimate
from memlint.estimate.levers import largest_batch, longest_seq
from memlint.gpu import MIN_HEADROOM, Fit, Gpu, common_gpus, find_gpu, fit_of
from memlint.report import markup
from memlint.vocab import gib


def gpu_targets(gpu: str | None) -> list[Gpu]:
    if gpu:
        return [find_gpu(gpu)]
    return common_gpus()


def verdicts(est: Estimate, targets, min_headroom: float = MIN_HEADROOM) -> tuple[dict[str, Fit], dict[str, int]]:
    """Per GPU: the fit (memlint.gpu's one notion: fits, tight, over, unsupported) and the largest
    micro-batch that fits with the headroom."""
    fit: dict[str, Fit] = {}
    best: dict[str, int] = {}
    for g in targets:
        fit[g.label] = fit_of(est, g, min_headroom)
        best[g.label] = largest_batch(est.setup, g, est.accounting, min_headroom) if not fit[g.label].missing else 0
    return fit, best


def to_json(est: Estimate, targets, min_headroom: float = MIN_HEADROOM) -> dict[str, Any]:
    fit, best = verdicts(est, targets, min_headroom)
    doc = {
        "model": {"id": est.setup.model.id, "params": est.setup.model.params,
                  "trainable_params": est.trainable_params,
                  **({"assumed_from": est.setup.model.assumed_from} if est.setup.model.assumed_from else {})},
        "components": {name: c.bytes for name, c in est.components.items()},  # + "buffers" on many GPUs
        "peak": est.peak,
        "allocated_peak": est.allocated_peak,  # torch.cuda.max_memory_allocated()
        "reserved_peak": est.reserved_peak,    # torch.cuda.max_memory_reserved()
        "paged_optimizer": est.paged_optimizer,
        # what the allocated peak holds beyond the components (signed): components + these = allocated_peak
        "peak_terms": [{"name": label, "bytes": b, "how": words} for label, b, words in getattr(est, "peak_terms", ())],
        "fits": {label: f.ok for label, f in fit.items()},  # with the headroom, on a GPU that can run it
        "verdict": {label: ("unsupported" if f.missing else f.status) for label, f in fit.items()},
        "free": {label: f.free for label, f in fit.items()},
        "min_headroom": min_headroom,
        "max_batch": best,
        "assumptions": list(est.assumptions),
    }
    if est.ranks > 1:  # every figure above is per GPU (rank)
        s = est.setup
        doc["per_rank"] = {"gpus": est.ranks, "nodes": s.nodes, "shard": s.shard, "offload": s.offload}
        if s.tp * s.cp > 1:
            doc["per_rank"].update(dp=s.dp, tp=s.tp, sequence_parallel=s.sequence_parallel, cp=s.cp,
                                   tp_stack=s.tp_stack)
    return doc


def describe(est: Estimate) -> str:
    s = est.setup
    parts = [s.method]
    if s.method != "full":
        t = s.lora_targets if isinstance(s.lora_targets, str) else ",".join(s.lora_targets)
        parts.append(f"r={s.lora_r} on {t}")
    if s.quant != "none":
        parts.append(s.quant + (" double-quant" if s.double_quant and s.quant in ("nf4", "fp4") else "")
                     + (f" group {s.quant_group_size}" if s.quant in ("gptq", "awq") else "")
                     + (f" {s.quant_bits}-bit group {s.quant_group_size}" if s.quant == "hqq" else ""))
    parts += [f"{s.dtype} weights", s.precision, s.optim, f"micro-batch {s.batch} × {s.seq}"]
    if s.float8 != "none":
        parts.append(f"float8 linears ({s.float8})")
    if s.grad_accum > 1:
        parts.append(f"accumulation {s.grad_accum}")
    parts.append(("recompute" + (" (op-level SAC)" if s.recompute_policy == "op-sac" else
                                 f" every {s.recompute_every}th layer" if s.recompute_every > 1 else ""))
                 if s.recompute else "no recompute")
    parts.append(s.attn)
    if s.gpus > 1:
        engine = ("DDP" if s.dp > 1 else "no data parallel") if s.shard == "none" else s.shard
        if s.tp > 1:
            engine += f", TP {s.tp}" + (" + SP" if s.sequence_parallel or s.tp_stack == "torchtitan" else "") \
                + f" ({s.tp_stack})"
        if s.cp > 1:
            engine += f", CP {s.cp}"
        nodes = f" over {s.nodes} nodes" if s.nodes > 1 else ""
        offload = f" offload {s.offload}" if s.offload != "none" else ""
        parts.append(f"per GPU (rank) of {s.gpus}{nodes}, {engine}{offload}")
    return ", ".join(parts)


def render(est: Estimate, targets, console, extra: Mapping[str, int] | None = None,
           min_headroom: float = MIN_HEADROOM) -> None:
    from rich.table import Table

    m = est.setup.model
    source = (f"catalog, assumed from the name of {m.assumed_from}" if m.source in ("named-base", "named-variant") else
              f"catalog, the Hugging Face twin of {m.assumed_from}" if m.source == "hub-twin" else
              f"catalog, assumed from the size the name {m.assumed_from} gives" if m.source == "size-name" else
              f"catalog, assumed from the folder name of {m.assumed_from}") if m.assumed_from else m.source
    params = m.params
    if est.setup.encoder:  # with the task head the script loads
        from memlint.estimate.model_state import encoder_spec

        params = encoder_spec(m, est.setup.head, est.setup.num_labels).params
    console.print(f"[bold]{markup(m.id)}[/bold]  {params:,} params, {est.trainable_params:,} trainable "
                  f"([dim]{markup(source)}[/dim])")
    console.print(f"{markup(describe(est))}  [dim]accounting: {est.accounting}[/dim]")
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("component")
    table.add_column("GiB / GPU" if est.ranks == 1 else f"GiB per GPU (rank) of {est.ranks}", justify="right")
    table.add_column("how", overflow="fold")
    # The rows add up: the components, what the peak phase holds beyond them (or without them), the
    # allocated peak; then the overhead and the peak.
    for name, c in est.components.items():
        if name != "overhead" or est.accounting != "real":
            table.add_row(name, gib(c.bytes), markup(c.formula))
    for label, b, words in getattr(est, "peak_terms", ()):
        table.add_row(f"{'+' if b > 0 else '−'} {markup(label)}", gib(abs(b)), f"[dim]{markup(words)}[/dim]")
    if est.paged_optimizer:
        table.add_row("[dim]paged optimizer[/dim]", f"[dim]{gib(est.paged_optimizer)}[/dim]",
                      "[dim]unified memory, not in the peak[/dim]")
    phase = "" if est.peak_phase == "sum" else f" (at the {est.peak_phase} phase)"
    if est.accounting == "real":
        table.add_row("allocated peak", gib(est.allocated_peak), f"largest live total{phase}: max_memory_allocated")
        c = est.components["overhead"]
        table.add_row("overhead", gib(c.bytes), markup(c.formula))
    table.add_row("[bold]peak[/bold]", f"[bold]{gib(est.peak)}[/bold]", "allocated peak + overhead"
                  if est.accounting == "real" else "sum of the components")
    if est.accounting == "real":
        table.add_row("[dim]reserved peak[/dim]", f"[dim]{gib(est.reserved_peak)}[/dim]",
                      "[dim]peak − the CUDA context: max_memory_reserved[/dim]")
    console.print(table)
    fit, best = verdicts(est, targets, min_headroom)
    rows = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    rows.add_column("GPU")
    rows.add_column("GiB", justify="right")
    rows.add_column("fits", justify="center")
    rows.add_column("free GiB", justify="right")
    rows.add_column("max micro-batch", justify="right")
    if len(targets) == 1:
        rows.add_column(f"max seq at batch {est.setup.batch}", justify="right")
    colour = {"yes": "green", "tight": "yellow"}
    for g in targets:
        f = fit[g.label]
        word = f.verdict()
        cells = [markup(g.label), gib(g.total), f"[{colour.get(word, 'red')}]{word}[/]", gib(f.free), str(best[g.label])]
        if len(targets) == 1:
            cells.append(str(longest_seq(est.setup, g, est.accounting, min_headroom) if not f.missing else 0))
        rows.add_row(*cells)
    console.print(rows)
    console.print(f"[dim]fits: at least {min_headroom:.0%} of the GPU free (tight: less; no: over, or a capability "
                  "the GPU lacks)[/dim]")
    for note in est.assumptions:
        console.print(f"[dim]- {markup(note)}[/dim]")
