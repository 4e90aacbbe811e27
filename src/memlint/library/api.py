"""Library API facts (data/library_api.json): trainer and argument classes, collators, optimizer
classes and attention implementations, for extract/, fix/ and estimate/ alike."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from memlint import data


def _doc() -> dict:
    return data.load("library_api.json")


@dataclass(frozen=True)
class TrainerFacts:
    """One trainer class: what it builds, batches and optimises."""

    name: str
    arguments: str                  # the argument class it builds when given none
    positional: tuple[str, ...]     # its positional parameters
    data: str                       # collator | sft | preference | generation
    objective: str = "sft"          # data/preference.json's objective
    reference: bool = False         # runs a reference model (DPO, KTO)
    versions: str | None = None     # the versions of its package whose signature this is (None: every version)
    aliases: tuple[tuple[str, str], ...] = ()  # (another version's keyword, the parameter it names)
    not_modelled: str | None = None  # why its step has no estimate
    api_keywords: tuple[str, ...] = ()  # a call in the described API passes one of these


@data.derived
def training_arguments() -> Mapping[str, str]:
    """Argument class name as called -> the library class of its defaults."""
    return dict(_doc()["training_arguments"])


@data.derived
def trainers() -> Mapping[str, TrainerFacts]:
    doc = _doc()
    default_positional = tuple(doc["trainer_positional"])
    return {
        name: TrainerFacts(name, e["arguments"], tuple(e.get("positional", default_positional)), e["data"],
                           e.get("objective", "sft"), bool(e.get("reference", False)), e.get("versions"),
                           tuple(e.get("aliases", {}).items()), e.get("not_modelled"), tuple(e.get("api_keywords", ())))
        for name, e in doc["trainers"].items()
    }


def trainer(name: str) -> TrainerFacts | None:
    return trainers().get(name)


def checkout_objective(cls_name: str, base: str) -> str | None:
    """The reference-free preference objective (simpo, orpo, cpo) a trainer class of the script's own
    checkout runs, read by its name (data/preference.json checkout_trainers); None: read as `base`."""
    import re

    rules = data.load("preference.json")["checkout_trainers"]
    if base.rsplit(".", 1)[-1] not in rules["bases"]:
        return None
    return next((r["objective"] for r in rules["names"] if re.search(r["match"], cls_name)), None)


def objective_name(objective: str) -> str:
    """How the words name an objective: SimPO, ORPO, CPO, DPO."""
    return {"simpo": "SimPO"}.get(objective, objective.upper())


def trl_trainer(objective: str) -> str | None:
    """The TRL trainer class that trains `objective` (sft: SFTTrainer), the first listed."""
    return next((t.name for t in trainers().values() if t.objective == objective and t.arguments.startswith("trl.")), None)


@data.derived
def peft_configs() -> frozenset[str]:
    return frozenset(_doc()["peft_configs"])


@data.derived
def collators() -> Mapping[str, str]:
    """Collator class -> "default" (its padding= default applies) or "longest"."""
    return {name: e["padding"] for name, e in _doc()["collators"].items()}


def galore_optimizer(name: str) -> bool:
    """Is `name` one of the Trainer's GaLore optims (data/optimizers.json "galore")?"""
    return bool(data.load("optimizers.json")["optimizers"].get(name, {}).get("galore"))


def layerwise_optimizer(name: str) -> str | None:
    """The optim name of `name` stepped one parameter at a time by post-accumulate-grad hooks (GaLore's
    `galore_adamw_8bit` -> `galore_adamw_8bit_layerwise`), when data/optimizers.json has it; else None."""
    row = data.load("optimizers.json")["optimizers"].get(f"{name}_layerwise")
    return f"{name}_layerwise" if row and row.get("in_backward") else None


@data.derived
def target_length_arguments() -> frozenset[str]:
    """Names of a script's own target-length argument (args.max_target_length): an encoder-decoder's labels cap."""
    return frozenset(_doc()["target_length_arguments"]["names"])


@data.derived
def part_length_words() -> frozenset[str]:
    """Words that name a part of a sequence in a length's name (max_prompt_length): data/library_api.json."""
    return frozenset(_doc()["part_length_words"]["words"])


