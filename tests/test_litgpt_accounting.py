"""LitGPT's own model code (model_code="litgpt"): the estimate against a fake-tensor trace of LitGPT's GPT,
LoRA, chunked lm_head and chunked cross-entropy (memlint.measure.litgpt), on tiny configs with random weights.

The trace imports the installed `litgpt` (skipped when it is not importable); the estimate reads the same
shapes from a Hugging Face config.json of the same architecture."""

from __future__ import annotations

import json

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate import litgpt as lit
from memlint.estimate.model_state import trainable_params

V = 1024
LLAMA_LIT = dict(name="tiny-llama", block_size=512, vocab_size=V, padded_vocab_size=V, n_layer=2, n_head=4, n_embd=256,
                 n_query_groups=4, rotary_percentage=1.0, parallel_residual=False, bias=False,
                 norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", intermediate_size=688)
LLAMA_HF = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=256, intermediate_size=688,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, vocab_size=V,
                max_position_embeddings=512, tie_word_embeddings=False)
NEOX_LIT = dict(name="tiny-neox", block_size=512, vocab_size=V, padded_vocab_size=V, n_layer=2, n_head=4, n_embd=256,
                n_query_groups=4, rotary_percentage=0.25, parallel_residual=True, bias=True,
                norm_class_name="LayerNorm", mlp_class_name="GptNeoxMLP", intermediate_size=1024)
NEOX_HF = dict(model_type="gpt_neox", architectures=["GPTNeoXForCausalLM"], hidden_size=256, intermediate_size=1024,
               num_hidden_layers=2, num_attention_heads=4, vocab_size=V, max_position_embeddings=512, rotary_pct=0.25,
               use_parallel_residual=True, hidden_act="gelu", tie_word_embeddings=False)


def _spec(tmp_path, cfg: dict):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return resolve(str(tmp_path))


def _trace(lit_cfg: dict, **kw):
    pytest.importorskip("litgpt")
    pytest.importorskip("lightning")
    from memlint.measure.litgpt import LitStep, trace

    return trace(LitStep(None, config=lit_cfg, **kw))


def _act(e, s) -> int:
    """The estimate's saved activations as the trace counts them (live at lm_head's first call): with ln_f's
    output, which the estimate counts in the logits term (it lives while lm_head runs)."""
    return e.components["activations"].bytes + 2 * s.seq * s.batch * s.model.hidden


def _setup(spec, batch, seq, r=8, targets=("query", "value"), **kw) -> Setup:
    lora = dict(method="lora", lora_r=r, lora_targets=targets, lora_dropout=0.05, adapter_dtype="bf16") if r else {}
    return Setup(spec, model_code="litgpt", precision="pure-bf16", dtype="bf16", optim="adamw_torch",
                 batch=batch, seq=seq, **{**lora, **kw})


@pytest.mark.parametrize("kv, batch, seq", [(4, 2, 384), (2, 1, 512)])
def test_llama_lora_matches_litgpt_trace(tmp_path, kv, batch, seq):
    t = _trace({**LLAMA_LIT, "n_query_groups": kv}, batch=batch, seq=seq, lora_r=8)
    s = _setup(_spec(tmp_path, {**LLAMA_HF, "num_key_value_heads": kv}), batch, seq)
    e = estimate(s, "real")
    assert t["trainable_params"] == trainable_params(s)
    assert e.components["gradients"].bytes == t["components"]["gradients"]
    # AdamW's m and v in bf16; the trace also counts each parameter's fp32 `step` scalar
    assert 0 <= t["components"]["optimizer"] - e.components["optimizer"].bytes <= 4 * 4 * s.model.layers
    body = _act(e, s)
    assert abs(body - t["components"]["activations"]) / t["components"]["activations"] < 0.03
    assert abs(e.allocated_peak - t["peak"]) / t["peak"] < 0.04, (e.allocated_peak, t["peak"])


def test_parallel_gpt_neox_lora_matches_litgpt_trace(tmp_path):
    t = _trace(NEOX_LIT, batch=2, seq=384, lora_r=8)
    s = _setup(_spec(tmp_path, NEOX_HF), 2, 384)
    e = estimate(s, "real")
    assert t["trainable_params"] == trainable_params(s)
    assert abs(_act(e, s) - t["components"]["activations"]) / t["components"]["activations"] < 0.03
    assert abs(e.allocated_peak - t["peak"]) / t["peak"] < 0.04, (e.allocated_peak, t["peak"])


def test_full_fine_tune_matches_litgpt_trace(tmp_path):
    t = _trace(LLAMA_LIT, batch=2, seq=384, lora_r=0)
    s = _setup(_spec(tmp_path, LLAMA_HF), 2, 384, r=0)
    e = estimate(s, "real")
    assert t["trainable_params"] == s.model.params
    assert abs(_act(e, s) - t["components"]["activations"]) / t["components"]["activations"] < 0.05
    assert abs(e.allocated_peak - t["peak"]) / t["peak"] < 0.05, (e.allocated_peak, t["peak"])


