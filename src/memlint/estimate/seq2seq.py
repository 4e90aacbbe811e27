"""An encoder-decoder's step (transformers' T5ForConditionalGeneration, 5.x): the encoder's layers at the source
length `s.seq`, the decoder's at the target length `s.tgt`, the relative position bias, the LM head's logits over
the target. Every term is read off transformers' T5 code (modeling_t5.py) and checked against a trace of the real
step (tests/test_t5.py); docs/accounting.md "Encoder-decoders (T5)" lists them.

Notation: a the compute dtype's bytes, x the residual stream's (the weights' dtype: fp32 under autocast), d the
model width, i = heads·d_kv (the attention's inner width), f = d_ff, H heads."""

from __future__ import annotations

from memlint.estimate.setup import DTYPE_BYTES, Setup
from memlint.estimate.terms import ActivationTerms
from memlint.library.api import attention


def _sizes(s: Setup) -> tuple[int, int, bool, int, int, int, int]:
    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    x = DTYPE_BYTES[s.dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    return a, x, amp, m.hidden, m.heads * m.head_dim, m.intermediate, m.heads


def _eager(s: Setup) -> bool:
    return attention()[s.attn].kernel == "eager"


def _adapted(s: Setup) -> set[str]:
    """The linears (catalog keys: encoder.SelfAttention.q ...) peft adapts; every one is trained in a full fine-tune."""
    if s.method == "full":
        return {l.name for l in s.model.layer_linears()}
    from memlint.estimate.model_state import lora_modules

    return {l.name for l in lora_modules(s.model, s.lora_targets)}


def _reads(s: Setup, names: list[str], width: int, src: int) -> int:
    """Per token, what the linears `names` save of the one `width`-wide tensor they read (`src` bytes per element).
    A trained linear keeps its input (shared by the linears reading it) or, under autocast, each its own half cast;
    a frozen one (LoRA's base) keeps none (its weight gives the input's gradient); an adapted one's lora_A keeps its
    input (after lora_dropout: the dropout's bool mask and output; its half cast under autocast) and lora_B lora_A's
    r-wide output."""
    a, _, amp, _, _, _, _ = _sizes(s)
    lin = _adapted(s)
    own = a if amp and src != a else src
    if s.method == "full":
        return (len(names) * a * width) if amp and src != a else src * width
    out, shared = 0, False
    for n in names:
        if n not in lin:
            continue
        if s.lora_dropout > 0:
            out += width + own * width
        elif amp and src != a:
            out += a * width
        else:
            shared = True
        out += s.lora_r * (a if amp else 4)
    return out + (src * width if shared else 0)


def _norm_own(s: Setup, first: bool = False) -> int:
    """Per token, T5LayerNorm's own saved tensors (RMS, fp32 statistics): pow keeps the input (and its fp32 copy
    when the residual is half), rsqrt its fp32 [.., 1] output, the product by the weight its normalised input when
    the weight is trained. Nothing when its input needs no gradient (a stack's first norm under LoRA)."""
    a, x, amp, d, _, _, _ = _sizes(s)
    if first and s.method != "full" and not s.recompute:
        return 0
    # (the normalised input measured saved under recompute with LoRA too: the checkpointed graph's frozen-weight mul)
    return x * d + (4 * d if x != 4 else 0) + 4 + (x * d if s.method == "full" or s.recompute else 0)


def _ffn_bytes(s: Setup, stack: str) -> int:
    """Per token, the FFN's saved tensors: relu (T5DenseActDense) keeps its output, the dropout's mask and wo's input;
    gated-gelu (T5DenseGatedActDense with NewGELUActivation's Python tanh formula) wi_0's output (pow's input; fp32
    under CUDA's autocast, pow being on its fp32 list), tanh's output, 0.5·x and 1 + tanh (the product's operands),
    the GELU output and wi_1's output (the gate's operands), the dropout mask and wo's input; under autocast the
    fp32 pow promotes tanh, 1 + tanh, the GELU output and the gate product to fp32 (wo casts its input back), and
    wo's `.to(wo.weight.dtype)` keeps relu's dropout output in fp32 for wo to cast."""
    a, x, amp, _, _, f, _ = _sizes(s)
    gated = bool(s.model.arch.get("gated_ffn"))
    fp = 4 if amp else a  # the gate product's dtype (fp32 under autocast)
    if gated:
        body = (4 + 4 + a + 4 + 4 + a + 1) if amp else 6 * a + 1
    else:
        body = a + 1
        fp = 4 if amp else a
    return body * f + _reads(s, [f"{stack}.DenseReluDense.wo"], f, fp)


def _ffn_in(s: Setup, stack: str) -> list[str]:
    gated = bool(s.model.arch.get("gated_ffn"))
    return [f"{stack}.DenseReluDense.wi_0", f"{stack}.DenseReluDense.wi_1"] if gated else [f"{stack}.DenseReluDense.wi"]


def _attention_tok(s: Setup, stack: str, kind: str, first: bool = False) -> int:
    """Per query token, one attention's saved tensors: its norm and what q, k, v save of the norm's output, the q
    (and for self-attention k, v) outputs the score and value matmuls keep, what o keeps of the contiguous output,
    and the output dropout's mask; SDPA's memory-efficient kernel keeps its own output and an fp32 logsumexp per
    head. In a stack's first layer under LoRA (its input needs no gradient) a frozen projection's output needs no
    gradient: the score matmul keeps k only for a trained q (and q for a trained k)."""
    a, x, amp, d, i, _, h = _sizes(s)
    lin = _adapted(s)
    p = f"{stack}.{kind}."
    names = [p + "q", p + "k", p + "v"] if kind == "SelfAttention" else [p + "q"]
    out = _norm_own(s, first) + _reads(s, names, d, x)
    if kind == "SelfAttention":
        q, k, v = (not first or s.method == "full" or s.recompute or p + n in lin for n in "qkv")
        # the score matmul keeps k for a trained q and q for a trained k; the value matmul v when the probabilities
        # need a gradient
        if not _eager(s) and (q or k or v):
            out += 3 * a * i  # SDPA's kernel keeps q, k and v whichever needs the gradient
        else:
            out += a * i * ((1 if q else 0) + (1 if k else 0) + (1 if q or k else 0))
    else:
        out += a * i
    o_in = _reads(s, [p + "o"], i, a)
    if not _eager(s):
        # the memory-efficient kernel writes its output in the (b, q, H, d_kv) layout, so transformers'
        # transpose(1, 2).contiguous() is a view: o's kept input (trained o, no lora_dropout) is the kernel's output
        if s.method == "full" or (p + "o" in lin and s.lora_dropout == 0):
            o_in -= a * i
        out += a * i + 4 * h
    return out + o_in + d


def _sdpa_bias(s: Setup) -> int:
    """SDPA's float attn_mask (transformers' create_position_bias_mask), saved by each memory-efficient kernel: the
    encoder's position bias [1, H, S, S] (each layer's contiguous copy; under autocast each layer's half cast), the
    decoder's causal copy torch.where(causal, bias, min) [1, H, T, T] made in every layer (under autocast its half
    cast) with the causal bool it keeps, the cross-attention's zero bias [1, H, T, S] once."""
    a, x, amp, _, _, _, h = _sizes(s)
    m = s.model
    le, ld = m.layers, m.arch.get("num_decoder_layers", m.layers)
    S, T = s.seq, s.tgt
    # the bias is compute_bias's permuted (non-contiguous) view, so create_position_bias_mask's .contiguous() copies
    # it in every encoder layer too (measured: one [1, H, S, S] per layer, not one per stack)
    enc = h * S * S * (a if amp and x != a else x) * le
    # and torch.where's causal bool [1, 1, T, T], kept for a trained bias (the full fine-tune's)
    dec = (h * T * T * (a if amp and x != a else x) + (T * T if s.method == "full" else 0)) * ld
    # the cross-attention's zero bias [1, H, T, S] (the decoder's one tensor for every layer)
    dec += h * T * S * (a if amp and x != a else x)  # (measured: its half cast under autocast)
    # and each kernel's philox seed and offset (two int64 scalars) for its dropout: 1 + 2 attentions per layer pair
    return enc + dec + 16 * (le + 2 * ld)


def _sdpa_bias_encoder(s: Setup) -> int:
    """The encoder's share of _sdpa_bias: each layer's bias copy (and philox scalars)."""
    a, x, amp, _, _, _, h = _sizes(s)
    return (h * s.seq * s.seq * (a if amp and x != a else x) + 16) * s.model.layers


def _lse_rows(n: int) -> int:
    """The memory-efficient kernel's logsumexp rows: the query length rounded up to 32."""
    return -(-n // 32) * 32


def _per_key(s: Setup) -> int:
    """Per query token and key position, eager attention's saved tensors: the softmax output (fp32 under CUDA's
    autocast: the fp32 position bias promotes the scores), the dropout's bool mask and the dropped-out
    probabilities the second matmul reads (its half cast under autocast). SDPA saves none."""
    a, _, amp, _, _, _, h = _sizes(s)
    if not _eager(s):
        return 0
    return h * ((4 if amp else a) + 1 + a)


def encoder_layer_tok(s: Setup, first: bool = False) -> int:
    """Per source token, one encoder layer (self-attention + FFN), its keys excluded."""
    return (_attention_tok(s, "encoder", "SelfAttention", first)
            + _norm_own(s) + _reads(s, _ffn_in(s, "encoder"), s.model.hidden, DTYPE_BYTES[s.dtype])
            + _ffn_bytes(s, "encoder") + s.model.hidden)


def decoder_layer_tok(s: Setup, first: bool = False) -> int:
    """Per target token, one decoder layer (causal self-attention, cross-attention's q side, FFN), keys excluded."""
    return (_attention_tok(s, "decoder", "SelfAttention", first) + _attention_tok(s, "decoder", "EncDecAttention")
            + _norm_own(s) + _reads(s, _ffn_in(s, "decoder"), s.model.hidden, DTYPE_BYTES[s.dtype])
            + _ffn_bytes(s, "decoder") + s.model.hidden)


def cross_kv_src(s: Setup) -> int:
    """Per source token, what each decoder layer's cross-attention saves beside the encoder output (alive anyway):
    its k and v outputs, and what k and v save of the encoder output beyond the tensor itself (their half casts
    under autocast, an adapter's dropout)."""
    a, x, amp, d, i, _, _ = _sizes(s)
    kv = _reads(s, ["decoder.EncDecAttention.k", "decoder.EncDecAttention.v"], d, x)
    if not amp and (s.method == "full" or s.lora_dropout == 0):
        kv = max(0, kv - x * d)  # the encoder output itself, counted once per model
    return 2 * a * i + kv


def _once(s: Setup) -> tuple[int, int, int]:
    """(per source token, per target token, per sequence pair) saved once: the embeddings' dropout masks, each
    stack's final norm and dropout mask, the encoder output (saved by the cross-attention's k and v, alive through
    forward in any case), the decoder's output (and original T5's d_model**-0.5 rescaled copy lm_head reads), the
    decoder input ids (shift_right of the labels, int64) and the relative position buckets (int64, S² and T²) the
    bias embeddings keep for a trained bias."""
    a, x, amp, d, _, _, _ = _sizes(s)
    full = s.method == "full"
    mask = d if full or s.recompute else 0  # an embedding's dropout on an input needing no gradient keeps no mask
    final = _norm_own(s)
    src = mask + final + d + x * d
    scale = s.model.arch.get("scale_decoder_outputs")
    tgt = 8 + mask + final + d + x * d + (x * d if scale else 0)
    pair = 8 * s.seq * s.seq + 8 * s.tgt * s.tgt if full and not s.recompute else 0
    return src, tgt, pair


def _checkpoint_inputs(s: Setup) -> int:
    """Under recompute, the checkpointed blocks' other tensor inputs, alive until backward: the encoder's relative
    position bias [1, H, S, S] and the decoder's [1, H, T, T] (the weights' dtype), the cross-attention's zero bias
    [1, H, T, S] (the query's dtype) and eager attention's causal mask [b, 1, T, T]. A stack's position bias is made
    inside its first block and handed to the next, so a one-layer stack (byT5-like asymmetric stacks can have few)
    keeps none: measured."""
    a, x, amp, _, _, _, h = _sizes(s)
    S, T = s.seq, s.tgt
    m = s.model
    le, ld = m.layers, m.arch.get("num_decoder_layers", m.layers)
    out = h * ((S * S if le > 1 else 0) + (T * T if ld > 1 else 0)) * x + h * T * S * a
    if _eager(s):
        out += s.batch * T * T * x
    return out


def encoder_weight_copies(s: Setup) -> int:
    """The encoder's share of weight_copies' layers (autocast's half casts, kept until the encoder's backward)."""
    a, x, amp, _, _, _, _ = _sizes(s)
    if not amp or x == a:
        return 0
    return sum(l.in_features * l.out_features * l.count for l in s.model.layer_linears()
               if l.name.startswith("encoder.")) * a


def weight_copies(s: Setup) -> tuple[int, int]:
    """(layers, lm_head) bytes of autocast's half copies of fp32 weights, kept for backward (a trained weight's
    cached cast; a frozen one's per-use cast the matmul saves)."""
    a, x, amp, _, _, _, _ = _sizes(s)
    if not amp or x == a:
        return 0, 0
    m = s.model
    body = sum(l.in_features * l.out_features * l.count for l in m.layer_linears()) * a
    return body, m.vocab * m.hidden * a


def seq2seq_terms(s: Setup) -> ActivationTerms:
    m = s.model
    a, x, amp, d, i, f, h = _sizes(s)
    b, S, T = s.batch, s.seq, s.tgt
    le, ld = m.layers, m.arch.get("num_decoder_layers", m.layers)
    pk = _per_key(s)
    enc = (encoder_layer_tok(s) + pk * S) * b * S
    dec = (decoder_layer_tok(s) + pk * (T + S)) * b * T + cross_kv_src(s) * b * S
    if not _eager(s):  # logsumexp rows rounded up to 32 (per attention: the encoder's one, the decoder's two)
        enc += 4 * h * b * (_lse_rows(S) - S)
        dec += 2 * 4 * h * b * (_lse_rows(T) - T)
    enc0 = (encoder_layer_tok(s, True) + pk * S) * b * S
    dec0 = (decoder_layer_tok(s, True) + pk * (T + S)) * b * T + cross_kv_src(s) * b * S
    src, tgt, pair = _once(s)
    once = src * b * S + tgt * b * T + pair
    if not _eager(s) and not s.recompute:
        once += _sdpa_bias(s)
    copies, head_copy = weight_copies(s)
    if s.method != "full" and s.recompute:
        # a frozen weight's per-use cast is kept by its matmul only when the block is not checkpointed; the trained
        # adapters' casts stay in autocast's cache through forward
        from memlint.estimate.model_state import lora_params

        copies = lora_params(m, s.lora_r, s.lora_targets) * a if amp and x != a else 0
    if not _eager(s):
        enc0 += 4 * h * b * (_lse_rows(S) - S)
        dec0 += 2 * 4 * h * b * (_lse_rows(T) - T)
    if s.recompute:
        body = x * d * (b * S * le + b * T * ld) + once + _checkpoint_inputs(s) + copies
        formula = (f"{x}·d·(S·b·Le + T·b·Ld) checkpointed block inputs, the position biases, encoder and decoder "
                   f"outputs, final norms; one block ({encoder_layer_tok(s):,} B/source token, "
                   f"{decoder_layer_tok(s):,} B/target token) comes back in backward")
    else:
        body = enc0 + enc * (le - 1) + dec0 + dec * (ld - 1) + once + copies
        formula = (f"encoder {encoder_layer_tok(s):,} B/token/layer × S·b·Le + decoder {decoder_layer_tok(s):,} "
                   f"B/token/layer × T·b·Ld + cross-attention k, v {cross_kv_src(s):,} B/source token/layer"
                   + (f" + eager attention {pk} B/query/key" if _eager(s) else " (SDPA)") + f"; S={S}, T={T}")
    if copies:
        formula += " + autocast's half copies of the fp32 linear weights"
    if s.target_len is None:
        formula += " (target length assumed = source length)"
    per_layer, fwd_t, keep = max(enc, dec), 0, 0
    if s.recompute:
        # forward: a checkpointed encoder block's own attention tensors live beside the encoder's part of the body
        # (the first blocks' inputs, the bias, the embedding's mask): the peak inside the last encoder block
        enc_part = x * d * b * S * le + h * S * S * x + (src - x * d) * 0 + d * b * S
        attn = (_attention_tok(s, "encoder", "SelfAttention") + pk * S) * b * S
        fwd_t = enc_part + attn - body
        # backward: the encoder's recomputed block beside what the encoder's backward keeps: its checkpointed
        # inputs, the bias, the final norm's tensors, the encoder output's gradient (summed over the decoder's
        # cross-attentions), the incoming and FFN-intermediate gradients, less the block's own weight gradients
        # still to come (a full fine-tune)
        keep = enc_part + src * b * S
        if s.method == "full":
            keep -= sum(l.in_features * l.out_features for l in m.layer_linears() if l.name.startswith("encoder.")) * x
        # the recomputed block's backward: the incoming and FFN-intermediate gradients; under autocast the block's
        # half weight casts made again (and a trained weight's half gradient before it is accumulated in fp32)
        def block_params(stack: str) -> int:
            return sum(l.in_features * l.out_features for l in m.layer_linears() if l.name.startswith(stack))
        casts = (2 if s.method == "full" else 1) * a if amp and x != a else 0
        # under SDPA the recomputed block's own mask: the encoder's contiguous bias copy, the decoder's causal copy
        xa = a if amp and x != a else x
        sdpa_enc, sdpa_dec = (0, 0) if _eager(s) else (h * S * S * xa, h * T * T * xa)
        per_layer = max(dec + (a * f + x * d) * b * T + casts * block_params("decoder.") + sdpa_dec,
                        enc + (a * f + x * d) * b * S + casts * block_params("encoder.") + sdpa_enc)
        keep = max(0, keep)
    return ActivationTerms(body, per_layer, _logits_forward(s) + head_copy, _logits_backward(s), formula,
                           f"T·b·V logits ({a} B) + fp32 log-softmax (V={m.vocab:,}, T={T})",
                           forward_transient=max(0, fwd_t), recompute_keep=keep if s.recompute else 0,
                           encoder_body=0 if s.recompute else enc0 + enc * (le - 1) + src * b * S
                           + (_sdpa_bias_encoder(s) if not _eager(s) else 0) + encoder_weight_copies(s))


def _logits_forward(s: Setup) -> int:
    """lm_head's T·b x V logits and CrossEntropyLoss around the loss in forward: cross_entropy_loss is on no CUDA
    autocast list, so it decomposes with autocast on: log_softmax with the logits' own dtype (the loss passes it), kept
    for backward, then nll_loss (CUDA's fp32 list) on an fp32 copy of it, kept too; under autocast lm_head's half cast
    of its input."""
    a, _, amp, d, _, _, _ = _sizes(s)
    n = s.batch * s.tgt * s.model.vocab
    # (a frozen lm_head, LoRA's, keeps no cast of its input: its weight gives the input's gradient)
    return n * (a + a + (4 if a != 4 else 0)) + (a * d * s.batch * s.tgt if amp and s.method == "full" else 0)


def _logits_backward(s: Setup) -> int:
    """At the loss's backward: fp32 logits keep the log-softmax output (nll_loss reads it as it is), which with its
    gradient and the logits' gradient makes three; half logits keep their half log-softmax and nll_loss's fp32 copy
    of it when nll_loss's fp32 gradient arrives (the largest moment; the half gradients come after the copy is
    freed)."""
    a, _, amp, _, _, _, _ = _sizes(s)
    n = s.batch * s.tgt * s.model.vocab
    if a == 4:
        return n * (4 + 4 + 4)
    return n * max(a + 4 + 4, 3 * a)
