"""One rank of an N-GPU FSDP2 run at full size, traced on CPU: FakeTensorMode and torch's fake process group.

    from memlint.measure.fake_ranks import trace_rank
    r = trace_rank(Setup(resolve("meta-llama/Llama-3.1-8B"), gpus=8, shard="fsdp", ...))
    r["phases"], r["reserved"]          # rank 0's step-2 live-byte and max_memory_reserved peaks per phase

measure/distributed.py runs real ranks (gloo) on a tiny model: the layout is exact there but every tensor is
small, so the caching allocator's segments say little about a real run. Here rank 0 of `setup.gpus` ranks runs
alone: the process group is torch's `fake` backend (collectives return at once; their output buffers are
allocated as on a real rank), every tensor is a FakeTensor (shapes and dtypes, no data), the model is the
catalog's at its real size. The storage tracker counts rank 0's live tensors (DTensors by their local shard;
FSDP2's all-gather buffers through its `alloc_storage` / `free_storage`), and its allocation sequence is replayed
through the allocator model (measure/allocator.py) for `max_memory_reserved`. What the training step runs is
distributed.py's (`_rank_steps`): memlint's step, FSDP2 wrapped as accelerate's transformer-layer policy does,
with accelerate's mixed-precision policy under bf16 / fp16 autocast over fp32 weights.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from memlint.errors import MemlintError
from memlint.estimate.setup import Setup
from memlint.library.api import attention

SHARDS = {"fsdp": "fsdp", "fsdp_shard_grad_op": "fsdp_shard_grad_op", "fsdp_hybrid": "fsdp_hybrid"}


def _fake_group(world: int) -> None:
    """(Re)start the fake process group with `world` ranks, this process rank 0."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_world_size() == world:
            return
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)


def trace_rank(setup: Setup, *, steps: int = 2, seed: int = 0, alloc_conf: str | None = None) -> dict[str, Any]:
    """Rank 0's step `steps` of `setup` (shard fsdp / fsdp_shard_grad_op / fsdp_hybrid over setup.gpus ranks):
    {"phases": live-byte peaks, "reserved": replayed max_memory_reserved per phase, "reserved_peak",
    "expandable_peak", "components"}."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memlint.measure.allocator import AllocatorConfig, replay
    from memlint.measure.core import _apply_lora, _build_model, _unique_params, _unpacked_sequences_on_fake, mark_head
    from memlint.measure.cuda_emulation import cuda_kernels
    from memlint.measure.distributed import _fsdp_storage_hooks, _local, _rank_steps, _tracker_class, _wrap
    from memlint.measure.optim import build_optimizer
    from memlint.measure.tracker import storage_bytes

    import peft  # noqa: F401  (module-level tensors must not be counted as the step's)
    import transformers.trainer  # noqa: F401

    engine = SHARDS.get(setup.shard)
    if engine is None or setup.gpus < 2:
        raise MemlintError("trace_rank traces FSDP (shard fsdp, fsdp_shard_grad_op or fsdp_hybrid) over 2 or more GPUs")
    if setup.quant != "none" or setup.tp > 1 or setup.cp > 1:
        raise MemlintError("trace_rank traces unquantized data-parallel FSDP runs only")
    _fake_group(setup.gpus)
    torch.manual_seed(seed)
    model = _build_model(setup, "meta", attention()[setup.attn].trace_as)
    if setup.method == "lora":
        model = _apply_lora(model, setup, setup.lora_dropout)
    tracker = _tracker_class()()
    with contextlib.ExitStack() as stack:
        if setup.recompute:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if setup.method == "lora":
                model.enable_input_require_grads()
        model = _wrap(model, engine, setup.gpus, setup.nodes, setup)
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        model.to_empty(device="cpu")
        stack.enter_context(tracker)
        stack.enter_context(_fsdp_storage_hooks(tracker))
        stack.enter_context(_unpacked_sequences_on_fake())
        stack.enter_context(cuda_kernels(fake=True))  # CUDA's autocast lists, SDPA kernels and fused dropout
        params = _unique_params(model)
        tracker.track_all([_local(p) for p in params] + list(model.buffers()))
        model.train()
        trainable = [p for p in params if p.requires_grad]
        optimizer, _ = build_optimizer(setup.optim, model, fake=True)
        if setup.precision in ("amp-bf16", "amp-fp16"):
            amp = torch.bfloat16 if setup.precision == "amp-bf16" else torch.float16
            autocast = lambda: torch.autocast("cpu", dtype=amp)  # noqa: E731
        else:
            autocast = contextlib.nullcontext
        marks, handle = mark_head(model.get_output_embeddings(), tracker)
        phases, comp = _rank_steps(model, setup, trainable, optimizer, tracker, marks, autocast, steps, seed, engine)
        handle.remove()
        weights = storage_bytes(_local(p) for p in params)
    cfg = AllocatorConfig.parse(alloc_conf)
    r = replay(tracker.events, cfg)
    last = {p: r.phases[(steps, p)].reserved for p in ("forward", "backward", "optimizer") if (steps, p) in r.phases}
    e = replay(tracker.events, dataclasses.replace(cfg, expandable_segments=True)) if not cfg.expandable_segments else r
    exp = {p: e.phases[(steps, p)].reserved for p in last}
    return {"phases": phases, "reserved": last, "reserved_peak": max(last.values()),
            "expandable_peak": max(exp.values()), "components": {"weights": weights, **comp}}
