"""The language's tables and small readers of syntax: the operators, the builtins the interpreter evaluates,
its limits, and helpers over libcst nodes (what a block does, which names a loop steps)."""

from __future__ import annotations

import functools
import operator
from pathlib import Path
from typing import Any

import libcst as cst
from memlint.extract.parsed import children
from memlint.extract.values import Func, Ref

_DICT_METHODS = {"get", "items", "keys", "values", "copy", "update", "setdefault", "pop"}

MAX_DEPTH = 12
MAX_ALTS = 16
_PLAIN_SMALL = (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Pass)
MAX_EXEC_DEPTH = 4        # exec(open(f).read()) inside an exec'd file, at most this deep
_CHECKOUT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
MAX_CALLS_PER_FUNC = 256    # inlined walks of one function; later calls give unknown
MAX_UNROLL = 256             # a for loop over a known sequence this short runs once per item
MAX_RECURSION = 4           # a function calling itself (a helper walking a tuple of configs) goes this deep
MAX_STEPS = 200_000         # statements walked per script, all calls included

_BINOPS = {
    "Add": operator.add, "Subtract": operator.sub, "Multiply": operator.mul,
    "Divide": operator.truediv, "FloorDivide": operator.floordiv, "Modulo": operator.mod,
    "Power": operator.pow, "BitOr": operator.or_, "BitAnd": operator.and_,
    "LeftShift": operator.lshift, "RightShift": operator.rshift, "BitXor": operator.xor,
}
_CMPOPS = {
    "Equal": operator.eq, "NotEqual": operator.ne, "LessThan": operator.lt,
    "LessThanEqual": operator.le, "GreaterThan": operator.gt, "GreaterThanEqual": operator.ge,
    "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b,
    "Is": operator.is_, "IsNot": operator.is_not,
}
# Builtins that take a value without calling back into it (a user object passed to one is not "handed to the library")
_NO_CALLBACK = frozenset({"super", "isinstance", "issubclass", "hasattr", "getattr", "setattr", "type", "print", "len",
                          "vars", "id", "repr", "str", "callable", "dir"})

_BUILTIN_CALLS = {
    "int": int, "float": float, "str": str, "bool": bool, "abs": abs, "round": round,
    "min": min, "max": max, "len": len, "sum": sum, "list": list, "tuple": tuple, "sorted": sorted,
}

_CLASS_CHECKS = frozenset({"issubclass", "isinstance", "type", "print", "repr", "str", "id", "hasattr", "getattr"})
_SCALAR_TYPES = frozenset({"builtins.bool", "builtins.int", "builtins.float", "builtins.str", "builtins.NoneType",
                           "builtins.list", "builtins.tuple", "builtins.dict"})


def _is_classmethod(f: Func) -> bool:
    node = f.node
    return isinstance(node, cst.FunctionDef) and any(
        isinstance(d.decorator, cst.Name) and d.decorator.value == "classmethod" for d in node.decorators)


def _only_raises(block: Any) -> bool:
    """A block that ends in `raise` with no other way out (`if bad: log(...); raise ValueError(...)`)."""
    stmts = list(block.body) if hasattr(block, "body") else []
    last = stmts[-1] if stmts else None
    if not (isinstance(last, cst.SimpleStatementLine) and last.body and isinstance(last.body[-1], cst.Raise)):
        return False
    return not any(isinstance(n, (cst.Return, cst.Break, cst.Continue)) for st in stmts for n in _walk(st))


_GROWS = frozenset({"append", "extend", "insert", "add"})


@functools.lru_cache(maxsize=4096)
def _unit_counters(node: cst.For | cst.While) -> tuple[str, ...]:
    """Names a loop's body steps by one (`accum += 1`; not inside a nested function or class): counters of its
    passes, which a test against N turns into once every N passes."""
    names: list[str] = []
    stack: list = list(children(node.body))
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.AugAssign) and isinstance(n.target, cst.Name) and isinstance(n.operator, cst.AddAssign) \
                and isinstance(n.value, cst.Integer) and n.value.evaluated_value == 1 and n.target.value not in names:
            names.append(n.target.value)
        stack.extend(children(n))
    return tuple(names)


@functools.lru_cache(maxsize=4096)
def _loop_counters(node: cst.For | cst.While) -> tuple[str, ...]:
    """Names a loop's body steps with `name += ...`, and collections it grows (`batches.append(b)`) whose length
    the body tests (`if len(batches) < accum: continue`): their value differs on every iteration (not inside a
    nested function or class)."""
    names: list[str] = []
    grown: set[str] = set()
    measured: set[str] = set()
    stack: list = list(children(node.body))
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.AugAssign) and isinstance(n.target, cst.Name) and n.target.value not in names:
            names.append(n.target.value)
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and isinstance(n.func.value, cst.Name) \
                and n.func.attr.value in _GROWS:
            grown.add(n.func.value.value)
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "len" and len(n.args) == 1 \
                and isinstance(n.args[0].value, cst.Name):
            measured.add(n.args[0].value.value)
        stack.extend(children(n))
    return tuple(names) + tuple(sorted((grown & measured) - set(names)))


def _builtin_type(v: Any) -> bool:
    """type(x) of a known constant, or a builtin type named in the script (bool, int, str)."""
    return type(v) is Ref and v.qual in _SCALAR_TYPES


@functools.lru_cache(maxsize=8192)
def _one_line(text: str | None) -> str:
    """A node's source on one line, at most 80 characters (the same node is shown many times)."""
    if text is None:
        return "…"
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


@functools.lru_cache(maxsize=1024)
def _shown(path: Path) -> str:
    """A module's path as findings show it: relative to the working directory when it is inside it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except (ValueError, OSError):
        return str(path)


def _string_value(node: cst.SimpleString) -> Any:
    """The value of a string literal; the common plain case without ast.literal_eval."""
    raw = node.value
    q = 3 if raw[-3:] in ('"""', "'''") and len(raw) >= 6 else 1
    i = 0
    while raw[i] not in "'\"":
        i += 1
    prefix = raw[:i].lower()
    body = raw[i + q : len(raw) - q]
    if prefix in ("", "u") and "\\" not in body or prefix == "r":
        return body
    try:
        return node.evaluated_value
    except Exception:
        return None


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(children(n))
