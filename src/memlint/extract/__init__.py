"""Static extraction: read a training script or notebook into a TrainingPlan, never running it.

`extract_file` takes one .py/.ipynb or a framework config
(extract/configs, YAML/JSON); `extract_paths` expands folders. Unreadable input raises MemlintError; a syntax error gives a plan whose
notes say so (a finding, not a crash).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from memlint.errors import MemlintError
from memlint.extract.budget import STOPPED_NOTE, over_script_budget
from memlint.files import Refused, Target, read_bytes, refusals, source_lines
from memlint.plan import Diagnostic, Span, TrainingPlan
from memlint.vocab import CONFIG_SUFFIXES

__all__ = ["extract_file", "extract_paths", "extract_source", "read_target", "SYNTAX_ERROR_NOTE", "FRAMEWORK_WORDS",
           "signal_words", "training_signal"]

SYNTAX_ERROR_NOTE = "syntax error"  # notes of a plan that could not be parsed start with this
MAX_SKIPPED_CELLS = 8  # notebook cells that are not Python skipped before the notebook is a syntax error
# A training script names one of these; anything else is skipped before parsing.
FRAMEWORK_WORDS = re.compile(rb"\b(torch|transformers|trl|peft|accelerate|unsloth|deepspeed|bitsandbytes)\b")
# A file a walk finds is read only when it shows one of the things memlint's training detection (`trains`) keys on:
# an optimizer, engine or scaler `.step(`, a `.backward(`, a trainer class (`Trainer`, `SFTTrainer`, lightning's, a
# subclass named so) or its `.train(` / `.fit(`, lightning's `Fabric`, `deepspeed.initialize(`, an xtuner config.
# A module that merely imports torch (a model definition, a library's utilities) is not read: a vendored library
# tree is thousands of such files. The text first (substring tests and one regex with a literal first character:
# C speed, ~0.3 s for transformers' 54 MB; a regex of alternatives without one is ~40x slower), then the tokens
# confirm it is code, not a docstring's example or a comment.
_SIGNAL_WORDS = (b"Trainer", b"Fabric", b"xtuner")
_SIGNAL_CALLS = re.compile(rb"\.(?:backward|step|train|fit)\s*\(")
_INITIALIZE = re.compile(rb"initialize\s*\(")
_SIGNAL_METHODS = frozenset({"backward", "step", "train", "fit"})


def training_signal(raw: bytes, notebook: bool = False) -> bool:
    """Whether a file a walk found may be a training file: a framework word and a training signal in its text
    (a notebook's JSON is searched as text; a script's signal must be in its code, not a string or a comment).
    False only for a file `trains` would not keep (the signal is what the detection keys on), written as people
    write Python (`optimizer . step ()`, spaced around the dot, is not looked for)."""
    return signal_words(raw) and (notebook or _signal_in_code(raw))


def signal_words(raw: bytes) -> bool:
    """training_signal's text test alone (no tokens): false only where training_signal is."""
    if not FRAMEWORK_WORDS.search(raw):
        return False
    return any(w in raw for w in _SIGNAL_WORDS) or _SIGNAL_CALLS.search(raw) is not None or \
        (b"initialize" in raw and _INITIALIZE.search(raw) is not None)


def _signal_in_code(raw: bytes) -> bool:
    """The signal as tokens of code (the standard tokenizer, ~30x cheaper than a parse): a name ending in
    Trainer, Fabric or xtuner, `.step(`/`.backward(`/`.train(`/`.fit(`, `initialize(`. A text that does not
    tokenize is read (the parse then reports it)."""
    import io
    import tokenize

    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return True
    prev = prev2 = ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, word = tok.type, tok.string
            if kind == tokenize.NAME and (word.endswith("Trainer") or word in ("Fabric", "xtuner")):
                return True
            if kind == tokenize.OP and word == "(" and (prev in _SIGNAL_METHODS and prev2 == "." or prev == "initialize"):
                return True
            if kind in (tokenize.NAME, tokenize.OP, tokenize.NUMBER, tokenize.STRING):
                prev2, prev = prev, word if kind != tokenize.STRING else ""
    except (tokenize.TokenError, SyntaxError, RecursionError, MemoryError):
        return True
    return False


