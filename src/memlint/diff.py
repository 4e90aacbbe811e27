"""`memlint diff`: what a change does to memory. Each changed training script or config is
read at a base commit and in the working tree, estimated twice, and the plan fields that moved are named.

git is read with `git` subprocess calls with every config-driven command switched off (`git`); the
base version of a file is read from `git cat-file`, never checked out, imported or run.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from memlint.errors import MemlintError
from memlint.files import Refused, checked_root, max_file_size, read_bytes, source_lines
from memlint.plan import PLAN_FIELDS, TrainingPlan, Value

READABLE = (".py", ".ipynb", ".yaml", ".yml", ".json")
# A plan with none of these settled is not a training script (a helper module, a data file).
_TRAINING_FIELDS = ("model_id", "method", "per_device_batch", "max_length", "quant_bits", "gradient_checkpointing",
                    "trainer", "distributed")
# Fields whose plan value is the literal the user wrote, so the key on the line can name them.
_KEYED = {"model_id", "lora_r", "lora_alpha", "lora_targets", "per_device_batch", "eval_batch", "grad_accum",
          "max_length", "packing", "group_by_length", "gradient_checkpointing", "optimizer", "attn_implementation",
          "double_quant", "num_gpus", "quant_type"}
_KEY_RE = re.compile(r"""^\s*(?:-\s*)?["']?([A-Za-z_][\w.\-]*)["']?\s*(?::|=(?!=))""")
_EXPLICIT = ("literal", "constant", "argparse-default", "click-default", "dataclass-default", "function-default",
             "assumed")


@dataclass(frozen=True)
class FieldChange:
    """One plan field that differs between the base and the working tree.

    kind: "changed" (both ends set it), "set" (only the working tree sets it: before is a
    library default or unknown), "removed" (only the base set it)."""

    field: str
    key: str            # the name written on the line (per_device_train_batch_size), else the field
    before: Any
    after: Any
    kind: str
    path: str
    line: int | None    # in the working-tree file; a removed line is mapped to where it was
    # a notebook: the code cell (1-based) and the row within it that `line` (a line of the joined code) is, and the
    # line of the raw .ipynb JSON where that row's text sits (what a pull request shows)
    cell: int | None = None
    row: int | None = None
    raw_line: int | None = None

    @property
    def where(self) -> str:
        """'train.py:13', or 'nb.ipynb:cell 4:2' in a notebook (as `memlint check` names it)."""
        if self.line is None:
            return self.path
        return f"{self.path}:cell {self.cell}:{self.row}" if self.cell is not None else f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Side:
    """One end of the diff: the plan and its estimate, or why there is none."""

    plan: TrainingPlan | None
    estimate: Any | None = None   # memlint.estimate.Estimate
    why: str | None = None

    @property
    def peak(self) -> int | None:
        return self.estimate.peak if self.estimate is not None else None

    def components(self) -> dict[str, int] | None:
        from memlint.estimate import COMPONENTS

        return {c: self.estimate.bytes(c) for c in COMPONENTS} if self.estimate is not None else None


@dataclass(frozen=True)
class FileDiff:
    path: str
    old_path: str
    status: str                     # modified | added | deleted | renamed
    before: Side
    after: Side
    changes: tuple[FieldChange, ...]
    over_budget: bool = False
    worse_fit: bool = False         # the change makes the script stop fitting (or fit only tightly) on the GPU

    @property
    def peak_delta(self) -> int | None:
        if self.before.peak is None or self.after.peak is None:
            return None
        return self.after.peak - self.before.peak

    def component_deltas(self) -> dict[str, int]:
        b, a = self.before.components(), self.after.components()
        if b is None or a is None:
            return {}
        return {c: a[c] - b[c] for c in a}


@dataclass(frozen=True)
class DiffResult:
    root: str
    base: str                       # the commit, full sha
    base_name: str                  # as the user named it, or how it was found
    gpu: tuple[str, int, int] | None
    accounting: str
    budget: str | None
    files: tuple[FileDiff, ...]
    skipped: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (path, why)
    min_headroom: float = 0.10

    @property
    def exceeded(self) -> bool:
        """Over the --max-increase budget, or a script that no longer fits the GPU: exit 1."""
        return any(f.over_budget or f.worse_fit for f in self.files)

    def fit(self, peak: int | None, side: "Side | None" = None):
        """memlint.gpu's verdict for a peak on the configured GPU (None without a GPU or a peak)."""
        from memlint.gpu import fit, fit_of

        if self.gpu is None or peak is None:
            return None
        if side is not None and side.estimate is not None:
            return fit_of(side.estimate, self.gpu, self.min_headroom)
        return fit(peak, self.gpu, self.min_headroom)


# ---------------------------------------------------------------------------- git


# Every setting through which a repository's own config makes git run a command, switched off:
# memlint diff reads history, and a .git/config (core.fsmonitor, hooks, external diffs,
# textconv and clean filters) must not get to run anything on the way.
_SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat",
         "-c", "diff.external=", "-c", "core.untrackedCache=false", "-c", "core.splitIndex=false",
         "-c", "core.sshCommand=", "-c", "core.askPass=", "-c", "credential.helper=", "-c", "protocol.allow=never",
         "-c", "core.attributesFile=/dev/null", "-c", "color.ui=false", "-c", "diff.noprefix=false",
         # a submodule is another repository with its own config (its own clean filters, fsmonitor, hooks): git is
         # never let into one (git diff would run `git status` inside it, with that config)
         "-c", "diff.ignoreSubmodules=all", "-c", "submodule.recurse=false", "-c", "status.submoduleSummary=false",
         "-c", "fetch.recurseSubmodules=false")
