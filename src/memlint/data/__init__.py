"""The packaged facts that drift with library versions (JSON files beside this module), read once.

Every data file goes through `load`; what is computed from one is cached with `derived`, so a
test can swap a document with `overridden` and see every table built from it change (adding a
trainer, an optimizer or an attention implementation is one edit of one file).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from functools import lru_cache
import os
from typing import Any, Callable, Iterator, TypeVar

_overrides: dict[str, Any] = {}
_derived: list[Any] = []

F = TypeVar("F", bound=Callable[..., Any])


@lru_cache(maxsize=None)
def _read(name: str) -> Any:
    # The files sit beside this module (package-data); a plain read, not importlib.resources,
    # whose import alone costs a warm `memlint check` more than reading every data file.
    with open(os.path.join(os.path.dirname(__file__), name), encoding="utf-8") as f:
        return json.load(f)


def load(name: str) -> Any:
    """The parsed document `name` ("optimizers.json"): the packaged file, or a test's override."""
    if name in _overrides:
        return _overrides[name]
    return _read(name)


def derived(fn: F) -> F:
    """Cache `fn` (a table built from data documents) until a document is overridden."""
    cached = lru_cache(maxsize=None)(fn)
    _derived.append(cached)
    return cached  # type: ignore[return-value]


def _clear() -> None:
    for cached in _derived:
        cached.cache_clear()


@contextmanager
def overridden(name: str, doc: Any) -> Iterator[None]:
    """Read `doc` in place of data file `name` inside the block (for tests)."""
    saved = _overrides.get(name, _MISSING)
    _overrides[name] = doc
    _clear()
    try:
        yield
    finally:
        if saved is _MISSING:
            _overrides.pop(name, None)
        else:
            _overrides[name] = saved
        _clear()


_MISSING = object()
