"""A LightningCLI config's own classes, read as LightningCLI runs them.

A LightningCLI config (`python main.py fit --config cfg.yaml`) names the checkout's LightningModule and
LightningDataModule by `class_path` with their `init_args`; what they load, adapt, quantise and batch is in their
code, not in the config. LightningCLI builds `Model(**init_args)`, `Data(**init_args)` and `Trainer(**trainer)` and
calls `trainer.fit(model, datamodule=data)`. memlint writes that call as a script at the checkout root the classes
import from and reads it as it reads any script (nothing runs): the model's `__init__`, its `configure_optimizers`,
the data module's loaders. The config reader's own reading (configs/lightning.py) stands wherever it read a value;
the classes' reading fills what it left unknown or at a library default.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from memlint.errors import MemlintError
from memlint.plan import Span, TrainingPlan

_SCALARS = (str, int, float, bool, type(None))
_LIGHTNING = "lightning.pytorch"


def with_classes(plan: TrainingPlan, path: Path, shown: str, extract_source: Callable[..., TrainingPlan]) -> TrainingPlan:
    """`plan` (a LightningCLI config's reading) with what running its model and data classes reads;
    `extract_source` reads a script's source (memlint.extract's, passed in: this module is below it)."""
    from memlint.extract.configs.document import load_text
    from memlint.files import read_text

    try:
        doc = load_text(read_text(path, encoding="utf-8-sig"), shown)
    except (OSError, UnicodeDecodeError, MemlintError):
        return plan
    if not doc.ok:
        return plan
    sections = {name: _section(doc.get(name)) for name in ("model", "data")}
    if sections["model"] is None:
        return plan
    root = _import_root(path, sections["model"][0])
    if root is None:
        return plan
    source, where = _script(sections, doc.get("trainer"))
    script = root / f"{path.stem}.lightning_cli.py"  # never written: the interpreter reads `source` as this file
    try:
        own = extract_source(source, script, shown=str(script))
    except (MemlintError, RecursionError):
        return plan
    spans = {line: doc.span(*key) for line, key in where.items()}
    cls = sections["model"][0]
    got = {}
    for name, v in own.fields.items():
        mine = plan.fields.get(name)
        if not v.known or mine is not None and mine.known and mine.source != "library-default":
            continue  # what the config itself says stands; its library defaults give way to what the classes call
        span = v.span
        if span is not None and Path(span.path) == script:  # a value of the config written into the call
            span = spans.get(span.line) or doc.span("model")
            span = Span(shown, span.line, span.col) if span is not None else None
        got[name] = replace(v, span=span, chain=(f"LightningCLI runs {cls}(**init_args) from {shown}",) + v.chain)
    if not got:
        return plan
    out = plan.with_values(**got)
    notes = tuple(n for n in out.notes if not any(n.startswith(f"{name} is unknown") for name in got))
    return replace(out, notes=notes + (f"{shown}: model.class_path {cls} (and the data module) read by running "
                                           "their code on init_args, as LightningCLI builds them",))


def _section(node: Any) -> tuple[str, dict] | None:
    """(class_path, init_args) of a `model:` / `data:` section naming a class by its dotted path."""
    if not isinstance(node, dict):
        return None
    cls, args = node.get("class_path"), node.get("init_args") or {}
    if not isinstance(cls, str) or "." not in cls or not isinstance(args, dict):
        return None
    return cls, args


def _import_root(config: Path, class_path: str) -> Path | None:
    """The folder the class's module imports from: the config's folder or one above it (or its src/), inside the
    checked root, that holds the module's file."""
    from memlint.files import allowed, is_file

    rel = Path(*class_path.split(".")[:-1])
    for folder in [config.parent, *config.resolve().parent.parents][:6]:
        for base in (folder, folder / "src"):
            for cand in (base / rel.with_suffix(".py"), base / rel / "__init__.py"):
                if allowed(cand) and is_file(cand):
                    return base
    return None


def _script(sections: dict, trainer: Any) -> tuple[str, dict[int, tuple]]:
    """The script LightningCLI's fit amounts to, and the config key each of its lines stands for."""
    lines = [f"import {_LIGHTNING} as _pl"]
    where: dict[int, tuple] = {}
    names = {}
    for section, (var, got) in (("model", ("model", sections["model"])), ("data", ("datamodule", sections["data"]))):
        if got is None:
            continue
        cls, args = got
        module, name = cls.rsplit(".", 1)
        lines.append(f"from {module} import {name} as _{var}_class")
        plain = _literal(args)
        call = ", ".join(f"{k}={x!r}" for k, x in plain.items()) if all(k.isidentifier() for k in plain) else f"**{plain!r}"
        lines.append(f"{var} = _{var}_class({call})")
        where[len(lines)] = (section, "init_args") if args else (section, "class_path")
        names[section] = var
    kwargs = {k: v for k, v in (trainer or {}).items() if isinstance(k, str) and k.isidentifier()
              and isinstance(v, _SCALARS)} if isinstance(trainer, dict) else {}
    lines.append(f"trainer = _pl.Trainer(**{kwargs!r})")
    where[len(lines)] = ("trainer",)
    fit = "trainer.fit(model" + (", datamodule=datamodule)" if "data" in names else ")")
    lines.append(fit)
    where[len(lines)] = ("model", "class_path")
    return "\n".join(lines) + "\n", where


