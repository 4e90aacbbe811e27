"""Config files a script reads at run time: json / yaml / toml / ruamel loads of a file it opened,
OmegaConf.create / merge / to_container, and the attribute-dict wrappers (EasyDict, Box, munchify,
ConfigDict; data/library_api.json "dict_wrappers").
"""

from __future__ import annotations

from typing import Any, Callable

from dataclasses import replace

from memlint.extract.objects import DataclassInstance, Obj, OpenFile, field_value
from memlint.extract.values import Class, Const, Dict, Seq, Unknown, flatten
from memlint.extract.handlers.common import Call, _PASS


def _text_data(src: Const, qual: str, is_json: bool) -> Any:
    """The data a JSON / YAML / TOML text written in the script holds (`CFG = json.loads(r'''{...}''')`), each value
    at the string's line."""
    import json

    text = src.value
    try:
        if is_json:
            data = json.loads(text)
        elif qual.split(".")[0] in ("toml", "tomllib", "tomli"):
            import tomllib

            data = tomllib.loads(text)
        else:
            from memlint.extract.configs.document import load_text

            doc = load_text(text, "the script", is_json=False)
            if doc.data is None and doc.diagnostics:
                return Unknown(f"{qual}() of a text that does not parse")
            data = doc.data
    except (ValueError, RecursionError):
        return Unknown(f"{qual}() of a text that does not parse")

    def conv(v: Any, key: str) -> Any:
        if isinstance(v, dict):
            return Dict({k: conv(x, f"{key}.{k}" if key else str(k)) for k, x in v.items()})
        if isinstance(v, list):
            return Seq([conv(x, f"{key}[{i}]") for i, x in enumerate(v)])
        return Const(v, "constant", src.line, src.chain + (f"{key}: {v!r} in the text {qual}() parses",), src.file)

    return conv(data, "")


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
            if c.head == "yaml" and isinstance(src, Const) and isinstance(src.value, str) \
                    and ("\n" in src.value or src.value.lstrip().startswith(("{", "["))):
                return _text_data(src, c.qual, is_json=False)  # yaml.safe_load("""..."""): the text itself
            return runtime_config.read(c.it, src, f"{c.qual}()")
        if c.name == "loads" and isinstance(src, Const) and isinstance(src.value, str):
            return _text_data(src, c.qual, is_json=c.head == "json")  # json.loads('{...}'): data written in the script
        if isinstance(src, Dict):  # yaml.safe_load of a dict a test put together, json.loads(json.dumps(d))
            return src
        return Unknown("a config file read at run time")

    def omegaconf(self, c: Call) -> Any:
        """OmegaConf.create(d) is d; OmegaConf.merge(a, b) is b over a; to_container/to_object are the same data.
        structured(Cls) / structured(Cls()) is the script's dataclass with its defaults, and a dict merged over such
        an instance sets its fields (a nested dict sets the fields of a nested dataclass: the config tree)."""
        if c.owner != "OmegaConf":
            return _PASS
        if c.name == "structured" and c.args and isinstance(c.args[0], Class) and c.args[0].is_dataclass:
            return self.construct_user(Call(c.it, c.args[0].name, [], {}, False, c.line), c.args[0])
        if c.name in ("create", "to_container", "to_object", "structured"):
            return c.args[0] if c.args else Dict({}, open=True)
        if c.args and isinstance(c.args[0], DataclassInstance):
            out: Any = c.args[0]
            for a in c.args[1:]:
                out = overlay(out, a, f"OmegaConf.merge (line {c.line})")
            return out
        merged = Dict({})
        for a in c.args:
            for d in flatten(a):
                if isinstance(d, Dict):
                    _deep_update(merged, d)
                else:
                    merged.open = True
        return merged

    def omegaconf_select(self, c: Call) -> Any:
        """OmegaConf.select(cfg, "trainer.model_name", default=x): the value at the dotted key of a config memlint
        read; the default where the key is absent (a config known whole), Unknown where it cannot be seen."""
        if c.owner != "OmegaConf":
            return _PASS
        cfg, key, default = c.arg(0, "cfg"), c.arg(1, "key"), c.kwargs.get("default")
        if not (isinstance(key, Const) and isinstance(key.value, str)):
            return Unknown("OmegaConf.select of an unknown key")
        node: Any = cfg
        for part in key.value.split("."):
            node = c.it.attribute(node, part, None) if isinstance(node, (Dict, Obj)) else Unknown(f"{key.value}")
            if isinstance(node, Unknown) and default is not None and _absent(cfg, key.value):
                return default
        return node

    def omegaconf_dotlist(self, c: Call) -> Any:
        """OmegaConf.from_cli() (the command's `key=value` words; or the list given) / from_dotlist(list): the
        dotted keys as a nested dict, each value read as YAML reads a scalar."""
        if c.owner != "OmegaConf":
            return _PASS
        words = c.arg(0, "args_list" if c.name == "from_cli" else "dotlist")
        if words is None and c.name == "from_cli":
            launch = c.it.launch
            if launch is None:
                return Unknown("OmegaConf.from_cli(): the command-line arguments")
            words = Seq([c.it.handlers.cli_const(c.it, w, f"{w!r}") for w in launch.argv])
        if isinstance(words, Const) and isinstance(words.value, (list, tuple)):
            words = Seq([words.with_value(w) for w in words.value])
        if not isinstance(words, Seq) or not all(isinstance(w, Const) and isinstance(w.value, str) for w in words.items):
            return Dict({}, open=True)
        import yaml

        out = Dict({})
        for w in words.items:
            key, eq, text = w.value.partition("=")
            if not eq or key.startswith("-"):
                continue
            try:
                value = yaml.safe_load(text) if text else None
            except yaml.YAMLError:
                value = text
            node = out
            parts = key.lstrip("+~").split(".")
            for part in parts[:-1]:
                nxt = node.items.get(part)
                if not isinstance(nxt, Dict):
                    nxt = node.items[part] = Dict({})
                node = nxt
            node.items[parts[-1]] = w.with_value(value, f"{key}={text}")
        return out

    def open_file(self, c: Call) -> Any:
        return OpenFile(c.arg(0, "file"))


