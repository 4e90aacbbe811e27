"""A YAML or JSON config read safely into plain data plus the position of every key.

Nothing is ever constructed from a tag: `!!python/...` and unknown tags become bad-value
diagnostics, a file that does not parse becomes one syntax-error diagnostic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from memlint.plan import Diagnostic, Span

# Standard YAML tags a safe loader builds; anything else (python/*, custom !tags) is refused.
_SAFE_TAGS = {f"tag:yaml.org,2002:{t}" for t in
              ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary", "set", "omap", "pairs", "merge", "value")}
_MAX_NODES = 200_000  # alias bombs expand exponentially; stop long before memory does
_MAX_DEPTH = 64
_TOP_KEY = re.compile(r"^([A-Za-z_][\w.\-]*)\s*:", re.M)
_JSON_KEY = re.compile(r'^\s{0,4}"([A-Za-z_][\w.\-]*)"\s*:', re.M)

Path_ = tuple  # a key path: ("zero_optimization", "stage")


@dataclass
class Document:
    """Plain data of a config file; `keys` maps each key path to the position of its key."""

    path: str
    data: Any = None
    keys: dict[Path_, Span] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    top_keys: tuple[str, ...] = ()  # top-level keys, also for a file that does not parse
    refused: set = field(default_factory=set)  # key paths whose value was not read (a refused tag)
    command: str | None = None  # the framework tool's subcommand that reads it (litgpt finetune_lora), when launched

    @property
    def ok(self) -> bool:
        return isinstance(self.data, dict)

    def span(self, *path: Any) -> Span | None:
        return self.keys.get(tuple(path))

    def get(self, *path: Any, default: Any = None) -> Any:
        cur = self.data
        for part in path:
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                return default
        return cur

    def has(self, *path: Any) -> bool:
        return tuple(path) in self.keys


class _Loader(yaml.SafeLoader):
    """SafeLoader that also refuses the tags SafeLoader would refuse, but as data, not errors."""


def _mark_span(path: str, mark: Any) -> Span:
    return Span(path, (mark.line + 1) if mark else 1, (mark.column + 1) if mark else 1)


class _Walker:
    def __init__(self, loader: _Loader, shown: str) -> None:
        self.loader = loader
        self.shown = shown
        self.keys: dict[Path_, Span] = {}
        self.diagnostics: list[Diagnostic] = []
        self.refused: set = set()
        self.count = 0

    def walk(self, node: yaml.Node, path: Path_, depth: int = 0) -> Any:
        self.count += 1
        if self.count > _MAX_NODES or depth > _MAX_DEPTH:
            raise _TooBig()
        tag = node.tag or ""
        if tag not in _SAFE_TAGS:
            shown_tag = tag.replace("tag:yaml.org,2002:", "!!")
            self.diagnostics.append(Diagnostic(
                "bad-value",
                f"YAML tag {shown_tag} is not read: memlint never constructs Python objects from a config",
                _mark_span(self.shown, node.start_mark)))
            self.refused.add(path)
            return None
        if isinstance(node, yaml.MappingNode):
            try:
                self.loader.flatten_mapping(node)  # resolves `<<: *anchor` merge keys
            except yaml.YAMLError as exc:
                self.diagnostics.append(Diagnostic("bad-value", f"YAML merge key: {exc.problem or exc}", _mark_span(self.shown, node.start_mark)))
            out: dict[Any, Any] = {}
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode) or knode.tag not in _SAFE_TAGS:
                    self.diagnostics.append(Diagnostic("bad-value", "a mapping key that is not a plain value", _mark_span(self.shown, knode.start_mark)))
                    continue
                key = self.loader.construct_object(knode)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    key = str(key)
                self.keys[path + (key,)] = _mark_span(self.shown, knode.start_mark)
                out[key] = self.walk(vnode, path + (key,), depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.walk(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.diagnostics.append(Diagnostic("bad-value", f"unreadable value: {getattr(exc, 'problem', None) or exc}", _mark_span(self.shown, node.start_mark)))
            self.refused.add(path)
            return None


class _TooBig(Exception):
    pass


_BRACKETS = re.compile(r"[\[\]{}]")


def _too_deep(text: str) -> bool:
    """Flow brackets nested past _MAX_DEPTH: refused before PyYAML recurses into them (a 5,000-deep
    `[[[…]]]` took seconds to reach the recursion limit). Brackets in quoted strings count too."""
    depth = 0
    for m in _BRACKETS.finditer(text):
        depth += 1 if m.group() in "[{" else -1
        if depth > _MAX_DEPTH:
            return True
    return False


def top_keys(text: str, is_json: bool) -> tuple[str, ...]:
    """Top-level keys, cheaply: json.loads (C-fast) for JSON, a line scan for YAML and broken JSON;
    enough to tell the format, also of a file that does not parse."""
    if is_json:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            return tuple(str(k) for k in data)
    found = (_JSON_KEY if is_json else _TOP_KEY).findall(text)
    return tuple(dict.fromkeys(found))


_TOML_TABLE = re.compile(r"^[ \t]*\[\[?[ \t]*([A-Za-z0-9_.\-\" \t]+?)[ \t]*\]\]?", re.M)
_TOML_KEY = re.compile(r"^[ \t]*([A-Za-z0-9_\-]+|\"[^\"\n]*\")[ \t]*=")


def _toml_path(header: str) -> tuple[str, ...]:
    return tuple(part.strip().strip('"') for part in header.split("."))


def toml_top_keys(text: str) -> tuple[str, ...]:
    """Top-level keys of a TOML file by a line scan: bare keys before the first table, then every table's
    first name; enough to tell the format, also of a file that does not parse."""
    found: list[str] = []
    in_table = False
    for line in text.splitlines():
        t = _TOML_TABLE.match(line)
        if t:
            in_table = True
            found.append(_toml_path(t.group(1))[0])
        elif not in_table:
            k = _TOML_KEY.match(line)
            if k:
                found.append(k.group(1).strip('"'))
    return tuple(dict.fromkeys(found))


def _toml_keys(text: str, shown: str) -> dict[Path_, Span]:
    """The position of every table header and `key =` line (dotted keys and inline tables are placed at their
    line's first key): tomllib keeps none."""
    keys: dict[Path_, Span] = {}
    table: tuple[str, ...] = ()
    for n, line in enumerate(text.splitlines(), start=1):
        t = _TOML_TABLE.match(line)
        if t:
            table = _toml_path(t.group(1))
            for i in range(1, len(table) + 1):
                keys.setdefault(table[:i], Span(shown, n, line.find(table[i - 1]) + 1 if table[i - 1] in line else 1))
            continue
        k = _TOML_KEY.match(line)
        if k:
            keys.setdefault(table + (k.group(1).strip('"'),), Span(shown, n, k.start(1) + 1))
    return keys


def load_toml(text: str, shown: str) -> Document:
    """Read TOML text with the standard library's tomllib; never raises on bad input."""
    import tomllib

    doc = Document(shown, top_keys=toml_top_keys(text))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc)) or "not valid TOML"
        doc.diagnostics.append(Diagnostic("syntax-error", f"TOML: {msg}",
                                          Span(shown, int(m.group(1)), int(m.group(2))) if m else Span(shown, 1, 1)))
        return doc
    except RecursionError:
        doc.diagnostics.append(Diagnostic("unreadable", "TOML nested too deeply", Span(shown, 1, 1)))
        return doc
    doc.data = data
    doc.keys = _toml_keys(text, shown)
    doc.top_keys = tuple(str(k) for k in data)
    return doc


