"""The modules of a script's checkout, read as the script uses them (issue #26: walks that scale).

`from .utils import collate` binds `collate` to a Lazy: utils is read when the name is first used, never when
it is only imported, and then only the statements that name needs (extract/slicing.py), parsed from those
lines alone; a function's body, when the function runs. A module needed for more names later runs only what
those need besides, in the same scope. `import utils` reads utils for each attribute used of it; `from .x
import *` (a package's __init__ re-exporting its submodules) reads x for a name when one nothing else binds is
used; transformers' lazy packages (an `_import_structure` table, TYPE_CHECKING imports) read the one
submodule a name is in. A class's base from such a module is read when the class's bases are looked at.

So a named script of a repository that vendors a library reads the few of its modules the training path
uses, where it had run every module `from .utils import x` reached (a package's __init__ importing
everything) until its time budget ended the file. `Imports` is the Interpreter's part that does this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import CodePosition, CodeRange

from memlint.extract import slicing
from memlint.extract.parsed import ParserSyntaxError
from memlint.extract.values import Class, Const, Dict, Func, Ref, Seq, Unknown, to_python
from memlint.files import max_file_size, read_text

# Env, Module and Interpreter are extract/interp/'s (which imports this module): named in comments, typed Any here.
MAX_SIBLINGS = 48           # modules of the checkout walked per script (imports followed)
MAX_SIBLING_BYTES = 300_000


class Lazy:
    """A name `from m import name` binds to a module of the checkout: the module is read (in part,
    extract/slicing.py) when the name is first used, never when it is only imported. Resolved once;
    every scope that holds it (a branch's copy, a star import's) sees the same value."""

    __slots__ = ("it", "target", "dotted", "name", "level", "origin", "value")

    def __init__(self, it: Any, target: Path, dotted: str, name: str, level: int, origin: Path) -> None:
        self.it, self.target, self.dotted, self.name, self.level, self.origin = it, target, dotted, name, level, origin
        self.value: Any = None

    def get(self) -> Any:
        if self.value is None:
            self.value = Unknown(f"{self.name} from {self.dotted or '.'} (an import cycle)")  # what a cycle sees
            got = self.it.resolve_import(self)
            self.value = got if got is not None else Unknown(f"{self.name} from {self.dotted or '.'}")
        return self.value


def resolved(v: Any) -> Any:
    return v.get() if type(v) is Lazy else v


class Bases(list):
    """A class's bases, a Lazy one read when the bases are first iterated (values.Class.lookup, handlers)."""

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [resolved(v) for v in list.__getitem__(self, i)]
        v = list.__getitem__(self, i)
        if type(v) is Lazy:
            v = v.get()
            list.__setitem__(self, i, v)
        return v

    def __reversed__(self):
        return iter([self[i] for i in range(len(self) - 1, -1, -1)])

    def __contains__(self, x):
        return any(v is x or v == x for v in self)


class Names(dict):
    """A module's names, each imported one read when it is asked for (extract/xtuner.py reads a config's names),
    a star import's among them."""

    def __init__(self, it: Any, env: Any) -> None:
        super().__init__(env.vars)
        self.it, self.env = it, env

    def __getitem__(self, key: str) -> Any:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def get(self, key: str, default: Any = None) -> Any:
        v = dict.get(self, key)
        v = resolved(v) if v is not None else self.it.star_name(self.env, key)
        return default if v is None else v


class FileLines:
    """A module read in part is parsed from its kept lines alone: its ranges, in the lines of the file."""

    __slots__ = ("pos", "lines")

    def __init__(self, pos: Any, lines: tuple[int, ...]) -> None:
        self.pos, self.lines = pos, lines

    def __contains__(self, node: Any) -> bool:
        return node in self.pos

    def __getitem__(self, node: Any) -> Any:
        r = self.pos[node]
        last = len(self.lines)
        return CodeRange(CodePosition(self.lines[min(r.start.line, last) - 1], r.start.column),
                         CodePosition(self.lines[min(r.end.line, last) - 1], r.end.column))

    def get(self, node: Any, default: Any = None) -> Any:
        return self[node] if node in self.pos else default


