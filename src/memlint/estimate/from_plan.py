"""TrainingPlan (values with provenance, some unknown) -> the worst-case Setup to estimate.

Unknown values are never guessed: a field the estimate needs and the script does not
settle becomes a note telling the user which `--assume key=value` to pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from memlint.errors import MemlintError
from memlint.library.api import _optimizer_classes, attention, objective_name
from memlint.library.api import prompt_learning_configs, trainer as api_trainer
from memlint.library.api import kbit_prep as kbit_prep_of
from memlint.vocab import ascii_digits, dtype_name
from memlint.plan import PLAN_FIELDS, TrainingPlan, Value
from memlint.plan import fields as plan_fields

# Not plan fields: how many GPUs (ranks) the run spans, over how many nodes (fsdp_hybrid).
EXTRA_ASSUMPTIONS = plan_fields.EXTRA_ASSUMPTIONS
# What the estimate counts with: whole numbers from 1 (a script's 1e999 or "abc" is unknown, not
# a crash); and what it reads as names (plan/fields.py declares each field's kind).
COUNT_FIELDS = (*plan_fields.COUNT_FIELDS, *EXTRA_ASSUMPTIONS)
NAME_FIELDS = plan_fields.NAME_FIELDS
MAX_COUNT = 1 << 31



def _parse(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    if "," in text:
        return [t.strip() for t in text.split(",") if t.strip()]
    return text.strip()


def apply_assumptions(plan: TrainingPlan, assume: list[str]) -> tuple[TrainingPlan, dict[str, Any]]:
    values: dict[str, Value] = {}
    extra: dict[str, Any] = {}
    for item in assume:
        if "=" not in item:
            raise MemlintError(f"--assume {item!r}: expected KEY=VALUE")
        key, raw = item.split("=", 1)
        key = plan_fields.ASSUME_NAMES.get(key.strip(), key.strip())
        if key not in PLAN_FIELDS and key not in EXTRA_ASSUMPTIONS:
            raise MemlintError(f"--assume {key!r}: not a plan field{_did_you_mean(key)} "
                               "(`memlint plan --fields` lists them, with the Hugging Face names each takes: per_device_train_batch_size)")
        value = _parse(raw)
        if key in COUNT_FIELDS and whole(value) is None:
            raise MemlintError(f"--assume {item}: {key} must be a whole number from 1 to {MAX_COUNT:,}")
        if key in EXTRA_ASSUMPTIONS:
            extra[key] = value
            continue
        values[key] = Value(value, "assumed", chain=(f"--assume {item}",))
    return checked(plan.with_values(**values)), extra


def _did_you_mean(key: str) -> str:
    """`; did you mean max_length?`: the closest plan field, short name or Hugging Face argument name."""
    import difflib

    names = [*PLAN_FIELDS, *plan_fields.ASSUME_NAMES, *EXTRA_ASSUMPTIONS]
    close = difflib.get_close_matches(key.lower(), names, n=1, cutoff=0.6)
    if not close:
        return ""
    target = plan_fields.ASSUME_NAMES.get(close[0], close[0])
    return f"; did you mean {close[0]}" + (f" ({target})?" if target != close[0] else "?")


def whole(v: Any) -> int | None:
    """`v` as a whole number from 1 to MAX_COUNT, else None: bools, NaN, inf, 2.5, "abc", 0."""
    if isinstance(v, str) and 0 < len(v.strip()) <= 12 and ascii_digits(v.strip()):
        v = int(v)
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        v = int(v)
    return v if type(v) is int and 1 <= v <= MAX_COUNT else None


def _shown(v: Any) -> str:
    text = repr(v) if not isinstance(v, int) or v.bit_length() < 64 else f"an integer of {v.bit_length()} bits"
    return text if len(text) <= 60 else text[:57] + "..."


def checked(plan: TrainingPlan) -> TrainingPlan:
    """The plan with every value the estimate cannot count with made unknown, and a note saying
    why: a micro-batch of 1e999 (or "abc", or a list) is not estimated, and never a crash."""
    bad: dict[str, Value] = {}
    notes: list[str] = []
    for name, v in plan.fields.items():
        if not v.known:
            continue
        vals = [c for c in (v.candidates or (v.value,)) if c is not None]
        if name in COUNT_FIELDS:
            wrong = next((c for c in vals if whole(c) is None), None)
            ok = wrong is None and all(type(c) is int for c in vals)
            why = f"{name} = {_shown(wrong)} is not a whole number from 1 to {MAX_COUNT:,}"
        elif name in NAME_FIELDS:
            wrong = next((c for c in vals if not isinstance(c, str) or len(c) > 1000), None)
            ok = wrong is None
            why = f"{name} = {_shown(wrong)} is not a name"
        elif name == "lora_targets":
            wrong = next((c for c in vals if not isinstance(c, str) and not (
                isinstance(c, (list, tuple)) and all(isinstance(t, str) for t in c))), None)
            ok = wrong is None
            why = f"lora_targets = {_shown(wrong)} is not a module name or a list of them"
        else:
            continue
        if wrong is not None:
            bad[name] = Value(None, "unknown", v.span, v.chain + (why,))
            notes.append(f"{why}: it is unknown")
        elif not ok:  # "4" from a YAML or an argparse default: the number it spells
            bad[name] = Value(whole(v.value) if v.value is not None else None, v.source, v.span, v.chain,
                              tuple(whole(c) for c in v.candidates))
    if not bad:
        return plan
    out = plan.with_values(**bad)
    return TrainingPlan(out.path, out.fields, tuple(dict.fromkeys(plan.notes + tuple(notes))), out.diagnostics,
                        out.kind, versions=out.versions)


def _worst(v: Value, name: str) -> Any:
    """The worst case over branch candidates, in the field's declared order (plan/fields.py), else the value; what
    is not known (unknown, a placeholder such as `<your_model_path>`) sizes nothing."""
    if not v.known:
        return None
    return plan_fields.worst(name, list(v.candidates or (v.value,)))


def _transformers_major() -> int:
    from memlint.library.versions import installed_version

    version = installed_version("transformers")  # the checkout's pin, if any
    try:
        return int(version.split(".")[0]) if version else 5  # not installed: the newest known
    except ValueError:
        return 5


def _positive(v: Any) -> int | None:
    try:
        n = int(v)
    except (TypeError, ValueError):
        return None
    return n if n >= 1 else None


def _distributed(get, extra: Mapping[str, Any], notes: list[str]) -> tuple[str, int, int, str]:
    """(shard, gpus, nodes, offload): the ranks come from --gpus / --assume gpus=N, else from
    the plan's num_gpus (a launcher or accelerate config); one GPU when neither says."""
    from memlint.estimate.setup import PARAM_SHARDS, SHARDS

    shard = get("distributed").value or "none"
    gpus = _positive(extra.get("gpus"))
    if gpus is None and get("num_gpus").known:
        gpus = _positive(_worst(get("num_gpus"), "num_gpus"))
    gpus = gpus or 1
    nodes = _positive(extra.get("nodes")) or 1
    if gpus % nodes:
        notes.append(f"{gpus} GPUs do not split over {nodes} nodes: estimated as one node")
        nodes = 1
    if shard == "deepspeed":
        shard = "none"
        notes.append("DeepSpeed stage unknown: estimated unsharded (worst case)")
    if shard not in SHARDS:
        notes.append(f"distributed={shard!r} is not modelled: estimated unsharded")
        shard = "none"
    if shard != "none" and gpus < 2:
        notes.append(f"{shard} over an unknown number of GPUs: estimated on one (pass --gpus N or --assume gpus=N)")
        shard = "none"
    if shard == "none" and gpus > 1:
        notes.append(f"{gpus} GPUs without sharding (DDP): every rank holds the full model state")
    offload = get("offload").value if get("offload").known else None
    offload = offload if offload in ("optimizer", "params") else "none"
    if offload == "params" and shard not in PARAM_SHARDS:
        notes.append(f"parameter offload needs ZeRO-3 or FSDP full shard; with {shard}: estimated as optimizer "
                     "offload")
        offload = "optimizer"
    if offload != "none" and shard == "none":
        notes.append("CPU offload without a sharded engine: estimated without offload")
        offload = "none"
    return shard, gpus, nodes, offload


