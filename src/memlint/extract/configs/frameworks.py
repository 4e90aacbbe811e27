"""Framework facts from data/frameworks.json: known keys, version-ranged defaults, substitutions.

Also the unknown-key check, which is tolerant: only near-misses and keys that belong to
another framework are reported, so a real config with a key memlint has not heard of stays clean.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable

from memlint import data

from memlint.library.versions import in_range, installed_version, shown_version
from memlint.library.defaults import Default
from memlint.plan import Diagnostic, Span

_CLOSE = 0.85  # difflib ratio above which an unknown key is taken for a typo of a known one


def table() -> dict:
    return data.load("frameworks.json")["frameworks"]


def framework(name: str) -> dict:
    return table()[name]


def default(name: str, key: str) -> Default | None:
    """The framework's default for `key` under the installed (or newest known) version."""
    fw = framework(name)
    package = fw["package"]
    version = installed_version(package)
    for cand in fw.get("defaults", {}).get(key, ()):
        if in_range(version, cand.get("versions")):
            shown = shown_version(package)
            return Default(cand["value"], f"{name} default {key}={cand['value']!r} in {shown}: {cand['ref']}")
    return None


def substitution(name: str, key: str) -> tuple[Any, str]:
    entry = framework(name)["substitutions"][key]
    return entry["value"], entry["ref"]


def check_keys(name: str, keys: Iterable[tuple[str, Span | None]], known: Iterable[str] | None = None,
               misplaced: dict[str, str] | None = None, where: str = "", policy: str | None = None) -> list[Diagnostic]:
    """unknown-key diagnostics for keys the framework ignores that look like a mistake.

    `policy` overrides the framework's for one section: "full" (the framework refuses any other
    key), "closed" (it silently drops any other key: pydantic models) or "close-match"."""
    fw = framework(name)
    known_set = set(known if known is not None else fw["keys"])
    moved = fw.get("misplaced", {}) if misplaced is None else misplaced
    label = f"{name} {where}key".replace("  ", " ")
    if policy is None:  # nested sections keep the tolerant policy unless the framework says otherwise
        policy = fw.get("key_policy") if not where else fw.get("nested_policy", "close-match")
    strict = policy in ("full", "closed")
    out = []
    for key, span in keys:
        if not isinstance(key, str) or key in known_set:
            continue
        if key in moved:
            out.append(Diagnostic("unknown-key", f"unknown {label} '{key}' (did you mean '{moved[key]}'?)", span))
            continue
        close = difflib.get_close_matches(key, known_set, n=1, cutoff=_CLOSE)
        if close:
            out.append(Diagnostic("unknown-key", f"unknown {label} '{key}' (did you mean '{close[0]}'?)", span))
        elif strict:
            why = "refuses to start with it" if policy == "full" else "ignores it (no such field in its config model)"
            out.append(Diagnostic("unknown-key", f"unknown {label} '{key}': {name} {why}", span))
    return out