@data.derived
def length_arguments() -> frozenset[str]:
    """Names of a script's own sequence-length argument (args.max_seq_length, cfg.cutoff_len)."""
    return frozenset(_doc()["length_arguments"]["names"])


@data.derived
def dataclass_field_helpers() -> frozenset[str]:
    """Calls that declare a dataclass field with default= / default_factory= (dataclasses.field and its wrappers)."""
    return frozenset(_doc()["dataclass_field_helpers"]["names"])


@data.derived
def bnb_config_without_flags() -> tuple[str, int, str]:
    """(transformers versions, bits, why) of a BitsAndBytesConfig with neither load_in flag that still quantizes."""
    d = _doc()["bnb_config_without_flags"]
    return d["versions"], d["bits"], d["_doc"]


@data.derived
def positional_field_helpers() -> frozenset[str]:
    """Field helpers whose first positional argument is the default (pydantic's Field)."""
    return frozenset(_doc()["dataclass_field_helpers"]["positional"])


@data.derived
def validated_model_bases() -> frozenset[str]:
    """Library bases of keyword-field models that build nested models from dicts (pydantic)."""
    return frozenset(_doc()["validated_models"]["bases"])


@data.derived
def dict_constructors() -> frozenset[str]:
    """Classmethods of those models that build an instance from one dict (model_validate, parse_obj)."""
    return frozenset(_doc()["validated_models"]["constructors"])


@data.derived
def training_imports() -> frozenset[str]:
    """Packages a fine-tuning run cannot start without (a guarded import of one took the import, not its fallback)."""
    return frozenset(_doc()["training_imports"]["names"])


@data.derived
def batch_size_names() -> frozenset[str]:
    """Names scripts give a batch size (a count of samples, never a length in tokens)."""
    return frozenset(_doc()["batch_size_names"]["names"])


def unsloth_mixed_precision() -> str | None:
    """Why a TRL trainer over an unsloth model with neither fp16 nor bf16 set takes its mixed precision from the
    model's dtype at the unsloth version read (data/library_api.json unsloth_mixed_precision), or None."""
    entry = _doc()["unsloth_mixed_precision"]
    applies, at = _version_read(entry, "versions")
    return f"unsloth at {at}: {entry['ref']}" if applies else None


@data.derived
def accumulation_names() -> frozenset[str]:
    """Names scripts give the number of micro-batches an optimizer step accumulates (gradient_accumulation_steps)."""
    return frozenset(_doc()["accumulation_names"]["names"])


@data.derived
def reporting_words() -> frozenset[str]:
    """First words that name a reporting helper (plot_losses, print_batch): its padding is not a batch's."""
    return frozenset(_doc()["reporting_words"]["names"])


def trainer_length_keyword(trainer: str, keyword: str) -> tuple[str, str, str, str] | None:
    """(config field, package, versions that accept it, ref) of a length keyword `trainer` took itself
    (data/library_api.json trainer_length_keywords), or None."""
    entry = _doc()["trainer_length_keywords"].get(trainer)
    if not isinstance(entry, dict) or keyword not in entry["keywords"]:
        return None
    return entry["keywords"][keyword], entry["package"], entry["versions"], entry["ref"]


@data.derived
def prompt_learning_configs() -> Mapping[str, str]:
    """peft's prompt-learning config classes -> the plan's method (library_api.json prompt_learning_configs)."""
    return {k: v for k, v in _doc()["prompt_learning_configs"].items() if not k.startswith("_")}


@data.derived
def config_shape_keywords() -> tuple[str, ...]:
    """Config keywords besides the shape keys that change a model's parameter count (library_api.json)."""
    return tuple(_doc()["config_classes"]["_shape_keywords"])


@data.derived
def config_classes() -> Mapping[str, Any]:
    """transformers config classes by name -> {model_type, defaults, aliases} (library_api.json config_classes)."""
    return {k: v for k, v in _doc()["config_classes"].items() if not k.startswith("_")}


@data.derived
def checkout_lora() -> Mapping[str, Any]:
    """LoRA helpers written in training checkouts (DeepSpeed-Chat's convert_linear_layer_to_lora), by function name."""
    return _doc()["checkout_lora"]["functions"]


@data.derived
def checkout_lora_freeze() -> frozenset[str]:
    return frozenset(_doc()["checkout_lora"]["freeze"])


