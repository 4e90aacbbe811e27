"""The part of an imported module that the names imported from it need.

`from pkg.utils import collate, MAX_LEN` runs all of utils.py in Python, but the names it binds are all
the importer sees: memlint walks only the top-level statements those names need (their definitions,
and transitively whatever those mention), and blanks the rest line for line, so every kept statement
keeps its line numbers. On real checkouts the imported modules are often the largest files (a
3,000-line utils.py for two helpers), and libcst's parse of them was most of a script's time.

Found with the standard library's tokenizer (no parser: libcst parses what is kept); it is conservative:
a statement is kept when it binds or merely mentions a needed name (`parser.add_argument` mutates
`parser`; `update_config(cfg, ...)` mutates `cfg`), and a function or class is kept with every name its
body mentions. Nothing is executed.
"""

from __future__ import annotations

import io
import keyword
import re
import tokenize
from dataclasses import dataclass, field
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


def _statements(text: str) -> list[_Statement] | None:
    """The module's top-level statements, from its tokens; None when the text does not tokenize."""
    out: list[_Statement] = []
    cur: _Statement | None = None
    indent = 0
    line: list[tokenize.TokenInfo] = []  # the logical line so far
    decorated = False
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.INDENT:
                indent += 1
            elif tok.type == tokenize.DEDENT:
                indent -= 1
            elif tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
                continue
            elif tok.type == tokenize.NEWLINE:
                if cur is not None and line:
                    _read_line(cur, line, top=indent == 0)
                    cur.last = tok.start[0]
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


def _read_line(stmt: _Statement, toks: list[tokenize.TokenInfo], top: bool) -> None:
    """One logical line's names into its top-level statement."""
    words = [t.string for t in toks]
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
            stmt.mentioned.update(_formatted_names(t.string))  # an f-string's {fields}: one STRING token here
            continue
        if t.type != tokenize.NAME or keyword.iskeyword(t.string):
            continue
        after_dot = i > 0 and words[i - 1] == "."
        is_keyword_arg = depth > 0 and i + 1 < len(words) and words[i + 1] == "=" and i > 0 and words[i - 1] in "(,"
        if not after_dot and not is_keyword_arg:
            stmt.mentioned.add(t.string)
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


def _formatted_names(literal: str) -> set[str]:
    """The names an f-string's replacement fields mention (`f"{out_dir}/{IDX:03d}"`: out_dir, IDX)."""
    fields = re.findall(r"\{([^{}]*)\}", literal.replace("{{", "").replace("}}", ""))
    return {w for f in fields for w in re.findall(r"(?<![\w.])[A-Za-z_]\w*", f) if not keyword.iskeyword(w)}


def needed_source(text: str, names: Iterable[str]) -> str | None:
    """`text` with only the top-level statements that `names` need, the others blanked (each of their lines
    an empty line, so line numbers are unchanged); None when every statement is needed or the text does not
    tokenize (the caller then reads the whole module, and reports a syntax error as it does today)."""
    body = _statements(text)
    if not body:
        return None
    # a function that fills a needed table is needed too, so the module-level calls that run it are kept
    bound = [({s.defines} if s.defines else s.mentioned) | s.written for s in body]
    mentioned = [s.mentioned | ({s.defines} if s.defines else set()) for s in body]
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
        (kept_lines if i in keep else dropped_lines).update(range(s.first, max(s.last, s.first) + 1))
    blank = dropped_lines - kept_lines  # `a = 1; b = 2` on one line: a line shared with a kept statement stays
    out = []
    for n, line in enumerate(_LINE.findall(text), start=1):
        if n in blank:
            stripped = line.rstrip("\r\n")
            out.append(line[len(stripped):] or "")
        else:
            out.append(line)
    return "".join(out)
