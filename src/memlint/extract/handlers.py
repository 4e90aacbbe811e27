"""What memlint knows about the libraries a training script calls.

The interpreter hands every call it cannot inline to `call`; this module builds the
objects (configs, models, trainers, parsers; extract/objects.py) and records facts. Names
match on the last component, so aliases (`import transformers as tf`, `from trl import
SFTConfig as C`) and star imports resolve alike. Which classes are trainers, argument
classes, collators and optimizers is data (memlint.library.api).
"""

from __future__ import annotations

import functools

import re
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable

from memlint.extract import budget, custom_model
from memlint.extract.interp import _BUILTIN_CALLS, SPREAD, BoundStr, BoundUnknown
from memlint.extract.objects import (
    Accelerator, Accumulate, ArgNamespace, ArgParser, ArgSpec, Autocast, AutocastCall, BoundMethod, Collator, DataclassInstance,
    DeepSpeedEngine, DictMethod, Fields, Instance, LightningTrainer, Namespace, OpenFile,
    DataLoader, Dataset, DtypeName, GradHook, HfConfig, HfParser, LigerPatch, Method, Model, Obj, Optimizer, OptimizerStep,
    LengthArg, Params, Partial, PeftConfig, Plugin, QuantConfig, RandomOffsets, Range, Scaler, SeqMethod, Setting, Tokenizer, TokenizerCall, Trainer,
    TrainingArgs, dtype_of, field_value,
)
from memlint.extract.values import Alts, Class, Const, Dict, Func, RaisedBy, Ref, Seq, Unknown, flatten, weakest
from memlint.extract.values import insert_fits
from memlint.library import api

_MODEL_CLASS = re.compile(r"^(Auto(Peft)?Model\w*|\w+For[A-Z]\w*|\w+(LM|Model|LMHeadModel))$")
_NOT_MODEL = re.compile(r"Tokenizer|Config|Processor|Extractor|ImageProcessor")
_PATH_SAME = {"resolve", "absolute", "expanduser"}  # pathlib methods that name the same file (a path is a string here)
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


def _pretrained_model_class(cls: Any) -> bool:
    """Whether a class of the checkout derives from transformers' PreTrainedModel."""
    stack, seen = [cls], 0
    while stack and seen < 20:
        seen += 1
        x = stack.pop()
        if isinstance(x, Ref) and x.qual.startswith("transformers.") and _last(x.qual) == "PreTrainedModel":
            return True
        if isinstance(x, Class):
            stack.extend(x.bases)
    return False


def _record_layer(c: Call) -> None:
    """nn.Linear(in, out, bias=) / nn.Embedding(n, d) built inside a script model's __init__."""
    vals = [a.value if isinstance(a, Const) else None for a in c.args[:2]]
    names = ("in_features", "out_features") if c.name == "Linear" else ("num_embeddings", "embedding_dim")
    for i, n in enumerate(names):
        if i >= len(vals):
            vals.append(None)
        if n in c.kwargs and isinstance(c.kwargs[n], Const):
            vals[i] = c.kwargs[n].value
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return
    if c.name == "Linear":
        c.it.layers.linears.append((vals[0], vals[1], (c.it.cur_file(), c.it.call_line)))
        c.it.layers.files.add(c.it.cur_file() or str(c.it.path))
    else:
        c.it.layers.embeddings.append((vals[0], vals[1]))


def _vendored_trainer(cls: Class, names: Any) -> str | None:
    """A copy of transformers' Trainer kept in the repository (ChatGLM's ptuning/trainer.py): a class
    of the checkout named like a library trainer that defines its training_step, or derives from one."""
    seen = 0
    stack: list = [cls]
    named, vendored = None, False
    while stack and seen < 20:
        seen += 1
        x = stack.pop()
        if isinstance(x, Class):
            if x.name in names:
                named = named or x.name  # the outermost library name: Seq2SeqTrainer over the copied Trainer
                vendored |= "training_step" in x.methods
            stack.extend(x.bases)
    return named if vendored else None


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


def _is_typer_command(callee: Any) -> bool:
    """`app.command` of `app = typer.Typer(...)` (memlint does not model the Typer object itself)."""
    return isinstance(callee, BoundUnknown) and callee.attr == "command" and "typer.Typer" in callee.why


def _typer_call(node: Any) -> tuple[str, Any] | None:
    """("Argument" | "Option", the call) when `node` is typer.Argument(...) / typer.Option(...)."""
    import libcst as cst

    if isinstance(node, cst.Call):
        func = node.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if name in ("Argument", "Option"):
            return name, node
    return None


def _typer_marker(q: Any) -> tuple[str, Any] | None:
    """The typer.Argument/Option call a parameter is declared with: its default, or the metadata of
    `Annotated[T, typer.Argument(...)]`."""
    import libcst as cst

    found = _typer_call(q.default) if q.default is not None else None
    ann = q.annotation.annotation if q.annotation is not None else None
    if found is None and isinstance(ann, cst.Subscript):
        for el in ann.slice[1:]:
            if isinstance(el.slice, cst.Index) and _typer_call(el.slice.value):
                found = _typer_call(el.slice.value)
    return found


def _typer_kind(it: Any, q: Any) -> str:
    found = _typer_marker(q)
    if found is not None:
        return found[0]
    return "Argument" if q.default is None else "Option"  # typer: a parameter without a default is an argument


def _typer_default(it: Any, f: Func, q: Any) -> Any:
    """A typer parameter's default: `default=` or the first positional of typer.Argument/Option(...)
    written as the parameter's default (typer's older style), else what follows `=`."""
    found = _typer_call(q.default) if q.default is not None else None
    if found is None:
        return it.param_default(f, q.name.value)
    call = found[1]
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "default":
            return it.ev(a.value, f.env)
    first = next((a for a in call.args if a.keyword is None), None)
    if first is not None:
        v = it.ev(first.value, f.env)
        if not (isinstance(v, Const) and isinstance(v.value, str) and v.value.startswith("-")):
            return v
    return Unknown(f"typer parameter {q.name.value} has no default and the command does not give it")


def _params(f: Func) -> list:
    p = f.node.params
    return [*p.posonly_params, *p.params, *p.kwonly_params]


def _fastcore_param(it: Any, f: Func, q: Any) -> dict:
    """What fastcore's Param reads off one parameter's annotation: `Param(help, type, opt, action, nargs)`,
    a bare type (`int`, `bool_arg`), `bool` / `store_true` (a flag, False unless given) / `store_false`."""
    import libcst as cst

    ann = q.annotation.annotation if q.annotation is not None else None
    out: dict = {}
    typ: Any = None
    if isinstance(ann, cst.Call) and isinstance(it.ev(ann.func, f.env), Ref) and it.ev(ann.func, f.env).name == "Param":
        names = ("help", "type", "opt", "action", "nargs")
        for i, a in enumerate(ann.args):
            key = a.keyword.value if a.keyword is not None else (names[i] if i < len(names) else None)
            if key in ("type", "opt", "action", "nargs"):
                v = it.ev(a.value, f.env)
                if key == "type":
                    typ = v
                elif isinstance(v, Const):
                    out[key] = v.value
    elif ann is not None:
        typ = it.ev(ann, f.env)
    if isinstance(typ, Ref) and typ.name in ("bool", "store_true", "store_false"):
        out["action"] = "store_false" if typ.name == "store_false" else "store_true"
        typ = None
    known = isinstance(typ, Func) or isinstance(typ, Ref) and (typ.qual.startswith("builtins.") or typ.name in (
        "bool_arg", "str2bool"))
    out["type"] = typ if known else None
    return out


