"""Remote-code families: checkpoints whose modelling code lives in their own Hugging Face
repository (trust_remote_code), not in transformers. memlint never runs that code. Each family
below is counted as a transformers architecture whose parameters have the same shapes, tensor
by tensor, and the remote code's own linear names are put back afterwards (a fused projection
is the concatenation of the transformers projections it replaces: same input, outputs summed),
because LoRA target lists (peft target_modules) name the real modules.

Why each mapping is exact (module by module, from the published modelling code):

qwen (Qwen/Qwen-*, QWenLMHeadModel) -> qwen2. wte; per block ln_1/ln_2 RMSNorm,
  attn.c_attn = Linear(h, 3*kv_channels*heads, bias) (q, k and v fused, with biases: qwen2's
  q/k/v biases), attn.c_proj = Linear(kv_channels*heads, h, no bias) (o_proj), mlp.w1 and mlp.w2 =
  Linear(h, intermediate_size // 2, no bias) with w1(x) * silu(w2(x)) (w2 is the gate, w1 up),
  mlp.c_proj = Linear(intermediate_size // 2, h) (down_proj); ln_f; an untied lm_head; the rotary
  inv_freq is a buffer. config.json's intermediate_size is twice the MLP width.
baichuan (baichuan-inc/Baichuan-*, Baichuan2-*) -> llama with num_key_value_heads = heads.
  self_attn.W_pack = Linear(h, 3h, no bias) (q, k, v fused), o_proj, mlp gate/up/down_proj,
  RMSNorms, untied lm_head (Baichuan2's NormHead normalises a [vocab, h] weight: same shape).
  The 13B models use ALiBi instead of rotary: no parameters either way.
chatglm (THUDM/chatglm2-6b, chatglm3-6b*, glm-4-9b*) -> qwen2. embedding.word_embeddings,
  per block input/post_attention_layernorm RMSNorm, self_attention.query_key_value =
  Linear(h, (heads + 2*multi_query_group_num)*kv_channels, bias: add_qkv_bias),
  self_attention.dense (o_proj, no bias), mlp.dense_h_to_4h = Linear(h, 2*ffn_hidden_size)
  (gate and up fused, SwiGLU), mlp.dense_4h_to_h (down_proj), encoder.final_layernorm and an
  untied transformer.output_layer (kept under the catalog's name lm_head).
chatglm v1 (THUDM/chatglm-6b: config.json has inner_hidden_size, no multi_query_group_num)
  -> gpt_neox, whose module names are the same: LayerNorm (with bias) before attention and MLP,
  attention.query_key_value = Linear(h, 3h, bias), attention.dense (bias), mlp.dense_h_to_4h
  (h -> inner_hidden_size, bias), GELU, mlp.dense_4h_to_h (bias), final_layernorm; the config
  has no tie_word_embeddings key, so transformers' default (True) ties lm_head to the word
  embeddings (6,173,286,400 parameters in total).
internlm2 (internlm/internlm2*, internlm2_5*; early configs say model_type "internlm" with
  architectures InternLM2ForCausalLM) -> llama. tok_embeddings, attention.wqkv =
  Linear(h, (heads + 2*kv_heads)*head_dim, bias: config.bias), attention.wo, feed_forward.w1
  (gate), w3 (up), w2 (down), attention_norm/ffn_norm RMSNorm, an untied output head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from memlint.errors import MemlintError


@dataclass(frozen=True)
class Remote:
    model_type: str                       # the checkpoint's own model_type
    counted_as: str                       # the transformers model_type with the same parameter shapes
    config: dict                          # the transformers config that has them
    modules: Mapping[str, tuple[str, ...]]  # real linear name -> the transformers linears it fuses


def _need(cond: bool, cfg: Mapping[str, Any], why: str) -> None:
    if not cond:
        raise MemlintError(f"{cfg.get('model_type')} config: {why}; memlint counts this remote-code "
                           "family only where its shapes map exactly onto a transformers architecture")


def _qwen(c: Mapping[str, Any]) -> Remote:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    _need(c.get("kv_channels", h // heads) * heads == h, c, "kv_channels * num_attention_heads != hidden_size")
    _need(c.get("no_bias", True), c, "no_bias is false (biases on c_proj and the MLP)")
    cfg = {"hidden_size": h, "num_attention_heads": heads, "num_key_value_heads": heads,
           "intermediate_size": c["intermediate_size"] // 2, "num_hidden_layers": c["num_hidden_layers"],
           "vocab_size": c["vocab_size"], "tie_word_embeddings": c.get("tie_word_embeddings", False),
           "max_position_embeddings": c.get("max_position_embeddings") or c.get("seq_length"),
           "rms_norm_eps": c.get("layer_norm_epsilon", 1e-6)}
    return Remote("qwen", "qwen2", cfg, {
        "attn.c_attn": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "attn.c_proj": ("self_attn.o_proj",),
        "mlp.w1": ("mlp.up_proj",), "mlp.w2": ("mlp.gate_proj",), "mlp.c_proj": ("mlp.down_proj",)})


def _baichuan(c: Mapping[str, Any]) -> Remote:
    cfg = {"hidden_size": c["hidden_size"], "num_attention_heads": c["num_attention_heads"],
           "num_key_value_heads": c["num_attention_heads"], "intermediate_size": c["intermediate_size"],
           "num_hidden_layers": c["num_hidden_layers"], "vocab_size": c["vocab_size"],
           "tie_word_embeddings": c.get("tie_word_embeddings", False), "attention_bias": False, "mlp_bias": False,
           "max_position_embeddings": c.get("max_position_embeddings") or c.get("model_max_length"),
           "rms_norm_eps": c.get("rms_norm_eps", 1e-6)}
    return Remote("baichuan", "llama", cfg, {
        "self_attn.W_pack": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")})


def _chatglm(c: Mapping[str, Any]) -> Remote:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    if "multi_query_group_num" not in c and "inner_hidden_size" in c:  # ChatGLM-6B (v1): GLM blocks
        _need(c.get("position_encoding_2d", True), c, "position_encoding_2d is false")
        cfg = {"hidden_size": h, "num_attention_heads": heads, "intermediate_size": c["inner_hidden_size"],
               "num_hidden_layers": c["num_layers"], "vocab_size": c["vocab_size"],
               "tie_word_embeddings": c.get("tie_word_embeddings", True), "attention_bias": True,
               "use_parallel_residual": False, "max_position_embeddings": c.get("max_sequence_length"),
               "layer_norm_eps": c.get("layernorm_epsilon", 1e-5)}
        return Remote("chatglm", "gpt_neox", cfg, {})
    kv_channels = c.get("kv_channels", h // heads)
    _need(kv_channels * heads == h, c, "kv_channels * num_attention_heads != hidden_size")
    _need(c.get("rmsnorm", True) and c.get("post_layer_norm", True), c, "not RMSNorm with a final norm")
    _need(not c.get("add_bias_linear", False), c, "add_bias_linear is true")
    _need(c.get("add_qkv_bias", False), c, "add_qkv_bias is false")
    _need(not c.get("pre_seq_len"), c, "pre_seq_len is set (a P-tuning prefix encoder)")
    groups = c["multi_query_group_num"] if c.get("multi_query_attention", False) else heads
    cfg = {"hidden_size": h, "num_attention_heads": heads, "num_key_value_heads": groups,
           "intermediate_size": c["ffn_hidden_size"], "num_hidden_layers": c["num_layers"],
           "vocab_size": c["padded_vocab_size"], "tie_word_embeddings": c.get("tie_word_embeddings", False),
           "max_position_embeddings": c.get("seq_length"), "rms_norm_eps": c.get("layernorm_epsilon", 1e-5)}
    return Remote("chatglm", "qwen2", cfg, {
        "self_attention.query_key_value": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "self_attention.dense": ("self_attn.o_proj",),
        "mlp.dense_h_to_4h": ("mlp.gate_proj", "mlp.up_proj"), "mlp.dense_4h_to_h": ("mlp.down_proj",)})


def _internlm2(c: Mapping[str, Any]) -> Remote:
    bias = bool(c.get("bias", True))
    cfg = {"hidden_size": c["hidden_size"], "num_attention_heads": c["num_attention_heads"],
           "num_key_value_heads": c.get("num_key_value_heads") or c["num_attention_heads"],
           "intermediate_size": c["intermediate_size"], "num_hidden_layers": c["num_hidden_layers"],
           "vocab_size": c["vocab_size"], "tie_word_embeddings": c.get("tie_word_embeddings", False),
           "attention_bias": bias, "mlp_bias": False, "max_position_embeddings": c.get("max_position_embeddings"),
           "rms_norm_eps": c.get("rms_norm_eps", 1e-6)}
    return Remote("internlm2", "llama", cfg, {
        "attention.wqkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "attention.wo": ("self_attn.o_proj",),
        "feed_forward.w1": ("mlp.gate_proj",), "feed_forward.w3": ("mlp.up_proj",),
        "feed_forward.w2": ("mlp.down_proj",)})


_FAMILIES: dict[str, Callable[[Mapping[str, Any]], Remote]] = {
    "qwen": _qwen, "baichuan": _baichuan, "chatglm": _chatglm, "internlm2": _internlm2,
}

# Real names of each family's output layer, which the catalog keeps under the name lm_head.
HEAD_NAMES = {"qwen": "lm_head", "baichuan": "lm_head", "chatglm": "transformer.output_layer",
              "internlm2": "output"}


def _family(cfg: Mapping[str, Any]) -> str | None:
    mt = cfg.get("model_type")
    if mt == "internlm" and "InternLM2ForCausalLM" in (cfg.get("architectures") or ()):
        return "internlm2"  # InternLM2's first configs kept InternLM's model_type
    return mt if mt in _FAMILIES else None


def is_remote(model_type: str) -> bool:
    return model_type in _FAMILIES


def mapping(cfg: Mapping[str, Any]) -> Remote | None:
    """The exact transformers stand-in for a remote-code config (None: not a remote family)."""
    fam = _family(cfg)
    return _FAMILIES[fam](cfg) if fam else None


def apply(remote: Remote, counted: dict) -> dict:
    """Counts of the stand-in, with the remote code's linear names and model_type put back."""
    lin = counted["linear_modules"]
    out: dict[str, dict] = {}
    used: set[str] = set()
    for real, parts in remote.modules.items():
        ds = [lin[p] for p in parts]
        if len({(d["in"], d["bias"], d["count"], d["role"]) for d in ds}) != 1:
            raise AssertionError(f"{remote.model_type}: {parts} do not fuse into one linear")
        out[real] = {**ds[0], "out": sum(d["out"] for d in ds)}
        used.update(parts)
    for name, d in lin.items():
        if name not in used:
            out[name] = d
    # Order as the model lists them: each real linear where its first part was.
    order = {n: i for i, n in enumerate(lin)}
    first = {real: order[parts[0]] for real, parts in remote.modules.items()}
    out = dict(sorted(out.items(), key=lambda kv: first.get(kv[0], order.get(kv[0], 0))))
    arch = {**counted["arch"], "model_type": remote.model_type}
    return {**counted, "linear_modules": out, "arch": arch, "counted_as": remote.counted_as,
            "module_names": {real: list(parts) for real, parts in remote.modules.items()}}
