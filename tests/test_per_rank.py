"""Per-rank memory over N GPUs: the seed's sharding figure, what each sharding stage divides,
what it does not (activations, gathered layers, buckets), offload, and a real FSDP2 run."""

import json

import pytest

from conftest import needs_torch
from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import GIB, Setup, estimate
from memlint.estimate import sharding
from memlint.estimate.from_plan import apply_assumptions, setup_from_plan
from memlint.plan import Value


@pytest.fixture(scope="module")
def llama():
    return resolve("meta-llama/Llama-3.1-8B")


def state(e):
    return e.bytes("weights") + e.bytes("gradients") + e.bytes("optimizer")


def real(spec, **kw):
    return estimate(Setup(spec, **kw), "real")


# --------------------------------------------------------------------------- the seed article


@pytest.mark.parametrize("shard", ["fsdp", "zero3"])
def test_eight_gpus_full_shard_is_16_1_gb_of_model_state_per_gpu(llama, shard):
    # Seed 000: "8 张卡完全切分：128.5 GB ÷ 8 ≈ 16.1 GB 每卡（模型状态）" — 16 B/param of
    # Llama-3.1-8B's 8,030,261,248 parameters, split 8 ways.
    one = estimate(Setup(llama), "textbook")
    eight = estimate(Setup(llama, gpus=8, shard=shard), "textbook")
    assert round(state(one) / 1e9, 1) == 128.5
    assert state(eight) == 8_030_261_248 * 16 // 8
    assert round(state(eight) / 1e9, 1) == 16.1
    # "再加上每张卡自己的激活和开销": activations are per card, not divided.
    assert eight.bytes("activations") == one.bytes("activations")


def test_plain_data_parallel_does_not_shrink_the_model_state(llama):
    # "普通的数据并行让每张卡各存一份完整的 16 字节状态"
    assert state(estimate(Setup(llama, gpus=8), "textbook")) == state(estimate(Setup(llama), "textbook"))


# --------------------------------------------------------------------------- stage identities


