"""What one decoder layer saves for backward, per family, as CUDA runs it (catalog/families.json says how each family's
layer is built; no model_type is branched on here).

Every term is read off transformers' modeling code and autograd's saved tensors (derivatives.yaml), with the kernels a
CUDA step runs: CUDA autocast's op lists (layer_norm, rms_norm, softmax, pow ... in fp32), its SDPA kernels (flash for
half without a mask, memory-efficient with a mask or in fp32; none keeps the s x s scores), its fused dropout (a bool
mask). `memlint measure` runs the same step on the CPU with those kernels emulated (measure/cuda_emulation.py), which is
how each term is checked (tests/test_family_traces.py, docs/accounting.md's per-family table).

Notation, bytes per token unless said: h hidden, q = heads·head_dim, kv = kv_heads·head_dim, i the MLP's intermediate
width; x the residual stream's dtype bytes, c the compute dtype's, `amp` autocast on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from memlint.catalog.families import activation_table, config_of, fact_of
from memlint.estimate.model_state import moe_lora, moe_lora_tensors
from memlint.estimate.setup import DTYPE_BYTES, Setup
from memlint.estimate.sharding import fsdp_mixed_precision
from memlint.library.api import attention


# ----------------------------------------------------------------------------------------------- family facts
def fact(s: Setup, name: str) -> Any:
    """A family fact of the model (catalog/families.json), resolved against its config where it is a rule list."""
    return fact_of(s.model, name)


def config(s: Setup, key: str | None, default: Any = None) -> Any:
    """A config value (dotted keys reach into attn_config / ffn_config), else the config class's default."""
    return config_of(s.model, key, default)


def dropout_p(s: Setup, site: str) -> float:
    key = fact(s, "dropout").get(site)
    p = config(s, key, 0.0)
    return float(p or 0.0)


def activation(s: Setup) -> str:
    a = fact(s, "act")
    name = config(s, a.get("key"), a["default"]) if a.get("key") else a["default"]
    return a.get("aliases", {}).get(name, name)


def _activations() -> Any:
    return activation_table()


def sdpa_runs(s: Setup) -> bool:
    """Whether the attention runs SDPA: asked for (the setup's attention kernel is not eager) and the family's
    transformers class has an SDPA path; without one transformers runs eager."""
    return attention()[s.attn].kernel != "eager" and bool(fact(s, "sdpa"))


def effective_attn(s: Setup) -> str:
    """The attention implementation transformers runs: eager for a family without SDPA when the setup asks for sdpa
    (transformers' default when attn_implementation is left out)."""
    if s.attn == "sdpa" and not fact(s, "sdpa"):
        return "eager"
    return s.attn


def sdpa_kernel(dtype_bytes: int, masked: bool, head_dim: int, v_head_dim: int, gqa: bool) -> str:
    """The kernel CUDA's SDPA runs for these inputs (data/cuda_sdpa.json): flash, efficient or math."""
    from memlint import data

    rules = data.load("cuda_sdpa.json")
    if dtype_bytes in rules["flash"]["dtypes"] and not masked and head_dim == v_head_dim <= rules["flash"]["max_head_dim"]:
        return "flash"
    align = rules["efficient"]["align"][str(dtype_bytes)] if str(dtype_bytes) in rules["efficient"]["align"] else 0
    if align and head_dim % align == 0 and v_head_dim % align == 0 and (rules["efficient"]["gqa"] or not gqa):
        return "efficient"
    return "math"


def sliding_layers(s: Setup) -> int:
    """Decoder layers whose attention is windowed, by the config's rule (transformers' config classes)."""
    rule = fact(s, "mask")
    L = s.model.layers
    if not isinstance(rule, dict) or "sliding" not in rule:
        return 0
    types = s.model.config.get("layer_types")
    if types:
        return sum(t == "sliding_attention" for t in types[:L])
    if not config(s, rule["sliding"]):
        return 0
    kind = rule["layers"]
    if kind == "all":
        return L
    if kind == "alternate":  # (i + 1) % 2: layers 0, 2, 4 ... slide
        return (L + 1) // 2
    if kind == "pattern":  # (i + 1) % pattern: every pattern-th layer is global
        p = int(config(s, rule["pattern_key"], 6) or 6)
        return L - L // p
    if kind == "qwen":  # use_sliding_window, from max_window_layers on
        if not config(s, "use_sliding_window", False):
            return 0
        return max(0, L - int(config(s, "max_window_layers", L)))
    return 0


