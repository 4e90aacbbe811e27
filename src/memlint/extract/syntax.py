"""The syntax tree memlint reads: CPython's own `ast`, reshaped into the libcst node classes and
fields the extractor and the fixes use, with libcst's syntactic positions.

Why not libcst itself: on the lint path, importing libcst (0.3-0.4 s, hundreds of dataclasses),
its parse and a positions pass cost more than everything else `memlint check` does for an
800-line script, while `ast` parses the same file in 20 ms and carries positions. The reader was
written against libcst's shapes (`Call.args` of `Arg(keyword=, star=)`, `SimpleStatementLine`,
`IndentedBlock.body`, `Comparison.comparisons`, ...), so this module builds exactly those shapes
(the subset memlint reads: no whitespace, commas or parentheses) from `ast`, and the same
`Range`s libcst's PositionProvider gives: a node's syntactic extent without its parentheses,
columns in characters. tests/test_syntax.py compares every node's class, fields and range with
libcst's on every fixture, when libcst is installed.

Nothing here runs or imports user code: `ast.parse` only parses.
"""

from __future__ import annotations

import ast
import re
from typing import Any, NamedTuple


class Pos(NamedTuple):
    """libcst.metadata.CodePosition's fields: 1-based line, 0-based column (characters)."""

    line: int
    column: int


class Range(NamedTuple):
    """libcst.metadata.CodeRange's fields."""

    start: Pos
    end: Pos


class ParserSyntaxError(Exception):
    """Source that does not parse (libcst.ParserSyntaxError's fields)."""

    def __init__(self, message: str, raw_line: int, raw_column: int) -> None:
        super().__init__(message)
        self.message, self.raw_line, self.raw_column = message, raw_line, raw_column


class CSTNode:
    __slots__ = ("__weakref__",)
    _fields: tuple[str, ...] = ()

    @property
    def children(self) -> list["CSTNode"]:
        out: list[CSTNode] = []
        for f in self._fields:
            v = getattr(self, f)
            if isinstance(v, CSTNode):
                out.append(v)
            elif type(v) is list:
                out.extend(x for x in v if isinstance(x, CSTNode))
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{f}={getattr(self, f)!r}' for f in self._fields)})"


class BaseExpression(CSTNode):
    __slots__ = ()


class BaseSmallStatement(CSTNode):
    __slots__ = ()


class BaseCompoundStatement(CSTNode):
    __slots__ = ()


class BaseSuite(CSTNode):
    __slots__ = ()


def _node(name: str, fields: str = "", base: type = CSTNode, extra: str = "") -> type:
    names = tuple(fields.split())
    return type(name, (base,), {"__slots__": names + tuple(extra.split()), "_fields": names})


E, S, C = BaseExpression, BaseSmallStatement, BaseCompoundStatement
Module = _node("Module", "body", extra="source lines positions default_indent default_newline")
SimpleStatementLine = _node("SimpleStatementLine", "body")
SimpleStatementSuite = _node("SimpleStatementSuite", "body", BaseSuite)
IndentedBlock = _node("IndentedBlock", "body", BaseSuite)
# statements
Assign = _node("Assign", "targets value", S)
AssignTarget = _node("AssignTarget", "target")
AnnAssign = _node("AnnAssign", "target annotation value", S)
Annotation = _node("Annotation", "annotation")
AugAssign = _node("AugAssign", "target value", S, "operator")
Expr = _node("Expr", "value", S)
Return = _node("Return", "value", S)
Raise = _node("Raise", "exc cause", S)
Assert = _node("Assert", "test msg", S)
Pass = _node("Pass", "", S)
Break = _node("Break", "", S)
Continue = _node("Continue", "", S)
Del = _node("Del", "target", S)
Global = _node("Global", "names", S)
Nonlocal = _node("Nonlocal", "names", S)
NameItem = _node("NameItem", "name")
Import = _node("Import", "names", S)
ImportFrom = _node("ImportFrom", "module names", S, "relative")
ImportAlias = _node("ImportAlias", "name asname")
ImportStar = _node("ImportStar")
AsName = _node("AsName", "name")
Dot = _node("Dot")
If = _node("If", "test body orelse", C)
Else = _node("Else", "body")
For = _node("For", "target iter body orelse", C, "asynchronous")
While = _node("While", "test body orelse", C)
With = _node("With", "items body", C, "asynchronous")
WithItem = _node("WithItem", "item asname")
Try = _node("Try", "body handlers orelse finalbody", C)
TryStar = _node("TryStar", "body handlers orelse finalbody", C)
ExceptHandler = _node("ExceptHandler", "type name body")
ExceptStarHandler = _node("ExceptStarHandler", "type name body")
Finally = _node("Finally", "body")
FunctionDef = _node("FunctionDef", "decorators name params returns body", C, "asynchronous")
ClassDef = _node("ClassDef", "decorators name bases keywords body", C)
Decorator = _node("Decorator", "decorator")
Parameters = _node("Parameters", "posonly_params params star_arg kwonly_params star_kwarg")
Param = _node("Param", "name annotation default", extra="star")
ParamStar = _node("ParamStar")
Match = _node("Match", "subject cases", C)
MatchCase = _node("MatchCase", "pattern guard body")
MatchPattern = _node("MatchPattern")  # patterns are not read: an opaque node
Asynchronous = _node("Asynchronous")
# expressions
Name = _node("Name", "", E, "value")
Attribute = _node("Attribute", "value attr", E)
Call = _node("Call", "func args", E)
Arg = _node("Arg", "keyword value", extra="star")
Integer = _node("Integer", "", E, "value evaluated_value")
Float = _node("Float", "", E, "value evaluated_value")
Imaginary = _node("Imaginary", "", E, "value evaluated_value")
Ellipsis = _node("Ellipsis", "", E)
SimpleString = _node("SimpleString", "", E, "value evaluated_value")
ConcatenatedString = _node("ConcatenatedString", "left right", E, "evaluated_value")
FormattedString = _node("FormattedString", "parts", E, "start end")
FormattedStringText = _node("FormattedStringText", "", extra="value")
FormattedStringExpression = _node("FormattedStringExpression", "expression format_spec", extra="conversion")
BinaryOperation = _node("BinaryOperation", "left right", E, "operator")
UnaryOperation = _node("UnaryOperation", "expression", E, "operator")
BooleanOperation = _node("BooleanOperation", "left right", E, "operator")
Comparison = _node("Comparison", "left comparisons", E)
ComparisonTarget = _node("ComparisonTarget", "comparator", extra="operator")
IfExp = _node("IfExp", "body test orelse", E)
Lambda = _node("Lambda", "params body", E)
NamedExpr = _node("NamedExpr", "target value", E)
Await = _node("Await", "expression", E)
Yield = _node("Yield", "value", E)
From = _node("From", "item")
List = _node("List", "elements", E)
Tuple = _node("Tuple", "elements", E)
Set = _node("Set", "elements", E)
Element = _node("Element", "value")
StarredElement = _node("StarredElement", "value", E)
Dict = _node("Dict", "elements", E)
DictElement = _node("DictElement", "key value")
StarredDictElement = _node("StarredDictElement", "value")
Subscript = _node("Subscript", "value slice", E)
SubscriptElement = _node("SubscriptElement", "slice")
Index = _node("Index", "value")
Slice = _node("Slice", "lower upper step")
ListComp = _node("ListComp", "elt for_in", E)
SetComp = _node("SetComp", "elt for_in", E)
GeneratorExp = _node("GeneratorExp", "elt for_in", E)
DictComp = _node("DictComp", "key value for_in", E)
CompFor = _node("CompFor", "target iter ifs inner_for_in", extra="asynchronous")
CompIf = _node("CompIf", "test")

