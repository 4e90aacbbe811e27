"""`memlint check`: files -> plans -> estimates -> rule findings, with selection and noqa.

The engine yields data (FileResult) and never prints; report/formats.py renders it.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from memlint.config import SEVERITY_ORDER, Settings
from memlint.errors import MemlintError
from memlint.plan import Diagnostic, Span, TrainingPlan
from memlint.rules.base import Context, FileResult, Finding, Rule

PY_SUFFIXES = (".py", ".ipynb")
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
# A training script names one of these; anything else is skipped before parsing.
FRAMEWORK_WORDS = re.compile(rb"\b(torch|transformers|trl|peft|accelerate|unsloth|deepspeed|bitsandbytes)\b")
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)
_FILE_NOQA = re.compile(r"#\s*memlint\s*:\s*noqa\b", re.I)
_SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".nox",
              ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist", "site-packages", ".ipynb_checkpoints"}


@dataclass(frozen=True)
class Target:
    path: Path
    shown: str       # as the user named it (relative), for output
    explicit: bool   # named on the command line, not found by a walk


# ---- finding the files -----------------------------------------------------------------


def _git_files(root: Path) -> set[Path] | None:
    """Files under `root` that git does not ignore (tracked or untracked), or None outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
            capture_output=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {(root / p.decode("utf-8", "surrogateescape")).resolve() for p in out.split(b"\0") if p}


def _gitignore_patterns(folder: Path) -> list[str]:
    try:
        text = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def _ignored(rel: str, name: str, patterns: list[str]) -> bool:
    hit = False
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        p = p.rstrip("/")
        target = rel if "/" in p.lstrip("/") else name
        if fnmatch.fnmatch(target, p.lstrip("/")):
            hit = not neg
    return hit


def _walk(root: Path, exclude: Sequence[str]) -> Iterable[Path]:
    """Readable candidate files under `root`, .gitignore respected, symlinks not followed."""
    allowed = _git_files(root)
    stack: list[tuple[Path, list[str]]] = [(root, _gitignore_patterns(root))]
    while stack:
        folder, patterns = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            p = Path(e.path)
            rel = p.relative_to(root).as_posix()
            if any(fnmatch.fnmatch(rel, x) or fnmatch.fnmatch(e.name, x) for x in exclude):
                continue
            if e.is_symlink():
                continue  # a link may point outside the tree or back into it
            if e.is_dir(follow_symlinks=False):
                if e.name in _SKIP_DIRS or e.name.startswith(".") or (allowed is None and _ignored(rel, e.name, patterns)):
                    continue
                stack.append((p, patterns + _gitignore_patterns(p)))
            elif e.is_file(follow_symlinks=False) and p.suffix in PY_SUFFIXES + CONFIG_SUFFIXES:
                if allowed is not None and p.resolve() not in allowed:
                    continue
                if allowed is None and _ignored(rel, e.name, patterns):
                    continue
                yield p


def collect(paths: Sequence[str], settings: Settings) -> list[Target]:
    targets: list[Target] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in _walk(p, settings.exclude):
                targets.append(Target(f, os.path.normpath(str(f)), False))
        elif p.exists() or p.is_symlink():
            targets.append(Target(p, os.path.normpath(raw), True))
        else:
            raise MemlintError(f"{raw}: no such file or directory")
    seen, out = set(), []
    for t in targets:
        key = os.path.abspath(t.path)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


# ---- one file --------------------------------------------------------------------------


def _unreadable(shown: str, why: str) -> TrainingPlan:
    return TrainingPlan(shown, {}, (why,), (Diagnostic("unreadable", why, Span(shown, 1, 1)),))


def _is_config(path: Path) -> bool:
    return path.suffix in CONFIG_SUFFIXES


