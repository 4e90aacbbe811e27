"""The part of an imported module that the names imported from it need.

`from pkg.utils import collate, MAX_LEN` runs all of utils.py in Python, but the names it binds are all
the importer sees: memlint walks only the top-level statements those names need (their definitions,
and transitively whatever those mention), and blanks the rest line for line, so every kept statement
keeps its line numbers. On real checkouts the imported modules are often the largest files (a
3,000-line utils.py for two helpers), and libcst's parse of them was most of a script's time.

Found with the standard library's tokenizer (no parser: libcst parses what is kept); it is conservative:
a statement is kept when it binds or merely mentions a needed name (`parser.add_argument` mutates
`parser`; `update_config(cfg, ...)` mutates `cfg`), and a function or class is kept with every name its
body mentions. An import binds the names it imports and needs nothing (the interpreter reads the imported
module only when a name from it is used), so keeping `from .generic import (a, b, ...)` for `a` does not keep
what b needs; a star import (`from .modeling import *`, a package's __init__ re-exporting its submodules) is
always kept, as any name may come from it. Nothing is executed.
"""

from __future__ import annotations

import io
import keyword
import re
import tokenize
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # a line ends at \n, \r\n or \r
_CONTINUES = frozenset({"else", "elif", "except", "finally"})  # a clause of the compound statement before it
_MUTATORS = frozenset({"append", "extend", "update", "insert", "add", "setdefault", "register", "__setitem__"})
_ASSIGN = frozenset({"=", "+=", "-=", "*=", "/=", "//=", "%=", "**=", "|=", "&=", "^=", ">>=", "<<=", "@="})


@dataclass
class _Statement:
    first: int  # its first line (a decorator's, for a decorated def)
    last: int = 0
    defines: str | None = None  # the name a top-level def/class binds
    mentioned: set[str] = field(default_factory=set)  # every plain name it reads or writes, at any depth
    written: set[str] = field(default_factory=set)  # module-level names a def/class changes when it runs
    imports: set[str] = field(default_factory=set)  # names its import lines bind (`from m import a as b`: b)
    deferred: set[str] = field(default_factory=set)  # names only a function body mentions: read when it is called
    star: bool = False  # holds `from m import *`


@lru_cache(maxsize=16)
def _statements(text: str) -> list[_Statement] | None:
    """The module's top-level statements, from its tokens; None when the text does not tokenize. Kept for the
    texts read last: a module read for more of its names is not tokenized again."""
    out: list[_Statement] = []
    cur: _Statement | None = None
    indent = 0
    line: list[tokenize.TokenInfo] = []  # the logical line so far
    decorated = False
    defs: list[int] = []  # the indents of the `def`s whose body the next line may be in
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.INDENT:
                indent += 1
            elif tok.type == tokenize.DEDENT:
                indent -= 1
            elif tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
                continue
            elif tok.type == tokenize.NEWLINE:
                while defs and defs[-1] >= indent:
                    defs.pop()
                if cur is not None and line:
                    _read_line(cur, line, top=indent == 0, body=bool(defs))
                    cur.last = tok.start[0]
                    if line[-1].string == ":" and (line[0].string == "def" or [t.string for t in line[:2]] == ["async", "def"]):
                        defs.append(indent)
                decorated = bool(line) and indent == 0 and line[0].string == "@"
                line = []
            else:
                if not line and indent == 0 and not (tok.string in _CONTINUES and cur is not None) and not decorated:
                    cur = _Statement(tok.start[0])
                    out.append(cur)
                line.append(tok)
    except (tokenize.TokenError, SyntaxError, RecursionError, MemoryError):
        return None
    return out


def _read_line(stmt: _Statement, toks: list[tokenize.TokenInfo], top: bool, body: bool = False) -> None:
    """One logical line's names into its top-level statement; a line of a function's body (`body`) into its
    deferred names (a class body, a def's decorators and defaults run when the statement does)."""
    words = [t.string for t in toks]
    names = stmt.deferred if body else stmt.mentioned
    if words[0] in ("import", "from"):
        _read_import(stmt, words)
        return
    if top and stmt.defines is None:
        for i, w in enumerate(words[:-1]):
            if w in ("def", "class") and toks[i + 1].type == tokenize.NAME:
                stmt.defines = words[i + 1]
                break
    depth = 0
    for i, t in enumerate(toks):
        if t.type == tokenize.OP:
            depth += t.string in "([{"
            depth -= t.string in ")]}"
            continue
        if t.type == tokenize.STRING and "f" in t.string[:t.string.find(t.string[-1])].lower():
            names.update(_formatted_names(t.string))  # an f-string's {fields}: one STRING token here
            continue
        if t.type != tokenize.NAME or keyword.iskeyword(t.string):
            continue
        after_dot = i > 0 and words[i - 1] == "."
        is_keyword_arg = depth > 0 and i + 1 < len(words) and words[i + 1] == "=" and i > 0 and words[i - 1] in "(,"
        if not after_dot and not is_keyword_arg:
            names.add(t.string)
    if stmt.defines is None:
        return
    # inside a def/class body: what running it changes at module level
    if words[0] == "global":
        stmt.written.update(w for w, t in zip(words[1:], toks[1:]) if t.type == tokenize.NAME)
    elif toks[0].type == tokenize.NAME and len(words) > 1 and words[1] in (".", "["):
        level = 0
        for w in words[1:]:
            level += w in "([{"
            level -= w in ")]}"
            if level == 0 and w in _ASSIGN:  # `ROOT.x = v`, `ROOT[k] += v`
                stmt.written.add(words[0])
                break
    for i, w in enumerate(words):  # `TABLE.append(...)`, `cfg.items.update(...)`
        if w in _MUTATORS and i + 1 < len(words) and words[i + 1] == "(" and i >= 2 and words[i - 1] == ".":
            j = i - 2
            while j >= 2 and words[j - 1] == "." and toks[j - 2].type == tokenize.NAME:
                j -= 2
            if toks[j].type == tokenize.NAME and (j == 0 or words[j - 1] != "."):
                stmt.written.add(words[j])


