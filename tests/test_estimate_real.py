"""Structure of the real accounting: what the frameworks keep, phase by phase."""

import pytest

from memlint.catalog import resolve
from memlint.estimate import Setup, estimate, find_gpu
from memlint.estimate.levers import largest_batch, longest_seq
from memlint.gpu import fit_of
from memlint.estimate.model_state import lora_params
from memlint.errors import MemlintError


@pytest.fixture(scope="module")
def llama():
    return resolve("meta-llama/Llama-3.1-8B")


def real(model, **kw):
    return estimate(Setup(model, **kw), "real")


def test_bf16_model_with_torch_adamw_keeps_bf16_states_and_no_master(llama):
    e = real(llama)
    assert e.bytes("weights") == 2 * llama.params
    assert e.bytes("gradients") == 2 * llama.params
    assert e.bytes("optimizer") == 4 * llama.params


def test_fp32_weights_under_autocast_keep_fp32_everything(llama):
    e = real(llama, dtype="fp32", precision="amp-bf16")
    assert e.bytes("weights") == e.bytes("gradients") == 4 * llama.params
    assert e.bytes("optimizer") == 8 * llama.params


def test_master_fp32_adds_a_4_byte_copy(llama):
    e = real(llama, precision="master-fp32")
    assert e.bytes("optimizer") == 12 * llama.params


def test_lora_adapters_are_fp32_on_a_bf16_base(llama):
    e = real(llama, method="lora", lora_r=16)
    n = lora_params(llama, 16, "all-linear")
    assert e.trainable_params == n
    assert e.bytes("gradients") == 4 * n
    assert e.bytes("weights") == 2 * llama.params + 4 * n


def test_adamw_8bit_states_are_one_byte_plus_block_absmax(llama):
    e = real(llama, method="lora", lora_r=16, optim="adamw_bnb_8bit")
    n = lora_params(llama, 16, "all-linear")
    assert 2 * n < e.bytes("optimizer") < 2 * n * 1.02


def test_kbit_prep_upcasts_unquantized_weights(llama):
    on = real(llama, method="qlora", quant="nf4")
    off = real(llama, method="qlora", quant="nf4", kbit_prep=False)
    rest = llama.params - llama.quantizable_params
    assert on.bytes("weights") - off.bytes("weights") == 2 * rest


def test_nf4_layout_is_half_a_byte_plus_absmax(llama):
    no_dq = real(llama, method="qlora", quant="nf4", double_quant=False, kbit_prep=False)
    dq = real(llama, method="qlora", quant="nf4", kbit_prep=False)
    n = llama.quantizable_params
    saved = no_dq.bytes("weights") - dq.bytes("weights")
    # fp32 absmax per 64 -> uint8 per 64 + fp32 per 256 blocks: ~3/64 bytes saved per weight
    assert saved == pytest.approx(n * (4 / 64 - 1 / 64 - 4 / (64 * 256)), rel=0.01)


def test_peak_is_the_largest_phase_plus_overhead(llama):
    e = real(llama, optim="adamw_torch")
    assert e.peak_phase in ("forward", "backward", "optimizer")
    assert e.peak == max(e.phases.values()) + e.bytes("overhead")
    # the optimizer step sees weights, gradients, state and foreach temporaries, but no activations
    w, g, o = e.bytes("weights"), e.bytes("gradients"), e.bytes("optimizer")
    assert e.phases["optimizer"] == w + g + o + g  # foreach: one state-sized temporary list


def test_gradient_accumulation_keeps_grads_through_forward(llama):
    one = real(llama, recompute=True)
    acc = real(llama, recompute=True, grad_accum=4)
    assert acc.phases["forward"] - one.phases["forward"] == one.bytes("gradients")


def test_recompute_lowers_activations(llama):
    assert real(llama, recompute=True).bytes("activations") < real(llama).bytes("activations") / 5


def test_activations_scale_with_batch_times_sequence(llama):
    a = real(llama, method="lora", batch=1, seq=2048).bytes("activations")
    b = real(llama, method="lora", batch=4, seq=2048).bytes("activations")
    c = real(llama, method="lora", batch=2, seq=4096).bytes("activations")
    # SDPA: linear in tokens, but for the rotary cos/sin tables, which are per position (s x head_dim, not s x b), and
    # what is kept per layer whatever the tokens (autocast's half copies of the fp32 LoRA weights)
    assert b == pytest.approx(4 * a, rel=0.01) and c == pytest.approx(b, rel=1e-4)


