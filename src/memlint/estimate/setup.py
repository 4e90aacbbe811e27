"""The estimator's input: one concrete training configuration (no provenance, no unknowns)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from memlint import data
from memlint.catalog import ModelSpec
from memlint.errors import MemlintError
from memlint.library.api import attention
from memlint.library.defaults import run_default
from memlint.vocab import DTYPE_BYTES
METHODS = ("full", "lora", "qlora")
QUANTS = ("none", "nf4", "fp4", "int8", "gptq", "awq", "hqq")
# 4-bit bases LoRA trains on (method "qlora"): bitsandbytes NF4/FP4, and pre-quantized GPTQ / AWQ checkpoints
# (int4 packed in int32 with fp16 group scales, loaded through gptqmodel at transformers >= 5; peft wraps their layers).
FOUR_BIT = ("nf4", "fp4", "gptq", "awq")
# HQQ (transformers' HqqConfig / hqq's HQQLinear): quantized on load to nbits in HQQ_BITS with a scale and a zero in the
# compute dtype per group; LoRA on it is "qlora" at <= 4 bits, "lora" at more (either is accepted).
HQQ_BITS = (8, 6, 5, 4, 3, 2, 1)
FLOAT8S = ("none", "all", "layers")
PRECISIONS = ("fp32", "amp-bf16", "amp-fp16", "pure-bf16", "pure-fp16", "master-fp32")
# Half weights trained without autocast or an fp32 master copy: gradients and optimizer states in that dtype.
PURE = {"pure-bf16": "bf16", "pure-fp16": "fp16"}
SHARDS = ("none", "zero1", "zero2", "zero3", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid")
# Shardings that partition the parameters themselves (and can offload them).
PARAM_SHARDS = ("zero3", "fsdp", "fsdp_hybrid")
OFFLOADS = ("none", "optimizer", "params")
ACCOUNTINGS = ("real", "textbook")
# What the training step optimises: plain next-token loss (SFT, the HF Trainer) or one of
# TRL's preference / reward objectives (data/preference.json says what each one runs).
OBJECTIVES = ("sft", "dpo", "orpo", "cpo", "simpo", "kto", "reward")
# Where the reference log-probs come from: no reference (sft, orpo, cpo, reward), a frozen
# second copy of the weights, the peft model run with its adapters disabled, or log-probs
# computed before training (precompute_ref_log_probs=True).
RECOMPUTE_POLICIES = ("full", "op-sac")
REF_MODELS = ("auto", "none", "copy", "adapter-disabled", "precomputed")
# The model's output head, the class the script loads (AutoModelForCausalLM, AutoModelForSequenceClassification,
# BertForTokenClassification, AutoModelForMaskedLM ...); "auto": the causal-LM head of a decoder, the
# sequence-classification head of an encoder (catalog/families.json `encoder`).
# peft's TaskType values (peft/utils/peft_types.py), "auto" and None (no task_type)
PEFT_TASK_TYPES = ("auto", None, "SEQ_CLS", "TOKEN_CLS", "CAUSAL_LM", "SEQ_2_SEQ_LM", "QUESTION_ANS",
                   "FEATURE_EXTRACTION")
TASK_HEADS = ("auto", "causal-lm", "sequence-classification", "token-classification", "masked-lm")
# Whose model code runs the step: transformers' modules (with peft, the HF loss), or LitGPT's own GPT (fused qkv
# `attn`, LoRAQKVLinear, chunked lm_head + chunked cross-entropy; data/litgpt.json).
MODEL_CODES = ("transformers", "litgpt")


def _default(name: str) -> Any:
    """A Setup field's default: data/library_defaults.json "run_defaults", the table `estimate`,
    `plan` and `%memcheck` share."""
    def value() -> Any:
        v = run_default(name).value
        return tuple(v) if isinstance(v, list) else v  # a frozen Setup holds tuples

    return field(default_factory=value)


def known_optim(name: str, notes: list[str]) -> str:
    """`name` when memlint's optimizer table has it, else adamw_torch, saying so in `notes`."""
    if name in optimizers():
        return name
    notes.append(f"optimizer {name!r} is not in memlint's table: estimated as adamw_torch")
    return "adamw_torch"


