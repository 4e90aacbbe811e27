"""One libcst parse per source text, shared by extraction and the fixes.

`memlint check` reads a script (extract/) and then locates each finding's fix in the same text
(fix/): both go through `parse`, cached by text, which gives libcst's tree (its native parser: any
grammar libcst knows, whatever Python runs memlint) and each node's syntactic range from libcst's
`PositionProvider`. libcst is imported here, on first use, so a walk that skips every file by its
text prefilter never imports it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterator, Mapping, NamedTuple

__all__ = ["Parsed", "ParserSyntaxError", "children", "parse", "source_of", "walk"]


class ParserSyntaxError(Exception):
    """Source that does not parse: libcst's message, 1-based line and 0-based column."""

    def __init__(self, message: str, raw_line: int, raw_column: int) -> None:
        super().__init__(message)
        self.message, self.raw_line, self.raw_column = message, raw_line, raw_column


class Parsed(NamedTuple):
    module: Any  # libcst.Module
    pos: Mapping[Any, Any]  # node -> libcst.metadata.CodeRange (line 1-based, column 0-based, in characters)
    source: str


@lru_cache(maxsize=8)
def parse(source: str) -> Parsed:
    """Raises ParserSyntaxError (not cached), for nesting too deep to parse or walk as well."""
    import libcst
    from libcst.metadata import MetadataWrapper, PositionProvider

    _refuse_deep(source)
    try:
        module = libcst.parse_module(source)
        pos = _positions(module, MetadataWrapper, PositionProvider)
    except libcst.ParserSyntaxError as err:
        raise _diagnosis(source) or ParserSyntaxError(_first_line(err.message), err.raw_line, err.raw_column) from None
    except RecursionError:
        raise ParserSyntaxError("too deeply nested to parse", 1, 0) from None
    except (ValueError, MemoryError) as err:  # a NUL byte, an encoding libcst refuses
        raise ParserSyntaxError(f"cannot parse: {type(err).__name__}: {_first_line(str(err))}", 1, 0) from None
    return Parsed(module, pos, source)


# What CPython itself refuses (its tokenizer's MAXLEVEL), and chains far past any written program: libcst's
# native parser recurses once per level and overflows the C stack (a segmentation fault, the whole run lost)
# at about 2,000 nested brackets or 5,000-10,000 chained operators, lambdas or elifs.
MAX_BRACKETS = 200
_MAX_DIGITS = 4300  # sys.get_int_max_str_digits()'s default: CPython refuses a longer decimal literal
MAX_CHAIN = 1000


def _refuse_deep(source: str) -> None:
    """Raise ParserSyntaxError for a text nested deeper than MAX_BRACKETS brackets, or with more than MAX_CHAIN
    operators between two commas of one bracket level (each nests the tree one level: `1 + 1 + ...`,
    `- - - 1`, `lambda: lambda: ...`, `a.b.c...`, `f()()...`, adjacent strings), or more than MAX_CHAIN
    elifs in a row: one pass of the standard tokenizer (it recurses into nothing), before libcst sees it."""
    import io
    import tokenize

    depth = 0
    chain = [0]
    elifs: dict[int, int] = {}
    indent, line_start = 0, True
    opening, closing = "([{", ")]}"
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            kind, text = tok.type, tok.string
            if kind == tokenize.INDENT:
                indent += 1
                continue
            if kind == tokenize.DEDENT:
                indent -= 1
                continue
            if kind in (tokenize.NL, tokenize.COMMENT):
                continue
            if kind == tokenize.NEWLINE:
                chain, line_start = [0], True
                continue
            if kind == tokenize.NUMBER and len(text) > _MAX_DIGITS and text.replace("_", "").isdigit():
                # Python refuses the file (int() of a literal past its digit limit): say so as CPython does
                raise _diagnosis(source) or ParserSyntaxError(f"Exceeds the limit ({_MAX_DIGITS} digits) for "
                                                              "integer string conversion", tok.start[0], tok.start[1])
            if line_start:  # the first token of a logical line
                line_start = False
                run = elifs.get(indent, 0) + 1 if text == "elif" else 0
                elifs = {d: n for d, n in elifs.items() if d < indent}
                if text in ("elif", "else"):
                    elifs[indent] = run if text == "elif" else elifs.get(indent, 0)
                if run > MAX_CHAIN:
                    raise ParserSyntaxError(f"more than {MAX_CHAIN:,} elif branches in a row: memlint does not "
                                            "parse it", tok.start[0], tok.start[1])
            if kind == tokenize.OP and text in opening:
                depth += 1
                chain[-1] += 1  # a call or subscript after a name nests like an operator
                if depth > MAX_BRACKETS:
                    raise ParserSyntaxError(f"nested more than {MAX_BRACKETS} brackets deep (CPython's own limit): "
                                            "memlint does not parse it", tok.start[0], tok.start[1])
                if chain[-1] > MAX_CHAIN:
                    raise ParserSyntaxError(f"more than {MAX_CHAIN:,} operators in one expression: memlint does not "
                                            "parse it", tok.start[0], tok.start[1])
                chain.append(0)
            elif kind == tokenize.OP and text in closing:
                depth = max(depth - 1, 0)
                if len(chain) > 1:
                    chain.pop()
            elif kind == tokenize.OP and text in (",", ";"):
                chain[-1] = 0
            elif (kind == tokenize.OP and text not in ("=", ":=")) or kind == tokenize.STRING or \
                    (kind == tokenize.NAME and text in ("not", "and", "or", "if", "else", "lambda", "await", "in", "is")):
                chain[-1] += 1
                if chain[-1] > MAX_CHAIN:
                    raise ParserSyntaxError(f"more than {MAX_CHAIN:,} operators in one expression: memlint does not "
                                            "parse it", tok.start[0], tok.start[1])
    except (tokenize.TokenError, SyntaxError):  # unclosed at the end, bad indentation: libcst says what is wrong
        return


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
# libcst's whitespace and punctuation: nothing memlint reads is below them
_SKIP = frozenset({"whitespace", "whitespace_before", "whitespace_after", "lpar", "rpar", "comma", "semicolon",
                   "leading_lines", "lines_after_decorators", "header", "footer", "newline", "equal", "colon",
                   "whitespace_after_func", "whitespace_before_args", "whitespace_after_star", "whitespace_after_arg",
                   "whitespace_before_colon", "whitespace_after_colon", "whitespace_before_test",
                   "whitespace_after_test", "whitespace_before_indicator", "whitespace_after_indicator",
                   "whitespace_before_params", "whitespace_after_def", "whitespace_after_class", "whitespace_after_name",
                   "whitespace_before_value", "whitespace_after_await", "whitespace_after_at", "dot", "star_tok",
                   "whitespace_before_from", "whitespace_after_from", "whitespace_after_import",
                   "whitespace_before_as", "whitespace_after_as", "whitespace_after_lambda",
                   "whitespace_before_if", "whitespace_after_if", "whitespace_before_else", "whitespace_after_else",
                   "whitespace_before_for", "whitespace_after_for", "whitespace_before_in", "whitespace_after_in",
                   "whitespace_before_walrus", "whitespace_after_walrus", "whitespace_after_del",
                   "whitespace_after_return", "whitespace_after_raise", "whitespace_after_assert",
                   "whitespace_after_global", "whitespace_after_nonlocal", "whitespace_after_yield",
                   "whitespace_after_with", "whitespace_before_with_items", "whitespace_after_with_items",
                   "whitespace_after_except", "whitespace_after_case", "whitespace_after_match"})


