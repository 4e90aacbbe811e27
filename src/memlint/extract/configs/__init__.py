"""Framework config files (YAML/JSON) read into a TrainingPlan, never executed.

Formats are told apart by their keys (and, for a file that does not parse, by its name):
axolotl, LLaMA-Factory, TRL recipes, torchtune, LitGPT, llm-foundry (Composer), oumi,
LLM-Finetuning-Toolkit (llmtune), torchtitan job TOML, NVIDIA NeMo 1.x / NeMo-Megatron YAML, DeepSpeed JSON and accelerate config YAML. (xtuner's configs
are Python: extract/xtuner.py reads them.)
`merge_launch_config` lays a DeepSpeed or accelerate config over a script's plan.
"""

from __future__ import annotations

import re
from typing import Any
from pathlib import Path

from memlint.errors import MemlintError
from memlint.plan import TrainingPlan

__all__ = ["CONFIG_SUFFIXES", "FORMATS", "detect", "detect_file", "read_config", "merge_launch_config"]

CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")
FORMATS = ("axolotl", "llama-factory", "trl-recipe", "torchtune", "litgpt", "llm-foundry", "oumi", "llmtune", "torchtitan", "h2o-llmstudio", "nemo",
           "deepspeed", "accelerate")
_LAUNCHERS = ("deepspeed", "accelerate")

_AXOLOTL = {"adapter", "micro_batch_size", "sequence_len", "sample_packing", "lora_target_linear", "num_epochs",
            "pad_to_sequence_len", "flash_attention", "val_set_size", "load_in_4bit", "load_in_8bit", "datasets"}
_LLAMA_FACTORY = {"finetuning_type", "stage", "cutoff_len", "lora_target", "quantization_bit", "template", "lora_rank"}
_TRL = {"per_device_train_batch_size", "use_peft", "max_seq_length", "max_length", "gradient_accumulation_steps",
        "learning_rate", "lora_r", "load_in_4bit", "dataset_mixture", "dataset_name", "bf16", "num_train_epochs"}
_DEEPSPEED = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"}
_ACCELERATE = {"distributed_type", "compute_environment"}
_LITGPT = {"lora_r", "lora_alpha", "lora_dropout", "lora_query", "lora_key", "lora_value", "lora_projection", "lora_mlp", "lora_head",
           "quantize", "logger_name", "num_nodes", "train.micro_batch_size", "train.global_batch_size"}
_FOUNDRY = {"max_duration", "global_train_batch_size", "device_train_microbatch_size", "device_train_batch_size"}
_LLMTUNE = {"ablation", "qa", "inference", "save_dir"}
# torchtitan's JobConfig sections beside [model] flavor (a job TOML names its model by name + flavor)
_TORCHTITAN = {"job", "parallelism", "activation_checkpoint", "lr_scheduler", "float8", "quantize", "compile", "checkpoint"}
_OUMI = {"training.trainer_type", "training.use_peft", "training.enable_gradient_checkpointing", "training.mixed_precision_dtype",
         "model.torch_dtype_str", "model.model_max_length", "peft.q_lora", "fsdp.enable_fsdp"}
# the same "section.key" markers for a file not yet parsed (a walk's prefilter sees only the text)
_LITGPT_TEXT = re.compile(r"^[ \t]+(?:micro|global)_batch_size[ \t]*:", re.M)
_OUMI_TEXT = re.compile(r"^[ \t]+(?:trainer_type|use_peft|enable_gradient_checkpointing|torch_dtype_str|model_max_length)[ \t]*:", re.M)
_OUMI_MODEL = re.compile(r"^[ \t]+model_name[ \t]*:", re.M)
# NeMo 1.x / NeMo-Megatron: Lightning's `trainer:` beside a MegatronGPTModel `model:` with its parallel sizes or batches
_NEMO = {"model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.megatron_amp_O2"}
_NEMO_TEXT = re.compile(r"^[ \t]+(?:tensor_model_parallel_size|pipeline_model_parallel_size|megatron_amp_O2)[ \t]*:", re.M)


def _torchtitan_sections(top_keys: tuple[str, ...]) -> bool:
    """A TOML file's tables look like a torchtitan job file's (also when it does not parse)."""
    keys = set(top_keys)
    return {"model", "training"} <= keys and bool(keys & _TORCHTITAN)


