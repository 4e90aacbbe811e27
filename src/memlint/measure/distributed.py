"""Per-rank ground truth: run a real multi-process training step (FSDP2, DDP) on CPU ranks
and measure each rank's live tensor bytes with the storage tracker.

    from memlint.measure.distributed import measure_ranks
    ranks = measure_ranks(setup, engine="fsdp", ranks=4)   # one RankMeasurement per rank

Each rank is a spawned process in a gloo process group; the model is built from its config
with random weights, wrapped (`fully_shard` per decoder layer and at the root, as accelerate's
transformer-layer wrap policy does, or `DistributedDataParallel`), and trained for `steps`
steps with the optimizer Trainer would build. Sharded parameters are DTensors: the tracker
counts their local shards. FSDP2 frees and re-allocates the all-gather buffers with
`storage.resize_`, which bypasses the dispatcher, so its `alloc_storage`/`free_storage` are
wrapped to tell the tracker, as the CUDA allocator would see them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from memlint.errors import MemlintError
from memlint.estimate.setup import Setup
from memlint.library.api import attention

ENGINES = ("none", "ddp", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid", "tp")
PHASES = ("forward", "backward", "optimizer")


@dataclass
class RankMeasurement:
    rank: int
    ranks: int
    engine: str
    components: dict[str, int]   # weights (local shards), buffers, gradients, optimizer, activations, logits
    phases: dict[str, int]       # step `steps` peak per phase
    peak: int
    phase: str
    runtime_s: float
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "ranks": self.ranks, "engine": self.engine, "components": dict(self.components),
                "phases": dict(self.phases), "peak": self.peak, "phase": self.phase,
                "runtime_s": round(self.runtime_s, 2), "notes": list(self.notes)}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_ranks(setup: Setup, *, engine: str = "fsdp", ranks: int = 2, nodes: int = 1, steps: int = 2,
                  seed: int = 0, start_method: str = "forkserver") -> list[RankMeasurement]:
    """Start `ranks` CPU processes that train `setup` under `engine` and return each rank's
    measurement (sorted by rank). `nodes` > 1 with engine fsdp_hybrid shards within groups of
    ranks // nodes and replicates across them (HSDP on a 2-D device mesh).

    start_method "forkserver" (the default) imports torch, transformers and peft once in the
    server and forks every rank from it; "fork" forks the caller itself, which is safe only
    in a parent that has not run torch's intra-op thread pool yet; "spawn" imports per rank."""
    import torch.multiprocessing as mp

    if engine not in ENGINES:
        raise MemlintError(f"unknown engine {engine!r}; expected one of: {', '.join(ENGINES)}")
    if engine == "none" and ranks != 1:
        raise MemlintError("engine 'none' runs one rank")
    if engine == "tp" and (ranks != setup.gpus or setup.cp != 1 or setup.shard not in ("none", "fsdp")):
        raise MemlintError("engine 'tp' runs setup.gpus ranks: tensor parallel, with FSDP full shard over the "
                           "data-parallel ranks when setup.shard is fsdp; no context parallelism")
    if ranks < 1 or nodes < 1 or ranks % nodes:
        raise MemlintError("ranks must be a positive multiple of nodes")
    if setup.quant != "none":
        raise MemlintError("bitsandbytes layers do not run on CPU ranks: measure full or LoRA setups")
    if start_method == "fork":
        import peft  # noqa: F401  (imported once here, inherited by every rank)
        import transformers.trainer  # noqa: F401
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(["torch", "torch.distributed.fsdp", "peft", "transformers.trainer",
                                    "memlint.measure.distributed"])
    queue = ctx.SimpleQueue()
    port = _free_port()
    mp.start_processes(_worker, args=(ranks, nodes, port, setup, engine, steps, seed, queue), nprocs=ranks,
                       join=True, start_method=start_method)
    out = [queue.get() for _ in range(ranks)]
    return sorted((RankMeasurement(**d) for d in out), key=lambda r: r.rank)