def _pinned(path: Path, read, launch: Any = None):
    """`read()`'s plan, with library defaults read at the versions the checkout of `path` pins
    (requirements.txt, pyproject.toml, setup.py, environment.yml), which the plan then records. A framework tool run
    from flags alone (no file at `path`) is dated and pinned by the launcher that runs it."""
    from memlint.library.pins import checkout_pins, pin_files
    from memlint.library.versions import checkout_versions

    origin = Path(launch.origin) if launch is not None and launch.line and launch.origin else None
    if not path.exists() and origin is not None and origin.is_file():
        path = origin
    pins = checkout_pins(path)
    if path.suffix == ".ipynb":  # the notebook's own `!pip install trl==0.4.7` first: it is what the notebook runs
        from memlint.extract.source import read_source
        from memlint.library.pins import install_pins

        try:
            own = install_pins(read_source(path), str(path))
        except MemlintError:
            own = ()
        pins = own + tuple(p for p in pins if p.package not in {o.package for o in own})
    from memlint.library.dated import dated_pins

    pins = pins + dated_pins(path, {p.package for p in pins})  # unpinned: the newest release before the last commit
    with checkout_versions(pins):
        got = read()
    plan = got[0] if isinstance(got, tuple) else got
    from memlint.extract.placeholders import unplaceholder

    fixed = unplaceholder(plan)  # `<your_model_path>`, `path/to/model`: no model id
    if fixed is not plan:
        got = (fixed, *got[1:]) if isinstance(got, tuple) else fixed
        plan = fixed
    if plan is None or not pins:
        return got
    plan = replace(plan, versions=pins, sources=tuple(dict.fromkeys([*plan.sources, *pin_files(pins)])))
    return (plan, *got[1:]) if isinstance(got, tuple) else plan


def extract_file(path: str | Path, launch: Any = None, shown: str | None = None) -> TrainingPlan:
    """The training plan of one script, notebook or framework config (.yaml/.yml/.json);
    `launch` (extract.launch.Launch) is the command the script is run with. Files it follows are read only
    inside the checked root (files.checkout_root of `path`, or the one already in force)."""
    from memlint import files

    root = files.root_in_force() or files.checkout_root(path)
    with files.checked_root(root):
        return _pinned(Path(path), lambda: _extract_file(path, launch, shown), launch)


def _extract_file(path: str | Path, launch: Any = None, shown: str | None = None, text: str | None = None) -> TrainingPlan:
    """`text`: the file's content when it is not on disk as read (a config a notebook writes before running it)."""
    from memlint import files
    from memlint.extract.configs.overrides import TOOLS

    p = Path(path)

    tool_run = launch is not None and launch.launcher in TOOLS and not launch.script and not launch.module
    if p.suffix.lower() in CONFIG_SUFFIXES or tool_run:
        from memlint.extract.configs import read_config

        plan = read_config(p if files.is_file(p) or not tool_run or text is not None else None, shown=shown or str(path),
                           text=text, launch=launch)
        if plan is not None and plan.kind == "lightning-cli" and files.is_file(p):
            from memlint.extract.lightning_cli import with_classes

            plan = with_classes(plan, p, shown or str(path), extract_source)  # the config's model and data classes, run as fit runs them
        if plan is not None and plan.kind == "config" and launch is None and not plan.fields \
                and any("not a config memlint reads" in n for n in plan.notes):
            from memlint.extract.config_reader import reading_script

            # a repository's own config: the checkout's script that reads it, as that script's run
            by_script = reading_script(p, shown or str(path), extract_file)
            if by_script is not None:
                return by_script
        return _launched_config(plan, launch)
    from memlint.extract.source import outputs_note, read_source_cells

    source, cells = read_source_cells(p)
    plan = extract_source(source, p, shown=shown or str(path), launch=launch, cells=cells)
    note = outputs_note(p) if cells is not None else None
    return replace(plan, notes=plan.notes + (note,)) if note else plan