class Handlers:
    """Stateless: the interpreter passes itself in."""

    # ---- decorators (click, typer) ---------------------------------------------------------

    def decorate(self, it: Any, f: Func, deco: Any, env: Any) -> Any:
        import libcst as cst

        bare = it.ev(deco, env) if isinstance(deco, (cst.Name, cst.Attribute)) else None
        head = it.ev(deco.func, env) if isinstance(deco, cst.Call) else bare
        if isinstance(head, Ref) and head.qual.split(".")[0] == "fastcore" and head.name == "call_parse":
            f.cli = "fastcore"  # the function runs as it is decorated, its parameters from the command line
            return None
        if not isinstance(deco, cst.Call):
            return None
        callee = it.ev(deco.func, env)
        if _is_typer_command(callee):
            f.typer = True
            return None
        if not isinstance(callee, Ref):
            return None
        name = _last(callee.qual)
        if callee.qual == "hydra.main":
            return self.hydra_main(it, f, deco, env)
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
            typ = it.ev(kw["type"], env) if "type" in kw else None
            is_flag = "is_flag" in kw and isinstance(it.ev(kw["is_flag"], env), Const) and bool(it.ev(kw["is_flag"], env).value)
            f.click.append((param, tuple(n.split("/")[0] for n in names if n.startswith("-")), is_flag,
                            _last(typ.qual) if isinstance(typ, Ref) else None))
        return None

    def click_arguments(self, it: Any, f: Func) -> dict:
        """What click passes a @click.command function: each option's default, or the command's value."""
        from memlint.extract.cli_args import Option, literal, match_argparse, str_to_bool

        options = [Option(p, flags, "store_true" if is_flag else "store") for p, flags, is_flag, _ in f.click if flags]
        matched = match_argparse(options, it.launch.argv, allow_abbrev=False) if it.launch is not None else None
        out = {}
        for param, _flags, _is_flag, typ in f.click:
            if matched is not None and param in matched.values:
                raw = matched.values[param]
                if isinstance(raw, str):
                    value = str_to_bool(raw) if typ == "bool" else literal(raw, {"int": 0, "float": 0.0, "str": ""}.get(typ or ""))
                else:
                    value = raw
                out[param] = self.cli_const(it, value, f"{matched.flags.get(param, param)} {raw!r}")
            else:
                out[param] = it.param_default(f, param)
        return out

    def cli_arguments(self, it: Any, f: Func) -> dict:
        """What fastcore's @call_parse passes its function: an argparse parser built from the signature
        (fastcore.script.anno_parser): `--name` for a parameter with a default, a positional for one
        without; the annotation's type converts the word (`Param(help, type, action=...)`, `bool_arg`,
        `int`), `bool` / `store_true` is a flag that takes no word; the rest keep their defaults."""
        from memlint.extract.cli_args import Option, match_argparse

        params = _params(f)
        options, types = [], {}
        for q in params:
            name = q.name.value
            spec = _fastcore_param(it, f, q)
            types[name] = spec.get("type")
            action = spec.get("action", "store")
            opt = spec.get("opt", q.default is not None)
            nargs = spec.get("nargs")
            options.append(Option(name, (f"--{name}",) if opt else (), action, nargs))
        matched = match_argparse(options, it.launch.argv) if it.launch is not None else None
        out = {}
        for q in params:
            name = q.name.value
            if matched is not None and name in matched.values:
                raw = matched.values[name]
                how = f"{matched.flags.get(name, name)} {raw!r}"
                # a type memlint reads converts the word; another (Optional[int], a class) converts it like the default
                out[name] = self.cli_const(it, raw, how) if isinstance(raw, bool) else self.convert_cli(
                    it, raw, types[name], f.defaults.get(name), how)
            else:
                out[name] = it.param_default(f, name)
        return out

    def typer_arguments(self, it: Any, f: Func) -> tuple[list, dict]:
        """What typer passes an @app.command() function: the command's bare words to its
        typer.Argument parameters in order, `--name value` / `--name-with-dashes value` / `--flag` /
        `--no-flag` to the others (options); a parameter the command leaves out keeps the default
        written in its typer.Argument(...) / typer.Option(...) or after `=`."""
        from memlint.extract.cli_args import literal, match_fields

        p = f.node.params
        params = [*p.posonly_params, *p.params, *p.kwonly_params]
        positional = [q.name.value for q in params if _typer_kind(it, q) == "Argument"]
        defaults = {q.name.value: _typer_default(it, f, q) for q in params}
        bools = {n for n, d in defaults.items() if isinstance(d, Const) and isinstance(d.value, bool)}
        matched = match_fields(it.launch.argv if it.launch is not None else [], [q.name.value for q in params], bools)
        kwargs = {k: self.cli_const(it, literal(v, getattr(defaults.get(k), "value", None)) if isinstance(v, str) else v,
                                    f"{matched.flags[k]} {v!r}") for k, v in matched.values.items() if not isinstance(v, list)}
        words = [w for w in matched.rest if not w.startswith("-")]
        for name, w in zip(positional, words):
            kwargs.setdefault(name, self.cli_const(it, literal(w), f"positional {w!r}"))
        for name, d in defaults.items():
            kwargs.setdefault(name, d)
        return [], kwargs

    @staticmethod
    def hydra_main(it: Any, f: Func, deco: Any, env: Any) -> None:
        """@hydra.main(config_path=, config_name=): the entry's first parameter is the composed config."""
        from memlint.extract.hydra import hydra_config

        args = {"config_path": None, "config_name": None}
        positional = [a for a in deco.args if a.keyword is None]
        for key, a in zip(("config_path", "config_name"), positional):
            args[key] = it.ev(a.value, env)
        for a in deco.args:
            if a.keyword is not None and a.keyword.value in args:
                args[a.keyword.value] = it.ev(a.value, env)
        vals = {k: v.value if isinstance(v, Const) and isinstance(v.value, str) else None for k, v in args.items()}
        params = [*f.node.params.posonly_params, *f.node.params.params]
        if not params:
            return None
        here = it.mod.path.parent if it.mod is not None else it.dir
        value, notes = hydra_config(here, vals["config_path"], vals["config_name"], it.launch)
        for n in notes:
            it.facts.note(n)
        if not isinstance(value, Unknown):
            it.facts.note(f"the Hydra config {vals['config_path']}/{vals['config_name']} composed as @hydra.main would "
                          "(defaults list, overrides, interpolations)")
        param = params[0].name.value
        f.defaults[param] = value
        f.default_source[param] = ("literal", f"@hydra.main(config_name={vals['config_name']!r})", it.line_of(deco),
                                   it.cur_file())
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
        if isinstance(f, OpenFile):
            return f  # f.read(): the content, read where it is parsed
        if isinstance(f, DtypeName):  # getattr(torch.optim, config.optimizer)(params): the class it names
            f = f.ref
        if isinstance(f, DictMethod) and isinstance(f.dict, Fields):  # args.__dict__.update(cfg): each key a field
            return self.fields_update(it, f.dict.obj, f.name, args, kwargs, line)
        if isinstance(f, DictMethod):
            return self.dict_method(f.dict, f.name, args, kwargs)
        if isinstance(f, SeqMethod):  # names.index("lora"), names.count(x) of a known sequence
            return _seq_method(f.seq, f.name, args, line)
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
        if c.it.layers is not None and c.head == "torch" and c.name in ("Linear", "Embedding"):
            _record_layer(c)
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
        if c.head in ("pytorch_lightning", "lightning", "lightning_fabric") and c.name in _LIGHTNING:
            return c.new(LightningTrainer, _LIGHTNING[c.name])
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

    def int4_config(self, c: Call) -> Any:
        """GPTQConfig(bits=4, group_size=128, ...) / AwqConfig(...) / HqqConfig(nbits=4, group_size=64): a GPTQ / AWQ /
        HQQ base (build.quant_of_config)."""
        return c.new(QuantConfig, f"transformers.{c.name}")

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
        if owner == "PeftConfig" or owner in api.peft_configs():
            return self.peft_config_of_folder(c)
        if owner == "AutoConfig" or owner.endswith("Config"):
            kw = {"model_id": c.arg(0, "pretrained_model_name_or_path")}
            if "num_labels" in c.kwargs:
                kw["num_labels"] = c.kwargs["num_labels"]
            return HfConfig(c.qual, c.line or 0, kw)
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

    def checkout_lora(self, it: Any, f: Any, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        """A LoRA helper of the script's own checkout (library_api.json "checkout_lora"): DeepSpeed-Chat's
        convert_linear_layer_to_lora(model, part_module_name, lora_dim, ...) replaces every nn.Linear whose name
        contains the part name with its own LoRA layer; read as a LoraConfig on those linears. Its `freeze`
        function (only_optimize_lora_parameters) returns the model unchanged but says only LoRA trains."""
        params = f.node.params
        names = [p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]]

        def arg(key: str, pos: int) -> Any:
            if key in kwargs:
                return kwargs[key]
            at = names.index(key) if key in names else pos
            if at < len(args):
                return args[at]
            return it.param_default(f, key) if key in names else Unknown(f"{key} of {f.qual}()")

        if name in api.checkout_lora_freeze():
            it.facts.lora_freezes.append(line)
            return args[0] if args else kwargs.get("model", Unknown(f"the result of {f.qual}()"))
        spec = api.checkout_lora()[name]
        part = arg(*spec["targets"])
        targets: Any = part
        if isinstance(part, Const) and isinstance(part.value, str):
            last = part.value.rstrip(".").rsplit(".", 1)[-1]
            every = part.value.endswith(".") or last in ("layers", "layer", "h", "blocks", "decoder", "encoder", "model")
            # a path prefix ("decoder.layers.", "layers.") names every linear under it: peft's all-linear
            targets = part.with_value("all-linear" if every else [part.value],
                                      f"nn.Linear modules whose name contains {part.value!r}")
        cfg = PeftConfig(f"{name} (LoRA written in the checkout)", line or 0,
                         {"r": arg(*spec["r"]), "lora_alpha": arg(*spec["alpha"]), "target_modules": targets,
                          "lora_dropout": arg(*spec["dropout"])})
        it.facts.objects.append(cfg)
        return self.wrap_model(it, arg(*spec["model"]), line, peft=cfg)

    def get_peft_model(self, c: Call) -> Any:
        if c.owner in api.unsloth_loaders():
            return self.unsloth_peft(c)
        out = self.wrap_model(c.it, c.arg(0, "model"), c.line, peft=c.arg(1, "peft_config"))
        cast = c.kwargs.get("autocast_adapter_dtype")
        for m in flatten(out) if cast is not None else ():
            if isinstance(m, Model):
                m.adapter_cast = cast
        return out

    def kbit_prep(self, c: Call) -> Any:
        # peft kept prepare_model_for_int8_training as a deprecated alias of the kbit one
        # (peft utils/other.py); alpaca-lora era scripts still call it.
        gc = c.kwargs.get("use_gradient_checkpointing", c.args[1] if len(c.args) > 1 else None)
        if gc is None:
            gc = ("library-default", "peft.prepare_model_for_kbit_training", "use_gradient_checkpointing")
        out = self.wrap_model(c.it, c.arg(0, "model"), c.line, gc=Setting(gc, c.line, f"{c.name}(...)"))
        for m in flatten(out):
            if isinstance(m, Model):
                m.kbit_line = c.line
        return out

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
        if c.head == "peft" and c.name == "get_peft_config":
            return self.peft_config_of_dict(c)
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

    def peft_config_of_folder(self, c: Call) -> Any:
        """PeftConfig.from_pretrained("configs/lora") / LoraConfig.from_pretrained(dir): the
        adapter_config.json of that folder of the checkout, as peft reads it."""
        from memlint.extract import runtime_config

        ref = c.arg(0, "pretrained_model_name_or_path")
        if not (isinstance(ref, Const) and isinstance(ref.value, str)):
            return Unknown(f"{c.owner}.from_pretrained() of a folder memlint cannot read")
        path = ref.value.rstrip("/")
        if not path.endswith(".json"):
            path += "/adapter_config.json"
        d = runtime_config.read(c.it, Const(path, ref.source, ref.line, ref.chain, ref.file), f"{c.owner}.from_pretrained()")
        if not isinstance(d, Dict):
            return d if isinstance(d, Unknown) else Unknown(f"{path}: not a JSON object")
        return self.peft_config_of_dict(c, d, f"{c.owner}.from_pretrained()")

    def peft_config_of_dict(self, c: Call, d: Any = None, how: str = "peft.get_peft_config()") -> Any:
        """peft.get_peft_config(d): the config class d["peft_type"] names (LORA -> LoraConfig), built
        with d's other entries (a `peft_config:` block of a YAML file)."""
        d = c.arg(0, "config_dict") if d is None else d
        if not isinstance(d, Dict):
            return Unknown("peft.get_peft_config() of a dict memlint cannot read")
        kind = d.items.get("peft_type")
        if not (isinstance(kind, Const) and isinstance(kind.value, str)):
            return Unknown(f"{how}: peft_type is unknown")
        names = {"LORA": "LoraConfig", "ADALORA": "AdaLoraConfig", "IA3": "IA3Config", "LOHA": "LoHaConfig",
                 "LOKR": "LoKrConfig", "PREFIX_TUNING": "PrefixTuningConfig", "PROMPT_TUNING": "PromptTuningConfig",
                 "P_TUNING": "PromptEncoderConfig"}
        cls = names.get(kind.value.upper())
        if cls is None:
            return Unknown(f"{how}: peft_type {kind.value!r}")
        o = PeftConfig(f"peft.{cls}", c.line or 0, {k: v for k, v in d.items.items() if k != "peft_type"}, open=d.open)
        o.attrs["peft_type"] = Const(kind.value.upper(), kind.source, kind.line, kind.chain, kind.file)
        c.it.facts.objects.append(o)
        return o

    # ---- plumbing: fire, partial, the environment, paths, data files -------------------------

    def fire(self, c: Call) -> Any:
        if c.head != "fire":
            return _PASS
        for t in flatten(c.arg(0, "component")):
            if isinstance(t, Func):
                args, kwargs = self.fire_arguments(c.it, t) if c.it.launch is not None else ([], {})
                return c.it.call_function(t, args, kwargs, c.line, entry=True)
        return Unknown("fire.Fire")

    def fire_arguments(self, it: Any, f: Func) -> tuple[list, dict]:
        """fire's reading of the command's words for `f`: `--name value`, `--name=value`, `--flag` (True),
        `--noflag` (False), bare words for the positional parameters; values as Python literals."""
        from memlint.extract.cli_args import literal, match_fields

        p = f.node.params
        names = [q.name.value for q in [*p.posonly_params, *p.params, *p.kwonly_params]]
        bools = {n for n, d in f.defaults.items() if isinstance(d, Const) and isinstance(d.value, bool)}
        matched = match_fields(it.launch.argv, names, bools, accept_any=p.star_kwarg is not None)
        kwargs = {k: self.cli_const(it, literal(v) if isinstance(v, str) else v, f"{matched.flags[k]} {v!r}")
                  for k, v in matched.values.items() if not isinstance(v, list)}
        args = [self.cli_const(it, literal(w), f"positional {w!r}") for w in matched.rest if not w.startswith("-")]
        return args, kwargs

    def tyro_cli(self, c: Call) -> Any:
        """tyro.cli(Config) / tyro.cli(main): the dataclass built from its field defaults (a nested dataclass or
        a `default_factory=lambda: TrainingArguments(...)` included) with the command's `--field value` and
        `--nested.field value` words over them; a function is called with its parameters filled the same way."""
        if c.head != "tyro" or c.name != "cli":
            return _PASS
        out = None
        for t in flatten(c.arg(0, "f")):
            if isinstance(t, Func):
                names = [q.name.value for q in _params(t)]
                kwargs = {k: v for k, v in self._field_words(c.it, names, t.defaults).items() if "." not in k}
                r = c.it.call_function(t, [], kwargs, c.line, entry=True)
            elif isinstance(t, Class):
                given = c.kwargs.get("default")
                r = given if isinstance(given, Obj) else self.construct_user(Call(c.it, t.name, [], {}, False, c.line), t)
                if isinstance(r, Obj):
                    self.apply_field_words(c.it, r, t)
            else:
                r = Unknown("tyro.cli() of something memlint cannot read")
            out = r if out is None else Alts((out, r))
        return out if out is not None else Unknown("tyro.cli()")

    def jsonargparse_cli(self, c: Call) -> Any:
        """jsonargparse's CLI(main) / auto_cli(main): main called with `--name value` words, over the values of
        a `--config file.yaml` the command names (jsonargparse's ActionConfigFile)."""
        if c.head != "jsonargparse":
            return _PASS
        from memlint.extract import runtime_config
        from memlint.extract.cli_args import match_fields

        for t in flatten(c.arg(0, "components")):
            if not isinstance(t, Func):
                continue
            names = [q.name.value for q in _params(t)]
            kwargs: dict = {}
            if c.it.launch is not None:
                ref = match_fields(c.it.launch.argv, {"config"}).values.get("config")
                if isinstance(ref, str):
                    data = runtime_config.read(c.it, self.cli_const(c.it, ref, f"--config {ref}"), "jsonargparse --config")
                    if isinstance(data, Dict):
                        kwargs.update({k: v for k, v in data.items.items() if k in names})
            kwargs.update({k: v for k, v in self._field_words(c.it, names, t.defaults).items() if "." not in k})
            return c.it.call_function(t, [], kwargs, c.line, entry=True)
        return Unknown("jsonargparse.CLI()")

    def _field_words(self, it: Any, names: list[str], defaults: dict) -> dict:
        """`--name value` / `--name=value` / `--flag` / `--no-flag` / `--a.b value` words of the launch command,
        as values (converted like the default when it is known)."""
        from memlint.extract.cli_args import literal, match_fields

        if it.launch is None:
            return {}
        bools = {n for n, d in defaults.items() if isinstance(d, Const) and isinstance(d.value, bool)}
        matched = match_fields(it.launch.argv, names, bools, accept_any=True)
        out = {}
        for k, raw in matched.values.items():
            like = getattr(defaults.get(k), "value", None)
            how = f"{matched.flags[k]} {raw!r}"
            if isinstance(raw, list):
                out[k] = Seq([self.cli_const(it, literal(r), how) for r in raw])
            else:
                out[k] = self.cli_const(it, literal(raw, like) if isinstance(raw, str) else raw, how)
        return out

    def apply_field_words(self, it: Any, inst: Obj, cls: Class) -> None:
        """The command's words over a dataclass instance tyro built: `--field v` sets the field, `--field.sub v`
        the nested object's field (a nested dataclass, TrainingArguments, LoraConfig ...)."""
        fields: dict = {}
        c, seen = cls, 0
        while isinstance(c, Class) and seen < 20:
            seen += 1
            for k, v in c.fields.items():
                fields.setdefault(k, v)
            nxt = [b for b in c.bases if isinstance(b, Class)]
            c = nxt[0] if nxt else None
        for key, v in self._field_words(it, list(fields), fields).items():
            head, _, sub = key.partition(".")
            if not sub:
                if (head in fields or isinstance(inst, TrainingArgs)) and hasattr(inst, "cli"):
                    inst.cli[head] = v
                continue
            nested = self.getattr(it, inst, head, None) if head in fields else None
            for o in flatten(nested) if nested is not None else ():
                if isinstance(o, Obj) and "." not in sub:
                    it.write(o.attrs, sub, v, o)
                elif isinstance(o, Obj):  # --a.b.c: deeper nesting
                    inner = self.getattr(it, o, sub.split(".")[0], None)
                    for x in flatten(inner):
                        if isinstance(x, Obj) and sub.count(".") == 1:
                            it.write(x.attrs, sub.split(".")[1], v, x)

    def partial(self, c: Call) -> Any:
        if c.head != "functools":
            return _PASS
        return Partial(c.qual, c.line, kwargs=dict(c.kwargs), func=c.args[0] if c.args else None, args=list(c.args[1:]))

    def environ(self, c: Call) -> Any:
        if not ("environ" in c.qual or c.qual.startswith("os.")):
            return _PASS
        key = c.args[0] if c.args else None
        if not (isinstance(key, Const) and isinstance(key.value, str)):
            return Unknown("an environment variable")
        return self.env_value(c.it, key.value, c.arg(1, "default"), c.line)

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

    def namespace(self, c: Call) -> Any:
        """argparse.Namespace(**vars(a), **vars(b), x=1) / types.SimpleNamespace(...)."""
        if c.head not in ("argparse", "types"):
            return _PASS
        kw = {k: v for k, v in c.kwargs.items() if k != SPREAD}
        return Namespace(c.qual, c.line or 0, kw, {}, False, sources=list(c.kwargs.get(SPREAD, [])))

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
                c.it.facts.autocasts.append(AutocastCall(p.get("param_dtype"), Const("cuda", "literal", c.line), None, c.line))
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

    def chat_format(self, c: Call) -> Any:
        """trl.setup_chat_format / clone_chat_template(model, tokenizer): the same model (its embeddings
        resized to the new special tokens) and tokenizer."""
        return Seq([c.arg(0, "model", Unknown("a model")), c.arg(1, "tokenizer", Unknown("a tokenizer"))], "tuple")

    def random_offsets(self, c: Call) -> Any:
        """torch.randint([low,] high, (B,)) / numpy.random.randint(low, high, size=B): B offsets into
        a token stream (the size's first entry; a scalar size for numpy)."""
        if c.qual.startswith("torch"):
            size = c.kwargs.get("size", c.args[-1] if len(c.args) >= 2 else None)
        else:
            size = c.kwargs.get("size", c.args[2] if len(c.args) > 2 else None)
        if isinstance(size, Seq) and size.items:
            size = size.items[0]
        if size is None:
            return Unknown("random integers")
        return RandomOffsets(size, c.line)

    def asdict(self, c: Call) -> Any:
        """dataclasses.asdict(cfg) of the script's own dataclass: its fields (bases first) as a dict."""
        obj = c.args[0] if c.args else None
        uc = getattr(obj, "user_class", None)
        if not isinstance(obj, Obj) or not isinstance(uc, Class) or not uc.is_dataclass or obj.open:
            return Unknown("the result of dataclasses.asdict()")
        chain, stack = [], [uc]
        while stack and len(chain) < 20:
            k = stack.pop()
            if isinstance(k, Class) and k not in chain:
                chain.append(k)
                stack.extend(k.bases)
        names = list(dict.fromkeys(n for k in reversed(chain) for n in k.fields))
        return Dict({n: self.getattr(c.it, obj, n, c.line) for n in names})

    def cast(self, c: Call) -> Any:
        # a type-checker hint: cast(T, x) is x at run time
        return c.args[1] if len(c.args) > 1 else c.kwargs.get("val", Unknown("typing.cast()"))

    def fsdp_mixed_precision(self, c: Call) -> Any:
        """torch.distributed.fsdp.MixedPrecision(param_dtype=...) / MixedPrecisionPolicy (fully_shard)."""
        if "fsdp" not in c.qual and "distributed" not in c.qual:
            return _PASS
        return c.new(Obj, c.qual, ("param_dtype", "reduce_dtype", "buffer_dtype"))

    def mp_spawn(self, c: Call) -> Any:
        """torch.multiprocessing.spawn(fn, args=(...), nprocs=N): each process runs fn(rank, *args)."""
        fn = c.arg(0, "fn")
        args = c.arg(1, "args")
        extra = list(args.items) if isinstance(args, Seq) else []
        if isinstance(fn, Func):
            c.it.call_function(fn, [Unknown("the process rank"), *extra], {}, c.line)
        return Const(None, "literal", c.line)

    def literal_eval(self, c: Call) -> Any:
        """ast.literal_eval of a known string: the literal it spells (a safe parse, never an eval);
        a string that is no literal raises, which RaisedBy tells the enclosing try."""
        import ast

        src = c.arg(0, "node_or_string")
        if not (isinstance(src, Const) and isinstance(src.value, str)):
            return Unknown("ast.literal_eval() of an unknown string")
        try:
            return src.with_value(ast.literal_eval(src.value), "literal_eval()")
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return RaisedBy("ast.literal_eval() of a string that is no literal")

    def bf16_supported(self, c: Call) -> Any:
        return Unknown("whether the GPU supports bf16 (hardware)")

    def fields_update(self, it: Any, obj: Obj, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        """vars(args).update(cfg) / args.__dict__.update(cfg) / .setdefault(k, v): the object's attributes set."""
        if name == "setdefault":
            key = args[0] if args else None
            if isinstance(key, Const) and isinstance(key.value, str) and not self.declares(obj, key.value):
                it.write(obj.attrs, key.value, args[1] if len(args) > 1 else Const(None, "literal", line), obj)
            return self.getattr(it, obj, key.value, line) if isinstance(key, Const) and isinstance(key.value, str) \
                else Unknown("setdefault()")
        for a in [*args, Dict(dict(kwargs))]:
            if isinstance(a, Dict):
                for k, v in a.items.items():
                    if isinstance(k, str):
                        it.write(obj.attrs, k, v, obj)
                        self.on_setattr(it, obj, k, v, line)
        return Const(None, "literal", line)

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
        return Unknown(f"{how}: the number of processes, which the launch environment decides")

    def dict_wrapper(self, c: Call) -> Any:
        """EasyDict(cfg) / Box(cfg) / munchify(cfg) / ConfigDict(cfg) (data/library_api.json "dict_wrappers"): the
        same keys, read as attributes too."""
        d = c.arg(0, "d")
        if isinstance(d, Dict):
            return Dict({**d.items, **c.kwargs}, d.open)
        if d is None:
            return Dict(dict(c.kwargs))
        return Unknown(f"{c.name}() of a mapping memlint cannot read")

    def import_module(self, c: Call) -> Any:
        """importlib.import_module("torch.optim"): the module a literal name names, as `import torch.optim`
        would bind it (verl's build_optimizer: getattr(import_module(impl), name)(params))."""
        if c.qual != "importlib.import_module":
            return _PASS
        name = c.arg(0, "name")
        if isinstance(name, Const) and isinstance(name.value, str) and re.fullmatch(r"[A-Za-z_][\w.]*", name.value):
            return Ref(name.value)
        return Unknown("importlib.import_module() of a name not known statically")

    def data_file(self, c: Call) -> Any:
        """json.load(f) / json.loads(text) / yaml.safe_load(f) / OmegaConf.load(path) / toml.load(f):
        the file the script opened, read statically."""
        from memlint.extract import runtime_config

        if c.head not in ("json", "yaml", "omegaconf", "OmegaConf", "toml", "tomllib", "tomli", "ruamel") \
                and c.owner != "OmegaConf":
            return _PASS
        src = c.arg(0, "stream" if c.head == "yaml" else "fp")
        if src is None:
            src = next(iter(c.kwargs.values()), None)
        if isinstance(src, OpenFile):
            return runtime_config.read(c.it, src.path, f"{c.qual}()")
        if c.owner == "OmegaConf" or c.name in ("load", "safe_load", "full_load") and isinstance(src, Const):
            return runtime_config.read(c.it, src, f"{c.qual}()")
        if isinstance(src, Dict):  # yaml.safe_load of a dict a test put together, json.loads(json.dumps(d))
            return src
        return Unknown("a config file read at run time")

    def omegaconf(self, c: Call) -> Any:
        """OmegaConf.create(d) is d; OmegaConf.merge(a, b) is b over a; to_container/to_object are the same data."""
        if c.owner != "OmegaConf":
            return _PASS
        if c.name in ("create", "to_container", "to_object", "structured"):
            return c.args[0] if c.args else Dict({}, open=True)
        merged = Dict({})
        for a in c.args:
            for d in flatten(a):
                if isinstance(d, Dict):
                    _deep_update(merged, d)
                else:
                    merged.open = True
        return merged

    def open_file(self, c: Call) -> Any:
        return OpenFile(c.arg(0, "file"))

    def path_value(self, c: Call) -> Any:
        """pathlib.Path(a, b) / os.path.dirname(p) / abspath / expanduser / basename: the path as a string."""
        import os
        import posixpath

        vals = [a for a in c.args if isinstance(a, Const) and isinstance(a.value, str)]
        if len(vals) != len(c.args) or not vals:
            return Unknown("a path")
        fn = {"Path": lambda *a: posixpath.join(*a), "PurePath": lambda *a: posixpath.join(*a),
              "dirname": posixpath.dirname, "basename": posixpath.basename, "abspath": lambda p: p,
              "realpath": lambda p: p, "normpath": posixpath.normpath, "expanduser": os.path.expanduser,
              "join": lambda *a: posixpath.join(*a)}.get(c.name)
        if fn is None or (c.name in ("dirname", "basename", "abspath", "realpath", "normpath", "expanduser") and len(vals) != 1):
            return Unknown("a path")
        value = fn(*(v.value for v in vals))
        base = next((a for a in vals if a.source != "literal"), vals[0])
        return Const(value, weakest(*(a.source for a in vals)), base.line, base.chain, base.file)

    # ---- builtins ----------------------------------------------------------------------------

    def builtin(self, it: Any, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        if name == "getattr" and len(args) >= 2:
            return self._getattr_builtin(it, args)
        if name == "input":
            return Unknown("input() at run time")
        if name == "open":
            return OpenFile(args[0] if args else kwargs.get("file"))
        if name == "range":
            return Range("range", line or 0)
        if name == "dict":
            base = args[0] if len(args) == 1 else None
            if isinstance(base, Dict):  # dict(cfg): a shallow copy
                return Dict({**base.items, **kwargs}, base.open)
            if isinstance(base, Const) and isinstance(base.value, dict):
                return Dict({**{k: base.with_value(v, f"[{k!r}]") for k, v in base.value.items()}, **kwargs})
            if isinstance(base, Fields):  # dict(vars(args)): the parsed fields, when memlint can list them
                every = self.fields_dict(it, base.obj)
                if every is not None:
                    return Dict({**every.items, **kwargs}, every.open)
            d = Dict(dict(kwargs))
            if args:
                d.open = True
            return d
        if name == "vars":
            if args and isinstance(args[0], Obj):
                return Fields(args[0])
            return Dict({}, open=True)
        if name in ("isinstance", "hasattr", "setattr", "type") and args:
            return self._object_builtin(it, name, args, line)
        if name in _BUILTIN_CALLS:
            out = self._pure_builtin(name, args, line)
            return it.over() if isinstance(out, Unknown) and out.why == budget.OVER else out
        return Unknown(f"{name}()")

    def _object_builtin(self, it: Any, name: str, args: list, line: int | None) -> Any:
        """isinstance / hasattr / setattr / type over the objects memlint knows (a config dataclass
        updated field by field from **kwargs, `isinstance(config, (tuple, list))`)."""
        obj = args[0]
        if name == "type":
            cls = getattr(obj, "user_class", None)
            if isinstance(obj, Const) and type(obj.value) in (bool, int, float, str, type(None), list, tuple, dict):
                return Ref(f"builtins.{type(obj.value).__name__}")  # compared with type(True), bool, ... by name
            return cls if isinstance(cls, Class) else Unknown("a type")
        if name == "isinstance" and len(args) > 1:
            kinds = {x.name if isinstance(x, Ref) else x.name if isinstance(x, Class) else None
                     for x in (args[1].items if isinstance(args[1], Seq) else [args[1]])}
            if isinstance(obj, Seq):
                return Const(bool(kinds & {"tuple", "list", "Sequence", "Iterable"}) and
                             (obj.kind in kinds or "Sequence" in kinds or "Iterable" in kinds), "literal", line)
            if isinstance(obj, Dict):
                return Const(bool(kinds & {"dict", "Mapping", "MutableMapping"}), "literal", line)
            if isinstance(obj, Const):
                pyname = type(obj.value).__name__
                return Const(pyname in kinds or (pyname == "bool" and "int" in kinds), "literal", line)
            uc = getattr(obj, "user_class", None)
            if isinstance(obj, Obj) and isinstance(uc, Class):
                names = set()
                stack = [uc]
                while stack and len(names) < 20:
                    c = stack.pop()
                    if isinstance(c, Class):
                        names.add(c.name)
                        stack.extend(c.bases)
                return Const(bool(kinds & names) or None in kinds and False, "literal", line) if kinds - {None} else Unknown("isinstance")
            return Unknown("isinstance")
        key = args[1] if len(args) > 1 else None
        if not (isinstance(key, Const) and isinstance(key.value, str)):
            return Unknown(f"{name}() with an unknown name")
        attr = key.value
        if name == "hasattr":
            if not isinstance(obj, Obj):
                return Unknown("hasattr")
            uc = getattr(obj, "user_class", None)
            declared = attr in obj.kwargs or attr in obj.attrs or attr in getattr(obj, "cli", {}) or (
                isinstance(uc, Class) and uc.lookup(attr) is not None)
            if declared or isinstance(uc, Class):
                return Const(bool(declared), "literal", line)
            return Unknown("hasattr of a library object")
        if name == "setattr" and len(args) > 2 and isinstance(obj, Obj):
            it.write(obj.attrs, attr, args[2], obj)
            self.on_setattr(it, obj, attr, args[2], line)
            return Const(None, "literal", line)
        return Unknown(f"{name}()")

    def _getattr_builtin(self, it: Any, args: list) -> Any:
        if isinstance(args[1], Const) and isinstance(args[1].value, str):
            base = args[0]
            if isinstance(base, Ref) and base.qual == "torch":  # getattr(torch, "bfloat16")
                return DtypeName(Ref(f"{base.qual}.{args[1].value}"), args[1])
            if isinstance(base, Ref):  # getattr(torch.optim, "AdamW"): the library name itself
                return Ref(f"{base.qual}.{args[1].value}")
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
                bound = _min_bound(args) if name == "min" else None
                return bound or Unknown(fa[0].why if fa and isinstance(fa[0], Unknown) else f"{name}() of non-constants")
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

    @staticmethod
    def dict_method(d: Dict, name: str, args: list, kwargs: dict) -> Any:
        key = args[0] if args else None
        k = key.value if isinstance(key, Const) and _hashable(key.value) else _NOKEY
        if name in ("get", "setdefault", "pop"):
            dflt = args[1] if len(args) > 1 else kwargs.get("default", Const(None, "literal", None))
            if k is not _NOKEY and k in d.items:
                return d.items.pop(k) if name == "pop" else d.items[k]
            if d.open or k is _NOKEY:
                return Unknown("a key memlint cannot see")
            if name == "setdefault":
                if insert_fits(d, dflt):  # within the budget, and no cycle (extract/budget.py)
                    d.items[k] = dflt
                else:
                    d.open = True
            return dflt
        if name == "items":
            return Seq([Seq([Const(kk, "literal", None), v], "tuple") for kk, v in d.items.items()]) if not d.open \
                else Unknown("the items of a dict with unknown keys")
        if name == "keys":
            return Seq([Const(kk, "literal", None) for kk in d.items]) if not d.open else Unknown("unknown keys")
        if name == "values":
            return Seq(list(d.items.values())) if not d.open else Unknown("unknown values")
        if name == "copy":
            return Dict(dict(d.items), d.open)
        if name == "update":
            for a in [*args, Dict(dict(kwargs))]:
                if isinstance(a, Dict):
                    for kk, v in a.items.items():
                        if insert_fits(d, v):
                            d.items[kk] = v
                        else:
                            d.open = True
                    d.open |= a.open
                else:
                    d.open = True
            return Const(None, "literal", None)
        return Unknown(f"dict.{name}()")

    def str_method(self, it: Any, f: BoundStr, args: list, kwargs: dict, node: Any) -> Any:
        if f.attr in ("read_text", "open", "read_bytes"):  # pathlib.Path(p).read_text()
            return OpenFile(f.base)
        if f.attr in _PATH_SAME and not args and not kwargs:  # Path(p).expanduser().resolve(): the same file
            return f.base
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
        if f.attr == "step" and not args:  # an optimizer memlint cannot see built (`self.optimizers.step()`)
            it.facts.unknown_steps.append(line)
        if f.attr == "register_post_accumulate_grad_hook":
            it.facts.grad_hooks.append(GradHook(_steps_an_optimizer(args[0] if args else kwargs.get("hook")), line))
        if ("padding" in kwargs or "truncation" in kwargs) and f.attr in _TOKENIZE_METHODS:
            it.facts.tokenizer_calls.append(TokenizerCall(kwargs, line, None, f.attr))
        if f.attr in ("map", "filter"):
            self.mapped_function(it, args, kwargs, line)
        if f.attr == "load" and f.why.startswith("the result of ruamel.yaml.YAML(") and args:
            from memlint.extract import runtime_config  # ruamel: yaml.YAML(typ="safe").load(path)

            src = args[0]
            if isinstance(src, OpenFile):
                return runtime_config.read(it, src.path, "ruamel.yaml.YAML().load()")
            if isinstance(src, Const) and isinstance(src.value, str):
                return runtime_config.read(it, src, "ruamel.yaml.YAML().load()")
        return Unknown(f"the result of ….{f.attr}()")

    @staticmethod
    def mapped_function(it: Any, args: list, kwargs: dict, line: int | None) -> None:
        """datasets' `ds.map(fn, fn_kwargs={...})` / `ds.map(functools.partial(fn, max_len=n))`: fn runs
        once on an example memlint does not know, with the arguments the call binds (the walk of
        uncalled functions would see only their defaults)."""
        fn = args[0] if args else kwargs.get("function")
        extra = kwargs.get("fn_kwargs")
        if isinstance(fn, Partial) and isinstance(fn.func, Func):
            fn_args, fn_kw, target = list(fn.args), dict(fn.kwargs), fn.func
        elif isinstance(fn, Func) and isinstance(extra, Dict):
            fn_args, fn_kw, target = [], {}, fn
        else:
            return
        if isinstance(extra, Dict):
            fn_kw.update({k: v for k, v in extra.items.items() if isinstance(k, str)})
        it.call_function(target, [Unknown("a dataset example"), *fn_args], fn_kw, line)

    # ---- the script's own classes ------------------------------------------------------------

    def construct_user(self, c: Call, cls: Class) -> Any:
        base = library_base(cls, api.training_arguments())
        if base:
            return c.new(TrainingArgs, api.training_arguments()[base], ("output_dir",), user_class=cls)
        base = library_base(cls, api.trainers()) or _vendored_trainer(cls, api.trainers())
        if base:
            return self.trainer(Call(c.it, base, c.args, c.kwargs, c.open, c.line), user=cls)
        base = library_base(cls, _SUBCLASSED_PARSERS)
        if base:  # class ArgumentParserPlus(HfArgumentParser): parses as its library base does
            return _BY_NAME[base](self, Call(c.it, base, c.args, c.kwargs, c.open, c.line))
        base = library_base(cls, api.collators())
        if base:  # class CompletionCollator(DataCollatorForLanguageModeling): it pads as its library base
            return self.collator(Call(c.it, base, c.args, c.kwargs, c.open, c.line))
        if cls.is_dataclass:
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
            return self._load_model(Call(c.it, f"{cls.name}.from_config", [cfg], dict(c.kwargs), c.open, c.line),
                                    cls.name, "from_config")
        if custom_model.is_module_class(cls, library_base):
            return self.script_model(c, cls)
        inst = Instance(cls.name, c.line or 0, {}, {}, c.open, user_class=cls)
        init = cls.lookup("__init__")
        if init is not None and init[0] == "method":
            c.it.call_function(init[1], [inst, *c.args], dict(c.kwargs), c.line)
        return inst

    def script_model(self, c: Call, cls: Class) -> Any:
        """`GPT(config)`, a model class of the script's checkout: its __init__ runs (the layers it builds
        recorded), and the model is a Model whose shape is read from the config (extract/custom_model.py)."""
        outer = c.it.layers
        layers = c.it.layers = custom_model.Layers()
        model = Model(cls.name, c.line or 0, {}, {}, c.open, loader="script-class", user_class=cls)
        init = cls.lookup("__init__")
        try:
            if init is not None and init[0] == "method":
                c.it.call_function(init[1], [model, *c.args], dict(c.kwargs), c.line)
        finally:
            c.it.layers = outer
        if outer is not None:  # a module built inside another's __init__: its layers are the outer one's
            outer.linears += layers.linears
            outer.embeddings += layers.embeddings
            outer.files |= layers.files
            return model
        if not layers.embeddings:  # no token embedding: a loss, a head or a block, not a language model
            return Instance(cls.name, c.line or 0, {}, model.attrs, c.open, user_class=cls)
        where = f"{Path(cls.file).stem if cls.file else Path(str(c.it.path)).stem}.{cls.name}"
        cfg = custom_model.config_arg(c.args, c.kwargs)
        tied = custom_model.ties_weights(init[1].node if init is not None and init[0] == "method" else None)
        model.shape = custom_model.shape_of(where, cfg, layers, tied)
        model.kwargs["pretrained_model_name_or_path"] = Const(
            model.shape.described, "constant", c.line, (f"{cls.name}(…) at line {c.line}: the script's own model class "
                                                        f"({cls.file or 'the script'}:{cls.line})",))
        c.it.facts.objects.append(model)
        return model

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
            self.mapped_function(it, args, kwargs, line)
            return obj
        if name == "parameters" or name == "named_parameters":
            return Params("parameters", line or 0, model=obj)
        if name == "register_post_accumulate_grad_hook":
            it.facts.grad_hooks.append(GradHook(_steps_an_optimizer(args[0] if args else kwargs.get("hook")), line))
        return Unknown(f"the result of .{name}()")

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

    def tokenize(self, it: Any, tok: Tokenizer, args: list, kwargs: dict, line: int | None, name: str = "__call__") -> Any:
        it.facts.tokenizer_calls.append(TokenizerCall(dict(kwargs), line, tok, name,
                                                      bool(args) or "text" in kwargs or "text_target" not in kwargs))
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
            table[key] = ArgSpec(kwargs, line, flags[0] if flags else key, it.cur_file(),
                                 tuple(f for f in flags if f.startswith("-")))
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
            if not given and it.launch is not None:
                ns.cli = self.argparse_cli(it, p)
            return ns if name != "parse_known_args" else Seq([ns, Unknown("remaining arguments")], "tuple")
        return Unknown(f"parser.{name}()")

    def argparse_cli(self, it: Any, p: ArgParser) -> dict:
        """dest -> the value the launch command's words give it, as argparse would parse them."""
        from memlint.extract.cli_args import Option, match_argparse

        options = []
        for dest, spec in p.args.items():
            kw = spec.kwargs
            action = kw.get("action")
            act = action.value if isinstance(action, Const) and isinstance(action.value, str) else "store"
            if isinstance(action, Ref) and action.name == "BooleanOptionalAction":
                act = "boolean_optional"
            nargs = kw.get("nargs")
            const = kw.get("const")
            options.append(Option(dest, spec.flags, act.replace("-", "_"), nargs.value if isinstance(nargs, Const) else None,
                                  const.value if isinstance(const, Const) else (True if act == "store_const" else None)))
        matched = match_argparse(options, it.launch.argv)
        out = {}
        for dest, raw in matched.values.items():
            spec = p.args[dest]
            out[dest] = self.convert_cli(it, raw, spec.kwargs.get("type"), spec.kwargs.get("default"),
                                         f"{matched.flags.get(dest, dest)} {raw!r}")
        for dest, raw in matched.values.items():
            action = p.args[dest].kwargs.get("action")
            if isinstance(action, Ref) and action.name == "ActionConfigFile" and isinstance(raw, str):
                self.config_file_values(it, p, raw, f"{matched.flags.get(dest, dest)} {raw}", out)
        return out

    @staticmethod
    def config_file_values(it: Any, p: ArgParser, ref: str, how: str, out: dict) -> None:
        """jsonargparse's `--config file.yaml` (action=ActionConfigFile): the file's keys fill the parser's
        arguments of the same names; a flag the command also gives keeps the command's value."""
        from memlint.extract import runtime_config

        data = runtime_config.read(it, Handlers.cli_const(it, ref, how), "jsonargparse ActionConfigFile")
        if not isinstance(data, Dict):
            return
        for key, v in data.items.items():
            dest = key.replace("-", "_") if isinstance(key, str) else None
            if dest in p.args and dest not in out:
                out[dest] = v

    def convert_cli(self, it: Any, raw: Any, conv: Any, default: Any, how: str) -> Any:
        """A command-line word through the argument's type= (a builtin or the script's own function)."""
        from memlint.extract.cli_args import literal, str_to_bool

        if isinstance(raw, list):
            return Seq([self.convert_cli(it, r, conv, None, how) for r in raw])
        if not isinstance(raw, str):
            return self.cli_const(it, raw, how)
        if isinstance(conv, Func):
            out = it.call_function(conv, [self.cli_const(it, raw, how)], {}, None)
            return out
        if isinstance(conv, Ref) and conv.name in ("bool_arg", "str2bool", "strtobool", "str_to_bool", "string_to_bool") \
                and str_to_bool(raw) is not None:  # fastcore's bool_arg, transformers' string_to_bool: "true" -> True
            return self.cli_const(it, str_to_bool(raw), how)
        if isinstance(conv, Ref) and conv.qual in ("builtins.int", "builtins.float", "builtins.str", "builtins.bool"):
            fn = {"builtins.int": int, "builtins.float": float, "builtins.str": str, "builtins.bool": bool}[conv.qual]
            try:
                return self.cli_const(it, fn(raw), how)
            except ValueError:
                return Unknown(f"{how}: not a {conv.name}")
        like = default.value if isinstance(default, Const) else None
        return self.cli_const(it, literal(raw, like) if conv is None else raw, how)

    def hfparser_method(self, it: Any, p: HfParser, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        from memlint.extract import runtime_config

        from_file = name in ("parse_json_file", "parse_yaml_file", "parse_dict", "parse_yaml_and_args")
        if name.startswith("parse_"):
            data = None
            if from_file:
                src = args[0] if args else kwargs.get("json_file", kwargs.get("yaml_file", kwargs.get("args")))
                data = src if isinstance(src, Dict) else runtime_config.read(it, src, f"{p.cls.rsplit('.', 1)[-1]}.{name}()")
            read = isinstance(data, Dict) and not data.open
            out = [self.dataclass_instance(it, c, line, from_file and not read, name) for c in p.classes]
            objs = [o for o in out if isinstance(o, (TrainingArgs, DataclassInstance))]
            if read:
                self.dataclass_values(objs, data.items)
            elif isinstance(data, Unknown) and data.why:
                it.facts.note(data.why)
            if name == "parse_yaml_and_args" and it.launch is not None:  # the YAML, then `--key=value` words over it
                self.dataclass_cli(it, objs)
            if not from_file and it.launch is not None and name in ("parse_args_into_dataclasses", "parse_args_and_config",
                                                                    "parse_args", "parse_known_args"):
                if name == "parse_args_and_config":  # TrlParser: `--config recipe.yaml`, then the flags over it
                    self.trl_config_file(it, objs)
                self.dataclass_cli(it, objs)
            for o in objs:  # the parser builds each dataclass with cls(**values): its __post_init__ runs
                post = o.user_class.lookup("__post_init__") if isinstance(o, DataclassInstance) and o.user_class else None
                if post is not None and post[0] == "method" and isinstance(post[1], Func):
                    it.call_function(post[1], [o], {}, line)  # `if self.use_qlora: self.use_lora = True`
            # HfArgumentParser.parse_args_into_dataclasses and TrlParser.parse_args_and_config
            # both take (args, return_remaining_strings, ...) and then append the leftovers.
            rest = kwargs.get("return_remaining_strings", args[1] if len(args) > 1 else None)
            if name in ("parse_args_into_dataclasses", "parse_args_and_config") and isinstance(rest, Const) and rest.value:
                out.append(Unknown("remaining strings"))
            return Seq(out, "tuple")
        return Unknown(f"parser.{name}()")

    @staticmethod
    def _declared(objs: list) -> list[tuple[Obj, dict]]:
        """Each dataclass instance with the fields its class (and user-class bases) declares."""
        declared: list[tuple[Obj, dict]] = []
        for o in objs:
            fields: dict = {}
            c = o.user_class
            seen = 0
            while isinstance(c, Class) and seen < 20:
                seen += 1
                for k, v in c.fields.items():
                    fields.setdefault(k, v)
                nxt = [b for b in c.bases if isinstance(b, Class)]
                c = nxt[0] if nxt else None
            lib = getattr(o, "library", None)
            if lib and not fields:  # trl.ModelConfig: its field names are data
                from memlint.library.defaults import declared_fields, default as library_default

                for k in sorted(declared_fields(lib)):
                    d = library_default(lib, k)
                    fields[k] = Const(d.value, "library-default", None, (d.why,)) if d is not None else Unknown(f"{lib}.{k}")
            declared.append((o, fields))
        return declared

    def dataclass_values(self, objs: list, values: dict) -> None:
        """Values (a config file's, already abstract) dispatched to the dataclass that declares each key,
        an undeclared key to the training arguments, as HfArgumentParser.parse_dict does."""
        declared = self._declared(objs)
        targs = next((o for o in objs if isinstance(o, TrainingArgs)), None)
        for key, v in values.items():
            owner = next((o for o, f in declared if key in f), targs)
            if owner is not None and isinstance(key, str):
                owner.cli[key] = v

    def trl_config_file(self, it: Any, objs: list) -> None:
        from memlint.extract import runtime_config
        from memlint.extract.cli_args import match_fields

        m = match_fields(it.launch.argv, {"config"})
        ref = m.values.get("config")
        if isinstance(ref, str):
            data = runtime_config.read(it, self.cli_const(it, ref, f"--config {ref}"), "TrlParser --config")
            if isinstance(data, Dict):
                self.dataclass_values(objs, data.items)

    def dataclass_cli(self, it: Any, objs: list) -> None:
        """HfArgumentParser's matching of the launch command's words to the dataclasses' fields: each
        `--field value` goes to the dataclass that declares the field, an undeclared one to the
        training arguments (TrainingArguments declares more fields than memlint lists)."""
        from memlint.extract.cli_args import literal, match_fields, str_to_bool

        declared = self._declared(objs)
        names = {k for _, f in declared for k in f}
        bools = {k for _, f in declared for k, v in f.items() if isinstance(v, Const) and isinstance(v.value, bool)}
        bools |= set(api.bool_fields())
        targs = next((o for o in objs if isinstance(o, TrainingArgs)), None)
        matched = match_fields(it.launch.argv, names, bools, accept_any=targs is not None,
                               abbrev=_option_names() | bools)
        for key, raw in matched.values.items():
            owner = next((o for o, f in declared if key in f), targs)
            if owner is None:
                continue
            default = next((f[key] for o, f in declared if o is owner and key in f), None)
            like = default.value if isinstance(default, Const) else (True if key in bools else None)
            how = f"{matched.flags[key]} {raw!r}"
            if isinstance(raw, list):
                owner.cli[key] = Seq([self.cli_const(it, literal(r), how) for r in raw])
            elif isinstance(raw, bool):
                owner.cli[key] = self.cli_const(it, raw, how)
            elif key in bools and str_to_bool(raw) is not None:
                owner.cli[key] = self.cli_const(it, str_to_bool(raw), how)
            else:
                owner.cli[key] = self.cli_const(it, literal(raw, like), how)

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

    # ---- the launch command: sys.argv, the environment ---------------------------------------

    @staticmethod
    def cli_const(it: Any, value: Any, how: str) -> Const:
        """A value the launch command gives: source command-line, at the launcher's line when it has one."""
        launch = it.launch
        file = launch.origin if launch is not None and launch.line else None
        where = launch.where() if launch is not None else "the command line"
        return Const(value, "command-line", launch.line_of(how) if launch is not None else None, (f"{how} ({where})",), file)

    def module_attribute(self, it: Any, qual: str, attr: str, node: Any) -> Any:
        """Attributes of imported modules that stand for run-time state: sys.argv."""
        if qual == "sys" and attr == "argv":
            if it.launch is None:
                return Unknown("the command-line arguments (sys.argv)")
            words = [it.launch.script or it.launch.module or "script", *it.launch.argv]
            return Seq([self.cli_const(it, w, f"sys.argv[{i}] = {w!r}") for i, w in enumerate(words)])
        return None

    def ref_item(self, it: Any, ref: Ref, key: Any, line: int | None) -> Any:
        if ref.qual in ("os.environ", "environ") and isinstance(key, Const) and isinstance(key.value, str):
            return self.env_value(it, key.value, None, line)
        return Unknown(f"an item of {ref.qual}")

    def env_value(self, it: Any, name: str, dflt: Any, line: int | None) -> Any:
        """An environment variable: the launch command's value, else the default the code gives."""
        launch = it.launch
        env = dict(getattr(launch, "env", {}) or {})
        if launch is not None and launch.gpus and launch.launcher in ("torchrun", "accelerate", "deepspeed", "composer"):
            env.setdefault("WORLD_SIZE", str(launch.gpus))  # what the launcher sets for every rank
            env.setdefault("LOCAL_WORLD_SIZE", str(launch.processes or launch.gpus))
        if name in env:
            return self.cli_const(it, env[name], f"{name}={env[name]}")
        if isinstance(dflt, Const):
            how = f"os.environ.get({name!r}, {dflt.value!r}): {name} unset, its default"
            return Const(dflt.value, "environment-default", dflt.line or line, dflt.chain + (how,), dflt.file)
        it.facts.note(f"a value comes from the environment variable {name}; memlint treats it as unknown")
        return Unknown(f"environment variable {name}")

    # ---- attributes ------------------------------------------------------------------------

    def getattr(self, it: Any, obj: Obj, attr: str, line: int | None) -> Any:
        value = self._getattr(it, obj, attr, line)
        if attr in api.length_arguments() and (
                isinstance(obj, (ArgNamespace, Namespace, DataclassInstance)) and not isinstance(obj, TrainingArgs)
                or isinstance(obj, TrainingArgs) and _declares(obj.user_class, attr)):
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
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func) and not _is_property(hit[1]):
                return BoundMethod(hit[1], obj)  # cfg.create_bnb_config("4bit"): a method of the script's dataclass
            return field_value(obj, attr)
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
            return HfConfig("config", line or 0, {"model_id": root.kwargs.get("pretrained_model_name_or_path",
                                                                             root.kwargs.get("model_name"))})
        if isinstance(obj, Accelerator) and attr == "num_processes":
            return self.world_size(it, "accelerator.num_processes")
        if isinstance(obj, DeepSpeedEngine) and attr == "module":
            return obj.model
        if isinstance(obj, Model) and obj.user_class is not None:  # the script's nn.Module: its own methods run
            hit = obj.user_class.lookup(attr)
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func) and not _is_property(hit[1]):
                return BoundMethod(hit[1], obj)
        if isinstance(obj, Instance) and obj.user_class is not None:
            hit = obj.user_class.lookup(attr)
            if hit is not None:
                return BoundMethod(hit[1], obj) if hit[0] == "method" else hit[1]
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

    def arg_default(self, ns: ArgNamespace, attr: str) -> Any:
        spec = ns.parser.args.get(attr) if ns.parser is not None else None
        if spec is None:
            return Unknown(f"args.{attr} (no add_argument for it)")
        if attr in ns.cli:
            return ns.cli[attr]
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


def _is_property(f: Func) -> bool:
    return any(getattr(d.decorator, "value", None) in ("property", "cached_property") or
               getattr(getattr(d.decorator, "attr", None), "value", None) in ("cached_property", "setter")
               for d in f.node.decorators)


def _seq_method(seq: Seq, name: str, args: list, line: int | None) -> Any:
    """list/tuple .index(x) and .count(x) when x and every item are constants."""
    items = [flatten(x) for x in seq.items]
    if len(args) != 1 or not isinstance(args[0], Const) or not all(len(i) == 1 and isinstance(i[0], Const) for i in items):
        return Unknown(f".{name}() of a sequence memlint cannot read item by item")
    values = [i[0].value for i in items]
    if name == "count":
        return args[0].with_value(values.count(args[0].value), f".count({args[0].value!r})")
    if args[0].value not in values:
        return RaisedBy(f".index({args[0].value!r}): not in the sequence (ValueError)")
    return args[0].with_value(values.index(args[0].value), f".index({args[0].value!r})")


def _min_bound(args: list) -> Const | None:
    """min(128, tokenizer.model_max_length) with the second unknown: at most 128. The known bound is the
    worst case memlint sizes (a longer sequence, a larger batch never fits in less), said in the chain."""
    known, unknown = [], []
    for a in args:
        fa = flatten(a)
        if fa and all(isinstance(x, Const) and type(x.value) in (int, float) for x in fa):
            known.append(max(fa, key=lambda x: x.value))  # an argument with alternatives: its largest
        else:
            unknown.append(next((x.why for x in fa if isinstance(x, Unknown)), "a value memlint cannot read"))
    if not known or not unknown:
        return None
    lead = min(known, key=lambda x: x.value)
    return lead.with_value(lead.value, f"min(…) ≤ {lead.value!r}: the other argument is unknown ({unknown[0]}); "
                                       "memlint sizes the bound")


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
# lightning classes that train, and the strategy classes whose options say how
_LIGHTNING = {"Trainer": "lightning.Trainer", "Fabric": "lightning.Fabric", "DeepSpeedStrategy": "lightning.DeepSpeedStrategy",
              "FSDPStrategy": "lightning.FSDPStrategy", "DDPStrategy": "lightning.DDPStrategy"}
_NOKEY = object()


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True

# Library calls by qualified name, then by their last component.
def _deep_update(into: Dict, other: Dict) -> None:
    for k, v in other.items.items():
        cur = into.items.get(k)
        if isinstance(cur, Dict) and isinstance(v, Dict):
            _deep_update(cur, v)
        else:
            into.items[k] = v
    into.open |= other.open


_QUALIFIED: dict[str, Callable[[Handlers, Call], Any]] = {
    "tyro.cli": Handlers.tyro_cli,
    "torch.randint": Handlers.random_offsets,
    "numpy.random.randint": Handlers.random_offsets,
    "typing.cast": Handlers.cast,
    "dataclasses.asdict": Handlers.asdict,
    "ast.literal_eval": Handlers.literal_eval,
    "torch.multiprocessing.spawn": Handlers.mp_spawn,
    "typing_extensions.cast": Handlers.cast,
    "os.path.join": Handlers.path_join,
    "posixpath.join": Handlers.path_join,
}
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


@functools.lru_cache(maxsize=1)
def _option_names() -> frozenset[str]:
    """The training-argument field names memlint knows (TrainingArguments and the TRL configs): an
    abbreviated `--flag` that is a prefix of one of these as well as of a script field is ambiguous."""
    from memlint.library.defaults import declared_fields

    return frozenset().union(*(declared_fields(c) for c in set(api.training_arguments().values())))


_SUBCLASSED_PARSERS = ("HfArgumentParser", "TrlParser", "ArgumentParser")
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
    "GPTQConfig": Handlers.int4_config,
    "AwqConfig": Handlers.int4_config,
    "HqqConfig": Handlers.int4_config,
    "DataLoader": Handlers.dataloader,
    "Accelerator": Handlers.accelerator,
    "DeepSpeedPlugin": Handlers.plugin,
    "GradientAccumulationPlugin": Handlers.plugin,
    "FullyShardedDataParallelPlugin": Handlers.plugin,
    "ParallelismConfig": Handlers.plugin,
    "autocast": Handlers.autocast,
    "GradScaler": Handlers.scaler,
    "ArgumentParser": Handlers.argparser,
    "HfArgumentParser": Handlers.hfparser,
    "TrlParser": Handlers.hfparser,
    "Fire": Handlers.fire,
    "CLI": Handlers.jsonargparse_cli,
    "auto_cli": Handlers.jsonargparse_cli,
    "partial": Handlers.partial,
    "Namespace": Handlers.namespace,
    "setup_chat_format": Handlers.chat_format,
    "FullyShardedDataParallel": Handlers.parallel_wrap,
    "fully_shard": Handlers.parallel_wrap,
    "MixedPrecision": Handlers.fsdp_mixed_precision,
    "MixedPrecisionPolicy": Handlers.fsdp_mixed_precision,
    "DistributedDataParallel": Handlers.parallel_wrap,
    "CPUOffload": Handlers.offload_policy,
    "CPUOffloadPolicy": Handlers.offload_policy,
    "apply_activation_checkpointing": Handlers.activation_checkpointing,
    "initialize": Handlers.deepspeed_initialize,
    "add_config_arguments": Handlers.deepspeed_arguments,
    "clone_chat_template": Handlers.chat_format,
    "SimpleNamespace": Handlers.namespace,
    "get": Handlers.environ,
    "getenv": Handlers.environ,
    "load_dataset": Handlers.dataset,
    "load_from_disk": Handlers.dataset,
    "is_bfloat16_supported": Handlers.bf16_supported,
    "is_bf16_supported": Handlers.bf16_supported,
    "get_world_size": Handlers.world_size_call,
    "import_module": Handlers.import_module,
    "load": Handlers.data_file,
    "loads": Handlers.data_file,
    "safe_load": Handlers.data_file,
    "full_load": Handlers.data_file,
    "create": Handlers.omegaconf,
    "merge": Handlers.omegaconf,
    "to_container": Handlers.omegaconf,
    "to_object": Handlers.omegaconf,
    "structured": Handlers.omegaconf,
    "Path": Handlers.path_value,
    "PurePath": Handlers.path_value,
    "dirname": Handlers.path_value,
    "basename": Handlers.path_value,
    "abspath": Handlers.path_value,
    "realpath": Handlers.path_value,
    "normpath": Handlers.path_value,
    "expanduser": Handlers.path_value,
}


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


def _steps_an_optimizer(fn: Any) -> bool | None:
    """Does a gradient hook call `<something>.step()`? (PyTorch's "fuse the optimizer step into the
    backward pass" tutorial and torchtune's register_optim_in_bwd_hooks: `optimizer_dict[p].step()`.)
    None when the hook is not the script's own function."""
    import libcst as cst

    from memlint.extract.parsed import children

    node = fn.node if isinstance(fn, Func) else None
    if node is None:
        return None
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "step":
            return True
        stack.extend(children(n))
    return False
