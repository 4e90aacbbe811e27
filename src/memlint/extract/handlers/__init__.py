"""What memlint knows about the libraries a training script calls.

The interpreter hands every call it cannot inline to `call`; this package builds the
objects (configs, models, trainers, parsers; extract/objects.py) and records facts. Names
match on the last component, so aliases (`import transformers as tf`, `from trl import
SFTConfig as C`) and star imports resolve alike. Which classes are trainers, argument
classes, collators and optimizers is data (memlint.library.api).

`Handlers` is composed of one mixin per body of knowledge, each module with the calls it
answers as data (QUALIFIED: by dotted name, BY_NAME: by last component):

  language.py     Python and its standard library (no library names)
  attributes.py   attributes of known objects, read and written
  datafiles.py    json / yaml / toml / OmegaConf files and attribute dicts
  cli.py          argparse, HfArgumentParser / TrlParser, sys.argv, the launch environment
  entrypoints.py  click, typer, fastcore, hydra, fire, tyro, jsonargparse
  hf.py           transformers and datasets
  quant.py        bitsandbytes / GPTQ / AWQ / HQQ
  peft.py         PEFT adapters (and unsloth's)
  trl.py          TRL's model arguments and chat-format helpers
  distributed.py  accelerate, DeepSpeed, FSDP / DDP, spawn, Lightning
  loop.py         torch and the script's own loop

This module dispatches: a call, a method call, or a script class built as its library base.
"""

from __future__ import annotations

from typing import Any, Callable

from memlint.extract import custom_model
from memlint.extract.interp import BoundStr, BoundUnknown
from memlint.extract.objects import (
    Accelerator, ArgParser, ClassLoader, DataclassInstance, Dataset, DeepSpeedEngine, DictMethod, DtypeName, FieldNames, Fields,
    GradHook, HfConfig, HfParser, Instance, LigerPatch, LightningTrainer, Method, Model, Obj, OpenFile, Optimizer,
    OptimizerStep, Params, Partial, Scaler, SeqMethod, Tokenizer, TokenizerCall, Trainer, TrainingArgs,
)
from memlint.extract.values import Class, Const, Dict, Func, Ref, Seq, TokenIds, Unknown, flatten
from memlint.library import api
from memlint.extract.handlers.attributes import MODULE_SELF_METHODS, AttributeHandlers, _declares
from memlint.extract.handlers.cli import CliHandlers, _SUBCLASSED_PARSERS
from memlint.extract.handlers.common import LIGHTNING_HPARAMS, Call, _PASS, library_base
from memlint.extract.handlers.datafiles import DataFileHandlers
from memlint.extract.handlers.distributed import DistributedHandlers, _LIGHTNING
from memlint.extract.handlers.entrypoints import EntryPointHandlers
from memlint.extract.handlers.hf import (
    HfHandlers, _MODEL_CLASS, _NOT_MODEL, _TOKENIZE_METHODS, _copied_trainer, _pretrained_model_class, _vendored_trainer,
)
from memlint.extract.handlers.language import LanguageHandlers, _grow, _seq_method
from memlint.extract.handlers.loop import LoopHandlers, _record_layer, _steps_an_optimizer
from memlint.extract.handlers.peft import PeftHandlers
from memlint.extract.handlers.quant import QuantHandlers, _hand_quant
from memlint.extract.handlers.trl import TrlHandlers
from memlint.extract.handlers import cli, datafiles, distributed, entrypoints, hf, language, loop, peft, quant, trl


_TORCH_DTYPES = ("float16", "bfloat16", "float32", "half", "float")


def _family(qual: str) -> str:
    head = qual.split(".", 1)[0]
    return "bnb" if head == "bitsandbytes" else head


