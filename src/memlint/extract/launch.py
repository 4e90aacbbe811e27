"""A launch command read statically: which script (or module, or framework config) it runs, the
arguments the script sees, the environment it sets and how many processes the launcher starts.

`memlint check -- torchrun --nproc_per_node 8 train.py --bf16 True` and the command lines of shell
launchers (`scripts/finetune.sh`) go through `parse_command`. Nothing is run: the tokens are read.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from memlint.errors import MemlintError, NotFollowed
from memlint.vocab import LAUNCHER_SUFFIXES
from memlint.extract.configs.overrides import FLAGS_ONLY, flags_config
from memlint.files import is_file, max_file_size

# Wrappers that run the rest of the line as it is.
_WRAPPERS = {"nohup", "time", "exec", "env", "stdbuf", "nice", "sudo", "srun", "mpirun", "command", "xargs"}
# Container runners (`singularity exec [opts] IMAGE cmd`, `docker run [opts] IMAGE cmd`): the command after the image
# runs as it is; their options that take a value (the next word, or `--opt=value`); every other option is a flag.
# A working-directory option moves the command there.
_CONTAINERS = {
    ("singularity", "exec"), ("singularity", "run"), ("apptainer", "exec"), ("apptainer", "run"),
    ("docker", "run"), ("docker", "exec"), ("podman", "run"), ("podman", "exec"), ("nvidia-docker", "run"),
}
_CONTAINER_VALUES = {
    "singularity": {"-B", "--bind", "--env", "--env-file", "-H", "--home", "--pwd", "-W", "--workdir", "--overlay",
                    "-o", "-S", "--scratch", "--app", "--security", "--network", "--network-args", "--mount", "--hostname",
                    "--dns", "--apply-cgroups", "--drop-caps", "--add-caps"},
    "docker": {"-v", "--volume", "-e", "--env", "--env-file", "-w", "--workdir", "--gpus", "--name", "--shm-size",
               "--ipc", "--network", "--net", "-p", "--publish", "--entrypoint", "-u", "--user", "--mount", "--device",
               "--runtime", "--ulimit", "--cpus", "-m", "--memory", "--hostname", "-h", "--label", "-l", "--platform",
               "--pid", "--cap-add", "--cap-drop", "--security-opt", "--tmpfs", "--add-host", "--restart", "--cidfile",
               "--memory-swap", "--log-driver", "--log-opt", "--pull", "--volumes-from", "--group-add", "--cpuset-cpus"},
}
_CONTAINER_CWD = {"--pwd", "-w", "--workdir"}


def _container(words: list[str]) -> tuple[list[str], str | None] | None:
    """(the command a container runner runs, the working folder its options set) for `singularity exec --nv -B .:/w
    img.sif python train.py`; None when `words` is no container runner or names no command after the image. A working
    folder inside a bound folder (`--pwd $HOME/.local/app -B ./local:$HOME/.local`) is the host's folder it binds
    (`./local/app`): the files the command runs there are the checkout's."""
    if len(words) < 3 or (Path(words[0]).name, words[1]) not in _CONTAINERS:
        return None
    takes = _CONTAINER_VALUES["docker" if Path(words[0]).name in ("docker", "podman", "nvidia-docker") else "singularity"]
    i, cwd, binds = 2, None, []
    while i < len(words) and words[i].startswith("-"):
        opt = words[i].split("=", 1)[0]
        value = words[i].split("=", 1)[1] if "=" in words[i] else (words[i + 1] if opt in takes and i + 1 < len(words) else None)
        if opt in _CONTAINER_CWD and value:
            cwd = value
        elif opt in _CONTAINER_BINDS and value:
            binds += [b.split(":")[:2] for b in value.split(",") if b.count(":") >= 1]
        i += 1 if "=" in words[i] or opt not in takes else 2
    if cwd is not None:
        cwd = _bound(cwd, binds)
    return (words[i + 1:], cwd) if i + 1 < len(words) else None


_CONTAINER_BINDS = {"-B", "--bind", "-v", "--volume"}


def _bound(folder: str, binds: list[list[str]]) -> str:
    """The host folder a container's folder is, through the longest bind (`host:container`) that holds it; the folder
    itself when no bind does."""
    inside = folder.rstrip("/")
    for host, at in sorted(binds, key=lambda b: -len(b[1])):
        at = at.rstrip("/")
        host = "." if host in _HERE else host
        if at and (inside == at or inside.startswith(at + "/")) and "$" not in host and "`" not in host:
            return os.path.normpath(host + inside[len(at):])
    return folder


_HERE = {"$(pwd)", "$PWD", "${PWD}", "`pwd`", ".", "./"}  # a bind of the folder the command runs from


def _shell_string(words: list[str]) -> list[str] | None:
    """The words of the command string `bash -c "…"` (`sh -lc`, `bash -c -eux "…"`) runs, when it is one command line;
    None for any other command."""
    if len(words) < 3 or Path(words[0]).name not in _SHELLS:
        return None
    i = 1
    while i < len(words) and words[i].startswith("-") and not (words[i][1:2] != "-" and "c" in words[i]):
        i += 1
    if i >= len(words) or not words[i].startswith("-"):
        return None
    i += 1
    while i < len(words) and words[i].startswith("-"):  # `bash -c -eux "…"`
        i += 1
    if i >= len(words) or "\n" in words[i]:
        return None
    try:
        return tokens(words[i])
    except MemlintError:
        return None




# the options of `uv run` / `poetry run` / `conda run` ... that take a value as the next word
_RUNNER_VALUED = frozenset({"--with", "--with-requirements", "--with-editable", "--python", "-p", "--project",
                            "--directory", "--extra", "--group", "--env-file", "--index", "--package", "-n", "--name",
                            "--prefix", "--cwd"})
_RUNNERS = {("uv", "run"), ("poetry", "run"), ("pipenv", "run"), ("conda", "run"), ("pdm", "run"), ("hatch", "run")}
_PYTHON = re.compile(r"^(?:.*/)?python(?:\d+(?:\.\d+)*)?$")
_ENV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")