# operators: field-less, not part of the tree walk (libcst's are nodes with whitespace only)
_OPS: dict[type, type] = {}
for _ast_op, _name in [(ast.Add, "Add"), (ast.Sub, "Subtract"), (ast.Mult, "Multiply"), (ast.Div, "Divide"),
                       (ast.FloorDiv, "FloorDivide"), (ast.Mod, "Modulo"), (ast.Pow, "Power"),
                       (ast.MatMult, "MatrixMultiply"), (ast.LShift, "LeftShift"), (ast.RShift, "RightShift"),
                       (ast.BitOr, "BitOr"), (ast.BitAnd, "BitAnd"), (ast.BitXor, "BitXor"),
                       (ast.Not, "Not"), (ast.USub, "Minus"), (ast.UAdd, "Plus"), (ast.Invert, "BitInvert"),
                       (ast.And, "And"), (ast.Or, "Or"),
                       (ast.Eq, "Equal"), (ast.NotEq, "NotEqual"), (ast.Lt, "LessThan"), (ast.LtE, "LessThanEqual"),
                       (ast.Gt, "GreaterThan"), (ast.GtE, "GreaterThanEqual"), (ast.In, "In"), (ast.NotIn, "NotIn"),
                       (ast.Is, "Is"), (ast.IsNot, "IsNot")]:
    _OPS[_ast_op] = globals()[_name] = type(_name, (), {"__slots__": ()})
_AUG: dict[type, type] = {}
for _ast_op, _cls in list(_OPS.items())[:13]:
    _AUG[_ast_op] = globals()[_cls.__name__ + "Assign"] = type(_cls.__name__ + "Assign", (), {"__slots__": ()})
del _ast_op, _name, _cls

_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_ELSE = re.compile(r"\s*(else|finally)\s*:")
_DEF = re.compile(r"(?:async\s+)?(?:def|class)\s+([^\W\d]\w*)")
_FROM = re.compile(r"from\s*[.\s]*")


class Parsed(NamedTuple):
    module: Any
    pos: dict  # each node's syntactic range, as libcst's PositionProvider gives it
    parent: dict  # every node but the module, in source order