def _launched_config(plan: TrainingPlan | None, launch: Any) -> TrainingPlan | None:
    """A config run by a script or module of its own (`accelerate launch --config_file X train.py recipe.yaml`,
    `torchrun --nproc_per_node 8 -m torchtitan.train --job.config_file X`): the script's trainer class, and the
    launcher's GPUs and sharding. A framework tool's own command (`tune run`, `litgpt ...`) has neither."""
    from memlint.extract.configs.overrides import TOOLS

    if plan is not None and launch is not None and launch.launcher in TOOLS and getattr(launch, "runner", None):
        # a framework's entry module under a process launcher (`torchrun --nproc_per_node 8 -m axolotl.cli.train X`):
        # the config as the tool reads it, then the launcher's GPUs (and an accelerate --config_file's sharding)
        from memlint.extract.launched import apply_launcher

        return apply_launcher(plan, replace(launch, launcher=launch.runner), Path(launch.cwd or ".") / plan.path)
    if plan is None or launch is None or launch.launcher in TOOLS or not (launch.script or launch.module):
        if plan is not None and launch is not None:
            from memlint.extract.launched import documented, tool_processes

            plan = tool_processes(documented(plan, launch), launch)
        return plan
    if launch.script:
        script = Path(launch.cwd or ".") / launch.script
        if not script.exists():  # the script of a framework cloned beside the checkout: its config read alone
            plan = replace(plan, notes=(f"{launch.script} is not in this checkout: {plan.path} is read as its "
                                        f"framework ({plan.kind}) reads it",) + plan.notes)
        plan = _script_trainer(plan, script)
    from memlint.extract.launched import apply_launcher

    return apply_launcher(plan, launch, Path(launch.cwd or ".") / (launch.script or launch.module.replace(".", "/") + ".py"))


def _script_trainer(plan: TrainingPlan, script: Path) -> TrainingPlan:
    """A recipe run by a script that trains with a trainer class of its own checkout (SimPO's
    `SimPOTrainer(Trainer)`): the recipe's trainer is a guess from its keys (`beta`: DPO), the
    script's class settles it."""
    from memlint import files

    if script.suffix != ".py" or not files.is_file(script):
        return plan
    from memlint.extract.source import read_source

    try:
        own_plan = extract_source(read_source(script), script, shown=str(script))
    except (MemlintError, OSError, RecursionError):
        return plan
    plan = _script_model_literals(plan, own_plan, script)
    own = own_plan.get("trainer")
    # a trainer class the script builds settles it, a checkout subclass read as its library base (SPIN's
    # `SPINTrainer(Trainer)` is a Trainer whatever loss it computes), not a guess from the recipe's keys; a loop of
    # the script's own is no trainer class, and a framework reader's own reading stands
    from memlint.library.api import trainer as trainer_facts

    own_loop = own.value == "custom-loop" and plan.kind == "trl-recipe"  # a recipe the script trains on in its own loop
    if not own.known or own.candidates or not (own.shape or trainer_facts(str(own.value)) is not None or own_loop):
        return plan
    from memlint.plan import Value

    was = plan.get("trainer")
    why = f"{script}: {own.chain[0] if own.chain else own.value}" + (
        f" (the recipe alone reads as {was.value})" if was.known and was.value != own.value else "")
    return plan.with_values(trainer=Value(own.value, own.source, own.span, (why,), shape=own.shape))


# model-load arguments a script may write as constants in its own from_pretrained call, whatever its recipe says
_SCRIPT_LOAD_FIELDS = ("torch_dtype", "attn_implementation")


