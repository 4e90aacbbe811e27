"""verl's FSDP SFT trainer (`torchrun -m verl.trainer.fsdp_sft_trainer data.max_length=... model.partial_pretrain=...`):
its packaged Hydra config (verl/trainer/config/sft_trainer.yaml) under the command's key=value overrides, read as
fsdp_sft_trainer.py runs it: the model loaded in fp32 and trained under FSDP with bf16 mixed precision, torch's
AdamW, FlashAttention-2, each sample padded to data.max_length, and the global data.train_batch_size split over the
data-parallel ranks (the processes over ulysses_sequence_parallel_size) into micro-batches of
data.micro_batch_size_per_gpu (frameworks.json "verl-sft")."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad
from memlint.extract.configs.readers import FrameworkReader
from memlint.plan import Value


class VerlSft(FrameworkReader):
    kind = "verl-sft"
    rank = 5

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        # a copy of sft_trainer.yaml itself: its data / model / optim sections with verl's own keys
        return {"data", "model", "optim"} <= keys and "model.partial_pretrain" in keys

    @staticmethod
    def launched(plan: Any, launch: Any) -> Any:
        """The accumulation over the processes the launcher starts: train_batch_size / (world / sp) / micro-batch."""
        if launch is None or not getattr(launch, "gpus", None):
            return plan
        acc, bs = plan.fields.get("grad_accum"), plan.fields.get("per_device_batch")
        shape = dict(acc.shape) if acc is not None else {}
        if acc is None or "global" not in shape or bs is None or not isinstance(bs.value, int) or bs.value <= 0:
            return plan
        sp = int(shape.get("sp", 1))
        dp = max(1, launch.gpus // max(sp, 1))
        n = max(1, int(shape["global"]) // dp // bs.value)
        fields = dict(plan.fields)
        fields["grad_accum"] = Value(n, acc.source, acc.span, acc.chain + (
            f"{shape['global']} / ({launch.gpus} processes / sequence parallel {sp} = {dp} data-parallel ranks) / "
            f"{bs.value} = {n} micro-batches",))
        return replace(plan, fields=fields)

    def read(self) -> None:
        d = self.doc
        self.model_id("model", "partial_pretrain")
        load, why = frameworks.substitution(self.kind, "load")
        self.lib("torch_dtype", load, why)
        rank = self.int_field("lora_r", "model", "lora_rank", default_key="model.lora_rank") or 0
        self.lit("method", "lora", "model", "lora_rank") if rank > 0 else self.lib("method", "full", "model.lora_rank 0")
        if rank <= 0:
            self.fields.pop("lora_r", None)
        else:
            self.int_field("lora_alpha", "model", "lora_alpha", default_key="model.lora_alpha")
        self.lib("quant_bits", None, "verl's SFT trainer loads no quantized model")
        self.int_field("per_device_batch", "data", "micro_batch_size_per_gpu", default_key="data.micro_batch_size_per_gpu")
        self.int_field("max_length", "data", "max_length", default_key="data.max_length")
        for name, key in (("padding", "padding"), ("precision", "precision"), ("optimizer", "optimizer"),
                          ("distributed", "sharding")):
            value, ref = frameworks.substitution(self.kind, key)
            self.lib(name, value, ref)
        self.lib("packing", False, "SFTDataset: one sample per row")
        self.lib("attn_implementation", "flash_attention_2", why)
        self.lib("offload", "params" if d.get("model", "fsdp_config", "cpu_offload") is True else "none",
                 "model.fsdp_config.cpu_offload")
        gc = d.get("model", "enable_gradient_checkpointing")
        if isinstance(gc, bool):
            self.lit("gradient_checkpointing", gc, "model", "enable_gradient_checkpointing")
        else:
            self.fw("gradient_checkpointing", "model.enable_gradient_checkpointing")
        self._accumulation()
        self.trainer("verl", "verl.trainer.fsdp_sft_trainer: verl's FSDP SFT trainer (its own loop)")
        self.checked_keys()

    def _accumulation(self) -> None:
        """The global batch in micro-batches: known once the launcher's processes are (launched)."""
        try:
            total = self.int_at("data", "train_batch_size")
            sp = self.int_at("ulysses_sequence_parallel_size")
        except Bad:  # a non-integer: said by int_at as a bad value
            total, sp = None, None
        src = "literal" if total is not None else "library-default"
        total = total if total is not None else frameworks.default(self.kind, "data.train_batch_size").value
        sp = sp if sp is not None else 1
        ref = frameworks.substitution(self.kind, "accumulation")[1]
        bs = self.fields["per_device_batch"].value
        n = max(1, math.ceil(total / bs)) if isinstance(bs, int) and bs > 0 else None
        span = self.doc.span("data", "train_batch_size") if src == "literal" else None
        self.fields["grad_accum"] = Value(n, src, span, (ref, f"one process: {total} / {bs} = {n}"),
                                          shape=(("global", str(total)), ("sp", str(sp))))