def _literal(v: Any, depth: int = 0) -> Any:
    """The YAML value as plain Python data (dicts with string keys, lists, scalars); a nested class_path object is
    dropped to None (it is not built here)."""
    if depth > 16:
        return None
    if isinstance(v, dict):
        if "class_path" in v:
            return None
        return {str(k): _literal(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_literal(x, depth + 1) for x in v[:256]]
    return v if isinstance(v, _SCALARS) else None


# ---- LightningCLI called in a script (`cli = LightningCLI(Model, DataModule, trainer_defaults={...})`) ----------

_SUBCOMMANDS = ("fit", "validate", "test", "predict")
_SECTIONS = ("model", "data", "trainer")


def script_cli(handlers: Any, c: Any) -> Any:
    """`LightningCLI(model_class, datamodule_class, trainer_defaults=...)` in a script run as `python main.py fit
    --model.lr 3e-3 --data.batch_size 4 --trainer.max_epochs 5 [--config cfg.yaml]`: LightningCLI builds the model
    and data module from their `__init__` parameters (the command's `--model.*` / `--data.*` words, a `--config`
    file's sections, else the parameters' defaults) and lightning's Trainer from `trainer_defaults` under the file's
    and the command's `trainer` values, then runs the subcommand (fit) unless `run=False`. The result holds `.model`,
    `.datamodule` and `.trainer` as the script reads them after."""
    from memlint.extract.cli_args import literal
    from memlint.extract.handlers.common import Call
    from memlint.extract.imports import resolved as resolved_value
    from memlint.extract.objects import Instance, LightningTrainer
    from memlint.extract.values import Const, Dict

    it = c.it
    words = list(it.launch.argv) if it.launch is not None else []
    sub, actions = _cli_words(words)
    sections: dict[str, dict] = {name: {} for name in _SECTIONS}
    defaults = resolved_value(c.kwargs.get("trainer_defaults"))
    if isinstance(defaults, Dict):
        sections["trainer"].update({k: v for k, v in defaults.items.items() if isinstance(k, str)})
    for kind, section, key, word in actions:  # in the command's order: a later value wins, as jsonargparse reads it
        if kind == "config":  # a config before the subcommand is nested by subcommand (`fit: {model: ...}`)
            _config_sections(it, word, sections, sub or "fit" if section == "before" else None)
        elif kind == "file":  # `--model model.yaml`: a whole section's file
            _config_sections(it, word, sections, None, only=section)
        else:
            sections[section][key] = handlers.cli_const(it, literal(word), f"--{section}.{key} {word}")
    model_class = resolved_value(c.arg(0, "model_class"))
    data_class = resolved_value(c.arg(1, "datamodule_class"))
    model = _build(handlers, c, model_class, sections["model"])
    data = _build(handlers, c, data_class, sections["data"]) if data_class is not None else None
    trainer = Call(it, "lightning.Trainer", [], sections["trainer"], False, c.line).new(LightningTrainer,
                                                                                       "lightning.Trainer")
    run = c.kwargs.get("run")
    if not (isinstance(run, Const) and run.value is False) and sub in (None, "fit"):
        handlers.lightning_method(it, trainer, "fit", [model], {"datamodule": data} if data is not None else {}, c.line)
    out = Instance("LightningCLI", c.line or 0, {}, {}, False)
    out.attrs.update({"model": model, "datamodule": data if data is not None else Const(None, "literal", c.line),
                      "trainer": trainer})
    return out


def _cli_words(words: list[str]) -> tuple[str | None, list[tuple[str, str, str, str]]]:
    """(the subcommand, what the words say in order: ("config", "before" | "after", "", path) of `--config F` /
    `-c F` (before or after the subcommand), ("file", section, "", path) of `--model model.yaml`, ("word", section,
    key, value) of `--model.lr 3e-3` / `--trainer.max_epochs=5`)."""
    sub, actions = None, []
    i = 0
    while i < len(words):
        w = words[i]
        if sub is None and w in _SUBCOMMANDS:
            sub = w
        elif w.startswith("--") or w == "-c":
            key, eq, value = (w[2:].partition("=") if w.startswith("--") else ("config", "", ""))
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("--"):
                value, i = words[i + 1], i + 1
            section, _, name = key.partition(".")
            name = name.removeprefix("init_args.")
            if key == "config" and value:
                actions.append(("config", "after" if sub else "before", "", value))
            elif key in _SECTIONS and value.endswith((".yaml", ".yml", ".json")):
                actions.append(("file", key, "", value))
            elif section in _SECTIONS and name and "." not in name and (eq or value):
                actions.append(("word", section, name, value))
        i += 1
    return sub, actions


def _config_sections(it: Any, path: str, sections: dict[str, dict], nested: str | None, only: str | None = None) -> None:
    """A `--config` file's model / data / trainer sections (a model given by class_path: its init_args); `nested`:
    the subcommand whose section holds them (a config given before it); `only`: the file is that one section."""
    from memlint.extract import runtime_config
    from memlint.extract.values import Const, Dict

    doc = runtime_config.read(it, Const(path, "command-line", None), f"LightningCLI --config {path}")
    if isinstance(doc, Dict) and nested is not None and isinstance(doc.items.get(nested), Dict):
        doc = doc.items[nested]
    if isinstance(doc, Dict) and only is not None:
        doc = Dict({only: doc})
    if not isinstance(doc, Dict):
        return
    for name in _SECTIONS:
        part = doc.items.get(name)
        if isinstance(part, Dict) and isinstance(part.items.get("init_args"), Dict):
            part = part.items["init_args"]
        if isinstance(part, Dict):
            sections[name].update({k: v for k, v in part.items.items() if isinstance(k, str)})


def _build(handlers: Any, c: Any, cls: Any, kwargs: dict) -> Any:
    """The checkout's class built with `kwargs` as LightningCLI builds it (its other parameters at their defaults)."""
    from memlint.extract.handlers.common import Call
    from memlint.extract.values import Class, Unknown

    if not isinstance(cls, Class):
        return Unknown("a class LightningCLI builds that memlint cannot read")
    return handlers.construct_user(Call(c.it, cls.name, [], dict(kwargs), False, c.line), cls)