def masked_layers(s: Setup) -> int:
    """Layers whose attention gets an explicit mask at this sequence length: every layer where the family always
    materialises its mask, the windowed layers once the sequence is longer than the window."""
    rule = fact(s, "mask")
    if rule == "always":
        return s.model.layers
    if isinstance(rule, dict) and "sliding" in rule:
        window = config(s, rule["sliding"])
        if window and s.seq > int(window):
            return sliding_layers(s)
    return 0


# ----------------------------------------------------------------------------------------------- the terms
@dataclass
class LayerBytes:
    """One micro-batch's saved bytes: per decoder layer (averaged over the layers where they differ), one layer's
    input, once per model; `parts` names the per-layer terms (bytes per token) for the formula."""

    per_layer: float = 0.0
    layer_input: int = 0
    once: float = 0.0
    parts: list[tuple[str, float]] = field(default_factory=list)

    def add(self, name: str, per_token: float, tokens: int) -> None:
        if per_token:
            self.per_layer += per_token * tokens
            self.parts.append((name, per_token))


def _dims(s: Setup) -> tuple[int, int, int, int, int, bool]:
    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    return m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim, a, residual_bytes(s), s.precision in (
        "amp-bf16", "amp-fp16")


def residual_bytes(s: Setup) -> int:
    """Bytes per element of the residual stream: fp32 when the embeddings are fp32 (fp32 weights under autocast, or
    prepare_model_for_kbit_training's upcast), else the weight dtype; FSDP's mixed precision gathers fp32 weights in
    the half dtype, so the embeddings' output and the stream are half."""
    if fsdp_mixed_precision(s):
        return DTYPE_BYTES[s.compute_dtype]
    if s.dtype == "fp32" or s.upcasts_kbit:
        return 4
    return DTYPE_BYTES[s.dtype]


def layer_weight_bytes(s: Setup) -> int:
    """The dtype bytes of the weights as the layers run them: FSDP's mixed precision gathers fp32 weights in the half
    dtype, else the weights' own dtype."""
    return DTYPE_BYTES[s.compute_dtype] if fsdp_mixed_precision(s) else DTYPE_BYTES[s.dtype]


def norm_saved(s: Setup, width: int, groups: int, xin: int, trains: bool) -> tuple[float, int]:
    """(bytes saved per token, output dtype bytes) of one of the family's norms over `width` features in `groups`
    (heads for a per-head q/k norm), its input in `xin` bytes (norm_parts says what each part is)."""
    inp, rest, out, _ = norm_parts(s, width, groups, xin, trains)
    return inp + rest, out


def norm_parts(s: Setup, width: int, groups: int, xin: int, trains: bool) -> tuple[float, float, int, bool]:
    """(the input it keeps, the rest it keeps, its output dtype, whether the kept input is the input tensor itself) of
    one of the family's norms, per token:

    llama: x.to(fp32) (4·w: a copy of a half input, the input itself when it is fp32), rsqrt (4 per group), weight·(the
    normalised input in the input dtype) keeps the normalised copy when the weight trains; out: the input dtype.
    gemma: fp32 throughout, (1 + w) in fp32 per layer, the fp32 output kept for the weight's gradient; out: input dtype.
    rms_fp32_weight (OLMo 2): (w · fp32 normalised).to(dtype): the fp32 normalised input kept when the weight trains.
    layernorm: F.layer_norm, on CUDA autocast's fp32 list: its fp32 input (a cast copy of a half input), mean and rstd;
    out fp32 under autocast. layernorm_fp32 (OLMo): F.layer_norm(x.float()) without parameters, cast back.
    Two norms reading the same tensor (GPT-NeoX's parallel residual) keep it once when neither casts it."""
    kind = fact(s, "norm_impl") or ("llama" if s.model.arch.get("norm") == "rmsnorm" else "layernorm")
    amp = s.precision in ("amp-bf16", "amp-fp16")
    if kind == "llama":
        return 4 * width, 4 * groups + (xin * width if trains else 0), xin, xin == 4
    if kind in ("gemma", "rms_fp32_weight"):
        return 4 * width, 4 * groups + (4 * width if trains else 0), xin, xin == 4
    if kind == "layernorm_fp32":
        return 4 * width, 8 * groups, xin, xin == 4
    # F.layer_norm
    inp = 4 if amp else xin
    return inp * width, 8 * groups, (4 if amp else xin), inp == xin


