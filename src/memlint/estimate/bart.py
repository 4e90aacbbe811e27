"""BART's step (transformers' BartForConditionalGeneration, 5.x): post-LN encoder layers at the source length
`s.seq`, post-LN decoder layers (causal self-attention, cross-attention, FFN) at the target length `s.tgt`, learned
positions and layernorm_embedding in each stack, the tied LM head plus final_logits_bias over the target. Every term
is read off transformers' modeling_bart.py and checked against a trace of the real step (tests/test_seq2seq_more.py);
docs/accounting.md "Encoder-decoders" lists them.

Notation as in seq2seq.py: a the compute dtype's bytes, x the residual stream's (fp32 under autocast: CUDA's
autocast runs layer_norm in fp32), d the model width (= heads·head_dim), f the FFN width, H heads."""

from __future__ import annotations

from memlint.estimate.seq2seq import _adapted, _eager, _reads, _sizes
from memlint.estimate.setup import DTYPE_BYTES, Setup
from memlint.estimate.terms import ActivationTerms


def _drop(s: Setup, key: str) -> bool:
    return float(s.model.arch.get(key) or 0) > 0


def _ln(s: Setup) -> int:
    """Per token, a LayerNorm's saved tensors: its input (the fp32 residual sum) and fp32 mean and rstd."""
    _, x, _, d, _, _, _ = _sizes(s)
    return x * d + 8


def _attention(s: Setup, stack: str, kind: str, first: bool = False) -> int:
    """Per query token, one attention's saved tensors beside its keys: what q (and for self-attention k, v) save
    of their input, the q, k, v outputs (eager's two matmuls, or the SDPA kernel), the kernel's output and fp32
    logsumexp under SDPA, what out_proj keeps of the contiguous output (the kernel's own output under SDPA, whose
    (b, q, H, d) layout makes the transpose a view), and the output dropout's mask."""
    a, x, amp, d, _, _, h = _sizes(s)
    lin = _adapted(s)
    p = f"{stack}.{kind}."
    names = [p + "q_proj", p + "k_proj", p + "v_proj"] if kind == "self_attn" else [p + "q_proj"]
    out = _reads(s, names, d, x) if not first or s.method == "full" else _reads(s, [n for n in names if n in lin], d, x)
    if first and s.method != "full":
        # a stack's first layer under LoRA: its input needs no gradient (frozen embeddings and layernorm_embedding),
        # so a frozen projection's output needs none: the score matmul keeps k for a trained q and q for a trained k,
        # the value matmul v once the probabilities need a gradient
        q, k, v = (p + n in lin for n in ("q_proj", "k_proj", "v_proj"))
        if not _eager(s):  # (SDPA's kernel keeps q, k and v whichever needs the gradient)
            out += 3 * a * d if q or k or v else 0
        else:
            out += a * d * ((1 if k else 0) + (1 if q else 0) + (1 if q or k else 0))
    else:
        out += (3 if kind == "self_attn" else 1) * a * d
    o_in = _reads(s, [p + "out_proj"], d, a)
    if not _eager(s):
        if s.method == "full" or (p + "out_proj" in lin and s.lora_dropout == 0):
            o_in -= a * d
        out += a * d + _lse(s, h, s.tgt if stack == "decoder" else s.seq)
    return out + o_in + (d if _drop(s, "dropout_rate") else 0)


def _lse(s: Setup, heads: int, rows: int) -> int:
    """Per query token, the fused kernel's fp32 logsumexp: the memory-efficient kernel's (fp32 inputs) is padded to 32
    query positions (data/cuda_sdpa.json), flash's is not."""
    import math

    from memlint import data
    from memlint.estimate.decoder import sdpa_kernel

    a = DTYPE_BYTES[s.compute_dtype]
    hd = s.model.arch.get("head_dim") or s.model.hidden // heads
    if sdpa_kernel(a, False, hd, hd, False) == "flash" or not rows:
        return 4 * heads
    pad = data.load("cuda_sdpa.json")["lse_pad"]
    return math.ceil(4 * heads * pad * math.ceil(rows / pad) / rows)


def _per_key(s: Setup) -> int:
    """Per query token and key position, eager attention's saved tensors: the softmax output (fp32 under CUDA's
    autocast), with attention dropout its bool mask and the dropped-out probabilities the second matmul reads (its
    half cast under autocast), without it the matmul's half cast of the probabilities under autocast. SDPA: none."""
    a, _, amp, _, _, _, h = _sizes(s)
    if not _eager(s):
        return 0
    sm = 4 if amp else a
    if _drop(s, "attention_dropout"):
        return h * (sm + 1 + a)
    return h * (sm + (a if amp else 0))


def _ffn(s: Setup, stack: str) -> int:
    """Per token, the FFN: what fc1 keeps of the LayerNorm output, GELU's input (fc1's output), the activation
    dropout's mask (when activation_dropout > 0), what fc2 keeps of its input, the output dropout's mask."""
    a, x, _, d, _, f, _ = _sizes(s)
    f = int(s.model.arch.get("decoder_intermediate_size") or f) if stack == "decoder" else f
    out = _reads(s, [f"{stack}.fc1"], d, x) + a * f + _reads(s, [f"{stack}.fc2"], f, a)
    return out + (f if _drop(s, "activation_dropout") else 0) + (d if _drop(s, "dropout_rate") else 0)