def _script_model_literals(plan: TrainingPlan, own: TrainingPlan, script: Path) -> TrainingPlan:
    """A recipe run by a script that loads the model itself with constants (`from_pretrained(path,
    torch_dtype=torch.float16, attn_implementation="flash_attention_2")`): those constants are what loads, not the
    recipe's ModelConfig fields or their defaults. A value the script takes from its parsed arguments is unknown read
    alone and leaves the recipe's reading standing."""
    from memlint.plan import Value

    got = {}
    for name in _SCRIPT_LOAD_FIELDS:
        v = own.get(name)
        if v.known and not v.candidates and v.source in ("literal", "constant") and v.value != plan.get(name).value:
            why = f"{script}:{v.span.line if v.span else '?'}: {v.chain[0] if v.chain else v.value}, written in the script's own load"
            got[name] = Value(v.value, v.source, v.span, (why,))
    return plan.with_values(**got) if got else plan


def extract_source(source: str, path: str | Path = "<string>", shown: str | None = None,
                   launch: Any = None, cells: list[int] | None = None) -> TrainingPlan:
    """The training plan of Python source text (already IPython-transformed for notebooks); `cells`: where a
    notebook's code cells start (a cell that is not Python is skipped, with a note, instead of the notebook)."""
    from memlint.extract.build import Builder
    from memlint.extract.handlers import Handlers
    from memlint.extract.interp import Interpreter
    from memlint.extract.parsed import ParserSyntaxError
    from memlint.extract.source import skip_cell

    p = Path(path)
    name = shown if shown is not None else str(path)
    why = over_script_budget(source)
    if why is not None:
        return unreadable(name, why)
    skipped: list[str] = []
    while True:
        try:
            interp = Interpreter(p, source, Handlers(), launch)  # parses with libcst (extract/parsed.py)
            break
        except ParserSyntaxError as exc:
            # a notebook's cell that is not Python (`huggingface-cli download ...` without `!`): that cell only
            hit = skip_cell(source, cells, exc.raw_line) if len(skipped) < MAX_SKIPPED_CELLS else None
            if hit is None:
                return _syntax_error_plan(name, exc.raw_line, exc.raw_column + 1, exc.message)
            source, which = hit
            skipped.append(f"{which} is not Python ({SYNTAX_ERROR_NOTE} at line {exc.raw_line}, column "
                           f"{exc.raw_column + 1}: {exc.message}): the rest of the notebook was read without it")
        except RecursionError:
            return _unreadable_plan(name, "too deeply nested to parse")
    try:
        facts = interp.run()
        from memlint.extract.xtuner import xtuner_plan

        plan = xtuner_plan(name, interp.main_names())  # an xtuner (mmengine) config: dict(type=...) trees, no trainer call
        if plan is not None and launch is not None and launch.launcher == "xtuner":
            from memlint.extract.xtuner import xtuner_launched

            plan = xtuner_launched(plan, launch)
        if plan is None:
            builder = Builder(name, p, facts, launch, source)
            plan = builder.build()
            read = builder.read_files
        else:
            read = []
    except RecursionError:
        return _unreadable_plan(name, "too deeply nested to follow")
    except MemlintError:
        raise
    except Exception as exc:  # a reader bug must cost one file its plan, not the run: say so, and where
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1]
        return _unreadable_plan(name, f"memlint could not read this script ({type(exc).__name__}: {exc} at "
                                      f"{Path(where.filename).name}:{where.lineno}); please report it")
    # the files it read besides the script: sibling modules it imports, a DeepSpeed JSON it follows
    sources = tuple(dict.fromkeys([*(str(k) for k in interp.modules), *read]))
    if skipped:
        plan = replace(plan, notes=tuple(skipped) + plan.notes)
    return replace(plan, sources=sources) if sources else plan


