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
* `${a.b}`, `${.x}` / `${..x}` (relative) and nested interpolations over the composed config
  (`${oc.env:X,default}` takes the default, `${oc.select:key,default}`); a resolver the script registers
  (`OmegaConf.register_new_resolver(name, fn)`) is called on known arguments (a lambda's arithmetic, `eval` of
  arithmetic, torch.cuda.device_count: the launch's GPUs); a value computed from a GPU count the launch does not
  give is known only when it is the same for every count of a node (1-8); `${now:...}` and `???` stay unknown.

Each value keeps the file and line it was written at; a command-line value points at the launch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlint.extract.runtime_config import MISSING
from memlint.extract.values import Const, DeviceCount, Dict, Seq, Unknown

MAX_CONFIGS = 512            # config files one composition loads (each file is parsed once)
MAX_CONFIG_BYTES = 1_000_000
_PACKAGE = re.compile(r"^\s*#\s*@package\s+(\S+)", re.M)


@dataclass
class Leaf:
    """One value of the composed config and where it was written."""

    value: Any
    shown: str | None
    line: int | None
    source: str = "literal"
    how: str = ""


class Composer:
    def __init__(self, root: Path, shown_root: str, argv: list[str], launch: Any = None, resolvers: Any = None,
                 search: list[Path] | None = None) -> None:
        self.root = root
        self.search = list(search or ())  # the primary config's hydra.searchpath folders, after the config folder
        self.resolvers = resolvers  # call(name, args, how): a resolver the script registered, on known arguments
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

        return bool(group) and _inside(group) and any(is_dir(r / group) for r in (self.root, *self.search))

    def _find(self, rel: str) -> Path:
        """A config file of the composition: in the config folder, else in the first searchpath folder that has it."""
        from memlint.files import is_file

        for r in (self.root, *self.search):
            for cand in (r / rel, (r / rel).with_suffix(".yml")):
                if is_file(cand):
                    return cand
        return self.root / rel

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
        resolve_tree(tree, self.resolvers, self.notes)
        return tree

    def _build(self, name: str, group: str, pkg: str, primary: bool = False) -> list[tuple[str, Any]]:
        from memlint.files import is_file

        rel = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
        if not _inside(rel):  # `/../x` or `../../x`: Hydra's config folder is the whole world it reads
            self.notes.append(f"hydra: {name} leaves the config folder; not read")
            return []
        path = self._find(rel)
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
            path = self._find(f"{abs_group}/{opt}.yaml")
            if not is_file(path):
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


class PerDevice(Unknown):
    """A value computed from torch.cuda.device_count() (a resolver's argument or result) on a machine memlint does not see."""


_DEVICE_TRIES = tuple(range(1, 9))  # the GPU counts a value that depends on the machine's is computed for (a node's)


class Resolution:
    """`${...}` of a composed tree resolved as OmegaConf resolves them: absolute (`${a.b}`) and relative (`${.x}`,
    `${..x}`) references, nested interpolations, and resolvers: `oc.env` / `oc.select` with their defaults, and the
    ones the script registered (`OmegaConf.register_new_resolver(name, fn)`), called through `call(name, args, how)`
    on known arguments. `devices`: the GPU count torch.cuda.device_count() is taken to return (None: unknown)."""

    def __init__(self, tree: dict, call: Any, devices: int | None = None) -> None:
        self.tree, self.call, self.devices = tree, call, devices
        self.done: dict[tuple, Any] = {}
        self.active: set[tuple] = set()
        self.per_device: list[tuple] = []

    def run(self) -> None:
        self._walk(self.tree, ())

    def _walk(self, node: Any, path: tuple) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in list(items):
            if isinstance(v, Leaf):
                self.at(path + (k,))
            else:
                self._walk(v, path + (k,))

    def node(self, path: tuple) -> Any:
        cur: Any = self.tree
        for p in path:
            if isinstance(cur, dict) and isinstance(p, int) and p not in cur and str(p) in cur:
                p = str(p)
            if isinstance(cur, dict) and p in cur:
                cur = cur[p]
            elif isinstance(cur, list) and isinstance(p, int) and -len(cur) <= p < len(cur):
                cur = cur[p]
            else:
                return MISSING
        return cur

    def _set(self, path: tuple, value: Any) -> None:
        parent = self.node(path[:-1])
        if isinstance(parent, (dict, list)):
            parent[path[-1]] = value

    def at(self, path: tuple) -> Any:
        """The resolved value at `path` (a Leaf, a dict/list, an Unknown), resolved once."""
        v = self.node(path)
        if not (isinstance(v, Leaf) and isinstance(v.value, str) and "${" in v.value):
            return v
        if path in self.done:
            return self.done[path]
        if path in self.active or len(self.active) > 32:
            return Unknown(f"{v.value}: a Hydra interpolation that refers to itself")
        self.active.add(path)
        try:
            out = self._resolve(v, path)
        finally:
            self.active.discard(path)
        if isinstance(out, PerDevice):
            self.per_device.append(path)
        self.done[path] = out
        self._set(path, out)
        return out

    def _resolve(self, leaf: Leaf, path: tuple) -> Any:
        text = leaf.value
        try:
            segs, end = _scan(text, 0, "")
        except (ValueError, IndexError, RecursionError):
            return Unknown(f"{text}: a Hydra interpolation memlint cannot read")
        if end != len(text):
            return Unknown(f"{text}: a Hydra interpolation memlint cannot read")
        got = self._segments(segs, path, whole=True)
        if isinstance(got, Leaf):
            return Leaf(got.value, leaf.shown, leaf.line, leaf.source, f"{leaf.how} -> {got.value!r}{got.how}")
        return got

    def _segments(self, segs: list, path: tuple, whole: bool = False, arg: bool = False) -> Any:
        """The value of a string of literal text and interpolations: an interpolation alone keeps its value's type;
        text around one makes a string; an argument of plain text is read as a YAML scalar."""
        parts = [s for s in segs if not (arg and isinstance(s, str) and not s.strip())]
        if len(parts) == 1 and not isinstance(parts[0], str):
            return self._node(parts[0], path)
        if arg and all(isinstance(s, str) for s in segs):
            return Leaf(_cli_value("".join(segs).strip()), None, None, how="")
        out = []
        for s in segs:
            if isinstance(s, str):
                out.append(s)
                continue
            v = self._node(s, path)
            if isinstance(v, (PerDevice, DeviceCount)):
                return PerDevice(f"a string made with {v.why}")
            if not isinstance(v, Leaf):
                return v if isinstance(v, Unknown) else Unknown("a Hydra interpolation of a whole node inside a string")
            out.append(str(v.value))
        return Leaf("".join(out).strip() if arg else "".join(out), None, None, how="")

    def _node(self, seg: tuple, path: tuple) -> Any:
        if seg[0] == "quoted":
            v = self._segments(seg[1], path)
            return Leaf(str(v.value), None, None, how="") if isinstance(v, Leaf) else v
        if seg[0] == "ref":
            key = self._segments(seg[1], path)
            if not isinstance(key, Leaf):
                return key
            return self._reference(str(key.value).strip(), path)
        _, name, args = seg
        values = []
        for a in args:
            v = self._segments(a, path, arg=True)
            if isinstance(v, Unknown) and name not in ("oc.select",):
                return PerDevice(f"${{{name}:...}}: {v.why}") if isinstance(v, (PerDevice, DeviceCount)) else v
            values.append(v)
        return self._call(name, values, path)

    def _reference(self, expr: str, path: tuple) -> Any:
        dots = len(expr) - len(expr.lstrip("."))
        keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", expr[dots:])]
        base = path[:-1] if dots else ()
        if dots > 1:
            base = base[:len(base) - (dots - 1)] if dots - 1 <= len(base) else None
        if base is None or not keys:
            return Unknown(f"${{{expr}}}: a Hydra interpolation memlint cannot resolve")
        target = base + tuple(keys)
        found = self.node(target)
        if found is MISSING:
            return Unknown(f"${{{expr}}}: a Hydra interpolation memlint cannot resolve")
        got = self.at(target)
        if isinstance(got, Leaf):
            return Leaf(got.value, got.shown, got.line, got.source, f" (${{{expr}}} = {got.value!r})")
        return got

    def _call(self, name: str, args: list, path: tuple) -> Any:
        shown = f"${{{name}:{','.join(repr(a.value) if isinstance(a, Leaf) else '?' for a in args)}}}"
        if name == "oc.env":
            return Leaf(args[1].value, None, None, how=f" ({shown}: its default)") if len(args) > 1 and \
                isinstance(args[1], Leaf) else Unknown(f"{shown}: an environment variable")
        if name == "oc.select":
            if args and isinstance(args[0], Leaf):
                got = self._reference(str(args[0].value), path)
                if not isinstance(got, Unknown) or len(args) < 2:
                    return got
            return args[1] if len(args) > 1 and isinstance(args[1], Leaf) else Unknown(f"{shown}: a key memlint cannot find")
        if not all(isinstance(a, Leaf) for a in args):
            return Unknown(f"{shown}: a resolver given a whole config node")
        got = self.call(name, [a.value for a in args], shown) if self.call is not None else None
        if isinstance(got, DeviceCount) and self.devices is not None:
            return Leaf(self.devices, None, None, how=f" ({shown} = {self.devices} GPUs)")
        if isinstance(got, DeviceCount):
            return got
        if isinstance(got, Unknown):
            return got
        if got is None:
            return Unknown(f"{shown}: a resolver memlint does not evaluate")
        return Leaf(got, None, None, how=f" ({shown} = {got!r})")


def _scan(s: str, i: int, stops: str) -> tuple[list, int]:
    """Literal text and interpolations of `s` from `i` up to one of `stops` (at depth 0) or the end."""
    segs: list = []
    buf = []
    depth = 0
    arg = "," in stops
    while i < len(s):
        ch = s[i]
        if s.startswith("${", i):
            if buf:
                segs.append("".join(buf))
                buf = []
            node, i = _interp(s, i)
            segs.append(node)
            continue
        if ch == "\\" and i + 1 < len(s):
            buf.append(s[i + 1])
            i += 2
            continue
        if depth == 0 and ch in stops:
            break
        if arg and ch in "'\"" and not "".join(buf).strip():
            close = s.find(ch, i + 1)
            if close < 0:
                raise ValueError("unclosed quote")
            inner, _ = _scan(s[i + 1:close], 0, "")
            segs.append(("quoted", inner))
            buf = []
            i = close + 1
            continue
        if arg and ch in "[{":
            depth += 1
        elif arg and ch in "]}" and depth:
            depth -= 1
        buf.append(ch)
        i += 1
    if buf:
        segs.append("".join(buf))
    return segs, i


_RESOLVER_NAME = re.compile(r"\s*([A-Za-z_][\w.]*)\s*:")


def _interp(s: str, i: int) -> tuple[tuple, int]:
    """The interpolation starting at s[i] == '${': ("ref", segments) or ("call", name, [argument segments])."""
    j = i + 2
    m = _RESOLVER_NAME.match(s, j)
    if m:
        j = m.end()
        args = []
        while True:
            seg, j = _scan(s, j, ",}")
            args.append(seg)
            if s[j] == ",":
                j += 1
                continue
            j += 1  # "}"
            break
        if len(args) == 1 and not any(not isinstance(a, str) or a.strip() for a in args[0]):
            args = []
        return ("call", m.group(1), args), j
    seg, j = _scan(s, j, "}")
    if j >= len(s):
        raise ValueError("unclosed interpolation")
    return ("ref", seg), j + 1


def arithmetic(text: str) -> int | float | None:
    """The value of an arithmetic expression of number literals (`4 * 1`, `(512 + 7) // 8`), read, never run;
    None for anything else (names, calls, strings)."""
    import ast
    import operator

    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}

    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Pow) and (abs(b) > 64 or abs(a) > 1_000_000):
                raise ValueError("too large")
            return ops[type(n.op)](a, b)
        raise ValueError("not arithmetic")

    if len(text) > 200:
        return None
    try:
        return ev(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError, OverflowError, RecursionError):
        return None