def parse(source: str) -> Parsed:
    """Raises ParserSyntaxError."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ParserSyntaxError(err.msg, err.lineno or 1, max((err.offset or 1) - 1, 0)) from None
    except (ValueError, RecursionError, MemoryError) as err:
        raise ParserSyntaxError(f"cannot parse: {type(err).__name__}: {err}", 1, 0) from None
    return _Builder(source).module(tree)


class _Builder:
    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = _LINES.findall(source)  # Python's line breaks only (not str.splitlines' \f, \x1c, ...)
        self.ascii = [ln.isascii() for ln in self.lines]
        self.pos: dict = {}
        self.parent: dict = {}
        self.stack: list = []

    # ---- positions ------------------------------------------------------------------------------

    def col(self, line: int, byte_col: int) -> int:
        """ast's UTF-8 byte column as libcst's character column."""
        if line > len(self.lines) or self.ascii[line - 1]:
            return byte_col
        return len(self.lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def start(self, a: ast.AST) -> Pos:
        return Pos(a.lineno, self.col(a.lineno, a.col_offset))

    def end(self, a: ast.AST) -> Pos:
        return Pos(a.end_lineno, self.col(a.end_lineno, a.end_col_offset))

    def span(self, a: ast.AST) -> Range:
        return Range(self.start(a), self.end(a))

    def text(self, r: Range) -> str:
        (l1, c1), (l2, c2) = r
        if l1 == l2:
            return self.lines[l1 - 1][c1:c2]
        return self.lines[l1 - 1][c1:] + "".join(self.lines[l1:l2 - 1]) + self.lines[l2 - 1][:c2]

    def char(self, p: Pos) -> str:
        line = self.lines[p.line - 1] if p.line <= len(self.lines) else ""
        return line[p.column] if p.column < len(line) else ""

    def unparen(self, r: Range) -> Range:
        """ast counts a tuple's or a generator's own parentheses; libcst's range leaves them out,
        and the whitespace inside them."""
        if self.char(r.start) == "(" and _encloses(self.text(r)):
            start = self.ahead(Pos(r.start.line, r.start.column + 1)) or r.start
            return Range(start, self.back(Pos(r.end.line, r.end.column - 1)))
        return r

    def back(self, p: Pos) -> Pos:
        """The position after the last code character before `p`, across blank lines and comments
        (libcst gives a node the whitespace before its keyword: `for` of a comprehension, a
        comparison's operator; a tuple's range ends at its last element or trailing comma)."""
        line, col = p
        first = True
        while line >= 1:
            text = self.lines[line - 1][:col] if first else _without_comment(self.lines[line - 1].rstrip("\r\n"))
            stripped = text.rstrip(" \t\\\f")
            if stripped:
                return Pos(line, len(stripped))
            line, first = line - 1, False
        return p

    def wrapped(self, a: ast.AST, stop: Pos | None = None) -> Range:
        """The node's range with the parentheses that enclose only it (a wrapper node's range in
        libcst: an element, an argument, a target); `stop` is an opening parenthesis of the
        enclosing node's own (a call's) that must not be counted."""
        r = self.span(a)
        while True:
            before = self.back(r.start)
            if before.column == 0 or self.lines[before.line - 1][before.column - 1] != "(":
                return r
            opening = Pos(before.line, before.column - 1)
            if stop is not None and opening == stop:
                return r
            closing = self.ahead(r.end)
            if closing is None or self.char(closing) != ")":
                return r
            r = Range(opening, Pos(closing.line, closing.column + 1))

    def ahead(self, p: Pos) -> Pos | None:
        """The first non-blank character at or after `p` (comments end a line)."""
        line, col = p
        while line <= len(self.lines):
            text = self.lines[line - 1]
            m = re.compile(r"[^\s\\]").search(text, col)
            if m and m.group() != "#":
                return Pos(line, m.start())
            line, col = line + 1, 0
        return None

    def after(self, p: Pos, pattern: re.Pattern) -> tuple[Pos, re.Match | None]:
        """The first match of `pattern` at or after `p`, on that line or the next ones."""
        line, col = p
        while line <= len(self.lines):
            m = pattern.search(self.lines[line - 1], col)
            if m:
                return Pos(line, m.start()), m
            line, col = line + 1, 0
        return p, None

    # ---- building ------------------------------------------------------------------------------

    def new(self, cls: type, r: Range | None) -> Any:
        n = cls.__new__(cls)
        if r is not None:
            self.pos[n] = r
        if self.stack:
            self.parent[n] = self.stack[-1]
        return n

    def module(self, tree: ast.Module) -> Parsed:
        m = Module.__new__(Module)
        m.source, m.lines, m.positions = self.source, self.lines, self.pos
        m.default_indent, m.default_newline = "    ", "\r\n" if "\r\n" in self.source[:2000] else "\n"
        end = Pos(len(self.lines) + 1, 0) if self.source.endswith(("\n", "\r")) or not self.lines else \
            Pos(len(self.lines), len(self.lines[-1]))
        self.pos[m] = Range(Pos(1, 0), end)
        self.stack.append(m)
        m.body = self.statements(tree.body)
        self.stack.pop()
        return Parsed(m, self.pos, self.parent)

    def within(self, node: Any, build) -> Any:
        self.stack.append(node)
        try:
            build()
        finally:
            self.stack.pop()
        return node

    def statements(self, body: list) -> list:
        """A block's statements: small ones on one line (`a = 1; b = 2`) share a SimpleStatementLine."""
        out: list = []
        i = 0
        while i < len(body):
            s = body[i]
            if not _is_small(s):
                out.append(self.compound(s))
                i += 1
                continue
            j = i + 1
            while j < len(body) and _is_small(body[j]) and body[j].lineno == body[j - 1].end_lineno \
                    and ";" in self.text(Range(self.end(body[j - 1]), self.start(body[j]))):
                j += 1
            line = self.new(SimpleStatementLine, Range(self.start(s), self.end(body[j - 1])))
            out.append(self.within(line, lambda: setattr(line, "body", [self.small(x) for x in body[i:j]])))
            i = j
        return out

    def suite(self, body: list) -> Any:
        """An indented block, or the statements after the colon on the header's own line."""
        first = body[0]
        head = self.lines[first.lineno - 1][: self.col(first.lineno, first.col_offset)]
        r = Range(self.start(first), self.end(body[-1]))
        if head.strip():
            n = self.new(SimpleStatementSuite, r)
            return self.within(n, lambda: setattr(n, "body", [self.small(x) for x in body]))
        n = self.new(IndentedBlock, r)
        return self.within(n, lambda: setattr(n, "body", self.statements(body)))

    def else_(self, body: list, prev_end: Pos, cls: type = Else) -> Any:
        if not body:
            return None
        start = self.start(body[0])
        for line in range(prev_end.line + 1, body[0].lineno + 1):
            m = _ELSE.match(self.lines[line - 1])
            if m:
                start = Pos(line, m.start(1))
                break
        n = self.new(cls, Range(start, self.end(body[-1])))
        return self.within(n, lambda: setattr(n, "body", self.suite(body)))

    def small(self, s: ast.stmt) -> Any:
        fn = getattr(self, "s_" + type(s).__name__, None)
        if fn is None:  # a statement memlint does not read (type aliases): an expression-less Pass
            return self.new(Pass, self.span(s))
        return fn(s)

    def compound(self, s: ast.stmt) -> Any:
        return getattr(self, "s_" + type(s).__name__)(s)

    # ---- small statements --------------------------------------------------------------------------

    def s_Assign(self, s: ast.Assign) -> Any:
        n = self.new(Assign, self.span(s))

        def build() -> None:
            n.targets = [self.assign_target(t) for t in s.targets]
            n.value = self.ex(s.value)
        return self.within(n, build)

    def assign_target(self, t: ast.expr) -> Any:
        n = self.new(AssignTarget, self.wrapped(t))
        return self.within(n, lambda: setattr(n, "target", self.ex(t)))

    def s_AnnAssign(self, s: ast.AnnAssign) -> Any:
        n = self.new(AnnAssign, self.span(s))

        def build() -> None:
            n.target = self.ex(s.target)
            a = self.new(Annotation, self.span(s.annotation))
            n.annotation = self.within(a, lambda: setattr(a, "annotation", self.ex(s.annotation)))
            n.value = self.ex(s.value) if s.value is not None else None
        return self.within(n, build)

    def s_AugAssign(self, s: ast.AugAssign) -> Any:
        n = self.new(AugAssign, self.span(s))
        n.operator = _AUG[type(s.op)]()

        def build() -> None:
            n.target = self.ex(s.target)
            n.value = self.ex(s.value)
        return self.within(n, build)

    def s_Expr(self, s: ast.Expr) -> Any:
        n = self.new(Expr, self.span(s))
        return self.within(n, lambda: setattr(n, "value", self.ex(s.value)))

    def s_Return(self, s: ast.Return) -> Any:
        n = self.new(Return, self.span(s))
        return self.within(n, lambda: setattr(n, "value", self.ex(s.value) if s.value is not None else None))

    def s_Raise(self, s: ast.Raise) -> Any:
        n = self.new(Raise, self.span(s))

        def build() -> None:
            n.exc = self.ex(s.exc) if s.exc is not None else None
            if s.cause is not None:  # libcst's From owns " from "
                at = self.ahead(self.wrapped(s.exc).end)
                f = self.new(From, Range(at or self.start(s.cause), self.end(s.cause)))
                n.cause = self.within(f, lambda: setattr(f, "item", self.ex(s.cause)))
            else:
                n.cause = None
        return self.within(n, build)

    def s_Assert(self, s: ast.Assert) -> Any:
        n = self.new(Assert, self.span(s))

        def build() -> None:
            n.test = self.ex(s.test)
            n.msg = self.ex(s.msg) if s.msg is not None else None
        return self.within(n, build)

    def s_Pass(self, s: ast.stmt) -> Any:
        return self.new(Pass, self.span(s))

    def s_Break(self, s: ast.stmt) -> Any:
        return self.new(Break, self.span(s))

    def s_Continue(self, s: ast.stmt) -> Any:
        return self.new(Continue, self.span(s))

    def s_Delete(self, s: ast.Delete) -> Any:
        n = self.new(Del, self.span(s))

        def build() -> None:
            if len(s.targets) == 1:
                n.target = self.ex(s.targets[0])
            else:
                r = Range(self.start(s.targets[0]), self.end(s.targets[-1]))
                t = self.new(Tuple, r)
                n.target = self.within(t, lambda: setattr(t, "elements", [self.element(x) for x in s.targets]))
        return self.within(n, build)

    def _names(self, s: ast.Global | ast.Nonlocal, cls: type) -> Any:
        n = self.new(cls, self.span(s))
        words = re.finditer(r"[^\W\d]\w*", self.text(self.span(s)))
        next(words)  # the keyword
        items = []
        self.stack.append(n)
        base = self.start(s)
        for name, m in zip(s.names, words):
            r = Range(Pos(base.line, base.column + m.start()), Pos(base.line, base.column + m.end()))
            item = self.new(NameItem, r)
            self.stack.append(item)
            item.name = self.name(name, r)
            self.stack.pop()
            items.append(item)
        self.stack.pop()
        n.names = items
        return n

    def s_Global(self, s: ast.Global) -> Any:
        return self._names(s, Global)

    def s_Nonlocal(self, s: ast.Nonlocal) -> Any:
        return self._names(s, Nonlocal)

    def dotted(self, text: str, start: Pos) -> Any:
        """`a.b.c` written at `start` (no spaces inside, as imports are written) as Name/Attribute,
        the outermost Attribute first (source order)."""
        end = Pos(start.line, start.column + len(text))
        head, dot, last = text.rpartition(".")
        if not dot:
            return self.name(text, Range(start, end))
        a = self.new(Attribute, Range(start, end))

        def build() -> None:
            a.value = self.dotted(head, start)
            a.attr = self.name(last, Range(Pos(start.line, end.column - len(last)), end))
        return self.within(a, build)

    def alias(self, a: ast.alias) -> Any:
        r = self.span(a)
        n = self.new(ImportAlias, r)

        def build() -> None:
            n.name = self.dotted(a.name, r.start)
            if a.asname:
                ar = Range(Pos(r.end.line, r.end.column - len(a.asname)), r.end)
                asn = self.new(AsName, Range(self.pos[n.name].end, r.end))  # libcst's AsName owns " as "
                n.asname = self.within(asn, lambda: setattr(asn, "name", self.name(a.asname, ar)))
            else:
                n.asname = None
        return self.within(n, build)

    def s_Import(self, s: ast.Import) -> Any:
        n = self.new(Import, self.span(s))
        return self.within(n, lambda: setattr(n, "names", [self.alias(a) for a in s.names]))

    def s_ImportFrom(self, s: ast.ImportFrom) -> Any:
        n = self.new(ImportFrom, self.span(s))
        n.relative = [Dot() for _ in range(s.level or 0)]

        def build() -> None:
            if s.module:
                start = self.start(s)
                line = self.lines[start.line - 1]
                m = _FROM.match(line, start.column)
                n.module = self.dotted(s.module, Pos(start.line, m.end() if m else start.column))
            else:
                n.module = None
            if len(s.names) == 1 and s.names[0].name == "*":
                n.names = self.new(ImportStar, self.span(s.names[0]))
            else:
                n.names = [self.alias(a) for a in s.names]
        return self.within(n, build)

    # ---- compound statements ---------------------------------------------------------------------

    def s_If(self, s: ast.If) -> Any:
        n = self.new(If, self.span(s))

        def build() -> None:
            n.test = self.ex(s.test)
            n.body = self.suite(s.body)
            if len(s.orelse) == 1 and isinstance(s.orelse[0], ast.If) and self._is_elif(s.orelse[0]):
                n.orelse = self.s_If(s.orelse[0])
            else:
                n.orelse = self.else_(s.orelse, self.end(s.body[-1]))
        return self.within(n, build)

    def _is_elif(self, s: ast.If) -> bool:
        return self.lines[s.lineno - 1].startswith("elif", self.col(s.lineno, s.col_offset))

    def s_For(self, s: ast.For, asynchronous: bool = False) -> Any:
        n = self.new(For, self.span(s))
        n.asynchronous = Asynchronous() if asynchronous else None

        def build() -> None:
            n.target = self.ex(s.target)
            n.iter = self.ex(s.iter)
            n.body = self.suite(s.body)
            n.orelse = self.else_(s.orelse, self.end(s.body[-1]))
        return self.within(n, build)

    def s_AsyncFor(self, s: ast.AsyncFor) -> Any:
        return self.s_For(s, True)  # type: ignore[arg-type]

    def s_While(self, s: ast.While) -> Any:
        n = self.new(While, self.span(s))

        def build() -> None:
            n.test = self.ex(s.test)
            n.body = self.suite(s.body)
            n.orelse = self.else_(s.orelse, self.end(s.body[-1]))
        return self.within(n, build)

    def s_With(self, s: ast.With, asynchronous: bool = False) -> Any:
        n = self.new(With, self.span(s))
        n.asynchronous = Asynchronous() if asynchronous else None

        def build() -> None:
            n.items = [self.with_item(i) for i in s.items]
            n.body = self.suite(s.body)
        return self.within(n, build)

    def s_AsyncWith(self, s: ast.AsyncWith) -> Any:
        return self.s_With(s, True)  # type: ignore[arg-type]

    def with_item(self, i: ast.withitem) -> Any:
        end = i.optional_vars if i.optional_vars is not None else i.context_expr
        n = self.new(WithItem, Range(self.start(i.context_expr), self.end(end)))

        def build() -> None:
            n.item = self.ex(i.context_expr)
            if i.optional_vars is not None:
                a = self.new(AsName, Range(self.end(i.context_expr), self.end(i.optional_vars)))
                n.asname = self.within(a, lambda: setattr(a, "name", self.ex(i.optional_vars)))
            else:
                n.asname = None
        return self.within(n, build)

    def s_Try(self, s: ast.Try, cls: type = Try, handler: type = ExceptHandler) -> Any:
        n = self.new(cls, self.span(s))

        def build() -> None:
            n.body = self.suite(s.body)
            n.handlers = [self.handler(h, handler) for h in s.handlers]
            last = self.end(s.handlers[-1]) if s.handlers else self.end(s.body[-1])
            n.orelse = self.else_(s.orelse, last)
            if s.orelse:
                last = self.end(s.orelse[-1])
            n.finalbody = self.else_(s.finalbody, last, Finally)
        return self.within(n, build)

    def s_TryStar(self, s: Any) -> Any:
        return self.s_Try(s, TryStar, ExceptStarHandler)

    def handler(self, h: ast.ExceptHandler, cls: type) -> Any:
        n = self.new(cls, self.span(h))

        def build() -> None:
            n.type = self.ex(h.type) if h.type is not None else None
            if h.name:
                text = self.lines[h.lineno - 1]
                m = re.search(r"\bas\s+(" + re.escape(h.name) + r")\b", text)
                r = Range(Pos(h.lineno, m.start(1)), Pos(h.lineno, m.end(1))) if m else self.span(h)
                a = self.new(AsName, Range(self.wrapped(h.type).end, r.end) if h.type is not None else r)
                n.name = self.within(a, lambda: setattr(a, "name", self.name(h.name, r)))
            else:
                n.name = None
            n.body = self.suite(h.body)
        return self.within(n, build)

    def s_FunctionDef(self, s: ast.FunctionDef, asynchronous: bool = False) -> Any:
        n = self.new(FunctionDef, self.span(s))
        n.asynchronous = Asynchronous() if asynchronous else None

        def build() -> None:
            n.decorators = [self.decorator(d) for d in s.decorator_list]
            n.name = self.def_name(s)
            n.params = self.parameters(s.args, self.pos[n.name].end)
            if s.returns is not None:
                a = self.new(Annotation, self.span(s.returns))
                n.returns = self.within(a, lambda: setattr(a, "annotation", self.ex(s.returns)))
            else:
                n.returns = None
            n.body = self.suite(s.body)
        return self.within(n, build)

    def s_AsyncFunctionDef(self, s: ast.AsyncFunctionDef) -> Any:
        return self.s_FunctionDef(s, True)  # type: ignore[arg-type]

    def def_name(self, s: ast.FunctionDef | ast.ClassDef) -> Any:
        start = self.start(s)
        m = _DEF.match(self.lines[start.line - 1], start.column)
        r = Range(Pos(start.line, m.start(1)), Pos(start.line, m.end(1))) if m else Range(start, start)
        return self.name(s.name, r)

    def decorator(self, d: ast.expr) -> Any:
        r = self.span(d)
        at = self.lines[r.start.line - 1].rfind("@", 0, r.start.column)
        n = self.new(Decorator, Range(Pos(r.start.line, at if at >= 0 else r.start.column), r.end))
        return self.within(n, lambda: setattr(n, "decorator", self.ex(d)))

    def s_ClassDef(self, s: ast.ClassDef) -> Any:
        n = self.new(ClassDef, self.span(s))

        def build() -> None:
            n.decorators = [self.decorator(d) for d in s.decorator_list]
            n.name = self.def_name(s)
            opening = self.ahead(self.pos[n.name].end)
            n.bases = [self.arg(b, opening) for b in s.bases]
            n.keywords = [self.keyword(k) for k in s.keywords]
            n.body = self.suite(s.body)
        return self.within(n, build)

    def s_Match(self, s: Any) -> Any:
        n = self.new(Match, self.span(s))

        def build() -> None:
            n.subject = self.ex(s.subject)
            n.cases = [self.case(c) for c in s.cases]
        return self.within(n, build)

    def case(self, c: Any) -> Any:
        n = self.new(MatchCase, Range(self.start(c.pattern), self.end(c.body[-1])))

        def build() -> None:
            n.pattern = self.new(MatchPattern, self.span(c.pattern))
            n.guard = self.ex(c.guard) if c.guard is not None else None
            n.body = self.suite(c.body)
        return self.within(n, build)

    # ---- parameters ------------------------------------------------------------------------------

    def parameters(self, a: ast.arguments, near: Pos) -> Any:
        every = [*a.posonlyargs, *a.args]
        first = next(iter(sorted([*every, *([a.vararg] if a.vararg else []), *a.kwonlyargs,
                                  *([a.kwarg] if a.kwarg else [])], key=lambda x: (x.lineno, x.col_offset))), None)
        last_nodes = [*every, *a.kwonlyargs, *(d for d in a.defaults), *(d for d in a.kw_defaults if d is not None),
                      *([a.vararg] if a.vararg else []), *([a.kwarg] if a.kwarg else [])]
        if first is not None:
            end = max((self.end(x) for x in last_nodes), default=self.end(first))
            r = Range(self.start(first), end)
            if a.vararg is not None or a.kwarg is not None:
                r = Range(self._starred_start(first), end)
        else:
            r = Range(near, near)
        n = self.new(Parameters, r)
        defaults = [None] * (len(every) - len(a.defaults)) + list(a.defaults)

        def build() -> None:
            n.posonly_params = [self.param(x, d) for x, d in zip(a.posonlyargs, defaults)]
            n.params = [self.param(x, d) for x, d in zip(a.args, defaults[len(a.posonlyargs):])]
            if a.vararg is not None:
                n.star_arg = self.param(a.vararg, None, "*")
            elif a.kwonlyargs:
                n.star_arg = self.new(ParamStar, None)
            else:
                n.star_arg = None
            n.kwonly_params = [self.param(x, d) for x, d in zip(a.kwonlyargs, a.kw_defaults)]
            n.star_kwarg = self.param(a.kwarg, None, "**") if a.kwarg is not None else None
        return self.within(n, build)

    def _starred_start(self, x: ast.arg) -> Pos:
        p = self.start(x)
        line = self.lines[p.line - 1]
        col = p.column
        while col > 0 and line[col - 1] in " \t":
            col -= 1
        while col > 0 and line[col - 1] == "*":
            col -= 1
        return Pos(p.line, col) if col < p.column and "*" in line[col:p.column] else p

    def param(self, x: ast.arg, default: ast.expr | None, star: str = "") -> Any:
        start = self._starred_start(x) if star else self.start(x)
        s0 = self.start(x)
        n = self.new(Param, Range(start, Pos(s0.line, s0.column + len(x.arg))))  # libcst's: the star and the name
        n.star = star

        def build() -> None:
            s = self.start(x)
            n.name = self.name(x.arg, Range(s, Pos(s.line, s.column + len(x.arg))))
            if x.annotation is not None:
                a = self.new(Annotation, self.span(x.annotation))
                n.annotation = self.within(a, lambda: setattr(a, "annotation", self.ex(x.annotation)))
            else:
                n.annotation = None
            n.default = self.ex(default) if default is not None else None
        return self.within(n, build)

    # ---- expressions -----------------------------------------------------------------------------

    def name(self, value: str, r: Range | None) -> Any:
        n = self.new(Name, r)
        n.value = value
        return n

    def ex(self, e: ast.expr) -> Any:
        return getattr(self, "e_" + type(e).__name__)(e)

    def e_Name(self, e: ast.Name) -> Any:
        return self.name(e.id, self.span(e))

    def e_Constant(self, e: ast.Constant) -> Any:
        v = e.value
        r = self.span(e)
        if v is True or v is False or v is None:
            return self.name(str(v), r)
        if v is ...:
            return self.new(Ellipsis, r)
        if isinstance(v, (str, bytes)):
            return self.string(v, r)
        cls = Integer if isinstance(v, int) else Float if isinstance(v, float) else Imaginary
        n = self.new(cls, r)
        n.value, n.evaluated_value = self.text(r), v
        return n

    def string(self, value: Any, r: Range) -> Any:
        text = self.text(r)
        pieces = _string_tokens(text) if len(text) > 1 and text[-1] in "'\"" and _maybe_concatenated(text) else None
        if not pieces or len(pieces) == 1:
            n = self.new(SimpleString, r)
            n.value, n.evaluated_value = text, value
            return n
        return self.concatenated(pieces, r)

    def concatenated(self, pieces: list, r: Range) -> Any:
        """"a" "b" "c": ConcatenatedString(left="a", right=ConcatenatedString("b", "c")), as libcst."""
        (off, tok), rest = pieces[0], pieces[1:]
        n = self.new(ConcatenatedString, Range(self._at(r.start, off), r.end))
        try:
            n.evaluated_value = ast.literal_eval("".join(t for _, t in pieces))
        except Exception:
            n.evaluated_value = None

        def build() -> None:
            left = self.new(SimpleString, Range(self._at(r.start, off), self._at(r.start, off + len(tok))))
            try:
                left.value, left.evaluated_value = tok, ast.literal_eval(tok)
            except Exception:
                left.value, left.evaluated_value = tok, None
            n.left = left
            if len(rest) == 1:
                (o2, t2), = rest
                right = self.new(SimpleString, Range(self._at(r.start, o2), self._at(r.start, o2 + len(t2))))
                try:
                    right.value, right.evaluated_value = t2, ast.literal_eval(t2)
                except Exception:
                    right.value, right.evaluated_value = t2, None
                n.right = right
            else:
                n.right = self.concatenated(rest, r)
        return self.within(n, build)

    def _at(self, start: Pos, offset: int) -> Pos:
        """The position `offset` characters into the text that starts at `start`."""
        line, col = start
        rest = offset
        while line <= len(self.lines):
            avail = len(self.lines[line - 1]) - col
            if rest < avail or line == len(self.lines):
                return Pos(line, col + rest)
            rest -= avail
            line, col = line + 1, 0
        return Pos(line, col + rest)

    def e_JoinedStr(self, e: ast.JoinedStr) -> Any:
        r = self.span(e)
        n = self.new(FormattedString, r)
        text = self.text(r)
        m = re.match(r"[A-Za-z]*('''|\"\"\"|'|\")", text)
        n.start, n.end = (m.group(0), m.group(1)) if m else ('f"', '"')

        def build() -> None:
            n.parts = self.fparts(e.values)
        return self.within(n, build)

    def fparts(self, values: list) -> list:
        parts = []
        for v in values:
            if isinstance(v, ast.Constant):
                t = self.new(FormattedStringText, None)
                t.value = str(v.value)  # the text itself (libcst keeps it as written: "{{" for "{")
                parts.append(t)
            elif isinstance(v, ast.FormattedValue):
                x = self.new(FormattedStringExpression, None)
                self.stack.append(x)
                x.expression = self.ex(v.value)
                x.conversion = chr(v.conversion) if v.conversion and v.conversion > 0 else None
                x.format_spec = self.fparts(v.format_spec.values) if v.format_spec is not None else None
                self.stack.pop()
                parts.append(x)
        return parts

    def e_Attribute(self, e: ast.Attribute) -> Any:
        r = self.span(e)
        n = self.new(Attribute, r)

        def build() -> None:
            n.value = self.ex(e.value)
            n.attr = self.name(e.attr, Range(Pos(r.end.line, r.end.column - len(e.attr)), r.end))
        return self.within(n, build)

    def e_Call(self, e: ast.Call) -> Any:
        n = self.new(Call, self.span(e))
        items = sorted([*e.args, *e.keywords], key=lambda a: (a.lineno, a.col_offset))
        opening = self.ahead(self.end(e.func))  # the call's own "(" (after any parentheses of func's)
        while opening is not None and self.char(opening) == ")":
            opening = self.ahead(Pos(opening.line, opening.column + 1))

        def build() -> None:
            n.func = self.ex(e.func)
            n.args = [self.keyword(a) if isinstance(a, ast.keyword) else self.arg(a, opening) for a in items]
        return self.within(n, build)

    def arg(self, a: ast.expr, opening: Pos | None = None) -> Any:
        if isinstance(a, ast.Starred):
            n = self.new(Arg, self.span(a))
            n.star, n.keyword = "*", None
            return self.within(n, lambda: setattr(n, "value", self.ex(a.value)))
        r = self.wrapped(a, opening)
        if isinstance(a, ast.GeneratorExp) and r.start == opening:  # f(x for x in y): the call's parentheses
            r = self.unparen(r)
        n = self.new(Arg, r)
        n.star, n.keyword = "", None
        return self.within(n, lambda: setattr(n, "value", self.ex(a)))

    def keyword(self, k: ast.keyword) -> Any:
        r = self.span(k)
        n = self.new(Arg, r)

        def build() -> None:
            if k.arg is None:
                n.star, n.keyword = "**", None
            else:
                n.star = ""
                n.keyword = self.name(k.arg, Range(r.start, Pos(r.start.line, r.start.column + len(k.arg))))
            n.value = self.ex(k.value)
        return self.within(n, build)

    def e_BinOp(self, e: ast.BinOp) -> Any:
        n = self.new(BinaryOperation, self.span(e))
        n.operator = _OPS[type(e.op)]()

        def build() -> None:
            n.left = self.ex(e.left)
            n.right = self.ex(e.right)
        return self.within(n, build)

    def e_UnaryOp(self, e: ast.UnaryOp) -> Any:
        n = self.new(UnaryOperation, self.span(e))
        n.operator = _OPS[type(e.op)]()
        return self.within(n, lambda: setattr(n, "expression", self.ex(e.operand)))

    def e_BoolOp(self, e: ast.BoolOp) -> Any:
        """`a or b or c` as libcst nests it: ((a or b) or c), the outermost first in source order."""
        return self._boolop(e, len(e.values))

    def _boolop(self, e: ast.BoolOp, k: int) -> Any:
        values = e.values
        n = self.new(BooleanOperation, Range(self.wrapped(values[0]).start, self.wrapped(values[k - 1]).end)
                     if k < len(values) else self.span(e))
        n.operator = _OPS[type(e.op)]()

        def build() -> None:
            n.left = self.ex(values[0]) if k == 2 else self._boolop(e, k - 1)
            n.right = self.ex(values[k - 1])
        return self.within(n, build)

    def e_Compare(self, e: ast.Compare) -> Any:
        n = self.new(Comparison, self.span(e))

        def build() -> None:
            n.left = self.ex(e.left)
            targets = []
            prev = self.wrapped(e.left).end
            for op, comp in zip(e.ops, e.comparators):
                w = self.wrapped(comp)
                t = self.new(ComparisonTarget, Range(prev, w.end))  # the operator's whitespace too
                prev = w.end
                t.operator = _OPS[type(op)]()
                self.stack.append(t)
                t.comparator = self.ex(comp)
                self.stack.pop()
                targets.append(t)
            n.comparisons = targets
        return self.within(n, build)

    def e_IfExp(self, e: ast.IfExp) -> Any:
        n = self.new(IfExp, self.span(e))

        def build() -> None:
            n.body = self.ex(e.body)
            n.test = self.ex(e.test)
            n.orelse = self.ex(e.orelse)
        return self.within(n, build)

    def e_Lambda(self, e: ast.Lambda) -> Any:
        n = self.new(Lambda, self.span(e))
        start = self.start(e)

        def build() -> None:
            n.params = self.parameters(e.args, Pos(start.line, start.column + 6))
            n.body = self.ex(e.body)
        return self.within(n, build)

    def e_NamedExpr(self, e: ast.NamedExpr) -> Any:
        n = self.new(NamedExpr, self.span(e))

        def build() -> None:
            n.target = self.ex(e.target)
            n.value = self.ex(e.value)
        return self.within(n, build)

    def e_Await(self, e: ast.Await) -> Any:
        n = self.new(Await, self.span(e))
        return self.within(n, lambda: setattr(n, "expression", self.ex(e.value)))

    def e_Yield(self, e: ast.Yield) -> Any:
        n = self.new(Yield, self.span(e))
        return self.within(n, lambda: setattr(n, "value", self.ex(e.value) if e.value is not None else None))

    def e_YieldFrom(self, e: ast.YieldFrom) -> Any:
        n = self.new(Yield, self.span(e))

        def build() -> None:
            f = self.new(From, None)
            n.value = self.within(f, lambda: setattr(f, "item", self.ex(e.value)))
        return self.within(n, build)

    def element(self, x: ast.expr) -> Any:
        if isinstance(x, ast.Starred):
            n = self.new(StarredElement, self.span(x))
            return self.within(n, lambda: setattr(n, "value", self.ex(x.value)))
        n = self.new(Element, self.wrapped(x))
        return self.within(n, lambda: setattr(n, "value", self.ex(x)))

    def _display(self, e: Any, cls: type) -> Any:
        r = self.span(e)
        n = self.new(cls, self.unparen(r) if cls is Tuple else r)
        return self.within(n, lambda: setattr(n, "elements", [self.element(x) for x in e.elts]))

    def e_List(self, e: ast.List) -> Any:
        return self._display(e, List)

    def e_Tuple(self, e: ast.Tuple) -> Any:
        return self._display(e, Tuple)

    def e_Set(self, e: ast.Set) -> Any:
        return self._display(e, Set)

    def e_Starred(self, e: ast.Starred) -> Any:
        n = self.new(StarredElement, self.span(e))
        return self.within(n, lambda: setattr(n, "value", self.ex(e.value)))

    def e_Dict(self, e: ast.Dict) -> Any:
        n = self.new(Dict, self.span(e))

        def build() -> None:
            els = []
            for k, v in zip(e.keys, e.values):
                if k is None:
                    vr = self.span(v)
                    line = self.lines[vr.start.line - 1]
                    star = line.rfind("**", 0, vr.start.column)
                    el = self.new(StarredDictElement, Range(Pos(vr.start.line, star if star >= 0 else vr.start.column),
                                                            self.wrapped(v).end))
                    self.stack.append(el)
                    el.value = self.ex(v)
                else:
                    el = self.new(DictElement, Range(self.wrapped(k).start, self.wrapped(v).end))
                    self.stack.append(el)
                    el.key = self.ex(k)
                    el.value = self.ex(v)
                self.stack.pop()
                els.append(el)
            n.elements = els
        return self.within(n, build)

    def e_Subscript(self, e: ast.Subscript) -> Any:
        n = self.new(Subscript, self.span(e))

        def build() -> None:
            n.value = self.ex(e.value)
            sl = e.slice
            parts = sl.elts if isinstance(sl, ast.Tuple) and self.char(self.start(sl)) != "(" and sl.elts else [sl]
            n.slice = [self.subscript_element(p) for p in parts]
        return self.within(n, build)

    def subscript_element(self, p: ast.expr) -> Any:
        r = self.span(p) if isinstance(p, ast.Slice) else self.wrapped(p)
        n = self.new(SubscriptElement, r)

        def build() -> None:
            if isinstance(p, ast.Slice):
                s = self.new(Slice, r)
                self.stack.append(s)
                s.lower = self.ex(p.lower) if p.lower is not None else None
                s.upper = self.ex(p.upper) if p.upper is not None else None
                s.step = self.ex(p.step) if p.step is not None else None
                self.stack.pop()
                n.slice = s
            else:
                i = self.new(Index, r)
                n.slice = self.within(i, lambda: setattr(i, "value", self.ex(p)))
        return self.within(n, build)

    def _comp(self, e: Any, cls: type) -> Any:
        r = self.span(e)
        n = self.new(cls, self.unparen(r) if cls is GeneratorExp and self.char(r.start) == "(" else r)

        def build() -> None:
            if cls is DictComp:
                n.key = self.ex(e.key)
                n.value = self.ex(e.value)
            else:
                n.elt = self.ex(e.elt)
            n.for_in = self.comp_for(e.generators, self.end(e.value if cls is DictComp else e.elt))
        return self.within(n, build)

    def comp_for(self, gens: list, after: Pos) -> Any:
        g = gens[0]
        start, _ = self.after(after, re.compile(r"\b(async\s+)?for\b"))
        start = self.back(start)
        last = gens[-1]
        end_node = last.ifs[-1] if last.ifs else last.iter
        n = self.new(CompFor, Range(start, self.wrapped(end_node).end))
        n.asynchronous = Asynchronous() if g.is_async else None

        def build() -> None:
            n.target = self.ex(g.target)
            n.iter = self.ex(g.iter)
            ifs = []
            prev = self.end(g.iter)
            for t in g.ifs:
                s, _ = self.after(prev, re.compile(r"\bif\b"))
                s = self.back(s)
                ci = self.new(CompIf, Range(s, self.wrapped(t).end))
                self.stack.append(ci)
                ci.test = self.ex(t)
                self.stack.pop()
                ifs.append(ci)
                prev = self.end(t)
            n.ifs = ifs
            n.inner_for_in = self.comp_for(gens[1:], prev) if len(gens) > 1 else None
        return self.within(n, build)

    def e_ListComp(self, e: ast.ListComp) -> Any:
        return self._comp(e, ListComp)

    def e_SetComp(self, e: ast.SetComp) -> Any:
        return self._comp(e, SetComp)

    def e_GeneratorExp(self, e: ast.GeneratorExp) -> Any:
        return self._comp(e, GeneratorExp)

    def e_DictComp(self, e: ast.DictComp) -> Any:
        return self._comp(e, DictComp)



