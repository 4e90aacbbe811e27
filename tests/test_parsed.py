"""memlint.extract.parsed computes libcst's positions and parents in one lean codegen pass;
they must equal what libcst's own PositionProvider and ParentNodeProvider give."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from memlint.extract.parsed import _positions, parse

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*ROOT.glob("fixtures/**/*.py"), *ROOT.glob("src/memlint/**/*.py")])

TRICKY = '''\
# -*- coding: utf-8 -*-
"""doc
string"""
@decorator(a,
           b)
def f(x: int = (1 +
                2), *, y="""multi
line""") -> None:
    if x: return [i for i in range(3) if i]
    with open(x) as fh, open(y) as gh:  # comment
        pass
    z = {**{"a": 1}, 'b': lambda q: q}\r
    return f"{x!r:>{y}}" \\
        "tail"
class C(Base, metaclass=M):
    attr: int = 3
'''


def _same(module: cst.Module) -> None:
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    want_pos = wrapper.resolve(PositionProvider)
    want_parent = wrapper.resolve(ParentNodeProvider)
    pos, parent = _positions(module)
    assert len(pos) == len(want_pos)
    for node, r in want_pos.items():
        got = pos[node]
        assert (got.start.line, got.start.column, got.end.line, got.end.column) == \
               (r.start.line, r.start.column, r.end.line, r.end.column), type(node).__name__
    assert parent == dict(want_parent)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_positions_and_parents_match_libcst(path: Path) -> None:
    try:
        module = cst.parse_module(path.read_text(encoding="utf-8"))
    except cst.ParserSyntaxError:
        pytest.skip("fixture that does not parse")
    _same(module)


def test_tricky_source() -> None:
    _same(cst.parse_module(TRICKY))


def test_parents_in_source_order_and_cached() -> None:
    first = parse(TRICKY)
    assert parse(TRICKY) is first
    lines = [first.pos[n].start for n in first.parent if isinstance(n, cst.Name)]
    assert lines == sorted(lines)