def resolve_tree(tree: dict, call: Any, notes: list[str]) -> None:
    """Resolve every interpolation of the composed tree in place. A value computed from the machine's GPU count
    (torch.cuda.device_count() through a registered resolver, unknown here) is computed for each count of
    _DEVICE_TRIES: the same answer for all of them is that answer; different answers leave it unknown."""
    original = _copy(tree)
    first = Resolution(tree, call)
    first.run()
    if not first.per_device:
        return
    answers: dict[tuple, list] = {p: [] for p in first.per_device}
    for n in _DEVICE_TRIES:
        trial = Resolution(_copy(original), call, devices=n)
        for p in first.per_device:
            answers[p].append(trial.at(p))
    for p, got in answers.items():
        if all(isinstance(g, Leaf) for g in got) and len({repr(g.value) for g in got}) == 1:
            src = original
            for k in p:
                src = src[k]
            first._set(p, Leaf(got[0].value, src.shown, src.line, src.source,
                               f"{src.how} -> {got[0].value!r} for every GPU count from {_DEVICE_TRIES[0]} to "
                               f"{_DEVICE_TRIES[-1]} (torch.cuda.device_count())"))
        else:
            seen = sorted({repr(g.value) for g in got if isinstance(g, Leaf)})
            first._set(p, PerDevice(f"{'.'.join(map(str, p))} depends on how many GPUs the machine has "
                                    f"(torch.cuda.device_count()): {', '.join(seen[:4])}{'...' if len(seen) > 4 else ''} "
                                    f"for {_DEVICE_TRIES[0]}-{_DEVICE_TRIES[-1]} GPUs"))


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


