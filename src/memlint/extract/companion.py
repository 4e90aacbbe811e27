"""Lengths fixed outside the training script: a companion script of the same checkout that tokenizes
(or packs) the data ahead of time and writes the arrays the training script loads.

`np.load(os.path.join(path, "inputs.npy"))` in the training script names a file; a script of the checkout
that writes a file of that name (`np.save(..., "inputs.npy")`, `torch.save`, `.tofile`, a memmap opened for
writing) decides the rows' width. Its length is the constant it pads, truncates or packs to: a module- or
function-level `max_length = 65536` (any name of the length vocabulary, data/library_api.json) or an
argparse default of one. Only files under the script's checkout are read, and only when their text names
the loaded file; nothing is run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import libcst as cst

from memlint.extract.parsed import children

from memlint.extract.values import Const
from memlint.library import api

_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
_WRITERS = re.compile(r"\b(np|numpy)\.(save|savez|savez_compressed)\s*\(|\btorch\.save\s*\(|\.tofile\s*\(|"
                      r"\bmemmap\s*\([^)]*mode\s*=\s*['\"]w|\.save_to_disk\s*\(")
MAX_FILES = 400           # .py files looked at in one checkout
MAX_BYTES = 400_000       # a companion larger than this is not read
ARRAY_SUFFIXES = (".npy", ".npz", ".bin", ".pt", ".pth", ".memmap", ".arrow", ".idx")


def checkout_root(script: Path) -> Path:
    """The checkout around `script`: the nearest folder up with a .git, pyproject.toml, setup.py or setup.cfg;
    without one, the script's own folder (as the interpreter's imports)."""
    here = cur = script.resolve().parent
    for _ in range(8):
        if any((cur / m).exists() for m in _MARKERS):
            return cur
        if cur.parent == cur:
            break
        cur = cur.parent
    return here


def _length_name(name: str) -> bool:
    low = name.lower()
    return any(low == v or low.endswith("_" + v) for v in api.length_arguments())


def _int(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        v = node.evaluated_value
        return v if isinstance(v, int) and v > 0 else None
    return None


def _lengths_in(text: str) -> list[tuple[str, int, int]]:
    """(name, value, line) of every `max_length = 65536` and `add_argument("--max_length", default=N)` in a source."""
    from memlint.extract.parsed import parse

    try:
        parsed = parse(text)
    except Exception:
        return []
    found: list[tuple[str, int, int]] = []

    class Visit(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            v = _int(node.value)
            for t in node.targets:
                if v is not None and isinstance(t.target, cst.Name) and _length_name(t.target.value):
                    found.append((t.target.value, v, parsed.pos[node].start.line))

        def visit_Call(self, node: cst.Call) -> None:
            f = node.func
            if not (isinstance(f, cst.Attribute) and f.attr.value == "add_argument" and node.args):
                return
            flag = node.args[0].value
            if not isinstance(flag, cst.SimpleString):
                return
            dest = str(flag.evaluated_value).lstrip("-").replace("-", "_")
            for a in node.args:
                if a.keyword is not None and a.keyword.value == "default" and _length_name(dest):
                    v = _int(a.value)
                    if v is not None:
                        found.append((dest, v, parsed.pos[node].start.line))

    parsed.module.visit(Visit())
    return found


def written_length(script: Path, names: list[str]) -> Const | None:
    """The length a companion script of `script`'s checkout writes the arrays named `names` at, or None."""
    if not names:
        return None
    root = checkout_root(script)
    from memlint.files import read_text, walk

    own = script.resolve()
    seen = 0
    for path in walk(root):
        if path.suffix != ".py":
            continue
        seen += 1
        if seen > MAX_FILES:
            return None
        if path.resolve() == own:
            continue
        try:
            text = read_text(path, MAX_BYTES, what="companion size")
        except (OSError, UnicodeDecodeError):
            continue
        hit = next((n for n in names if f"'{n}'" in text or f'"{n}"' in text), None)
        if hit is None or not _WRITERS.search(text):
            continue
        lengths = _lengths_in(text)
        if not lengths:
            continue
        name, value, line = lengths[-1]  # the last binding before the write wins (n, max_length = x.shape; max_length = N)
        rel = os.path.relpath(path, root)
        return Const(value, "constant", line, (
            f"{rel} writes {hit}, the file the training script loads: its rows are cut or packed to "
            f"{name} = {value} (line {line})",), os.path.relpath(path))
    return None


def array_name(node: Any) -> str | None:
    """The file name an array load names in its path argument: the last string literal with an array suffix
    (`np.load(os.path.join(path, "inputs.npy"))` -> inputs.npy)."""
    last = None
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.SimpleString):
            try:
                s = str(n.evaluated_value)
            except Exception:
                continue
            base = s.rsplit("/", 1)[-1]
            if base.endswith(ARRAY_SUFFIXES) and len(base) > 4:
                last = base
        stack.extend(reversed(children(n)))
    return last
