"""Scopes and the values only the interpreter makes: an `Env` of names, a `Module` walked, globals(),
super(), a bound method of a string or of something unknown; how a literal bound to a name is named."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst
from memlint.extract.imports import FileLines, Lazy
from memlint.extract.parsed import Parsed
from memlint.extract.values import Class, Const, Dict, Seq, Unknown

SPREAD = "**"  # kwargs key of the objects a call spreads with **vars(obj)


class Env:
    """One scope's names; lookups fall back to the enclosing scope."""

    __slots__ = ("vars", "parent", "global_names")

    def __init__(self, parent: "Env | None" = None) -> None:
        self.vars: dict[str, Any] = {}
        self.parent = parent
        self.global_names: frozenset[str] = frozenset()  # `global x` in this function: x is bound at module level

    def binding(self, name: str) -> "Env":
        """The scope an assignment to `name` binds in: the module's for a name this function declared global."""
        if name not in self.global_names:
            return self
        env = self
        while env.parent is not None:
            env = env.parent
        return env

    def lookup(self, name: str) -> Any:
        env: Env | None = self
        while env is not None:
            if name in env.vars:
                v = env.vars[name]
                return v.get() if type(v) is Lazy else v
            env = env.parent
        return None


@dataclass
class Module:
    path: Path
    name: str
    parsed: Parsed  # libcst's tree, each node's range, the text
    env: Env
    is_main: bool
    only: frozenset[str] | None = None  # a module imported from by name: the names walked (extract/slicing.py)
    kept: frozenset[int] = frozenset()  # with `only`: the top-level statements walked (their indexes)
    lines: tuple[int, ...] = ()  # with `only`: the file's line of each line of the text parsed (its kept lines)
    _pos: Any = None

    @property
    def tree(self) -> cst.Module:
        return self.parsed.module

    @property
    def pos(self) -> Any:
        """Each node's range, in the file's lines."""
        if not self.lines:
            return self.parsed.pos
        if self._pos is None:
            self._pos = FileLines(self.parsed.pos, self.lines)
        return self._pos


_ABSENT = object()  # a key a branch left unassigned


class _Return(Exception):
    pass


@dataclass(eq=False)
class SuperOf:
    """super() inside a method of `cls`: attribute lookups start at its bases, bound to `instance`."""

    cls: Class
    instance: Any


@dataclass(eq=False)
class GlobalsView:
    """globals(): the module namespace (an Env), read and written by key."""

    env: Env


@dataclass(frozen=True)
class BoundStr:
    """A method of a known string: "a/b".split("/")."""

    base: Const
    attr: str


@dataclass(frozen=True)
class BoundUnknown(Unknown):
    """A method or attribute of something unknown: dataset.map, loss.backward."""

    attr: str = ""
    same: Any = None   # what calling it gives back unchanged (token ids' `.to("cuda")`), or None


def _named(v: Any, how: str, memo: set | None = None) -> Any:
    """A literal bound to a name becomes a constant, inside containers too."""
    if isinstance(v, Const):
        return v.named(how) if v.source == "literal" else v
    # containers keep their identity: `node = root; node[k] = v` changes root, as in Python
    # (each container visited once: a list shared twice is not walked twice, a cycle ends)
    if isinstance(v, (Seq, Dict)):
        memo = set() if memo is None else memo
        if id(v) in memo:
            return v
        memo.add(id(v))
        if isinstance(v, Seq):
            v.items[:] = [_named(x, how, memo) for x in v.items]
        else:
            for k, x in list(v.items.items()):
                v.items[k] = _named(x, how, memo)
    return v


def _hashable(v: Any) -> bool:
    try:
        hash(v)
        return True
    except TypeError:
        return False