_SMALL = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return, ast.Raise, ast.Assert, ast.Pass,
          ast.Break, ast.Continue, ast.Delete, ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom)


def code_for(module: Any, node: Any) -> str | None:
    """A node's source text as written (its syntactic range), or None when it is not of `module`."""
    r = module.positions.get(node)
    if r is None:
        return None
    (l1, c1), (l2, c2) = r
    lines = module.lines
    if l1 == l2:
        return lines[l1 - 1][c1:c2] if l1 <= len(lines) else ""
    return lines[l1 - 1][c1:] + "".join(lines[l1:l2 - 1]) + (lines[l2 - 1][:c2] if l2 <= len(lines) else "")


def _is_small(s: ast.stmt) -> bool:
    return isinstance(s, _SMALL) or not isinstance(s, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With,
                                                        ast.AsyncWith, ast.Try, ast.FunctionDef,
                                                        ast.AsyncFunctionDef, ast.ClassDef, ast.Match,
                                                        getattr(ast, "TryStar", ast.Try)))


_QUOTE = re.compile(r"[A-Za-z]{0,2}('''|\"\"\"|'|\")")


def _without_comment(line: str) -> str:
    """A line's code without its trailing comment (quotes on the line are skipped)."""
    if "#" not in line:
        return line
    i, n, q = 0, len(line), None
    while i < n:
        c = line[i]
        if q:
            if c == "\\":
                i += 2
                continue
            if line.startswith(q, i):
                i += len(q)
                q = None
                continue
        elif c in "'\"":
            q = line[i:i + 3] if line[i:i + 3] in ("'\'\'", '\"\"\"') else c
            i += len(q)
            continue
        elif c == "#":
            return line[:i]
        i += 1
    return line