def _trl_fields(get, objective: str) -> dict:
    """trl_sft (the sft objective run by TRL's SFTTrainer) and the TRL version whose step layout applies."""
    from memlint.library.versions import installed_version

    trl_sft = objective == "sft" and trainer_step(get) == "SFTTrainer"
    framework = dict(get("trainer").shape).get("framework")  # a framework's own preference step (OpenRLHF's)
    if framework:
        return {"trl_sft": False, "trl_version": None, "logps_framework": framework}
    return {"trl_sft": trl_sft, "trl_version": installed_version("trl") if objective != "sft" or trl_sft else None}


def trainer_step(get) -> str | None:
    """Whose training step runs: the trainer class, or "unsloth" for an SFT trainer over an unsloth model (its own
    step: fused loss, offloaded checkpoints, no k-bit preparation); None when unknown."""
    v = get("trainer")
    if not v.known:
        return None
    return "unsloth" if dict(v.shape).get("stack") == "unsloth" else v.value


def _trainer_builds_optimizer(get) -> bool:
    """Whether transformers' Trainer builds the optimizer from `optim` (its create_optimizer, with bitsandbytes'
    32-bit override for embeddings); not when the script constructs an optimizer class itself (extract's optimizer
    value then names the class and its line)."""
    import re

    v = get("optimizer")
    classes = {c for _, c in _optimizer_classes()}
    return not any(re.match(r"(\w+) \(line \d+\)$", c) and c.split(" (")[0] in classes for c in v.chain)


# TRL trainers whose step memlint models (data/preference.json); GRPO's generation is not.
TRAINER_OBJECTIVES = {"DPOTrainer": "dpo", "ORPOTrainer": "orpo", "CPOTrainer": "cpo", "KTOTrainer": "kto",
                      "RewardTrainer": "reward"}
_REF_MODELS = {"model": "copy", "auto": "auto", "precomputed": "precomputed"}


