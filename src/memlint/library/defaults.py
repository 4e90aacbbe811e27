"""Library defaults with version ranges (data/library_defaults.json): what a class's field is when
a script leaves it out, under the installed version of its library (the newest known if absent)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memlint import data
from memlint.library.versions import checkout_versions, in_range, installed_version, shown_version


@dataclass(frozen=True)
class Default:
    """One library default: the value and the words that say where it came from."""

    value: Any
    why: str


def _table() -> dict:
    return data.load("library_defaults.json")["classes"]


def _entry(cls: str, field: str) -> tuple[str, str, dict] | None:
    """(class, package, entry) of the data entry for `field` of `cls` (or of a class it inherits from) that holds at
    the installed versions, or None."""
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
            return cls, package, cand
        cls = entry.get("inherits")
    return None


def default(cls: str, field: str) -> Default | None:
    """The default of `field` for library class `cls` ("trl.SFTConfig"), or None if unknown."""
    hit = _entry(cls, field)
    if hit is None:
        return None
    owner, package, cand = hit
    return Default(cand["value"], f"{owner}.{field} default in {shown_version(package)}: {cand.get('ref', '')}".rstrip(": "))


def declared_fields(cls: str) -> frozenset[str]:
    """Every field name library dataclass `cls` declares that memlint knows of, in any version
    (its defaults and its `declared` list): where HfArgumentParser sends a config key."""
    entry = _table().get(cls)
    if entry is None:
        return frozenset()
    return frozenset(entry["fields"]) | frozenset(entry.get("declared", ()))


def none_fallback(cls: str, field: str) -> Default | None:
    """What the trainer takes for `field` of `cls` left None at the installed version, where its entry in
    data/library_defaults.json says None falls back to it (`"none_falls_back": true`); None elsewhere (None is then
    the value: no truncation)."""
    hit = _entry(cls, field)
    if hit is None or not hit[2].get("none_falls_back"):
        return None
    owner, package, cand = hit
    return Default(cand["value"], f"{owner}.{field} None: the trainer falls back to {cand['value']} in "
                                  f"{shown_version(package)} ({cand.get('ref', '')})")


def has_field(cls: str, name: str) -> Default | None:
    """Whether library config class `cls` has field `name` at the installed version (the newest known if absent), as
    a script that probes it finds (`name in {f.name for f in fields(cls)}`): False where the field was removed or
    not yet added (data/library_api.json), True for a field memlint reads (its defaults or `declared` list, its
    bases' too); None for any other name (memlint's tables do not list every field)."""
    from memlint.library import api

    for probe, present in ((api.removed_config_field, False), (api.added_config_field, True)):
        hit = probe(cls, name)
        if hit is not None:
            package, versions, ref = hit
            inside = in_range(installed_version(package), versions)
            if inside != present:
                return Default(False, f"{cls} has no field {name} in {shown_version(package)} ({ref})")
    table, seen, cur = _table(), set(), cls
    while cur and cur not in seen and cur in table:
        seen.add(cur)
        if name in declared_fields(cur):
            return Default(True, f"{cls}.{name} is a field of {cls}")
        cur = table[cur].get("inherits")
    return None


def lora_default_targets(model_type: str) -> Default | None:
    """peft's target_modules for a LoraConfig that leaves them out, for a base model of `model_type`
    (None: peft has no default for it and raises)."""
    table = data.load("library_defaults.json")["lora_default_targets"]
    version = installed_version(table["package"])
    for entry in table["entries"]:
        if not in_range(version, entry.get("versions")):
            continue
        targets = entry["targets"].get(model_type)
        if targets is None:
            return None
        shown = shown_version("peft")
        value = tuple(targets) if isinstance(targets, list) else targets
        return Default(value, f"peft's default target_modules for {model_type} in {shown}: {entry['ref']}")
    return None


def peft_task_modules_to_save(task_type: str | None) -> tuple[str, ...]:
    """The module names peft adds to modules_to_save for `task_type` (SEQ_CLS, TOKEN_CLS: the classifier)."""
    table = data.load("library_defaults.json")["peft_task_modules_to_save"]
    version = installed_version(table["package"])
    for entry in table["entries"]:
        if in_range(version, entry.get("versions")):
            return tuple(entry["names"].get(task_type or "", ()))
    return ()


def run_default(name: str) -> Default:
    """What the estimator takes for training choice `name` (a Setup field) when nobody made it
    (data/library_defaults.json "run_defaults"): a library default at the installed versions, or
    memlint's own stated choice. One table for `estimate`, `plan` and `%memcheck`."""
    entry = data.load("library_defaults.json")["run_defaults"][name]
    if "from" in entry:
        cls, field = entry["from"]
        found = default(cls, field)
        if found is None:  # a checkout pins a version older than the argument (GaLore's rank before 4.39): the installed one's
            with checkout_versions(()):
                found = default(cls, field)
        if found is None:  # the table names a default it does not hold: a data bug, caught by the tests
            raise KeyError(f"run_defaults.{name}: no {cls}.{field} default")
        return found
    return Default(entry["value"], f"memlint's default: {entry['ref']}")


def run_default_names() -> tuple[str, ...]:
    return tuple(k for k in data.load("library_defaults.json")["run_defaults"] if not k.startswith("_"))