class Handlers(
        LanguageHandlers, AttributeHandlers, DataFileHandlers, CliHandlers, EntryPointHandlers, HfHandlers,
        QuantHandlers, PeftHandlers, TrlHandlers, DistributedHandlers, LoopHandlers,
):
    """Stateless: the interpreter passes itself in."""

    def call(self, it: Any, f: Any, args: list, kwargs: dict, open_kw: bool, line: int | None, node: Any) -> Any:
        if isinstance(f, Method):
            return self.method(it, f.obj, f.name, args, kwargs, open_kw, line)
        if isinstance(f, Class):
            return self.construct_user(Call(it, f.name, args, kwargs, open_kw, line), f)
        if isinstance(f, BoundStr):
            return self.str_method(it, f, args, kwargs, node)
        if isinstance(f, BoundUnknown):
            return self.unknown_method(it, f, args, kwargs, line)
        if isinstance(f, Tokenizer):
            return self.tokenize(it, f, args, kwargs, line)
        if isinstance(f, OpenFile):
            return f  # f.read(): the content, read where it is parsed
        if isinstance(f, ClassLoader) and f.cls.validated and f.name in api.dict_constructors():
            return self.from_dict(it, f.cls, args, kwargs, line)
        if isinstance(f, ClassLoader):
            owner = f.owner or f.cls.name
            model = self.call_ref(Call(it, f"transformers.{owner}.{f.name}", args, kwargs, open_kw, line),
                                  Ref(f"transformers.{owner}.{f.name}"))
            if isinstance(model, Model):
                model.user_class = f.cls
            return model
        if isinstance(f, DtypeName):  # getattr(torch.optim, config.optimizer)(params): the class it names
            f = f.ref
        if isinstance(f, DictMethod) and isinstance(f.dict, Fields):  # args.__dict__.update(cfg): each key a field
            return self.fields_update(it, f.dict.obj, f.name, args, kwargs, line)
        if isinstance(f, DictMethod) and isinstance(f.dict, FieldNames):  # parameters.keys(): the names themselves
            return f.dict
        if isinstance(f, DictMethod):
            return self.dict_method(f.dict, f.name, args, kwargs)
        if isinstance(f, SeqMethod) and f.name in ("append", "extend", "insert"):
            return _grow(it, f.seq, f.name, args)
        if isinstance(f, SeqMethod):  # names.index("lora"), names.count(x) of a known sequence
            return _seq_method(f.seq, f.name, args, line)
        if isinstance(f, Partial):
            if isinstance(f.func, Func):
                return it.call_function(f.func, f.args + args, {**f.kwargs, **kwargs}, line)
            return Unknown("a call")
        if isinstance(f, Model):
            fed = next((x for x in [*args, *kwargs.values()] for x in flatten(x)
                        if isinstance(x, TokenIds) and x.generated), None)
            if fed is not None:  # a forward over generate()'s output: the batch an RL loop trains on
                it.facts.generated_batches.append((fed, line))
            return Unknown("the model's outputs")
        if isinstance(f, Instance) and f.user_class is not None:  # `job(cfg)`: the checkout class's __call__ runs
            hit = f.user_class.lookup("__call__")
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func):
                return it.call_function(hit[1], [f, *args], dict(kwargs), line)
        if isinstance(f, Obj):
            return Unknown("a call")
        if isinstance(f, Unknown):
            if "padding" in kwargs or "truncation" in kwargs:
                it.facts.tokenizer_calls.append(TokenizerCall(kwargs, line))
            return Unknown("the result of an unknown call")
        if not isinstance(f, Ref):
            return Unknown("a call")
        return self.call_ref(Call(it, f.qual, args, kwargs, open_kw, line), f)

    def call_ref(self, c: Call, f: Ref) -> Any:
        """A library call: the qualified rules first, then the name table, then optimizer classes."""
        if c.it.layers is not None and c.head == "torch" and c.name in ("Linear", "Embedding"):
            _record_layer(c)
            if c.name == "Linear":  # its (in, out), read or not: a hand-written LoRA pair shares its rank through them
                return custom_model.linear_table(c.args, c.kwargs, c.line)
        if c.it.layers is not None and c.head == "torch":  # a tensor of written-out size, the nn.Parameter of it
            table = custom_model.table_of(c.name, c.args, c.kwargs, c.line)
            if table is not None:
                return table
        if c.qual.startswith("builtins."):
            return self.builtin(c.it, c.name, c.args, c.kwargs, c.line)
        if c.head == "liger_kernel" and c.name.startswith("apply_liger_kernel_to_"):
            c.it.facts.liger_calls.append(LigerPatch(c.qual, c.kwargs, c.line))
            return Const(None, "literal", c.line)
        if c.head == "torchao" and c.name == "Float8LinearConfig" and "enable_fsdp_float8_all_gather" in c.kwargs:
            v = c.kwargs["enable_fsdp_float8_all_gather"]
            if isinstance(v, Const) and isinstance(v.value, bool):
                c.it.facts.float8_gather.append(v.with_value(v.value, f"Float8LinearConfig(enable_fsdp_float8_all_gather="
                                                                      f"{v.value}) (line {c.line})"))
            return Const(None, "literal", c.line)
        if c.head == "torchao" and c.name == "convert_to_float8_training":
            # torchao.float8: every nn.Linear becomes Float8Linear unless module_filter_fn says otherwise (a filter
            # memlint cannot read: counted as the decoder's linears, lm_head kept, as torchtitan and accelerate do)
            scope = "layers" if "module_filter_fn" in c.kwargs else "all"
            c.it.facts.float8_calls.append(Const(scope, "literal", c.line, (
                f"convert_to_float8_training(...){' with module_filter_fn' if scope == 'layers' else ''} (line {c.line})",)))
            return Const(None, "literal", c.line)
        if c.head == "bitsandbytes" and api.bnb_linear(c.name) is not None:
            _hand_quant(c.it, c.name, c.kwargs, c.line, f"bitsandbytes.nn.{c.name}(...) (line {c.line})")
            return Unknown(f"a bitsandbytes {c.name} layer")
        if c.head in ("pytorch_lightning", "lightning", "lightning_fabric") and c.name in _LIGHTNING:
            return c.new(LightningTrainer, _LIGHTNING[c.name])
        if c.head in ("pytorch_lightning", "lightning") and c.name == "LightningCLI":
            from memlint.extract.lightning_cli import script_cli

            return script_cli(self, c)
        handler = _QUALIFIED.get(c.qual) or _BY_NAME.get(c.name) or (
            self._data_handler(c.name) if c.head not in api.foreign_packages() else None)  # composer.Trainer: Composer's
        if handler is not None:
            out = handler(self, c)
            if out is not _PASS:
                return out
        if c.head == "transformers" and _MODEL_CLASS.match(c.name) and not _NOT_MODEL.search(c.name) \
                and isinstance(c.arg(0, "config"), HfConfig):
            # LlamaForCausalLM(config): a model built (randomly initialised) from a config, as from_config builds it
            return self._load_model(Call(c.it, c.qual + ".from_config", [c.arg(0, "config")],
                                         {**{k: v for k, v in c.kwargs.items() if k != "config"}, "_constructed": True},
                                         c.open, c.line),
                                    c.name, "from_config")
        if c.head == "torch" and c.name in _TORCH_DTYPES:
            return f
        opt = self._optimizer_name(c)
        if opt is not None:
            return c.new(Optimizer, c.qual, ("params", "lr"), optim=opt)
        if c.head in api.modelled_packages() and handler is None:
            cls = c.it.library_copy_class(c.qual)  # a fork's own class (trl.trainer.IndexedGRPOTrainer)
            if cls is not None:
                return self.construct_user(c, cls)
        if handler is None and c.name.endswith("Trainer") and c.head not in api.modelled_packages():
            base = _trainer_of_arguments(c.kwargs.get("args", c.args[1] if len(c.args) > 1 else None))
            if base is not None:  # an installed package's trainer (not in the checkout) given a library's arguments
                out = self.trainer(Call(c.it, base, c.args, c.kwargs, c.open, c.line))
                out.user_class = c.name
                return out
        return Unknown(f"the result of {c.qual}()")

    @staticmethod
    def _data_handler(name: str) -> Callable[["Handlers", Call], Any] | None:
        """Classes the library data names: argument classes, trainers, PEFT configs, collators."""
        if name in api.training_arguments():
            return Handlers.training_args
        if api.trainer(name) is not None:
            return Handlers.trainer
        if name in api.config_classes():
            return Handlers.config_class
        if name in api.peft_configs() or name in api.prompt_learning_configs():
            return Handlers.peft_config
        if name in api.collators():
            return Handlers.collator
        if name in api.dict_wrappers():
            return Handlers.dict_wrapper
        return None

    @staticmethod
    def _optimizer_name(c: Call) -> str | None:
        fam = _family(c.qual)
        opt = api.optimizer_class(fam, c.name)
        if opt is None and c.name == "Adafactor":
            opt = api.optimizer_class("transformers", c.name)
        if opt is None and c.owner == "optim" and fam != "torch":
            opt = api.optimizer_class("bnb", c.name)
        return opt

    def _library_optimizer_base(self, c: Call, cls: Class) -> Ref | None:
        """The library optimizer class (data/library_api.json optimizer_classes) a checkout class derives from."""
        return next((b for b in cls.lineage() if isinstance(b, Ref)
                     and self._optimizer_name(Call(c.it, b.qual, [], {}, False, c.line)) is not None), None)

    def construct_user(self, c: Call, cls: Class) -> Any:
        base = library_base(cls, api.training_arguments())
        if base:
            return c.new(TrainingArgs, api.training_arguments()[base], ("output_dir",), user_class=cls)
        base = library_base(cls, api.trainers())
        base = _copied_trainer(cls, base, api.trainers()) or base  # `class DPOTrainer(Trainer)`: TRL's, copied
        # `ProjectTrainer(args, accelerator)`, or a model id given to a subclass of transformers' Trainer (which
        # takes only a model object): its own __init__ builds the model
        if base and (not _library_call(c) or _id_for_an_object_trainer(c, base)):
            own = self.own_trainer_init(c, cls, base)
            if own is not None:
                return own
        base = base or _vendored_trainer(cls, api.trainers())
        if base:
            return self.trainer(Call(c.it, base, c.args, c.kwargs, c.open, c.line), user=cls)
        base = library_base(cls, _SUBCLASSED_PARSERS)
        if base:  # class ArgumentParserPlus(HfArgumentParser): parses as its library base does, its own methods run
            made = _BY_NAME[base](self, Call(c.it, base, c.args, c.kwargs, c.open, c.line))
            if isinstance(made, HfParser):
                made.user_class = cls
            return made
        base = library_base(cls, api.collators())
        if base:  # class CompletionCollator(DataCollatorForLanguageModeling): it pads as its library base
            return self.collator(Call(c.it, base, c.args, c.kwargs, c.open, c.line))
        opt_base = self._library_optimizer_base(c, cls)
        if opt_base is not None:
            # class MemoryEfficientAdamW(torch.optim.AdamW): an optimizer of its library base's state layout, stepped
            # as that base is (the subclass's own step() is not followed)
            return self.call_ref(Call(c.it, opt_base.qual, c.args, c.kwargs, c.open, c.line), opt_base)
        hooked = _hook_update_optimizer(cls)
        if hooked is not None:
            # an Optimizer subclass of the checkout whose parameter hooks update the weights during backward and that
            # keeps no state (LOMO's fused update): that layout's optim name; built on the model, stepped in backward
            name, how = hooked
            opt = Optimizer(cls.name, c.line or 0, {"params": c.arg(0, "params")}, {}, c.open, optim=name)
            opt.how = f"{cls.name} ({cls.file or 'the script'}:{cls.line}): {how}"
            c.it.facts.objects.append(opt)
            return opt
        if cls.is_dataclass:
            if cls.validated:
                c = self.validated_input(c, cls)
            inst = c.new(DataclassInstance, cls.name, tuple(cls.fields), user_class=cls)
            post = cls.lookup("__post_init__")
            if post is not None and post[0] == "method" and isinstance(post[1], Func):
                c.it.call_function(post[1], [inst], {}, c.line)  # padded_vocab_size = find_multiple(...)
            return inst
        cfg = c.arg(0, "config")
        if isinstance(cfg, HfConfig) and _MODEL_CLASS.match(cls.name) and not _NOT_MODEL.search(cls.name) \
                and _pretrained_model_class(cls):
            # the checkout's copy of a transformers model class (class LlamaForCausalLM(PreTrainedModel)) built from
            # a config: a model of that config, as transformers' own class would be (from_config)
            return self._load_model(Call(c.it, f"{cls.name}.from_config", [cfg], {**c.kwargs, "_constructed": True},
                                         c.open, c.line),
                                    cls.name, "from_config")
        if custom_model.is_module_class(cls, library_base):
            return self.script_model(c, cls)
        inst = Instance(cls.name, c.line or 0, {}, {}, c.open, user_class=cls)
        c.it.instances.append(inst)
        init = cls.lookup("__init__")
        if init is not None and init[0] == "method":
            c.it.call_function(init[1], [inst, *c.args], dict(c.kwargs), c.line)
        self.iterator_batch(c, cls)
        return inst

    def class_loader(self, cls: Class, attr: str) -> ClassLoader | None:
        """A class attribute the checkout does not define that a library base gives it: a validated model's
        constructor from a dict (`Config.model_validate`), a transformers model's loaders (`from_pretrained`)."""
        if cls.validated and attr in api.dict_constructors():
            return ClassLoader(cls, attr)
        return self.checkout_loader(cls, attr)

    def validated_input(self, c: Call, cls: Class) -> Call:
        """The keywords a pydantic model keeps: each key under the field it aliases (`Field(alias="model")`), and a
        dict given for a field annotated with a model built into that model (pydantic validates nested models)."""
        aliases: dict = {}
        nested: dict = {}
        for c_ in reversed([x for x in cls.lineage() if isinstance(x, Class)]):  # a subclass's declaration wins
            aliases.update(c_.aliases)
            nested.update(c_.nested)
        strict = cls.class_lookup("model_config") is None and cls.class_lookup("Config") is None  # no populate_by_name
        kwargs = {}
        for key, v in c.kwargs.items():
            if strict and key in aliases.values() and key not in aliases:
                continue  # a field with an alias takes its value by the alias only (pydantic's default)
            name = aliases.get(key, key)
            sub = nested.get(name)
            if sub is not None and isinstance(v, Dict):
                v = self.construct_user(Call(c.it, sub.name, [], dict(v.items), v.open, c.line), sub)
            kwargs[name] = v
        return Call(c.it, c.qual, c.args, kwargs, c.open, c.line)

    def from_dict(self, it: Any, cls: Class, args: list, kwargs: dict, line: int | None) -> Any:
        """`Config.model_validate(d)` / `Config.parse_obj(d)`: the model built from the dict's keys."""
        d = args[0] if args else kwargs.get("obj")
        if isinstance(d, Dict):
            return self.construct_user(Call(it, cls.name, [], dict(d.items), d.open, line), cls)
        return self.construct_user(Call(it, cls.name, [], {}, True, line), cls)

    @staticmethod
    def iterator_batch(c: Call, cls: Class) -> None:
        """A checkout class that iterates batches (it defines __iter__), built with a per-device batch size keyword
        (`microbatch_size=8`, `batch_size=bs`; not a global, total or evaluation one): the loop's micro-batch when
        no DataLoader is found."""
        if cls.lookup("__iter__") is None:
            return
        names = api.batch_size_names()
        found = []
        for key, v in c.kwargs.items():
            low = str(key).lower()
            if not any(low == n or low.endswith(n) for n in names) or low.startswith(_NOT_PER_DEVICE):
                continue
            if isinstance(v, Const) and isinstance(v.value, (int, float)) and not isinstance(v.value, bool) \
                    and float(v.value).is_integer() and v.value > 0:  # `batch_size / (processes * accum)`: 8.0
                v = v.with_value(int(v.value))
                found.append((0 if low.startswith(("micro", "mini", "per_device")) else 1, key, v))
        if found:
            _, key, v = min(found, key=lambda t: t[0])
            c.it.facts.iterator_batches.append(
                v.with_value(v.value, f"{cls.name}({key}={v.value}) (line {c.line}): the batches its __iter__ yields"))

    def method(self, it: Any, obj: Obj, name: str, args: list, kwargs: dict, open_kw: bool, line: int | None) -> Any:
        if isinstance(obj, ArgParser):
            return self.argparse_method(it, obj, name, args, kwargs, line)
        if isinstance(obj, TrainingArgs) and name == "to_dict" and not args:
            return _args_dict(obj)
        if isinstance(obj, HfParser):
            return self.hfparser_method(it, obj, name, args, kwargs, line)
        if obj.cls == "importlib.ModuleSpec" and name == "load_module":  # SourceFileLoader(name, path).load_module()
            return self.load_module(it, obj, line)
        uc = getattr(obj, "user_class", None)
        if name in ("dict", "model_dump") and not args and isinstance(uc, Class) and uc.validated:
            # a pydantic model's fields as a dict (v1's .dict(), v2's .model_dump()), as dataclasses.asdict gives them
            return _dumped(self.asdict(Call(it, "dataclasses.asdict", [obj], {}, False, line)), kwargs)
        if name == "save_hyperparameters" and isinstance(getattr(obj, "user_class", None), Class) \
                and library_base(obj.user_class, LIGHTNING_HPARAMS):
            return self.save_hyperparameters(it, obj, args, kwargs, line)
        if isinstance(obj, Model):
            return self.model_method(it, obj, name, args, kwargs, line)
        if isinstance(obj, Instance) and name in MODULE_SELF_METHODS:
            # the script's own module around a model: `.to(torch.bfloat16)`, `.cuda()` cast or move what it holds
            from memlint.extract.handlers.distributed import _held_models

            for inner in _held_models(obj):
                self.model_method(it, inner, name, args, kwargs, line)
            return obj
        if isinstance(obj, Trainer) and name == "train":
            it.facts.trained.append(obj)
            return Unknown("training output")
        if isinstance(obj, Trainer) and name == "save_model":
            self.saved_model(it, obj.kwargs.get("model"), args[0] if args else kwargs.get("output_dir"), line)
            return Const(None, "literal", line)
        if isinstance(obj, Tokenizer) and name in _TOKENIZE_METHODS:
            return self.tokenize(it, obj, args, kwargs, line, name)
        if isinstance(obj, Optimizer) and name == "step":
            it.facts.steps.append(OptimizerStep(obj, it.accum[-1] if it.accum else it.micro_accum, line))
            return Const(None, "literal", line)
        if isinstance(obj, Accelerator):
            return self.accelerator_method(it, name, args, line)
        if isinstance(obj, LightningTrainer):
            return self.lightning_method(it, obj, name, args, kwargs, line)
        if isinstance(obj, DeepSpeedEngine):
            if name == "backward":
                it.facts.backward.append(line)
                return Const(None, "literal", line)
            if name in ("step", "train", "eval", "save_checkpoint", "load_checkpoint", "zero_grad"):
                return Const(None, "literal", line)
            if isinstance(obj.model, Model):
                return self.model_method(it, obj.model, name, args, kwargs, line)
            return Unknown(f"engine.{name}()")
        if isinstance(obj, Scaler) and name == "step":
            opt = args[0] if args else None
            if isinstance(opt, Optimizer):
                it.facts.steps.append(OptimizerStep(opt, it.accum[-1] if it.accum else it.micro_accum, line))
            return Const(None, "literal", line)
        if isinstance(obj, Dataset) and name in ("map", "filter", "with_transform", "set_transform"):
            before = len(it.facts.tokenizer_calls)
            self.mapped_function(it, args, kwargs, line)
            # `apply_chat_template(..., tokenize=False)` makes a string, not token ids
            made = tuple(c for c in it.facts.tokenizer_calls[before:]
                         if not (isinstance(c.kwargs.get("tokenize"), Const) and c.kwargs["tokenize"].value is False))
            if made and name == "map":  # `ds.map(lambda x: tokenizer(x["text"]))`: rows of input_ids from here on
                obj.tokenized_by = (*obj.tokenized_by, *made)
            return obj
        if isinstance(obj, Dataset) and name in _DATASET_VIEWS:  # ds.select(range(50)), ds.shuffle(): the same rows
            return obj
        if name == "parameters" or name == "named_parameters":
            return Params("parameters", line or 0, model=obj)
        if name == "register_post_accumulate_grad_hook":
            it.facts.grad_hooks.append(GradHook(_steps_an_optimizer(args[0] if args else kwargs.get("hook")), line))
        return Unknown(f"the result of .{name}()")


