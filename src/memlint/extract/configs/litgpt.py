"""LitGPT configs: the YAML of `litgpt finetune_lora|finetune_full|finetune_adapter|pretrain --config`
(config_hub/finetune/<model>/{lora,qlora,full}.yaml, config_hub/pretrain/*.yaml), read as litgpt's
setup() would take it.

The YAML names no command: LoRA keys mean finetune_lora, model_name (a litgpt model config, no
checkpoint_dir) means pretrain, otherwise the file name (full.yaml, adapter.yaml) says which; a
config that says neither leaves the method unknown. Facts that drift with litgpt's versions
(defaults, the precision and quantize tables) are in data/frameworks.json.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad, near, optimizer_of_class
from memlint.extract.configs.readers import FrameworkReader
from memlint.files import is_dir
from memlint.library.defaults import Default
from memlint.plan import Value

_CHECKPOINTS = re.compile(r"^(?:\./)?checkpoints/([^/\s]+/[^/\s]+?)/?$")


_MARKERS = {"lora_r", "lora_alpha", "lora_dropout", "lora_query", "lora_key", "lora_value", "lora_projection", "lora_mlp",
            "lora_head", "quantize", "logger_name", "num_nodes", "train.micro_batch_size", "train.global_batch_size"}
# the same "section.key" markers for a file not yet parsed (a walk's prefilter sees only the text)
_MARKERS_TEXT = re.compile(r"^[ \t]+(?:micro|global)_batch_size[ \t]*:", re.M)


class LitGPT(FrameworkReader):
    kind = "litgpt"
    rank = 70

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        named = "checkpoint_dir" in keys or ("model_name" in keys and bool(keys & {"initial_checkpoint_dir", "tokenizer_dir"}))
        return named and bool(keys & _MARKERS or _MARKERS_TEXT.search(text))

    def read(self) -> None:
        self.script = self._script()
        self._model()
        self._precision()
        self._quantize()
        self._method()
        self._devices()
        self._batch()
        self._length()
        self._optimizer()
        self.lib("attn_implementation", "sdpa", self._sub("attention")[1])
        self.lib("fused_loss", False, "litgpt computes no fused loss")
        self.notes.append("litgpt runs its own GPT (fused qkv, LoRAQKVLinear) and applies lm_head and the cross-entropy in "
                          "chunks of 128 tokens (finetune_lora: lm_head_chunk_size=128 and chunked_cross_entropy; "
                          "finetune_full: the cross-entropy only): the estimate uses memlint's LitGPT accounting "
                          "(model_code litgpt) where it covers the configuration, else transformers' (said below)")
        self.lib("group_by_length", False, "litgpt's data modules do not group by length")
        self.trainer("litgpt", f"litgpt finetune_{self.script or '*'} (Lightning Fabric)")
        self._check_keys()

    def _sub(self, key: str) -> tuple[Any, str]:
        return frameworks.substitution(self.kind, key)

    def _default(self, key: str) -> Default:
        """litgpt's default for `key` under the script that reads the config (pretrain has its own)."""
        d = (frameworks.default(self.kind, f"{self.script}.{key}") if self.script == "pretrain" else None) or frameworks.default(self.kind, key)
        assert d is not None, key
        return d

    def _script(self) -> str | None:
        """Which finetune command takes the config: finetune_lora has the lora_* keys (jsonargparse
        refuses them elsewhere), else the file name says full or adapter."""
        d = self.doc
        command = {"finetune_lora": "lora", "finetune": "lora", "finetune_full": "full", "finetune_adapter": "adapter",
                   "finetune_adapter_v2": "adapter", "pretrain": "pretrain"}.get(d.command or "")
        if command is not None:  # launched: the subcommand says (litgpt finetune is finetune_lora)
            return command
        if any(isinstance(k, str) and k.startswith("lora_") for k in d.data):
            return "lora"
        if d.has("model_name") and not d.has("checkpoint_dir"):
            return "pretrain"
        stem = Path(d.path).stem.lower()
        for word in ("adapter", "full", "lora"):
            if word in stem:
                return word
        return None

    def _model(self) -> None:
        if self.script == "pretrain":
            name = self.doc.get("model_name")
            if isinstance(name, str) and name.strip():
                self.lit("model_id", name.strip(), "model_name")
                self.notes.append(f"model_name {name.strip()!r} is a litgpt model config (litgpt/config.py), not a Hugging Face id: "
                                  "if memlint does not know it, pass --assume model_id=<the Hugging Face id of that architecture>")
            else:
                self.unknown("model_id", "model_name is not a litgpt model config name", "model_name")
            return
        cd = self.doc.get("checkpoint_dir")
        if not isinstance(cd, str) or not cd.strip():
            self.unknown("model_id", "no checkpoint_dir (litgpt takes it from the command line)", *(("checkpoint_dir",) if self.doc.has("checkpoint_dir") else ()))
            return
        cd = cd.strip()
        self.lit("model_id", cd, "checkpoint_dir")
        m = _CHECKPOINTS.match(cd)
        if m and not any(is_dir(p) for p, _ in near(self.file, cd)):
            # `litgpt download <repo>` converts the Hugging Face repo into checkpoints/<repo>
            v = self.fields["model_id"]
            self.fields["model_id"] = Value(cd, v.source, v.span, v.chain + (
                f"litgpt download {m.group(1)} converts that Hugging Face checkpoint into {cd} (litgpt/scripts/download.py)",),
                candidates=(cd, m.group(1)))

    def _precision(self) -> None:
        table, ref = self._sub("precision")
        raw = self.doc.get("precision")
        if raw is None:
            d = self._default("precision")
            raw, src = d.value, None
            why = d.why
        else:
            src, why = "precision", f"precision: {raw}"
        self.precision_text = str(raw)
        pair = table.get(self.precision_text)
        if pair is None:
            for name in ("torch_dtype", "precision"):
                self.unknown(name, f"litgpt precision {raw!r} is not one memlint models", "precision")
            return
        dtype, mode = pair
        for name, value in (("torch_dtype", dtype), ("precision", mode)):
            if src:
                self.lit(name, value, src, chain=(why, ref))
            else:
                self.lib(name, value, f"{why}; {ref}")

    def _quantize(self) -> None:
        d = self.doc
        q = d.get("quantize")
        self.quant = None
        if q is None:
            if d.has("quantize"):
                self.lit("quant_bits", None, "quantize")
            else:
                self.lib("quant_bits", None, self._default("quantize").why)
            return
        table, ref = self._sub("quantize")
        spec = table.get(str(q))
        if spec is None:
            self.bad(f"quantize should be one of {', '.join(table)}, not {q!r} (litgpt's Literal)", "quantize")
            self.unknown("quant_bits", f"quantize {q!r} is not one litgpt accepts", "quantize")
            return
        self.quant = spec
        self.lit("quant_bits", spec["bits"], "quantize", chain=(f"quantize: {q}", ref))
        if spec["bits"] == 4:
            self.lit("quant_type", spec["quant_type"], "quantize", chain=(f"quantize: {q}", ref))
            self.lit("double_quant", spec["double_quant"], "quantize", chain=(f"quantize: {q}", ref))
            dt = self.fields.get("torch_dtype")
            self.lib("compute_dtype", dt.value if dt else None, f"BitsandbytesPrecision({q[4:]!r}, dtype of precision {self.precision_text})")
        if "mixed" in self.precision_text or self.precision_text in ("16", "bf16"):
            self.bad(f"quantize: {q} with precision {self.precision_text}: litgpt raises 'Quantization and mixed precision is not "
                     "supported' (use bf16-true or 16-true)", *(("precision",) if d.has("precision") else ("quantize",)))
        if self.script == "full":
            self.bad("quantize is not a finetune_full setting: jsonargparse refuses the key (full fine-tuning cannot train a quantized base)", "quantize")

    def _method(self) -> None:
        if self.script == "lora":
            bits = self.quant["bits"] if self.quant else None
            key = next((k for k in self.doc.data if isinstance(k, str) and k.startswith("lora_")), None)
            method = "qlora" if bits == 4 else "lora"
            chain = (f"{key}: finetune_lora's setting" if key else f"the file name {Path(self.doc.path).name}",)
            if key:
                self.lit("method", method, key, chain=chain)
            else:
                self.lib("method", method, chain[0])
            self._lora()
        elif self.script == "full":
            self.lib("method", "full", f"the file name {Path(self.doc.path).name}: litgpt finetune_full")
        elif self.script == "pretrain":
            self.lit("method", "full", "model_name", chain=("model_name without checkpoint_dir: litgpt pretrain trains every parameter",))
        elif self.script == "adapter":
            self.unknown("method", "litgpt adapter fine-tuning (trainable prefix and gates on a frozen base) is not a method memlint "
                         "models; --assume method=lora comes close")
        else:
            self.unknown("method", "the config names no litgpt finetune command (finetune_full or finetune_lora)")

    def _lora(self) -> None:
        d = self.doc
        for name, key in (("lora_r", "lora_r"), ("lora_alpha", "lora_alpha")):
            self.int_field(name, key, default_key=key)
        self.number_field("lora_dropout", "lora_dropout", default_key="lora_dropout")
        names, ref = self._sub("lora_targets")
        on: dict[str, bool] = {}
        for key in ("lora_query", "lora_key", "lora_value", "lora_projection", "lora_mlp", "lora_head"):
            v = d.get(key)
            on[key] = v if isinstance(v, bool) else bool(self._default(key).value)
        targets = [n for key, flag in on.items() if flag for n in names[key]]
        if on["lora_query"] or on["lora_key"] or on["lora_value"]:
            targets += names["fused_qkv"]
        chain = tuple(f"{k}: {v}" for k, v in on.items()) + (ref,)
        given = [k for k in on if d.has(k)]
        if given:
            self.lit("lora_targets", targets, given[0], chain=chain)
        else:
            self.lib("lora_targets", targets, "; ".join(chain))

    def _count(self, key: str) -> tuple[int | None, str]:
        """devices / num_nodes: the integer, or None when it depends on the machine ("auto", -1)."""
        given = self.doc.has(key)
        raw = self.doc.get(key) if given else self._default(key).value
        if raw in ("auto", -1, None):
            return None, f"{key}: {raw!r} (every visible GPU)"
        try:
            v = self.int_at(key) if given else int(raw)
        except Bad:
            return None, f"{key} is not an integer"
        if v is None or v < 1:
            self.bad(f"{key} should be a positive integer or 'auto', not {raw!r} (litgpt's parse_devices raises)", key)
            return None, f"{key}: {raw!r}"
        return v, "literal" if given else "default"

    def _devices(self) -> None:
        devices, how_d = self._count("devices")
        nodes, how_n = self._count("num_nodes")
        self.n_gpus = devices * nodes if devices is not None and nodes is not None else None
        sub, ref = self._sub("pretrain_multi_device" if self.script == "pretrain" else "multi_device")
        key = "devices" if how_d == "literal" or self.doc.has("devices") else None
        if self.n_gpus is None:
            self.unknown("num_gpus", how_d if devices is None else how_n, *(("devices",) if key else ()))
            self.unknown("distributed", "litgpt shards (FSDP) only over more than one device; the device count is not in the config")
            if sub["gradient_checkpointing"]:
                self.unknown("gradient_checkpointing", "litgpt checkpoints activations only over more than one device")
            else:
                self.lib("gradient_checkpointing", False, ref)
            return
        chain = (f"devices {devices} × num_nodes {nodes} = {self.n_gpus}",)
        put = (lambda n, v, c: self.lit(n, v, key, chain=c)) if key else (lambda n, v, c: self.lib(n, v, "; ".join(c)))
        put("num_gpus", self.n_gpus, chain + ((self._default("devices").why,) if not key else ()))
        if self.n_gpus > 1:
            put("distributed", sub["distributed"], chain + (ref,))
            put("gradient_checkpointing", sub["gradient_checkpointing"], chain + (ref,))
            self.lib("offload", "none", "FSDPStrategy(cpu_offload=False)")
            if self.quant:
                self.bad("quantize over more than one device: litgpt raises 'Quantization is currently not supported for multi-GPU "
                         "training'", "quantize")
        else:
            put("distributed", "none", chain + ("one device: Fabric strategy 'auto'",))
            self.lib("gradient_checkpointing", False, f"one device: strategy 'auto', and litgpt has no checkpointing setting ({ref})")
            self.lib("offload", "none", "one device")

    def _train_int(self, key: str) -> tuple[int | None, str | None]:
        try:
            v = self.int_at("train", key)
        except Bad:
            return None, "bad"
        if v is None:
            return self._default(f"train.{key}").value, None
        return v, "literal"

    def _batch(self) -> None:
        micro, m_src = self._train_int("micro_batch_size")
        glob, g_src = self._train_int("global_batch_size")
        if micro is None:
            self.unknown("per_device_batch", "train.micro_batch_size is not an integer", "train", "micro_batch_size")
        elif m_src:
            self.lit("per_device_batch", micro, "train", "micro_batch_size")
        else:
            self.lib("per_device_batch", micro, self._default("train.micro_batch_size").why)
        if "per_device_batch" in self.fields:
            self.fields["eval_batch"] = self.fields["per_device_batch"]  # the val loader takes the same batch_size
        if micro is None or glob is None or self.n_gpus is None:
            self.unknown("grad_accum", "litgpt accumulates train.global_batch_size // (devices × num_nodes) // train.micro_batch_size, "
                         "and a term of it is unknown")
            return
        per_rank = glob // self.n_gpus
        accum = per_rank // micro if micro else 0
        chain = (f"train.global_batch_size {glob} // (devices × num_nodes {self.n_gpus}) = {per_rank} per rank, "
                 f"// train.micro_batch_size {micro} = {accum}", "litgpt/args.py TrainArgs.gradient_accumulation_iters")
        if accum < 1:
            self.bad(f"train.global_batch_size {glob} over {self.n_gpus} device(s) is less than train.micro_batch_size {micro}: "
                     "litgpt's gradient_accumulation_iters asserts it is at least 1", *(("train", "global_batch_size") if g_src else ("train",)))
            self.unknown("grad_accum", "global_batch_size // devices // micro_batch_size is 0: litgpt refuses to start")
        elif g_src:
            self.lit("grad_accum", accum, "train", "global_batch_size", chain=chain)
        else:
            self.lib("grad_accum", accum, "; ".join(chain + (self._default("train.global_batch_size").why,)))

    def _length(self) -> None:
        d = self.doc
        try:
            n = self.int_at("train", "max_seq_length")
        except Bad:
            self.unknown("max_length", "train.max_seq_length is not an integer", "train", "max_seq_length")
            n = None
        else:
            if n is not None and n > 0:
                self.lit("max_length", n, "train", "max_seq_length")
            else:
                why = self._default("train.max_seq_length").why
                self.unknown("max_length", f"train.max_seq_length is not set: {why}", *(("train", "max_seq_length") if d.has("train", "max_seq_length") else ()))
        if self.script == "pretrain":
            ref = self._sub("pretrain_rows")[1]
            self.lib("packing", True, ref)
            self.lib("padding", "packing", ref)
            return
        self.lib("packing", False, "litgpt's SFT data modules do not pack")
        self.lib("padding", "longest", self._sub("collator_padding")[1])

    def _optimizer(self) -> None:
        d = self.doc
        opt = d.get("optimizer")
        name = opt if isinstance(opt, str) else opt.get("class_path") if isinstance(opt, dict) else None
        if self.quant and self.script in ("lora", "adapter"):
            value, ref = self._sub("quantized_optimizer")
            if name is not None and "AdamW" not in str(name):
                self.bad(f"optimizer {name}: with quantize litgpt only supports AdamW (instantiate_bnb_optimizer raises ValueError)", "optimizer")
            said = f"optimizer: {name}" if name else "optimizer not set"
            self.lit("optimizer", value, "quantize", chain=(said, ref))
            return
        if opt is None:
            d0 = self._default("optimizer")
            self.lib("optimizer", optimizer_of_class(f"torch.optim.{d0.value}"), d0.why)
            return
        if not isinstance(name, str) or not name.strip():
            self.unknown("optimizer", "optimizer is neither a class name nor a class_path", "optimizer")
            return
        path = name if "." in name else f"torch.optim.{name}"
        value = optimizer_of_class(path)
        fused = isinstance(opt, dict) and isinstance(opt.get("init_args"), dict) and opt["init_args"].get("fused") is True
        if value == "adamw_torch" and fused:
            value = "adamw_torch_fused"
        where = ("optimizer", "class_path") if isinstance(opt, dict) and d.has("optimizer", "class_path") else ("optimizer",)
        self.lit("optimizer", value or path, *where, chain=(f"optimizer: {name}" + ("" if value else " (not in memlint's optimizer table)"),))

    def _check_keys(self) -> None:
        fw = frameworks.framework(self.kind)
        self.checked_keys()
        for section, known in fw["section_keys"].items():
            self.checked_keys(known, fw.get("section_misplaced", {}).get(section, {}), (section,), f"{section} ", policy="full")
