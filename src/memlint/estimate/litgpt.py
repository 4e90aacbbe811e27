"""LitGPT's own model code (Setup.model_code == "litgpt"): what its Block saves for backward and its
chunked lm_head + chunked cross-entropy, term by term from the source (data/litgpt.json) and checked
against a fake-tensor trace of LitGPT's code (memlint.measure.litgpt, tests/test_litgpt_accounting.py).

Per token and layer, with a the compute dtype's bytes, h = n_embd, q = n_head·head_size,
kv = n_query_groups·head_size, i = intermediate_size:

- norms: RMSNorm in fp32 (litgpt >= 0.2) keeps its fp32 copy of the input and the rsqrt (4h + 4); in the
  input dtype (lit-gpt 2023) the input and the rsqrt (a·h + a); LayerNorm its input and fp32 mean/rstd
  (a·h + 8). A parallel block's second norm reads the same x (its input is shared, not a second copy)
  unless it is the fp32 RMSNorm; shared_attention_norm has no second norm.
- attention (SDPA, LitGPT's only training path): the fused qkv output stays alive through v, a view of it
  that SDPA saves (multi-head: a·(q + 2kv)); the roped q and k (new tensors from torch.cat), SDPA's output
  and fp32 logsumexp. With grouped queries k and v are expanded to every head and copied by reshape
  (a·q each) and the qkv output is freed.
- MLP: LLaMAMLP keeps fc_1's and fc_2's outputs and silu's (3·a·i); GptNeoxMLP gelu's input (a·i).
- LoRA on the fused qkv (LoRAQKVLinear): the dropped-out input (a·h) and its bool mask (h), lora_A's
  output (a·r per enabled q/k/v), and, unless all three are enabled, zero_pad's index_copy source
  (a·(the enabled widths)). LoRA on proj / mlp (LoRALinear): each its own dropped input, mask, and x·Aᵀ.
- a full fine-tune adds what the trained weights need: each linear's input, RMSNorm's normalised copy.
- 4-bit bases (Fabric's BitsandbytesPrecision: every nn.Linear, lm_head too): bitsandbytes < 0.43.2's
  MatMul4Bit keeps each layer's input (data/litgpt.json says which litgpt pinned which).

Once per model: ln_f's saved input. Logits: `model(x, lm_head_chunk_size=128)` returns the lm_head output
as 128-token chunks in the compute dtype, which the loop keeps bound (`logits`) through backward;
chunked_cross_entropy runs F.cross_entropy on each chunk, whose log_softmax saves its output in the same
dtype. Backward adds one chunk's two gradients and the hidden states' gradient.
"""

from __future__ import annotations

from typing import Any

from memlint import data
# `Setup` in the annotations below is estimate.setup's, named only (setup imports this module to validate)
from memlint.estimate.terms import ActivationTerms, Tensor
from memlint.vocab import DTYPE_BYTES
from memlint.library.versions import in_range


def facts(s: Setup) -> dict[str, Any]:
    """The data/litgpt.json entry for the LitGPT version the setup models (None: the newest)."""
    for entry in data.load("litgpt.json")["versions"]:
        if in_range(s.litgpt_version, entry["versions"]):
            return entry
    raise AssertionError("litgpt.json covers every version")


def block(s: Setup) -> dict[str, Any]:
    blocks = data.load("litgpt.json")["blocks"]
    return {**blocks["default"], **blocks.get(s.model.arch.get("model_type", ""), {})}


def loop() -> dict[str, Any]:
    return data.load("litgpt.json")["loop"]


def untied_head(s: Setup) -> int:
    """Parameters LitGPT has beyond the checkpoint's count: GPT keeps lm_head and wte as two weights (no tying in
    model.py at 00af8b0; finetune/full.py refuses train.tie_embeddings), so a tied checkpoint gains V·h."""
    return s.model.vocab * s.model.hidden if s.model.tied_embeddings and not data.load("litgpt.json")["ties_embeddings"] else 0