_NO_CONVERT = {"diff": ("--no-ext-diff", "--no-textconv", "--ignore-submodules=all")}
_filters: dict[str, tuple[str, ...]] = {}


def git_env() -> dict[str, str]:
    """The environment without GIT_* variables (GIT_DIR, GIT_CONFIG_*, GIT_EXTERNAL_DIFF, ...
    point git elsewhere or at commands), no pager, no prompt."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_PAGER="cat", PAGER="cat", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    return env


def _filter_overrides(cwd: str | Path) -> tuple[str, ...]:
    """`-c filter.NAME.clean=` (and smudge, process) for every filter driver the config defines:
    git diff runs a working-tree file through its clean filter. `git config` runs nothing."""
    key = str(Path(cwd).resolve())
    if key not in _filters:
        names: set[str] = set()
        for config in [None, *_submodule_configs(cwd)]:  # the repository's, then each submodule's own
            where = ["--file", str(config)] if config is not None else []
            try:
                r = subprocess.run(["git", *_SAFE, "config", *where, "--null", "--get-regexp", r"^filter\."], cwd=cwd,
                                   capture_output=True, check=False, env=git_env(), stdin=subprocess.DEVNULL, timeout=60)
                names |= {e.split("\n", 1)[0].rsplit(".", 1)[0][len("filter."):] for e in
                          r.stdout.decode("utf-8", "replace").split("\0") if e.startswith("filter.")}
            except (OSError, subprocess.SubprocessError):
                pass
        _filters[key] = tuple(a for n in sorted(names) for a in (
            "-c", f"filter.{n}.clean=", "-c", f"filter.{n}.smudge=", "-c", f"filter.{n}.process=",
            "-c", f"filter.{n}.required=false"))
    return _filters[key]


def _submodule_configs(cwd: str | Path) -> list[Path]:
    """The config files of the repository's submodules (`.git/modules/**/config`), read by `git config --file`."""
    try:
        r = subprocess.run(["git", *_SAFE, "rev-parse", "--git-common-dir"], cwd=cwd, capture_output=True, check=False,
                           env=git_env(), stdin=subprocess.DEVNULL, timeout=60)
        common = Path(cwd) / r.stdout.decode("utf-8", "replace").strip()
    except (OSError, subprocess.SubprocessError):
        return []
    modules = common / "modules"
    if r.returncode != 0 or not modules.is_dir():
        return []
    out: list[Path] = []
    for folder, dirs, names in os.walk(modules):
        if "config" in names and "HEAD" in names:
            out.append(Path(folder) / "config")
        if len(out) >= 256:
            break
    return out


