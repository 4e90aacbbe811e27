"""Estimate vs measured peak on a matrix of configurations; writes docs/accuracy.md + a PNG.

    python benchmarks/accuracy.py [--only SUBSTRING] [--reuse]

Each configuration is estimated (real and textbook accountings) and measured with
`memlint.measure` (a FakeTensorMode trace on CPU, the CUDA allocator on a GPU). The
comparison is on the step-2 allocated peak: the estimate's peak minus its overhead term
(what torch.cuda.max_memory_allocated() reports) against the measured peak; and on the
step-2 reserved peak: the estimate's reserved peak (allocated + allocator slack) against
max_memory_reserved (on CPU: the traced allocation sequence replayed through memlint's model
of the CUDA caching allocator, measure/allocator.py). `--reuse` takes the measurements from
the JSON of an earlier run (no traces) and recomputes only the estimates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from memlint.catalog import resolve  # noqa: E402
from memlint.estimate import GIB, Setup, estimate  # noqa: E402

LLAMA, QWEN, MISTRAL = "meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-0.5B", "mistralai/Mistral-7B-v0.1"


def pinned(kw: dict) -> dict:
    """A configuration with the choices the matrix was traced with spelled out, so that a change of
    memlint's defaults (data/library_defaults.json run_defaults) does not change what a stored row means."""
    base = {"optim": "adamw_torch"}
    if kw.get("method", "full") != "full":
        base.update(lora_r=16, lora_dropout=0.05)
    return {**base, **kw}


