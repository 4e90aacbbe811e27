"""What the launcher itself says about a run, laid over the script's plan: how many GPUs, and the
sharding, precision and accumulation `accelerate launch` / `deepspeed` options or config files set.

The script's own arguments were already applied while it was read (extract/cli_args.py); this is
the part of the command the script never sees.
"""

from __future__ import annotations

import os
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from memlint.errors import MemlintError
from memlint.plan import Span, TrainingPlan, Value
from memlint.vocab import ascii_digits

_SELF_LAUNCHING = ("lightning", "lightning-fabric")  # trainers that start a process per device from one `python`
# accelerate launch options that settle the processes or the sharding without the machine's saved config
_ACCELERATE_SAYS = {"config_file", "num_processes", "multi_gpu", "use_deepspeed", "use_fsdp", "use_megatron_lm", "cpu",
                    "tpu", "deepspeed_config_file", "zero_stage", "gpu_ids"}
_ZERO = {"0": "none", "1": "zero1", "2": "zero2", "3": "zero3"}
_PRECISION = {"bf16": "amp-bf16", "fp16": "amp-fp16", "no": "fp32", "fp8": "amp-bf16"}


def all_visible(v: Value | None) -> bool:
    """Whether num_gpus `v` is "every GPU the machine shows" (device_map="auto", DataParallel, mp.spawn over
    device_count()): unknown, and not a one-process default."""
    return v is not None and not v.known and dict(v.shape).get("gpus") == "all-visible"


def _value(launch: Any, value: Any, how: str) -> Value:
    span = Span(launch.origin, launch.line_of(how)) if launch.line else None
    return Value(value, "command-line", span, (f"{how} ({launch.where()})",))


def documented(plan: TrainingPlan, launch: Any) -> TrainingPlan:
    """A file named alone read with the command its README documents for it: said in a note."""
    if not getattr(launch, "documented", False):
        return plan
    note = (f"read as {launch.where()} runs it (the README's command for this file; --no-readme-command reads the "
            f"file alone)")
    return replace(plan, notes=(note,) + plan.notes, via=plan.via or launch.where())


def tool_processes(plan: TrainingPlan, launch: Any) -> TrainingPlan:
    """A framework tool's own command that starts its processes from the GPUs it sees, where the config leaves
    num_gpus open. `llamafactory-cli train`: one process on one visible GPU; over several, torchrun with
    --nproc_per_node NPROC_PER_NODE (default: the visible devices), LLaMA-Factory's cli.py since 2024-06 (DDP, unless
    the config shards). With neither CUDA_VISIBLE_DEVICES nor NPROC_PER_NODE, the machine decides (unknown)."""
    if launch.launcher == "tune" and (not plan.get("num_gpus").known or plan.get("num_gpus").source == "library-default"):
        return _tune_processes(plan, launch)  # the command's recipe and processes win over a config's name
    if launch.launcher != "llamafactory-cli" or plan.get("num_gpus").known:
        return plan
    nproc = launch.env.get("NPROC_PER_NODE", "").strip()
    if nproc.isdigit() and int(nproc) > 0:
        return plan.with_values(num_gpus=_value(launch, int(nproc), f"NPROC_PER_NODE={nproc}: llamafactory-cli's "
                                                                    "torchrun processes"))
    count = launch.processes  # the GPUs CUDA_VISIBLE_DEVICES lets it see (launch.parse_command)
    if not count:
        return plan
    why = ("one visible GPU: llamafactory-cli trains in one process" if count == 1 else
           f"{count} visible GPUs: llamafactory-cli starts torchrun --nproc_per_node {count} (cli.py: get_device_count())")
    return plan.with_values(num_gpus=_value(launch, count, f"CUDA_VISIBLE_DEVICES={launch.env.get('CUDA_VISIBLE_DEVICES')}: "
                                                           f"{why}"))


