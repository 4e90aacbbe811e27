"""Who runs the step over how many processes: accelerate's Accelerator and plugins, deepspeed.initialize,
FSDP / fully_shard / DDP / DataParallel wraps and their policies, torch.multiprocessing.spawn,
torch.cuda.device_count and get_world_size, and Lightning's Trainer / Fabric with their strategies.
"""

from __future__ import annotations

from typing import Any, Callable

from memlint.extract.objects import (
    Accelerator, Accumulate, ArgNamespace, ArgParser, ArgSpec, AutocastCall, DeepSpeedEngine, Instance, LightningTrainer,
    Model, Namespace, Obj, Plugin, Setting, Trainer,
)
from memlint.extract.values import Alts, Class, Const, DeviceCount, Dict, Func, Ref, Seq, Unknown, flatten
from memlint.extract.handlers.common import Call, _PASS


class DistributedHandlers:
    """accelerate, DeepSpeed, FSDP/DDP, process spawning, Lightning."""

    def accelerator(self, c: Call) -> Any:
        return c.new(Accelerator, "accelerate.Accelerator")

    def plugin(self, c: Call) -> Any:
        return c.new(Plugin, c.name)

    def deepspeed_initialize(self, c: Call) -> Any:
        """deepspeed.initialize(args, model, optimizer, ..., config=/config_params=): (engine, optimizer, loader, scheduler)."""
        if c.head != "deepspeed":
            return _PASS
        args_obj = c.arg(0, "args")
        cfg = c.kwargs.get("config", c.kwargs.get("config_params"))
        if cfg is None and isinstance(args_obj, ArgNamespace):  # deepspeed.add_config_arguments: --deepspeed_config
            cfg = self.arg_default(args_obj, "deepspeed_config")
        opt = c.arg(2, "optimizer")
        eng = DeepSpeedEngine("deepspeed.initialize", c.line or 0, dict(c.kwargs), model=c.arg(1, "model"),
                              optimizer=opt, config=cfg)
        c.it.facts.objects.append(eng)
        return Seq([eng, opt if opt is not None else Unknown("DeepSpeed's optimizer"), Unknown("a data loader"),
                    Unknown("a scheduler")], "tuple")

    def deepspeed_arguments(self, c: Call) -> Any:
        """deepspeed.add_config_arguments(parser): --deepspeed and --deepspeed_config on the script's parser."""
        if c.head != "deepspeed":
            return _PASS
        p = c.args[0] if c.args else None
        if isinstance(p, ArgParser):
            p.args.setdefault("deepspeed", ArgSpec({"action": Const("store_true", "literal", c.line)}, c.line, "--deepspeed",
                                                   None, ("--deepspeed",)))
            p.args.setdefault("deepspeed_config", ArgSpec({}, c.line, "--deepspeed_config", None, ("--deepspeed_config",)))
        return p

    def parallel_wrap(self, c: Call) -> Any:
        """FullyShardedDataParallel(model, sharding_strategy=..., cpu_offload=...) / fully_shard(model) /
        DistributedDataParallel(model): the same model, sharded (or replicated) across the processes."""
        if c.head not in ("torch", "FSDP") and "distributed" not in c.qual and c.name != "fully_shard":
            return _PASS
        model = c.arg(0, "module")
        if c.name == "DistributedDataParallel":
            kind: Any = Const("none", "literal", c.line, ("DistributedDataParallel: every rank holds the whole model",))
        else:
            strat = c.kwargs.get("sharding_strategy")
            kinds = []  # one per value the strategy may hold (an if/elif chain on an option memlint cannot read)
            for x in flatten(strat) if strat is not None else [None]:
                text = str(x.value if isinstance(x, Const) else x.qual if isinstance(x, Ref) else "")
                if isinstance(x, Unknown):
                    kinds.append(x)
                    continue
                value = "fsdp_shard_grad_op" if "SHARD_GRAD_OP" in text or "_HYBRID_SHARD_ZERO2" in text else \
                    "none" if "NO_SHARD" in text else "fsdp"
                k = Const(value, "literal", c.line, (f"{c.name}(...) (line {c.line})",))
                if not any(isinstance(o, Const) and o.value == value for o in kinds):
                    kinds.append(k)
            kind = kinds[0] if len(kinds) == 1 else Alts(tuple(kinds))
            off = c.kwargs.get("cpu_offload") or c.kwargs.get("offload_policy")
            if isinstance(off, Obj) and (off.get("offload_params") is not None or "CPUOffload" in off.cls):
                op = off.get("offload_params")
                if isinstance(op, Const) and op.value or "CPUOffloadPolicy" in off.cls:
                    c.it.facts.offloads.append(Const("params", "literal", c.line, ("FSDP cpu_offload=CPUOffload(offload_params=True)",)))
        mp = c.kwargs.get("mixed_precision") or c.kwargs.get("mp_policy")
        for p in flatten(mp) if mp is not None else ():
            if isinstance(p, Obj) and p.get("param_dtype") is not None:
                # FSDP keeps fp32 shards and computes in param_dtype: bf16/fp16 autocast's accounting
                c.it.facts.autocasts.append(AutocastCall(p.get("param_dtype"), Const("cuda", "literal", c.line), None, c.line,
                                                         f"{c.name}(mixed_precision=...)"))
        out = None
        for m in flatten(model):
            if isinstance(m, Model) and c.name == "fully_shard":
                # FSDP2 shards the module in place and returns it: `fully_shard(model)` then
                # `AdamW(model.parameters())` (verl's apply_fsdp2) trains the sharded model
                if m.shard is None:
                    m.shard = Setting(kind, c.line, f"{c.name}(...)")
                r: Any = m
            elif isinstance(m, Model):
                w = Model(m.cls, c.line or 0, base=m, shard=Setting(kind, c.line, f"{c.name}(...)"))
                c.it.facts.objects.append(w)
                r = w
            else:
                # the script's own nn.Module around a model (`FSDP(Coconut(base_causallm=model))`, a value head):
                # wrapping the outer module shards (or replicates) the model it holds
                for inner in _held_models(m):
                    if inner.shard is None:
                        inner.shard = Setting(kind, c.line, f"{c.name}(...) of the {m.cls} that holds it")
                r = m
            out = r if out is None else Alts((out, r))
        return out if out is not None else Unknown("a wrapped model")

    def offload_policy(self, c: Call) -> Any:
        return Obj(c.qual, c.line or 0, dict(c.kwargs))

    def activation_checkpointing(self, c: Call) -> Any:
        """torch's apply_activation_checkpointing(model, ...) / checkpoint_wrapper: the model recomputes."""
        for m in flatten(c.arg(0, "model")):
            if isinstance(m, Model):
                m.gc.append(Setting(Const(True, "literal", c.line), c.line, f"{c.name}(model, ...)"))
        return Const(None, "literal", c.line)

    def fsdp_mixed_precision(self, c: Call) -> Any:
        """torch.distributed.fsdp.MixedPrecision(param_dtype=...) / MixedPrecisionPolicy (fully_shard)."""
        if "fsdp" not in c.qual and "distributed" not in c.qual:
            return _PASS
        return c.new(Obj, c.qual, ("param_dtype", "reduce_dtype", "buffer_dtype"))

    def device_count(self, c: Call) -> Any:
        """torch.cuda.device_count(): the GPUs CUDA_VISIBLE_DEVICES lists when the launch sets it, else every GPU
        the machine shows (unknown)."""
        env = getattr(c.it.launch, "env", None) or {}
        value = env.get("CUDA_VISIBLE_DEVICES")
        if value is not None and value.strip() and "$" not in value:
            n = len([d for d in value.split(",") if d.strip()])
            return Const(n, "command-line", c.line, (f"torch.cuda.device_count(): CUDA_VISIBLE_DEVICES={value} ({n})",))
        return DeviceCount("torch.cuda.device_count(): every GPU the machine shows", c.line)

    def data_parallel(self, c: Call) -> Any:
        """torch.nn.DataParallel(model, device_ids=None): one process that replicates the model on every visible
        GPU (or the device_ids given); the model trains as it was."""
        if not c.qual.startswith("torch."):
            return _PASS
        ids = c.arg(1, "device_ids")
        if isinstance(ids, Seq):
            c.it.facts.gpu_counts.append(Const(len(ids.items), "literal", c.line, (f"DataParallel(device_ids=[...]) (line {c.line})",)))
        elif ids is None or isinstance(ids, Const) and ids.value is None:
            c.it.facts.gpu_counts.append(DeviceCount(f"DataParallel(model) (line {c.line}) replicates the model on every "
                                                     "visible GPU", c.line))
        else:
            c.it.facts.gpu_counts.append(ids if isinstance(ids, DeviceCount) else Unknown("DataParallel's device_ids", c.line))
        return c.arg(0, "module", Unknown("DataParallel(...)"))

    def mp_spawn(self, c: Call) -> Any:
        """torch.multiprocessing.spawn(fn, args=(...), nprocs=N): each process runs fn(rank, *args)."""
        fn = c.arg(0, "fn")
        args = c.arg(1, "args")
        n = c.arg(2, "nprocs")
        if isinstance(n, DeviceCount):
            c.it.facts.gpu_counts.append(DeviceCount(f"torch.multiprocessing.spawn(nprocs=torch.cuda.device_count()) "
                                                     f"(line {c.line}): a process per visible GPU", c.line))
        elif isinstance(n, Const) and isinstance(n.value, int) and not isinstance(n.value, bool) and n.value >= 1:
            c.it.facts.gpu_counts.append(n.named(f"torch.multiprocessing.spawn(nprocs={n.value}) (line {c.line})"))
        extra = list(args.items) if isinstance(args, Seq) else []
        if isinstance(fn, Func):
            c.it.call_function(fn, [Unknown("the process rank"), *extra], {}, c.line)
        return Const(None, "literal", c.line)

    def notebook_launcher(self, c: Call) -> Any:
        """accelerate.notebook_launcher(fn, args=(...), num_processes=N): N processes from the notebook, each running
        fn(*args) (N: one per GPU of the machine when not given, accelerate's default on GPUs)."""
        fn = c.arg(0, "function")
        args = c.arg(1, "args")
        n = c.arg(2, "num_processes")
        if isinstance(n, Const) and isinstance(n.value, int) and not isinstance(n.value, bool) and n.value >= 1:
            c.it.facts.gpu_counts.append(n.named(f"accelerate.notebook_launcher(num_processes={n.value}) (line {c.line})"))
        elif n is None or isinstance(n, DeviceCount) or (isinstance(n, Const) and n.value is None):
            c.it.facts.gpu_counts.append(DeviceCount(f"accelerate.notebook_launcher (line {c.line}): a process per "
                                                     "visible GPU", c.line))
        extra = list(args.items) if isinstance(args, Seq) else []
        if isinstance(fn, Func):
            c.it.call_function(fn, extra, {}, c.line)
        return Const(None, "literal", c.line)

    def ray_scaling(self, c: Call) -> Any:
        """ray.train.ScalingConfig(num_workers=N, use_gpu=True): the workers a Ray trainer starts, kept for it."""
        return c.new(Obj, "ray.train.ScalingConfig", ("trainer_resources", "num_workers", "use_gpu"))

    def ray_trainer(self, c: Call) -> Any:
        """ray.train.torch.TorchTrainer(train_loop_per_worker, train_loop_config=cfg, scaling_config=...): each of
        num_workers workers (one GPU each with use_gpu=True; CPU workers by default) runs train_loop_per_worker(cfg)
        in a torch process group; Ray 2.x's TransformersTrainer calls its trainer_init_per_worker alike and trains the
        Trainer it returns (its LightningTrainer takes a config, no function: only its workers are read)."""
        fn = c.arg(0, "train_loop_per_worker")
        if fn is None:
            fn = c.kwargs.get("trainer_init_per_worker")
        cfg = c.kwargs.get("train_loop_config", c.kwargs.get("trainer_init_config"))
        sc = c.kwargs.get("scaling_config")
        n = sc.kwargs.get("num_workers") if isinstance(sc, Obj) else None
        gpu = sc.kwargs.get("use_gpu") if isinstance(sc, Obj) else None
        if isinstance(n, Const) and isinstance(n.value, int) and not isinstance(n.value, bool) and n.value >= 1 \
                and isinstance(gpu, Const) and gpu.value is True:
            c.it.facts.gpu_counts.append(n.named(f"Ray's ScalingConfig(num_workers={n.value}, use_gpu=True) (line "
                                                 f"{sc.line}): a worker process per GPU"))
        if isinstance(fn, Func):
            out = c.it.call_function(fn, [cfg if cfg is not None else Dict({})] if fn.node.params.params else [], {}, c.line)
            if isinstance(out, Trainer) and c.kwargs.get("trainer_init_per_worker") is fn:
                c.it.facts.trained.append(out)  # TransformersTrainer: Ray's fit() trains the Trainer the function built
        return c.new(Obj, c.qual)

    def world_size_call(self, c: Call) -> Any:
        """torch.distributed.get_world_size(): the processes the launcher starts (torchrun --nproc_per_node x
        --nnodes, accelerate --num_processes, deepspeed --num_gpus); unknown without one."""
        if c.head not in ("torch", "dist", "deepspeed") and "distributed" not in c.qual:
            return _PASS
        return self.world_size(c.it, f"{c.qual}()")

    def world_size(self, it: Any, how: str) -> Any:
        launch = it.launch
        if launch is not None and launch.gpus and launch.launcher in ("torchrun", "accelerate", "deepspeed", "composer"):
            return self.cli_const(it, launch.gpus, f"{how}: {launch.gpus} processes started by {launch.launcher}")
        if launch is not None and launch.launcher == "accelerate" and launch.gpus is None:
            from memlint.extract.launched import accelerate_processes

            n = accelerate_processes(launch, it.path)
            if n is not None:  # accelerate launch --config_file X: X's num_processes
                return self.cli_const(it, n, f"{how}: {n} processes, num_processes of accelerate's --config_file "
                                             f"{launch.options['config_file']}")
        return Unknown(f"{how}: the number of processes, which the launch environment decides")

    def lightning_method(self, it: Any, trainer: LightningTrainer, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        """Trainer.fit(module, datamodule=...) runs the module's hooks (configure_optimizers, training_step,
        train_dataloader) and the datamodule's; Fabric.setup / setup_dataloaders pass their arguments through."""
        if name == "fit":
            it.facts.trained.append(trainer)
            for target in [*args, *kwargs.values()]:
                for x in flatten(target):
                    self.run_hooks(it, x, ("setup", "configure_model", "configure_optimizers", "train_dataloader",
                                           "training_step"), line)
            return Unknown("training output")
        if name in ("setup", "setup_module", "setup_dataloaders"):
            return args[0] if len(args) == 1 else Seq(list(args), "tuple")
        if name == "backward":
            it.facts.backward.append(line)
        if name == "launch":
            return Const(None, "literal", line)
        return Unknown(f"lightning.{name}()")

    def save_hyperparameters(self, it: Any, obj: Obj, args: list, kwargs: dict, line: int | None) -> Any:
        """LightningModule.save_hyperparameters: `self.hparams` is then the namespace, dataclass or dict it is given
        (`save_hyperparameters(args)`), or, called with no argument or with names, the calling `__init__`'s own
        arguments (all but `self`, or those named)."""
        frame = it.frames[-1] if it.frames else None
        given = [a for a in args if not (isinstance(a, Const) and isinstance(a.value, str))]
        if len(given) == 1 and isinstance(given[0], Obj):
            obj.attrs["hparams"] = given[0]
        elif len(given) == 1 and isinstance(given[0], Dict):
            obj.attrs["hparams"] = Namespace("hparams", line or 0, dict(given[0].items), {}, False)
        elif not given and frame is not None:
            names = [a.value for a in args if isinstance(a, Const)] or [k for k in frame.vars if k != "self"]
            ignore = kwargs.get("ignore")
            ignored = {x.value for x in flatten(ignore) if isinstance(x, Const)} if ignore is not None else set()
            obj.attrs["hparams"] = Namespace("hparams", line or 0, {k: frame.vars[k] for k in names
                                                                   if k in frame.vars and k not in ignored}, {}, False)
        else:
            obj.attrs["hparams"] = Unknown("the hyperparameters a LightningModule saved")
        return Const(None, "literal", line)

    def run_hooks(self, it: Any, obj: Any, names: tuple[str, ...], line: int | None) -> None:
        """Call the hooks a library calls on an instance of the script's own class, self bound."""
        uc = getattr(obj, "user_class", None)
        if not isinstance(uc, Class):
            return
        for name in names:
            hit = uc.lookup(name)
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func):
                out = it.call_function(hit[1], [obj], {}, line)
                if name == "configure_optimizers":
                    obj.attrs.setdefault("__optimizers__", out)

    def accelerator_method(self, it: Any, name: str, args: list, line: int | None) -> Any:
        if name == "prepare":
            return args[0] if len(args) == 1 else Seq(list(args), "tuple")
        if name == "backward":
            it.facts.backward.append(line)
        if name == "prepare_model":
            return args[0] if args else Unknown("a model")
        if name == "accumulate":
            return Accumulate("accelerate.accumulate", line or 0)
        return Unknown(f"accelerator.{name}()")


