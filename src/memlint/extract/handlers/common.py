"""What every handler module shares: the call being answered (`Call`), the answer "not mine" (`_PASS`),
and the reading of a dotted name (its last component, the library base a script class derives from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memlint.extract.values import Class, Ref


def _last(qual: str) -> str:
    return qual.rsplit(".", 1)[-1]


# Lightning's classes whose instances keep `self.hparams` (save_hyperparameters)
LIGHTNING_HPARAMS = frozenset({"LightningModule", "LightningDataModule", "HyperparametersMixin"})


def library_base(v: Any, names: Any) -> str | None:
    """The library class a user class derives from (`class MyArgs(TrainingArguments)`)."""
    seen = 0
    stack = [v]
    while stack and seen < 20:
        seen += 1
        x = stack.pop()
        if isinstance(x, Ref) and _last(x.qual) in names:
            return _last(x.qual)
        if isinstance(x, Class):
            stack.extend(x.bases)
    return None


@dataclass
class Call:
    """One call of a library name: what was called and with what."""

    it: Any                  # the Interpreter
    qual: str                # the resolved dotted name: "transformers.AutoModelForCausalLM.from_pretrained"
    args: list
    kwargs: dict
    open: bool               # **kwargs memlint could not resolve
    line: int | None

    @property
    def name(self) -> str:
        return _last(self.qual)

    @property
    def owner(self) -> str:
        """The component before the name: "AutoModelForCausalLM" in ….AutoModelForCausalLM.from_pretrained."""
        return _last(self.qual.rsplit(".", 1)[0]) if "." in self.qual else ""

    @property
    def head(self) -> str:
        return self.qual.split(".", 1)[0]

    def arg(self, i: int, name: str | None = None, default: Any = None) -> Any:
        """Positional argument i, else keyword `name`."""
        if i < len(self.args):
            return self.args[i]
        return self.kwargs.get(name, default) if name else default

    def new(self, kind: type, cls: str, positional: tuple[str, ...] | list[str] = (), **fields: Any) -> Any:
        """An object of `kind` built by this call, recorded in the facts."""
        kw = dict(self.kwargs)
        for pname, a in zip(positional, self.args):
            kw.setdefault(pname, a)
        o = kind(cls, self.line or 0, kw, {}, self.open, **fields)
        self.it.facts.objects.append(o)
        return o


_PASS = object()  # a handler's answer for "this call is not mine": the call falls through


def class_fields(cls: Any) -> dict:
    """The fields a dataclass declares with those of its user-class bases (the first base's chain; a subclass's
    own declaration wins), as a dataclass instance and tyro's flags see them."""
    fields: dict = {}
    c, seen = cls, 0
    while isinstance(c, Class) and seen < 20:
        seen += 1
        for k, v in c.fields.items():
            fields.setdefault(k, v)
        nxt = [b for b in c.bases if isinstance(b, Class)]
        c = nxt[0] if nxt else None
    return fields
