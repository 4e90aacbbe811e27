"""One parsed source file as the fixes see it: libcst's nodes with their positions and parents, import aliases,
bindings and uses of names, and text edits that keep every other character as it was.

Fixes are text edits located through the CST (as Ruff's are), so formatting and comments
outside the edited range cannot change.
"""

from __future__ import annotations

import bisect
import re
from functools import lru_cache
from dataclasses import dataclass
from typing import Iterable, Iterator

import libcst as cst

from memlint.extract.parsed import children, parse, walk

_NEWLINE = re.compile(r"\r\n|\r|\n")
NOT_LITERAL = object()  # what literal() returns for an expression that is not a plain literal


def line_starts(source: str) -> list[int]:
    """The offset where each line starts (line 1 at index 0)."""
    return [0] + [m.end() for m in _NEWLINE.finditer(source)]


def row_col(starts: list[int], offset: int) -> tuple[int, int]:
    """1-based row and column (in characters) of a source offset: the inverse of Doc.offset."""
    row = bisect.bisect_right(starts, offset)
    return row, offset - starts[row - 1] + 1


class Skip(Exception):
    """A fix that cannot be made here; the message says why, in words for the user."""


@dataclass(frozen=True)
class Edit:
    """Replace source[start:end] with text (offsets into the source string)."""

    start: int
    end: int
    text: str