def git(args: Sequence[str], cwd: str | Path, *, binary: bool = False) -> Any:
    args = [*args[:1], *_NO_CONVERT.get(args[0], ()), *args[1:]] if args else list(args)
    try:
        r = subprocess.run(["git", *_SAFE, *_filter_overrides(cwd), "--no-pager", *args], cwd=cwd,
                           capture_output=True, check=False, env=git_env(), stdin=subprocess.DEVNULL, timeout=600)
    except subprocess.TimeoutExpired:
        raise MemlintError(f"git {' '.join(args[:1])}: no answer within 600 s") from None
    except FileNotFoundError:
        raise MemlintError("memlint diff needs git on PATH") from None
    if r.returncode != 0:
        msg = r.stderr.decode("utf-8", "replace").strip().splitlines()
        raise MemlintError(f"git {' '.join(args)}: {msg[-1] if msg else f'exit {r.returncode}'}")
    return r.stdout if binary else r.stdout.decode("utf-8", "replace")


def _git_ok(args: Sequence[str], cwd: str | Path) -> str | None:
    try:
        return git(args, cwd).strip()
    except MemlintError:
        return None


def repo_root(cwd: str | Path) -> Path:
    out = _git_ok(["rev-parse", "--show-toplevel"], cwd)
    if not out:
        raise MemlintError(f"{Path(cwd).resolve()}: not a git repository (memlint diff compares git revisions)")
    return Path(out)


def resolve_commit(name: str, cwd: str | Path) -> str | None:
    return _git_ok(["rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"], cwd)


def default_base(cwd: str | Path) -> tuple[str, str]:
    """The merge base of HEAD with the default branch: origin/HEAD, else main, else master."""
    if resolve_commit("HEAD", cwd) is None:
        raise MemlintError("memlint diff: the repository has no commits yet; nothing to compare against")
    for ref in ("origin/HEAD", "main", "master", "origin/main", "origin/master"):
        if resolve_commit(ref, cwd) is None:
            continue
        base = _git_ok(["merge-base", "HEAD", ref], cwd)
        if base:
            return base, f"merge-base with {ref}"
    raise MemlintError("memlint diff: no default branch (origin/HEAD, main or master) to compare against; name a BASE")


def changed_files(root: Path, base: str, pathspecs: Sequence[str]) -> list[tuple[str, str, str]]:
    """(status, old path, new path) relative to the root, for tracked changes and new untracked files."""
    out = git(["diff", "--name-status", "-z", "--find-renames", base, "--", *pathspecs], root)
    tokens = out.split("\0")
    files: list[tuple[str, str, str]] = []
    i = 0
    while i < len(tokens) and tokens[i]:
        status = tokens[i][0]
        if status in "RC":
            old, new = tokens[i + 1], tokens[i + 2]
            i += 3
            files.append(("renamed" if status == "R" else "added", old if status == "R" else new, new))
            continue
        path = tokens[i + 1]
        i += 2
        kind = {"A": "added", "D": "deleted"}.get(status, "modified")
        files.append((kind, path, path))
    untracked = git(["ls-files", "--others", "--exclude-standard", "--full-name", "-z", "--", *pathspecs], root)
    files += [("added", p, p) for p in untracked.split("\0") if p]
    return files


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.M)


def line_map(root: Path, base: str, old: str, new: str) -> list[tuple[int, int, int, int]]:
    """The diff's hunks (old start, old count, new start, new count), to carry a base line into the working tree."""
    out = git(["diff", "-U0", "--no-color", "--find-renames", base, "--", *dict.fromkeys((old, new))], root)
    hunks = []
    for m in _HUNK.finditer(out):
        a, b, c, d = m.groups()
        hunks.append((int(a), 1 if b is None else int(b), int(c), 1 if d is None else int(d)))
    return hunks