def load_text(text: str, shown: str, is_json: bool = False) -> Document:
    """Read YAML (or JSON) text; never raises on bad input."""
    doc = Document(shown, top_keys=top_keys(text, is_json))
    json_data: Any = None
    if is_json:
        try:
            json_data = json.loads(text)
        except json.JSONDecodeError as exc:
            doc.diagnostics.append(Diagnostic("syntax-error", f"JSON: {exc.msg}", Span(shown, exc.lineno, exc.colno)))
            return doc
        except RecursionError:
            doc.diagnostics.append(Diagnostic("unreadable", "JSON nested too deeply", Span(shown, 1, 1)))
            return doc
        # YAML reads JSON for the key positions; tabs are only legal between JSON tokens, and
        # YAML refuses them there, so spaces take their place (columns stay the same).
        text = text.replace("\t", " ")
    if _too_deep(text):
        doc.diagnostics.append(Diagnostic("unreadable", f"nested more than {_MAX_DEPTH} levels deep: not read",
                                          Span(shown, 1, 1)))
        return doc
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            if is_json:  # valid JSON that YAML cannot place: keep the data, lose the positions
                doc.data = json_data
                return doc
            mark = exc.problem_mark or exc.context_mark
            msg = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
            doc.diagnostics.append(Diagnostic("syntax-error", f"YAML: {msg}", _mark_span(shown, mark)))
            return doc
        except yaml.YAMLError as exc:
            doc.diagnostics.append(Diagnostic("syntax-error", f"YAML: {exc}", Span(shown, 1, 1)))
            return doc
        except RecursionError:  # PyYAML composes recursively: block nesting deep enough to exhaust the stack
            doc.diagnostics.append(Diagnostic("unreadable", "nested too deeply to read", Span(shown, 1, 1)))
            return doc
        if node is None:
            doc.data = {} if not is_json else json_data
            return doc
        walker = _Walker(loader, shown)
        try:
            data = walker.walk(node, ())
        except (_TooBig, RecursionError):
            doc.diagnostics.append(Diagnostic("unreadable", "config too large or too deeply nested (YAML aliases?)", Span(shown, 1, 1)))
            return doc
        doc.keys = walker.keys
        doc.refused = walker.refused
        doc.diagnostics.extend(walker.diagnostics)
        # JSON's own reading wins for values: YAML 1.1 reads 1e-5 as a string
        doc.data = json_data if is_json else data
        if isinstance(doc.data, dict):
            doc.top_keys = tuple(str(k) for k in doc.data)
        return doc
    finally:
        loader.dispose()
