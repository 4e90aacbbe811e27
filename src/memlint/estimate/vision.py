"""Vision-language models (#15: Qwen2-VL, Qwen2.5-VL, LLaVA-1.5, Llama-3.2-Vision): the image tokens an image adds to
the text model's sequence (or, for Llama-3.2-Vision, the vision tokens its cross-attention layers attend to), what of
the vision tower trains, and the tower's activations over every patch.

LLaVA (transformers 5.24 models/llava, clip): every CLIP layer runs over (image_size / patch)² + 1 tokens; the text
model reads hidden_states[vision_feature_layer] (the class token dropped under "default") through linear_1, GELU,
linear_2, so the layers after that one and post_layernorm get no gradient. Llama-3.2-Vision (models/mllama): the
processor pads every image to max_image_tiles tiles; the vision model (a 32-layer and a gated 8-layer transformer, not
checkpointed) runs over tiles × (patches + 1, padded to 8) tokens with a dense tile mask; the projector's output is the
cross-attention layers' key / value input. Traced in tests/test_vlm_llava_mllama.py.

Qwen2-VL, read off transformers 5.24's models/qwen2_vl and qwen2_5_vl (checked against `memlint measure`'s trace of
the real step in tests/test_vlm.py):

- an image of H x W is resized by the processor's smart_resize to multiples of patch_size * spatial_merge_size
  within [min_pixels, max_pixels]; it becomes (H'/14)·(W'/14) patches of C·T·P·P values (T = temporal_patch_size: a
  still image is repeated), and (H'/14)·(W'/14)/merge² image tokens in the text sequence;
- the vision blocks run over all patches of the micro-batch (attention split per image, or per window in Qwen2.5-VL);
  the merger concatenates merge² patches and projects them to the text model's width;
- a frozen tower (LLaMA-Factory's freeze_vision_tower, default) keeps nothing for backward: no parameter and no input
  of it needs a gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memlint import data
from memlint.errors import MemlintError
from memlint.estimate.terms import Tensor
from memlint.vocab import DTYPE_BYTES


def processor(model) -> dict:
    """The image processor facts of the model's family (data/vision.json)."""
    table = data.load("vision.json")["processors"]
    entry = table.get(model.model_type)
    if entry is None:
        raise MemlintError(f"{model.id}: no image processor known for model_type {model.model_type!r}")
    return entry


def framework_defaults(name: str) -> dict:
    return data.load("vision.json")["frameworks"].get(name, {})


def kind(model) -> str:
    """The tower's family: "qwen2_vl" (Qwen2-VL / Qwen2.5-VL, the older entries name none), "llava"."""
    return (model.vision or {}).get("kind", "qwen2_vl")


def fixed_size(s) -> bool:
    """A processor whose output does not depend on the image's size: LLaVA-1.5's CLIPImageProcessor resizes and crops
    every image to the tower's size; Mllama's pads every image to max_image_tiles tiles."""
    return processor(s.model)["resize"] in ("crop", "tiles")


def tiles(s) -> int:
    """Tiles per image the vision model runs (Mllama: the processor pads to max_image_tiles); 1 elsewhere."""
    return s.model.vision["max_num_tiles"] if kind(s.model) == "mllama" else 1


def cross_tokens(s) -> int:
    """The vision tokens one row's cross-attention keys and values span (Mllama: images × tiles × patches+1)."""
    v = s.model.vision
    return s.images * tiles(s) * v["patches_per_tile"] if kind(s.model) == "mllama" else 0


def pixel_bounds(s) -> tuple[int, int]:
    p = processor(s.model)
    if p["resize"] in ("crop", "tiles"):  # every image becomes image_size x image_size (tiles of it)
        side = s.model.vision["image_size"]
        return side * side, side * side
    lo = s.image_min_pixels if s.image_min_pixels is not None else p["min_pixels"]
    hi = s.image_max_pixels if s.image_max_pixels is not None else p["max_pixels"]
    return lo, hi