def _objective(get, method: str, notes: list[str]) -> tuple[str, str]:
    """(objective, ref_model) from the plan's trainer and ref_model fields."""
    trainer = get("trainer").value if get("trainer").known else None
    facts = api_trainer(str(trainer)) if trainer is not None else None
    if facts is not None and facts.not_modelled:
        raise MemlintError(f"{trainer}: {facts.not_modelled}; the plan is read, with no estimate")
    if dict(get("trainer").shape).get("not_modelled"):  # a framework's step memlint does not model (OpenRLHF's PPO)
        raise MemlintError(f"{dict(get('trainer').shape)['not_modelled']}; the plan is read, with no estimate")
    objective = dict(get("trainer").shape).get("objective") or TRAINER_OBJECTIVES.get(str(trainer), "sft")
    if dict(get("trainer").shape).get("class"):
        notes.append(f"{dict(get('trainer').shape)['class']}: the checkout's own {trainer} subclass, read by its name as "
                     f"{objective_name(objective)}'s step (chosen and rejected in one forward, no reference model); its code is "
                     "not followed")
    if trainer == "GRPOTrainer":
        notes.append("GRPOTrainer: generation and the group's completions are not modelled; estimated as one "
                     "training forward at max_prompt_length + max_completion_length")
    if objective not in ("dpo", "kto"):
        return objective, "none"
    v = get("ref_model")
    ref = _REF_MODELS.get(str(_worst(v, "ref_model")), "auto") if v.known else "auto"
    if not v.known:
        notes.append(f"{trainer}'s ref_model is unknown: estimated as TRL's default (no ref_model)")
    if ref == "copy" and method != "full":
        notes.append("ref_model= a second model next to a peft policy: a full frozen copy of the base")
    return objective, ref


def _method(get, notes: list[str], spec: Any = None) -> tuple[str, str, bool, int, int]:
    """(method, quant, double_quant, group size, HQQ bits): a 4-bit base trains only through adapters (QLoRA), an 8-bit one
    through LoRA. A pre-quantized GPTQ / AWQ checkpoint (its config.json's quantization_config) is loaded quantized
    whatever the script passes, so it decides the base."""
    method = get("method").value or "full"
    if method in prompt_learning_configs().values():
        # a frozen base whose backward runs through every layer, a few trainable virtual tokens: LoRA's layout with
        # adapters standing in for the tokens (their per-layer keys and values are not counted)
        notes.append(f"{method}: estimated as a frozen base with LoRA adapters standing in for the virtual tokens' few "
                     "trainable parameters (a slight overcount; the prefix's keys and values per layer are not counted)")
        method = "lora"
    quant = "none"
    bits = get("quant_bits").value
    group = get("quant_group_size").value if get("quant_group_size").known else None
    pre = getattr(spec, "quantization", None)
    if pre:
        quant, bits, group = pre["quant_method"], pre.get("bits", 4), pre.get("group_size", 128)
        notes.append(f"{spec.id} is a pre-quantized {quant.upper()} checkpoint (config.json quantization_config: "
                     f"bits {bits}, group_size {group}): loaded quantized")
        if bits != 4:
            notes.append(f"{quant.upper()} {bits}-bit: estimated with memlint's 4-bit layout")
        if method == "full":
            notes.append(f"a {quant.upper()} base cannot be fully fine-tuned (transformers refuses training a purely "
                         "quantized model): estimated as LoRA on it")
        return "qlora", quant, False, int(group or 128), 4
    if get("quant_type").value == "hqq":
        # HqqConfig (transformers 4.x quantizes on load; LLaMA-Factory quantization_method: hqq; axolotl use_hqq)
        nbits = int(bits or 4)
        if method == "full":
            notes.append("an HQQ base cannot be fully fine-tuned: estimated as LoRA on it")
        return ("qlora" if nbits <= 4 else "lora"), "hqq", False, int(group or 64), nbits
    if bits == 4:
        quant = get("quant_type").value or "fp4"
        method = "qlora"  # a 4-bit base only trains through adapters
    elif bits == 8:
        quant = "int8"
        if method == "full":
            method = "lora"
            notes.append("8-bit base without LoRA cannot train; estimated as LoRA")
    if method == "qlora" and quant == "none":
        quant = "nf4"
        notes.append("qlora without a visible quantization config: assumed NF4")
    double_quant = bool(get("double_quant").value) if get("double_quant").known else False
    return method, quant, double_quant, int(group or 128), 4


def _load_dtype(get, spec, notes: list[str]) -> str:
    """The dtype the weights load in: the plan's, else transformers' default (the checkpoint's dtype from 5.0)."""
    dtype = dtype_name(str(_worst(get("torch_dtype"), "torch_dtype")))
    if dtype is None:
        dtype = "auto" if _transformers_major() >= 5 else "fp32"
        notes.append(f"torch_dtype not set: transformers {'>=5 loads the checkpoint dtype' if dtype == 'auto' else '<5 loads fp32'}")
    if dtype == "auto":
        dtype = dtype_name(spec.torch_dtype) or "fp32"
    return "fp32" if dtype == "auto" else dtype