def apply_edits(source: str, edits: Iterable[Edit]) -> str:
    out, last = [], len(source)
    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        if e.end > last:
            raise Skip("two edits of one fix overlap")
        out.append(e.text + source[e.end:last])
        last = e.start
    out.append(source[:last])
    return "".join(reversed(out))


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.C` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


class Doc:
    """A parsed file. Raises extract.parsed.ParserSyntaxError when the text does not parse.

    Read-only once built: `Doc.of` hands the same one to every fix located in one text.
    """

    @staticmethod
    @lru_cache(maxsize=4)
    def of(source: str) -> "Doc":
        return Doc(source)

    def __init__(self, source: str) -> None:
        self.source = source
        parsed = parse(source)
        self.module, self.pos = parsed.module, parsed.pos
        self.parent: dict = {}
        self._starts = line_starts(source)
        c = _Collector()
        for node, parent in walk(self.module):  # one pass over the fields (no libcst visitor: it rebuilds nodes)
            if parent is not None:
                self.parent[node] = parent
            c.visit(node)
        c.in_source_order(self.pos)
        self.calls: list[cst.Call] = c.calls
        self.aliases: dict[str, str] = c.aliases
        self.classes: list[cst.ClassDef] = c.classes
        self.functions: dict[str, list[cst.FunctionDef]] = c.functions
        self.bindings: dict[str, list[cst.CSTNode]] = c.bindings
        self._binding_ids = {id(n) for ns in c.binding_names.values() for n in ns}
        self.names: dict[str, list[cst.Name]] = c.names

    # ---- positions --------------------------------------------------------------------------

    def offset(self, line: int, col: int) -> int:
        return self._starts[line - 1] + col

    def start(self, node: cst.CSTNode) -> int:
        p = self.pos[node].start
        return self.offset(p.line, p.column)

    def end(self, node: cst.CSTNode) -> int:
        p = self.pos[node].end
        return self.offset(p.line, p.column)

    def lines(self, node: cst.CSTNode) -> tuple[int, int]:
        r = self.pos[node]
        return r.start.line, r.end.line

    def line_text(self, line: int) -> str:
        a = self._starts[line - 1]
        b = self._starts[line] if line < len(self._starts) else len(self.source)
        return self.source[a:b].rstrip("\r\n")

    def code(self, node: cst.CSTNode) -> str:
        return self.source[self.start(node):self.end(node)]

    # ---- names --------------------------------------------------------------------------------

    def qualified(self, node: cst.BaseExpression) -> str | None:
        """The dotted name with its import alias resolved: tf.TrainingArguments -> transformers.TrainingArguments."""
        d = dotted(node)
        if d is None:
            return None
        head, _, rest = d.partition(".")
        full = self.aliases.get(head, head)
        return f"{full}.{rest}" if rest else full

    def last_name(self, node: cst.BaseExpression) -> str | None:
        q = self.qualified(node)
        return q.rsplit(".", 1)[-1] if q else None

    def with_subclasses(self, names: Iterable[str]) -> set[str]:
        """`names` plus the classes this file derives from them (class MyArgs(TrainingArguments))."""
        out = set(names)
        grew = True
        while grew:
            grew = False
            for cls in self.classes:
                if cls.name.value in out:
                    continue
                if any(self.last_name(b.value) in out for b in cls.bases):
                    out.add(cls.name.value)
                    grew = True
        return out

    def calls_to(self, names: Iterable[str]) -> list[cst.Call]:
        want = self.with_subclasses(names)
        return [c for c in self.calls if self.last_name(c.func) in want]

    def call_at(self, line: int, names: Iterable[str]) -> cst.Call | None:
        """The innermost call to one of `names` whose text spans `line`."""
        best = None
        for c in self.calls_to(names):
            a, b = self.lines(c)
            if a <= line <= b and (best is None or self.end(c) - self.start(c) < self.end(best) - self.start(best)):
                best = c
        return best

    def uses(self, name: str) -> list[cst.Name]:
        """Loads of a bare name (not attributes, keywords or bindings)."""
        out = []
        for n in self.names.get(name, ()):
            if id(n) in self._binding_ids:
                continue
            p = self.parent.get(n)
            if isinstance(p, cst.Attribute) and p.attr is n:
                continue
            if isinstance(p, cst.Arg) and p.keyword is n:
                continue
            out.append(n)
        return out

    def constant(self, name: str) -> cst.BaseExpression | None:
        """The value node of `NAME = <value>` when that is the name's only binding, at module level."""
        binds = self.bindings.get(name, [])
        if len(binds) != 1:
            return None
        stmt = binds[0]
        if self.parent.get(self.parent.get(stmt)) is not self.module:
            return None
        if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0].target, cst.Name):
            return stmt.value
        if isinstance(stmt, cst.AnnAssign) and isinstance(stmt.target, cst.Name) and stmt.value is not None:
            return stmt.value
        return None

    def assignment_at(self, line: int) -> tuple[str, cst.BaseExpression] | None:
        """(NAME, value) of a module-level `NAME = value` on `line`."""
        for stmt in self.module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, (cst.Assign, cst.AnnAssign)):
                    a, b = self.lines(small)
                    if a <= line <= b:
                        target = small.targets[0].target if isinstance(small, cst.Assign) and len(small.targets) == 1 else getattr(small, "target", None)
                        value = small.value
                        if isinstance(target, cst.Name) and value is not None:
                            return target.value, value
        return None

    def enclosing(self, node: cst.CSTNode, kinds: tuple[type, ...]) -> cst.CSTNode | None:
        p = self.parent.get(node)
        while p is not None and not isinstance(p, kinds):
            p = self.parent.get(p)
        return p

    def walk(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        stack = [node]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(children(n)))


def literal(doc: Doc, node: cst.BaseExpression):
    """The Python value of a literal expression ("max_length", True, None, 3, -1.5), else NOT_LITERAL:
    libcst's own evaluation of the literal's token (an f-string or bytes is not a plain literal)."""
    if isinstance(node, cst.Name):
        return _NAMED.get(node.value, NOT_LITERAL)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        inner = literal(doc, node.expression)
        if type(inner) not in (int, float) or isinstance(node.expression, cst.UnaryOperation):
            return NOT_LITERAL
        return -inner if isinstance(node.operator, cst.Minus) else inner
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float)):
        try:
            value = node.evaluated_value
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return NOT_LITERAL
        return value if isinstance(value, (str, int, float)) else NOT_LITERAL
    return NOT_LITERAL


_NAMED = {"True": True, "False": False, "None": None}


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a
    return None


def has_star_kwargs(call: cst.Call) -> bool:
    return any(a.star == "**" for a in call.args)


def add_keyword(doc: Doc, call: cst.Call, name: str, value: str) -> list[Edit]:
    """Edits that append `name=value` to `call`, in the call's own layout: one more line (with a
    trailing comma if the others have one) in a call laid out one argument per line, `, name=value`
    in a call on one line; `name = value` where the other keywords are written so."""
    src = doc.source
    equals = "="
    for a in call.args:
        if a.keyword is not None:
            between = src[doc.end(a.keyword):doc.start(a.value)]
            equals = between if between.strip() == "=" and "\n" not in between else "="
    text = f"{name}{equals}{value}"
    close = doc.end(call) - 1
    if src[close] != ")":  # pragma: no cover - calls always end with ")"
        raise Skip("could not find the call's closing parenthesis")
    if not call.args:
        return [Edit(close, close, text)]
    last = call.args[-1]
    vend = doc.end(last.value)
    rest = src[vend:close]
    comma = rest.lstrip(" \t\\")
    has_comma = comma.startswith(",")
    first_line = doc.lines(call.args[0])[0]
    last_line = doc.lines(last)[0]
    call_line = doc.pos[call].start.line
    lt = doc.line_text(last_line)
    if "\n" not in rest and "\r" not in rest:
        starts_line = doc.pos[last].start.column == len(lt) - len(lt.lstrip())
        if last_line != call_line and starts_line and not has_comma:
            # arguments one per line, the parenthesis closing the last one: one more such line
            vline = doc.pos[last.value].end.line
            eol = doc.offset(vline, len(doc.line_text(vline)))
            nl = "\r\n" if src.startswith("\r\n", eol) else "\r" if src.startswith("\r", eol) else "\n"
            return [Edit(vend, vend, f",{nl}{lt[: len(lt) - len(lt.lstrip())]}{text}")]
        return [Edit(vend, vend, ", " + text)]
    # one argument per line: a new line after the last argument's line, same indentation
    if last_line != call_line:
        indent = lt[: len(lt) - len(lt.lstrip())]
    else:  # arguments aligned after the opening parenthesis
        indent = " " * doc.pos[call.args[0]].start.column if first_line == call_line else ""
    vline = doc.pos[last.value].end.line
    eol = doc.offset(vline, len(doc.line_text(vline)))
    nl = "\r\n" if src.startswith("\r\n", eol) else "\r" if src.startswith("\r", eol) else "\n"
    edits = []
    if not has_comma:
        edits.append(Edit(vend, vend, ","))
    line_after = eol + len(nl)
    edits.append(Edit(line_after, line_after, f"{indent}{text}{',' if has_comma else ''}{nl}"))
    return edits


class _Collector:
    """The calls, imports, classes, functions, bindings and names of a file, one `visit_<Node>` per kind."""

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []
        self.aliases: dict[str, str] = {}
        self.classes: list[cst.ClassDef] = []
        self.functions: dict[str, list[cst.FunctionDef]] = {}
        self.bindings: dict[str, list[cst.CSTNode]] = {}
        self.binding_names: dict[str, list[cst.Name]] = {}
        self.names: dict[str, list[cst.Name]] = {}

    def visit(self, node: cst.CSTNode) -> None:
        handler = getattr(self, "visit_" + type(node).__name__, None)
        if handler is not None:
            handler(node)

    def in_source_order(self, pos) -> None:
        """The walk follows libcst's field order (a decorator after its function's body, an argument's keyword
        after its value); every list here is kept in the order of the source."""
        def key(n):
            r = pos[n]
            return r.start.line, r.start.column, -r.end.line, -r.end.column

        self.calls.sort(key=key)
        self.classes.sort(key=key)
        for table in (self.functions, self.bindings, self.binding_names, self.names):
            for v in table.values():
                v.sort(key=key)

    def _bind(self, target: cst.BaseExpression, stmt: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            self.bindings.setdefault(target.value, []).append(stmt)
            self.binding_names.setdefault(target.value, []).append(target)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._bind(el.value, stmt)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, stmt)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        self.names.setdefault(node.value, []).append(node)

    def visit_Import(self, node: cst.Import) -> None:
        for a in node.names:
            full = dotted(a.name) or ""
            if a.asname is not None and isinstance(a.asname.name, cst.Name):
                self.aliases[a.asname.name.value] = full
                self._bind(a.asname.name, node)
            else:
                head = full.split(".", 1)[0]
                self.aliases.setdefault(head, head)
                self.bindings.setdefault(head, []).append(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        mod = dotted(node.module) if node.module is not None else None
        for a in node.names:
            name = dotted(a.name) or ""
            local = a.asname.name if a.asname is not None and isinstance(a.asname.name, cst.Name) else None
            key = local.value if local is not None else name
            self.aliases[key] = f"{mod}.{name}" if mod else name
            if local is not None:
                self._bind(local, node)
            else:
                self.bindings.setdefault(key, []).append(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(node)
        self._bind(node.name, node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.setdefault(node.name.value, []).append(node)
        self._bind(node.name, node)

    def visit_Param(self, node: cst.Param) -> None:
        self._bind(node.name, node)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._bind(t.target, node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, node)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, node)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind(node.target, node)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name, node)