def norm_layer_consts(s: Setup, width: int) -> float:
    """Bytes per layer a norm keeps whatever the tokens: under autocast F.layer_norm's fp32 casts of its half weight and
    bias; Gemma's (1 + w) in fp32."""
    kind = fact(s, "norm_impl") or ("llama" if s.model.arch.get("norm") == "rmsnorm" else "layernorm")
    amp = s.precision in ("amp-bf16", "amp-fp16")
    if kind == "gemma":
        return 4 * width
    if kind == "layernorm" and amp and layer_weight_bytes(s) != 4:
        return 4 * width * (1 + (1 if fact(s, "norm_bias") is not False else 0))
    return 0


def _linear_count(s: Setup, role: str) -> float:
    m = s.model
    return sum(l.count for l in m.layer_linears() if l.role == role) / max(m.layers, 1)


def _fused_qkv(s: Setup) -> bool:
    """One projection makes q, k and v (c_attn, query_key_value, qkv_proj, Wqkv): q/k/v are views of its output."""
    m = s.model
    attn_in = [l for l in m.layer_linears() if l.role == "attn_in" and l.count == m.layers]
    return len(attn_in) == 1 and attn_in[0].out_features == m.heads * m.head_dim + 2 * m.kv_heads * m.head_dim


def input_copies(s: Setup, dtype_in: int, role: str, count: float | None = None) -> float:
    """Bytes per token (over one input width) that the trained linears of `role` (or `count` of them) keep of their
    shared input in `dtype_in` bytes: the input once when they run in its dtype; under autocast, when the input is not
    in the compute dtype, each linear casts its own copy (autocast caches the casts of parameters only)."""
    a = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    if amp and dtype_in != a:
        return a * (_linear_count(s, role) if count is None else count)
    return dtype_in


def attention_bytes(s: Setup) -> int:
    """The dtype bytes q, k and v reach SDPA in: the autocast dtype (SDPA is on CUDA autocast's lower-precision list);
    without autocast the projections' output dtype (after bitsandbytes layers on an fp32 residual stream, or linears
    prepare_model_for_kbit_training cast to fp32, fp32)."""
    return DTYPE_BYTES[s.compute_dtype] if s.precision in ("amp-bf16", "amp-fp16") else _lin_out(s)


def _lin_out(s: Setup) -> int:
    """The dtype bytes a projection's output has: the compute dtype (autocast, or the weights'), except bitsandbytes'
    4/8-bit layers, which return their input's dtype (the fp32 residual stream after prepare_model_for_kbit_training)."""
    return residual_bytes(s) if s.quant != "none" else DTYPE_BYTES[s.compute_dtype]


def _act_bytes(s: Setup, x_in: int) -> tuple[float, int, bool]:
    """(bytes saved per intermediate element besides its output, output dtype bytes, whether it keeps its output) of
    the family's activation on an `x_in`-byte input (families.json "activations")."""
    table = _activations()
    entry = table.get(activation(s), table["gelu"])
    amp = s.precision in ("amp-bf16", "amp-fp16")
    saved = entry.get("amp", entry["saved"]) if amp else entry["saved"]
    out = entry.get("amp_out", entry["out"]) if amp else entry["out"]

    def b(v: Any) -> int:
        return x_in if v == "x" else int(v)

    return sum(b(v) for v in saved), b(out), bool(entry.get("saves_out"))


def rotary_dims(s: Setup) -> int:
    """The rotated dims of a head: all of them, or the config's partial rotary (a fraction, or GPT-J's rotary_dim)."""
    hd = s.model.head_dim
    key = fact(s, "rotary_fraction")
    if key is None:
        return hd
    v = config(s, key)
    if v is None:
        return hd
    return int(v) if key == "rotary_dim" else int(hd * float(v))