def _precision(get, dtype: str, notes: list[str]) -> tuple[str, str]:
    """(dtype, precision mode) as the Trainer's bf16/fp16 flags meet the loaded dtype."""
    from memlint.estimate.setup import PURE

    precision = get("precision").value or "fp32"
    half = PURE.get(precision)
    if half is not None and dtype != half:
        # Lightning's / LitGPT's "bf16-true", torchtune's dtype: bf16 (or fp16), a DeepSpeed engine's half section:
        # the module's weights are converted to that dtype whatever they were created in
        notes.append(f"pure {half} training converts the {dtype} weights to {half}")
        dtype = half
    if precision == "fp32" and dtype != "fp32":
        # half weights trained without autocast: weights, gradients and optimizer states in that dtype
        precision = f"pure-{dtype}" if dtype in ("bf16", "fp16") else "amp-fp16"
    if precision == "amp-fp16" and dtype == "bf16":
        precision = "amp-bf16"
        notes.append("fp16=True on a bf16 model: estimated as bf16 autocast")
    if dtype == "fp16" and precision == "amp-bf16":
        dtype = "fp32"
        notes.append("bf16 autocast over an fp16 model: estimated with fp32 weights")
    return dtype, precision


def _targets(get, method: str, spec: Any, notes: list[str]) -> tuple[str, ...] | str:
    from memlint.estimate.model_state import lora_modules
    from memlint.library.defaults import lora_default_targets

    targets = get("lora_targets").value
    if method == "full":
        return "all-linear"
    if targets is None:
        default = lora_default_targets(spec.model_type)
        if default is None:
            notes.append(f"target_modules not set and peft has no default for model_type {spec.model_type!r} "
                         "(LoraConfig raises at get_peft_model): estimated with every linear layer adapted")
            return "all-linear"
        notes.append(f"target_modules not set: {default.why}")
        targets = default.value
    if isinstance(targets, (list, tuple)):
        targets = tuple(targets)
    if not lora_modules(spec, targets):
        notes.append(f"target_modules {targets!r} match no linear layer of {spec.id} (peft raises "
                     "'Target modules ... not found in the base model'): estimated with every linear layer adapted")
        return "all-linear"
    return targets


def assumed_model_note(spec: Any) -> str:
    """What an estimate sized on a catalogued checkpoint the model's name names says, every time: a folder that is
    not on this machine, or a Hub fine-tune of a catalogued base."""
    if spec.source == "size-name":
        from memlint.catalog.spec import size_candidates

        n = len(size_candidates(spec.assumed_from))
        among = f", the middle of the {n} catalogued checkpoints of that size" if n > 1 else ""
        return (f"model {spec.assumed_from!r} is not in the catalog: its name gives its size, and it is sized as "
                f"{spec.id} ({spec.params / 1e9:.2f}B parameters){among} (an assumption: the architecture is not "
                f"known; --online reads its config.json, --assume model_id= corrects it)")
    if spec.source == "hub-twin":
        return (f"model {spec.assumed_from!r} (a ModelScope id) is sized as {spec.id}, the Hugging Face id ms-swift's "
                f"registry gives the same weights")
    if spec.source == "named-variant":
        return (f"model {spec.assumed_from!r} is not in the catalog: sized as {spec.id}, its chat/instruct or base "
                f"sibling of the same organisation (an assumption: the two share their shapes; --online reads its "
                f"config.json, --assume model_id= corrects it)")
    if spec.source == "named-base":
        return (f"model {spec.assumed_from!r} is not in the catalog: sized as {spec.id}, the catalogued base its name "
                f"names (an assumption: a fine-tune keeps its base's shapes; --online reads its config.json, "
                f"--assume model_id= corrects it)")
    return (f"model {spec.assumed_from!r} is not on this machine: sized as {spec.id}, the catalogued checkpoint its "
            f"folder name names (an assumption: a local config.json or --assume model_id= confirms or corrects it)")


def _spec(v: Value, model_id: str, notes: list[str]) -> Any:
    """The model's spec: a script class's shape (the plan's model_id carries it), else resolve(id)."""
    from memlint.catalog import resolve

    if v.shape and v.source != "assumed":
        from memlint.catalog.local import spec_from_shape

        spec = spec_from_shape(dict(v.shape), model_id)
        notes.append(script_class_note(spec, dict(v.shape)))
        return spec
    return resolve(model_id)


def script_class_note(spec: Any, shape: Mapping[str, Any]) -> str:
    """What an estimate of a model class of the script's own checkout says, every time."""
    arch = {"gpt2": "GPT-2 (GPT2LMHeadModel)", "llama": "Llama (LlamaForCausalLM)"}.get(spec.model_type, spec.model_type)
    if shape.get("_built"):  # a transformers model class built from a config class the script writes
        return (f"the model is built from {shape['_built']}: transformers' {spec.model_type} with that class's defaults "
                f"and the script's keywords ({spec.params:,} parameters), randomly initialised")
    extra = ", without biases (bias=False)" if shape.get("bias") is False else ""
    return (f"the model is the script's own class {spec.id}: its shape is read from the script's code and counted "
            f"with Hugging Face {arch}'s accounting{extra} ({spec.params:,} parameters); the class's own layers may "
            "differ from HF's in details memlint does not see")


@dataclass(frozen=True)
class PlannedSetup:
    setup: Any | None          # Setup, or None when a required field is unknown
    missing: tuple[str, ...]   # fields to --assume before an estimate is possible
    notes: tuple[str, ...]


def setup_from_plan(plan: TrainingPlan, extra: Mapping[str, Any] | None = None) -> PlannedSetup:
    """The estimator's Setup for `plan`, library defaults read at the versions its checkout pins."""
    from memlint.library.versions import checkout_versions

    with checkout_versions(plan.versions):
        planned = _setup_from_plan(plan, extra)
    if plan.versions:
        from memlint.library.pins import describe_pins

        pinned = "; ".join(describe_pins(plan.versions))
        planned = replace(planned, notes=(f"library defaults read at the checkout's pinned versions: {pinned}",
                                          *planned.notes))
    return planned


