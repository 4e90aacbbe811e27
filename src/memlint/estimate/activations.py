"""Activations saved for backward, and the logits/loss terms, per micro-batch.

textbook: the seed article's Megatron-style count: 34·s·b·h bytes per layer (+5·a·s²·b
for eager attention's score matrix), layer inputs plus one layer under recompute, and
s·b·V·4 bytes of fp32 logits.
real: the tensors HF transformers' decoder layers actually save, term by term, for
the parameter/compute dtypes in play (see docs/accounting.md); calibrated against the
fake-tensor trace of `memlint measure`.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlint.estimate.model_state import lora_modules
from memlint.estimate.setup import DTYPE_BYTES, Setup


@dataclass(frozen=True)
class ActivationTerms:
    """Bytes per micro-batch, split the way the phases need them."""

    body: int            # saved by all decoder layers at the end of forward
    per_layer: int       # saved by one layer (what recompute re-creates at a time)
    layer_inputs: int    # what recompute keeps: every layer's input
    logits_forward: int  # extra live bytes around the loss in forward
    logits_backward: int  # extra live bytes at the start of backward (logits grads)
    formula: str
    logits_formula: str


def textbook(s: Setup) -> ActivationTerms:
    m = s.model
    sb = s.seq * s.batch
    per_layer = 34 * sb * m.hidden
    formula = "34·s·b·h per layer"
    if s.attn == "eager":
        per_layer += 5 * m.heads * s.seq * sb
        formula = "(34·s·b·h + 5·a·s²·b) per layer"
    inputs = 2 * sb * m.hidden * m.layers
    if s.recompute:
        body = inputs + per_layer
        formula = f"2·s·b·h·L layer inputs + one layer of {formula.replace(' per layer', '')}"
    else:
        body = per_layer * m.layers
        formula += " × L"
    logits = sb * m.vocab * 4
    return ActivationTerms(body, per_layer, inputs, logits, 0, formula, "s·b·V × 4 B (fp32 logits)")


def _per_token_layer_bytes(s: Setup) -> tuple[int, int]:
    """(bytes saved per token by one decoder layer, bytes of its input), HF eager/SDPA code."""
    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    # The residual stream: fp32 when autocast runs over fp32 weights, else the weight dtype.
    x = 4 if s.dtype == "fp32" else DTYPE_BYTES[s.dtype]
    h, i = m.hidden, m.intermediate
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    full = s.method == "full"
    rms = m.arch.get("norm") == "rmsnorm"

    # Norms: RMSNorm keeps the fp32 upcast input; the normalised half copy only when its
    # weight trains. LayerNorm keeps its input and (mean, rstd).
    norm = (4 * h + 4 + (x * h if full else 0)) if rms else (x * h + 8)
    n_norms = 4 if m.model_type in ("gemma2", "gemma3_text") else 2
    total = n_norms * norm
    # Attention: the qkv input, rotated q/k, v, SDPA's output and logsumexp, o_proj's input.
    total += a * h + a * (2 * q + 2 * kv) + a * q + 4 * m.heads + a * q
    if s.attn == "eager":
        # fp32 softmax probabilities + their half copy, per head and key position; GQA
        # k/v are expanded to every head before the matmuls.
        total += (4 + a) * m.heads * s.seq + (2 * a * (q - kv) if q != kv else 0)
    # MLP
    experts = m.arch.get("num_experts")
    if m.arch.get("mlp") == "gated":
        inter = m.arch.get("moe_intermediate_size", i) * (m.arch.get("experts_per_token") or 1) if experts else i
        total += a * h + 4 * a * inter
    else:
        total += a * h + 2 * a * i
    # LoRA: each adapted linear keeps its input cast to the adapter dtype (+ a dropout
    # mask when dropout > 0) and the rank-r intermediate.
    if s.method != "full":
        ab = 2 if s.precision == "pure-bf16" else 4
        for l in lora_modules(m, s.lora_targets):
            if l.name == "lm_head":
                continue
            n = l.count / m.layers
            keep = ab * l.in_features + ab * s.lora_r
            if s.lora_dropout > 0:
                keep += l.in_features  # bool mask
            total += int(keep * n)
    return total, x * h


def real(s: Setup) -> ActivationTerms:
    m = s.model
    sb = s.seq * s.batch
    per_tok, inp_tok = _per_token_layer_bytes(s)
    per_layer = per_tok * sb
    inputs = inp_tok * sb * m.layers
    if s.recompute:
        body = inputs + per_layer
        formula = (f"{inp_tok // m.hidden}·s·b·h·L checkpointed layer inputs + one layer "
                   f"({per_tok:,} B/token) while it is recomputed")
    else:
        body = per_layer * m.layers
        formula = f"{per_tok:,} B/token/layer saved (norms, q/k/v, SDPA, MLP{', LoRA inputs' if s.method != 'full' else ''}) × s·b·L"
    a = DTYPE_BYTES[s.compute_dtype]
    V = m.vocab
    # Final norm + lm_head input, the logits in compute dtype, their fp32 upcast and
    # log_softmax output (HF's ForCausalLMLoss), then the fp32 gradient in backward.
    head_in = (4 + a) * m.hidden * sb
    fwd = head_in + (a + 4 + 4) * V * sb
    bwd = head_in + (a + 4 + 4 + a) * V * sb
    return ActivationTerms(
        body, per_layer, inputs, fwd, bwd, formula,
        f"s·b·V × ({a}+4+4) B: logits, fp32 upcast, log-softmax; +{a} B for their gradient in backward",
    )


def activations(s: Setup, accounting: str) -> ActivationTerms:
    return textbook(s) if accounting == "textbook" else real(s)
