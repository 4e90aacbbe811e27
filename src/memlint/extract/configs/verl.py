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


class VerlPpo(FrameworkReader):
    """verl's PPO/GRPO trainer (`python3 -m verl.trainer.main_ppo key=value ...`, Ray workers over FSDP): its packaged
    Hydra config (verl/trainer/config/ppo_trainer.yaml) under the command's overrides, read as the actor's FSDP worker
    (verl/workers/fsdp_workers.py) trains it: the actor loaded in fp32 under FSDP with bf16 mixed precision, torch's
    AdamW, FlashAttention-2; each update's mini-batch (ppo_mini_batch_size prompts × rollout.n responses) split over
    the data-parallel ranks into micro-batches of ppo_micro_batch_size_per_gpu sequences of at most max_prompt_length +
    max_response_length tokens (frameworks.json "verl-ppo"). The rollout engine (vLLM/SGLang) and the reference and
    critic models are not sized."""

    kind = "verl-ppo"
    rank = 5

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        # a copy of ppo_trainer.yaml: its actor_rollout_ref section beside data and trainer
        return {"actor_rollout_ref", "data", "trainer"} <= keys

    def value(self, path: tuple[str, ...]) -> tuple[Any, bool]:
        """(the value at `path`, whether the file or command gave it) else the packaged default (None: neither)."""
        v = self.doc.get(*path)
        if v is not None:
            return v, True
        d = frameworks.default(self.kind, ".".join(path))
        return (d.value if d is not None else None), False

    def read(self) -> None:
        actor, model = ("actor_rollout_ref", "actor"), ("actor_rollout_ref", "model")
        self.model_id(*model, "path")
        load, why = frameworks.substitution(self.kind, "load")
        self.lib("torch_dtype", load, why)
        rank = self.int_field("lora_r", *model, "lora_rank", default_key="actor_rollout_ref.model.lora_rank") or 0
        self.lit("method", "lora", *model, "lora_rank") if rank > 0 else self.lib("method", "full", "lora_rank 0")
        if rank <= 0:
            self.fields.pop("lora_r", None)
        self.lib("quant_bits", None, "verl's FSDP workers load no quantized model")
        for name, key in (("precision", "precision"), ("optimizer", "optimizer"), ("attn_implementation", "attention")):
            value, ref = frameworks.substitution(self.kind, key)
            self.lib(name, value, ref)
        self._lengths()
        self._gpus()
        self._batches(actor)
        for name, path in (("gradient_checkpointing", (*model, "enable_gradient_checkpointing")),):
            v, given = self.value(path)
            if isinstance(v, bool):
                self.lit(name, v, *path) if given else self.fw(name, ".".join(path))
        strategy, _ = self.value((*actor, "strategy"))
        if strategy in ("fsdp", "fsdp2"):
            self.lib("distributed", "fsdp", f"actor_rollout_ref.actor.strategy {strategy}")
        else:
            self.unknown("distributed", f"actor_rollout_ref.actor.strategy {strategy!r}: not FSDP", *actor, "strategy")
        p_off, _ = self.value((*actor, "fsdp_config", "param_offload"))
        o_off, _ = self.value((*actor, "fsdp_config", "optimizer_offload"))
        self.lib("offload", "params" if p_off is True else "optimizer" if o_off is True else "none",
                 "actor_rollout_ref.actor.fsdp_config param_offload / optimizer_offload")
        self.trainer("verl", "verl.trainer.main_ppo: verl's PPO/GRPO trainer (Ray workers, its own loop)")
        self.checked_keys()

    def _gpus(self) -> None:
        """trainer.n_gpus_per_node × trainer.nnodes: the GPUs Ray places the workers on."""
        gpus, nodes = self.value(("trainer", "n_gpus_per_node"))[0], self.value(("trainer", "nnodes"))[0]
        if isinstance(gpus, int) and isinstance(nodes, int) and gpus > 0 and nodes > 0:
            given = self.doc.get("trainer", "n_gpus_per_node") is not None
            self.fields["num_gpus"] = Value(gpus * nodes, "literal" if given else "library-default",
                                            self.doc.span("trainer", "n_gpus_per_node") if given else None,
                                            (f"trainer.n_gpus_per_node {gpus} × trainer.nnodes {nodes}: Ray's workers",))
        else:
            self.unknown("num_gpus", "trainer.n_gpus_per_node / nnodes not integers", "trainer", "n_gpus_per_node")

    def _lengths(self) -> None:
        """The longest sequence a micro-batch holds: the prompt (left-padded to max_prompt_length) and the response
        (max_response_length); with use_remove_padding the rows are unpadded and concatenated (flash-attn varlen)."""
        (prompt, pg), (resp, rg) = self.value(("data", "max_prompt_length")), self.value(("data", "max_response_length"))
        if isinstance(prompt, int) and isinstance(resp, int):
            src = "literal" if pg or rg else "library-default"
            self.fields["max_length"] = Value(prompt + resp, src, self.doc.span("data", "max_response_length"),
                                              (f"data.max_prompt_length {prompt} + data.max_response_length {resp}",))
        else:
            self.unknown("max_length", "data.max_prompt_length / max_response_length not integers")
        unpad, given = self.value(("actor_rollout_ref", "model", "use_remove_padding"))
        if unpad is True:
            self.lit("padding", "packing", "actor_rollout_ref", "model", "use_remove_padding") if given else \
                self.lib("padding", "packing", "actor_rollout_ref.model.use_remove_padding default True")
            self.lib("packing", True, "use_remove_padding: the micro-batch's rows unpadded and concatenated")
        else:
            self.lib("padding", "max_length", frameworks.substitution(self.kind, "padding")[1])
            self.lib("packing", False, "use_remove_padding off: padded rows")

    def _micro_times_n(self) -> bool:
        """Whether the checkout's own copy of verl multiplies the global ppo_micro_batch_size by rollout.n (a main-branch
        snapshot between verl PRs #80 and #136, vendored by some checkouts, e.g. of early 2025; no release did): read
        from that copy's fsdp_workers.py beside the config, never assumed."""
        import re

        from memlint.files import is_file, read_text

        root = self.file.parent.parent.parent  # verl/trainer/config/ppo_trainer.yaml -> verl/
        for rel in ("workers/fsdp_workers.py", "trainer/ppo/workers/fsdp_workers.py"):
            src = root / rel
            if not is_file(src):
                continue
            try:
                text = read_text(src, 1 << 20, what="sibling-module budget")
            except (OSError, UnicodeDecodeError, ValueError):
                return False
            return bool(re.search(r"ppo_micro_batch_size\s*\*=\s*self\.config\.rollout\.n", text))
        return False

    def _batches(self, actor: tuple[str, ...]) -> None:
        """per_device_batch: ppo_micro_batch_size_per_gpu (use_dynamic_bsz: a token budget instead); the accumulation:
        ppo_mini_batch_size × rollout.n / data-parallel ranks / micro-batch, once the GPUs are known."""
        dynamic, _ = self.value((*actor, "use_dynamic_bsz"))
        if dynamic is True:
            budget, _ = self.value((*actor, "ppo_max_token_len_per_gpu"))
            for name in ("per_device_batch", "grad_accum"):
                self.unknown(name, f"use_dynamic_bsz: micro-batches are cut by a token budget ({budget} tokens per GPU), "
                                   "not a row count", *actor, "use_dynamic_bsz")
            return
        mini, _ = self.value((*actor, "ppo_mini_batch_size"))
        n, _ = self.value(("actor_rollout_ref", "rollout", "n"))
        sp, _ = self.value((*actor, "ulysses_sequence_parallel_size"))
        gpus = self.fields.get("num_gpus")
        world = gpus.value if gpus is not None and isinstance(gpus.value, int) else None
        whole = self.doc.get(*actor, "ppo_micro_batch_size")  # before v0.2: the global micro-batch, split over ranks
        if self.doc.get(*actor, "ppo_micro_batch_size_per_gpu") is None and isinstance(whole, int) and whole > 0 \
                and isinstance(world, int) and isinstance(sp, int) and sp > 0:
            micro = max(1, whole // max(1, world // sp))
            why = f"ppo_micro_batch_size {whole} over {max(1, world // sp)} data-parallel ranks"
            if self._micro_times_n() and isinstance(n, int) and n > 0:
                micro *= n  # that snapshot: the micro-batch counts prompts, each with its rollout.n responses
                why += f", × rollout.n {n} (the checkout's verl: its fsdp_workers.py multiplies it)"
            self.fields["per_device_batch"] = Value(micro, "literal", self.doc.span(*actor, "ppo_micro_batch_size"),
                                                    (why,))
        else:
            micro = self.int_field("per_device_batch", *actor, "ppo_micro_batch_size_per_gpu",
                                   default_key="actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
        if not all(isinstance(x, int) and x > 0 for x in (micro, mini, n, sp, world)):
            self.unknown("grad_accum", "ppo_mini_batch_size, rollout.n, the GPUs and the micro-batch are not all known")
            return
        dp = max(1, world // sp)
        acc = max(1, mini * n // dp // micro)
        self.fields["grad_accum"] = Value(acc, "literal", self.doc.span(*actor, "ppo_mini_batch_size"), (
            f"ppo_mini_batch_size {mini} × rollout.n {n} / {dp} data-parallel ranks / micro-batch {micro} = {acc}",))