# --------------------------------------------------------------------------- one rank
def _tracker_class() -> type:
    from torch.distributed.tensor import DTensor

    from memlint.measure.tracker import LiveBytes

    class RankLiveBytes(LiveBytes):
        """LiveBytes that sees through DTensors to the local shard they hold."""

        def track(self, t: Any) -> None:
            if isinstance(t, DTensor):
                t = t._local_tensor
            super().track(t)

    return RankLiveBytes


@contextlib.contextmanager
def _fsdp_storage_hooks(tracker: Any):
    """Report FSDP2's in-place storage resizes (free after reshard, re-alloc before the
    next all-gather) to the tracker."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    orig_alloc, orig_free = _fsdp_param.alloc_storage, _fsdp_param.free_storage

    def alloc_storage(tensor: Any) -> None:
        orig_alloc(tensor)
        tracker.track(tensor)

    def free_storage(tensor: Any) -> None:
        orig_free(tensor)
        tracker.track(tensor)

    _fsdp_param.alloc_storage, _fsdp_param.free_storage = alloc_storage, free_storage
    _fsdp_param_group.alloc_storage = alloc_storage
    try:
        yield
    finally:
        _fsdp_param.alloc_storage, _fsdp_param.free_storage = orig_alloc, orig_free
        _fsdp_param_group.alloc_storage = orig_alloc


def _local(t: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


def tp_plan(setup: Setup) -> dict[str, Any]:
    """torch's own tensor-parallel styles for an HF Llama-like model, as the setup's stack lays them out.

    transformers: its LlamaConfig.base_model_tp_plan (q/k/v/gate/up ColwiseParallel, o/down
    RowwiseParallel, embeddings and norms left replicated) and LlamaForCausalLM._tp_plan
    lm_head 'colwise_gather_output' (ColwiseParallel(output_layouts=Replicate())).
    torchtitan (always sequence parallel): its apply_tp: embeddings RowwiseParallel(output Shard(1)),
    every norm SequenceParallel, attention / MLP inputs all-gathered from Shard(1) by PrepareModuleInput,
    o/down RowwiseParallel(output Shard(1)), lm_head ColwiseParallel(input Shard(1)), its output
    Shard(-1) under loss parallelism (the loss then runs inside `loss_parallel()`), else Replicate."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

    from memlint.estimate import tensor_parallel as tpf

    plan: dict[str, Any] = {}
    sp = tpf.sequence_parallel(setup)
    for p in ("q_proj", "k_proj", "v_proj"):
        plan[f"model.layers.*.self_attn.{p}"] = ColwiseParallel()
    for p in ("gate_proj", "up_proj"):
        plan[f"model.layers.*.mlp.{p}"] = ColwiseParallel()
    rowwise = (lambda: RowwiseParallel(output_layouts=Shard(1))) if sp else RowwiseParallel
    plan["model.layers.*.self_attn.o_proj"] = rowwise()
    plan["model.layers.*.mlp.down_proj"] = rowwise()
    if tpf.stack(setup)["embeddings"] == "vocab":
        plan["model.embed_tokens"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1) if sp else Replicate())
    loss_par = tpf.loss_parallel(setup)
    out = Shard(-1) if loss_par else Replicate()
    plan["lm_head"] = ColwiseParallel(input_layouts=Shard(1) if sp else Replicate(), output_layouts=out,
                                      use_local_output=not loss_par)
    if sp:
        for n in ("input_layernorm", "post_attention_layernorm"):
            plan[f"model.layers.*.{n}"] = SequenceParallel()
        plan["model.norm"] = SequenceParallel()
        plan["model.layers.*.self_attn"] = PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                              desired_input_kwarg_layouts={"hidden_states": Replicate()})
        plan["model.layers.*.mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return plan


def _wrap(model: Any, engine: str, ranks: int, nodes: int, setup: Setup | None = None) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    if engine == "tp":
        from torch.distributed.tensor.parallel import parallelize_module

        if setup.dp == 1:
            return parallelize_module(model, init_device_mesh("cpu", (ranks,)), tp_plan(setup))
        # 2-D: TP within each group of setup.tp ranks, FSDP2 over the data-parallel ranks (torchtitan's order:
        # parallelize first, then fully_shard each decoder layer and the root on the dp mesh)
        mesh = init_device_mesh("cpu", (setup.dp, setup.tp), mesh_dim_names=("dp", "tp"))
        model = parallelize_module(model, mesh["tp"], tp_plan(setup))
        if setup.shard == "fsdp":
            from torch.distributed.fsdp import fully_shard

            blocks = set()
            for m in model.modules():
                blocks |= set(getattr(m, "_no_split_modules", None) or ())
            for layer in [m for m in model.modules() if type(m).__name__ in blocks]:
                fully_shard(layer, mesh=mesh["dp"])
            fully_shard(model, mesh=mesh["dp"])
        else:
            raise MemlintError("engine 'tp' with data parallelism measures FSDP (setup.shard fsdp) only")
        return model

    if engine == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    if engine == "fsdp_hybrid":
        mesh = init_device_mesh("cpu", (nodes, ranks // nodes), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (ranks,))
    reshard = engine != "fsdp_shard_grad_op"
    mp: dict = {}
    if setup is not None:
        from memlint.estimate.sharding import fsdp_mixed_precision

        if fsdp_mixed_precision(setup):  # accelerate's policy under bf16/fp16: param_dtype = reduce_dtype = half
            import torch
            from torch.distributed.fsdp import MixedPrecisionPolicy

            half = torch.bfloat16 if setup.precision == "amp-bf16" else torch.float16
            mp = {"mp_policy": MixedPrecisionPolicy(param_dtype=half, reduce_dtype=half)}
    # accelerate's TRANSFORMER_BASED_WRAP: one unit per `_no_split_modules` block
    # (the decoder layers); what is left (embeddings, final norm, lm_head) is the root's.
    blocks = set()
    for m in model.modules():
        blocks |= set(getattr(m, "_no_split_modules", None) or ())
    for layer in [m for m in model.modules() if type(m).__name__ in blocks]:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, **mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, **mp)
    return model


def _worker(rank: int, ranks: int, nodes: int, port: int, setup: Setup, engine: str, steps: int, seed: int,
            queue: Any) -> None:
    import torch
    import torch.distributed as dist

    from memlint.measure.core import _apply_lora, _build_model, _unique_params, mark_head
    from memlint.measure.cuda_emulation import cuda_kernels
    from memlint.measure.optim import build_optimizer
    from memlint.measure.tracker import storage_bytes

    import peft  # noqa: F401  (module-level tensors must not be counted as the step's)
    import transformers.trainer  # noqa: F401

    t0 = time.perf_counter()
    torch.set_num_threads(1)  # ranks share the machine's cores
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if engine != "none":
        dist.init_process_group("gloo", rank=rank, world_size=ranks)
    notes: list[str] = []
    try:
        torch.manual_seed(seed)
        model = _build_model(setup, "cpu", attention()[setup.attn].trace_as)
        if setup.method == "lora":
            model = _apply_lora(model, setup, setup.lora_dropout)
        tracker = _tracker_class()()
        with contextlib.ExitStack() as stack:
            stack.enter_context(tracker)
            tracker.track_all(list(model.parameters()) + list(model.buffers()))
            if engine.startswith("fsdp") or (engine == "tp" and setup.shard == "fsdp"):
                stack.enter_context(_fsdp_storage_hooks(tracker))
            if engine != "none":
                model = _wrap(model, engine, ranks, nodes, setup)
            # what CUDA runs: its autocast op lists, its SDPA kernels, its fused dropout (measure/cuda_emulation.py)
            stack.enter_context(cuda_kernels(fake=False))
            if setup.recompute:
                inner = model.module if engine == "ddp" else model
                inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
                if setup.method == "lora":
                    inner.enable_input_require_grads()
            model.train()
            params = _unique_params(model)
            weights = storage_bytes(_local(p) for p in params)
            buffers_after_wrap = tracker.memory_allocated() - weights
            trainable = [p for p in params if p.requires_grad]
            optimizer, onotes = build_optimizer(setup.optim, model.module if engine == "ddp" else model,
                                                split_dtensors=engine == "tp")
            notes += onotes
            if setup.precision in ("amp-bf16", "amp-fp16"):
                amp = torch.bfloat16 if setup.precision == "amp-bf16" else torch.float16
                autocast = lambda: torch.autocast("cpu", dtype=amp)  # noqa: E731
            else:
                autocast = contextlib.nullcontext
            inner = model.module if engine == "ddp" else model
            marks, handle = mark_head(inner.get_output_embeddings(), tracker)
            phases, comp = _rank_steps(model, setup, trainable, optimizer, tracker, marks, autocast, steps, seed,
                                       engine)
            comp = {"weights": weights, "buffers": buffers_after_wrap, **comp}
            handle.remove()
        phase = max(PHASES, key=lambda k: phases[k])
        queue.put(RankMeasurement(rank=rank, ranks=ranks, engine=engine, components=comp, phases=phases,
                                  peak=phases[phase], phase=phase, runtime_s=time.perf_counter() - t0,
                                  notes=notes).__dict__)
    finally:
        if engine != "none":
            dist.destroy_process_group()


def _loss_context(setup: Setup, engine: str) -> Any:
    """torch's loss_parallel() around the loss and its backward when the logits stay vocab-sharded."""
    if engine == "tp":
        from memlint.estimate import tensor_parallel as tpf

        if tpf.loss_parallel(setup):
            from torch.distributed.tensor.parallel import loss_parallel

            return loss_parallel()
    return contextlib.nullcontext()


def _rank_steps(model: Any, setup: Setup, trainable: list, optimizer: Any, tracker: Any, marks: dict,
                autocast: Any, steps: int, seed: int, engine: str = "fsdp") -> tuple[dict[str, int], dict[str, int]]:
    """One rank's training steps: (the last step's phase peaks, its gradients, optimizer state,
    activations and logits)."""
    import torch

    from memlint.measure.optim import state_tensors
    from memlint.measure.tracker import storage_bytes

    gen = torch.Generator().manual_seed(seed + 1)
    phases: dict[str, int] = {}
    comp: dict[str, int] = {}
    mark = getattr(tracker, "begin_phase", lambda label: None)  # phase markers for the allocator replay
    for _step in range(steps):
        phases = {"forward": 0, "backward": 0}
        activations = logits = 0
        for _micro in range(setup.grad_accum):
            marks.clear()
            ids = torch.randint(0, setup.model.vocab, (setup.batch, setup.seq), generator=gen)
            mark((_step + 1, "forward"))
            tracker.reset_peak_memory_stats()
            start = tracker.memory_allocated()
            kw: dict = {}
            if engine == "tp":
                # every TP rank runs the same micro-batch; under sequence parallelism the embeddings hand each
                # rank a sequence shard, so the positions (and the causal mask) are given for the whole sequence
                kw["position_ids"] = torch.arange(setup.seq).unsqueeze(0)
            with autocast(), _loss_context(setup, engine):
                loss = model(input_ids=ids, labels=ids, **kw).loss
                if setup.grad_accum > 1:
                    loss = loss / setup.grad_accum
                after = tracker.max_memory_allocated()
                phases["forward"] = max(phases["forward"], marks.get("pre_head_peak", 0), after)
                activations = max(activations, marks["head"] - start)
                logits = max(logits, after - marks["head"])
                mark((_step + 1, "backward"))
                tracker.reset_peak_memory_stats()
                loss.backward()
            del loss, ids
            phases["backward"] = max(phases["backward"], tracker.max_memory_allocated())
        grads = storage_bytes(_local(p.grad) for p in trainable if p.grad is not None)
        mark((_step + 1, "optimizer"))
        tracker.reset_peak_memory_stats()
        if engine != "tp":  # TP mixes DTensor and replicated plain parameters, which one foreach norm cannot take
            torch.nn.utils.clip_grad_norm_(trainable, 1.0, foreach=True)
        optimizer.step()
        state = storage_bytes(_local(t) for t in state_tensors(optimizer))
        optimizer.zero_grad(set_to_none=True)
        phases["optimizer"] = tracker.max_memory_allocated()
        comp = {"gradients": grads, "optimizer": state, "activations": activations, "logits": logits}
    return phases, comp
