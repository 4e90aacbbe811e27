"""Every config format, found by discovery: a module of this package whose Reader subclass names its `kind` and
says how a file of its format looks (`matches`, `named`, `rank`) registers itself. Nothing here lists them: adding
a format is one module (its detection and its reader) plus its data in data/frameworks.json."""

from __future__ import annotations

from functools import lru_cache

from memlint.extract.configs.common import Reader


@lru_cache(maxsize=1)
def formats() -> tuple[type[Reader], ...]:
    """Every registered format, the most specific first (a file may carry markers of several: accelerate's
    distributed_type beats DeepSpeed's zero_optimization in an accelerate config that embeds a DeepSpeed block)."""
    import importlib
    import pkgutil
    from pathlib import Path

    for m in pkgutil.iter_modules([str(Path(__file__).parent)]):  # this package's modules, by file
        importlib.import_module(f"{__package__}.{m.name}")
    found: dict[str, type[Reader]] = {}
    stack = list(Reader.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.kind and "matches" in cls.__dict__:
            if found.setdefault(cls.kind, cls) is not cls:
                raise RuntimeError(f"two config formats named {cls.kind!r}: {found[cls.kind]} and {cls}")
    return tuple(sorted(found.values(), key=lambda c: (-c.rank, c.kind)))


def detect(keys: set[str], name: str = "", text: str = "") -> str | None:
    """The format whose markers the keys (and the text of a file that did not parse) carry; the file name breaks
    ties for broken files (deepspeed_z3.json, accelerate_fsdp.yaml)."""
    for fmt in formats():
        if fmt.matches(keys, text):
            return fmt.kind
    for fmt in formats():
        if fmt.named(name):
            return fmt.kind
    return None


def toml_format(keys: tuple[str, ...]) -> str | None:
    """The format whose TOML tables these are (torchtitan's job files: [model] [training] [parallelism] ...)."""
    return next((f.kind for f in formats() if f.toml_tables(keys)), None)


def reader(kind: str) -> type[Reader]:
    return next(f for f in formats() if f.kind == kind)


def names() -> tuple[str, ...]:
    return tuple(f.kind for f in formats())


def launcher_kinds() -> tuple[str, ...]:
    return tuple(f.kind for f in formats() if f.launcher)
