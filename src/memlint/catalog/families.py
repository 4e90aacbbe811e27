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


def config_of(model: Any, key: str | None, default: Any = None) -> Any:
    """A model's config value (dotted keys reach into attn_config / ffn_config), else its config class's default
    (families.json config_defaults), else `default`."""
    if key is None:
        return default
    node: Any = model.config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            node = None
            break
        node = node[part]
    if node is not None:
        return node
    return family(model.arch.get("model_type", ""))["config_defaults"].get(key, default)


def fact_of(model: Any, name: str) -> Any:
    """A family fact of the model, resolved against its config where it is a rule list ([{when: {key: value}, is: v}])."""
    value = family(model.arch.get("model_type", ""))[name]
    if isinstance(value, list) and value and isinstance(value[0], dict) and "is" in value[0]:
        for rule in value:
            if all(config_of(model, k, None) == v for k, v in rule.get("when", {}).items()):
                return rule["is"]
        return None
    return value


def activation_table() -> Mapping[str, Any]:
    """families.json "activations": what each MLP activation keeps for backward."""
    return _doc()["activations"]
