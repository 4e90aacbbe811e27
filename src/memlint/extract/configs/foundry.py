"""llm-foundry (Composer) training YAML: `composer scripts/train/train.py yamls/finetune/*.yaml`.

`${variables.x}` references are resolved first (configs/interpolate.py), each value keeping the
line of the key that uses it. The GPU count is the launcher's (`composer` starts one process per
visible GPU), so accumulation stays unknown unless the micro-batch already covers the global batch.
"""

from __future__ import annotations

from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad
from memlint.extract.configs.interpolate import resolve
from memlint.extract.configs.readers import FrameworkReader
from memlint.library.defaults import default as library_default
from memlint.plan import Value


_MARKERS = {"max_duration", "global_train_batch_size", "device_train_microbatch_size", "device_train_batch_size"}


class Foundry(FrameworkReader):
    kind = "llm-foundry"
    rank = 50

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return "train_loader" in keys and bool(keys & _MARKERS)

    def read(self) -> None:
        self.res = resolve(self.doc)
        for path, why in self.res.unresolved.items():
            self.unread[path] = why
            where = ".".join(map(str, path))
            if "resolver" in why:
                self.notes.append(f"{where}: {why}")
            else:
                self.bad(f"{where}: {why}: OmegaConf raises an InterpolationKeyError when llm-foundry resolves the config "
                         "(put shared values under `variables:` and write ${{variables.NAME}})", *path)
        self._model()
        self._precision()
        self._batch()
        self._data()
        self._fsdp()
        self._optimizer()
        self.lib("group_by_length", False, "llm-foundry's loaders do not group by length")
        self.lib("fused_loss", False, "llm-foundry computes the loss from full logits")
        self.trainer("composer", "llm-foundry scripts/train/train.py (composer.Trainer)")
        self._check_keys()

    def lit(self, name: str, value: Any, *path: Any, chain: tuple[str, ...] = ()) -> None:
        how = self.res.how.get(tuple(path))
        if how and not chain:
            chain = (f"{'.'.join(map(str, path))}: {how}",)
        super().lit(name, value, *path, chain=chain)

    def _fw(self, key: str) -> Any:
        return frameworks.default(self.kind, key)

    def _model(self) -> None:
        d = self.doc
        name = d.get("model", "name")
        mid = d.get("model", "pretrained_model_name_or_path")
        if name == "mpt_causal_lm" or (not isinstance(mid, str) and isinstance(d.get("model", "d_model"), int)):
            self.unknown("model_id", "an MPT built from the config's d_model / n_layers, not a Hugging Face checkpoint", "model")
        elif isinstance(mid, str) and mid.strip():
            self.lit("model_id", mid.strip(), "model", "pretrained_model_name_or_path")
        else:
            self.unknown("model_id", "no model.pretrained_model_name_or_path", *(("model",) if d.has("model") else ()))
        dd = self._fw("model.torch_dtype")
        self.lib("torch_dtype", dd.value, dd.why)
        self._peft()
        self._attention(name)

    def _peft(self) -> None:
        d = self.doc
        peft = d.get("model", "peft_config")
        b8 = d.get("model", "load_in_8bit") is True
        if b8:
            self.lit("quant_bits", 8, "model", "load_in_8bit")
        else:
            self.lib("quant_bits", None, "model.load_in_8bit not set: the base is not quantized")
        if not isinstance(peft, dict):
            if b8:
                self.bad("model.load_in_8bit without model.peft_config: an 8-bit base cannot be fully fine-tuned", "model", "load_in_8bit")
            self.lib("method", "full", "no model.peft_config: every parameter trains")
            return
        kind = str(peft.get("peft_type", "")).upper()
        if kind != "LORA":
            self.bad(f"model.peft_config.peft_type should be LORA, not {peft.get('peft_type')!r} (hf_base.py get_peft_config raises)",
                     "model", "peft_config", *(("peft_type",) if "peft_type" in peft else ()))
        self.lit("method", "lora", "model", "peft_config")
        for name, key in (("lora_r", "r"), ("lora_alpha", "lora_alpha")):
            if d.has("model", "peft_config", key):
                self.int_field(name, "model", "peft_config", key)
            else:
                dd = library_default("peft.LoraConfig", key)
                self.lib(name, dd.value if dd else None, (dd.why if dd else "peft LoraConfig") + " (peft_config is passed to LoraConfig)")
        t = peft.get("target_modules")
        if isinstance(t, (list, str)) and t:
            self.lit("lora_targets", "all-linear" if t == "all-linear" else [t] if isinstance(t, str) else [str(x) for x in t],
                     "model", "peft_config", "target_modules")
        else:
            self.lib("lora_targets", None, "peft_config.target_modules not set: peft picks the architecture's defaults")

    def _attention(self, name: Any) -> None:
        d = self.doc
        table, ref = frameworks.substitution(self.kind, "mpt_attn_impl")
        for path in (("model", "config_overrides", "attn_config", "attn_impl"), ("model", "attn_config", "attn_impl")):
            impl = d.get(*path)
            if isinstance(impl, str):
                value = table.get(impl.lower())
                if value is None:
                    self.unknown("attn_implementation", f"MPT attn_impl {impl!r} is not one memlint models", *path)
                else:
                    self.lit("attn_implementation", value, *path, chain=(f"attn_impl: {impl}", ref))
                return
        if d.get("model", "use_flash_attention_2") is True:
            self.lit("attn_implementation", "flash_attention_2", "model", "use_flash_attention_2")
            return
        attn = d.get("model", "attn_implementation")
        if isinstance(attn, str) and attn:
            self.lit("attn_implementation", attn, "model", "attn_implementation")
        elif name == "mpt_causal_lm":
            dd = self._fw("mpt.attn_impl")
            self.lib("attn_implementation", table[dd.value], f"{dd.why}; {ref}")
        else:
            dd = self._fw("model.attn_implementation")
            self.lib("attn_implementation", dd.value, dd.why)

    def _precision(self) -> None:
        table, ref = frameworks.substitution(self.kind, "precision")
        raw = self.doc.get("precision")
        if raw is None:
            dd = self._fw("precision")
            self.lib("precision", table[dd.value], f"{dd.why}; {ref}")
        elif isinstance(raw, str) and raw.lower() in table:
            self.lit("precision", table[raw.lower()], "precision", chain=(f"precision: {raw}", ref))
        else:
            self.bad(f"precision should be one of {', '.join(table)}, not {raw!r}", "precision")
            self.unknown("precision", f"precision {raw!r} is not a Composer precision", "precision")

    def _batch(self) -> None:
        d = self.doc
        micro = d.get("device_train_microbatch_size")
        if micro is None or micro == "auto":
            why = "device_train_microbatch_size: auto" if micro == "auto" else self._fw("device_train_microbatch_size").why
            self.unknown("per_device_batch", f"{why}: Composer picks the micro-batch at run time (the largest that fits)",
                         *(("device_train_microbatch_size",) if d.has("device_train_microbatch_size") else ()))
            micro = None
        else:
            micro = self.int_field("per_device_batch", "device_train_microbatch_size")
        if d.has("device_eval_batch_size"):
            self.int_field("eval_batch", "device_eval_batch_size")
        try:
            glob = self.int_at("global_train_batch_size")
        except Bad:
            glob = None
        ref = frameworks.substitution(self.kind, "batch_size_info")[1]
        if micro is not None and glob is not None and micro >= glob:
            self.lit("grad_accum", 1, "global_train_batch_size",
                     chain=(f"device_train_microbatch_size {micro} >= global_train_batch_size {glob}: one micro-batch per step on any number of GPUs", ref))
        else:
            self.unknown("grad_accum", "ceil(global_train_batch_size / world size / micro-batch), and the world size is every GPU the "
                         "composer launcher starts on (not in the config)")

    def _data(self) -> None:
        d = self.doc
        ds = ("train_loader", "dataset")
        if d.has(*ds, "max_seq_len"):
            self.int_field("max_length", *ds, "max_seq_len")
        elif d.has("max_seq_len"):
            self.int_field("max_length", "max_seq_len")
        else:
            self.unknown("max_length", "neither train_loader.dataset.max_seq_len nor max_seq_len")
        loader = d.get("train_loader", "name")
        if loader == "text":
            self.lit("packing", True, "train_loader", "name", chain=("train_loader.name: text: the text loader concatenates samples into max_seq_len token rows",))
            self.lit("padding", "packing", "train_loader", "name", chain=self.fields["packing"].chain)
            return
        if loader not in (None, "finetuning"):
            self.unknown("padding", f"train_loader.name {loader!r} is not a loader memlint models", "train_loader", "name")
            return
        self._finetuning_padding(ds)

    def _finetuning_padding(self, ds: tuple) -> None:
        d = self.doc
        ratio = d.get(*ds, "packing_ratio")
        packed = ratio == "auto" or (isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and ratio > 1)
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and ratio < 1:
            self.bad(f"packing_ratio {ratio} is below 1: llm-foundry raises 'packing_ratio must be >= 1'", *ds, "packing_ratio")
        if packed:
            self.lit("packing", True, *ds, "packing_ratio")
            self.lit("padding", "packing", *ds, "packing_ratio")
            if ratio == "auto":
                self.notes.append("packing_ratio: auto profiles the data at start-up; a profiled ratio of 1.0 turns packing off "
                                  "(rows are then padded to max_seq_len, the same peak)")
            return
        dd = self._fw("train_loader.dataset.packing_ratio")
        if d.has(*ds, "packing_ratio"):
            self.lit("packing", False, *ds, "packing_ratio")
        else:
            self.lib("packing", False, dd.why)
        if d.get(*ds, "pad_to_longest") is True:
            self.lit("padding", "longest", *ds, "pad_to_longest")
        else:  # a default, placed at the dataset section where pad_to_longest would go
            dd = self._fw("train_loader.dataset.pad_to_longest")
            self.fields["padding"] = Value("max_length", "library-default", self.doc.span(*ds), (dd.why,))
        if d.get(*ds, "decoder_only_format") is False:
            self.notes.append("decoder_only_format: false is an encoder-decoder (T5-style) dataset; memlint estimates decoder-only models")

    def _fsdp(self) -> None:
        d = self.doc
        cfg = d.get("fsdp_config")
        if not isinstance(cfg, dict) or not cfg:
            self.lib("distributed", "none", "no fsdp_config: Composer runs DDP (every rank holds the whole model)")
            self.lib("offload", "none", "no fsdp_config")
            self.lib("gradient_checkpointing", False, "no fsdp_config: llm-foundry checkpoints activations only through fsdp_config.activation_checkpointing")
            return
        table, ref = frameworks.substitution(self.kind, "sharding")
        strat = cfg.get("sharding_strategy")
        if isinstance(strat, str) and strat.upper() in table:
            self.lit("distributed", table[strat.upper()], "fsdp_config", "sharding_strategy", chain=(f"sharding_strategy: {strat}", ref))
        elif strat is None:
            dd = self._fw("fsdp_config.sharding_strategy")
            self.lit("distributed", table[dd.value], "fsdp_config", chain=("fsdp_config: FSDP", dd.why))
        else:
            self.bad(f"fsdp_config.sharding_strategy should be one of {', '.join(table)}, not {strat!r}", "fsdp_config", "sharding_strategy")
            self.lit("distributed", "fsdp", "fsdp_config", chain=("fsdp_config: FSDP (strategy unreadable)",))
        if cfg.get("cpu_offload") is True:
            self.lit("offload", "params", "fsdp_config", "cpu_offload", chain=("cpu_offload: true (parameters and gradients on CPU)",))
        else:
            self.lib("offload", "none", self._fw("fsdp_config.cpu_offload").why)
        ac = cfg.get("activation_checkpointing")
        if isinstance(ac, bool):
            self.lit("gradient_checkpointing", ac, "fsdp_config", "activation_checkpointing")
        else:
            dd = self._fw("fsdp_config.activation_checkpointing")
            self.lib("gradient_checkpointing", dd.value, dd.why)
        if cfg.get("activation_cpu_offload") is True:
            self.notes.append("fsdp_config.activation_cpu_offload: saved activations move to CPU memory; memlint counts them on the GPU")
        self.notes.append(frameworks.substitution(self.kind, "single_gpu")[1])

    def _optimizer(self) -> None:
        name = self.doc.get("optimizer", "name")
        if isinstance(name, str) and name:
            self.lit("optimizer", name.lower(), "optimizer", "name")
        else:
            self.unknown("optimizer", "no optimizer.name (llm-foundry requires one)", *(("optimizer",) if self.doc.has("optimizer") else ()))

    def _check_keys(self) -> None:
        fw = frameworks.framework(self.kind)
        self.checked_keys()
        for section, known in fw["section_keys"].items():
            prefix = tuple(section.split("."))
            self.checked_keys(known, {}, prefix, f"{section} ")
