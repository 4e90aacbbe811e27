"""oumi training configs (`oumi train -c configs/recipes/**/sft/**/train.yaml`): TrainingConfig's
model / data / training / peft / fsdp / deepspeed sections, with oumi's dataclass defaults.

oumi merges the YAML into its OmegaConf schema, which refuses unknown keys at every level, so
every unknown key is reported. `${...}` references are resolved as OmegaConf would.
"""

from __future__ import annotations

import re

from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad, dtype_name
from memlint.extract.configs.interpolate import resolve
from memlint.extract.configs.launchers import find_deepspeed
from memlint.extract.configs.readers import FrameworkReader
from memlint.library.defaults import default as library_default

_DTYPES = {"f16": "fp16", "f32": "fp32", "half": "fp16", "float": "fp32"}


def _dtype(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    return dtype_name(text) or _DTYPES.get(text.strip().lower())


def _enum(v: Any) -> str | None:
    """An oumi enum as written: its name (TRL_SFT) or its value (trl_sft), upper-cased."""
    return v.strip().upper() if isinstance(v, str) and v.strip() else None


_MARKERS = {"training.trainer_type", "training.use_peft", "training.enable_gradient_checkpointing",
            "training.mixed_precision_dtype", "model.torch_dtype_str", "model.model_max_length", "peft.q_lora",
            "fsdp.enable_fsdp"}
_MARKERS_TEXT = re.compile(r"^[ \t]+(?:trainer_type|use_peft|enable_gradient_checkpointing|torch_dtype_str|"
                           r"model_max_length)[ \t]*:", re.M)
_MODEL_TEXT = re.compile(r"^[ \t]+model_name[ \t]*:", re.M)


class Oumi(FrameworkReader):
    kind = "oumi"
    rank = 10

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return {"model", "training"} <= keys and (("model.model_name" in keys and bool(keys & _MARKERS))
                                                  or bool(_MODEL_TEXT.search(text) and _MARKERS_TEXT.search(text)))

    def read(self) -> None:
        res = resolve(self.doc)
        for path, why in res.unresolved.items():
            self.unread[path] = why
            self.notes.append(f"{'.'.join(map(str, path))}: {why}")
        self._model()
        self._peft()
        self._training()
        self._data()
        self._distributed()
        self._check_keys()

    def _fw(self, key: str):
        d = frameworks.default(self.kind, key)
        assert d is not None, key
        return d

    def _field(self, name: str, section: str, key: str) -> Any:
        """`section.key` as a plan field: literal when written, else oumi's default; returns the value."""
        if self.doc.has(section, key) and self.doc.get(section, key) is not None:
            v = self.doc.get(section, key)
            self.lit(name, v, section, key)
            return v
        d = self._fw(f"{section}.{key}")
        self.lib(name, d.value, d.why)
        return d.value

    def _model(self) -> None:
        d = self.doc
        mid = d.get("model", "model_name")
        if isinstance(mid, str) and mid.strip():
            self.lit("model_id", mid.strip(), "model", "model_name")
        else:
            self.unknown("model_id", "no model.model_name (oumi requires one)", *(("model",) if d.has("model") else ()))
        raw = d.get("model", "torch_dtype_str")
        if raw is not None:
            dt = _dtype(raw)
            if dt is None:
                self.bad(f"model.torch_dtype_str {raw!r} is not a dtype oumi reads (torch_utils.get_torch_dtype raises)", "model", "torch_dtype_str")
                self.unknown("torch_dtype", f"torch_dtype_str {raw!r}", "model", "torch_dtype_str")
            else:
                self.lit("torch_dtype", dt, "model", "torch_dtype_str")
        else:
            self.lib("torch_dtype", "auto", self._fw("model.torch_dtype_str").why)
        attn = d.get("model", "attn_implementation")
        if isinstance(attn, str) and attn:
            self.lit("attn_implementation", attn, "model", "attn_implementation")
        else:
            dd = library_default("transformers.from_pretrained", "attn_implementation")
            self.lib("attn_implementation", dd.value if dd else "sdpa", f"{self._fw('model.attn_implementation').why}; {dd.why if dd else ''}".rstrip("; "))
        if d.get("model", "adapter_model"):
            self.notes.append("model.adapter_model: training continues from that adapter; its rank is the adapter's, not peft.lora_r")

    def _peft(self) -> None:
        d = self.doc
        try:
            use = self.bool_at("training", "use_peft")
        except Bad:
            use = None
        q = d.get("peft", "q_lora") is True
        if not use:
            if use is False:
                self.lit("method", "full", "training", "use_peft")
            else:
                self.lib("method", "full", self._fw("training.use_peft").why)
            self.lib("quant_bits", None, "no peft: oumi loads the base unquantized")
            if q:
                self.notes.append("peft.q_lora without training.use_peft: oumi passes no peft params (train.py), the base is not quantized")
            return
        bits = None
        if q:
            try:
                bits = self.int_at("peft", "q_lora_bits")
            except Bad:
                bits = None
            bits = bits if bits is not None else self._fw("peft.q_lora_bits").value
        self.lit("method", "qlora" if bits == 4 else "lora", "training", "use_peft")
        self.int_field("lora_r", "peft", "lora_r", default_key="peft.lora_r")
        self.int_field("lora_alpha", "peft", "lora_alpha", default_key="peft.lora_alpha")
        t = d.get("peft", "lora_target_modules")
        if isinstance(t, (list, str)) and t:
            self.lit("lora_targets", "all-linear" if t == "all-linear" else [t] if isinstance(t, str) else [str(x) for x in t], "peft", "lora_target_modules")
        else:
            self.lib("lora_targets", None, self._fw("peft.lora_target_modules").why)
        self._quant(q, bits)

    def _quant(self, q: bool, bits: int | None) -> None:
        d = self.doc
        if not q:
            self.lib("quant_bits", None, self._fw("peft.q_lora").why)
            return
        where = ("peft", "q_lora_bits") if d.has("peft", "q_lora_bits") else ("peft", "q_lora")
        if bits not in (4, 8):
            self.bad(f"peft.q_lora_bits should be 4 or 8, not {bits!r} (to_bits_and_bytes loads neither)", *where)
            self.unknown("quant_bits", f"q_lora_bits {bits!r}", *where)
            return
        self.lit("quant_bits", bits, *where)
        if bits == 4:
            self._field("quant_type", "peft", "bnb_4bit_quant_type")
            self._field("double_quant", "peft", "use_bnb_nested_quant")
            raw = self._field("compute_dtype", "peft", "bnb_4bit_compute_dtype")
            v = self.fields["compute_dtype"]
            self.fields["compute_dtype"] = type(v)(_dtype(raw), v.source, v.span, v.chain)

    def _training(self) -> None:
        d = self.doc
        self.int_field("per_device_batch", "training", "per_device_train_batch_size", default_key="training.per_device_train_batch_size")
        self.int_field("eval_batch", "training", "per_device_eval_batch_size", default_key="training.per_device_eval_batch_size")
        self.int_field("grad_accum", "training", "gradient_accumulation_steps", default_key="training.gradient_accumulation_steps")
        gc = d.get("training", "enable_gradient_checkpointing")
        if isinstance(gc, bool):
            self.lit("gradient_checkpointing", gc, "training", "enable_gradient_checkpointing")
        else:
            self.lib("gradient_checkpointing", False, self._fw("training.enable_gradient_checkpointing").why)
        opt = d.get("training", "optimizer")
        if isinstance(opt, str) and opt:
            self.lit("optimizer", opt.lower(), "training", "optimizer")
        else:
            self.lib("optimizer", "adamw_torch", self._fw("training.optimizer").why)
        self._precision()
        table, ref = frameworks.substitution(self.kind, "trainers")
        tt = _enum(d.get("training", "trainer_type")) or self._fw("training.trainer_type").value
        self.trainer(table.get(tt, "oumi"), f"training.trainer_type: {tt} ({ref})")
        self.lib("group_by_length", False, "oumi's TrainingParams has no group_by_length: transformers' False")
        liger = d.get("model", "enable_liger_kernel") is True
        if liger:
            self.lit("fused_loss", "liger", "model", "enable_liger_kernel", chain=("model.enable_liger_kernel: true (use_liger_kernel for the HF/TRL trainers)",))
        else:
            self.lib("fused_loss", False, "model.enable_liger_kernel not set")

    def _precision(self) -> None:
        d = self.doc
        mp = _enum(d.get("training", "mixed_precision_dtype"))
        dtype = self.fields["torch_dtype"].value
        if mp in ("FP16", "BF16"):
            self.lit("precision", "amp-fp16" if mp == "FP16" else "amp-bf16", "training", "mixed_precision_dtype")
            if dtype not in ("fp32", None):
                self.bad(f"training.mixed_precision_dtype {mp.lower()} needs the model in fp32: oumi raises 'Model must be loaded in fp32 "
                         "to enable mixed precision training'", "training", "mixed_precision_dtype")
            return
        why = "training.mixed_precision_dtype: none" if mp == "NONE" else self._fw("training.mixed_precision_dtype").why
        value = f"pure-{dtype}" if dtype in ("bf16", "fp16") else "fp32"
        if mp == "NONE":
            self.lit("precision", value, "training", "mixed_precision_dtype", chain=(why,))
        else:
            self.lib("precision", value, why + (f"; {dtype} weights without autocast" if value != "fp32" else "; no autocast"))

    def _data(self) -> None:
        d = self.doc
        kw = d.get("training", "trainer_kwargs")
        kw = kw if isinstance(kw, dict) else {}
        pack = d.get("data", "train", "pack") is True
        trl_pack = kw.get("packing") is True
        n = d.get("model", "model_max_length")
        ref = frameworks.substitution(self.kind, "max_length")[1]
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            self.lit("max_length", n, "model", "model_max_length", chain=(f"model.model_max_length: {n}", ref))
        elif (k := next((k for k in ("max_length", "max_seq_length") if isinstance(kw.get(k), int)), None)) is not None:
            self.lit("max_length", kw[k], "training", "trainer_kwargs", k)
        elif pack:
            v, pref = frameworks.substitution(self.kind, "pack")
            self.lib("max_length", v, pref)
        else:
            self.unknown("max_length", self._fw("model.model_max_length").why, *(("model", "model_max_length") if d.has("model", "model_max_length") else ()))
        if pack or trl_pack:
            where = ("data", "train", "pack") if pack else ("training", "trainer_kwargs", "packing")
            self.lit("packing", True, *where)
            self.lit("padding", "packing", *where)
            return
        if d.has("data", "train", "pack"):
            self.lit("packing", False, "data", "train", "pack")
        else:
            self.lib("packing", False, self._fw("data.train.pack").why)
        self.lib("padding", "longest", frameworks.substitution(self.kind, "collator_padding")[1])

    def _distributed(self) -> None:
        d = self.doc
        if d.get("deepspeed", "enable_deepspeed") is True:
            self._deepspeed()
            return
        if d.get("fsdp", "enable_fsdp") is not True:
            why = "fsdp.enable_fsdp: false" if d.has("fsdp", "enable_fsdp") else self._fw("fsdp.enable_fsdp").why
            self.lib("distributed", "none", f"{why}: no sharding (one process, or DDP under `oumi distributed torchrun`)")
            self.lib("offload", "none", "no FSDP or DeepSpeed")
            return
        table, ref = frameworks.substitution(self.kind, "sharding")
        strat = _enum(d.get("fsdp", "sharding_strategy"))
        if strat is None:
            dd = self._fw("fsdp.sharding_strategy")
            self.lit("distributed", table[dd.value], "fsdp", "enable_fsdp", chain=("fsdp.enable_fsdp: true", dd.why))
        elif strat in table:
            self.lit("distributed", table[strat], "fsdp", "sharding_strategy", chain=(f"sharding_strategy: {strat}", ref))
        else:
            self.bad(f"fsdp.sharding_strategy should be one of {', '.join(table)}, not {strat!r}", "fsdp", "sharding_strategy")
            self.lit("distributed", "fsdp", "fsdp", "enable_fsdp")
        if d.get("fsdp", "cpu_offload") is True:
            self.lit("offload", "params", "fsdp", "cpu_offload")
        else:
            self.lib("offload", "none", "fsdp.cpu_offload: false (FSDPParams default)")

    def _deepspeed(self) -> None:
        d = self.doc
        ref = d.get("deepspeed", "deepspeed_config_path")
        if isinstance(ref, str) and ref.strip():
            inner, shown = find_deepspeed(self.file, d.path, ref.strip())
            if inner is None:
                self.lit("distributed", "deepspeed", "deepspeed", "deepspeed_config_path", chain=(shown,))
                self.notes.append(f"distributed: {shown}; DeepSpeed stage unknown")
                return
            self._merge_ds(inner)
            return
        stage = str(d.get("deepspeed", "zero_stage") if d.get("deepspeed", "zero_stage") is not None else "0").strip()
        stage = {"ZERO_0": "0", "ZERO_1": "1", "ZERO_2": "2", "ZERO_3": "3"}.get(stage.upper(), stage)
        if stage not in ("0", "1", "2", "3"):
            self.bad(f"deepspeed.zero_stage should be 0, 1, 2 or 3, not {stage!r}", "deepspeed", "zero_stage")
            self.lit("distributed", "deepspeed", "deepspeed", "enable_deepspeed")
            return
        key = ("deepspeed", "zero_stage") if d.has("deepspeed", "zero_stage") else ("deepspeed", "enable_deepspeed")
        self.lit("distributed", f"zero{stage}" if stage != "0" else "none", *key, chain=(f"deepspeed zero_stage {stage}",))
        off = "none"
        for name, value in (("offload_param", "params"), ("offload_optimizer", "optimizer")):
            sub = d.get("deepspeed", name)
            if isinstance(sub, dict) and str(sub.get("device", "cpu")).lower() in ("cpu", "nvme"):
                off = value
                self.lit("offload", value, "deepspeed", name)
                break
        if off == "none":
            self.lib("offload", "none", "no deepspeed.offload_param / offload_optimizer")

    def _check_keys(self) -> None:
        fw = frameworks.framework(self.kind)
        known, moved = fw["section_keys"], fw.get("section_misplaced", {})
        self.checked_keys()
        for section in ("model", "training", "peft", "fsdp", "deepspeed", "data"):
            self.checked_keys(known[section], moved.get(section, {}), (section,), f"{section} ")
        for split in ("train", "test", "validation"):
            self.checked_keys(known["data.train"], {}, ("data", split), f"data.{split} ")
            sets = self.doc.get("data", split, "datasets")
            for i, _ in enumerate(sets if isinstance(sets, list) else []):
                self.checked_keys(known["dataset"], {}, ("data", split, "datasets", i), f"data.{split}.datasets ")

