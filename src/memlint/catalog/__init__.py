"""Model facts: exact parameter counts and shapes, from the bundled catalog or a local config.

Resolution order: a local directory with config.json -> the local Hugging Face cache
(offline) -> the bundled catalog -> a clear error naming the closest known ids.
Never the network, never trust_remote_code, never torch on this path.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from memlint.errors import MemlintError


@dataclass(frozen=True)
class Linear:
    """One linear projection repeated `count` times (once per layer, or per expert)."""

    name: str
    in_features: int
    out_features: int
    bias: bool
    count: int

    @property
    def params(self) -> int:
        return (self.in_features * self.out_features + (self.out_features if self.bias else 0)) * self.count


@dataclass(frozen=True)
class ModelSpec:
    """What memory accounting needs to know about a model, all of it exact."""

    id: str
    family: str
    model_type: str
    params: int
    groups: Mapping[str, int]  # embeddings, lm_head, norms, linear, experts, other
    tied_embeddings: bool
    linears: tuple[Linear, ...]  # lm_head included, under the name "lm_head"
    arch: Mapping[str, Any]
    config: Mapping[str, Any] = field(default_factory=dict)
    torch_dtype: str = "float32"
    source: str = "catalog"  # catalog | local | hf-cache
    text_only: bool = False

    # Convenience views over `arch`, named as the formulas name them.
    @property
    def hidden(self) -> int:
        return self.arch["hidden_size"]

    @property
    def layers(self) -> int:
        return self.arch["num_layers"]

    @property
    def vocab(self) -> int:
        return self.arch["vocab_size"]

    @property
    def heads(self) -> int:
        return self.arch["num_heads"]

    @property
    def kv_heads(self) -> int:
        return self.arch["num_kv_heads"]

    @property
    def head_dim(self) -> int:
        return self.arch["head_dim"]

    @property
    def intermediate(self) -> int:
        return self.arch["intermediate_size"]

    def layer_linears(self) -> tuple[Linear, ...]:
        return tuple(l for l in self.linears if l.name != "lm_head")

    @property
    def lm_head(self) -> Linear | None:
        return next((l for l in self.linears if l.name == "lm_head"), None)

    @property
    def quantizable_params(self) -> int:
        """Parameters bitsandbytes replaces with 4/8-bit layers: the Linear weights
        inside the blocks. Embeddings, norms, lm_head and biases stay in compute dtype."""
        return sum(l.in_features * l.out_features * l.count for l in self.layer_linears())


def _spec_from_entry(model_id: str, entry: Mapping[str, Any], source: str = "catalog") -> ModelSpec:
    linears = tuple(
        Linear(name, d["in"], d["out"], d["bias"], d["count"])
        for name, d in entry["linear_modules"].items()
    )
    return ModelSpec(
        id=model_id,
        family=entry.get("family", entry["model_type"]),
        model_type=entry["model_type"],
        params=entry["params"],
        groups=dict(entry["groups"]),
        tied_embeddings=entry["tied_embeddings"],
        linears=linears,
        arch=dict(entry["arch"]),
        config=dict(entry.get("config", {})),
        torch_dtype=entry.get("torch_dtype", "float32"),
        source=source,
        text_only=entry.get("text_only", False),
    )


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Any]:
    text = resources.files("memlint.catalog").joinpath("models.json").read_text("utf-8")
    return json.loads(text)["models"]


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Lower-cased id or alias -> canonical id."""
    idx: dict[str, str] = {}
    for mid, entry in _catalog().items():
        idx[mid.lower()] = mid
        for alias in entry.get("aliases", []):
            idx[alias.lower()] = mid
    return idx


def known_ids() -> list[str]:
    return sorted(_catalog())


_UNSLOTH_QUANT = re.compile(r"^unsloth/(?P<name>.+?)(?:-unsloth)?-bnb-4bit$")


def _unsloth_base(key: str) -> str | None:
    """unsloth's pre-quantized mirrors (unsloth/qwen3-14b-unsloth-bnb-4bit) keep the shapes of the
    checkpoint they quantize: the canonical id whose name (or an alias's) is the same, when only one is."""
    m = _UNSLOTH_QUANT.match(key)
    if m is None:
        return None
    name = m.group("name")
    hits = {c for k, c in _index().items() if k.rsplit("/", 1)[-1] == name}
    return hits.pop() if len(hits) == 1 else None


def catalog_entry(model_id: str) -> ModelSpec | None:
    key = model_id.strip().lower()
    canonical = _index().get(key)
    if canonical is None:
        canonical = _unsloth_base(key)
        if canonical is None:
            return None
        return _spec_from_entry(model_id.strip(), _catalog()[canonical])
    entry = _catalog()[canonical]
    # Report the id the user named (an -Instruct alias is not its base), spelled as published.
    shown = next(a for a in [canonical, *entry.get("aliases", [])] if a.lower() == key)
    return _spec_from_entry(shown, entry)


def closest_ids(model_id: str, n: int = 3) -> list[str]:
    names = list(_index())
    key = model_id.lower()
    hits = difflib.get_close_matches(key, names, n=n, cutoff=0.4)
    if not hits:  # match on the last path component: "llama-3.1-8b" vs "meta-llama/llama-3.1-8b"
        tail = {n.rsplit("/", 1)[-1]: n for n in names}
        hits = [tail[h] for h in difflib.get_close_matches(key.rsplit("/", 1)[-1], list(tail), n=n, cutoff=0.4)]
    seen: list[str] = []
    for h in hits:
        canonical = _index()[h]
        # Show the spelling the user is likely to type: the alias hit, not always the canonical id.
        shown = next((a for a in [canonical, *_catalog()[canonical]["aliases"]] if a.lower() == h), canonical)
        if shown not in seen:
            seen.append(shown)
    return seen


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
    from memlint.catalog.local import spec_from_config_file

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
