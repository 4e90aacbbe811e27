"""The real accounting agrees with the traced training step on small configurations.

The 8B matrix lives in benchmarks/accuracy.py (docs/accuracy.md); these are its small,
fast cousins so a regression in either side fails the suite.
"""

import pytest

from conftest import needs_torch
from memlint.catalog import resolve
from memlint.estimate import Setup, estimate

CASES = [
    dict(method="full"),
    dict(method="full", recompute=True, optim="adafactor"),
    dict(method="lora", lora_targets=("q_proj", "v_proj")),
    dict(method="lora", recompute=True, batch=2),
    dict(method="qlora", quant="nf4", recompute=True),
    dict(method="full", attn="eager"),
    # the default fused AdamW has no step temporaries: the tied embedding's two gradients set the peak
    dict(method="full", seq=128, optim="adamw_torch_fused"),
]


@needs_torch
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_real_estimate_matches_the_traced_step(kw):
    from memlint.measure import measure

    s = Setup(resolve("Qwen/Qwen2.5-0.5B"), **{"seq": 512, **kw})
    measured = measure(s, device="trace").to_json()
    est = estimate(s, "real")
    assert est.allocated_peak == pytest.approx(measured["measured_peak"], rel=0.03)
    assert est.peak_phase == measured["phase"]
    for name in ("weights", "gradients"):
        assert est.bytes(name) == pytest.approx(measured["components"][name], rel=0.001)