def _attention(s: Setup, lb: LayerBytes, tokens: int) -> None:
    """The attention kernel's saved tensors: q, k, v, the output o_proj reads, and per kernel: the fused kernels' fp32
    logsumexp per query (the memory-efficient kernel pads it to 32 positions) and, with an explicit mask, the additive
    mask it converted (one per layer, b·s·s) and k/v repeated to every head (transformers repeats them when a mask is
    passed); eager attention's copies for its batched matmuls and, per head and key, the fp32 softmax, its half copy,
    the dropout mask and a soft-cap's tanh."""
    m = s.model
    q = m.heads * m.head_dim
    sq = s.seq
    heads = m.heads
    if sdpa_runs(s):
        masked = masked_layers(s) / m.layers
        for share, with_mask in ((1 - masked, False), (masked, True)):
            if share:
                _sdpa_group(s, lb, tokens, share, with_mask)
        return
    # eager: torch.matmul copies q, k (repeated), v (repeated) for its bmm, the output is transposed contiguous
    a = attention_bytes(s)
    p = dropout_p(s, "attention")
    cap = config(s, fact(s, "attn_logit_softcapping")) if fact(s, "attn_logit_softcapping") else None
    per_key = 4 + (a if a != 4 else 0) + (1 if p > 0 else 0) + (a if cap else 0)
    # the output, transposed contiguous, is kept by a trained output projection (a frozen one keeps nothing of it)
    lb.add("q, k, v copies" + (", output" if s.method == "full" else ""), (4 if s.method == "full" else 3) * a * q, tokens)
    lb.add("scores (fp32 softmax, half copy" + (", dropout mask" if p > 0 else "") + (", tanh soft-cap" if cap else "")
           + ")", per_key * heads * sq, tokens)


def _sdpa_group(s: Setup, lb: LayerBytes, tokens: int, share: float, with_mask: bool) -> None:
    """SDPA's saved tensors for the `share` of layers with (or without) an explicit mask, by the kernel CUDA picks
    (data/cuda_sdpa.json). Without a mask transformers passes GQA's k/v as they are (enable_gqa); with one it repeats
    them to every head (repeat_kv: a copy per group of heads, a view of a single kv head), and the kernel keeps the
    additive mask it converted from the bool one (b·s·s in the query's dtype, per layer). The fused kernels keep q, k,
    v, their output and an fp32 logsumexp (the memory-efficient kernel's padded to 32 positions); a view of a fused qkv
    output keeps that whole output alive. The math path keeps the scaled q and k copies, v (repeated), the softmax in
    the inputs' dtype (and with dropout its mask and the dropped copy) and its output, copied for the projection."""
    from memlint import data

    m = s.model
    h, q, kv, _, x, amp = _dims(s)
    a = attention_bytes(s)
    sq = s.seq
    full = s.method == "full"
    gqa = kv != q and not with_mask
    kernel = sdpa_kernel(a, with_mask, m.head_dim, m.head_dim, gqa)
    tag = f" ({kernel}{', masked' if with_mask else ''})"
    if kernel == "math":
        p = dropout_p(s, "attention")
        lb.add("q, k, v copies" + (", output" if full else "") + tag, share * (4 if full else 3) * a * q, tokens)
        lb.add("scores (softmax" + (", dropout mask and copy" if p > 0 else "") + ")" + tag,
               share * (a + ((1 + a) if p > 0 else 0)) * m.heads * sq, tokens)
        return
    keep_fused = a * (q + kv) if _fused_qkv(s) and fact(s, "positions") not in ("learned", "learned_per_row", "alibi") else 0
    repeated = with_mask and kv != q and m.kv_heads > 1
    kv_bytes = 2 * a * q if repeated else 2 * a * kv + keep_fused
    rotary = fact(s, "positions") in ("rotary", "rotary_local_global", "rotary_per_layer")
    if with_mask and kv != q and m.kv_heads == 1 and rotary and amp and x != a:
        # a single kv head repeated is an expanded view; the rotary (fp32 cos/sin of an fp32 residual stream) left k
        # in fp32, and SDPA's autocast cast of the expanded k materialises every head
        kv_bytes += a * (q - kv)
    lb.add("q, k, v, output" + tag, share * (2 * a * q + kv_bytes), tokens)
    if kernel == "flash" and full and fact(s, "rotary_cat"):
        # the rotary concatenates q: contiguous per head, the flash kernel's output follows that layout, and
        # transformers' transpose(1, 2).contiguous() copies it; a trained output projection keeps the copy
        lb.add("output projection's input (a copy)", share * a * q, tokens)
    pad = data.load("cuda_sdpa.json")["lse_pad"]
    rows = sq if kernel == "flash" else pad * math.ceil(sq / pad)
    lb.add("logsumexp" + tag, share * 4 * m.heads * rows / sq, tokens)
    if with_mask:
        lb.add("additive mask", share * a * sq, tokens)


