"""docs/seed_chart.{png,json}: the four-bucket chart of the first seed article's three
configurations (Llama-3.1-8B full / LoRA / QLoRA at 1 × 2048), built from `memlint estimate` JSON.

Run: python scripts/seed_chart.py   (needs matplotlib: pip install 'torch-memlint[plot]')
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from memlint.cli import main
from memlint.report.chart import Bar, capacities_for, chart_data, write_chart

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MODEL = "meta-llama/Llama-3.1-8B"
# The article: mixed-precision AdamW with an fp32 master copy for full fine-tuning (16 B
# per parameter), LoRA r=16 on all seven linear layers, QLoRA NF4 with double quantization;
# micro-batch 1 × 2048, recompute on for LoRA and QLoRA only. Capacities: a 24 GB card and an H100.
COMMON = ["estimate", "--model", MODEL, "--batch", "1", "--seq", "2048", "--gpu", "H100-80GB", "--format", "json"]
CONFIGS = {
    "full, AdamW (fp32 master)": ["--method", "full", "--precision", "master-fp32"],
    "LoRA r=16, bf16 base, recompute": ["--method", "lora", "--lora-r", "16", "--recompute"],
    "QLoRA r=16, NF4 base, recompute": ["--method", "qlora", "--lora-r", "16", "--quant", "nf4", "--recompute"],
}
CAPACITIES = ("RTX4090", "H100-80GB")
ACCOUNTINGS = ("real", "textbook")


def argv_for(label: str, accounting: str) -> list[str]:
    return [*COMMON, *CONFIGS[label], "--accounting", accounting]


def estimate_json(argv: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"memlint {' '.join(argv)} exited {code}")
    return json.loads(out.getvalue())


def chart(accounting: str) -> tuple[list[Bar], dict]:
    bars = []
    commands = []
    for label in CONFIGS:
        argv = argv_for(label, accounting)
        doc = estimate_json(argv)
        bars.append(Bar(label, doc["components"], doc["peak"]))
        commands.append("memlint " + " ".join(argv))
    caps = [(name, total) for name in CAPACITIES for name, total in capacities_for(name)]
    data = chart_data(bars, caps)
    data["commands"] = commands
    return bars, data


def main_() -> int:
    docs = {"model": MODEL, "charts": {}}
    for accounting in ACCOUNTINGS:
        bars, data = chart(accounting)
        docs["charts"][accounting] = data
        suffix = "" if accounting == "real" else "_textbook"
        title = f"{MODEL}, micro-batch 1 × 2048: {accounting} accounting"
        write_chart(DOCS / f"seed_chart{suffix}.png", bars, [(c["label"], c["bytes"]) for c in data["capacities"]],
                    title=title)
    (DOCS / "seed_chart.json").write_text(json.dumps(docs, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {DOCS / 'seed_chart.png'}, seed_chart_textbook.png and seed_chart.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