def _read_import(stmt: _Statement, words: list[str]) -> None:
    """`import a.b as c, d` binds c and d; `from m import (x as y, z)` binds y and z; `from m import *` any name."""
    if words[0] == "from":
        if "import" not in words:
            return
        words = words[words.index("import") + 1:]
        if words and words[0] == "*":
            stmt.star = True
            return
    else:
        words = words[1:]
    item: list[str] = []
    for w in [*words, ","]:
        if w in ("(", ")"):
            continue
        if w != ",":
            item.append(w)
            continue
        if "as" in item and item.index("as") + 1 < len(item):
            stmt.imports.add(item[item.index("as") + 1])
        elif item and item[0].isidentifier():
            stmt.imports.add(item[0])  # `import a.b` binds a
        item = []


def _formatted_names(literal: str) -> set[str]:
    """The names an f-string's replacement fields mention (`f"{out_dir}/{IDX:03d}"`: out_dir, IDX)."""
    fields = re.findall(r"\{([^{}]*)\}", literal.replace("{{", "").replace("}}", ""))
    return {w for f in fields for w in re.findall(r"(?<![\w.])[A-Za-z_]\w*", f) if not keyword.iskeyword(w)}


def needed_source(text: str, names: Iterable[str]) -> str | None:
    """`text` with only the top-level statements that `names` need, the others blanked (each of their lines
    an empty line, so line numbers are unchanged); None when every statement is needed or the text does not
    tokenize (the caller then reads the whole module, and reports a syntax error as it does today)."""
    return needed_part(text, names)[0]


def needed_part(text: str, names: Iterable[str] | None, done: frozenset[int] = frozenset(),
                bodies: bool = True, compact: bool = False) -> tuple[str | None, frozenset[int], tuple[int, ...]]:
    """The statements `names` need (every statement: None) less those already walked (`done`, indexes of
    statements an earlier call returned), as `text` with the others blanked; and every needed statement's index,
    the done ones included. A module read for `a`, then for `b` too, runs only what `b` needs besides. Without
    `bodies`, what a function's body mentions is not needed (the interpreter reads it when the function is
    called: body_names). The text is
    None when it is the whole of `text`, or when it does not tokenize (the caller reads it whole, and the parse
    reports the syntax error); the indexes equal `done` when nothing more is needed. `compact`: the kept lines
    alone, and (third) the line of `text` each one is (libcst's parse of a blank line costs about what a short
    statement's does: a 3,000-line module read for one function is mostly blank lines otherwise)."""
    body = _statements(text)
    if not body:
        return None, frozenset(), ()
    if names is None:
        keep = set(range(len(body)))
    else:
        keep = _needed(body, names, bodies)
    if not done and len(keep) == len(body):
        return None, frozenset(keep), ()
    new = keep - done
    kept_lines: set[int] = set()
    dropped_lines: set[int] = set()
    for i, st in enumerate(body):
        (kept_lines if i in new else dropped_lines).update(range(st.first, max(st.last, st.first) + 1))
    blank = dropped_lines - kept_lines  # `a = 1; b = 2` on one line: a line shared with a kept statement stays
    if compact:
        numbered = [(n, line) for n, line in enumerate(_lines(text), start=1) if n in kept_lines]
        return "".join(line for _, line in numbered), frozenset(keep), tuple(n for n, _ in numbered)
    out = []
    for n, line in enumerate(_lines(text), start=1):
        if n in blank:
            stripped = line.rstrip("\r\n")
            out.append(line[len(stripped):] or "")
        else:
            out.append(line)
    return "".join(out), frozenset(keep), ()


@lru_cache(maxsize=16)
def _lines(text: str) -> list[str]:
    return _LINE.findall(text)


def body_names(text: str, line: int) -> frozenset[str]:
    """What the bodies of the functions defined by the top-level statement at `line` mention."""
    for st in _statements(text) or ():
        if st.first <= line <= max(st.last, st.first):
            return frozenset(st.deferred)
    return frozenset()


def _needed(body: list[_Statement], names: Iterable[str], bodies: bool = True) -> set[int]:
    # a function that fills a needed table is needed too, so the module-level calls that run it are kept
    bound = [({s.defines} if s.defines else s.mentioned | s.deferred | s.imports) | s.written for s in body]
    mentioned = [s.mentioned | s.written | ({s.defines} if s.defines else set()) | (s.deferred if bodies else set())
                 for s in body]
    needed = set(names) | {"__all__", "_import_structure"}  # a lazy package's table of its submodules' names
    keep: set[int] = set()
    grown = True
    while grown:
        grown = False
        for i in range(len(body)):
            if i not in keep and (bound[i] & needed or body[i].star):
                keep.add(i)
                needed |= mentioned[i]  # a kept def's own name too: the calls that run it
                grown = True
    return keep