# batch-size keywords that are not one device's micro-batch
_NOT_PER_DEVICE = ("global", "total", "effective", "world", "eval", "val", "test")

# datasets' methods that return the same rows (or a part of them): their columns are the dataset's
_DATASET_VIEWS = frozenset({"select", "shuffle", "remove_columns", "rename_column", "rename_columns", "select_columns",
                            "with_format", "sort", "flatten", "take", "skip", "train_test_split", "cast", "cast_column"})


# Library calls by qualified name, then by their last component: each module's own table.
_QUALIFIED: dict[str, Callable[[Handlers, Call], Any]] = {
    **language.QUALIFIED, **entrypoints.QUALIFIED, **distributed.QUALIFIED, **loop.QUALIFIED, **peft.QUALIFIED,
}
_BY_NAME: dict[str, Callable[[Handlers, Call], Any]] = {
    **language.BY_NAME, **datafiles.BY_NAME, **cli.BY_NAME, **entrypoints.BY_NAME, **hf.BY_NAME, **quant.BY_NAME,
    **peft.BY_NAME, **trl.BY_NAME, **distributed.BY_NAME, **loop.BY_NAME,
}


__all__ = ["Call", "Handlers", "_declares", "library_base"]


# TrainingArguments fields a memory plan reads: to_dict() carries each, set or at its default, into the next config
_PLAN_ARGS = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps", "bf16", "fp16",
              "gradient_checkpointing", "optim", "group_by_length", "deepspeed", "fsdp", "torch_compile")


