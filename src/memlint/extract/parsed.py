"""One libcst parse per source text, shared by extraction and the fixes, with positions
computed by a lean codegen pass.

`memlint check` reads a script (extract/) and then locates each finding's fix in the same
text (fix/): parsing and resolving positions twice cost as much as the whole extraction on
a long script, so both go through `parse`, cached by text (libcst trees are immutable).
The same pass records each node's parent, in source order, which the fixes walk instead
of running a visitor of their own.

libcst's `PositionProvider` spends most of its time splitting every token with a regex and
building frozen dataclasses for 16k nodes of an 800-line script. `_positions` runs the same
codegen hooks with a counting fast path and tuples, giving the same ranges (a test compares
them on every fixture) in about a third of the time; any surprise from a future libcst falls
back to the provider.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Mapping, NamedTuple, Optional

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

_NEWLINE = re.compile(r"\r\n?|\n")


class Pos(NamedTuple):
    """libcst.metadata.CodePosition's fields: 1-based line, 0-based column."""

    line: int
    column: int


class Range(NamedTuple):
    """libcst.metadata.CodeRange's fields."""

    start: Pos
    end: Pos


class Parsed(NamedTuple):
    module: cst.Module
    pos: Mapping[cst.CSTNode, Range]  # each node's syntactic range, as PositionProvider gives it
    parent: Mapping[cst.CSTNode, cst.CSTNode]  # every node but the module, in source order


@lru_cache(maxsize=8)
def parse(source: str) -> Parsed:
    """Raises libcst.ParserSyntaxError (not cached)."""
    tree = cst.parse_module(source)
    try:
        return Parsed(tree, *_positions(tree))
    except Exception:  # a libcst whose codegen hooks changed: the slower public way
        wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
        pos, parent = wrapper.resolve(PositionProvider), wrapper.resolve(ParentNodeProvider)
        order = {n: parent[n] for n in pos if n in parent}  # PositionProvider's order is codegen's
        return Parsed(tree, pos, order)


def _positions(module: cst.Module) -> tuple[dict[cst.CSTNode, Range], dict[cst.CSTNode, cst.CSTNode]]:
    from libcst._nodes.internal import CodegenState

    computed: dict[cst.CSTNode, Range] = {}
    parent: dict[cst.CSTNode, cst.CSTNode] = {}

    class State(CodegenState):
        # libcst calls these hooks around every node's codegen and inside it (the syntactic
        # range that leaves out leading and trailing whitespace the node owns)
        def __init__(self) -> None:
            super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
            self.line = 1
            self.column = 0
            self.stack: list[Pos] = []
            self.nodes: list[cst.CSTNode] = []

        def _advance(self, value: str) -> None:
            if "\n" not in value and "\r" not in value:
                self.column += len(value)
                return
            segments = _NEWLINE.split(value)
            self.line += len(segments) - 1
            self.column = len(segments[-1])

        def add_indent_tokens(self) -> None:
            self.tokens.extend(self.indent_tokens)
            for token in self.indent_tokens:
                self._advance(token)

        def add_token(self, value: str) -> None:
            self.tokens.append(value)
            self._advance(value)

        def before_codegen(self, node: cst.CSTNode) -> None:
            self.stack.append(Pos(self.line, self.column))
            if self.nodes:
                parent[node] = self.nodes[-1]
            self.nodes.append(node)

        def after_codegen(self, node: cst.CSTNode) -> None:
            start = self.stack.pop()
            self.nodes.pop()
            if node not in computed:
                computed[node] = Range(start, Pos(self.line, self.column))

        def record_syntactic_position(self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None,
                                      end_node: Optional[cst.CSTNode] = None) -> "_Syntactic":
            return _Syntactic(self, node, start_node, end_node)

    class _Syntactic:
        # a class, not @contextmanager: libcst enters one per statement and expression
        __slots__ = ("state", "node", "start_node", "end_node", "start")

        def __init__(self, state: State, node: cst.CSTNode, start_node: Optional[cst.CSTNode],
                     end_node: Optional[cst.CSTNode]) -> None:
            self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

        def __enter__(self) -> None:
            self.start = Pos(self.state.line, self.state.column)

        def __exit__(self, *exc: object) -> None:
            start = computed[self.start_node].start if self.start_node is not None else self.start
            end = computed[self.end_node].end if self.end_node is not None else Pos(self.state.line, self.state.column)
            computed[self.node] = Range(start, end)

    module._codegen(State())
    return computed, parent