def overlay(base: DataclassInstance, other: Any, how: str) -> Any:
    """A copy of the dataclass instance `base` with the keys of dict `other` set as its fields; a dict given for a
    field that holds a dataclass instance sets that instance's fields in turn. An unreadable `other` may set any
    field: the copy is open (its fields unknown)."""
    out = replace(base, kwargs=dict(base.kwargs), attrs=dict(base.attrs))
    opts = flatten(other)
    if len(opts) != 1 or not isinstance(opts[0], (Dict, DataclassInstance)):
        out.open = True
        return out
    items = opts[0].items if isinstance(opts[0], Dict) else {**opts[0].kwargs, **opts[0].attrs}
    for key, value in items.items():
        cur = out.get(key)
        if cur is None:
            cur = field_value(out, key) if not out.open else None
        if isinstance(cur, DataclassInstance) and isinstance(value, (Dict, DataclassInstance)):
            value = overlay(cur, value, how)
        out.attrs.pop(key, None)
        out.kwargs[key] = value
    if isinstance(opts[0], Dict) and opts[0].open:
        out.open = True
    return out


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
    "select": DataFileHandlers.omegaconf_select,
    "from_cli": DataFileHandlers.omegaconf_dotlist,
    "from_dotlist": DataFileHandlers.omegaconf_dotlist,
}


def _absent(cfg: Any, dotted: str) -> bool:
    """Whether a config read whole (no key memlint cannot see) lacks the dotted key."""
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, Dict) or node.open:
            return False
        if part not in node.items:
            return True
        node = node.items[part]
    return False
