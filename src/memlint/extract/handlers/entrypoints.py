"""Entry points a library calls with the command's words: click and typer commands, fastcore's
@call_parse, @hydra.main, fire.Fire, tyro.cli and jsonargparse's CLI / auto_cli, each filling the
function's parameters (or a dataclass's fields) the way that library parses them.
"""

from __future__ import annotations

from pathlib import Path
import re
from typing import Any, Callable

from memlint.extract.interp import BoundUnknown
from memlint.extract.objects import Obj, TrainingArgs
from memlint.extract.values import Alts, Class, Const, DeviceCount, Dict, Func, Ref, Seq, Unknown, flatten
from memlint.extract.handlers.common import Call, _PASS, _last, class_fields


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


def _subcommand_words(name: str, argv: list[str]) -> list[str]:
    """The words a click command sees: those after its own name when the command line names it as a group's
    subcommand (click names a command after its function, `_` as `-`, 8.2 dropping a _command/_cmd suffix)."""
    short = re.sub(r"_(command|cmd|group|grp)$", "", name)
    names = {name, name.replace("_", "-"), short, short.replace("_", "-")}
    for i, w in enumerate(argv):
        if w in names:
            return argv[i + 1:]
    return argv


def _click_action(it: Any, kw: dict, env: Any, names: list) -> tuple[str, Any]:
    """How a click option or argument takes the command's words, in argparse's terms: a flag (`is_flag=True`,
    `"--x/--no-x"`, `flag_value=`), a counter (`count=True`), a repeated option (`multiple=True`); `nargs=-1` takes
    every remaining word."""
    def on(key: str) -> bool:
        v = it.ev(kw[key], env) if key in kw else None
        return isinstance(v, Const) and bool(v.value)

    nargs = it.ev(kw["nargs"], env) if "nargs" in kw else None
    nargs = {-1: "*", 1: None}.get(nargs.value, nargs.value) if isinstance(nargs, Const) and isinstance(nargs.value, int) else None
    if on("is_flag") or "flag_value" in kw or any("/" in n for n in names if n.startswith("-")):
        return "store_true", None
    return ("count" if on("count") else "append" if on("multiple") else "store"), nargs