def rope_cache_bytes(s: Setup) -> int:
    """GPT's cos/sin buffers: finetune/lora.py sets model.max_seq_length to the longest sample, outside
    fabric.init_module, so build_rope_cache makes them (seq × rope_n_elem) in fp32."""
    cfg = s.model.config
    pct = cfg.get("rotary_pct") or cfg.get("partial_rotary_factor") or 1.0
    return 2 * s.seq * int(s.model.head_dim * pct) * 4


def _norm_bytes(s: Setup, a: int, rms_fp32: bool) -> tuple[int, int]:
    """(what one norm saves per token, what of that is its input: shared by a second norm on the same x)."""
    h = s.model.hidden
    full = s.method == "full"
    if s.model.arch.get("norm") == "rmsnorm":
        if rms_fp32:  # x.float() is the norm's own copy; the trained weight also keeps x_normed (fp32)
            return 4 * h + 4 + (4 * h if full else 0), 0
        return a * h + a + (a * h if full else 0), a * h
    return a * h + 8, a * h  # LayerNorm: input + fp32 mean and rstd


# LitGPT's LoRA switches (lora_query, lora_key, lora_value, lora_projection, lora_mlp, lora_head). A target list in
# Hugging Face module names (what a LitGPT config's plan carries) maps back onto them through the table the LitGPT
# config reader uses (data/frameworks.json litgpt lora_targets); its fused-qkv names stand for whichever of q/k/v is on.
TARGETS = ("query", "key", "value", "projection", "mlp", "head")


def _hf_names() -> tuple[dict[str, str], set[str]]:
    table = data.load("frameworks.json")["frameworks"]["litgpt"]["substitutions"]["lora_targets"]["value"]
    names = {n: key.removeprefix("lora_") for key, ns in table.items() if key != "fused_qkv" for n in ns}
    return names, set(table.get("fused_qkv", ()))


def targets(s: Setup) -> tuple[str, ...]:
    """The LitGPT LoRA switches a Setup turns on (LitGPT names, or Hugging Face module names mapped onto them)."""
    if s.method == "full":
        return ()
    if s.lora_targets == "all-linear":
        return TARGETS[:5]
    if isinstance(s.lora_targets, str):
        raise ValueError("LitGPT's LoRA takes switches (query, key, value, projection, mlp, head), not a regex")
    names, fused = _hf_names()
    out: list[str] = []
    for t in s.lora_targets:
        hit = t if t in TARGETS else names.get(t, names.get(t.rsplit(".", 1)[-1]))
        if hit is None and (t in fused or t.rsplit(".", 1)[-1] in fused):
            continue
        if hit is None:
            raise ValueError(f"LoRA target {t!r} is not one of LitGPT's: {', '.join(TARGETS)}")
        if hit not in out:
            out.append(hit)
    if not out:
        raise ValueError(f"LoRA targets {', '.join(s.lora_targets)} name the fused qkv but none of query, key, value")
    return tuple(out)


def _widths(s: Setup) -> dict[str, int]:
    m = s.model
    return {"query": m.heads * m.head_dim, "key": m.kv_heads * m.head_dim, "value": m.kv_heads * m.head_dim}


def _mlp_linears(s: Setup) -> list[tuple[int, int]]:
    """(in, out) of the MLP's linears: LLaMAMLP fc_1, fc_2, proj; GptNeoxMLP fc, proj."""
    h, i = s.model.hidden, s.model.intermediate
    return ([(h, i), (h, i)] if s.model.arch.get("mlp") == "gated" else [(h, i)]) + [(i, h)]


def lora_tensors(s: Setup) -> list[Any]:
    """LitGPT's LoRA parameters (lora.py): LoRAQKVLinear's one lora_A (r·enabled × h) and one lora_B
    (enabled widths × r) on the fused qkv; LoRALinear's (r × in, out × r) on proj, the MLP, lm_head."""
    m, r, on = s.model, s.lora_r, targets(s)
    L = m.layers
    out = []
    qkv = [w for t, w in _widths(s).items() if t in on]
    if qkv:
        out += [Tensor(r * len(qkv), m.hidden, L), Tensor(sum(qkv), r, L)]
    lin = []
    if "projection" in on:
        lin.append((m.heads * m.head_dim, m.hidden, L))
    if "mlp" in on:
        lin += [(i, o, L) for i, o in _mlp_linears(s)]
    if "head" in on:
        lin.append((m.hidden, m.vocab, 1))
    for i, o, n in lin:
        out += [Tensor(r, i, n), Tensor(o, r, n)]
    return out


