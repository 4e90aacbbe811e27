"""The part of an imported module that the names imported from it need.

`from pkg.utils import collate, MAX_LEN` runs all of utils.py in Python, but the names it binds are all
the importer sees: memlint walks only the top-level statements those names need (their definitions,
and transitively whatever those mention), and blanks the rest line for line, so every kept statement
keeps its line numbers. On real checkouts the imported modules are often the largest files (a
3,000-line utils.py for two helpers), and parsing them (with libcst, then) was most of a script's time.

Found with the standard library's `ast` (a C parser, which extract/syntax.py now uses for every parse); it is
conservative: a statement is kept when it binds or merely mentions a needed name (`parser.add_argument`
mutates `parser`; `update_config(cfg, ...)` mutates `cfg`), and a function or class is kept with every
name its body mentions. Nothing is executed.
"""

from __future__ import annotations

import ast
import re
from typing import Iterable

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # ast's notion of a line: \n, \r\n or \r ends one


def _mentioned(node: ast.AST) -> set[str]:
    """Every plain name `node` reads or writes, at any depth (locals of functions included: conservative)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        a.asname or a.name.split(".")[0] for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names}


def _bound(stmt: ast.stmt) -> set[str]:
    """The module-level names a top-level statement may bind or change."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    out = _mentioned(stmt)
    for n in ast.walk(stmt):  # defs nested in an `if`/`try` at module level bind names too
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
    return out


_MUTATORS = frozenset({"append", "extend", "update", "insert", "add", "setdefault", "register", "__setitem__"})


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _written(stmt: ast.stmt) -> set[str]:
    """The module-level names a function or class changes when it runs: `global x`, `REGISTRY[k] = v`,
    `cfg.x = v`, `TABLE.append(...)`/`.update(...)` (a `register_template(...)` call at module level fills a
    table another module imports)."""
    if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return set()
    out: set[str] = set()
    for n in ast.walk(stmt):
        if isinstance(n, ast.Global):
            out.update(n.names)
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, (ast.Subscript, ast.Attribute)) and (r := _root(t)):
                    out.add(r)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _MUTATORS:
            if r := _root(n.func.value):
                out.add(r)
    return out


def _start(stmt: ast.stmt) -> int:
    decos = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno, *(d.lineno for d in decos)])


def needed_source(text: str, names: Iterable[str]) -> str | None:
    """`text` with only the top-level statements that `names` need, the others blanked (each of their lines
    an empty line, so line numbers are unchanged); None when every statement is needed or `ast` cannot parse
    the text (the caller then reads the whole module, and reports a syntax error as it does today)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body = tree.body
    if not body:
        return None
    # a function that fills a needed table is needed too, so the module-level calls that run it are kept
    bound = [_bound(s) | _written(s) for s in body]
    mentioned = [_mentioned(s) for s in body]
    needed = set(names) | {"__all__"}
    keep: set[int] = set()
    grown = True
    while grown:
        grown = False
        for i in range(len(body)):
            if i not in keep and bound[i] & needed:
                keep.add(i)
                needed |= mentioned[i] | bound[i]  # a kept def's own name too: the calls that run it
                grown = True
    if len(keep) == len(body):
        return None
    kept_lines: set[int] = set()
    dropped_lines: set[int] = set()
    for i, s in enumerate(body):
        span = range(_start(s), (s.end_lineno or s.lineno) + 1)
        (kept_lines if i in keep else dropped_lines).update(span)
    blank = dropped_lines - kept_lines  # `a = 1; b = 2` on one line: a line shared with a kept statement stays
    out = []
    for n, line in enumerate(_LINE.findall(text), start=1):
        if n in blank:
            stripped = line.rstrip("\r\n")
            out.append(line[len(stripped):] or "")
        else:
            out.append(line)
    return "".join(out)