def read_file(target: Target) -> tuple[TrainingPlan | None, list[str], list[int]]:
    """The plan of one file, its lines and (notebooks) where each cell starts; None for a file
    that is not a training file."""
    path, shown = target.path, target.shown
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        return _unreadable(shown, "is a directory"), [], []
    except OSError as exc:
        return _unreadable(shown, f"cannot read: {exc.strerror or exc}"), [], []
    if b"\0" in raw[:8192]:
        return (_unreadable(shown, "not a text file (binary content)"), [], []) if target.explicit else (None, [], [])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        why = f"not UTF-8 text (invalid byte at offset {exc.start})"
        return (_unreadable(shown, why), [], []) if target.explicit else (None, [], [])
    if _is_config(path):
        plan = _read_config(path, shown, text, target.explicit)
        return plan, (text.splitlines() if plan is not None else []), []
    if not FRAMEWORK_WORDS.search(raw):
        return None, [], []
    from memlint.extract import extract_source
    from memlint.extract.source import notebook_cells, transform_lines

    cells: list[int] = []
    try:  # `!pip` and `%magic` lines (exported notebooks) become calls, line for line
        if path.suffix == ".ipynb":
            lines, cells = notebook_cells(text, path)
        else:
            lines = text.splitlines()
        plan = extract_source(transform_lines(lines, cells=cells or None), path, shown=shown)
    except MemlintError as exc:
        return _unreadable(shown, str(exc).removeprefix(f"{path}: ")), [], []
    except RecursionError:
        return _unreadable(shown, "too deeply nested to parse"), [], []
    if not target.explicit and not _trains(plan):
        return None, [], []  # found by a walk: a helper module, an inference or merge script
    return plan, lines, cells


def _trains(plan: TrainingPlan) -> bool:
    """Whether a script has something to size: a trainer or a training loop (or is broken)."""
    return plan.get("trainer").known or any(d.kind in ("syntax-error", "unreadable") for d in plan.diagnostics)


def _read_config(path: Path, shown: str, text: str, explicit: bool) -> TrainingPlan | None:
    from memlint.extract.configs import read_config

    try:
        # YAML/JSON that is no framework's config (CI workflows, dataset cards) is skipped
        # even when named: pre-commit passes every YAML file of a commit.
        return read_config(path, text=text, shown=shown, explicit=False)
    except MemlintError as exc:
        if explicit:
            return _unreadable(shown, str(exc).removeprefix(f"{shown}: "))
        return None


def noqa_codes(lines: Sequence[str], line: int) -> set[str] | None:
    """Codes suppressed on `line` (1-based): None when none, {"*"} for a bare `# noqa`."""
    if not 1 <= line <= len(lines):
        return None
    m = _NOQA.search(lines[line - 1])
    if m is None:
        return None
    if not m.group("codes"):
        return {"*"}
    return {c.upper() for c in re.split(r"[\s,]+", m.group("codes")) if c}


def file_noqa(lines: Sequence[str]) -> bool:
    return any(_FILE_NOQA.search(ln) for ln in lines)


def _per_file_ignored(shown: str, settings: Settings) -> tuple[str, ...]:
    if not settings.per_file_ignores:
        return ()
    rel = os.path.relpath(os.path.abspath(shown), settings.root or ".").replace(os.sep, "/")
    out: list[str] = []
    for glob, codes in settings.per_file_ignores.items():
        if fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(os.path.basename(shown), glob):
            out.extend(codes)
    return tuple(out)


def context_for(plan: TrainingPlan, settings: Settings, gpu: str | None = None, gpus: int | None = None,
                assume: Sequence[str] = ()) -> Context:
    """Assumptions applied, the worst-case Setup built and estimated on the configured GPU."""
    from memlint.estimate import estimate, find_gpu
    from memlint.estimate.from_plan import apply_assumptions, setup_from_plan

    plan, extra = apply_assumptions(plan, [*settings.assume_list(), *assume])
    gpus = gpus if gpus is not None else settings.gpus
    if gpus is None and extra.get("gpus") is None and isinstance(plan.value("num_gpus"), int):
        gpus = plan.value("num_gpus")
    if gpus is not None:
        extra["gpus"] = gpus
    gpu = gpu if gpu is not None else settings.gpu
    target = find_gpu(gpu) if gpu else None
    ctx = Context(plan, accounting=settings.accounting, gpu=target, extra=extra)
    if plan.diagnostics and any(d.kind in ("syntax-error", "unreadable") for d in plan.diagnostics):
        return ctx
    try:
        ctx.planned = setup_from_plan(plan, extra)
    except MemlintError as exc:  # the model id is not known offline
        ctx.model_error = str(exc)
        return ctx
    dist = plan.value("distributed")
    if ctx.planned.setup is not None and dist not in (None, "none"):
        # A sharded run's per-GPU memory depends on the stage and on how many GPUs share
        # it: no guess, a note instead.
        from memlint.estimate.from_plan import PlannedSetup

        missing = ("distributed",) if dist == "deepspeed" else ("num_gpus",) if extra.get("gpus") is None else ()
        if missing:
            ctx.planned = PlannedSetup(None, missing, ctx.planned.notes)
    if ctx.planned.setup is not None:
        try:
            ctx.estimate = estimate(ctx.planned.setup, settings.accounting, target[2] if target else None)
        except MemlintError as exc:  # a combination the estimator rejects (e.g. fp4 with full training)
            ctx.model_error = str(exc)
    return ctx


