"""Readers for framework training configs: axolotl, LLaMA-Factory, TRL recipes, torchtune.

Each turns one config into plan fields the way the framework itself would read it: its own
key names, its defaults and its silent substitutions (data/frameworks.json).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad, Reader, dtype_name, optimizer_of_class
from memlint.extract.configs.document import Document
from memlint.extract.configs.launchers import apply_launch, deepspeed_facts, find_deepspeed, shipped_deepspeed
from memlint.library.defaults import default as library_default
from memlint.library.versions import in_range, installed_version, shown_version

_RL_TRAINERS = {"dpo": "DPOTrainer", "ipo": "DPOTrainer", "orpo": "ORPOTrainer", "kto": "KTOTrainer",
                "simpo": "CPOTrainer", "grpo": "GRPOTrainer", "gdpo": "GRPOTrainer"}


_AXOLOTL = {"adapter", "micro_batch_size", "sequence_len", "sample_packing", "lora_target_linear", "num_epochs",
            "pad_to_sequence_len", "flash_attention", "val_set_size", "load_in_4bit", "load_in_8bit", "datasets"}
_LLAMA_FACTORY = {"finetuning_type", "stage", "cutoff_len", "lora_target", "quantization_bit", "template", "lora_rank"}
_TRL = {"per_device_train_batch_size", "use_peft", "max_seq_length", "max_length", "gradient_accumulation_steps",
        "learning_rate", "lora_r", "load_in_4bit", "dataset_mixture", "dataset_name", "bf16", "num_train_epochs"}


class FrameworkReader(Reader):
    """Shared parts: the model id, DeepSpeed/FSDP settings, the unknown-key check."""

    def model_id(self, *path: str) -> None:
        """model_id from the key at `path` (`base_model`; verl's `model`, `partial_pretrain`)."""
        v = self.doc.get(*path)
        if isinstance(v, str) and v.strip():
            self.lit("model_id", v.strip(), *path)
        else:
            self.unknown("model_id", f"no {'.'.join(path)} in the config", *(path if self.doc.has(*path) else ()))

    def distributed(self, fsdp_keys: tuple[str, ...] = ("fsdp",)) -> None:
        ds = self.doc.get("deepspeed")
        if isinstance(ds, str) and ds.strip():
            inner, shown = find_deepspeed(self.file, self.doc.path, ds.strip())
            if inner is not None:
                self.read_files.append(shown)
            if inner is None:
                shipped, why = shipped_deepspeed(self.kind, ds.strip(), self.file, self.doc.span("deepspeed"))
                if shipped is not None:  # the framework's own file, named from its repository root
                    self.notes.append(f"deepspeed: {why}")
                    self._merge_ds(shipped)
                    return
                self.fields["distributed"] = self._ds_unknown(shown)
                # frameworks ship their DeepSpeed files (axolotl's deepspeed_configs/zero3_bf16.json):
                # the name is a hint for the user, never a value
                self.notes.append(f"distributed: {shown}; DeepSpeed stage unknown{stage_hint(ds)}")
                return
            self._merge_ds(inner)
            return
        if isinstance(ds, dict):  # inline DeepSpeed config (axolotl accepts a dict)
            sub = Document(self.doc.path, ds, {k[1:]: s for k, s in self.doc.keys.items() if k[:1] == ("deepspeed",)})
            self._merge_ds(sub)
            return
        for key in fsdp_keys:
            f = self.doc.get(key)
            if f in (None, "", False, [], {}):
                continue
            if isinstance(f, dict):  # an fsdp_config section: its own keys refine this (fsdp_details)
                self.lit("distributed", "fsdp", key, chain=(f"{key}: FSDP settings",))
                self.lib("offload", "none", f"{key} without offload_params")
                return
            # TrainingArguments-style option string or list: "full_shard auto_wrap offload"
            text = " ".join(map(str, f)) if isinstance(f, list) else str(f)
            value = "fsdp_shard_grad_op" if "shard_grad_op" in text else ("none" if text.strip() in ("no_shard", "false") else "fsdp")
            self.lit("distributed", value, key)
            if "offload" in text:
                self.lit("offload", "params", key)
            else:
                self.lib("offload", "none", f"{key} without offload")
            return
        self.lib("distributed", "none", f"{self.kind}: no deepspeed or fsdp setting (one process, or DDP: each rank holds the whole model)")
        self.lib("offload", "none", "no DeepSpeed or FSDP offload")

    def _ds_unknown(self, why: str):
        from memlint.plan import Value

        return Value("deepspeed", "literal", self.doc.span("deepspeed"), (why,))

    def _merge_ds(self, inner: Document) -> None:
        facts = deepspeed_facts(inner)
        merged, notes, diags = apply_launch(self.fields, facts, inner.path)
        self.fields = merged
        self.notes.extend(notes)
        self.diagnostics.extend(diags)
        self._ds = (facts, inner.path)

    def plan(self):
        """The optimizer the framework's Trainer steps under its DeepSpeed config, once the config's optimizer and
        trainer are read: the DeepSpeed file's optimizer section (DeepSpeed builds it, whatever the config's
        optimizer says), else DeepSpeed's CPU Adam where the file offloads the optimizer (accelerate swaps it)."""
        from memlint.extract.configs.launchers import offloaded_optimizer
        from memlint.plan import Value

        facts, where = getattr(self, "_ds", (None, ""))
        if facts is not None and facts.optimizer is not None:
            cur, v = self.fields.get("optimizer"), facts.optimizer
            said = (f"{where}'s optimizer section replaces the config's optimizer {cur.value!r}",) \
                if cur is not None and cur.known and cur.value != v.value else ()
            self.fields["optimizer"] = Value(v.value, v.source, v.span, v.chain + said)
        elif facts is not None and facts.cpu_optimizer is not None:
            swapped = offloaded_optimizer(self.fields.get("optimizer"), self.fields.get("trainer"), facts.cpu_optimizer,
                                          "deepspeed")
            if swapped is not None:
                self.fields["optimizer"] = swapped
        return super().plan()

    def offload_activations(self, key: str) -> None:
        """offload_activations from `key` (TRL activation_offloading, axolotl activation_offloading,
        torchtune enable_activation_offloading): the saved activations move to CPU memory in forward."""
        v = self.doc.get(key)
        if v is None:
            self.lib("offload_activations", False, f"{key} not set")
        elif isinstance(v, str) and v.strip().lower() in ("legacy", "disk"):  # axolotl's other offloading modes
            self.lit("offload_activations", True, key, chain=(f"{key}: {v} (axolotl offloads the activations)",))
            if v.strip().lower() == "disk":
                self.notes.append(f"{key}: disk offloads to disk rather than CPU memory; the GPU side is the same")
        else:
            try:
                on = self.bool_at(key)
            except Bad:
                self.unknown("offload_activations", f"{key} is not true/false", key)
                return
            self.lit("offload_activations", bool(on), key)

    def fused_flag(self, key: str, name: str, why_unset: str) -> None:
        """fused_loss from one boolean key: `name` ("liger" / "cce") when true."""
        try:
            v = self.bool_at(key)
        except Bad:
            return
        if v is None:
            self.lib("fused_loss", False, why_unset)
        else:
            self.lit("fused_loss", name if v else False, key)
        if v:
            self.notes.append(f"fused_loss: {key} replaces the loss only for the model families the kernel patches "
                              "(Llama, Mistral, Qwen2, Gemma, ...); memlint trusts the flag")

    def dora(self, *path: str, why_unset: str) -> None:
        """use_dora from the framework's key (axolotl peft_use_dora, LLaMA-Factory / TRL use_dora, torchtune
        model.use_dora): each passes it to peft's LoraConfig(use_dora=...) or builds its own DoRA layers."""
        try:
            v = self.bool_at(*path)
        except Bad:
            self.unknown("use_dora", f"{'.'.join(path)} is not true/false", *path)
            return
        if v is None:
            self.lib("use_dora", False, why_unset)
        else:
            self.lit("use_dora", v, *path)

    def modules_to_save(self, key: str, why_unset: str) -> None:
        """peft's modules_to_save from the framework's key (axolotl / TRL lora_modules_to_save, a list;
        LLaMA-Factory additional_target, comma-separated): each passes it to LoraConfig(modules_to_save=...)."""
        v = self.doc.get(key)
        if v is None:
            self.lib("lora_modules_to_save", None, why_unset)
        elif isinstance(v, str) and v.strip():
            self.lit("lora_modules_to_save", [x.strip() for x in v.split(",") if x.strip()], key)
        elif isinstance(v, list) and all(isinstance(x, str) for x in v):
            self.lit("lora_modules_to_save", list(v), key)
        else:
            self.unknown("lora_modules_to_save", f"{key} is not a list of module names", key)

    def ta_int(self, name: str, key: str, cls: str) -> None:
        """An integer TrainingArguments field: literal, else the library's default (library_defaults.json)."""
        if self.doc.has(key):
            self.int_field(name, key)
            return
        dd = library_default(cls, key)
        self.lib(name, dd.value, dd.why) if dd else self.unknown(name, f"no {cls} default for {key}")

    def trainer(self, value: str, why: str) -> None:
        from memlint.plan import Value

        self.fields["trainer"] = Value(value, "literal", None, (why,))


# ---- axolotl ---------------------------------------------------------------------------------


class Axolotl(FrameworkReader):
    kind = "axolotl"
    rank = 100

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return "base_model" in keys and bool(keys & _AXOLOTL)

    def read(self) -> None:
        d = self.doc
        self.model_id("base_model")
        self.dtypes()
        self.adapter()
        mb = self.int_field("per_device_batch", "micro_batch_size", default_key="micro_batch_size")
        try:
            eb = self.int_at("eval_batch_size")
        except Bad:
            eb = None
        if eb is not None:
            self.lit("eval_batch", eb, "eval_batch_size")
        elif mb is not None:
            _, ref = frameworks.substitution("axolotl", "eval_batch_size")
            v = self.fields["per_device_batch"]
            self.fields["eval_batch"] = type(v)(mb, v.source, v.span, v.chain + (ref,))
        self.int_field("grad_accum", "gradient_accumulation_steps", default_key="gradient_accumulation_steps")
        self.int_field("max_length", "sequence_len", default_key="sequence_len")
        self.padding()
        self.flag("group_by_length", "group_by_length")
        tc = d.get("torch_compile")
        if isinstance(tc, bool):  # axolotl passes it to TrainingArguments(torch_compile=...): the forward and its loss
            self.lit("compiled_loss", tc, "torch_compile")
        gc = d.get("gradient_checkpointing")
        if gc is None:
            self.fw("gradient_checkpointing", "gradient_checkpointing")
        else:
            self.lit("gradient_checkpointing", bool(gc) and str(gc).lower() != "false", "gradient_checkpointing")
        self.offload_activations("activation_offloading")
        if isinstance(gc, str) and gc.lower().startswith("offload") and not self.fields["offload_activations"].value:
            # axolotl's gradient_checkpointing: offload checkpoints with the layer inputs in CPU memory
            self.lit("offload_activations", True, "gradient_checkpointing",
                     chain=(f"gradient_checkpointing: {gc} keeps the checkpointed layer inputs in CPU memory",))
        unfrozen = d.get("unfrozen_parameters")
        if isinstance(unfrozen, list) and unfrozen:
            self.notes.append(f"unfrozen_parameters: only parameters matching its {len(unfrozen)} pattern(s) train; memlint counts "
                              "gradients and optimizer state for every parameter (an overestimate)")
        opt = d.get("optimizer")
        if isinstance(opt, str) and opt:
            self.lit("optimizer", opt.lower(), "optimizer")
        else:
            own = frameworks.default("axolotl", "optimizer")
            if own is not None and own.value is None:  # older axolotl leaves it to TrainingArguments
                dd = library_default("transformers.TrainingArguments", "optim")
                self.lib("optimizer", dd.value if dd else None, f"{own.why}; {dd.why}" if dd else own.why)
            else:
                self.fw("optimizer", "optimizer")
        self.attention()
        self.fused_loss()
        self.distributed(("fsdp", "fsdp_config"))
        self.fsdp_details()
        rl = d.get("rl")
        if isinstance(rl, str) and rl:
            self.trainer(_RL_TRAINERS.get(rl.lower(), f"{rl} trainer"), f"rl: {rl} (axolotl's trl-based trainer)")
        else:
            self.trainer("Trainer", "axolotl's AxolotlTrainer (a transformers.Trainer)")
        self.checked_keys()

    def flag(self, name: str, key: str) -> None:
        try:
            v = self.bool_at(key)
        except Bad:
            self.unknown(name, f"{key} is not true/false", key)
            return
        if v is None:
            self.fw(name, key)
        else:
            self.lit(name, v, key)

    def dtypes(self) -> None:
        # axolotl utils/config normalize_config: bf16/bfloat16 -> bfloat16; load_in_8bit/fp16/float16
        # -> float16; else float32. bf16 defaults to "auto": bf16 wherever the GPU supports it.
        d = self.doc
        bf16 = d.get("bf16") if d.has("bf16") and d.get("bf16") is not None else None
        why_src = "bf16"
        if bf16 is None:
            bf16 = frameworks.default("axolotl", "bf16").value
            why_src = None
        pure_bf16, pure_fp16 = d.get("bfloat16") is True, d.get("float16") is True
        fp16 = d.get("fp16") is True
        if d.get("fp8") is True:  # accelerate mixed_precision="fp8", torchao's AO backend: first and last linear kept
            self.lit("float8_training", "layers", "fp8")
        bf16_on = bf16 is True or (isinstance(bf16, str) and bf16.lower() in ("auto", "true"))
        ref = "axolotl utils/config normalize_config: cfg.torch_dtype from bf16/bfloat16, else load_in_8bit/fp16/float16, else float32"
        if pure_bf16 or bf16_on:
            key = "bfloat16" if pure_bf16 else why_src
            chain = ("bf16: auto -> bf16 on a GPU that supports it (Ampere or newer)" if bf16 == "auto" else f"{key}: true", ref)
            self._dtype_value("torch_dtype", "bf16", key, chain)
            prec = "pure-bf16" if pure_bf16 else "amp-bf16"
            self._dtype_value("precision", prec, key, chain)
        elif fp16 or pure_fp16 or d.get("load_in_8bit") is True:
            key = "fp16" if fp16 else ("float16" if pure_fp16 else "load_in_8bit")
            self._dtype_value("torch_dtype", "fp16", key, (f"{key}: true", ref))
            # float16: true is fp16 weights without autocast (fp16: true autocasts; load_in_8bit alone: neither)
            self._dtype_value("precision", "amp-fp16" if fp16 else ("pure-fp16" if pure_fp16 else "fp32"), key, (f"{key}: true", ref))
        else:
            key = why_src
            self._dtype_value("torch_dtype", "fp32", key, ("neither bf16 nor fp16", ref))
            self._dtype_value("precision", "fp32", key, ("neither bf16 nor fp16", ref))

    def _dtype_value(self, name: str, value: str, key: str | None, chain: tuple) -> None:
        from memlint.plan import Value

        if key and self.doc.has(key):
            self.fields[name] = Value(value, "literal", self.doc.span(key), chain)
        else:
            self.fields[name] = Value(value, "library-default", None, chain)

    def adapter(self) -> None:
        d = self.doc
        adapter = d.get("adapter")
        b4, b8 = d.get("load_in_4bit") is True, d.get("load_in_8bit") is True
        dtype = self.fields["torch_dtype"].value
        if adapter in (None, ""):
            self.lib("method", "full", frameworks.default("axolotl", "adapter").why)
            if b4 or b8:
                self.bad("load_in_4bit/load_in_8bit without an adapter: axolotl refuses to start (full fine-tuning cannot train a quantized base)",
                         "load_in_4bit" if b4 else "load_in_8bit")
            self.lib("quant_bits", None, "no adapter: the base model is not quantized")
            return
        if not isinstance(adapter, str) or adapter not in ("lora", "qlora"):
            self.unknown("method", f"adapter {adapter!r} is not LoRA or QLoRA", "adapter")
            return
        if adapter == "lora" and b4:  # LoRA on a 4-bit base (load_in_4bit reaches from_pretrained): QLoRA's memory
            self.lit("method", "qlora", "adapter", chain=("adapter: lora with load_in_4bit: true: LoRA over a 4-bit base",))
        else:
            self.lit("method", adapter, "adapter")
        for name, key in (("lora_r", "lora_r"), ("lora_alpha", "lora_alpha")):
            try:
                v = self.int_at(key)
            except Bad:
                v = None
            if v is not None:
                self.lit(name, v, key)
            else:
                self.unknown(name, f"{key} not set (axolotl passes None to peft)", *((key,) if d.has(key) else ()))
        self.number_field("lora_dropout", "lora_dropout", default_key="lora_dropout")
        if d.get("lora_target_linear") is True:
            self.lit("lora_targets", "all-linear", "lora_target_linear")
        elif isinstance(d.get("lora_target_modules"), (list, str)) and d.get("lora_target_modules"):
            t = d.get("lora_target_modules")
            self.lit("lora_targets", [t] if isinstance(t, str) else [str(x) for x in t], "lora_target_modules")
        else:
            self.unknown("lora_targets", "neither lora_target_modules nor lora_target_linear")
        self.dora("peft_use_dora", why_unset="axolotl: peft_use_dora not set (LoraConfig's use_dora=False)")
        self.modules_to_save("lora_modules_to_save", "axolotl: lora_modules_to_save not set (LoraConfig's modules_to_save=None)")
        if adapter == "qlora":
            if not b4:
                self.bad("adapter: qlora requires load_in_4bit: true (axolotl refuses to start without it)", "adapter")
            sub, ref = frameworks.substitution("axolotl", "qlora_bnb_config")
            key = "load_in_4bit" if d.has("load_in_4bit") else "adapter"
            self.lit("quant_bits", 4, key)
            self.lib("quant_type", sub["quant_type"], ref)
            self.lib("double_quant", sub["double_quant"], ref)
            self.lib("compute_dtype", dtype, ref)
        elif b4:
            # adapter: lora with load_in_4bit: axolotl builds no BitsAndBytesConfig, transformers' defaults apply
            self.lit("quant_bits", 4, "load_in_4bit")
            for name, attr in (("quant_type", "bnb_4bit_quant_type"), ("double_quant", "bnb_4bit_use_double_quant")):
                dd = library_default("transformers.BitsAndBytesConfig", attr)
                self.lib(name, dd.value if dd else None, (dd.why if dd else attr) + "; adapter: lora + load_in_4bit builds no axolotl bnb config")
        elif b8:
            self.lit("quant_bits", 8, "load_in_8bit")
        else:
            self.lib("quant_bits", None, "load_in_4bit/load_in_8bit not set")

    def padding(self) -> None:
        d = self.doc
        if d.get("sample_packing") is True:
            self.lit("packing", True, "sample_packing")
            self.lit("padding", "packing", "sample_packing")
            return
        if d.has("sample_packing"):
            self.lit("packing", False, "sample_packing")
        else:
            self.fw("packing", "sample_packing")
        if d.get("pad_to_sequence_len") is True:
            self.lit("padding", "max_length", "pad_to_sequence_len")
        else:
            _, ref = frameworks.substitution("axolotl", "collator_padding")
            self.lib("padding", "longest", ref)

    def fused_loss(self) -> None:
        """A fused loss comes from a plugin: its flag does nothing unless the plugin is listed."""
        plugins = self.doc.get("plugins")
        plugins = [str(p) for p in plugins] if isinstance(plugins, list) else []
        cce = any("cut_cross_entropy" in p for p in plugins)
        liger = any("integrations.liger" in p for p in plugins)
        if cce:
            try:
                v = self.bool_at("cut_cross_entropy")
            except Bad:
                v = False
            if v is None:
                v = bool(self.fw("fused_loss", "cut_cross_entropy", lambda x: "cce" if x else False))
            else:
                self.lit("fused_loss", "cce" if v else False, "cut_cross_entropy")
            if v:
                return
        if liger:
            self.fused_flag("liger_fused_linear_cross_entropy", "liger", frameworks.default(self.kind, "liger_fused_linear_cross_entropy").why)
            return
        if not cce:
            self.lib("fused_loss", False, "no CutCrossEntropyPlugin or LigerPlugin in plugins")
        for key, plugin in (("cut_cross_entropy", "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"),
                            ("liger_fused_linear_cross_entropy", "axolotl.integrations.liger.LigerPlugin")):
            if self.doc.get(key) is True and plugin.split(".")[2] not in " ".join(plugins):
                self.notes.append(f"{key}: true without {plugin} in plugins: axolotl does not apply it")

    def attention(self) -> None:
        d = self.doc
        # newer axolotl: `attention: flash` and a free `attn_implementation` (kernels) beside the flags
        names = {"flash": "flash_attention_2", "flash_attention": "flash_attention_2", "flash_attention_2": "flash_attention_2", "fa2": "flash_attention_2",
                 "sdpa": "sdpa", "sdp": "sdpa", "xformers": "sdpa", "flex": "flex_attention", "flex_attention": "flex_attention", "eager": "eager"}
        for key in ("attn_implementation", "attention"):
            v = d.get(key)
            if isinstance(v, str) and v:
                self.lit("attn_implementation", names.get(v.lower(), v), key)
                return
        for key, value in (("flash_attention", "flash_attention_2"), ("sdp_attention", "sdpa"), ("flex_attention", "flex_attention"),
                           ("xformers_attention", "sdpa"), ("eager_attention", "eager")):
            if d.get(key) is True:
                chain = (f"{key}: true",) + (("xformers: memory-efficient attention without the s² scores, as sdpa",) if key.startswith("x") else ())
                self.lit("attn_implementation", value, key, chain=chain)
                return
        self.fw("attn_implementation", "attn_implementation")

    def fsdp_details(self) -> None:
        cfg = self.doc.get("fsdp_config")
        if not isinstance(cfg, dict) or self.fields.get("distributed") is None or not str(self.fields["distributed"].value).startswith("fsdp"):
            return
        for key in ("fsdp_offload_params", "offload_params"):
            if cfg.get(key) is True:
                self.lit("offload", "params", "fsdp_config", key)
        for key in ("fsdp_reshard_after_forward", "reshard_after_forward"):
            if cfg.get(key) is False:
                self.lit("distributed", "fsdp_shard_grad_op", "fsdp_config", key, chain=(f"fsdp_config.{key}: false (FSDP2: SHARD_GRAD_OP)",))
        for key in ("fsdp_sharding_strategy", "sharding_strategy"):
            s = cfg.get(key)
            if isinstance(s, str) and "SHARD_GRAD_OP" in s.upper():
                self.lit("distributed", "fsdp_shard_grad_op", "fsdp_config", key)


# ---- LLaMA-Factory ---------------------------------------------------------------------------


class LlamaFactory(FrameworkReader):
    kind = "llama-factory"
    rank = 90

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return "model_name_or_path" in keys and bool(keys & _LLAMA_FACTORY)

    @staticmethod
    def not_training(doc: Document) -> str | None:
        """Why a config trains nothing, or None: LLaMA-Factory's workflows train only under
        `do_train: true` (train/sft/workflow.py `if training_args.do_train`); export (adapter merge)
        and chat/inference configs carry the model keys without it."""
        if doc.get("do_train") is True:
            return None
        what = ("an export (adapter merge) config for llamafactory-cli export" if doc.has("export_dir")
                else "an inference config for llamafactory-cli chat" if doc.has("infer_backend")
                else "a LLaMA-Factory config without do_train: true (only evaluation or prediction)")
        return f"{what}: it trains nothing, so there is no training step to size"

    def read(self) -> None:
        d = self.doc
        self.model_id("model_name_or_path")
        stage = d.get("stage") if isinstance(d.get("stage"), str) else frameworks.default(self.kind, "stage").value
        self._precision()
        self._method()
        self._training(stage)
        self.fused_flag("enable_liger_kernel", "liger", frameworks.default(self.kind, "enable_liger_kernel").why)
        self.distributed(("fsdp",))
        self._vision()
        self.trainer({"sft": "Seq2SeqTrainer", "pt": "Trainer", "dpo": "DPOTrainer", "kto": "KTOTrainer", "rm": "RewardTrainer", "ppo": "PPOTrainer",
                      "orpo": "ORPOTrainer"}.get(str(stage), str(stage)),  # stage: orpo, LLaMA-Factory 0.6-0.7
                     f"LLaMA-Factory stage: {stage}")
        for flag in ("use_galore", "use_badam", "use_apollo", "use_adam_mini", "use_muon"):
            if d.get(flag) is True:
                self.notes.append(f"{flag}: LLaMA-Factory swaps in its own optimizer; memlint estimates the optimizer named by optim")
        self.checked_keys()

    def _vision(self) -> None:
        """A multimodal model's image size and what trains (hparams/model_args.py image_max_pixels / image_min_pixels,
        hparams/finetuning_args.py freeze_vision_tower / freeze_multi_modal_projector; data/vision.json)."""
        from memlint import data

        fw = data.load("vision.json")["frameworks"]["llamafactory"]
        for key in ("image_max_pixels", "image_min_pixels"):
            try:
                v = self.int_at(key)
            except Bad:
                self.unknown(key, f"{key} is not a number of pixels", key)
                continue
            if v is None:
                self.lib(key, fw[key], f"LLaMA-Factory {key} default ({fw['ref'].split(';')[0]})")
            else:
                self.lit(key, v, key)
        for key, name in (("freeze_vision_tower", "train_vision"), ("freeze_multi_modal_projector", "train_projector")):
            try:
                v = self.bool_at(key)
            except Bad:
                self.unknown(name, f"{key} is not true/false", key)
                continue
            if v is None:
                self.lib(name, not fw[key], f"LLaMA-Factory {key}: {fw[key]} by default (hparams/finetuning_args.py)")
            else:
                self.lit(name, not v, key, chain=(f"{key}: {str(v).lower()}",))

    def _precision(self) -> None:
        d = self.doc
        if d.get("fp8") is True and str(d.get("fp8_backend") or "auto").lower() in ("auto", "torchao"):
            # train/fp8_utils.py: accelerate's AORecipeKwargs with a filter that keeps embeddings and lm_head
            self.lit("float8_training", "layers", "fp8")
        bf16, fp16, pure = d.get("bf16") is True, d.get("fp16") is True, d.get("pure_bf16") is True
        ref = frameworks.substitution(self.kind, "compute_dtype")[1]
        if pure or bf16:
            key = "pure_bf16" if pure else "bf16"
            self.lit("torch_dtype", "bf16", key, chain=(f"{key}: true", ref))
            self.lit("precision", "pure-bf16" if pure else "amp-bf16", key)
        elif fp16:
            self.lit("torch_dtype", "fp16", "fp16", chain=("fp16: true", ref))
            self.lit("precision", "amp-fp16", "fp16")
        else:
            self.lib("torch_dtype", "auto", "neither bf16 nor fp16: LLaMA-Factory infers compute_dtype from the checkpoint (infer_optim_dtype)")
            self.lib("precision", "fp32", "neither bf16 nor fp16 nor pure_bf16")

    def _method(self) -> None:
        """finetuning_type, quantization_bit and the LoRA settings."""
        d = self.doc
        ft = d.get("finetuning_type")
        ref = frameworks.substitution(self.kind, "compute_dtype")[1]
        try:
            bits = self.int_at("quantization_bit")
        except Bad:
            bits = None
        if isinstance(ft, str):
            method = {"lora": "lora", "full": "full"}.get(ft)
            if method is None:
                self.unknown("method", f"finetuning_type {ft!r} (freeze/oft) is not one memlint models", "finetuning_type")
            else:
                self.lit("method", "qlora" if method == "lora" and bits == 4 else method, "finetuning_type")
        else:
            dflt = frameworks.default(self.kind, "finetuning_type")
            self.lib("method", "qlora" if bits == 4 else dflt.value, dflt.why)
        hqq = d.get("quantization_method") == "hqq"
        if bits is not None and hqq:
            # model/model_utils/quantization.py: HqqConfig(nbits=quantization_bit, quant_zero=False, quant_scale=False,
            # axis=0), group_size HqqConfig's default
            self.lit("quant_bits", bits, "quantization_bit")
            self.lit("quant_type", "hqq", "quantization_method")
            dd = library_default("transformers.HqqConfig", "group_size")
            self.lib("quant_group_size", dd.value if dd else 64, (dd.why if dd else "HqqConfig group_size")
                     + "; LLaMA-Factory passes only nbits (and axis=0)")
        elif bits is not None:
            self.lit("quant_bits", bits, "quantization_bit")
            if bits == 4:
                for name, key in (("quant_type", "quantization_type"), ("double_quant", "double_quantization")):
                    if d.has(key):
                        self.lit(name, d.get(key), key)
                    else:
                        self.fw(name, key)
                self.lib("compute_dtype", self.fields["torch_dtype"].value, ref)
        else:
            self.fw("quant_bits", "quantization_bit")
        if self.fields.get("method") is not None and self.fields["method"].value in ("lora", "qlora"):
            rank = self.int_field("lora_r", "lora_rank", default_key="lora_rank")
            self.number_field("lora_dropout", "lora_dropout", default_key="lora_dropout")
            try:
                alpha = self.int_at("lora_alpha")
            except Bad:
                alpha = None
            if alpha is not None:
                self.lit("lora_alpha", alpha, "lora_alpha")
            elif rank is not None:
                self.lib("lora_alpha", rank * 2, "llamafactory hparams/finetuning_args.py: lora_alpha None -> lora_rank * 2")
            self.dora("use_dora", why_unset="LLaMA-Factory hparams/finetuning_args.py: use_dora False")
            self.modules_to_save("additional_target", "LLaMA-Factory hparams/finetuning_args.py: additional_target None")
            t = d.get("lora_target")
            if t is None:
                t = self.fw("lora_targets", "lora_target")
                self.fields["lora_targets"] = type(self.fields["lora_targets"])(_lf_targets(t), "library-default", None, self.fields["lora_targets"].chain)
            else:
                self.lit("lora_targets", _lf_targets(t), "lora_target")

    def _training(self, stage: str) -> None:
        """The training fields: transformers' Seq2SeqTrainingArguments, with LLaMA-Factory's defaults."""
        d = self.doc
        ta = "transformers.Seq2SeqTrainingArguments"
        self.ta_int("per_device_batch", "per_device_train_batch_size", ta)
        self.ta_int("eval_batch", "per_device_eval_batch_size", ta)
        self.ta_int("grad_accum", "gradient_accumulation_steps", ta)
        self.int_field("max_length", "cutoff_len", default_key="cutoff_len")
        packing = d.get("packing")
        if d.get("neat_packing") is True:
            self.lit("packing", True, "neat_packing")
        elif isinstance(packing, bool):
            self.lit("packing", packing, "packing")
        else:
            dflt = frameworks.default(self.kind, "packing")
            self.lib("packing", stage == "pt", f"{dflt.why} (stage {stage})")
        if self.fields["packing"].value:
            p = self.fields["packing"]
            self.fields["padding"] = type(p)("packing", p.source, p.span, p.chain)
        else:
            self.lib("padding", "longest", frameworks.substitution(self.kind, "collator_padding")[1])
        gbl = d.get("group_by_length")
        if isinstance(gbl, bool):
            self.lit("group_by_length", gbl, "group_by_length")
        else:
            self.lib("group_by_length", False, "transformers TrainingArguments: group_by_length False")
        dis = d.get("disable_gradient_checkpointing")
        if isinstance(dis, bool):
            self.lit("gradient_checkpointing", not dis, "disable_gradient_checkpointing")
        else:
            dflt = frameworks.default(self.kind, "disable_gradient_checkpointing")
            self.lib("gradient_checkpointing", True, dflt.why)
        opt = d.get("optim")
        if isinstance(opt, str) and opt:
            self.lit("optimizer", opt.lower(), "optim")
        else:
            dd = library_default(ta, "optim")
            self.lib("optimizer", dd.value if dd else None, dd.why if dd else "optim not set")
        fa = d.get("flash_attn")
        attn = {"fa2": "flash_attention_2", "sdpa": "sdpa", "eager": "eager", "disabled": "eager"}.get(str(fa).lower()) if fa is not None else None
        if attn:
            self.lit("attn_implementation", attn, "flash_attn")
        else:
            self.lib("attn_implementation", "sdpa", frameworks.default(self.kind, "flash_attn").why)


def _lf_targets(t: Any) -> Any:
    if isinstance(t, str):
        parts = [p.strip() for p in t.split(",") if p.strip()]
        return "all-linear" if parts == ["all"] else parts
    if isinstance(t, list):
        return [str(x) for x in t]
    return None


# ---- TRL / alignment-handbook recipes ----------------------------------------------------------


class TrlRecipe(FrameworkReader):
    kind = "trl-recipe"
    rank = 80

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return "model_name_or_path" in keys and bool(keys & _TRL)

    def read(self) -> None:
        self.model_id("model_name_or_path")
        self.offload_activations("activation_offloading")
        self._model()
        cls = self._config_class()
        self._training(cls)
        self.distributed(("fsdp",))
        self.trainer(cls.split(".")[-1].replace("Config", "Trainer"), f"recipe fields read as {cls} ({frameworks.substitution(self.kind, 'sft_config')[1]})")
        self.checked_keys()

    def _model(self) -> None:
        """trl.ModelConfig's fields: dtype, use_peft and the LoRA settings, 4/8-bit loading."""
        d = self.doc
        for key in ("dtype", "torch_dtype"):
            if d.has(key) and dtype_name(d.get(key)):
                self.lit("torch_dtype", dtype_name(d.get(key)), key)
                break
        else:
            dd = library_default("transformers.from_pretrained", "dtype")
            self.lib("torch_dtype", dd.value if dd else None, (dd.why if dd else "from_pretrained default") + " (ModelConfig.dtype not set)")
        peft = self._bool("use_peft")
        b4, b8 = self._bool("load_in_4bit"), self._bool("load_in_8bit")
        if peft:
            self.lit("method", "qlora" if b4 else "lora", "use_peft")
            for name, key in (("lora_r", "lora_r"), ("lora_alpha", "lora_alpha")):
                self.int_field(name, key, default_key=key)
            self.number_field("lora_dropout", "lora_dropout", default_key="lora_dropout")
            t = d.get("lora_target_modules")
            if isinstance(t, (list, str)) and t:
                self.lit("lora_targets", "all-linear" if t == "all-linear" else ([t] if isinstance(t, str) else [str(x) for x in t]), "lora_target_modules")
            else:
                self.lib("lora_targets", None, "trl ModelConfig.lora_target_modules None: peft picks the architecture's defaults")
            self.dora("use_dora", why_unset="trl ModelConfig.use_dora False (get_peft_config passes it to LoraConfig)")
            self.modules_to_save("lora_modules_to_save", "trl ModelConfig.lora_modules_to_save None")
        else:
            src = "use_peft" if d.has("use_peft") else None
            if src:
                self.lit("method", "full", src)
            else:
                self.lib("method", "full", frameworks.default(self.kind, "use_peft").why)
        ref = frameworks.substitution(self.kind, "quantization_config")[1]
        if b4:
            self.lit("quant_bits", 4, "load_in_4bit")
            qt = d.get("bnb_4bit_quant_type")
            self.lit("quant_type", qt, "bnb_4bit_quant_type") if isinstance(qt, str) else self.fw("quant_type", "bnb_4bit_quant_type")
            nq = d.get("use_bnb_nested_quant")
            self.lit("double_quant", nq, "use_bnb_nested_quant") if isinstance(nq, bool) else self.fw("double_quant", "use_bnb_nested_quant")
            self.lib("compute_dtype", self.fields["torch_dtype"].value, ref)
        elif b8:
            self.lit("quant_bits", 8, "load_in_8bit")
        else:
            self.lib("quant_bits", None, frameworks.default(self.kind, "load_in_4bit").why)

    def _training(self, cls: str) -> None:
        """The trainer config's fields (SFTConfig, DPOConfig, ...), with that class's defaults."""
        d = self.doc
        self.ta_int("per_device_batch", "per_device_train_batch_size", cls)
        self.ta_int("eval_batch", "per_device_eval_batch_size", cls)
        self.ta_int("grad_accum", "gradient_accumulation_steps", cls)
        for key in ("max_length", "max_seq_length"):
            if d.has(key):
                self.int_field("max_length", key)
                break
        else:
            dd = library_default(cls, "max_length") or library_default(cls, "max_seq_length")
            if dd is not None:
                self.lib("max_length", dd.value, dd.why)
            else:
                self.unknown("max_length", f"no max_length and no {cls} default")
        pk = d.get("packing")
        if isinstance(pk, bool):
            self.lit("packing", pk, "packing")
        else:
            dd = library_default(cls, "packing")
            self.lib("packing", bool(dd.value) if dd else False, dd.why if dd else "packing not set")
        p = self.fields["packing"]
        self.fields["padding"] = type(p)("packing", p.source, p.span, p.chain) if p.value else type(p)("longest", "library-default", None, (f"{cls.split('.')[-1].replace('Config', 'Trainer')}'s collator pads each batch to its longest sample",))
        self.ta_bool("group_by_length", "group_by_length", cls)
        self.ta_bool("gradient_checkpointing", "gradient_checkpointing", cls)
        self.ta_bool("compiled_loss", "torch_compile", cls)
        opt = d.get("optim")
        if isinstance(opt, str) and opt:
            self.lit("optimizer", opt.lower(), "optim")
        else:
            dd = library_default(cls, "optim")
            self.lib("optimizer", dd.value if dd else None, dd.why if dd else "optim not set")
        self.precision(cls)
        attn = d.get("attn_implementation")
        if isinstance(attn, str) and attn:
            self.lit("attn_implementation", attn, "attn_implementation")
        elif d.get("use_flash_attention_2") is True:  # the handbook's older ModelArguments
            self.lit("attn_implementation", "flash_attention_2", "use_flash_attention_2")
        else:
            dd = library_default("transformers.from_pretrained", "attn_implementation")
            self.lib("attn_implementation", dd.value if dd else "sdpa", dd.why if dd else "transformers default")
        key = "use_liger" if self.doc.has("use_liger") and not self.doc.has("use_liger_kernel") else "use_liger_kernel"
        dd = library_default(cls, "use_liger_kernel")
        self.fused_flag(key, "liger", dd.why if dd else "use_liger_kernel not set")

    def _bool(self, key: str) -> bool:
        try:
            return bool(self.bool_at(key))
        except Bad:
            return False

    def _config_class(self) -> str:
        # alignment-handbook keeps sft/, dpo/, orpo/ recipes apart; DPO-only keys settle it otherwise
        path = Path(self.doc.path)
        parts = {p.lower() for p in path.parts} | set(re.split(r"[_\-.]", path.stem.lower()))
        for name in ("dpo", "orpo", "kto", "grpo"):
            if name in parts:
                return f"trl.{name.upper()}Config"
        if self.doc.has("beta") or self.doc.has("max_prompt_length"):
            return "trl.DPOConfig"
        return "trl.SFTConfig"

    def ta_bool(self, name: str, key: str, cls: str) -> None:
        v = self.doc.get(key)
        if isinstance(v, bool):
            self.lit(name, v, key)
            return
        dd = library_default(cls, key)
        self.lib(name, bool(dd.value) if dd else False, dd.why if dd else f"{key} not set")

    def precision(self, cls: str) -> None:
        d = self.doc
        if d.get("fp16") is True:
            self.lit("precision", "amp-fp16", "fp16")
        elif d.get("bf16") is True:
            self.lit("precision", "amp-bf16", "bf16")
        elif d.get("bf16") is False or d.get("fp16") is False:
            self.lit("precision", "fp32", "bf16" if d.has("bf16") else "fp16")
        else:
            dd = library_default(cls, "bf16")
            on = dd is not None and (dd.value is True or dd.value == "not fp16")
            self.lib("precision", "amp-bf16" if on else "fp32", dd.why if dd else "bf16 not set")


# ---- torchtune ---------------------------------------------------------------------------------


_VARIANT = re.compile(r"-(instruct|chat|it)$", re.I)


def _checkpoint_variant(mid: str, folder: Any) -> str | None:
    """The checkpoint a torchtune config loads when its checkpoint folder is named for an instruct or chat variant
    of the checkpoint its builder is made for (`/tmp/Llama-3.2-1B-Instruct/` with llama3_2_1b): same architecture,
    that variant's weights; None otherwise."""
    if not isinstance(folder, str):
        return None
    org, _, name = mid.rpartition("/")
    tail = folder.rstrip("/").rsplit("/", 1)[-1]
    if not tail.lower().startswith(name.lower()) or not _VARIANT.fullmatch(tail[len(name):]):
        return None
    return f"{org}/{name}{tail[len(name):]}" if org else tail


class Torchtune(FrameworkReader):
    kind = "torchtune"

    def _model_id(self, comp: str, base: str, mid: str | None, fw: dict) -> None:
        """The model a builder makes: its Hub id (or the instruct/chat variant its checkpoint folder names); for a
        builder memlint's table lacks, the checkpoint folder the checkpointer loads."""
        d = self.doc
        chain = (f"model._component_: {comp}", fw["models"]["_doc"])
        variant = _checkpoint_variant(mid, d.get("checkpointer", "checkpoint_dir")) if mid else None
        if variant:  # the builder's architecture, loaded from its instruct/chat checkpoint's folder
            self.lit("model_id", variant, "checkpointer", "checkpoint_dir",
                     chain=chain + (f"checkpointer.checkpoint_dir names {variant.split('/')[-1]}, a variant of "
                                    f"{mid} the builder makes",))
        elif mid:
            self.lit("model_id", mid, "model", "_component_", chain=chain)
        elif isinstance(ckpt := d.get("checkpointer", "checkpoint_dir"), str) and ckpt.strip():
            # a builder memlint's table lacks (a generic `lora_llama2` with its sizes written out, a vision model):
            # the checkpoint folder the checkpointer loads is the model
            self.lit("model_id", ckpt, "checkpointer", "checkpoint_dir",
                     chain=(f"model._component_: {comp} is not in memlint's table of torchtune builders; "
                            f"checkpointer.checkpoint_dir: {ckpt} is the checkpoint it loads",))
        else:
            self.unknown("model_id", f"torchtune builder {base} is not in memlint's table", "model", "_component_")

    @staticmethod
    def launched(plan: Any, launch: Any) -> Any:
        """`tune run RECIPE.py --config X`: a sharding the config leaves open is the recipe file's (extract/tune_recipe.py)."""
        if launch.launcher == "tune" and not plan.get("distributed").known:
            from memlint.extract.tune_recipe import recipe_sharding

            return recipe_sharding(plan, launch)
        return plan

    rank = 110

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return "_component_:" in text or "_component_" in keys

    def read(self) -> None:
        from memlint.extract.configs.interpolate import resolve

        # torchtune loads its YAML with OmegaConf: `checkpoint_dir: ${model_dir}` is the top-level model_dir
        for path, why in resolve(self.doc).unresolved.items():
            self.unread[path] = why
            self.notes.append(f"{'.'.join(map(str, path))}: {why}")
        d = self.doc
        fw = frameworks.framework(self.kind)
        self.offload_activations("enable_activation_offloading")
        comp = d.get("model", "_component_")
        method = None
        if isinstance(comp, str) and "." in comp:
            module, fn = comp.rsplit(".", 1)
            method = "qlora" if fn.startswith("qlora_") else "lora" if fn.startswith("lora_") else "full"
            base = f"{module}.{fn.split('_', 1)[1] if method != 'full' else fn}"
            mid = fw["models"].get(base)
            self._model_id(comp, base, mid, fw)
            self.lit("method", method, "model", "_component_", chain=(f"builder {fn}",))
        else:
            self.unknown("model_id", "no model._component_")
            self.unknown("method", "no model._component_")
        dt = d.get("dtype")
        if dtype_name(dt):
            dtype = dtype_name(dt)
            self.lit("torch_dtype", dtype, "dtype")
            _, pref = frameworks.substitution(self.kind, "precision")
            self.lit("precision", f"pure-{dtype}" if dtype in ("bf16", "fp16") else "fp32", "dtype", chain=(f"dtype: {dt}", pref))
        else:
            dtype = self.fw("torch_dtype", "dtype")
            self.lib("precision", "fp32", "dtype not set: fp32 training")
        self.chunked_loss()
        if method in ("lora", "qlora"):
            self.dora("model", "use_dora", why_unset="torchtune lora builders: use_dora=False")
            if self.fields["use_dora"].value:
                self.notes.append("model.use_dora: torchtune's own DoRALinear is estimated with peft's DoRA layout "
                                  "(magnitude vector, weight norm every forward)")
            self.int_field("lora_r", "model", "lora_rank", default_key="lora_rank")
            self.int_field("lora_alpha", "model", "lora_alpha", default_key="lora_alpha")
            self.number_field("lora_dropout", "model", "lora_dropout", default_key="lora_dropout")
            self.lora_targets()
        if method == "qlora":
            sub, ref = frameworks.substitution(self.kind, "qlora_nf4")
            self.lit("quant_bits", 4, "model", "_component_", chain=(f"{comp}: quantize_base=True", ref))
            self.lib("quant_type", sub["quant_type"], ref)
            self.lib("double_quant", sub["double_quant"], ref)
            self.lib("compute_dtype", self.fields["torch_dtype"].value, ref)
        elif method is not None:
            self.lib("quant_bits", None, f"{method} builder: the base model is not quantized")
        if d.has("batch_size"):
            self.int_field("per_device_batch", "batch_size")
        else:
            self.unknown("per_device_batch", "no batch_size")
        if d.has("batch_size_val"):
            self.int_field("eval_batch", "batch_size_val")
        self.int_field("grad_accum", "gradient_accumulation_steps", default_key="gradient_accumulation_steps")
        self.seq_and_packing()
        v = d.get("enable_activation_checkpointing")
        if isinstance(v, bool):
            self.lit("gradient_checkpointing", v, "enable_activation_checkpointing")
        else:
            self.fw("gradient_checkpointing", "enable_activation_checkpointing")
        self.selective_checkpointing(v)
        self.lib("group_by_length", False, "torchtune samples without length grouping")
        c = d.get("compile")
        if isinstance(c, bool):
            self.lit("compiled_loss", c, "compile", chain=(f"compile: {c}" + (": the recipe's training.compile_loss compiles "
                                                           "the loss (CEWithChunkedOutputLoss: each chunk's upcast + "
                                                           "cross-entropy)" if c else ""),))
        else:
            self.lib("compiled_loss", False, "torchtune recipes: compile false unless set")
        self.optimizer()
        self.lib("attn_implementation", "sdpa", "torchtune's attention calls torch scaled_dot_product_attention")
        self.sharding()
        self.trainer("torchtune", "a torchtune recipe (`tune run`)")
        self.checked_keys()
        self.checked_keys(fw["model_keys"], {"lora_r": "lora_rank", "r": "lora_rank", "target_modules": "lora_attn_modules"}, ("model",), "model ")

    def lora_targets(self) -> None:
        d = self.doc
        names, ref = frameworks.substitution(self.kind, "lora_module_names")
        mods = d.get("model", "lora_attn_modules")
        if not isinstance(mods, list):
            self.unknown("lora_targets", "no model.lora_attn_modules")
            return
        out: list[str] = []
        for m in mods:
            out.extend(names.get(str(m), [str(m)]))
        if d.get("model", "apply_lora_to_mlp") is True:
            out.extend(names["mlp"])
        if d.get("model", "apply_lora_to_output") is True:
            out.extend(names["output"])
        self.lit("lora_targets", out, "model", "lora_attn_modules", chain=(f"lora_attn_modules: {mods}", f"apply_lora_to_mlp: {d.get('model', 'apply_lora_to_mlp')}", ref))

    def selective_checkpointing(self, enabled: Any) -> None:
        """torchtune's ac_mode: selective with ac_option: N (full_finetune_distributed, when
        enable_activation_checkpointing is off): every Nth layer checkpointed; ac_option "op" (op-level
        selective checkpointing) is not modelled."""
        d = self.doc
        if enabled is True or d.get("ac_mode") != "selective":
            return
        n = d.get("ac_option")
        if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
            self.lit("gradient_checkpointing", True, "ac_mode", chain=(f"ac_mode: selective, ac_option: {n}",))
            self.lit("recompute_every", n, "ac_option")
        else:
            self.notes.append(f"ac_mode: selective with ac_option {n!r}: op-level selective checkpointing is not "
                              "modelled (estimated without checkpointing)")

    def seq_and_packing(self) -> None:
        d = self.doc
        ds = d.get("dataset")
        sets = ds if isinstance(ds, list) else [ds] if isinstance(ds, dict) else []
        packed_at = None
        for i, s in enumerate(sets):
            if isinstance(s, dict) and s.get("packed") is True:
                packed_at = ("dataset", i, "packed") if isinstance(ds, list) else ("dataset", "packed")
        if d.has("tokenizer", "max_seq_len") and d.get("tokenizer", "max_seq_len") is not None:
            self.int_field("max_length", "tokenizer", "max_seq_len")
        elif d.has("tokenizer", "max_seq_len"):
            self.unknown("max_length", "tokenizer.max_seq_len: null: samples are not truncated, the longest sample sets the peak", "tokenizer", "max_seq_len")
        else:
            self.dataset_length(sets, ds)
        if packed_at:
            self.lit("packing", True, *packed_at)
            self.lit("padding", "packing", *packed_at)
        else:
            self.fw("packing", "packed")
            self.lib("padding", "longest", frameworks.substitution(self.kind, "collator_padding")[1])

    def dataset_length(self, sets: list, ds: Any) -> None:
        """No tokenizer.max_seq_len: the dataset's own max_seq_len (torchtune < 0.3 builders took one), else its
        builder's default at the torchtune version read (data/frameworks.json dataset_max_seq_len)."""
        table = frameworks.framework(self.kind).get("dataset_max_seq_len", {})
        version = installed_version(frameworks.framework(self.kind)["package"])
        for i, s in enumerate(sets):
            if not isinstance(s, dict):
                continue
            at = ("dataset", i) if isinstance(ds, list) else ("dataset",)
            v = s.get("max_seq_len")
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                self.lit("max_length", v, *at, "max_seq_len", chain=(
                    f"dataset max_seq_len: {v} (the dataset builder truncates each sample to it)",))
                return
            comp = s.get("_component_")
            for cand in table.get(comp, ()) if isinstance(comp, str) else ():
                if not in_range(version, cand.get("versions")):
                    continue
                shown = shown_version(frameworks.framework(self.kind)["package"])
                if cand["value"] is None:
                    self.unknown("max_length", f"{comp} does not truncate in {shown} and tokenizer.max_seq_len is not set: "
                                 f"the longest sample sets the peak ({cand['ref']})", *at, "_component_")
                else:
                    from memlint.plan import Value

                    self.fields["max_length"] = Value(cand["value"], "library-default", self.doc.span(*at, "_component_"),
                                                      (f"dataset._component_: {comp}",
                                                       f"its max_seq_len default {cand['value']} in {shown}: {cand['ref']}"))
                return
        self.unknown("max_length", "no tokenizer.max_seq_len")

    def optimizer(self) -> None:
        d = self.doc
        table = frameworks.framework(self.kind)["optimizers"]
        comp = d.get("optimizer", "_component_")
        if not isinstance(comp, str):
            self.unknown("optimizer", "no optimizer._component_")
            return
        name = table.get(comp) or optimizer_of_class(comp)  # torchtune's own table, then the library classes
        if name == "adamw_torch" and d.get("optimizer", "fused") is True:
            name = "adamw_torch_fused"
        if name is None:
            self.lit("optimizer", comp, "optimizer", "_component_", chain=(f"{comp}: not in memlint's torchtune optimizer table",))
        else:
            self.lit("optimizer", name, "optimizer", "_component_", chain=(f"optimizer._component_: {comp}",))
        self.optimizer_in_bwd()

    def chunked_loss(self) -> None:
        """loss._component_ CEWithChunkedOutputLoss: the recipe calls model.set_num_output_chunks(num_output_chunks)."""
        comp = self.doc.get("loss", "_component_")
        if not isinstance(comp, str):
            self.lib("chunked_loss", 0, "no loss._component_")
            return
        if not comp.endswith("CEWithChunkedOutputLoss"):
            self.lit("chunked_loss", 0, "loss", "_component_", chain=(f"loss: {comp}",))
            return
        k = self.doc.get("loss", "num_output_chunks")
        ref = "torchtune modules/loss/ce_chunked_output_loss.py: num_output_chunks=8"
        if k is None:
            self.lit("chunked_loss", 8, "loss", "_component_", chain=(f"loss: {comp}", ref))
        elif isinstance(k, int) and not isinstance(k, bool) and k > 0:
            self.lit("chunked_loss", k, "loss", "num_output_chunks", chain=(f"loss: {comp}",))
        else:
            self.unknown("chunked_loss", "loss.num_output_chunks is not a positive integer", "loss", "num_output_chunks")

    def optimizer_in_bwd(self) -> None:
        """optimizer_in_bwd: the full-finetune recipes step each parameter in backward (one optimizer per
        parameter, a post-accumulate-grad hook); the LoRA recipes never read the key."""
        d = self.doc
        try:
            v = self.bool_at("optimizer_in_bwd")
        except Bad:
            self.unknown("optimizer_in_bwd", "optimizer_in_bwd is not true/false", "optimizer_in_bwd")
            return
        method = self.fields.get("method")
        if v and method is not None and method.value in ("lora", "qlora"):
            self.lib("optimizer_in_bwd", False, "torchtune's LoRA/QLoRA recipes do not read optimizer_in_bwd")
            self.notes.append("optimizer_in_bwd: true has no effect in torchtune's LoRA recipes: estimated with the "
                              "usual optimizer step")
            return
        if v is None:
            self.fw("optimizer_in_bwd", "optimizer_in_bwd")
            return
        _, ref = frameworks.substitution(self.kind, "optimizer_in_bwd")
        self.lit("optimizer_in_bwd", v, "optimizer_in_bwd", chain=(f"optimizer_in_bwd: {str(v).lower()}", ref))
        if v and (d.get("gradient_accumulation_steps") or 1) != 1:
            self.bad("optimizer_in_bwd: true with gradient_accumulation_steps > 1: torchtune refuses to start "
                     "(Gradient accumulation is not supported with optimizer in bwd)", "optimizer_in_bwd")
        if v and d.get("clip_grad_norm") is not None:
            self.bad("optimizer_in_bwd: true with clip_grad_norm: torchtune refuses to start (Gradient clipping is not "
                     "supported with optimizer in bwd)", "optimizer_in_bwd")

    def sharding(self) -> None:
        d = self.doc
        for key in ("fsdp_cpu_offload", "fsdp_reshard_after_forward", "custom_sharded_layers", "data_parallel_shard_dim"):
            if d.has(key):
                value = "fsdp_shard_grad_op" if d.get("fsdp_reshard_after_forward") is False else "fsdp"
                self.lit("distributed", value, key, chain=(f"{key} is read by torchtune's distributed (FSDP2) recipes",))
                if d.get("fsdp_cpu_offload") is True:
                    self.lit("offload", "params", "fsdp_cpu_offload")
                else:
                    self.lib("offload", "none", "fsdp_cpu_offload not set")
                return
        if "single_device" in Path(self.doc.path).stem:
            self.lib("distributed", "none", "a single-device config (its name says so)")
            self.lib("offload", "none", "single device")
            self.lib("num_gpus", 1, "a single-device config (its name says so): torchtune's single-device recipes "
                                    "train on one GPU")
        else:
            self.unknown("distributed", "torchtune shards only under a distributed recipe; which one `tune run` uses is not in the config")


def stage_hint(ref: str) -> str:
    """What a DeepSpeed file's name suggests when the file is not there (`ds_zero2_no_offload.json`, axolotl's
    `zero3_bf16.json`): a hint for the user, never a value; "" when the name says no stage."""
    hint = re.search(r"(?:zero|z|stage)[_-]?([1-3])", Path(ref).name.lower())
    return f"; the name suggests ZeRO-{hint.group(1)}: pass --assume distributed=zero{hint.group(1)}" if hint else ""
