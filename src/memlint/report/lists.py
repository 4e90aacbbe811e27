"""`memlint estimate --list-gpus` and `--list-models`: what memlint knows, as a table or JSON."""

from __future__ import annotations

import json

from memlint.report import markup
from memlint.vocab import gib


def list_gpus(console, fmt: str = "table") -> None:
    """Every GPU of data/gpus.json, smallest first: its memory, what it can run, its names and the source."""
    from memlint.gpu import table

    rows = table()
    if fmt == "json":
        print(json.dumps([{"name": label, "bytes": g["total_bytes"], "bf16": g["bf16"],
                           "flash_attention_2": g["flash_attention_2"], "compute_capability": g.get("compute_capability"),
                           "aliases": g["aliases"], "common": g.get("common", True), "source": g.get("source")}
                          for label, g in rows.items()], indent=2))
        return
    from rich.table import Table

    t = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col, justify in (("GPU", "left"), ("GiB", "right"), ("bf16", "center"), ("FA2", "center"), ("cc", "right"),
                         ("also", "left"), ("source", "left")):
        t.add_column(col, justify=justify, overflow="fold" if col == "source" else None)
    for label, g in rows.items():
        yes = {True: "yes", False: "no"}
        t.add_row(markup(label) + ("" if g.get("common", True) else " [dim]·[/dim]"), gib(g["total_bytes"]),
                  yes[g["bf16"]], yes[g["flash_attention_2"]], g.get("compute_capability") or "",
                  markup(", ".join(g["aliases"])), f"[dim]{markup(g.get('source') or '')}[/dim]")
    console.print(t)
    console.print("[dim]GiB: 2^30 bytes, as the driver reports the memory; · not in the default table of "
                  "`memlint estimate` without --gpu; --gpu also takes a size in GiB (--gpu 24)[/dim]")


def list_models(console, fmt: str = "table") -> None:
    """The bundled catalog: each canonical id with its parameter count, family and aliases."""
    from memlint.catalog import entries

    rows = sorted(entries().items(), key=lambda kv: kv[0].lower())
    if fmt == "json":
        print(json.dumps([{"id": mid, "params": e["params"], "family": e.get("family"), "model_type": e.get("model_type"),
                           "aliases": e.get("aliases", []), "source": e.get("source")} for mid, e in rows], indent=2))
        return
    from rich.table import Table

    t = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col, justify in (("model", "left"), ("params", "right"), ("family", "left"), ("also", "left")):
        t.add_column(col, justify=justify, overflow="fold" if col == "also" else None)
    for mid, e in rows:
        also = e.get("aliases", [])
        t.add_row(markup(mid), f"{e['params'] / 1e9:,.2f}B", markup(e.get("family") or ""),
                  markup(", ".join(also[:3]) + (f" (+{len(also) - 3})" if len(also) > 3 else "")))
    console.print(t)
    console.print(f"[dim]{len(rows)} models in the bundled catalog (exact counts on the meta device, "
                  "scripts/gen_catalog.py); any local config.json or a model in the Hugging Face cache works too, and "
                  "--online fetches a config.json from the Hub[/dim]")
