"""Model facts: exact parameter counts and shapes, from the bundled catalog or a local config.

Resolution order: a local directory with config.json -> the local Hugging Face cache
(offline) -> the bundled catalog -> a local path not on this machine whose folder name is a
catalogued checkpoint's (marked as assumed: `ModelSpec.assumed_from`) -> (--online) the Hub's config.json ->
a Hub fine-tune whose name holds a catalogued base's name and size (assumed likewise) -> a checkpoint named with
its size (llm-jp-13b-v1.0): the catalogued dense decoder of that size (and family, when its name has one) in the
middle of the range, assumed likewise, the estimate saying the range -> a clear error naming the closest known ids.
Never the network (unless --online asks for a config.json: catalog/online.py), never trust_remote_code, never
torch on this path.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from memlint.catalog.local import spec_from_config_file
from memlint.catalog.spec import (Linear, ModelSpec, catalog_entry, chat_or_base_sibling, closest_ids, entries, hub_twin,
                                  known_ids, named_after_base, named_by_folder, sized_by_name)
from memlint.errors import MemlintError
from memlint import files
from memlint.files import read_bytes

__all__ = ["Linear", "ModelSpec", "catalog_entry", "closest_ids", "entries", "known_ids", "resolve"]


def _hf_cache_dirs() -> list[Path]:
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"])]
    home = Path(env.get("HF_HOME", Path(env.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface"))
    return [home / "hub"]


def _hf_cache_dirs_or_none() -> list[Path]:
    try:
        return _hf_cache_dirs()
    except RuntimeError:  # no home directory to find the cache in
        return []


def _cached_config(model_id: str) -> Path | None:
    if "/" not in model_id:
        return None
    folder = "models--" + model_id.replace("/", "--")
    for hub in _hf_cache_dirs_or_none():
        try:  # a cache is shared and may be half-written: broken links and unreadable folders are skipped
            snaps = hub / folder / "snapshots"
            if not snaps.is_dir():
                continue
            ref = hub / folder / "refs" / "main"
            candidates = [snaps / read_bytes(ref, 4096).decode("utf-8", "replace").strip()] if ref.is_file() else []
            candidates += sorted(snaps.iterdir(), key=_mtime, reverse=True)
        except OSError:
            continue
        for snap in candidates:
            if (snap / "config.json").is_file():
                return snap / "config.json"
    return None


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:  # a broken link
        return 0.0


_CACHE_DIR = re.compile(r"(?:^|[/\\])models--([A-Za-z0-9][\w.-]*)--([\w.-]+?)(?:[/\\]snapshots(?:[/\\][0-9a-f]{7,64})?)?[/\\]*$")


def hub_cache_id(path: str) -> str | None:
    """The Hub id a path into a Hugging Face cache's layout stands for (`/home/u/hub/models--meta-llama--Llama-3.1-8B/
    snapshots/8c22764…` is meta-llama/Llama-3.1-8B), when the path is not on this machine; None for any other path."""
    m = _CACHE_DIR.search(path.strip())
    return f"{m.group(1)}/{m.group(2)}" if m else None


def resolve(model: str) -> ModelSpec:
    """A model id or a local path -> its ModelSpec, never touching the network."""
    if len(model) > 1000:
        raise MemlintError(f"unknown model {model[:60]!r}…: {len(model):,} characters is no model id or path")
    try:
        path = Path(model).expanduser()
        if os.path.lexists(path) and not files.allowed(path):  # a local path outside the checked root: not read
            spec = named_by_folder(model)
            if spec is not None:
                return spec
            files.refuse_outside(path)
            raise MemlintError(f"{model}: {files.outside(path)}")
        is_dir, is_json = files.is_dir(path), files.is_file(path) and path.name.endswith(".json")
    except (OSError, RuntimeError, ValueError):  # ~nosuchuser, a name too long for the file system
        path, is_dir, is_json = Path(model), False, False
    if is_dir:
        cfg = path / "config.json"
        if not cfg.is_file():
            raise MemlintError(f"{model}: directory has no config.json")
        return spec_from_config_file(cfg, str(path), source="local")
    if is_json:
        return spec_from_config_file(path, str(path), source="local")
    with files.unguarded():  # memlint's own look-up in the Hugging Face cache, by id: not a path the checkout names
        cached = _cached_config(model)
        if cached is not None:
            return spec_from_config_file(cached, model, source="hf-cache")
    cached_id = hub_cache_id(model)
    if cached_id is not None:  # …/models--ORG--NAME/snapshots/HASH: a Hugging Face cache's copy of ORG/NAME
        try:
            spec = resolve(cached_id)
        except MemlintError:
            spec = None
        if spec is not None:
            return spec if spec.assumed_from else replace(spec, assumed_from=model)
    spec = catalog_entry(model) or named_by_folder(model)
    if spec is not None:
        return spec
    from memlint.catalog import online

    if online.enabled() and online.looks_like_repo_id(model):  # opt-in: only config.json, into the HF cache
        return spec_from_config_file(online.fetch_config(model), model, source="hub")
    spec = named_after_base(model)  # offline, a fine-tune named after its catalogued base: sized as it, said so
    if spec is not None:
        return spec
    spec = chat_or_base_sibling(model)  # offline, the base of a catalogued chat release (or the reverse), said so
    if spec is not None:
        return spec
    spec = hub_twin(model)  # a ModelScope id of the same weights as a catalogued Hugging Face id, said so
    if spec is not None:
        return spec
    spec = sized_by_name(model)  # offline, a checkpoint named with its size: a catalogued one of that size, said so
    if spec is not None:
        return spec
    close = closest_ids(model)
    hint = f"; closest known: {', '.join(close)}" if close else ""
    opt_in = f"; {online.HINT}" if online.looks_like_repo_id(model) else ""
    raise MemlintError(
        f"unknown model {model!r}: not a local directory, not in the Hugging Face cache, "
        f"not in the bundled catalog{hint} (pass a local path with config.json{opt_in})"
    )