def _setup_from_plan(plan: TrainingPlan, extra: Mapping[str, Any] | None = None) -> PlannedSetup:
    from memlint.estimate.setup import Setup, known_optim, optimizers

    extra = dict(extra or {})
    notes: list[str] = []
    missing: list[str] = []
    plan = checked(plan)
    get = plan.get

    model_id = _worst(get("model_id"), "model_id")
    if model_id is None:
        missing.append("model_id")
    seq = _worst(get("max_length"), "max_length")
    padding = get("padding").value
    if seq is None:
        missing.append("max_length")
    batch = _worst(get("per_device_batch"), "per_device_batch")
    if batch is None:
        missing.append("per_device_batch")
    if missing:
        return PlannedSetup(None, tuple(missing), tuple(notes))

    spec = _spec(get("model_id"), str(model_id), notes)
    if spec.assumed_from is not None:
        notes.append(assumed_model_note(spec))
    dtype = _load_dtype(get, spec, notes)
    method, quant, double_quant, group, qbits = _method(get, notes, spec)
    dtype, precision = _precision(get, dtype, notes)
    optim = known_optim(get("optimizer").value or _run_default("optim", notes, "optimizer"), notes)
    targets = _targets(get, method, spec, notes)
    recompute_v = get("gradient_checkpointing")
    recompute = _worst(recompute_v, "gradient_checkpointing") if recompute_v.known else _run_default("recompute", notes, "gradient checkpointing")
    attn = get("attn_implementation").value or _run_default("attn", notes, "attn_implementation")
    if attn not in attention():
        notes.append(f"attn_implementation {attn!r} is not in memlint's table: estimated as sdpa")
        attn = "sdpa"
    shard, gpus, nodes, offload = _distributed(get, extra, notes)
    parallel, shard, offload = _parallel_and_shard(get, spec, gpus, shard, offload, notes)
    dtype, precision = _zero_precision(get, dtype, precision, notes)
    if padding == "longest":
        notes.append(f"padding to the longest sample: worst case is a micro-batch whose longest sample is {seq}")
    fused_v = get("fused_loss")
    fused = bool(_worst(fused_v, "fused_loss")) if fused_v.known else False
    objective, ref_model = _objective(get, method, notes)
    if fused and objective != "sft":
        fused = False
        notes.append(f"fused_loss with {get('trainer').value}: the preference loss is estimated on full logits")
    kbit_prep = _kbit_prep(get, quant, notes)
    in_bwd = _optimizer_in_bwd(get)
    accum = int(_worst(get("grad_accum"), "grad_accum") or _run_default("grad_accum", notes, "gradient accumulation"))
    if in_bwd and accum > 1:
        notes.append(f"the optimizer steps in backward: each of the {accum} micro-batches steps on its own gradients "
                     "(nothing accumulates); estimated with gradient accumulation 1")
        accum = 1
    elif optimizers()[optim].get("every_micro_batch") and accum > 1:
        notes.append(f"{optim} updates the weights inside every backward: the {accum} micro-batches accumulate nothing; "
                     "estimated with gradient accumulation 1")
        accum = 1
    adapter_dtype = _adapter_dtype(get, method, dtype, precision, plan.kind, notes)
    f8 = _float8(get, method, quant, notes)
    setup = Setup(
        model=spec, method=method, lora_targets=targets,
        **({} if method == "full" else {"lora_r": int(get("lora_r").value or _run_default("lora_r", notes, "LoRA r"))}),
        lora_dropout=_dropout(get, method, notes), quant=quant, quant_group_size=group, quant_bits=qbits,
        double_quant=double_quant, dtype=dtype, precision=precision, optim=optim, batch=int(batch),
        seq=int(seq), grad_accum=accum, recompute=bool(recompute), attn=attn, optimizer_in_bwd=in_bwd,
        **_galore(get, optim, method, notes), recompute_every=_every(get, bool(recompute)),
        recompute_policy=_recompute_policy(get, bool(recompute), notes),
        gpus=gpus, shard=shard, nodes=nodes, offload=offload, fused_loss=fused, **parallel,
        objective=objective, ref_model=ref_model, **_trl_fields(get, objective), trainer_optimizer=_trainer_builds_optimizer(get),
        kbit_prep=kbit_prep, adapter_dtype=adapter_dtype, use_dora=_use_dora(get, method),
        modules_to_save=_modules_to_save(get, method, notes), peft_task_type=_task_type(get, method),
        offload_activations=_offload_activations(get), float8=f8,
        float8_all_gather=_float8_all_gather(get, f8, shard, notes), compiled_loss=_compiled_loss(get, fused), chunked_loss=0 if fused or objective != "sft" else _chunked(get),
        **_head(get, spec, notes), **_target(get, spec, int(seq), notes), **_vision(get, spec, method, notes),
    )
    setup = _model_code(setup, get, notes)
    return PlannedSetup(setup, (), tuple(notes))