def _tune_processes(plan: TrainingPlan, launch: Any) -> TrainingPlan:
    """`tune run [torchrun options] RECIPE --config X`: torchrun's processes when --nproc_per_node is given, else one
    process (torchtune's _cli/run.py runs the recipe in this process when no distributed option is given); a
    single-device recipe (`lora_finetune_single_device`) holds the whole model on its one GPU."""
    from memlint.extract.tune_recipe import recipe_word

    recipe, nproc = recipe_word(launch)
    if recipe is None:
        return plan
    if nproc is None:
        plan = plan.with_values(num_gpus=_value(launch, 1, f"`tune run {recipe}` with no --nproc_per_node: one process"))
    elif nproc.isdigit() and int(nproc) > 0:
        plan = plan.with_values(num_gpus=_value(launch, int(nproc), f"tune run --nproc_per_node {nproc}"))
    if plan.get("distributed").known and plan.get("distributed").source != "library-default":
        return plan  # the config's own sharding keys; a default from the config's file name gives way to the recipe
    if "single_device" in recipe:
        shard = _value(launch, "none", f"the single-device recipe {recipe}")
    elif recipe.endswith("_distributed"):
        # torchtune's built-in distributed recipes (full_finetune_, lora_finetune_, lora_dpo_, qat_, ..._distributed)
        # shard the model with FSDP (training.shard_model: fully_shard; FSDP FULL_SHARD before 0.3) on every process
        shard = _value(launch, "fsdp", f"the distributed recipe {recipe} shards the model with FSDP")
    else:
        return plan
    notes = tuple(n for n in plan.notes if not n.startswith("distributed is unknown"))
    return replace(plan.with_values(distributed=shard), notes=notes)


def apply_launcher(plan: TrainingPlan, launch: Any, script: Path) -> TrainingPlan:
    plan = documented(plan, launch)
    fields: dict[str, Value] = {}
    opts = launch.options
    shard = str(plan.get("distributed").value or "")
    from memlint.library import api

    if launch.launcher == "python" and launch.gpus and launch.gpus > 1 and shard.startswith(("zero", "fsdp")) \
            and plan.get("trainer").value in api.trainers():  # a script that spawns its own processes is not one
        # a Trainer given DeepSpeed or FSDP starts no processes itself: plain `python` is a world of one on one GPU,
        # however many CUDA_VISIBLE_DEVICES shows (DeepSpeed and FSDP wrap no DataParallel)
        fields["num_gpus"] = _value(launch, 1, f"python: one process (world size 1: {shard} over one GPU, however many "
                                               "are visible)")
    elif launch.gpus:
        how = {"torchrun": "torchrun --nproc_per_node", "accelerate": "accelerate launch --num_processes",
               "deepspeed": "deepspeed --num_gpus", "composer": "composer -n", "lightning": "lightning --devices",
               }.get(launch.launcher, "CUDA_VISIBLE_DEVICES")
        nodes = f" × {launch.nodes} nodes" if launch.nodes and launch.nodes > 1 else ""
        fields["num_gpus"] = _value(launch, launch.gpus, f"{how} {launch.processes}{nodes}")
    elif launch.launcher == "python" and not plan.get("num_gpus").known:
        visible = launch.env.get("CUDA_VISIBLE_DEVICES", "")
        count = len([d for d in visible.split(",") if d.strip()]) if visible.strip() and "$" not in visible else None
        if all_visible(plan.get("num_gpus")):
            if count:  # one process over every visible GPU: the ones the launch lets it see
                fields["num_gpus"] = _value(launch, count, f"CUDA_VISIBLE_DEVICES={visible}: {plan.get('num_gpus').chain[0]}")
        elif plan.get("trainer").known and plan.get("trainer").value not in _SELF_LAUNCHING:
            # (a script with no trainer memlint reads may start its own workers: Ray, mp.spawn; Lightning's Trainer
            # starts one process per device itself)
            fields["num_gpus"] = _value(launch, 1, "python: one process")
    if launch.launcher == "accelerate" and opts.get("num_processes") not in (None, "true") and launch.gpus is None:
        # `--num_processes $n`, n from `$(nvidia-smi --list-gpus | wc -l)`: the command's count, decided when it runs,
        # wins over a config file's num_processes
        fields["num_gpus"] = Value(None, "unknown", Span(launch.origin, launch.line_of("--num_processes"))
                                   if launch.line else None, (f"accelerate launch --num_processes "
                                                              f"{opts['num_processes']}: decided when the command runs",))
    if launch.launcher == "accelerate":
        fields.update(_accelerate(plan, launch, opts))
    fields.update(_megatron(launch))
    cur = plan.get("distributed")
    if launch.launcher in ("torchrun", "accelerate", "deepspeed") and launch.gpus and launch.gpus > 1 \
            and cur.value == "none" and cur.source == "library-default" and "distributed" not in fields:
        fields["distributed"] = _value(launch, "none", f"{launch.launcher}: {launch.gpus} data-parallel processes (DDP)")
    elif launch.launcher == "accelerate" and not _ACCELERATE_SAYS & set(opts) and cur.source == "library-default" \
            and "distributed" not in fields and not launch.gpus:
        # `accelerate launch train.py`: the machine's saved `accelerate config` (default_config.yaml) sets the processes
        # and the sharding, which the checkout does not hold (without one: a process per visible GPU, DDP)
        fields["distributed"] = Value(None, "unknown", None, (f"accelerate launch without --config_file or a "
                                      f"process count ({launch.where()}): the machine's saved accelerate config decides "
                                      "(with none saved: one process per visible GPU, DDP)",))
    plan = plan.with_values(**fields)
    if launch.line:
        plan = replace(plan, via=launch.where())
    plan = _unread_configs(plan, launch)
    cfg = opts.get("config_file")
    if launch.launcher == "accelerate" and cfg:
        plan = _accelerate_config(plan, launch, cfg, script)
        if "num_gpus" in fields:  # `--num_processes=3` on the command line wins over the config file's num_processes
            plan = plan.with_values(num_gpus=fields["num_gpus"])
    return plan


