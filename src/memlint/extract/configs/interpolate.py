"""OmegaConf `${...}` interpolation resolved statically, as llm-foundry and oumi load their YAML.

`${variables.max_seq_len}` is an absolute path from the root, `${.x}` / `${..x}` are relative
to the node holding the reference; a string with references inside ("run_${x}") becomes a
string. Resolvers (`${oc.env:HOME}`) and references to nothing stay unresolved: the reader
names them unknown, never guesses. Nothing is ever evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from memlint.extract.configs.document import Document
from memlint.vocab import ascii_digits

_REF = re.compile(r"\$\{([^${}]*)\}")
_WHOLE = re.compile(r"^\$\{([^${}]*)\}$")
_MAX_DEPTH = 16


@dataclass
class Resolution:
    """What interpolation did: each resolved path with how, each unresolved one with why."""

    how: dict[tuple, str] = field(default_factory=dict)
    unresolved: dict[tuple, str] = field(default_factory=dict)


class _Unresolved(Exception):
    pass


def resolve(doc: Document) -> Resolution:
    """Resolve every `${...}` in `doc.data` in place; the key positions stay those of the file."""
    res = Resolution()
    if not doc.ok:
        return res
    raw = doc.data
    cache: dict[tuple, Any] = {}

    def value_at(path: tuple, stack: tuple) -> Any:
        if path in cache:
            return cache[path]
        if path in stack or len(stack) > _MAX_DEPTH:
            raise _Unresolved(f"${{{'.'.join(map(str, path))}}} refers to itself")
        cur: Any = raw
        for part in path:
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            elif isinstance(cur, list) and isinstance(part, int) and -len(cur) <= part < len(cur):
                cur = cur[part]
            else:
                raise _Unresolved(f"${{{'.'.join(map(str, path))}}} names no key of the config")
        out = interp(cur, path, stack + (path,))
        cache[path] = out
        return out

    def target(ref: str, at: tuple) -> tuple:
        ref = ref.strip()
        if not ref or ":" in ref:
            raise _Unresolved(f"${{{ref}}} is a resolver, evaluated only at run time")
        if ref.startswith("."):
            dots = len(ref) - len(ref.lstrip("."))
            base = at[: max(0, len(at) - dots)]  # one dot: the node holding the key, two: its parent
            rest = ref[dots:]
        else:
            base, rest = (), ref
        parts = [p for p in re.split(r"\.|\[|\]", rest) if p != ""]
        return base + tuple(int(p) if ascii_digits(p) else p for p in parts)

    def interp(v: Any, at: tuple, stack: tuple) -> Any:
        if isinstance(v, dict):
            return {k: interp(x, at + (k,), stack) for k, x in v.items()}
        if isinstance(v, list):
            return [interp(x, at + (i,), stack) for i, x in enumerate(v)]
        if not isinstance(v, str) or "${" not in v:
            return v
        whole = _WHOLE.match(v)
        if whole:
            t = target(whole.group(1), at)
            return value_at(t, stack)
        return _REF.sub(lambda m: str(value_at(target(m.group(1), at), stack)), v)

    def walk(v: Any, at: tuple) -> Any:
        if isinstance(v, dict):
            return {k: walk(x, at + (k,)) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, at + (i,)) for i, x in enumerate(v)]
        if not isinstance(v, str) or "${" not in v:
            return v
        try:
            out = interp(v, at, (at,))
        except _Unresolved as exc:
            res.unresolved[at] = str(exc)
            return v
        res.how[at] = f"{v} -> {out!r}"
        return out

    try:
        doc.data = walk(raw, ())
    except RecursionError:
        res.unresolved[()] = "interpolation nested too deeply"
    return res
