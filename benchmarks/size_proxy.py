"""How far a model sized by the parameter count its name gives (catalog.spec.sized_by_name) lands from the model itself,
leave-one-out over the catalog: every dense decoder whose name gives its size is renamed to an organisation and family
the catalog does not know (`unknown-org/model-7b`), sized by the proxy with itself left out of the candidates, and its
estimated peak compared with its own, for a LoRA run (r16, all linear, bf16, micro-batch 1 × 2048, recompute) and a
full fine-tune (bf16 weights, fp32 AdamW, micro-batch 1 × 2048, recompute). Also: whether its own peak lies in the
range the other candidates give (the range every proxied estimate states).

    python benchmarks/size_proxy.py

No GPU, no network, a few seconds."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from memlint.catalog import spec as cat  # noqa: E402
from memlint.estimate import Setup, estimate  # noqa: E402

RUNS = {
    "lora": dict(method="lora", lora_r=16, lora_targets="all-linear", dtype="bf16", precision="amp-bf16", batch=1,
                 seq=2048, recompute=True),
    "full": dict(method="full", dtype="bf16", precision="amp-bf16", optim="adamw_torch", batch=1, seq=2048,
                 recompute=True),
}


def main() -> int:
    entries = cat.entries()
    rows = []
    for mid, e in sorted(entries.items()):
        size = cat.nominal_params(mid)
        if size is None or not cat._dense_decoder(e):
            continue
        others = [c for c in cat.size_candidates(f"unknown-org/x-{size / 1e9:g}b") if entries[c]["params"] != e["params"]]
        if not others:
            continue
        middle = others[(len(others) - 1) // 2]
        row = {"id": mid, "proxy": middle, "params": e["params"], "proxy_params": entries[middle]["params"]}
        for run, kw in RUNS.items():
            own = estimate(Setup(cat.spec_from_entry(mid, e), **kw)).peak
            peaks = [estimate(Setup(cat.spec_from_entry(c, entries[c]), **kw)).peak for c in others]
            prox = estimate(Setup(cat.spec_from_entry(middle, entries[middle]), **kw)).peak
            row[run] = (prox - own) / own
            row[run + "_in_range"] = min(peaks) <= own <= max(peaks)
        rows.append(row)
    print(f"{len(rows)} catalogued dense decoders named with their size, each sized by the others of that size")
    print(f"{'model':44s} {'proxy':40s} {'params':>7s} {'LoRA peak':>9s} {'full peak':>9s}")
    for r in rows:
        print(f"{r['id']:44s} {r['proxy']:40s} {100 * (r['proxy_params'] - r['params']) / r['params']:+6.1f}% "
              f"{100 * r['lora']:+8.1f}% {100 * r['full']:+8.1f}%")
    for run in RUNS:
        errs = sorted(abs(r[run]) for r in rows)
        inside = sum(r[run + "_in_range"] for r in rows)
        print(f"{run}: |peak error| median {100 * statistics.median(errs):.1f} %, 90th percentile "
              f"{100 * errs[int(0.9 * (len(errs) - 1))]:.1f} %, max {100 * errs[-1]:.1f} %; "
              f"own peak inside the stated range: {inside}/{len(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
