"""torchtitan's op-level selective activation checkpointing policy, for the trace.

Copied from torchtitan v0.2.2 (commit 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce):
`_op_sac_save_list` of torchtitan/models/llama3/infra/parallelize.py and `_custom_policy` /
`selective_checkpointing_context_fn` of `_apply_op_sac` in torchtitan/distributed/activation_checkpoint.py
(no mm shapes forced to recompute: `per_op_sac_force_recompute_mm_shapes_by_fqns` names the MoE router
only). It is the trace's ground truth, kept apart from the estimator's reading of it
(data/checkpointing.json, estimate/activations.py): the trace runs torch's own
`create_selective_checkpoint_contexts` with this policy inside transformers' non-reentrant
`torch.utils.checkpoint.checkpoint` of each decoder layer.

One substitution, for the CPU trace only: torch's CPU build dispatches scaled_dot_product_attention to
`_scaled_dot_product_flash_attention_for_cpu` (not in torchtitan's list, which names the CUDA kernels);
it returns the same two tensors as CUDA's flash kernel (the output and the fp32 logsumexp), and is saved
in its place.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Any


def op_sac_save_list(cpu_stand_in: bool = True) -> set:
    import torch

    ops = {
        torch.ops.aten.mm.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten._scaled_dot_product_cudnn_attention.default,
        torch.ops.aten._scaled_dot_product_attention_math.default,
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        # for low precision training, it's useful to always save
        # the result of max, since the absolute maximum is
        # used to compute the scaling factor for quantization.
        torch.ops.aten.max.default,
        torch._higher_order_ops.flex_attention,
    }
    # torchtitan also lists torch.ops.torch_attn._varlen_attn and inductor_compiled_code, present only with
    # its own attention library and under torch.compile
    for root, path in ((torch.ops, "torch_attn._varlen_attn.default"), (torch._higher_order_ops, "inductor_compiled_code")):
        try:
            obj = root
            for part in path.split("."):
                obj = getattr(obj, part)
            ops.add(obj)
        except (AttributeError, RuntimeError):
            pass
    if cpu_stand_in:
        ops.add(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)
    return ops


def _get_custom_policy(meta: dict, op_sac_save_list: set, mm_recompute_shapes: set) -> Any:
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    def _custom_policy(ctx, func, *args, **kwargs):
        if (
            func == torch.ops.aten._to_copy.default
            and "cuda" in str(args[0].device)
            and "device" in kwargs
            and str(kwargs["device"]) == "cpu"
        ):
            return CheckpointPolicy.MUST_SAVE

        mode = "recompute" if ctx.is_recompute else "forward"
        mm_count_key = f"{mode}_mm_count"
        if func == torch.ops.aten.mm.default:
            if args[1].shape in mm_recompute_shapes:
                return CheckpointPolicy.PREFER_RECOMPUTE
            meta[mm_count_key] += 1
        # Saves output of all compute ops, except every second mm
        to_save = func in op_sac_save_list and not (
            func == torch.ops.aten.mm.default and meta[mm_count_key] % 2 == 0
        )
        return (
            CheckpointPolicy.MUST_SAVE
            if to_save
            else CheckpointPolicy.PREFER_RECOMPUTE
        )

    return _custom_policy


def _selective_checkpointing_context_fn(op_sac_save_list: set) -> Any:
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    meta = defaultdict(int)
    return create_selective_checkpoint_contexts(_get_custom_policy(meta, op_sac_save_list, set()))


def context_fn(cpu_stand_in: bool = True) -> Any:
    """`context_fn` for torch.utils.checkpoint.checkpoint: a fresh mm count per checkpointed call, as
    torchtitan's selective_checkpointing_context_fn."""
    return functools.partial(_selective_checkpointing_context_fn, op_sac_save_list(cpu_stand_in))
