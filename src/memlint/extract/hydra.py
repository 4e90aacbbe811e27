"""Hydra configs: the DictConfig a `@hydra.main(config_path=..., config_name=...)` entry point
receives, composed statically the way Hydra composes it (nothing imported, nothing run).

What is followed (Hydra >= 1.1 semantics):

* the primary config `<config_path>/<config_name>.yaml`, beside the file that declares the entry;
  `--config-name`/`-cn` and `--config-path`/`-cp` on the command line replace them;
* its `defaults:` list, in order: `group: option` loads `<group>/<option>.yaml` into the package
  `group` (relative to the containing config's group and package; a leading `/` is absolute),
  `group@pkg: option` places it at `pkg`, `optional`, `null` and `_self_` (where the config's own
  keys merge; absent, they merge last), plain names of configs in the same group;
* `# @package _global_` / `_group_` / `a.b` headers;
* `override group: option` entries (an experiment config's `override /model: X`) and the command
  line's `group=option` / `group@pkg=option`, which choose the option before anything is loaded;
* command-line value overrides `a.b=v`, `+a.b=v`, `++a.b=v`, `~a.b`, values read as Hydra reads
  them (YAML scalars and flow lists);
* `${a.b}` interpolations over the composed config (`${oc.env:X,default}` takes the default);
  resolvers (`${now:...}`, custom ones) and `???` stay unknown, never guessed.

Each value keeps the file and line it was written at; a command-line value points at the launch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlint.extract.runtime_config import MISSING, lookup
from memlint.extract.values import Const, Dict, Seq, Unknown

MAX_CONFIGS = 512            # config files one composition loads (each file is parsed once)
MAX_CONFIG_BYTES = 1_000_000
_PACKAGE = re.compile(r"^\s*#\s*@package\s+(\S+)", re.M)
_INTERP = re.compile(r"\$\{([^{}]+)\}")
_WHOLE = re.compile(r"^\$\{([^{}]+)\}$")


@dataclass
class Leaf:
    """One value of the composed config and where it was written."""

    value: Any
    shown: str | None
    line: int | None
    source: str = "literal"
    how: str = ""


class Composer:
    def __init__(self, root: Path, shown_root: str, argv: list[str], launch: Any = None) -> None:
        self.root = root
        self.shown_root = shown_root
        self.launch = launch
        self.loaded = 0
        self.notes: list[str] = []
        self.cli_choices: dict[str, str | None] = {}   # group -> option chosen on the command line
        self.cli_packages: dict[str, str] = {}         # group -> package given with group@pkg=option
        self.cli_values: list[tuple[str, str, str]] = []  # (op, dotted key, raw value)
        self.overrides: dict[str, Any] = {}            # group -> option from `override` entries
        self.cache: dict[Path, Any] = {}
        self.copied = 0  # values copied into this composition (budget.MAX_HYDRA_VALUES)
        for word in argv:
            self._read_override(word)

    # ---- the command line ---------------------------------------------------------------------

    def _read_override(self, word: str) -> None:
        if word.startswith("-"):
            return  # --config-name and other flags are read by the caller
        if word.startswith("~"):
            self.cli_values.append(("~", word[1:].split("=", 1)[0], ""))
            return
        if "=" not in word:
            return
        key, raw = word.split("=", 1)
        op = "++" if key.startswith("++") else "+" if key.startswith("+") else ""
        key = key[len(op):]
        group, _, pkg = key.partition("@")
        if self._is_group(group):
            self.cli_choices[group] = None if raw == "null" else raw
            if pkg:
                self.cli_packages[group] = pkg
            return
        self.cli_values.append((op, key, raw))

    def _is_group(self, group: str) -> bool:
        from memlint.files import is_dir

        return bool(group) and _inside(group) and is_dir(self.root / group)

    # ---- the defaults tree ----------------------------------------------------------------------

    def compose(self, name: str) -> dict:
        """The merged tree of Leafs for primary config `name` with every override applied."""
        items: list[tuple[str, Any]] = []
        for _ in range(3):  # `override` entries found while walking choose options for the next walk
            before = dict(self.overrides)
            self.loaded = self.copied = 0
            items = self._build(name, "", "", primary=True)
            if self.overrides == before:
                break
        tree: dict = {}
        for pkg, data in items:
            _merge_at(tree, pkg, data)
        for op, key, raw in self.cli_values:
            self._apply_value(tree, op, key, raw)
        _resolve_tree(tree, tree, self.notes)
        return tree

    def _build(self, name: str, group: str, pkg: str, primary: bool = False) -> list[tuple[str, Any]]:
        from memlint.files import is_file

        rel = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
        if not _inside(rel):  # `/../x` or `../../x`: Hydra's config folder is the whole world it reads
            self.notes.append(f"hydra: {name} leaves the config folder; not read")
            return []
        path = self.root / rel
        if not is_file(path) and is_file(self.root / f"{name}.yml"):
            path = self.root / f"{name}.yml"
        self.loaded += 1
        if self.loaded > MAX_CONFIGS:
            note = f"hydra: more than {MAX_CONFIGS} config files; the rest were not read"
            if note not in self.notes:
                self.notes.append(note)
            return []
        loaded = self._load(path)
        if loaded is None:
            return []
        data, defaults, header = loaded
        if header is not None and not primary:
            pkg = "" if header == "_global_" else group.replace("/", ".") if header == "_group_" else \
                header.removeprefix("_global_.")
        elif header is not None and header not in ("_global_", "_group_"):
            pkg = header
        items: list[tuple[str, Any]] = []
        self_at: int | None = None
        for entry in defaults:
            value = entry.value if isinstance(entry, Leaf) else entry
            if value == "_self_":
                self_at = len(items)
            elif isinstance(value, str):  # a config of the same group, merged at this package
                items += self._build(_join(group, value), group, pkg)
            elif isinstance(value, dict) and len(value) == 1:
                [(key, option)] = value.items()
                items += self._entry(str(key), option.value if isinstance(option, Leaf) else option, group, pkg)
        own = (pkg, data)
        if self_at is None:
            items.append(own)
        else:
            items.insert(self_at, own)
        return items

    def _entry(self, key: str, option: Any, group: str, pkg: str) -> list[tuple[str, Any]]:
        words = key.split()
        optional = "optional" in words[:-1]
        override = "override" in words[:-1]
        key = words[-1]
        grp, _, at = key.partition("@")
        absolute = grp.startswith("/")
        abs_group = grp.lstrip("/") if absolute else _join(group, grp)
        if override:
            self.overrides.setdefault(abs_group, option)
            return []
        if abs_group in self.cli_choices:
            option = self.cli_choices[abs_group]
            at = self.cli_packages.get(abs_group, at)
        elif abs_group in self.overrides:
            option = self.overrides[abs_group]
        if isinstance(option, Leaf):
            option = option.value
        if option is None or option == "???":
            if option == "???":
                self.notes.append(f"hydra: the config group {abs_group} has no option chosen (???)")
            return []
        options = [o.value if isinstance(o, Leaf) else o for o in option] if isinstance(option, list) else [option]
        base = "" if absolute else pkg
        if at:
            target = at.removeprefix("_global_").lstrip(".") if at.startswith("_global_") else _join(base, at, ".")
        else:
            target = abs_group.replace("/", ".") if absolute else _join(base, grp.replace("/", "."), ".")
        out = []
        from memlint.files import is_file

        if not _inside(abs_group):
            self.notes.append(f"hydra: the config group {grp} leaves the config folder; not read")
            return []
        for opt in options:
            if not isinstance(opt, (str, int, float)) or not _inside(f"{abs_group}/{opt}"):
                continue
            path = self.root / abs_group / f"{opt}.yaml"
            if not is_file(path) and not is_file(self.root / abs_group / f"{opt}.yml"):
                if not optional:
                    self.notes.append(f"hydra: {abs_group}/{opt}.yaml not found; its keys are unknown")
                continue
            out += self._build(f"{abs_group}/{opt}", abs_group, target)
        return out

    def _load(self, path: Path) -> tuple[dict, list, str | None] | None:
        from memlint.extract.budget import MAX_HYDRA_VALUES

        if path not in self.cache:
            read = self._read(path)
            self.cache[path] = None if read is None else (*read, _count(read[0]))
        hit = self.cache[path]
        if hit is None:
            return None
        self.copied += hit[3]
        if self.copied > MAX_HYDRA_VALUES:  # a 20,000-key option mentioned 500 times: not copied 500 times
            note = (f"hydra: the composition copies more than {MAX_HYDRA_VALUES:,} values, over memlint's budget; "
                    f"{_shown(path)} and the configs after it were not merged")
            if not any(n.startswith("hydra: the composition copies") for n in self.notes):
                self.notes.append(note)
            return None
        return _copy(hit[0]), hit[1], hit[2]

    def _read(self, path: Path) -> tuple[dict, list, str | None] | None:
        from memlint.extract.configs.document import load_text
        from memlint.files import read_text

        try:
            if path.stat().st_size > MAX_CONFIG_BYTES:
                self.notes.append(f"hydra: {path.name} is too large to read")
                return None
            text = read_text(path, encoding="utf-8-sig")  # a regular file within max-file-size
        except (OSError, UnicodeDecodeError):
            self.notes.append(f"hydra: {path.name} not found or unreadable; its keys are unknown")
            return None
        shown = _shown(path)
        doc = load_text(text, shown)
        if not isinstance(doc.data, dict):
            if doc.data is None and doc.diagnostics:
                self.notes.append(f"hydra: {shown}: {doc.diagnostics[0].message}")
            return ({}, [], None) if doc.data is None else None
        head = _PACKAGE.search(text[:2000])
        defaults = doc.data.get("defaults", [])
        data = {k: v for k, v in doc.data.items() if k != "defaults"}
        tree = _leafify(data, doc, shown, ())
        return tree, _leafify(defaults, doc, shown, ("defaults",)) if isinstance(defaults, list) else [], \
            head.group(1) if head else None

    # ---- command-line values --------------------------------------------------------------------

    def _apply_value(self, tree: dict, op: str, key: str, raw: str) -> None:
        parts = key.split(".")
        cur = tree
        for p in parts[:-1]:
            nxt = cur.get(p)
            if not isinstance(nxt, dict):
                if op == "~":
                    return
                nxt = cur[p] = {}
            cur = nxt
        if op == "~":
            cur.pop(parts[-1], None)
            return
        line = self.launch.line_of(f"{key}={raw}") if self.launch is not None else None
        origin = self.launch.origin if self.launch is not None and self.launch.line else None
        cur[parts[-1]] = _leafify_cli(_cli_value(raw), origin, line, f"{op}{key}={raw}")


def _leafify(data: Any, doc: Any, shown: str, path: tuple) -> Any:
    if isinstance(data, dict):
        return {k: _leafify(v, doc, shown, path + (k,)) for k, v in data.items()}
    if isinstance(data, list):
        return [_leafify(v, doc, shown, path + (i,)) for i, v in enumerate(data)]
    span = doc.span(*path) if path else None
    return Leaf(data, shown, span.line if span else None, "literal", f"{'.'.join(map(str, path))}: {data!r} ({shown})")


def _leafify_cli(data: Any, origin: str | None, line: int | None, how: str) -> Any:
    if isinstance(data, dict):
        return {k: _leafify_cli(v, origin, line, how) for k, v in data.items()}
    if isinstance(data, list):
        return [_leafify_cli(v, origin, line, how) for v in data]
    return Leaf(data, origin, line, "command-line", f"{how} (hydra override)")


def _cli_value(raw: str) -> Any:
    """A Hydra override's value: YAML's reading of it (numbers, bools, null, [a,b], quoted strings)."""
    import yaml

    try:
        v = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        return raw
    return v if isinstance(v, (str, int, float, bool, list, dict)) or v is None else raw


def _merge_at(tree: dict, pkg: str, data: Any) -> None:
    cur = tree
    if pkg:
        for p in pkg.split("."):
            nxt = cur.get(p)
            if not isinstance(nxt, dict):
                nxt = cur[p] = {}
            cur = nxt
    if isinstance(data, dict):
        _deep_merge(cur, data)


def _deep_merge(into: dict, new: dict) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _deep_merge(into[k], v)
        else:
            into[k] = v


def _resolve_leaf(leaf: Leaf, tree: dict, depth: int = 0) -> Any:
    """A Leaf with ${...} resolved against the composed tree, or an Unknown naming what is missing."""
    text = leaf.value
    if not (isinstance(text, str) and "${" in text):
        return leaf
    if depth > 8:
        return Unknown(f"{text}: interpolation too deep")
    m = _WHOLE.match(text)
    if m:
        target = _target(m.group(1), tree)
        if isinstance(target, Leaf):
            target = _resolve_leaf(target, tree, depth + 1)
            if isinstance(target, Leaf):
                return Leaf(target.value, leaf.shown, leaf.line, leaf.source, f"{leaf.how} -> {text} = {target.value!r}")
            return target
        if isinstance(target, (dict, list)):
            return target
        return Unknown(f"{text}: a Hydra interpolation memlint cannot resolve")
    parts = []
    pos = 0
    for mm in _INTERP.finditer(text):
        target = _target(mm.group(1), tree)
        if isinstance(target, Leaf):
            target = _resolve_leaf(target, tree, depth + 1)
        if not isinstance(target, Leaf):
            return Unknown(f"{text}: a Hydra interpolation memlint cannot resolve")
        parts += [text[pos:mm.start()], str(target.value)]
        pos = mm.end()
    parts.append(text[pos:])
    return Leaf("".join(parts), leaf.shown, leaf.line, leaf.source, leaf.how)


def _target(expr: str, tree: dict) -> Any:
    expr = expr.strip()
    if expr.startswith("oc.env:"):
        bits = expr[len("oc.env:"):].split(",", 1)
        return Leaf(_cli_value(bits[1].strip()), None, None) if len(bits) > 1 else None
    if ":" in expr or expr.startswith("."):
        return None  # a resolver, or a relative reference (resolved only absolutely here)
    found = lookup(tree, expr)
    return None if found is MISSING else found


def _resolve_tree(node: Any, tree: dict, notes: list[str]) -> None:
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in list(items):
        if isinstance(v, Leaf):
            node[k] = _resolve_leaf(v, tree)
        else:
            _resolve_tree(v, tree, notes)


def to_value(node: Any) -> Any:
    """The composed tree as the interpreter's values: Dict / Seq / Const (each at its file and line)."""
    if isinstance(node, dict):
        return Dict({k: to_value(v) for k, v in node.items()})
    if isinstance(node, list):
        return Seq([to_value(v) for v in node])
    if isinstance(node, Leaf):
        if node.value == "???":
            return Unknown(f"{node.how.split(':')[0]}: a required value (???) the command line does not give")
        return Const(node.value, node.source, node.line, (node.how,), node.shown)
    return node