@data.derived
def task_head(model_class: str) -> str | None:
    """The output head a model class loads (data/library_api.json "task_heads", by the end of its name)."""
    heads = {k: v for k, v in _doc()["task_heads"].items() if not k.startswith("_")}
    return next((v for k, v in heads.items() if model_class.endswith(k)), None)


@data.derived
def unsloth_loaders() -> frozenset[str]:
    return frozenset(_doc()["unsloth_loaders"])


@data.derived
def _optimizer_classes() -> Mapping[tuple[str, str], str]:
    return {(e["module"], e["class"]): e["optim"] for e in _doc()["optimizer_classes"]}


def optimizer_class(module: str, cls: str) -> str | None:
    """The Trainer optim name of optimizer class `cls` from `module` (torch, bnb, transformers)."""
    return _optimizer_classes().get((module, cls))


@dataclass(frozen=True)
class AttentionFacts:
    name: str
    kernel: str          # eager (saves the s x s scores) | flash (output and logsumexp)
    trace_as: str        # what the CPU trace runs in its place
    note: str | None = None


@data.derived
def attention() -> Mapping[str, AttentionFacts]:
    """attn_implementation values, worst case (most memory) first."""
    return {name: AttentionFacts(name, e["kernel"], e["trace_as"], e.get("note"))
            for name, e in _doc()["attention"].items()}


def attention_name(text: str) -> str | None:
    """An attention implementation as written anywhere (a config's `flash`, `fa2`) -> its name."""
    key = str(text).strip().lower()
    if key in attention():
        return key
    if "/" in key:  # a Hub kernel repository ("kernels-community/flash-attn3"): the attention its name says
        repo = key.split(":", 1)[0].rsplit("/", 1)[-1]
        return next((e["attention"] for e in _doc()["attention_hub_kernels"]["entries"] if re.search(e["pattern"], repo)),
                    None)
    return _doc()["attention_aliases"].get(key)


@data.derived
def bool_fields() -> frozenset[str]:
    """TrainingArguments' bool fields: `--bf16` alone means True, `--no_x` False (HfArgumentParser)."""
    return frozenset(_doc()["training_arguments_bool_fields"])


def deepspeed_optimizer(kind: str) -> str | None:
    """A DeepSpeed config's optimizer.type -> the optim name memlint estimates."""
    return _doc()["deepspeed_optimizers"].get(str(kind).lower())


def bnb_linear(name: str) -> Mapping[str, Any] | None:
    """bitsandbytes' quantized linear class `name` (Linear4bit, LinearNF4, Linear8bitLt): bits and constructor
    defaults (data/library_api.json bnb_linears), with the citation under "ref"; None for any other name."""
    table = _doc()["bnb_linears"]
    entry = table["classes"].get(name)
    return None if entry is None else {**entry, "ref": table["ref"]}


def trainer_by_arguments(base: str, declares) -> tuple[str, str] | None:
    """(the trainer, why) a subclass of `base` runs as, read from what its training arguments declare
    (`declares(field)` says whether they carry a field): data/library_api.json trainer_by_arguments."""
    for name, e in _doc()["trainer_by_arguments"].items():
        if name.startswith("_") or base.rsplit(".", 1)[-1] not in e["bases"]:
            continue
        if declares(e["declares"]):
            return name, f"its training arguments carry {e['declares']} ({e['ref']}): read as {name}'s step"
    return None


def _version_read(entry: Mapping[str, Any], key: str) -> tuple[bool, str]:
    """Whether the version memlint reads entry["package"] at (the checkout's pin, else the installed one; neither:
    the newest, where only a range's lower bounds hold) is in entry[key], and how that version is named."""
    from memlint.library.versions import in_range, installed_version, shown_version

    version = installed_version(entry["package"])
    at = shown_version(entry["package"]) if version else f"the newest {entry['package']}"
    return in_range(version, entry[key]), at


def prompt_batches(trainer: str) -> Mapping[str, Any] | None:
    """The rule (data/library_api.json prompt_batches) under which `trainer`'s per_device_train_batch_size counts
    prompts, each sampled `times` times into the micro-batch, when the version read is in its range; else None."""
    entry = _doc()["prompt_batches"]["trainers"].get(trainer.rsplit(".", 1)[-1])
    return entry if entry is not None and _version_read(entry, "versions")[0] else None