def optimizers() -> dict[str, dict[str, Any]]:
    return data.load("optimizers.json")["optimizers"]


def preference() -> dict[str, Any]:
    return data.load("preference.json")


def default_ref_model(objective: str, method: str) -> str:
    """TRL's reference without an explicit ref_model: DPOTrainer/KTOTrainer deep-copy a fully
    fine-tuned model (create_reference_model) and run a peft model with its adapters disabled."""
    entry = preference()["objectives"].get(objective)
    if entry is None or not entry["reference"]:
        return "none"
    return "copy" if method == "full" else "adapter-disabled"


@dataclass(frozen=True)
class Setup:
    """One training configuration, per GPU where it matters.

    dtype is the dtype the weights are loaded in (`torch_dtype`); precision says what
    the training loop does with it: fp32, autocast over the loaded weights (amp-*),
    pure bf16 / fp16 (weights, grads and optimizer states in that dtype), or bf16 weights with an fp32
    master copy in the optimizer (DeepSpeed / Megatron mixed precision).
    """

    model: ModelSpec
    method: str = "full"
    lora_r: int = _default("lora_r")
    lora_targets: tuple[str, ...] | str = _default("lora_targets")
    lora_dropout: float = _default("lora_dropout")
    # DoRA (LoraConfig(use_dora=True)): a trainable magnitude vector per adapted layer, and the
    # weight norm of W + scale·B·A computed in every forward.
    use_dora: bool = False
    quant: str = "none"
    double_quant: bool = True
    # GPTQ / AWQ: weights per fp16 scale (GPTQConfig / AwqConfig group_size; -1: one group per column).
    quant_group_size: int = 128
    # HQQ: bits per weight (HqqConfig nbits; 8, 6, 5 are stored one per byte, 4/2/1 packed in uint8, 3 ten per int32).
    quant_bits: int = 4
    dtype: str = _default("dtype")
    precision: str = _default("precision")
    optim: str = _default("optim")
    batch: int = _default("batch")
    seq: int = _default("seq")
    # An encoder-decoder's (T5's) target length: the decoder's tokens (labels), the encoder reading `seq`; None: the
    # target assumed as long as the source (say so: the estimate is approximate then).
    target_len: int | None = None
    grad_accum: int = _default("grad_accum")
    recompute: bool = _default("recompute")
    attn: str = _default("attn")
    gpus: int = 1             # ranks in the whole run (N), one GPU each
    shard: str = "none"
    nodes: int = 1            # M: fsdp_hybrid shards within a node of N / M GPUs, replicates across nodes
    offload: str = "none"
    # Tensor parallelism (Megatron-style column/row-parallel linears) over `tp` ranks, with sequence parallelism
    # (norms, residual stream and dropout sharded by the sequence between the TP regions) or not; context
    # parallelism (the sequence split over `cp` ranks, ring attention). Data parallel (and ZeRO/FSDP) runs over
    # the remaining gpus // (tp * cp) ranks. `tp_stack` names whose TP plan: which of embeddings, lm_head and the
    # loss are vocab-parallel (data/distributed.json "tensor_parallel"); `loss_parallel` None takes the stack's.
    tp: int = 1
    sequence_parallel: bool = False
    cp: int = 1
    tp_stack: str = "transformers"
    loss_parallel: bool | None = None
    # peft.prepare_model_for_kbit_training (called by TRL for quantized models) casts
    # every non-quantized parameter (embeddings, norms, lm_head) to fp32.
    kbit_prep: bool = True
    # The LoRA adapters' dtype: None follows the precision (fp32 on a half base under autocast or
    # fp32 weights, bf16 for pure-bf16 recipes such as torchtune's and LitGPT's); "fp32" on a half
    # base without autocast is peft's default (autocast_adapter_dtype=True) in a plain bf16 loop.
    adapter_dtype: str | None = None
    # A fused linear cross-entropy (Liger, Cut Cross-Entropy) computes the loss chunk by
    # chunk and never holds the full-vocabulary logits.
    fused_loss: bool = False
    # torchtune's CEWithChunkedOutputLoss (num_output_chunks): the output projection yields the logits as this many
    # token chunks in the compute dtype, all alive until the loss, each upcast to fp32 by the loss one at a time; 0: off.
    chunked_loss: int = 0
    # Activation offloading (TRL's activation_offloading, torchtune's OffloadActivations): saved
    # activations are copied to CPU in forward and back in backward, a layer ahead.
    offload_activations: bool = False
    # The optimizer step fused into backward (torchtune's optimizer_in_bwd, PyTorch's
    # register_post_accumulate_grad_hook tutorial): one optimizer per parameter steps, and frees the
    # gradient, as soon as that gradient is accumulated; no full gradient buffer exists.
    optimizer_in_bwd: bool = False
    # Selective activation checkpointing by layers (torchtune ac_mode: selective, ac_option: N): with
    # recompute, only every Nth decoder layer is checkpointed; the others keep their activations.
    recompute_every: int = 1
    # Which checkpointing policy runs inside each checkpointed layer: "full" recomputes everything from the
    # layer's input; "op-sac" is torchtitan's op-level selective checkpointing (activation_checkpoint.mode
    # "selective", selective_ac_option "op"): the outputs of its save list (every second mm, the attention
    # kernel's output and logsumexp) are kept, the rest recomputed (data/checkpointing.json).
    recompute_policy: str = "full"
    # GaLore (optim galore_*): the rank of the projected gradient and the optim_target_modules whose
    # nn.Linear weights are projected (substring or full-name match, as transformers matches them).
    galore_rank: int = _default("galore_rank")
    galore_targets: tuple[str, ...] | str = _default("galore_targets")
    # peft's modules_to_save (LoraConfig(modules_to_save=[...]), axolotl lora_modules_to_save, LLaMA-Factory
    # additional_target): each named module keeps its frozen original and gains a trained full copy
    # (ModulesToSaveWrapper), in the base's dtype: the input embeddings and lm_head are what runs name.
    modules_to_save: tuple[str, ...] = ()
    # peft's task_type (LoraConfig(task_type=...)): SEQ_CLS / TOKEN_CLS add the classifier to modules_to_save; None:
    # a plain PeftModel (an encoder's classifier stays frozen); "auto": the encoder's classification head's
    # (SEQ_CLS / TOKEN_CLS), as peft's docs and run_glue-style LoRA scripts set it.
    peft_task_type: str | None = "auto"
    # float8 training (torchao convert_to_float8_training; accelerate mixed_precision="fp8" with the AO backend;
    # torchtitan [float8]): the nn.Linear layers torchao swaps for Float8Linear. "all": every linear, lm_head too
    # (convert_to_float8_training without a filter); "layers": the decoder's linears only (torchtitan's
    # filter_fqns=["output"], accelerate's first/last-linear filter).
    float8: str = "none"
    # FSDP2's float8 all-gather (torchao Float8LinearConfig(enable_fsdp_float8_all_gather=True), torchtitan's
    # enable_fsdp_float8_all_gather): the converted linears' shards are cast to float8 before the all-gather, so
    # the unsharded weight is a 1-byte Float8Tensor and the forward / backward weight casts are gone.
    float8_all_gather: bool = False
    # the cross-entropy runs under torch.compile (torchtune's compile: true compiles the loss, CEWithChunkedOutputLoss's
    # per-chunk upcast + cross-entropy; TrainingArguments(torch_compile=True) compiles the model's forward with its
    # loss): inductor fuses the fp32 upcast and log-softmax, so only the logits' logsumexp is saved (measured on CPU
    # inductor, tests/test_compiled_loss.py)
    compiled_loss: bool = False
    # the decoder layers run under torch.compile (torchtune compile: true, torchtitan [compile], TrainingArguments
    # torch_compile): inductor saves less than eager (estimate/activations.py compiled_layer_savings)
    compiled_layers: bool = False
    # TRL's objective and reference model. "auto" is what TRL does without a ref_model (see
    # `reference`): a frozen copy for a full fine-tune, the adapters disabled for peft.
    objective: str = "sft"
    ref_model: str = "auto"
    # The TRL version whose step layout to model (data/preference.json); None: the newest known.
    trl_version: str | None = None
    # a framework whose own preference step runs instead of TRL's (data/preference.json "framework_layouts")
    logps_framework: str | None = None
    # the optimizer is built by transformers' Trainer from `optim` (create_optimizer: under a bitsandbytes 8-bit
    # optimizer every nn.Embedding keeps 32-bit state); False: the script builds it itself
    trainer_optimizer: bool = True
    # objective sft run by TRL's SFTTrainer (its compute_loss at trl_version: data/preference.json "sft_layouts"), not
    # by transformers' Trainer or a loop of one's own (the model's own loss, outputs dropped)
    trl_sft: bool = False
    # The output head (TASK_HEADS) and, for the classification heads, its labels (the model's num_labels).
    task_head: str = "auto"
    num_labels: int = _default("num_labels")
    # The model code the step runs (MODEL_CODES) and, for LitGPT, the version whose code to model
    # (data/litgpt.json); None: the newest known.
    model_code: str = "transformers"
    litgpt_version: str | None = None
    # A vision-language model (ModelSpec.vision): images per sample (row), each of image_size (H, W) before the
    # processor's resize (None: the largest image_max_pixels allows), the processor's min/max pixels (None: its
    # default, data/vision.json), and what trains in a full fine-tune: the vision tower (blocks and patch embedding)
    # and the merger (None: as the tower). LoRA adapts the text model only (LLaMA-Factory's default targets).
    images: int = 0
    image_size: tuple[int, int] | None = None
    image_max_pixels: int | None = None
    image_min_pixels: int | None = None
    train_vision: bool = False
    train_projector: bool | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def check(name: str, allowed: tuple[str, ...]) -> None:
            value = getattr(self, name)
            if value not in allowed:
                raise MemlintError(f"invalid {name} {value!r}; expected one of: {', '.join(allowed)}")

        check("method", METHODS)
        check("quant", QUANTS)
        check("dtype", tuple(DTYPE_BYTES))
        check("precision", PRECISIONS)
        check("attn", tuple(attention()))
        check("shard", SHARDS)
        check("offload", OFFLOADS)
        check("objective", OBJECTIVES)
        check("ref_model", REF_MODELS)
        check("task_head", TASK_HEADS)
        if self.peft_task_type not in PEFT_TASK_TYPES:
            raise MemlintError(f"--peft-task-type {self.peft_task_type}: one of auto, none, "
                               + ", ".join(t for t in PEFT_TASK_TYPES if t not in ("auto", None)))
        self._validate_head()
        self._validate_seq2seq()
        check("model_code", MODEL_CODES)
        if self.model_code == "litgpt":
            self._validate_litgpt()
        self._validate_objective()
        if self.modules_to_save and self.method == "full":
            raise MemlintError("--modules-to-save trains full copies of modules beside LoRA adapters: use --method lora or qlora")
        if self.use_dora and self.method == "full":
            raise MemlintError("--use-dora is a LoRA variant: use --method lora or qlora")
        if self.optimizer_in_bwd and self.grad_accum > 1:
            raise MemlintError("--optimizer-in-bwd steps each parameter as its gradient arrives: gradient accumulation "
                               "cannot be combined with it (torchtune refuses it): use --grad-accum 1")
        if self.reference == "adapter-disabled" and self.method == "full":
            raise MemlintError("--ref-model adapter-disabled needs peft adapters: use --method lora/qlora")
        if self.optim not in optimizers():
            raise MemlintError(f"unknown optimizer {self.optim!r}; known: {', '.join(sorted(optimizers()))}")
        if self.optimizer.get("galore") and self.method != "full":
            raise MemlintError(f"--optim {self.optim} projects full-rank gradients: it needs --method full")
        if self.optimizer.get("every_micro_batch") and self.grad_accum > 1:
            raise MemlintError(f"--optim {self.optim} updates the weights inside every backward: nothing accumulates, "
                               "so the peak is that of --grad-accum 1: use --grad-accum 1")
        if self.optimizer.get("in_backward") and self.grad_accum > 1:
            raise MemlintError(f"--optim {self.optim} steps each parameter in backward: no gradient accumulation "
                               "(transformers refuses it)")
        self._validate_recompute()
        self._validate_parallel()
        for name in ("batch", "seq", "gpus", "nodes", "lora_r", "grad_accum"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise MemlintError(f"--{name.replace('_', '-')} must be a positive integer")
        self._validate_base()
        self._validate_vision()
        if self.shard != "none" and self.dp * self.cp < 2:
            raise MemlintError(f"--shard {self.shard} needs --gpus 2 or more" if self.tp * self.cp == 1 else
                               f"--shard {self.shard} needs 2 or more data- or context-parallel ranks: --gpus {self.gpus} "
                               f"over --tp {self.tp} leaves {self.dp * self.cp}")
        if self.offload == "params" and self.shard not in PARAM_SHARDS:
            raise MemlintError("--offload params needs --shard zero3, fsdp or fsdp_hybrid")
        if self.gpus % self.nodes:
            raise MemlintError(f"--gpus {self.gpus} is not a multiple of --nodes {self.nodes}")
        if self.offload != "none" and self.method != "full" and self.shard == "none":
            raise MemlintError("--offload needs a sharded (DeepSpeed / FSDP) run")
        if isinstance(self.lora_targets, str) and self.lora_targets != "all-linear":
            raise MemlintError("lora_targets is 'all-linear' or a tuple of module names")

    def _validate_recompute(self) -> None:
        """Checkpointing: every Nth layer, or a policy (op-level SAC)."""
        if not isinstance(self.recompute_every, int) or self.recompute_every < 1:
            raise MemlintError("--recompute-every must be a positive integer")
        if self.recompute_every > 1 and not self.recompute:
            raise MemlintError("--recompute-every N checkpoints every Nth layer: it needs --recompute")
        if self.recompute_policy not in RECOMPUTE_POLICIES:
            raise MemlintError(f"unknown --recompute-policy {self.recompute_policy!r}; known: {', '.join(RECOMPUTE_POLICIES)}")
        if self.recompute_policy != "full":
            if not self.recompute:
                raise MemlintError(f"--recompute-policy {self.recompute_policy} is a checkpointing policy: it needs --recompute")
            if self.recompute_every > 1:
                raise MemlintError(f"--recompute-policy {self.recompute_policy} and --recompute-every N exclude each other "
                                   "(torchtitan's selective_ac_option is 'op' or a layer frequency)")
            if self.offload_activations:
                raise MemlintError(f"--recompute-policy {self.recompute_policy} with activation offloading is not modelled")

    def _validate_objective(self) -> None:
        """The training objective, its reference model and its loss kernel."""
        needs_ref = preference()["objectives"][self.objective]["reference"]
        if not needs_ref and self.ref_model not in ("auto", "none"):
            raise MemlintError(f"--objective {self.objective} has no reference model: use --ref-model none")
        if needs_ref and self.reference == "none":
            raise MemlintError(f"--objective {self.objective} needs a reference: --ref-model copy, adapter-disabled or precomputed")
        if self.trl_sft and self.objective != "sft":
            raise MemlintError("--trl-sft is TRL's SFTTrainer: the sft objective (the preference trainers are --objective)")
        if self.fused_loss and self.objective != "sft":
            raise MemlintError("--fused-loss models a fused SFT cross-entropy; not with a preference objective")
        if self.chunked_loss and (self.fused_loss or self.objective != "sft"):
            raise MemlintError("--chunked-loss models torchtune's chunked SFT cross-entropy: not with --fused-loss or a "
                               "preference objective")
        if not isinstance(self.chunked_loss, int) or self.chunked_loss < 0:
            raise MemlintError("--chunked-loss is a number of chunks (torchtune's num_output_chunks, 8), or 0")

    def _validate_base(self) -> None:
        """The base's quantization and the precision its weights are trained in."""
        if self.float8 not in FLOAT8S:
            raise MemlintError(f"--float8 {self.float8!r}: one of {', '.join(FLOAT8S)}")
        if self.float8 != "none" and (self.method != "full" or self.quant != "none"):
            raise MemlintError("float8 training (--float8) is modelled for full fine-tuning of an unquantized model")
        if self.float8_all_gather and (self.float8 == "none" or not self.shard.startswith("fsdp")):
            raise MemlintError("--float8-all-gather is FSDP2's all-gather of float8 shards: it needs --float8 and --shard fsdp")
        if self.quant == "hqq":
            if self.quant_bits not in HQQ_BITS:
                raise MemlintError(f"--bits {self.quant_bits}: HQQ quantizes to {', '.join(map(str, HQQ_BITS))} bits")
            if self.method == "full":
                raise MemlintError("a quantized base cannot be fully fine-tuned: use --method lora/qlora or --quant none")
        elif self.method == "qlora" and self.quant not in FOUR_BIT:
            raise MemlintError("--method qlora needs a 4-bit base (adapters on a quantized base): --quant nf4, fp4 "
                               "(bitsandbytes), gptq or awq (a pre-quantized checkpoint), hqq")
        if self.method == "full" and self.quant != "none":
            raise MemlintError("a quantized base cannot be fully fine-tuned: use --method lora/qlora or --quant none")
        if self.method == "lora" and self.quant in FOUR_BIT:
            raise MemlintError(f"LoRA on a 4-bit base (--quant {self.quant}) is --method qlora")
        if self.quant_group_size != -1 and (not isinstance(self.quant_group_size, int) or self.quant_group_size < 1):
            raise MemlintError("--group-size must be a positive integer or -1 (one group per column)")
        if self.precision == "fp32" and self.dtype != "fp32":
            raise MemlintError("--precision fp32 needs --dtype fp32 (bf16 weights without autocast is --precision pure-bf16)")
        if self.precision in ("pure-bf16", "master-fp32") and self.dtype != "bf16":
            raise MemlintError(f"--precision {self.precision} keeps bf16 weights: use --dtype bf16")
        if self.precision == "pure-fp16" and self.dtype != "fp16":
            raise MemlintError("--precision pure-fp16 keeps fp16 weights: use --dtype fp16")
        if self.precision == "amp-fp16" and self.dtype == "bf16":
            raise MemlintError("--precision amp-fp16 with --dtype bf16 mixes half formats; use amp-bf16 or --dtype fp16/fp32")

    def _validate_vision(self) -> None:
        """Images and the vision tower's training: a vision-language model's (ModelSpec.vision) only."""
        vis = bool(self.model.vision)
        if not isinstance(self.images, int) or self.images < 0:
            raise MemlintError("--images is a number of images per sample (0 or more)")
        if not vis and (self.images or self.train_vision or self.train_projector or self.image_size):
            raise MemlintError(f"--images / --image-size / --train-vision: {self.model.id} has no vision tower")
        if vis and (self.train_vision or self.train_projector) and self.method != "full":
            raise MemlintError("--train-vision / --train-projector train the vision tower's own weights: --method full "
                               "(LoRA adapts the text model only)")
        if vis and (self.tp > 1 or self.cp > 1 or self.model_code != "transformers" or self.objective == "reward"):
            raise MemlintError(f"{self.model.id}: a vision-language model is estimated for transformers' model code on "
                               "data-parallel ranks (no --tp/--cp, LitGPT or reward head)")
        if self.image_size is not None:
            if (len(self.image_size) != 2 or any(not isinstance(x, int) or x < 1 for x in self.image_size)):
                raise MemlintError("--image-size is HxW in pixels (448x448)")
        for name in ("image_max_pixels", "image_min_pixels"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise MemlintError(f"--{name.replace('_', '-')} must be a positive number of pixels")
        if vis and self.images:
            from memlint.estimate.vision import pixel_bounds

            lo, hi = pixel_bounds(self)
            if hi < lo:
                raise MemlintError(f"image max_pixels {hi:,} is below min_pixels {lo:,}")

    def _validate_parallel(self) -> None:
        from memlint.estimate.tensor_parallel import validate

        validate(self)

    @property
    def dp(self) -> int:
        """Data-parallel ranks: the GPUs left once tensor and context parallelism are taken out."""
        return max(1, self.gpus // (self.tp * self.cp))


    def _validate_litgpt(self) -> None:
        """What memlint's LitGPT accounting covers (data/litgpt.json)."""
        if self.precision not in ("pure-bf16", "fp32", "amp-bf16"):
            raise MemlintError(f"--model-code litgpt models LitGPT's bf16-true (--precision pure-bf16), bf16-mixed "
                               f"(--precision amp-bf16) and 32-true (--precision fp32), not --precision {self.precision}")
        if self.precision == "amp-bf16" and (self.dtype != "fp32" or self.quant != "none"):
            raise MemlintError("--model-code litgpt with --precision amp-bf16 is Fabric's bf16-mixed: fp32 weights "
                               "(--dtype fp32), no quantization (litgpt raises 'Quantization and mixed precision is not "
                               "supported')")
        if self.quant not in ("none", "nf4", "fp4"):
            raise MemlintError(f"--model-code litgpt quantizes with bitsandbytes (--quantize bnb.nf4/bnb.fp4): "
                               f"not --quant {self.quant}")
        if self.method != "full":
            from memlint.estimate.litgpt import targets

            try:
                targets(self)
            except ValueError as exc:
                raise MemlintError(f"--model-code litgpt: {exc}") from None
        for name, bad in (("objective", self.objective != "sft"), ("recompute", self.recompute),
                          ("use_dora", self.use_dora), ("fused_loss", self.fused_loss),
                          ("chunked_loss", bool(self.chunked_loss)), ("offload_activations", self.offload_activations),
                          ("modules_to_save", bool(self.modules_to_save)), ("tp", self.tp > 1)):
            if bad:
                raise MemlintError(f"--model-code litgpt: {name.replace('_', '-')} is not modelled for LitGPT's code")

    @property
    def reference(self) -> str:
        """The reference model mode, with "auto" resolved the way TRL resolves ref_model=None
        (so `with_(method=...)` what-ifs follow TRL: LoRA disables the adapters, a full fine-tune copies)."""
        if self.ref_model == "auto":
            return default_ref_model(self.objective, self.method)
        return self.ref_model

    def _validate_head(self) -> None:
        """The task head: an encoder's classification / masked-LM head, fully fine-tuned; a decoder's LM head."""
        if not isinstance(self.num_labels, int) or self.num_labels < 1:
            raise MemlintError("--num-labels must be a positive integer")
        if self.encoder:
            if self.head == "causal-lm":
                raise MemlintError(f"{self.model.id} is an encoder: --head sequence-classification, "
                                   "token-classification or masked-lm (it has no causal-LM head)")
            if self.method == "qlora" or self.objective != "sft" or self.fused_loss or self.chunked_loss:
                raise MemlintError(f"{self.model.id}: memlint accounts for encoders fully fine-tuned or with LoRA, "
                                   "with their task head (--method full or lora, no preference objective or "
                                   "fused/chunked loss); QLoRA on an encoder is not modelled yet")
            if self.method == "lora" and (self.use_dora or self.head == "masked-lm" or self.recompute):
                raise MemlintError(f"{self.model.id}: LoRA on an encoder is modelled for the classification heads, "
                                   "without DoRA or gradient checkpointing")
        elif self.head != "causal-lm":
            raise MemlintError(f"--head {self.head}: memlint models task heads on encoders (BERT, RoBERTa, XLM-RoBERTa); "
                               f"{self.model.id} is a decoder (its reward head: --objective reward)")

    def _validate_seq2seq(self) -> None:
        """An encoder-decoder (T5): full fine-tune or LoRA in fp32 / bf16 weights, with its LM head."""
        if self.target_len is not None and (not isinstance(self.target_len, int) or self.target_len < 1):
            raise MemlintError("--target-len must be a positive integer")
        if not self.seq2seq:
            return
        unsupported = [name for name, on in (
            ("a quantized base", self.quant != "none"), ("fp16 weights (transformers keeps T5's wo in fp32)", self.dtype == "fp16"),
            ("a preference objective", self.objective != "sft"), ("a fused or chunked loss", self.fused_loss or self.chunked_loss),
            ("tensor / context parallelism", self.tp > 1 or self.cp > 1), ("activation offloading", self.offload_activations),
            ("DoRA", self.use_dora), ("float8", self.float8 != "none"), ("LitGPT's model code", self.model_code != "transformers"),
            ("the optimizer in backward", self.steps_in_backward), ("GaLore", bool(self.optimizer.get("galore"))),
            ("partial recompute", self.recompute_every > 1),
            ("gradient checkpointing on BART", self.recompute and bool(self.model.arch.get("post_norm"))),
            ("modules_to_save", bool(self.modules_to_save))) if on]
        if unsupported:
            raise MemlintError(f"{self.model.id} is an encoder-decoder: memlint accounts for its full fine-tune and LoRA "
                               f"(fp32 or bf16 weights); {', '.join(unsupported)} not modelled for it yet")
        if self.method not in ("full", "lora"):
            raise MemlintError(f"{self.model.id} is an encoder-decoder: --method full or lora")

    @property
    def seq2seq(self) -> bool:
        """An encoder-decoder LM (T5): the encoder reads `seq` tokens, the decoder `tgt`."""
        return bool(self.model.arch.get("encoder_decoder"))

    @property
    def tgt(self) -> int:
        """The decoder's length: target_len, else the source length (assumed)."""
        return self.target_len if self.target_len is not None else self.seq

    @property
    def lora_task(self) -> str | None:
        """peft's task_type, "auto" resolved (an encoder's classification head's, else None)."""
        if self.peft_task_type != "auto":
            return self.peft_task_type
        return {"sequence-classification": "SEQ_CLS", "token-classification": "TOKEN_CLS"}.get(self.head) \
            if self.encoder else None

    @property
    def encoder(self) -> bool:
        return bool(self.model.arch.get("encoder"))

    @property
    def head(self) -> str:
        """The output head, "auto" resolved: an encoder's sequence-classification head, a decoder's LM head."""
        if self.task_head == "auto":
            return "sequence-classification" if self.encoder else "causal-lm"
        return self.task_head

    @property
    def steps_in_backward(self) -> bool:
        """Each parameter is stepped by its post-accumulate-grad hook: optimizer_in_bwd, or a layerwise optim."""
        return self.optimizer_in_bwd or bool(self.optimizer.get("in_backward"))

    @property
    def upcasts_kbit(self) -> bool:
        """prepare_model_for_kbit_training casts the non-quantized weights to fp32: it runs (kbit_prep) and the base is
        one it upcasts (peft skips GPTQ and HQQ models: utils/other.py `is_gptq_quantized`, `is_hqq_quantized`)."""
        return self.kbit_prep and self.quant not in ("none", "gptq", "hqq")

    @property
    def shard_group(self) -> int:
        """Ranks one copy of the sharded state is split over (1 when nothing is sharded)."""
        if self.shard == "none":
            return 1
        # FSDP / the distributed optimizer shard over the context-parallel ranks as well (data/distributed.json)
        group = self.dp * (self.cp if self.cp > 1 and _cp_facts()["shards_over_cp"] else 1)
        return max(1, group // self.nodes) if self.shard == "fsdp_hybrid" else group

    @property
    def weight_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def compute_dtype(self) -> str:
        """The dtype matmuls run in."""
        if self.precision in ("amp-bf16", "pure-bf16", "master-fp32"):
            return "bf16"
        if self.precision in ("amp-fp16", "pure-fp16"):
            return "fp16"
        return self.dtype

    @property
    def optimizer(self) -> dict[str, Any]:
        return optimizers()[self.optim]

    def with_(self, **changes: Any) -> "Setup":
        return replace(self, **changes)


def _cp_facts() -> dict:
    return data.load("distributed.json")["tensor_parallel"]["context_parallel"]
