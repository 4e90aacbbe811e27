"""Attributes of the objects a script builds: a parsed argument's default, a dataclass field, a
namespace's sources, `model.config` and a catalogued model's published config values, what `vars(obj)`
lists, and the attribute writes that matter (`model.gradient_checkpointing = True`, a length argument
set after construction).
"""

from __future__ import annotations

import functools
from typing import Any

from memlint.extract.objects import (
    Accelerator, ArgNamespace, BoundMethod, Collator, DataLoader, DataclassInstance, Dataset, DeepSpeedEngine, HfConfig,
    Instance, LengthArg, Method, Model, Namespace, Obj, PeftConfig, Plugin, QuantConfig, Setting, Tokenizer,
    Trainer, TrainingArgs, field_value,
)
from memlint.extract.values import Class, Const, Dict, Func, Unknown
from memlint.library import api
from memlint.extract.handlers.common import LIGHTNING_HPARAMS, library_base


# nn.Module's methods that return the module itself (a cast or a move of every parameter it holds)
MODULE_SELF_METHODS = frozenset({"to", "cuda", "cpu", "half", "bfloat16", "float", "train", "eval", "requires_grad_"})
_TORCH_MODULES = frozenset({"Module", "LightningModule", "PreTrainedModel"})


class AttributeHandlers:
    """Reading and writing attributes of known objects."""

    def getattr(self, it: Any, obj: Obj, attr: str, line: int | None) -> Any:
        value = self._getattr(it, obj, attr, line)
        if attr in api.length_arguments() and (
                isinstance(obj, (ArgNamespace, Namespace, DataclassInstance)) and not isinstance(obj, TrainingArgs)
                or isinstance(obj, TrainingArgs) and _declares(obj.user_class, attr)
                or isinstance(obj, Instance) and isinstance(value, Const) and type(value.value) is int):
            # (a script class's own cap, `self.max_seq_len = max_seq_len` of a data processor, counts as the script's)
            # a TrainingArguments subclass's own field (`model_max_length: int = field(...)`) is the script's too
            it.facts.length_args.append(LengthArg(attr, value, line))
        if attr in api.target_length_arguments() and isinstance(obj, (ArgNamespace, Namespace, DataclassInstance)):
            it.facts.target_length_args.append(LengthArg(attr, value, line))
        return value

    def _getattr(self, it: Any, obj: Obj, attr: str, line: int | None) -> Any:
        if attr in obj.attrs:
            return obj.attrs[attr]
        if isinstance(obj, ArgNamespace):
            return self.arg_default(obj, attr)
        if isinstance(obj, Namespace):
            return self.namespace_attr(it, obj, attr, line)
        if isinstance(obj, (TrainingArgs, DataclassInstance)):
            uc = obj.user_class
            hit = uc.lookup(attr) if isinstance(uc, Class) and attr not in obj.kwargs else None
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func) and _is_getter(hit[1]):
                return it.call_function(hit[1], [obj], {}, line)  # `@property def grad_accum(self)`: its value
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func) and not _is_property(hit[1]):
                return BoundMethod(hit[1], obj)  # cfg.create_bnb_config("4bit"): a method of the script's dataclass
            if attr == "to_dict" and isinstance(obj, TrainingArgs) and attr not in obj.kwargs:
                return Method(obj, attr)  # training_args.to_dict(): read by the handlers' method()
            if attr in ("dict", "model_dump") and isinstance(uc, Class) and uc.validated and hit is None:
                return Method(obj, attr)  # a pydantic model's .dict() / .model_dump(): read by the handlers' method()
            got = field_value(obj, attr)
            if isinstance(got, Unknown) and hit is not None and hit[0] == "field" and _class_attribute(uc, attr):
                return hit[1]  # `sharding_strategy = ShardingStrategy.FULL_SHARD` unannotated: the class's, on each instance
            return got
        if isinstance(obj, (PeftConfig, QuantConfig, Collator, DataLoader, Accelerator, Tokenizer, HfConfig, Plugin)):
            if attr in obj.kwargs:
                return obj.kwargs[attr]
        if isinstance(obj, HfConfig):
            published = _published_config_value(obj.kwargs.get("model_id"), attr, line, it.cur_file())
            if published is not None:
                return published
        if isinstance(obj, Model) and attr == "config":
            root = obj
            while root.base is not None:
                root = root.base
            kwargs = {"model_id": root.kwargs.get("pretrained_model_name_or_path", root.kwargs.get("model_name"))}
            klass = next((p for p in reversed(root.cls.split(".")) if p[:1].isupper()), "")  # X.from_pretrained: X
            if klass and api.task_head(klass) == "causal-lm":
                # a ...ForCausalLM is decoder-only (a trainer's `if model.config.is_encoder_decoder:` branch never runs)
                kwargs["is_encoder_decoder"] = Const(False, "library-default", line, (
                    f"{klass} is a decoder-only model: config.is_encoder_decoder is False",))
            return HfConfig("config", line or 0, kwargs)
        if isinstance(obj, Accelerator) and attr == "num_processes":
            return self.world_size(it, "accelerator.num_processes")
        if isinstance(obj, DeepSpeedEngine) and attr == "module":
            return obj.model
        if isinstance(obj, Trainer) and attr == "model" and isinstance(obj.kwargs.get("model"), Model):
            return obj.kwargs["model"]  # trainer.model: the model it trains (its base is the one it was given)
        if isinstance(obj, Model) and attr == "module" and obj.shard is not None and obj.base is not None:
            return obj.base  # DistributedDataParallel(model).module / FSDP(model).module: the wrapped model
        if isinstance(obj, Model) and obj.user_class is not None:  # the script's nn.Module: its own methods run
            hit = obj.user_class.lookup(attr)
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func) and not _is_property(hit[1]):
                return BoundMethod(hit[1], obj)
        if isinstance(obj, Instance) and obj.user_class is not None:
            hit = obj.user_class.lookup(attr)
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func) and _is_getter(hit[1]):
                return it.call_function(hit[1], [obj], {}, line)  # a @property of the script's class: its value
            if hit is not None:
                return BoundMethod(hit[1], obj) if hit[0] == "method" else hit[1]
            if attr == "save_hyperparameters" and library_base(obj.user_class, LIGHTNING_HPARAMS):
                return Method(obj, attr)  # the LightningModule's own method: it sets self.hparams
            if attr in MODULE_SELF_METHODS and library_base(obj.user_class, _TORCH_MODULES):
                return Method(obj, attr)  # nn.Module's .to() / .cuda() / .train(): the module itself, cast or moved
            return Unknown(f"{obj.cls}.{attr}")
        return Method(obj, attr)

    def fields_dict(self, it: Any, obj: Obj) -> Dict | None:
        """vars(obj) as a dict of its fields, for an object whose every field memlint knows (parse_args())."""
        if isinstance(obj, ArgNamespace) and obj.parser is not None and not obj.given:
            items = {dest: self.arg_default(obj, dest) for dest in obj.parser.args}
            items.update(obj.attrs)
            return Dict(items)
        return None

    def namespace_attr(self, it: Any, ns: Namespace, attr: str, line: int | None) -> Any:
        if attr in ns.kwargs:
            return ns.kwargs[attr]
        for src in ns.sources:
            if attr in src.attrs or attr in src.kwargs or attr in getattr(src, "cli", {}):
                return self.getattr(it, src, attr, line)
            uc = getattr(src, "user_class", None)
            if isinstance(uc, Class) and uc.lookup(attr) is not None:
                return self.getattr(it, src, attr, line)
            if isinstance(src, ArgNamespace) and src.parser is not None and attr in src.parser.args:
                return self.arg_default(src, attr)
        targs = next((s for s in ns.sources if isinstance(s, TrainingArgs)), None)
        if targs is not None:
            return field_value(targs, attr)
        return Unknown(f"{attr} of a namespace memlint could not follow")

    def getitem(self, it: Any, obj: Obj, key: Const, line: int | None) -> Any:
        if isinstance(obj, Dataset) and isinstance(key, Const) and isinstance(key.value, str):
            return obj  # ds["train"]: a split of the same rows
        return Unknown(f"an item of {obj.cls}")

    def on_setattr(self, it: Any, obj: Obj, attr: str, value: Any, line: int | None) -> None:
        if isinstance(obj, Model) and attr == "gradient_checkpointing":
            obj.gc.append(Setting(value, line, "model.gradient_checkpointing = …"))
        if attr in api.length_arguments() and isinstance(obj, (TrainingArgs, ArgNamespace, Namespace, DataclassInstance)):
            # `training_args.max_seq_len = 4096` after construction: the script's own length argument
            it.facts.length_args.append(LengthArg(attr, value, line))

    def on_sub_setattr(self, it: Any, obj: Obj, path: str, attr: str, value: Any, line: int | None) -> None:
        """`model.transformer.gradient_checkpointing = True`: an attribute of a part of a known model."""
        if isinstance(obj, Model) and attr == "gradient_checkpointing":
            obj.gc.append(Setting(value, line, f"model.{path}.gradient_checkpointing = …"))

    def declares(self, obj: Any, name: str) -> bool:
        """Whether `vars(obj)` has the field `name`: set on it, given to it, parsed for it, or declared by its
        class (the script's dataclass, a library dataclass whose fields are data)."""
        if not isinstance(obj, Obj):
            return False
        if name in obj.attrs or name in obj.kwargs or name in getattr(obj, "cli", {}):
            return True
        uc = getattr(obj, "user_class", None)
        if isinstance(uc, Class):
            hit = uc.lookup(name)
            if hit is not None and hit[0] == "field":
                return True
        if isinstance(obj, ArgNamespace) and obj.parser is not None:
            return name in obj.parser.args
        if isinstance(obj, TrainingArgs) or getattr(obj, "library", None):
            from memlint.library.defaults import declared_fields

            return name in declared_fields(getattr(obj, "library", None) or obj.cls)
        return False


