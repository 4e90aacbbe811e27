"""Exact parameter counts by instantiating a config on the meta device (torch, transformers).

Used by scripts/gen_catalog.py to build the bundled catalog, and at run time only for a
local config.json whose family memlint cannot count in closed form.
"""

from __future__ import annotations

import re

from memlint.catalog.families import arch_facts, encoder, encoder_decoder, linear_role, vision

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
    if isinstance(inter, (list, tuple)):  # Gemma 3n: one width per layer (MatFormer); the widest sets the peak
        inter = max(inter)
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


# The task heads an encoder is fine-tuned with: transformers' Auto class for each (the script's choice).
ENCODER_HEADS = {
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "masked-lm": "AutoModelForMaskedLM",
}


def _count_encoder(model_type: str, config: dict) -> dict:
    """An encoder's exact counts without a head (the base model, no pooler: the pooler belongs to the heads that
    use it), and, per task head, what the head class adds, read off transformers' own classes built on the meta
    device with 1 and 2 labels: `fixed` parameters plus `per_label` for each label, and the head's own linears."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModel

    import inspect

    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    cfg = AutoConfig.for_model(model_type, **config)
    # BERT-like base classes build a pooler unless told not to; DistilBERT / DeBERTa have none in the base model
    pooled_base = "add_pooling_layer" in inspect.signature(MODEL_MAPPING[type(cfg)].__init__).parameters
    with torch.device("meta"):
        base = AutoModel.from_config(cfg, **({"add_pooling_layer": False} if pooled_base else {}))
    counted = _count_module(model_type, cfg, base, out_emb=None)
    base_total = counted["params"]
    heads = {}
    for head, auto in ENCODER_HEADS.items():
        totals, linears, tied = [], {}, False
        for labels in (1, 2):
            hcfg = AutoConfig.for_model(model_type, **{**config, "num_labels": labels})
            with torch.device("meta"):
                model = getattr(transformers, auto).from_config(hcfg)
            totals.append(sum(p.numel() for p in model.parameters()))
            prefix = model.base_model_prefix
            if labels == 2:
                out = model.get_output_embeddings()
                tied = out is not None and out.weight is model.get_input_embeddings().weight
                for name, mod in model.named_modules():
                    if isinstance(mod, torch.nn.Linear) and not name.startswith(prefix + "."):
                        if mod is out and tied:
                            continue  # the tied decoder is the word embedding matrix (its bias is counted)
                        linears[name] = {"in": mod.in_features, "out": mod.out_features,
                                         "bias": mod.bias is not None, "labels": head != "masked-lm"
                                         and mod.out_features == 2}
                pooler = getattr(getattr(model, prefix), "pooler", None)
                pooled = pooler is not None
                if pooled:  # BERT's pooler: inside the base model, used (and counted) by this head only
                    dense = pooler.dense
                    linears[f"{prefix}.pooler.dense"] = {"in": dense.in_features, "out": dense.out_features,
                                                         "bias": dense.bias is not None, "labels": False}
        per_label = totals[1] - totals[0] if head != "masked-lm" else 0
        heads[head] = {"class": auto.replace("AutoModelFor", ""), "fixed": totals[0] - per_label - base_total,
                       "per_label": per_label, "linears": linears, "tied_decoder": tied, "pooler": pooled}
    counted["heads"] = heads
    return counted


_T5_LINEAR = re.compile(r"^(encoder|decoder)\.block\.\d+\.layer\.\d+\.(.+)$")
_BART_LINEAR = re.compile(r"^model\.(encoder|decoder)\.layers\.\d+\.(.+)$")


def build_seq2seq(model_type: str, config: dict, device: str = "meta", **kwargs):
    """transformers' own encoder-decoder LM (AutoModelForSeq2SeqLM: T5ForConditionalGeneration) as a training run
    has it. transformers 5.x's T5Config forces tie_word_embeddings=True, so from_config always ties lm_head to the
    shared embedding, while from_pretrained keeps a checkpoint's own lm_head.weight untied when it differs from
    `shared` (T5 v1.1 / Flan-T5 / T0 configs say tie_word_embeddings false and carry one); memlint unties lm_head
    where the config says false, as loading such a checkpoint does (data/library_api.json seq2seq_untied_lm_head)."""
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    cfg = AutoConfig.for_model(model_type, **config)
    with torch.device(device):
        model = AutoModelForSeq2SeqLM.from_config(cfg, **kwargs)
        if config.get("tie_word_embeddings") is False and model.lm_head.weight is model.shared.weight:
            model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.shared.weight))
    return cfg, model


def _count_seq2seq(model_type: str, config: dict) -> dict:
    """An encoder-decoder's exact counts (T5ForConditionalGeneration on the meta device, lm_head untied where the
    checkpoint's config says so); its linears keyed by stack (encoder./decoder.) and sub-layer, and the relative
    attention bias tables (an Embedding of buckets x heads in each stack's first layer) under `other`."""
    cfg, model = build_seq2seq(model_type, config)
    counted = _count_module(model_type, cfg, model, model.get_output_embeddings())
    if model_type == "bart":
        return _count_bart(cfg, model, counted)
    linears = _stack_linears(model, counted, _T5_LINEAR)
    rel = sum(p.numel() for n, p in model.named_parameters() if "relative_attention_bias" in n)
    groups = dict(counted["groups"])
    groups["embeddings"] -= rel
    groups["other"] += rel
    arch = counted["arch"]
    arch.update({
        "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff, "num_layers": cfg.num_layers,
        "num_decoder_layers": cfg.num_decoder_layers, "num_heads": cfg.num_heads, "num_kv_heads": cfg.num_heads,
        "head_dim": cfg.d_kv, "gated_ffn": bool(cfg.is_gated_act),
        "relative_attention_num_buckets": cfg.relative_attention_num_buckets,
        "scale_decoder_outputs": bool(getattr(cfg, "scale_decoder_outputs", counted["tied_embeddings"])),
        "dropout_rate": cfg.dropout_rate, "activation": cfg.dense_act_fn,
        "tie_word_embeddings": counted["tied_embeddings"],
    })
    return {**counted, "groups": groups, "linear_modules": linears, "arch": arch}


def _stack_linears(model, counted: dict, pattern) -> dict:
    """An encoder-decoder's linears keyed `<stack>.<name>` (the pattern's two groups), counted over the layers, with
    the counted lm_head."""
    import torch

    linears = {k: v for k, v in counted["linear_modules"].items() if k == "lm_head"}
    for name, mod in model.named_modules():
        m = pattern.match(name)
        if isinstance(mod, torch.nn.Linear) and m:
            key = f"{m.group(1)}.{m.group(2)}"
            slot = linears.setdefault(key, {"in": mod.in_features, "out": mod.out_features,
                                            "bias": mod.bias is not None, "count": 0, "role": linear_role(key)})
            slot["count"] += 1
    return linears


def _count_bart(cfg, model, counted: dict) -> dict:
    """BART (BartForConditionalGeneration): post-LN layers with biases, a plain GELU FFN (fc1, fc2), learned
    positions (max_position_embeddings + 2 rows: BartLearnedPositionalEmbedding's offset) and layernorm_embedding
    in each stack, lm_head tied to the shared embedding, final_logits_bias a [1, V] buffer (not a parameter)."""
    linears = _stack_linears(model, counted, _BART_LINEAR)
    arch = counted["arch"]
    arch.update({
        "hidden_size": cfg.d_model, "intermediate_size": cfg.encoder_ffn_dim, "num_layers": cfg.encoder_layers,
        "num_decoder_layers": cfg.decoder_layers, "num_heads": cfg.encoder_attention_heads,
        "num_kv_heads": cfg.encoder_attention_heads, "head_dim": cfg.d_model // cfg.encoder_attention_heads,
        "decoder_intermediate_size": cfg.decoder_ffn_dim, "gated_ffn": False, "scale_decoder_outputs": False,
        "post_norm": True, "dropout_rate": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "activation": cfg.activation_function,
        "final_logits_bias": model.final_logits_bias.numel(), "tie_word_embeddings": counted["tied_embeddings"],
    })
    return {**counted, "linear_modules": linears, "arch": arch}


def _count_vlm(model_type: str, config: dict) -> dict:
    """A vision-language model (Qwen2-VL, Qwen2.5-VL) built as transformers builds it
    (AutoModelForImageTextToText -> Qwen2VLForConditionalGeneration ...) on the meta device: the text model counted
    as a decoder (groups, linears, arch, as any causal LM), the vision tower and its merger apart (groups["vision"] and
    the `vision` facts read off the built modules: blocks, their linears, the merger, patch and merge sizes)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(cfg)
    inner = model.model
    if hasattr(inner, "visual"):  # Qwen2-VL / Qwen2.5-VL: the tower and its merger in one module
        vision_parts = [inner.visual]
        facts = _vision_facts(cfg, inner.visual)
    elif hasattr(inner, "vision_tower"):  # LLaVA: a CLIP tower and the multimodal projector
        vision_parts = [inner.vision_tower, inner.multi_modal_projector]
        facts = _llava_facts(cfg, inner.vision_tower, inner.multi_modal_projector)
    elif hasattr(inner, "vision_model"):  # Llama-3.2-Vision: a tiled ViT, a global ViT, cross-attention text layers
        vision_parts = [inner.vision_model, inner.multi_modal_projector]
        facts = _mllama_facts(cfg, inner.vision_model, inner.multi_modal_projector, inner.language_model)
    else:
        raise ValueError(f"{model_type}: no vision tower found on {type(model).__name__}")
    counted = _count_module(model_type, cfg.text_config, model, model.get_output_embeddings(), skip=vision_parts)
    counted["arch"]["model_type"] = model_type
    counted["arch"].update(arch_facts(model_type))
    counted["arch"]["tie_word_embeddings"] = counted["tied_embeddings"]  # the top-level config's, not text_config's
    counted["vision"] = facts
    counted["architecture"] = type(model).__name__
    return counted


def _vision_facts(cfg, visual) -> dict:
    """What the vision tower's accounting reads, off transformers' own modules."""
    import torch

    blocks = visual.blocks
    b0 = blocks[0]
    pe = visual.patch_embed
    gated = hasattr(b0.mlp, "gate_proj")
    inter = b0.mlp.gate_proj.out_features if gated else b0.mlp.fc1.out_features
    merger = visual.merger
    mlin = [m for m in merger.modules() if isinstance(m, torch.nn.Linear)]
    linears: dict[str, dict] = {}
    for name, mod in visual.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        m = _LAYER_INDEX.match(name)
        key = m.group(2) if m else name
        slot = linears.setdefault(key, {"in": mod.in_features, "out": mod.out_features, "bias": mod.bias is not None,
                                        "count": 0, "block": bool(m)})
        slot["count"] += 1
    vc = cfg.vision_config
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    out = {
        "model_type": vc.model_type,
        "depth": len(blocks),
        "embed_dim": pe.embed_dim,
        "num_heads": b0.attn.num_heads,
        "head_dim": pe.embed_dim // b0.attn.num_heads,
        "intermediate_size": inter,
        "mlp": "gated" if gated else "plain",
        "hidden_act": vc.hidden_act,
        "norm": "layernorm" if isinstance(b0.norm1, torch.nn.LayerNorm) else "rmsnorm",
        "merger_norm": "layernorm" if isinstance(merger.ln_q, torch.nn.LayerNorm) else "rmsnorm",
        "patch_size": pe.patch_size,
        "temporal_patch_size": pe.temporal_patch_size,
        "in_channels": pe.in_channels,
        "spatial_merge_size": visual.spatial_merge_size,
        "merger_hidden": mlin[0].in_features,
        "out_hidden_size": mlin[-1].out_features,
        "params": count(visual),
        "params_blocks": count(blocks),
        "params_merger": count(merger),
        "params_patch_embed": count(pe),
        "linears": linears,
        "image_token_id": cfg.image_token_id,
    }
    if getattr(visual, "window_size", None):  # Qwen2.5-VL: windowed attention except in the full-attention blocks
        out["window_size"] = visual.window_size
        out["fullatt_block_indexes"] = list(visual.fullatt_block_indexes)
    return out


def _reached_layers(depth: int, feature_layer) -> int:
    """How many of a LLaVA tower's layers the selected hidden states depend on: hidden_states holds the embeddings'
    output and every layer's (depth + 1 entries), vision_feature_layer indexes it (negative from the end)."""
    idx = feature_layer if isinstance(feature_layer, (list, tuple)) else [feature_layer]
    return max(i if i >= 0 else depth + 1 + i for i in idx)


def _llava_facts(cfg, tower, projector) -> dict:
    """LLaVA's CLIP tower (CLIPVisionModel: embeddings, pre_layrnorm, encoder layers, post_layernorm) and its
    projector (linear_1, act, linear_2), off transformers' own modules. Every encoder layer runs; the text model reads
    hidden_states[vision_feature_layer] (the penultimate layer's output for -2), so the layers after it and
    post_layernorm (over the CLS token, pooler_output only) get no gradient: params_unreached."""
    import torch

    vc = cfg.vision_config
    layers = tower.encoder.layers
    l0 = layers[0]
    depth = len(layers)
    reached = _reached_layers(depth, cfg.vision_feature_layer)
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    linears: dict[str, dict] = {}
    for name, mod in tower.named_modules():
        m = _LAYER_INDEX.match(name)
        if not isinstance(mod, torch.nn.Linear) or not m or int(m.group(1)) >= reached:
            continue
        slot = linears.setdefault(m.group(2), {"in": mod.in_features, "out": mod.out_features,
                                               "bias": mod.bias is not None, "count": 0, "block": True})
        slot["count"] += 1
    for name, mod in projector.named_modules():
        if isinstance(mod, torch.nn.Linear):
            linears[f"multi_modal_projector.{name}"] = {"in": mod.in_features, "out": mod.out_features,
                                                         "bias": mod.bias is not None, "count": 1, "block": False}
    pe = tower.embeddings.patch_embedding
    unreached = sum(count(layers[i]) for i in range(reached, depth)) + count(tower.post_layernorm)
    return {
        "kind": "llava",
        "model_type": vc.model_type,
        "depth": depth,
        "reached_layers": reached,
        "embed_dim": vc.hidden_size,
        "num_heads": l0.self_attn.num_heads,
        "head_dim": l0.self_attn.head_dim,
        "intermediate_size": l0.mlp.fc1.out_features,
        "mlp": "plain",
        "hidden_act": vc.hidden_act,
        "norm": "layernorm",
        "patch_size": pe.kernel_size[0],
        "temporal_patch_size": 1,
        "in_channels": pe.in_channels,
        "image_size": vc.image_size,
        "spatial_merge_size": 1,
        "select_strategy": cfg.vision_feature_select_strategy,
        "feature_layer": cfg.vision_feature_layer,
        "projector_act": cfg.projector_hidden_act,
        "merger_hidden": projector.linear_1.out_features,
        "out_hidden_size": projector.linear_2.out_features,
        "params": count(tower) + count(projector),
        "params_blocks": count(layers),
        "params_merger": count(projector),
        "params_patch_embed": count(pe),
        "params_unreached": unreached,
        "linears": linears,
        "image_token_id": cfg.image_token_id,
    }


def _mllama_facts(cfg, tower, projector, text) -> dict:
    """Llama-3.2-Vision (MllamaForConditionalGeneration) off transformers' own modules: the vision model runs its
    `transformer` (num_hidden_layers, ungated) and `global_transformer` (num_global_layers, gated) over max_num_tiles
    tiles of (image_size / patch)² + 1 patches per image, padded to a multiple of 8; the projector maps the
    concatenated last and intermediate hidden states (vision_output_dim) to the text width; the text model's
    cross_attention_layers attend to them (k_proj / v_proj over the vision tokens)."""
    vc, tc = cfg.vision_config, cfg.text_config
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    l0 = tower.transformer.layers[0]
    cross = [i for i in range(len(text.layers)) if i in tc.cross_attention_layers]
    xa = text.layers[cross[0]].cross_attn
    return {
        "kind": "mllama",
        "model_type": vc.model_type,
        "depth": len(tower.transformer.layers),
        "global_depth": len(tower.global_transformer.layers),
        "embed_dim": vc.hidden_size,
        "num_heads": l0.self_attn.num_heads,
        "head_dim": l0.self_attn.head_dim,
        "intermediate_size": l0.mlp.fc1.out_features,
        "mlp": "plain",
        "hidden_act": vc.hidden_act,
        "norm": "layernorm",
        "patch_size": tower.patch_size,
        "temporal_patch_size": 1,
        "in_channels": tower.num_channels,
        "image_size": vc.image_size,
        "max_num_tiles": vc.max_num_tiles,
        "patches_per_tile": tower.num_patches,
        "intermediate_layers_indices": list(vc.intermediate_layers_indices),
        "vision_output_dim": vc.vision_output_dim,
        "out_hidden_size": projector.out_features,
        "cross_attention_layers": cross,
        "cross_kv_dim": xa.k_proj.out_features,
        "cross_heads": xa.num_heads,
        "cross_head_dim": xa.head_dim,
        "params": count(tower) + count(projector),
        "params_blocks": count(tower.transformer) + count(tower.global_transformer),
        "params_merger": count(projector),
        "params_patch_embed": count(tower.patch_embedding),
        "linears": {"multi_modal_projector": {"in": projector.in_features, "out": projector.out_features,
                                              "bias": projector.bias is not None, "count": 1, "block": False}},
        "image_token_id": cfg.image_token_id,
    }


def _count_on_meta(model_type: str, config: dict) -> dict:
    if encoder(model_type):
        return _count_encoder(model_type, config)
    if encoder_decoder(model_type):
        return _count_seq2seq(model_type, config)
    if vision(model_type):
        return _count_vlm(model_type, config)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return _count_module(model_type, cfg, model, model.get_output_embeddings())


def _count_module(model_type: str, cfg, model, out_emb, skip=None) -> dict:
    """`skip`: submodules counted apart (a VLM's vision tower and projector), whose parameters go to
    groups["vision"]."""
    import torch
    from transformers.pytorch_utils import Conv1D

    in_emb = model.get_input_embeddings()
    tied = out_emb is not None and out_emb.weight is in_emb.weight

    groups = {"embeddings": 0, "lm_head": 0, "norms": 0, "linear": 0, "experts": 0, "other": 0}
    linears: dict[str, dict] = {}
    seen: set[int] = set()
    if skip is not None:
        parts = skip if isinstance(skip, (list, tuple)) else [skip]
        groups["vision"] = sum(p.numel() for part in parts for p in part.parameters())
        seen.update(id(p) for part in parts for p in part.parameters())
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