def test_eager_attention_grows_with_the_square_of_the_sequence(llama):
    sdpa = real(llama, method="lora", seq=4096).bytes("activations")
    eager = real(llama, method="lora", seq=4096, attn="eager").bytes("activations")
    assert eager - sdpa > llama.heads * 4096 * 4096 * 4 * llama.layers


# FSDP SHARD_GRAD_OP shards weights at rest and gathers them all for forward/backward:
# tests/test_per_rank.py, checked against FSDP2 ranks.
@pytest.mark.parametrize("shard,w,g,o", [("zero1", 1, 1, 8), ("zero2", 1, 8, 8)])
def test_sharding_divides_the_sharded_states(llama, shard, w, g, o):
    one = real(llama)
    e = real(llama, gpus=8, shard=shard)
    assert e.bytes("weights") == one.bytes("weights") // w
    assert e.bytes("gradients") == -(-one.bytes("gradients") // g)
    assert e.bytes("optimizer") == -(-one.bytes("optimizer") // o)


def test_zero3_shards_weights_and_keeps_gathered_layers(llama):
    e = real(llama, gpus=8, shard="zero3")
    layer = 218_103_808  # one Llama-3.1-8B decoder layer's linear weights
    assert e.bytes("weights") == llama.params * 2 // 8 + 2 * layer * 2


def test_optimizer_offload_removes_state_from_the_gpu(llama):
    assert real(llama, gpus=4, shard="zero3", offload="optimizer").bytes("optimizer") == 0


def test_paged_state_is_outside_the_peak(llama):
    e = real(llama, method="qlora", quant="nf4", optim="paged_adamw_8bit")
    assert e.bytes("optimizer") == 0 and e.paged_optimizer > 0


def test_max_batch_is_the_largest_that_fits(llama):
    gpu = find_gpu("A100-80GB")
    s = Setup(llama, method="lora", recompute=True)
    b = largest_batch(s, gpu)
    assert b >= 1
    assert fit_of(estimate(s.with_(batch=b)), gpu).ok and not fit_of(estimate(s.with_(batch=b + 1)), gpu).ok


def test_max_seq_is_a_multiple_of_128_that_fits(llama):
    gpu = find_gpu("24")
    s = Setup(llama, method="qlora", quant="nf4", recompute=True)
    n = longest_seq(s, gpu)
    assert n % 128 == 0 and n > 0
    assert fit_of(estimate(s.with_(seq=n)), gpu).ok and not fit_of(estimate(s.with_(seq=n + 128)), gpu).ok


@pytest.mark.parametrize("kw,msg", [
    (dict(method="qlora"), "4-bit base"),
    (dict(method="full", quant="nf4"), "cannot be fully fine-tuned"),
    (dict(precision="fp32"), "needs --dtype fp32"),
    (dict(shard="zero3"), "needs --gpus 2"),
    (dict(offload="params", gpus=2, shard="zero2"), "needs --shard zero3"),
])
def test_invalid_combinations_are_refused(llama, kw, msg):
    with pytest.raises(MemlintError, match=msg):
        Setup(llama, **kw)


def test_a_trained_tied_embedding_sums_its_two_gradients_out_of_place():
    """lm_head's gradient, then the embedding's, then their sum: two V·h beside every gradient."""
    from memlint.catalog import resolve

    qwen = resolve("Qwen/Qwen2.5-0.5B")  # tied
    assert qwen.tied_embeddings
    e = real(qwen, seq=128, optim="adamw_torch_fused")
    w, g, o = e.bytes("weights"), e.bytes("gradients"), e.bytes("optimizer")
    assert e.phases["backward"] == w + o + g + 2 * qwen.vocab * qwen.hidden * 2
    from memlint.estimate.core import tied_accumulation

    assert tied_accumulation(Setup(qwen, method="lora")) == 0  # the frozen embedding gets no gradient
    assert tied_accumulation(Setup(resolve("meta-llama/Llama-3.1-8B"))) == 0  # untied: one gradient each


def test_defaults_are_the_shared_table(llama):
    """Setup, `estimate` and `plan` take one table (data/library_defaults.json run_defaults)."""
    from memlint.library.defaults import run_default
    from memlint.library.versions import pinned_versions

    s = Setup(llama)
    for name in ("optim", "recompute", "grad_accum", "lora_r", "lora_dropout", "attn", "batch", "seq"):
        assert getattr(s, name) == run_default(name).value
    with pinned_versions({"transformers": "5.24.0", "torch": "2.13.0"}):
        assert Setup(llama).optim == "adamw_torch_fused"
    with pinned_versions({"transformers": "4.40.0"}):
        assert Setup(llama).optim == "adamw_torch"
    assert "transformers" in run_default("optim").why