def hydra_config(script_dir: Path, config_path: str | None, config_name: str | None, launch: Any,
                 resolvers: Any = None) -> tuple[Any, list[str]]:
    """The config a @hydra.main entry receives under `launch` (or with no overrides), as a value; `resolvers`:
    call(name, args, how) -> the value of a resolver the script registered (None: not registered / unknown)."""
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
    name = config_name[:-5] if config_name.endswith(".yaml") else config_name
    if not _inside(name):
        return Unknown(f"the Hydra config {name} leaves the config folder {config_path}; not read"), []
    if not is_file(root / f"{name}.yaml") and not is_file(root / f"{name}.yml"):
        return Unknown(f"the Hydra config {config_path}/{name}.yaml is not in the checkout"), []
    search = search_path(root / f"{name}.yaml" if is_file(root / f"{name}.yaml") else root / f"{name}.yml",
                         script_dir, launch)
    composer = Composer(root, config_path, [w for w in argv if not w.startswith("-")], launch, resolvers, search)
    tree = composer.compose(name)
    return to_value(tree), composer.notes


def search_path(primary: Path, script_dir: Path, launch: Any) -> list[Path]:
    """The folders a primary config's `hydra: searchpath:` adds (`pkg://configs`: the package folder an install of the
    checkout imports, looked up from the script's folder up to the checkout, in each folder's declared package roots;
    `file://path`: from where the command runs), those in the checkout only."""
    from memlint.extract.configs.document import load_text
    from memlint.extract.launch import declared_package_roots
    from memlint.files import allowed, is_dir, read_text, root_in_force

    try:
        doc = load_text(read_text(primary, encoding="utf-8-sig"), str(primary))
    except (OSError, UnicodeDecodeError):
        return []
    entries = doc.get("hydra", "searchpath") if doc.ok else None
    if not isinstance(entries, list):
        return []
    top = root_in_force()
    ups = [script_dir, *script_dir.resolve().parents][:8]
    if top is not None:
        ups = ups[: next((i + 1 for i, u in enumerate(ups) if u.resolve() == Path(top).resolve()), len(ups))]
    out: list[Path] = []
    for entry in entries:
        if not isinstance(entry, str):
            continue
        if entry.startswith("pkg://"):
            rel = Path(*entry[len("pkg://"):].strip("/").split("."))
            cands = [b / rel for u in ups for b in (u, u / "src", *declared_package_roots(u))]
        elif entry.startswith("file://"):
            rel = entry[len("file://"):]
            cands = [Path(launch.cwd or ".") / rel if launch is not None else Path(rel), script_dir / rel]
        else:
            continue
        hit = next((c for c in cands if _inside(str(rel)) and allowed(c) and is_dir(c)), None)
        if hit is not None and hit not in out:
            out.append(hit)
    return out