def _unread_configs(plan: TrainingPlan, launch: Any) -> TrainingPlan:
    """A config file the command hands the script by a flag (`run_train.py --config-file cfg.yaml`) that memlint neither
    reads as a framework format nor followed from the script's code: said, so the script's own defaults are not taken
    for the config's values."""
    import os

    if plan.kind not in ("python", "notebook") or not launch.script:
        return plan
    argv = list(launch.argv)
    pairs = [(w, argv[i + 1]) for i, w in enumerate(argv[:-1]) if w.startswith("-")]
    pairs += [tuple(w.split("=", 1)) for w in argv if w.startswith("-") and "=" in w]
    read = {os.path.realpath(p) for p in plan.sources}
    notes = []
    for flag, value in pairs:
        if "config" not in flag.lower() or not value.lower().endswith((".yaml", ".yml", ".json", ".toml")):
            continue
        cand = Path(launch.cwd or ".") / value
        if not cand.is_file() or os.path.realpath(cand) in read:
            continue
        from memlint.extract.configs import detect_file

        if detect_file(cand) is None:
            notes.append(f"{value} ({flag}): a config of a format memlint does not read, not read: the fields below are "
                         f"what the script's own code says, not that file's values")
    return replace(plan, notes=plan.notes + tuple(notes)) if notes else plan


_MEGATRON_SIZES = {"--tensor-model-parallel-size": "tp_size", "--context-parallel-size": "cp_size"}


def _megatron(launch: Any) -> dict[str, Value]:
    """Megatron-LM's parallelism arguments on the script's command line (pretrain_gpt.py and the scripts
    built on megatron.training's argument parser): --tensor-model-parallel-size N, --sequence-parallel,
    --context-parallel-size N (megatron/training/arguments.py; underscores accepted as argparse does not,
    but as NeMo's launchers write them)."""
    out: dict[str, Value] = {}
    argv = list(launch.argv)
    for i, arg in enumerate(argv):
        flag, _, inline = arg.partition("=")
        flag = "--" + flag[2:].replace("_", "-") if flag.startswith("--") else flag
        if flag in _MEGATRON_SIZES:
            text = inline or (argv[i + 1] if i + 1 < len(argv) else "")
            if ascii_digits(text) and int(text) >= 1:
                out[_MEGATRON_SIZES[flag]] = _value(launch, int(text), f"{flag} {text}")
        elif flag == "--sequence-parallel":
            out["sequence_parallel"] = _value(launch, True, "--sequence-parallel")
    if out:
        out["tp_stack"] = _value(launch, "megatron", "Megatron-LM parallelism arguments")
    return out


def _deepspeed_file(launch: Any, ref: str) -> dict[str, Value]:
    """distributed and offload of the DeepSpeed config `accelerate launch --deepspeed_config_file REF` names, looked up
    from where the command runs; {} when it is not there."""
    from memlint.extract.configs.launchers import deepspeed_facts, find_deepspeed

    inner, shown = find_deepspeed(Path(launch.cwd or ".") / "accelerate-launch", launch.origin, ref)
    if inner is None:
        return {}
    facts = deepspeed_facts(inner).fields
    how = f"accelerate launch --deepspeed_config_file {ref} ({launch.where()})"
    return {k: Value(v.value, v.source, v.span, (how,) + v.chain, v.candidates) for k, v in facts.items()
            if k in ("distributed", "offload") and v.known}


