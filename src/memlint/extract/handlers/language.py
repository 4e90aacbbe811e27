"""Python itself and its standard library, as the interpreter's calls meet them: the builtins (getattr,
isinstance, min over an unknown, dict(), vars()), dict / str / list methods, functools.partial,
os.environ.get, os.path and pathlib, argparse.Namespace / types.SimpleNamespace, dataclasses.asdict,
typing.cast, ast.literal_eval, importlib.import_module, `vars(args).update(cfg)`. No library names, but
one: getattr(torch, "bfloat16") reads as the dtype it names.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from memlint.extract import budget
from memlint.extract.interp import BoundStr, SPREAD, _BUILTIN_CALLS
from memlint.extract.objects import (
    Accelerator, Collator, DataLoader, DtypeName, FieldNames, Fields, HfConfig, Model, Namespace, Obj, OpenFile, Optimizer, Partial,
    PeftConfig, QuantConfig, Range, Tokenizer, Trainer, TrainingArgs,
)
from memlint.extract.values import (HOLE, Alts, Class, Const, Dict, ModuleVal, RaisedBy, Ref, Seq, Template, TokenIds, Unknown, flatten,
                                    insert_fits, weakest)
from memlint.extract.handlers.cli import launcher_variable_unset
from memlint.extract.handlers.common import Call, _PASS


_PATH_SAME = {"resolve", "absolute", "expanduser", "__str__", "as_posix", "__fspath__"}  # pathlib methods that name the same file (a path is a string here)


_STR_METHODS = {"split", "rsplit", "lower", "upper", "strip", "replace", "format", "join", "startswith", "endswith", "rstrip", "lstrip"}


_UNKNOWN_WORD = "$__unknown__"  # a part of a spawned command memlint does not know: an unset variable to the launch


def _command_words(cmd: Any, shell: bool) -> list[str] | None:
    """The words of a command a script runs (subprocess's args, os.system's string): a string (split as the shell
    splits it when shell=True or for os.system; the program alone otherwise), a list of strings; an unknown part is a
    word memlint does not know. None when the command itself is not known."""
    from memlint.errors import MemlintError
    from memlint.extract.launch import tokens

    text = cmd.text.replace(HOLE, _UNKNOWN_WORD) if isinstance(cmd, Template) else \
        cmd.value if isinstance(cmd, Const) and isinstance(cmd.value, str) else None
    if text is not None:
        if not shell:
            return [text]
        try:
            return tokens(text)
        except MemlintError:
            return None
    if isinstance(cmd, Seq) and not cmd.grown and cmd.items:
        out = []
        for x in cmd.items:
            if isinstance(x, Const) and isinstance(x.value, (str, int, float)) and not isinstance(x.value, bool):
                out.append(str(x.value))
            elif isinstance(x, Template):
                out.append(x.text.replace(HOLE, _UNKNOWN_WORD))
            else:
                out.append(_UNKNOWN_WORD)
        return out if not out[0].startswith("$") else None
    return None


class LanguageHandlers:
    """The language and the standard library."""

    def spawn(self, c: Call) -> Any:
        """subprocess.run / call / check_call / check_output / Popen and os.system: the command the script runs (a
        launcher written in Python: `subprocess.run(f"torchrun --nproc_per_node {n} {script} {args}", shell=True)`)
        is kept; a script that trains nothing itself is read as the commands it runs (extract_targets)."""
        cmd = c.arg(0, "args") if c.head == "subprocess" else c.arg(0, "command")
        shell = c.head == "os" or (isinstance(c.kwargs.get("shell"), Const) and bool(c.kwargs["shell"].value))
        words = _command_words(cmd, shell)
        if words:
            c.it.facts.spawns.append((tuple(words), c.line))
        return Unknown(f"the result of {c.qual}()")

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
        dflt = c.arg(1, "default")
        if dflt is None and c.qual.endswith((".get", "getenv")) and launcher_variable_unset(c.it.launch, key.value):
            dflt = Const(None, "literal", c.line)  # os.environ.get("LOCAL_RANK") under plain `python`: None
        return self.env_value(c.it, key.value, dflt, c.line)

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

    def path_exists(self, c: Call) -> Any:
        """os.path.isfile / exists of a path that names a file of the checked root where Python resolves it (relative
        to the working directory the command runs in, or absolute): True (the script then reads the config it checked
        for). Anything else (missing, a folder, outside the root, an author's absolute path) stays unknown: the file
        may be made or mounted at run time, and nothing outside the root is looked at."""
        from pathlib import Path

        from memlint.files import is_file

        path = c.arg(0, "path")
        launch = c.it.launch
        here = Path.cwd() / launch.cwd if launch is not None and launch.cwd else Path.cwd()
        if isinstance(path, Const) and isinstance(path.value, str) and path.value \
                and is_file(here / Path(path.value).expanduser()):
            return Const(True, path.source, c.line, (*path.chain, f"{c.qual}({path.value!r}): a file of the checkout"),
                         path.file)
        return Unknown(f"whether {c.qual}() finds the path at run time")

    def namespace(self, c: Call) -> Any:
        """argparse.Namespace(**vars(a), **vars(b), x=1) / types.SimpleNamespace(...)."""
        if c.head not in ("argparse", "types"):
            return _PASS
        kw = {k: v for k, v in c.kwargs.items() if k != SPREAD}
        return Namespace(c.qual, c.line or 0, kw, {}, False, sources=list(c.kwargs.get(SPREAD, [])))

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

    def copied(self, c: Call) -> Any:
        """copy.copy(x) / copy.deepcopy(x): x's value in a new container (a deep copy's nested dicts and lists too), so
        that writes to the copy leave the original as it was."""
        x = c.arg(0, "x")
        return _copy(x, deep=c.name == "deepcopy") if x is not None else Unknown(f"{c.qual}()")

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

    def import_module(self, c: Call) -> Any:
        """importlib.import_module("torch.optim"): the module a literal name names, as `import torch.optim`
        would bind it (verl's build_optimizer: getattr(import_module(impl), name)(params))."""
        if c.qual != "importlib.import_module":
            return _PASS
        name = c.arg(0, "name")
        if isinstance(name, Const) and isinstance(name.value, str) and re.fullmatch(r"[A-Za-z_][\w.]*", name.value):
            return Ref(name.value)
        return Unknown("importlib.import_module() of a name not known statically")

    def spec_from_file(self, c: Call) -> Any:
        """importlib.util.spec_from_file_location(name, path) (a config written as Python, loaded by its path): the
        spec, kept for module_from_spec / SourceFileLoader(name, path).load_module()."""
        if not c.qual.startswith("importlib."):
            return _PASS
        return Obj("importlib.ModuleSpec", c.line or 0, {"name": c.arg(0, "name"), "location": c.arg(1, "location")},
                   {}, False)

    def module_from_spec(self, c: Call) -> Any:
        """importlib.util.module_from_spec(spec) of a spec made from a path of the checkout: that file, read as a module
        of the checkout is (its names when the script uses them; nothing runs): `spec.loader.exec_module(mod)` then
        `mod.config` reads the config file the command names."""
        from memlint.extract.imports import SiblingModule
        from memlint.extract.runtime_config import find

        spec = c.arg(0, "spec")
        if not c.qual.startswith("importlib.") or not (isinstance(spec, Obj) and spec.cls == "importlib.ModuleSpec"):
            return _PASS
        path, name = spec.kwargs.get("location"), spec.kwargs.get("name")
        target = find(c.it, path.value) if isinstance(path, Const) and isinstance(path.value, str) else None
        if target is None or target.suffix != ".py":
            return Unknown("a module loaded from a path memlint cannot read")
        shown = name.value if isinstance(name, Const) and isinstance(name.value, str) else target.stem
        return SiblingModule(shown, None, target, target.stem)

    def load_module(self, it: Any, spec: Obj, line: int | None) -> Any:
        """SourceFileLoader(name, path).load_module(): the module, as module_from_spec reads it."""
        return self.module_from_spec(Call(it, "importlib.util.module_from_spec", [spec], {}, False, line))

    def getmembers(self, c: Call) -> Any:
        """inspect.getmembers(module): the (name, value) pairs of a module of the checkout (llama-recipes picks its
        dataset config class by name: `{k: v for k, v in inspect.getmembers(datasets)}[name]`)."""
        from memlint.extract.imports import SiblingModule

        if c.qual != "inspect.getmembers":
            return _PASS
        m = c.arg(0, "object")
        if isinstance(m, (SiblingModule, ModuleVal)) and len(c.args) + len(c.kwargs) == 1:
            return c.it.module_members(m)
        return Unknown("inspect.getmembers()")

    def path_value(self, c: Call) -> Any:
        """pathlib.Path(a, b) / os.path.dirname(p) / abspath / expanduser / basename: the path as a string."""
        import os
        import posixpath
        from pathlib import PurePosixPath

        vals = [a for a in c.args if isinstance(a, Const) and isinstance(a.value, str)]
        if len(vals) != len(c.args) or not vals:
            return Unknown("a path")
        fn = {"Path": lambda *a: str(PurePosixPath(*a)), "PurePath": lambda *a: str(PurePosixPath(*a)),
              "dirname": posixpath.dirname, "basename": posixpath.basename, "abspath": lambda p: p,
              "realpath": lambda p: p, "normpath": posixpath.normpath, "expanduser": os.path.expanduser,
              "join": lambda *a: posixpath.join(*a)}.get(c.name)
        if fn is None or (c.name in ("dirname", "basename", "abspath", "realpath", "normpath", "expanduser") and len(vals) != 1):
            return Unknown("a path")
        value = fn(*(v.value for v in vals))
        base = next((a for a in vals if a.source != "literal"), vals[0])
        return Const(value, weakest(*(a.source for a in vals)), base.line, base.chain, base.file)

    def module_attribute(self, it: Any, qual: str, attr: str, node: Any) -> Any:
        """math.pi / math.e / math.inf: the constants (then the other handlers' module attributes)."""
        import math

        if qual == "math" and attr in _MATH_CONSTANTS:
            return it.const(getattr(math, attr), node, "constant", (f"math.{attr}",))
        if qual in ("os.path", "os", "posixpath") and attr in _PATH_CONSTANTS:  # os.path.pardir: ".."
            return it.const(_PATH_CONSTANTS[attr], node, "constant", (f"{qual}.{attr}",))
        return super().module_attribute(it, qual, attr, node)

    def math_call(self, c: Call) -> Any:
        """math.ceil / floor / sqrt / log2 / ... of known numbers: the number (`math.ceil(h * math.pi / 64) * 64`)."""
        import math

        nums = [a for a in c.args if isinstance(a, Const) and isinstance(a.value, (int, float)) and not isinstance(a.value, bool)]
        if len(nums) != len(c.args) or not nums or c.kwargs:
            return Unknown(f"the result of {c.qual}()")
        try:
            value = getattr(math, c.name)(*(a.value for a in nums))
        except (ValueError, OverflowError, TypeError):
            return Unknown(f"the result of {c.qual}()")
        base = next((a for a in nums if a.source != "literal"), nums[0])
        shown = ", ".join(repr(a.value) for a in nums)
        return Const(value, weakest(*(a.source for a in nums)), base.line or c.line,
                     base.chain + (f"{c.qual}({shown}) = {value!r}",), base.file)

    def sys_path(self, c: Call) -> Any:
        """sys.path.append(folder) / sys.path.insert(i, folder) with a known folder: the script's imports are
        found there too (a research script that puts its repository's root on the path)."""
        folder = c.arg(1 if c.name == "insert" else 0)
        if isinstance(folder, Const) and isinstance(folder.value, str) and folder.value:
            first = c.name == "insert" and isinstance(c.arg(0), Const) and c.arg(0).value == 0
            c.it.add_import_root(folder.value, first)
        return Const(None, "literal", c.line)

    def builtin(self, it: Any, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        if name in ("set", "frozenset", "list", "tuple", "sorted") and len(args) == 1 and isinstance(args[0], FieldNames):
            return args[0]  # set(inspect.signature(C).parameters): the same names
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
            pairs = _pairs(base)
            if pairs is not None:  # dict(zip(names, parsed)), dict([("a", 1)]): the pairs, keyed by their names
                return Dict({**dict(pairs), **kwargs})
            d = Dict(dict(kwargs))
            if args:
                d.open = True
            return d
        if name == "zip" and any(isinstance(a, TokenIds) for a in args) and not kwargs:
            # zip(sources["input_ids"], targets["input_ids"]): pairs of token lists, how many unknown
            row = [a if isinstance(a, TokenIds) else Unknown("an item of zip()") for a in args]
            return Seq([Seq(row, "tuple")], "list", grown=True)
        if name == "zip" and args and all(isinstance(a, Seq) and not a.grown for a in args) and not kwargs:
            # zip over lists of known length: the tuples, as long as the shortest
            return Seq([Seq(list(row), "tuple") for row in zip(*(a.items for a in args))], "list")
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
            if isinstance(cls, Class):
                return cls
            if isinstance(obj, Obj) and obj.cls.rpartition(".")[2][:1].isupper():
                return Ref(obj.cls)  # type(training_args): the library class it was built from (not a loader's name)
            return Unknown("a type")
        if name == "isinstance" and len(args) > 1:
            kinds = {x.name if isinstance(x, Ref) else x.name if isinstance(x, Class) else None
                     for x in (args[1].items if isinstance(args[1], Seq) else [args[1]])}
            if isinstance(obj, Seq):
                return Const(bool(kinds & {"tuple", "list", "Sequence", "Iterable"}) and
                             (obj.kind in kinds or "Sequence" in kinds or "Iterable" in kinds), "literal", line)
            if isinstance(obj, Dict):
                return Const(bool(kinds & {"dict", "Mapping", "MutableMapping"}), "literal", line)
            if isinstance(obj, Class) and None not in kinds:  # a class object is an instance of type only
                return Const("type" in kinds, "literal", line)
            if isinstance(obj, Const):
                pyname = type(obj.value).__name__
                return Const(pyname in kinds or (pyname == "bool" and "int" in kinds), "literal", line)
            if isinstance(obj, _NOT_BUILTIN) and kinds and kinds <= _BUILTIN_KINDS:
                return Const(False, "literal", line)  # a model, tokenizer or config object is no str / int / list
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
        if isinstance(obj, Class):  # a class of the checkout used as a namespace of settings (llama-recipes' configs)
            return self._class_attr_builtin(it, name, obj, attr, args, line)
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

    @staticmethod
    def _class_attr_builtin(it: Any, name: str, cls: Class, attr: str, args: list, line: int | None) -> Any:
        """hasattr(Cls, name): whether the class or a base of the checkout declares it (unknown when a library base
        may); setattr(Cls, name, v): the class attribute set, as `Cls.name = v` sets it."""
        if name == "hasattr":
            if attr.startswith("__"):
                return Unknown("hasattr of a special attribute")  # __dataclass_fields__, __name__, __dict__
            if cls.class_lookup(attr) is not None:
                return Const(True, "literal", line)
            library_base = any(not isinstance(b, Class) and getattr(b, "qual", "") != "builtins.object"
                               for b in cls.lineage() if b is not cls)
            return Unknown("hasattr of a class with a library base") if library_base else Const(False, "literal", line)
        if name == "setattr" and len(args) > 2:
            it.write(cls.attribute_store(), attr, args[2], cls)
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
                return Unknown("the length of a list grown in a loop") if args[0].grown else \
                    Const(len(args[0].items), "literal", line)
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
        if f.attr == "is_absolute" and not args and not kwargs:  # Path(p).is_absolute() as the Linux machine reads it
            return f.base.with_value(f.base.value.startswith("/"), ".is_absolute()")
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


def _grow(it: Any, seq: Seq, name: str, args: list) -> Any:
    """names.append(x) / extend(xs) / insert(i, x) on a list: the items it gains. In a loop (walked once) or with
    items memlint cannot list, the list is `grown`: its items are what it may hold, its length unknown (a loop
    over it runs its body once over those items, `len()` of it is unknown)."""
    if seq.kind != "list":
        return Unknown(f".{name}() of a {seq.kind}")
    new = args[-1:] if name in ("append", "insert") else None
    if name == "extend" and args:
        src = args[0]
        if isinstance(src, Seq):
            new, seq.grown = list(src.items), seq.grown or src.grown
        elif isinstance(src, Const) and isinstance(src.value, (list, tuple)):
            new = [src.with_value(x) for x in src.value]
    if new is None:
        seq.grown = True
        return Const(None, "literal", None)
    if len(seq.items) + len(new) > budget.MAX_LOOP_ITEMS:
        seq.grown = True
        return Const(None, "literal", None)
    seq.items.extend(new)
    seq.grown |= it.loop_depth > 0
    return Const(None, "literal", None)


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


_NOKEY = object()


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


# the library calls this module answers, by qualified name (handlers/__init__.py merges the tables)
_PATH_CONSTANTS = {"pardir": "..", "curdir": ".", "sep": "/", "extsep": "."}
_MATH_CONSTANTS = ("pi", "e", "tau", "inf")
_MATH_FUNCTIONS = ("ceil", "floor", "trunc", "sqrt", "isqrt", "exp", "log", "log2", "log10", "pow", "gcd", "lcm", "fabs")

_BUILTIN_KINDS = frozenset({"str", "bytes", "int", "float", "bool", "list", "tuple", "dict", "set", "frozenset"})
# objects of library classes that subclass no builtin (a DatasetDict or a ModelOutput is a dict: not listed)
_NOT_BUILTIN = (Model, Tokenizer, TrainingArgs, Optimizer, PeftConfig, QuantConfig, HfConfig, Collator, DataLoader,
                Accelerator, Trainer)


QUALIFIED: dict[str, Callable[[Any, Call], Any]] = {
    **{f"math.{name}": LanguageHandlers.math_call for name in _MATH_FUNCTIONS},
    "typing.cast": LanguageHandlers.cast,
    "copy.copy": LanguageHandlers.copied,
    "copy.deepcopy": LanguageHandlers.copied,
    "sys.path.append": LanguageHandlers.sys_path,
    "sys.path.insert": LanguageHandlers.sys_path,
    "dataclasses.asdict": LanguageHandlers.asdict,
    "ast.literal_eval": LanguageHandlers.literal_eval,
    "typing_extensions.cast": LanguageHandlers.cast,
    "os.path.join": LanguageHandlers.path_join,
    "posixpath.join": LanguageHandlers.path_join,
    "os.path.isfile": LanguageHandlers.path_exists,
    "os.path.exists": LanguageHandlers.path_exists,
    **{f"subprocess.{name}": LanguageHandlers.spawn for name in ("run", "call", "check_call", "check_output", "Popen")},
    "os.system": LanguageHandlers.spawn,
}


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "partial": LanguageHandlers.partial,
    "Namespace": LanguageHandlers.namespace,
    "SimpleNamespace": LanguageHandlers.namespace,
    "get": LanguageHandlers.environ,
    "getenv": LanguageHandlers.environ,
    "import_module": LanguageHandlers.import_module,
    "spec_from_file_location": LanguageHandlers.spec_from_file,
    "SourceFileLoader": LanguageHandlers.spec_from_file,
    "module_from_spec": LanguageHandlers.module_from_spec,
    "getmembers": LanguageHandlers.getmembers,
    "Path": LanguageHandlers.path_value,
    "PurePath": LanguageHandlers.path_value,
    "dirname": LanguageHandlers.path_value,
    "basename": LanguageHandlers.path_value,
    "abspath": LanguageHandlers.path_value,
    "realpath": LanguageHandlers.path_value,
    "normpath": LanguageHandlers.path_value,
    "expanduser": LanguageHandlers.path_value,
}


def _copy(x: Any, deep: bool, depth: int = 0) -> Any:
    """A copy of a dict or list value (its items copied too when `deep`, to a few levels); other values as they are."""
    inner = (lambda v: _copy(v, deep, depth + 1)) if deep and depth < 8 else (lambda v: v)
    if isinstance(x, Dict):
        return Dict({k: inner(v) for k, v in x.items.items()}, x.open)
    if isinstance(x, Seq):
        return Seq([inner(v) for v in x.items], x.kind, x.grown)
    return x


def _pairs(v: Any) -> list | None:
    """The (key, value) pairs of a known list of 2-tuples whose keys are constants, or None."""
    if not isinstance(v, Seq) or v.grown:
        return None
    out = []
    for row in v.items:
        if not (isinstance(row, Seq) and len(row.items) == 2 and isinstance(row.items[0], Const)
                and _hashable(row.items[0].value)):
            return None
        out.append((row.items[0].value, row.items[1]))
    return out
