"""torchtune's built-in recipe configs (`tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device`)
for a machine without torchtune installed: the text of the config at the torchtune version the checkout pins (the
newest known when it pins none), from data/torchtune_configs.json (scripts/gen_torchtune_configs.py)."""

from __future__ import annotations

import base64
import json
import zlib
from functools import lru_cache


@lru_cache(maxsize=1)
def _table_tags() -> list[str]:
    from memlint.data import load

    return list(load("torchtune_configs.json")["tags"])


@lru_cache(maxsize=1)
def _table() -> dict[str, list[list[str]]]:
    from memlint.data import load

    doc = load("torchtune_configs.json")
    return json.loads(zlib.decompress(base64.b64decode(doc["configs_zlib_b64"])))


def _key(tag: str) -> tuple[int, ...]:
    parts = tag.lstrip("v").split("+", 1)[0].split(".")  # 0.6.1+cu124: 0.6.1
    return tuple(int(p) if p.isdigit() else 0 for p in parts[:3])


def builtin_config(name: str) -> tuple[str, str] | None:
    """(text, the tag range it was read at) of torchtune's built-in config `name` at the pinned version (the newest
    unpinned); None for a name torchtune did not ship at that version."""
    from memlint.library.versions import installed_version

    runs = _table().get(name.strip().removesuffix(".yaml"))
    if not runs:
        return None
    version = installed_version("torchtune")
    pick = runs[-1] if runs[-1][1] == _table_tags()[-1] else None  # unpinned: the newest, if it is still shipped
    if version:
        # the release the version is: the newest tag at or before it; the config's text of the run holding that tag
        # (none: the config did not exist at that release, as `tune run` would say)
        tags = [t for t in _table_tags() if _key(t) <= _key(version)]
        pick = next((r for r in runs if tags and _key(r[0]) <= _key(tags[-1]) <= _key(r[1])), None)
    if pick is None:
        return None
    first, last, text = pick
    return text, first if first == last else f"{first}..{last}"


def known_config(name: str) -> bool:
    """Whether torchtune shipped a built-in config of this name at any version memlint bundles."""
    return bool(_table().get(name.strip().removesuffix(".yaml")))
