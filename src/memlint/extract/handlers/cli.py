"""The launch command as the script's parsers read it: argparse (add_argument, parse_args, jsonargparse's
ActionConfigFile), HfArgumentParser and TrlParser over dataclasses (the command's words, a JSON/YAML
file, `--config recipe.yaml`), the values a command gives (`cli_const`), sys.argv and the launch
environment (os.environ, the WORLD_SIZE a launcher sets).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from memlint.extract.objects import ArgNamespace, ArgParser, ArgSpec, DataclassInstance, HfParser, Obj, TrainingArgs
from memlint.extract.values import Alts, Class, Const, Dict, Func, Ref, Seq, Unknown, flatten
from memlint.library import api
from memlint.extract.handlers.common import Call, _last, class_fields, library_base


class CliHandlers:
    """Command-line parsers and the launch command."""

    def argparser(self, c: Call) -> Any:
        return ArgParser(c.qual, c.line)

    def hfparser(self, c: Call) -> Any:
        classes = c.arg(0, "dataclass_types")
        return HfParser(c.qual, c.line, classes=classes.items if isinstance(classes, Seq) else [classes])

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
        if name == "add_subparsers":  # a holder whose add_parser() makes each subcommand's parser
            dest = kwargs.get("dest")
            p.sub_dest = dest.value if isinstance(dest, Const) and isinstance(dest.value, str) else None
            return ArgParser(f"{p.cls}.subparsers", line or 0, subs=p.subs, sub_dest=p.sub_dest,
                             sub_class=kwargs.get("parser_class"))
        if name == "add_parser" and p.cls.endswith(".subparsers"):
            sub = ArgParser(p.cls.removesuffix(".subparsers"), line or 0)
            made: Any = sub
            if isinstance(p.sub_class, Ref) and p.sub_class.name in _DATACLASS_PARSERS:
                # add_subparsers(parser_class=TrlParser): add_parser("train", dataclass_types=[...]) is one of those
                made = self.hfparser(Call(it, p.sub_class.qual, [], kwargs, False, line))
                made.own = sub
            cmd = args[0] if args else kwargs.get("name")
            if isinstance(cmd, Const) and isinstance(cmd.value, str):
                p.subs[cmd.value] = sub
            return made
        if name == "set_defaults":
            for k, v in kwargs.items():
                # a default with no add_argument (`set_defaults(func=train)`) takes no word of the command line
                spec = table.get(k) or ArgSpec({_DEFAULT_ONLY: Const(True, "literal", line)}, line, k)
                table[k] = ArgSpec({**spec.kwargs, "default": v}, line, spec.flag, spec.file, spec.flags)
            return Const(None, "literal", line)
        if name in ("parse_args", "parse_known_args", "parse_intermixed_args"):
            given = bool(args) and not (isinstance(args[0], Const) and args[0].value is None)
            words = self.argv_words(it, args[0]) if given else None
            if p.subs:
                p = self.with_subcommand(it, p, words)
            ns = ArgNamespace(p.cls, line or 0, parser=p, given=given and words is None)
            rest: list = []
            if (not given or words is not None) and it.launch is not None:
                ns.cli = self.argparse_cli(it, p, words, rest)
            if not ns.given:
                self.typed_defaults(it, ns)
            if name != "parse_known_args":
                return ns
            extras = Seq([self.cli_const(it, w, f"an argument parse_known_args() leaves: {w!r}") for w in rest]) \
                if (not given or words is not None) and it.launch is not None else Unknown("remaining arguments")
            return Seq([ns, extras], "tuple")
        return Unknown(f"parser.{name}()")

    @staticmethod
    def with_subcommand(it: Any, p: ArgParser, words: tuple[str, ...] | None) -> ArgParser:
        """A parser with subcommands (add_subparsers / add_parser) as parse_args() reads it: the command's first word
        that names a subcommand picks that subcommand's arguments beside the parser's own, its name the value of
        add_subparsers' dest; with no command (or none named), every subcommand's arguments, the name unknown."""
        argv = list(words if words is not None else (it.launch.argv if it.launch is not None else ()))
        chosen = next((w for w in argv if not w.startswith("-") and w in p.subs), None) if it.launch is not None else None
        merged = ArgParser(p.cls, p.line, args=dict(p.args), order=list(p.order))
        for name, sub in ([(chosen, p.subs[chosen])] if chosen else list(p.subs.items())):
            for dest, spec in sub.args.items():
                merged.args.setdefault(dest, spec)
        if p.sub_dest:
            value = Const(chosen, "command-line", it.launch.line if it.launch is not None else None, (
                f"the subcommand {chosen!r}",)) if chosen else Unknown("the subcommand the command names")
            merged.args[p.sub_dest] = ArgSpec({"default": value}, p.line, p.sub_dest, it.cur_file())
        return merged

    @staticmethod
    def typed_defaults(it: Any, ns: ArgNamespace) -> None:
        """A string default goes through the argument's own type= function, as argparse parses it (`default="false",
        type=lambda x: _parse_bool_arg(x)` is False): the converted defaults become the namespace's attributes."""
        for dest, spec in ns.parser.args.items():
            conv, dflt = spec.kwargs.get("type"), spec.kwargs.get("default")
            if dest in ns.cli or not isinstance(conv, Func) or not (isinstance(dflt, Const) and isinstance(dflt.value, str)):
                continue
            how = f"add_argument({spec.flag!r}, …) (line {spec.line})"
            got = it.call_function(conv, [dflt.via("argparse-default", how, spec.line, spec.file)], {}, None)
            if isinstance(got, Const):
                ns.attrs[dest] = got

    @staticmethod
    def argv_words(it: Any, given: Any) -> tuple[str, ...] | None:
        """The words of a list handed to parse_args() that is the command line itself (`parse_args(sys.argv[1:])`,
        `a = sys.argv; a.pop(0); parse_args(a)`: every item a command-line word, the script's own name left out);
        None for any other list (the script parses words of its own)."""
        if it.launch is None or not isinstance(given, Seq) or not all(
                isinstance(x, Const) and x.source == "command-line" and isinstance(x.value, str) for x in given.items):
            return None
        words = [x.value for x in given.items]
        argv = list(it.launch.argv)
        if words and words[0] == (it.launch.script or it.launch.module or "script") and words[1:] == argv:
            words = words[1:]  # sys.argv whole, its first word popped at run time (a list's pop is not followed)
        return tuple(words) if words == argv[len(argv) - len(words):] else None

    def argparse_cli(self, it: Any, p: ArgParser, words: tuple[str, ...] | None = None, rest: list | None = None) -> dict:
        """dest -> the value the launch command's words (or `words`, the part of them parse_args() is given) give
        it, as argparse would parse them."""
        from memlint.extract.cli_args import Option, match_argparse

        options = []
        for dest, spec in p.args.items():
            kw = spec.kwargs
            if _DEFAULT_ONLY in kw:
                continue
            action = kw.get("action")
            act = action.value if isinstance(action, Const) and isinstance(action.value, str) else "store"
            if isinstance(action, Ref) and action.name == "BooleanOptionalAction":
                act = "boolean_optional"
            nargs = kw.get("nargs")
            const = kw.get("const")
            options.append(Option(dest, spec.flags, act.replace("-", "_"), nargs.value if isinstance(nargs, Const) else None,
                                  const.value if isinstance(const, Const) else (True if act == "store_const" else None)))
        matched = match_argparse(options, it.launch.argv if words is None else words)
        if rest is not None:
            rest.extend(matched.rest)
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

        data = runtime_config.read(it, CliHandlers.cli_const(it, ref, how), "jsonargparse ActionConfigFile")
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

        own = p.user_class.lookup(name) if isinstance(p.user_class, Class) and not name.startswith("parse_") else None
        if own is not None and own[0] == "method" and isinstance(own[1], Func):
            # a method the checkout's subclass adds (H4ArgumentParser.parse(): the YAML named first, then the flags):
            # it runs, its calls of the library's parse_* methods read as the library's
            return it.call_function(own[1], [p, *args], dict(kwargs), line)
        if name == "set_defaults":
            # a plain value: a dataclass field's new default (argparse's default of that option); a function or parser
            # (`set_defaults(handler=train, parser=p)`), or a key of an argument added to it: one of its own
            own = set(p.own.args) if p.own is not None else set()
            p.defaults.update({k: v for k, v in kwargs.items() if isinstance(v, Const) and k not in own})
            kwargs = {k: v for k, v in kwargs.items() if not (isinstance(v, Const) and k not in own)}
            if not kwargs:
                return Const(None, "literal", line)
        if name in ("add_argument", "set_defaults", "add_argument_group", "add_mutually_exclusive_group"):
            # its own arguments beside the dataclasses' (an argparse table; parsed into one more namespace)
            if p.own is None:
                p.own = ArgParser(p.cls, line or 0)
            return self.argparse_method(it, p.own, name, args, kwargs, line)

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
            for o, fields in self._declared(objs) if p.defaults else ():  # set_defaults(field=v), under file and command
                # (TrainingArguments' fields are many, memlint knows some: a plain key goes to it)
                o.kwargs.update({k: v for k, v in p.defaults.items() if (k in fields or isinstance(o, TrainingArgs))
                                 and k not in o.kwargs and k not in getattr(o, "cli", {})})
            for o in objs:  # the parser builds each dataclass with cls(**values): its __post_init__ runs
                post = o.user_class.lookup("__post_init__") if isinstance(o, DataclassInstance) and o.user_class else None
                if post is not None and post[0] == "method" and isinstance(post[1], Func):
                    it.call_function(post[1], [o], {}, line)  # `if self.use_qlora: self.use_lora = True`
            if p.own is not None and p.own.args and not from_file:  # the namespace of its own arguments, after them
                out.append(self.own_namespace(it, p.own, line))
            # HfArgumentParser.parse_args_into_dataclasses and TrlParser.parse_args_and_config
            # both take (args, return_remaining_strings, ...) and then append the leftovers.
            rest = kwargs.get("return_remaining_strings", args[1] if len(args) > 1 else None)
            if name in ("parse_args_into_dataclasses", "parse_args_and_config") and isinstance(rest, Const) and rest.value:
                out.append(Unknown("remaining strings"))
            return Seq(out, "tuple")
        return Unknown(f"parser.{name}()")

    def own_namespace(self, it: Any, own: ArgParser, line: int | None) -> ArgNamespace:
        """The namespace HfArgumentParser appends after the dataclasses for the arguments added to it with
        add_argument / set_defaults: argparse's reading of the command's words over those."""
        ns = ArgNamespace(own.cls, line or 0, parser=own, given=False)
        if it.launch is not None:
            ns.cli = self.argparse_cli(it, own, None, [])
        self.typed_defaults(it, ns)
        return ns

    @staticmethod
    def _declared(objs: list) -> list[tuple[Obj, dict]]:
        """Each dataclass instance with the fields its class (and user-class bases) declares."""
        declared: list[tuple[Obj, dict]] = []
        for o in objs:
            fields = class_fields(o.user_class)
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
            # and each rank's own index: the plan is a rank's, rank 0's (`ddp = int(os.environ.get("RANK", -1)) != -1`)
            env.setdefault("RANK", "0")
            env.setdefault("LOCAL_RANK", "0")
        if name in env:
            return self.cli_const(it, env[name], f"{name}={env[name]}")
        if isinstance(dflt, Const):
            how = f"os.environ.get({name!r}, {dflt.value!r}): {name} unset, its default"
            return Const(dflt.value, "environment-default", dflt.line or line, dflt.chain + (how,), dflt.file)
        it.facts.note(f"a value comes from the environment variable {name}; memlint treats it as unknown")
        return Unknown(f"environment variable {name}")

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


_DEFAULT_ONLY = "<set_defaults>"  # an ArgSpec key: the dest has a set_defaults() value and no add_argument


@functools.lru_cache(maxsize=1)
def _option_names() -> frozenset[str]:
    """The training-argument field names memlint knows (TrainingArguments and the TRL configs): an
    abbreviated `--flag` that is a prefix of one of these as well as of a script field is ambiguous."""
    from memlint.library.defaults import declared_fields

    return frozenset().union(*(declared_fields(c) for c in set(api.training_arguments().values())))


# set by torchrun / accelerate / deepspeed for each process, never by a plain `python` run
_LAUNCHER_VARIABLES = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"})


def launcher_variable_unset(launch: Any, name: str) -> bool:
    """Whether `name` is a variable only a distributed launcher sets and the launch is plain `python` (unset then)."""
    return launch is not None and launch.launcher == "python" and name in _LAUNCHER_VARIABLES
_SUBCLASSED_PARSERS = ("HfArgumentParser", "TrlParser", "ArgumentParser")
_DATACLASS_PARSERS = ("HfArgumentParser", "TrlParser")


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "ArgumentParser": CliHandlers.argparser,
    "HfArgumentParser": CliHandlers.hfparser,
    "TrlParser": CliHandlers.hfparser,
}