def detect(top_keys: tuple[str, ...] | set[str], name: str = "", text: str = "") -> str | None:
    """The format of a config from its top-level keys; the file name breaks ties for broken files."""
    keys = set(top_keys)
    if keys & _ACCELERATE:
        return "accelerate"
    if keys & _DEEPSPEED:
        return "deepspeed"
    if "_component_:" in text or "_component_" in keys:
        return "torchtune"
    if "base_model" in keys and keys & _AXOLOTL:
        return "axolotl"
    if "model_name_or_path" in keys:
        if keys & _LLAMA_FACTORY:
            return "llama-factory"
        if keys & _TRL:
            return "trl-recipe"
    if ("checkpoint_dir" in keys or ("model_name" in keys and keys & {"initial_checkpoint_dir", "tokenizer_dir"})) and (
            keys & _LITGPT or _LITGPT_TEXT.search(text)):
        return "litgpt"
    if "llm_backbone" in keys and keys & {"architecture", "training", "tokenizer", "problem_type"}:
        return "h2o-llmstudio"  # H2O LLM Studio's experiment cfg.yaml
    if "train_loader" in keys and keys & _FOUNDRY:
        return "llm-foundry"
    if "model.flavor" in keys and "training" in keys and keys & _TORCHTITAN:
        return "torchtitan"
    if {"trainer", "model"} <= keys and (keys & _NEMO or {"model.micro_batch_size", "model.global_batch_size"} <= keys
                                         or _NEMO_TEXT.search(text)):
        return "nemo"
    if "model.hf_model_ckpt" in keys or ({"model", "lora", "training"} <= keys and keys & _LLMTUNE):
        return "llmtune"
    if {"model", "training"} <= keys and (("model.model_name" in keys and keys & _OUMI)
                                          or (_OUMI_MODEL.search(text) and _OUMI_TEXT.search(text))):
        return "oumi"
    lower = name.lower()
    if lower.endswith(".json") and any(w in lower for w in ("deepspeed", "ds_config", "zero")):
        return "deepspeed"
    if "accelerate" in lower and not lower.endswith(".json"):
        return "accelerate"
    return None


