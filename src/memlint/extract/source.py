"""Read a script or notebook into plain Python source, the way IPython would run it.

`!cmd`, `%magic` and `%%cell` lines become `get_ipython()` calls, one line for one line, so
line numbers survive. IPython itself is never imported.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

from memlint.errors import MemlintError
from memlint.files import Refused, read_bytes, source_lines

# Cell magics whose body is Python that IPython runs; any other cell magic's body is data.
_PYTHON_CELL_MAGICS = {"capture", "time", "timeit", "prun", "debug"}
_CELL_MARKER = re.compile(r"^\s*#\s*(%%|In\s*\[)")


def read_source(path: Path) -> str:
    """The Python text to analyse for `path` (.py or .ipynb); raises MemlintError on bad input."""
    return read_source_cells(path)[0]


def read_source_cells(path: Path) -> tuple[str, list[int] | None]:
    """read_source, and for a notebook where each code cell starts (0-based line of the joined code)."""
    try:
        raw = notebook_bytes(path) if path.suffix == ".ipynb" else read_bytes(path)
    except Refused as exc:
        raise MemlintError(f"{path}: {exc.why}") from None
    except FileNotFoundError:
        raise MemlintError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise MemlintError(f"{path}: is a directory") from None
    except OSError as exc:
        raise MemlintError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MemlintError(f"{path}: not UTF-8 (byte {exc.start})") from None
    if path.suffix == ".ipynb":
        lines, starts = notebook_cells(text, path)
        return transform_lines(lines, cells=starts), starts
    return transform_lines(source_lines(text), cells=None), None


# A notebook's saved outputs (plots, logs) and attachments are not code: past max-file-size because of them, a
# notebook up to this many times the limit is read by its code cells alone, if those fit within the limit.
NOTEBOOK_OUTPUTS_FACTOR = 8


def bf16_assumed(paths: tuple[Path, ...]) -> tuple[bool, str | None]:
    """(whether the GPU the run is on has bf16, where that is said): the GPU a notebook among `paths` names (its Colab
    metadata, else its text; gpus.json says whether it has bf16), else (True, None): Ampere and newer, the GPUs
    fine-tuning runs on."""
    from memlint.gpu import family_supports

    nb = next((p for p in paths if p.suffix == ".ipynb"), None)
    named = notebook_gpu(nb) if nb is not None else None
    ok = family_supports(named[0], "bf16") if named is not None else None
    if ok is None:
        return True, None
    return ok, named[1]


def notebook_gpu(path: Path) -> tuple[str, str] | None:
    """(the GPU a notebook runs on, where it says so): its Colab or Kaggle metadata, else the one GPU its markdown
    names ("Run all on a free Tesla T4 Google Colab instance"); None when neither names one, or the text names several."""
    gpu = colab_gpu(path)
    if gpu is not None:
        return gpu, f"the {gpu} the notebook's metadata names ({path.name})"
    version = _notebook_version(path)
    gpu = _notebook_gpus(*version)[1] if version is not None else None
    return (gpu, f"the {gpu} the notebook's text names ({path.name}: its only GPU)") if gpu is not None else None


# a GPU named in prose: NVIDIA's data-centre and workstation boards as notebooks name them (gpus.json decides what each
# has; a name gpus.json does not know is no GPU)
_PROSE_GPU = re.compile(r"\b(?:Tesla\s+|NVIDIA\s+)?(T4|P100|V100|A100|A10G?|L4|L40S?|H100|H200|A6000|RTX\s?[2-5]0[6-9]0(?:\s?Ti)?)\b")


def _prose_gpu(cells: list) -> str | None:
    """The one GPU a notebook's markdown cells name (the one they say to run on first), negations skipped."""
    from memlint.gpu import family_supports

    named, run_on = set(), set()
    for c in cells:
        if not isinstance(c, dict) or c.get("cell_type") != "markdown":
            continue
        src = c.get("source")
        text = "".join(x for x in src if isinstance(x, str)) if isinstance(src, list) else src if isinstance(src, str) \
            else ""
        for line in text[:100_000].splitlines():
            if _NEGATED.search(line):  # "does not fit on a T4": not the GPU it runs on
                continue
            here = {m.group(1).replace(" ", "") for m in _PROSE_GPU.finditer(line)}
            named |= here
            if _RUN_ON.search(line):  # "press Run all on a free Tesla T4 Google Colab instance"
                run_on |= here
    for found in (run_on, named):  # the GPU the notebook says to run on, else the one it names at all
        found = {g for g in found if family_supports(g, "bf16") is not None}
        if len(found) == 1:
            return found.pop()
        if found:
            return None
    return None


