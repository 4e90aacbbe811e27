"""The first seed article's worked numbers for Llama-3.1-8B, reproduced by --accounting textbook."""

import pytest

from memlint.catalog import resolve
from memlint.estimate import GIB, Setup, estimate
from memlint.estimate.model_state import lora_params

SEVEN = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def llama():
    return resolve("meta-llama/Llama-3.1-8B")


def tb(model, **kw):
    """The articles' configurations: LoRA r16 (the table's default, peft's r=8, is not theirs)."""
    return estimate(Setup(model, **{"lora_r": 16, **kw}), "textbook")


def close(got, want, rel=0.005):
    assert got == pytest.approx(want, rel=rel), (got, want)


def state(e):
    return e.bytes("weights") + e.bytes("gradients") + e.bytes("optimizer")


def test_full_adamw_model_state_is_16_bytes_per_param(llama):
    e = tb(llama)
    close(state(e), 128.5e9)
    assert state(e) == 16 * 8_030_261_248
    close(e.bytes("weights"), 16.1e9)
    close(e.bytes("optimizer"), 3 * 32.1e9)


def test_activations_without_recompute_are_34sbhL(llama):
    e = tb(llama, seq=2048, batch=1)
    close(e.bytes("activations"), 9.1e9, rel=0.005)
    assert e.bytes("activations") == 34 * 2048 * 4096 * 32


def test_recompute_keeps_layer_inputs_plus_one_layer(llama):
    e = tb(llama, recompute=True)
    close(e.bytes("activations"), 0.822e9, rel=0.005)
    assert e.bytes("activations") == 2 * 2048 * 4096 * 32 + 34 * 2048 * 4096


def test_logits_are_fp32_per_position(llama):
    close(tb(llama).bytes("logits"), 1.05e9)


def test_eager_attention_adds_the_score_matrix(llama):
    assert tb(llama, attn="eager").bytes("activations") == (34 * 2048 * 4096 + 5 * 32 * 2048 * 2048) * 32


def test_lora_r16_on_seven_projections(llama):
    assert lora_params(llama, 16, SEVEN) == 41_943_040
    assert lora_params(llama, 16, "all-linear") == 41_943_040
    e = tb(llama, method="lora", lora_targets=SEVEN)
    lora_state = state(e) - 8_030_261_248 * 2  # the frozen bf16 base is the rest
    close(lora_state, 0.67e9, rel=0.005)
    close(state(e), 16.8e9, rel=0.005)


@pytest.mark.parametrize("dq,want", [(True, 5.7e9), (False, 6.0e9)])
def test_qlora_nf4_base(llama, dq, want):
    e = tb(llama, method="qlora", quant="nf4", double_quant=dq)
    base = e.bytes("weights") - 41_943_040 * 2
    close(base, want, rel=0.01)


def test_qlora_double_quant_is_4_127_bits(llama):
    e = tb(llama, method="qlora", quant="nf4")
    linear = e.bytes("weights") - 41_943_040 * 2 - (8_030_261_248 - 6_979_321_856) * 2
    assert linear / 6_979_321_856 * 8 == pytest.approx(4.127, abs=0.0005)
    close(linear, 3.60e9, rel=0.002)


def test_zero3_over_8_gpus(llama):
    e = tb(llama, gpus=8, shard="zero3")
    close(state(e), 16.1e9, rel=0.005)


def test_lora_with_recompute_at_4x8192_is_about_27_gib(llama):
    e = tb(llama, method="lora", lora_targets=SEVEN, recompute=True, batch=4, seq=8192)
    assert (e.bytes("activations") + e.bytes("logits")) / GIB == pytest.approx(27, rel=0.04)


def test_textbook_peak_is_the_sum_of_the_buckets(llama):
    e = tb(llama)
    assert e.peak == sum(c.bytes for c in e.components.values())