class EntryPointHandlers:
    """Decorated and wrapped entry points (click, typer, fastcore, hydra, fire, tyro, jsonargparse), and functions a
    cloud app runs remotely (Modal's @app.function(gpu=...))."""

    @staticmethod
    def cloud_function(it: Any, f: Func, deco: Any, env: Any) -> None:
        """`@app.function(gpu="H100:2")` on a Modal app: the function runs in a container with that many GPUs of that
        kind; the count is the run's GPUs when it trains there (one process spreading over them, or a launcher it
        starts whose own count says more)."""
        kw = {a.keyword.value: a.value for a in deco.args if a.keyword is not None}
        if "gpu" not in kw:
            return
        got = _gpu_request(it.ev(kw["gpu"], env))
        line = it.line_of(deco)
        if got is None:
            f.gpus = DeviceCount(f"@{it.code(deco.func)}(gpu=...) (line {line}): a GPU request memlint does not read", line)
            return
        count, kind = got
        f.gpus = Const(count, "literal", line, (f"@{it.code(deco.func)}(gpu={it.code(kw['gpu'])}) (line {line}): the "
                                                f"function runs on {count} × {kind}",), it.cur_file())

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
        if isinstance(deco.func, cst.Attribute) and deco.func.attr.value in ("function", "cls"):
            owner = it.ev(deco.func.value, env)
            if isinstance(owner, Obj) and owner.cls in _CLOUD_APPS:  # @app.function(gpu="H100:2"): where f runs
                self.cloud_function(it, f, deco, env)
                return None
        if _is_typer_command(callee):
            f.typer = True
            return None
        if not isinstance(callee, Ref):
            return None
        name = _last(callee.qual)
        if callee.qual == "hydra.main":
            return self.hydra_main(it, f, deco, env)
        if callee.qual in _DATACLASS_WRAPS:
            return self.dataclass_wrap(it, f, deco, env)
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
            f.click.append((param, tuple(n.split("/")[0] for n in names if n.startswith("-")),
                            *_click_action(it, kw, env, names), _last(typ.qual) if isinstance(typ, Ref) else None))
        return None

    def click_arguments(self, it: Any, f: Func) -> dict:
        """What click passes a @click.command function: each option's default, or the command's value."""
        from memlint.extract.cli_args import Option, literal, match_argparse, str_to_bool

        # an argument (no flags) takes the command's bare words in declaration order, as click's parser does; a
        # subcommand of a group (`cli.py finetune MODEL`) takes the words after its own name
        options = [Option(p, flags, action, nargs) for p, flags, action, nargs, _ in f.click]
        words = _subcommand_words(f.node.name.value, list(it.launch.argv)) if it.launch is not None else None
        matched = match_argparse(options, words, allow_abbrev=False) if words is not None else None
        out = {}
        for param, _flags, _action, _nargs, typ in f.click:
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
        """@hydra.main(config_path=, config_name=): the entry's first parameter is the composed config (composed again
        when the script registers an OmegaConf resolver after the decorator ran)."""
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
        entry = (f, params[0].name.value, here, vals, it.line_of(deco), it.cur_file())
        it.hydra_entries.append(entry)
        EntryPointHandlers._compose_hydra(it, entry)
        return None

    @staticmethod
    def _compose_hydra(it: Any, entry: tuple) -> None:
        from memlint.extract.hydra import hydra_config

        f, param, here, vals, line, file = entry
        value, notes = hydra_config(here, vals["config_path"], vals["config_name"], it.launch,
                                    lambda name, args, how: _call_resolver(it, name, args, how, line))
        for n in notes:
            it.facts.note(n)
        if not isinstance(value, Unknown):
            it.facts.note(f"the Hydra config {vals['config_path']}/{vals['config_name']} composed as @hydra.main would "
                          "(defaults list, overrides, interpolations)")
        f.defaults[param] = value
        f.default_source[param] = ("literal", f"@hydra.main(config_name={vals['config_name']!r})", line, file)

    def dataclass_wrap(self, it: Any, f: Func, deco: Any, env: Any) -> None:
        """`@draccus.wrap()` / `@pyrallis.wrap()` on `def main(cfg: Config)`: the function runs with cfg the dataclass
        built from its field defaults with the command's `--field value` (and `--nested.field value`) words over them,
        as tyro.cli builds it; the script calls `main()` with no argument."""
        params = _params(f)
        if not params or params[0].annotation is None:
            return None
        cls = it.ev(params[0].annotation.annotation, env)
        if not isinstance(cls, Class):
            return None
        line = it.line_of(deco)
        inst = self.construct_user(Call(it, cls.name, [], {}, False, line), cls)
        if isinstance(inst, Obj):
            self.apply_field_words(it, inst, cls)
            name = params[0].name.value
            f.defaults[name] = inst
            f.default_source[name] = ("literal", f"@{it.code(deco.func)}() builds {cls.name} from the command line",
                                      line, it.cur_file())
        return None

    def hydra_initialize(self, c: Call) -> Any:
        """hydra's initialize(config_path=...) (relative to the calling module) / initialize_config_dir(config_dir=...)
        (absolute): where a later compose() finds its configs."""
        if c.head != "hydra":
            return _PASS
        key = "config_dir" if c.name == "initialize_config_dir" else "config_path"
        where = c.arg(0, key)
        if isinstance(where, Const) and isinstance(where.value, str):
            here = c.it.mod.path.parent if c.it.mod is not None else c.it.dir
            c.it.config_dir = (str(here / where.value) if key == "config_path" else where.value,
                               f"{c.name}({key}={where.value!r}) (line {c.line})")
        else:
            c.it.config_dir = None
        return Const(None, "literal", c.line)

    def hydra_compose(self, c: Call) -> Any:
        """hydra's compose(config_name=..., overrides=[...]) inside initialize*(): the config composed as Hydra would
        (defaults list, the overrides, interpolations), from the folder initialize() named."""
        from memlint.extract.hydra import hydra_config
        from memlint.extract.launch import Launch

        if c.head != "hydra":
            return _PASS
        name, overrides = c.arg(0, "config_name"), c.arg(1, "overrides")
        if c.it.config_dir is None or not (isinstance(name, Const) and isinstance(name.value, str)):
            return Unknown("hydra compose() without a config folder and name memlint can read")
        words = [x.value for x in overrides.items if isinstance(x, Const) and isinstance(x.value, str)] \
            if isinstance(overrides, Seq) else []
        folder, how = c.it.config_dir
        value, notes = hydra_config(Path.cwd(), folder, name.value, Launch(tuple(words)),
                                    lambda n, args, w: _call_resolver(c.it, n, args, w, c.line))
        for n in notes:
            c.it.facts.note(n)
        if not isinstance(value, Unknown):
            c.it.facts.note(f"the Hydra config {name.value} composed from {how} as compose() would (defaults list, "
                            "overrides, interpolations)")
        return value

    def register_resolver(self, c: Call) -> Any:
        """OmegaConf.register_new_resolver(name, fn): `${name:args}` in a config calls fn (evaluated when the config
        is composed, on known arguments); a Hydra entry composed before the registration is composed again."""
        if c.owner != "OmegaConf" and c.head not in ("omegaconf", "OmegaConf"):
            return _PASS
        name, fn = c.arg(0, "name"), c.arg(1, "resolver")
        if isinstance(name, Const) and isinstance(name.value, str) and fn is not None:
            c.it.resolvers[name.value] = fn
            for entry in list(c.it.hydra_entries):
                self._compose_hydra(c.it, entry)
        return Const(None, "literal", c.line)

    def hydra_instantiate(self, c: Call) -> Any:
        """hydra.utils.instantiate(cfg, *args, **kwargs) / hydra.utils.call: the callable `cfg._target_` names (a
        library class or function, or one of the checkout's), called with the config's other keys as keyword
        arguments (the call's own keywords over them, `_args_` positional); a nested config with a `_target_` is
        built first (`_recursive_: false` keeps it a config); `_partial_: true` gives a functools.partial."""
        if c.head != "hydra":
            return _PASS
        out = None
        for cfg in flatten(c.arg(0, "config")):
            r = self._instantiate(c.it, cfg, list(c.args[1:]), {k: v for k, v in c.kwargs.items() if k != "config"},
                                  c.line, 0)
            out = r if out is None else Alts((out, r)) if r is not out else out
        return out if out is not None else Unknown("hydra.utils.instantiate()")

    def _instantiate(self, it: Any, cfg: Any, args: list, kwargs: dict, line: int | None, depth: int) -> Any:
        if not isinstance(cfg, Dict):
            return Unknown("hydra.utils.instantiate of a config memlint cannot read")
        target = cfg.items.get("_target_")
        if not (isinstance(target, Const) and isinstance(target.value, str)) or depth > 8:
            return Unknown("hydra.utils.instantiate of a config without a known _target_")
        recursive = cfg.items.get("_recursive_")
        recursive = not (isinstance(recursive, Const) and recursive.value is False)
        given = cfg.items.get("_args_")
        pos = [*(given.items if isinstance(given, Seq) else []), *args]
        kw: dict = {}
        for k, v in cfg.items.items():
            if isinstance(k, str) and k.startswith("_") and k.endswith("_"):
                continue
            kw[k] = self._instantiate_nested(it, v, line, depth) if recursive else v
        kw.update(kwargs)
        fn = _hydra_target(it, target.value)
        partial = cfg.items.get("_partial_")
        if isinstance(partial, Const) and partial.value is True:
            from memlint.extract.objects import Partial

            return Partial("functools.partial", line or 0, kw, {}, False, func=fn, args=pos)
        if isinstance(fn, Func):
            return it.call_function(fn, pos, kw, line)
        if isinstance(fn, (Ref, Class)):
            return it.handlers.call(it, fn, pos, kw, False, line, None)
        return fn if isinstance(fn, Unknown) else Unknown(f"{target.value}(...) (hydra.utils.instantiate)")

    def _instantiate_nested(self, it: Any, v: Any, line: int | None, depth: int) -> Any:
        if isinstance(v, Dict) and isinstance(v.items.get("_target_"), Const):
            return self._instantiate(it, v, [], {}, line, depth + 1)
        if isinstance(v, Seq) and any(isinstance(x, Dict) and "_target_" in x.items for x in v.items):
            return Seq([self._instantiate_nested(it, x, line, depth) for x in v.items], v.kind)
        return v

    def hydra_get_class(self, c: Call) -> Any:
        """hydra.utils.get_class / get_method / get_object(path): what the dotted path names."""
        if c.head != "hydra":
            return _PASS
        path = c.arg(0, "path")
        if isinstance(path, Const) and isinstance(path.value, str):
            return _hydra_target(c.it, path.value)
        return Unknown(f"{c.qual}() of a path memlint cannot read")

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
        from memlint.extract.cli_args import fire_literal, match_fields

        p = f.node.params
        names = [q.name.value for q in [*p.posonly_params, *p.params, *p.kwonly_params]]
        bools = {n for n, d in f.defaults.items() if isinstance(d, Const) and isinstance(d.value, bool)}
        matched = match_fields(it.launch.argv, names, bools, accept_any=p.star_kwarg is not None)
        kwargs = {k: self.cli_const(it, fire_literal(v) if isinstance(v, str) else v, f"{matched.flags[k]} {v!r}")
                  for k, v in matched.values.items() if not isinstance(v, list)}
        args = [self.cli_const(it, fire_literal(w), f"positional {w!r}") for w in matched.rest if not w.startswith("-")]
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
        fields = class_fields(cls)
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


