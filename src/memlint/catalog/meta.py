"""Exact parameter counts by instantiating a config on the meta device (torch, transformers).

Used by scripts/gen_catalog.py to build the bundled catalog, and at run time only for a
local config.json whose family memlint cannot count in closed form.
"""

from __future__ import annotations

import re

from memlint.catalog.families import arch_facts, linear_role

_LAYER_INDEX = re.compile(r"^(?:.*\.)?(?:layers|h|blocks|layer)\.(\d+)\.(.+)$")


def _normalise_arch(model_type: str, cfg) -> dict:
    """The shape facts the activation model needs, under one set of names."""
    get = lambda *names, default=None: next(  # noqa: E731
        (getattr(cfg, n) for n in names if getattr(cfg, n, None) is not None), default
    )
    hidden = get("hidden_size", "n_embd", "d_model")
    heads = get("num_attention_heads", "n_head")
    kv = get("num_key_value_heads", "num_kv_heads", default=heads)
    if model_type == "falcon" and not getattr(cfg, "new_decoder_architecture", False):
        kv = 1 if getattr(cfg, "multi_query", False) else heads
    head_dim = get("head_dim", default=None) or hidden // heads
    inter = get("intermediate_size", "ffn_dim", "n_inner", default=None)
    ffn = getattr(cfg, "ffn_config", None)  # DBRX keeps its (expert) MLP shape in ffn_config
    if inter is None and getattr(ffn, "ffn_hidden_size", None):
        inter = ffn.ffn_hidden_size
    if inter is None and getattr(cfg, "expansion_ratio", None):  # MPT: d_model * expansion_ratio
        inter = int(cfg.expansion_ratio * hidden)
    if inter is None:
        inter = 4 * hidden
    arch = {
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_layers": get("num_hidden_layers", "n_layer"),
        "num_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": get("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"),
        **arch_facts(model_type),
        "tie_word_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
    }
    experts = get("num_local_experts", "num_experts", default=None)
    per_token = get("num_experts_per_tok")
    if experts is None and getattr(ffn, "moe_num_experts", None):
        experts, per_token = ffn.moe_num_experts, ffn.moe_top_k
    if experts:
        arch["num_experts"] = experts
        arch["experts_per_token"] = per_token
        arch["moe_intermediate_size"] = get("moe_intermediate_size", default=inter)
    if getattr(cfg, "final_logit_softcapping", None):
        arch["final_logit_softcapping"] = cfg.final_logit_softcapping
    return arch


def count_on_meta(model_type: str, config: dict) -> dict:
    """Exact counts of `config`; a remote-code family (remote.py) is counted as its transformers
    stand-in, with its own linear names put back."""
    from memlint.catalog import remote

    stand_in = remote.mapping({"model_type": model_type, **config})
    if stand_in is not None:
        return remote.apply(stand_in, _count_on_meta(stand_in.counted_as, stand_in.config))
    return _count_on_meta(model_type, config)


def _count_on_meta(model_type: str, config: dict) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.pytorch_utils import Conv1D

    cfg = AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    out_emb = model.get_output_embeddings()
    in_emb = model.get_input_embeddings()
    tied = out_emb is not None and out_emb.weight is in_emb.weight

    groups = {"embeddings": 0, "lm_head": 0, "norms": 0, "linear": 0, "experts": 0, "other": 0}
    linears: dict[str, dict] = {}
    seen: set[int] = set()
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if id(p) not in seen]
        if not own:
            continue
        seen.update(id(p) for p in own)
        n = sum(p.numel() for p in own)
        if module is out_emb:
            groups["lm_head"] += n
            linears["lm_head"] = {"in": out_emb.in_features, "out": out_emb.out_features,
                                  "bias": out_emb.bias is not None, "count": 1, "role": "head"}
        elif isinstance(module, torch.nn.Embedding):
            groups["embeddings"] += n
        elif isinstance(module, (torch.nn.Linear, Conv1D)):
            groups["linear"] += n
            m = _LAYER_INDEX.match(name)
            key = m.group(2) if m else name
            if isinstance(module, Conv1D):
                fin, fout = module.weight.shape
            else:
                fin, fout = module.in_features, module.out_features
            slot = linears.setdefault(key, {"in": fin, "out": fout,
                                            "bias": module.bias is not None, "count": 0, "role": linear_role(key)})
            slot["count"] += 1
        elif "norm" in type(module).__name__.lower() or "ln" in name.rsplit(".", 1)[-1]:
            groups["norms"] += n
        elif "expert" in type(module).__name__.lower():
            groups["experts"] += n
        else:
            groups["other"] += n
    total = sum(p.numel() for p in model.parameters())
    assert total == sum(groups.values()), (model_type, total, groups)
    return {
        "params": total,
        "groups": groups,
        "tied_embeddings": tied,
        "linear_modules": linears,
        "arch": _normalise_arch(model_type, cfg),
    }


