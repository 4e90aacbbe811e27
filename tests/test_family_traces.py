"""Every architecture family in the catalog (issue #28): one real training step of its tiny model, transformers' own
class with every structural flag of the real config kept (tests/family_models.py), traced with CUDA's kernels
emulated, against the estimate, full and LoRA, bf16 autocast and fp32: the allocated peak within 1 %.

A few representatives run in the default tier; the whole matrix is the `trace` tier (python -m pytest -m trace, or
python benchmarks/family_table.py for the table docs/accounting.md shows)."""

from __future__ import annotations

import pytest

from conftest import needs_torch
from family_models import KNOWN_GAPS, decoder_families, tiny, trace_case, trace_cases

# one of each kind in the default tier: a Llama-style layer, GPT-2's dropouts and NewGELU, Gemma 2's eager soft-capped
# attention and final soft-cap, peft's adapters on a MoE's experts, a windowed MQA mask
DEFAULT_TIER = {("llama", "full", "bf16", "amp-bf16"), ("gpt2", "lora", "fp32", "fp32"),
                ("gemma2", "full", "bf16", "amp-bf16"), ("qwen3_moe", "lora", "bf16", "amp-bf16"),
                ("gemma3_text", "full", "bf16", "amp-bf16")}


def _cases():
    out = []
    for c in trace_cases():
        marks = [] if c in DEFAULT_TIER else [pytest.mark.trace]
        if c[0] in KNOWN_GAPS:
            marks.append(pytest.mark.xfail(reason=f"not modelled yet: {KNOWN_GAPS[c[0]]}"))
        out.append(pytest.param(*c, marks=marks, id="-".join(c)))
    return out


@needs_torch
@pytest.mark.parametrize("model_type, method, dtype, precision", _cases())
def test_the_familys_step_matches_the_estimate(model_type, method, dtype, precision):
    s, e, m = trace_case(model_type, method, dtype, precision)
    assert e.allocated_peak == pytest.approx(m.measured_peak, rel=0.01)
    assert e.peak_phase == m.phase
    # registered buffers included (the rotary inv_freq tables, a few hundred bytes, are not)
    assert e.bytes("weights") == pytest.approx(m.components["weights"], rel=1e-3)
    if method == "lora":
        assert e.trainable_params == m.details["trainable_params"]  # peft's own adapters, MoE stacks included


@needs_torch
def test_every_catalog_decoder_family_has_a_tiny_model():
    """The tiny configs keep the flags the estimate reads: a family missing here would be missing from the table."""
    from memlint.estimate.decoder import fact, masked_layers
    from memlint.estimate import Setup

    fams = decoder_families()
    assert {"llama", "gpt2", "gemma2", "qwen3", "mixtral", "dbrx", "falcon"} <= set(fams)
    for mt in fams:
        s = Setup(tiny(mt), seq=256, batch=2)
        assert s.model.layers == 2 and s.model.hidden == 128, mt
        if isinstance(fact(s, "mask"), dict) and s.model.config.get("sliding_window"):
            assert masked_layers(s), mt  # the window is shrunk below the traced sequence


@needs_torch
def test_gpt2_small_measure_and_estimate_agree():
    """Issue #28's acceptance run at a smaller shape: GPT-2 small (its real width, 12 layers), fp32, dropout 0.1
    everywhere, NewGELU: trace and estimate within 5 % (the full 8 x 1024 run: 14.07 vs 14.07 GiB, README)."""
    from memlint.catalog import resolve
    from memlint.estimate import Setup, estimate
    from memlint.measure import measure

    s = Setup(resolve("gpt2"), dtype="fp32", precision="fp32", batch=1, seq=256, optim="adamw_torch")
    m = measure(s, device="trace")
    assert estimate(s).allocated_peak == pytest.approx(m.measured_peak, rel=0.05)