def _mlp_dense(s: Setup, lb: LayerBytes, tokens: int, t_dtype: int, shares_input: bool) -> int:
    """A dense MLP's saved tensors; returns the intermediate width (what LoRA's adapters on the down projection read)."""
    m = s.model
    i = m.intermediate
    a = DTYPE_BYTES[s.compute_dtype]
    g = _lin_out(s)
    full = s.method == "full"
    if full and not shares_input:
        lb.add("MLP input kept by its projections", input_copies(s, t_dtype, "mlp_in") * m.hidden, tokens)
    act_saved, act_out, saves_out = _act_bytes(s, g)
    amp = s.precision in ("amp-bf16", "amp-fp16")
    if m.arch.get("mlp") == "gated":
        # act(gate) keeps gate; act(gate) * up keeps both factors; down_proj keeps the product
        product = max(act_out, g)
        lb.add(f"gated MLP ({activation(s)}: gate, act, up)", (act_saved + act_out + g) * i, tokens)
        if full:
            lb.add("down projection input", input_copies(s, product, "mlp_out") * i, tokens)
        return i
    lb.add(f"MLP activation ({activation(s)})", (act_saved + (act_out if saves_out else 0)) * i, tokens)
    if full and (not saves_out or (amp and act_out != a)):  # else the down projection keeps the same output
        lb.add("down projection input", input_copies(s, act_out, "mlp_out") * i, tokens)
    return i


def _mlp_moe(s: Setup, lb: LayerBytes, tokens: int, t_dtype: int) -> None:
    """A mixture of experts (transformers' grouped_mm experts implementation): the router (its input kept when its weight
    trains, the fp32 softmax, the top-k indices, the renormalisation's sum and result), then per routed token (k per
    token): the gather and scatter indices (three int64), the gathered input (kept for the experts' gradient), the
    gate/up output (act(gate) keeps gate, a view of it), act(gate), the product (kept for the down projection's
    gradient), the expert output (kept by the routing weight's product) and the routing weight. The experts run in the
    weights' dtype (grouped_mm casts its input to it; no autocast)."""
    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    e = layer_weight_bytes(s) if s.quant == "none" else a
    k = m.arch.get("experts_per_token") or 1
    E = m.arch.get("num_experts") or 1
    i = m.arch.get("moe_intermediate_size", m.intermediate)
    full = s.method == "full"
    renorm = fact(s, "router_renorm")
    renorm = renorm is True or (isinstance(renorm, str) and bool(config(s, renorm, False)))
    weights = a if fact(s, "router_weights_cast") else 4
    if fact(s, "moe") == "loop":
        _mlp_moe_loop(s, lb, tokens, t_dtype)
        return
    lora = moe_lora(s)  # peft's adapters on the router and the stacks make their weights (W + B·A) need gradients
    router = (input_copies(s, t_dtype, "router", 1) * m.hidden if full or lora["router"] else 0) + 4 * E + 8 * k \
        + ((4 + 4 * k) if renorm else 0)
    lb.add("router (softmax, top-k, renormalisation)", router, tokens)
    act_saved, act_out, _ = _act_bytes(s, e)
    per_row = 24 + (e * m.hidden if full or lora["gate_up"] else 0) + 2 * e * i + act_out * i \
        + (e * i if full or lora["down"] else 0) + e * m.hidden + weights
    lb.add(f"experts ({k} of {E} per token: indices, gathered input, gate/up, act, product, output, weight)", k * per_row,
           tokens)
    if any(lora.values()):
        # the adapted weights, built in forward by peft's parametrization (W + scaling·B·A, baddbmm in the weights' dtype)
        # and kept by the matmuls, and the adapters' factors cast to that dtype
        w = layer_weight_bytes(s)
        built = (E * m.hidden * (lora["router"]) + E * 2 * i * m.hidden * lora["gate_up"] + E * i * m.hidden * lora["down"])
        factors = sum(t.rows * t.cols for t in moe_lora_tensors(s))
        lb.per_layer += (built + factors) * w
        lb.parts.append(("peft's adapted router / expert stacks (per layer)", (built + factors) * w / tokens))


