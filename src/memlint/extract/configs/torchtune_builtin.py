"""torchtune's built-in recipe configs (`tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device`)
for a machine without torchtune installed: the text of the config at the torchtune version the checkout pins (the
newest known when it pins none), from data/torchtune_configs.json (scripts/gen_torchtune_configs.py)."""

from __future__ import annotations

import base64
import json
import zlib
from functools import lru_cache


@lru_cache(maxsize=1)
def _table() -> dict[str, list[list[str]]]:
    from memlint.data import load

    doc = load("torchtune_configs.json")
    return json.loads(zlib.decompress(base64.b64decode(doc["configs_zlib_b64"])))


def _key(tag: str) -> tuple[int, ...]:
    parts = tag.lstrip("v").split(".")
    return tuple(int(p) if p.isdigit() else 0 for p in parts[:3])


def builtin_config(name: str) -> tuple[str, str] | None:
    """(text, the tag range it was read at) of torchtune's built-in config `name` at the pinned version: the text of
    the run of tags holding that version, else the newest run that starts at or before it; None for a name torchtune
    never shipped."""
    from memlint.library.versions import installed_version

    runs = _table().get(name.strip().removesuffix(".yaml"))
    if not runs:
        return None
    version = installed_version("torchtune")
    pick = runs[-1]
    if version:
        want = _key(version)
        before = [r for r in runs if _key(r[0]) <= want]
        pick = next((r for r in before if _key(r[0]) <= want <= _key(r[1])), before[-1] if before else runs[0])
    first, last, text = pick
    return text, first if first == last else f"{first}..{last}"
