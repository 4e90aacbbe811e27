"""The plan's fields, one declaration each: everything that names, types, orders or shows a field comes from here.

`TrainingPlan`'s field list, the JSON output and its schema, `--assume` (its short and Hugging Face names, its
parsing and its did-you-mean), the worst case among branch candidates, which fields `memlint plan` shows, the
`memlint estimate` flags that describe the same run, and the docs table (docs/plan.md) are all derived from
`FIELDS`. Adding a field is one `Field(...)` here plus its accounting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

# Where a value came from, most to least trustworthy.
SOURCES = (
    "literal",            # written at the use site: r=16
    "constant",           # a module constant, arithmetic or f-string over literals
    "command-line",       # given by the launch command: train.py --lr 1e-4, torchrun --nproc_per_node 8
    "argparse-default",   # add_argument(default=...) reached through args.x
    "click-default",      # @click.option(default=...)
    "dataclass-default",  # field(default=...) read through HfArgumentParser
    "function-default",   # fire-style keyword default of the entry function
    "environment-default",  # os.environ.get("X", default): the default, unless the environment sets X
    "library-default",    # the library's default for an argument the script leaves out
    "assumed",            # given by the user: --assume key=value
    "placeholder",        # written, but for the user to fill in (<your_model_path>, path/to/model): not known
    "unknown",            # cannot be known statically
)

GROUPS = ("model", "adapters", "quantization", "batch and length", "precision and memory", "optimizer",
          "parallelism", "loss", "vision", "trainer")

KINDS = {
    "name": "a name (string)",
    "count": "a whole number from 1",
    "bool": "true or false",
    "number": "a number",
    "names": "a name or a list of names",
    "switch": "false, or the name of what turns it on",
    "ranks": "a whole number from 1, or world (every rank of the launch)",
}


@dataclass(frozen=True)
class Flag:
    """The `memlint estimate` / `memlint measure` flag that sets the same thing as the plan field.

    `dest` is the Setup attribute it sets, when that is all it does (None: estimate's own code reads it);
    `custom`: the flag is declared by hand in commands/estimate.py (a conversion the table cannot say)."""

    name: str
    dest: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None
    help: str = ""
    default: Any = None  # None: the run default of `Field.default`, else Setup's
    custom: bool = False


@dataclass(frozen=True)
class Field:
    name: str  # the plan's, the JSON's and --assume's name
    group: str
    kind: str
    doc: str
    worst: str | None = None  # among branch candidates: "max" (the larger costs more), "min", "first", "last"
    flag: Flag | None = None
    assume: tuple[str, ...] = ()  # short names --assume also takes
    hf: tuple[str, ...] = ()  # the Hugging Face argument names that mean it (--assume takes them too)
    default: str | None = None  # its key in data/library_defaults.json run_defaults, when it has one
    shown: str = "known"  # `memlint plan` shows it when unknown: "always", or when a relevance (RELEVANT) holds
    choices: tuple[Any, ...] | None = None  # the values the estimate knows (None: open)
    extra: dict = field(default_factory=dict)


def _b(name: str, dest: str, help: str) -> Flag:
    return Flag(name, dest, bool, help=help)


def _dtype(text: str) -> str:
    """`--dtype bfloat16` / `torch.bfloat16` / `bf16`: memlint's name (data/aliases.json "dtypes"), else as typed
    (argparse then says which choices there are)."""
    from memlint.vocab import dtype_name

    name = dtype_name(text)
    return name if name not in (None, "auto") else text


# The field order is the JSON's and the plan table's.
FIELDS: tuple[Field, ...] = (
    # ---- model
    Field("model_id", "model", "name", "the checkpoint the run loads (a Hub id, a local folder, or the script's own model class)",
          worst="last", flag=Flag("--model", custom=True, metavar="ID|DIR"), assume=("model",),
          hf=("model_name_or_path", "model_name", "base_model", "pretrained_model_name_or_path", "model_path"),
          shown="always"),
    Field("torch_dtype", "model", "name", "the dtype the weights are loaded in", worst="last",
          flag=Flag("--dtype", "dtype", lambda text: _dtype(text), ("fp32", "bf16", "fp16"), metavar="bf16|fp16|fp32",
                    help="dtype the weights are loaded in (bfloat16, float16, float32 and torch.bfloat16 too)"),
          assume=("dtype",), default="dtype", shown="always"),
    # ---- adapters
    Field("method", "adapters", "name", "full fine-tuning, LoRA, or LoRA on a 4-bit base (QLoRA)", worst="last",
          flag=Flag("--method", "method", str, ("full", "lora", "qlora"), default="full"), shown="always",
          choices=("full", "lora", "qlora")),
    Field("lora_r", "adapters", "count", "LoRA rank", worst="max",
          flag=Flag("--lora-r", "lora_r", int, metavar="N"), assume=("r",), hf=("lora_rank",), default="lora_r",
          shown="adapters"),
    Field("lora_alpha", "adapters", "number", "LoRA alpha (no memory of its own)", worst="last", shown="adapters"),
    Field("lora_targets", "adapters", "names", "the modules LoRA adapts", worst="last",
          flag=Flag("--lora-targets", custom=True, metavar="all-linear|q_proj,v_proj,…"),
          hf=("target_modules", "lora_target_modules", "lora_target"), default="lora_targets", shown="adapters"),
    Field("lora_dropout", "adapters", "number", "LoRA dropout (a saved mask or a dropped copy of the input)",
          worst="max", flag=Flag("--lora-dropout", "lora_dropout", float, metavar="P"), default="lora_dropout",
          shown="adapters"),
    Field("lora_modules_to_save", "adapters", "names", "peft's modules_to_save: trained full copies beside the adapters",
          worst="last", flag=Flag("--modules-to-save", custom=True, metavar="NAMES"), hf=("modules_to_save",),
          shown="adapters"),
    Field("lora_task_type", "adapters", "name", "peft's task_type", worst="last",
          flag=Flag("--peft-task-type", custom=True, metavar="TYPE"), hf=("task_type",), shown="adapters"),
    Field("use_dora", "adapters", "bool", "DoRA: a magnitude vector per adapted layer", worst="max",
          flag=_b("--use-dora", "use_dora", "DoRA (LoraConfig(use_dora=True)): a magnitude vector per adapted layer, "
                  "the weight norm every forward"), shown="adapters"),
    Field("adapter_dtype", "adapters", "name", "the LoRA adapters' dtype (peft's autocast_adapter_dtype)", worst="last",
          flag=Flag("--adapter-dtype", "adapter_dtype", str, ("fp32", "bf16", "fp16"),
                    help="the LoRA adapters' dtype (default: fp32 on a half base under autocast or fp32 weights, peft's "
                         "autocast_adapter_dtype; the weights' for pure-bf16 recipes)"),
          shown="adapters", choices=("fp32", "bf16", "fp16")),
    # ---- quantization
    Field("quant_bits", "quantization", "count", "bits per quantized base weight (4, 8; unset: not quantized)",
          worst="last", flag=Flag("--quant", custom=True), shown="always"),
    Field("quant_type", "quantization", "name", "the 4-bit format (nf4, fp4) or the checkpoint's (gptq, awq, hqq)",
          worst="last", flag=Flag("--quant", custom=True), hf=("bnb_4bit_quant_type",), shown="quantization"),
    Field("quant_group_size", "quantization", "number", "GPTQ / AWQ / HQQ weights per scale", worst="last",
          flag=Flag("--group-size", custom=True, metavar="G"), hf=("group_size",), shown="quantization"),
    Field("double_quant", "quantization", "bool", "bitsandbytes' double quantization of the NF4 scales", worst="min",
          flag=Flag("--double-quant", "double_quant", bool, default=True), hf=("bnb_4bit_use_double_quant",),
          shown="quantization"),
    Field("compute_dtype", "quantization", "name", "the 4-bit layers' compute dtype", worst="last",
          hf=("bnb_4bit_compute_dtype",), shown="quantization"),
    Field("kbit_prep", "quantization", "bool", "peft's prepare_model_for_kbit_training (upcasts the unquantized weights)",
          worst="max", flag=Flag("--kbit-prep", custom=True), shown="quantization"),
    # ---- batch and length
    Field("per_device_batch", "batch and length", "count", "sequences per micro-batch on each GPU", worst="max",
          flag=Flag("--batch", "batch", int, metavar="N", help="micro-batch per GPU"), assume=("batch", "batch_size"),
          hf=("per_device_train_batch_size", "per_gpu_train_batch_size", "micro_batch_size",
              "train_micro_batch_size_per_gpu"), default="batch",
          shown="always"),
    Field("eval_batch", "batch and length", "count", "sequences per evaluation micro-batch", worst="max",
          hf=("per_device_eval_batch_size",)),
    Field("grad_accum", "batch and length", "count", "micro-batches per optimizer step", worst="max",
          flag=Flag("--grad-accum", "grad_accum", int, metavar="N"), hf=("gradient_accumulation_steps", "grad_accum_steps"),
          default="grad_accum", shown="always"),
    Field("max_length", "batch and length", "count", "the longest sequence a micro-batch can hold, in tokens",
          worst="max", flag=Flag("--seq", "seq", int, metavar="N", help="longest sequence in a micro-batch"),
          assume=("seq",), hf=("max_seq_length", "model_max_length", "max_seq_len", "cutoff_len", "block_size",
                               "sequence_len", "seq_length"), default="seq", shown="always"),
    Field("padding", "batch and length", "name", "how a micro-batch is padded (max_length, longest, packing)",
          worst="last", shown="always"),
    Field("packing", "batch and length", "bool", "samples packed into full-length rows", worst="max", shown="always"),
    Field("group_by_length", "batch and length", "bool", "batches grouped by length", worst="last"),
    # ---- precision and memory
    Field("gradient_checkpointing", "precision and memory", "bool", "activation recomputation", worst="min",
          flag=Flag("--recompute", "recompute", bool, help="gradient checkpointing"), assume=("recompute",),
          default="recompute", shown="always"),
    Field("optimizer", "optimizer", "name", "the optimizer (the Trainer's optim names)", worst="last",
          flag=Flag("--optim", "optim", str, metavar="NAME", help="HF Trainer optim name"), assume=("optim",),
          hf=("optim",), default="optim", shown="always"),
    Field("precision", "precision and memory", "name", "what the step does with the weights' dtype "
          "(fp32, amp-bf16, amp-fp16, pure-bf16, pure-fp16, master-fp32)", worst="last",
          flag=Flag("--precision", custom=True), shown="always",
          choices=("fp32", "amp-bf16", "amp-fp16", "pure-bf16", "pure-fp16", "master-fp32")),
    Field("attn_implementation", "precision and memory", "name", "the attention kernel", worst="last",
          flag=Flag("--attn", "attn", str, custom=True), assume=("attn",), default="attn", shown="always"),
    Field("fused_loss", "loss", "switch", "a fused linear cross-entropy (Liger, Cut Cross-Entropy)", worst="min",
          flag=_b("--fused-loss", "fused_loss", "fused/chunked linear cross-entropy (Liger, Cut Cross-Entropy): no "
                  "full-vocabulary logits"), hf=("use_liger_kernel", "use_liger")),
    Field("chunked_loss", "loss", "number", "torchtune's chunked output loss (num_output_chunks)", worst="min",
          flag=Flag("--chunked-loss", "chunked_loss", int, metavar="K", default=0,
                    help="torchtune's CEWithChunkedOutputLoss: K bf16 logit chunks, each upcast to fp32 in turn (0: off)")),
    Field("optimizer_in_bwd", "optimizer", "bool", "the optimizer step fused into backward", worst="min",
          flag=_b("--optimizer-in-bwd", "optimizer_in_bwd",
                  "optimizer step fused into backward (torchtune's optimizer_in_bwd): no full gradient buffer")),
    Field("recompute_every", "precision and memory", "count", "with recompute, every Nth layer checkpointed",
          worst="max", flag=Flag("--recompute-every", "recompute_every", int, metavar="N", default=1,
                                 help="with --recompute, checkpoint only every Nth decoder layer (torchtune ac_mode: "
                                      "selective, ac_option: N; default: 1, every layer)")),
    Field("recompute_policy", "precision and memory", "name", "what a checkpointed layer keeps (full, op-sac)",
          worst="last", flag=Flag("--recompute-policy", custom=True), choices=("full", "op-sac")),
    Field("galore_rank", "optimizer", "count", "GaLore's projection rank", worst="max",
          flag=Flag("--galore-rank", "galore_rank", int, metavar="R", help="GaLore's projection rank (galore_* optim)"),
          default="galore_rank", shown="galore"),
    Field("galore_targets", "optimizer", "names", "GaLore's optim_target_modules", worst="last",
          flag=Flag("--galore-targets", custom=True), hf=("optim_target_modules",), default="galore_targets",
          shown="galore"),
    Field("offload_activations", "precision and memory", "bool", "saved activations offloaded to CPU", worst="min",
          flag=_b("--offload-activations", "offload_activations",
                  "activation offloading (TRL's activation_offloading): saved activations copied to CPU"),
          hf=("activation_offloading", "enable_activation_offloading")),
    Field("float8_training", "precision and memory", "name", "torchao float8 linears (none, all, layers)",
          worst="last", flag=Flag("--float8", "float8", str, ("none", "all", "layers"), default="none",
                                  help="torchao float8 training (convert_to_float8_training / accelerate fp8): the "
                                       "linears made Float8Linear, every one (all) or the decoder's (layers)"),
          choices=("none", "all", "layers")),
    Field("float8_all_gather", "parallelism", "bool", "FSDP2 all-gathers float8 shards", worst="min",
          flag=_b("--float8-all-gather", "float8_all_gather",
                  "FSDP2 all-gathers the float8 linears' shards in float8 (torchao / torchtitan "
                  "enable_fsdp_float8_all_gather): 1-byte unsharded weights, no weight casts")),
    Field("compiled_loss", "loss", "bool", "the cross-entropy under torch.compile", worst="min",
          flag=_b("--compiled-loss", "compiled_loss", "the cross-entropy under torch.compile (torchtune compile: true, "
                  "TrainingArguments(torch_compile=True)): no fp32 upcast or log-softmax kept, only the logsumexp"),
          hf=("torch_compile",)),
    # ---- parallelism
    Field("distributed", "parallelism", "name", "sharding: none, zero1/2/3, fsdp, fsdp_shard_grad_op, fsdp_hybrid",
          worst="last", flag=Flag("--shard", custom=True), shown="always"),
    Field("num_gpus", "parallelism", "count", "GPUs (ranks) the run spans", worst="max",
          flag=Flag("--gpus", "gpus", int, metavar="N", default=1),
          shown="always"),
    Field("tp_size", "parallelism", "ranks", "tensor-parallel degree", worst="min",
          flag=Flag("--tp", "tp", int, metavar="N", default=1,
                    help="tensor-parallel degree: attention and MLP linears split N ways (data parallel over GPUs / "
                         "(N × CP))"), hf=("tensor_parallel_degree", "tp_size"), shown="parallel"),
    Field("sequence_parallel", "parallelism", "bool", "sequence parallelism with tensor parallelism", worst="min",
          flag=_b("--sequence-parallel", "sequence_parallel", "sequence parallelism with TP: norms and residual "
                  "stream split by the sequence (Megatron --sequence-parallel)"), shown="parallel"),
    Field("cp_size", "parallelism", "ranks", "context-parallel degree", worst="min",
          flag=Flag("--cp", "cp", int, metavar="N", default=1,
                    help="context-parallel degree: the sequence split over N ranks, ring attention (approximate)"),
          hf=("context_parallel_degree", "cp_size"), shown="parallel"),
    Field("tp_stack", "parallelism", "name", "whose tensor-parallel plan (transformers, torchtitan, megatron)",
          worst="last", flag=Flag("--tp-stack", "tp_stack", str, ("transformers", "torchtitan", "megatron"),
                                  default="transformers", help="whose TP plan: which of embeddings / lm_head / loss "
                                  "are vocab-parallel (default: transformers' tp_plan='auto')"), shown="parallel"),
    Field("offload", "parallelism", "name", "what DeepSpeed / FSDP offloads to CPU (none, optimizer, params)",
          worst="min", flag=Flag("--offload", "offload", str, ("none", "optimizer", "params"), default="none"),
          shown="sharded", choices=("none", "optimizer", "params")),
    # ---- trainer
    Field("trainer", "trainer", "name", "the trainer class or loop that runs the step", worst="last", shown="always"),
    Field("ref_model", "trainer", "name", "a preference trainer's reference (none, copy, adapter-disabled, precomputed)",
          worst="first", flag=Flag("--ref-model", "ref_model", str, ("auto", "none", "copy", "adapter-disabled",
                                                                      "precomputed"), default="auto",
                                  help="reference for dpo/kto (default: a frozen copy for a full fine-tune, adapters "
                                       "disabled for peft)"), shown="preference"),
    Field("task_head", "model", "name", "the output head the script loads", worst="last",
          flag=Flag("--head", custom=True), shown="encoder"),
    Field("num_labels", "model", "count", "a classification head's labels", worst="max",
          flag=Flag("--num-labels", "num_labels", int, metavar="N", help="labels of a classification head"),
          default="num_labels", shown="encoder"),
    Field("target_len", "batch and length", "count", "an encoder-decoder's target length", worst="max",
          flag=Flag("--target-len", "target_len", int, metavar="N",
                    help="an encoder-decoder's (T5's) target length, the decoder's tokens (default: the source "
                         "length, --seq, assumed)"), hf=("max_target_length", "max_target_len"), shown="seq2seq"),
    # ---- vision
    Field("image_max_pixels", "vision", "count", "the image processor's max_pixels", worst="max",
          flag=Flag("--image-max-pixels", "image_max_pixels", int, metavar="PIXELS",
                    help="the processor's max_pixels (LLaMA-Factory image_max_pixels; default: the processor's, "
                         "data/vision.json)"), hf=("max_pixels",), shown="vision"),
    Field("image_min_pixels", "vision", "count", "the image processor's min_pixels", worst="min",
          flag=Flag("--image-min-pixels", "image_min_pixels", int, metavar="PIXELS",
                    help="the processor's min_pixels"), hf=("min_pixels",), shown="vision"),
    Field("train_vision", "vision", "bool", "a full fine-tune trains the vision tower", worst="max",
          flag=_b("--train-vision", "train_vision", "a full fine-tune also trains the vision tower (LLaMA-Factory "
                  "freeze_vision_tower: false; default: frozen, LLaMA-Factory's default)"), shown="vision"),
    Field("train_projector", "vision", "bool", "the multi-modal projector trains", worst="max",
          flag=Flag("--train-projector", "train_projector", bool, help="the merger / multi-modal projector trains "
                    "(default: as --train-vision)"), shown="vision"),
)

# Not plan fields, but --assume takes them: how many GPUs (ranks) the run spans, and the nodes they span (fsdp_hybrid),
# with the launchers' names for the first.
EXTRA_ASSUMPTIONS: dict[str, tuple[str, ...]] = {"gpus": ("nproc_per_node", "num_processes", "world_size"), "nodes": ()}

BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
PLAN_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS)
COUNT_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.kind == "count")
NAME_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.kind == "name")
# What --assume takes for a field besides its name: its short names and the Hugging Face arguments that mean it.
ASSUME_NAMES: dict[str, str] = {
    **{alias: f.name for f in FIELDS for alias in (*f.assume, *f.hf) if alias != f.name},
    **{alias: name for name, aliases in EXTRA_ASSUMPTIONS.items() for alias in aliases}}


def worst(name: str, candidates: list[Any]) -> Any:
    """The worst case among a field's branch candidates (the largest batch, recompute off, the fewest ranks
    splitting the model), by its declared order; a switch that is off in one branch is off."""
    order = BY_NAME[name].worst if name in BY_NAME else None
    cands = [c for c in candidates if c is not None]
    if not cands:
        return None
    if order == "first":
        return cands[0]
    if order == "last" or order is None:
        return cands[-1]
    if order == "min" and False in cands and all(isinstance(c, (bool, str)) for c in cands):
        return False
    try:
        return max(cands) if order == "max" else min(cands)
    except TypeError:
        return cands[-1]


def rows() -> list[dict[str, str]]:
    """One row per field for `memlint plan --fields` and docs/plan.md: what it is and every name that sets it."""
    out = []
    for f in FIELDS:
        names = [n for n in (*f.assume, *f.hf)]
        out.append({"field": f.name, "group": f.group, "kind": KINDS[f.kind], "meaning": f.doc,
                    "also --assume": ", ".join(names), "estimate flag": f.flag.name if f.flag else "",
                    "worst case": {"max": "largest", "min": "smallest", "first": "first", "last": "last"}.get(
                        f.worst or "last", "")})
    return out


def json_schema() -> dict:
    """The JSON Schema of one plan as `memlint plan --format json` writes it (`plan` of each file)."""
    types = {"name": ["string", "null"], "count": ["integer", "null"], "bool": ["boolean", "null"],
             "number": ["number", "null"], "names": ["string", "array", "null"],
             "switch": ["boolean", "string", "null"], "ranks": ["integer", "string", "null"]}
    def one(f: Field) -> dict:
        value: dict[str, Any] = {"type": types[f.kind]}
        if f.kind == "names":
            value["items"] = {"type": "string"}
        return {"$ref": "#/$defs/value", "description": f.doc, "properties": {"value": value}}

    value = {"type": "object", "required": ["value", "source", "line"], "additionalProperties": False,
             "properties": {"value": {}, "source": {"enum": list(SOURCES)}, "line": {"type": ["integer", "null"]},
                            "path": {"type": "string"}, "candidates": {"type": "array"}, "shape": {"type": "object"}}}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "memlint training plan",
            "type": "object", "required": list(PLAN_FIELDS), "additionalProperties": False,
            "properties": {f.name: one(f) for f in FIELDS}, "$defs": {"value": value}}
