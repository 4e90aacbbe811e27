"""Fit the estimator's allocator-slack formula (estimate/reserved.py) on allocator-model replays.

    python benchmarks/accuracy.py                 # traces the matrix; docs/accuracy.json keeps each
                                                  # configuration's replayed max_memory_reserved
    python benchmarks/reserved_fit.py --trace     # traces EXTRA (small models, other micro-batches)
                                                  # into docs/reserved_fit.json
    python benchmarks/reserved_fit.py [--write]   # fits on both files

The target is the step-2 reserved peak of each configuration (the traced allocation sequence
replayed through memlint.measure.allocator, default allocator settings). The model is

    reserved = max(max(forward, backward) + slack_fb, optimizer + slack_opt)

with slack_fb and slack_opt linear in the estimate's own quantities (estimate.reserved.features)
and non-negative coefficients, fitted by weighted least squares on the relative error: each
configuration is assigned to the branch that binds, each branch is fitted on its configurations
(best non-negative subset), and the assignment is repeated until it no longer changes.
`--write` stores the coefficients and the fit's residuals in src/memlint/data/cuda_allocator.json
and rewrites the marked residual table in docs/accounting.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from memlint import data  # noqa: E402
from memlint.catalog import resolve  # noqa: E402
from memlint.estimate import GIB, Setup, estimate  # noqa: E402
from memlint.estimate import activations as act  # noqa: E402
from memlint.estimate import reserved  # noqa: E402

SMOL, QWEN, LLAMA1B = "HuggingFaceTB/SmolLM2-135M", "Qwen/Qwen2.5-0.5B", "meta-llama/Llama-3.2-1B"
LLAMA, MISTRAL = "meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.1"
# Beside the accuracy matrix: small models and short sequences (where fixed costs dominate), and the
# micro-batch sizes between the matrix's 1 x 2048 and 4 x 8192.
EXTRA = [
    (SMOL, dict(method="full", seq=64)),
    (SMOL, dict(method="lora", seq=64)),
    (SMOL, dict(method="lora", batch=8, seq=512)),
    (SMOL, dict(method="full", batch=4, seq=1024, recompute=True)),
    (QWEN, dict(method="lora", batch=2, seq=512)),
    (QWEN, dict(method="lora", recompute=True, batch=8, seq=1024)),
    (QWEN, dict(method="qlora", quant="nf4", recompute=True, batch=4, seq=4096)),
    (LLAMA1B, dict(method="full", seq=1024)),
    (LLAMA1B, dict(method="lora", recompute=True, batch=2, seq=2048)),
    (LLAMA, dict(method="lora", recompute=True, seq=512)),
    (LLAMA, dict(method="lora", recompute=True, batch=2, seq=4096)),
    (LLAMA, dict(method="qlora", quant="nf4", recompute=True, batch=8, seq=2048)),
    (MISTRAL, dict(method="qlora", quant="nf4", recompute=True, batch=4, seq=4096)),
]
# Long sequences without full logits (TRL's fused LM head, SFTTrainer >= 1.15): the hidden states grow while the logits
# stay one tile, which the matrix above never separates.
LONG = [
    (LLAMA, dict(method="lora", recompute=True, seq=16384, trl_sft=True, trl_version="1.16.0")),
    (LLAMA, dict(method="lora", recompute=True, seq=32768, trl_sft=True, trl_version="1.16.0")),
    (LLAMA, dict(method="qlora", quant="nf4", recompute=True, batch=2, seq=8192, trl_sft=True, trl_version="1.16.0")),
    (QWEN, dict(method="full", recompute=True, batch=2, seq=8192, trl_sft=True, trl_version="1.16.0")),
    (LLAMA1B, dict(method="full", recompute=True, seq=16384, trl_sft=True, trl_version="1.16.0")),
    (MISTRAL, dict(method="lora", recompute=True, batch=4, seq=4096, trl_sft=True, trl_version="1.16.0")),
]
LLAMA3B, LLAMA70B = "meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.1-70B"
# One rank of N-GPU FSDP2 runs at full size (measure/fake_ranks.py: FakeTensorMode, torch's fake process group).
BF16 = dict(dtype="bf16", precision="amp-bf16")
MULTI = [
    (QWEN, dict(method="full", gpus=8, shard="fsdp", seq=2048, **BF16)),
    (QWEN, dict(method="lora", gpus=2, shard="fsdp", batch=8, seq=1024, **BF16)),
    (LLAMA1B, dict(method="full", gpus=2, shard="fsdp", batch=4, seq=2048, **BF16)),
    (LLAMA3B, dict(method="full", gpus=4, shard="fsdp", batch=2, seq=2048, **BF16)),
    (LLAMA3B, dict(method="full", gpus=8, shard="fsdp", batch=2, seq=4096, recompute=True, **BF16)),
    (LLAMA, dict(method="full", gpus=8, shard="fsdp", seq=4096, recompute=True, **BF16)),
    (LLAMA, dict(method="full", gpus=64, shard="fsdp", seq=8192, recompute=True, **BF16)),
    (LLAMA, dict(method="lora", gpus=8, shard="fsdp", batch=2, seq=4096, recompute=True, **BF16)),
    (LLAMA, dict(method="full", gpus=8, shard="fsdp", seq=2048, recompute=True, dtype="fp32", precision="amp-bf16")),
    (LLAMA, dict(method="lora", gpus=8, shard="fsdp", seq=2048, dtype="fp32", precision="amp-bf16")),
    (LLAMA, dict(method="full", gpus=16, shard="fsdp_hybrid", nodes=2, seq=4096, recompute=True, **BF16)),
    (LLAMA70B, dict(method="lora", gpus=8, shard="fsdp", seq=2048, recompute=True, **BF16)),
]
FB = ("logits_half", "layer", "largest", "gathered")
OPT = ("activations", "largest", "gathered", "layer")
FB_KEYS = ("logits_half", "layer", "largest_backward", "gathered")  # their names in data/cuda_allocator.json
OPT_KEYS = ("activations", "largest_optimizer", "gathered_optimizer", "layer_optimizer")


def trace_extra(out: Path) -> None:
    from accuracy import label, pinned  # benchmarks/accuracy.py

    from memlint.measure import measure

    rows = []
    for model, kw in EXTRA:
        kw = pinned(kw)
        s = Setup(resolve(model), **kw)
        m = measure(s, device="trace").to_json()
        rows.append({"config": label(model, kw), "model": model,
                     "setup": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()},
                     "measured": m["measured_peak"], "measured_steps": m["steps"], "measured_reserved": m["reserved"]["peak"],
                     "reserved_method": m["reserved"]["method"], "reserved": m["reserved"], "seconds": m["runtime_s"]})
        print(f"{rows[-1]['config']:58s} live {m['measured_peak'] / GIB:7.2f}  reserved {m['reserved']['peak'] / GIB:7.2f}"
              f"  [{m['runtime_s']:.0f}s]", flush=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")


def trace_more(out: Path, which: str) -> None:
    """LONG through `memlint measure`'s trace, MULTI through one fake rank; appended to `out` (a configuration
    already there is kept)."""
    from accuracy import label, pinned  # benchmarks/accuracy.py

    from memlint.measure import measure
    from memlint.measure.fake_ranks import trace_rank

    rows = json.loads(out.read_text()) if out.exists() else []
    done = {r["config"] for r in rows}
    for model, kw in (LONG if which == "long" else MULTI):
        kw = pinned(kw)
        cfg = label(model, kw) + (f" {kw['gpus']} GPUs {kw['shard']}" if kw.get("gpus", 1) > 1 else "") \
            + (" trl-sft" if kw.get("trl_sft") else "")
        if cfg in done:
            continue
        s = Setup(resolve(model), **kw)
        setup = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()}
        if which == "long":
            m = measure(s, device="trace").to_json()
            row = {"measured": m["measured_peak"], "measured_steps": m["steps"], "measured_reserved": m["reserved"]["peak"],
                   "reserved_method": m["reserved"]["method"], "reserved": m["reserved"], "seconds": m["runtime_s"]}
        else:
            import time

            t0 = time.perf_counter()
            r = trace_rank(s)
            row = {"measured": max(r["phases"].values()), "measured_phases": r["phases"],
                   "measured_reserved": r["reserved_peak"], "reserved_method": "allocator-model",
                   "reserved": {"phases": r["reserved"], "expandable_segments": r["expandable_peak"]},
                   "seconds": round(time.perf_counter() - t0, 1), "traced": "measure/fake_ranks.py rank 0"}
        rows.append({"config": cfg, "model": model, "setup": setup, **row})
        print(f"{cfg:70s} live {row['measured'] / GIB:7.2f}  reserved {row['measured_reserved'] / GIB:7.2f}"
              f"  [{row['seconds']:.0f}s]", flush=True)
        out.write_text(json.dumps(rows, indent=1) + "\n")


def load(*paths: Path) -> list[dict]:
    """The replayed configurations with the estimate's phases and features (the phases do not depend
    on the slack formula: it is read with every coefficient 0, so no earlier fit leaks in)."""
    doc = json.loads((ROOT / "src" / "memlint" / "data" / "cuda_allocator.json").read_text())
    doc["reserved_fit"] = {"coefficients": dict.fromkeys(FB_KEYS + OPT_KEYS, 0.0)}
    with data.overridden("cuda_allocator.json", doc):
        return _load(paths)


def _load(paths: tuple[Path, ...]) -> list[dict]:
    rows = []
    for r in (r for p in paths if p.exists() for r in json.loads(p.read_text())):
        if "measured_reserved" not in r or r.get("reserved_method") != "allocator-model":
            continue
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in r["setup"].items()}
        s = Setup(resolve(r["model"]), **kw)
        e = estimate(s, "real")
        from memlint.estimate import core, sharding

        rank, (w, _), (g, _), _o, _t, terms, _n = core._model_terms(s, "real")  # the rank's setup and terms
        gathered = sharding.layout(rank, "real", w, g).gathered
        f = reserved.features(rank, terms, gathered)
        x = {"logits_half": f.logits_half, "layer": f.layer, "activations": f.activations, "largest": f.largest,
             "gathered": f.gathered}
        rows.append({"config": r["config"], "R": r["measured_reserved"], "live": r["measured"],
                     "fb": max(e.phases["forward"], e.phases["backward"]), "opt": e.phases["optimizer"], "x": x})
    return rows


def _nnls(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least squares over every subset of columns; the best with no negative coefficient."""
    best, k = None, X.shape[1]
    for m in range(0, k + 1):
        for sub in itertools.combinations(range(k), m):
            full = np.zeros(k)
            if sub:
                coef, *_ = np.linalg.lstsq(X[:, sub] * w[:, None], y * w, rcond=None)
                if (coef < 0).any():
                    continue
                full[list(sub)] = coef
            err = float(np.sum(((X @ full - y) * w) ** 2))
            if best is None or err < best[0]:
                best = (err, full)
    return best[1] if best else np.zeros(k)


