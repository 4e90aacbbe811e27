"""Activations saved for backward, and the logits/loss terms, per micro-batch.

textbook: the seed article's Megatron-style count: 34·s·b·h bytes per layer (+5·a·s²·b
for eager attention's score matrix), layer inputs plus one layer under recompute, and
s·b·V·4 bytes of fp32 logits.
real: the tensors HF transformers' decoder layers actually save, term by term, for
the parameter/compute dtypes in play (see docs/accounting.md); calibrated against the
fake-tensor trace of `memlint measure`.
"""

from __future__ import annotations

from dataclasses import replace

from memlint import data
from memlint.estimate import tensor_parallel as tp
from memlint.library.versions import in_range, installed_version
from memlint.estimate.model_state import lora_modules, trains_lm_head_copy
from memlint.library.api import attention
from memlint.estimate.setup import DTYPE_BYTES, Setup, preference
from memlint.estimate.terms import ActivationTerms  # noqa: F401 (re-exported: activations.ActivationTerms)
from memlint.estimate.decoder import residual_bytes  # noqa: F401 (re-exported: activations.residual_bytes)


def textbook(s: Setup) -> ActivationTerms:
    m = s.model
    sb = s.seq * s.batch
    t = s.tp
    sp = tp.sequence_parallel(s)
    # Korthikanti et al. 2022, eq. 2-4: 34·s·b·h per layer; under TP over t ranks sbh(10 + 24/t), the
    # 10·sbh outside the parallel regions (norms, residual, dropout masks) shared unless sequence
    # parallelism divides it too: 34·sbh/t. (m is the rank's model: m.heads is a/t already.)
    if t == 1:
        per_layer = 34 * sb * m.hidden
        formula = "34·s·b·h per layer"
    elif sp:
        per_layer = 34 * sb * m.hidden // t
        formula = f"34·s·b·h/t per layer (t = {t}, sequence parallel)"
    else:
        per_layer = 10 * sb * m.hidden + 24 * sb * m.hidden // t
        formula = f"s·b·h·(10 + 24/t) per layer (t = {t})"
    if attention()[s.attn].kernel == "eager":
        per_layer += 5 * m.heads * s.seq * sb
        formula = ("(34·s·b·h + 5·a·s²·b) per layer" if t == 1 else
                   formula.replace(" per layer", "") + " + 5·a·s²·b/t per layer")
    inputs = 2 * sb * m.hidden * m.layers // (t if sp else 1)
    if s.recompute:
        body = inputs + per_layer
        formula = f"2·s·b·h·L layer inputs + one layer of {formula.replace(' per layer', '')}"
    else:
        body = per_layer * m.layers
        formula += " × L"
    if s.offload_activations:
        body, formula = offloaded(body, per_layer, 2 * sb * m.hidden, per_layer if s.recompute else 0, s.recompute, formula)
    V = logits_vocab(s)
    logits = sb * V * 4
    return ActivationTerms(body, per_layer, logits, 0, formula,
                           "s·b·V × 4 B (fp32 logits)" if V == m.vocab else "s·b·V/t × 4 B (fp32 logits, loss parallel)")


