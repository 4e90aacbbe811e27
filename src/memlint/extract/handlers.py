"""What memlint knows about the libraries a training script calls.

The interpreter hands every call it cannot inline to `call`; this module builds the
objects (configs, models, trainers, parsers; extract/objects.py) and records facts. Names
match on the last component, so aliases (`import transformers as tf`, `from trl import
SFTConfig as C`) and star imports resolve alike. Which classes are trainers, argument
classes, collators and optimizers is data (memlint.library.api).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from memlint.extract import budget
from memlint.extract.interp import _BUILTIN_CALLS, BoundStr, BoundUnknown
from memlint.extract.objects import (
    Accelerator, Accumulate, ArgNamespace, ArgParser, ArgSpec, Autocast, AutocastCall, Collator, DataclassInstance,
    DataLoader, Dataset, DtypeName, HfConfig, HfParser, LigerPatch, Method, Model, Obj, Optimizer, OptimizerStep,
    Params, Partial, PeftConfig, Plugin, QuantConfig, Range, Scaler, Setting, Tokenizer, TokenizerCall, Trainer,
    TrainingArgs, dtype_of, field_value,
)
from memlint.extract.values import Alts, Class, Const, Dict, Func, Ref, Seq, Unknown, flatten, weakest
from memlint.library import api

_MODEL_CLASS = re.compile(r"^(Auto(Peft)?Model\w*|\w+For[A-Z]\w*|\w+(LM|Model|LMHeadModel))$")
_NOT_MODEL = re.compile(r"Tokenizer|Config|Processor|Extractor|ImageProcessor")
_STR_METHODS = {"split", "rsplit", "lower", "upper", "strip", "replace", "format", "join", "startswith", "endswith", "rstrip", "lstrip"}
_TOKENIZE_METHODS = {"__call__", "encode", "encode_plus", "batch_encode_plus", "apply_chat_template", "pad"}
_TORCH_DTYPES = ("float16", "bfloat16", "float32", "half", "float")


def _last(qual: str) -> str:
    return qual.rsplit(".", 1)[-1]


def _family(qual: str) -> str:
    head = qual.split(".", 1)[0]
    return "bnb" if head == "bitsandbytes" else head


def library_base(v: Any, names: Any) -> str | None:
    """The library class a user class derives from (`class MyArgs(TrainingArguments)`)."""
    seen = 0
    stack = [v]
    while stack and seen < 20:
        seen += 1
        x = stack.pop()
        if isinstance(x, Ref) and _last(x.qual) in names:
            return _last(x.qual)
        if isinstance(x, Class):
            stack.extend(x.bases)
    return None


@dataclass
class Call:
    """One call of a library name: what was called and with what."""

    it: Any                  # the Interpreter
    qual: str                # the resolved dotted name: "transformers.AutoModelForCausalLM.from_pretrained"
    args: list
    kwargs: dict
    open: bool               # **kwargs memlint could not resolve
    line: int | None

    @property
    def name(self) -> str:
        return _last(self.qual)

    @property
    def owner(self) -> str:
        """The component before the name: "AutoModelForCausalLM" in ….AutoModelForCausalLM.from_pretrained."""
        return _last(self.qual.rsplit(".", 1)[0]) if "." in self.qual else ""

    @property
    def head(self) -> str:
        return self.qual.split(".", 1)[0]

    def arg(self, i: int, name: str | None = None, default: Any = None) -> Any:
        """Positional argument i, else keyword `name`."""
        if i < len(self.args):
            return self.args[i]
        return self.kwargs.get(name, default) if name else default

    def new(self, kind: type, cls: str, positional: tuple[str, ...] | list[str] = (), **fields: Any) -> Any:
        """An object of `kind` built by this call, recorded in the facts."""
        kw = dict(self.kwargs)
        for pname, a in zip(positional, self.args):
            kw.setdefault(pname, a)
        o = kind(cls, self.line or 0, kw, {}, self.open, **fields)
        self.it.facts.objects.append(o)
        return o


class Handlers:
    """Stateless: the interpreter passes itself in."""

    # ---- decorators (click, typer) ---------------------------------------------------------

    def decorate(self, it: Any, f: Func, deco: Any, env: Any) -> Any:
        import libcst as cst

        if not isinstance(deco, cst.Call):
            return None
        callee = it.ev(deco.func, env)
        if not isinstance(callee, Ref):
            return None
        name = _last(callee.qual)
        if name in ("option", "argument") and callee.qual.split(".")[0] in ("click", "option", "argument") or (
                name in ("option", "argument") and "click" in callee.qual):
            decls = [a.value for a in deco.args if a.keyword is None]
            kw = {a.keyword.value: a.value for a in deco.args if a.keyword is not None}
            names = []
            for d in decls:
                v = it.ev(d, env)
                if isinstance(v, Const) and isinstance(v.value, str):
                    names.append(v.value)
            param = None
            plain = [n for n in names if not n.startswith("-")]
            if plain:
                param = plain[0]
            else:
                longs = [n for n in names if n.startswith("--")] or names
                if longs:
                    param = longs[0].lstrip("-").split("/")[0].replace("-", "_").lower()
            if not param:
                return None
            dline = it.line_of(deco)
            how = f"@click.{name}({', '.join(repr(n) for n in names)}) (line {dline})"
            if "default" in kw:
                f.defaults[param] = it.ev(kw["default"], env)
            else:
                f.defaults[param] = Const(False if "is_flag" in kw else None, "literal", dline, (), it.cur_file())
            f.default_source[param] = ("click-default", how, dline, it.cur_file())
        return None

    # ---- calls -----------------------------------------------------------------------------

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
        if isinstance(f, Partial):
            if isinstance(f.func, Func):
                return it.call_function(f.func, f.args + args, {**f.kwargs, **kwargs}, line)
            return Unknown("a call")
        if isinstance(f, Model):
            return Unknown("the model's outputs")
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
        if c.qual.startswith("builtins."):
            return self.builtin(c.it, c.name, c.args, c.kwargs, c.line)
        if c.head == "liger_kernel" and c.name.startswith("apply_liger_kernel_to_"):
            c.it.facts.liger_calls.append(LigerPatch(c.qual, c.kwargs, c.line))
            return Const(None, "literal", c.line)
        handler = _QUALIFIED.get(c.qual) or _BY_NAME.get(c.name) or self._data_handler(c.name)
        if handler is not None:
            out = handler(self, c)
            if out is not _PASS:
                return out
        if c.head == "torch" and c.name in _TORCH_DTYPES:
            return f
        opt = self._optimizer_name(c)
        if opt is not None:
            return c.new(Optimizer, c.qual, ("params", "lr"), optim=opt)
        return Unknown(f"the result of {c.qual}()")

    @staticmethod
    def _data_handler(name: str) -> Callable[["Handlers", Call], Any] | None:
        """Classes the library data names: argument classes, trainers, PEFT configs, collators."""
        if name in api.training_arguments():
            return Handlers.training_args
        if api.trainer(name) is not None:
            return Handlers.trainer
        if name in api.peft_configs():
            return Handlers.peft_config
        if name in api.collators():
            return Handlers.collator
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

    # ---- library constructors ---------------------------------------------------------------

    def training_args(self, c: Call) -> Any:
        return c.new(TrainingArgs, api.training_arguments()[c.name], ("output_dir",))

    def trainer(self, c: Call, user: Class | None = None) -> Any:
        facts = api.trainer(c.name)
        return c.new(Trainer, c.name, facts.positional, user_class=user.name if user else None)

    def peft_config(self, c: Call) -> Any:
        return c.new(PeftConfig, f"peft.{c.name}")

    def collator(self, c: Call) -> Any:
        return c.new(Collator, f"transformers.{c.name}", ("tokenizer",))

    def bnb_config(self, c: Call) -> Any:
        return c.new(QuantConfig, "transformers.BitsAndBytesConfig")

    def dataloader(self, c: Call) -> Any:
        return c.new(DataLoader, "torch.utils.data.DataLoader", ("dataset", "batch_size"))

    def accelerator(self, c: Call) -> Any:
        return c.new(Accelerator, "accelerate.Accelerator")

    def plugin(self, c: Call) -> Any:
        return c.new(Plugin, c.name)

    def scaler(self, c: Call) -> Any:
        c.it.facts.scalers.append(c.line)
        return Scaler(c.qual, c.line)

    def argparser(self, c: Call) -> Any:
        return ArgParser(c.qual, c.line)

    def hfparser(self, c: Call) -> Any:
        classes = c.arg(0, "dataclass_types")
        return HfParser(c.qual, c.line, classes=classes.items if isinstance(classes, Seq) else [classes])

    def dataset(self, c: Call) -> Any:
        return Dataset(c.qual, c.line)

    def autocast(self, c: Call) -> Any:
        cuda_amp = "cuda.amp" in c.qual
        device = Const("cuda", "literal", c.line) if cuda_amp else c.kwargs.get("device_type", c.args[0] if c.args else None)
        c.it.facts.autocasts.append(AutocastCall(c.kwargs.get("dtype"), device, c.kwargs.get("enabled"), c.line))
        return Autocast(c.qual, c.line or 0)

    # ---- models -----------------------------------------------------------------------------

    def from_pretrained(self, c: Call) -> Any:
        owner, how = c.owner, c.name
        if owner in api.unsloth_loaders():
            kw = dict(c.kwargs)
            if c.args:
                kw.setdefault("model_name", c.args[0])
            model = Model(c.qual, c.line or 0, kw, {}, c.open, loader="unsloth")
            tok = Tokenizer(c.qual, c.line or 0, {"model_max_length": kw.get("max_seq_length")}, unsloth=True)
            c.it.facts.objects.extend([model, tok])
            return Seq([model, tok], "tuple")
        if owner == "PeftModel":
            adapter = PeftConfig("peft.PeftModel.from_pretrained", c.line or 0, {}, {}, True,
                                 adapter=c.arg(1, "model_id"))
            return self.wrap_model(c.it, c.arg(0, "model"), c.line, peft=adapter)
        if owner == "AutoConfig" or owner.endswith("Config"):
            return HfConfig(c.qual, c.line or 0, {"model_id": c.arg(0, "pretrained_model_name_or_path")})
        if "Tokenizer" in owner or "Processor" in owner:
            kw = dict(c.kwargs)
            if c.args:
                kw.setdefault("pretrained_model_name_or_path", c.args[0])
            tok = Tokenizer(c.qual, c.line or 0, kw)
            c.it.facts.objects.append(tok)
            return tok
        if _MODEL_CLASS.match(owner) and not _NOT_MODEL.search(owner):
            return self._load_model(c, owner, how)
        return Unknown(f"{owner}.{how}()")

    def _load_model(self, c: Call, owner: str, how: str) -> Model:
        kw = dict(c.kwargs)
        if how == "from_config":
            cfg = c.arg(0, "config")
            kw["pretrained_model_name_or_path"] = cfg.kwargs.get("model_id") if isinstance(cfg, Obj) else Unknown("a model config")
            kw["_from_config"] = True
        elif c.args:
            kw.setdefault("pretrained_model_name_or_path", c.args[0])
        auto_peft = owner.startswith("AutoPeftModel")
        model = Model(c.qual, c.line or 0, kw, {}, c.open, loader="peft-auto" if auto_peft else "transformers")
        if auto_peft:
            model.peft = PeftConfig("peft.AutoPeftModel", c.line or 0, {}, {}, True, adapter=True)
        c.it.facts.objects.append(model)
        return model

    def get_peft_model(self, c: Call) -> Any:
        if c.owner in api.unsloth_loaders():
            return self.unsloth_peft(c)
        return self.wrap_model(c.it, c.arg(0, "model"), c.line, peft=c.arg(1, "peft_config"))

    def kbit_prep(self, c: Call) -> Any:
        # peft kept prepare_model_for_int8_training as a deprecated alias of the kbit one
        # (peft utils/other.py); alpaca-lora era scripts still call it.
        gc = c.kwargs.get("use_gradient_checkpointing", c.args[1] if len(c.args) > 1 else None)
        if gc is None:
            gc = ("library-default", "peft.prepare_model_for_kbit_training", "use_gradient_checkpointing")
        return self.wrap_model(c.it, c.arg(0, "model"), c.line, gc=Setting(gc, c.line, f"{c.name}(...)"))

    def unsloth_peft(self, c: Call) -> Any:
        cfg = PeftConfig("unsloth.FastLanguageModel.get_peft_model", c.line or 0, dict(c.kwargs))
        c.it.facts.objects.append(cfg)
        gc = c.kwargs.get("use_gradient_checkpointing")
        if gc is None:
            gc = ("library-default", "unsloth.FastLanguageModel.get_peft_model", "use_gradient_checkpointing")
        return self.wrap_model(c.it, c.arg(0, "model"), c.line, peft=cfg,
                               gc=Setting(gc, c.line, "FastLanguageModel.get_peft_model(use_gradient_checkpointing=…)"))

    def wrap_model(self, it: Any, model: Any, line: int | None, peft: Any = None, gc: Setting | None = None) -> Any:
        out = None
        for m in flatten(model):
            if isinstance(m, Model):
                w = Model(m.cls, line or 0, base=m, peft=peft)
                if gc is not None:
                    w.gc.append(gc)
                it.facts.objects.append(w)
                r: Any = w
            else:
                r = m if isinstance(m, Unknown) else Unknown("a model memlint could not follow")
            out = r if out is None else Alts((out, r))
        return out if out is not None else Unknown("a model")

    # ---- TRL model arguments ----------------------------------------------------------------

    def trl_model_config(self, c: Call) -> Any:
        if c.head != "trl":
            return _PASS
        return c.new(DataclassInstance, c.qual, library="trl.ModelConfig")

    def trl_config_of(self, c: Call) -> Any:
        """TRL's get_peft_config / get_quantization_config(model_args): a LoraConfig when
        use_peft, a BitsAndBytesConfig when load_in_4bit/8bit, else None (trl utils.py)."""
        if c.head != "trl":
            return _PASS
        m = c.arg(0, "model_args")
        if m is None:
            m = c.kwargs.get("model_config")
        if not isinstance(m, Obj):
            return Unknown(f"{c.qual}() of unknown model arguments")
        field = lambda attr: self.getattr(c.it, m, attr, c.line)  # noqa: E731
        if c.name == "get_peft_config":
            flags = [("use_peft", {"r": "lora_r", "lora_alpha": "lora_alpha", "target_modules": "lora_target_modules"})]
            kind, cls = PeftConfig, "peft.LoraConfig"
        else:
            flags = [("load_in_4bit", {"load_in_4bit": "load_in_4bit", "bnb_4bit_quant_type": "bnb_4bit_quant_type",
                                       "bnb_4bit_use_double_quant": "use_bnb_nested_quant"}),
                     ("load_in_8bit", {"load_in_8bit": "load_in_8bit"})]
            kind, cls = QuantConfig, "transformers.BitsAndBytesConfig"
        off = None
        for flag, mapping in flags:
            on = field(flag)
            if not isinstance(on, Const):
                return Unknown(f"trl.{c.name}(): {flag} is unknown")
            if on.value:
                o = kind(cls, c.line or 0, {k: field(a) for k, a in mapping.items()})
                c.it.facts.objects.append(o)
                return o
            off = off or on
        return Const(None, off.source, off.line, off.chain + (f"trl.{c.name}() returns None",), off.file)

    # ---- plumbing: fire, partial, the environment, paths, data files -------------------------

    def fire(self, c: Call) -> Any:
        if c.head != "fire":
            return _PASS
        for t in flatten(c.arg(0, "component")):
            if isinstance(t, Func):
                return c.it.call_function(t, [], {}, c.line, entry=True)
        return Unknown("fire.Fire")

    def partial(self, c: Call) -> Any:
        if c.head != "functools":
            return _PASS
        return Partial(c.qual, c.line, kwargs=dict(c.kwargs), func=c.args[0] if c.args else None, args=list(c.args[1:]))

    def environ(self, c: Call) -> Any:
        if not ("environ" in c.qual or c.qual.startswith("os.")):
            return _PASS
        key = c.args[0] if c.args else None
        dflt = c.arg(1, "default")
        k = key.value if isinstance(key, Const) else "?"
        shown = f" (default {dflt.value!r})" if isinstance(dflt, Const) else ""
        c.it.facts.note(f"a value comes from the environment variable {k}{shown}; memlint treats it as unknown")
        return Unknown(f"environment variable {k}{shown}")

    def path_join(self, c: Call) -> Any:
        import posixpath

        args = c.args
        if not (args and all(isinstance(a, Const) and isinstance(a.value, str) for a in args)):
            return Unknown("a path")
        if sum(len(a.value) for a in args) > budget.MAX_STR:
            return c.it.over()
        value = posixpath.join(*(a.value for a in args))
        base = next((a for a in args if a.source != "literal"), args[0])
        return Const(value, weakest(*(a.source for a in args)), base.line, base.chain, base.file)

    def cast(self, c: Call) -> Any:
        # a type-checker hint: cast(T, x) is x at run time
        return c.args[1] if len(c.args) > 1 else c.kwargs.get("val", Unknown("typing.cast()"))

    def bf16_supported(self, c: Call) -> Any:
        return Unknown("whether the GPU supports bf16 (hardware)")

    def data_file(self, c: Call) -> Any:
        if c.head not in ("json", "yaml"):
            return _PASS
        return Unknown("a config file read at run time")

    # ---- builtins ----------------------------------------------------------------------------

    def builtin(self, it: Any, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        if name == "getattr" and len(args) >= 2:
            return self._getattr_builtin(it, args)
        if name == "input":
            return Unknown("input() at run time")
        if name == "range":
            return Range("range", line or 0)
        if name == "dict":
            d = Dict(dict(kwargs))
            if args:
                d.open = True
            return d
        if name == "vars":
            return Dict({}, open=True)
        if name in _BUILTIN_CALLS:
            out = self._pure_builtin(name, args, line)
            return it.over() if isinstance(out, Unknown) and out.why == budget.OVER else out
        return Unknown(f"{name}()")

    def _getattr_builtin(self, it: Any, args: list) -> Any:
        if isinstance(args[1], Const) and isinstance(args[1].value, str):
            base = args[0]
            if isinstance(base, Ref):  # getattr(torch, "bfloat16")
                return DtypeName(Ref(f"{base.qual}.{args[1].value}"), args[1])
            return it.attribute(base, args[1].value, None)
        if isinstance(args[0], Ref):
            opts = []
            for a in flatten(args[1]):
                if isinstance(a, Const) and isinstance(a.value, str):
                    opts.append(DtypeName(Ref(f"{args[0].qual}.{a.value}"), a))
                else:
                    return Unknown(a.why if isinstance(a, Unknown) else "getattr over an unknown name")
            return opts[0] if len(opts) == 1 else Alts(tuple(opts))
        return Unknown("getattr()")

    def _pure_builtin(self, name: str, args: list, line: int | None) -> Any:
        fn = _BUILTIN_CALLS[name]
        if len(args) == 1 and isinstance(args[0], Seq) and name in ("min", "max", "sum", "len", "list", "tuple", "sorted"):
            if name == "len":
                return Const(len(args[0].items), "literal", line)
            items = args[0].items
            if name in ("list", "tuple", "sorted"):
                return Seq(list(items), name if name == "tuple" else "list")
            args = list(items)
        vals = []
        for a in args:
            fa = flatten(a)
            if len(fa) != 1 or not isinstance(fa[0], Const):
                return Unknown(fa[0].why if fa and isinstance(fa[0], Unknown) else f"{name}() of non-constants")
            vals.append(fa[0])
        if not vals:
            return Unknown(f"{name}()")
        try:
            value = fn(*(v.value for v in vals)) if name not in ("min", "max", "sum") or len(vals) > 1 else fn(vals[0].value)
        except Exception:
            return Unknown(f"{name}() that would raise")
        if not budget.fits(value):
            return Unknown(budget.OVER)
        lead = next((v for v in vals if v.source != "literal"), vals[0])
        return Const(value, weakest(*(v.source for v in vals)), lead.line,
                     budget.capped(lead.chain + (f"{name}(…) = {budget.shown(value)}",)), lead.file)

    def str_method(self, it: Any, f: BoundStr, args: list, kwargs: dict, node: Any) -> Any:
        if f.attr not in _STR_METHODS:
            return Unknown("a string method")
        vals = []
        for a in args:
            if isinstance(a, Seq):
                inner = [x for x in a.items]
                if not all(isinstance(x, Const) for x in inner):
                    return Unknown("a string method over non-constants")
                vals.append([x.value for x in inner])
            elif isinstance(a, Const):
                vals.append(a.value)
            else:
                return Unknown("a string method over non-constants")
        kw = {}
        for k, v in kwargs.items():
            if not isinstance(v, Const):
                return Unknown("a string method over non-constants")
            kw[k] = v.value
        if not _str_method_fits(f.base.value, f.attr, vals, kw):
            return it.over()
        try:
            value = getattr(f.base.value, f.attr)(*vals, **kw)
        except Exception:
            return Unknown("a string method that would raise")
        if not budget.fits(value):
            return it.over()
        if isinstance(value, list):
            return Seq([f.base.with_value(x) for x in value])
        return f.base.with_value(value, f".{f.attr}(…)")

    def unknown_method(self, it: Any, f: BoundUnknown, args: list, kwargs: dict, line: int | None) -> Any:
        if f.attr == "backward":
            it.facts.backward.append(line)
        if ("padding" in kwargs or "truncation" in kwargs) and f.attr in _TOKENIZE_METHODS:
            it.facts.tokenizer_calls.append(TokenizerCall(kwargs, line))
        return Unknown(f"the result of ….{f.attr}()")

    # ---- the script's own classes ------------------------------------------------------------

    def construct_user(self, c: Call, cls: Class) -> Any:
        base = library_base(cls, api.training_arguments())
        if base:
            return c.new(TrainingArgs, api.training_arguments()[base], ("output_dir",), user_class=cls)
        base = library_base(cls, api.trainers())
        if base:
            return self.trainer(Call(c.it, base, c.args, c.kwargs, c.open, c.line), user=cls)
        if cls.is_dataclass:
            return c.new(DataclassInstance, cls.name, tuple(cls.fields), user_class=cls)
        return Unknown(f"an instance of {cls.name}")

    # ---- method calls ----------------------------------------------------------------------

    def method(self, it: Any, obj: Obj, name: str, args: list, kwargs: dict, open_kw: bool, line: int | None) -> Any:
        if isinstance(obj, ArgParser):
            return self.argparse_method(it, obj, name, args, kwargs, line)
        if isinstance(obj, HfParser):
            return self.hfparser_method(it, obj, name, args, kwargs, line)
        if isinstance(obj, Model):
            return self.model_method(it, obj, name, args, kwargs, line)
        if isinstance(obj, Trainer) and name == "train":
            it.facts.trained.append(obj)
            return Unknown("training output")
        if isinstance(obj, Tokenizer) and name in _TOKENIZE_METHODS:
            return self.tokenize(it, obj, args, kwargs, line)
        if isinstance(obj, Optimizer) and name == "step":
            it.facts.steps.append(OptimizerStep(obj, it.accum[-1] if it.accum else None, line))
            return Const(None, "literal", line)
        if isinstance(obj, Accelerator):
            return self.accelerator_method(it, name, args, line)
        if isinstance(obj, Scaler) and name == "step":
            opt = args[0] if args else None
            if isinstance(opt, Optimizer):
                it.facts.steps.append(OptimizerStep(opt, it.accum[-1] if it.accum else None, line))
            return Const(None, "literal", line)
        if isinstance(obj, Dataset) and name in ("map", "filter", "with_transform", "set_transform"):
            return obj
        if name == "parameters" or name == "named_parameters":
            return Params("parameters", line or 0, model=obj)
        return Unknown(f"the result of .{name}()")

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

    def model_method(self, it: Any, model: Model, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        if name == "gradient_checkpointing_enable":
            model.gc.append(Setting(Const(True, "literal", line), line, "model.gradient_checkpointing_enable()"))
            return Const(None, "literal", line)
        if name == "gradient_checkpointing_disable":
            model.gc.append(Setting(Const(False, "literal", line), line, "model.gradient_checkpointing_disable()"))
            return Const(None, "literal", line)
        if name in ("half", "bfloat16", "float"):
            dt = {"half": "torch.float16", "bfloat16": "torch.bfloat16", "float": "torch.float32"}[name]
            model.dtypes.append(Setting(Ref(dt), line, f"model.{name}()"))
            return model
        if name == "to":
            for a in [*args, kwargs.get("dtype")]:
                if isinstance(a, (Ref, DtypeName)) and dtype_of(a):
                    model.dtypes.append(Setting(a, line, "model.to(dtype)"))
            return model
        if name in ("cuda", "cpu", "train", "eval", "requires_grad_"):
            return model
        if name in ("parameters", "named_parameters"):
            return Params("parameters", line or 0, model=model)
        if name == "add_adapter":
            model.peft = args[0] if args else kwargs.get("adapter_config")
            return Const(None, "literal", line)
        if name in ("print_trainable_parameters", "enable_input_require_grads", "resize_token_embeddings", "save_pretrained", "push_to_hub", "config"):
            return Unknown(f".{name}()")
        return Unknown(f"the result of model.{name}()")

    def tokenize(self, it: Any, tok: Tokenizer, args: list, kwargs: dict, line: int | None) -> Any:
        it.facts.tokenizer_calls.append(TokenizerCall(dict(kwargs), line, tok))
        return Unknown("token ids")

    def argparse_method(self, it: Any, p: ArgParser, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        table = p.args
        if name == "add_argument":
            flags = [a.value for a in args if isinstance(a, Const) and isinstance(a.value, str)]
            dest = kwargs.get("dest")
            if isinstance(dest, Const):
                key = dest.value
            else:
                longs = [f for f in flags if f.startswith("--")]
                pick = longs[0] if longs else (flags[0] if flags else None)
                if pick is None:
                    return Const(None, "literal", line)
                key = pick.lstrip("-").replace("-", "_")
            table[key] = ArgSpec(kwargs, line, flags[0] if flags else key, it.cur_file())
            p.order.append(key)
            return Const(None, "literal", line)
        if name in ("add_argument_group", "add_mutually_exclusive_group"):
            return ArgParser(p.cls, line or 0, args=p.args, order=p.order)
        if name == "set_defaults":
            for k, v in kwargs.items():
                spec = table.get(k) or ArgSpec({}, line, k)
                table[k] = ArgSpec({**spec.kwargs, "default": v}, line, spec.flag, spec.file)
            return Const(None, "literal", line)
        if name in ("parse_args", "parse_known_args", "parse_intermixed_args"):
            given = bool(args) and not (isinstance(args[0], Const) and args[0].value is None)
            ns = ArgNamespace(p.cls, line or 0, parser=p, given=given)
            return ns if name != "parse_known_args" else Seq([ns, Unknown("remaining arguments")], "tuple")
        return Unknown(f"parser.{name}()")

    def hfparser_method(self, it: Any, p: HfParser, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        from_file = name in ("parse_json_file", "parse_yaml_file", "parse_dict")
        if name.startswith("parse_"):
            out = [self.dataclass_instance(it, c, line, from_file, name) for c in p.classes]
            # HfArgumentParser.parse_args_into_dataclasses and TrlParser.parse_args_and_config
            # both take (args, return_remaining_strings, ...) and then append the leftovers.
            rest = kwargs.get("return_remaining_strings", args[1] if len(args) > 1 else None)
            if name in ("parse_args_into_dataclasses", "parse_args_and_config") and isinstance(rest, Const) and rest.value:
                out.append(Unknown("remaining strings"))
            return Seq(out, "tuple")
        return Unknown(f"parser.{name}()")

    def dataclass_instance(self, it: Any, c: Any, line: int | None, from_file: bool, how: str) -> Any:
        targs = api.training_arguments()
        parsed = {"from_parser": how, "from_file": from_file}
        if isinstance(c, Ref) and _last(c.qual) in targs:
            o: Obj = TrainingArgs(targs[_last(c.qual)], line or 0, **parsed)
        elif isinstance(c, Class):
            base = library_base(c, targs)
            if base:
                o = TrainingArgs(targs[base], line or 0, user_class=c, **parsed)
            else:
                o = DataclassInstance(c.name, line or 0, user_class=c, **parsed)
        elif isinstance(c, Ref):
            o = DataclassInstance(c.qual, line or 0, library=c.qual, **parsed)
        else:
            return Unknown("arguments parsed into an unknown class")
        it.facts.objects.append(o)
        return o

    # ---- attributes ------------------------------------------------------------------------

    def getattr(self, it: Any, obj: Obj, attr: str, line: int | None) -> Any:
        if attr in obj.attrs:
            return obj.attrs[attr]
        if isinstance(obj, ArgNamespace):
            return self.arg_default(obj, attr)
        if isinstance(obj, (TrainingArgs, DataclassInstance)):
            return field_value(obj, attr)
        if isinstance(obj, (PeftConfig, QuantConfig, Collator, DataLoader, Accelerator, Tokenizer, HfConfig, Plugin)):
            if attr in obj.kwargs:
                return obj.kwargs[attr]
        if isinstance(obj, Model) and attr == "config":
            return HfConfig("config", line or 0)
        return Method(obj, attr)

    def getitem(self, it: Any, obj: Obj, key: Const, line: int | None) -> Any:
        return Unknown(f"an item of {obj.cls}")

    def on_setattr(self, it: Any, obj: Obj, attr: str, value: Any, line: int | None) -> None:
        if isinstance(obj, Model) and attr == "gradient_checkpointing":
            obj.gc.append(Setting(value, line, "model.gradient_checkpointing = …"))

    def arg_default(self, ns: ArgNamespace, attr: str) -> Any:
        spec = ns.parser.args.get(attr) if ns.parser is not None else None
        if spec is None:
            return Unknown(f"args.{attr} (no add_argument for it)")
        kw = spec.kwargs
        how = f"add_argument({spec.flag!r}, …) (line {spec.line})"
        if ns.given:
            return Unknown(f"args.{attr} parsed from a list memlint cannot read")
        req = kw.get("required")
        if isinstance(req, Const) and req.value:
            return Unknown(f"{spec.flag} is required: it comes from the command line")
        if "default" in kw:
            conv = kw.get("type")
            out = []
            for x in flatten(kw["default"]):
                if isinstance(x, Const):
                    v = x
                    if isinstance(x.value, str) and isinstance(conv, Ref) and conv.qual in ("builtins.int", "builtins.float"):
                        try:
                            v = x.with_value(int(x.value) if conv.qual.endswith("int") else float(x.value))
                        except ValueError:
                            pass
                    out.append(v.via("argparse-default", how, spec.line, spec.file))
                else:
                    out.append(x)
            return out[0] if len(out) == 1 else Alts(tuple(out))
        action = kw.get("action")
        if isinstance(action, Const) and action.value in ("store_true", "store_false"):
            return Const(action.value == "store_false", "argparse-default", spec.line, (how,), spec.file)
        return Const(None, "argparse-default", spec.line, (how,), spec.file)


def _str_method_fits(s: str, attr: str, vals: list, kw: dict) -> bool:
    """str.join, .replace and .format within the budget, decided before they run."""
    if attr == "join" and vals and isinstance(vals[0], (list, tuple)):
        return budget.join_fits(s, list(vals[0]))
    if attr == "replace" and len(vals) >= 2 and isinstance(vals[0], str) and isinstance(vals[1], str):
        count = vals[2] if len(vals) > 2 and isinstance(vals[2], int) else kw.get("count", -1)
        return budget.replace_fits(s, vals[0], vals[1], count if isinstance(count, int) else -1)
    if attr == "format":
        return budget.format_fits(s, vals, kw)
    return True


_PASS = object()  # a handler's answer for "this call is not mine": the call falls through

# Library calls by qualified name, then by their last component.
_QUALIFIED: dict[str, Callable[[Handlers, Call], Any]] = {
    "typing.cast": Handlers.cast,
    "typing_extensions.cast": Handlers.cast,
    "os.path.join": Handlers.path_join,
    "posixpath.join": Handlers.path_join,
}
_BY_NAME: dict[str, Callable[[Handlers, Call], Any]] = {
    "from_pretrained": Handlers.from_pretrained,
    "from_config": Handlers.from_pretrained,
    "get_peft_model": Handlers.get_peft_model,
    "prepare_model_for_kbit_training": Handlers.kbit_prep,
    "prepare_model_for_int8_training": Handlers.kbit_prep,
    "ModelConfig": Handlers.trl_model_config,
    "get_peft_config": Handlers.trl_config_of,
    "get_quantization_config": Handlers.trl_config_of,
    "BitsAndBytesConfig": Handlers.bnb_config,
    "DataLoader": Handlers.dataloader,
    "Accelerator": Handlers.accelerator,
    "DeepSpeedPlugin": Handlers.plugin,
    "FullyShardedDataParallelPlugin": Handlers.plugin,
    "autocast": Handlers.autocast,
    "GradScaler": Handlers.scaler,
    "ArgumentParser": Handlers.argparser,
    "HfArgumentParser": Handlers.hfparser,
    "TrlParser": Handlers.hfparser,
    "Fire": Handlers.fire,
    "partial": Handlers.partial,
    "get": Handlers.environ,
    "getenv": Handlers.environ,
    "load_dataset": Handlers.dataset,
    "load_from_disk": Handlers.dataset,
    "is_bfloat16_supported": Handlers.bf16_supported,
    "is_bf16_supported": Handlers.bf16_supported,
    "load": Handlers.data_file,
    "loads": Handlers.data_file,
}
