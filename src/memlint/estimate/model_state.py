"""Weights, gradients and optimizer state: exact counts times the bytes each framework keeps.

Two accountings share these functions. `textbook` is the seed article's: bf16 weights and
gradients plus an fp32 master copy and fp32 AdamW moments (16 B per trainable parameter).
`real` is what PyTorch, peft and bitsandbytes allocate: states in the parameter's dtype,
adapters upcast to fp32 by peft, bitsandbytes' exact 4-bit / 8-bit layouts.
"""

from __future__ import annotations

import math
import re


from memlint.catalog import Linear, ModelSpec
from memlint.errors import MemlintError
from memlint.estimate.setup import DTYPE_BYTES, PURE, Setup
from memlint.estimate.terms import Tensor  # noqa: F401 (re-exported: model_state.Tensor)

NF4_BLOCK = 64          # bitsandbytes 4-bit blocksize
DQ_BLOCK = 256          # double quantization: 8-bit absmax, one fp32 constant per 256 blocks
INT8_OPT_BLOCK = 256    # bitsandbytes blockwise 8-bit optimizer


# --------------------------------------------------------------------------- LoRA


def _matches(target: str, key: str) -> bool:
    return key == target or key.endswith("." + target)


def lora_modules(model: ModelSpec, targets: tuple[str, ...] | str) -> tuple[Linear, ...]:
    """The linear modules a LoRA target list hits, as peft matches them."""
    layer = model.layer_linears()
    if targets == "all-linear":
        return layer  # peft's all-linear: every Linear/Conv1D except the output layer
    if isinstance(targets, str):  # a regex, full-matched against module names
        rx = re.compile(targets)
        return tuple(l for l in model.linears if rx.fullmatch(f"model.layers.0.{l.name}") or rx.fullmatch(l.name))
    return tuple(l for l in model.linears if any(_matches(t, l.name) for t in targets))


def lora_params(model: ModelSpec, r: int, targets, dora: bool = False) -> int:
    """A and B of every adapted linear; DoRA adds its magnitude vector (out_features) per layer."""
    return sum(((l.in_features + l.out_features) * r + (l.out_features if dora else 0)) * l.count
               for l in lora_modules(model, targets))


def lora_tensors(model: ModelSpec, r: int, targets, dora: bool = False) -> list[Tensor]:
    out = []
    for l in lora_modules(model, targets):
        out += [Tensor(r, l.in_features, l.count), Tensor(l.out_features, r, l.count)]
        if dora:  # peft's lora_magnitude_vector: one trainable value per output feature
            out.append(Tensor(l.out_features, 1, l.count))
    return out


