"""ms-swift (ModelScope's `swift sft|pt|rlhf`): the run's arguments as its CLI parses them, from the command's
`--key value` flags (ms-swift 2.x-4.x) or a YAML/JSON file given as the command's first argument (4.x), into
TrainArguments / RLHFArguments over transformers' Seq2SeqTrainingArguments, with ms-swift's own defaults
(data/frameworks.json "ms-swift"): LoRA unless told otherwise, a micro-batch of 1, accumulation filled up to 16
samples per step, recompute on, the template padding each batch to its longest sample, and the mixed precision
that follows the load dtype. 2.x's names (sft_type, model_id_or_path, dtype, quantization_bit, batch_size) are
read as 2.x read them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad, dtype_name
from memlint.extract.configs.readers import FrameworkReader
from memlint.library.defaults import default as library_default
from memlint.plan import Span, Value

_TA = "transformers.Seq2SeqTrainingArguments"
_METHODS = {"lora": "lora", "longlora": "lora", "full": "full", "lora_llm": "lora"}
_ATTN = {"flash_attn": "flash_attention_2", "flash_attention_2": "flash_attention_2", "flash_attention_3": "flash_attention_2",
         "sdpa": "sdpa", "eager": "eager"}
_DTYPES_2X = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}
# keys only ms-swift's arguments have (with `model`, `model_id_or_path` or `model_type`)
_MARKERS = {"train_type", "tuner_type", "sft_type", "rlhf_type", "attn_impl", "quant_bits", "model_author", "tuner_backend"}


class MsSwift(FrameworkReader):
    kind = "ms-swift"
    rank = 20

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return bool(keys & {"model", "model_id_or_path", "model_type"}) and bool(keys & _MARKERS)

    @staticmethod
    def launched(plan: Any, launch: Any) -> Any:
        """`NPROC_PER_NODE=4 swift sft ...` runs torchrun with that many processes (cli/main.py get_torchrun_args);
        without it one process, on the one GPU CUDA_VISIBLE_DEVICES names (several: a device_map over them). The
        accumulation ms-swift fills in (16 samples per optimizer step) is then over the processes' world."""
        from memlint.extract.launch import _visible_devices

        if launch is None or getattr(launch, "launcher", None) != "swift":
            return plan
        env = dict(getattr(launch, "env", {}) or {})
        nproc, nnodes = env.get("NPROC_PER_NODE", "").strip(), env.get("NNODES", "1").strip() or "1"
        why, gpus, world = None, None, None
        if nproc.isdigit() and int(nproc) > 0:
            gpus = int(nproc)
            world = gpus * (int(nnodes) if nnodes.isdigit() and int(nnodes) > 0 else 1)
            why = f"NPROC_PER_NODE={nproc}: swift starts torchrun with {nproc} processes"
        elif not nproc:
            world = 1
            visible = _visible_devices(env)
            if visible:
                gpus = visible
                why = (f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}: one process on its one GPU" if visible == 1
                       else f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} without NPROC_PER_NODE: one process "
                            f"spreading the model over the {visible} GPUs (device_map)")
        fields = dict(plan.fields)
        from memlint.catalog.spec import modelscope_twin

        twin = modelscope_twin(fields["model_id"].value) if fields.get("model_id") else None
        if twin and str(env.get("USE_HF", "")).strip().lower() in ("1", "true"):  # USE_HF=1: the Hub's copy
            fields["model_id"] = Value(twin, fields["model_id"].source, fields["model_id"].span,
                                       fields["model_id"].chain + (f"USE_HF=1: ms-swift downloads {twin} from the Hugging "
                                                                   "Face Hub",))
        span = Span(launch.origin, launch.line) if getattr(launch, "line", None) else None
        if gpus is not None and not (fields.get("num_gpus") and fields["num_gpus"].known):
            fields["num_gpus"] = Value(gpus, "command-line", span, (f"{why} ({launch.where()})",))
            if gpus > 1 and not nproc and not (fields.get("distributed") and fields["distributed"].known
                                               and fields["distributed"].value != "none"):
                fields["distributed"] = Value("none", "command-line", span, ("one process: the layers are split over "
                                                                             "the GPUs, nothing is sharded",))
        ga = fields.get("grad_accum")
        if world and ga is not None and ga.source == "library-default" and dict(ga.shape).get("fill") == "16":
            bs = fields.get("per_device_batch")
            if bs is not None and isinstance(bs.value, int) and bs.value > 0:
                n = max(1, math.ceil(16 / bs.value / world))
                fields["grad_accum"] = Value(n, "library-default", ga.span, ga.chain + (
                    f"ceil(16 / {bs.value} / world size {world}) = {n}",))

        return replace(plan, fields=fields)

    def read(self) -> None:
        d = self.doc
        self.command = getattr(d, "command", None) or "sft"
        self._model()
        self._method()
        self._training()
        self._length()
        self._distributed()
        self._trainer()
        self.checked_keys()

    # ---- helpers ------------------------------------------------------------------------------

    def _first(self, *keys: str) -> str | None:
        """The first of `keys` (4.x, 3.x, 2.x spellings) the arguments set."""
        return next((k for k in keys if self.doc.get(k) is not None), None)

    def _fw(self, key: str):
        d = frameworks.default(self.kind, key)
        assert d is not None, key
        return d

    def _registered_model(self) -> bool:
        """ms-swift 2.x: `--model_type qwen2-7b-instruct` alone names a checkpoint of its registry (register_model:
        a ModelScope id, downloaded unless USE_HF, and the Hugging Face id of the same weights, data/
        swift_model_types.json): the ModelScope id, or the Hugging Face one under --use_hf (USE_HF=1: launched)."""
        from memlint.data import load

        kind = self.doc.get("model_type")
        hit = load("swift_model_types.json")["model_types"].get(kind.strip()) if isinstance(kind, str) else None
        if hit is None:
            return False
        ms, hf = hit
        use_hf = str(self.doc.get("use_hf") or "").strip().lower() in ("1", "true") and hf
        chain = (f"--model_type {kind}: ms-swift 2.x's registry loads {hf if use_hf else ms} from "
                 + ("the Hugging Face Hub (--use_hf)" if use_hf else "ModelScope")
                 + (f" (the same weights as {hf} on the Hugging Face Hub)" if hf and not use_hf else ""),)
        self.lit("model_id", hf if use_hf else ms, "model_type", chain=chain)
        return True

    # ---- fields ---------------------------------------------------------------------------------

    def _model(self) -> None:
        key = self._first("model", "model_id_or_path")
        if key is not None and isinstance(self.doc.get(key), str) and self.doc.get(key).strip():
            self.lit("model_id", self.doc.get(key).strip(), key)
        elif self._registered_model():
            pass
        elif isinstance(self.doc.get("ckpt_dir"), str) and self.doc.get("ckpt_dir").strip():
            # 3.x CompatArguments._handle_ckpt_dir: a checkpoint folder without adapter_config.json is the model
            self.lit("model_id", self.doc.get("ckpt_dir").strip(), "ckpt_dir", chain=(
                f"--ckpt_dir {self.doc.get('ckpt_dir').strip()}: ms-swift loads a full checkpoint folder as the model "
                "(CompatArguments._handle_ckpt_dir; a folder holding adapter_config.json would be an adapter over "
                "the base its args.json names)",))
        else:
            self.unknown("model_id", "no --model (ms-swift's --model_type names a model family, not a checkpoint)",
                         *(("model_type",) if self.doc.has("model_type") else ()))
        key = self._first("torch_dtype", "dtype")
        raw = self.doc.get(key) if key else None
        name = (dtype_name(str(raw)) or _DTYPES_2X.get(str(raw).lower())) if raw is not None else None
        if name is not None:
            self.lit("torch_dtype", name, key)
        elif raw is not None and str(raw).upper() != "AUTO":
            self.unknown("torch_dtype", f"{key} {raw!r} is not a dtype ms-swift takes", key)
        else:
            dflt = self._fw("torch_dtype")
            self.lib("torch_dtype", dflt.value, dflt.why)
        self._precision(name)
        attn = self.doc.get("attn_impl")
        if isinstance(attn, str) and attn.strip().lower() in _ATTN:
            self.lit("attn_implementation", _ATTN[attn.strip().lower()], "attn_impl")
        elif self.doc.get("use_flash_attn") is True:  # 2.x
            self.lit("attn_implementation", "flash_attention_2", "use_flash_attn")
        else:
            dd = library_default("transformers.from_pretrained", "attn_implementation")
            self.lib("attn_implementation", dd.value if dd else None, (dd.why if dd else "") + " (no --attn_impl)")

    def _precision(self, dtype: str | None) -> None:
        """--bf16/--fp16 as given, else the autocast ms-swift turns on for the load dtype (_init_mixed_precision)."""
        ref = frameworks.substitution(self.kind, "mixed_precision")[1]
        for key, value in (("bf16", "amp-bf16"), ("fp16", "amp-fp16")):
            try:
                on = self.bool_at(key)
            except Bad:
                on = None
            if on:
                self.lit("precision", value, key)
                return
        if dtype == "bf16":
            self.lib("precision", "amp-bf16", f"torch_dtype bfloat16: bf16 autocast ({ref})")
        elif dtype in ("fp16", "fp32"):
            self.lib("precision", "amp-fp16", f"torch_dtype {dtype}: fp16 autocast ({ref})")
        else:
            self.lib("precision", "amp-bf16", f"no torch_dtype: the checkpoint's dtype (bfloat16 for today's "
                                              f"checkpoints, assumed) decides the autocast ({ref})")
            self.notes.append("precision: ms-swift follows the checkpoint's dtype; read as bf16 autocast (a float16 "
                              "checkpoint runs fp16 autocast); pass --torch_dtype to the command to settle it")

    def _method(self) -> None:
        key = self._first("tuner_type", "train_type", "sft_type")
        bits = self._bits()
        if key is not None:
            kind = str(self.doc.get(key)).strip().lower()
            method = _METHODS.get(kind)
            if method is None:
                self.unknown("method", f"{key} {kind!r} is not a tuner memlint models (lora, full)", key)
                return
            self.lit("method", "qlora" if method == "lora" and bits == 4 else method, key)
        else:
            dflt = self._fw("train_type")
            method = dflt.value
            self.lib("method", "qlora" if bits == 4 else method, dflt.why)
        if method != "lora":
            return
        self.int_field("lora_r", "lora_rank", default_key="lora_rank")
        self.int_field("lora_alpha", "lora_alpha", default_key="lora_alpha")
        key = self._first("lora_dropout", "lora_dropout_p")
        self.number_field("lora_dropout", key or "lora_dropout", default_key="lora_dropout")
        key = self._first("target_modules", "lora_target_modules")
        t = self.doc.get(key) if key else None
        if t is None:
            dflt = self._fw("target_modules")
            self.lib("lora_targets", dflt.value, dflt.why)
        else:
            items = [x for x in (t if isinstance(t, list) else str(t).replace(",", " ").split()) if str(x).strip()]
            self.lit("lora_targets", "all-linear" if [str(x).lower() for x in items] in (["all-linear"], ["all"]) else
                     [str(x) for x in items], key)
        try:
            dora = self.bool_at("use_dora")
        except Bad:
            dora = None
        self.lit("use_dora", dora, "use_dora") if dora is not None else self.lib("use_dora", False, "use_dora False")

    def _bits(self) -> int | None:
        """The bitsandbytes bits: --quant_method bnb --quant_bits N (3.x, 4.x), --quantization_bit N (2.x)."""
        key = self._first("quant_bits", "quantization_bit")
        try:
            bits = self.int_at(key) if key else None
        except Bad:
            bits = None
        method = str(self.doc.get("quant_method") or ("bnb" if key == "quantization_bit" else "")).lower()
        if bits in (4, 8) and method == "bnb":
            self.lit("quant_bits", bits, key)
            if bits == 4:
                for name, k, dflt in (("quant_type", "bnb_4bit_quant_type", "nf4"),
                                      ("double_quant", "bnb_4bit_use_double_quant", True)):
                    v = self.doc.get(k)
                    self.lit(name, v, k) if v is not None else self.lib(name, dflt, f"ms-swift QuantizeArguments {k} "
                                                                                   f"default {dflt!r}")
            return bits
        if bits is not None:
            self.unknown("quant_bits", f"{key} {bits} with quant_method {method or 'unset'}: not a bitsandbytes load "
                                       "memlint models", key)
            return None
        self.lib("quant_bits", None, "no --quant_bits: not quantized")
        return None

    def _training(self) -> None:
        d = self.doc
        key = self._first("per_device_train_batch_size", "batch_size")
        self.int_field("per_device_batch", key or "per_device_train_batch_size", default_key="per_device_train_batch_size")
        key = self._first("gradient_accumulation_steps")
        if key is not None:
            self.int_field("grad_accum", key)
        else:
            dflt = self._fw("gradient_accumulation_steps")
            bs = self.fields["per_device_batch"].value
            n = max(1, math.ceil(16 / bs)) if isinstance(bs, int) and bs > 0 else None
            self.fields["grad_accum"] = Value(n, "library-default", None, (dflt.why, f"one process: ceil(16 / {bs}) = {n}"),
                                              shape=(("fill", "16"),))
        try:
            gc = self.bool_at("gradient_checkpointing")
        except Bad:
            gc = None
        if gc is None:
            dflt = self._fw("gradient_checkpointing")
            self.lib("gradient_checkpointing", dflt.value, dflt.why)
        else:
            self.lit("gradient_checkpointing", gc, "gradient_checkpointing")
        opt = d.get("optim")
        if isinstance(opt, str) and opt.strip():
            self.lit("optimizer", opt.strip().lower(), "optim")
        else:
            dd = library_default(_TA, "optim")
            self.lib("optimizer", dd.value if dd else None, dd.why if dd else "optim not set")
        if isinstance(d.get("optimizer"), str):
            self.notes.append(f"--optimizer {d.get('optimizer')}: ms-swift's optimizer plugin replaces the Trainer's; "
                              "memlint sizes the optimizer named by optim")
        self.lib("group_by_length", False, "transformers TrainingArguments: group_by_length False") \
            if d.get("group_by_length") is None else self.lit("group_by_length", d.get("group_by_length") is True,
                                                              "group_by_length")
        self.fused_flag("use_liger_kernel", "liger", "use_liger_kernel not set")

    def _length(self) -> None:
        d = self.doc
        try:
            packing, free = self.bool_at("packing"), self.bool_at("padding_free")
        except Bad:
            packing, free = None, None
        self.lit("packing", True, "packing") if packing else self.lib("packing", False, self._fw("packing").why)
        if packing or free:
            key = "packing" if packing else "padding_free"
            self.lit("padding", "packing", key, chain=(f"{key}: the batch is one row of whole samples, no padding",))
        else:
            self.lib("padding", "longest", frameworks.substitution(self.kind, "collator_padding")[1])
        length = self.int_field("max_length", "max_length", default_key=None)
        if length is None and "max_length" not in self.fields:
            dflt = self._fw("max_length")
            if dflt.value is None:
                self.unknown("max_length", "no --max_length: ms-swift truncates at the model's max_model_len")
            else:
                self.lib("max_length", dflt.value, dflt.why)
        if self.command == "rlhf" and self._rlhf_type() == "grpo" and self.fields["max_length"].known:
            prompt = self.fields["max_length"]
            key = "max_completion_length"
            try:
                completion = self.int_at(key)
            except Bad:
                completion = None
            why = f"{key}: {completion}" if completion is not None else self._fw(key).why
            completion = completion if completion is not None else self._fw(key).value
            self.fields["max_length"] = Value(prompt.value + completion, prompt.source, prompt.span, prompt.chain + (
                f"GRPO: the prompt (max_length) plus the completion ({why})",))
        if d.get("truncation_strategy") == "left":
            self.notes.append("truncation_strategy left: longer samples are cut from the left")

    def _distributed(self) -> None:
        ds = self.doc.get("deepspeed")
        presets = frameworks.substitution(self.kind, "deepspeed_presets")
        if isinstance(ds, str) and ds.strip() in presets[0]:
            from memlint.extract.configs.launchers import shipped_deepspeed

            shipped, why = shipped_deepspeed(self.kind, presets[0][ds.strip()], self.file, self.doc.span("deepspeed"))
            if shipped is not None:
                self.notes.append(f"deepspeed {ds}: {why} ({presets[1]})")
                self._merge_ds(shipped)
                return
        self.distributed(("fsdp",))

    def _rlhf_type(self) -> str:
        v = self.doc.get("rlhf_type")
        return str(v).strip().lower() if isinstance(v, str) and v.strip() else self._fw("rlhf_type").value

    def _trainer(self) -> None:
        table, ref = frameworks.substitution(self.kind, "trainer")
        step = self._rlhf_type() if self.command == "rlhf" else self.command
        self.trainer(table.get(step, table["sft"]), f"swift {self.command}" + (f" --rlhf_type {step}" if
                                                                                self.command == "rlhf" else "") + f": {ref}")

