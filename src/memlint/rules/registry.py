"""All rules, in code order, and selection by code, prefix or ALL.

Rules are found, as Fixit finds them: every concrete Rule subclass (one with a code) defined in
a module of this package. A rule module needs no list to be added to."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import Iterable

from memlint.errors import MemlintError
from memlint.rules.base import Rule


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    import memlint.rules as package

    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Rule) and obj.__module__ == module.__name__ \
                    and "code" in vars(obj):
                if obj.code in found and found[obj.code] is not obj:
                    raise RuntimeError(f"two rules with code {obj.code}: {found[obj.code].__name__}, {obj.__name__}")
                found[obj.code] = obj
    return tuple(sorted(found.values(), key=lambda r: r.code))


def lookup(code_or_name: str) -> type[Rule]:
    key = code_or_name.strip()
    for r in all_rules():
        if key.upper() == r.code or key.lower() == r.name:
            return r
    raise MemlintError(f"unknown rule {code_or_name!r} (see memlint rule --all)")


def _matches(selector: str, code: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


def check_selectors(selectors: Iterable[str], where: str) -> list[str]:
    out = []
    codes = [r.code for r in all_rules()]
    for raw in selectors:
        s = raw.strip().upper()
        if not s:
            continue
        if s != "ALL" and not any(c.startswith(s) for c in codes):
            raise MemlintError(f"{where}: unknown rule selector {raw!r} (codes like MEM101, prefixes like MEM1, or ALL)")
        out.append(s)
    return out


def select(select: Iterable[str] | None, extend: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[type[Rule]]:
    """Ruff's resolution: the most specific selector wins, ignore beats select at a tie."""
    chosen = []
    sel = list(select) if select is not None else None
    extend, ignore = list(extend), list(ignore)
    for r in all_rules():
        best_on = -1
        if sel is None:
            best_on = 0 if r.default_enabled else -1
        for s in (sel or []) + extend:
            if _matches(s, r.code):
                best_on = max(best_on, 0 if s == "ALL" else len(s))
        best_off = max((0 if s == "ALL" else len(s) for s in ignore if _matches(s, r.code)), default=-1)
        if best_on >= 0 and best_on > best_off:
            chosen.append(r)
    return chosen
