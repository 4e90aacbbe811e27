"""TRL's preference and reward trainers: Setup fields, the plan's trainer, and estimate vs trace.

The traced step (memlint.measure) runs what TRL runs for each objective: chosen and rejected
stacked into one forward, the reference forward under no_grad while the policy's graph is alive,
the loss from the log-probs, backward and the optimizer step. None of this needs trl.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import needs_torch
from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate.activations import logps_layout
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_file
from memlint.library.versions import pinned_versions

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
QWEN = resolve("Qwen/Qwen2.5-0.5B")
LLAMA8B = resolve("meta-llama/Llama-3.1-8B")


# --------------------------------------------------------------------------- Setup


def test_defaults_keep_every_sft_result_unchanged():
    s = Setup(QWEN)
    assert (s.objective, s.reference, s.trl_version) == ("sft", "none", None)
    assert estimate(s).peak == estimate(Setup(QWEN, objective="sft", ref_model="none", trl_version="0.20")).peak


def test_auto_reference_is_what_trl_does_without_ref_model():
    assert Setup(QWEN, objective="dpo").reference == "copy"  # create_reference_model
    assert Setup(QWEN, objective="dpo", method="lora").reference == "adapter-disabled"
    assert Setup(QWEN, objective="kto", method="qlora", quant="nf4").reference == "adapter-disabled"
    for obj in ("orpo", "cpo", "reward", "sft"):
        assert Setup(QWEN, objective=obj).reference == "none"
    # a what-if that switches to LoRA follows TRL: the adapters are disabled, no copy
    assert Setup(QWEN, objective="dpo").with_(method="lora").reference == "adapter-disabled"


@pytest.mark.parametrize("kw, words", [
    (dict(objective="orpo", ref_model="copy"), "no reference model"),
    (dict(objective="dpo", ref_model="none"), "needs a reference"),
    (dict(objective="dpo", ref_model="adapter-disabled"), "needs peft adapters"),
    (dict(objective="ppo"), "invalid objective"),
    (dict(objective="dpo", fused_loss=True), "fused"),
])
def test_invalid_combinations_are_refused(kw, words):
    with pytest.raises(MemlintError, match=words):
        Setup(QWEN, **kw)


def test_logps_layout_follows_the_trl_version():
    def layout(v):
        e = logps_layout(Setup(QWEN, objective="dpo", trl_version=v))
        return e["layout"], e["policy_logits_during_ref"]

    assert layout("0.11.4") == ("logits", True)
    assert layout("0.20.0") == ("logits", False)
    assert layout("0.29.0") == ("logits", True)
    assert layout("1.16.0") == ("chunked", False)
    assert layout(None) == ("chunked", False)  # newest known
    # ORPO and CPO materialise the logits in every version
    assert logps_layout(Setup(QWEN, objective="orpo"))["layout"] == "logits"


# --------------------------------------------------------------------------- accounting


def test_paired_objectives_run_twice_the_rows():
    sft = estimate(Setup(QWEN, method="lora", seq=1024))
    dpo = estimate(Setup(QWEN, method="lora", seq=1024, objective="dpo", trl_version="0.20"))
    assert dpo.bytes("activations") == estimate(Setup(QWEN, method="lora", seq=1024, batch=2)).bytes("activations")
    assert dpo.bytes("activations") > 1.9 * sft.bytes("activations")
    assert "2·b rows: DPOTrainer" in dpo.components["activations"].formula


def test_a_sharded_reference_copy_is_sharded_like_the_policy():
    one = estimate(Setup(LLAMA8B, seq=1024, objective="dpo", gpus=8, shard="zero3"))
    none = estimate(Setup(LLAMA8B, seq=1024, objective="dpo", ref_model="precomputed", gpus=8, shard="zero3"))
    assert one.bytes("weights") - none.bytes("weights") == -(-LLAMA8B.params * 2 // 8)


def test_reference_copy_adds_frozen_weights_only():
    full = Setup(LLAMA8B, seq=1024, objective="dpo", ref_model="precomputed")
    copy = full.with_(ref_model="copy")
    a, b = estimate(full), estimate(copy)
    assert b.bytes("weights") - a.bytes("weights") == LLAMA8B.params * 2
    assert b.bytes("gradients") == a.bytes("gradients") and b.bytes("optimizer") == a.bytes("optimizer")
    assert "frozen reference copy" in b.components["weights"].formula
    # textbook: 2 B per parameter for the copy
    assert estimate(copy, "textbook").bytes("weights") - estimate(full, "textbook").bytes("weights") == LLAMA8B.params * 2


def test_reference_forward_while_the_policy_graph_is_alive_costs_logits():
    base = dict(model=QWEN, method="lora", seq=1024, objective="dpo")
    pre = estimate(Setup(**base, ref_model="precomputed", trl_version="0.20"))
    live = estimate(Setup(**base, ref_model="adapter-disabled", trl_version="0.20"))
    kept = estimate(Setup(**base, ref_model="adapter-disabled", trl_version="0.29"))
    logits = 2 * 1024 * QWEN.vocab * 4  # the reference's logits over 2 x b rows, fp32 after accelerate
    assert live.bytes("logits") - pre.bytes("logits") >= logits
    assert kept.bytes("logits") - live.bytes("logits") >= logits  # the policy's logits kept in 0.29


def test_reward_model_has_a_scalar_head_and_no_vocabulary_logits():
    e = estimate(Setup(LLAMA8B, seq=1024, objective="reward"))
    assert e.bytes("logits") == 2 * 1024 * 2
    assert e.trainable_params == LLAMA8B.params - LLAMA8B.vocab * LLAMA8B.hidden + LLAMA8B.hidden
    assert "scalar reward head" in e.components["logits"].formula


def test_every_preference_term_has_a_formula():
    for obj in ("dpo", "orpo", "cpo", "kto", "reward"):
        for acc in ("real", "textbook"):
            e = estimate(Setup(QWEN, method="lora", objective=obj, trl_version="0.20"), acc)
            assert all(c.formula for c in e.components.values())
            assert any(obj.upper() in n or "Trainer" in n for n in e.assumptions) or acc == "textbook"


# --------------------------------------------------------------------------- from the plan


def _planned(name: str):
    with pinned_versions({"trl": "0.20.0", "transformers": "4.56.0", "torch": "2.8.0", "peft": "0.17.0"}):
        plan = extract_file(FIXTURES / "scripts" / name)
        return plan, setup_from_plan(plan)


def test_dpo_script_is_estimated_as_dpo_with_the_adapters_disabled():
    plan, planned = _planned("dpo_script.py")
    assert plan.value("trainer") == "DPOTrainer" and plan.value("ref_model") == "auto"
    s = planned.setup
    assert (s.objective, s.reference, s.trl_version) == ("dpo", "adapter-disabled", "0.20.0")
    assert (s.batch, s.seq) == (4, 1024)


def test_orpo_script_has_no_reference():
    plan, planned = _planned("orpo_8bit_lora.py")
    s = planned.setup
    assert plan.value("trainer") == "ORPOTrainer"
    assert (s.objective, s.reference, s.method, s.quant) == ("orpo", "none", "lora", "int8")


def test_ref_model_and_precompute_are_read(tmp_path):
    body = (FIXTURES / "scripts" / "dpo_script.py").read_text()
    given = tmp_path / "given.py"
    given.write_text(body.replace("ref_model=None", "ref_model=AutoModelForCausalLM.from_pretrained(SFT_MODEL)"))
    pre = tmp_path / "pre.py"
    pre.write_text(body.replace("num_train_epochs=1,", "num_train_epochs=1, precompute_ref_log_probs=True,"))
    with pinned_versions({"trl": "0.20.0"}):
        p1, p2 = extract_file(given), extract_file(pre)
        assert p1.value("ref_model") == "model" and setup_from_plan(p1).setup.reference == "copy"
        assert p2.value("ref_model") == "precomputed" and setup_from_plan(p2).setup.reference == "precomputed"


def test_cli_estimate_flags(capsys):
    from memlint.cli import main

    code = main(["estimate", "--model", "Qwen/Qwen2.5-0.5B", "--method", "lora", "--objective", "dpo",
                 "--ref-model", "precomputed", "--trl-version", "0.20", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and any("DPOTrainer" in a for a in doc["assumptions"])


# --------------------------------------------------------------------------- estimate vs trace

CASES = [
    dict(method="lora", objective="dpo", trl_version="0.10", ref_model="copy"),
    dict(method="lora", objective="dpo", trl_version="0.20"),
    dict(method="lora", objective="dpo", trl_version="0.29"),
    dict(method="full", objective="dpo", trl_version="0.29"),
    dict(method="lora", objective="dpo", ref_model="precomputed", recompute=True, batch=2, trl_version="0.20"),
    dict(method="qlora", quant="nf4", recompute=True, objective="dpo", trl_version="0.20"),
    dict(method="full", objective="dpo", dtype="fp32", precision="fp32", trl_version="0.29"),
    dict(method="full", objective="dpo", precision="pure-bf16", trl_version="0.20"),
    dict(method="lora", objective="orpo"),
    dict(method="full", objective="cpo", recompute=True),
    dict(method="full", objective="reward"),
    dict(method="lora", objective="reward", batch=2),
]


@needs_torch
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_preference_estimate_matches_the_traced_step(kw):
    from memlint.measure import measure

    s = Setup(QWEN, seq=256, **kw)
    measured = measure(s, device="trace").to_json()
    est = estimate(s, "real")
    assert est.allocated_peak == pytest.approx(measured["measured_peak"], rel=0.03)
    for name in ("weights", "gradients"):
        assert est.bytes(name) == pytest.approx(measured["components"][name], rel=0.001)


@needs_torch
def test_trace_equals_real_cpu_for_a_tiny_dpo_step():
    from memlint.measure import measure, tiny_spec

    spec = tiny_spec("llama", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256,
                                   tie_word_embeddings=False))
    for kw in (dict(method="lora"), dict(method="full"), dict(method="lora", ref_model="copy")):
        s = Setup(spec, batch=2, seq=32, objective="dpo", trl_version="0.29", **kw)
        fake, real = measure(s, device="trace").to_json(), measure(s, device="cpu").to_json()
        assert fake["steps"] == real["steps"] and fake["components"] == real["components"]


@needs_torch
def test_measure_refuses_what_it_does_not_trace():
    from memlint.measure import measure

    with pytest.raises(MemlintError, match="fused LM head"):
        measure(Setup(QWEN, seq=64, objective="dpo", method="lora", trl_version="1.16"), device="trace")
    with pytest.raises(MemlintError, match="KTO"):
        measure(Setup(QWEN, seq=64, objective="kto", method="lora"), device="trace")