def _encloses(text: str) -> bool:
    """Whether the "(" that starts `text` is closed by the ")" that ends it (strings skipped)."""
    if not text.endswith(")"):
        return False
    depth, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            m = _QUOTE.match(text, i)
            q = m.group(1) if m else c
            j = text.find(q, i + len(q))
            while j > 0 and text[j - 1] == "\\" and q in "'\"":
                j = text.find(q, j + 1)
            if j < 0:
                return False
            i = j + len(q)
            continue
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0 and i != n - 1:
                return False
        i += 1
    return depth == 0


def _maybe_concatenated(text: str) -> bool:
    m = _QUOTE.match(text)
    if not m:
        return False
    q = m.group(1)
    return text.find(q, m.end()) != len(text) - len(q)


def _string_tokens(text: str) -> list[tuple[int, str]] | None:
    """The string literals an implicit concatenation is made of, with their offsets in `text`."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n\\\f":
            i += 1
            continue
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        m = _QUOTE.match(text, i)
        if not m:
            return None
        q = m.group(1)
        j = m.end()
        while True:
            k = text.find(q, j)
            if k < 0:
                return None
            bs = 0
            while k - 1 - bs >= m.end() and text[k - 1 - bs] == "\\":
                bs += 1
            if bs % 2 == 0:  # an odd run of backslashes escapes the quote, in raw strings too
                break
            j = k + 1
        out.append((i, text[i:k + len(q)]))
        i = k + len(q)
    return out