def _unreadable_plan(name: str, why: str) -> TrainingPlan:
    return TrainingPlan(name, {}, (why,), (Diagnostic("unreadable", why, Span(name, 1, 1)),))


def _syntax_error_plan(name: str, line: int, col: int, msg: str) -> TrainingPlan:
    from memlint.plan import Diagnostic, Span

    note = f"{SYNTAX_ERROR_NOTE} at line {line}, column {col}: {msg}"
    return TrainingPlan(name, {}, (note,), (Diagnostic("syntax-error", f"SyntaxError: {msg}", Span(name, line, col)),))


def extract_paths(paths: list[str] | list[Path], readme: bool = True) -> list[TrainingPlan]:
    """Plans for the files named (read as asked: an unreadable one is an error) and for the
    training files a walk of each folder finds, the same files `memlint check` reads. `readme`: a file
    named alone is read with the command its README documents for it, when there is one."""
    from memlint.files import collect

    return extract_targets(expand_launchers(collect([str(p) for p in paths]), paths, readme))


_DOCUMENTED_SUFFIXES = (".py", ".yaml", ".yml", ".toml")


def expand_launchers(targets: list[Target], roots: Any = (), readme: bool = False) -> list[Target]:
    """Shell launchers a walk found (scripts/*.sh, Makefiles) become one target per training command
    they run: (script, launch) pairs, read with the command's arguments, after the files themselves.
    `readme`: a script or config named alone takes the command its README (or docs/*.md) documents for it."""
    from memlint.vocab import LAUNCHER_NAMES, LAUNCHER_SUFFIXES

    def is_launcher(path: Path) -> bool:  # extract.shell's, without importing it for a walk with no launcher
        return path.suffix in LAUNCHER_SUFFIXES or path.name in LAUNCHER_NAMES

    plain = [t for t in targets if not is_launcher(t.path)]
    if readme and any(t.explicit and t.launch is None and t.path.suffix in _DOCUMENTED_SUFFIXES for t in plain):
        from memlint.extract.shell import readme_launch

        plain = [replace(t, launch=readme_launch(t.path)) if t.explicit and t.launch is None
                 and t.path.suffix in _DOCUMENTED_SUFFIXES else t for t in plain]
    walked = [Path(r) for r in roots if Path(r).is_dir()]
    pairs: list[Target] = []
    seen: set = set()
    for t in targets:
        # a notebook is read as Python and, for its `!python train.py ...` lines, as a launcher too
        if not is_launcher(t.path) and not (t.path.suffix == ".ipynb" and _has_shell_line(t.path)):
            continue
        from memlint import files
        from memlint.extract.budget import OverBudget
        from memlint.extract.shell import launcher_targets

        skipped: list = []
        try:
            with files.checked_root(files.target_root(t)):
                found = launcher_targets(t.path, t.shown, [*walked, Path.cwd()], root=files.target_root(t),
                                         named=t.explicit, skipped=skipped)
        except OverBudget as exc:  # the launcher itself is a MEM001 note; the walk goes on
            pairs.append(replace(t, explicit=True, note=str(exc)))
            continue
        if not found and skipped and t.explicit and t.path.suffix != ".ipynb":
            # a launcher the user named whose Python commands memlint cannot follow: a note saying what they run (a
            # shell script with no such command is no training file, like a .py without a trainer: silent)
            from memlint.extract.shell import unfollowed

            pairs.append(replace(t, note=unfollowed(t.shown, skipped)))
            continue
        for pair in found:
            key = (str(pair.path.resolve()), pair.launch.origin, pair.launch.line)
            if key not in seen:
                seen.add(key)
                pairs.append(pair)
    return plain + pairs


def _has_shell_line(path: Path) -> bool:
    """Whether a notebook may have a `!command` cell line (a JSON string starting, after blanks, with `!`); the only
    lines extract.shell.notebook_shell launches from."""
    try:
        from memlint.extract.source import notebook_bytes

        raw = notebook_bytes(path)
    except (OSError, MemlintError):
        return False
    import re

    return re.search(rb'"[ \t]*!', raw) is not None


