"""Library defaults with version ranges (data/library_defaults.json): what a class's field is when
a script leaves it out, under the installed version of its library (the newest known if absent)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memlint import data
from memlint.library.versions import in_range, installed_version


@dataclass(frozen=True)
class Default:
    """One library default: the value and the words that say where it came from."""

    value: Any
    why: str


def _table() -> dict:
    return data.load("library_defaults.json")["classes"]


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
