"""A framework tool's command-line overrides applied to its config before it is read, the way each
tool applies them: `litgpt finetune_lora CHECKPOINT --train.micro_batch_size 2` (jsonargparse),
`oumi train -c X --training.max_steps 20`, `axolotl train X --micro_batch_size 2`,
`llamafactory-cli train X key=value`, `tune run R --config X key=value`. Each overridden key's
position becomes the launch's, so the reader's values for it are command-line values.
"""

from __future__ import annotations

from typing import Any

import yaml

from memlint.plan import Span, TrainingPlan, Value

# tool -> (kind of the reader, style of its overrides, the key a first free positional sets)
TOOLS = {
    "litgpt": ("litgpt", "flags", "checkpoint_dir"),
    "oumi": ("oumi", "flags", None),
    "axolotl": ("axolotl", "flags", None),
    "llamafactory-cli": ("llama-factory", "key=value", None),
    "tune": ("torchtune", "key=value", None),
    "llmtune": ("llmtune", "none", None),
    "swift": ("ms-swift", "flags", None),
    "verl-sft": ("verl-sft", "key=value", None),
    "verl-ppo": ("verl-ppo", "key=value", None),
    "openrlhf": ("openrlhf", "flags", None),
}
# a Hydra entry script's overrides (NeMo's `megatron_gpt_finetuning.py ... model.micro_batch_size=2 trainer.devices=8`):
# key=value, +key=value, ++key=value after the script (launch.py _hydra_config finds the config it composes)
HYDRA_KINDS = ("nemo", "verl-ppo", "verl-sft")  # frameworks.json entries with "hydra" (a test checks they agree)
COMMAND_LINE = "<command line>"
# framework CLIs that read a whole config from flags when no config file comes first (LLaMA-Factory's read_args:
# HfArgumentParser.parse_args_into_dataclasses over `--key value`)
FLAGS_ONLY = frozenset({"llamafactory-cli", "swift", "openrlhf"})
# framework tools whose config is packaged with the framework (Hydra's config_name): the command's key=value
# overrides over its defaults are the whole config
PACKAGED_CONFIG = frozenset({"verl-sft", "verl-ppo"})


def flags_config(launch: Any) -> bool:
    """A framework CLI given its whole config as `--key value` flags, no config file (FLAGS_ONLY), or a framework
    whose config is packaged with it, overridden by key=value (PACKAGED_CONFIG)."""
    if launch.launcher in PACKAGED_CONFIG:
        return True
    return launch.launcher in FLAGS_ONLY and bool(launch.argv) and launch.argv[0].startswith("--")
_TOOL_FLAGS = {"-c", "--config", "--cfg", "--launcher"}  # the tool's own options, not config keys
# flags a tool's argparse reads with nargs="*" (several words): OpenRLHF's LoRA targets
_NARGS = {"openrlhf": {"target_modules", "ds.lora.target_modules"}}


def _scalar(raw: str) -> Any:
    try:
        v = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    return v if isinstance(v, (str, int, float, bool, list, dict)) or v is None else raw


def tool_of(launch: Any, kind: str | None) -> tuple | None:
    """How the launch command overrides a config of `kind`: its framework tool's way, or Hydra's for a script
    that composes a NeMo config."""
    if launch is None:
        return None
    tool = TOOLS.get(launch.launcher)
    if tool is None and launch.script and kind in HYDRA_KINDS:
        return (kind, "key=value", None)
    return tool or framework_tool(kind, launch)


def framework_tool(kind: str | None, launch: Any) -> tuple[str, str, None] | None:
    """A framework whose entry script or module reads its config from a flag and takes `--section.key value`
    overrides after it (frameworks.json "cli_overrides": torchtitan's `--job.config_file X --training.steps 10`)."""
    if kind is None or launch is None or launch.launcher in TOOLS:
        return None
    from memlint.extract.configs.frameworks import table

    fw = table().get(kind, {})
    flags = fw.get("read_from_flag", ())
    if "cli_overrides" not in fw or not any(w in flags or w.split("=", 1)[0] in flags for w in launch.argv):
        return None
    return kind, fw["cli_overrides"]["style"], None


