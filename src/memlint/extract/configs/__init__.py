"""Framework config files (YAML/JSON/TOML) read into a TrainingPlan, never executed.

Formats are told apart by their keys (and, for a file that does not parse, by its name); each format is one module
of this package whose reader says how its files look (configs/registry.py finds them): axolotl, LLaMA-Factory, TRL
recipes, torchtune, LitGPT, llm-foundry (Composer), oumi, LLM-Finetuning-Toolkit (llmtune), torchtitan job TOML,
NVIDIA NeMo 1.x / NeMo-Megatron YAML, LightningCLI (jsonargparse) YAML, nanotron run YAML, ms-swift YAML (and its
`swift sft|pt|rlhf` flags), verl's SFT trainer (its packaged config under key=value overrides), DeepSpeed JSON and accelerate config YAML. (xtuner's configs are Python: extract/xtuner.py reads them.)
`merge_launch_config` lays a DeepSpeed or accelerate config over a script's plan.
"""

from __future__ import annotations

from typing import Any
from pathlib import Path

from memlint.errors import MemlintError
from memlint.plan import TrainingPlan

__all__ = ["CONFIG_SUFFIXES", "FORMATS", "detect", "detect_file", "read_config", "merge_launch_config"]

CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")


def __getattr__(name: str):
    if name == "FORMATS":  # the registered formats' names (configs/registry.py finds them)
        from memlint.extract.configs.registry import names

        return names()
    raise AttributeError(name)


def _launcher(kind: str | None) -> bool:
    from memlint.extract.configs.registry import launcher_kinds

    return kind in launcher_kinds()


def detect(top_keys: tuple[str, ...] | set[str], name: str = "", text: str = "") -> str | None:
    """The format of a config from its top-level keys; the file name breaks ties for broken files."""
    from memlint.extract.configs.registry import detect as by_markers

    return by_markers(set(top_keys), name, text)


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
        from memlint.extract.configs.registry import toml_format

        if not doc.ok and toml_format(doc.top_keys):  # a broken job file (torchtitan's): its syntax error is a finding
            return doc, toml_format(doc.top_keys)
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
        from memlint.extract.configs.registry import formats

        fmt = next((f for f in formats() if f.kind == plan.kind), None)
        if fmt is not None:
            plan = fmt.launched(plan, launch)
    return plan


def _tool(launch: Any, path: Any) -> tuple | None:
    """How the framework tool of the launch reads its command line (overrides.TOOLS); a whole config given as
    `--key value` flags with no file (LLaMA-Factory's HfArgumentParser) is read as flags."""
    from memlint.extract.configs.overrides import PACKAGED_CONFIG, TOOLS, flags_config

    tool = TOOLS.get(launch.launcher) if launch is not None else None
    if tool is not None and path is None and tool[1] == "key=value" and flags_config(launch) \
            and launch.launcher not in PACKAGED_CONFIG:
        tool = (tool[0], "flags", None)
    return tool


def _read_config(path: str | Path | None, shown: str | None = None, *, text: str | None = None, explicit: bool = True,
                 launch: Any = None) -> TrainingPlan | None:
    """The training plan of one config file (`text`: its content, when already read).

    A file of no format memlint reads is a MemlintError when named explicitly, and None
    (skipped) when met in a directory walk."""
    from memlint.extract.configs.launchers import launch_plan_fields
    from memlint.extract.configs.registry import reader as reader_of

    name = shown if shown is not None else str(path)
    p = Path(path) if path is not None else Path(name)
    if not explicit:  # a walk meets many YAML/JSON files (datasets, tokenizers): skip them unparsed
        from memlint.extract.configs.document import top_keys

        if text is None:
            text = _read_text(p, name)
        if p.suffix.lower() == ".toml":  # TOML's keys need the parse: [model] flavor tells torchtitan's job files
            from memlint.extract.configs.document import toml_top_keys

            from memlint.extract.configs.registry import toml_format

            if not toml_format(toml_top_keys(text)) or _load(p, name, text)[1] is None:
                return None
        elif detect(top_keys(text, p.suffix.lower() == ".json"), p.name, text) is None:
            return None
    tool = _tool(launch, path)
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
        # named alone, a config of a format memlint does not read: memlint's limit, said as a note on an all-unknown
        # plan (as for a script without a trainer), not the user's error
        why = (f"{name}: not a config memlint reads (axolotl, LLaMA-Factory, TRL recipe, torchtune, LitGPT, llm-foundry, "
               "oumi, LLM-Finetuning-Toolkit, torchtitan, NeMo, LightningCLI, nanotron, ms-swift, DeepSpeed or accelerate): name "
               "the script that reads it, or its launch command after --")
        return TrainingPlan(name, {}, (why,), (), "config")
    if not doc.ok:
        notes = tuple(d.message for d in doc.diagnostics if d.kind == "syntax-error")
        if not doc.diagnostics:
            from memlint.plan import Diagnostic, Span

            doc.diagnostics.append(Diagnostic("unreadable", "the config is not a mapping of keys to values", Span(name, 1, 1)))
        return TrainingPlan(name, {}, notes or (doc.diagnostics[0].message,), tuple(doc.diagnostics), kind)
    if _launcher(kind):
        fmt = reader_of(kind)
        facts = fmt.facts(doc, p)
        notes = [*facts.notes, fmt.alone]
        diags = list(facts.diagnostics)
        for d in doc.diagnostics:
            if d not in diags:
                diags.insert(0, d)
        return TrainingPlan(name, launch_plan_fields(facts), tuple(dict.fromkeys(notes)), tuple(diags), kind)
    why = getattr(reader_of(kind), "not_training", lambda _doc: None)(doc)
    if why is not None:  # an inference or export config of a training framework: skipped in a walk
        return TrainingPlan(name, {}, (why,), tuple(doc.diagnostics), kind) if explicit else None
    reader = reader_of(kind)(doc, p)
    reader.read()
    return reader.plan()


def merge_launch_config(plan: TrainingPlan, path: str | Path) -> TrainingPlan:
    """`plan` as launched with an accelerate or DeepSpeed config: sharding, offload and process
    count from the launcher; batch, accumulation and precision only where the plan leaves them open."""
    from memlint.extract.configs.launchers import apply_launch
    from memlint.extract.configs.registry import reader as reader_of

    from memlint.files import OUTSIDE, allowed, is_file

    p = Path(path)
    if not allowed(p):
        raise MemlintError(f"{path}: {OUTSIDE}")
    if not is_file(p):
        raise MemlintError(f"{path}: no such file")
    doc, kind = _load(p, str(path))
    if not _launcher(kind):
        raise MemlintError(f"{path}: not an accelerate or DeepSpeed config")
    if not doc.ok:
        msg = doc.diagnostics[0].message if doc.diagnostics else "not a mapping"
        raise MemlintError(f"{path}: {msg}")
    facts = reader_of(kind).facts(doc, p)
    fields, notes, diags = apply_launch(dict(plan.fields), facts, str(path), kind)
    extra_diags = [d for d in doc.diagnostics if d not in diags]
    return TrainingPlan(plan.path, fields, tuple(dict.fromkeys(plan.notes + tuple(notes))),
                        plan.diagnostics + tuple(extra_diags) + tuple(diags), plan.kind, plan.via,
                        (*plan.sources, str(path)), plan.versions)
