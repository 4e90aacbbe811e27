"""LLM-Finetuning-Toolkit (georgian-io, `llmtune run config.yml`): its pydantic Config read as
llmtune/finetune/lora.py uses it. The toolkit always trains LoRA adapters with TRL's SFTTrainer,
packs (packing=True is hard-coded) and turns on gradient checkpointing whatever the config says.

With `ablation.use_ablate: true` a list in place of a value is one run per item: the plan keeps
every item as a candidate and the estimate takes the worst.
"""

from __future__ import annotations

from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad, dtype_name
from memlint.extract.configs.readers import FrameworkReader
from memlint.library.defaults import default as library_default
from memlint.plan import Value

_TA = ("training", "training_args")
_SFT = ("training", "sft_args")
_BNB = ("model", "bitsandbytes")


_MARKERS = {"ablation", "qa", "inference", "save_dir"}


class LlmTune(FrameworkReader):
    kind = "llmtune"
    rank = 15

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return "model.hf_model_ckpt" in keys or ({"model", "lora", "training"} <= keys and bool(keys & _MARKERS))

    def read(self) -> None:
        self.ablate = self.doc.get("ablation", "use_ablate") is True
        self._model()
        self._lora()
        self._training()
        self._attn()
        self.lib("distributed", "none", "llmtune runs one process (model.device_map 'auto' may spread the layers over the visible GPUs)")
        self.lib("offload", "none", "no DeepSpeed or FSDP")
        self.lib("group_by_length", False, "llmtune's TrainingArgs has no group_by_length: transformers' False")
        self.lib("fused_loss", False, "no fused loss")
        self.trainer(*frameworks.substitution(self.kind, "trainer"))
        self._check_keys()

    def _fw(self, key: str):
        d = frameworks.default(self.kind, key)
        assert d is not None, key
        return d

    def _value(self, name: str, *path: Any, default_key: str, kind: type = int, convert=lambda x: x) -> Any:
        """A scalar field: literal, a list of candidates under ablation, else llmtune's default."""
        v = self.doc.get(*path)
        where = ".".join(path)
        if isinstance(v, list):
            items = [convert(x) for x in v if isinstance(x, kind) and not (kind is int and isinstance(x, bool))]
            if not self.ablate or not items or len(items) != len(v):
                self.bad(f"{where} is a list: llmtune reads a list only under ablation.use_ablate: true (one run per item)", *path)
                self.unknown(name, f"{where} is a list without ablation", *path)
                return None
            # the value is the run the estimate sizes: the largest number, else the last item
            worst = max(items) if kind is int else items[-1]
            self.fields[name] = Value(worst, "literal", self.doc.span(*path), (f"{where}: {v!r} (ablation: one run per item)",), candidates=tuple(items))
            self.notes.append(f"{where}: ablation runs {len(items)} values; memlint sizes {worst!r} (pass --assume {name}=... for another)")
            return worst
        if v is None:
            d = self._fw(default_key)
            self.lib(name, convert(d.value), d.why)
            return convert(d.value)
        if kind is int:
            try:
                n = self.int_at(*path)
            except Bad:
                self.unknown(name, f"{where} is not an integer", *path)
                return None
            self.lit(name, n, *path)
            return n
        if not isinstance(v, kind):
            self.bad(f"{where} should be a {kind.__name__}, not {v!r}", *path)
            self.unknown(name, f"{where} is not a {kind.__name__}", *path)
            return None
        self.lit(name, convert(v), *path)
        return convert(v)

    def _model(self) -> None:
        d = self.doc
        self._value("model_id", "model", "hf_model_ckpt", default_key="model.hf_model_ckpt", kind=str, convert=str.strip)
        dt = d.get("model", "torch_dtype")
        if dt is None:
            self.lib("torch_dtype", "auto", self._fw("model.torch_dtype").why)
        elif dtype_name(dt):
            self.lit("torch_dtype", dtype_name(dt), "model", "torch_dtype")
        else:
            self.bad(f"model.torch_dtype {dt!r} is not a torch dtype (casted_torch_dtype raises ValueError)", "model", "torch_dtype")
            self.unknown("torch_dtype", f"model.torch_dtype {dt!r}", "model", "torch_dtype")
        self._quant()

    def _quant(self) -> None:
        d = self.doc
        bnb = d.get(*_BNB)
        if not isinstance(bnb, dict):
            self.bad("no model.bitsandbytes section: llmtune loads the model with BitsAndBytesConfig(**model.bitsandbytes.model_dump()) "
                     "and fails on None (llmtune/finetune/lora.py _get_model)", *(("model",) if d.has("model") else ()))
            self.lib("quant_bits", None, "no bitsandbytes section")
            return
        if d.get("model", "quantize") is not True:
            self.notes.append("model.quantize is not true, but the bitsandbytes section is still used: its validator runs before "
                              "bitsandbytes is read, and lora.py builds BitsAndBytesConfig from it")
        b4 = d.get(*_BNB, "load_in_4bit")
        b4 = self._fw("bitsandbytes.load_in_4bit").value if b4 is None else b4 is True
        if b4:
            key = ("load_in_4bit",) if d.has(*_BNB, "load_in_4bit") else ()
            if key:
                self.lit("quant_bits", 4, *_BNB, *key)
            else:
                self.lib("quant_bits", 4, self._fw("bitsandbytes.load_in_4bit").why)
            self._value("quant_type", *_BNB, "bnb_4bit_quant_type", default_key="bitsandbytes.bnb_4bit_quant_type", kind=str)
            self._value("double_quant", *_BNB, "bnb_4bit_use_double_quant", default_key="bitsandbytes.bnb_4bit_use_double_quant", kind=bool)
            self._value("compute_dtype", *_BNB, "bnb_4bit_compute_dtype", default_key="bitsandbytes.bnb_4bit_compute_dtype", kind=str,
                        convert=lambda x: dtype_name(x) or x)
        elif d.get(*_BNB, "load_in_8bit") is True:
            self.lit("quant_bits", 8, *_BNB, "load_in_8bit")
        else:
            self.lit("quant_bits", None, *_BNB, chain=("bitsandbytes: neither load_in_4bit nor load_in_8bit",))

    def _lora(self) -> None:
        sub, ref = frameworks.substitution(self.kind, "method")
        bits = self.fields["quant_bits"].value
        self.lib("method", "qlora" if bits == 4 else sub, ref)
        self._value("lora_r", "lora", "r", default_key="lora.r")
        self._value("lora_alpha", "lora", "lora_alpha", default_key="lora.lora_alpha")
        t = self.doc.get("lora", "target_modules")
        if t is None:
            self.lib("lora_targets", "all-linear", self._fw("lora.target_modules").why)
        elif isinstance(t, list) and t and all(isinstance(x, list) for x in t) and self.ablate:
            self.fields["lora_targets"] = Value(t[0], "literal", self.doc.span("lora", "target_modules"), ("lora.target_modules (ablation)",), candidates=tuple(tuple(x) for x in t))
        elif isinstance(t, (list, str)) and t:
            self.lit("lora_targets", "all-linear" if t == "all-linear" else [t] if isinstance(t, str) else [str(x) for x in t], "lora", "target_modules")
        else:
            self.unknown("lora_targets", "lora.target_modules is empty", "lora", "target_modules")

    def _training(self) -> None:
        d = self.doc
        self._value("per_device_batch", *_TA, "per_device_train_batch_size", default_key="training_args.per_device_train_batch_size")
        dd = library_default("transformers.TrainingArguments", "per_device_eval_batch_size")
        if dd is not None:
            self.lib("eval_batch", dd.value, dd.why + " (llmtune's TrainingArgs does not set it)")
        self._value("grad_accum", *_TA, "gradient_accumulation_steps", default_key="training_args.gradient_accumulation_steps")
        self._value("optimizer", *_TA, "optim", default_key="training_args.optim", kind=str, convert=str.lower)
        bf16, fp16 = d.get(*_TA, "bf16") is True, d.get(*_TA, "fp16") is True
        if bf16:
            self.lit("precision", "amp-bf16", *_TA, "bf16")
        elif fp16:
            self.lit("precision", "amp-fp16", *_TA, "fp16")
        elif d.has(*_TA, "bf16") or d.has(*_TA, "fp16"):
            self.lit("precision", "fp32", *_TA, "bf16" if d.has(*_TA, "bf16") else "fp16")
        else:
            self.lib("precision", "fp32", f"{self._fw('training_args.bf16').why}; {self._fw('training_args.fp16').why}")
        gc_ref = frameworks.substitution(self.kind, "gradient_checkpointing")[1]
        if d.has(*_TA, "gradient_checkpointing"):
            self.lit("gradient_checkpointing", True, *_TA, "gradient_checkpointing",
                     chain=(f"gradient_checkpointing: {d.get(*_TA, 'gradient_checkpointing')}", gc_ref))
        else:
            self.lib("gradient_checkpointing", True, gc_ref)
        self._value("max_length", *_SFT, "max_seq_length", default_key="sft_args.max_seq_length")
        pref = frameworks.substitution(self.kind, "packing")[1]
        self.lib("packing", True, pref)
        self.lib("padding", "packing", pref)

    def _attn(self) -> None:
        a = self.doc.get("model", "attn_implementation")
        if isinstance(a, str) and a:
            self.lit("attn_implementation", a, "model", "attn_implementation")
            return
        dd = library_default("transformers.from_pretrained", "attn_implementation")
        self.lib("attn_implementation", dd.value if dd else "sdpa", f"{self._fw('model.attn_implementation').why}; {dd.why if dd else 'transformers default'}")

    def _check_keys(self) -> None:
        fw = frameworks.framework(self.kind)
        closed = set(fw["closed_sections"])
        moved = fw.get("section_misplaced", {})
        self.checked_keys()
        for section, known in fw["section_keys"].items():
            dotted = {"bitsandbytes": "model.bitsandbytes", "training_args": "training.training_args", "sft_args": "training.sft_args"}.get(section, section)
            self.checked_keys(known, moved.get(dotted, {}), tuple(dotted.split(".")), f"{dotted} ",
                              policy="closed" if dotted in closed else None)
