"""Per-rank layout of a data-parallel run (DDP, ZeRO-1/2/3, FSDP full / grad-op / hybrid):
what each GPU keeps of the model state, what is gathered or staged for communication.

The engine facts (bucket sizes, what FSDP keeps gathered) live in data/distributed.json;
`estimate()` in core.py turns the layout into phases. Activations and logits are never
sharded: every rank runs its own micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlint import data
from memlint.estimate.setup import DTYPE_BYTES, PARAM_SHARDS, Setup

# Which states each sharding splits: (weights, gradients, optimizer).
SPLITS = {
    "none": (False, False, False),
    "zero1": (False, False, True),
    "zero2": (False, True, True),
    "fsdp_shard_grad_op": (True, True, True),  # sharded at rest; gathered from forward to backward
    "zero3": (True, True, True),
    "fsdp": (True, True, True),
    "fsdp_hybrid": (True, True, True),
}


@dataclass(frozen=True)
class Layout:
    """Per-rank bytes a distributed engine adds or removes, each with its formula."""

    divisors: tuple[int, int, int]   # weights, gradients, optimizer
    gathered: int = 0                # full parameters alive at the forward/backward peaks
    gathered_formula: str = ""
    gathered_backward: int | None = None  # when backward holds less than forward (None: the same)
    persistent: int = 0              # buffers alive in every phase (DDP buckets, ZeRO-3 bucket)
    backward: int = 0                # buffers alive through the whole backward (DeepSpeed ipg buckets)
    backward_tail: int = 0           # buffers alive as gradients finish (FSDP reduce-scatter staging)
    buffers_formula: str = ""
    notes: tuple[str, ...] = ()

    @property
    def buffers(self) -> int:
        return self.persistent + max(self.backward, self.backward_tail)


def facts() -> dict:
    return data.load("distributed.json")


def _root_params(s: Setup) -> int:
    """Parameters outside the decoder layers: embeddings, lm_head (untied) and the final
    norm. FSDP wraps each decoder layer; these stay in the root unit."""
    g = s.model.groups
    return g["embeddings"] + g.get("lm_head", 0) + s.model.hidden


def _root_weight_bytes(s: Setup) -> int:
    """Bytes per root parameter as loaded: fp32 after kbit prep on a quantized base."""
    if s.upcasts_kbit:
        return 4
    return s.weight_bytes


def fsdp_mixed_precision(s: Setup) -> bool:
    """FSDP over fp32 weights under bf16/fp16 mixed precision: accelerate gives FSDP a mixed-precision policy with
    param_dtype = reduce_dtype = the autocast dtype (utils/dataclasses.py FullyShardedDataParallelPlugin
    set_mixed_precision), so each unit's all-gather casts its shard to the half dtype and its gradients are computed
    and reduce-scattered in it; autocast finds half weights and makes no copies (traced: benchmarks/per_rank.py's
    mixed-precision rows, FSDP2 with MixedPrecisionPolicy)."""
    return (s.shard.startswith("fsdp") and s.precision in ("amp-bf16", "amp-fp16") and s.dtype == "fp32"
            and s.quant == "none")


def layout(s: Setup, accounting: str, weights: int, gradients: int) -> Layout:
    """`weights` / `gradients`: the unsharded bytes of all weights / trainable gradients."""
    n = s.shard_group
    split = SPLITS[s.shard]
    divisors = tuple(n if on else 1 for on in split)
    if accounting == "textbook" or (s.dp == 1 and n == 1):
        return Layout(divisors)  # type: ignore[arg-type]

    f = facts()
    notes: list[str] = [f"per rank of {s.gpus}: activations and logits are not sharded (each rank runs its own "
                        f"micro-batch of {s.batch})" if s.tp * s.cp == 1 else
                        f"over the {s.dp} data-parallel ranks: each runs its own micro-batch of {s.batch}"]
    if s.shard == "fsdp_hybrid":
        notes.append(f"hybrid shard: states split over the {n} GPUs of a node, replicated over {s.nodes} nodes")
    grad_bytes = gradients // max(1, _trainable_elems(s)) if gradients else DTYPE_BYTES[s.dtype]
    kw: dict = {}

    if s.shard == "none":
        # DDP: the Reducer's flat buckets hold a copy of every gradient from construction on.
        ddp = f["ddp"]
        kw.update(persistent=gradients,
                  buffers_formula=f"DDP gradient buckets ({ddp['bucket_cap_mb']} MiB each) holding a copy of all "
                                  f"{gradients:,} B of gradients, allocated at construction")
        notes.append("DDP: gradient buckets are a second copy of the gradients (gradient_as_bucket_view=False)")
    elif s.shard in ("zero1", "zero2", "zero3"):
        ds = f["deepspeed"]
        count = 2 if ds["overlap_comm"][s.shard] else 1
        bucket = count * ds["reduce_bucket_size"] * grad_bytes
        what = (f"{count} × reduce_bucket_size {ds['reduce_bucket_size']:.0e} × {grad_bytes} B "
                f"(DeepSpeed default{', overlap_comm' if count == 2 else ''})")
        if s.shard == "zero3":
            kw.update(persistent=bucket, buffers_formula=what + ", alive all run")
        else:
            kw.update(backward=bucket, buffers_formula=what + ", alive through backward")
        notes.append("DeepSpeed buckets at their defaults; HF Trainer's 'auto' sets reduce_bucket_size to hidden²")
    if s.shard == "zero3":
        # DeepSpeed gathers module by module and prefetches ahead: two layers' linear weights.
        m = s.model
        layer = sum(l.in_features * l.out_features * (l.count // m.layers or 1) for l in m.layer_linears())
        kw.update(gathered=2 * layer * s.weight_bytes,
                  gathered_formula=f" + 2 gathered layers ({2 * layer:,} params)")
        notes.append("ZeRO-3: two layers' full weights gathered at a time (prefetch)")
    elif s.shard.startswith("fsdp"):
        _fsdp_layout(s, f["fsdp"], weights, gradients, grad_bytes, kw, notes)
    return Layout(divisors, notes=tuple(notes), **kw)  # type: ignore[arg-type]


def _fsdp_layout(s: Setup, fs: dict, weights: int, gradients: int, grad_bytes: int, kw: dict, notes: list[str]) -> None:
    """FSDP's gathered units and reduce-scatter staging (into `kw`, Layout's fields), and what it says (`notes`)."""
    root = _root_params(s)
    root_b = root * _root_weight_bytes(s)
    layer_b = max(0, weights - root_b) // s.model.layers
    f8_layer, f8_root = _float8_gather_savings(s)
    weights, root_b, layer_b = weights - f8_layer * s.model.layers - f8_root, root_b - f8_root, layer_b - f8_layer
    half = DTYPE_BYTES[s.compute_dtype]
    mp = fsdp_mixed_precision(s)
    if mp:  # the units are gathered in param_dtype
        weights, root_b, layer_b = weights * half // 4, root_b * half // 4, layer_b * half // 4
    k = fs["gathered_layers_at_peak"]
    if s.shard == "fsdp_shard_grad_op":
        # reshard_after_forward=False: every unit stays gathered until its backward.
        # The last all-gather's buffer is let go at the root's post-forward; backward
        # gathers nothing more.
        kw.update(gathered=weights + k * layer_b, gathered_backward=weights,
                  gathered_formula=f" + all weights gathered from forward to backward ({weights:,} B) "
                                   f"+ {k} layer's all-gather buffer in forward ({layer_b:,} B)")
    else:
        kw.update(gathered=root_b + k * layer_b,
                  gathered_formula=f" + root unit gathered ({root:,} params: embeddings, final norm, lm_head) "
                                   f"+ {k} layer ({layer_b:,} B{', its float8 linears in float8' if f8_layer else ''})")
    root_g = root * grad_bytes if s.method == "full" else 0  # adapters live in the layers only
    layer_g = max(0, gradients - root_g) // s.model.layers
    if mp:  # the unsharded gradients are computed and reduce-scattered in reduce_dtype
        layer_g = layer_g * half // grad_bytes
    kw.update(backward_tail=fs["reduce_scatter_staging_layers"] * layer_g,
              buffers_formula=f"reduce-scatter staging: one layer's unsharded gradients ({layer_g:,} B), "
                              f"during backward")
    notes.append("FSDP SHARD_GRAD_OP: parameters stay gathered from forward to the end of backward"
                 if s.shard == "fsdp_shard_grad_op" else
                 "FSDP: the root unit (embeddings, final norm, lm_head) stays gathered from forward through "
                 "backward; one decoder layer's all-gather output is alive at the peak")
    if s.method != "full":
        notes.append("FSDP with LoRA: the frozen base is sharded like the adapters")
    if mp:
        notes.append(f"FSDP mixed precision (accelerate's param_dtype = reduce_dtype = {s.compute_dtype}): each unit "
                     "is gathered in it, one at a time; autocast makes no half copies of the weights")


def _float8_gather_savings(s: Setup) -> tuple[int, int]:
    """(per decoder layer, root unit) bytes FSDP2's float8 all-gather does not gather: torchao's
    WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather casts the shard and all-gathers its float8 data
    (1 B an element) instead of the weight's dtype, for the linears made Float8Linear (lm_head with "all")."""
    if not s.float8_all_gather:
        return 0, 0
    per = s.weight_bytes - 1
    m = s.model
    layer = sum(l.in_features * l.out_features * l.count for l in m.layer_linears()) // m.layers * per
    return layer, (m.hidden * m.vocab * per if s.float8 == "all" else 0)


def _trainable_elems(s: Setup) -> int:
    from memlint.estimate.model_state import trainable_params

    return trainable_params(s)


def offloaded_to_cpu(s: Setup) -> tuple[str, ...]:
    """The components a CPU offload setting takes off the GPU."""
    if s.offload == "none":
        return ()
    if s.offload == "optimizer":
        return ("optimizer",)
    if s.shard in PARAM_SHARDS and s.shard != "zero3":
        return ("weights", "gradients", "optimizer")  # FSDP CPUOffloadPolicy: the optimizer steps on CPU
    return ("weights", "optimizer")
