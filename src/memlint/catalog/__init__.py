"""Model facts: exact parameter counts and shapes, from the bundled catalog or a local config.

Resolution order: a local directory with config.json -> the local Hugging Face cache
(offline) -> the bundled catalog -> a clear error naming the closest known ids.
Never the network, never trust_remote_code, never torch on this path.
"""

from __future__ import annotations

import os
from pathlib import Path

from memlint.catalog.local import spec_from_config_file
from memlint.catalog.spec import Linear, ModelSpec, catalog_entry, closest_ids, entries, known_ids
from memlint.errors import MemlintError

__all__ = ["Linear", "ModelSpec", "catalog_entry", "closest_ids", "entries", "known_ids", "resolve"]


def _hf_cache_dirs() -> list[Path]:
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"])]
    home = Path(env.get("HF_HOME", Path(env.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface"))
    return [home / "hub"]


def _cached_config(model_id: str) -> Path | None:
    if "/" not in model_id:
        return None
    folder = "models--" + model_id.replace("/", "--")
    for hub in _hf_cache_dirs():
        snaps = hub / folder / "snapshots"
        if not snaps.is_dir():
            continue
        ref = hub / folder / "refs" / "main"
        candidates = [snaps / ref.read_text().strip()] if ref.is_file() else []
        candidates += sorted(snaps.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        for snap in candidates:
            if (snap / "config.json").is_file():
                return snap / "config.json"
    return None


def resolve(model: str) -> ModelSpec:
    """A model id or a local path -> its ModelSpec, never touching the network."""
    path = Path(model).expanduser()
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            raise MemlintError(f"{model}: directory has no config.json")
        return spec_from_config_file(cfg, str(path), source="local")
    if path.is_file() and path.name.endswith(".json"):
        return spec_from_config_file(path, str(path), source="local")
    cached = _cached_config(model)
    if cached is not None:
        return spec_from_config_file(cached, model, source="hf-cache")
    spec = catalog_entry(model)
    if spec is not None:
        return spec
    close = closest_ids(model)
    hint = f"; closest known: {', '.join(close)}" if close else ""
    raise MemlintError(
        f"unknown model {model!r}: not a local directory, not in the Hugging Face cache, "
        f"not in the bundled catalog{hint} (pass a local path with config.json)"
    )
