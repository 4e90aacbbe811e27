"""Family facts (families.json): per model_type, the shape facts the accounting needs, and the
role of each linear projection by its name."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping


@lru_cache(maxsize=1)
def _doc() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("families.json").read_text("utf-8"))


def family(model_type: str) -> Mapping[str, Any]:
    """The family's facts, the defaults filled in (an unknown family gets the defaults)."""
    doc = _doc()
    return {**doc["default"], **doc["families"].get(model_type, {})}


def known(model_type: str) -> bool:
    return model_type in _doc()["families"]


def closed_form(model_type: str) -> bool:
    return bool(family(model_type)["closed_form"])


def linear_role(name: str) -> str:
    """attn_in | mlp_in | mlp_out | attn_out (| head for lm_head): what a projection reads."""
    if name == "lm_head":
        return "head"
    for role, names in _doc()["linear_roles"].items():
        if any(name == n or name.endswith("." + n) for n in names):
            return role
    return "attn_out"


def arch_facts(model_type: str) -> dict[str, Any]:
    """The family facts a ModelSpec's `arch` carries."""
    f = family(model_type)
    out = {"mlp": f["mlp"], "norm": f["norm"], "norms_per_layer": f["norms_per_layer"]}
    if f["encoder"]:  # only encoders carry the key: decoder entries stay as they were
        out["encoder"] = True
    if f["encoder_decoder"]:
        out["encoder_decoder"] = True
    return out


def encoder(model_type: str) -> bool:
    return bool(family(model_type)["encoder"])


def encoder_decoder(model_type: str) -> bool:
    return bool(family(model_type)["encoder_decoder"])


def vision(model_type: str) -> bool:
    """A vision-language model: a decoder with a vision tower (families.json "vision")."""
    return bool(family(model_type).get("vision"))