def _hydra_target(it: Any, dotted: str) -> Any:
    """What a `_target_` names: a class or function of the checkout (the longest dotted prefix that is a module of
    it, then attributes), else the library name as a Ref."""
    from memlint.extract.imports import SiblingModule

    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        mod = ".".join(parts[:i])
        target = it.checkout_module(mod, 0)
        if target is None:
            continue
        v: Any = SiblingModule(parts[i - 1], None, target, mod)
        for attr in parts[i:]:
            if isinstance(v, SiblingModule):
                v = it.module_attribute(v, attr)
            elif isinstance(v, Obj):
                v = it.handlers.getattr(it, v, attr, None)
            elif isinstance(v, Class):  # `_target_: pkg.mod.Config.from_name`: a class's own method or attribute
                hit = v.lookup(attr)
                v = hit[1] if hit is not None else Unknown(f"{v.name}.{attr}")
            elif not isinstance(v, Unknown):
                v = Unknown(f"{dotted}: {attr} of a value memlint does not follow")
        return v
    return Ref(dotted)


def _call_resolver(it: Any, name: str, args: list, how: str, line: int | None) -> Any:
    """The value a resolver the script registered gives for known arguments: a lambda or function of the script
    (walked), `eval` of arithmetic, a library function (torch.cuda.device_count: the launch's GPUs, or
    DeviceCount); None when `name` is not registered or the answer is not a plain value."""
    from memlint.extract.hydra import arithmetic
    from memlint.extract.values import DeviceCount

    fn = it.resolvers.get(name)
    if fn is None:
        return None
    consts = [Const(a, "literal", line, (how,)) for a in args]
    got: Any = None
    for f in flatten(fn):
        if isinstance(f, Func):
            r = it.call_function(f, consts, {}, line)
        elif isinstance(f, Ref) and f.qual == "builtins.eval":
            v = arithmetic(args[0]) if len(args) == 1 and isinstance(args[0], str) else None
            r = Const(v, "literal", line) if v is not None else Unknown(f"{how}: eval of more than arithmetic")
        elif isinstance(f, Ref) and not f.qual.startswith("builtins."):
            r = it.handlers.call(it, f, consts, {}, False, line, None)
        else:
            r = Unknown(f"{how}: a resolver memlint does not evaluate")
        if got is not None and not (isinstance(r, Const) and isinstance(got, Const) and r.value == got.value):
            return Unknown(f"{how}: the resolver's value differs by branch")
        got = r
    if isinstance(got, Const) and isinstance(got.value, (int, float, str, bool)) or \
            isinstance(got, Const) and got.value is None:
        return got.value
    if isinstance(got, DeviceCount):
        return got
    return got if isinstance(got, Unknown) else Unknown(f"{how}: a value memlint cannot read")