def _read_text(path: Path, shown: str) -> str:
    from memlint.files import Refused, read_text

    try:
        return read_text(path, encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise MemlintError(f"{shown}: not UTF-8 text") from None
    except Refused as exc:
        raise MemlintError(f"{shown}: {exc.why}") from None
    except OSError as exc:
        raise MemlintError(f"{shown}: cannot read ({exc.strerror or exc.__class__.__name__})") from None


def _load(path: Path, shown: str, text: str | None = None):
    from memlint.extract.configs.document import load_text

    from memlint.files import max_file_size

    if text is None:
        text = _read_text(path, shown)
    elif len(text) > max_file_size():
        raise MemlintError(f"{shown}: not read: over the max-file-size of {max_file_size():,} bytes")
    if path.suffix.lower() == ".toml":
        from memlint.extract.configs.document import load_toml

        doc = load_toml(text, shown)
        if not doc.ok and _torchtitan_sections(doc.top_keys):  # a broken job file: its syntax error is a finding
            return doc, "torchtitan"
    else:
        doc = load_text(text, shown, is_json=path.suffix.lower() == ".json")
    keys = set(doc.top_keys)
    if doc.ok:  # "section.key" markers (model.model_name, model.hf_model_ckpt) and torchtune's nested _component_
        for k, v in doc.data.items():
            if isinstance(v, dict):
                keys.update(f"{k}.{kk}" for kk in v if isinstance(kk, str))
                if "_component_" in v:
                    keys.add("_component_")
    return doc, detect(keys, path.name, text if not doc.ok else "")


def detect_file(path: str | Path) -> str | None:
    """The format of a config file, or None (directory walks skip those)."""
    p = Path(path)
    try:
        return _load(p, str(path))[1]
    except MemlintError:
        return None


def read_config(path: str | Path, shown: str | None = None, *, text: str | None = None, explicit: bool = True,
                launch: Any = None) -> TrainingPlan | None:
    """See _read_config; `launch` (a framework tool's command) applies its overrides first."""
    plan = _read_config(path, shown, text=text, explicit=explicit, launch=launch)
    if plan is not None and launch is not None:
        from memlint.extract.configs.overrides import mark, tool_of

        if tool_of(launch, plan.kind) is not None:
            plan = mark(plan, launch)
    return plan


def _read_config(path: str | Path | None, shown: str | None = None, *, text: str | None = None, explicit: bool = True,
                 launch: Any = None) -> TrainingPlan | None:
    """The training plan of one config file (`text`: its content, when already read).

    A file of no format memlint reads is a MemlintError when named explicitly, and None
    (skipped) when met in a directory walk."""
    from memlint.extract.configs.launchers import accelerate_facts, deepspeed_facts, launch_plan_fields
    from memlint.extract.configs.registry import READERS

    name = shown if shown is not None else str(path)
    p = Path(path) if path is not None else Path(name)
    if not explicit:  # a walk meets many YAML/JSON files (datasets, tokenizers): skip them unparsed
        from memlint.extract.configs.document import top_keys

        if text is None:
            text = _read_text(p, name)
        if p.suffix.lower() == ".toml":  # TOML's keys need the parse: [model] flavor tells torchtitan's job files
            from memlint.extract.configs.document import toml_top_keys

            if not _torchtitan_sections(toml_top_keys(text)) or _load(p, name, text)[1] is None:
                return None
        elif detect(top_keys(text, p.suffix.lower() == ".json"), p.name, text) is None:
            return None
    from memlint.extract.configs.overrides import TOOLS

    tool = TOOLS.get(launch.launcher) if launch is not None else None
    if path is None:  # `litgpt finetune_lora CHECKPOINT --train.x ...`: the tool's defaults, no config file
        from memlint.extract.configs.document import Document

        doc, kind = Document(name, data={}), tool[0] if tool else None
    else:
        doc, kind = _load(p, name, text)
    if tool is None:  # a Hydra entry script's key=value overrides over the NeMo config it composes
        from memlint.extract.configs.overrides import tool_of

        tool = tool_of(launch, kind)
    if tool is not None and doc.ok:
        from memlint.extract.configs.overrides import apply

        kind = kind or tool[0]
        apply(doc, launch, None if path is None else p.name, tool)
        doc.command = launch.subcommand
    if kind is None:
        if not explicit:
            return None
        if doc.diagnostics and not doc.ok:  # broken YAML of no recognisable format: still a finding
            return TrainingPlan(name, {}, (f"{doc.diagnostics[0].message}",), tuple(doc.diagnostics), "config")
        raise MemlintError(f"{name}: not a config memlint reads (axolotl, LLaMA-Factory, TRL recipe, torchtune, LitGPT, llm-foundry, "
                           "oumi, LLM-Finetuning-Toolkit, torchtitan, NeMo, DeepSpeed or accelerate)")
    if not doc.ok:
        notes = tuple(d.message for d in doc.diagnostics if d.kind == "syntax-error")
        if not doc.diagnostics:
            from memlint.plan import Diagnostic, Span

            doc.diagnostics.append(Diagnostic("unreadable", "the config is not a mapping of keys to values", Span(name, 1, 1)))
        return TrainingPlan(name, {}, notes or (doc.diagnostics[0].message,), tuple(doc.diagnostics), kind)
    if kind in _LAUNCHERS:
        facts = deepspeed_facts(doc) if kind == "deepspeed" else accelerate_facts(doc, p)
        notes = list(facts.notes)
        if kind == "deepspeed":
            notes.append("a DeepSpeed config alone names no model: check the script or framework config that uses it")
        else:
            notes.append("an accelerate config alone names no model: use it with a script (--config)")
        diags = list(facts.diagnostics)
        for d in doc.diagnostics:
            if d not in diags:
                diags.insert(0, d)
        return TrainingPlan(name, launch_plan_fields(facts), tuple(dict.fromkeys(notes)), tuple(diags), kind)
    why = getattr(READERS[kind], "not_training", lambda _doc: None)(doc)
    if why is not None:  # an inference or export config of a training framework: skipped in a walk
        return TrainingPlan(name, {}, (why,), tuple(doc.diagnostics), kind) if explicit else None
    reader = READERS[kind](doc, p)
    reader.read()
    return reader.plan()


def merge_launch_config(plan: TrainingPlan, path: str | Path) -> TrainingPlan:
    """`plan` as launched with an accelerate or DeepSpeed config: sharding, offload and process
    count from the launcher; batch, accumulation and precision only where the plan leaves them open."""
    from memlint.extract.configs.launchers import accelerate_facts, apply_launch, deepspeed_facts

    from memlint.files import OUTSIDE, allowed, is_file

    p = Path(path)
    if not allowed(p):
        raise MemlintError(f"{path}: {OUTSIDE}")
    if not is_file(p):
        raise MemlintError(f"{path}: no such file")
    doc, kind = _load(p, str(path))
    if kind not in _LAUNCHERS:
        raise MemlintError(f"{path}: not an accelerate or DeepSpeed config")
    if not doc.ok:
        msg = doc.diagnostics[0].message if doc.diagnostics else "not a mapping"
        raise MemlintError(f"{path}: {msg}")
    facts = deepspeed_facts(doc) if kind == "deepspeed" else accelerate_facts(doc, p)
    fields, notes, diags = apply_launch(dict(plan.fields), facts, str(path))
    extra_diags = [d for d in doc.diagnostics if d not in diags]
    return TrainingPlan(plan.path, fields, tuple(dict.fromkeys(plan.notes + tuple(notes))),
                        plan.diagnostics + tuple(extra_diags) + tuple(diags), plan.kind, plan.via,
                        (*plan.sources, str(path)), plan.versions)