def _lora_on(s: Setup) -> dict[str, tuple]:
    """The enabled q/k/v widths on the fused qkv and the (in_features, per-layer count) of LoRALinear layers."""
    on = targets(s)
    qkv = tuple(w for t, w in _widths(s).items() if t in on)
    linear = []
    if "projection" in on:
        linear.append(s.model.heads * s.model.head_dim)
    if "mlp" in on:
        linear += [i for i, _ in _mlp_linears(s)]
    return {"qkv": qkv, "linear": tuple(linear)}


def per_token_layer(s: Setup) -> tuple[int, dict[str, int]]:
    """Bytes one Block saves per token, and the terms."""
    m = s.model
    f = facts(s)
    b = block(s)
    a = DTYPE_BYTES[s.compute_dtype]
    h, i = m.hidden, m.intermediate
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    full = s.method == "full"
    rms_fp32 = f["rmsnorm_compute"] == "fp32"
    terms: dict[str, int] = {}

    one, shareable = _norm_bytes(s, a, rms_fp32)
    if b["shared_attention_norm"]:
        terms["norms"] = one
    elif b["parallel_residual"]:
        terms["norms"] = 2 * one - shareable  # norm_2(x) reads norm_1's x
    else:
        terms["norms"] = 2 * one

    if m.kv_heads == m.heads:  # v is a view of the qkv output: SDPA keeps all of it
        terms["attention"] = a * (q + 2 * kv) + a * q + a * kv + a * q + 4 * m.heads
    else:  # k, v expanded to every head and copied; the qkv output is freed
        terms["attention"] = 4 * a * q + 4 * m.heads
    gated = m.arch.get("mlp") == "gated"
    terms["mlp"] = (3 if gated else 1) * a * i

    lora = _lora_on(s)
    drop = s.lora_dropout > 0
    if lora["qkv"]:
        r = s.lora_r
        n = len(lora["qkv"])
        pad = a * sum(lora["qkv"]) if n < 3 else 0
        terms["lora_qkv"] = a * h + (h if drop else 0) + a * r * n + pad
    lin = 0
    for fin in lora["linear"]:  # LoRALinear: (dropout(x) @ A.T) @ B.T keeps dropout(x), its mask and x·Aᵀ
        lin += a * fin + (fin if drop else 0) + a * s.lora_r
    if lin:
        terms["lora_linear"] = lin
    if full:
        # the trained linears' inputs: n_1 (qkv), SDPA's output copy (proj), n_2 (fc / fc_1 + fc_2), the
        # MLP's last input (silu(fc_1)·fc_2, or gelu's output)
        terms["linear_inputs"] = a * h + a * q + (0 if b["shared_attention_norm"] else a * h) + a * i
    elif s.quant in ("nf4", "fp4") and f["bnb_keeps_input"]:
        # MatMul4Bit keeps A: n_1 (unless LoRA's own F.linear already keeps it: no dropout), proj's input,
        # n_2 (once for fc_1 and fc_2), the MLP's last input
        n1 = 0 if (lora["qkv"] and not drop) else a * h
        n2 = 0 if b["shared_attention_norm"] else a * h
        terms["bnb_inputs"] = n1 + a * q + n2 + a * i
    return sum(terms.values()), terms