def full_tensors(model: ModelSpec) -> list[Tensor]:
    """Every parameter of a fully fine-tuned model, with its 2-D shape where it has one."""
    out = []
    for l in model.linears:
        out.append(Tensor(l.out_features, l.in_features, l.count))
        if l.bias:
            out.append(Tensor(l.out_features, 1, l.count))
    g = model.groups
    # input embeddings (lm_head listed above when untied); a tensor-parallel rank's model may hold a vocabulary shard
    rows = model.arch.get("embedding_rows", model.vocab)
    out.append(Tensor(rows, model.hidden, embedding=True))
    rest = g["embeddings"] - rows * model.hidden
    if rest and model.arch.get("encoder") and rest % model.hidden == 0:
        # an encoder's position and token-type embeddings: 2-D tables of hidden-wide rows
        pos = model.arch.get("max_position_embeddings") or 0
        if 0 < pos * model.hidden < rest:
            out.append(Tensor(pos, model.hidden, embedding=True))
            rest -= pos * model.hidden
        out.append(Tensor(rest // model.hidden, model.hidden, embedding=True))
        rest = 0
    if rest:
        out.append(Tensor(rest, 1))  # position embeddings etc., counted as one block
    if g["norms"]:
        out.append(Tensor(model.hidden, 1, max(1, g["norms"] // model.hidden)))
    if g["experts"]:
        out.append(Tensor(g["experts"], 1))
    if g["other"]:
        out.append(Tensor(g["other"], 1))
    return out


# --------------------------------------------------------------------------- counts


def setup_lora_tensors(s: Setup) -> list[Tensor]:
    """The adapters' tensors the setup trains: peft's on transformers' modules, or LitGPT's own (estimate/litgpt.py)."""
    if s.model_code == "litgpt":
        from memlint.estimate import litgpt

        return litgpt.lora_tensors(s)
    return lora_tensors(s.model, s.lora_r, s.lora_targets, s.use_dora) + moe_lora_tensors(s)


def setup_lora_params(s: Setup) -> int:
    if s.model_code == "litgpt":
        return sum(t.numel * t.count for t in setup_lora_tensors(s))
    return lora_params(s.model, s.lora_r, s.lora_targets, s.use_dora) + sum(t.numel * t.count for t in moe_lora_tensors(s))


def trainable_params(s: Setup) -> int:
    if s.method == "full":
        if s.model_code == "litgpt":
            from memlint.estimate import litgpt

            return s.model.params + litgpt.untied_head(s)
        return s.model.params - vision_frozen(s)
    return setup_lora_params(s) + sum(t.numel * t.count for t in saved_copies(s))


# The module names transformers' causal LMs give their input embeddings and lm_head: what peft's
# modules_to_save matches (by the last component of the module's name) when runs name them.
_INPUT_EMBEDDINGS = ("embed_tokens", "wte", "word_embeddings", "embed_in", "tok_embeddings")
_OUTPUT_EMBEDDINGS = ("lm_head", "embed_out")


def _saved_kind(name: str) -> str | None:
    last = name.rsplit(".", 1)[-1]
    return "input" if last in _INPUT_EMBEDDINGS else "output" if last in _OUTPUT_EMBEDDINGS else None


def _head_saved(name: str, targets) -> bool:
    """Whether an encoder head's linear sits in a module peft wraps for modules_to_save: peft's _set_trainable
    wraps every module whose name ends with a target (`key.endswith(target_key)`: DistilBERT's pre_classifier
    ends with "classifier" too), the whole module with its children (RoBERTa's classifier head)."""
    parts = name.split(".")
    return any(".".join(parts[:i]).endswith(t) for t in targets for i in range(1, len(parts) + 1))


def encoder_head_copies(s: Setup) -> list[Tensor]:
    """The trained copies of an encoder head's linears that modules_to_save names (weight and bias)."""
    if s.method == "full" or not s.model.arch.get("encoder"):
        return []
    out = []
    for l in s.model.linears:
        if l.role == "head" and _head_saved(l.name, s.modules_to_save):
            out.append(Tensor(l.out_features, l.in_features))
            if l.bias:
                out.append(Tensor(l.out_features, 1))
    return out


def saved_copies(s: Setup) -> list[Tensor]:
    """The trained copies peft's ModulesToSaveWrapper makes of the modules_to_save it can size (the input
    embeddings, lm_head: vocab x hidden each, untied from each other; an encoder head's linears); the frozen
    originals stay."""
    if s.method == "full":
        return []
    kinds = dict.fromkeys(k for k in map(_saved_kind, s.modules_to_save) if k)
    return [Tensor(s.model.vocab, s.model.hidden, embedding=k == "input") for k in kinds] + encoder_head_copies(s)


def unsized_saved(s: Setup) -> list[str]:
    """modules_to_save names memlint does not size (a norm, a module it has no linears for): their copies are
    not counted."""
    heads = [l.name for l in s.model.linears if l.role == "head"] if s.model.arch.get("encoder") else []
    return [n for n in s.modules_to_save if _saved_kind(n) is None and not any(_head_saved(h, (n,)) for h in heads)]


def trains_lm_head_copy(s: Setup) -> bool:
    return s.method != "full" and any(_saved_kind(n) == "output" for n in s.modules_to_save)


def saved_copy_bytes(s: Setup) -> int:
    """Bytes per element of those copies: the base module's dtype (peft casts only adapter layers to fp32),
    fp32 where prepare_model_for_kbit_training upcast the embeddings and lm_head first."""
    return 4 if s.upcasts_kbit else s.weight_bytes


def trainable_dtype(s: Setup, accounting: str) -> str:
    """The dtype trainable parameters (and so their gradients) are kept in."""
    if accounting == "textbook":
        return "fp32" if s.precision == "fp32" else "bf16"
    if s.method == "full":
        return s.dtype
    if s.adapter_dtype is not None:
        return s.adapter_dtype
    # peft >= 0.12 autocasts adapters to fp32 on a half base (autocast_adapter_dtype=True);
    # pure-bf16 recipes (torchtune, litgpt) keep them bf16 (pure-fp16 ones fp16).
    return PURE.get(s.precision, "fp32")


# --------------------------------------------------------------------------- weights


def packed_int4_bytes(quant: str, fin: int, fout: int, group_size: int) -> int:
    """One GPTQ / AWQ 4-bit linear (fin x fout) as gptqmodel registers it (nn_modules/qlinear/__init__.py, 7.7;
    auto-gptq's QuantLinear and autoawq's WQLinear_GEMM have the same shapes), int32 words of 8 weights:
    GPTQ qweight [fin/8, fout], qzeros [fin/g, fout/8], fp16 scales [fin/g, fout], int32 g_idx [fin];
    AWQ qweight [fin, fout/8], qzeros [fin/g, fout/8], fp16 scales [fin/g, fout] (AWQ keeps no g_idx)."""
    g = fin if group_size == -1 else group_size
    groups = math.ceil(fin / g) if quant == "gptq" else fin // g
    if quant == "gptq":
        return 4 * math.ceil(fin * 4 / 32) * fout + 4 * groups * math.ceil(fout * 4 / 32) + 2 * groups * fout + 4 * fin
    return 4 * fin * math.ceil(fout * 4 / 32) + 4 * groups * math.ceil(fout * 4 / 32) + 2 * groups * fout


HQQ_PER_BYTE = {8: 1, 6: 1, 5: 1, 4: 2, 2: 4, 1: 8}  # hqq Quantizer.bit_to_packing: 8/6/5 -> 8bit_u8, 4bit_u8, ...


def hqq_linear_bytes(fin: int, fout: int, bits: int, group_size: int, meta_bytes: int, axis: int = 1) -> int:
    """One HQQLinear (hqq 0.2.x core/quantize.py, Quantizer.quantize + BitPack): the fout x fin weight is grouped as
    [fout·fin/g, g] (axis 1, transformers' HqqConfig default) or [g, fout·fin/g] (axis 0, LLaMA-Factory); W_q packs
    along the first dimension: uint8 with 1 (8/6/5 bits), 2 (4), 4 (2) or 8 (1) values a byte, or int32 with ten 3-bit
    values a word, that dimension padded to a multiple of 10 (pack_3bit_32); scale and zero are one value each per
    group in the layer's compute_dtype (HQQLinear.cuda casts the meta tensors to it). group_size -1 (None): one group
    per row (axis 1) or column (axis 0)."""
    n = fin * fout
    g = (fin if axis == 1 else fout) if group_size == -1 else group_size
    groups = n // g
    rows, cols = (groups, g) if axis == 1 else (g, groups)
    if bits == 3:
        packed = 4 * math.ceil(rows / 10) * cols
    else:
        packed = rows // HQQ_PER_BYTE[bits] * cols
    return packed + 2 * groups * meta_bytes


def quantized_linear_bytes(model: ModelSpec, quant: str, double_quant: bool, accounting: str,
                           group_size: int = 128, bits: int = 4, meta_bytes: int = 2) -> int:
    """Bytes of the block Linear weights after quantization: bitsandbytes (nf4, fp4, int8), a GPTQ / AWQ
    checkpoint's packed int4 layers, or HQQ's (bits, group_size, scale and zero in `meta_bytes`)."""
    if accounting == "textbook":
        if quant == "hqq":  # nbits + a 16-bit scale and zero per group
            g = group_size if group_size > 0 else max(1, model.hidden)
            return round(model.quantizable_params * (bits + 32 / g) / 8)
        if quant == "int8":
            return model.quantizable_params
        if quant in ("gptq", "awq"):  # 4 bits + an fp16 scale and a 4-bit zero per group
            g = group_size if group_size > 0 else max(1, model.hidden)
            return round(model.quantizable_params * (4 + 20 / g) / 8)
        bits = 4 + (8 / NF4_BLOCK + 32 / (NF4_BLOCK * DQ_BLOCK) if double_quant else 32 / NF4_BLOCK)
        return round(model.quantizable_params * bits / 8)
    total = 0
    for l in model.layer_linears():
        n = l.in_features * l.out_features
        if quant in ("gptq", "awq"):
            per = packed_int4_bytes(quant, l.in_features, l.out_features, group_size)
        elif quant == "hqq":
            per = hqq_linear_bytes(l.in_features, l.out_features, bits, group_size, meta_bytes)
        elif quant == "int8":
            per = n + 4 * l.out_features  # int8 weight + fp32 row scales (SCB)
        else:
            per = bnb_linear_bytes(n, double_quant)
        total += per * l.count
    return total


def bnb_linear_bytes(n: int, double_quant: bool) -> int:
    """One bitsandbytes 4-bit weight of n elements: packed uint8 (n/2) + fp32 absmax per 64, or with double
    quantization uint8 absmax per block + fp32 absmax per 256 blocks + the 256-entry fp32 code + offset."""
    blocks = math.ceil(n / NF4_BLOCK)
    per = math.ceil(n / 2)
    if double_quant:
        return per + blocks + 4 * math.ceil(blocks / DQ_BLOCK) + 256 * 4 + 4
    return per + 4 * blocks


def weight_bytes(s: Setup, accounting: str) -> tuple[int, str]:
    w, f = _weight_bytes(s, accounting)
    buf = int(s.model.arch.get("final_logits_bias") or 0)
    if buf and accounting == "real":  # BART's final_logits_bias: a [1, V] buffer in the weights' dtype
        w, f = w + buf * s.weight_bytes, f + f" + final_logits_bias {buf:,} × {s.weight_bytes} B (a buffer)"
    if accounting == "real" and not (s.encoder or s.seq2seq) and s.model_code == "transformers":
        nb, words = buffer_bytes(s)  # a family's registered buffers (causal masks, position tables)
        if nb:
            w, f = w + nb, f + f" + buffers: {words}"
    if s.model_code == "litgpt" and accounting == "real":
        from memlint.estimate import litgpt

        untied = litgpt.untied_head(s)
        if untied and s.quant == "none":
            w, f = w + untied * s.weight_bytes, f + f" + LitGPT's own lm_head {untied:,} × {s.weight_bytes} B (untied)"
        rope = litgpt.rope_cache_bytes(s)
        w, f = w + rope, f + f" + LitGPT's rope cache {rope:,} B (cos, sin: fp32 × longest sample × rope_n_elem)"
    return w, f


def _weight_bytes(s: Setup, accounting: str) -> tuple[int, str]:
    m = s.model
    wb = 2 if accounting == "textbook" and s.precision != "fp32" else s.weight_bytes
    if s.method == "full":
        return m.params * wb, f"{m.params:,} params × {wb} B"
    n_lora = setup_lora_params(s)
    ab = DTYPE_BYTES[trainable_dtype(s, accounting)]
    n_copy, cb = sum(t.numel for t in saved_copies(s)), saved_copy_bytes(s)
    copies = f" + {n_copy:,} modules_to_save copies × {cb} B" if n_copy else ""
    if s.quant == "none":
        return (m.params * wb + n_lora * ab + n_copy * cb,
                f"{m.params:,} frozen × {wb} B + {n_lora:,} {'DoRA' if s.use_dora else 'LoRA'} × {ab} B{copies}")
    q = quantized_linear_bytes(m, s.quant, s.double_quant, accounting, s.quant_group_size, s.quant_bits, s.weight_bytes)
    rest = m.params - m.quantizable_params
    head4 = ""
    if s.model_code == "litgpt" and accounting == "real":
        # Fabric's BitsandbytesPrecision replaces every nn.Linear, lm_head included (no ignore_modules); LitGPT's
        # lm_head is its own weight even where the checkpoint ties it (the embedding stays in the compute dtype)
        hq = bnb_linear_bytes(m.hidden * m.vocab, s.double_quant)
        q, head4 = q + hq, " (lm_head 4-bit too: Fabric's BitsandbytesPrecision)"
        if not m.tied_embeddings:
            rest -= m.hidden * m.vocab
    rb = 4 if (accounting == "real" and s.upcasts_kbit) else wb
    label = {"nf4": "NF4", "fp4": "FP4", "int8": "int8", "gptq": "GPTQ int4", "awq": "AWQ int4",
             "hqq": f"HQQ {s.quant_bits}-bit"}[s.quant]
    dq = (" + double-quant" if s.double_quant else "") if s.quant in ("nf4", "fp4") else ""
    if s.quant in ("gptq", "awq"):
        dq = f" (group {s.quant_group_size}, fp16 scales)"
    if s.quant == "hqq":
        dq = f" (group {s.quant_group_size}, {s.weight_bytes}-byte scale and zero)"
    return (
        q + rest * rb + n_lora * ab + n_copy * cb,
        f"{m.quantizable_params:,} {label}{dq}{head4} + {rest:,} unquantized × {rb} B + {n_lora:,} LoRA × {ab} B{copies}",
    )


# --------------------------------------------------------------------------- gradients


def gradient_bytes(s: Setup, accounting: str) -> tuple[int, str]:
    n = trainable_params(s)
    b = DTYPE_BYTES[trainable_dtype(s, accounting)]
    n_copy = sum(t.numel for t in saved_copies(s))
    if n_copy:
        cb = saved_copy_bytes(s)
        return (n - n_copy) * b + n_copy * cb, f"{n - n_copy:,} adapter params × {b} B + {n_copy:,} modules_to_save × {cb} B"
    return n * b, f"{n:,} trainable × {b} B"


# --------------------------------------------------------------------------- optimizer


def state_layout(name: str) -> dict | None:
    """A block-quantized state layout of data/optimizers.json `state_dtypes` (int8, ao_int8, ao_int4, ao_fp8);
    None for the unquantized 'param' and 'fp32'."""
    from memlint import data

    return data.load("optimizers.json").get("state_dtypes", {}).get(name)


def quantized(spec: dict) -> bool:
    return state_layout(spec["state_dtype"]) is not None


def _quantized_state(n: int, spec: dict, q: dict, pbytes: int) -> int:
    """One state tensor of n elements in a block-quantized layout: codes, a scale per block and the state's own
    lookup table; the unquantized fallback (bitsandbytes: fp32 under min_8bit_size; torchao: the parameter's dtype
    under 4096 elements or when n is no multiple of the block size)."""
    bs = spec.get("blocksize", INT8_OPT_BLOCK)
    if n >= spec.get("min_8bit_size", 4096) and (not q["divisible"] or n % bs == 0):
        return math.ceil(n * q["code_bits"] / 8) + q["scale_bytes"] * math.ceil(n / bs) + 4 * q["qmap_entries"]
    return n * (4 if q["fallback"] == "fp32" else pbytes)


def state_count(spec: dict, pbytes: int) -> int | str:
    """States per parameter: the table's, plus torch-optimi's Kahan buffer on a bf16/fp16 parameter."""
    states = spec["states"]
    if spec.get("kahan_low_precision") and pbytes == 2 and isinstance(states, int):
        return states + 1
    return states


def _trainer_embedding_spec(s: Setup, spec: dict) -> dict | None:
    """The 32-bit layout transformers' Trainer gives embedding weights under a bitsandbytes 8-bit optimizer
    (optimizers.json trainer_embeddings_fp32), when the Trainer builds the optimizer."""
    if not spec.get("trainer_embeddings_fp32") or not s.trainer_optimizer:
        return None
    return {**spec, "state_dtype": "fp32"}


def _state_bytes_per_tensor(t: Tensor, spec: dict, pbytes: int, emb_spec: dict | None = None) -> int:
    if t.embedding and emb_spec is not None:
        spec = emb_spec
    states = state_count(spec, pbytes)
    dt = spec["state_dtype"]
    if states == "factored":  # Adafactor: row + column second moments for matrices (AdaLomo: always fp32)
        b = 4 if dt == "fp32" else pbytes
        per = (t.rows + t.cols) * b if t.cols > 1 else t.numel * b
        return per * t.count
    if states == 0:
        return 0
    q = state_layout(dt)
    if q is not None:
        return states * _quantized_state(t.numel, spec, q, pbytes) * t.count
    b = 4 if dt == "fp32" else pbytes
    return states * t.numel * b * t.count


def _state_param_bytes(s: Setup, accounting: str) -> int:
    """Bytes of the parameters the optimizer updates: the fp32 master copy where one is kept."""
    return 4 if s.precision == "master-fp32" else DTYPE_BYTES[trainable_dtype(s, accounting)]


def galore_match(s: Setup, name: str) -> bool:
    """Is the linear `name` (self_attn.q_proj, lm_head) a GaLore target? transformers' check_target_module_exists
    on the module's full name: a string is a regex full match ("all-linear": every linear), a list matches by
    equality, substring or regex full match."""
    import re

    full = name if name == "lm_head" else f"model.layers.0.{name}"
    t = s.galore_targets
    if isinstance(t, str):
        return t.replace("_", "-") == "all-linear" or re.fullmatch(t, full) is not None
    return any(k == full or k in full or re.fullmatch(k, full) is not None for k in t)


def galore_split(s: Setup) -> tuple[list[Tensor], list[Tensor]]:
    """(the projected weights as (rows, cols) shapes, every other trainable tensor) of a GaLore run."""
    targets = [l for l in s.model.linears if galore_match(s, l.name)]
    rest = [t for t in full_tensors(s.model)]
    for l in targets:
        rest.remove(Tensor(l.out_features, l.in_features, l.count))
    return [Tensor(l.out_features, l.in_features, l.count) for l in targets], rest


def _galore_state(s: Setup, spec: dict, pbytes: int) -> tuple[int, str]:
    """GaLoreProjector: the moments of the rank-r projected gradient (r x max(m, n); r is capped at min(m, n)
    by the thin SVD) and the projection matrix itself (r x min(m, n), cast back to the parameter dtype)."""
    targets, rest = galore_split(s)
    state = sum(_state_bytes_per_tensor(t, spec, pbytes) for t in rest)
    for t in targets:
        r = min(s.galore_rank, t.rows, t.cols)
        state += _state_bytes_per_tensor(Tensor(r, max(t.rows, t.cols), t.count), spec, pbytes)
        state += r * min(t.rows, t.cols) * t.count * pbytes
    return state, (f"GaLore rank {s.galore_rank} on {sum(t.count for t in targets):,} linear weights: the moments of "
                   f"the projected gradient and the projection; full states on the other parameters")


def optimizer_bytes(s: Setup, accounting: str) -> tuple[int, str]:
    """State bytes, master copy included where one is kept."""
    spec = s.optimizer
    n = trainable_params(s)
    if spec.get("galore") and accounting == "real":
        state, formula = _galore_state(s, spec, _state_param_bytes(s, accounting))
        return state, f"{n:,} trainable: {formula}"
    if accounting == "textbook":
        # The article: fp32 master (mixed precision only) + fp32 moments.
        master = 0 if s.precision == "fp32" else 4
        q = state_layout(spec["state_dtype"])
        k = spec["states"] if isinstance(spec["states"], int) else 1  # Adafactor: about one state's worth
        moments = k * q["code_bits"] / 8 if q is not None else 4 * k
        per = master + moments
        per = int(per) if float(per).is_integer() else per
        return round(n * per), f"{n:,} trainable × {per} B ({'fp32 master + ' if master else ''}{spec['states']} moment(s))"
    pbytes = _state_param_bytes(s, accounting)
    tensors = trainable_tensors(s)
    emb = _trainer_embedding_spec(s, spec)
    state = sum(_state_bytes_per_tensor(t, spec, pbytes, emb) for t in tensors)
    cbytes = 4 if s.precision == "master-fp32" else saved_copy_bytes(s)
    state += sum(_state_bytes_per_tensor(t, spec, cbytes, emb) for t in saved_copies(s))
    k = state_count(spec, pbytes)
    q = state_layout(spec["state_dtype"])
    if q is not None:
        fb = "fp32" if q["fallback"] == "fp32" else f"{pbytes} B (parameter dtype)"
        small = f"< {spec.get('min_8bit_size', 4096)} elements" + (
            f" or not a multiple of {spec.get('blocksize', 256)}" if q["divisible"] else "")
        formula = (f"{k} block-quantized {q['code_bits']}-bit state(s) ({spec['state_dtype']}: + {q['scale_bytes']} B scale "
                   f"per {spec.get('blocksize', 256)}" + (f" + a {q['qmap_entries']}-entry fp32 qmap per state" if q["qmap_entries"] else "")
                   + f"; tensors {small} keep {fb} states)")
    elif spec["state_dtype"] == "fp32":
        formula = f"{k} fp32 state(s)"
    else:
        formula = f"{k} state(s) × {pbytes} B (parameter dtype)"
    if emb is not None and any(t.embedding for t in [*tensors, *saved_copies(s)]):
        formula += "; the embeddings' states fp32 (transformers' Trainer overrides them to 32-bit)"
    if spec.get("kahan_low_precision") and k != spec["states"]:
        formula += " (incl. the Kahan-summation buffer on a 16-bit parameter)"
    if spec["states"] == "factored":
        formula = "Adafactor row + column second moments" + (" (fp32)" if spec["state_dtype"] == "fp32" else "")
    if spec["states"] == 0:
        formula = "no optimizer state"
    if s.precision == "master-fp32":
        state += n * 4
        formula = "fp32 master copy + " + formula
    if saved_copies(s) and spec["state_dtype"] == "param" and cbytes != pbytes:
        formula += f"; the modules_to_save copies' states in their {cbytes} B dtype"
    return state, f"{n:,} trainable: {formula}"


def optimizer_step_temporaries(s: Setup, accounting: str) -> int:
    """Extra live bytes inside optimizer.step(): foreach AdamW materialises one
    state-sized list (the sqrt of the second moment); for-loop and fused kernels only
    ever hold one parameter's worth."""
    if accounting == "textbook":
        return 0
    spec = s.optimizer
    pbytes = _state_param_bytes(s, accounting)
    tensors = trainable_tensors(s)
    copies = saved_copies(s)
    largest = max((t.numel for t in [*tensors, *copies]), default=0)
    if spec["impl"] == "galore":
        return galore_step_temporaries(s, spec, pbytes)
    if spec["impl"] == "ao":
        return ao_step_temporaries(spec, [*tensors, *copies])
    if spec["impl"] == "foreach" and spec["states"] == 2:
        # foreach steps each (device, dtype) group in turn: bf16 copies beside fp32 adapters are a group of their own
        cbytes = 4 if s.precision == "master-fp32" else saved_copy_bytes(s)
        own = sum(t.numel * t.count for t in tensors) * pbytes
        cps = sum(t.numel for t in copies) * cbytes
        return own + cps if cbytes == pbytes else max(own, cps)
    if spec["states"] == "factored":
        return largest * 4 * 4  # fp32 copies of grad, grad², update and param of one tensor
    if spec["impl"] == "forloop":
        return largest * pbytes
    return 0


def ao_step_temporaries(spec: dict, tensors: list[Tensor]) -> int:
    """torchao's step: torch.compile(single_param_adam) one parameter at a time; what the compiled update holds
    per element of a quantized parameter (the fp32 moments it requantizes block by block) is the table's
    step_bytes_per_element, measured on CPU; an unquantized (fallback) parameter's update fuses into one kernel."""
    q = state_layout(spec["state_dtype"])
    per = q.get("step_bytes_per_element", 0)
    bs = spec.get("blocksize", INT8_OPT_BLOCK)
    quantized_sizes = [t.numel for t in tensors
                       if t.numel >= spec.get("min_8bit_size", 4096) and (not q["divisible"] or t.numel % bs == 0)]
    return max(quantized_sizes, default=0) * per


def galore_step_temporaries(s: Setup, spec: dict, pbytes: int) -> int:
    """galore_torch steps parameter by parameter. A projected weight (m x n) first refreshes its projection
    (step 1 and every update_proj_gap steps): the thin SVD of an fp32 copy of its gradient, U m x k, S, Vh
    k x n with k = min(m, n); then the projected gradient, sqrt(v) + eps and m / that (r x max(m, n) each) and
    the update projected back to m x n. Any other parameter: AdamW's sqrt(v) + eps and m / that
    (two parameter-sized tensors), Adafactor's four fp32 copies, bitsandbytes' 8-bit kernel nothing."""
    targets, rest = galore_split(s)
    most = 0
    for t in targets:
        m, n = t.rows, t.cols
        k = min(m, n)
        r = min(s.galore_rank, k)
        svd = (0 if pbytes == 4 else m * n * 4) + (m * k + k + k * n) * 4
        update = (3 * r * max(m, n) + m * n) * pbytes
        most = max(most, svd, update)
    largest = max((t.numel for t in rest), default=0)
    if spec["states"] == "factored":
        most = max(most, largest * 4 * 4)
    elif spec["state_dtype"] != "int8":
        most = max(most, 2 * largest * pbytes)
    return most


def vision_frozen(s: Setup) -> int:
    """A vision-language model's vision parameters that do not train (estimate/vision.py)."""
    if not s.model.vision:
        return 0
    from memlint.estimate.vision import frozen_params

    return frozen_params(s)


def full_setup_tensors(s: Setup) -> list[Tensor]:
    """A full fine-tune's trained tensors: the (text) model's, and the vision tower's parts that train."""
    out = full_tensors(s.model)
    if s.model.vision:
        from memlint.estimate.vision import trained_tensors

        rem = s.model.groups["norms"] % s.model.hidden  # norms narrower than hidden (Mllama's cross-attention q/k norms)
        if rem:
            out.append(Tensor(rem, 1))
        out += trained_tensors(s)
    return out


def trainable_tensors(s: Setup) -> list[Tensor]:
    if s.method == "full" and s.model_code == "litgpt" and s.model.tied_embeddings:
        return full_tensors(s.model) + [Tensor(s.model.vocab, s.model.hidden)]  # LitGPT's own lm_head
    return full_setup_tensors(s) if s.method == "full" else setup_lora_tensors(s)


def in_backward_step(s: Setup, accounting: str) -> tuple[int, int, str]:
    """The optimizer step fused into backward (torchtune's optimizer_in_bwd): each parameter's
    gradient lives from its accumulation to its own optimizer's step and zero_grad, so at most one
    parameter's gradient, the largest, is alive with that one step's temporaries. Returns
    (gradient bytes, step temporaries, formula)."""
    tensors = trainable_tensors(s)
    largest = max((t.numel for t in tensors), default=0)
    gb = DTYPE_BYTES[trainable_dtype(s, accounting)]
    spec = s.optimizer
    # optimizer_step_temporaries over a one-parameter optimizer: foreach AdamW's sqrt list and the
    # for-loop kernel hold one parameter's worth, Adafactor four fp32 copies, fused kernels nothing
    tmp = 0
    if accounting == "real" and spec.get("tensor_hook"):
        # LOMO / AdaLomo: a Tensor.register_hook fires before the arriving gradient is accumulated and updates the
        # parameters whose .grad is already set, so the previous gradient and the arriving one are alive together;
        # the update holds `step_fp32_copies` fp32 tensors of one parameter (the fp32 grad, the update, the fp32
        # parameter; an fp32 parameter's own .to(float32) copies are no copies)
        copies = spec.get("step_fp32_copies", 0) - (spec.get("fp32_aliases", 0) if gb == 4 else 0)
        formula = (f"update in backward (a tensor hook per parameter): every gradient is set to None by the update; at "
                   f"most two, 2 × {largest:,} × {gb} B, are alive")
        return 2 * largest * gb, max(0, copies) * largest * 4, formula
    if accounting == "real" and spec["impl"] == "galore":
        tmp = galore_step_temporaries(s, spec, _state_param_bytes(s, accounting))
    elif accounting == "real" and spec["states"] == "factored":
        tmp = largest * 4 * 4
    elif accounting == "real" and spec["impl"] == "ao":
        # torchao's compiled per-parameter step: one quantized parameter's requantization temporaries, as after
        # backward (ao_step_temporaries); bitsandbytes' fused 8-bit kernel works in place
        tmp = ao_step_temporaries(spec, tensors)
    elif accounting == "real" and (spec["impl"] == "forloop" or (spec["impl"] == "foreach" and spec["states"] == 2)):
        tmp = largest * _state_param_bytes(s, accounting)
    formula = (f"optimizer in backward: each gradient is freed by its parameter's own step; at most the largest, "
               f"{largest:,} × {gb} B, is alive")
    return largest * gb, tmp, formula


# --------------------------------------------------------------------------- encoder heads


def encoder_spec(model: ModelSpec, head: str, num_labels: int) -> ModelSpec:
    """An encoder with the task head the script loads (transformers' ...ForSequenceClassification,
    ...ForTokenClassification, ...ForMaskedLM), counted from the catalog's head facts (catalog/meta.py): the
    head's linears (BERT's pooler and classifier, RoBERTa's dense + out_proj, the MLM transform) with
    `num_labels` outputs where they are the label layer; the rest of the head (the MLM head's LayerNorm and
    vocabulary bias) under `other`. A masked-LM decoder is the word-embedding matrix (tied)."""
    from dataclasses import replace

    facts = (model.task_heads or {}).get(head)
    if facts is None:
        raise MemlintError(f"{model.id}: no {head} head facts in its catalog entry (regenerate the catalog)")
    linears = []
    for name, d in facts["linears"].items():
        out = num_labels if d["labels"] else d["out"]
        linears.append(Linear(name, d["in"], out, d["bias"], 1, "head"))
    total = facts["fixed"] + facts["per_label"] * num_labels
    lin = sum(l.params for l in linears)
    groups = dict(model.groups)
    groups["linear"] = groups.get("linear", 0) + lin
    groups["other"] = groups.get("other", 0) + total - lin
    return replace(model, params=model.params + total, groups=groups, linears=model.linears + tuple(linears),
                   tied_embeddings=bool(facts["tied_decoder"]))


# --------------------------------------------------------------------------- reward model


def reward_spec(model: ModelSpec) -> ModelSpec:
    """The model as TRL's RewardTrainer loads it: AutoModelForSequenceClassification with
    num_labels=1, a bias-free hidden x 1 `score` head in place of lm_head (counted under
    `other`: it is no decoder-layer linear)."""
    from dataclasses import replace

    groups = dict(model.groups)
    head = groups.get("lm_head", 0)
    groups["lm_head"] = 0
    groups["other"] = groups.get("other", 0) + model.hidden
    linears = tuple(l for l in model.linears if l.name != "lm_head")
    return replace(model, params=model.params - head + model.hidden, groups=groups, linears=linears,
                   tied_embeddings=False)


def moe_lora(s: Setup) -> dict[str, bool]:
    """Which MoE parts peft adapts (families.json peft_moe, at the installed peft and transformers): the router, the
    fused gate/up stack, the down stack; none for a full fine-tune, another family or versions outside the range."""
    from memlint.library.versions import in_range, installed_version

    from memlint.catalog.families import fact_of

    spec = fact_of(s.model, "peft_moe")
    none = {"router": False, "gate_up": False, "down": False}
    if s.method == "full" or not spec or s.model_code != "transformers":
        return none
    for pkg, rng in spec.get("versions", {}).items():
        v = installed_version(pkg)
        if v is not None and not in_range(v, rng):
            return none
    t = s.lora_targets
    if t == "all-linear":
        return {"router": True, "gate_up": True, "down": True}
    if isinstance(t, str):
        return none
    names = {n.rsplit(".", 1)[-1] for n in t}
    return {"router": any(n in names for n in spec["router"]), "gate_up": all(n in names for n in spec["gate_up"]),
            "down": any(n in names for n in spec["down"])}


def moe_lora_tensors(s: Setup) -> list:
    """The adapters peft puts on a MoE's router and expert stacks (moe_lora): router A (r x h) and B (E x r); the gate/up
    stack's A (2r·E x h) and B (2i x 2r·E); the down stack's A (r·E x i) and B (h x r·E), per layer."""
    m = s.model
    parts = moe_lora(s)
    if not any(parts.values()):
        return []
    E = m.arch.get("num_experts") or 1
    i = m.arch.get("moe_intermediate_size", m.intermediate)
    h, r, L = m.hidden, s.lora_r, m.layers
    out = []
    if parts["router"]:
        out += [Tensor(r, h, L), Tensor(E, r, L)]
    if parts["gate_up"]:
        out += [Tensor(2 * r * E, h, L), Tensor(2 * i, 2 * r * E, L)]
    if parts["down"]:
        out += [Tensor(r * E, i, L), Tensor(h, r * E, L)]
    return out


def buffer_bytes(s: Setup) -> tuple[int, str]:
    """(bytes, words) of the registered buffers the family's modules build besides their parameters (families.json
    "buffers": GPT-Neo's per-layer causal masks, GPT-BigCode's causal mask, GPT-J's sinusoidal positions)."""
    from memlint.catalog.families import config_of, fact_of

    m = s.model
    total, words = 0, []
    for buf in fact_of(m, "buffers") or []:
        def size(key: str) -> int:
            v = m.arch.get(key)
            return int(v if v is not None else config_of(m, key, m.head_dim if key == "rotary_dim" else 0))

        n = size(buf["rows"]) * size(buf["cols"]) * DTYPE_BYTES.get(buf["dtype"], 1) * (m.layers if buf.get("per_layer") else 1)
        total += n
        words.append(f"{buf['what']} {n:,} B")
    return total, ", ".join(words)