def _join(a: str, b: str, sep: str = "/") -> str:
    import posixpath

    joined = f"{a}{sep}{b}" if a and b else a or b
    return posixpath.normpath(joined) if sep == "/" and joined else joined


def _inside(rel: str) -> bool:
    """Whether a config path relative to the config folder stays inside it (no `..` climbing out)."""
    import posixpath

    norm = posixpath.normpath(str(rel).lstrip("/"))
    return not (norm == ".." or norm.startswith("../") or posixpath.isabs(norm))


def _count(tree: Any) -> int:
    """The values (leaves and containers) of a loaded tree."""
    n, stack = 0, [tree]
    while stack:
        v = stack.pop()
        n += 1
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n


def _copy(tree: Any) -> Any:
    """A fresh copy of a loaded tree's containers (a config merged twice must not share them)."""
    if isinstance(tree, dict):
        return {k: _copy(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_copy(v) for v in tree]
    return tree


def _shown(path: Path) -> str:
    import os

    try:
        return os.path.relpath(path, Path.cwd())
    except ValueError:
        return str(path)


def hydra_config(script_dir: Path, config_path: str | None, config_name: str | None, launch: Any) -> tuple[Any, list[str]]:
    """The config a @hydra.main entry receives under `launch` (or with no overrides), as a value."""
    argv = list(launch.argv) if launch is not None else []
    i = 0
    while i < len(argv):  # --config-name X / -cn X / --config-name=X (and the same for the path)
        word = argv[i]
        for flags, is_name in ((("--config-name", "-cn"), True), (("--config-path", "-cp"), False)):
            for flag in flags:
                value = None
                if word == flag and i + 1 < len(argv):
                    value = argv[i + 1]
                elif word.startswith(flag + "="):
                    value = word.split("=", 1)[1]
                if value is not None:
                    if is_name:
                        config_name = value
                    else:
                        config_path = value
        i += 1
    if config_path is None or config_name is None:
        return Unknown("a Hydra config without a config_path and config_name"), []
    from memlint.files import OUTSIDE, allowed, is_dir, is_file

    root = (script_dir / config_path) if not Path(config_path).is_absolute() else Path(config_path)
    if not allowed(root):
        return Unknown(f"the Hydra config folder {config_path}: {OUTSIDE}"), []
    if not is_dir(root):
        return Unknown(f"the Hydra config folder {config_path} is not in the checkout"), []
    composer = Composer(root, config_path, [w for w in argv if not w.startswith("-")], launch)
    name = config_name[:-5] if config_name.endswith(".yaml") else config_name
    if not _inside(name):
        return Unknown(f"the Hydra config {name} leaves the config folder {config_path}; not read"), []
    if not is_file(root / f"{name}.yaml") and not is_file(root / f"{name}.yml"):
        return Unknown(f"the Hydra config {config_path}/{name}.yaml is not in the checkout"), []
    tree = composer.compose(name)
    return to_value(tree), composer.notes
