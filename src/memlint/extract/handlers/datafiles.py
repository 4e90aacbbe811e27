"""Config files a script reads at run time: json / yaml / toml / ruamel loads of a file it opened,
OmegaConf.create / merge / to_container, and the attribute-dict wrappers (EasyDict, Box, munchify,
ConfigDict; data/library_api.json "dict_wrappers").
"""

from __future__ import annotations

from typing import Any, Callable

from memlint.extract.objects import OpenFile
from memlint.extract.values import Const, Dict, Unknown, flatten
from memlint.extract.handlers.common import Call, _PASS


class DataFileHandlers:
    """Data files and the dicts read from them."""

    def dict_wrapper(self, c: Call) -> Any:
        """EasyDict(cfg) / Box(cfg) / munchify(cfg) / ConfigDict(cfg) (data/library_api.json "dict_wrappers"): the
        same keys, read as attributes too."""
        d = c.arg(0, "d")
        if isinstance(d, Dict):
            return Dict({**d.items, **c.kwargs}, d.open)
        if d is None:
            return Dict(dict(c.kwargs))
        return Unknown(f"{c.name}() of a mapping memlint cannot read")

    def data_file(self, c: Call) -> Any:
        """json.load(f) / json.loads(text) / yaml.safe_load(f) / OmegaConf.load(path) / toml.load(f):
        the file the script opened, read statically."""
        from memlint.extract import runtime_config

        if c.head not in ("json", "yaml", "omegaconf", "OmegaConf", "toml", "tomllib", "tomli", "ruamel") \
                and c.owner != "OmegaConf":
            return _PASS
        src = c.arg(0, "stream" if c.head == "yaml" else "fp")
        if src is None:
            src = next(iter(c.kwargs.values()), None)
        if isinstance(src, OpenFile):
            return runtime_config.read(c.it, src.path, f"{c.qual}()")
        if c.owner == "OmegaConf" or c.name in ("load", "safe_load", "full_load") and isinstance(src, Const):
            return runtime_config.read(c.it, src, f"{c.qual}()")
        if isinstance(src, Dict):  # yaml.safe_load of a dict a test put together, json.loads(json.dumps(d))
            return src
        return Unknown("a config file read at run time")

    def omegaconf(self, c: Call) -> Any:
        """OmegaConf.create(d) is d; OmegaConf.merge(a, b) is b over a; to_container/to_object are the same data."""
        if c.owner != "OmegaConf":
            return _PASS
        if c.name in ("create", "to_container", "to_object", "structured"):
            return c.args[0] if c.args else Dict({}, open=True)
        merged = Dict({})
        for a in c.args:
            for d in flatten(a):
                if isinstance(d, Dict):
                    _deep_update(merged, d)
                else:
                    merged.open = True
        return merged

    def open_file(self, c: Call) -> Any:
        return OpenFile(c.arg(0, "file"))


def _deep_update(into: Dict, other: Dict) -> None:
    for k, v in other.items.items():
        cur = into.items.get(k)
        if isinstance(cur, Dict) and isinstance(v, Dict):
            _deep_update(cur, v)
        else:
            into.items[k] = v
    into.open |= other.open


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "load": DataFileHandlers.data_file,
    "loads": DataFileHandlers.data_file,
    "safe_load": DataFileHandlers.data_file,
    "full_load": DataFileHandlers.data_file,
    "create": DataFileHandlers.omegaconf,
    "merge": DataFileHandlers.omegaconf,
    "to_container": DataFileHandlers.omegaconf,
    "to_object": DataFileHandlers.omegaconf,
    "structured": DataFileHandlers.omegaconf,
}