@pytest.mark.parametrize("keeps", [False, True])
def test_qlora_4bit_lm_head_and_bnb_inputs_match_litgpt_trace(tmp_path, keeps):
    pytest.importorskip("bitsandbytes")
    t = _trace(LLAMA_LIT, batch=2, seq=384, lora_r=8, quantize="bnb.nf4", bnb_keeps_input=keeps)
    s = _setup(_spec(tmp_path, LLAMA_HF), 2, 384, method="qlora", quant="nf4", double_quant=False, kbit_prep=False,
               litgpt_version="0.4.13" if keeps else None)
    s = s.with_(optim="paged_adamw_32bit")
    e = estimate(s, "real")
    assert abs(e.components["weights"].bytes - t["weights"]) / t["weights"] < 0.02
    assert abs(_act(e, s) - t["components"]["activations"]) / t["components"]["activations"] < 0.03
    assert abs(e.allocated_peak - t["peak"]) / t["peak"] < 0.04, (e.allocated_peak, t["peak"])


def test_litgpt_terms_differ_from_transformers_and_follow_the_version(tmp_path):
    spec = _spec(tmp_path, LLAMA_HF)
    s = _setup(spec, 2, 512)
    hf = Setup(spec, method="lora", lora_r=8, lora_targets=("q_proj", "v_proj"), precision="pure-bf16", dtype="bf16",
               adapter_dtype="bf16", batch=2, seq=512)
    assert estimate(hf, "real").components["logits"].formula != estimate(s, "real").components["logits"].formula
    # RMSNorm in fp32 (litgpt >= 0.2) keeps a 4-byte copy of its input; lit-gpt 2023 kept the bf16 input
    new, old = lit.per_token_layer(s)[1], lit.per_token_layer(s.with_(litgpt_version="0.1.0"))[1]
    h = spec.hidden
    assert new["norms"] == 2 * (4 * h + 4) and old["norms"] == 2 * (2 * h + 2)
    assert lit.facts(s.with_(litgpt_version="0.5.4"))["bnb_keeps_input"]
    assert not lit.facts(s)["bnb_keeps_input"]
    # LitGPT's switches and Hugging Face names hit the same fused-qkv adapters
    assert trainable_params(s) == trainable_params(s.with_(lora_targets=("q_proj", "v_proj")))


def test_litgpt_refuses_what_it_does_not_model(tmp_path):
    spec = _spec(tmp_path, LLAMA_HF)
    with pytest.raises(MemlintError, match="bf16-true"):
        Setup(spec, model_code="litgpt", precision="amp-fp16", dtype="fp32")
    with pytest.raises(MemlintError, match="fp32 weights"):
        Setup(spec, model_code="litgpt", precision="amp-bf16", dtype="bf16")
    with pytest.raises(MemlintError, match="not one of LitGPT's"):
        _setup(spec, 1, 128, targets=("embed_tokens",))
    with pytest.raises(MemlintError, match="model_code"):
        Setup(spec, model_code="megatron")
    pytest.importorskip("torch")
    from memlint.measure import measure

    with pytest.raises(MemlintError, match="memlint.measure.litgpt"):  # memlint measure runs transformers' modules
        measure(_setup(spec, 1, 128), device="trace")


def test_a_litgpt_config_plan_is_estimated_with_litgpt_accounting():
    from pathlib import Path

    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_file

    root = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
    planned = setup_from_plan(extract_file(root / "litgpt_llama3_qlora.yaml"))
    s = planned.setup
    assert s.model_code == "litgpt" and not s.kbit_prep and s.precision == "pure-bf16"
    assert lit.targets(s) == ("query", "key", "value", "projection")  # lora_query/key/value/projection: true
    assert "LitGPT's Block" in estimate(s, "real").components["activations"].formula


@pytest.mark.parametrize("lit_cfg, hf_cfg, r, batch, seq", [
    (LLAMA_LIT, LLAMA_HF, 8, 2, 384), (LLAMA_LIT, LLAMA_HF, 8, 1, 256), (NEOX_LIT, NEOX_HF, 8, 2, 384),
    (LLAMA_LIT, LLAMA_HF, 0, 2, 384), (NEOX_LIT, NEOX_HF, 0, 2, 384),
])
def test_bf16_mixed_matches_litgpt_trace(tmp_path, lit_cfg, hf_cfg, r, batch, seq):
    """Fabric's bf16-mixed: fp32 weights under torch.autocast; autocast's bf16 weight copies, kept for backward, are
    the term that grows (one lm_head copy per 128-token chunk for LoRA)."""
    t = _trace(lit_cfg, batch=batch, seq=seq, lora_r=r, precision="bf16-mixed")
    lora = dict(method="lora", lora_r=r, lora_targets=("query", "value"), lora_dropout=0.05) if r else dict(method="full")
    s = Setup(_spec(tmp_path, hf_cfg), model_code="litgpt", precision="amp-bf16", dtype="fp32", optim="adamw_torch",
              batch=batch, seq=seq, **lora)
    e = estimate(s, "real")
    assert e.components["weights"].bytes == t["weights"]
    body = e.components["activations"].bytes + 4 * s.seq * s.batch * s.model.hidden  # ln_f's output is fp32
    assert abs(body - t["components"]["activations"]) / t["components"]["activations"] < 0.03
    assert abs(e.allocated_peak - t["peak"]) / t["peak"] < 0.03, (e.allocated_peak, t["peak"])
    bf16_true = estimate(s.with_(precision="pure-bf16", dtype="bf16", **({"adapter_dtype": "bf16"} if r else {})), "real")
    assert e.allocated_peak > bf16_true.allocated_peak


def test_bf16_mixed_refuses_quantization(tmp_path):
    with pytest.raises(MemlintError, match="Quantization and mixed precision"):
        Setup(_spec(tmp_path, LLAMA_HF), model_code="litgpt", precision="amp-bf16", dtype="fp32", method="qlora",
              quant="nf4", lora_r=8, lora_targets=("query", "value"))