def _vision(get, spec, method: str, notes: list[str]) -> dict[str, Any]:
    """A vision-language model's images and what of its tower trains (estimate/vision.py): the processor's
    min/max pixels and LLaMA-Factory's freeze flags from the plan; one image per sample at the largest size
    max_pixels allows, assumed (a dataset's images are not in the script); a full fine-tune without a freeze flag
    trains the whole model (transformers leaves every parameter trainable)."""
    if not spec.vision:
        return {}
    kw: dict[str, Any] = {"images": 1}
    if spec.vision.get("kind") in ("llava", "mllama"):  # the processor's output does not depend on the image's size
        notes.append(f"{spec.id}: one image per sample assumed (the dataset decides; `memlint estimate --images N` "
                     "for others)")
    else:
        notes.append(f"{spec.id}: one image per sample assumed, as large as the processor's max_pixels allows "
                     "(the dataset decides; `memlint estimate --images N --image-size HxW` for others)")
    for name in ("image_max_pixels", "image_min_pixels"):
        v = get(name)
        if v.known and isinstance(v.value, int):
            kw[name] = int(v.value)
    if method == "full":
        tv, tp = get("train_vision"), get("train_projector")
        if tv.known:
            kw["train_vision"] = bool(tv.value)
            if tp.known:
                kw["train_projector"] = bool(tp.value)
        else:
            kw["train_vision"] = True
            notes.append("full fine-tune of a vision-language model with no freeze setting read: the vision tower and "
                         "merger train too (a script's requires_grad_(False) on model.visual is not read)")
    return kw


def _zero_precision(get, dtype: str, precision: str, notes: list[str]) -> tuple[str, str]:
    """DeepSpeed's ZeRO optimizers keep fp32 partitions of the weights (master) and of the Adam moments whatever
    the 16-bit training dtype; the engine casts the module to it (also on one GPU: the engine is the same)."""
    from memlint.estimate.setup import PURE

    if get("distributed").value in ("zero1", "zero2", "zero3") and precision != "fp32" and not (
            precision in PURE and get("distributed").value == "zero3" and get("trainer").value == "custom-loop"):
        # (pure: a loop whose ZeRO-3 engine has no optimizer (DeepSpeedZeRoOffload partitions the half weights only)
        # and updates them itself keeps no fp32 master; stages 1 and 2 refuse an engine without an optimizer)
        notes.append("DeepSpeed ZeRO with bf16/fp16: 16-bit weights, fp32 master copy and fp32 optimizer states")
        return "bf16", "master-fp32"
    return dtype, precision


def _parallel_and_shard(get, spec, gpus: int, shard: str, offload: str, notes: list[str]) -> tuple[dict, str, str]:
    """Tensor/context parallelism, and the ZeRO/FSDP sharding left to the data-parallel ranks beside it."""
    parallel = _parallel(get, spec, gpus, notes)
    ddp = f"{gpus} GPUs without sharding (DDP): every rank holds the full model state"
    if parallel and ddp in notes:
        dp = gpus // (parallel["tp"] * parallel["cp"])
        notes[notes.index(ddp)] = (f"{dp} data-parallel ranks without sharding (DDP) over the tensor/context-parallel "
                                   "groups" if dp > 1 else f"{gpus} GPUs: one tensor/context-parallel group, no data parallelism")
    if parallel and shard != "none" and gpus // parallel["tp"] < 2:
        # FSDP / ZeRO shard over the data- and context-parallel ranks (Setup.shard_group)
        notes.append(f"{shard} over {gpus // parallel['tp']} data- and context-parallel rank(s) once tensor "
                     "parallelism takes its share: estimated unsharded")
        shard, offload = "none", "none"
    return parallel, shard, offload


def _target(get, spec, seq: int, notes: list[str]) -> dict[str, Any]:
    """An encoder-decoder's target length (plan target_len: text_target='s max_length, args.max_target_length);
    unknown: the estimate assumes the target as long as the source, and says so."""
    if not spec.arch.get("encoder_decoder"):
        return {}
    v = get("target_len")
    if v.known and isinstance(_worst(v, "target_len"), int) and _worst(v, "target_len") >= 1:
        return {"target_len": int(_worst(v, "target_len"))}
    notes.append(f"target length unknown: the estimate assumes the target as long as the source ({seq} tokens; "
                 "approximate: pass --assume target_len=N, or set max_length= on the labels' tokenizer call)")
    return {}


def _head(get, spec, notes: list[str]) -> dict[str, Any]:
    """The output head the script's model class loads (plan task_head) and its num_labels; an encoder's
    classification head without a known num_labels takes transformers' default (said)."""
    v = get("task_head")
    head = v.value if v.known and v.value in ("causal-lm", "sequence-classification", "token-classification",
                                              "masked-lm") else "auto"
    if not spec.arch.get("encoder"):
        return {}  # a decoder: its LM head (TRL's reward head is the objective's)
    out: dict[str, Any] = {"task_head": head}
    if head in ("auto", "sequence-classification", "token-classification"):
        n = get("num_labels")
        if n.known and isinstance(_worst(n, "num_labels"), int) and _worst(n, "num_labels") >= 1:
            out["num_labels"] = int(_worst(n, "num_labels"))
        else:
            out["num_labels"] = int(_run_default("num_labels", notes, "num_labels"))
    return out


