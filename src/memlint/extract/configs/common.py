"""What every config reader shares: building plan Values with spans, typed reads, defaults.

A value written in the file is "literal" and points at its key; a framework default is
"library-default" and says which framework version and source line it comes from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from memlint.extract.configs import frameworks
from memlint.extract.configs.document import Document
from memlint.plan import Diagnostic, Span, TrainingPlan, Value
from memlint.vocab import ascii_digits, dtype_name  # noqa: F401 - the readers' dtype spelling

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0", ""}


class Bad(Exception):
    """A value of the wrong type: already reported as a bad-value diagnostic."""


class Reader:
    """Accumulates the fields, notes and diagnostics of one config's plan.

    A format registers itself by subclassing: its `kind`, how a file of it looks (`matches`: its top-level and
    "section.key" keys, and its text when it did not parse; `named`: a broken file's name), and a `rank` among
    the formats whose markers a file may share (the most specific first). configs/registry.py finds them."""

    kind = ""
    rank = 0
    launcher = False  # a launcher's config (DeepSpeed, accelerate): laid over a script's plan, names no model
    alone = ""  # a launcher: what its file alone cannot say (it names no model)

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return False

    @staticmethod
    def named(name: str) -> bool:
        return False

    @staticmethod
    def launched(plan: Any, launch: Any) -> Any:
        """The plan of a config of this format as `launch` (its framework tool's command) runs it, after the
        command's overrides: what the command adds that the file cannot say (torchtune's recipe file). `plan` itself
        by default."""
        return plan

    @staticmethod
    def toml_tables(keys: tuple[str, ...]) -> bool:
        """A TOML file's top-level tables are this format's (asked before the parse, and of a file that did not
        parse: its syntax error is then this format's finding)."""
        return False

    def __init__(self, doc: Document, file: Path) -> None:
        self.doc = doc
        self.file = file
        self.read_files: list[str] = []  # other files read (a DeepSpeed JSON): the plan's sources
        self.fields: dict[str, Value] = {}
        self.notes: list[str] = []
        self.diagnostics: list[Diagnostic] = list(doc.diagnostics)
        self.unread: dict[tuple, str] = {}  # key paths whose value could not be read, and why (an unresolved ${...})

    # ---- values ----------------------------------------------------------------------------

    def lit(self, name: str, value: Any, *path: Any, chain: tuple[str, ...] = ()) -> None:
        key = ".".join(str(p) for p in path)
        self.fields[name] = Value(value, "literal", self.doc.span(*path), chain or (f"{key}: {self.doc.get(*path)!r}",))

    def lib(self, name: str, value: Any, why: str) -> None:
        self.fields[name] = Value(value, "library-default", None, (why,))

    def fw(self, name: str, key: str, convert: Callable[[Any], Any] = lambda x: x) -> Any:
        """Set `name` from the framework's default for `key`; returns the raw default."""
        d = frameworks.default(self.kind, key)
        if d is None:
            self.unknown(name, f"no {self.kind} default for {key}")
            return None
        self.lib(name, convert(d.value), d.why)
        return d.value

    def unknown(self, name: str, why: str, *path: Any) -> None:
        self.fields[name] = Value(None, "unknown", self.doc.span(*path) if path else None, (why,))
        self.notes.append(f"{name} is unknown ({why}); pass --assume {name}=VALUE")

    def bad(self, message: str, *path: Any) -> None:
        self.diagnostics.append(Diagnostic("bad-value", message, self.doc.span(*path) or Span(self.doc.path, 1, 1)))

    # ---- typed reads -----------------------------------------------------------------------

    def _refused(self, path: tuple) -> None:
        if tuple(path) in self.doc.refused or tuple(path) in self.unread:  # already reported
            raise Bad()

    def int_at(self, *path: Any) -> int | None:
        """The integer at `path`, None when absent or null; Bad when of another type."""
        self._refused(path)
        v = self.doc.get(*path)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, str) and ascii_digits(v.strip()):
                return int(v)
            self.bad(f"{'.'.join(map(str, path))} should be an integer, not {v!r}", *path)
            raise Bad()
        return v

    def bool_at(self, *path: Any) -> bool | None:
        self._refused(path)
        v = self.doc.get(*path)
        if v is None:
            return None
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
            return v.strip().lower() in _TRUE
        if isinstance(v, int):
            return bool(v)
        self.bad(f"{'.'.join(map(str, path))} should be true or false, not {v!r}", *path)
        raise Bad()

    def number_field(self, name: str, *path: Any, default_key: str | None = None) -> float | None:
        """A numeric plan field (a probability, a rate): literal from the file, else the framework default."""
        self._refused(path)
        v = self.doc.get(*path)
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                pass
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            self.unknown(name, f"{'.'.join(map(str, path))} is not a number: {v!r}", *path)
            return None
        return self._literal_or_default(name, v, path, default_key)

    def int_field(self, name: str, *path: Any, default_key: str | None = None) -> int | None:
        """An integer plan field: literal from the file, else the framework default."""
        try:
            v = self.int_at(*path)
        except Bad:
            why = self.unread.get(tuple(path)) or ("not read (a refused YAML tag)" if tuple(path) in self.doc.refused else "is not an integer")
            self.unknown(name, f"{'.'.join(map(str, path))} {why}", *path)
            return None
        return self._literal_or_default(name, v, path, default_key)

    def _literal_or_default(self, name: str, v: Any, path: tuple, default_key: str | None) -> Any:
        """The file's value as a literal, else the framework's default for `default_key` (None: neither)."""
        if v is not None:
            self.lit(name, v, *path)
            return v
        if default_key:
            return self.fw(name, default_key)
        return None

    def checked_keys(self, known: Any = None, misplaced: dict | None = None, prefix: tuple = (), where: str = "",
                     policy: str | None = None) -> None:
        section = self.doc.get(*prefix) if prefix else self.doc.data
        if not isinstance(section, dict):
            return
        keys = [(k, self.doc.span(*prefix, k)) for k in section]
        self.diagnostics.extend(frameworks.check_keys(self.kind, keys, known, misplaced, where, policy))

    # ---- result ----------------------------------------------------------------------------

    def plan(self) -> TrainingPlan:
        return TrainingPlan(self.doc.path, self.fields, tuple(dict.fromkeys(self.notes)), tuple(self.diagnostics), self.kind,
                            sources=tuple(dict.fromkeys(self.read_files)))


def near(config: Path, ref: str) -> list[tuple[Path, str]]:
    """Where a path named inside a config may be, each with the path relative to the config:
    next to the config, then in the folders above it (LLaMA-Factory and axolotl examples name
    `examples/deepspeed/ds_z3_config.json` from the repository root they are launched in),
    then the working directory."""
    out = [(config.parent / ref, ref)]
    if not os.path.isabs(ref):
        up = config.parent
        for depth in range(1, 6):
            if up.parent == up:
                break
            up = up.parent
            out.append((up / ref, "../" * depth + ref))
    out.append((Path.cwd() / ref, ""))
    return out


def shown_near(shown: str, ref: str) -> str:
    return os.path.normpath(os.path.join(os.path.dirname(shown), ref))


_OPTIMIZER_FAMILIES = {"torch": "torch", "bitsandbytes": "bnb", "bnb": "bnb", "transformers": "transformers",
                       "torchao": "torchao", "schedulefree": "schedulefree", "optimi": "optimi", "lomo_optim": "lomo_optim",
                       "deepspeed": "deepspeed", "apex": "apex"}


def optimizer_of_class(path: str) -> str | None:
    """The Trainer `optim` name of an optimizer class path (torch.optim.AdamW -> adamw_torch), from
    library_api.json; None for a class memlint does not know."""
    from memlint.library import api

    module, _, cls = path.strip().rpartition(".")
    family = _OPTIMIZER_FAMILIES.get(module.split(".")[0]) if module else None
    return api.optimizer_class(family, cls) if family else None