def predict(r: dict, cf: np.ndarray, co: np.ndarray) -> tuple[float, str]:
    fb = r["fb"] + sum(c * r["x"][k] for c, k in zip(cf, FB))
    opt = r["opt"] + sum(c * r["x"][k] for c, k in zip(co, OPT))
    return max(fb, opt, r["fb"], r["opt"]), ("optimizer" if opt > fb else "forward/backward")


def fit(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    binds_opt = [r["opt"] > r["fb"] for r in rows]
    cf, co = np.zeros(len(FB)), np.zeros(len(OPT))
    for _ in range(20):
        for names, which, base in ((FB, False, "fb"), (OPT, True, "opt")):
            sel = [r for r, b in zip(rows, binds_opt) if b == which]
            if not sel:
                continue
            X = np.array([[r["x"][k] for k in names] for r in sel], float)
            y = np.array([r["R"] - r[base] for r in sel], float)
            w = np.array([1.0 / r["R"] for r in sel])
            coef = _nnls(X, y, w)
            if which:
                co = coef
            else:
                cf = coef
        new = [predict(r, cf, co)[1] == "optimizer" for r in rows]
        if new == binds_opt:
            break
        binds_opt = new
    return cf, co


def _write_section(page: Path, coefs: dict, summary: dict, table: list[str]) -> None:
    """Replace the text between the reserved-fit markers of docs/accounting.md."""
    begin, end = "<!-- reserved-fit:begin -->", "<!-- reserved-fit:end -->"
    text = page.read_text(encoding="utf-8")
    i, j = text.find(begin), text.find(end)
    if not 0 <= i < j:
        raise SystemExit(f"{page}: no {begin} ... {end} section")
    loo = summary["leave_one_out"]
    body = [
        begin,
        f"Fitted by `python benchmarks/reserved_fit.py --write` on {summary['configurations']} replayed configurations "
        f"(the accuracy matrix, `EXTRA`, and docs/reserved_grid.json: `LONG` sequences under TRL's fused LM head and one "
        f"rank of `MULTI` N-GPU FSDP runs traced at full size by measure/fake_ranks.py; no published measurement): "
        f"a_logits = {coefs['logits_half']}, a_layer = {coefs['layer']}, a_big_b = {coefs['largest_backward']}, "
        f"a_gath = {coefs['gathered']}, a_act = {coefs['activations']}, a_big_o = {coefs['largest_optimizer']}, "
        f"a_gath_o = {coefs['gathered_optimizer']}, a_layer_o = {coefs['layer_optimizer']}. "
        f"Residuals: median |error| {summary['median_abs_error']:.1%}, max {summary['max_abs_error']:.1%}, "
        f"{summary['within_5_percent']} of {summary['configurations']} within 5 %; leave-one-out (each configuration "
        f"predicted by the fit of the others): median {loo['median_abs_error']:.1%}, max {loo['max_abs_error']:.1%} "
        f"({loo['worst']}). Allocated / reserved in the replays: {summary['live_over_reserved'][0]}–"
        f"{summary['live_over_reserved'][1]}.",
        "",
        *table,
        end,
    ]
    page.write_text(text[:i] + "\n".join(body) + text[j + len(end):], encoding="utf-8")
    print("wrote", page.relative_to(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", nargs="+", default=[str(ROOT / "docs" / "accuracy.json"), str(ROOT / "docs" / "reserved_fit.json"),
                                                  str(ROOT / "docs" / "reserved_grid.json")])
    ap.add_argument("--trace", action="store_true", help="trace EXTRA into docs/reserved_fit.json first")
    ap.add_argument("--write", action="store_true", help="store the coefficients in data/cuda_allocator.json")
    ap.add_argument("--trace-more", choices=("long", "multi"), help="trace LONG (fused-head long sequences) or MULTI "
                    "(one rank of N-GPU FSDP, fake process group) into docs/reserved_grid.json first")
    args = ap.parse_args(argv)
    if args.trace:
        trace_extra(ROOT / "docs" / "reserved_fit.json")
    if args.trace_more:
        trace_more(ROOT / "docs" / "reserved_grid.json", args.trace_more)
    rows = load(*map(Path, args.json))
    if not rows:
        print("no allocator-model reserved figures in", args.json, file=sys.stderr)
        return 2
    cf, co = fit(rows)
    errs: list[float] = []
    table = ["| configuration | traced allocated GiB | reserved GiB (replay) | formula GiB | error | binds |",
             "|---|---:|---:|---:|---:|---|"]
    print(f"{'configuration':58s} {'live':>7s} {'reserved':>8s} {'fit':>7s} {'error':>7s}  binds")
    for r in rows:
        p, branch = predict(r, cf, co)
        e = float((p - r["R"]) / r["R"])
        errs.append(e)
        print(f"{r['config'][:58]:58s} {r['live'] / GIB:7.2f} {r['R'] / GIB:8.2f} {p / GIB:7.2f} {e:+7.1%}  {branch}")
        table.append(f"| {r['config']} | {r['live'] / GIB:.2f} | {r['R'] / GIB:.2f} | {p / GIB:.2f} | {e:+.1%} | {branch} |")
    abs_errs = [abs(e) for e in errs]
    coefs = {**{k: round(float(c), 3) for k, c in zip(FB_KEYS, cf)}, **{k: round(float(c), 3) for k, c in zip(OPT_KEYS, co)}}
    summary = {"configurations": len(rows), "median_abs_error": round(float(statistics.median(abs_errs)), 4),
               "max_abs_error": round(float(max(abs_errs)), 4),
               "within_5_percent": int(sum(a <= 0.05 for a in abs_errs)),
               "live_over_reserved": [round(min(r["live"] / r["R"] for r in rows), 3),
                                      round(max(r["live"] / r["R"] for r in rows), 3)]}
    # leave-one-out: each configuration predicted by the formula fitted on the others
    loo = []
    for i, r in enumerate(rows):
        lf, lo = fit(rows[:i] + rows[i + 1:])
        loo.append(abs(float((predict(r, lf, lo)[0] - r["R"]) / r["R"])))
    summary["leave_one_out"] = {"median_abs_error": round(statistics.median(loo), 4), "max_abs_error": round(max(loo), 4),
                                "worst": rows[loo.index(max(loo))]["config"]}
    print("coefficients", coefs)
    print("residuals", summary)
    if args.write:
        path = ROOT / "src" / "memlint" / "data" / "cuda_allocator.json"
        doc = json.loads(path.read_text())
        doc["reserved_fit"] = {
            "_doc": "estimate/reserved.py's slack formula, fitted by benchmarks/reserved_fit.py on the step-2 "
                    "max_memory_reserved of replayed traces (the accuracy matrix, EXTRA, LONG and MULTI: the traced "
                    "allocation sequences replayed through measure/allocator.py, default allocator settings); no "
                    "published measurement is in the fit.",
            "fitted": str(date.today()), "command": "python benchmarks/reserved_fit.py --write",
            "coefficients": coefs, "residuals": summary,
        }
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        print("wrote", path.relative_to(ROOT))
        _write_section(ROOT / "docs" / "accounting.md", coefs, summary, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