def once_per_token(s: Setup) -> int:
    """ln_f's saved input (and lm_head's input where lm_head trains or is a 4-bit layer that keeps it), the token
    ids where the embedding trains; less what layer 0 does not save when the embedding is frozen: its input needs
    no gradient, so norm_1 keeps nothing, dropout no mask, a 4-bit qkv no input, and a parallel block's MLP
    (which reads that input too) nothing at all."""
    a = DTYPE_BYTES[s.compute_dtype]
    h = s.model.hidden
    f = facts(s)
    one, _ = _norm_bytes(s, a, f["rmsnorm_compute"] == "fp32")
    full = s.method == "full"
    keeps = s.quant in ("nf4", "fp4") and f["bnb_keeps_input"]
    total = one + (a * h if (full or keeps) else 0)
    if full:
        return total + 8
    drop = s.lora_dropout > 0
    _, parts = per_token_layer(s)
    b = block(s)
    qkv = bool(_lora_on(s)["qkv"])
    # norm_1 (and a parallel block's norm_2) read the frozen embedding's output
    layer0 = parts["norms"] if b["parallel_residual"] else one
    if qkv and drop:
        layer0 += h  # dropout's mask
    if keeps and (drop or not qkv):
        layer0 += a * h  # the 4-bit qkv's input
    if b["parallel_residual"]:  # the MLP reads the embedding too: no gradient reaches it, it saves nothing
        layer0 += parts["mlp"]
        if keeps:
            layer0 += (0 if b["shared_attention_norm"] else a * h) + a * s.model.intermediate
    return total - layer0


def _block_formula(s: Setup, per_tok: int, parts: dict) -> str:
    names = ", ".join(f"{k} {v:,}" for k, v in parts.items())
    return f"LitGPT's Block ({facts(s)['name']}): {per_tok:,} B/token/layer saved ({names}) × s·b·L"


def _full_logits(s: Setup, body: int, per_tok: int, parts: dict, a: int, n: int, sb: int) -> ActivationTerms:
    """finetune/full.py: `logits = model(input_ids)` (no lm_head chunks: the whole s·b·V in the compute dtype, bound
    by the loop), chunked_cross_entropy(logits[..., :-1, :]) reshapes the shifted view (a copy when b > 1) and
    saves each 128-row chunk's log-softmax; backward concatenates the chunks' gradients into one s·b·V tensor and
    the shift's backward writes it into a zero s·b·V gradient of the logits."""
    m = s.model
    copy = a * n if s.batch > 1 else 0
    fwd = 2 * a * n + max(a * sb * m.hidden, copy)
    # lm_head's weight gradient (V·h in the weight dtype) arrives while the logits' gradients are alive
    bwd = 3 * a * n + m.vocab * m.hidden * DTYPE_BYTES[s.dtype]
    if s.precision == "amp-bf16":
        # autocast: the saved log-softmax in fp32 and its fp32 gradient; lm_head's cached bf16 weight copy
        head = m.vocab * m.hidden * 2
        fwd = a * n + 4 * n + max(4 * sb * m.hidden, copy) + head
        bwd = a * n + 8 * n + head + m.vocab * m.hidden * DTYPE_BYTES[s.dtype]
    return ActivationTerms(
        body, per_tok * sb, fwd, bwd, _block_formula(s, per_tok, parts),
        f"LitGPT finetune/full.py: s·b·V × {a} B logits (bound by the loop; the previous step's until lm_head returns) "
        f"+ s·b·V × {a} B saved log-softmax (+ the shifted copy when b > 1); backward: 3 × s·b·V × {a} B + lm_head's "
        "gradient",
    )


def _layer_weight_elems(s: Setup) -> tuple[int, int]:
    """(every linear weight of one Block, its fused qkv's) in elements."""
    m = s.model
    qkv = m.hidden * (m.heads + 2 * m.kv_heads) * m.head_dim
    return qkv + m.heads * m.head_dim * m.hidden + sum(i * o for i, o in _mlp_linears(s)), qkv