def extract_targets(targets: list[Target]) -> list[TrainingPlan]:
    """Plans of `targets` (files.collect, or a launch command's target)."""
    read = _read_targets(targets, 0)
    drop = untrained_commands(read)
    return [plan for i, (_, plan) in enumerate(read) if i not in drop]


MAX_SPAWN_DEPTH = 2  # a Python launcher that runs a Python launcher that runs the training script, at most


def _read_targets(targets: list[Target], depth: int) -> list[tuple[Target, TrainingPlan]]:
    from memlint import files

    read = []
    for target in targets:
        with files.checked_root(files.target_root(target)), files.written_overlay(target.writes):
            if target.note is not None:  # refused before reading (a launcher past its budget)
                plan = unreadable(target.shown, target.note)
            else:
                plan = extract_file(target.path, target.launch, target.shown) if target.explicit else read_target(target)[0]
            spawned = _spawned(target, plan, depth) if plan is not None and plan.spawns and not trains(plan) else []
        if spawned:  # a Python launcher: the run is the commands it starts (`subprocess.run(f"torchrun ... {script}")`)
            read.extend(spawned)
        elif plan is not None:
            read.append((target, plan))
    return read


def _spawned(target: Target, plan: TrainingPlan, depth: int) -> list[tuple[Target, TrainingPlan]]:
    """The plans of the commands a script that trains nothing itself runs (plan.spawns), each read with its words as
    a command line run from where memlint runs; those that train."""
    from memlint.errors import NotFollowed
    from memlint.extract.launch import command_target

    if depth >= MAX_SPAWN_DEPTH:
        return []
    out = []
    for words, line in plan.spawns:
        try:
            spawned = command_target(list(words), Path.cwd())
        except (MemlintError, NotFollowed, OSError):
            continue
        if spawned.launch is None or spawned.path == target.path:
            continue
        launch = replace(spawned.launch, origin=target.shown, line=line)
        shown = _shown_path(str(spawned.path)) if os.path.isabs(spawned.shown) else spawned.shown
        got = _read_targets([replace(spawned, launch=launch, explicit=True, shown=shown)], depth + 1)
        out += [(t, replace(p, via=p.via or f"{target.shown}:{line}")) for t, p in got if trains(p)]
    return out


def untrained_commands(read: list[tuple[Target, TrainingPlan]]) -> set[int]:
    """The indexes of a named launcher's commands that show no trainer while another command of the same launcher
    trains (a merge or evaluation step after the training one): those are dropped as a walk drops them."""
    trained = {t.launch.origin for t, p in read if t.named_launcher and t.launch is not None and trains(p)}
    return {i for i, (t, p) in enumerate(read)
            if t.named_launcher and t.launch is not None and t.launch.origin in trained and not trains(p)}


def unreadable(shown: str, why: str) -> TrainingPlan:
    return TrainingPlan(shown, {}, (why,), (Diagnostic("unreadable", why, Span(shown, 1, 1)),))


def read_target(target: Target) -> tuple[TrainingPlan | None, list[str], list[int]]:
    """The plan of one file, its lines and (notebooks) where each cell starts; None for a file
    that is not a training file. A file it follows and memlint refused (too large, a FIFO) is a
    MEM001 note of its own."""
    from memlint import files

    with files.checked_root(files.target_root(target)), refusals() as refused:
        plan, lines, cells = _read_target(target)
    if plan is not None and refused:
        plan = not_read(plan, refused, target.path)
    return plan, lines, cells