def encoder_layer_tok(s: Setup, first: bool = False) -> int:
    return _attention(s, "encoder", "self_attn", first) + _ln(s) + _ffn(s, "encoder") + _ln(s)


def decoder_layer_tok(s: Setup, first: bool = False) -> int:
    return (_attention(s, "decoder", "self_attn", first) + _ln(s) + _attention(s, "decoder", "encoder_attn")
            + _ln(s) + _ffn(s, "decoder") + _ln(s))


def cross_kv_src(s: Setup) -> int:
    """Per source token, each decoder layer's cross-attention k and v outputs, and what k_proj and v_proj keep of
    the encoder output beyond the tensor itself (alive anyway, counted once)."""
    a, x, amp, d, _, _, _ = _sizes(s)
    kv = _reads(s, ["decoder.encoder_attn.k_proj", "decoder.encoder_attn.v_proj"], d, x)
    if not amp and (s.method == "full" or s.lora_dropout == 0):
        kv = max(0, kv - x * d)
    return 2 * a * d + kv


def _once(s: Setup) -> tuple[int, int, int]:
    """(per source token, per target token, per target position) saved once: each stack's layernorm_embedding
    (input and statistics) and its dropout mask for trained embeddings; for a trained shared embedding and positions (a full fine-tune)
    the token ids (int64) and the encoder's [b, S] / the decoder's [1, T] position ids (int64); the encoder output
    (read by every cross-attention) and the decoder output lm_head reads."""
    _, x, _, d, _, _, _ = _sizes(s)
    full = s.method == "full"
    # layernorm_embedding and its dropout keep nothing when the embeddings are frozen (LoRA): no input needs a gradient
    emb = (_ln(s) + (d if _drop(s, "dropout_rate") else 0)) if full else 0
    src = emb + (16 if full else 0) + x * d
    tgt = emb + (8 if full else 0) + x * d
    return src, tgt, 8 if full else 0


def bart_terms(s: Setup) -> ActivationTerms:
    m = s.model
    a, x, amp, d, _, _, h = _sizes(s)
    b, S, T = s.batch, s.seq, s.tgt
    le, ld = m.layers, m.arch.get("num_decoder_layers", m.layers)
    pk = _per_key(s)
    enc = (encoder_layer_tok(s) + pk * S) * b * S
    dec = (decoder_layer_tok(s) + pk * (T + S)) * b * T + cross_kv_src(s) * b * S
    enc0 = (encoder_layer_tok(s, True) + pk * S) * b * S
    dec0 = (decoder_layer_tok(s, True) + pk * (T + S)) * b * T + cross_kv_src(s) * b * S
    src, tgt, pos = _once(s)
    once = src * b * S + tgt * b * T + pos * T
    from memlint.estimate.seq2seq import encoder_weight_copies, weight_copies

    copies, head_copy = weight_copies(s)
    body = enc0 + enc * (le - 1) + dec0 + dec * (ld - 1) + once + copies
    formula = (f"BART: encoder {encoder_layer_tok(s):,} B/token/layer × S·b·Le + decoder {decoder_layer_tok(s):,} "
               f"B/token/layer × T·b·Ld + cross-attention k, v {cross_kv_src(s):,} B/source token/layer"
               + (f" + eager attention {pk} B/query/key" if _eager(s) else " (SDPA)") + f"; S={S}, T={T}")
    if copies:
        formula += " + autocast's half copies of the fp32 linear weights"
    if s.target_len is None:
        formula += " (target length assumed = source length)"
    return ActivationTerms(body, max(enc, dec), _logits_forward(s) + head_copy, _logits_backward(s), formula,
                           f"T·b·V logits + final_logits_bias (fp32 under autocast) + fp32 log-softmax "
                           f"(V={m.vocab:,}, T={T})",
                           encoder_body=enc0 + enc * (le - 1) + src * b * S + encoder_weight_copies(s))


def _logits_forward(s: Setup) -> int:
    """lm_head's T·b x V logits plus final_logits_bias (the buffer is fp32 under autocast, so the sum is fp32) and
    CrossEntropyLoss's log-softmax (fp32; on half logits its fp32 copy too); under autocast lm_head's half cast of its
    input (a trained, tied head)."""
    a, x, amp, d, _, _, _ = _sizes(s)
    n = s.batch * s.tgt * s.model.vocab
    lb = 4 if amp else a  # the biased logits: half + fp32 buffer promotes
    return n * (lb + 4 + (4 if lb != 4 else 0)) + (a * d * s.batch * s.tgt if amp and s.method == "full" else 0)


def _logits_backward(s: Setup) -> int:
    a, _, amp, _, _, _, _ = _sizes(s)
    n = s.batch * s.tgt * s.model.vocab
    return n * (4 + 4 + 4 + (a if a != 4 else 0))
