"""One parse per source text, shared by extraction and the fixes.

`memlint check` reads a script (extract/) and then locates each finding's fix in the same
text (fix/): both go through `parse`, cached by text, which gives the tree of
extract/syntax.py (CPython's `ast` in libcst's node shapes), each node's syntactic range and
each node's parent, in source order (the fixes walk it instead of running a visitor).
"""

from __future__ import annotations

from functools import lru_cache

from memlint.extract.syntax import Parsed, ParserSyntaxError, Pos, Range
from memlint.extract import syntax

__all__ = ["Parsed", "ParserSyntaxError", "Pos", "Range", "parse"]


@lru_cache(maxsize=8)
def parse(source: str) -> Parsed:
    """Raises ParserSyntaxError (not cached); RecursionError on nesting deeper than Python's
    recursion limit allows walking."""
    return syntax.parse(source)