def _args_dict(obj: Any) -> Any:
    """`training_args.to_dict()`: every field, set or at its default (`SFTConfig(**args.to_dict())` takes the
    TrainingArguments defaults over SFTConfig's own)."""
    from memlint.extract.objects import field_value

    items = {k: v for k, v in obj.kwargs.items() if isinstance(k, str)}
    for k in _PLAN_ARGS:
        if k not in items:
            v = field_value(obj, k)
            if not isinstance(v, Unknown):
                items[k] = v
    return Dict(items, bool(obj.open))


def _dumped(fields: Any, kwargs: dict) -> Any:
    """A pydantic model's dump with its keywords: include= / exclude= (names), exclude_none=; by_alias=,
    exclude_unset= or exclude_defaults= (which memlint does not follow) leave it unknown."""
    if not isinstance(fields, Dict):
        return fields
    items = dict(fields.items)
    for key, v in kwargs.items():
        truth = v.value if isinstance(v, Const) else None
        names = {x.value for x in flatten(v.items if isinstance(v, Seq) else list(v.items) if isinstance(v, Dict) else [])
                 if isinstance(x, Const)} if isinstance(v, (Seq, Dict)) else None
        if key in ("include", "exclude") and names is not None:
            items = {k: x for k, x in items.items() if (k in names) == (key == "include")}
        elif key == "exclude_none" and isinstance(truth, bool):
            items = {k: x for k, x in items.items() if not (truth and isinstance(x, Const) and x.value is None)}
        elif key == "mode" or key in ("by_alias", "exclude_unset", "exclude_defaults") and truth is False:
            continue
        else:
            return Unknown(f"a pydantic dump with {key}=")
    return Dict(items)


