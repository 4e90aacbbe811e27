"""Loops the script drives itself: a plain PyTorch loop (optimizer steps, accumulation, Accelerator
plugins), a Lightning Trainer or Fabric, a DeepSpeed engine; each reads its fields from what drives it.
"""

from __future__ import annotations

from typing import Any

from memlint.extract.objects import Accelerator, DataLoader, DeepSpeedEngine, LightningTrainer, Obj, Optimizer
from memlint.extract.values import Const, Unknown
from memlint.library import api
from memlint.plan import Span, Value
from memlint.vocab import ascii_digits
from memlint.extract.fields.convert import _Unconvertible, _alts, _bool, _int


class LoopFields:
    """The fields of a custom loop, a Lightning run and a DeepSpeed engine."""

    def loop_fields(self, objs: list, models: list[Obj]) -> None:
        opts = self.facts.first("objects", Optimizer)
        steps = self.facts.first("steps")
        accs = self.facts.first("objects", Accelerator)
        engines = self.facts.first("objects", DeepSpeedEngine)
        if engines:
            # the engine that trains: built with an optimizer or the parameters to optimize (a frozen reference model
            # wrapped after it, `ref, *_ = deepspeed.initialize(model=ref, config=ds_config)`, steps nothing)
            trained = [e for e in engines if e.get("optimizer") is not None or e.get("model_parameters") is not None]
            self.engine_fields((trained or engines)[-1])
            return
        lightning = [o for o in self.facts.first("objects", LightningTrainer) if o.cls in ("lightning.Trainer", "lightning.Fabric")]
        if lightning:
            self.lightning_fields(lightning[-1], objs)
            return
        # a training loop steps an optimizer, or runs backward through a model it loads or with an optimizer it builds:
        # a backward alone (a kernel's gradient check) or an optimizer built and handed on (a helper) is not one
        if not steps and not (self.facts.backward and (opts or models or self.facts.unknown_steps)):
            for f in ("trainer", "per_device_batch", "grad_accum", "optimizer", "precision", "padding", "max_length"):
                self.put(f, Unknown("no trainer or training loop found"))
            self.args_gc = None
            return
        line = (opts or [None])[0].line if opts else (self.facts.backward or [None])[0]
        self.fields["trainer"] = Value("custom-loop", "literal", Span(self.path, line) if line else None, ("optimizer.step() in the script's own loop",))
        self.args_gc = None
        train_dl = self.loader_batch(None)
        acc = [s.accumulation for s in steps if s.accumulation is not None]
        acc_kw = [a.get("gradient_accumulation_steps") for a in accs if a.get("gradient_accumulation_steps") is not None]
        for a in accs:  # Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=N))
            plug = a.get("gradient_accumulation_plugin")
            if isinstance(plug, Obj) and plug.get("num_steps") is not None:
                acc_kw.append(plug.get("num_steps"))
            ds = a.get("deepspeed_plugin")  # DeepSpeedPlugin(gradient_accumulation_steps=N): the engine steps every N
            if not acc_kw and isinstance(ds, Obj) and ds.get("gradient_accumulation_steps") is not None:
                acc_kw.append(ds.get("gradient_accumulation_steps"))
        if acc_kw:
            self.put("grad_accum", _alts(acc_kw), _int, accs[0].line)
        elif acc:
            self.put("grad_accum", _alts(acc), _int, steps[0].line)
        elif steps:
            self.put("grad_accum", Const(1, "literal", steps[0].line, ("optimizer.step() after every micro-batch",)), _int)
        elif any(h.steps for h in self.facts.first("grad_hooks")):
            hook = next(h for h in self.facts.first("grad_hooks") if h.steps)
            self.put("grad_accum", Const(1, "literal", hook.line, ("a post-accumulate-grad hook steps each parameter in "
                                                                   "every backward",)), _int)
        else:
            self.put("grad_accum", Unknown("no optimizer.step() found"))
        if opts:
            self.optimizer_from(self.stepped(opts, steps), layerwise=any(h.steps for h in self.facts.first("grad_hooks")))
        else:
            self.put("optimizer", Unknown("no optimizer found"))
        self.loop_precision(accs, line)
        self.put("group_by_length", Const(False, "library-default", train_dl.line if train_dl else line, ("DataLoader samples without length grouping",)), _bool)
        dist = []
        for a in accs:
            for plug_name, label in (("deepspeed_plugin", "deepspeed"), ("fsdp_plugin", "fsdp")):
                plug = a.get(plug_name)
                if isinstance(plug, Obj):
                    st = plug.get("zero_stage")
                    if label == "deepspeed" and isinstance(st, Const) and st.value in (1, 2, 3):
                        dist.append(st.with_value(f"zero{st.value}"))
                    else:
                        dist.append(Const(label, "literal", plug.line))
        for m in models:
            for mm in self.chain(m):
                if mm.shard is not None:
                    dist.append(mm.shard.value)
        if self.facts.offloads:
            self.put("offload", _alts(self.facts.offloads))
        if dist:
            self.put("distributed", _alts(dist))
        else:
            why = "Accelerator: sharding comes from `accelerate launch` config, if any" if accs else "a single-process loop"
            self.put("distributed", Const("none", "library-default", line, (why,)))
            if accs:
                self.notes.append("distributed: an `accelerate launch` config may shard the model; pass --assume distributed=... if it does")
        self.parallelism_fields([a.get("parallelism_config") for a in accs])
        self.plugin_cpu_optimizer(accs)
        collate = train_dl.get("collate_fn") if train_dl is not None else None
        self.data_padding(collate, False, line)

    def lightning_fields(self, tr: LightningTrainer, objs: list) -> None:
        """A Lightning Trainer (or Fabric): precision, accumulation, strategy and devices are its
        arguments (with Lightning's defaults), the micro-batch the DataLoader's, the optimizer the
        module's configure_optimizers' (or the one the script builds for Fabric)."""
        line = tr.line
        fabric = tr.cls == "lightning.Fabric"
        self.fields["trainer"] = Value("lightning-fabric" if fabric else "lightning", "literal", Span(self.path, line),
                                       (f"{tr.cls.split('.')[-1]}(...) (line {line})",))
        self.args_gc = None
        prec = tr.get("precision")
        if prec is None:
            self.put("precision", Const("fp32", "library-default", line, ("lightning's default precision: 32-true",)), line=line)
        else:
            self.put("precision", prec, lambda v: api.lightning_precision(v) or _unconvertible(f"precision {v!r}"), line)
        self.true_precision_dtype()
        if not fabric:
            acc = tr.get("accumulate_grad_batches")
            self.put("grad_accum", acc if acc is not None else Const(1, "library-default", line, ("accumulate_grad_batches default 1",)), _int, line)
        else:
            steps = self.facts.first("steps")
            acc = [s.accumulation for s in steps if s.accumulation is not None]
            self.put("grad_accum", _alts(acc) if acc else Const(1, "literal", line, ("an optimizer step every micro-batch",)), _int, line)
        self.lightning_strategy(tr, line)
        dev = tr.get("devices")
        nodes = tr.get("num_nodes")
        if dev is not None:
            self.put("num_gpus", dev, lambda v: _device_count(v, nodes), line)
        train_dl = self.loader_batch(line)
        opts = self.facts.first("objects", Optimizer)
        if opts:
            self.optimizer_from(opts[-1:])
        else:
            self.put("optimizer", Unknown("no optimizer found (configure_optimizers)"), line=line)
        self.put("group_by_length", Const(False, "library-default", line, ("DataLoader samples without length grouping",)), _bool)
        self.data_padding(train_dl.get("collate_fn") if train_dl is not None else None, False, line)

    def true_precision_dtype(self) -> None:
        """Lightning's "bf16-true" / "16-true": the Trainer's and Fabric's precision plugin converts the module's
        parameters to that dtype (HalfPrecision.convert_module at setup), whatever the load made them."""
        pv = self.fields.get("precision")
        if pv is None or not pv.known or pv.value not in ("pure-bf16", "pure-fp16"):
            return
        half = "bf16" if pv.value == "pure-bf16" else "fp16"
        self.fields["torch_dtype"] = Value(half, pv.source, pv.span, pv.chain + (
            f"Lightning's {'bf16' if half == 'bf16' else '16'}-true precision converts the module's parameters to {half}",))

    def engine_accumulation(self, facts: Any, line: int | None) -> Value | None:
        """An engine config with train_batch_size and no gradient_accumulation_steps: DeepSpeed divides the global
        batch by the micro-batch and the world size (the processes the launcher starts); a world size memlint does
        not know leaves it unknown rather than 1."""
        tb = getattr(facts, "train_batch", None)
        if tb is None:
            return None
        micro = self.fields.get("per_device_batch")
        gpus = self.launch.gpus if self.launch is not None and self.launch.launcher in (
            "torchrun", "deepspeed", "accelerate", "composer") else None
        if micro is None or not micro.known or not isinstance(micro.value, int) or not gpus:
            return Value(None, "unknown", tb.span, (f"{tb.chain[0]}: {_ENGINE_ACCUMULATION}, and the world size "
                                                    "is not known",))
        per_step = micro.value * gpus
        if tb.value % per_step:
            return Value(None, "unknown", tb.span, (f"{tb.chain[0]} is not a multiple of {micro.value} x {gpus}: "
                                                    "DeepSpeed refuses the config",))
        return Value(tb.value // per_step, tb.source, tb.span, (
            f"{tb.chain[0]} / ({micro.value} per GPU x {gpus} processes): {_ENGINE_ACCUMULATION}",))

    def engine_fields(self, eng: DeepSpeedEngine) -> None:
        """A loop driven by a DeepSpeed engine: micro-batch, accumulation, precision, ZeRO stage, offload
        and the optimizer come from its config (a DataLoader's batch_size is the micro-batch when there is one)."""
        line = eng.line
        self.fields["trainer"] = Value("deepspeed-engine", "literal", Span(self.path, line), (f"deepspeed.initialize (line {line})",))
        self.args_gc = None
        facts, why = self.deepspeed_config(eng.config) if eng.config is not None else (None, Unknown("no DeepSpeed config given"))
        soft = facts.soft if facts is not None else {}
        dls = self.facts.first("objects", DataLoader)
        train_dl = next((d for d in dls if d.get("batch_size") is not None), None)
        if train_dl is not None:
            self.put("per_device_batch", train_dl.get("batch_size"), _int, train_dl.line)
        elif "per_device_batch" in soft:
            self.fields["per_device_batch"] = soft["per_device_batch"]
        else:
            self.put("per_device_batch", Unknown("no train_micro_batch_size_per_gpu in the DeepSpeed config"), line=line)
        derived = self.engine_accumulation(facts, line)
        if "grad_accum" in soft:
            self.fields["grad_accum"] = soft["grad_accum"]
        elif derived is not None:
            self.fields["grad_accum"] = derived
        else:
            self.put("grad_accum", Const(1, "library-default", line, ("DeepSpeed's gradient_accumulation_steps default: 1",)), _int)
        prec = soft.get("precision")
        self.fields["precision"] = prec if prec is not None else Value("fp32", "library-default", Span(self.path, line),
                                                                         ("no fp16/bf16 section in the DeepSpeed config",))
        if facts is not None:
            for name in ("distributed", "offload"):
                self.fields[name] = facts.fields[name]
            self.notes.extend(facts.notes)
        else:
            self.put("distributed", why, line=line)
        own = [o for o in self.facts.first("objects", Optimizer) if o is not eng.optimizer]
        if isinstance(eng.optimizer, Optimizer):
            self.optimizer_from([eng.optimizer])
        elif facts is not None and facts.optimizer is not None:
            self.fields["optimizer"] = facts.optimizer
        elif eng.optimizer is None and own:
            # deepspeed.initialize without an optimizer (none given, none in its config): the engine only wraps the
            # forward (and ZeRO's partitioning); the script's own optimizer updates the weights in its own loop
            self.optimizer_from(own[-1:])
            self.fields["trainer"] = Value("custom-loop", "literal", Span(self.path, own[-1].line), (
                f"deepspeed.initialize (line {line}) builds an engine without an optimizer; the loop's own "
                f"{own[-1].cls} (line {own[-1].line}) updates the weights",))
            if prec is not None and prec.value in ("amp-fp16", "amp-bf16"):
                # the engine casts the module to its fp16/bf16 section's dtype; with no optimizer of its own it keeps
                # no fp32 master copy (ZeRO-3: DeepSpeedZeRoOffload partitions the half weights only), and the
                # loop's optimizer updates the half weights: trained in that dtype without autocast
                half = prec.value[4:]
                self.fields["precision"] = Value(f"pure-{half}", prec.source, prec.span, prec.chain + (
                    f"an engine without an optimizer (line {line}) keeps no fp32 master: the {half} weights are "
                    "updated in place",))
        else:
            self.put("optimizer", Unknown("the engine's optimizer is not in its config"), line=line)
        self.put("group_by_length", Const(False, "library-default", line, ("DataLoader samples without length grouping",)), _bool)
        self.data_padding(train_dl.get("collate_fn") if train_dl is not None else None, False, line)


_ENGINE_ACCUMULATION = ("DeepSpeed derives gradient_accumulation_steps = train_batch_size / "
                        "(train_micro_batch_size_per_gpu x world size) when its config gives the global batch and not "
                        "the accumulation")


def _unconvertible(why: str) -> Any:
    raise _Unconvertible(why)


def _device_count(v: Any, nodes: Any) -> int:
    """Lightning's devices= (an int, a list of ids, "0,1", -1/"auto") times num_nodes."""
    n_nodes = nodes.value if isinstance(nodes, Const) and isinstance(nodes.value, int) else 1
    if isinstance(v, bool):
        raise _Unconvertible("devices")
    if isinstance(v, int) and v > 0:
        return v * n_nodes
    if isinstance(v, (list, tuple)):
        return len(v) * n_nodes
    if isinstance(v, str) and ascii_digits(v.replace(",", "").strip()):
        parts = [p for p in v.split(",") if p.strip()]
        return (len(parts) if "," in v else int(v)) * n_nodes
    raise _Unconvertible(f"devices={v!r}: the GPUs the machine has")
