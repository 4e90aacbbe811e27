"""Regenerate src/memlint/catalog/models.json from scripts/catalog_sources.json.

Each model's config is instantiated on the meta device with transformers (no weights,
no network), and the exact parameter counts are read off the module tree.
Run: python scripts/gen_catalog.py   (needs the `catalog` extra: torch, transformers)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "scripts" / "catalog_sources.json"
OUTPUT = ROOT / "src" / "memlint" / "catalog" / "models.json"

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
    if inter is None:
        inter = 4 * hidden
    gated = model_type in {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe",
                           "gemma2", "gemma3_text", "phi3"}
    norm = "rmsnorm" if gated else "layernorm"
    arch = {
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_layers": get("num_hidden_layers", "n_layer"),
        "num_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": get("max_position_embeddings", "n_positions"),
        "mlp": "gated" if gated else "plain",
        "norm": norm,
        "tie_word_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
    }
    experts = get("num_local_experts", "num_experts", default=None)
    if experts:
        arch["num_experts"] = experts
        arch["experts_per_token"] = get("num_experts_per_tok")
        arch["moe_intermediate_size"] = get("moe_intermediate_size", default=inter)
    if getattr(cfg, "final_logit_softcapping", None):
        arch["final_logit_softcapping"] = cfg.final_logit_softcapping
    return arch


def count(entry: dict) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.pytorch_utils import Conv1D

    cfg = AutoConfig.for_model(entry["model_type"], **entry["config"])
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
                                  "bias": out_emb.bias is not None, "count": 1}
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
                                            "bias": module.bias is not None, "count": 0})
            slot["count"] += 1
        elif "norm" in type(module).__name__.lower() or "ln" in name.rsplit(".", 1)[-1]:
            groups["norms"] += n
        elif "expert" in type(module).__name__.lower():
            groups["experts"] += n
        else:
            groups["other"] += n
    total = sum(p.numel() for p in model.parameters())
    assert total == sum(groups.values()), (entry["id"], total, groups)
    return {
        "params": total,
        "groups": groups,
        "tied_embeddings": tied,
        "linear_modules": linears,
        "arch": _normalise_arch(entry["model_type"], cfg),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="regenerate one id and print it instead of writing")
    args = ap.parse_args(argv)
    import transformers

    sources = json.loads(SOURCES.read_text())["models"]
    if args.only:
        entry = next(e for e in sources if e["id"] == args.only)
        print(json.dumps(count(entry), indent=1))
        return 0
    models = {}
    for entry in sources:
        counted = count(entry)
        models[entry["id"]] = {
            "family": entry["family"],
            "aliases": entry.get("aliases", []),
            "text_only": entry.get("text_only", False),
            "torch_dtype": entry["config"].get("torch_dtype", "float32"),
            **counted,
        }
        print(f"{entry['id']:45s} {counted['params']:>16,d}", file=sys.stderr)
    doc = {
        "_generated_by": "scripts/gen_catalog.py",
        "_transformers": transformers.__version__,
        "models": models,
    }
    OUTPUT.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
