"""TRL preference / reward objectives: memlint's real estimate vs the traced training step.

    python benchmarks/preference.py            # Qwen2.5-0.5B at 1 x 512 plus Llama-3.1-8B cases
Prints a markdown table (GiB, allocated peak: the estimate's peak minus overhead vs the
fake-tensor trace's step-2 peak). The tests (tests/test_preference.py) run the small cases.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from memlint.catalog import resolve
from memlint.estimate import Setup, estimate
from memlint.measure import measure

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_preference import CASES  # noqa: E402

GIB = 1 << 30
SMALL = CASES  # the configurations tests/test_preference.py checks at 1 x 256
LARGE = [
    dict(method="lora", recompute=True, objective="dpo", trl_version="0.20", seq=1024),
    dict(method="lora", recompute=True, objective="dpo", trl_version="0.29", seq=1024),
    dict(method="qlora", quant="nf4", recompute=True, objective="orpo", seq=1024),
]


def row(model: str, kw: dict) -> str:
    kw = dict(kw)
    seq = kw.pop("seq", 512)
    s = Setup(resolve(model), seq=seq, **kw)
    t = time.perf_counter()
    m = measure(s, device="trace")
    e = estimate(s, "real")
    sft = estimate(s.with_(objective="sft", ref_model="none"), "real")
    err = 100 * (e.allocated_peak - m.measured_peak) / m.measured_peak
    what = " ".join(f"{k}={v}" for k, v in kw.items())
    return (f"| {model.split('/')[-1]} {s.batch}×{seq} {what} | {m.measured_peak / GIB:.2f} | {m.phase} | "
            f"{e.allocated_peak / GIB:.2f} | {err:+.2f}% | {sft.allocated_peak / GIB:.2f} | {time.perf_counter() - t:.0f} s |")


def main() -> None:
    print("| configuration | traced GiB | phase | estimate GiB | error | same micro-batch as SFT, GiB | time |")
    print("|---|---:|---|---:|---:|---:|---:|")
    cases = [("Qwen/Qwen2.5-0.5B", kw) for kw in SMALL]
    if "--small" not in sys.argv:
        cases += [("meta-llama/Llama-3.1-8B", kw) for kw in LARGE]
    for model, kw in cases:
        print(row(model, kw), flush=True)


if __name__ == "__main__":
    main()