def _parallel(get, spec, gpus: int, notes: list[str]) -> dict[str, Any]:
    """Tensor / sequence / context parallelism from the plan: tp_size ("world": every rank, as
    from_pretrained(tp_plan="auto") splits the model over the launcher's world size), sequence_parallel,
    cp_size and the stack whose TP plan it is. {} when none is set or it cannot apply."""
    from memlint.estimate import tensor_parallel as tpm
    from memlint.estimate.setup import Setup

    def count(name: str) -> int:
        v = get(name)
        if not v.known:
            return 1
        w = _worst(v, name)  # the fewest ranks splitting the model is the worst case (declared "min")
        return gpus if w == "world" else (_positive(w) or 1)

    tp, cp = count("tp_size"), count("cp_size")
    if tp == 1 and cp == 1:
        return {}
    stack = get("tp_stack").value if get("tp_stack").known and get("tp_stack").value in tpm.stacks() else "transformers"
    sp = bool(get("sequence_parallel").value) if get("sequence_parallel").known else False
    if tp == 1:
        sp = False
    if gpus % (tp * cp):
        notes.append(f"tensor × context parallel {tp} × {cp} does not divide {gpus} GPUs: estimated without them "
                     "(pass --gpus N or --assume gpus=N)")
        return {}
    if sp and tpm.facts()["stacks"][stack]["sequence_parallel"] == "never":
        sp = False
    out = dict(tp=tp, cp=cp, sequence_parallel=sp, tp_stack=stack)
    try:
        tpm.validate(Setup(spec, gpus=gpus, **out))
    except MemlintError as exc:
        notes.append(f"tensor/context parallelism not applied: {exc}")
        return {}
    return out


def _model_code(setup: Setup, get, notes: list[str]) -> Setup:
    """A plan from a LitGPT config (trainer "litgpt") runs LitGPT's own GPT: its accounting (estimate/litgpt.py,
    data/litgpt.json) where it covers the configuration, else transformers' modules, said in the notes."""
    trainer = get("trainer").value if get("trainer").known else None
    if trainer != "litgpt":
        return setup
    from memlint.library.versions import installed_version

    try:
        return setup.with_(model_code="litgpt", kbit_prep=False, litgpt_version=installed_version("litgpt"))
    except MemlintError as exc:
        notes.append(f"LitGPT's own model code is not accounted for in this configuration ({exc}); estimated with "
                     "transformers' modules and loss")
        return setup


def _dropout(get, method: str, notes: list[str]) -> float:
    """LoRA dropout: the plan's (a float, or the worst of its candidates), else the shared default.
    It matters because each adapter with dropout > 0 keeps its own dropped copy of its input."""
    v = get("lora_dropout")
    if method == "full":
        return 0.0
    if v.known and isinstance(_worst(v, "lora_dropout"), (int, float)):
        return float(_worst(v, "lora_dropout"))
    return float(_run_default("lora_dropout", notes, "lora_dropout"))


def _recompute_policy(get, recompute: bool, notes: list[str]) -> str:
    """What a checkpointed layer keeps: "full" (its input) or "op-sac" (torchtitan's op-level policy)."""
    v = get("recompute_policy")
    if not (recompute and v.known):
        return "full"
    if v.value == "op-sac" and get("recompute_every").known and isinstance(get("recompute_every").value, int) \
            and get("recompute_every").value > 1:
        notes.append("recompute_policy op-sac with recompute_every > 1: estimated as op-level SAC on every layer")
    from memlint.estimate.setup import RECOMPUTE_POLICIES

    if v.value == "op-sac" and _offload_activations(get):
        notes.append("op-level selective checkpointing with activation offloading is not modelled: estimated as full "
                     "recompute with offloading")
        return "full"
    return v.value if v.value in RECOMPUTE_POLICIES else "full"


def _every(get, recompute: bool) -> int:
    """Checkpoint every Nth layer (torchtune's selective checkpointing), 1 for every layer."""
    v = get("recompute_every")
    if get("recompute_policy").known and get("recompute_policy").value == "op-sac":
        return 1
    return int(v.value) if recompute and v.known and isinstance(v.value, int) and v.value > 1 else 1


def _galore(get, optim: str, method: str, notes: list[str]) -> dict[str, Any]:
    """GaLore's rank and target modules from the plan (TrainingArguments' optim_args and
    optim_target_modules), for a galore_* optimizer; the shared defaults where the plan has none."""
    from memlint.estimate.setup import optimizers

    if not optimizers()[optim].get("galore") or method != "full":
        return {}
    kw: dict[str, Any] = {}
    rank, targets = get("galore_rank"), get("galore_targets")
    kw["galore_rank"] = int(rank.value) if rank.known and isinstance(rank.value, int) else _run_default("galore_rank", notes, "GaLore rank")
    if targets.known and isinstance(targets.value, (str, list, tuple)):
        kw["galore_targets"] = targets.value if isinstance(targets.value, str) else tuple(targets.value)
    else:
        _run_default("galore_targets", notes, "optim_target_modules")  # said; the Setup's default is the same
    return kw


def _run_default(name: str, notes: list[str], what: str) -> Any:
    """The shared default (data/library_defaults.json run_defaults) for a choice the plan leaves
    unknown, said in `notes`."""
    from memlint.library.defaults import run_default

    d = run_default(name)
    notes.append(f"{what} not known: {d.value} ({d.why})")
    return d.value