# Launcher options that take a value (the next token, or `--opt=value`), by launcher.
_TAKES_VALUE = {
    "torchrun": {"--nproc_per_node", "--nproc-per-node", "--nnodes", "--node_rank", "--node-rank", "--master_addr",
                 "--master-addr", "--master_port", "--master-port", "--rdzv_backend", "--rdzv-backend", "--rdzv_endpoint",
                 "--rdzv-endpoint", "--rdzv_id", "--rdzv-id", "--rdzv_conf", "--rdzv-conf", "--max_restarts",
                 "--max-restarts", "--monitor_interval", "--monitor-interval", "--start_method", "--start-method",
                 "--role", "--log_dir", "--log-dir", "-r", "--redirects", "-t", "--tee", "--local_addr", "--local-addr",
                 "--logs_specs", "--logs-specs", "--local-ranks-filter", "--local_ranks_filter"},
    "accelerate": {"--config_file", "--config-file", "--num_processes", "--num-processes", "--num_machines",
                   "--num-machines", "--machine_rank", "--machine-rank", "--main_process_ip", "--main-process-ip",
                   "--main_process_port", "--main-process-port", "--mixed_precision", "--mixed-precision",
                   "--gpu_ids", "--gpu-ids", "--dynamo_backend", "--dynamo-backend", "--deepspeed_config_file",
                   "--deepspeed-config-file", "--zero_stage", "--zero-stage", "--offload_optimizer_device",
                   "--offload-optimizer-device", "--offload_param_device", "--offload-param-device",
                   "--gradient_accumulation_steps", "--gradient-accumulation-steps", "--gradient_clipping",
                   "--gradient-clipping", "--deepspeed_multinode_launcher", "--deepspeed-multinode-launcher",
                   "--deepspeed_hostfile", "--deepspeed-hostfile", "--fsdp_sharding_strategy",
                   "--fsdp-sharding-strategy", "--fsdp_version", "--fsdp-version", "--fsdp_offload_params",
                   "--fsdp-offload-params", "--fsdp_auto_wrap_policy", "--fsdp_transformer_layer_cls_to_wrap",
                   "--fsdp_backward_prefetch", "--fsdp_state_dict_type", "--fsdp_activation_checkpointing",
                   "--fsdp_reshard_after_forward", "--num_cpu_threads_per_process", "--rdzv_backend", "--rdzv_conf",
                   "--max_restarts", "--monitor_interval", "--same_network", "--tpu_name", "--tpu_zone", "--module",
                   # torchrun's own options accelerate passes on (accelerate/commands/launch.py distributed_args)
                   "--role", "--tee", "-t", "--log_dir", "--log-dir", "--deepspeed_exclusion_filter",
                   "--deepspeed_inclusion_filter", "--deepspeed_moe_layer_cls_names", "--fsdp_min_num_params",
                   "--fsdp_forward_prefetch", "--fsdp_cpu_ram_efficient_loading", "--fsdp_sync_module_states",
                   "--fsdp_use_orig_params", "--fsdp_activation_checkpointing_offload", "--offload_optimizer_nvme_path",
                   "--offload_param_nvme_path", "--dynamo_mode", "--main_training_function", "--mpirun_hostfile",
                   "--env"},
    "deepspeed": {"--num_gpus", "--num-gpus", "--num_nodes", "--num-nodes", "-H", "--hostfile", "-i", "--include",
                  "-e", "--exclude", "--master_port", "--master-port", "--master_addr", "--master-addr", "--launcher",
                  "--launcher_args", "--ssh_port", "--node_rank", "--elastic_training", "--min_elastic_nodes",
                  "--max_elastic_nodes"},
    "composer": {"-n", "--nproc", "--world_size", "--base_rank", "--node_rank", "--master_addr", "--master_port",
                 "--stdout", "--stderr"},
    "lightning": {"--accelerator", "--strategy", "--devices", "--num-nodes", "--num_nodes", "--node-rank",
                  "--node_rank", "--main-address", "--main_address", "--main-port", "--main_port", "--precision"},
}
# Framework command-line tools that train from a config file: tool -> (subcommands that train, config flags)
FRAMEWORK_CLIS = {
    "oumi": ({"train"}, ("-c", "--config")),
    "llmtune": ({"run"}, ()),
    "xtuner": ({"train"}, ()),
    "litgpt": ({"finetune", "finetune_lora", "finetune_full", "finetune_adapter", "finetune_adapter_v2", "pretrain"},
               ("--config",)),
    "axolotl": ({"train"}, ()),
    "llamafactory-cli": ({"train"}, ()),
    "tune": ({"run"}, ("--config",)),
    "swift": ({"sft", "pt", "rlhf"}, ()),  # ms-swift: `--key value` flags, or (4.x) a YAML/JSON file first
    "verl-sft": ({"train"}, ()),  # `torchrun -m verl.trainer.fsdp_sft_trainer key=value ...`: its packaged config
    "verl-ppo": ({"train"}, ()),  # `python3 -m verl.trainer.main_ppo key=value ...`: its packaged config
    "openrlhf": ({"sft", "dpo", "rm", "kto", "prm", "ppo_ray"}, ()),  # `deepspeed --module openrlhf.cli.train_sft --flag v ...`
}


@dataclass(frozen=True)
class Launch:
    """What a launch command says, as the script will see it."""

    argv: tuple[str, ...]               # sys.argv[1:] of the script (or the framework tool's arguments)
    script: str | None = None           # the script path as written (relative to `cwd`)
    module: str | None = None           # `python -m pkg.mod` / `deepspeed --module pkg.mod`
    launcher: str = "python"            # python | torchrun | accelerate | deepspeed | composer | lightning | <framework tool>
    env: dict[str, str] = field(default_factory=dict)
    processes: int | None = None        # processes the launcher starts on this node (GPUs per node)
    nodes: int | None = None
    options: dict[str, str] = field(default_factory=dict)  # the launcher's own options (accelerate --mixed_precision ...)
    subcommand: str | None = None       # a framework tool's subcommand (litgpt finetune_lora, oumi train)
    origin: str = "the command line"    # where the command was written: "scripts/train.sh"
    line: int | None = None             # its line there
    cwd: str | None = None              # a `cd DIR &&` before the command, relative to where it is read
    flag_lines: tuple[tuple[str, int], ...] = ()  # (--flag, its own line) when the command spans lines
    runner: str | None = None           # the process launcher that runs a framework tool's entry module
                                        # (`torchrun --nproc_per_node 8 -m axolotl.cli.train X`: torchrun)
    documented: bool = False            # the README's command for a file named alone (`origin` is the README)
    entry: str | None = None            # the function a console script calls (`pkg.cli:main`): its module may be a
                                        # package's __init__.py

    def line_of(self, how: str) -> int | None:
        """The line a value given as `how` ("--flag value") was written on: the flag's own line of a
        command continued over several lines, else the command's line."""
        flag = how.split(" ", 1)[0].split("=", 1)[0]
        return dict(self.flag_lines).get(flag, self.line)

    @property
    def gpus(self) -> int | None:
        """GPUs the run spans: processes per node × nodes (None when the launcher does not say)."""
        if self.processes is None:
            return None
        return self.processes * (self.nodes or 1)

    def where(self) -> str:
        return f"{self.origin}:{self.line}" if self.line else self.origin


def _positive(text: str | None) -> int | None:
    try:
        n = int(str(text))
    except (TypeError, ValueError):
        return None
    return n if n >= 1 else None


def _visible_devices(env: dict[str, str]) -> int | None:
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None or not value.strip() or "$" in value:
        return None
    devices = [d.strip() for d in value.split(",") if d.strip()]
    if not all(re.fullmatch(r"\d+|(?:GPU|MIG)-[\w/-]+", d) for d in devices):
        return None  # `1,2,...` or `<gpu ids>`: a placeholder the user fills in, not a count
    return len(devices)