def children(node: Any) -> list[Any]:
    """A node's child nodes that carry code (whitespace, parentheses and commas left out), read from its dataclass
    fields: a walk over them costs a fraction of one of libcst's visitor passes, which rebuild every node they visit.
    The order is the fields' (not always the source's: sort by position where it matters)."""
    import libcst

    names = _CHILD_FIELDS.get(type(node))
    if names is None:
        import dataclasses

        names = _CHILD_FIELDS[type(node)] = tuple(f.name for f in dataclasses.fields(node) if f.name not in _SKIP)
    out: list[Any] = []
    for name in names:
        v = getattr(node, name)
        if isinstance(v, libcst.CSTNode):
            out.append(v)
        elif type(v) in (list, tuple):
            out.extend(x for x in v if isinstance(x, libcst.CSTNode))
    return out


def walk(node: Any) -> Iterator[tuple[Any, Any]]:
    """(node, parent) for `node` (parent None) and everything below it, parents first (no recursion: any depth)."""
    stack: list[tuple[Any, Any]] = [(node, None)]
    while stack:
        n, parent = stack.pop()
        yield n, parent
        stack.extend((c, n) for c in reversed(children(n)))


def _positions(module: Any, wrapper: Any, provider: Any) -> Mapping[Any, Any]:
    """Every node's range from libcst's PositionProvider. MetadataWrapper.resolve walks the whole tree once for the
    batchable providers (none here) before the provider's own code-generation pass: the provider is run alone
    when this libcst has the hooks it is built from, and through the wrapper otherwise (same ranges)."""
    try:
        p = provider()
        p._gen_impl(module)
        return p._computed
    except (AttributeError, TypeError):
        return wrapper(module, unsafe_skip_copy=True).resolve(provider)


def source_of(parsed: Parsed, node: Any) -> str | None:
    """A node's source text as written (its syntactic range), or None when it is not of this parse."""
    r = parsed.pos.get(node)
    if r is None:
        return None
    lines = _lines(parsed.source)
    (l1, c1), (l2, c2) = (r.start.line, r.start.column), (r.end.line, r.end.column)
    if l1 == l2:
        return lines[l1 - 1][c1:c2] if l1 <= len(lines) else ""
    return lines[l1 - 1][c1:] + "".join(lines[l1:l2 - 1]) + (lines[l2 - 1][:c2] if l2 <= len(lines) else "")


@lru_cache(maxsize=8)
def _lines(source: str) -> list[str]:
    """Lines as libcst counts them (\\n, \\r\\n and \\r end one; not str.splitlines' \\f, \\x1c, ...), ends kept."""
    import re

    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z", source)


def _diagnosis(source: str) -> ParserSyntaxError | None:
    """CPython's own words and place for a text libcst rejects ("'(' was never closed" at the parenthesis,
    where libcst's tokenizer reports "expected one of ..." a line later), when CPython rejects it too. Only a
    diagnosis: compile() with PyCF_ONLY_AST builds no code object and runs nothing; the tree is dropped."""
    import ast

    try:
        compile(source, "<memlint>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as err:
        return ParserSyntaxError(err.msg, err.lineno or 1, max((err.offset or 1) - 1, 0))
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


def _first_line(message: str) -> str:
    """libcst's messages carry the offending line and a caret under it: the first line says what is wrong."""
    return message.strip().splitlines()[0] if message.strip() else "invalid syntax"