def _accelerate(plan: TrainingPlan, launch: Any, opts: dict[str, str]) -> dict[str, Value]:
    """accelerate launch's own flags: --use_deepspeed --zero_stage / --deepspeed_config_file, --use_fsdp,
    --mixed_precision (which an Accelerator() without mixed_precision= reads from the environment)."""
    from memlint.library import api

    out: dict[str, Value] = {}
    ds_flags = [k for k in ("deepspeed_config_file", "zero_stage") if k in opts]
    use_ds = opts.get("use_deepspeed") == "true"
    other = opts.get("use_fsdp") == "true" or opts.get("use_megatron_lm") == "true"
    if ds_flags and not use_ds and not other and "config_file" not in opts:
        # accelerate applies its DeepSpeed flags only under --use_deepspeed (or a config whose distributed_type is
        # DEEPSPEED): launch.py's _validate_launch_command; memlint reads a launch as the checkout shows it, with no
        # saved machine config, so these flags are ignored
        cur = plan.get("distributed")
        if cur.source in ("library-default", "unknown"):
            out["distributed"] = _value(launch, "none", f"accelerate launch --{ds_flags[0]} without --use_deepspeed: "
                                                        "accelerate ignores it, no DeepSpeed (unless the machine's saved "
                                                        "accelerate config says DEEPSPEED)")
    elif use_ds or (ds_flags and not other):
        stage = opts.get("zero_stage")
        if stage in _ZERO:
            out["distributed"] = _value(launch, _ZERO[stage], f"accelerate launch --use_deepspeed --zero_stage {stage}")
        elif "deepspeed_config_file" not in opts:
            cur = plan.get("distributed")
            if not (cur.known and str(cur.value).startswith("zero") and cur.source != "library-default"):
                # no --zero_stage: the DeepSpeedPlugin reads ACCELERATE_DEEPSPEED_ZERO_STAGE, unset, so its default;
                # a DeepSpeedPlugin(zero_stage=N) the script builds itself keeps its own stage
                from memlint.extract.configs import frameworks

                dflt = frameworks.default("accelerate", "zero_stage")
                out["distributed"] = _value(launch, _ZERO.get(str(dflt.value), "deepspeed") if dflt else "deepspeed",
                                            f"accelerate launch --use_deepspeed with no --zero_stage: "
                                            f"{dflt.why if dflt else 'stage unknown'}")
        else:  # the DeepSpeed JSON the command names: its stage and offload
            out.update(_deepspeed_file(launch, opts["deepspeed_config_file"]))
        for key, what in (("offload_param_device", "params"), ("offload_optimizer_device", "optimizer")):
            if opts.get(key) in ("cpu", "nvme"):
                out["offload"] = _value(launch, what, f"accelerate launch --{key} {opts[key]}")
                break
        if opts.get("offload_optimizer_device") in ("cpu", "nvme") and "deepspeed_config_file" not in opts:
            # accelerate's prepare swaps the optimizer for DeepSpeed's CPU Adam
            from memlint.extract.configs.launchers import offloaded_optimizer

            cpu = _value(launch, "deepspeed_adam", f"accelerate launch --offload_optimizer_device {opts['offload_optimizer_device']}")
            swapped = offloaded_optimizer(plan.get("optimizer"), plan.get("trainer"), cpu, "accelerate")
            if swapped is not None:
                out["optimizer"] = swapped
    elif opts.get("use_fsdp") == "true":
        strat = str(opts.get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
        out["distributed"] = _value(launch, "fsdp_shard_grad_op" if "GRAD_OP" in strat or strat == "2" else "fsdp",
                                    f"accelerate launch --use_fsdp ({strat})")
    mp = opts.get("mixed_precision")
    prec = plan.get("precision")
    # an accelerate loop autocasts under --mixed_precision (bf16 weights included: "pure bf16" was the guess without it)
    if mp in _PRECISION and plan.get("trainer").value == "custom-loop" and (
            prec.source in ("library-default", "unknown") or prec.value in ("pure-bf16", "pure-fp16") and mp in ("bf16", "fp16")):
        out["precision"] = _value(launch, _PRECISION[mp], f"accelerate launch --mixed_precision {mp}")
    elif mp in _PRECISION and plan.get("trainer").value in api.trainers() and prec.known and prec.value == "fp32":
        # TrainingArguments with neither fp16 nor bf16 keeps the launcher's ACCELERATE_MIXED_PRECISION for the Trainer's
        # Accelerator (training_args.py __post_init__, transformers 4.30 to 5.x)
        out["precision"] = _value(launch, _PRECISION[mp], f"accelerate launch --mixed_precision {mp}: the training "
                                                          "arguments set neither fp16 nor bf16, so the Trainer's "
                                                          "Accelerator keeps it")
    ga = opts.get("gradient_accumulation_steps")
    if ga and ascii_digits(ga) and plan.get("grad_accum").source in ("library-default", "unknown"):
        out["grad_accum"] = _value(launch, int(ga), f"accelerate launch --gradient_accumulation_steps {ga}")
    return out


def author_file(ref: str, bases: list[Path]) -> tuple[Path, str] | None:
    """The checkout's file an absolute path of the author's machine stands for (`--config_file
    /home/u/repo/scripts/configs/fsdp.yml` in a checkout of repo: its scripts/configs/fsdp.yml): the longest tail of
    the path that is a file under one of `bases`, and the note that says so; None when none is."""
    from memlint.files import is_file

    parts = [p for p in Path(ref).parts if p not in ("/", "\\")]
    for k in range(1, len(parts)):
        tail = Path(*parts[k:])
        for base in bases:
            if is_file(base / tail):
                return base / tail, f"{ref} is not on this machine: read as the checkout's {tail}"
    return None


_NAMESAKE_SKIP = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", "site-packages", "wandb"})


def checkout_namesake(ref: str, root: str | Path, limit: int = 20000) -> tuple[Path, str] | None:
    """The checkout's one file named as `ref` is (`--deepspeed ./configs/ds.json` where the checkout holds only
    config/ds.json: a folder renamed after the launcher was written), and the note that says so; None when no file
    or several files of that name are in the checkout (which one ran is unknown), or past `limit` entries walked.
    Hidden folders, virtual environments and links are not walked."""
    from memlint.files import allowed, is_file

    name = os.path.basename(os.path.normpath(ref))
    if not name or name in (".", ".."):
        return None
    hits, seen = [], 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _NAMESAKE_SKIP and not d.startswith("."))
        seen += len(dirs) + len(names)
        if seen > limit:
            return None
        if name in names and allowed(os.path.join(folder, name)) and is_file(os.path.join(folder, name)):
            hits.append(Path(folder) / name)
            if len(hits) > 1:
                return None
    if not hits:
        return None
    shown = os.path.relpath(hits[0], root)
    return hits[0], f"{ref} is not in the checkout: read as its only file of that name, {shown}"