def tokens(command: str) -> list[str]:
    """A shell command line split into words (comments dropped, quotes removed). A command or arithmetic
    substitution left unexpanded (`$(($SLURM_NNODES * 2))`, `$(hostname -i)`) is one word, as bash reads it."""
    command, held = _hold_substitutions(command)
    try:
        words = shlex.split(command, comments=True, posix=True)
    except ValueError as exc:
        raise MemlintError(f"cannot read the command: {exc}") from None
    if held:
        words = [_HELD.sub(lambda m: held[int(m.group(1))], w) for w in words]
    return words


_HELD = re.compile(r"\x00(\d+)\x00")


def _hold_substitutions(command: str) -> tuple[str, list[str]]:
    """`command` with each `$(...)` outside single quotes (balanced, nested ones inside it) replaced by a marker
    with no space in it, and the substitutions in order; a `$(` left open is kept as written. One pass for the
    parentheses' pairs, one for the text: linear in the command's length."""
    if "$(" not in command:
        return command, []
    closes: dict[int, int] = {}
    opened: list[int] = []
    for k, ch in enumerate(command):
        if ch == "(":
            opened.append(k)
        elif ch == ")" and opened:
            closes[opened.pop()] = k
    out: list[str] = []
    held: list[str] = []
    i, quote = 0, ""
    while i < len(command):
        c = command[i]
        if c == "\\" and quote != "'":
            out.append(command[i:i + 2])
            i += 2
            continue
        if c in "'\"" and (not quote or quote == c):
            quote = "" if quote else c
        elif c == "$" and quote != "'" and command.startswith("$(", i) and i + 1 in closes:
            j = closes[i + 1]
            out.append(f"\x00{len(held)}\x00")
            held.append(command[i:j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), held


def _command_words(words: Sequence[str]) -> tuple[list[str], dict[str, str], str | None]:
    """(the command's own words, the variables set before it, a `cd DIR &&` before it): `cd DIR && cmd`, `VAR=1 cmd`
    and wrappers (`nohup`, `uv run`, `srun -N 2`) taken off the front, `&& next`, pipes and redirections off the end."""
    words = list(words)
    env: dict[str, str] = {}
    cwd: str | None = None
    while words:
        w = words[0]
        if w == "cd" and len(words) >= 3 and words[2] in ("&&", ";"):
            cwd = words[1] if cwd is None else f"{cwd}/{words[1]}"
            words = words[3:]
        elif _ENV.match(w):
            k, v = _ENV.match(w).groups()
            env[k] = v
            words = words[1:]
        elif w in _WRAPPERS:
            words = words[1:]
            valued = _WRAPPER_VALUED.get(w, frozenset())
            while words and words[0].startswith("-") and w in ("env", "nice", "stdbuf", "srun", "mpirun"):
                # `srun --job-name demo --gpus-per-node 1 cmd`: an option's value is not the command
                words = words[2:] if words[0] in valued and "=" not in words[0] else words[1:]
        elif (inner := _shell_string(words)) is not None:  # `bash -c "HF_TOKEN=x bash run.sh"`: the string's words
            words = inner
        elif len(words) >= 2 and (w, words[1]) in _RUNNERS:
            words = words[2:]
            while words and words[0].startswith("-") and words[0] != "--":  # `uv run --with torch --frozen train.py`
                words = words[2:] if words[0] in _RUNNER_VALUED and "=" not in words[0] else words[1:]
            words = words[1:] if words[:1] == ["--"] else words
        elif words[:3] == ["ray", "job", "submit"] and "--" in words:  # `ray job submit [opts] -- CMD`: CMD runs
            words = words[words.index("--") + 1:]
        elif (inner := _container(words)) is not None:
            words, inside = inner
            cwd = inside if cwd is None or inside is None or inside.startswith("/") else f"{cwd}/{inside}"
        else:
            break
    for sep in ("&&", "||", ";", "|", "&", ">", ">>", "2>&1", "1>", "2>"):
        if sep in words:
            words = words[: words.index(sep)]
    return words, env, cwd


def parse_command(words: Sequence[str], origin: str = "the command line", line: int | None = None,
                  scripts: dict[str, str] | None = None) -> Launch:
    """The Launch of one command (already split into words). Raises MemlintError when it runs no
    Python script memlint can read (a shell builtin, an unknown tool). `scripts`: the checkout's console
    scripts (console_scripts()), run as `python -m` their module."""
    words, env, cwd = _command_words(words)
    if not words:
        raise MemlintError("the command runs nothing")
    head = Path(words[0]).name
    rest = words[1:]
    base = {"env": env, "origin": origin, "line": line, "cwd": cwd}
    if scripts and words[0] in scripts:  # `llm-training fit --config X`: the package's entry point, its module
        module, _, entry = scripts[words[0]].partition(":")
        return _framework_module(Launch(tuple(rest), module=module, processes=_visible_devices(env), entry=entry or None,
                                        **base))
    if _PYTHON.match(words[0]):
        return _framework_module(_python(rest, base))
    if head in ("torchrun", "torch.distributed.run"):
        return _framework_module(_launcher("torchrun", rest, base))
    if head == "accelerate" and rest[:1] == ["launch"]:
        return _framework_module(_launcher("accelerate", rest[1:], base))
    if head == "deepspeed":
        return _framework_module(_launcher("deepspeed", rest, base))
    if head == "composer":
        return _launcher("composer", rest, base)
    if head == "lightning" and rest[:2] == ["run", "model"]:
        return _launcher("lightning", rest[2:], base)
    if head == "modal" and rest[:1] == ["run"]:
        # `modal run train.py[::fn] --flag x`: the app's functions run on the GPUs their decorators ask for
        target = next((w for w in rest[1:] if not w.startswith("-")), None)
        if target is None or not target.split("::")[0].endswith(".py"):
            raise NotFollowed("`modal run` names no Python file (a module path is not read)")
        return Launch(tuple(rest[rest.index(target) + 1:]), script=target.split("::")[0], **base)
    if head == "fabric" and rest[:1] == ["run"]:  # Lightning 2.2+: `fabric run [model] SCRIPT`, lightning run model's options
        return _launcher("lightning", rest[2:] if rest[1:2] == ["model"] else rest[1:], base)
    if head == "lightning" and rest[:1] == ["run"] and rest[1:2] in (["app"], ["experiment"]):
        # `lightning run app|experiment SCRIPT --cloud ...`: the script runs as itself (on machines its options name)
        # options before and after it are the app's, not the script's (its arguments keep their defaults)
        script = next((w for w in rest[2:] if w.endswith(".py")), None)
        if script is None:
            raise NotFollowed(f"`lightning {' '.join(rest[:2])}` names no Python file")
        return Launch((), script=script, processes=_visible_devices(env), **base)
    if head in FRAMEWORK_CLIS:
        subs, _ = FRAMEWORK_CLIS[head]
        if rest and rest[0] in subs:
            return Launch(tuple(rest[1:]), launcher=head, subcommand=rest[0], processes=_visible_devices(env), **base)
        raise MemlintError(f"`{head} {rest[0] if rest else ''}` does not train (memlint reads `{head} "
                           f"{'|'.join(sorted(subs))}`)")
    if words[0].endswith(".py"):
        return Launch(tuple(rest), script=words[0], processes=_visible_devices(env), **base)
    raise NotFollowed(f"{words[0]}: not a Python launcher memlint reads (python, torchrun, accelerate launch, "
                       f"deepspeed, composer, lightning run model|app, fabric run, modal run, a framework CLI, a console script of the checkout's "
                       f"pyproject.toml or setup.py, a shell script: bash run.sh, or make TARGET)")


_SETUP_ENTRY = re.compile(r"""['"]\s*([A-Za-z0-9_.\-]+)\s*=\s*([A-Za-z_][\w.]*\s*(?::\s*[\w.]+)?)\s*['"]""")


def console_scripts(start: Path) -> dict[str, str]:
    """{console script: the module it runs} of the checkout holding `start`: the closest folder at or above it (five
    levels) with a pyproject.toml ([project.scripts], [tool.poetry.scripts]), a setup.cfg ([options.entry_points]
    console_scripts) or a setup.py (its console_scripts strings), read as text, never run."""
    from memlint.files import read_text

    for folder in [start, *start.resolve().parents][:6]:
        found: dict[str, str] = {}
        names = [n for n in ("pyproject.toml", "setup.cfg", "setup.py") if (folder / n).is_file()]
        for name in names:
            try:
                text = read_text(folder / name, encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            found.update(_entry_points(name, text))
        if names:
            return found
    return {}


def _entry_points(name: str, text: str) -> dict[str, str]:
    if name == "pyproject.toml":
        import tomllib

        try:
            doc = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError):
            return {}
        tables = [doc.get("project", {}).get("scripts"), doc.get("tool", {}).get("poetry", {}).get("scripts")]
        out = {}
        for table in tables:
            for k, v in (table if isinstance(table, dict) else {}).items():
                ref = v.get("reference", v.get("callable")) if isinstance(v, dict) else v
                if isinstance(k, str) and isinstance(ref, str) and ref.strip():
                    out[k] = _entry_ref(ref)
        return out
    if name == "setup.cfg":
        import configparser

        cp = configparser.ConfigParser()
        try:
            cp.read_string(text)
            lines = cp.get("options.entry_points", "console_scripts", fallback="")
        except (configparser.Error, ValueError):
            return {}
        return {k.strip(): _entry_ref(v) for k, _, v in (ln.partition("=") for ln in lines.splitlines() if "=" in ln)}
    at = text.find("console_scripts")
    return {m.group(1): _entry_ref(m.group(2)) for m in _SETUP_ENTRY.finditer(text[at:at + 4000])} if at >= 0 else {}


def _entry_ref(ref: str) -> str:
    """`pkg.cli:main [extra]` as "pkg.cli:main" (module, then the function after a colon when given)."""
    module, _, func = ref.split("[", 1)[0].partition(":")
    return f"{module.strip()}:{func.strip()}" if func.strip() else module.strip()


def _python(rest: list[str], base: dict) -> Launch:
    """`python [-u] [-X opt] script.py args` or `python -m module args` (torch.distributed.run and
    accelerate.commands.launch are launchers)."""
    i = 0
    while i < len(rest) and rest[i].startswith("-") and rest[i] != "-m":
        i += 2 if rest[i] in ("-X", "-W") else 1
    if i < len(rest) and rest[i] == "-m" and i + 1 < len(rest):
        module = rest[i + 1]
        args = rest[i + 2:]
        if module in ("torch.distributed.run", "torch.distributed.launch"):
            return _launcher("torchrun", args, base)
        if module in ("accelerate.commands.launch", "accelerate"):
            return _launcher("accelerate", args[1:] if module == "accelerate" and args[:1] == ["launch"] else args, base)
        if module == "deepspeed":
            return _launcher("deepspeed", args, base)
        return Launch(tuple(args), module=module, processes=_visible_devices(base["env"]), **base)
    if i >= len(rest):
        raise MemlintError("`python` without a script")
    return Launch(tuple(rest[i + 1:]), script=rest[i], processes=_visible_devices(base["env"]), **base)


def _launcher(name: str, rest: list[str], base: dict) -> Launch:
    takes = _TAKES_VALUE[name]
    options: dict[str, str] = {}
    module = None
    i = 0
    while i < len(rest):
        w = rest[i]
        if w == "--":
            i += 1
            break
        if not w.startswith("-"):
            break
        if "=" in w and w.startswith("--"):
            k, v = w.split("=", 1)
            options[k.replace("-", "_").lstrip("_")] = v
            i += 1
            continue
        key = w.lstrip("-").replace("-", "_")
        if w in ("-m", "--module") and name != "accelerate":
            if name == "deepspeed" or name == "torchrun":
                if i + 1 < len(rest) and not rest[i + 1].startswith("-") and not rest[i + 1].endswith(".py"):
                    module = rest[i + 1]
                    i += 2
                    break
            options[key] = "true"
            i += 1
            continue
        if w in takes and i + 1 < len(rest):
            options[key] = rest[i + 1]
            i += 2
            continue
        options[key] = "true"
        i += 1
    if module is None and name == "accelerate" and options.get("module") not in (None, "true"):
        module = options.pop("module")
    script = None
    if module is None:
        if i >= len(rest):
            raise MemlintError(f"`{name}` without a script")
        script, i = rest[i], i + 1
        if name == "accelerate" and "true" in (options.get("m"), options.get("module")):
            module, script = script, None  # `accelerate launch -m pkg.mod` (-m/--module is a switch there)
    processes, nodes = _processes(name, options, base["env"])
    return Launch(tuple(rest[i:]), script=script, module=module, launcher=name, processes=processes, nodes=nodes,
                  options=options, **base)


def entry_module(module: str) -> tuple[str, str | None] | None:
    """(the framework tool, the subcommand it runs; None: the next word names it) when `module` is a training
    framework's command-line entry module (frameworks.json "entry_modules": `-m axolotl.cli.train`,
    `-m llamafactory.cli train`), which reads the framework's config as its tool does."""
    from memlint.data import load

    for fw in load("frameworks.json")["frameworks"].values():
        hit = fw.get("entry_modules", {}).get(module)
        if hit is not None:
            return hit[0], hit[1]
    return None


def framework_script(launch: Launch) -> Launch | None:
    """A launch of a framework's own entry script that is not a file of the checkout (`python ../../src/train_bash.py
    --stage sft --finetuning_type lora ...`, run inside a clone of LLaMA-Factory the launcher set up), recognised by its
    name and the flags only that framework takes (frameworks.json "entry_scripts"), as the framework tool's command
    (`llamafactory-cli train --stage sft ...`), the process launcher kept as its runner; None for any other launch."""
    from dataclasses import replace

    from memlint.data import load

    if not launch.script or not launch.argv:
        return None
    flags = {w.split("=", 1)[0] for w in launch.argv if w.startswith("--")}
    for fw in load("frameworks.json")["frameworks"].values():
        entry = fw.get("entry_scripts")
        if entry and Path(launch.script).name in entry["names"] and flags >= set(entry["signature"]):
            tool, sub = entry["tool"]
            return replace(launch, script=None, launcher=tool, subcommand=sub, runner=launch.launcher)
    return None


def vendored_entry(launch: Launch, script: Path) -> Launch | None:
    """The framework's own entry script kept in the checkout (`torchrun LLaMA-Factory/src/train.py --stage sft ...`, a
    vendored clone): recognised as framework_script does, and by its import of the framework's package
    (frameworks.json entry_scripts "imports"), it is the framework tool's command; None for any other script."""
    from memlint.data import load
    from memlint.files import read_text

    tool = framework_script(launch)
    if tool is None:
        return None
    words = next((fw["entry_scripts"].get("imports", ()) for fw in load("frameworks.json")["frameworks"].values()
                  if fw.get("entry_scripts", {}).get("tool") == [tool.launcher, tool.subcommand]), ())
    try:
        head = read_text(script, 1 << 20, what="sibling-module budget")[:8000]
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return tool if any(re.search(rf"^\s*(?:from|import)\s+{re.escape(w)}\b", head, re.M) for w in words) else None


def _framework_module(launch: Launch) -> Launch:
    """A launch of a framework's entry module (`torchrun --nproc_per_node 8 -m axolotl.cli.train X --deepspeed Y`) as
    the framework tool's own command (`axolotl train X --deepspeed Y`), the process launcher kept as its runner:
    the config is read by the framework's reader with the command's overrides and the launcher's GPUs, whether or
    not the framework's source is in the checkout."""
    hit = entry_module(launch.module) if launch.module else None
    if hit is None:
        return launch
    tool, sub = hit
    argv = list(launch.argv)
    if sub is None:
        sub, argv = (argv[0], argv[1:]) if argv else ("", [])
    subs, _ = FRAMEWORK_CLIS[tool]
    if sub not in subs:
        raise MemlintError(f"-m {launch.module} {sub}: does not train (memlint reads {'|'.join(sorted(subs))})")
    from dataclasses import replace

    return replace(launch, argv=tuple(argv), module=None, launcher=tool, subcommand=sub, runner=launch.launcher)


def _processes(name: str, options: dict[str, str], env: dict[str, str]) -> tuple[int | None, int | None]:
    """(processes per node, nodes) from the launcher's options (None where it leaves it to the machine)."""
    raw_nodes = options.get("nnodes") or options.get("num_machines") or options.get("num_nodes")
    nodes = _positive(raw_nodes.split(":")[-1] if raw_nodes else None)
    if name == "torchrun":
        n = options.get("nproc_per_node")
        if n is None:  # torchrun's default: one process
            return 1, nodes
        if n in ("gpu", "auto"):
            return _visible_devices(env), nodes
        return _positive(n), nodes
    if name == "accelerate":
        total = _positive(options.get("num_processes"))
        if total is None and "config_file" not in options and not nodes and "num_processes" not in options \
                and not {"cpu", "tpu", "use_cpu"} & set(options):
            # no config: --num_processes defaults to the GPUs the process sees (launch.py _validate_launch_command)
            return _visible_devices(env), nodes
        if total is not None and nodes:
            return max(total // nodes, 1), nodes
        return total, nodes
    if name == "deepspeed":
        n = _positive(options.get("num_gpus"))
        if n is None and options.get("include", "").count(":") and "$" not in options["include"].split(":")[-1]:
            # --include localhost:0,1 (a list the shell fills from a variable is the user's environment)
            n = len(options["include"].split(":")[-1].split(","))
        return n or _visible_devices(env), nodes
    if name == "composer":
        return _positive(options.get("n") or options.get("nproc")), nodes
    if name == "lightning":
        return _positive(options.get("devices")), nodes
    return None, nodes


def _config_arg(launch: Launch) -> str | None:
    """The config file a framework CLI trains from: `oumi train -c X`, `llmtune run X`, `litgpt finetune_lora --config X`."""
    _, flags = FRAMEWORK_CLIS[launch.launcher]
    words = list(launch.argv)
    for i, w in enumerate(words):
        for f in flags:
            if w == f and i + 1 < len(words):
                return words[i + 1]
            if w.startswith(f + "="):
                return w.split("=", 1)[1]
    free = [w for w in words if not w.startswith("-")]
    if launch.launcher == "litgpt":
        return None
    if launch.launcher in FLAGS_ONLY and words and words[0].startswith("-"):
        return None  # `llamafactory-cli train --stage sft --model_name_or_path X ...`: the flags are the config
    return free[0] if free else None


def resolve_module(module: str, roots: Sequence[Path], package: bool = False) -> Path | None:
    """The file `python -m pkg.mod` runs, looked up under each root (its src/ folder, and the package folders its
    pyproject.toml or setup.cfg declares: an editable install of the checkout imports from there). `package`: the
    module a console script imports its function from (`pkg:main`), which may be a package's __init__.py."""
    parts = module.split(".")
    for root in roots:
        for base in (root, root / "src", *declared_package_roots(root)):
            cands = (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__main__.py"))
            for cand in cands + ((base.joinpath(*parts, "__init__.py"),) if package else ()):
                if is_file(cand):
                    return cand
    return None


def declared_package_roots(root: Path) -> tuple[Path, ...]:
    """The folders the project at `root` installs its packages from, as its pyproject.toml declares them (setuptools'
    `packages.find.where` and `package-dir`, poetry's `packages = [{from = ...}]`, hatch's wheel `packages`) or its
    setup.cfg (`package_dir = =src`, `[options.packages.find] where`); read as text, never run."""
    import configparser
    import tomllib

    from memlint.files import allowed, read_text

    out: list[str] = []
    py = root / "pyproject.toml"
    if allowed(py) and is_file(py):
        try:
            doc = tomllib.loads(read_text(py, encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
            doc = {}
        tool = doc.get("tool", {}) if isinstance(doc.get("tool"), dict) else {}
        st = tool.get("setuptools", {}) if isinstance(tool.get("setuptools"), dict) else {}
        find = (st.get("packages") or {}).get("find") if isinstance(st.get("packages"), dict) else None
        if isinstance(find, dict) and isinstance(find.get("where"), list):
            out += [w for w in find["where"] if isinstance(w, str)]
        if isinstance(st.get("package-dir"), dict) and isinstance(st["package-dir"].get(""), str):
            out.append(st["package-dir"][""])
        poetry = tool.get("poetry", {}) if isinstance(tool.get("poetry"), dict) else {}
        out += [p["from"] for p in poetry.get("packages", []) if isinstance(p, dict) and isinstance(p.get("from"), str)]
        wheel = (((tool.get("hatch") or {}).get("build") or {}).get("targets") or {}).get("wheel") or {} \
            if isinstance(tool.get("hatch"), dict) else {}
        if isinstance(wheel, dict) and isinstance(wheel.get("packages"), list):
            out += [str(Path(p).parent) for p in wheel["packages"] if isinstance(p, str) and "/" in p]
    setup = root / "setup.py"
    if allowed(setup) and is_file(setup):  # `package_dir={"": "src"}`, `find_packages("src")`: read as text, never run
        try:
            text = read_text(setup, encoding="utf-8")[:200_000]
        except (OSError, UnicodeDecodeError):
            text = ""
        out += re.findall(r"""package_dir\s*=\s*\{\s*['"]{2}\s*:\s*['"]([^'"]+)['"]""", text)
        out += re.findall(r"""find_(?:namespace_)?packages\(\s*(?:where\s*=\s*)?['"]([^'"]+)['"]""", text)
    cfg = root / "setup.cfg"
    if allowed(cfg) and is_file(cfg):
        parser = configparser.ConfigParser()
        try:
            parser.read_string(read_text(cfg, encoding="utf-8"))
            pkg_dir = parser.get("options", "package_dir", fallback="")
            out += [line.split("=", 1)[1].strip() for line in pkg_dir.splitlines() if line.strip().startswith("=")]
            out += [w.strip() for w in parser.get("options.packages.find", "where", fallback="").split() if w.strip()]
        except (OSError, UnicodeDecodeError, configparser.Error):
            pass
    return tuple(dict.fromkeys(root / w for w in out if w not in ("", ".") and not os.path.isabs(w) and ".." not in w))


_SHELLS = {"bash", "sh", "zsh", "dash", "fish"}


def _config_of_missing_script(launch: Launch, base: Path) -> Path | None:
    """A command whose script is not in the checkout (a framework cloned beside it: `python axolotl/scripts/finetune.py
    configs/x.yml`) but whose argument is a config of the checkout that a framework reader knows: that config, read
    as its framework runs it (the plan says the script was not read)."""
    from memlint.extract.configs import detect_file

    for word in launch.argv:
        if word.startswith("-") or not word.lower().endswith((".yaml", ".yml", ".json", ".toml")):
            continue
        cand = base / os.path.expanduser(word)
        if is_file(cand) and detect_file(cand) is not None:
            return cand
    return None


def shell_script(words: Sequence[str]) -> tuple[str, tuple[str, ...], dict[str, str], str | None] | None:
    """(script, its arguments, the variables set before it, a `cd DIR &&` before it) when the command
    runs a shell script (`bash scripts/run.sh 2 /ckpt`, `sh -x run.sh`, `./run.sh`); None otherwise."""
    words, env, cwd = _command_words(words)
    if not words:
        return None
    if Path(words[0]).name in _SHELLS:
        i = 1
        while i < len(words) and words[i].startswith("-") and words[i] not in ("-c", "--"):
            i += 1  # bash -x, sh -e
        if i >= len(words) or words[i] == "-c":
            return None
        return words[i], tuple(words[i + 1:]), env, cwd
    if Path(words[0]).name == "sbatch":  # `sbatch [options] job.slurm ARGS`: the job script runs with ARGS
        i = 1
        while i < len(words) and words[i].startswith("-"):
            i += 2 if "=" not in words[i] and words[i] in _SBATCH_VALUED else 1
        if i >= len(words) or words[i] == "--wrap":
            return None
        return words[i], tuple(words[i + 1:]), env, cwd
    if words[0].endswith(LAUNCHER_SUFFIXES):
        return words[0], tuple(words[1:]), env, cwd
    return None


# sbatch's options that take a value as the next word (`-p gpu`, `--nodes 2`); the rest are flags or `--opt=value`
_SBATCH_VALUED = frozenset({
    "-p", "-N", "-n", "-t", "-J", "-o", "-e", "-A", "-c", "-G", "-w", "-x", "-q", "-D", "-a", "-d", "-C",
    "--partition", "--nodes", "--ntasks", "--time", "--job-name", "--output", "--error", "--account", "--gres",
    "--cpus-per-task", "--mem", "--mem-per-cpu", "--mem-per-gpu", "--qos", "--chdir", "--array", "--dependency",
    "--exclude", "--nodelist", "--gpus", "--gpus-per-node", "--gpus-per-task", "--ntasks-per-node", "--constraint",
    "--reservation", "--signal", "--export", "--mail-type", "--mail-user", "--begin", "--comment"})
# The options of wrappers that take a value as the next word (`srun --job-name demo`, `mpirun -np 4`): srun takes
# sbatch's and a few of its own
_WRAPPER_VALUED = {
    "srun": _SBATCH_VALUED | frozenset({"--cpu-bind", "--distribution", "-m", "--mpi", "--ntasks-per-gpu",
                                        "--container-image", "--container-mounts", "--container-workdir"}),
    "mpirun": frozenset({"-np", "-n", "-x", "-H", "--host", "--hostfile", "-hostfile", "--map-by", "--bind-to",
                         "-npernode", "--npernode", "-N"}),
}


def make_command(words) -> tuple[str | None, tuple[str, ...], dict[str, str], dict[str, str], str | None] | None:
    """(the Makefile named by -f, the goals, the variables set on make's command line, the variables set before
    it, the folder: `cd DIR &&` and -C DIR) when the command runs make (`make train`, `make -C exp train
    MODEL=x`); None otherwise."""
    import os

    words, env, cwd = _command_words(words)
    if not words or Path(words[0]).name not in ("make", "gmake"):
        return None
    makefile, goals, variables = None, [], {}
    i = 1
    while i < len(words):
        w = words[i]
        if w in ("-f", "--file", "--makefile", "-C", "--directory") and i + 1 < len(words):
            if w in ("-C", "--directory"):
                cwd = os.path.join(cwd, words[i + 1]) if cwd else words[i + 1]
            else:
                makefile = words[i + 1]
            i += 2
            continue
        if w.startswith(("--file=", "--makefile=", "--directory=")):
            key, value = w.split("=", 1)
            if key == "--directory":
                cwd = os.path.join(cwd, value) if cwd else value
            else:
                makefile = value
        elif w in ("-o", "-W", "-I") or (w in ("-j", "-l") and i + 1 < len(words) and words[i + 1].replace(".", "").isdigit()):
            i += 2  # an option and its value (make -j 8)
            continue
        elif _ENV.match(w):
            k, v = w.split("=", 1)
            variables[k] = v
        elif not w.startswith("-"):
            goals.append(w)
        i += 1
    return makefile, tuple(goals), variables, env, cwd


def command_target(words: Sequence[str], cwd: Path | None = None):
    """The file a launch command runs (a script, a module, or a framework config) as a files.Target
    carrying the Launch, so it is read with the command's arguments."""
    import os

    from memlint.files import Target

    cwd = cwd or Path.cwd()
    try:
        launch = parse_command(words)
    except MemlintError:
        own, _, moved = _command_words(words)
        scripts = console_scripts(cwd / moved if moved else cwd) if own else {}
        if not own or own[0] not in scripts:
            raise
        launch = parse_command(words, scripts=scripts)
    base = cwd / launch.cwd if launch.cwd else cwd
    if launch.script and (tool := vendored_entry(launch, base / os.path.expanduser(launch.script))) is not None \
            and flags_config(tool):  # `torchrun LLaMA-Factory/src/train.py --stage sft ...`: the tool's own command
        return Target(base / f"{tool.launcher} {tool.subcommand}", f"{tool.launcher} {tool.subcommand}", True, tool)
    if launch.script:
        path = base / os.path.expanduser(launch.script)
        shown = os.path.normpath(os.path.join(launch.cwd or "", launch.script))
    elif launch.module:
        path = resolve_module(launch.module, [base, *base.parents][:6], package=launch.entry is not None)
        if path is None:
            raise NotFollowed(f"-m {launch.module}: no such module under {base} (a module of an installed package: "
                              "memlint reads the checkout's own files; name its config or script)")
        shown = os.path.relpath(path, cwd)
    else:
        ref = _config_arg(launch)
        copy = packaged_copy(launch, base)
        if ref is None and copy is not None:  # a checkout that vendors the framework: its own copy of the config
            return Target(copy, os.path.relpath(copy, cwd), True, launch)
        if ref is None and (launch.launcher == "litgpt" or flags_config(launch)):
            # litgpt's defaults with the command's flags; LLaMA-Factory's whole config given as flags
            return Target(base / f"{launch.launcher} {launch.subcommand}", f"{launch.launcher} {launch.subcommand}",
                          True, launch)
        if ref is None:
            raise MemlintError(f"`{launch.launcher} {launch.subcommand}`: no config file in the command")
        path = tool_config(launch, base, ref)
        shown = os.path.relpath(path, cwd) if path.is_absolute() else os.path.normpath(os.path.join(launch.cwd or "", ref))
        if not is_file(path) and bundled_config_ref(launch) == ref:
            return bundled_target(launch, ref, base)  # `tune run R --config llama3_1/8B_lora`, torchtune not installed
    if not path.is_file():
        config = _config_of_missing_script(launch, base) if launch.script else None
        if config is not None:  # `accelerate launch axolotl/scripts/finetune.py cfg.yml`, axolotl cloned apart
            return Target(config, os.path.normpath(os.path.join(launch.cwd or "", os.path.relpath(config, base))),
                          True, launch)
        raise MemlintError(f"{shown}: no such file (the command's {'script' if launch.script else 'config'})")
    config = framework_config(launch, base)
    if config is not None:
        path, shown = config, os.path.normpath(os.path.join(launch.cwd or "", os.path.relpath(config, base)))
    return Target(path, shown, True, launch)


def packaged_copy(launch: Launch, base: Path) -> Path | None:
    """The checkout's own copy of the config a framework packages (frameworks.json "packaged_config": verl's
    verl/trainer/config/sft_trainer.yaml), where a checkout vendoring the framework (and maybe editing it) runs its
    entry module from `base`: that file, under the command's overrides, is the run's config; None elsewhere."""
    from memlint.extract.configs.frameworks import table
    from memlint.extract.configs.overrides import PACKAGED_CONFIG, TOOLS

    if launch.launcher not in PACKAGED_CONFIG:
        return None
    if any(w.split("=", 1)[0] in _HYDRA_FLAGS for w in launch.argv):
        return None  # `--config-path cfg --config-name my_ppo`: the command composes its own config
    rel = table().get(TOOLS[launch.launcher][0], {}).get("packaged_config")
    cand = base / rel if rel else None
    return cand if cand is not None and is_file(cand) else None


def tool_config(launch: Launch, base: Path, ref: str) -> Path:
    """The config file a framework CLI's `ref` names: a path, else a config of the tool's own package the way the
    tool looks it up: `xtuner train NAME` (configs/**/NAME.py), `tune run R --config llama3_2/3B_lora_single_device`
    (torchtune's built-in recipes/configs/NAME.yaml, in a torchtune checkout above `base` or in the installed
    distribution, found from its file list without importing it)."""
    path = base / ref
    if is_file(path):
        return path
    if launch.launcher == "xtuner":
        hits = sorted(h for h in base.glob(f"**/configs/**/{ref}.py") if is_file(h)) if ".." not in ref else []
        return hits[0] if hits else path
    if launch.launcher == "tune" and not Path(ref).suffix:
        for root in [base, *base.parents][:6]:
            cand = root / "recipes" / "configs" / f"{ref}.yaml"
            if is_file(cand):
                return cand
        from memlint.library.versions import distribution_file

        cand = distribution_file("torchtune", f"recipes/configs/{ref}.yaml") if ".." not in ref else None
        if cand is not None:  # the installed torchtune's own file (found from its RECORD): memlint's look-up, read
            from memlint.files import allow

            allow([cand])
            return cand
    return path


def bundled_config_ref(launch: Launch) -> str | None:
    """The config name of a framework tool's command when it names a built-in config memlint bundles (torchtune's
    recipes/configs, at any version it shipped): the name alone, no file; which version's text is read is
    builtin_tool_config's, inside the checkout's pins. None for any other launch."""
    if launch.launcher != "tune":
        return None
    ref = _config_arg(launch)
    if not ref or Path(ref).suffix or ".." in ref or ref.startswith("/"):
        return None
    from memlint.extract.configs.torchtune_builtin import known_config

    return ref if known_config(ref) else None


def bundled_target(launch: Launch, ref: str, base: Path) -> Target:
    """The target of a bundled built-in config: a path under `base` (none on disk), its text read later."""
    from memlint.files import Target

    return Target(base / "recipes" / "configs" / f"{ref}.yaml", f"torchtune's built-in config {ref}", False, launch)


def builtin_tool_config(launch: Launch, ref: str) -> tuple[str, str] | None:
    """(text, how it is shown) of a framework tool's built-in config memlint bundles, for a name the checkout and the
    installed packages do not hold: torchtune's recipes/configs at the pinned version (called inside the checkout's
    pins); ("", why) for a name that version did not ship."""
    if ref != bundled_config_ref(launch):
        return None
    from memlint.extract.configs.torchtune_builtin import builtin_config

    hit = builtin_config(ref)
    if hit is None:  # a name torchtune shipped at other versions than this one
        from memlint.library.versions import shown_version

        return "", f"torchtune's built-in config {ref} (not shipped by {shown_version('torchtune')})"
    text, tags = hit
    return text, f"torchtune's built-in config {ref} (bundled with memlint; {tags})"


def framework_config(launch: Launch, base: Path) -> Path | None:
    """A script whose first argument is a framework config memlint reads (llm-foundry's `composer
    train.py yamls/x.yaml`): the run is that config."""
    if not launch.script:
        # a framework's entry module given its config by a flag (`torchrun -m torchtitan.train --job.config_file X`)
        return _flag_config(launch, base) if launch.module else None
    # the script's first argument (`train.py recipe.yaml`, read as sys.argv[1]); the value of a flag
    # (`sft.py --config recipe.yaml`) is the script's own parser's business (TrlParser reads it)
    first = launch.argv[0] if launch.argv else ""
    from memlint.extract.configs import detect_file

    flagged = _flag_config(launch, base) or _hydra_config(launch, base)
    if flagged is not None:
        return flagged
    if first.startswith("-") or not first.lower().endswith((".yaml", ".yml")):
        return None

    cand = base / first
    kind = detect_file(cand) if is_file(cand) else None
    if kind == "trl-recipe" and _parses_yaml_itself(base / launch.script):
        return None  # HfArgumentParser arguments the script reads itself (parse_yaml_file(sys.argv[1]))
    return cand if kind is not None else None


def _flag_config(launch: Launch, base: Path) -> Path | None:
    """A framework's own entry script given its config by a flag (H2O LLM Studio's
    `python llm_studio/train.py -Y cfg.yaml`): the flags are the framework's `read_from_flag`."""
    from memlint.extract.configs import detect_file
    from memlint.extract.configs.frameworks import table

    argv = list(launch.argv or ())
    pairs = [(w, argv[i + 1]) for i, w in enumerate(argv[:-1])] + [tuple(w.split("=", 1)) for w in argv if "=" in w]
    first = argv[0] if argv and argv[0].isidentifier() else None  # a subcommand (`fit --config X`)
    for word, value in pairs:
        for name, fw in table().items():
            if first and "entry_subcommands" in fw and first not in fw["entry_subcommands"]:
                continue  # `my-cli validate --config X`: not a training run
            if word in fw.get("read_from_flag", ()) and value.lower().endswith((".yaml", ".yml", ".toml")):
                cand = base / value
                if is_file(cand) and detect_file(cand) == name:
                    return cand
    return None


_HYDRA_FLAGS = {"--config-path": "path", "-cp": "path", "--config-name": "name", "-cn": "name"}


def _hydra_config(launch: Launch, base: Path) -> Path | None:
    """A Hydra entry script of a framework whose configs memlint reads (NeMo's `megatron_gpt_finetuning.py`,
    frameworks.json "hydra"): the config it composes from `--config-path`/`--config-name` (-cp/-cn) or, where the
    command leaves them out, from its own decorator (`@hydra_runner(config_path="conf", config_name="...")`); the
    path is absolute or relative to the script's folder, as Hydra resolves it. Its key=value overrides are applied
    when the config is read (configs/overrides.py)."""
    import os

    from memlint.extract.configs import detect_file
    from memlint.extract.configs.frameworks import table

    kinds = {name for name, fw in table().items() if "hydra" in fw}
    if not kinds:
        return None
    argv, given = list(launch.argv or ()), {}
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag in _HYDRA_FLAGS:
            given[_HYDRA_FLAGS[flag]] = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    script = base / (launch.script or "")
    own = _hydra_decorator(script, {d for k in kinds for d in table()[k]["hydra"]["decorators"]})
    path, name = given.get("path", own.get("config_path")), given.get("name", own.get("config_name"))
    if not path or not name:
        return None
    folder = Path(os.path.expanduser(path))
    folder = folder if folder.is_absolute() else script.parent / folder
    cand = Path(os.path.normpath(folder / (name if name.lower().endswith((".yaml", ".yml")) else name + ".yaml")))
    return cand if is_file(cand) and detect_file(cand) in kinds else None


_DECORATORS: dict[tuple, dict[str, str]] = {}  # (file identity, names) -> what _hydra_decorator found: parsed once


def _hydra_decorator(script: Path, names: set[str]) -> dict[str, str]:
    """config_path / config_name of the script's Hydra decorator (string literals only): once per file (a launcher
    naming one script twenty times reads it once), only when the text names a decorator, and within the script
    budget (a 2 MB script is not parsed); from the parse the script's reading shares (extract/parsed.py)."""
    import os

    try:
        st = os.stat(script)
    except (OSError, ValueError):
        return {}
    key = (os.path.abspath(script), st.st_ino, st.st_size, st.st_mtime_ns, tuple(sorted(names)))
    if key not in _DECORATORS:
        if len(_DECORATORS) > 1024:
            _DECORATORS.clear()
        _DECORATORS[key] = _read_hydra_decorator(script, names)
    return dict(_DECORATORS[key])


def _read_hydra_decorator(script: Path, names: set[str]) -> dict[str, str]:
    import libcst as cst

    from memlint.extract.budget import MAX_SCRIPT_BYTES
    from memlint.extract.parsed import ParserSyntaxError, parse
    from memlint.files import read_text

    try:
        text = read_text(script, min(MAX_SCRIPT_BYTES, max_file_size()), encoding="utf-8")
    except (OSError, ValueError, MemlintError):  # files.Refused is an OSError
        return {}
    from memlint.extract.budget import over_script_budget

    if not any(n in text for n in names) or over_script_budget(text) is not None:
        return {}
    try:
        module = parse(text).module
    except (ParserSyntaxError, MemlintError, RecursionError, MemoryError):
        return {}
    found: dict[str, str] = {}

    class Decorators(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            for dec in node.decorators:
                call = dec.decorator
                if found or not isinstance(call, cst.Call):
                    continue
                func = call.func
                called = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
                if called in names:
                    found.update({a.keyword.value: a.value.evaluated_value for a in call.args
                                  if a.keyword is not None and a.keyword.value in ("config_path", "config_name")
                                  and isinstance(a.value, cst.SimpleString) and isinstance(a.value.evaluated_value, str)})
                    found.setdefault("", "")  # the decorator was found, whatever it names
            return not found

    try:
        module.visit(Decorators())
    except RecursionError:
        return {}
    found.pop("", None)
    return found


def _parses_yaml_itself(script: Path) -> bool:
    """Whether the script hands a YAML file to its HfArgumentParser itself (then the script, with the
    rest of the command over the YAML, says more than the YAML read alone): in its own text, or in a module beside
    it that it imports (a repository's own H4ArgumentParser whose parse() reads sys.argv[1])."""
    from memlint.files import is_file, read_bytes

    def text_of(path: Path) -> str:
        try:
            return read_bytes(path).decode("utf-8", errors="replace")
        except (OSError, MemlintError):
            return ""

    def says(text: str) -> bool:
        return "parse_yaml_file(" in text or "parse_yaml_and_args(" in text

    text = text_of(script)
    if says(text):
        return True
    found = re.findall(r"^[ \t]*(?:from[ \t]+\.?(\w+)[ \t]+import|import[ \t]+(\w+))", text, re.M)
    names = dict.fromkeys(n for pair in found for n in pair if n)  # in the file's order: the same files every run
    beside = [script.parent / f"{n}.py" for n in names][:32]
    if any(is_file(p) and says(text_of(p)) for p in beside):
        return True
    # a package of the checkout the script imports (`from alignment import H4ArgumentParser` with the checkout's
    # src/alignment/ installed in editable mode): its modules
    for n in list(names)[:16]:
        if is_file(script.parent / f"{n}.py"):
            continue
        found_mod = resolve_module(n, list(script.parents)[:4], package=True)
        if found_mod is None or found_mod.name != "__init__.py":
            continue
        modules = sorted(p for p in found_mod.parent.glob("*.py") if is_file(p))[:32]
        if any(says(text_of(p)) for p in modules):
            return True
    return False