def matrix() -> list[tuple[str, dict]]:
    rows: list[tuple[str, dict]] = []

    def add(model, **kw):
        rows.append((model, pinned(kw)))

    for model in (LLAMA, QWEN, MISTRAL):
        add(model, method="full")
        add(model, method="full", recompute=True)
        add(model, method="lora")
        add(model, method="lora", recompute=True)
        add(model, method="qlora", quant="nf4", recompute=True)
    # shapes
    add(LLAMA, method="lora", recompute=True, batch=4, seq=8192)
    add(LLAMA, method="qlora", quant="nf4", recompute=True, batch=4, seq=8192)
    add(QWEN, method="full", batch=4, seq=8192, recompute=True)
    add(QWEN, method="full", batch=8, seq=512)
    add(MISTRAL, method="lora", batch=2, seq=4096, recompute=True)
    # attention
    add(QWEN, method="full", attn="eager")
    add(LLAMA, method="lora", attn="eager", seq=1024)
    add(MISTRAL, method="qlora", quant="nf4", attn="eager", seq=1024, recompute=True)
    # optimizers and precision
    add(QWEN, method="full", optim="adamw_torch_fused")
    add(QWEN, method="full", optim="adafactor")
    add(QWEN, method="full", optim="sgd")
    add(LLAMA, method="full", optim="adamw_torch_fused", recompute=True)
    add(QWEN, method="full", dtype="fp32", precision="amp-bf16")
    add(QWEN, method="full", dtype="fp32", precision="fp32")
    add(QWEN, method="qlora", quant="nf4", double_quant=False, lora_targets=("q_proj", "v_proj"))
    add(LLAMA, method="lora", lora_r=64, lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"), recompute=True)
    return rows


def label(model: str, kw: dict) -> str:
    s = Setup(resolve(model), **kw)
    parts = [model.split("/")[-1], s.method]
    if s.method != "full":
        parts.append(f"r{s.lora_r}" + ("" if s.lora_targets == "all-linear" else "/" + "+".join(t.split("_")[0] for t in s.lora_targets)))
    if s.quant != "none":
        parts.append(s.quant + ("" if s.double_quant else " no-dq"))
    if s.dtype != "bf16" or s.precision != "amp-bf16":
        parts.append(f"{s.dtype}/{s.precision}")
    parts.append(f"{s.batch}×{s.seq}")
    parts.append("ckpt" if s.recompute else "no-ckpt")
    if s.attn != "sdpa":
        parts.append(s.attn)
    if s.optim != "adamw_torch":
        parts.append(s.optim)
    return " ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run configurations whose label contains this")
    ap.add_argument("--out", default=str(ROOT / "docs" / "accuracy.md"))
    ap.add_argument("--json", default=str(ROOT / "docs" / "accuracy.json"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--reuse", action="store_true", help="measurements from --json of an earlier run, no traces")
    args = ap.parse_args(argv)
    from memlint.measure import measure

    earlier = {r["config"]: r for r in json.loads(Path(args.json).read_text())} if args.reuse else {}
    results = []
    for model, kw in matrix():
        name = label(model, kw)
        if args.only and args.only not in name:
            continue
        s = Setup(resolve(model), **kw)
        real = estimate(s, "real")
        book = estimate(s, "textbook")
        if name in earlier and "measured_reserved" in earlier[name]:
            row = {k: earlier[name][k] for k in _MEASURED}
            dt = row["seconds"]
        else:
            t0 = time.perf_counter()
            m = measure(s, device=args.device).to_json()
            dt = time.perf_counter() - t0
            res = m["reserved"]
            row = {"measured": m["measured_peak"], "measured_phase": m["phase"], "method": m["method"],
                   "device": m["device"], "seconds": round(dt, 2), "measured_components": m["components"],
                   "measured_steps": m["steps"], "measured_reserved": res["peak"], "reserved_method": res["method"],
                   "reserved": res}
        measured = row["measured"]
        row = {
            "config": name, "model": model, "setup": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()},
            **row,
            "real": real.allocated_peak, "real_phase": real.peak_phase, "real_reserved": real.reserved_peak,
            "textbook": book.peak,
            "real_components": {k: c.bytes for k, c in real.components.items()},
        }
        row["real_err"] = (row["real"] - measured) / measured
        row["textbook_err"] = (row["textbook"] - measured) / measured
        row["reserved_err"] = (row["real_reserved"] - row["measured_reserved"]) / row["measured_reserved"]
        results.append(row)
        print(f"{name:60s} measured {measured / GIB:7.2f} GiB  real {row['real'] / GIB:7.2f} ({row['real_err']:+.1%})"
              f"  textbook {row['textbook'] / GIB:7.2f} ({row['textbook_err']:+.1%})"
              f"  reserved {row['measured_reserved'] / GIB:7.2f} est {row['real_reserved'] / GIB:7.2f}"
              f" ({row['reserved_err']:+.1%})  [{dt:.1f}s]", flush=True)
    if not results:
        print("no configuration matched", file=sys.stderr)
        return 2
    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(results, Path(args.out))
    return 0


_MEASURED = ("measured", "measured_phase", "method", "device", "seconds", "measured_components", "measured_steps",
             "measured_reserved", "reserved_method", "reserved")


def write_markdown(results: list[dict], out: Path) -> None:
    real_abs = [abs(r["real_err"]) for r in results]
    book_abs = [abs(r["textbook_err"]) for r in results]
    res_abs = [abs(r["reserved_err"]) for r in results]
    expandable = [r["reserved"].get("expandable_segments", {}).get("peak") for r in results]
    lines = [
        "# Accuracy: estimate vs measured peak",
        "",
        "Generated by `python benchmarks/accuracy.py` (do not edit by hand). Measured = the step-2 peak",
        f"of live tensor bytes ({results[0]['method']}, {results[0]['device']}); real = `memlint estimate`'s",
        "allocated peak (its peak minus the overhead term, i.e. what `torch.cuda.max_memory_allocated()`",
        "reports); textbook = the seed article's accounting (sum of the buckets, no overhead).",
        f"Reserved = `max_memory_reserved()` in step 2 ({results[0]['reserved_method']}: "
        + ("the traced allocation sequence replayed through memlint's model of the CUDA caching allocator, "
           "`measure/allocator.py`, default settings; `expandable` with `expandable_segments:True`"
           if results[0]["reserved_method"] == "allocator-model" else "the CUDA allocator's counter")
        + "); est. reserved = `memlint estimate`'s reserved peak (allocated peak + the allocator slack of the "
        "overhead term, [accounting.md](accounting.md#reserved-memory-the-caching-allocator)).",
        "",
        f"**real accounting: median |error| {statistics.median(real_abs):.1%}, max {max(real_abs):.1%}** over "
        f"{len(results)} configurations; textbook: median {statistics.median(book_abs):.1%}, max {max(book_abs):.1%}. "
        f"**Reserved: median |error| {statistics.median(res_abs):.1%}, max {max(res_abs):.1%}**; "
        f"allocated / reserved {min(r['measured'] / r['measured_reserved'] for r in results):.2f}"
        f"–{max(r['measured'] / r['measured_reserved'] for r in results):.2f}.",
        "",
        "![estimated vs measured](accuracy.png)",
        "",
        "| configuration | measured GiB | phase | real GiB | real error | textbook GiB | textbook error "
        "| reserved GiB | est. reserved GiB | reserved error | expandable GiB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r, exp in zip(results, expandable):
        lines.append(f"| {r['config']} | {r['measured'] / GIB:.2f} | {r['measured_phase']} | {r['real'] / GIB:.2f} | "
                     f"{r['real_err']:+.1%} | {r['textbook'] / GIB:.2f} | {r['textbook_err']:+.1%} | "
                     f"{r['measured_reserved'] / GIB:.2f} | {r['real_reserved'] / GIB:.2f} | {r['reserved_err']:+.1%} | "
                     + (f"{exp / GIB:.2f} |" if exp else "— |"))
    out.parent.mkdir(parents=True, exist_ok=True)
    # benchmarks/per_rank.py and benchmarks/trainer_steps.py own marked sections of the same page: keep them
    kept = ""
    if out.exists():
        old = out.read_text(encoding="utf-8")
        for name in ("per-rank", "trainer-steps"):
            begin, end = old.find(f"<!-- {name}:begin -->"), old.find(f"<!-- {name}:end -->")
            if 0 <= begin < end:
                kept += "\n" + old[begin:end + len(f"<!-- {name}:end -->")] + "\n"
    out.write_text("\n".join(lines) + "\n" + kept)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 6))
    meas = [r["measured"] / GIB for r in results]
    ax.scatter(meas, [r["real"] / GIB for r in results], label="real (default)", marker="o")
    ax.scatter(meas, [r["textbook"] / GIB for r in results], label="textbook", marker="x")
    top = max(max(meas), max(r["real"] / GIB for r in results), max(r["textbook"] / GIB for r in results)) * 1.05
    ax.plot([0, top], [0, top], color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured step-2 peak (GiB)")
    ax.set_ylabel("estimated (GiB)")
    ax.set_title("memlint estimate vs measured")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