def carry_line(line: int, hunks: list[tuple[int, int, int, int]]) -> int:
    """Where base line `line` sits in the working tree. A line inside a replaced hunk maps to
    the replacement's line at the same offset (its last line at most); a deleted line to the
    line that now stands where it stood (git numbers a pure deletion after the line above)."""
    shift = 0
    for a, b, c, d in hunks:
        if b == 0:  # pure insertion after old line a
            if a < line:
                shift += d
            continue
        if line < a:
            break
        if line < a + b:
            return c + min(line - a, d - 1) if d else c + 1
        shift += d - b
    return line + shift


# ---------------------------------------------------------------------------- plans


def _relabel(plan: TrainingPlan, old: str, new: str) -> TrainingPlan:
    from dataclasses import replace

    def fix(v: Value) -> Value:
        if v.span is not None and v.span.path == old:
            return replace(v, span=replace(v.span, path=new))
        return v

    diags = tuple(replace(d, span=replace(d.span, path=new)) if d.span and d.span.path == old else d
                  for d in plan.diagnostics)
    return replace(plan, path=new, fields={k: fix(v) for k, v in plan.fields.items()}, diagnostics=diags)


def plan_of(text: str, rel: str, root: Path) -> TrainingPlan:
    """The plan of `text`, the content of `rel` at some revision. Python and notebooks are read
    from the text; configs through a private temporary copy (a config's relative includes are
    then looked up beside the copy, so they read as missing)."""
    from memlint.extract import extract_file, extract_source
    from memlint.extract.source import notebook_source, transform_lines

    real = root / rel
    suffix = Path(rel).suffix
    if suffix == ".py":
        return extract_source(transform_lines(source_lines(text), cells=None), real, shown=rel)
    if suffix == ".ipynb":
        return extract_source(notebook_source(text, Path(rel)), real, shown=rel)
    with tempfile.TemporaryDirectory(prefix="memlint-diff-") as tmp:
        copy = Path(tmp) / Path(rel).name
        copy.write_text(text, encoding="utf-8")
        with checked_root(tmp):  # the copy is read; its relative includes are looked up beside it (missing)
            return _relabel(extract_file(copy), str(copy), rel)


def is_training(plan: TrainingPlan | None) -> bool:
    return plan is not None and any(plan.get(f).source in _EXPLICIT for f in _TRAINING_FIELDS)


def _explicit(v: Value) -> bool:
    return v.source in _EXPLICIT


def _shown(v: Value) -> Any:
    return v.value if v.known else "unknown"


def _key(lines: list[str], line: int | None, fld: str) -> str:
    if fld not in _KEYED or not line or line > len(lines):
        return fld
    m = _KEY_RE.match(lines[line - 1])
    return m.group(1) if m else fld


@dataclass(frozen=True)
class Code:
    """A file's text as its plan numbers it: a script's lines, or a notebook's code cells joined (with where each
    cell starts, 0-based, and each code line's (line, column) in the raw .ipynb JSON)."""

    lines: list[str]
    cells: list[int] = field(default_factory=list)
    raw: list[tuple[int, int]] = field(default_factory=list)

    def locate(self, line: int | None) -> tuple[int | None, int | None, int | None]:
        """(cell, row in the cell, raw JSON line) of a joined-code line; (None, None, None) outside a notebook."""
        if not self.cells or not line:
            return None, None, None
        k = max(i for i, start in enumerate(self.cells) if start < line or i == 0)
        raw = self.raw[line - 1][0] if 1 <= line <= len(self.raw) else None
        return k + 1, line - self.cells[k], raw


def code_of(text: str, rel: str) -> Code:
    if Path(rel).suffix != ".ipynb":
        return Code(source_lines(text))
    from memlint.extract.ipynb import raw_positions
    from memlint.extract.source import notebook_cells

    try:
        lines, cells = notebook_cells(text, Path(rel))
    except MemlintError:
        return Code(source_lines(text))
    return Code(lines, cells, raw_positions(text))


def code_hunks(old: Sequence[str], new: Sequence[str]) -> list[tuple[int, int, int, int]]:
    """The hunks between two notebooks' joined code, numbered as `git diff -U0` numbers a file's (a raw .ipynb's
    hunks count JSON lines, not the code's)."""
    import difflib

    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, list(old), list(new), autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        out.append((i1 if i2 == i1 else i1 + 1, i2 - i1, j1 if j2 == j1 else j1 + 1, j2 - j1))
    return out


