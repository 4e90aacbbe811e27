"""H2O LLM Studio experiment configs (`python llm_studio/train.py -Y cfg.yaml`, the cfg.yaml an
experiment saves): the problem type's nested sections (architecture, tokenizer, training,
environment), read as llm_studio/src/utils/modeling_utils.py builds the backbone and
llm_studio/train.py trains it: its own loop, LoRA through peft, 4/8-bit through bitsandbytes.

Its Python configs (llm_studio/python_configs/*.py) are dataclasses, not read here: their
defaults are data (frameworks.json "h2o-llmstudio").
"""

from __future__ import annotations

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad
from memlint.extract.configs.readers import FrameworkReader

_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
_CAUSAL = ("text_causal_language_modeling", "text_causal_classification_modeling", "text_causal_regression_modeling")


class H2OLLMStudio(FrameworkReader):
    kind = "h2o-llmstudio"
    rank = 60

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:  # H2O LLM Studio's experiment cfg.yaml
        return "llm_backbone" in keys and bool(keys & {"architecture", "training", "tokenizer", "problem_type"})

    def _get(self, section: str, key: str):
        """(value, from the config?): the config's value, else the dataclass default."""
        v = self.doc.get(section, key)
        if v is not None:
            return v, True
        d = frameworks.default(self.kind, f"{section}.{key}")
        return (d.value if d else None), False

    def _set(self, name: str, value, section: str, key: str, given: bool, chain: tuple[str, ...] = ()) -> None:
        if given:
            self.lit(name, value, section, key, chain=chain)
        else:
            d = frameworks.default(self.kind, f"{section}.{key}")
            self.lib(name, value, (d.why if d else f"{section}.{key} not set") + (f"; {chain[0]}" if chain else ""))

    def _int(self, name: str, section: str, key: str) -> None:
        if self.doc.has(section, key):
            try:
                self.lit(name, self.int_at(section, key), section, key)
            except Bad:
                self.unknown(name, f"{section}.{key} is not an integer", section, key)
            return
        self.fw(name, f"{section}.{key}")

    def read(self) -> None:
        d = self.doc
        problem = d.get("problem_type")
        if isinstance(problem, str) and problem not in _CAUSAL:
            self.notes.append(f"problem_type {problem}: read as causal language modelling; its own loss "
                              "(a DPO reference, a seq2seq decoder) is not modelled")
        self.model_id("llm_backbone")
        self._backbone()
        self._lora()
        self._int("per_device_batch", "training", "batch_size")
        self._int("grad_accum", "training", "grad_accumulation")
        self._int("max_length", "tokenizer", "max_length")
        self._padding()
        self.lib("packing", False, "H2O LLM Studio does not pack samples (one conversation per row)")
        gc, given = self._get("architecture", "gradient_checkpointing")
        self._set("gradient_checkpointing", bool(gc), "architecture", "gradient_checkpointing", given)
        self._optimizer()
        self._precision()
        attn = d.get("architecture", "attention_implementation") or d.get("training", "attention_implementation")
        if isinstance(attn, str) and attn and attn != "auto":
            where = "architecture" if d.has("architecture", "attention_implementation") else "training"
            self.lit("attn_implementation", attn, where, "attention_implementation")
        self._distributed()
        self.trainer(*frameworks.substitution(self.kind, "trainer"))

    def _backbone(self) -> None:
        dt, given = self._get("architecture", "backbone_dtype")
        dt = str(dt)
        if dt in ("int4", "int8"):
            sub, ref = frameworks.substitution(self.kind, dt)
            for name, value in sub.items():
                self._set(name, value, "architecture", "backbone_dtype", given, chain=(f"backbone_dtype {dt}: {ref}",))
            up, why = frameworks.substitution(self.kind, "kbit_upcast")
            self._set("kbit_prep", up, "architecture", "backbone_dtype", given, chain=(why,))
        elif dt in _DTYPES:
            self._set("torch_dtype", _DTYPES[dt], "architecture", "backbone_dtype", given)
            self._set("quant_bits", None, "architecture", "backbone_dtype", given,
                      chain=(f"backbone_dtype {dt}: not quantized",))
        else:
            self.bad(f"architecture.backbone_dtype {dt!r} is not one of int4, int8, float16, bfloat16, float32",
                     "architecture", "backbone_dtype")
            self.unknown("torch_dtype", f"backbone_dtype {dt!r}", "architecture", "backbone_dtype")
            self.unknown("quant_bits", f"backbone_dtype {dt!r}", "architecture", "backbone_dtype")

    def _lora(self) -> None:
        lora, given = self._get("training", "lora")
        bits = self.fields["quant_bits"].value if "quant_bits" in self.fields else None
        if lora:
            self._set("method", "qlora" if bits == 4 else "lora", "training", "lora", given)
            self._int("lora_r", "training", "lora_r")
            self._int("lora_alpha", "training", "lora_alpha")
            v, g = self._get("training", "lora_dropout")
            self._set("lora_dropout", v, "training", "lora_dropout", g)
            v, g = self._get("training", "use_dora")
            self._set("use_dora", bool(v), "training", "use_dora", g)
            t = self.doc.get("training", "lora_target_modules")
            if isinstance(t, str) and t.strip():
                self.lit("lora_targets", [x.strip() for x in t.split(",") if x.strip()], "training", "lora_target_modules")
        else:
            self._set("method", "full", "training", "lora", given)

    def _padding(self) -> None:
        q = self.doc.get("tokenizer", "padding_quantile")
        compiled = self.doc.get("environment", "compile_model") is True
        value, ref = frameworks.substitution(self.kind, "padding")
        if compiled or q == 0:
            why = "environment.compile_model: true" if compiled else "tokenizer.padding_quantile: 0"
            self.lit("padding", "max_length", *(("environment", "compile_model") if compiled else ("tokenizer", "padding_quantile")),
                     chain=(f"{why}: batch_padding leaves every sample padded to max_length ({ref})",))
        elif q is not None:
            self.lit("padding", value, "tokenizer", "padding_quantile",
                     chain=(f"padding_quantile {q}: the worst batch is cut at its longest sample ({ref})",))
        else:
            self.lib("padding", value, ref)

    def _optimizer(self) -> None:
        name, given = self._get("training", "optimizer")
        table, ref = frameworks.substitution(self.kind, "optimizers")
        optim = table.get(str(name))
        if optim is None:
            self.unknown("optimizer", f"training.optimizer {name!r} is not in memlint's table ({ref})",
                         *(("training", "optimizer") if given else ()))
            return
        self._set("optimizer", optim, "training", "optimizer", given, chain=(f"{name}: {ref}",))

    def _precision(self) -> None:
        mp, given = self._get("environment", "mixed_precision")
        if not mp:
            self._set("precision", "fp32", "environment", "mixed_precision", given,
                      chain=("mixed_precision false: no autocast",))
            return
        dt, g = self._get("environment", "mixed_precision_dtype")
        value = "amp-fp16" if dt == "float16" else "amp-bf16"
        self._set("precision", value, "environment", "mixed_precision_dtype", g,
                  chain=(f"mixed_precision with {dt}: torch.autocast in train.py",))

    def _distributed(self) -> None:
        ds, given = self._get("environment", "use_deepspeed")
        gpus = self.doc.get("environment", "gpus")
        if isinstance(gpus, list) and gpus:
            self.lit("num_gpus", len(gpus), "environment", "gpus")
        if ds:
            method, g = self._get("environment", "deepspeed_method")
            stage = {"ZeRO2": "zero2", "ZeRO3": "zero3"}.get(str(method))
            if stage is None:
                self.unknown("distributed", f"deepspeed_method {method!r}", "environment", "deepspeed_method")
                return
            self._set("distributed", stage, "environment", "deepspeed_method", g)
            self.lib("offload", "none", "H2O LLM Studio's DeepSpeed config offloads nothing")
        else:
            self._set("distributed", "none", "environment", "use_deepspeed", given,
                      chain=("use_deepspeed false: one process per GPU, each holding the whole model (DDP)",))
            self.lib("offload", "none", "no DeepSpeed")