def run_time_rewrites(trainer: str, loader: str) -> list[Mapping[str, Any]]:
    """The argument rewrites (data/library_api.json run_time_rewrites) a run of `trainer` over a model from
    `loader` gets when it starts (unsloth's GRPO batch: per_device_train_batch_size <- num_generations)."""
    table = _doc()["run_time_rewrites"]
    name = trainer.rsplit(".", 1)[-1]
    counts_prompts = prompt_batches(name) is not None  # TRL 0.14's GRPO: a batch of prompts, no multiple required
    return [e for k, e in table.items() if not k.startswith("_") and e["trainer"] == name and e["loader"] == loader
            and not (e.get("not_with") == "prompt_batches" and counts_prompts)]


def deepspeed_cpu_optimizer(optim: str, via: str) -> tuple[str, str] | None:
    """(the optim name, why) a client optimizer `optim` becomes when accelerate prepares it under a DeepSpeed
    config that offloads the optimizer (data/library_api.json deepspeed_cpu_optimizer); `via` is "trainer"
    (the HF Trainer, which prepares through accelerate from transformers 4.30) or "accelerate" (a loop's
    accelerator.prepare). None when nothing is swapped at the versions read."""
    from memlint.library.versions import in_range, installed_version, shown_version

    entry = _doc()["deepspeed_cpu_optimizer"]
    steps = [entry["accelerate"]] + ([entry["trainer"]] if via == "trainer" else [])
    if not all(in_range(installed_version(s["package"]), s["versions"]) for s in steps):
        return None
    keeps = entry["keeps"]
    if optim in keeps["optims"] and in_range(installed_version(keeps["package"]), keeps["versions"]):
        return None
    if optim == entry["becomes"]:
        return None
    at = "; ".join(f"{shown_version(s['package'])}: {s['ref']}" for s in reversed(steps))
    return entry["becomes"], (f"accelerate swaps the client optimizer ({optim}) for DeepSpeedCPUAdam because the DeepSpeed "
                              f"config offloads the optimizer ({at})")


def lightning_precision(text: str) -> str | None:
    return _doc()["lightning_precision"].get(str(text).strip().lower())


def lightning_strategy(text: str) -> str | None:
    return _doc()["lightning_strategies"].get(str(text).strip().lower())


def kbit_prep(trainer: str | None) -> tuple[bool, str]:
    """Whether `trainer` (a class name as the plan names it, or None for a plain loop) calls
    peft.prepare_model_for_kbit_training on a quantized model at the installed version of its
    package (not installed: the newest behaviour), and why, for the estimate's assumptions."""
    name = (trainer or "").rsplit(".", 1)[-1]
    entry = _doc()["kbit_prep"]["trainers"].get(name)
    if entry is None:
        return False, (f"{name or 'the training loop'} does not call prepare_model_for_kbit_training: "
                       "the non-quantized weights stay in their load dtype")
    calls, at = _version_read(entry, "calls")
    return calls, (f"{name} {'calls' if calls else 'no longer calls'} prepare_model_for_kbit_training at {at} "
                   f"({'embeddings, norms and lm_head upcast to fp32' if calls else 'no fp32 upcast'}; {entry['ref']})")


def hook_optimizer(hook: str) -> str | None:
    """The optim name of a checkout optimizer class that updates the weights in the parameter hook `hook` it
    registers and keeps no state (data/library_api.json hook_optimizers)."""
    v = _doc()["hook_optimizers"].get(hook)
    return v if isinstance(v, str) and not hook.startswith("_") else None


def config_checkpointing() -> str | None:
    """Why a transformers model whose config says gradient_checkpointing=True checkpoints, at the version read
    (data/library_api.json config_checkpointing); None where that version ignores the attribute."""
    entry = _doc()["config_checkpointing"]
    applies, at = _version_read(entry, "versions")
    if not applies:
        return None
    return (f"a config with gradient_checkpointing=True: {at} turns "
            f"checkpointing on as the model is built ({entry['ref']})")