def _trainer_of_arguments(args: Any) -> str | None:
    """The library trainer a library's training-arguments object belongs to (TrainingArguments: Trainer, TRL's
    SFTConfig: SFTTrainer): a `...Trainer` class of an installed package memlint cannot read, built with such
    arguments, is read as a subclass of that trainer (LLaVA's `LLaVATrainer(model=..., args=training_args)`)."""
    if not isinstance(args, TrainingArgs):
        return None
    names = [n for n, f in api.trainers().items() if f.arguments == args.cls]
    own = args.cls.rsplit(".", 1)[-1].replace("TrainingArguments", "Trainer").replace("Config", "Trainer")
    return own if own in names else min(names, key=len) if names else None


def _id_for_an_object_trainer(c: Call, base: str) -> bool:
    """A model id (a string) given as the model of a subclass of a trainer that takes only a model object
    (transformers' Trainer: its arguments are transformers'): the subclass's own __init__ loads it."""
    facts = api.trainer(base)
    model = c.kwargs.get("model", c.args[0] if c.args else None)
    return facts is not None and facts.arguments.startswith("transformers.") \
        and isinstance(model, Const) and isinstance(model.value, str)


def _library_call(c: Call) -> bool:
    """A trainer subclass called as its library base is (`MyTrainer(model=model, args=args, ...)`, or the model
    first): read with the library's knowledge of that trainer, not through a copy of the library's __init__ that
    the subclass may carry."""
    if "model" in c.kwargs or "model_init" in c.kwargs:
        return True
    return bool(c.args) and any(isinstance(x, Model) or isinstance(x, Const) and isinstance(x.value, str)
                                for x in flatten(c.args[0]))