def field_changes(before: TrainingPlan, after: TrainingPlan, before_text: "str | Code", after_text: "str | Code",
                  hunks: list[tuple[int, int, int, int]]) -> list[FieldChange]:
    """The plan fields that differ, each at the working-tree line that sets it (a removed one where it stood);
    `before_text`/`after_text` are the files' texts, or their Code (a notebook's joined cells)."""
    out = []
    old_code = before_text if isinstance(before_text, Code) else Code(source_lines(before_text))
    new_code = after_text if isinstance(after_text, Code) else Code(source_lines(after_text))
    old_lines, new_lines = old_code.lines, new_code.lines
    for name in PLAN_FIELDS:
        b, a = before.get(name), after.get(name)
        if (_shown(b), b.candidates) == (_shown(a), a.candidates):
            continue
        if _explicit(b) and not _explicit(a):
            line = carry_line(b.line, hunks) if b.line and b.span.path == before.path else None
            out.append(FieldChange(name, _key(old_lines, b.line, name), _shown(b), _shown(a), "removed", after.path, line))
            continue
        kind = "changed" if _explicit(b) else "set"
        line = a.line if a.span is not None and a.span.path == after.path else None
        out.append(FieldChange(name, _key(new_lines, a.line, name) if line else name, _shown(b), _shown(a), kind,
                               after.path, line))
    return [replace(c, **dict(zip(("cell", "row", "raw_line"), new_code.locate(c.line)))) for c in out]


def _estimate_side(plan: TrainingPlan | None, assume: Sequence[str], gpu, accounting: str) -> Side:
    from memlint.estimate import estimate
    from memlint.estimate.from_plan import apply_assumptions, setup_from_plan

    if plan is None:
        return Side(None)
    if not is_training(plan):
        syntax = next((d for d in plan.diagnostics if d.kind == "syntax-error"), None)
        return Side(plan, why=f"cannot read: {syntax.message} at line {syntax.span.line}" if syntax and syntax.span
                    else "not a training script")
    plan, extra = apply_assumptions(plan, list(assume))
    try:
        planned = setup_from_plan(plan, extra)
    except MemlintError as exc:
        return Side(plan, why=str(exc))
    if planned.setup is None:
        return Side(plan, why=f"unknown {', '.join(planned.missing)} (pass --assume "
                    + " ".join(f"{k}=…" for k in planned.missing) + ")")
    return Side(plan, estimate(planned.setup, accounting))  # the same peak with and without --gpu


# ---------------------------------------------------------------------------- budget


def over_budget(delta: int | None, before_peak: int | None, budget: str | None) -> bool:
    """Files present at both ends only: a new script has no base to grow from."""
    if budget is None or delta is None or before_peak is None or delta <= 0:
        return False
    from memlint.config import parse_budget

    kind, amount = parse_budget(budget)
    if kind == "percent":
        return delta * 100 > amount * before_peak
    return delta > amount


# ---------------------------------------------------------------------------- driver


def split_refs(items: Sequence[str], cwd: Path) -> tuple[str | None, list[str]]:
    """`[BASE] [PATH…]`: the first item is BASE when it names a commit and not a file (git's rule)."""
    if items and not (cwd / items[0]).exists() and resolve_commit(items[0], cwd):
        return items[0], list(items[1:])
    return None, list(items)


_RANK = {"fits": 0, "tight": 1, "over": 2}


def worse_fit(before: Side | None, after: Side, gpu, min_headroom: float) -> bool:
    """The change makes the script stop fitting: its verdict on the GPU got worse and is no longer
    "fits" (fits -> tight, fits or tight -> over, or a capability the GPU lacks); a new script
    that does not fit counts too."""
    from memlint.gpu import fit_of

    if gpu is None or after.estimate is None:
        return False
    a = fit_of(after.estimate, gpu, min_headroom)
    rank_a = 2 if a.missing else _RANK[a.status]
    if before is None or before.plan is None:
        return rank_a == 2
    if before.estimate is None:
        return False
    b = fit_of(before.estimate, gpu, min_headroom)
    rank_b = 2 if b.missing else _RANK[b.status]
    return rank_a > rank_b and rank_a > 0