def _mlp_moe_loop(s: Setup, lb: LayerBytes, tokens: int, t_dtype: int) -> None:
    """DBRX's experts: a router Linear (its input kept when it trains), softmax in the logits' dtype, top-k and a p-norm
    renormalisation (values, norm: compute dtype); then a loop over the experts hit, per routed token: both indices of
    torch.where (one int64 storage), the gathered input (kept by the expert's first matmul when its weights train), gate,
    up and act(gate) (kept by the act and the product), the product (kept by the down matmul when it trains), the expert
    output (kept by the routing weight's product), the weighted output (kept by index_add_) and the weight."""
    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    k = m.arch.get("experts_per_token") or 1
    E = m.arch.get("num_experts") or 1
    i = m.arch.get("moe_intermediate_size", m.intermediate)
    full = s.method == "full"
    router = (input_copies(s, t_dtype, "router", 1) * m.hidden if full else 0) + a * E + 8 * k + a * k + a
    lb.add("router (softmax, top-k, p-norm)", router, tokens)
    per_row = 16 + a + (a * m.hidden if full else 0) + 2 * a * m.hidden + 3 * a * i + (a * i if full else 0)
    lb.add(f"experts ({k} of {E} per token, one expert at a time: indices, input, gate, up, act, product, outputs)",
           k * per_row, tokens)


def _dropout_masks(s: Setup, site: str, width: int) -> float:
    return width if dropout_p(s, site) > 0 else 0


def layer_bytes(s: Setup) -> LayerBytes:
    """One decoder layer's saved bytes for the micro-batch (s.seq x s.batch tokens), the layer input (what recompute
    keeps), and what is saved once per model (token and position ids, rotary tables, the embedding dropout's mask, the
    final norm, lm_head's input). LoRA adapters' inputs, HQQ/GPTQ and DoRA terms come from activations.py as before."""
    m = s.model
    tokens = s.seq * s.batch
    h, q, kv, a, x, amp = _dims(s)
    full = s.method == "full"
    layout = fact(s, "layout")
    lb = LayerBytes(layer_input=x * h * tokens)
    out_branch = a if amp else x  # an attention / MLP output's dtype (what a post-norm reads)
    consts = 0.0

    # norms before attention (on the residual stream) and what the projections read
    pre = {"pre": 1, "sandwich": 1, "parallel": 1, "parallel2": 2, "post": 0}[layout]
    n_in, n_rest, n_out, n_shared = norm_parts(s, h, 1, x, full)
    if pre:  # two norms of the layer input keep it once unless each casts its own copy
        lb.add(f"{pre} norm(s) before attention", (1 if n_shared else pre) * n_in + pre * n_rest, tokens)
        consts += pre * norm_layer_consts(s, h)
    t_attn = n_out if pre else x
    shared = layout == "parallel"  # one norm output feeds attention and the MLP
    if full:
        reads = input_copies(s, t_attn, "attn_in")
        if shared and not (amp and t_attn != a):
            reads = t_attn  # one tensor kept for the attention and the MLP projections
        elif shared:
            reads += input_copies(s, t_attn, "mlp_in")
        lb.add("attention input kept by its projections" + (" (and the MLP's)" if shared else ""), reads * h, tokens)
    clip = fact(s, "clip_qkv")
    if clip and config(s, clip):
        lb.add("clamped qkv's input", a * (q + 2 * kv), tokens)

    # per-head (or full-width) q/k norms on the projections' outputs
    qk = fact(s, "qk_norm")
    if qk:
        groups = (m.heads, m.kv_heads) if qk is True else (1, 1)
        qn, _ = norm_saved(s, q, groups[0], _lin_out(s), full)
        kn, _ = norm_saved(s, kv, groups[1], _lin_out(s), full)
        lb.add("q/k norms", qn + kn, tokens)
        if fact(s, "norm_impl") == "gemma":
            consts += 4 * 2 * m.head_dim
    _attention(s, lb, tokens)
    if fact(s, "positions") == "rotary_per_layer":  # GPT-J: sin/cos interleaved in every call, for q and for k
        consts += 4 * rotary_dims(s) * s.seq * x
    lb.add("attention-output dropout mask", _dropout_masks(s, "attn_out", h), tokens)
    if layout in ("sandwich", "post"):
        pn, _ = norm_saved(s, h, 1, out_branch, full)
        lb.add("norm after attention", pn, tokens)
        consts += norm_layer_consts(s, h)

    # the MLP
    if layout == "parallel2" or (layout not in ("parallel", "post") and pre):
        if layout != "parallel2":
            mn, t_mlp = norm_saved(s, h, 1, x, full)
            lb.add("norm before the MLP", mn, tokens)
            consts += norm_layer_consts(s, h)
        else:
            t_mlp = n_out
    elif layout == "parallel":
        t_mlp = n_out
    else:  # post: the MLP reads the residual stream
        t_mlp = x
    if fact(s, "moe"):
        _mlp_moe(s, lb, tokens, t_mlp)
    else:
        _mlp_dense(s, lb, tokens, t_mlp, shares_input=shared)
    lb.add("MLP-output dropout mask", _dropout_masks(s, "mlp_out", h), tokens)
    if layout in ("sandwich", "post"):
        pn, _ = norm_saved(s, h, 1, out_branch, full)
        lb.add("norm after the MLP", pn, tokens)
        consts += norm_layer_consts(s, h)
    lb.per_layer += consts
    lb.once = _once(s, tokens)
    return lb