def not_read(plan: TrainingPlan, refused: list[tuple[str, str]], own: str | os.PathLike | None = None) -> TrainingPlan:
    """`plan` with a "not-read" diagnostic for each file it follows that was refused (files.Refused)."""
    from memlint.files import OUTSIDE

    own_key = os.path.abspath(own) if own is not None else None
    diags = []
    for path, why in dict.fromkeys(refused):
        if os.path.abspath(path) == own_key:
            continue
        if why.startswith(OUTSIDE):  # said on the file that names it: nothing is located outside the root
            diags.append(Diagnostic("not-read", f"{_shown_path(path)} {why} (followed from {plan.path})",
                                    Span(plan.path, 1, 1)))
        else:
            diags.append(Diagnostic("not-read", f"{why} (followed from {plan.path})", Span(os.path.normpath(path), 1, 1)))
    if not diags:
        return plan
    return replace(plan, diagnostics=plan.diagnostics + tuple(diags), sources=())


def _shown_path(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def _read_target(target: Target) -> tuple[TrainingPlan | None, list[str], list[int]]:
    # a file a notebook writes runs with the libraries that notebook installs
    return _pinned(target.written_by or target.path, lambda: _read_target_unpinned(target), target.launch)


def _with_bundled_config(target: Target) -> Any:
    """A `tune run --config NAME` target whose config is torchtune's own: its text at the checkout's pinned version
    (read here, inside the pins), an unreadable plan when that version did not ship it, the target as it was else."""
    from memlint.extract.launch import _config_arg, builtin_tool_config

    ref = _config_arg(target.launch)
    bundled = builtin_tool_config(target.launch, ref) if ref else None
    if bundled is not None and not bundled[0]:  # a built-in name of other torchtune versions than the pinned one
        return unreadable(bundled[1], "tune run would find no such config at this version")
    return replace(target, text=bundled[0], shown=bundled[1]) if bundled is not None else target


def _target_bytes(target: Target, shown: str) -> Any:
    """The target's content: the text a notebook's `%%writefile` cell (or a bundled config) gives, a notebook's code
    cells past max-file-size, else the file; an unreadable plan when it cannot be read."""
    path = target.path
    try:
        if target.text is not None:
            return target.text.encode("utf-8")
        if path.suffix == ".ipynb":
            from memlint.extract.source import notebook_bytes

            return notebook_bytes(path)  # saved outputs over max-file-size: its code cells
        return read_bytes(path)
    except Refused as exc:
        return unreadable(shown, exc.why)
    except IsADirectoryError:
        return unreadable(shown, "is a directory")
    except OSError as exc:
        return unreadable(shown, f"cannot read: {exc.strerror or exc}")


def _read_target_unpinned(target: Target) -> tuple[TrainingPlan | None, list[str], list[int]]:
    path, shown = target.path, target.shown
    if target.note is not None:  # refused before reading (a launcher past its budget)
        return unreadable(shown, target.note), [], []
    launch = target.launch
    if launch is not None and launch.launcher == "tune" and target.text is None and not path.exists():
        target = _with_bundled_config(target)
        if isinstance(target, TrainingPlan):
            return target, [], []
        shown = target.shown
    if launch is not None and not launch.script and not launch.module and not path.exists() and target.text is None:
        from memlint.extract.configs.overrides import TOOLS

        if launch.launcher in TOOLS:  # a framework CLI given its config as flags, no file: the flags are read
            return _extract_file(path, launch, shown), [], []
    raw = _target_bytes(target, shown)
    if isinstance(raw, TrainingPlan):
        return raw, [], []
    if b"\0" in raw[:8192]:
        return (unreadable(shown, "not a text file (binary content)"), [], []) if target.explicit else (None, [], [])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        why = f"not UTF-8 text (invalid byte at offset {exc.start})"
        return (unreadable(shown, why), [], []) if target.explicit else (None, [], [])
    if path.suffix in CONFIG_SUFFIXES and target.launch is not None:
        # a launch command's config (`memlint check -- torchrun train.py recipe.yaml`, a Hydra script's NeMo
        # config): read with the command's overrides and launcher, as `extract_file` reads it
        try:
            plan = _extract_file(path, target.launch, shown, text=target.text)
        except MemlintError as exc:
            return unreadable(shown, str(exc).removeprefix(f"{shown}: ")), [], []
        if plan is not None and plan.via is None and target.launch.line:  # the launcher line that runs the config
            plan = replace(plan, via=target.launch.where())
        return plan, (source_lines(text) if plan is not None else []), []
    if path.suffix in CONFIG_SUFFIXES:
        plan = read_config_text(path, shown, text, target.explicit, target.launch)
        return plan, (source_lines(text) if plan is not None else []), []
    if not FRAMEWORK_WORDS.search(raw) and (target.launch is None or path.suffix == ".ipynb"):
        return None, [], []  # (a launcher's script is read whatever it imports: a wrapper that calls its package's train())
    if not target.explicit and target.launch is None and not training_signal(raw, path.suffix == ".ipynb"):
        return None, [], []  # found by a walk, with nothing a training file has: not parsed
    from memlint.extract.source import notebook_cells, transform_lines

    cells: list[int] = []
    why = over_script_budget(text) if path.suffix != ".ipynb" else None
    if why is not None:
        return unreadable(shown, why), [], []
    try:  # `!pip` and `%magic` lines (exported notebooks) become calls, line for line
        if path.suffix == ".ipynb":
            lines, cells = notebook_cells(text, path)
            why = over_script_budget("\n".join(lines) + "\n")
            if why is not None:
                return unreadable(shown, why), [], []
        else:
            lines = source_lines(text)
        plan = extract_source(transform_lines(lines, cells=cells or None), path, shown=shown, launch=target.launch,
                              cells=cells or None)
        if cells:
            from memlint.extract.source import outputs_note

            note = outputs_note(path)
            plan = replace(plan, notes=plan.notes + (note,)) if note else plan
    except MemlintError as exc:
        return unreadable(shown, str(exc).removeprefix(f"{path}: ")), [], []
    except RecursionError:
        return unreadable(shown, "too deeply nested to parse"), [], []
    if not target.explicit and not trains(plan) and not _launched_out_of_time(target, plan):
        if not target.named_launcher:
            return None, [], []  # found by a walk: a helper module, an inference or merge script
        plan = replace(plan, notes=plan.notes + (_UNTRAINED.format(via=target.launch.where(), what=_runs(target.launch)),))
    return plan, lines, cells


_UNTRAINED = ("{via} runs {what}, in which memlint finds no trainer or training loop it reads: the fields below are what "
              "it read (a framework's own workers, or a training function it does not follow)")


def _runs(launch: Any) -> str:
    return f"-m {launch.module}" if launch.module else launch.script or launch.launcher


def _launched_out_of_time(target: Target, plan: TrainingPlan) -> bool:
    """A launcher's command whose script ran out of its time budget before reaching a trainer: kept, with the
    fields read so far and the budget's note, rather than dropped as a helper (on a loaded machine the
    launcher named alone then read as no training file at all)."""
    return target.launch is not None and any(n.startswith(STOPPED_NOTE) for n in plan.notes)


def trains(plan: TrainingPlan) -> bool:
    """Whether a script has something to size: a trainer or a training loop (or is broken)."""
    return plan.get("trainer").known or any(d.kind in ("syntax-error", "unreadable") for d in plan.diagnostics)


def read_config_text(path: Path, shown: str, text: str, explicit: bool, launch: Any = None) -> TrainingPlan | None:
    from memlint.extract.configs import read_config

    try:
        # YAML/JSON that is no framework's config (CI workflows, dataset cards) is skipped
        # even when named: pre-commit passes every YAML file of a commit.
        return _launched_config(read_config(path, text=text, shown=shown, explicit=False, launch=launch), launch)
    except MemlintError as exc:
        if explicit:
            return unreadable(shown, str(exc).removeprefix(f"{shown}: "))
        return None