def run_diff(items: Sequence[str] = (), *, cwd: str | Path = ".", gpu: str | None = None, assume: Sequence[str] = (),
             accounting: str = "real", budget: str | None = None, min_headroom: float = 0.10) -> DiffResult:
    from memlint.gpu import find_gpu

    cwd = Path(cwd)
    root = repo_root(cwd)
    base_arg, paths = split_refs(items, cwd)
    if base_arg is None:
        base, base_name = default_base(cwd)
    else:
        base, base_name = resolve_commit(base_arg, cwd) or base_arg, base_arg
    # Pathspecs are relative to the user's directory; git reports paths from the root.
    specs = [os.path.relpath((cwd / p).resolve(), root.resolve()) for p in paths]
    for p, spec in zip(paths, specs):
        if spec.startswith(".."):
            raise MemlintError(f"{p}: outside the repository {root}")
        if not (cwd / p).exists() and _git_ok(["cat-file", "-e", f"{base}:{spec}"], root) is None:
            raise MemlintError(f"{p}: neither a file nor a revision")
    if budget is not None:
        from memlint.config import parse_budget

        parse_budget(budget)
    target = find_gpu(gpu) if gpu else None
    diffs: list[FileDiff] = []
    skipped: list[tuple[str, str]] = []
    for status, old, new in changed_files(root, base, specs):
        if Path(new).suffix not in READABLE:
            continue
        with checked_root(root):  # a tracked link to a file outside, and what a script names outside: not read
            got = _file_diff(root, base, (status, old, new), assume, target, accounting, budget, min_headroom, skipped)
        if got is not None:
            diffs.append(got)
    return DiffResult(str(root), base, base_name, target, accounting, budget, tuple(diffs), tuple(skipped),
                      min_headroom)


def _file_diff(root: Path, base: str, change: tuple[str, str, str], assume, target, accounting: str,
               budget: str | None, min_headroom: float, skipped: list) -> "FileDiff | None":
    """One changed file's memory diff (None: not a training file, or nothing changed)."""
    status, old, new = change
    try:
        before_text = None if status == "added" else _decode(_blob(root, base, old), old)
        after_text = None if status == "deleted" else _decode(read_bytes(root / new), new)
        before = plan_of(before_text, old, root) if before_text is not None else None
        after = plan_of(after_text, new, root) if after_text is not None else None
    except (MemlintError, OSError) as exc:
        # A YAML/JSON file that is no framework's config is simply not a training file.
        if Path(new).suffix in (".py", ".ipynb"):
            skipped.append((new, str(exc)))
        return None
    if not (is_training(before) or is_training(after)):
        return None
    b_side = _estimate_side(before, assume, target, accounting)
    a_side = _estimate_side(after, assume, target, accounting)
    if before is not None and after is not None:
        before_rel = _relabel(before, old, new) if old != new else before
        old_code, new_code = code_of(before_text, old), code_of(after_text, new)
        # a notebook's plan numbers the lines of its joined code cells, not of its JSON
        hunks = code_hunks(old_code.lines, new_code.lines) if new_code.cells else line_map(root, base, old, new)
        changes = tuple(field_changes(before_rel, after, old_code, new_code, hunks))
    else:
        changes = ()
    delta = None if b_side.peak is None or a_side.peak is None else a_side.peak - b_side.peak
    if not changes and delta == 0:
        return None
    return FileDiff(new, old, status, b_side, a_side, changes, over_budget(delta, b_side.peak, budget),
                    worse_fit(b_side if before is not None else None, a_side, target, min_headroom))


def _blob(root: Path, base: str, path: str) -> bytes:
    raw = git(["cat-file", "blob", f"{base}:{path}"], root, binary=True)
    if len(raw) > max_file_size():
        raise Refused(path, f"not read at {base[:12]}: over the max-file-size")
    return raw


def _decode(raw: bytes, path: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MemlintError(f"{path}: not UTF-8 (byte {exc.start})") from None