def overrides(launch: Any, config_ref: str | None, tool: tuple | None = None) -> list[tuple[tuple[str, ...], Any, str]]:
    """(key path, value, the words that set it) for each override in the launch command."""
    tool = tool or TOOLS.get(launch.launcher)
    if tool is None:
        return []
    _, style, positional_key = tool
    if tool[0] not in {t[0] for t in TOOLS.values()} and tool[0] not in HYDRA_KINDS:  # the config flag of a framework's entry point
        from memlint.extract.configs.frameworks import table

        skip = set(table()[tool[0]].get("read_from_flag", ()))
    else:
        skip = set()
    words = list(launch.argv)
    out: list[tuple[tuple[str, ...], Any, str]] = []
    i = 0
    first_free = True
    while i < len(words):
        w = words[i]
        if w in _TOOL_FLAGS or w in skip:
            i += 2
            continue
        if w.split("=", 1)[0] in skip:
            i += 1
            continue
        if style == "flags" and w.startswith("--"):
            key, eq, raw = w[2:].partition("=")
            if not eq:
                if i + 1 < len(words) and not words[i + 1].startswith("--"):
                    raw = words[i + 1]
                    i += 1
                    if key in _NARGS.get(tool[0], ()):  # `--target_modules q_proj v_proj`: argparse's nargs="*"
                        more = []
                        while i + 1 < len(words) and not words[i + 1].startswith("-"):
                            more.append(words[i + 1])
                            i += 1
                        if more:
                            out.append((tuple(key.replace("-", "_").split(".")), [raw, *more], w))
                            i += 1
                            continue
                else:
                    raw = "true"  # a bare flag is a switch
            if key and key not in ("config",):
                out.append((tuple(key.replace("-", "_").split(".")), _scalar(raw), w if eq else f"{w} {raw}"))
        elif style == "key=value" and "=" in w and not w.startswith("-"):
            key, _, raw = w.partition("=")
            out.append((tuple(key.lstrip("+~").split(".")), _scalar(raw), w))
        elif not w.startswith("-") and w != config_ref and first_free and positional_key:
            out.append(((positional_key,), w, w))
            first_free = False
        i += 1
    return out


def apply(doc: Any, launch: Any, config_ref: str | None, tool: tuple | None = None) -> set[tuple]:
    """Set each override into `doc.data`, its key at the launch's position; the paths set."""
    if not isinstance(doc.data, dict):
        return set()
    origin = launch.origin if launch.line else COMMAND_LINE
    done = set()
    tool = tool or TOOLS.get(launch.launcher)
    for path, value, how in overrides(launch, config_ref, tool):
        cur = doc.data
        for part in path[:-1]:
            nxt = cur.get(part)
            if not isinstance(nxt, dict):
                nxt = cur[part] = {}
            cur = nxt
        old = cur.get(path[-1])
        if tool is not None and tool[0] == "torchtune" and isinstance(old, dict) and "_component_" in old \
                and isinstance(value, str):
            # torchtune's _merge_yaml_and_cli_args: `loss=torchtune.modules.loss.CEWithChunkedOutputLoss` over a
            # component sets its _component_ and keeps its other fields
            old["_component_"] = value
            path = (*path, "_component_")
        else:
            cur[path[-1]] = value
        line = launch.line_of(how) or 1
        for k in list(doc.keys):
            if k[:len(path)] == path:
                del doc.keys[k]  # a value replaced from the command line has no line in the file
        doc.keys[path] = Span(origin, line)
        done.add(path)
    return done


def mark(plan: TrainingPlan, launch: Any) -> TrainingPlan:
    """Values the command line set are command-line values (readers call everything they read literal)."""
    origin = launch.origin if launch.line else COMMAND_LINE
    from dataclasses import replace

    fields = {}
    for name, v in plan.fields.items():
        if isinstance(v, Value) and v.span is not None and v.span.path == origin and v.source == "literal":
            span = v.span if launch.line else None
            v = Value(v.value, "command-line", span, v.chain + (f"({launch.where()})",), v.candidates, v.shape)
        fields[name] = v
    return replace(plan, fields=fields)