_NEGATED = re.compile(r"\b(?:not|cannot|never|no)\b|n't\b", re.I)
_RUN_ON = re.compile(r"\brun(?:s|ning)?\b[^.!?]{0,200}?\b(?:on|with)\b", re.I)  # bounded: no rescan of a long line


def colab_gpu(path: Path) -> str | None:
    """The GPU a Colab or Kaggle notebook was saved to run on (its metadata's `colab.gpuType` / `gpuType`: "T4", "A100",
    "L4"; Kaggle's `kaggle.accelerator`: "nvidiaTeslaT4"), or None (not a notebook, no such metadata, unreadable); the
    notebook is read once per version of the file."""
    version = _notebook_version(path)
    return _notebook_gpus(*version)[0] if version is not None else None


def _notebook_version(path: Path) -> tuple[str, int, int] | None:
    """(path, mtime, size) of a notebook, the key its cached reads are kept under; None for any other file."""
    if path.suffix != ".ipynb":
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return str(path), st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=64)
def _notebook_gpus(path: str, _mtime: int, _size: int) -> tuple[str | None, str | None]:
    """(the GPU its metadata names, the GPU its text names) of a notebook, from one parse of it."""
    try:
        nb = json.loads(notebook_bytes(Path(path)))
        meta, cells = nb.get("metadata") or {}, nb.get("cells") or []
    except (OSError, ValueError, RecursionError, AttributeError):
        return None, None
    return _metadata_gpu(meta if isinstance(meta, dict) else {}), _prose_gpu(cells if isinstance(cells, list) else [])


def _metadata_gpu(meta: dict) -> str | None:
    gpu = (meta.get("colab") or {}).get("gpuType") if isinstance(meta.get("colab"), dict) else None
    gpu = gpu or meta.get("gpuType")
    if not (isinstance(gpu, str) and gpu) and isinstance(meta.get("kaggle"), dict):
        # Kaggle's metadata: {"kaggle": {"accelerator": "nvidiaTeslaT4" | "nvidiaTeslaP100" | "nvidiaL4" | ...}}
        acc = meta["kaggle"].get("accelerator")
        m = re.fullmatch(r"nvidia(?:Tesla)?([A-Z]?\d+)\w*", acc) if isinstance(acc, str) else None
        gpu = m.group(1) if m else None  # gpus.json says what that GPU has
    return gpu if isinstance(gpu, str) and gpu else None


def notebook_bytes(path: Path) -> bytes:
    """A notebook's content for reading its code: the file itself, or, where saved outputs and attachments take it
    past max-file-size, its code cells alone as a notebook (their lines unchanged), when those fit within the limit.
    Raises files.Refused (an OSError) as read_bytes does."""
    import os

    from memlint.files import max_file_size

    limit = max_file_size()
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0
    if size <= limit:
        return read_bytes(path)
    raw = read_bytes(path, limit * NOTEBOOK_OUTPUTS_FACTOR,
                     what=f"max-file-size (× {NOTEBOOK_OUTPUTS_FACTOR} for a notebook's saved outputs)")
    over = f"not read: {size / 1_000_000:,.1f} MB, over the max-file-size of {limit / 1_000_000:,.1f} MB"
    try:
        nb = json.loads(raw)
    except (ValueError, RecursionError):
        raise Refused(path, over) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise Refused(path, over)
    code = [{"cell_type": "code", "source": c.get("source")} for c in nb["cells"]
            if isinstance(c, dict) and c.get("cell_type") == "code"]
    out = json.dumps({"cells": code, "metadata": {}, "nbformat": nb.get("nbformat", 4)}).encode()
    if len(out) > limit:
        raise Refused(path, f"{over}, its code cells alone {len(out) / 1_000_000:,.1f} MB")
    return out


def outputs_note(path: Path) -> str | None:
    """The note of a notebook read by its code cells because its saved outputs are over max-file-size."""
    import os

    from memlint.files import max_file_size

    try:
        size = os.stat(path).st_size
    except OSError:
        return None
    if path.suffix != ".ipynb" or size <= max_file_size():
        return None
    return (f"{path.name} is {size / 1_000_000:,.1f} MB with its saved outputs, over the max-file-size of "
            f"{max_file_size() / 1_000_000:,.1f} MB: read by its code cells alone (outputs and attachments are not code)")


