"""Selective activation checkpointing by layers (torchtune ac_mode: selective, ac_option: N): with recompute,
every Nth decoder layer is checkpointed and the others keep what they save."""

from __future__ import annotations

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate


def test_every_nth_layer_sits_between_no_recompute_and_full_recompute():
    m = resolve("meta-llama/Llama-3.1-8B")
    base = Setup(m, method="lora", seq=2048)
    none, every1 = estimate(base), estimate(base.with_(recompute=True))
    every2, every4 = estimate(base.with_(recompute=True, recompute_every=2)), estimate(base.with_(recompute=True, recompute_every=4))
    a = [e.bytes("activations") for e in (every1, every2, every4, none)]
    assert a == sorted(a) and len(set(a)) == 4
    # half the layers keep everything: about half way between
    assert abs(a[1] - (a[0] + a[3]) / 2) / a[3] < 0.05


def test_it_needs_recompute():
    with pytest.raises(MemlintError, match="needs --recompute"):
        Setup(resolve("HuggingFaceTB/SmolLM2-135M"), recompute_every=2)


def test_torchtune_selective_by_layers_is_read(tmp_path):
    from memlint.extract.configs import read_config

    p = tmp_path / "full.yaml"
    p.write_text("model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\n"
                 "tokenizer:\n  _component_: torchtune.models.llama3.llama3_tokenizer\n  path: t.model\n  max_seq_len: 1024\n"
                 "batch_size: 2\nenable_activation_checkpointing: False\nac_mode: selective\nac_option: 2\n"
                 "optimizer:\n  _component_: torch.optim.AdamW\n  lr: 2e-5\n")
    plan = read_config(p)
    assert plan.value("gradient_checkpointing") is True and plan.value("recompute_every") == 2


@pytest.mark.parametrize("model, n", [("HuggingFaceTB/SmolLM2-135M", 3), ("Qwen/Qwen2.5-0.5B", 2)])
def test_the_estimate_matches_a_trace_with_every_nth_layer_checkpointed(model, n):
    pytest.importorskip("torch")
    from memlint.measure import measure

    s = Setup(resolve(model), method="lora", recompute=True, recompute_every=n, seq=512, optim="adamw_torch")
    traced = measure(s, device="trace").to_json()["measured_peak"]
    assert estimate(s).allocated_peak == pytest.approx(traced, rel=0.01)
