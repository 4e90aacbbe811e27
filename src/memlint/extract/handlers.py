"""What memlint knows about the libraries a training script calls.

The interpreter hands every call it cannot inline to `call`; this module builds the
objects (configs, models, trainers, parsers) and records facts. Names match on the last
component, so aliases (`import transformers as tf`, `from trl import SFTConfig as C`) and
star imports resolve alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memlint.extract.interp import _BUILTIN_CALLS, BoundStr, BoundUnknown
from memlint.extract.values import Alts, Class, Const, Dict, Func, Obj, Ref, Seq, Unknown, flatten, weakest

TRAINING_ARGS = {
    "TrainingArguments": "transformers.TrainingArguments",
    "Seq2SeqTrainingArguments": "transformers.Seq2SeqTrainingArguments",
    "UnslothTrainingArguments": "transformers.TrainingArguments",
    "SFTConfig": "trl.SFTConfig",
    "DPOConfig": "trl.DPOConfig",
    "ORPOConfig": "trl.ORPOConfig",
    "GRPOConfig": "trl.GRPOConfig",
    "KTOConfig": "trl.KTOConfig",
    "CPOConfig": "trl.CPOConfig",
    "RewardConfig": "trl.RewardConfig",
}
TRAINERS = {
    "Trainer", "Seq2SeqTrainer", "SFTTrainer", "DPOTrainer", "ORPOTrainer", "GRPOTrainer",
    "KTOTrainer", "CPOTrainer", "RewardTrainer", "UnslothTrainer",
}
_TRAINER_POSITIONAL = {
    "DPOTrainer": ["model", "ref_model", "args"],
    "KTOTrainer": ["model", "ref_model", "args"],
    "GRPOTrainer": ["model", "reward_funcs", "args"],
}
_DEFAULT_TRAINER_POSITIONAL = ["model", "args", "data_collator", "train_dataset", "eval_dataset", "processing_class"]
COLLATORS = {
    "DataCollatorWithPadding", "DataCollatorForSeq2Seq", "DataCollatorForLanguageModeling",
    "DataCollatorForTokenClassification", "DataCollatorForCompletionOnlyLM", "DataCollatorForPreference",
    "DataCollatorForChatML", "DataCollatorWithFlattening",
}
# optimizer class -> Trainer optim name
OPTIMIZERS = {
    ("torch", "AdamW"): "adamw_torch", ("torch", "Adam"): "adamw_torch", ("torch", "SGD"): "sgd",
    ("torch", "Adagrad"): "adagrad", ("torch", "RMSprop"): "rmsprop",
    ("bnb", "AdamW8bit"): "adamw_bnb_8bit", ("bnb", "Adam8bit"): "adamw_bnb_8bit",
    ("bnb", "PagedAdamW8bit"): "paged_adamw_8bit", ("bnb", "PagedAdam8bit"): "paged_adamw_8bit",
    ("bnb", "PagedAdamW32bit"): "paged_adamw_32bit", ("bnb", "PagedAdamW"): "paged_adamw_32bit",
    ("bnb", "Lion8bit"): "lion_8bit", ("bnb", "PagedLion8bit"): "paged_lion_8bit", ("bnb", "Lion"): "lion_32bit",
    ("bnb", "AdamW"): "adamw_torch", ("bnb", "SGD"): "sgd",
    ("transformers", "Adafactor"): "adafactor", ("transformers", "AdamW"): "adamw_hf",
}
_MODEL_CLASS = re.compile(r"^(Auto(Peft)?Model\w*|\w+For[A-Z]\w*|\w+(LM|Model|LMHeadModel))$")
_NOT_MODEL = re.compile(r"Tokenizer|Config|Processor|Extractor|ImageProcessor")
_UNSLOTH = {"FastLanguageModel", "FastModel", "FastVisionModel", "FastQwen2Model", "FastLlamaModel", "FastMistralModel"}
_STR_METHODS = {"split", "rsplit", "lower", "upper", "strip", "replace", "format", "join", "startswith", "endswith", "rstrip", "lstrip"}
_TOKENIZE_METHODS = {"__call__", "encode", "encode_plus", "batch_encode_plus", "apply_chat_template", "pad"}


@dataclass(eq=False)
class Method:
    """A method of a known object, not yet called: `model.gradient_checkpointing_enable`."""

    obj: Obj
    name: str


def _last(qual: str) -> str:
    return qual.rsplit(".", 1)[-1]


def _family(qual: str) -> str:
    head = qual.split(".", 1)[0]
    if head in ("bnb", "bitsandbytes"):
        return "bnb"
    if head in ("torch",):
        return "torch"
    if head in ("transformers",):
        return "transformers"
    return head


def library_base(v: Any, table: Any) -> str | None:
    """The library class a user class derives from (`class MyArgs(TrainingArguments)`)."""
    seen = 0
    stack = [v]
    while stack and seen < 20:
        seen += 1
        x = stack.pop()
        if isinstance(x, Ref) and _last(x.qual) in table:
            return _last(x.qual)
        if isinstance(x, Class):
            stack.extend(x.bases)
    return None


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
            return self.construct_user(it, f, args, kwargs, open_kw, line)
        if isinstance(f, BoundStr):
            return self.str_method(it, f, args, kwargs, node)
        if isinstance(f, BoundUnknown):
            return self.unknown_method(it, f, args, kwargs, line)
        if isinstance(f, Obj):
            if f.kind == "tokenizer":
                return self.tokenize(it, f, args, kwargs, line)
            if f.kind == "partial":
                target = f.extra.get("func")
                if isinstance(target, Func):
                    return it.call_function(target, f.extra.get("args", []) + args, {**f.kwargs, **kwargs}, line)
            if f.kind == "model":
                return Unknown("the model's outputs")
            return Unknown("a call")
        if isinstance(f, Unknown):
            if "padding" in kwargs or "truncation" in kwargs:
                it.facts.tokenizer_calls.append((kwargs, line))
            return Unknown("the result of an unknown call")
        if not isinstance(f, Ref):
            return Unknown("a call")
        return self.call_ref(it, f, args, kwargs, open_kw, line)

    def call_ref(self, it: Any, f: Ref, args: list, kwargs: dict, open_kw: bool, line: int | None) -> Any:
        qual, name = f.qual, _last(f.qual)
        owner = _last(qual.rsplit(".", 1)[0]) if "." in qual else ""
        if qual.startswith("builtins."):
            return self.builtin(it, name, args, kwargs, line)
        if qual in ("typing.cast", "typing_extensions.cast"):
            # a type-checker hint: cast(T, x) is x at run time
            return args[1] if len(args) > 1 else kwargs.get("val", Unknown("typing.cast()"))
        if name in TRAINING_ARGS:
            return self.new(it, "training-args", TRAINING_ARGS[name], args, kwargs, open_kw, line, positional=["output_dir"])
        if name in TRAINERS:
            return self.new_trainer(it, name, None, args, kwargs, open_kw, line)
        if name == "from_pretrained" or name == "from_config":
            return self.from_pretrained(it, owner, qual, args, kwargs, open_kw, line, name)
        if qual.startswith("liger_kernel.") and name.startswith("apply_liger_kernel_to_"):
            it.facts.liger_calls.append((qual, kwargs, line))
            return Const(None, "literal", line)
        if name == "get_peft_model" and owner in _UNSLOTH:
            return self.unsloth_peft(it, args, kwargs, line)
        if name == "get_peft_model":
            model = args[0] if args else kwargs.get("model")
            cfg = args[1] if len(args) > 1 else kwargs.get("peft_config")
            return self.wrap_model(it, model, line, peft=cfg)
        # peft kept prepare_model_for_int8_training as a deprecated alias of the kbit one
        # (peft utils/other.py); alpaca-lora era scripts still call it.
        if name in ("prepare_model_for_kbit_training", "prepare_model_for_int8_training"):
            model = args[0] if args else kwargs.get("model")
            gc = kwargs.get("use_gradient_checkpointing", args[1] if len(args) > 1 else None)
            how = f"{name}(...)"
            if gc is None:
                gc = ("library-default", "peft.prepare_model_for_kbit_training", "use_gradient_checkpointing")
            return self.wrap_model(it, model, line, gc=(gc, line, how))
        if name == "ModelConfig" and qual.split(".")[0] == "trl":
            return self.new(it, "dataclass-inst", qual, args, kwargs, open_kw, line, extra={"library": "trl.ModelConfig"})
        if name in ("get_peft_config", "get_quantization_config") and qual.split(".")[0] == "trl":
            margs = args[0] if args else kwargs.get("model_args", kwargs.get("model_config"))
            if isinstance(margs, Obj):
                return self.trl_model_config(it, name, margs, line)
            return Unknown(f"{qual}() of unknown model arguments")
        if name in ("LoraConfig", "LoHaConfig", "LoKrConfig", "AdaLoraConfig", "VeraConfig", "IA3Config"):
            return self.new(it, "lora", f"peft.{name}", args, kwargs, open_kw, line)
        if name == "BitsAndBytesConfig":
            return self.new(it, "bnb", "transformers.BitsAndBytesConfig", args, kwargs, open_kw, line)
        if name in COLLATORS:
            return self.new(it, "collator", f"transformers.{name}", args, kwargs, open_kw, line, positional=["tokenizer"])
        if name == "DataLoader":
            return self.new(it, "dataloader", "torch.utils.data.DataLoader", args, kwargs, open_kw, line, positional=["dataset", "batch_size"])
        if name == "Accelerator":
            return self.new(it, "accelerator", "accelerate.Accelerator", args, kwargs, open_kw, line)
        if name in ("DeepSpeedPlugin", "FullyShardedDataParallelPlugin"):
            return self.new(it, "plugin", name, args, kwargs, open_kw, line)
        if name in ("autocast",):
            return self.autocast(it, qual, args, kwargs, line)
        if name == "GradScaler":
            it.facts.scalers.append(line)
            return Obj("scaler", qual, line)
        opt = OPTIMIZERS.get((_family(qual), name)) or (OPTIMIZERS.get(("transformers", name)) if name == "Adafactor" else None)
        if opt is None and owner == "optim" and ("bnb", name) in OPTIMIZERS and _family(qual) not in ("torch",):
            opt = OPTIMIZERS[("bnb", name)]
        if opt is not None:
            o = self.new(it, "optimizer", qual, args, kwargs, open_kw, line, positional=["params", "lr"])
            o.extra["optim"] = opt
            return o
        if name == "ArgumentParser":
            return Obj("argparser", qual, line, extra={"args": {}, "order": []})
        if name in ("HfArgumentParser", "TrlParser"):
            classes = args[0] if args else kwargs.get("dataclass_types")
            items = classes.items if isinstance(classes, Seq) else [classes]
            return Obj("hfparser", qual, line, extra={"classes": items})
        if name == "Fire" and qual.split(".")[0] == "fire":
            target = args[0] if args else kwargs.get("component")
            for t in flatten(target):
                if isinstance(t, Func):
                    return it.call_function(t, [], {}, line, entry=True)
            return Unknown("fire.Fire")
        if name == "partial" and qual.split(".")[0] == "functools":
            target = args[0] if args else None
            return Obj("partial", qual, line, kwargs=dict(kwargs), extra={"func": target, "args": list(args[1:])})
        if name in ("get", "getenv") and ("environ" in qual or qual.startswith("os.")):
            key = args[0] if args else None
            dflt = args[1] if len(args) > 1 else kwargs.get("default")
            k = key.value if isinstance(key, Const) else "?"
            shown = f" (default {dflt.value!r})" if isinstance(dflt, Const) else ""
            it.facts.note(f"a value comes from the environment variable {k}{shown}; memlint treats it as unknown")
            return Unknown(f"environment variable {k}{shown}")
        if qual in ("os.path.join", "posixpath.join"):
            if args and all(isinstance(a, Const) and isinstance(a.value, str) for a in args):
                return self._join(args)
            return Unknown("a path")
        if name in ("load_dataset", "load_from_disk"):
            return Obj("dataset", qual, line)
        if name in ("is_bfloat16_supported", "is_bf16_supported"):
            return Unknown("whether the GPU supports bf16 (hardware)")
        if qual.startswith("torch.") and name in ("float16", "bfloat16", "float32", "half", "float"):
            return f
        if name in ("load", "loads") and qual.split(".")[0] in ("json", "yaml"):
            return Unknown("a config file read at run time")
        return Unknown(f"the result of {qual}()")

    def trl_model_config(self, it: Any, name: str, m: Obj, line: int | None) -> Any:
        """TRL's get_peft_config / get_quantization_config(model_args): a LoraConfig when
        use_peft, a BitsAndBytesConfig when load_in_4bit/8bit, else None (trl utils.py)."""
        field = lambda attr: self.getattr(it, m, attr, line)  # noqa: E731
        if name == "get_peft_config":
            flags = [("use_peft", {"r": "lora_r", "lora_alpha": "lora_alpha", "target_modules": "lora_target_modules"})]
            kind, cls = "lora", "peft.LoraConfig"
        else:
            flags = [("load_in_4bit", {"load_in_4bit": "load_in_4bit", "bnb_4bit_quant_type": "bnb_4bit_quant_type",
                                       "bnb_4bit_use_double_quant": "use_bnb_nested_quant"}),
                     ("load_in_8bit", {"load_in_8bit": "load_in_8bit"})]
            kind, cls = "bnb", "transformers.BitsAndBytesConfig"
        off = None
        for flag, mapping in flags:
            on = field(flag)
            if not isinstance(on, Const):
                return Unknown(f"trl.{name}(): {flag} is unknown")
            if on.value:
                kw = {k: field(a) for k, a in mapping.items()}
                return self.new(it, kind, cls, [], kw, False, line)
            off = off or on
        return Const(None, off.source, off.line, off.chain + (f"trl.{name}() returns None",), off.file)

    def _join(self, args: list) -> Const:
        import posixpath

        value = posixpath.join(*(a.value for a in args))
        base = next((a for a in args if a.source != "literal"), args[0])
        return Const(value, weakest(*(a.source for a in args)), base.line, base.chain, base.file)

    def builtin(self, it: Any, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        if name == "getattr" and len(args) >= 2 and isinstance(args[1], Const) and isinstance(args[1].value, str):
            base = args[0]
            if isinstance(base, Ref):  # getattr(torch, "bfloat16")
                return _Dtype(Ref(f"{base.qual}.{args[1].value}"), args[1])
            return it.attribute(base, args[1].value, None)
        if name == "getattr" and len(args) >= 2 and isinstance(args[0], Ref):
            opts = []
            for a in flatten(args[1]):
                if isinstance(a, Const) and isinstance(a.value, str):
                    opts.append(_Dtype(Ref(f"{args[0].qual}.{a.value}"), a))
                else:
                    return Unknown(a.why if isinstance(a, Unknown) else "getattr over an unknown name")
            return opts[0] if len(opts) == 1 else Alts(tuple(opts))
        if name == "input":
            return Unknown("input() at run time")
        if name == "range":
            return Obj("range", "range", line or 0)
        if name == "dict":
            d = Dict(dict(kwargs))
            if args:
                d.open = True
            return d
        if name == "vars":
            return Dict({}, open=True)
        if name in _BUILTIN_CALLS:
            fn = _BUILTIN_CALLS[name]
            if len(args) == 1 and isinstance(args[0], Seq) and name in ("min", "max", "sum", "len", "list", "tuple", "sorted"):
                if name == "len":
                    return Const(len(args[0].items), "literal", line)
                args = args[0].items
                if name in ("list", "tuple", "sorted"):
                    return Seq(list(args), name if name == "tuple" else "list")
                args = list(args)
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
            lead = next((v for v in vals if v.source != "literal"), vals[0])
            return Const(value, weakest(*(v.source for v in vals)), lead.line, lead.chain + (f"{name}(…) = {value!r}",), lead.file)
        return Unknown(f"{name}()")

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
        try:
            value = getattr(f.base.value, f.attr)(*vals, **kw)
        except Exception:
            return Unknown("a string method that would raise")
        if isinstance(value, list):
            return Seq([f.base.with_value(x) for x in value])
        return f.base.with_value(value, f".{f.attr}(…)")

    def unknown_method(self, it: Any, f: BoundUnknown, args: list, kwargs: dict, line: int | None) -> Any:
        if f.attr == "backward":
            it.facts.backward.append(line)
        if ("padding" in kwargs or "truncation" in kwargs) and f.attr in _TOKENIZE_METHODS:
            it.facts.tokenizer_calls.append((kwargs, line))
        return Unknown(f"the result of ….{f.attr}()")

    # ---- constructors ----------------------------------------------------------------------

    def new(self, it: Any, kind: str, cls: str, args: list, kwargs: dict, open_kw: bool, line: int | None,
            positional: list[str] | None = None, extra: dict | None = None) -> Obj:
        kw = dict(kwargs)
        for name, a in zip(positional or [], args):
            kw.setdefault(name, a)
        o = Obj(kind, cls, line or 0, kw, {}, open_kw, dict(extra or {}))
        it.facts.objects.append(o)
        return o

    def construct_user(self, it: Any, c: Class, args: list, kwargs: dict, open_kw: bool, line: int | None) -> Any:
        base = library_base(c, TRAINING_ARGS)
        if base:
            return self.new(it, "training-args", TRAINING_ARGS[base], args, kwargs, open_kw, line,
                            positional=["output_dir"], extra={"class": c})
        base = library_base(c, TRAINERS)
        if base:
            return self.new_trainer(it, base, c, args, kwargs, open_kw, line)
        if c.is_dataclass:
            return self.new(it, "dataclass-inst", c.name, args, kwargs, open_kw, line,
                            positional=list(c.fields), extra={"class": c})
        return Unknown(f"an instance of {c.name}")

    def new_trainer(self, it: Any, name: str, user: Class | None, args: list, kwargs: dict, open_kw: bool, line: int | None) -> Obj:
        pos = _TRAINER_POSITIONAL.get(name, _DEFAULT_TRAINER_POSITIONAL)
        o = self.new(it, "trainer", name, args, kwargs, open_kw, line, positional=pos,
                     extra={"user_class": user.name if user else None})
        return o

    def from_pretrained(self, it: Any, owner: str, qual: str, args: list, kwargs: dict, open_kw: bool, line: int | None, how: str) -> Any:
        if owner in _UNSLOTH:
            kw = dict(kwargs)
            if args:
                kw.setdefault("model_name", args[0])
            model = Obj("model", qual, line or 0, kw, {}, open_kw, {"loader": "unsloth", "gc": [], "dtypes": []})
            it.facts.objects.append(model)
            tok = Obj("tokenizer", qual, line or 0, {"model_max_length": kw.get("max_seq_length")}, {}, False, {"unsloth": True})
            it.facts.objects.append(tok)
            return Seq([model, tok], "tuple")
        if owner == "PeftModel" or owner.startswith("AutoPeftModel"):
            if owner == "PeftModel":
                base = args[0] if args else kwargs.get("model")
                adapter = Obj("lora", "peft.PeftModel.from_pretrained", line or 0, {}, {}, True, {"adapter": args[1] if len(args) > 1 else kwargs.get("model_id")})
                return self.wrap_model(it, base, line, peft=adapter)
        if owner == "AutoConfig" or owner.endswith("Config"):
            return Obj("hfconfig", qual, line or 0, {"model_id": args[0] if args else kwargs.get("pretrained_model_name_or_path")})
        if "Tokenizer" in owner or "Processor" in owner:
            kw = dict(kwargs)
            if args:
                kw.setdefault("pretrained_model_name_or_path", args[0])
            tok = Obj("tokenizer", qual, line or 0, kw)
            it.facts.objects.append(tok)
            return tok
        if _MODEL_CLASS.match(owner) and not _NOT_MODEL.search(owner):
            kw = dict(kwargs)
            if how == "from_config":
                cfg = args[0] if args else kwargs.get("config")
                kw["pretrained_model_name_or_path"] = cfg.kwargs.get("model_id") if isinstance(cfg, Obj) else Unknown("a model config")
                kw["_from_config"] = True
            elif args:
                kw.setdefault("pretrained_model_name_or_path", args[0])
            loader = "peft-auto" if owner.startswith("AutoPeftModel") else "transformers"
            model = Obj("model", qual, line or 0, kw, {}, open_kw, {"loader": loader, "gc": [], "dtypes": []})
            if loader == "peft-auto":
                model.extra["peft"] = Obj("lora", "peft.AutoPeftModel", line or 0, {}, {}, True, {"adapter": True})
            it.facts.objects.append(model)
            return model
        return Unknown(f"{owner}.{how}()")

    def wrap_model(self, it: Any, model: Any, line: int | None, peft: Any = None, gc: Any = None) -> Any:
        out = None
        for m in flatten(model):
            if isinstance(m, Obj) and m.kind == "model":
                w = Obj("model", m.cls, line or 0, {}, {}, False, {"base": m, "gc": [], "dtypes": []})
                if peft is not None:
                    w.extra["peft"] = peft
                if gc is not None:
                    w.extra["gc"].append(gc)
                it.facts.objects.append(w)
                r: Any = w
            else:
                r = m if isinstance(m, Unknown) else Unknown("a model memlint could not follow")
            out = r if out is None else Alts((out, r))
        return out if out is not None else Unknown("a model")

    def unsloth_peft(self, it: Any, args: list, kwargs: dict, line: int | None) -> Any:
        model = args[0] if args else kwargs.get("model")
        cfg = Obj("lora", "unsloth.FastLanguageModel.get_peft_model", line or 0, dict(kwargs))
        it.facts.objects.append(cfg)
        gc = kwargs.get("use_gradient_checkpointing")
        if gc is None:
            gc = ("library-default", "unsloth.FastLanguageModel.get_peft_model", "use_gradient_checkpointing")
        return self.wrap_model(it, model, line, peft=cfg, gc=(gc, line, "FastLanguageModel.get_peft_model(use_gradient_checkpointing=…)"))

    def autocast(self, it: Any, qual: str, args: list, kwargs: dict, line: int | None) -> Obj:
        device = kwargs.get("device_type", args[0] if args and "cuda.amp" not in qual else None)
        dtype = kwargs.get("dtype")
        enabled = kwargs.get("enabled")
        if "cuda.amp" in qual:
            device = Const("cuda", "literal", line)
        it.facts.autocasts.append((dtype, device, enabled, line))
        return Obj("autocast", qual, line or 0)

    # ---- method calls ----------------------------------------------------------------------

    def method(self, it: Any, obj: Obj, name: str, args: list, kwargs: dict, open_kw: bool, line: int | None) -> Any:
        k = obj.kind
        if k in ("argparser", "argparser-group"):
            return self.argparse_method(it, obj, name, args, kwargs, line)
        if k == "hfparser":
            return self.hfparser_method(it, obj, name, args, kwargs, line)
        if k == "model":
            return self.model_method(it, obj, name, args, kwargs, line)
        if k == "trainer" and name == "train":
            it.facts.trained.append(obj)
            return Unknown("training output")
        if k == "tokenizer" and name in _TOKENIZE_METHODS:
            return self.tokenize(it, obj, args, kwargs, line)
        if k == "optimizer" and name == "step":
            it.facts.steps.append((obj, it.accum[-1] if it.accum else None, line))
            return Const(None, "literal", line)
        if k == "accelerator":
            if name == "prepare":
                return args[0] if len(args) == 1 else Seq(list(args), "tuple")
            if name == "backward":
                it.facts.backward.append(line)
            if name == "prepare_model":
                return args[0] if args else Unknown("a model")
            if name == "accumulate":
                return Obj("accumulate", "accelerate.accumulate", line or 0)
            return Unknown(f"accelerator.{name}()")
        if k == "scaler" and name == "step":
            opt = args[0] if args else None
            if isinstance(opt, Obj) and opt.kind == "optimizer":
                it.facts.steps.append((opt, it.accum[-1] if it.accum else None, line))
            return Const(None, "literal", line)
        if k == "dataset" and name in ("map", "filter", "with_transform", "set_transform"):
            return obj
        if name == "parameters" or name == "named_parameters":
            return Obj("params", "parameters", line or 0, extra={"model": obj})
        return Unknown(f"the result of .{name}()")

    def model_method(self, it: Any, model: Obj, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        if name == "gradient_checkpointing_enable":
            model.extra.setdefault("gc", []).append((Const(True, "literal", line), line, "model.gradient_checkpointing_enable()"))
            return Const(None, "literal", line)
        if name == "gradient_checkpointing_disable":
            model.extra.setdefault("gc", []).append((Const(False, "literal", line), line, "model.gradient_checkpointing_disable()"))
            return Const(None, "literal", line)
        if name in ("half", "bfloat16", "float"):
            dt = {"half": "torch.float16", "bfloat16": "torch.bfloat16", "float": "torch.float32"}[name]
            model.extra.setdefault("dtypes", []).append((Ref(dt), line, f"model.{name}()"))
            return model
        if name == "to":
            for a in [*args, kwargs.get("dtype")]:
                if isinstance(a, (Ref, _Dtype)) and _dtype_name(a):
                    model.extra.setdefault("dtypes", []).append((a, line, "model.to(dtype)"))
            return model
        if name in ("cuda", "cpu", "train", "eval", "requires_grad_"):
            return model
        if name in ("parameters", "named_parameters"):
            return Obj("params", "parameters", line or 0, extra={"model": model})
        if name == "add_adapter":
            model.extra["peft"] = args[0] if args else kwargs.get("adapter_config")
            return Const(None, "literal", line)
        if name in ("print_trainable_parameters", "enable_input_require_grads", "resize_token_embeddings", "save_pretrained", "push_to_hub", "config"):
            return Unknown(f".{name}()")
        return Unknown(f"the result of model.{name}()")

    def tokenize(self, it: Any, tok: Obj, args: list, kwargs: dict, line: int | None) -> Any:
        it.facts.tokenizer_calls.append((dict(kwargs), line, tok))
        return Unknown("token ids")

    def argparse_method(self, it: Any, p: Obj, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        table = p.extra["args"]
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
            table[key] = {"kwargs": kwargs, "line": line, "flag": flags[0] if flags else key, "file": it.cur_file()}
            p.extra.setdefault("order", []).append(key)
            return Const(None, "literal", line)
        if name in ("add_argument_group", "add_mutually_exclusive_group"):
            return Obj("argparser-group", p.cls, line or 0, extra=p.extra)
        if name == "set_defaults":
            for k, v in kwargs.items():
                table.setdefault(k, {"kwargs": {}, "line": line, "flag": k})
                table[k] = {**table[k], "kwargs": {**table[k]["kwargs"], "default": v}, "line": line}
            return Const(None, "literal", line)
        if name in ("parse_args", "parse_known_args", "parse_intermixed_args"):
            ns = Obj("argns", p.cls, line or 0, extra={"parser": p})
            if args and not (isinstance(args[0], Const) and args[0].value is None):
                ns.extra["given"] = True
            return ns if name != "parse_known_args" else Seq([ns, Unknown("remaining arguments")], "tuple")
        return Unknown(f"parser.{name}()")

    def hfparser_method(self, it: Any, p: Obj, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        from_file = name in ("parse_json_file", "parse_yaml_file", "parse_dict")
        if name.startswith("parse_"):
            out = []
            for c in p.extra["classes"]:
                out.append(self.dataclass_instance(it, c, line, from_file, name))
            # HfArgumentParser.parse_args_into_dataclasses and TrlParser.parse_args_and_config
            # both take (args, return_remaining_strings, ...) and then append the leftovers.
            rest = kwargs.get("return_remaining_strings", args[1] if len(args) > 1 else None)
            if name in ("parse_args_into_dataclasses", "parse_args_and_config") and isinstance(rest, Const) and rest.value:
                out.append(Unknown("remaining strings"))
            return Seq(out, "tuple")
        return Unknown(f"parser.{name}()")

    def dataclass_instance(self, it: Any, c: Any, line: int | None, from_file: bool, how: str) -> Any:
        extra = {"from_parser": how, "from_file": from_file}
        if isinstance(c, Ref) and _last(c.qual) in TRAINING_ARGS:
            o = Obj("training-args", TRAINING_ARGS[_last(c.qual)], line or 0, extra=extra)
        elif isinstance(c, Class):
            base = library_base(c, TRAINING_ARGS)
            if base:
                o = Obj("training-args", TRAINING_ARGS[base], line or 0, extra={**extra, "class": c})
            else:
                o = Obj("dataclass-inst", c.name, line or 0, extra={**extra, "class": c})
        elif isinstance(c, Ref):
            o = Obj("dataclass-inst", c.qual, line or 0, extra={**extra, "library": c.qual})
        else:
            return Unknown("arguments parsed into an unknown class")
        it.facts.objects.append(o)
        return o

    # ---- attributes ------------------------------------------------------------------------

    def getattr(self, it: Any, obj: Obj, attr: str, line: int | None) -> Any:
        if attr in obj.attrs:
            return obj.attrs[attr]
        k = obj.kind
        if k == "argns":
            return self.arg_default(obj, attr)
        if k in ("training-args", "dataclass-inst"):
            return self.field_value(obj, attr)
        if k in ("lora", "bnb", "collator", "dataloader", "accelerator", "tokenizer", "hfconfig", "plugin"):
            if attr in obj.kwargs:
                return obj.kwargs[attr]
        if k == "model" and attr == "config":
            return Obj("hfconfig", "config", line or 0)
        return Method(obj, attr)

    def getitem(self, it: Any, obj: Obj, key: Const, line: int | None) -> Any:
        return Unknown(f"an item of {obj.cls}")

    def on_setattr(self, it: Any, obj: Obj, attr: str, value: Any, line: int | None) -> None:
        if obj.kind == "model" and attr == "gradient_checkpointing":
            obj.extra.setdefault("gc", []).append((value, line, "model.gradient_checkpointing = …"))

    def arg_default(self, ns: Obj, attr: str) -> Any:
        parser = ns.extra["parser"]
        spec = parser.extra["args"].get(attr)
        if spec is None:
            return Unknown(f"args.{attr} (no add_argument for it)")
        kw = spec["kwargs"]
        flag = spec["flag"]
        how = f"add_argument({flag!r}, …) (line {spec['line']})"
        if ns.extra.get("given"):
            return Unknown(f"args.{attr} parsed from a list memlint cannot read")
        req = kw.get("required")
        if isinstance(req, Const) and req.value:
            return Unknown(f"{flag} is required: it comes from the command line")
        if "default" in kw:
            d = kw["default"]
            conv = kw.get("type")
            out = []
            for x in flatten(d):
                if isinstance(x, Const):
                    v = x
                    if isinstance(x.value, str) and isinstance(conv, Ref) and conv.qual in ("builtins.int", "builtins.float"):
                        try:
                            v = x.with_value(int(x.value) if conv.qual.endswith("int") else float(x.value))
                        except ValueError:
                            pass
                    out.append(v.via("argparse-default", how, spec["line"], spec.get("file")))
                else:
                    out.append(x)
            return out[0] if len(out) == 1 else Alts(tuple(out))
        action = kw.get("action")
        if isinstance(action, Const) and action.value in ("store_true", "store_false"):
            return Const(action.value == "store_false", "argparse-default", spec["line"], (how,), spec.get("file"))
        return Const(None, "argparse-default", spec["line"], (how,), spec.get("file"))

    def field_value(self, obj: Obj, attr: str) -> Any:
        """A field of a config/dataclass instance: set in the call, else class default, else library."""
        if attr in obj.kwargs:
            return obj.kwargs[attr]
        if obj.open:
            return Unknown(f"{attr} may be set by **kwargs")
        if obj.extra.get("from_file"):
            return Unknown(f"{attr} comes from a config file given at run time")
        c = obj.extra.get("class")
        seen = 0
        while isinstance(c, Class) and seen < 20:
            seen += 1
            if attr in c.fields:
                v = c.fields[attr]
                how = f"{c.name}.{attr} default (line {c.field_lines.get(attr)})"
                fl = c.field_lines.get(attr)
                if isinstance(v, Const):
                    return v.via("dataclass-default", how, fl, c.file)
                if isinstance(v, Alts):
                    return Alts(tuple(o.via("dataclass-default", how, fl, c.file) if isinstance(o, Const) else o for o in v.options))
                if isinstance(v, Seq):
                    return Seq([o.via("dataclass-default", how, fl, c.file) if isinstance(o, Const) else o for o in v.items], v.kind)
                return v
            nxt = [b for b in c.bases if isinstance(b, Class)]
            c = nxt[0] if nxt else None
        if obj.kind == "training-args":
            return lib_default(obj, attr)
        lib = obj.extra.get("library")
        if lib:
            from memlint.extract.library import default

            d = default(lib, attr)
            if d is not None:
                return Const(list(d.value) if isinstance(d.value, list) else d.value, "library-default", obj.line or None, (d.why,))
            return Unknown(f"{attr} of {lib} (library dataclass memlint has no defaults for)")
        return Unknown(f"{obj.cls}.{attr}")


def lib_default(obj: Obj, attr: str, cls: str | None = None) -> Any:
    """The installed library's default for a field the script leaves out, as a constant."""
    from memlint.extract.library import default

    d = default(cls or obj.cls, attr)
    if d is None:
        return Unknown(f"{attr} (memlint has no library default for {cls or obj.cls})")
    value = d.value
    if value == "not fp16":  # TRL: bf16 unset -> on unless fp16 is on
        fp16 = obj.get("fp16")
        if fp16 is None:
            fp16 = lib_default(obj, "fp16", cls)
        if not isinstance(fp16, Const):
            return Unknown("bf16 follows fp16, which is unknown")
        value = not fp16.value
    if isinstance(value, list):
        value = list(value)
    return Const(value, "library-default", obj.line or None, (d.why,))


@dataclass(frozen=True)
class _Dtype:
    """getattr(torch, NAME): a dtype named by a (possibly non-literal) string."""

    ref: Ref
    name: Const


def _dtype_name(v: Any) -> str | None:
    from memlint.extract.build import dtype_of
    return dtype_of(v)
