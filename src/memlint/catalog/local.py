"""A ModelSpec from a config.json on disk (a local checkpoint or the HF cache).

A config whose shapes equal a catalog entry's reuses that entry's exact counts (the
usual case: a fine-tuned checkpoint of a known model). Otherwise the decoder families
below are counted in closed form; the counts are checked against transformers'
meta-device instantiation for every catalog entry in the tests. Anything else needs
transformers installed and is instantiated on the meta device (never remote code).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from memlint.catalog import remote
from memlint.catalog.families import arch_facts, closed_form, family, linear_role
from memlint.catalog.spec import entries, spec_from_entry
from memlint.errors import MemlintError
from memlint.files import Refused, read_bytes

# Config keys that change parameter counts or activation shapes.
SHAPE_KEYS = (
    "hidden_size", "n_embd", "intermediate_size", "ffn_dim", "num_hidden_layers", "n_layer",
    "num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads", "head_dim",
    "vocab_size", "tie_word_embeddings", "num_local_experts", "num_experts",
    "moe_intermediate_size", "word_embed_proj_dim", "new_decoder_architecture", "multi_query",
)
# The keys other families spell their shapes with (MPT, DBRX, gpt_bigcode, the remote-code
# families), compared where the catalog entry records them.
RECORDED_SHAPE_KEYS = (
    "d_model", "n_layers", "n_heads", "expansion_ratio", "n_inner",
    "attn_config", "ffn_config", "num_layers", "padded_vocab_size", "ffn_hidden_size",
    "multi_query_group_num", "multi_query_attention", "kv_channels", "inner_hidden_size", "bias",
)



# Shape keys that are counts: an integer (null where transformers computes it), at most this much.
# A config with "hidden_size": "4096", NaN, 10**400 or -32 layers is refused, not counted.
_COUNT_KEYS = {k: 1 << 31 for k in SHAPE_KEYS if k not in ("tie_word_embeddings", "new_decoder_architecture",
                                                            "multi_query")}
_COUNT_KEYS.update(num_hidden_layers=4096, n_layer=4096, num_local_experts=1 << 16, num_experts=1 << 16,
                   num_experts_per_tok=1 << 16, n_inner=1 << 31, n_positions=1 << 40, max_position_embeddings=1 << 40)
_AT_LEAST_ONE = ("hidden_size", "n_embd", "num_hidden_layers", "n_layer", "num_attention_heads", "n_head",
                 "vocab_size", "intermediate_size")
# What the closed form reads; a family counted by transformers needs the same few.
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def _load(path: Path) -> dict[str, Any]:
    try:
        raw = read_bytes(path).decode("utf-8")
        cfg = json.loads(raw)
    except UnicodeDecodeError:
        raise MemlintError(f"{path}: config.json is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise MemlintError(f"{path}: broken config.json ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise MemlintError(f"{path}: broken config.json (nested too deeply)") from None
    except Refused as exc:
        raise MemlintError(f"{path}: {exc.why}") from None
    except OSError as exc:
        raise MemlintError(f"{path}: cannot read config.json ({exc.strerror or exc})") from None
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise MemlintError(f"{path}: config.json has no model_type")
    if isinstance(cfg.get("text_config"), dict) and isinstance(cfg["model_type"], str):  # multimodal: the text tower
        text = dict(cfg["text_config"])
        text.setdefault("model_type", cfg["model_type"] + "_text")
        text["_text_only"] = True
        cfg = text
    return _checked(cfg, path)


def _checked(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """The config, its shape values checked: what is counted must be a count."""
    mt = cfg.get("model_type")
    if not isinstance(mt, str) or not mt or len(mt) > 100:
        raise MemlintError(f"{path}: model_type must be a model family name, not {str(mt)[:40]!r}")
    for key, most in _COUNT_KEYS.items():
        v = cfg.get(key)
        if v is None:
            continue
        low = 1 if key in _AT_LEAST_ONE else 0
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= most:
            shown = repr(v) if not isinstance(v, int) or abs(v) < 1 << 64 else "an integer of " + f"{v.bit_length()} bits"
            raise MemlintError(f"{path}: {key} must be a whole number from {low} to {most:,}, not {shown[:60]}")
    for key in ("tie_word_embeddings", "new_decoder_architecture", "multi_query"):
        if cfg.get(key) is not None and not isinstance(cfg[key], bool):
            raise MemlintError(f"{path}: {key} must be true or false, not {cfg[key]!r:.60}")
    return cfg


def _defaults(model_type: str) -> dict[str, Any]:
    # transformers' defaults for keys configs sometimes omit
    return {"tie_word_embeddings": family(model_type)["tie_word_embeddings"]}


def _matches(cfg: Mapping[str, Any], entry: Mapping[str, Any]) -> bool:
    if entry["model_type"] != cfg["model_type"]:
        return False
    ref = {**_defaults(entry["model_type"]), **entry["config"]}
    got = {**_defaults(cfg["model_type"]), **cfg}
    return (all(got.get(k) == ref.get(k) for k in SHAPE_KEYS if k in ref or k in got)
            and all(got.get(k) == ref[k] for k in RECORDED_SHAPE_KEYS if k in ref))


def spec_from_config_file(path: Path, model_id: str, source: str):
    """The config's exact counts, and a GPTQ / AWQ checkpoint's quantization_config (loaded quantized)."""
    from dataclasses import replace

    from memlint.catalog.spec import prequantized

    cfg = _load(path)
    spec = spec_from_config(cfg, path, model_id, source)
    quant = prequantized(cfg.get("quantization_config"))
    return replace(spec, quantization=quant) if quant else spec


def spec_from_shape(shape: Mapping[str, Any], model_id: str):
    """A model class of the script's own checkout, as the HF-style config extract/ read from it
    (`model_type` gpt2 or llama): counted as that config.json would be (source "script-class")."""
    where = Path(f"the shape of {model_id[:80]}")
    cfg = _checked(dict(shape), where)
    if cfg["model_type"] == "gpt2" and cfg.get("bias") is False:
        entry = count_gpt2_like(cfg)  # nanoGPT's bias=False has no HF spelling: counted in closed form
        entry["config"] = _config_of(cfg)
        return spec_from_entry(model_id, entry, source="script-class")
    return spec_from_config(cfg, where, model_id, "script-class", match=not cfg.get("_built"))


def spec_from_config(cfg: dict[str, Any], path: Path, model_id: str, source: str, match: bool = True):
    """The spec of a config: a catalogued checkpoint's where the shape is one's (`match`), else counted. A config a
    script builds from a class (`_built`) is counted itself: the catalog compares the shape keys only."""
    for cid, entry in entries().items() if match else ():
        if _matches(cfg, entry):
            spec = spec_from_entry(model_id, entry, source=source)
            return spec
    stand_in = remote.mapping(cfg)
    if stand_in is not None:
        entry = count_remote(cfg, stand_in)
        entry["config"] = {k: v for k, v in cfg.items() if not k.startswith("_")}
        return spec_from_entry(model_id, entry, source=source)
    if closed_form(cfg["model_type"]):
        missing = [k for k in _REQUIRED if cfg.get(k) is None]
        if missing:
            raise MemlintError(f"{path}: config.json has no {', '.join(missing)} (a {cfg['model_type']} config names them)")
        entry = count_llama_like(cfg)
        entry["config"] = _config_of(cfg)
        return spec_from_entry(model_id, entry, source=source)
    return _count_with_transformers(cfg, model_id, source, path)


def count_remote(cfg: Mapping[str, Any], stand_in: "remote.Remote | None" = None) -> dict[str, Any]:
    """A remote-code config counted as its transformers stand-in (remote.py): in closed form where
    the stand-in's family has one, else on the meta device; the remote code's names put back."""
    stand_in = stand_in or remote.mapping(cfg)
    if closed_form(stand_in.counted_as):
        counted = count_llama_like({"model_type": stand_in.counted_as, **stand_in.config})
    else:
        from memlint.catalog.meta import count_on_meta  # needs the 'catalog' extra

        counted = count_on_meta(stand_in.counted_as, stand_in.config)
    entry = remote.apply(stand_in, counted)
    entry.update(family=stand_in.model_type, model_type=stand_in.model_type,
                 torch_dtype=cfg.get("torch_dtype") or cfg.get("dtype") or "float32")
    return entry


def count_llama_like(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Closed-form parameter counts for the Llama-shaped decoder families."""
    mt = cfg["model_type"]
    fam = family(mt)
    h = cfg["hidden_size"]
    L = cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    inter = cfg["intermediate_size"]
    V = cfg["vocab_size"]
    tied = cfg.get("tie_word_embeddings", _defaults(mt)["tie_word_embeddings"])
    attn_bias = fam["qkv_bias"] or bool(cfg.get("attention_bias", False))
    o_bias = bool(cfg.get("attention_bias", False)) and not fam["qkv_bias"]
    mlp_bias = bool(cfg.get("mlp_bias", False))
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or 0
    moe_inter = cfg.get("moe_intermediate_size", inter)

    lin: dict[str, dict] = {}

    def add(name: str, fin: int, fout: int, bias: bool) -> None:
        lin[name] = {"in": fin, "out": fout, "bias": bias, "count": L, "role": linear_role(name)}

    if fam["fused"]:
        add("self_attn.o_proj", heads * hd, h, False)
        add("self_attn.qkv_proj", h, (heads + 2 * kv) * hd, False)
    else:
        add("self_attn.q_proj", h, heads * hd, attn_bias)
        add("self_attn.k_proj", h, kv * hd, attn_bias)
        add("self_attn.v_proj", h, kv * hd, attn_bias)
        add("self_attn.o_proj", heads * hd, h, o_bias)
    expert_params = other = 0
    if experts:
        expert_params = L * experts * 3 * h * moe_inter
        other = L * experts * h  # the router
    elif fam["fused"]:
        add("mlp.gate_up_proj", h, 2 * inter, False)
        add("mlp.down_proj", inter, h, False)
    else:
        add("mlp.gate_proj", h, inter, mlp_bias)
        add("mlp.up_proj", h, inter, mlp_bias)
        add("mlp.down_proj", inter, h, mlp_bias)
    norms = L * fam["norms_per_layer"] * h + h
    if fam["qk_norm"]:
        norms += L * 2 * hd
    linear = sum((d["in"] * d["out"] + (d["out"] if d["bias"] else 0)) * d["count"] for d in lin.values())
    lm_head = 0 if tied else V * h
    if not tied:
        lin["lm_head"] = {"in": h, "out": V, "bias": False, "count": 1, "role": "head"}
    groups = {"embeddings": V * h, "lm_head": lm_head, "norms": norms, "linear": linear,
              "experts": expert_params, "other": other}
    arch = {
        "model_type": mt, "hidden_size": h, "intermediate_size": inter, "num_layers": L,
        "num_heads": heads, "num_kv_heads": kv, "head_dim": hd, "vocab_size": V,
        "max_position_embeddings": cfg.get("max_position_embeddings"), **arch_facts(mt),
        "tie_word_embeddings": tied,
    }
    if experts:
        arch.update(num_experts=experts, experts_per_token=cfg.get("num_experts_per_tok"),
                    moe_intermediate_size=moe_inter)
    return {
        "family": mt, "model_type": mt, "params": sum(groups.values()), "groups": groups,
        "tied_embeddings": tied, "linear_modules": lin, "arch": arch,
        "torch_dtype": cfg.get("torch_dtype") or cfg.get("dtype") or "float32",
        "text_only": bool(cfg.get("_text_only")),
    }