@dataclass(eq=False)
class SiblingModule:
    """A module of the checkout imported whole (`import helpers as h`, `from . import utils`): read for each of
    its attributes the script uses, when it uses it (Imports.module_attribute)."""

    name: str
    env: Any  # None: its names are read through Imports.module_attribute
    target: Path
    dotted: str


class Imports:
    """The Interpreter's reading of the modules a script imports from its checkout."""

    def init_imports(self) -> None:
        self.reading: set[Path] = set()  # modules being walked (for more names): an import cycle sees them as they are
        self.texts: dict[Path, str] = {}  # each module read in part: its text, for the names its functions' bodies need
        self.env_keys: dict[int, Path] = {}  # the scope (id of its Env) of each module of the checkout read -> its key
        self.bodies: set[tuple[Path, int]] = set()  # (module, line) of the functions whose bodies' names were read
        self.stars: dict[int, list[tuple[Path, str]]] = {}  # per module scope (id of its Env): its star imports' modules
        self.library_copies: dict[str, Any] = {}  # qualified name -> the class a copy of its library defines, or None

    def main_names(self) -> dict:
        """The script's module-level names, an imported one read when asked for."""
        return Names(self, self.main.env)

    def sibling(self, dotted: str, level: int = 0, names: frozenset[str] | None = None,
                origin: Path | None = None) -> Any:
        """A module of the script's checkout (its folder, its package, the repository), walked once for its names;
        with `names` (`from m import a, b`), only the statements those names need (extract/slicing.py)."""
        target = self.checkout_module(dotted, level, origin)
        return self.read_module(target, dotted, names) if target is not None else None

    def checkout_module(self, dotted: str, level: int, origin: Path | None = None) -> Path | None:
        target = self.find_module(dotted, level, origin)
        return None if target is None or target.resolve() == self.path.resolve() else target

    def read_module(self, target: Path, dotted: str, names: frozenset[str] | None) -> Any:
        """The module at `target`, walked for `names` (None: all of it). A module walked for some names and now
        asked for more walks only the statements those need besides, in the same scope (extract/slicing.py)."""
        key = target.resolve()
        known = self.modules.get(key)
        if key in self.modules:
            if known is None or known.only is None or (names is not None and names <= known.only) or key in self.reading:
                return known  # None: unreadable, over the budget, or an import cycle (which sees nothing)
        elif len(self.modules) >= MAX_SIBLINGS:
            self.modules[key] = None
            self.facts.note(f"did not read sibling module {target.name} (too many or too large); its names are unknown")
            return None
        if self.out_of_time():
            return known
        if known is None:
            self.modules[key] = None
        self.reading.add(key)
        try:
            return self._read_part(target, dotted, names, known)
        finally:
            self.reading.discard(key)

    def _read_part(self, target: Path, dotted: str, names: frozenset[str] | None, known: Any) -> Any:
        wanted = known.only | names if known is not None and names is not None else names
        try:
            text = read_text(target, min(MAX_SIBLING_BYTES, max_file_size()), what="sibling-module budget")
            part, kept, lines = slicing.needed_part(text, wanted, known.kept if known is not None else frozenset(),
                                                    bodies=False, compact=True)
            if known is not None and kept == known.kept:
                known.only = wanted  # nothing more of it to walk for these names
                return known
            mod = self._load(target, part if part is not None else text, dotted, is_main=False)
        except (OSError, UnicodeDecodeError, ParserSyntaxError):
            self.facts.note(f"could not read sibling module {target.name}; its names are unknown")
            return known
        mod.kept, mod.lines = kept, lines
        if part is not None:
            mod.only = wanted
        if known is not None:  # the statements walked before keep their values: the new ones run in that scope
            mod.env = known.env
            self.retired.append(known)
        key = target.resolve()
        self.modules[key] = mod
        self.env_keys[id(mod.env)] = key
        if mod.only is not None:
            self.texts[key] = text
        saved = self._enter_module()
        try:
            self._exec_module(mod)
        finally:
            self._leave_module(saved)
        return mod

    def _enter_module(self) -> tuple:
        """A module is read when a name from it is first used, maybe inside a function or a branch: its statements
        run at its own top level, as Python runs them at import, with nothing of the caller's walk around them."""
        saved = (self.stack, self.returns, self.writes, self.accum, self.micro_accum, self.layers)
        self.stack, self.returns, self.writes, self.accum, self.micro_accum, self.layers = [], [], [], [], None, None
        return saved

    def _leave_module(self, saved: tuple) -> None:
        self.stack, self.returns, self.writes, self.accum, self.micro_accum, self.layers = saved

    def resolve_import(self, lazy: Lazy) -> Any:
        """The value of `from dotted import name`, read now that the name is used: the module in part (the
        statements that name needs); a name it does not bind is a submodule of its package."""
        sib = self.read_module(lazy.target, lazy.dotted, frozenset({lazy.name}))
        if sib is None and not lazy.level:
            return Ref(f"{lazy.dotted}.{lazy.name}")
        v = self.module_name(sib.env, lazy.name) if sib is not None else None
        if v is not None and v is not lazy:  # `from . import sub` in a package's __init__ binds the name to itself
            return resolved(v)
        sub = self.checkout_module(f"{lazy.dotted}.{lazy.name}" if lazy.dotted else lazy.name, lazy.level, lazy.origin)
        dotted = f"{lazy.dotted}.{lazy.name}" if lazy.dotted else lazy.name
        return SiblingModule(lazy.name, None, sub, dotted) if sub is not None else \
            Unknown(f"{lazy.name} from {lazy.dotted or 'a relative import'}")

    def imports_function(self, lazy: Lazy) -> bool:
        """Whether `from m import name` binds a function m defines, or re-exports from a module that does (`from
        .data import name`, followed): the texts say it (`def name` at the top level), nothing is parsed."""
        target, name = lazy.target, lazy.name
        for _ in range(4):
            if self.out_of_time():
                return False
            try:
                text = read_text(target, min(MAX_SIBLING_BYTES, max_file_size()), what="sibling-module budget")
            except (OSError, UnicodeDecodeError):
                return False
            word = re.escape(name)
            if re.search(rf"^(?:async[ \t]+)?def[ \t]+{word}\b", text, re.M):
                return True
            m = re.search(rf"^from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(?:\([^)]*|[^\n]*)\b{word}\b", text, re.M)
            target = self.checkout_module(m.group(2), len(m.group(1)), target) if m else None
            if target is None:
                return False
        return False

    def module_attribute(self, m: "SiblingModule", attr: str) -> Any:
        """`m.attr` of a module of the checkout imported whole: the module read for the names used of it."""
        mod = self.read_module(m.target, m.dotted, frozenset({attr}))
        v = self.module_name(mod.env, attr) if mod is not None else None
        return resolved(v) if v is not None else Unknown(f"{m.name}.{attr}")

    def module_members(self, m: Any) -> Any:
        """inspect.getmembers(module) of a module of the checkout: its (name, value) pairs, sorted by name as
        inspect sorts them (the module read whole); a list of unknown length when it cannot be read."""
        mod = self.read_module(m.target, m.dotted, None) if isinstance(m, SiblingModule) else m
        env = getattr(mod, "env", None)
        if env is None:
            return Unknown(f"inspect.getmembers({m.name})")
        pairs = [Seq([Const(k, "literal", None), resolved(v)], "tuple") for k, v in sorted(env.vars.items())
                 if not k.startswith("__")]
        return Seq(pairs, "list")

    def module_name(self, env: Any, name: str) -> Any:
        """A module's name `name` (one of its star imports' too, or a lazy package's submodule's), or None."""
        v = env.vars.get(name)
        if v is None and self.stars:
            v = self.star_name(env, name)
        return v if v is not None else self.structure_name(env, name)

    def structure_name(self, env: Any, name: str) -> Any:
        """`name` of a package whose __init__ defers its imports to first use, as transformers' does: an
        `_import_structure` table {submodule: [names]} that a `_LazyModule` reads; the submodule is read for it."""
        table = resolved(env.vars.get("_import_structure"))
        key = self.env_keys.get(id(env))
        mod = self.modules.get(key) if key is not None else None
        if not isinstance(table, Dict) or mod is None or mod.path.name != "__init__.py":
            return None
        for sub, names in table.items.items():
            listed = to_python(names)
            if isinstance(sub, str) and isinstance(listed, Const) and isinstance(listed.value, (list, tuple)) \
                    and name in listed.value:
                target = self.checkout_module(sub, 1, mod.path)
                part = self.read_module(target, f"{mod.name}.{sub}", frozenset({name})) if target is not None else None
                v = part.env.vars.get(name) if part is not None else None
                return resolved(v) if v is not None else None
        return None

    def read_body(self, f: Func) -> None:
        """Before a function of a module read in part runs: the module's statements its body needs (a helper it
        calls, a table it reads), read once per function (a class's methods: once per class)."""
        mod = f.module
        if mod is None or mod.is_main or mod.only is None or f.node not in mod.pos:
            return
        key = mod.path.resolve()
        line = mod.pos[f.node].start.line
        if (key, line) in self.bodies or key not in self.texts:
            return
        self.bodies.add((key, line))
        names = slicing.body_names(self.texts[key], line)
        if names:
            self.read_module(mod.path, mod.name, names)

    def global_name(self, env: Any, name: str) -> Any:
        """`name` of the module whose scope `env` is in, when that module was read in part and nothing read so far
        binds it: the module read for it (a name a function's body uses that read_body did not foresee)."""
        while env.parent is not None:
            env = env.parent
        key = self.env_keys.get(id(env))
        mod = self.modules.get(key) if key is not None else None
        if mod is None or mod.only is None or name in mod.only:
            return None
        mod = self.read_module(mod.path, mod.name, frozenset({name}))
        v = mod.env.vars.get(name) if mod is not None else None
        return resolved(v) if v is not None else None

    def star_name(self, env: Any, name: str, seen: frozenset = frozenset()) -> Any:
        """`name` from the star imports of the module whose scope `env` is in (a function's scope: its module's),
        each star's module read for that name when it is first asked for; None when none binds it."""
        if name.startswith("_"):
            return None  # a star import binds no private name
        while env.parent is not None:
            env = env.parent
        for target, dotted in self.stars.get(id(env), ()):
            key = target.resolve()
            if key in seen:
                continue
            mod = self.read_module(target, dotted, frozenset({name}))
            if mod is None:
                continue
            v = mod.env.vars.get(name)
            if v is None:
                v = self.star_name(mod.env, name, seen | {key})
            if v is not None:
                return resolved(v)
        return None

    def base_value(self, node: cst.CSTNode, env: Any) -> Any:
        """A class's base: a name imported from a module of the checkout stays unread (Lazy) until the class's
        bases are looked at (a method it inherits, what library class it derives from)."""
        if isinstance(node, cst.Name):
            e: Any = env
            while e is not None:
                if node.value in e.vars:
                    v = e.vars[node.value]
                    return v if type(v) is Lazy else self.ev(node, env)
                e = e.parent
        return self.ev(node, env)

    def _library_copy_import(self, node: cst.ImportFrom, dotted: str, level: int, env: Any) -> bool:
        """A relative import inside the checkout's copy of a modelled library (`from .grpo_trainer import GRPOTrainer`
        in a fork's trl/trainer/): the library's own name, modelled as the library's (a Ref), never its copied source."""
        parts = self.library_copy_name(self.mod.path)
        if parts is None or isinstance(node.names, cst.ImportStar):
            return False
        package = parts if self.mod.path.name == "__init__.py" else parts[:-1]
        if level - 1 >= len(package):
            return False
        base = ".".join([*package[:len(package) - (level - 1)], *([dotted] if dotted else [])])
        for alias in node.names:
            name = self.dotted(alias.name)
            env.vars[alias.asname.name.value if alias.asname else name] = Ref(f"{base}.{name}")
        return True

    def library_copy_class(self, qual: str) -> Any:
        """`pkg.mod.Name` of a modelled library that its data does not know, where the checkout holds a copy of the
        library (a fork adding its own trainer): the class that copy defines, read from it (its bases inside the
        library stay the library's), or None."""
        if not qual.rpartition(".")[2][:1].isupper():
            return None  # a class's name (a function of the library is not read from a copy)
        if qual not in self.library_copies:
            self.library_copies[qual] = self._library_copy_class(qual)
        return self.library_copies[qual]

    def _library_copy_class(self, qual: str) -> Any:
        for _ in range(4):  # a package's __init__ re-exporting its submodule's name: followed there
            dotted, _, name = qual.rpartition(".")
            target = self.find_module(dotted, 0, copy=True) if dotted else None
            if target is None or target.resolve() == self.path.resolve():
                return None
            mod = self.read_module(target, dotted, frozenset({name}))
            v = resolved(self.module_name(mod.env, name)) if mod is not None else None
            if not isinstance(v, Ref) or v.qual == qual:
                return v if isinstance(v, Class) else None
            qual = v.qual
        return None

    def do_import(self, node: cst.Import, env: Any) -> None:
        """`import m` of a module of the checkout: read for each attribute the script uses of it, when it does."""
        for alias in node.names:
            dotted = self.dotted(alias.name)
            target = self.checkout_module(dotted, 0)
            top = dotted.split(".")[0]
            if alias.asname is not None:
                env.vars[alias.asname.name.value] = SiblingModule(dotted, None, target, dotted) if target else Ref(dotted)
            else:
                env.vars[top] = SiblingModule(top, None, target, top) if target and top == dotted else Ref(top)

    def do_import_from(self, node: cst.ImportFrom, env: Any) -> None:
        dotted = self.dotted(node.module) if node.module is not None else ""
        level = len(node.relative)
        if level and self.mod is not None and not self.mod.is_main and self._library_copy_import(node, dotted, level, env):
            return
        if isinstance(node.names, cst.ImportStar):
            # a module of the checkout: read for a name when one the importer does not bind is used (star_name);
            # a package's __init__ re-exporting its submodules is not read whole for one of them
            target = self.checkout_module(dotted, level) if (level or dotted) else None
            if target is not None:
                self.stars.setdefault(id(env), []).append((target, dotted))
            else:
                self.star_imports.append(dotted)
            return
        target = self.checkout_module(dotted, level) if (level or dotted) else None
        origin = self.mod.path if self.mod is not None else self.path
        for alias in node.names:
            name = self.dotted(alias.name)
            bound = alias.asname.name.value if alias.asname else name
            if target is not None:  # read when the name is used (Lazy)
                env.vars[bound] = Lazy(self, target, dotted, name, level, origin)
            elif level:  # a relative import from a folder without __init__.py: a module beside this one
                sub = self.checkout_module(f"{dotted}.{name}" if dotted else name, level)
                env.vars[bound] = SiblingModule(name, None, sub, f"{dotted}.{name}" if dotted else name) if sub else \
                    Unknown(f"{name} from a relative import")
            else:
                # a module of a folder without __init__.py (a namespace package of the checkout)
                sub = self.checkout_module(f"{dotted}.{name}", 0) if dotted else None
                env.vars[bound] = SiblingModule(name, None, sub, f"{dotted}.{name}") if sub else \
                    Ref(f"{dotted}.{name}" if dotted else name)