def logits_vocab(s: Setup) -> int:
    """The vocabulary columns of the logits one rank holds: all of them, unless the loss is
    vocab-parallel over the tensor-parallel ranks."""
    return -(-s.model.vocab // s.tp) if tp.loss_parallel(s) else s.model.vocab


def _head_outputs(s: Setup) -> tuple[int, str]:
    """(elements, formula) of an encoder head's logits: b x num_labels (sequence classification), s·b x
    num_labels (token classification), s·b x V (masked LM)."""
    sb = s.seq * s.batch
    if s.head == "sequence-classification":
        return s.batch * s.num_labels, "b·labels"
    if s.head == "token-classification":
        return sb * s.num_labels, "s·b·labels"
    return sb * s.model.vocab, "s·b·V"


def textbook_encoder(s: Setup) -> ActivationTerms:
    """The article's count for the encoder layers (34·s·b·h per layer, + 5·a·s²·b eager) and the head's fp32
    logits."""
    t = textbook(s)
    n, f = _head_outputs(s)
    return ActivationTerms(t.body, t.per_layer, n * 4, 0, t.formula, f"{f} × 4 B (fp32 logits)")


def autocast_weight_copies(s: Setup) -> tuple[int, int]:
    """(decoder body, lm_head) bytes of the half-precision weight copies autocast makes
    for fp32 weights and keeps for backward until each op's gradient is computed."""
    if s.precision not in ("amp-bf16", "amp-fp16"):
        return 0, 0
    from memlint.estimate.sharding import fsdp_mixed_precision

    if fsdp_mixed_precision(s):  # FSDP gathers each unit in the half dtype: autocast has nothing to cast
        return 0, 0
    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    head = (m.lm_head.out_features if m.lm_head else m.arch.get("embedding_rows", m.vocab)) * m.hidden * a
    body = 0
    if s.dtype == "fp32":
        # torchao's Float8Linear saves its fp32 weight itself (weight_hp_t) and casts it to float8 directly: no
        # autocast half copy for the linears it converted
        body = 0 if s.float8 != "none" else sum(l.in_features * l.out_features * l.count for l in m.layer_linears()) * a
        return body, 0 if s.float8 == "all" else head
    if s.upcasts_kbit:
        return 0, head  # lm_head was upcast to fp32
    return 0, 0


def _linear_inputs(s: Setup, a: int, inter: int) -> int:
    """Bytes per token that LoRA adapters keep of their inputs for their weight grads (a full fine-tune's linears are
    estimate/decoder.py's terms: layer_bytes, input_copies).

    Adapters on frozen linears that read the same tensor share it (q/k/v, gate/up). peft casts the input to the
    adapter's fp32 and autocast casts it back, so under autocast each adapter keeps its own half copy, and with
    dropout each keeps its own dropped-out copy plus a bool mask."""
    from memlint.estimate.decoder import attention_output_kept, fact, mlp_output_kept
    from memlint.estimate.sharding import fsdp_mixed_precision

    m = s.model
    size = {"attn_in": m.hidden, "mlp_in": m.hidden, "mlp_out": inter, "attn_out": 0}
    # FSDP's mixed precision gathers the adapters in the half dtype too: peft's cast to the adapter dtype is a no-op
    autocast = s.precision in ("amp-bf16", "amp-fp16") and not fsdp_mixed_precision(s)
    # fp32 adapters on a half base without autocast: peft casts each adapter's input to fp32, and
    # that fp32 copy is what the adapter keeps (lora_A's input, and lora_B's r-wide input in fp32)
    upcast = not autocast and s.adapter_dtype == "fp32" and s.dtype in ("bf16", "fp16")
    own = autocast or s.lora_dropout > 0 or upcast
    ab = 4 if upcast else a
    total = 0
    shared: set[str] = set()
    for l in lora_modules(m, s.lora_targets):
        if l.name == "lm_head":
            continue
        per_layer = l.count / m.layers
        g = l.role
        fin = size["mlp_out"] if g == "mlp_out" else l.in_features
        keep = ab * s.lora_r
        if own:
            keep += ab * fin + (fin if s.lora_dropout > 0 else 0)
        elif g == "attn_out" and attention_output_kept(s) < 1:
            # eager / math attention's output copy, kept by the adapter (in the layers that run them)
            total += int(a * l.in_features * per_layer * (1 - attention_output_kept(s)))
        elif g != "attn_out" and not (g == "mlp_out" and mlp_output_kept(s)):
            shared.add(g)  # (attention's output and a ReLU's are kept by the kernel / the activation already)
        total += int(keep * per_layer)
    if fact(s, "layout") == "parallel" and {"attn_in", "mlp_in"} <= shared:
        shared.discard("mlp_in")  # one norm output feeds attention and the MLP: one tensor
    return total + a * sum(size[g] for g in shared) + _hqq_inputs(s, a, size, shared)


def _hqq_inputs(s: Setup, a: int, size: dict[str, int], shared: set[str]) -> int:
    """hqq's default backend (HQQMatmulNoCacheMul, core/quantize.py) saves every quantized linear's input x
    (ctx.save_for_backward(x, bias)) although its backward only uses the weight: per token the normed hidden state
    q/k/v read and the one gate/up read (residual dtype), and down_proj's input (the MLP product), unless an adapter
    already keeps that same tensor. o_proj's input is SDPA's output, already counted. Checked against a trace of
    hqq's own HQQLinear (tests/test_hqq.py)."""
    if s.quant != "hqq":
        return 0
    x = residual_bytes(s)
    mlp = a if s.precision in ("amp-bf16", "amp-fp16") else x
    byte = {"attn_in": x, "mlp_in": x, "mlp_out": mlp}
    return sum(byte[g] * size[g] for g in ("attn_in", "mlp_in", "mlp_out") if g not in shared)


def tp_sequence_shards(s: Setup) -> tuple[int, int, int]:
    """Bytes per token of (one layer, one layer's input, once per model) that sequence parallelism
    splits by the sequence over the TP ranks: the norms (input, rsqrt, normalised copy), the residual
    stream at each layer's input and the final norm; in Megatron also q/k/v's and gate/up's shared
    input (it saves the sequence shard and all-gathers it again in backward; torch's DTensor styles
    save the all-gathered input)."""
    if not tp.sequence_parallel(s):
        return 0, 0, 0
    m = s.model
    x = residual_bytes(s)
    norm = _norm_bytes(s)
    layer = m.arch["norms_per_layer"] * norm
    if not tp.stack(s)["sp_saves_gathered_input"] and s.method == "full":
        layer += DTYPE_BYTES[s.compute_dtype] * 2 * m.hidden
    return layer, x * m.hidden, norm


def _norm_bytes(s: Setup) -> int:
    """What one of the family's norms on the residual stream keeps per token (estimate/decoder.py norm_saved): llama's
    RMSNorm its fp32 upcast input and rsqrt, plus the normalised copy in the input dtype when its weight trains;
    F.layer_norm its input (fp32 under autocast) and mean and rstd."""
    from memlint.estimate.decoder import norm_saved

    return int(norm_saved(s, s.model.hidden, 1, residual_bytes(s), s.method == "full")[0])


def _per_token_layer_bytes(s: Setup) -> tuple[float, int, float]:
    """Bytes saved per token: (one decoder layer, one layer's input, once per model).

    The family's layer as CUDA runs it (estimate/decoder.py, from catalog/families.json), plus what peft's adapters,
    HQQ and DoRA keep (below). Under tensor parallelism s.model is the rank's model (tensor_parallel.rank_spec), so
    the terms inside the TP regions are already the rank's; the parts sequence parallelism shards are
    `tp_sequence_shards`."""
    from memlint.estimate.decoder import _lin_out, layer_bytes

    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    tokens = s.seq * s.batch
    lb = layer_bytes(s)
    total = lb.per_layer / tokens
    experts = m.arch.get("num_experts")
    inter = m.arch.get("moe_intermediate_size", m.intermediate) * (m.arch.get("experts_per_token") or 1) \
        if experts else m.intermediate
    if s.method != "full":
        total += _linear_inputs(s, a, inter) + lora_weight_casts(s) / tokens
    if s.use_dora and s.method != "full":
        total += _dora_saved_per_token(s, a, _lin_out(s))
    total -= compiled_layer_savings(s)
    once = lb.once / tokens
    if trains_lm_head_copy(s):
        # a trained lm_head (modules_to_save) keeps its input for its weight gradient; a frozen one does not
        once += (a if s.precision in ("amp-bf16", "amp-fp16") else residual_bytes(s)) * m.hidden
    return total, lb.layer_input // tokens, once


def softcap_logits_bytes(s: Setup) -> int:
    """A final logit soft-capping (families.json final_logit_softcapping: Gemma 2's config.final_logit_softcapping):
    logits / cap, tanh, * cap; tanh keeps its output (the logits' size in the compute dtype) for backward."""
    from memlint.estimate.decoder import config, fact

    key = fact(s, "final_logit_softcapping")
    if not key or not config(s, key):
        return 0
    return s.seq * s.batch * logits_vocab(s) * DTYPE_BYTES[s.compute_dtype]


def lora_weight_casts(s: Setup) -> int:
    """Bytes per decoder layer of autocast's half copies of fp32 LoRA weights (A and B of every adapted linear): each is
    a cached cast of a leaf parameter, saved by its matmul for the input's gradient."""
    if s.precision not in ("amp-bf16", "amp-fp16") or s.method == "full":
        return 0
    from memlint.estimate.model_state import trainable_dtype

    if DTYPE_BYTES[trainable_dtype(s, "real")] == DTYPE_BYTES[s.compute_dtype]:
        return 0
    m = s.model
    return int(sum(s.lora_r * (l.in_features + l.out_features) * l.count / m.layers
                   for l in lora_modules(m, s.lora_targets) if l.name != "lm_head") * DTYPE_BYTES[s.compute_dtype])


def compiled_layers_modelled(s: Setup) -> bool:
    """The decoders whose compiled layers memlint counts: RMSNorm, a flash-kernel attention, an unquantized base
    whose residual stream is in the compute dtype (bf16 weights), no DoRA (measured on a Llama layer)."""
    m = s.model
    return (s.compiled_layers and m.arch.get("norm") == "rmsnorm" and attention()[s.attn].kernel != "eager"
            and s.quant == "none" and not s.use_dora and residual_bytes(s) == DTYPE_BYTES[s.compute_dtype]
            and not (s.encoder or s.seq2seq or m.vision or s.model_code != "transformers"))


def compiled_layer_savings(s: Setup) -> int:
    """Bytes per token and layer that a decoder layer under torch.compile does not save, against eager
    (inductor's min-cut partition, measured with saved_tensors_hooks on a compiled LlamaDecoderLayer on CPU,
    tests/test_compiled_layers.py): each RMSNorm keeps its rsqrt only (not its fp32 upcast input, nor, when its
    weight trains, the normalised copy: the backward reads the normalised linear input), the gated MLP's activation
    output is recomputed; the layer keeps its own input (and, with frozen weights, the residual between attention and
    MLP) and the rotary cos / sin (once per layer, where eager keeps them once per model)."""
    if not compiled_layers_modelled(s):
        return 0
    m = s.model
    a, x, h = DTYPE_BYTES[s.compute_dtype], residual_bytes(s), m.hidden
    norms = m.arch["norms_per_layer"] * (4 * h + (x * h if s.method == "full" else 0))
    act_out = a * m.intermediate if m.arch.get("mlp") == "gated" and not m.arch.get("num_experts") else 0
    kept = x * h + (x * h if s.method != "full" else 0) + 2 * a * m.head_dim
    return max(0, norms + act_out - kept)


def _dora_dtypes(s: Setup) -> tuple[int, int, int]:
    """(adapter bytes, bytes the adapters' matmuls run in, the base weight's bytes) for peft's DoRA layer:
    peft casts the layer input to the adapter dtype (x), autocast runs the adapter matmuls in half."""
    from memlint.estimate.model_state import trainable_dtype

    ad = DTYPE_BYTES[trainable_dtype(s, "real")]
    mm = DTYPE_BYTES[s.compute_dtype] if s.precision in ("amp-bf16", "amp-fp16") else ad
    wd = DTYPE_BYTES[s.compute_dtype] if s.quant != "none" else DTYPE_BYTES[s.dtype]  # bitsandbytes dequantizes to it
    return ad, mm, wd


def _dora_saved_per_token(s: Setup, a: int, base_out: int) -> int:
    """peft's DoRA output (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling keeps
    both products' token-sized operands for the magnitude's gradient: the base layer's output (in its
    dtype) and the adapter's output (in the adapters' matmul dtype), per adapted layer and token."""
    _, mm, _ = _dora_dtypes(s)
    m = s.model
    return int(sum(l.out_features * (base_out + mm) * l.count / m.layers
                   for l in lora_modules(m, s.lora_targets) if l.name != "lm_head"))


def _dora_per_layer(s: Setup) -> int:
    """Bytes per decoder layer, whatever the tokens: with lora_dropout > 0 peft's DoRA recomputes the base
    output as F.linear(dropout(x), W.to(x.dtype)), which saves that weight copy (the matmul dtype's)."""
    if not (s.use_dora and s.method != "full" and s.lora_dropout > 0):
        return 0
    _, mm, _ = _dora_dtypes(s)
    m = s.model
    return int(sum(l.in_features * l.out_features * mm * l.count / m.layers
                   for l in lora_modules(m, s.lora_targets) if l.name != "lm_head"))


def dequant_bytes(s: Setup) -> int:
    """Bytes per element of a GPTQ / AWQ layer's dequantized weight: gptqmodel's torch kernels cast it to the input's
    dtype (weights.to(x.dtype)); autocast then runs the matmul on (and saves) a compute-dtype copy."""
    return DTYPE_BYTES[s.compute_dtype] if s.precision in ("amp-bf16", "amp-fp16") else residual_bytes(s)


def gptq_saved_per_layer(s: Setup) -> int:
    """GPTQ trains through gptqmodel's torch kernel (TorchLinear; TritonV2Linear falls back to it in training, Marlin
    and ExLlama cannot train): forward dequantizes the packed weight and runs torch.matmul(x, W) on it, so autograd
    saves W (in x out in the input's dtype) for the input's gradient, per quantized linear, until that layer's backward."""
    if s.quant != "gptq":
        return 0
    m = s.model
    return int(sum(l.in_features * l.out_features * l.count for l in m.layer_linears()) * dequant_bytes(s) / m.layers)


def awq_transient(s: Setup) -> int:
    """AWQ's GEMM layer (gptqmodel AwqGemmFn, autoawq's WQLinearMMFunction) is an autograd Function that saves only
    the packed qweight/qzeros/scales; forward (and backward again) dequantizes the weight for one matmul: the
    largest quantized linear's in x out, a transient."""
    if s.quant != "awq":
        return 0
    return max((l.in_features * l.out_features for l in s.model.layer_linears()), default=0) * dequant_bytes(s)


def hqq_transient(s: Setup) -> int:
    """hqq's HQQLinear.dequantize, forward and again in backward (HQQMatmulNoCacheMul keeps no weight): the unpacked
    values, (W_r - zero) and its product with scale, three weight-sized tensors in the layer's compute_dtype (the load
    dtype), plus autocast's half copy for the matmul when that dtype is not the autocast one; the largest quantized
    linear."""
    if s.quant != "hqq":
        return 0
    n = max((l.in_features * l.out_features for l in s.model.layer_linears()), default=0)
    c = DTYPE_BYTES[s.dtype]
    cast = DTYPE_BYTES[s.compute_dtype] if s.precision in ("amp-bf16", "amp-fp16") and s.compute_dtype != s.dtype else 0
    return n * (3 * c + cast)


def float8_linears(s: Setup) -> list[tuple[int, int, int]]:
    """(in, out, count) of the linears torchao swaps for Float8Linear: the decoder's, and lm_head for "all"."""
    if s.float8 == "none":
        return []
    m = s.model
    out = [(l.in_features, l.out_features, l.count) for l in m.layer_linears()]
    if s.float8 == "all":
        out.append((m.hidden, m.vocab, 1))
    return out


_CAST = 9  # eager hp -> float8 cast of N elements: x.to(float32) * scale (4 N B), its clamp (4 N) and the float8 result (N)


def float8_transients(s: Setup) -> tuple[int, int]:
    """(forward, backward) working memory of torchao's matmul_with_hp_or_float8_args (float8/float8_linear.py,
    dynamic tensorwise scaling, eager) for the worst converted linear, T tokens: each hp -> float8 cast
    (_ToFloat8ConstrFunc: tensor.to(float32) * scale, to_fp8_saturated's clamp, .to(float8)) peaks at 9 B per element
    and leaves 1 B per element. Forward casts the input (T·in) then the weight (in·out). Backward, next to the incoming
    grad_output (T·out in the compute dtype) and the saved input, keeps every float8 copy it makes until it returns:
    grad_output (T·out) and the weight (in·out) for grad_input, then grad_output again and the input for grad_weight.
    The matmul outputs are the tensors a bf16 linear makes too. Approximate: eager PyTorch's op order (checked against
    traces, tests/test_float8.py); torch.compile (torchtitan, torchao's recommendation) fuses the casts."""
    fwd = bwd = 0
    tokens = s.seq * s.batch * (preference()["objectives"][s.objective]["rows"])
    c = DTYPE_BYTES[s.compute_dtype]
    for i, o, _ in float8_linears(s):
        ti, to, w = tokens * i, tokens * o, i * o
        if s.float8_all_gather:
            # the weight arrives as the all-gathered Float8Tensor (sharding counts its buffer): no weight cast, and
            # its transpose for grad_input is a view of it
            fwd = max(fwd, _CAST * ti)
            held = c * to + c * ti
            bwd = max(bwd, held + _CAST * to, held + to + c * ti + _CAST * to, held + 2 * to + c * ti + _CAST * ti)
            continue
        fwd = max(fwd, _CAST * ti, ti + _CAST * w)
        held = c * to + c * ti  # grad_output and the saved input
        bwd = max(bwd, held + _CAST * to, held + to + _CAST * w, held + to + w + c * ti + _CAST * to,
                  held + 2 * to + w + c * ti + _CAST * ti)
    return fwd, bwd


def dora_transient(s: Setup) -> int:
    """The forward working memory of peft's DoRA layer (tuners/lora/dora.py), its largest adapted linear:
    the weight norm ||W + scale·B·A|| is recomputed every forward from lora_weight = B(A(eye(in))) (an
    in × in identity in the adapter dtype, its half copy under autocast, a weight-sized product), W cast
    to the input's dtype, scale·lora_weight and the sum; then the output's products in the magnitude's
    dtype, token-sized. The largest of those moments."""
    ad, mm, wd = _dora_dtypes(s)
    tokens = s.seq * s.batch * (preference()["objectives"][s.objective]["rows"])
    worst = 0
    for l in lora_modules(s.model, s.lora_targets):
        i, o, r = l.in_features, l.out_features, s.lora_r
        eye_copy = i * i * mm if mm != ad else 0
        eye_step = i * i * ad + eye_copy + i * r * mm + i * o * mm
        saved_eye = eye_copy or i * i * ad
        norm_step = saved_eye + i * r * mm + i * o * (ad + (ad if wd != ad else 0) + 2 * ad)
        out_step = tokens * o * 3 * max(ad, DTYPE_BYTES[s.compute_dtype])
        worst = max(worst, eye_step, norm_step, out_step)
    return worst


def real(s: Setup) -> ActivationTerms:
    out = _real(s)
    work = recompute_working_set(s, out.per_layer)
    if s.method == "full" and work:
        # a full fine-tune's backward binds at its end beside every gradient, where core's recomputed-layer candidate
        # is already an upper bound: the working set goes to the forward and to the start of backward only
        out = replace(out, forward_transient=max(out.forward_transient, work),
                      backward_transient=max(out.backward_transient, out.per_layer + work))
    elif s.method != "full" and work > out.transient:
        out = replace(out, transient=work)
    copies = _unsaved_copies(s)
    if copies:
        # under full checkpointing the body's half weight copies are saved by nobody: autocast's cache holds a trained
        # weight's until autocast exits at the end of the forward (the loss included), a frozen weight's (not cached)
        # die at once; backward has one recomputed layer's (the recompute enters autocast again)
        cached = copies if s.method == "full" else 0
        out = replace(out, logits_forward=out.logits_forward + cached, per_layer=out.per_layer + copies // s.model.layers,
                      formula=out.formula + " + one layer's autocast half weight copies"
                      + (" (autocast's cache holds them all until the forward returns)" if cached else ""))
    return out


def recompute_working_set(s: Setup, per_layer: int) -> int:
    """Under full checkpointing, one layer's working memory beside the saved body, as a share of what the layer saves
    (data/checkpointing.json "working_set", read off fake-tensor traces at long sequences, where no logits hide it):
    in forward the checkpointed layer's intermediates (freed as it goes, nothing saved), in backward the recomputed
    layer's gradients next to its saved tensors."""
    if not s.recompute or s.recompute_policy != "full" or s.model_code == "litgpt" or s.encoder or s.seq2seq:
        return 0
    share = data.load("checkpointing.json")["working_set"]["adapters" if s.method == "lora" else s.method]
    return int(share * per_layer)


def _unsaved_copies(s: Setup) -> int:
    """The body's autocast half weight copies that autograd does not keep: all of them under full checkpointing (the
    checkpointed forward saves nothing), none without. torch's cached_cast caches the casts of fp32 leaf weights that
    require grad and drops them when the outermost autocast exits; a frozen weight's cast is not cached."""
    if not s.recompute or s.recompute_policy != "full" or s.recompute_every > 1 or s.model_code == "litgpt":
        return 0
    return autocast_weight_copies(s)[0]


def _real(s: Setup) -> ActivationTerms:
    if s.model_code == "litgpt":  # LitGPT's own Block and chunked loss (estimate/litgpt.py)
        from memlint.estimate import litgpt

        return litgpt.terms(s)
    m = s.model
    sb = s.seq * s.batch
    per_tok, inp_tok, once = _per_token_layer_bytes(s)
    # sequence parallelism: these parts are saved for ⌈s/t⌉·b tokens per rank, not s·b
    sp_layer, sp_inp, sp_once = tp_sequence_shards(s)
    sb_sp = -(-s.seq // s.tp) * s.batch
    per_layer = (per_tok - sp_layer) * sb + sp_layer * sb_sp + _dora_per_layer(s) + gptq_saved_per_layer(s)
    inputs = ((inp_tok - sp_inp) * sb + sp_inp * sb_sp) * m.layers
    once_b, per_layer = round((once - sp_once) * sb + sp_once * sb_sp), round(per_layer)
    if sp_layer and tp.stack(s)["sp_saves_gathered_input"]:
        # lm_head (ColwiseParallel(input_layouts=Shard(1))) all-gathers the sequence-sharded final norm output
        # and its matmul saves the whole s·b·h for the weight gradient, beside the norm's own shard
        once_b += sb * m.hidden * DTYPE_BYTES[s.compute_dtype]
    if s.recompute and s.recompute_policy == "op-sac":
        # op-level selective checkpointing: each layer keeps its input and what the policy saves; in
        # backward the rest of one layer comes back (what it saves, less what the policy kept of it)
        kept_tok, kept_why = op_sac_kept_per_token(s)
        kept = kept_tok * sb
        body = inputs + kept * m.layers + once_b
        per_layer = max(per_layer - kept, 0)
        formula = (f"op-level selective checkpointing: {inp_tok // m.hidden}·s·b·h·L layer inputs + "
                   f"{kept_tok:,} B/token/layer kept by the policy ({kept_why}); the rest of one layer "
                   f"({per_tok:,.0f} B/token saved, less what was kept) comes back while it is recomputed")
    elif s.recompute and s.recompute_every > 1:
        # torchtune's selective checkpointing by layers: layers N, 2N, ... (counted from 1) are
        # checkpointed, the others keep everything they save
        k = m.layers // s.recompute_every
        body = inputs // m.layers * k + per_layer * (m.layers - k) + once_b
        formula = (f"every {s.recompute_every}th layer checkpointed: {k} × {inp_tok // m.hidden}·s·b·h inputs + "
                   f"{m.layers - k} layers × {per_tok:,.0f} B/token saved; one checkpointed layer comes back in backward")
    elif s.recompute:
        # At the end of forward only the checkpointed inputs are alive; one layer's
        # activations come back during backward (ActivationTerms.per_layer).
        body = inputs + once_b
        formula = (f"{inp_tok // m.hidden}·s·b·h·L checkpointed layer inputs; one layer "
                   f"({per_tok:,.0f} B/token) comes back while it is recomputed in backward")
    else:
        body = per_layer * m.layers + once_b
        formula = f"{per_tok:,.0f} B/token/layer saved (norms, q/k/v, attention, MLP{', LoRA inputs' if s.method != 'full' else ''}) × s·b·L"
        if _dora_per_layer(s):
            formula += f" + DoRA's dropout path: {_dora_per_layer(s):,} B/layer of weight copies"
        if gptq_saved_per_layer(s):
            formula += f" + GPTQ's dequantized weights saved by torch.matmul: {gptq_saved_per_layer(s):,} B/layer"
    if s.offload_activations:
        body, formula = offloaded(body, per_layer, inputs // m.layers, once_b, s.recompute, formula)
    if sp_layer:
        formula += f" (sequence parallel: norms and residual stream for ⌈s/{s.tp}⌉·b tokens)"
    return _with_logits(s, body, per_layer, formula)


def _with_logits(s: Setup, body: int, per_layer: int, formula: str) -> ActivationTerms:
    """The decoder's body (and autocast's weight copies) with the loss's terms: the model's own cross-entropy, a fused,
    chunked or compiled loss, or TRL's SFTTrainer's layout at its version."""
    sb = s.seq * s.batch
    a = DTYPE_BYTES[s.compute_dtype]
    V = logits_vocab(s)
    copies_body, copies_head = autocast_weight_copies(s)
    copies_body -= _unsaved_copies(s)  # not saved: real() counts them
    sft = sft_layout(s)
    if sft is not None and sft["layout"] == "chunked":  # TRL's fused LM head (SFTTrainer >= 1.15): no full logits
        return _sft_fused_head(s, body + copies_body, per_layer, formula, sft)
    if s.fused_loss:
        return _fused(s, body, per_layer, formula, copies_head)
    if s.chunked_loss:
        return _chunked_ce(s, body + copies_body, per_layer, formula, copies_head)
    body += copies_body
    if copies_body:
        formula += " + autocast's half copies of the fp32 linear weights"
    # The logits in compute dtype, their fp32 upcast and log_softmax output (HF's
    # ForCausalLMLoss), then the fp32 gradient in backward.
    up = 4 if a != 4 else 0  # .float() is a no-op on fp32 logits
    fwd = copies_head + (a + up + 4) * V * sb
    bwd = copies_head + (a + up + 4 + a) * V * sb
    head = f" + autocast's {a}-byte copy of the fp32 lm_head ({copies_head:,} B)" if copies_head else ""
    cap = softcap_logits_bytes(s)  # Gemma 2's final soft-capping: tanh(logits / cap) keeps its output
    fwd, bwd, head = fwd + cap, bwd + cap, head + (f" + the soft-cap's tanh output s·b·V × {a} B" if cap else "")
    if s.compiled_loss:
        return _compiled_ce(body, per_layer, formula, copies_head, a * V * sb, 4 * sb, head)
    shard = tp.gathered_logits_shard(s)
    if shard:  # tensor parallel, logits all-gathered: the rank's own vocabulary shard is alive beside them
        fwd += shard * a
        head += f" + the rank's s·b·V/{s.tp} logits shard beside the all-gathered logits ({shard * a:,} B)"
    if sft is not None and sft.get("outputs_kept"):  # SFTTrainer's metrics over the model's logits, after its loss
        kept, why = sft_metrics_bytes(s, sft, V, a)
        fwd = max(fwd, copies_head + kept)
        head += f"; SFTTrainer's metrics: {why}"
    return ActivationTerms(
        body, per_layer, fwd, bwd, formula,
        f"s·b·V × ({a}+{up}+4) B: logits{', fp32 upcast' if up else ''}, log-softmax; +{a} B for their gradient in backward{head}",
    )


def _sft_fused_head(s: Setup, body: int, per_layer: int, formula: str, layout: dict) -> ActivationTerms:
    fwd, _, bwd, f = fused_head_bytes(s, s.batch, layout)
    return ActivationTerms(body, per_layer, fwd, bwd, formula, f"SFTTrainer {f}")


def sft_layout(s: Setup) -> dict | None:
    """What TRL's SFTTrainer keeps of the logits at s.trl_version (data/preference.json "sft_layouts"); None for
    transformers' Trainer (or a loop of one's own): the model's own loss, its outputs dropped after it."""
    if not s.trl_sft or s.objective != "sft":
        return None
    for entry in preference()["sft_layouts"]:
        if in_range(s.trl_version, entry.get("versions")):
            return entry
    raise AssertionError("preference.json's sft_layouts cover every version")


def sft_metrics_bytes(s: Setup, layout: dict, V: int, a: int) -> tuple[int, str]:
    """(bytes, words) alive while SFTTrainer (0.15-1.14) computes its token accuracy and entropy, after the model's
    own loss: the saved fp32 log-softmax, the model's logits as compute_loss holds them (fp32 under accelerate's mixed
    precision: ConvertOutputsToFp32), and the metric's own copies (entropy's 128-row chunks, a contiguous shifted
    copy)."""
    rows, sb = s.batch, s.seq * s.batch
    lp = 4 if s.precision in ("amp-bf16", "amp-fp16") else a
    shifted = rows * (s.seq - 1) * V * lp
    base = (4 + lp) * sb * V  # the log-softmax the loss saved, outputs.logits
    parts = [f"s·b·V × (4+{lp}) B log-softmax and outputs.logits"]
    extra = 0
    if layout.get("entropy") == "chunks":
        chunk = 3 * layout["entropy_chunk"] * V * lp  # log_softmax, exp and their product of one chunk
        copy = shifted if layout.get("entropy_input") == "shifted" and rows > 1 else 0
        extra = copy + chunk
        parts.append(f"entropy over {layout['entropy_chunk']}-row chunks" + (" of a reshaped copy" if copy else ""))
    elif layout.get("entropy") == "kernel":
        extra = 2 * rows * (s.seq - 1) * 4
        parts.append("entropy by TRL's Triton kernel (per-token fp32 outputs)")
    if layout.get("shift_copy"):
        extra = max(extra, shifted)
        parts.append(f"a contiguous shifted copy ({shifted:,} B)")
    return base + extra, ", ".join(parts)


def fused_head_bytes(s: Setup, rows: int, layout: dict) -> tuple[int, int, int, str]:
    """TRL's fused LM head (trl/kernels/chunked_logprob.py ChunkedLogProbFunction, as CUDA runs it): (forward bytes,
    bytes saved for backward, backward bytes at its start, words) beside the decoder's activations, for N =
    rows·(s-1) scored tokens (every label trained: the worst case).

    Forward: the valid positions' hidden states copied out (hidden_states[mask], saved), the int64 targets, ten fp32
    per-token statistics, one mm_buf of min(N, token_chunk) × vocab_chunk in the compute dtype (vocab_chunk columns
    whatever V), and the hidden chunk and weight chunk cast to the compute dtype where they are not in it. Backward:
    the fp32 hidden-state gradient, lm_head's fp32 gradient when it trains, the mm_buf and the casts again, and on
    return both gradients converted to their inputs' dtypes (traced: memlint.measure.trainer_step)."""
    m = s.model
    c = DTYPE_BYTES[s.compute_dtype]
    x = residual_bytes(s)
    wb = 4 if s.upcasts_kbit else DTYPE_BYTES[s.dtype]
    N = rows * (s.seq - 1)
    h, V = m.hidden, m.vocab
    tok = min(N, layout["token_chunk"])
    buf = tok * layout["vocab_chunk"] * c
    casts = (tok * h * c if x != c else 0) + (min(V, layout["vocab_chunk"]) * h * c if wb != c else 0)
    hidden = N * h * x
    saved = hidden + N * 8 + 2 * N * 4
    fwd = hidden + N * 8 + 10 * N * 4 + buf + casts
    trains = s.method == "full" or trains_lm_head_copy(s)
    grad_w = V * h * 4 if trains else 0
    conv = (N * h * x if x != 4 else 0) + (V * h * wb if trains and wb != 4 else 0)
    bwd = saved + N * h * 4 + grad_w + buf + casts + conv
    R = f"{rows // s.batch}·b" if rows != s.batch else "b"
    return fwd, saved, bwd, (
        f"fused LM head (TRL's chunked log-probs, no full logits): {R}·(s-1) valid hidden states copied × {x} B "
        f"(saved) + one {tok:,} × {layout['vocab_chunk']:,} tile × {c} B + fp32 per-token statistics"
        + (" + the hidden / weight chunks cast to the compute dtype" if casts else "")
        + f"; backward: + the fp32 hidden-state gradient{' and lm_head' + chr(39) + 's fp32 gradient' if grad_w else ''}"
        + (", converted to the inputs' dtypes on return" if conv else ""))


@data.derived
def _op_sac_policies() -> tuple[dict, ...]:
    return tuple(data.load("checkpointing.json")["policies"]["op-sac"]["versions"])


def op_sac_policy() -> dict:
    """The op-level SAC rule (data/checkpointing.json) for the installed torchtitan; not installed, the rule of
    v0.2.2, the last release configured by the job TOML files memlint reads (selective_ac_option = "op")."""
    version = installed_version("torchtitan")
    if version is None:
        return _op_sac_policies()[0]
    for entry in _op_sac_policies():
        if in_range(version, entry["versions"]):
            return entry
    return _op_sac_policies()[-1]


def op_sac_kept_per_token(s: Setup) -> tuple[int, str]:
    """Bytes per token and decoder layer that torchtitan's op-level SAC policy keeps, and which tensors.

    The policy sees the aten ops of one layer's forward: a bias-free nn.Linear (and each LoRA A and B
    matmul peft adds after its base layer) is one aten.mm, counted per layer from 1, and only the odd-
    numbered mm outputs (s·b·out in the compute dtype) are kept; a biased linear is an addmm, kept or not
    by the version's save list and never counted; the attention kernel keeps its output (heads·head_dim)
    and fp32 logsumexp (heads) per token. The mms are taken in the order the layer's linears are
    registered, which is their call order in Llama/Mistral/Qwen-style decoder layers."""
    pol = op_sac_policy()
    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    adapted = {l.name for l in lora_modules(m, s.lora_targets)} if s.method != "full" else set()
    count = kept = 0
    names: list[str] = []

    def mm(out: int, name: str, per: float) -> None:
        nonlocal count, kept
        count += 1
        if pol["mm_save"] != "odd" or count % 2 == 1:
            kept += int(out * a * per)
            names.append(name)

    for l in m.layer_linears():
        per = l.count / m.layers  # 1 for a linear every layer has
        if l.bias:
            if pol["biased_linear_saved"]:
                kept += int(l.out_features * a * per)
                names.append(l.name.rsplit(".", 1)[-1])
        else:
            mm(l.out_features, l.name.rsplit(".", 1)[-1], per)
        if l.name in adapted:
            mm(s.lora_r, f"{l.name.rsplit('.', 1)[-1]}.lora_A", per)
            mm(l.out_features, f"{l.name.rsplit('.', 1)[-1]}.lora_B", per)
    if attention()[s.attn].kernel == "eager":  # torch.matmul on 4-D q·kᵀ and p·v: aten.bmm, saved only where listed
        att = a * m.heads * (s.seq + m.head_dim) if "aten.bmm" in pol["saved_ops"] else 0
    else:
        att = a * m.heads * m.head_dim + 4 * m.heads
    return kept + att, f"mm outputs of {', '.join(names)}; the attention output and its fp32 logsumexp"


def _compiled_ce(body: int, per_layer: int, formula: str, copies_head: int, logits: int, lse: int, head: str) -> ActivationTerms:
    """The cross-entropy under torch.compile: inductor fuses the upcast and the log-softmax, so the half logits and
    their fp32 logsumexp are what it keeps; backward adds the logits' half gradient (tests/test_compiled_loss.py)."""
    return ActivationTerms(body, per_layer, copies_head + logits + lse, copies_head + 2 * logits + lse, formula,
                           f"s·b·V half logits ({logits:,} B) + s·b × 4 B logsumexp (the cross-entropy compiled: no fp32 "
                           f"upcast or log-softmax kept); + their half gradient in backward{head}")


def _chunked_ce(s: Setup, body: int, per_layer: int, formula: str, copies_head: int) -> ActivationTerms:
    """torchtune's CEWithChunkedOutputLoss (modules/loss/ce_chunked_output_loss.py, 0.6): the model returns
    [output(chunk) for chunk in h.chunk(k, dim=1)], k chunks of logits in the compute dtype, all alive until the
    recipe's `del logits` after the loss; the loss runs F.cross_entropy(chunk.float()) chunk by chunk, so one fp32
    upcast exists at a time, but each chunk's log-softmax output (fp32, eager; what log_softmax saves) stays for
    backward. Backward, the half chunks gone: the saved log-softmax outputs and one chunk's fp32 gradients (nll's and
    log_softmax's) and its half cast."""
    a = DTYPE_BYTES[s.compute_dtype]
    n = s.seq * s.batch * s.model.vocab
    k = s.chunked_loss
    up = 4 if a != 4 else 0
    fwd = copies_head + a * n + 4 * n + (up * n) // k
    bwd = copies_head + 4 * n + (8 * n) // k  # nll's and log_softmax's fp32 chunk gradients (the half cast comes after)
    if s.compiled_loss:
        # torchtune's compile_loss compiles compute_cross_entropy (each chunk's upcast + cross-entropy): a chunk's graph
        # saves that chunk and its logsumexp, so the chunks stay for backward, which adds one chunk's half gradient
        tokens = s.seq * s.batch
        fwd, bwd = copies_head + a * n + 4 * tokens, copies_head + a * n + (a * n) // k + 4 * tokens
        return ActivationTerms(
            body, per_layer, fwd, bwd, formula,
            f"chunked cross-entropy (torchtune, {k} chunks, compiled): s·b·V × {a} B logit chunks kept for backward + "
            f"s·b × 4 B logsumexp; backward: + one chunk's {a}-byte gradient")
    return ActivationTerms(
        body, per_layer, fwd, bwd, formula,
        f"chunked cross-entropy (torchtune, {k} chunks): s·b·V × {a} B logit chunks + s·b·V × 4 B saved log-softmax "
        f"+ one chunk's fp32 upcast; backward: the saved log-softmax + one chunk's gradients",
    )


def offloaded(body: int, per_layer: int, layer_input: int, once: int, recompute: bool, formula: str) -> tuple[int, str]:
    """Saved activations under activation offloading (TRL's `activation_offloading`, torchtune's
    OffloadActivations): each saved tensor is copied to CPU as forward makes it and brought back,
    one layer ahead on a side stream, as backward needs it, so two layers' worth (their checkpointed
    inputs under recompute) stay on the GPU. Not validated by memlint's trace."""
    kept = 2 * (layer_input if recompute else per_layer) + once
    if kept >= body:
        return body, formula
    return kept, formula + "; offloaded to CPU but for two layers in flight (activation offloading)"


def liger_chunk_tokens(s: Setup) -> int:
    """Tokens per chunk of Liger's fused linear cross-entropy: it bounds one chunk's logits
    by the hidden states' size, inc = ⌈V/H⌉, chunk = min(next_pow2(⌈s·b/inc⌉), s·b)
    (liger_kernel/ops/fused_linear_cross_entropy.py)."""
    sb = s.seq * s.batch
    inc = -(-s.model.vocab // s.model.hidden)
    return min(1 << max(0, (-(-sb // inc) - 1).bit_length()), sb)


def _fused(s: Setup, body: int, per_layer: int, formula: str, copies_head: int) -> ActivationTerms:
    """A fused linear cross-entropy computes the loss and its gradients in forward, one
    chunk of tokens at a time: one chunk's logits (their gradient is written in place), the
    gradient of the final hidden states and the fp32 per-token loss, and, when lm_head
    trains, its gradient, allocated in forward and handed to backward. Modelled on Liger's
    kernel; Cut Cross-Entropy's blockwise kernel holds less, so this bounds it too."""
    m = s.model
    sb = s.seq * s.batch
    a = DTYPE_BYTES[s.compute_dtype]
    chunk = liger_chunk_tokens(s)
    grad_in = sb * m.hidden * a
    grad_w = m.vocab * m.hidden * DTYPE_BYTES[s.dtype] if s.method == "full" else 0
    fwd = copies_head + chunk * m.vocab * a + grad_in + 4 * sb + grad_w
    bwd = copies_head + grad_in + grad_w
    head = f" + autocast's {a}-byte copy of the fp32 lm_head ({copies_head:,} B)" if copies_head else ""
    lm = f" + lm_head's gradient V·h × {DTYPE_BYTES[s.dtype]} B" if grad_w else ""
    return ActivationTerms(
        body, per_layer, fwd, bwd, formula,
        f"fused linear cross-entropy: one chunk of {chunk:,} tokens × V × {a} B (chunk = min(next_pow2(⌈s·b/⌈V/h⌉⌉), s·b)) "
        f"+ s·b·h × {a} B hidden-state gradient + s·b × 4 B loss{lm}{head}",
    )


def activations(s: Setup, accounting: str) -> ActivationTerms:
    if s.seq2seq and s.model.arch.get("post_norm"):  # BART's post-LN layers
        from memlint.estimate.bart import bart_terms

        return bart_terms(s)
    if s.seq2seq:
        from memlint.estimate.seq2seq import seq2seq_terms

        return seq2seq_terms(s)
    if s.encoder:
        return textbook_encoder(s) if accounting == "textbook" else encoder_terms(s)
    if s.objective != "sft":
        out = preference_terms(s, accounting)
    else:
        out = textbook(s) if accounting == "textbook" else real(s)
    if s.use_dora and s.method != "full" and accounting == "real":
        out = replace(out, transient=dora_transient(s),
                      formula=out.formula + " (DoRA: + base and adapter outputs per adapted layer)")
    if s.quant == "awq" and accounting == "real":
        out = replace(out, transient=max(out.transient, awq_transient(s)))
    if s.quant == "hqq" and accounting == "real":
        out = replace(out, transient=max(out.transient, hqq_transient(s)))
    if s.float8 != "none" and accounting == "real":
        f, b = float8_transients(s)
        out = replace(out, transient=max(out.transient, f), backward_transient=b)
    return out


def preference_terms(s: Setup, accounting: str) -> ActivationTerms:
    """TRL's preference and reward steps (data/preference.json): the decoder body saves
    activations for rows x b sequences (chosen and rejected stacked), and the loss side is
    the log-prob computation plus, for DPO/KTO, the reference forward under no_grad while the
    policy's graph is alive."""
    obj = preference()["objectives"][s.objective]
    rows = obj["rows"] * s.batch
    plain = s.with_(objective="sft", ref_model="none", batch=rows, trl_sft=False)
    base = textbook(plain) if accounting == "textbook" else real(plain)
    m = s.model
    R = f"{obj['rows']}·b" if obj["rows"] > 1 else "b"
    formula = base.formula + f" (over {R} rows: {obj['trainer']})"
    if obj["head"] == "scalar":
        # num_labels=1: the score head's output is s x 1 per row; no vocabulary logits
        out = rows * s.seq * DTYPE_BYTES[s.compute_dtype]
        return ActivationTerms(base.body, base.per_layer, out, out, formula,
                               f"scalar reward head: {R}·s × 1 × {DTYPE_BYTES[s.compute_dtype]} B (no vocabulary logits)")
    if accounting == "textbook":
        V4 = rows * s.seq * m.vocab * 4
        fwd = V4 * (2 if obj["reference"] else 1)
        return ActivationTerms(base.body, base.per_layer, fwd, 0, formula,
                               f"{R}·s·V × 4 B (fp32 logits)" + (" + the reference's fp32 logits" if obj["reference"] else ""))
    layout = logps_layout(s)
    if layout["layout"] == "chunked":
        return _chunked_logps(s, base, rows, R, formula, layout)
    return _materialised_logps(s, base, rows, R, formula, layout, obj)


def _materialised_logps(s: Setup, base: ActivationTerms, rows: int, R: str, formula: str, layout: dict,
                        obj: dict) -> ActivationTerms:
    """The logits are materialised. Under HF Trainer's mixed precision accelerate converts the
    model's half outputs to fp32 (data/preference.json "accelerate"), so TRL's selective_log_softmax
    takes its fp32 path, gather - logsumexp row by row, and logsumexp keeps the logits for backward;
    half logits (pure bf16) take log_softmax per row, which saves each row's output."""
    m = s.model
    V = m.vocab
    a = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16") or _fp32_logits(layout)  # OpenRLHF >= 0.5.6: .to(float32)
    lp = 4 if amp else a                       # the logits TRL sees
    n = rows * s.seq * V
    row = (s.seq - 1) * V                      # one row's shifted logits, elements
    L = n * lp
    conv = n * a + L if lp != a else L         # lm_head's output and accelerate's fp32 copy, for a moment
    C = rows * row * lp if layout.get("shift_copy") else 0  # TRL 0.29's .contiguous() shifted logits
    half = lp != 4
    saved = rows * row * lp if half else (C or L)  # half: log_softmax outputs; fp32: logsumexp's input
    temps = 2 * row * lp if half else 0        # the previous and the current row's log_softmax
    alive = L + C + (saved if half else 0)     # the policy's logits, their copy and what backward keeps
    policy = max(conv, alive)
    who = "the trainer's" if _fp32_logits(layout) else "accelerate's"
    parts = [f"{R}·s·V × {lp} B logits" + (f" ({who} fp32 copy of the {a}-byte lm_head output)" if lp != a else ""),
             f"log_softmax per row saved, {R}·(s-1)·V × {lp} B" if half else "gather - logsumexp (keeps the logits)"]
    if C:
        parts.append(f"+ the contiguous shifted copy {R}·(s-1)·V × {lp} B (trl 0.29)")
    ce = 0
    if obj["nll_chosen"]:
        # ORPO / CPO: cross-entropy on a contiguous copy of the chosen half, saving its log-softmax
        ce = s.batch * row * lp
        policy = max(policy, L + C + 2 * ce, alive + ce)
        parts.append(f"+ cross-entropy on a contiguous chosen half, b·(s-1)·V × {lp} B saved")
    if layout.get("metrics") == "masked_mean":
        policy = max(policy, alive + ce + s.batch * s.seq * V * lp)
        parts.append(f"+ mean_chosen_logits' masked copy b·s·V × {lp} B (transient)")
    held = alive + ce if (layout["policy_logits_during_ref"] or obj["nll_chosen"]) else saved
    fwd = policy
    held_ref = 0
    if s.reference in ("copy", "adapter-disabled"):
        fwd = max(fwd, held + max(conv, L + C + temps))
        held_ref = L + C if C else 0           # 0.29 keeps ref_outputs and ref_shift_logits to the end
        parts.append(f"; reference forward under no_grad: its own {R}·s·V logits"
                     + (", with the policy's logits still alive" if held > saved else ""))
    if layout.get("metrics") == "entropy":
        chunk = min(128, rows * (s.seq - 1)) * V * lp
        fwd = max(fwd, held + held_ref + max(3 * chunk, s.batch * row * lp))
        parts.append("; metrics: entropy 128 tokens at a time, masked chosen/rejected copies")
    if half:
        bwd = max(saved + 2 * row * lp, 3 * rows * row * lp) + ce
    else:
        bwd = 4 * L + ce
    _, copies_head = autocast_weight_copies(s)
    fwd, bwd = fwd + copies_head, bwd + copies_head  # autocast's half copy of an fp32 lm_head, saved
    if copies_head:
        parts.append(f"+ autocast's {a}-byte copy of the fp32 lm_head ({copies_head:,} B)")
    return ActivationTerms(base.body, base.per_layer, fwd, bwd, formula,
                           " ".join(parts) + "; backward: the logits' gradients (4 × the fp32 logits, or"
                           " max(saved + two rows, 3 × the half logits))")


def _fp32_logits(layout: dict) -> bool:
    """Whether a framework's own step casts the policy's logits to fp32 (data/preference.json framework_layouts:
    OpenRLHF's Actor.forward from v0.5.6), at the version the checkout pins (the newest when none)."""
    since = layout.get("fp32_logits_since")
    if not since:
        return False
    from memlint.library.versions import in_range, installed_version

    version = installed_version("openrlhf")
    return version is None or in_range(version, f">={since}")


def _chunked_logps(s: Setup, base: ActivationTerms, rows: int, R: str, formula: str, layout: dict) -> ActivationTerms:
    """TRL's fused LM head (ChunkedLogProbFunction, `fused_head_bytes`) over the policy's rows, then the reference's
    forward under no_grad with the same transients beside what the policy saved."""
    fwd, saved, bwd, f = fused_head_bytes(s, rows, layout)
    if s.reference in ("copy", "adapter-disabled"):
        fwd = max(fwd, saved + fwd + rows * s.seq * s.model.hidden * residual_bytes(s))
        f += "; the reference's forward under no_grad: its final hidden states and the same head transients"
    return ActivationTerms(base.body, base.per_layer, fwd, bwd, formula, f)


def logps_layout(s: Setup) -> dict:
    """How TRL computes the policy's log-probs for this objective and TRL version
    (data/preference.json). ORPO, CPO and SimPO (`materialised`) always materialise the logits."""
    from memlint.library.versions import in_range

    if s.logps_framework in preference().get("framework_layouts", {}):
        return preference()["framework_layouts"][s.logps_framework]
    for entry in preference()["logps_layouts"]:
        if in_range(s.trl_version, entry.get("versions")):
            if preference()["objectives"][s.objective].get("materialised") and entry["layout"] != "logits":
                return {"layout": "logits", "policy_logits_during_ref": True,
                        "ref": preference()["objectives"][s.objective]["ref"]}
            return entry
    raise AssertionError("preference.json covers every version")


# --------------------------------------------------------------------------- encoders


def _encoder_layer_bytes(s: Setup) -> tuple[int, int, str]:
    """(bytes per token, bytes per token and head per key position) that one post-LN encoder layer (transformers'
    BertLayer / RobertaLayer / XLMRobertaLayer, 5.x) saves for backward, read off the layer's code:

    attention: query/key/value read the layer input (one shared tensor; under autocast each linear casts its own
    half copy), their outputs q, k, v; SDPA (CUDA's flash / memory-efficient kernel, dropout inside) keeps its output
    (the output dense's input, read in place) and an fp32 logsumexp per head; eager attention keeps q, k, v, the
    output copy the dense reads, and per head and key position the softmax output (fp32 under CUDA's autocast), the
    dropout's bool mask and the dropped-out probabilities (the matmul's half cast under autocast);
    then dropout (bool mask), the residual add and LayerNorm (its input and mean/rstd); the MLP: the intermediate
    dense's input (the LayerNorm output, or its half cast), GELU's input and output (the output dense's input),
    dropout's mask, the second LayerNorm's input and statistics."""
    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    x = residual_bytes(s)
    h, i = m.hidden, m.intermediate
    amp = s.precision in ("amp-bf16", "amp-fp16")
    attn_in = 3 * a * h if amp else x * h
    mlp_in = a * h if amp else x * h
    ln = x * h + 8
    attn_drop = h if _fam(s, "attn_out_dropout") else 0  # DistilBERT adds out_lin's output without a dropout
    per_tok = attn_in + 3 * a * h + a * h + attn_drop + ln + mlp_in + 2 * a * i + h + ln
    per_key = 0
    if _fam(s, "disentangled"):
        # DeBERTa's DisentangledSelfAttention (eager only): q·(k/scale) keeps the scaled key copy too, and
        # masked_fill its inverted bool mask ([b, 1, s, s]: 1 B per token and key, shared by the heads)
        sm = 4 if amp else a
        per_tok += a * h
        per_key = m.heads * (sm + 1 + a) + 1
        parts = (f"disentangled attention + {m.heads}·s × ({sm}+1+{a}) B probabilities, mask and dropped copy, "
                 "the scaled key and the inverted mask")
    elif attention()[s.attn].kernel == "eager":
        sm = 4 if amp else a
        per_key = m.heads * (sm + 1 + a)
        parts = f"eager attention + {m.heads}·s × ({sm}+1+{a}) B probabilities, mask and dropped copy"
    else:
        per_tok += 4 * m.heads
        parts = "SDPA (out + fp32 logsumexp)"
    return per_tok, per_key, parts


def _encoder_once_bytes(s: Setup) -> tuple[int, int]:
    """(saved, forward-only) bytes per token once per model: the embedding sum's LayerNorm (input + statistics)
    and dropout mask, RoBERTa's position ids (made from input_ids: 8 B), and the encoder's output and the
    embedding output. Without autocast the head's first linear keeps the encoder output (BERT's pooler a view of
    it) and the first layer its input; under autocast both keep half casts only, so the two full-width tensors
    live through forward alone (the embedding output as the base model's local `embedding_output`)."""
    x = residual_bytes(s)
    h = s.model.hidden
    pos_ids = 8 if s.model.arch.get("model_type") in ("roberta", "xlm-roberta") else 0
    saved = x * h + 8 + h + pos_ids
    if s.precision in ("amp-bf16", "amp-fp16"):
        return saved, 2 * x * h
    return saved + x * h, 0


def rel_span(s: Setup) -> int:
    """DeBERTa's relative-position span: 2 x att_span rows of rel_embeddings, att_span = position_buckets, else
    max_relative_positions, else max_position_embeddings (DisentangledSelfAttention.pos_ebd_size)."""
    c = s.model.config
    span = c.get("position_buckets") or -1
    if span <= 0:
        span = c.get("max_relative_positions", -1)
        if span is None or span < 1:
            span = c.get("max_position_embeddings", 512)
    return 2 * span


def _rel_kinds(s: Setup) -> int:
    """How many of c2p / p2c the config's pos_att_type names (DeBERTa-v3: both)."""
    kinds = s.model.config.get("pos_att_type") or []
    if isinstance(kinds, str):
        kinds = kinds.lower().split("|")
    return sum(k in kinds for k in ("c2p", "p2c"))


def _disentangled_layer_bytes(s: Setup) -> tuple[int, str]:
    """(bytes, formula) a DeBERTa layer saves beyond its per-token terms, from transformers' 5.x
    disentangled_attention_bias with share_att_key: per c2p / p2c term the content-to-position scores before the
    gather ([b·heads, s, 2k], the gather keeps its input), the gather's int64 index ([1, s, s]) and the position
    projection repeated over the batch ([b·heads, 2k, d], kept by the bmm); once per layer the dropped-out
    relative embeddings (2k x h: their fp32 output read by query_proj/key_proj, under autocast each linear's half
    cast) and its dropout mask."""
    m = s.model
    if not _fam(s, "disentangled"):
        return 0, ""
    a = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    k2 = rel_span(s)
    n = _rel_kinds(s)
    scores = n * s.batch * m.heads * s.seq * k2 * a
    index = n * 8 * s.seq * s.seq
    pos = n * s.batch * k2 * m.hidden * a
    rel = k2 * m.hidden * ((2 * a if amp else 4) + 1) if n else 0
    return (scores + index + pos + rel,
            f"{n} disentangled term(s): b·heads·s·{k2}×{a} B scores + 8·s² index + b·{k2}·h×{a} B positions; "
            f"{k2}·h relative embeddings")


def _encoder_lora_bytes(s: Setup, rel: int) -> tuple[int, int, int, str]:
    """LoRA on a frozen encoder (peft's Linear wrapping query/value or the script's targets): (per-token bytes
    to add to the full fine-tune's layer, the DeBERTa per-layer term, the once-per-model bytes, formula).

    Frozen linears keep no input (their weight needs no gradient): the query/key/value input and the
    intermediate dense's input are not saved, nor GELU's output (the frozen output dense's input); instead each
    adapter keeps its input (the layer input, shared when lora_dropout is 0; its dropout's output and mask per
    adapter otherwise; under autocast each lora_A's half cast) and lora_B its r-wide input. The frozen embeddings
    save nothing; the encoder output is kept only by a trained head linear that reads every token's storage
    (DistilBERT's pre_classifier copy, its input a view of it). DeBERTa: the dropped-out relative embeddings
    need no gradient (no mask); an adapted query_proj's lora_A keeps them (2k x h) instead."""
    from memlint.estimate.model_state import encoder_head_copies, lora_modules

    m = s.model
    a = DTYPE_BYTES[s.compute_dtype]
    x = residual_bytes(s)
    h, i = m.hidden, m.intermediate
    amp = s.precision in ("amp-bf16", "amp-fp16")
    adapted = [l for l in lora_modules(m, s.lora_targets) if l.role != "head"]
    per_layer = [l for l in adapted if l.count == m.layers] or adapted
    reads_input = [l for l in per_layer if l.role == "attn_in"]
    drop = s.lora_dropout > 0
    removed = (3 * a * h if amp else x * h) + (a * h if amp else x * h) + a * i
    if amp:
        lora_in = sum(a * l.in_features + (l.in_features if drop else 0) for l in per_layer)
    else:
        shared = x * h if reads_input and not drop else 0
        lora_in = shared + sum((x * l.in_features + l.in_features) if drop else
                               (0 if l.role == "attn_in" else x * l.in_features) for l in per_layer)
    lora_b = sum(s.lora_r * (a if amp else 4) for l in per_layer)
    once = 0
    if not amp and any(l.name == "pre_classifier" for l in m.linears if l.role == "head") and encoder_head_copies(s):
        once = x * h * s.seq * s.batch
    if rel:
        k2 = rel_span(s)
        q_adapted = any(l.name.endswith("query_proj") for l in per_layer)
        rel -= k2 * h * ((2 * a if amp else 4) + 1)
        rel += (k2 * h * (a if amp else x) + k2 * s.lora_r * (a if amp else 4)) if q_adapted else 0
        # the first layer: its key needs no gradient (frozen key_proj on the frozen embeddings' output), so no
        # matmul keeps q for it (q·kᵀ and c2p keep only the key side), nor the position queries p2c multiplies
        # with it; spread over the layers as a per-layer term
        first = s.batch * s.seq * a * h + (s.batch * k2 * h * a if _rel_kinds(s) == 2 else 0)
        rel -= first // m.layers
    f = (f"LoRA on {len(per_layer)} linears per layer: frozen linears keep no input (−{removed:,} B/token), "
         f"the adapters' inputs ({lora_in:,} B/token) and r-wide lora_B inputs ({lora_b:,} B/token)")
    return lora_in + lora_b - removed, rel, once, f


def _fam(s: Setup, fact: str):
    """A family fact of the encoder (catalog/families.json): attn_out_dropout, token_type_ids, disentangled."""
    from memlint.catalog.families import family

    return family(s.model.arch.get("model_type", ""))[fact]


def _encoder_once_per_row(s: Setup) -> int:
    """Bytes saved once per sequence position, whatever the batch: the token-type ids the embeddings gather from
    their all-zero buffer ([1, s] int64), which token_type_embeddings keeps (none in DistilBERT, nor in DeBERTa-v3
    with type_vocab_size 0)."""
    return 8 * s.seq if _fam(s, "token_type_ids") else 0


def _encoder_head_bytes(s: Setup) -> tuple[int, int, str]:
    """(forward, backward) bytes after the encoder's last layer: the head's saved tensors, its logits and the
    cross-entropy (CUDA's autocast runs it in fp32: a copy and the log-softmax output), and in backward their
    gradients."""
    m = s.model
    sb = s.seq * s.batch
    a = DTYPE_BYTES[s.compute_dtype]
    x = residual_bytes(s)
    h = m.hidden
    amp = s.precision in ("amp-bf16", "amp-fp16")
    n, f = _head_outputs(s)
    up = 4 if a != 4 else 0
    loss = (a + up + 4) * n
    if amp and s.dtype == "fp32":  # autocast's half copies of the head's own linear weights
        loss += sum(l.in_features * l.out_features for l in m.linears if l.role == "head") * a
    if s.head == "sequence-classification":
        # the first token only: the head's few b x h tensors (pooler/dense input cast, tanh, dropout)
        fwd = s.batch * h * (3 * a + 2) + loss
        return fwd, fwd + (a + 4) * n, f"{f} logits + the first token's b·h head tensors"
    if s.head == "token-classification":
        # dropout over every token (bool mask + its output; the classifier's half cast under autocast)
        fwd = sb * h * (1 + x + (a if amp else 0)) + loss
        return fwd, fwd + (a + 4) * n, f"dropout s·b·h × (1+{x}{'+' + str(a) if amp else ''}) B + {f} logits × ({a}+{up}+4) B"
    # masked LM: transform dense (input cast), GELU (input), LayerNorm (fp32 input under CUDA's autocast),
    # decoder input (cast), the s·b·V logits, their fp32 copy and log-softmax
    ln_in = 4 if amp else a
    body = sb * h * ((a if amp else 0) + a + ln_in + (a if amp else x)) + 8 * sb
    copies = m.vocab * h * a if amp and s.dtype == "fp32" else 0  # autocast's half copy of the tied decoder
    fwd = body + copies + loss
    bwd = body + copies + (a + up + 4 + a) * n
    return fwd, bwd, (f"MLM head s·b·h tensors + {f} × ({a}+{up}+4) B logits, fp32 copy, log-softmax"
                      + (f" + autocast's {a}-byte copy of the tied decoder" if copies else ""))


def _encoder_layer_backward(s: Setup) -> int:
    """The largest working set of the last layer's backward beyond what it saved: the output dense's backward
    makes the gradient of its s·b·i input (compute dtype) and of its weight (i·h, the parameter dtype) while the
    incoming s·b·h gradient is alive and the second LayerNorm's input and the dropout mask are already freed;
    with eager attention the gradients of the probabilities (s² per head, two of them)."""
    from memlint.estimate.model_state import trainable_dtype

    m = s.model
    sb = s.seq * s.batch
    a = DTYPE_BYTES[s.compute_dtype]
    x = residual_bytes(s)
    amp = s.precision in ("amp-bf16", "amp-fp16")
    # under autocast the half gradient of the dense's output is a copy beside the fp32 residual gradient, and the
    # weight's gradient exists in half before autocast's cast accumulates it into the fp32 .grad
    mlp = (sb * (a * m.intermediate + (m.hidden if amp else -m.hidden))
           + m.intermediate * m.hidden * (DTYPE_BYTES[trainable_dtype(s, "real")] + (a if amp else 0)))
    if s.method != "full":
        # LoRA: the frozen output dense makes no weight gradient; its s·b·i input gradient and GELU's input
        # gradient exist together (fitted on the trace: 2·c·s·b·i less one s·b·h gradient)
        mlp = sb * (2 * a * m.intermediate - a * m.hidden)
    attn = 0
    if attention()[s.attn].kernel == "eager":
        # by the attention's backward the layer's MLP tensors (GELU's input and output, both LayerNorm inputs,
        # the masks) are freed; two s² gradients per head are alive at a time
        amp = s.precision in ("amp-bf16", "amp-fp16")
        sm = 4 if amp else a
        # (under autocast the half and fp32 gradients of the cast overlap: ~1 B more per element, measured)
        attn = sb * (m.heads * s.seq * (sm + a + (1 if amp else 0)) - 2 * a * m.intermediate - 3 * x * m.hidden
                     - 2 * m.hidden)
    return max(mlp, attn)


def encoder_terms(s: Setup) -> ActivationTerms:
    """An encoder's step (transformers' BERT / RoBERTa / XLM-RoBERTa with its task head)."""
    m = s.model
    sb = s.seq * s.batch
    per_tok, per_key, parts = _encoder_layer_bytes(s)
    rel, rel_f = _disentangled_layer_bytes(s)
    once_tok, fwd_only_tok = _encoder_once_bytes(s)
    once = once_tok * sb + _encoder_once_per_row(s)
    if s.method != "full":
        lora_tok, rel, once, lora_f = _encoder_lora_bytes(s, rel)
        per_tok += lora_tok
        parts += f"; {lora_f}"
    per_layer = (per_tok + per_key * s.seq) * sb + rel
    if rel_f:
        parts += f"; {rel_f}"
    fwd_only = fwd_only_tok * sb
    x = residual_bytes(s)
    copies = 0
    if s.precision in ("amp-bf16", "amp-fp16") and s.dtype == "fp32":
        copies = sum(l.in_features * l.out_features * l.count for l in m.layer_linears()) * DTYPE_BYTES[s.compute_dtype]
        if s.method != "full":
            # a frozen linear keeps its half weight cast for the input gradient where its input needs one: not
            # the first layer's base query/key/value (the frozen embeddings' output needs no gradient)
            copies -= sum(l.in_features * l.out_features for l in m.layer_linears()
                          if l.role == "attn_in") * DTYPE_BYTES[s.compute_dtype]
    if s.recompute:
        body = x * m.hidden * sb * m.layers + once + copies
        formula = (f"{x}·s·b·h·L checkpointed layer inputs; one layer ({per_tok:,} B/token"
                   f"{f' + {per_key:,} B/token/key' if per_key else ''}) comes back in backward")
    else:
        body = per_layer * m.layers + once + copies
        formula = (f"{per_tok:,} B/token/layer{f' + {per_key:,}·s B/token/layer' if per_key else ''} saved "
                   f"(post-LN encoder layer, {parts}, dropout masks) × s·b·L + embeddings")
    if copies:
        formula += " + autocast's half copies of the fp32 linear weights"
    fwd, bwd, head_f = _encoder_head_bytes(s)
    if s.recompute:
        fwd_only //= 2  # the embedding output is the first checkpointed input (in the body)
    fwd += fwd_only
    if _fam(s, "disentangled"):
        fwd += 8 * s.batch * s.seq * s.seq  # DeBERTa's int64 [b, 1, s, s] attention mask, held through forward
    layer_bwd = _encoder_layer_backward(s)
    a = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    if s.recompute:
        # a checkpointed layer's forward keeps nothing, but its MLP's s·b·i input and GELU output exist together,
        # beside the first LayerNorm's output (the residual) and its half cast; the embedding output is a
        # checkpointed input already, the encoder output comes after; in backward one recomputed layer
        # (per_layer) is alive with its own backward's working set
        inside = (2 * a * m.intermediate + ((x + a) * m.hidden if amp else 0)) * sb
        if attention()[s.attn].kernel == "eager":
            # the unsaved s² tensors of a checkpointed eager attention: the softmax output, the dropout's output
            # and mask exist together (approximate: beside q, k, v)
            sm = 4 if amp else a
            inside = max(inside, sb * (m.heads * s.seq * (2 * sm + 1) + 3 * a * m.hidden * (2 if amp else 1)))
        # DeBERTa's position scores, indices and repeated projections exist inside a checkpointed layer's forward
        # too (approximate: counted together, beside the probabilities)
        inside += rel
        return ActivationTerms(body, per_layer, fwd, bwd, formula, head_f, transient=layer_bwd,
                               forward_transient=inside)
    # forward: inside each layer the dropped-out MLP output stays alive while LayerNorm makes the layer's output;
    # under autocast the first LayerNorm's fp32 output (the MLP's residual) is not saved but alive, and the
    # layer's fp32 output is new (the next layer keeps only half casts of it), and its fp32 input is the layer's
    # and the encoder loop's local
    inside = (a + 3 * x) * m.hidden * sb if amp else a * m.hidden * sb
    if s.method != "full":
        # LoRA: GELU's s·b·i output is not saved (the output dense is frozen) but alive until that dense is done
        inside = max(inside, a * m.intermediate * sb)
    if amp and attention()[s.attn].kernel == "eager":
        # eager attention returns its fp32 dropped-out probabilities (attn_weights), which the layer holds (`_`)
        # to its end; only their half cast is saved
        inside += 4 * m.heads * s.seq * sb
    return ActivationTerms(body, per_layer, fwd, max(bwd, layer_bwd), formula, head_f,
                           forward_transient=inside + fwd_only // 2)