def test_each_zero_stage_divides_one_more_state(llama):
    one = estimate(Setup(llama), "textbook")
    z = {k: estimate(Setup(llama, gpus=4, shard=k), "textbook") for k in ("zero1", "zero2", "zero3")}
    w, g, o = (one.bytes(c) for c in ("weights", "gradients", "optimizer"))
    assert [z["zero1"].bytes(c) for c in ("weights", "gradients", "optimizer")] == [w, g, o // 4]
    assert [z["zero2"].bytes(c) for c in ("weights", "gradients", "optimizer")] == [w, g // 4, o // 4]
    assert [z["zero3"].bytes(c) for c in ("weights", "gradients", "optimizer")] == [w // 4, g // 4, o // 4]


def test_real_per_rank_peak_falls_with_each_stage_and_with_more_gpus(llama):
    peaks = [real(llama, gpus=8, shard=k, recompute=True).peak for k in ("none", "zero1", "zero2", "zero3")]
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == 4
    by_n = [real(llama, gpus=n, shard="fsdp", recompute=True).peak for n in (2, 4, 8, 16)]
    assert by_n == sorted(by_n, reverse=True)


def test_what_sharding_does_not_divide(llama):
    two = real(llama, gpus=2, shard="fsdp", batch=2, seq=4096)
    eight = real(llama, gpus=8, shard="fsdp", batch=2, seq=4096)
    for name in ("activations", "logits"):
        assert two.bytes(name) == eight.bytes(name) == real(llama, batch=2, seq=4096).bytes(name)
    # The root unit (embeddings + lm_head + final norm) and one decoder layer stay gathered.
    root = 2 * 128_256 * 4096 + 4096
    layer = (8_030_261_248 - root) // 32
    assert eight.bytes("weights") == -(-8_030_261_248 * 2 // 8) + root * 2 + layer * 2
    # Reduce-scatter staging: one decoder layer's unsharded gradients, not the root's.
    assert eight.bytes("buffers") == layer * 2 == 436_224_000
    assert any("not sharded" in n for n in eight.assumptions)


def test_ddp_keeps_a_bucket_copy_of_every_gradient(llama):
    ddp = real(llama, gpus=4, method="lora")
    one = real(llama, method="lora")
    assert ddp.bytes("buffers") == ddp.bytes("gradients") == one.bytes("gradients")
    assert ddp.allocated_peak == one.allocated_peak + ddp.bytes("buffers")
    assert "buffers" not in one.components


def test_deepspeed_reduce_buckets_use_the_engine_defaults(llama):
    ds = sharding.facts()["deepspeed"]
    z2 = real(llama, gpus=8, shard="zero2")
    z3 = real(llama, gpus=8, shard="zero3")
    assert z2.bytes("buffers") == ds["reduce_bucket_size"] * 2            # one bf16 bucket
    assert z3.bytes("buffers") == 2 * ds["reduce_bucket_size"] * 2        # overlap_comm: two


def test_hybrid_shard_splits_within_a_node_and_replicates_across(llama):
    hybrid = real(llama, gpus=8, nodes=2, shard="fsdp_hybrid")
    four = real(llama, gpus=4, shard="fsdp")
    assert state(hybrid) == state(four)
    assert hybrid.allocated_peak == four.allocated_peak
    assert state(hybrid) > state(real(llama, gpus=8, shard="fsdp"))


def test_shard_grad_op_gathers_all_weights_for_forward_and_backward(llama):
    full = real(llama, gpus=8, shard="fsdp")
    grad_op = real(llama, gpus=8, shard="fsdp_shard_grad_op")
    assert grad_op.bytes("gradients") == full.bytes("gradients")
    assert grad_op.bytes("weights") > 8_030_261_248 * 2   # every unit gathered + its resident shard
    assert grad_op.phases["optimizer"] == full.phases["optimizer"]  # resharded after backward


def test_fsdp_with_lora_shards_the_frozen_base_too(llama):
    one = real(llama, method="lora")
    eight = real(llama, gpus=8, shard="fsdp", method="lora")
    resident = eight.bytes("weights") - sharding.layout(eight.setup, "real", one.bytes("weights"),
                                                        one.bytes("gradients")).gathered
    assert resident == -(-one.bytes("weights") // 8)
    assert eight.bytes("gradients") == -(-one.bytes("gradients") // 8)


# --------------------------------------------------------------------------- offload


def test_optimizer_offload_takes_the_state_off_every_rank(llama):
    on = real(llama, gpus=8, shard="zero2")
    off = real(llama, gpus=8, shard="zero2", offload="optimizer")
    assert off.bytes("optimizer") == 0 and on.bytes("optimizer") > 0
    assert off.peak < on.peak
    assert any("CPU offload" in n and "optimizer" in n for n in off.assumptions)


def test_fsdp_parameter_offload_leaves_only_the_gathered_units_on_the_gpu(llama):
    off = real(llama, gpus=8, shard="fsdp", offload="params")
    lay = sharding.layout(off.setup, "real", 8_030_261_248 * 2, 8_030_261_248 * 2)
    assert off.bytes("weights") == lay.gathered
    assert off.bytes("gradients") == off.bytes("optimizer") == 0


def test_invalid_distributed_setups_are_refused(llama):
    with pytest.raises(MemlintError, match="multiple of --nodes"):
        Setup(llama, gpus=6, nodes=4, shard="fsdp_hybrid")
    with pytest.raises(MemlintError, match="needs --shard zero3, fsdp"):
        Setup(llama, gpus=4, shard="fsdp_shard_grad_op", offload="params")


# --------------------------------------------------------------------------- plan -> Setup


def _zero3_plan():
    from memlint.extract import extract_file

    return extract_file("fixtures/scripts/deepspeed_zero3.py")


def test_a_zero3_script_over_gpus_n_is_estimated_per_rank_with_fp32_master_state():
    plan, extra = apply_assumptions(_zero3_plan().with_values(distributed=Value("zero3", "assumed")), ["gpus=8"])
    s = setup_from_plan(plan, extra).setup
    assert (s.gpus, s.shard, s.precision, s.dtype) == (8, "zero3", "master-fp32", "bf16")
    e = estimate(s, "real")
    assert e.bytes("optimizer") == -(-s.model.params * 12 // 8)


def test_plan_num_gpus_and_offload_reach_the_setup():
    plan = _zero3_plan().with_values(distributed=Value("zero3", "assumed"), num_gpus=Value(16, "literal"),
                                     offload=Value("optimizer", "literal"))
    s = setup_from_plan(plan, {}).setup
    assert (s.gpus, s.offload) == (16, "optimizer")
    plan = plan.with_values(distributed=Value("none", "literal"))
    planned = setup_from_plan(plan, {})
    assert (planned.setup.shard, planned.setup.offload) == ("none", "none")
    assert any("DDP" in n for n in planned.notes) and any("without offload" in n for n in planned.notes)


def test_cli_plan_with_gpus_answers_per_rank(capsys):
    from memlint.cli import main

    code = main(["plan", "--gpus", "8", "--gpu", "H100", "--assume", "distributed=zero3",
                 "fixtures/scripts/deepspeed_zero3.py"])
    out = capsys.readouterr().out
    assert code == 0
    assert "per GPU (rank) of 8" in out and "buffers" in out
    code = main(["plan", "--gpus", "8", "--assume", "distributed=zero3", "--format", "json",
                 "fixtures/scripts/deepspeed_zero3.py"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["estimate"]["per_rank"] == {"gpus": 8, "nodes": 1, "shard": "zero3", "offload": "none"}


# --------------------------------------------------------------------------- a real engine

TINY = dict(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=2048, max_position_embeddings=256, tie_word_embeddings=False)


@needs_torch
@pytest.mark.slow  # ~8 s on an idle 2-core machine (one forkserver import of transformers); deselect with -m "not slow"
def test_two_fsdp2_ranks_match_the_per_rank_estimate():
    from memlint.measure import tiny_spec
    from memlint.measure.distributed import measure_ranks

    s = Setup(tiny_spec("llama", TINY), dtype="fp32", precision="fp32", batch=2, seq=64, gpus=2, shard="fsdp")
    ranks = measure_ranks(s, engine="fsdp", ranks=2)
    e = estimate(s, "real")
    assert [r.rank for r in ranks] == [0, 1]
    for r in ranks:
        assert r.components["weights"] == pytest.approx(-(-s.model.params * 4 // 2), rel=0.002)
        assert r.components["optimizer"] == pytest.approx(e.bytes("optimizer"), rel=0.002)
        assert r.peak == pytest.approx(e.allocated_peak, rel=0.02)
        assert r.phase == e.peak_phase
    assert e.allocated_peak < estimate(s.with_(gpus=1, shard="none"), "real").allocated_peak
    assert e.allocated_peak / GIB < 1
