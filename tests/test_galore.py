"""GaLore (transformers' optim="galore_*"): projected optimizer state, its step, the plan fields, and a
trace of transformers' own optimizer setup (Trainer.get_optimizer_cls_and_kwargs with galore_torch)."""

from __future__ import annotations

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate.model_state import galore_match, galore_split, optimizer_bytes

SMOL = "HuggingFaceTB/SmolLM2-135M"


def test_the_state_is_the_projected_moments_and_the_projection():
    s = Setup(resolve("meta-llama/Llama-3.1-8B"), optim="galore_adamw", galore_rank=128)
    targets, rest = galore_split(s)
    assert len(targets) == 7 and all(t.count == 32 for t in targets)  # q k v o gate up down, not lm_head
    assert not galore_match(s, "lm_head") and galore_match(s, "mlp.down_proj")
    want = sum(2 * t.numel * t.count * 2 for t in rest)  # AdamW's two bf16 moments on the rest
    for t in targets:
        want += 2 * 128 * max(t.rows, t.cols) * t.count * 2 + 128 * min(t.rows, t.cols) * t.count * 2
    assert optimizer_bytes(s, "real")[0] == want
    plain = optimizer_bytes(s.with_(optim="adamw_torch"), "real")[0]
    assert want < plain / 5


def test_targets_match_like_transformers():
    s = Setup(resolve("meta-llama/Llama-3.1-8B"), optim="galore_adamw", galore_targets=r".*\.q_proj")
    assert [t.name for t in s.model.linears if galore_match(s, t.name)] == ["self_attn.q_proj"]
    assert all(galore_match(s.with_(galore_targets="all-linear"), t.name) for t in s.model.linears)


def test_galore_needs_a_full_fine_tune_and_layerwise_no_accumulation():
    m = resolve(SMOL)
    with pytest.raises(MemlintError, match="needs --method full"):
        Setup(m, method="lora", optim="galore_adamw")
    with pytest.raises(MemlintError, match="no gradient accumulation"):
        Setup(m, optim="galore_adamw_layerwise", grad_accum=4)
    assert Setup(m, optim="galore_adamw_layerwise").steps_in_backward


def test_the_plan_reads_optim_target_modules_and_the_rank():
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_source

    src = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M")
args = TrainingArguments("o", per_device_train_batch_size=2, optim="galore_adamw_layerwise",
                         optim_target_modules=["attn", "mlp"], optim_args="rank=64, update_proj_gap=100")
Trainer(model=model, args=args, train_dataset=ds).train()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["galore_rank"].value == 64 and plan.fields["galore_targets"].value == ["attn", "mlp"]
    plain = extract_source(src.replace(', optim_args="rank=64, update_proj_gap=100"', ""), "train.py")
    assert plain.fields["galore_rank"].value == 128 and plain.fields["galore_rank"].source == "library-default"
    from memlint.plan import TrainingPlan, Value

    fields = {k: plan.fields[k] for k in plan.fields if plan.fields[k].known}
    fields["max_length"] = Value(256, "literal")
    setup = setup_from_plan(TrainingPlan("train.py", fields), {}).setup
    assert (setup.optim, setup.galore_rank, setup.galore_targets) == ("galore_adamw_layerwise", 64, ("attn", "mlp"))
    assert setup.steps_in_backward


@pytest.mark.parametrize("optim, kw, rel", [
    ("galore_adamw", dict(seq=256), 0.01),
    ("galore_adamw", dict(seq=64, recompute=True), 0.01),
    ("galore_adamw_layerwise", dict(seq=64, recompute=True), 0.02),
])
def test_the_estimate_matches_transformers_own_galore_step(optim, kw, rel):
    pytest.importorskip("torch")
    pytest.importorskip("galore_torch")
    from memlint.measure import measure

    s = Setup(resolve(SMOL), optim=optim, galore_rank=32, **kw)
    traced = measure(s, device="trace").to_json()["measured_peak"]
    assert estimate(s).allocated_peak == pytest.approx(traced, rel=rel)


def test_layerwise_is_an_upper_bound_where_activations_dominate():
    pytest.importorskip("torch")
    pytest.importorskip("galore_torch")
    from memlint.measure import measure

    s = Setup(resolve(SMOL), optim="galore_adamw_layerwise", galore_rank=32, seq=256)
    traced = measure(s, device="trace").to_json()["measured_peak"]
    assert traced <= estimate(s).allocated_peak <= traced * 1.05