def _adapter_dtype(get, method: str, dtype: str, precision: str, kind: str, notes: list[str]) -> str | None:
    """The adapters' dtype: the script's (a cast after get_peft_model, autocast_adapter_dtype=False),
    else peft's default where it differs from the precision's: fp32 adapters on a half base that
    trains without autocast (a plain bf16 loop or Trainer without bf16=True). None: the precision's."""
    from memlint.estimate.setup import PURE

    if method == "full":
        return None
    v = get("adapter_dtype")
    if v.known and v.value in ("fp32", "bf16", "fp16"):
        return v.value
    if precision in PURE and dtype in ("bf16", "fp16") and kind in ("python", "notebook"):
        notes.append("peft's autocast_adapter_dtype=True keeps the adapters in fp32 on the half-precision base "
                     "without autocast: each adapter keeps an fp32 copy of its input")
        return "fp32"
    return None


def _kbit_prep(get, quant: str, notes: list[str]) -> bool:
    """Does the run upcast a quantized base's other weights to fp32? The script's own
    prepare_model_for_kbit_training call says yes; else its trainer, at the installed version."""
    v = get("kbit_prep")
    if v.known:
        return bool(v.value)
    # the trainer's behaviour even on an unquantized plan: a QLoRA lever applied to it upcasts as the run would
    calls, why = kbit_prep_of(trainer_step(get))
    if quant != "none":
        notes.append(why)
    return calls


def _optimizer_in_bwd(get) -> bool:
    """The optimizer step fused into backward (torchtune's optimizer_in_bwd, a stepping
    post-accumulate-grad hook). Unknown: the usual step after backward (it holds more)."""
    v = get("optimizer_in_bwd")
    if not v.known or not v.value:
        return False
    if v.candidates and False in v.candidates:
        return False  # a path without it holds every gradient: the worst case
    return True


def _modules_to_save(get, method: str, notes: list[str]) -> tuple[str, ...]:
    """peft's modules_to_save: the names the plan gives (each a trained full copy of that module); an
    unknown value is counted as none, and said."""
    v = get("lora_modules_to_save")
    if method == "full" or v.value is None and v.known:
        return ()
    if not v.known or not isinstance(v.value, (list, tuple)):
        notes.append("lora_modules_to_save is unknown: no trained module copies counted")
        return ()
    from memlint.estimate.model_state import _saved_kind

    names = tuple(str(x) for x in v.value)
    other = [n for n in names if _saved_kind(n) is None]
    if other:
        notes.append(f"modules_to_save {', '.join(other)}: not sized by memlint (only the input embeddings and "
                     "lm_head are); their trained copies are not counted")
    return names


def _task_type(get, method: str) -> str | None:
    """peft's task_type the LoraConfig sets (None: a plain PeftModel); "auto" when the plan cannot say."""
    v = get("lora_task_type")
    if method == "full" or not v.known or v.candidates:
        return "auto"
    return None if v.value is None else str(v.value).upper()


def _use_dora(get, method: str) -> bool:
    """DoRA (LoraConfig(use_dora=True)) on an adapter; a path with it is the worst case."""
    v = get("use_dora")
    return method != "full" and v.known and any(c is True for c in (v.candidates or (v.value,)))


def _chunked(get) -> int:
    """torchtune's CEWithChunkedOutputLoss chunks; a path without it (the full logits) is the worst case."""
    v = get("chunked_loss")
    cands = v.candidates or (v.value,)
    if not v.known or any(not isinstance(c, int) or isinstance(c, bool) or c < 1 for c in cands):
        return 0
    return int(min(cands))


def _compiled_loss(get, fused: bool) -> bool:
    """compiled_loss: the cross-entropy under torch.compile (a fused loss has no logits to compile over)."""
    v = get("compiled_loss")
    return bool(v.value) if v.known and not fused else False


def _float8_all_gather(get, float8: str, shard: str, notes: list[str]) -> bool:
    """float8_all_gather: FSDP2's float8 all-gather, where float8 training runs under FSDP (else said and off)."""
    v = get("float8_all_gather")
    if not (v.known and True in (v.candidates or (v.value,))):
        return False
    if float8 == "none" or not shard.startswith("fsdp"):
        notes.append("enable_fsdp_float8_all_gather without float8 training under FSDP changes nothing: not counted")
        return False
    return True


def _float8(get, method: str, quant: str, notes: list[str]) -> str:
    """float8_training: torchao Float8Linear on the decoder's linears ("layers") or every linear ("all"); the worst
    case of branches that disagree is the more converted (their saved activations are the same, the casts add)."""
    v = get("float8_training")
    cands = [c for c in (v.candidates or (v.value,)) if c in ("all", "layers")] if v.known else []
    if not cands:
        return "none"
    if method != "full" or quant != "none":
        notes.append("float8 training on adapters or a quantized base is not modelled: estimated without it")
        return "none"
    return "all" if "all" in cands else "layers"


def _offload_activations(get) -> bool:
    """Saved activations offloaded to CPU (TRL / axolotl activation_offloading, torchtune
    enable_activation_offloading, unsloth's offloaded checkpointing); a path without it is the worst case."""
    v = get("offload_activations")
    return v.known and all(c is True for c in (v.candidates or (v.value,)))