def _once(s: Setup, tokens: int) -> float:
    """Saved once per model: token ids (kept by a trained embedding), learned position ids, rotary cos/sin (in the
    residual dtype, per position), the embedding dropout's mask, an embedding norm, the final norm and the input lm_head
    keeps for its weight's gradient; with frozen embeddings (LoRA without recompute) the first layer's norm(s) before
    attention see no gradient and keep nothing."""
    m = s.model
    h, q, kv, a, x, amp = _dims(s)
    full = s.method == "full"
    b, sq = s.batch, s.seq
    embeds_train = full or any(n in ("embed_tokens", "wte", "word_embeddings", "embed_in") for n in s.modules_to_save)
    once = 0.0
    if embeds_train:
        once += 8 * tokens
    pos = fact(s, "positions")
    if pos == "learned" and full:
        once += 8 * sq
    elif pos == "learned_per_row" and full:
        once += 8 * tokens
    elif pos in ("rotary", "rotary_local_global"):
        tables = 2 if pos == "rotary_local_global" and 0 < sliding_layers(s) < m.layers else 1
        once += tables * 2 * rotary_dims(s) * sq * x
    once += _dropout_masks(s, "embedding", h) * tokens
    if fact(s, "eager_mask_kept") and not sdpa_runs(s):
        once += b * sq * sq  # masked_fill keeps the model's bool causal mask (b, 1, s, s)
    n_bytes, n_out = norm_saved(s, h, 1, x, full)
    if fact(s, "embed_norm") and embeds_train:
        once += n_bytes * tokens + norm_layer_consts(s, h)
    once += n_bytes * tokens + norm_layer_consts(s, h)  # the final norm
    if full:  # lm_head's weight trains: it keeps its input (a cast copy under autocast when the norm's output is fp32)
        once += (a if amp and n_out != a else n_out) * h * tokens
    if not full and not s.recompute and not embeds_train:
        layout = fact(s, "layout")
        first = {"pre": 1, "sandwich": 1, "parallel": 1, "parallel2": 2, "post": 0}[layout]
        n_in, n_rest, _, shared = norm_parts(s, h, 1, x, False)
        if first:
            once -= ((1 if shared else first) * n_in + first * n_rest) * tokens + first * norm_layer_consts(s, h)
    return once


def mlp_output_kept(s: Setup) -> bool:
    """Whether the down projection's input is a tensor the MLP keeps anyway (a plain MLP whose activation keeps its
    output, ReLU): an adapter reading it without a cast shares it."""
    if s.model.arch.get("mlp") == "gated" or fact(s, "moe"):
        return False
    return _act_bytes(s, _lin_out(s))[2]


def attention_output_kept(s: Setup) -> float:
    """The share of layers whose attention output (what the output projection reads) is kept by the attention itself:
    the fused SDPA kernels keep it; eager attention and SDPA's math path hand on a transposed copy nobody else keeps."""
    m = s.model
    if not sdpa_runs(s):
        return 0.0
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    masked = masked_layers(s)
    kept = 0
    a = attention_bytes(s)
    if masked < m.layers and sdpa_kernel(a, False, m.head_dim, m.head_dim, kv != q) != "math":
        kept += m.layers - masked
    if masked and sdpa_kernel(a, True, m.head_dim, m.head_dim, False) != "math":
        kept += masked
    return kept / m.layers