def _accelerate_config_files(launch: Any, cfg: str, script: Path | None) -> tuple[list[Path], str | None]:
    """Where `accelerate launch --config_file CFG` may be, in order: beside the launcher that runs it, in the folder
    the command runs in (`cd sub && accelerate launch --config_file ../x.yaml`: relative to sub), in memlint's
    folder, beside the script; an absolute path of the author's machine as the checkout's file of the same tail
    (with the note saying so)."""
    from memlint.files import is_file

    base = Path(launch.origin).parent if launch.line else Path.cwd()
    run_dirs = [base / launch.cwd, Path.cwd() / launch.cwd] if launch.cwd else []
    if os.path.isabs(cfg) and not is_file(cfg):
        mapped = author_file(cfg, [Path.cwd(), base])
        return ([mapped[0]], mapped[1]) if mapped is not None else ([], None)
    return [base / cfg, *(d / cfg for d in run_dirs), Path.cwd() / cfg,
            *([script.parent / cfg] if script is not None else [])], None


def accelerate_processes(launch: Any, script: Path | None = None) -> int | None:
    """The processes `accelerate launch --config_file X` starts, from X's num_processes (accelerate counts them over
    every machine), when the command itself does not say; None when X is not found or says nothing readable."""
    from memlint.files import is_file

    cfg = (launch.options or {}).get("config_file") if launch is not None and launch.launcher == "accelerate" else None
    if not cfg:
        return None
    cands, _ = _accelerate_config_files(launch, cfg, script)
    for cand in cands:
        if is_file(cand):
            try:
                stat = cand.stat()
            except OSError:
                return None
            return _config_processes(str(cand), stat.st_mtime_ns, stat.st_size)
    return None


@lru_cache(maxsize=32)
def _config_processes(path: str, mtime_ns: int, size: int) -> int | None:
    """num_processes of an accelerate config file, read once per version of the file (a script reads
    accelerator.num_processes on many lines)."""
    from memlint.extract.configs.document import load_text
    from memlint.files import read_text

    try:
        doc = load_text(read_text(path, 1_000_000, what="accelerate config"), path)
    except (OSError, MemlintError):
        return None
    n = doc.data.get("num_processes") if isinstance(doc.data, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def _accelerate_config(plan: TrainingPlan, launch: Any, cfg: str, script: Path) -> TrainingPlan:
    from memlint.extract.configs import merge_launch_config

    from memlint.files import is_file

    cands, note = _accelerate_config_files(launch, cfg, script)
    for cand in cands:
        if is_file(cand):
            try:
                merged = merge_launch_config(plan, cand)
                return replace(merged, notes=merged.notes + (note,)) if note else merged
            except MemlintError as exc:
                return replace(plan, notes=plan.notes + (f"accelerate --config_file {cfg}: {exc}",))
    return replace(plan, notes=plan.notes + (f"accelerate --config_file {cfg}: not found; its sharding is unknown",))
