"""Decoder layers under torch.compile (Setup.compiled_layers, `estimate --compiled-layers`; read from the flags that
set compiled_loss): what inductor's partition saves for backward, measured with saved_tensors_hooks on transformers'
own LlamaDecoderLayer compiled by inductor on CPU (skipped where it cannot compile), against the estimate's
per-token terms (estimate/activations.py compiled_layer_savings)."""

from __future__ import annotations

import os

import pytest

from memlint.estimate import Setup, estimate
from memlint.estimate.activations import _per_token_layer_bytes

CFG = dict(hidden_size=256, intermediate_size=688, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
           vocab_size=512, max_position_embeddings=512, tie_word_embeddings=False)
SEQ = 64


def _saved_per_token(train: bool) -> tuple[float, float]:
    """(eager, compiled) bytes per token one layer saves for backward, its input and weights left out."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    torch.manual_seed(0)
    cfg = AutoConfig.for_model("llama", **CFG)
    cfg._attn_implementation = "sdpa"
    layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
    layer.requires_grad_(train)
    x = torch.randn(1, SEQ, CFG["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, torch.arange(SEQ)[None])
    skip = {p.untyped_storage().data_ptr() for p in layer.parameters()} | {x.untyped_storage().data_ptr()}

    def saved(fn) -> int:
        seen: dict[int, int] = {}

        def pack(t):
            if t.untyped_storage().data_ptr() not in skip:
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn(x, position_embeddings=(cos, sin), attention_mask=None)
        (out[0] if isinstance(out, tuple) else out).float().sum().backward()
        return sum(seen.values())

    eager = saved(layer)
    try:
        compiled = torch.compile(layer, backend="inductor")
        saved(compiled)
    except Exception as exc:  # no C++ toolchain for inductor's CPU kernels
        pytest.skip(f"inductor cannot compile here: {type(exc).__name__}")
    return eager / SEQ, saved(compiled) / SEQ


@pytest.mark.skipif(os.environ.get("MEMLINT_SLOW") != "1", reason="inductor compiles two layers (~100 s on 2 cores): "
                    "set MEMLINT_SLOW=1")
@pytest.mark.parametrize("method", ["full", "frozen"])
def test_inductor_saves_what_the_estimate_counts(method):
    from memlint.measure import tiny_spec

    spec = tiny_spec("llama", CFG)
    # "frozen": the layer's weights need no gradient (a LoRA run's base, here without adapters in the layer)
    kw = dict(method="full") if method == "full" else dict(method="lora", lora_targets=("lm_head",))
    s = Setup(spec, dtype="bf16", precision="pure-bf16", seq=SEQ, **kw)
    eager_est = _per_token_layer_bytes(s)[0]
    comp_est = _per_token_layer_bytes(s.with_(compiled_layers=True))[0]
    eager, compiled = _saved_per_token(method == "full")
    h, a, hd = CFG["hidden_size"], 2, CFG["hidden_size"] // CFG["num_attention_heads"]
    # eager keeps the rotary cos / sin per layer too (the estimate counts them once per model)
    assert eager == eager_est + 2 * a * hd
    # compiled: the layer's input is saved (left out of the measurement above); on CPU o_proj's input is a copy of
    # the flash kernel's [b, heads, s, d] output, on CUDA a view of it (its output is laid out [b, s, heads, d])
    cpu_copy = a * h if method == "full" else 0
    assert compiled + a * h - cpu_copy == comp_est
    assert comp_est < 0.75 * eager_est


def test_the_estimate_and_the_readers():
    from memlint.catalog import resolve

    base = Setup(resolve("meta-llama/Llama-3.2-3B"), dtype="bf16", precision="pure-bf16", batch=2, seq=4096)
    eager, comp = estimate(base), estimate(base.with_(compiled_layers=True))
    assert comp.bytes("activations") < 0.7 * eager.bytes("activations")
    # fp32 weights under autocast, eager attention, quantized bases: counted as eager
    for other in (dict(dtype="fp32", precision="amp-bf16"), dict(attn="eager")):
        s = base.with_(**other)
        assert estimate(s.with_(compiled_layers=True)).bytes("activations") == estimate(s).bytes("activations")
