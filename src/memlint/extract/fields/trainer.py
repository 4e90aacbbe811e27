"""A Hugging Face / TRL trainer and its arguments: the trainer (a subclass read by what its arguments
carry), the micro-batch, accumulation, the optimizer named by optim=, length grouping, a preference
trainer's reference model, the run-time rewrites a library makes (data/library_api.json).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from memlint.extract.objects import Obj, Optimizer, Trainer, TrainingArgs, field_value
from memlint.extract.values import Const, Ref, Seq, Unknown, flatten
from memlint.library import api
from memlint.library.api import checkout_objective
from memlint.plan import Span, Value
from memlint.extract.fields.convert import _Unconvertible, _alts, _bool, _int, _map_const


class TrainerFields:
    """The fields a Trainer and its TrainingArguments decide."""

    def trainer_fields(self, trainer: Obj, args: Any, models: list[Obj], unsloth: bool) -> None:
        name = trainer.cls
        # unsloth's SFT path is its own (its step layout, no k-bit preparation): the trainer class as the script names it,
        # marked as run by unsloth; a preference or generation trainer over an unsloth model is that trainer's step
        data = api.trainer(name).data if api.trainer(name) is not None else "collator"
        label = name
        how = f"{name}(...) (line {trainer.line})" + (" over an unsloth FastLanguageModel" if unsloth else "")
        shape: tuple = (("stack", "unsloth"),) if unsloth and data in ("sft", "collator") else ()
        if trainer.user_class:
            how = f"{trainer.user_class}, a subclass of {name} (line {trainer.line})"
            objective = checkout_objective(trainer.user_class, name)
            if objective is not None:  # the checkout's own SimPO/ORPO/CPO trainer: no reference model
                shape = shape + (("class", trainer.user_class), ("objective", objective))
                how += (f"; its name says {api.objective_name(objective)}: read as that reference-free preference step "
                        "(chosen and rejected in one forward, no reference model; data/preference.json checkout_trainers)")
        self.fields["trainer"] = Value(label, "literal", Span(self.path, trainer.line), (how,), shape=shape)
        arg_objs = [a for a in flatten(args) if isinstance(a, TrainingArgs)]
        if not arg_objs:
            if args is not None and not (isinstance(args, Const) and args.value is None):
                for f in ("per_device_batch", "grad_accum", "optimizer", "precision", "group_by_length", "distributed"):
                    self.put(f, Unknown("the training arguments could not be followed"), line=trainer.line)
                self.padding_and_length(trainer, None, models, unsloth)
                return
            facts = api.trainer(name)
            arg_objs = [TrainingArgs(facts.arguments if facts else "transformers.TrainingArguments", trainer.line)]
        self.args = arg_objs
        if trainer.user_class and not shape:  # a Trainer subclass read by what its arguments carry (GRPO's num_generations)
            trainer = self.trainer_by_arguments(trainer, arg_objs, how)
            name = trainer.cls

        def each(attr: str, alias: str | None = None) -> Any:
            vals = []
            for a in arg_objs:
                v = a.get(attr)
                if v is None and alias is not None:
                    v = a.get(alias)
                if v is None:
                    v = field_value(a, attr)
                vals.append(v)
            return _alts(vals)

        line = arg_objs[0].line
        self.put("per_device_batch", each("per_device_train_batch_size", "per_gpu_train_batch_size"), _int, line)
        if unsloth:
            self.run_time_rewrites(name, "unsloth", arg_objs, each)
        self.prompt_batch(name, each)
        self.put("eval_batch", each("per_device_eval_batch_size", "per_gpu_eval_batch_size"), _int, line)
        self.put("grad_accum", each("gradient_accumulation_steps"), _int, line)
        # torch_compile=True: the Trainer compiles the model, whose forward computes the loss from the logits
        self.put("compiled_loss", each("torch_compile"), _bool, line)
        self.args_checkpointing(arg_objs)
        opt_objs = self.given_optimizer(trainer, each, line)
        self.parallelism_fields([a.get("parallelism_config") for a in arg_objs])
        self.precision_from(arg_objs)
        gbl = []
        for a in arg_objs:
            strategy = a.get("train_sampling_strategy")
            if strategy is not None:
                gbl.append(_map_const(strategy, lambda s: s == "group_by_length"))
            else:
                gbl.append(a.get("group_by_length") if a.get("group_by_length") is not None else field_value(a, "group_by_length"))
        self.put("group_by_length", _alts(gbl), _bool, line)
        self.distributed_from(arg_objs)
        self.deepspeed_optimizer(bool(opt_objs), line)
        self.padding_and_length(trainer, arg_objs, models, unsloth)
        if api.trainer(name) is not None and api.trainer(name).reference:
            self.reference_field(trainer, arg_objs)

    def given_optimizer(self, trainer: Trainer, each: Callable, line: int | None) -> list:
        """The optimizer of `Trainer(optimizers=(opt, sched))` when given (one memlint does not model, the checkout's
        own Optimizer subclass, is unknown and named), else the arguments' optim; the optimizers given."""
        optims = trainer.kwargs.get("optimizers")
        opt_objs, others = [], []
        if isinstance(optims, Seq) and optims.items:
            given = flatten(optims.items[0])
            opt_objs = [o for o in given if isinstance(o, Optimizer)]
            others = [o for o in given if not isinstance(o, Optimizer) and not (isinstance(o, Const) and o.value is None)]
        if others:
            # Trainer(optimizers=(FiraAdamW(...), None)): an optimizer memlint does not model replaces optim=
            what = next((getattr(getattr(o, "user_class", None), "name", None) for o in others
                         if getattr(o, "user_class", None) is not None), None)
            self.put("optimizer", Unknown(f"Trainer(optimizers=(...)) is given {f'the checkout class {what}' if what else 'an optimizer'}"
                                          " memlint does not model; it replaces the arguments' optim"), line=line)
            return opt_objs or others
        if opt_objs:
            self.optimizer_from(opt_objs)
        else:
            self.put("optimizer", each("optim"), _optim, line)
            self.galore_fields(each, line)
        return opt_objs

    def trainer_by_arguments(self, trainer: Trainer, arg_objs: list, how: str) -> Trainer:
        """A subclass of transformers' Trainer whose arguments carry a trainer's own field (GRPO's num_generations) runs
        that trainer's step (library.api.trainer_by_arguments); `trainer` as it reads."""
        from memlint.extract.handlers.attributes import _declares

        from memlint.library.defaults import default as library_default

        # a field set, or declared by the script's class or the library's arguments class (TRL's GRPOConfig has
        # num_generations at its default whether or not the script writes it)
        read = api.trainer_by_arguments(trainer.cls, lambda f: any(
            f in a.attrs or f in a.kwargs or f in a.cli or _declares(a.user_class, f)
            or library_default(a.cls, f) is not None for a in arg_objs))
        if read is None:
            return trainer
        self.fields["trainer"] = Value(read[0], "literal", Span(self.path, trainer.line), (f"{how}; {read[1]}",))
        return replace(trainer, cls=read[0])

    def prompt_batch(self, trainer: str, each: Callable) -> None:
        """A trainer whose per_device_train_batch_size counts prompts at the version read (TRL 0.14's GRPO): the
        micro-batch the step runs is that many prompts × their samples (data/library_api.json prompt_batches)."""
        rule = api.prompt_batches(trainer)
        was = self.fields.get("per_device_batch")
        if rule is None or was is None or not was.known or not isinstance(was.value, int):
            return
        times = each(rule["times"])
        if not (isinstance(times, Const) and isinstance(times.value, int) and times.value > 0):
            self.fields["per_device_batch"] = Value(None, "unknown", was.span, (
                *was.chain, f"{was.value} prompts × {rule['times']}, which memlint cannot read ({rule['ref']})"))
            return
        from memlint.library.versions import shown_version

        why = (f"{trainer} at {rule['package']} {shown_version(rule['package'])} counts prompts: {was.value} prompts × "
               f"{rule['times']} {times.value} = {was.value * times.value} sequences per micro-batch ({rule['ref']})")
        self.fields["per_device_batch"] = Value(was.value * times.value, was.source, was.span, (*was.chain, why))

    def run_time_rewrites(self, trainer: str, loader: str, arg_objs: list, each: Callable) -> None:
        """Arguments the library rewrites as the run starts (data/library_api.json run_time_rewrites): unsloth's GRPO
        config makes per_device_train_batch_size num_generations when the batch is no multiple of it."""
        fields = {"per_device_train_batch_size": "per_device_batch", "gradient_accumulation_steps": "grad_accum"}
        for rule in api.run_time_rewrites(trainer, loader):
            if any(isinstance(a.get(k), Const) and a.get(k).value is not None for a in arg_objs for k in rule["unless_set"]):
                continue
            vals: dict[str, Any] = {}
            for key in {*rule["product"], rule["multiple_of"], *rule["sets"].values()}:
                if key == "world_size":
                    g = self.fields.get("num_gpus")
                    vals[key] = g.value if g is not None and g.known and isinstance(g.value, int) else 1
                    continue
                v = self.fields[fields[key]].value if key in fields and self.fields.get(fields[key]) is not None \
                    and self.fields[fields[key]].known else each(key)
                v = v.value if isinstance(v, Const) else v
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    break
                vals[key] = v
            else:
                product = 1
                for k in rule["product"]:
                    product *= vals[k]
                if product % vals[rule["multiple_of"]] == 0:
                    continue
                for target, source in rule["sets"].items():
                    name = fields[target]
                    was = self.fields[name]
                    why = (f"{rule['package']} rewrites {target}={vals[target]} to {source}={vals[source]} as the run starts: "
                           f"{' × '.join(f'{k} {vals[k]}' for k in rule['product'])} is no multiple of {rule['multiple_of']} "
                           f"({rule['ref']})")
                    self.fields[name] = Value(vals[source], was.source, was.span, (*was.chain, why))

    def reference_field(self, trainer: Obj, arg_objs: list[Obj]) -> None:
        """ref_model for DPO/KTO: "model" (a second model passed as ref_model=), "auto" (none passed:
        TRL deep-copies a fully fine-tuned model, or runs a peft model with its adapters disabled),
        or "precomputed" (precompute_ref_log_probs=True: the reference ran before training)."""
        line = trainer.line
        rm = trainer.kwargs.get("ref_model")
        vals: list[Any] = []
        for a in arg_objs:
            pre = trainer.kwargs.get("precompute_ref_log_probs", a.get("precompute_ref_log_probs"))
            if pre is None:
                pre = field_value(a, "precompute_ref_log_probs")
            if isinstance(pre, Unknown) and a.cls.endswith("TrainingArguments"):
                # TRL before its DPOConfig (0.9) took precompute_ref_log_probs on the trainer, default False
                pre = Const(False, "library-default", line, (f"{trainer.cls}(precompute_ref_log_probs=False) default: "
                                                             "training arguments of transformers carry no such field",))
            for p in flatten(pre):
                if isinstance(p, Const) and p.value:
                    vals.append(p.with_value("precomputed", "precompute_ref_log_probs=True: reference log-probs computed before training"))
                elif isinstance(p, Const):
                    for r in flatten(rm) if rm is not None else [None]:
                        if r is None or (isinstance(r, Const) and r.value is None):
                            src = r if isinstance(r, Const) else p
                            vals.append(src.with_value("auto", f"no ref_model: {trainer.cls} copies a full model or disables the adapters"))
                        elif isinstance(r, Unknown):
                            vals.append(r)
                        else:
                            vals.append(Const("model", "literal", line, (f"ref_model= a second model (line {line})",)))
                else:
                    vals.append(p)
        self.put("ref_model", _alts(vals), line=line)


def _optim(v: Any) -> str:
    if isinstance(v, Ref):
        return v.name.lower()
    if isinstance(v, str):
        return v.lower()
    raise _Unconvertible(f"optim {v!r}")