_ALLOCATIONS = frozenset({"zeros", "zeros_like", "empty", "empty_like", "ones", "ones_like", "full", "full_like", "randn_like"})
_IN_PLACE = frozenset({"add_", "sub_", "copy_", "addcdiv_", "addcmul_", "mul_", "lerp_"})


def _hook_update_optimizer(cls: Class) -> tuple[str, str] | None:
    """(optim name, why) for a checkout torch.optim.Optimizer subclass that registers a per-parameter gradient hook
    (library/api.hook_optimizer), updates tensors in place, and allocates no state: no `self.state`, no
    zeros/empty/ones buffers anywhere in its methods (its own and its checkout bases'). None otherwise."""
    import libcst as cst

    from memlint.extract.interp.libraries import _optimizer_class
    from memlint.extract.interp.syntax import _walk

    if not _optimizer_class(cls):
        return None
    hooks, in_place, state = set(), False, False
    for k in cls.lineage():
        if not isinstance(k, Class):
            continue
        for f in k.methods.values():
            node = getattr(f, "node", None)
            if node is None:
                continue
            for n in _walk(node):
                if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute):
                    a = n.func.attr.value
                    if a in ("register_hook", "register_post_accumulate_grad_hook"):
                        hooks.add(a)
                    elif a in _IN_PLACE:
                        in_place = True
                    elif a in _ALLOCATIONS:
                        state = True
                elif isinstance(n, cst.Attribute) and n.attr.value == "state" and isinstance(n.value, cst.Name) \
                        and n.value.value == "self":
                    state = True
    if len(hooks) != 1 or not in_place or state:
        return None
    hook = next(iter(hooks))
    name = api.hook_optimizer(hook)
    if name is None:
        return None
    return name, (f"a .{hook}() on each parameter updates the weights in place as its gradient arrives, and no "
                  f"optimizer state is allocated: {name}'s fused update in backward")

