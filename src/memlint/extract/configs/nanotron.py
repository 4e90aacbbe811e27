"""nanotron run configs (`torchrun --nproc_per_node 8 run_train.py --config-file cfg.yaml`): the YAML nanotron's
Config dataclasses load (nanotron/config/config.py): general, parallelism (dp, tp, pp), model (dtype, init_method and an
inline model_config), optimizer (optimizer_factory, zero_stage, accumulate_grad_in_fp32), tokens (micro_batch_size,
batch_accumulation_per_replica, sequence_length). nanotron trains its own model classes from scratch or from a
nanotron checkpoint: the model's shape is the inline model_config, counted as the Hugging Face config it mirrors.
"""

from __future__ import annotations

from memlint.extract.configs import frameworks
from memlint.extract.configs.readers import FrameworkReader
from memlint.plan import Value

SECTIONS = {"general", "parallelism", "model", "optimizer", "tokens"}  # the required sections of nanotron's Config


def looks_like(keys: set[str]) -> bool:
    return SECTIONS <= keys


class Nanotron(FrameworkReader):
    kind = "nanotron"
    rank = 25

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:  # its run config: general, parallelism, model, optimizer, tokens
        return looks_like(keys)

    def _sub(self, key: str):
        return frameworks.substitution(self.kind, key)

    def _positive(self, name: str, *path: str) -> int | None:
        v = self.doc.get(*path)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            self.lit(name, v, *path)
            return v
        self.unknown(name, f"{'.'.join(path)} {v!r}", *(path if self.doc.has(*path) else ()))
        return None

    def read(self) -> None:
        self._model()
        self._positive("per_device_batch", "tokens", "micro_batch_size")
        self._positive("grad_accum", "tokens", "batch_accumulation_per_replica")
        self._positive("max_length", "tokens", "sequence_length")
        (pack, why) = self._sub("packing")
        self.lib("packing", pack, why)
        self.lib("padding", "packing" if pack else "max_length", why)
        rc = self.doc.get("parallelism", "recompute_layer")
        if isinstance(rc, bool):
            self.lit("gradient_checkpointing", rc, "parallelism", "recompute_layer")
        else:
            self.fw("gradient_checkpointing", "parallelism.recompute_layer")
        self._optimizer()
        self._precision()
        attn, why = self._sub("attn_implementation")
        self.lib("attn_implementation", attn, why)
        self._parallelism()
        trainer, why = self._sub("trainer")
        self.lib("trainer", trainer, why)

    def _model(self) -> None:
        cfg = self.doc.get("model", "model_config")
        init = self.doc.get("model", "init_method")
        ckpt = init.get("path") if isinstance(init, dict) else None
        self.lib("method", "full", "nanotron trains every parameter (no adapters)")
        self.lib("quant_bits", None, "nanotron does not quantize the trained model")
        shape = self._shape(cfg)
        what = f"a nanotron checkpoint at {ckpt}" if isinstance(ckpt, str) else "trained from scratch (init_method: random)"
        if shape is None:
            self.unknown("model_id", f"model.model_config is not a Llama-like config memlint counts ({what})", "model")
            return
        self.fields["model_id"] = Value(f"{self.doc.path}: model.model_config", "literal", self.doc.span("model", "model_config"),
                                        (f"model.model_config inline ({what}): counted as the Hugging Face "
                                         f"{shape['model_type']} config it mirrors",), shape=tuple(shape.items()))

    def _shape(self, cfg) -> dict | None:
        if not isinstance(cfg, dict):
            return None
        keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size")
        if not all(isinstance(cfg.get(k), int) and cfg.get(k) > 0 for k in keys):
            return None
        multiple = self.doc.get("model", "make_vocab_size_divisible_by")
        vocab = cfg["vocab_size"]
        if isinstance(multiple, int) and multiple > 1:  # nanotron pads the vocabulary up to a multiple (tp included)
            vocab = -(-vocab // multiple) * multiple
        shape = {"model_type": "qwen2" if cfg.get("is_qwen2_config") else "llama", **{k: cfg[k] for k in keys},
                 "vocab_size": vocab,
                 "num_key_value_heads": cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
                 "max_position_embeddings": cfg.get("max_position_embeddings") or 2048,
                 "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
                 "rms_norm_eps": cfg.get("rms_norm_eps", 1e-6), "hidden_act": cfg.get("hidden_act", "silu")}
        return shape

    def _optimizer(self) -> None:
        fac = self.doc.get("optimizer", "optimizer_factory")
        name = fac.get("name") if isinstance(fac, dict) else None
        table, ref = self._sub("optimizers")
        fused = isinstance(fac, dict) and fac.get("torch_adam_is_fused") is True
        optim = table.get(f"{name}{'+fused' if fused else ''}", table.get(str(name)))
        if optim is None:
            self.unknown("optimizer", f"optimizer.optimizer_factory.name {name!r}", "optimizer")
            return
        self.lit("optimizer", optim, "optimizer", "optimizer_factory", chain=(f"optimizer_factory {name}"
                 f"{', torch_adam_is_fused' if fused else ''}: {ref}",))

    def _precision(self) -> None:
        dt = self.doc.get("model", "dtype")
        dtypes, ref = self._sub("dtypes")
        given = dt is not None
        dtype = dtypes.get(str(dt if given else "bfloat16"))
        if dtype is None:
            self.unknown("torch_dtype", f"model.dtype {dt!r}", "model", "dtype")
            return
        where = ("model", "dtype") if given else ()
        if given:
            self.lit("torch_dtype", dtype, *where)
        else:
            self.lib("torch_dtype", dtype, "model.dtype unset: nanotron's ModelArgs defaults to bfloat16")
        fp32_accum = self.doc.get("optimizer", "accumulate_grad_in_fp32") is True
        if dtype == "fp32":
            value, why = "fp32", "fp32 parameters"
        elif fp32_accum:
            value, why = f"amp-{dtype}", f"{dtype} parameters with accumulate_grad_in_fp32: fp32 gradient accumulators " \
                                         f"and master copies ({ref})"
        else:
            value, why = f"pure-{dtype}", f"{dtype} parameters, gradients and optimizer states ({ref})"
        self.lit("precision", value, *(("optimizer", "accumulate_grad_in_fp32") if fp32_accum else where or ("model",)),
                 chain=(why,))

    def _parallelism(self) -> None:
        sizes = {k: self.doc.get("parallelism", k) for k in ("dp", "tp", "pp")}
        if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes.values()):
            ranks = sizes["dp"] * sizes["tp"] * sizes["pp"]
            self.lit("num_gpus", ranks, "parallelism", "dp",
                     chain=(f"parallelism dp {sizes['dp']} × tp {sizes['tp']} × pp {sizes['pp']} = {ranks} ranks",))
            if sizes["tp"] > 1:
                self.lit("tp_size", sizes["tp"], "parallelism", "tp")
                mode = str(self.doc.get("parallelism", "tp_mode") or "ALL_REDUCE").upper()
                self.lit("sequence_parallel", mode == "REDUCE_SCATTER", *(("parallelism", "tp_mode")
                         if self.doc.has("parallelism", "tp_mode") else ("parallelism", "tp")),
                         chain=(f"tp_mode {mode}: {'sequence parallel' if mode == 'REDUCE_SCATTER' else 'no sequence parallel'}",))
                stack, why = self._sub("tp_stack")
                self.lib("tp_stack", stack, why)
            if sizes["pp"] > 1:
                self.notes.append(f"pipeline parallel pp {sizes['pp']}: each stage holds about 1/{sizes['pp']} of the layers, "
                                  "which the estimate does not split (it sizes one stage as the whole model)")
        stage = self.doc.get("optimizer", "zero_stage")
        table = {0: "none", 1: "zero1"}
        if stage in table:
            self.lit("distributed", table[stage], "optimizer", "zero_stage",
                     chain=(f"zero_stage {stage}: " + ("data-parallel replicas (DDP)" if stage == 0
                                                       else "optimizer states sharded over the data-parallel ranks"),))
        else:
            self.unknown("distributed", f"optimizer.zero_stage {stage!r} (nanotron implements 0 and 1)", "optimizer")
        self.lib("offload", "none", "nanotron does not offload")