def _class_attribute(c: Any, attr: str) -> bool:
    """`attr` is a plain class attribute (no annotation) of the class or a user-class base, not a field."""
    return any(isinstance(k, Class) and attr in k.class_attrs and attr not in k.fields for k in c.lineage()) \
        if isinstance(c, Class) else False


def _is_getter(f: Func) -> bool:
    """A `@property` / `@cached_property` getter (not its setter)."""
    return any(getattr(d.decorator, "value", None) in ("property", "cached_property") or
               getattr(getattr(d.decorator, "attr", None), "value", None) == "cached_property"
               for d in f.node.decorators)


def _is_property(f: Func) -> bool:
    """A property's getter or setter (a method read as an attribute, never called as one)."""
    return _is_getter(f) or any(getattr(getattr(d.decorator, "attr", None), "value", None) == "setter"
                                for d in f.node.decorators)


def _declares(c: Any, attr: str) -> bool:
    """Whether the script's class `c` (or one of its script bases) declares field `attr`."""
    seen = 0
    while isinstance(c, Class) and seen < 20:
        seen += 1
        if attr in c.fields:
            return True
        nxt = [b for b in c.bases if isinstance(b, Class)]
        c = nxt[0] if nxt else None
    return False


def _published_config_value(model_id: Any, attr: str, line: int | None, file: str | None) -> Const | None:
    """`model.config.max_position_embeddings` for a model memlint's catalog has: the value its
    published config.json holds (the catalog keeps it, cited). None for a key the catalog does not
    keep or a model it does not know: the config class may still set it."""
    if not (isinstance(model_id, Const) and isinstance(model_id.value, str)):
        return None
    spec = _catalogued(model_id.value)
    if spec is None or attr not in spec.config or isinstance(spec.config[attr], (dict, list)):
        return None
    value = spec.config[attr]
    return Const(value, "library-default", line, model_id.chain + (f"{spec.id}'s config.json: {attr} = {value!r}",), file)


@functools.lru_cache(maxsize=64)
def _catalogued(model_id: str) -> Any:
    """The catalog's ModelSpec for `model_id`, or None (resolved once per id: a loop over config keys
    asks again and again, and resolving stats the file system)."""
    from memlint.catalog import resolve
    from memlint.errors import MemlintError

    try:
        return resolve(model_id)
    except MemlintError:
        return None