_DATACLASS_WRAPS = ("draccus.wrap", "pyrallis.wrap")  # @wrap() main(cfg: Config): the config from the command line
_CLOUD_APPS = ("modal.App", "modal.Stub")
_MODAL_GPUS = ("T4", "L4", "A10G", "A100", "L40S", "H100", "H200", "B200", "Any")  # modal.gpu.X classes (before 0.73)


def _cloud_object(self: Any, c: Call) -> Any:
    """modal.App() / modal.Stub() (an app whose decorated functions run remotely on the GPUs they ask for) and
    modal.gpu.A100(count=2, size="80GB") (a GPU request): kept with their keywords."""
    return Obj(c.qual, c.line or 0, dict(c.kwargs), {}, c.open)


def _gpu_request(spec: Any) -> tuple[int, str] | None:
    """(count, kind) of a Modal `gpu=` request: "H100", "a100-80gb:4", ["H100", "A100"] (the first choice),
    modal.gpu.H100(count=8); None for anything else."""
    if isinstance(spec, Seq) and spec.items:
        return _gpu_request(spec.items[0])
    if isinstance(spec, Const) and isinstance(spec.value, str) and spec.value.strip():
        kind, _, n = spec.value.strip().partition(":")
        return (int(n), kind) if n.isdigit() and int(n) > 0 else (1, kind) if not n else None
    if isinstance(spec, Obj) and spec.cls.startswith("modal.gpu."):
        n = spec.get("count")
        count = n.value if isinstance(n, Const) and isinstance(n.value, int) and n.value > 0 else 1 if n is None else None
        return (count, spec.cls.rsplit(".", 1)[-1]) if count else None
    return None


# the library calls this module answers, by qualified name (handlers/__init__.py merges the tables)
QUALIFIED: dict[str, Callable[[Any, Call], Any]] = {
    "hydra.initialize": EntryPointHandlers.hydra_initialize,
    "hydra.initialize_config_dir": EntryPointHandlers.hydra_initialize,
    "hydra.compose": EntryPointHandlers.hydra_compose,
    **{name: _cloud_object for name in (*_CLOUD_APPS, *(f"modal.gpu.{g}" for g in _MODAL_GPUS))},
    "tyro.cli": EntryPointHandlers.tyro_cli,
    "hydra.utils.call": EntryPointHandlers.hydra_instantiate,
}


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "register_new_resolver": EntryPointHandlers.register_resolver,
    "register_resolver": EntryPointHandlers.register_resolver,
    "instantiate": EntryPointHandlers.hydra_instantiate,
    "get_class": EntryPointHandlers.hydra_get_class,
    "get_method": EntryPointHandlers.hydra_get_class,
    "get_object": EntryPointHandlers.hydra_get_class,
    "Fire": EntryPointHandlers.fire,
    "CLI": EntryPointHandlers.jsonargparse_cli,
    "auto_cli": EntryPointHandlers.jsonargparse_cli,
}
