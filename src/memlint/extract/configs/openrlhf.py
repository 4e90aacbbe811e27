"""OpenRLHF's DeepSpeed trainers (`deepspeed --module openrlhf.cli.train_sft|dpo|rm|kto|prm --flag value ...`): the
command's flags over the CLI's argparse defaults, read as the script runs them (data/frameworks.json "openrlhf"):
an Actor loaded from --pretrain, LoRA when --lora_rank > 0 (over a 4-bit model with --load_in_4bit), DeepSpeed ZeRO
--zero_stage (2) with DeepSpeed's FusedAdam, micro-batches of --micro_train_batch_size padded to their longest sample,
and --train_batch_size (the global batch) reached by accumulation over the processes. Flag names changed twice:
`--bf16` became `--param_dtype` (v0.9.2), `--flash_attn` became `--attn_implementation` (v0.8.10), and from v0.10.2
every flag has a section (`--train.micro_batch_size`, `--ds.zero_stage`, `--model.model_name_or_path`). argparse
refuses a flag its version lacks, so a flag of one spelling tells the version the command runs at; without one the
pinned (or newest known) version decides. train_ppo_ray (Ray actors and vLLM) is not read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad
from memlint.extract.configs.readers import FrameworkReader
from memlint.plan import Value

# each setting: its flag before v0.10.2, then its sectioned flag
_FLAGS = {
    "model": (("pretrain",), ("model", "model_name_or_path")),
    "micro": (("micro_train_batch_size",), ("train", "micro_batch_size")),
    "global": (("train_batch_size",), ("train", "batch_size")),
    "max_len": (("max_len",), ("data", "max_len")),
    "zero": (("zero_stage",), ("ds", "zero_stage")),
    "lora_rank": (("lora_rank",), ("ds", "lora", "rank")),
    "lora_alpha": (("lora_alpha",), ("ds", "lora", "alpha")),
    "4bit": (("load_in_4bit",), ("ds", "load_in_4bit")),
    "checkpointing": (("gradient_checkpointing",), ("model", "gradient_checkpointing_enable")),
    "packing": (("packing_samples",), ("ds", "packing_samples")),
    "adam_offload": (("adam_offload",), ("ds", "adam_offload")),
    "param_dtype": (("param_dtype",), ("ds", "param_dtype")),
    "attn": (("attn_implementation",), ("ds", "attn_implementation")),
    "ring": (("ring_attn_size",), ("ds", "ring_attn_size")),
    "tp": (("ds_tensor_parallel_size",), ("ds", "tensor_parallel_size")),
    "ref_offload": (("ref_offload",), ("ref", "offload")),
    "targets": (("target_modules",), ("ds", "lora", "target_modules")),
    "actor_model": (("pretrain",), ("actor", "model_name_or_path")),
    "actor_nodes": (("actor_num_nodes",), ("actor", "num_nodes")),
    "actor_gpus": (("actor_num_gpus_per_node",), ("actor", "num_gpus_per_node")),
    "actor_checkpointing": (("gradient_checkpointing",), ("actor", "gradient_checkpointing_enable")),
}
_TRUE = ("true", "1", "yes")


class OpenRlhf(FrameworkReader):
    kind = "openrlhf"
    rank = 5

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return False  # never a file: only the flags of `openrlhf.cli.train_*` (launch.py entry_modules)

    @staticmethod
    def launched(plan: Any, launch: Any) -> Any:
        """The accumulation over the processes the launcher starts: the global batch × ring-attention × tensor
        parallel sizes / micro-batch / world size (deepspeed.py setup_distributed)."""
        acc, bs = plan.fields.get("grad_accum"), plan.fields.get("per_device_batch")
        shape = dict(acc.shape) if acc is not None else {}
        if acc is None or "global" not in shape or bs is None or not isinstance(bs.value, int) or bs.value <= 0:
            return plan
        gpus = plan.fields.get("num_gpus")
        if getattr(launch, "subcommand", None) == "ppo_ray":  # Ray places the actor's processes, not the launcher
            world, who = (gpus.value if gpus is not None and isinstance(gpus.value, int) else None), "actor processes"
        else:
            world, who = getattr(launch, "gpus", None), "processes"
        fields = dict(plan.fields)
        if not (isinstance(world, int) and world > 0):  # the world size divides the global batch: unknown
            fields["grad_accum"] = Value(None, "unknown", acc.span, acc.chain[:1] + (
                "the launcher's process count is not known, so neither is the accumulation",), acc.candidates, acc.shape)
            return replace(plan, fields=fields)
        scale = int(shape.get("scale", 1))
        n = max(1, int(shape["global"]) * scale // bs.value // world)
        fields["grad_accum"] = Value(n, acc.source, acc.span, acc.chain + (
            f"{shape['global']} × {scale} / micro-batch {bs.value} / {world} {who} = {n}",))
        return replace(plan, fields=fields)

    # ---- the command's flags ----------------------------------------------------------------------

    def _path(self, name: str) -> tuple[str, ...]:
        old, new = _FLAGS[name]
        return new if self.doc.get(*new) is not None or self.sectioned else old

    def _get(self, name: str) -> Any:
        return self.doc.get(*self._path(name))

    def _switch(self, name: str) -> bool | None:
        v = self._get(name)
        return None if v is None else str(v).strip().lower() in _TRUE

    def _default(self, key: str) -> Any:
        d = frameworks.default(self.kind, key)
        assert d is not None, key
        value = d.value.get(self.command, d.value.get("sft")) if isinstance(d.value, dict) else d.value
        return value, d.why

    def _int(self, field: str, name: str, key: str) -> int | None:
        """An integer field from its flag, else the CLI's default for this trainer."""
        try:
            v = self.int_at(*self._path(name))
        except Bad:
            self.unknown(field, f"--{'.'.join(self._path(name))} is not an integer", *self._path(name))
            return None
        if v is not None:
            self.lit(field, v, *self._path(name))
            return v
        value, why = self._default(key)
        self.lib(field, value, why)
        return value

    # ---- fields ------------------------------------------------------------------------------------

    def _vendored_flags(self) -> frozenset[str]:
        """The flags of the checkout's own copy of the CLI (`openrlhf/cli/train_sft.py` beside the launcher, a fork
        run from its repository): its argparse says which version's flags, and so which defaults, the run has."""
        import re

        from memlint.files import is_file, read_text

        src = self.file.parent / "openrlhf" / "cli" / f"train_{self.command}.py"
        if not is_file(src):
            return frozenset()
        try:
            text = read_text(src, 1 << 20, what="sibling-module budget")
        except (OSError, UnicodeDecodeError, ValueError):
            return frozenset()
        return frozenset(re.findall(r'add_argument\(\s*"--([\w.]+)"', text))

    def _older(self, flag: str, newer: str) -> bool:
        """The command runs a version of the flag `flag` that `newer` replaced: the command gives it, or the
        checkout's own CLI declares it and not its replacement."""
        return self.doc.get(flag) is not None or flag in self.vendored and newer not in self.vendored

    def read(self) -> None:
        self.command = getattr(self.doc, "command", None) or "sft"
        self.vendored = self._vendored_flags()
        self.sectioned = any(isinstance(self.doc.data.get(k), dict) for k in ("train", "ds", "model", "data"))
        ppo = self.command == "ppo_ray"
        model_key = "actor_model" if ppo else "model"
        model = self._get(model_key)
        if isinstance(model, str) and model.strip():
            self.lit("model_id", model.strip(), *self._path(model_key))
        else:
            self.unknown("model_id", f"no --{'.'.join(self._path(model_key))} in the command")
        self._method()
        self._precision()
        self._attention()
        micro = self._int("per_device_batch", "micro", "micro_train_batch_size")
        if ppo:
            self._actor_gpus()
        self._accumulation(micro)
        if not (ppo and self._ppo_length()):
            self._int("max_length", "max_len", "max_len")
        packed = self._switch("packing") is True
        self.lib("padding", "longest", frameworks.substitution(self.kind, "padding")[1]) if not packed else \
            self.lit("padding", "packing", *self._path("packing"))
        self.lit("packing", True, *self._path("packing")) if packed else self.lib("packing", False, "--packing_samples off")
        ckpt = "actor_checkpointing" if ppo else "checkpointing"
        gc = self._switch(ckpt)
        self.lit("gradient_checkpointing", True, *self._path(ckpt)) if gc else \
            self.lib("gradient_checkpointing", False, self._default("gradient_checkpointing")[1])
        self._sharding()
        self._trainer()
        self.checked_keys()

    def _method(self) -> None:
        rank = self._int("lora_r", "lora_rank", "lora_rank") or 0
        four = self._switch("4bit") is True
        if four:
            self.lit("quant_bits", 4, *self._path("4bit"))
            # actor.py: BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            # bnb_4bit_compute_dtype=torch.bfloat16)
            for name, value in (("quant_type", "nf4"), ("double_quant", True), ("compute_dtype", "bf16")):
                self.lib(name, value, "--load_in_4bit: OpenRLHF's Actor quantizes NF4 with double quantization, "
                                      "computing in bf16 (openrlhf/models/actor.py)")
        else:
            self.lib("quant_bits", None, "--load_in_4bit off")
        if rank > 0:
            self.lit("method", "qlora" if four else "lora", *self._path("lora_rank"))
            self._int("lora_alpha", "lora_alpha", "lora_alpha")
            targets = self._get("targets")
            if targets is None:
                self.lib("lora_targets", *self._default("target_modules"))
            else:
                items = targets if isinstance(targets, list) else [targets]
                names = [str(x) for x in items if str(x).strip()]
                self.lit("lora_targets", "all-linear" if names == ["all-linear"] else names, *self._path("targets"))
        else:
            self.fields.pop("lora_r", None)
            self.lib("method", "full", "--lora_rank 0: the whole model trains")

    def _precision(self) -> None:
        """--param_dtype bf16|fp16 (v0.9.2 on, default bf16); before it the --bf16 switch (off: torch_dtype 'auto' and
        DeepSpeed in fp32)."""
        raw, old_flag = self._get("param_dtype"), self.doc.get("bf16")
        if raw is None and old_flag is not None:  # `--bf16`: a command of a version before 0.9.2
            self.lit("torch_dtype", "bf16", "bf16")
            self.lit("precision", "amp-bf16", "bf16", chain=("--bf16: Actor loads bf16, DeepSpeed's bf16 mode",))
            return
        if raw is None:
            value, why = self._default("param_dtype")
            if value == "unset" or self._older("flash_attn", "attn_implementation") or self._older("bf16", "param_dtype"):
                # `--flash_attn` (before 0.8.10) or the --bf16 switch left off (before 0.9.2)
                why = frameworks.framework(self.kind)["defaults"]["param_dtype"][-1]["ref"]
                self.lib("torch_dtype", "auto", why)
                self.lib("precision", "fp32", why)
                return
            raw, src = value, None
        else:
            src = self._path("param_dtype")
        name = str(raw).strip().lower()
        if name not in ("bf16", "fp16"):
            self.unknown("torch_dtype", f"--param_dtype {raw!r}: OpenRLHF takes bf16 or fp16", *(src or ()))
            return
        if src is None:
            self.lib("torch_dtype", name, why)
            self.lib("precision", f"amp-{name}", why)
        else:
            self.lit("torch_dtype", name, *src)
            self.lit("precision", f"amp-{name}", *src, chain=(f"--param_dtype {name}: DeepSpeed's {name} mode",))

    def _attention(self) -> None:
        raw = self._get("attn")
        if self._switch("packing") is True and "flash_attention" not in str(raw or ""):
            # train_*.py: --packing_samples switches attention to flash_attention_2 (before v0.8.10: --flash_attn on)
            self.lit("attn_implementation", "flash_attention_2", *self._path("packing"),
                     chain=("--packing_samples: train_*.py switches attention to flash_attention_2",))
        elif isinstance(raw, str) and raw.strip():
            name = raw.strip()
            self.lit("attn_implementation", "flash_attention_2" if name.startswith("flash_attention") else name,
                     *self._path("attn"))
        elif str(self.doc.get("flash_attn") or "").lower() in _TRUE:
            self.lit("attn_implementation", "flash_attention_2", "flash_attn")
        else:
            value, why = self._default("attn_implementation")
            if self._older("flash_attn", "attn_implementation"):  # before 0.8.10: eager unless --flash_attn
                value, why = "eager", frameworks.framework(self.kind)["defaults"]["attn_implementation"][-1]["ref"]
            self.lib("attn_implementation", value, why)

    def _actor_gpus(self) -> None:
        """train_ppo_ray: the actor's processes, --actor_num_nodes × --actor_num_gpus_per_node (Ray places them)."""
        try:
            nodes, per = self.int_at(*self._path("actor_nodes")), self.int_at(*self._path("actor_gpus"))
        except Bad:
            self.unknown("num_gpus", "--actor_num_nodes / --actor_num_gpus_per_node are not integers")
            return
        if nodes is None and per is None:
            value, why = self._default("actor_gpus")
            self.fields["num_gpus"] = Value(value, "library-default", None, (why,))
            return
        nodes, per = nodes or 1, per if per is not None else 8
        span = self.doc.span(*self._path("actor_gpus")) or self.doc.span(*self._path("actor_nodes"))
        self.fields["num_gpus"] = Value(nodes * per, "literal", span, (
            f"--actor_num_nodes {nodes} × --actor_num_gpus_per_node {per}: the actor's DeepSpeed processes",))

    def _ppo_length(self) -> bool:
        """train_ppo_ray before v0.9.8: --prompt_max_len + --generate_max_len (1024 each) when the command gives
        either and no --max_len; True when set here."""
        if self._get("max_len") is not None:
            return False
        prompt, gen = self.doc.get("prompt_max_len"), self.doc.get("generate_max_len")
        if prompt is None and gen is None:
            return False
        try:
            p, g = self.int_at("prompt_max_len") or 1024, self.int_at("generate_max_len") or 1024
        except Bad:
            self.unknown("max_length", "--prompt_max_len / --generate_max_len are not integers")
            return True
        self.fields["max_length"] = Value(p + g, "literal", self.doc.span("generate_max_len") or
                                          self.doc.span("prompt_max_len"), (
            f"--prompt_max_len {p} + --generate_max_len {g}: the longest sequence the actor trains on",))
        return True

    def _accumulation(self, micro: int | None) -> None:
        """--train_batch_size over micro-batches and processes: one process until the launcher says more (launched)."""
        try:
            total = self.int_at(*self._path("global"))
            ring = self.int_at(*self._path("ring")) or 1
            tp = self.int_at(*self._path("tp")) or 1
        except Bad:
            self.unknown("grad_accum", "--train_batch_size, --ring_attn_size or the tensor-parallel size is not an integer")
            return
        src = "literal" if total is not None else "library-default"
        if total is None:
            total = self._default("train_batch_size")[0]
        ref = frameworks.substitution(self.kind, "accumulation")[1]
        n = max(1, total * ring * tp // micro) if isinstance(micro, int) and micro > 0 else None
        span = self.doc.span(*self._path("global")) if src == "literal" else None
        self.fields["grad_accum"] = Value(n, src, span, (ref, f"one process: {total} × {ring * tp} / {micro} = {n}"),
                                          shape=(("global", str(total)), ("scale", str(ring * tp))))

    def _sharding(self) -> None:
        try:
            stage = self.int_at(*self._path("zero"))
        except Bad:
            self.unknown("distributed", "--zero_stage is not an integer", *self._path("zero"))
            stage = None
        if stage is None and "distributed" not in self.fields:
            value, why = self._default("zero_stage")
            self.lib("distributed", {0: "none"}.get(value, f"zero{value}"), why)
        elif stage is not None:
            self.lit("distributed", {0: "none"}.get(stage, f"zero{stage}"), *self._path("zero"))
        offload = self._switch("adam_offload") is True
        self.lib("offload", "optimizer" if offload else "none", "--adam_offload: DeepSpeedCPUAdam on the CPU" if offload
                 else "--adam_offload off")
        optim = self.doc.get("optim")
        if isinstance(optim, str) and optim.strip().lower() not in ("adam", "adamw"):
            self.unknown("optimizer", f"--optim {optim}: an optimizer memlint does not model", "optim")
        else:
            self.lib("optimizer", "deepspeed_adam", frameworks.substitution(self.kind, "optimizer")[1])

    def _trainer(self) -> None:
        objectives, ref = frameworks.substitution(self.kind, "objective")
        objective = objectives.get(self.command, "sft")
        # OpenRLHF's trainers drive a DeepSpeed engine themselves (engine.backward / engine.step), as a script that calls
        # deepspeed.initialize does: memlint's name for that loop, the objective in the shape
        shape = (("objective", objective), ("framework", "openrlhf"))
        if self.command == "ppo_ray":
            shape += (("not_modelled", frameworks.substitution(self.kind, "ppo_not_modelled")[0]),)
        self.fields["trainer"] = Value("deepspeed-engine", "literal", None,
                                       (f"openrlhf.cli.train_{self.command}: {ref}",), shape=shape)
        if objective in ("dpo", "kto"):
            value, why = frameworks.substitution(self.kind, "reference")
            offloaded = self._switch("ref_offload") is True
            self.fields["ref_model"] = Value(value, "library-default", None, (why,))
            if offloaded:
                self.notes.append("--ref_offload: the reference model is kept on the CPU; memlint counts it on the GPU")