# lightning classes that train, and the strategy classes whose options say how
_LIGHTNING = {"Trainer": "lightning.Trainer", "Fabric": "lightning.Fabric", "DeepSpeedStrategy": "lightning.DeepSpeedStrategy",
              "FSDPStrategy": "lightning.FSDPStrategy", "DDPStrategy": "lightning.DDPStrategy"}


# the library calls this module answers, by qualified name (handlers/__init__.py merges the tables)
QUALIFIED: dict[str, Callable[[Any, Call], Any]] = {
    "torch.multiprocessing.spawn": DistributedHandlers.mp_spawn,
    "accelerate.notebook_launcher": DistributedHandlers.notebook_launcher,
    "accelerate.launchers.notebook_launcher": DistributedHandlers.notebook_launcher,
    "torch.cuda.device_count": DistributedHandlers.device_count,
    "ray.train.ScalingConfig": DistributedHandlers.ray_scaling,
    "ray.air.ScalingConfig": DistributedHandlers.ray_scaling,
    "ray.air.config.ScalingConfig": DistributedHandlers.ray_scaling,
    "ray.train.torch.TorchTrainer": DistributedHandlers.ray_trainer,
    "ray.train.torch.torch_trainer.TorchTrainer": DistributedHandlers.ray_trainer,
    "ray.train.huggingface.TransformersTrainer": DistributedHandlers.ray_trainer,
    "ray.train.lightning.LightningTrainer": DistributedHandlers.ray_trainer,
}


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "Accelerator": DistributedHandlers.accelerator,
    "DeepSpeedPlugin": DistributedHandlers.plugin,
    "GradientAccumulationPlugin": DistributedHandlers.plugin,
    "FullyShardedDataParallelPlugin": DistributedHandlers.plugin,
    "ParallelismConfig": DistributedHandlers.plugin,
    "FullyShardedDataParallel": DistributedHandlers.parallel_wrap,
    "fully_shard": DistributedHandlers.parallel_wrap,
    "MixedPrecision": DistributedHandlers.fsdp_mixed_precision,
    "MixedPrecisionPolicy": DistributedHandlers.fsdp_mixed_precision,
    "DistributedDataParallel": DistributedHandlers.parallel_wrap,
    "DataParallel": DistributedHandlers.data_parallel,
    "CPUOffload": DistributedHandlers.offload_policy,
    "CPUOffloadPolicy": DistributedHandlers.offload_policy,
    "apply_activation_checkpointing": DistributedHandlers.activation_checkpointing,
    "initialize": DistributedHandlers.deepspeed_initialize,
    "add_config_arguments": DistributedHandlers.deepspeed_arguments,
    "get_world_size": DistributedHandlers.world_size_call,
}


def _held_models(obj: Any, depth: int = 2) -> list:
    """The models an instance of the script's own module class holds as attributes (and those of the instances it
    holds, `depth` levels down)."""
    if not isinstance(obj, Instance) or obj.user_class is None or depth <= 0:
        return []
    out = []
    for v in list(obj.attrs.values()):
        for x in flatten(v):
            if isinstance(x, Model):
                out.append(x)
            elif isinstance(x, Instance):
                out += _held_models(x, depth - 1)
    return out