def _factor(v) -> int:
    return v["patch_size"] * v["spatial_merge_size"]


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' models/qwen2_vl/image_processing_qwen2_vl.py smart_resize, as it is."""
    if max(height, width) / min(height, width) > 200:
        raise MemlintError(f"--image-size {height}x{width}: the processor refuses an aspect ratio over 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def image_grid(s) -> tuple[int, int]:
    """(grid_h, grid_w): patches per side of one image. Without --image-size: the largest image max_pixels allows
    (merge-sized tiles, floor(max_pixels / factor²) of them: an upper bound over aspect ratios). LLaVA: the crop's."""
    v = s.model.vision
    if fixed_size(s):
        n = v["image_size"] // v["patch_size"]
        return n, n
    f = _factor(v)
    m = v["spatial_merge_size"]
    lo, hi = pixel_bounds(s)
    if s.image_size is None:
        tiles = max(1, hi // (f * f), -(-lo // (f * f)))
        return tiles * m, m  # as a 1 x tiles strip of merge tiles: the count is what matters
    h, w = smart_resize(s.image_size[0], s.image_size[1], f, lo, hi)
    return h // v["patch_size"], w // v["patch_size"]


def patches_per_image(s) -> int:
    gh, gw = image_grid(s)
    return gh * gw


def tower_tokens(s) -> int:
    """The tokens one image is in the tower: its patches (LLaVA's CLIP adds the class token; Mllama: per tile the
    patches and the class token, padded to a multiple of 8)."""
    if kind(s.model) == "mllama":
        return tiles(s) * (-(-s.model.vision["patches_per_tile"] // 8) * 8)
    return patches_per_image(s) + (1 if kind(s.model) == "llava" else 0)


def image_tokens(s) -> int:
    """Image tokens one image adds to the text sequence: its patches merged merge² to one (Qwen2-VL); LLaVA: the
    patches, and the class token too under vision_feature_select_strategy "full" (data/vision.json)."""
    if kind(s.model) == "llava":
        return patches_per_image(s) + (1 if s.model.vision["select_strategy"] == "full" else 0)
    if kind(s.model) == "mllama":  # one <|image|> token, already in the text: the model attends to the tiles
        return 0
    m = s.model.vision["spatial_merge_size"]
    return patches_per_image(s) // (m * m)


def text_seq(s) -> int:
    """The text model's sequence: the text tokens plus every image's tokens (the processor expands each
    <|image_pad|> into them)."""
    if not s.model.vision or not s.images:
        return s.seq
    return s.seq + s.images * image_tokens(s)


def trains(s) -> tuple[bool, bool]:
    """(the tower's blocks and patch embedding train, the merger trains): only in a full fine-tune."""
    if s.method != "full" or not s.model.vision:
        return False, False
    proj = s.train_vision if s.train_projector is None else s.train_projector
    return s.train_vision, proj


def frozen_params(s) -> int:
    """Vision parameters that do not train (all of them under LoRA: adapters go on the text model). A trained LLaVA
    tower's layers after vision_feature_layer and its post_layernorm get no gradient (params_unreached): no gradient,
    no optimizer state."""
    v = s.model.vision
    if not v:
        return 0
    tower, merger = trains(s)
    return ((v.get("params_unreached", 0) if tower else v["params"] - v["params_merger"])
            + (0 if merger else v["params_merger"]))


def trained_tensors(s) -> list[Tensor]:
    """The vision tower's trained tensors, with their 2-D shapes (per-tensor optimizer rules)."""
    v = s.model.vision
    tower, merger = trains(s)
    out: list[Tensor] = []
    counted = 0
    for name, l in v["linears"].items():
        if (l["block"] and tower) or (not l["block"] and merger):
            out.append(Tensor(l["out"], l["in"], l["count"]))
            counted += l["in"] * l["out"] * l["count"]
            if l["bias"]:
                out.append(Tensor(l["out"], 1, l["count"]))
                counted += l["out"] * l["count"]
    if tower:
        k = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2
        out.append(Tensor(v["embed_dim"], k))  # the Conv3d (LLaVA: Conv2d) patch embedding, bias-free
        counted += v["embed_dim"] * k
    rest = (v["params"] - v["params_merger"] - v.get("params_unreached", 0) if tower else 0) + \
        (v["params_merger"] if merger else 0) - counted
    if rest:  # the norms' weights (and LayerNorm biases): embed_dim-wide vectors
        out.append(Tensor(v["embed_dim"], 1, max(1, rest // v["embed_dim"])))
        if rest % v["embed_dim"]:
            out.append(Tensor(rest % v["embed_dim"], 1))
    return out


@dataclass(frozen=True)
class VisionTerms:
    body: int        # saved for backward at the end of forward (and the patches' pixel values)
    per_block: int   # one block's saved bytes over all patches (what recompute re-creates at a time)
    transient: int   # a frozen tower's forward working memory (before the text model's activations exist)
    formula: str
    tail: int = 0    # alive beside every gradient when the tower's backward runs (last): ActivationTerms.end_of_backward
    # LLaVA, Mllama (traced apart): the text model's backward ends before the vision gradients exist (late: the
    # parameters that have them), with `tail` still held by the tower; the tower's own end (LLaVA: its first layer's
    # backward, beside every gradient but that layer's; Mllama: its start, before its own) has `end` alive beside every
    # gradient but end_params' (ActivationTerms.vision_end, late_grads; core.py turns the counts into bytes)
    end: int = 0
    late: int = 0
    end_params: int = 0


def _norm(v, c: int, amp: bool, key: str = "norm") -> tuple[int, str]:
    """Bytes one trained norm over embed_dim keeps per row, and the linear input after it."""
    E = v["embed_dim"]
    if v[key] == "layernorm":
        # F.layer_norm saves its input and fp32 mean / rstd; autocast runs it in fp32 (an fp32 copy of the input),
        # then the next linear casts the fp32 output back: that half copy is the linear's saved input
        return (4 * E + 8 + c * E, "LayerNorm fp32 input + mean/rstd + the linear's half input") if amp else \
               (c * E + 8 + c * E, "LayerNorm input + mean/rstd + output")
    # RMSNorm: the fp32 upcast (saved by pow and mul), rsqrt, the normalised copy (its weight trains), the product
    return 4 * E + 4 + 2 * c * E, "RMSNorm fp32 input + rsqrt + normalised copy + output"


def grad_flows(s) -> bool:
    """Whether backward runs through a frozen tower: gradient checkpointing calls enable_input_require_grads, which
    at transformers >= 5 also hooks the tower's patch embedding (data/vision.json input_require_grads), so the frozen
    blocks build the autograd graph."""
    from memlint.library.versions import in_range, installed_version

    fact = data.load("vision.json")["input_require_grads"]
    return (s.recompute and s.images > 0 and not trains(s)[0]
            and in_range(installed_version(fact["package"]), fact["versions"]))


def _frozen_norm(v, amp: bool, key: str = "norm") -> int:
    """A frozen norm on a path that needs input gradients: its fp32 input (and mean/rstd, or rsqrt)."""
    E = v["embed_dim"]
    return 4 * E + 8 if v[key] == "layernorm" else 4 * E + 4


def block_bytes_per_patch(s, frozen: bool = False) -> int:
    """What one vision block saves per patch: trained, or frozen with a gradient flowing through it (frozen linears
    keep no input, a frozen norm only its fp32 input and statistics)."""
    v = s.model.vision
    c = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    E, I, n = v["embed_dim"], v["intermediate_size"], v["num_heads"]
    if frozen:
        flash = s.attn.startswith("flash_attention")
        mlp = (3 if v["mlp"] == "gated" else 2) * c * I  # the activation's input/output (and up), not the product
        return 2 * _frozen_norm(v, amp) + (5 if flash else 6) * c * E + 4 * n + mlp
    norm, _ = _norm(v, c, amp)
    # qkv output (v is a view of it, saved by SDPA), rotated q and k, SDPA's output and fp32 logsumexp; SDPA runs per
    # image (torch.split by cu_seqlens) and the outputs are concatenated: that copy is proj's saved input (flash
    # attention's varlen kernel takes all images at once: no copy)
    flash = s.attn.startswith("flash_attention")  # transformers' is_flash_attention_requested: the varlen call
    attn = (6 if flash else 7) * c * E + 4 * n
    mlp = (4 if v["mlp"] == "gated" else 3) * c * I  # gated: gate, act, up, product; quick_gelu: fc1, sigmoid, product
    return 2 * norm + attn + mlp


def llava_block_bytes(s, frozen: bool = False) -> int:
    """What one CLIP encoder layer saves per tower token, read off transformers 5.24's CLIPEncoderLayer under
    autocast (CUDA runs layer_norm in fp32): the pre_layrnorm's fp32 output makes the residual stream fp32, so each
    LayerNorm saves its fp32 input (the residual itself) and mean/rstd; q_proj, k_proj, v_proj and fc1 each cast the
    fp32 norm output to half (four saved copies); SDPA keeps q, k, v, its output (out_proj's input) and an fp32
    logsumexp; quick_gelu keeps fc1's output, the sigmoid and the product (fc2's input). Frozen, on the gradient path:
    the norms, SDPA's tensors, quick_gelu's input and sigmoid (frozen linears keep no input)."""
    v = s.model.vision
    c = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    E, I, H = v["embed_dim"], v["intermediate_size"], v["num_heads"]
    norms = 2 * (4 * E + 8) if amp else 2 * (c * E + 8)
    attn = 4 * c * E + 4 * H  # q, k, v, SDPA's output; the logsumexp
    if frozen:
        return norms + attn + 2 * c * I
    casts = 4 * c * E if amp else 2 * c * E  # the half inputs of q/k/v and fc1 (without autocast: the norm outputs)
    return norms + casts + attn + 3 * c * I


def _llava_terms(s) -> VisionTerms:
    """LLaVA's CLIP tower and projector for one micro-batch: every encoder layer runs over (patches + 1) tokens per
    image, the text model reads hidden_states[vision_feature_layer] (its patches: the class token dropped under the
    "default" strategy) through the projector."""
    v = s.model.vision
    c = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    r = 4 if amp else c  # the residual stream's bytes per value: fp32 after the pre-norm under autocast
    E, M, O = v["embed_dim"], v["merger_hidden"], v["out_hidden_size"]
    n_img = s.batch * s.images
    T = tower_tokens(s)
    P = n_img * T
    N = n_img * image_tokens(s)
    k = v["in_channels"] * v["patch_size"] ** 2 * patches_per_image(s)  # values per image
    pixels = n_img * k * 4  # the processor's fp32 pixel_values
    depth, reached = v["depth"], v["reached_layers"]
    tower, proj = trains(s)
    flows = grad_flows(s)
    # the model output keeps the selected hidden state and the last one (fp32 residual values under autocast), the
    # projected features (pooler_output, one per image) and their concatenation inside LlavaModel.forward
    outs = 2 * r * E * P + 2 * c * O * N
    blk = llava_block_bytes(s)
    if tower and not s.recompute:  # the layers after the selected one run with autograd: freed with the output
        outs += (depth - reached) * blk * P
    body = pixels + outs
    parts = [f"{P:,} tower tokens ({n_img} images × {T:,}), {N:,} image tokens: fp32 pixel values {pixels:,} B, the "
             f"tower's outputs kept in the model output {outs:,} B"]
    per_block = 0
    ckpt = 0  # checkpointed layer inputs: by the first layer's backward (the last to run) all but one are freed
    if tower:
        pre = ((4 * E + 8) if amp else (c * E + 8)) * P  # pre_layrnorm's input (and mean/rstd)
        embed = c * n_img * k  # the conv's half input
        per_block = blk * P
        if s.recompute:  # every CLIPEncoderLayer is a GradientCheckpointingLayer
            ckpt = reached * r * E * P
            body += ckpt + pre + embed
            parts.append(f"{reached} checkpointed layer inputs {r}·E per token; one layer ({blk:,} B/token) comes "
                         "back in backward")
        else:
            body += reached * per_block + pre + embed
            parts.append(f"{blk:,} B/token/layer × {reached} layers up to vision_feature_layer "
                         f"({depth - reached} after it run without a gradient)")
    elif flows:
        fb = llava_block_bytes(s, frozen=True)
        per_block = fb * P
        ckpt = reached * r * E * P
        body += ckpt + ((4 * E + 8) if amp else (c * E + 8)) * P
        parts.append(f"frozen tower on the gradient path (enable_input_require_grads hooks its patch embedding): "
                     f"{reached} checkpointed layer inputs; one frozen layer ({fb:,} B/token) comes back in backward")
    saved_proj = 0
    if proj:
        saved_proj = (c * E + 2 * c * M) * N  # linear_1's half input, its output (GELU's input), GELU's output
        parts.append(f"projector {saved_proj:,} B (linear_1's input, GELU's input and output)")
    elif tower or flows:
        saved_proj = c * M * N  # GELU's input (the frozen linears keep no input)
        parts.append(f"frozen projector on the gradient path {saved_proj:,} B (GELU's input)")
    body += saved_proj
    if not tower and not proj and not flows:
        parts.append("frozen tower and projector: nothing saved for backward")
    tail = end = late = first = 0
    if tower or proj or flows:
        # the text model's backward ends first: the tower (and projector) still hold what they saved, and none of
        # their gradients exists yet
        tail = body - outs
        late = ((v["params"] - v["params_merger"] - v.get("params_unreached", 0) if tower else 0)
                + (v["params_merger"] if proj else 0))
    if tower or flows:
        # the tower's first layer's backward runs last: every gradient but that layer's, the layer's saved tensors
        # (recomputed, beside its checkpointed input, under recompute), the pre-norm's and conv's inputs, the pixel
        # values, the gradient stream (fp32 residual values) and one intermediate-sized gradient
        first = v["params_blocks"] // depth if tower else 0
        held = body - outs - saved_proj - ckpt - ((reached - 1) * per_block if tower and not s.recompute else 0)
        end = held + min(ckpt, r * E * P) + (per_block if s.recompute else 0) \
            + (r * E + c * v["intermediate_size"]) * P
    transient = 0 if tower else P * (2 * r * E + 3 * c * v["intermediate_size"])
    return VisionTerms(body, per_block, transient, "vision: " + "; ".join(parts), tail, end, late, first)


def mllama_block_bytes(s, gated: bool, frozen: bool = False) -> int:
    """What one trained Mllama vision layer saves per token (transformers 5.24 MllamaVisionEncoderLayer under
    autocast): as a CLIP layer (fp32 residual stream after layernorm_pre: the norms' fp32 inputs and statistics, the
    half casts of q/k/v and fc1's inputs, SDPA's q, k, v, output and logsumexp) with a GELU MLP (fc1's output and
    GELU's output), and in the global layers the tanh gates' inputs (o_proj's and fc2's outputs)."""
    v = s.model.vision
    c = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    E, I, H = v["embed_dim"], v["intermediate_size"], v["num_heads"]
    norms = 2 * (4 * E + 8) if amp else 2 * (c * E + 8)
    if frozen:  # on the gradient path: the norms, SDPA's tensors and GELU's input (frozen linears keep no input)
        return norms + 4 * c * E + 4 * H + c * I
    casts = 4 * c * E if amp else 2 * c * E
    return norms + casts + 4 * c * E + 4 * H + 2 * c * I + (2 * c * E if gated else 0)


def _mllama_cross(s, Nv: int, vision_trains: bool, parts: list[str]) -> tuple[int, int, bool]:
    """The cross-attention layers' saved bytes beyond a self-attention layer's (which the text model's accounting
    counts for every layer), the bytes one recomputed layer re-creates, and whether a gradient reaches their keys.

    Keys and values over the vision tokens: k_proj's output upcast to fp32 (saved by k_norm with its rsqrt), the
    normalised half copy (k_norm's weight gradient), and the keys and values SDPA keeps, repeated to every query head
    (transformers' sdpa_attention_forward uses repeat_kv whenever a mask is passed); saved when a gradient flows there:
    k_proj / v_proj train (a full fine-tune, LoRA on them) or the vision side does. On the text side the two tanh
    gates' and the text-row mask's products keep their half inputs."""
    v = s.model.vision
    c = DTYPE_BYTES[s.compute_dtype]
    kv, kvh = v["cross_kv_dim"], v["cross_kv_dim"] // v["cross_head_dim"]
    qd = v["cross_heads"] * v["cross_head_dim"]
    named = s.lora_targets if s.lora_targets != "all-linear" else ()
    kv_train = s.method == "full" or vision_trains or grad_flows(s) or s.lora_targets == "all-linear" or \
        any(t.endswith(("k_proj", "v_proj")) for t in named)
    n_x = len(v["cross_attention_layers"])
    per = 4 * kv + 4 * kvh + c * kv + 2 * c * qd
    cross = per_block = 0
    if kv_train:
        if s.recompute:  # every cross-attention decoder layer is a GradientCheckpointingLayer: one at a time
            per_block = per * Nv
        else:
            cross = n_x * per * Nv
        parts.append(f"{n_x} cross-attention layers' keys and values over the vision tokens {per:,} B/token each"
                     + (" (recomputed one layer at a time)" if s.recompute else ""))
    gates = 0 if s.recompute else n_x * 3 * c * s.model.hidden * s.batch * s.seq
    if gates:
        parts.append(f"the cross-attention layers' gates and row mask {gates:,} B")
    return cross + gates, per_block, kv_train


def _mllama_terms(s) -> VisionTerms:
    """Llama-3.2-Vision for one micro-batch: the vision model over every image's max_num_tiles tiles (the processor
    pads them), its output (the last and five intermediate hidden states, vision_output_dim wide) through the
    projector to cross_attention_states, which the text model's cross-attention layers project to keys and values
    (k_norm'd) over every vision token; the text model's own sequence carries no image tokens."""
    v = s.model.vision
    c = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    r = 4 if amp else c
    E, D, O = v["embed_dim"], v["vision_output_dim"], v["out_hidden_size"]
    n_img = s.batch * s.images
    P = n_img * tower_tokens(s)
    Nv = s.batch * cross_tokens(s)
    side = v["image_size"]
    pixels = n_img * tiles(s) * v["in_channels"] * side * side * 4
    tower, proj = trains(s)
    # the model output keeps the vision output (fp32 under autocast: the residual stream's); cross_attention_states,
    # the expanded cross-attention mask (text tokens x vision tokens, in the model's dtype) live through the text model
    outs = r * D * Nv + c * O * Nv
    mask = c * s.seq * Nv
    body = pixels + outs + mask
    parts = [f"{n_img} images × {tiles(s)} tiles: {P:,} tower tokens, {Nv:,} cross-attention tokens; fp32 pixel values "
             f"{pixels:,} B, the vision output and cross_attention_states {outs:,} B, the cross-attention mask "
             f"{mask:,} B"]
    cross, per_block, kv_train = _mllama_cross(s, Nv, tower or proj, parts)
    body += cross
    flows = grad_flows(s)
    tb = 0
    attn_mask = c * n_img * tower_tokens(s) ** 2  # the tiles' dense attention mask, shared by every layer
    norms_io = 2 * ((4 * E + 8) if amp else (c * E + 8)) * P  # layernorm_pre's and layernorm_post's inputs
    if tower:
        lb, gb_ = mllama_block_bytes(s, False), mllama_block_bytes(s, True)
        tb = (v["depth"] * lb + v["global_depth"] * gb_) * P + attn_mask + norms_io \
            + c * n_img * tiles(s) * v["in_channels"] * side * side
        parts.append(f"trained tower {v['depth']} + {v['global_depth']} layers × {lb:,} / {gb_:,} B/token, its dense "
                     f"attention mask {attn_mask:,} B (no gradient checkpointing in the vision model)")
    elif flows:
        fb = mllama_block_bytes(s, False, frozen=True)
        tb = (v["depth"] + v["global_depth"]) * fb * P + attn_mask + norms_io
        parts.append(f"frozen tower on the gradient path (enable_input_require_grads hooks its patch embedding; its "
                     f"layers are not checkpointed): {v['depth']} + {v['global_depth']} layers × {fb:,} B/token, its "
                     f"dense attention mask {attn_mask:,} B")
    body += tb
    if proj:
        pb = (c * D + (0 if s.method == "full" else 0)) * Nv  # the projector's half input
        body += pb
        parts.append(f"projector's input {pb:,} B")
    if not tower and not proj and not kv_train:
        parts.append("frozen tower and projector, frozen cross-attention keys / values: nothing saved over the "
                     "vision tokens")
    # the text model's backward ends (its recomputed layer) beside what the vision model saved and the pixel values
    # (tail); the vision model's backward runs last, beside every gradient: what it saved, its gradient stream (fp32
    # residual values) and one intermediate-sized gradient (end)
    tail = tb + pixels if tb else 0
    end = tail + (r * E + c * v["intermediate_size"]) * P if tb else 0
    # the vision gradients only exist once the text model's backward is over; the vision model's backward starts (its
    # last layer: the most it holds) before its own gradients exist
    late = (v["params"] - v["params_merger"] if tower else 0) + (v["params_merger"] if proj else 0)
    own = v["params"] - v["params_merger"] if tower else 0
    return VisionTerms(body, per_block, 0, "vision: " + "; ".join(parts), tail, end, late, own)


def terms(s) -> VisionTerms:
    """The vision tower's activations for one micro-batch (s.batch rows of s.images images)."""
    v = s.model.vision
    if not v or not s.images:
        return VisionTerms(0, 0, 0, "")
    if kind(s.model) == "llava":
        return _llava_terms(s)
    if kind(s.model) == "mllama":
        return _mllama_terms(s)
    c = DTYPE_BYTES[s.compute_dtype]
    amp = s.precision in ("amp-bf16", "amp-fp16")
    E, I = v["embed_dim"], v["intermediate_size"]
    m2 = v["spatial_merge_size"] ** 2
    P = s.batch * s.images * patches_per_image(s)
    k = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2
    pixels = P * k * 4  # the processor's fp32 pixel_values, on the GPU through the step
    tower, merger = trains(s)
    # the model's output keeps the tower's outputs (MultimodalBaseModelOutputWithPast.image_outputs): its last hidden
    # state over every patch and the merged image embeddings, alive through the text model's forward
    outs = P * E * c + (P // m2) * v["out_hidden_size"] * c
    parts = [f"{P:,} patches ({s.batch}×{s.images} images × {patches_per_image(s):,}): fp32 pixel values {pixels:,} B, "
             f"the tower's outputs kept in the model output {outs:,} B"]
    body = pixels + outs
    per_block = 0
    merger_saved = 0
    if tower:
        blk = block_bytes_per_patch(s)
        per_block = blk * P
        rope = 2 * 4 * v["head_dim"] * P  # the rotary cos and sin (fp32), shared by every block
        embed = c * k * P  # Conv3d's input cast to the weights' dtype, saved for its weight gradient
        if s.recompute:  # transformers checkpoints every Qwen2VLVisionBlock (GradientCheckpointingLayer)
            body += v["depth"] * c * E * P + rope + embed
            parts.append(f"{v['depth']} checkpointed block inputs {c}·E per patch; one block ({blk:,} B/patch) "
                         "comes back in backward")
        else:
            body += v["depth"] * per_block + rope + embed
            parts.append(f"{blk:,} B/patch/block × {v['depth']} blocks (norms, qkv, rotated q/k, SDPA, MLP)")
        parts.append("rotary cos/sin and the patch embedding's input")
    elif grad_flows(s):
        blk = block_bytes_per_patch(s, frozen=True)
        per_block = blk * P
        rope = 2 * 4 * v["head_dim"] * P
        body += v["depth"] * c * E * P + rope
        parts.append(f"frozen tower on the gradient path (enable_input_require_grads hooks its patch embedding): "
                     f"{v['depth']} checkpointed block inputs; one frozen block ({blk:,} B/patch) comes back in backward")
    if merger:
        norm, _ = _norm(v, c, amp, "merger_norm")
        M = v["merger_hidden"]
        mb = norm * P + 3 * c * M * (P // m2)  # ln_q over patches; linear 0's input and output, GELU's output
        body += mb
        merger_saved = mb
        parts.append(f"merger {mb:,} B (ln_q, linear inputs, GELU)")
    elif tower or grad_flows(s):
        # a frozen merger on the gradient path: ln_q's fp32 input and statistics, GELU's input (the frozen linears keep
        # no input)
        mb = _frozen_norm(v, amp, "merger_norm") * P + c * v["merger_hidden"] * (P // m2)
        body += mb
        merger_saved = mb
        parts.append(f"frozen merger on the gradient path {mb:,} B (ln_q's fp32 input, GELU's input)")
    if not tower and not merger and not grad_flows(s):
        parts.append("frozen tower and merger: nothing saved for backward")
    # a frozen tower's forward: the residual stream, and the MLP's fc1 output, 1.702·x / act and product of one block
    transient = 0 if tower else P * (c * E + c * E + 3 * c * I)
    tail = 0
    if tower or grad_flows(s):
        # the blocks' backward runs last: every gradient exists, the tower still holds what its blocks saved (its
        # outputs in the model output and the merger's saved tensors are gone by then), and inside a block's MLP
        # backward the gradient of its output (c·E) and, net of the saved product fc2's backward frees, one
        # intermediate-sized gradient (c·I) are alive
        tail = body - outs - merger_saved + (c * E + c * I) * P
    return VisionTerms(body, per_block, transient, "vision: " + "; ".join(parts), tail)


def notes(s) -> list[str]:
    v = s.model.vision
    if not v:
        return []
    tower, merger = trains(s)
    lo, hi = pixel_bounds(s)
    out = []
    if s.images and kind(s.model) == "mllama":
        side = v["image_size"]
        out.append(f"{s.images} image(s) per sample, each padded by the processor to {tiles(s)} tiles of {side}x{side} "
                   f"(--image-size does not change it): {tower_tokens(s):,} tokens per image in the vision model "
                   f"({v['patches_per_tile']:,} per tile padded to a multiple of 8), {cross_tokens(s):,} vision tokens "
                   f"per row in the {len(v['cross_attention_layers'])} cross-attention layers' keys and values; the "
                   f"text model runs the {s.seq:,} text tokens (one <|image|> token per image among them)")
        out.append("Mllama: the text model's cross-attention layers are counted as its self-attention layers over the "
                   "text tokens, plus their keys / values over the vision tokens, their gates and row mask (traced on "
                   "a tiny model, tests/test_vlm_llava_mllama.py)")
    elif s.images and fixed_size(s):
        side = v["image_size"]
        out.append(f"{s.images} image(s) per sample, each resized and center-cropped to {side}x{side} by the processor "
                   f"(--image-size does not change it): {patches_per_image(s):,} patches + the class token in the "
                   f"tower, {image_tokens(s):,} image tokens each; the text model runs {s.seq:,} text + "
                   f"{s.images * image_tokens(s):,} image tokens = {text_seq(s):,} (an upper bound where max_length "
                   "already counts the image tokens)")
    elif s.images:
        size = (f"{s.image_size[0]}x{s.image_size[1]} resized to {image_grid(s)[0] * v['patch_size']}x"
                f"{image_grid(s)[1] * v['patch_size']}" if s.image_size else f"the largest image max_pixels={hi:,} allows")
        out.append(f"{s.images} image(s) per sample, {size} ({lo:,} ≤ pixels ≤ {hi:,}): {patches_per_image(s):,} patches, "
                   f"{image_tokens(s):,} image tokens each; the text model runs {s.seq:,} text + "
                   f"{s.images * image_tokens(s):,} image tokens = {text_seq(s):,} (an upper bound where max_length "
                   "already counts the image tokens)")
    else:
        out.append(f"{s.model.id}: no images per sample (--images 0): the vision tower does not run")
    if tower and v.get("params_unreached"):
        out.append(f"the tower's layers after vision_feature_layer {v['feature_layer']} and its post_layernorm "
                   f"({v['params_unreached']:,} parameters) run but get no gradient: no gradient or optimizer state")
    what = ("the vision tower and merger train" if tower and merger else "the vision tower trains, the merger is frozen"
            if tower else "the merger trains, the vision tower is frozen" if merger else
            "vision tower and merger frozen (LLaMA-Factory's freeze_vision_tower / freeze_multi_modal_projector default)")
    if s.method != "full":
        what = "LoRA adapters on the text model's linears only; vision tower and merger frozen"
    if kind(s.model) == "llava":
        what = what.replace("merger", "projector")
    out.append(what + f" ({v['params']:,} vision parameters)")
    if s.quant != "none":
        out.append("quantized base: the vision tower is counted unquantized (bitsandbytes may quantize its linears "
                   "too; an upper bound)")
    if s.images and not tower:
        out.append("the frozen tower's forward working memory precedes the text model's activations (not at the peak)")
    if grad_flows(s):
        out.append("gradient checkpointing calls enable_input_require_grads, which also hooks the vision tower's patch "
                   "embedding (transformers >= 5): backward runs through the frozen tower (its block inputs kept)"
                   + ("; traced 3-7 % under the measured peak on a tiny model (not located)"
                      if kind(s.model) == "qwen2_vl" else ""))
    if s.method != "full" and s.lora_targets == "all-linear":
        out.append("LoRA on all linears: memlint counts adapters on the text model's linears, as LLaMA-Factory targets "
                   "them (patch_target_modules); peft's own all-linear (TRL, a plain script) adapts the vision tower's "
                   "and merger's linears too (it excludes only the output layer): more adapters, not counted"
                   .replace("merger", "projector" if kind(s.model) == "llava" else "merger"))
    if kind(s.model) in ("llava", "mllama"):
        out.append(f"vision accounting traced on transformers 5.24's {'LLaVA (CLIP tower)' if kind(s.model) == 'llava' else 'Mllama'} "
                   "code with SDPA on CPU tensors (tests/test_vlm_llava_mllama.py): every traced peak within 3 %, the "
                   + ("activations component 5-7 % under the trace with a frozen tower (the cross-attention layers' "
                      "text side is counted as self-attention layers')" if kind(s.model) == "mllama" else
                      "activations component 7.8 % under the trace with a frozen tower under recompute")
                   + "; eager attention in the tower and CUDA's own SDPA kernel choice are not traced")
    else:
        out.append("vision accounting traced on transformers 5.24's Qwen2-VL / Qwen2.5-VL code with SDPA "
                   "(tests/test_vlm.py); flash-attention's varlen path and eager attention are not traced")
    return out