def kbit_prep_checkpointing(trainer: str | None) -> str | None:
    """Why `trainer` turns gradient checkpointing on for a 4/8-bit model it wraps in a peft_config, at the version
    read (data/library_api.json kbit_prep.checkpointing: TRL before 0.7.2 calls prepare_model_for_int8_training
    with peft's default use_gradient_checkpointing=True); None when it follows the training arguments."""
    name = (trainer or "").rsplit(".", 1)[-1]
    entry = _doc()["kbit_prep"]["checkpointing"]["trainers"].get(name)
    applies, at = _version_read(entry, "versions") if entry is not None else (False, "")
    if not applies:
        return None
    return (f"{name} at {at} prepares the 4/8-bit model with peft's "
            f"prepare_model_for_int8_training, whose use_gradient_checkpointing defaults to True ({entry['ref']})")


def pretokenized_as_is(trainer: str | None) -> tuple[bool, str] | None:
    """Whether `trainer` takes a dataset the script already tokenized as it is (no truncation, no packing) at the
    installed version of its package (not installed: the newest behaviour), and why; None for a trainer that
    data/library_api.json pretokenized does not list."""
    name = (trainer or "").rsplit(".", 1)[-1]
    entry = _doc()["pretokenized"]["trainers"].get(name)
    if entry is None:
        return None
    as_is, at = _version_read(entry, "as_is")
    does = "takes a pre-tokenized dataset as it is: no truncation" if as_is else "truncates or packs a pre-tokenized dataset too"
    return as_is, f"{name} at {at} {does} ({entry['ref']})"


def skips_preparation(trainer: str | None) -> str | None:
    """Why `trainer` given dataset_kwargs={'skip_prepare_dataset': True} leaves the dataset to the script's collator
    at the version read (data/library_api.json pretokenized.skip_prepare); None when it has no such switch there."""
    name = (trainer or "").rsplit(".", 1)[-1]
    entry = _doc()["pretokenized"]["skip_prepare"].get(name)
    applies, at = _version_read(entry, "versions") if entry is not None else (False, "")
    if not applies:
        return None
    return f"{name} at {at} does not prepare a dataset given skip_prepare_dataset ({entry['ref']})"


def quantize_on_load(method: str) -> tuple[bool, str]:
    """Whether the installed transformers quantizes a `method` config (hqq) in from_pretrained, and why."""
    entry = _doc()["quantize_on_load"][method]
    works, at = _version_read(entry, "works")
    return works, f"{at} {'quantizes' if works else 'does not quantize'} it on load ({entry['works']} does; {entry['ref']})"


@data.derived
def dict_wrappers() -> frozenset[str]:
    """Classes and functions that wrap a dict for attribute access (EasyDict, Box, munchify): the same keys."""
    return frozenset(_doc().get("dict_wrappers", {}).get("names", ()))


def foreign_packages() -> frozenset[str]:
    """Packages whose classes merely share a name with the Hugging Face ones (composer.Trainer)."""
    return frozenset(_doc()["foreign_packages"]["names"])


def modelled_packages() -> frozenset[str]:
    """Top-level packages memlint models as libraries: their source is never walked as a script's own code."""
    return frozenset(_doc()["modelled_packages"])


def _config_field_versions(table: str, cls: str, attr: str) -> tuple[str, str, str] | None:
    entry = _doc()[table].get(cls)
    if not isinstance(entry, dict) or attr not in entry["fields"]:
        return None
    f = entry["fields"][attr]
    return entry["package"], f["versions"], f["ref"]


def removed_config_field(cls: str, attr: str) -> tuple[str, str, str] | None:
    """(package, versions without it, ref) of a field config class `cls` lost (data/library_api.json
    removed_config_fields), or None."""
    return _config_field_versions("removed_config_fields", cls, attr)


def added_config_field(cls: str, attr: str) -> tuple[str, str, str] | None:
    """(package, versions with it, ref) of a field config class `cls` gained in a later version (data/library_api.json
    added_config_fields), or None."""
    return _config_field_versions("added_config_fields", cls, attr)


def signature_keywords(qual: str) -> tuple[str, Mapping[str, str | None], str] | None:
    """(package, keyword -> the version range that has it, ref) of a library callable whose keyword
    parameters memlint knows (data/library_api.json signature_keywords), or None."""
    entry = _doc()["signature_keywords"]["callables"].get(qual)
    return (entry["package"], entry["keywords"], entry.get("ref", "")) if entry else None