def count_gpt2_like(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """GPT-2's parameters in closed form (GPT2LMHeadModel: wte, wpe, c_attn/c_proj/c_fc/c_proj per
    layer, two LayerNorms per layer and ln_f, lm_head tied to wte), with nanoGPT's `bias=False`
    (no Linear or LayerNorm bias). Equals the catalog's meta-device counts for the four GPT-2s."""
    h, L, heads, V, P = cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["vocab_size"], cfg.get("n_positions") or 1024
    inter = cfg.get("n_inner") or 4 * h
    bias = cfg.get("bias", True) is not False
    tied = cfg.get("tie_word_embeddings", True)
    lin = {name: {"in": i, "out": o, "bias": bias, "count": L, "role": linear_role(name)}
           for name, i, o in (("attn.c_attn", h, 3 * h), ("attn.c_proj", h, h), ("mlp.c_fc", h, inter),
                              ("mlp.c_proj", inter, h))}
    linear = sum((d["in"] * d["out"] + (d["out"] if bias else 0)) * L for d in lin.values())
    norms = (2 * L + 1) * h * (2 if bias else 1)
    if not tied:
        lin["lm_head"] = {"in": h, "out": V, "bias": False, "count": 1, "role": "head"}
    groups = {"embeddings": V * h + P * h, "lm_head": 0 if tied else V * h, "norms": norms, "linear": linear,
              "experts": 0, "other": 0}
    arch = {"model_type": "gpt2", "hidden_size": h, "intermediate_size": inter, "num_layers": L, "num_heads": heads,
            "num_kv_heads": heads, "head_dim": h // heads, "vocab_size": V, "max_position_embeddings": P,
            **arch_facts("gpt2"), "tie_word_embeddings": tied}
    return {"family": "gpt2", "model_type": "gpt2", "params": sum(groups.values()), "groups": groups,
            "tied_embeddings": tied, "linear_modules": lin, "arch": arch,
            "torch_dtype": cfg.get("torch_dtype") or "float32", "text_only": False}


def _count_with_transformers(cfg: Mapping[str, Any], model_id: str, source: str, path: Path):
    import importlib.util

    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None:
        raise MemlintError(
            f"{path}: model_type {cfg['model_type']!r} is not one memlint counts without "
            "transformers; install the 'catalog' extra (torch, transformers) to count it"
        ) from None
    from memlint.catalog.meta import count_on_meta

    try:
        entry = count_on_meta(cfg["model_type"], _config_of(cfg))
    except Exception as exc:  # transformers judging an untrusted config: any error is the config's
        why = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise MemlintError(f"{path}: transformers cannot build a {cfg['model_type']!r} model from this config "
                           f"({why})") from None
    entry.update(family=cfg["model_type"], model_type=cfg["model_type"],
                 torch_dtype=cfg.get("torch_dtype") or "float32", config=_config_of(cfg))
    return spec_from_entry(model_id, entry, source=source)


def _config_of(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What AutoConfig.for_model(model_type, **config) takes: model_type is its first argument."""
    return {k: v for k, v in cfg.items() if not k.startswith("_") and k != "model_type"}