def skip_cell(source: str, cells: list[int] | None, line: int) -> tuple[str, str] | None:
    """(the source with the code cell holding 1-based `line` blanked, which cell that was) for a notebook whose cell
    does not parse as Python (a shell command without `!`, a cell of another language): that cell costs itself
    only. None when `line` is in no cell."""
    if not cells:
        return None
    lines = source.split("\n")
    i = line - 1
    k = max((n for n, start in enumerate(cells) if start <= i), default=None)
    if k is None or i >= len(lines):
        return None
    end = cells[k + 1] if k + 1 < len(cells) else len(lines)
    if not any(lines[cells[k]:end]):
        return None  # already blank: the error is not this cell's
    lines[cells[k]:end] = [""] * (end - cells[k])
    return "\n".join(lines), f"code cell {k + 1} (line {cells[k] + 1})"


def notebook_source(text: str, path: Path) -> str:
    """Code cells joined in order; a line number counts the lines of all code cells before it."""
    lines, starts = notebook_cells(text, path)
    return transform_lines(lines, cells=starts)


def notebook_cells(text: str, path: Path) -> tuple[list[str], list[int]]:
    """The code cells' lines, concatenated, and the 0-based index where each cell starts."""
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MemlintError(f"{path}: not a notebook (invalid JSON at line {exc.lineno})") from None
    except RecursionError:
        raise MemlintError(f"{path}: not read: nested too deeply") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise MemlintError(f"{path}: not a notebook (no cells)")
    from memlint.extract.budget import MAX_NOTEBOOK_CELLS

    lines: list[str] = []
    starts: list[int] = []
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if len(starts) == MAX_NOTEBOOK_CELLS:
            raise MemlintError(f"{path}: not analysed: more than {MAX_NOTEBOOK_CELLS:,} code cells, over memlint's "
                               "budget for one notebook")
        src = cell.get("source") or ""  # null: an empty cell
        if isinstance(src, list) and all(isinstance(x, str) for x in src):
            src = "".join(src)
        if not isinstance(src, str):
            raise MemlintError(f"{path}: not a notebook (a code cell's source is {type(src).__name__}, not text)")
        starts.append(len(lines))
        lines.extend(source_lines(src) or [""])
    return lines, starts


def written_files(path: Path) -> dict[str, tuple[str, int]]:
    """The files a notebook writes with `%%writefile [-a] NAME` cells: NAME (normalised, relative to the notebook's
    folder) -> (the text it holds once every such cell ran, in order; the notebook line of its first cell, 1-based,
    code cells counted as notebook_cells counts them). {} for a notebook that writes none or cannot be read."""
    import os
    import shlex

    try:
        lines, starts = notebook_cells(notebook_bytes(path).decode("utf-8-sig", errors="replace"), path)
    except (OSError, MemlintError):
        return {}
    out: dict[str, tuple[str, int]] = {}
    ends = [*starts[1:], len(lines)]
    for start, end in zip(starts, ends):
        first = lines[start].strip() if start < end else ""
        if not first.startswith("%%writefile"):
            continue
        try:
            words = shlex.split(first[len("%%writefile"):])
        except ValueError:
            continue
        append = any(w in ("-a", "--append") for w in words)
        names = [w for w in words if not w.startswith("-")]
        if len(names) != 1:
            continue
        name = os.path.normpath(os.path.expanduser(names[0]))
        body = "\n".join(lines[start + 1:end]) + "\n"
        if append and name in out:
            out[name] = (out[name][0] + body, out[name][1])
        else:
            out[name] = (body, start + 2)
    return out


MAX_WRITTEN_CONFIG = 200_000  # characters of one written config


