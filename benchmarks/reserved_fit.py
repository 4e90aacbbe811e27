"""Fit the estimator's allocator-slack formula (estimate/reserved.py) on allocator-model replays.

    python benchmarks/accuracy.py                 # traces the matrix; docs/accuracy.json keeps each
                                                  # configuration's replayed max_memory_reserved
    python benchmarks/reserved_fit.py [--json docs/accuracy.json] [--write]

The target is the step-2 reserved peak of each configuration (the traced allocation sequence
replayed through memlint.measure.allocator, default allocator settings). The model is

    reserved = max(max(forward, backward) + slack_fb, optimizer + slack_opt)

with slack_fb and slack_opt linear in the estimate's own quantities (estimate.reserved.features)
and non-negative coefficients, fitted by weighted least squares on the relative error: each
configuration is assigned to the branch that binds, each branch is fitted on its configurations
(best non-negative subset), and the assignment is repeated until it no longer changes.
`--write` stores the coefficients and the fit's residuals in src/memlint/data/cuda_allocator.json.
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

from memlint.catalog import resolve  # noqa: E402
from memlint.estimate import GIB, Setup, estimate  # noqa: E402
from memlint.estimate import activations as act  # noqa: E402
from memlint.estimate import reserved  # noqa: E402

SEGMENT = 20 << 20  # the per-layer feature is counted in 20 MiB segments
FB = ("logits_half", "layer", "layers")
OPT = ("activations", "largest")


def load(path: Path) -> list[dict]:
    rows = []
    for r in json.loads(path.read_text()):
        if "measured_reserved" not in r or r.get("reserved_method") != "allocator-model":
            continue
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in r["setup"].items()}
        s = Setup(resolve(r["model"]), **kw)
        e = estimate(s, "real")
        f = reserved.features(s, act.activations(s, "real"))
        x = {"logits_half": f.logits_half, "layer": f.layer, "layers": f.layers * SEGMENT,
             "activations": f.activations, "largest": f.largest}
        rows.append({"config": r["config"], "R": r["measured_reserved"], "live": r["measured"],
                     "fb": max(e.phases["forward"], e.phases["backward"]), "opt": e.phases["optimizer"], "x": x})
    return rows


def _nnls(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least squares over every subset of columns; the best with no negative coefficient."""
    best, k = None, X.shape[1]
    for m in range(1, k + 1):
        for sub in itertools.combinations(range(k), m):
            coef, *_ = np.linalg.lstsq(X[:, sub] * w[:, None], y * w, rcond=None)
            if (coef < 0).any():
                continue
            full = np.zeros(k)
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(ROOT / "docs" / "accuracy.json"))
    ap.add_argument("--write", action="store_true", help="store the coefficients in data/cuda_allocator.json")
    args = ap.parse_args(argv)
    rows = load(Path(args.json))
    if not rows:
        print("no allocator-model reserved figures in", args.json, file=sys.stderr)
        return 2
    cf, co = fit(rows)
    errs: list[float] = []
    print(f"{'configuration':58s} {'live':>7s} {'reserved':>8s} {'fit':>7s} {'error':>7s}  binds")
    for r in rows:
        p, branch = predict(r, cf, co)
        e = float((p - r["R"]) / r["R"])
        errs.append(e)
        print(f"{r['config'][:58]:58s} {r['live'] / GIB:7.2f} {r['R'] / GIB:8.2f} {p / GIB:7.2f} {e:+7.1%}  {branch}")
    abs_errs = [abs(e) for e in errs]
    coefs = {"logits_half": round(float(cf[0]), 3), "layer": round(float(cf[1]), 3),
             "per_layer_segment_bytes": int(round(float(cf[2]) * SEGMENT)),
             "activations": round(float(co[0]), 3), "largest_tensor": round(float(co[1]), 3)}
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
                    "max_memory_reserved of the accuracy matrix (benchmarks/accuracy.py: the traced allocation "
                    "sequences replayed through measure/allocator.py, default allocator settings).",
            "fitted": str(date.today()), "command": "python benchmarks/reserved_fit.py --write",
            "coefficients": coefs, "residuals": summary,
        }
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        print("wrote", path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