def mixed_terms(s: Setup, sb: int) -> tuple[int, str]:
    """Fabric's bf16-mixed (torch.autocast over fp32 weights): every Block linear casts its fp32 weight to bf16 on
    each call and autograd keeps the copy for the input's gradient, s·b-independent; a trained weight's copy is the
    autocast cache's, kept the same way. Layer 0's qkv under LoRA reads the frozen embedding's norm (no gradient): no
    copy kept. A full fine-tune also keeps each norm output's bf16 cast for the weight gradients beside the fp32
    output: + 2·h B per token and layer (measured on LitGPT's code, tests/test_litgpt_accounting.py). Adapter weights
    are cached in bf16 too (2 B each)."""
    m = s.model
    layer, qkv = _layer_weight_elems(s)
    n = m.layers * layer - (qkv if s.method != "full" else 0)
    extra = 2 * m.hidden * sb * m.layers if s.method == "full" else 0
    adapters = sum(t.numel for t in lora_tensors(s)) if s.method != "full" else 0
    b = 2 * (n + adapters) + extra
    return b, (f" + bf16-mixed: autocast's bf16 copies of the Block weights ({n:,} elements × 2 B"
               + (f", the adapters' {adapters:,}" if adapters else "") + ")"
               + (" and the norm outputs' bf16 casts (2·h B/token/layer)" if extra else ""))


def terms(s: Setup) -> ActivationTerms:
    m = s.model
    sb = s.seq * s.batch
    per_tok, parts = per_token_layer(s)
    body = per_tok * sb * m.layers + once_per_token(s) * sb
    mixed = s.precision == "amp-bf16"
    copies, copies_f = mixed_terms(s, sb) if mixed else (0, "")
    body += copies
    a = DTYPE_BYTES[s.compute_dtype]
    n = sb * m.vocab
    chunk = min(loop()["lm_head_chunk_size"], s.seq) * s.batch * m.vocab
    if s.method == "full":
        return _full_logits(s, body, per_tok, parts, a, n, sb)
    # while lm_head runs: the new chunks, the previous step's chunks (still bound to `logits`) and ln_f's output
    fwd = 2 * a * n + a * sb * m.hidden
    # backward starts with the chunks and the saved log-softmax outputs and adds one chunk's nll and log_softmax
    # gradients; then, the log-softmax outputs freed, the last Block's MLP backward holds the hidden-state gradient
    # and the MLP's input gradients (proj's, and for LLaMAMLP silu·fc_2's two: 3 × s·b·i; GptNeoxMLP: 2)
    k = 3 if m.arch.get("mlp") == "gated" else 2
    # a 4-bit lm_head (and MLP) dequantizes its weight to the compute dtype for each chunk's matmul, forward and
    # backward: a transient next to everything else
    four = s.quant in ("nf4", "fp4")
    dq_head = a * m.vocab * m.hidden if four else 0  # LitGPT's lm_head is its own (4-bit) layer
    dq_mlp = a * m.intermediate * m.hidden if four else 0
    fwd += dq_head
    bwd = max(2 * a * n + 2 * a * chunk + dq_head,
              a * n + a * sb * m.hidden + k * a * sb * m.intermediate + dq_mlp)
    if mixed:
        # autocast: each chunk's lm_head call casts the fp32 weight again (the copy kept for backward, one per chunk),
        # cross-entropy's log-softmax runs in fp32 (its saved output 4 B), ln_f's output is fp32
        chunks = -(-s.seq // min(loop()["lm_head_chunk_size"], s.seq))
        head = chunks * m.vocab * m.hidden * 2
        fwd = max(2 * a * n + 4 * sb * m.hidden, a * n + 4 * n + 4 * chunk) + head
        bwd = max(a * n + 4 * n + 8 * chunk + head, a * n + 4 * sb * m.hidden + k * a * sb * m.intermediate)
        copies_f += f"; logits: fp32 log-softmax and {chunks} bf16 copies of lm_head's weight (one per 128-token chunk)"
    return ActivationTerms(
        body, per_tok * sb, fwd, bwd, _block_formula(s, per_tok, parts) + copies_f,
        f"LitGPT's chunked lm_head + chunked cross-entropy: 2 × s·b·V × {a} B (the logit chunks, bound to `logits` "
        f"by the loop until the next step's arrive, then the saved log-softmax) + ln_f's output s·b·h × {a} B while "
        "lm_head runs; backward: the chunks, the saved log-softmax and one 128-token chunk's two gradients, or the "
        "last Block's MLP gradients (the larger)" + ("; + the 4-bit lm_head's weight dequantized for each chunk" if dq_head else ""),
    )