def written_configs(path: Path) -> dict[str, tuple[str, int]]:
    """The config files a notebook writes from a dict it builds (`args = dict(stage="sft", ...)` then `with open(NAME,
    "w") as f: yaml.dump(args, f)`, `json.dump(args, open(NAME, "w"))`) or from a string (`f.write(yaml_text)`), for
    the command it then runs
    (`!llamafactory-cli train NAME`): NAME (normalised, relative to the notebook's folder, after the `%cd` lines
    before it) -> (the file's text, the notebook line of the dump). Read statically: literal values (and names bound
    to literals) only; a key whose value is not one is left out. The last write of a name wins."""
    import ast

    try:
        lines, cells = notebook_cells(notebook_bytes(path).decode("utf-8-sig", errors="replace"), path)
        tree = ast.parse(transform_lines(lines, cells=cells or None))
    except (OSError, MemlintError, SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    state = _NotebookWrites()
    for stmt in tree.body:
        state.statement(stmt)
    return state.out


class _NotebookWrites:
    """The walk written_configs makes over a notebook's top-level statements, in order."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}
        self.cwd = ""
        self.out: dict[str, tuple[str, int]] = {}
        self.opened_here: set[str] = set()  # the files the `with` being walked wrote already (a later write appends)

    def statement(self, stmt) -> None:
        import ast

        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            self.assign(stmt.targets[0], stmt.value)
        elif isinstance(stmt, ast.With):
            files = {item.optional_vars.id: item.context_expr for item in stmt.items
                     if isinstance(item.optional_vars, ast.Name)}
            self.opened_here = set()
            for inner in stmt.body:
                self.call(inner, files) if isinstance(inner, ast.Expr) else self.statement(inner)
            self.opened_here = set()
        elif isinstance(stmt, ast.Expr):
            self.call(stmt, {})

    def assign(self, target, value) -> None:
        import ast

        if isinstance(target, ast.Name):
            got = self.literal(value)
            if got is _NOT_LITERAL:
                self.values.pop(target.id, None)
            else:
                self.values[target.id] = got
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and \
                isinstance(self.values.get(target.value.id), dict):
            key, got = self.literal(target.slice), self.literal(value)
            if isinstance(key, str) and got is not _NOT_LITERAL:
                self.values[target.value.id][key] = got

    def call(self, stmt, files: dict) -> None:
        import ast

        c = stmt.value
        if not isinstance(c, ast.Call) or not isinstance(c.func, ast.Attribute):
            return
        name = c.func.attr
        owner = c.func.value.id if isinstance(c.func.value, ast.Name) else ""
        if name == "run_line_magic" or (name == "chdir" and owner == "os"):
            self.moved(c)
        elif name == "update" and owner in self.values and isinstance(self.values[owner], dict):
            for kw in c.keywords:
                got = self.literal(kw.value)
                if kw.arg is not None and got is not _NOT_LITERAL:
                    self.values[owner][kw.arg] = got
        elif name == "write" and owner in files:
            # `with open("cfg.yaml", "w") as f: f.write(yaml_text)`: the text the notebook wrote, as written (the
            # writes of one `with` joined; one memlint cannot read leaves the file unknown)
            where = self.opened(files[owner])
            text = self.literal(c.args[0]) if len(c.args) == 1 else _NOT_LITERAL
            if where is None:
                return
            done = self.opened_here
            if not isinstance(text, str) or where in done and where not in self.out:
                self.out.pop(where, None)
                done.add(where)
                return
            text = (self.out[where][0] + text) if where in done else text
            done.add(where)
            if len(text) <= MAX_WRITTEN_CONFIG:
                self.out[where] = (text, stmt.lineno)
            else:
                self.out.pop(where, None)
        elif name in ("dump", "safe_dump") and owner in ("json", "yaml") and len(c.args) >= 2 and \
                isinstance(c.args[0], ast.Name) and isinstance(self.values.get(c.args[0].id), dict):
            target = c.args[1]
            target = files.get(target.id) if isinstance(target, ast.Name) else target
            where = self.opened(target)
            if where is not None:
                text = json.dumps(self.values[c.args[0].id], indent=2, default=str)
                if len(text) <= MAX_WRITTEN_CONFIG:
                    self.out[where] = (text, stmt.lineno)

    def moved(self, c) -> None:
        """`%cd DIR` (run_line_magic('cd', 'DIR')) and os.chdir('DIR'): where later relative names are."""
        import ast

        args = [a.value for a in c.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if c.func.attr == "run_line_magic" and len(args) == 2 and args[0] == "cd":
            folder = args[1].strip()
        elif c.func.attr == "chdir" and len(args) == 1:
            folder = args[0]
        else:
            return
        self.cwd = os.path.normpath(os.path.join(self.cwd, os.path.expanduser(folder)))

    def opened(self, node) -> str | None:
        """The file `open(NAME, "w")` writes, relative to the notebook's folder; None for anything else."""
        import ast

        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open" and node.args):
            return None
        name = self.literal(node.args[0])
        mode = self.literal(node.args[1]) if len(node.args) > 1 else next(
            (self.literal(k.value) for k in node.keywords if k.arg == "mode"), "r")
        if not isinstance(name, str) or not isinstance(mode, str) or "w" not in mode:
            return None
        return os.path.normpath(os.path.join(self.cwd, os.path.expanduser(name)))

    def literal(self, node):
        """A literal value (dict(k=v), {...}, lists, constants, names bound to literals), else _NOT_LITERAL; a dict
        keeps its literal items."""
        import ast

        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.values.get(node.id, _NOT_LITERAL) if node.id not in ("True", "False", "None") else \
                {"True": True, "False": False, "None": None}[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.literal(node.operand)
            return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else _NOT_LITERAL
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.literal(e) for e in node.elts]
            return _NOT_LITERAL if any(i is _NOT_LITERAL for i in items) else items
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                key, got = self.literal(k) if k is not None else _NOT_LITERAL, self.literal(v)
                if isinstance(key, str) and got is not _NOT_LITERAL:
                    out[key] = got
            return out
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
            out = {}
            for kw in node.keywords:
                got = self.literal(kw.value)
                if kw.arg is not None and got is not _NOT_LITERAL:
                    out[kw.arg] = got
            return out
        return _NOT_LITERAL


_NOT_LITERAL = object()


def _magic_call(stripped: str) -> str:
    """The one-line Python that IPython runs for a `!` / `%` / `%%` / `?` line."""
    if stripped.startswith("%%"):
        name, _, rest = stripped[2:].partition(" ")
        return f"get_ipython().run_cell_magic({name!r}, {rest!r}, '')"
    if stripped.startswith("%"):
        name, _, rest = stripped[1:].partition(" ")
        return f"get_ipython().run_line_magic({name!r}, {rest!r})"
    if stripped.startswith("!"):
        return f"get_ipython().system({stripped.lstrip('!')!r})"
    return f"get_ipython().run_line_magic('pinfo', {stripped.strip('?')!r})"


_ASSIGN_MAGIC = re.compile(r"^([A-Za-z_][\w\s,]*)=\s*([!%].*)$")


def transform_lines(lines: list[str], cells: list[int] | None) -> str:
    """Rewrite IPython syntax line by line; only at the start of a logical line."""
    out: list[str] = []
    state = _LineState()
    cell_starts = set(cells or ())
    drop_body = False  # inside a non-Python cell magic (%%bash, %%writefile)
    skip = 0  # continuation lines of a `!` / `%` line already joined into it (blank, so line numbers hold)
    for i, line in enumerate(lines):
        at_cell_start = i in cell_starts or (cells is None and bool(_CELL_MARKER.match(line)))
        if at_cell_start:
            drop_body = False
            state = _LineState()
            skip = 0
        if skip:
            skip -= 1
            out.append("")
            continue
        if drop_body:
            if cells is None and not line.strip():
                drop_body = False  # an exported script has no cell ends: a blank line ends the body
            out.append("")
            continue
        if state.at_statement_start():
            stripped = line.strip()
            indent = line[: len(line) - len(line.lstrip())]
            if stripped.startswith(("!", "%")) or (stripped.endswith("?") and _is_help(stripped)):
                if stripped.startswith("%%"):
                    name = stripped[2:].split(" ", 1)[0]
                    drop_body = name not in _PYTHON_CELL_MAGICS
                else:  # `%pip install \` / `!python train.py \`: IPython joins the backslash-continued lines
                    j = i
                    while stripped.endswith("\\") and j + 1 < len(lines) and (j + 1) not in cell_starts:
                        j += 1
                        stripped = stripped[:-1].rstrip() + " " + lines[j].strip()
                    skip = j - i
                out.append(indent + _magic_call(stripped))
                continue
            m = _ASSIGN_MAGIC.match(stripped)
            if m and not stripped.startswith(("!=", "%=")):
                target, magic = m.group(1).rstrip(), m.group(2)
                call = (f"get_ipython().getoutput({magic[1:]!r})" if magic.startswith("!")
                        else _magic_call(magic))
                out.append(f"{indent}{target} = {call}")
                continue
        state.feed(line)
        out.append(line)
    return "\n".join(out) + "\n"


def _is_help(stripped: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][\w.]*\?{1,2}", stripped))


class _LineState:
    """Tracks open brackets, strings and backslash continuations across physical lines."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: str | None = None  # the open triple quote, if any
        self.backslash = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.backslash

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if self.quote:
                if ch == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    continue
                if len(self.quote) == 1 and i == n - 1:
                    self.quote = None
                i += 1
                continue
            if ch == "#":
                break
            if ch in "\"'":
                q = line[i : i + 3] if line[i : i + 3] in ('"""', "'''") else ch
                self.quote = q
                i += len(q)
                continue
            if ch in "([{":
                self.depth += 1
            elif ch in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        if self.quote and len(self.quote) == 1:
            self.quote = None  # an unterminated one-quote string ends with the line
        self.backslash = line.rstrip().endswith("\\") and self.quote is None