def run_rules(ctx: Context, rules: Sequence[type[Rule]], settings: Settings) -> list[Finding]:
    found: list[Finding] = []
    for rule_cls in rules:
        rule = rule_cls(settings.rule_options.get(rule_cls.code))
        found.extend(rule.check(ctx))
    return found


def check_plan(plan: TrainingPlan, *, lines: Sequence[str] = (), settings: Settings | None = None,
               gpu: str | None = None, gpus: int | None = None, assume: Sequence[str] = (),
               rules: Sequence[type[Rule]] | None = None) -> FileResult:
    """Findings for one plan, after per-file ignores and noqa comments."""
    from memlint.rules.registry import select

    settings = settings or Settings()
    if rules is None:
        rules = select(settings.select, settings.extend_select, settings.ignore)
    ignored = _per_file_ignored(plan.path, settings)
    if ignored:
        rules = [r for r in rules if not any(s == "ALL" or r.code.startswith(s) for s in ignored)]
    lines = list(lines)
    ctx = context_for(plan, settings, gpu, gpus, assume)
    ctx.lines = lines
    found = run_rules(ctx, rules, settings)
    kept, suppressed = [], 0
    whole_file = file_noqa(lines)
    for f in found:
        codes = noqa_codes(lines, f.span.line)
        if whole_file or (codes is not None and ("*" in codes or f.code in codes)):
            suppressed += 1
            continue
        kept.append(f)
    if any(f.fix is not None for f in kept):
        if plan.kind == "python":
            kept = _effective_fixes(kept, lines)
        else:  # codemods rewrite Python source: no fix is offered for configs or notebooks
            from dataclasses import replace

            kept = [replace(f, fix=None) for f in kept]
    kept.sort(key=Finding.sort_key)
    return FileResult(plan.path, ctx.plan, ctx, kept, lines, suppressed)


def _effective_fixes(found: list[Finding], lines: Sequence[str]) -> list[Finding]:
    """Each declared fix as it would apply to this file: dropped where it cannot be made,
    unsafe where the source makes it so (e.g. no padding collator for dynamic padding)."""
    from dataclasses import replace

    from memlint.fix import effective_fix

    source = "\n".join(lines) + "\n"
    return [replace(f, fix=effective_fix(source, f)) if f.fix is not None else f for f in found]


def check_source(source: str, path: str = "<stdin>", **kwargs) -> FileResult:
    """Check Python source text (stdin, a notebook cell) as if it were the file `path`."""
    from memlint.extract import extract_source

    if path.endswith(CONFIG_SUFFIXES):
        plan = _read_config(Path(path), path, source, True) or _unreadable(path, "not a recognised config")
    elif not FRAMEWORK_WORDS.search(source.encode("utf-8", "replace")):
        plan = TrainingPlan(path)
        return FileResult(path, plan, Context(plan), [], source.splitlines())
    else:
        from memlint.extract.source import transform_lines

        try:
            plan = extract_source(transform_lines(source.splitlines(), cells=None), path, shown=path)
        except RecursionError:
            plan = _unreadable(path, "too deeply nested to parse")
    return check_plan(plan, lines=source.splitlines(), **kwargs)


def check_paths(paths: Sequence[str], settings: Settings, *, gpu: str | None = None, gpus: int | None = None,
                assume: Sequence[str] = ()) -> list[FileResult]:
    results = []
    seen: set[tuple] = set()  # a config's findings in a file it follows (its DeepSpeed JSON) are that file's too
    for target in collect(paths, settings):
        plan, lines, cells = read_file(target)
        if plan is None:
            continue
        result = check_plan(plan, lines=lines, settings=settings, gpu=gpu, gpus=gpus, assume=assume)
        result.cells = cells
        keys = [(f.span.path, f.span.line, f.span.col, f.code, f.message) for f in result.findings]
        result.findings = [f for f, k in zip(result.findings, keys) if k not in seen]
        seen.update(keys)
        results.append(result)
    return results


def failing(results: Sequence[FileResult], fail_on: str) -> int:
    """How many findings are at or above `fail_on`."""
    level = SEVERITY_ORDER[fail_on]
    return sum(1 for r in results for f in r.findings if SEVERITY_ORDER[f.severity] >= level)
