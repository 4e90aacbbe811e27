"""Library defaults with version ranges, read from data/library_defaults.json.

The installed version of each library decides which default applies; a library that is not
installed gets its newest known default. Versions come from package metadata, never imports.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

_DATA = Path(__file__).resolve().parent.parent / "data" / "library_defaults.json"
_MISSING = object()


@dataclass(frozen=True)
class Default:
    """One library default: the value and the words that say where it came from."""

    value: Any
    why: str


def _vtuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts) or (0,)


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    a = a + (0,) * (n - len(a))
    b = b + (0,) * (n - len(b))
    return (a > b) - (a < b)


def in_range(version: str | None, spec: str | None) -> bool:
    """Whether `version` satisfies `spec` (">=4.32,<4.54"); None means the newest version."""
    if not spec:
        return True
    for clause in spec.split(","):
        clause = clause.strip()
        m = re.match(r"(>=|<=|==|>|<)\s*(.+)", clause)
        if not m:
            raise ValueError(f"bad version range {spec!r}")
        op, bound = m.group(1), _vtuple(m.group(2))
        if version is None:  # newest known: only lower bounds hold
            if op in ("<", "<=", "=="):
                return False
            continue
        c = _cmp(_vtuple(version), bound)
        ok = {">=": c >= 0, "<=": c <= 0, "==": c == 0, ">": c > 0, "<": c < 0}[op]
        if not ok:
            return False
    return True


_PINNED: dict[str, str | None] = {}


@contextmanager
def pinned_versions(versions: dict[str, str | None]):
    """Read defaults as if these versions were installed (None: not installed). For tests."""
    saved = dict(_PINNED)
    _PINNED.update(versions)
    try:
        yield
    finally:
        _PINNED.clear()
        _PINNED.update(saved)


def installed_version(package: str) -> str | None:
    if package in _PINNED:
        return _PINNED[package]
    return _metadata_version(package)


@lru_cache(maxsize=None)
def _metadata_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken install reads as not installed
        return None


@lru_cache(maxsize=1)
def _table() -> dict:
    with open(_DATA, encoding="utf-8") as fh:
        return json.load(fh)["classes"]


def default(cls: str, field: str) -> Default | None:
    """The default of `field` for library class `cls` ("trl.SFTConfig"), or None if unknown."""
    table = _table()
    seen = set()
    while cls and cls not in seen:
        seen.add(cls)
        entry = table.get(cls)
        if entry is None:
            return None
        package = entry["package"]
        version = installed_version(package)
        for cand in entry["fields"].get(field, ()):
            if not in_range(version, cand.get("versions")):
                continue
            if not all(in_range(installed_version(p), r) for p, r in cand.get("requires", {}).items()):
                continue
            shown = f"{package} {version}" if version else f"{package} (not installed: newest known)"
            return Default(cand["value"], f"{cls}.{field} default in {shown}: {cand.get('ref', '')}".rstrip(": "))
        cls = entry.get("inherits")
    return None


def has_class(cls: str) -> bool:
    return cls in _table()
