"""Abstract values into a plan field's type: each conversion returns the plain value or raises
`_Unconvertible` with the reason (Builder.put notes it), and the helpers every group of fields uses
(alternatives of a value, a library default, a map over constants).
"""

from __future__ import annotations

from typing import Any, Callable

from memlint.extract.objects import dtype_of
from memlint.extract.values import Alts, Const, Unknown, flatten
from memlint.library.defaults import default as library_default


class _Unconvertible(Exception):
    pass


def _alts(vals: list) -> Any:
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return vals[0] if len(vals) == 1 else Alts(tuple(vals))


def _libc(cls: str, attr: str, line: int | None) -> Any:
    d = library_default(cls, attr)
    if d is None:
        return Unknown(f"no library default for {cls}.{attr}")
    return Const(d.value, "library-default", line, (d.why,))


def _map_const(v: Any, fn: Callable) -> Any:
    out = []
    for x in flatten(v):
        if isinstance(x, Const):
            try:
                out.append(x.with_value(fn(x.value)))
            except Exception:
                out.append(Unknown("a value memlint could not read"))
        else:
            out.append(x)
    return _alts(out)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (_INF, -_INF) or v != int(v):
        raise _Unconvertible(f"{v!r} is not an integer")
    return int(v)


_INF = float("inf")


def _bool(v: Any) -> bool:
    if isinstance(v, str) and v == "unsloth":
        return True
    if not isinstance(v, (bool, int)) and v is not None:
        raise _Unconvertible(f"{v!r} is not a boolean")
    return bool(v)


def _dtype(v: Any) -> str:
    d = dtype_of(v)
    if d is None:
        raise _Unconvertible(f"dtype {v!r}")
    return d


def _targets(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple, set)) and all(isinstance(x, str) for x in v):
        return list(v)
    raise _Unconvertible("target_modules")
