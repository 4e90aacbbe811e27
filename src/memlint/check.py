"""`memlint check`: files -> plans -> estimates -> rule findings, with selection and noqa.

The engine yields data (FileResult) and never prints; report/formats.py renders it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from memlint import files, progress
from memlint.config import SEVERITY_ORDER, Settings
from memlint.errors import MemlintError
from memlint.extract import FRAMEWORK_WORDS, read_config_text, read_target, signal_words, unreadable
from memlint.extract.budget import OverBudget
from memlint.files import Target
from memlint.plan import TrainingPlan
from memlint.rules.base import Context, FileResult, Finding, Rule
from memlint.vocab import CONFIG_SUFFIXES

if TYPE_CHECKING:
    from memlint.cache import Cache
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)
_FILE_NOQA = re.compile(r"#\s*memlint\s*:\s*noqa\b", re.I)


def collect(paths: Sequence[str], settings: Settings) -> list[Target]:
    """The files to check: folders walked without the excluded patterns; a file named on the command line is
    checked even when a pattern matches it, unless `force-exclude` (pre-commit names every file it passes)."""
    from memlint.extract import expand_launchers

    targets = files.collect(paths, settings.excluded)
    if settings.force_exclude and settings.excluded:
        targets = [t for t in targets if not (t.explicit and is_excluded(t.path, settings))]
    return expand_launchers(targets, paths, settings.readme_command)


def is_excluded(path: Path, settings: Settings) -> bool:
    """Whether an exclude pattern matches `path` (relative to the config's folder, else the working directory),
    its name, or one of the folders it is in, as a folder walk would have skipped it."""
    root = Path(settings.root or ".").resolve()
    full = Path(os.path.abspath(path))
    try:
        rel = full.relative_to(root).as_posix()
    except ValueError:
        rel = full.as_posix()
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatch(p, x) or fnmatch.fnmatch(p.rsplit("/", 1)[-1], x)
               for x in settings.excluded for p in prefixes)


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
    from memlint.estimate import estimate
    from memlint.estimate.from_plan import apply_assumptions, setup_from_plan
    from memlint.gpu import find_gpu

    plan, extra = apply_assumptions(plan, [*settings.assume_list(), *assume])
    gpus = gpus if gpus is not None else settings.gpus
    if gpus is None and extra.get("gpus") is None and isinstance(plan.value("num_gpus"), int):
        gpus = plan.value("num_gpus")
    if gpus is not None:
        extra["gpus"] = gpus
    gpu = gpu if gpu is not None else settings.gpu
    target = find_gpu(gpu) if gpu else None
    ctx = Context(plan, accounting=settings.accounting, gpu=target, extra=extra, min_headroom=settings.min_headroom,
                  require_estimate=settings.require_estimate)
    if plan.diagnostics and any(d.kind in ("syntax-error", "unreadable") for d in plan.diagnostics):
        return ctx
    try:
        with files.refusals() as refused:
            ctx.planned = setup_from_plan(plan, extra)
    except MemlintError as exc:  # the model id is not known offline
        if refused:  # its config.json was not read (too large, a FIFO): a MEM001 note on that file
            from memlint.extract import not_read

            ctx.plan = not_read(ctx.plan, refused)
        else:
            ctx.model_error = str(exc)
            ctx.conditional = _conditional(plan, extra, target, settings)
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
            # One peak per configuration, whichever GPU it is checked against (memlint.gpu.DEFAULT_CONTEXT).
            ctx.estimate = estimate(ctx.planned.setup, settings.accounting)
        except MemlintError as exc:  # a combination the estimator rejects (e.g. fp4 with full training)
            ctx.model_error = str(exc)
    elif plan.get("trainer").known:
        ctx.conditional = _conditional(plan, extra, target, settings)
    return ctx


def _conditional(plan: TrainingPlan, extra, target, settings: Settings):
    """The answer conditional on what is unknown (the longest sequence that fits, or common checkpoints)."""
    from memlint.estimate.conditional import conditional

    try:
        return conditional(plan, extra, target, settings.accounting, settings.min_headroom)
    except MemlintError:
        return None


def run_rules(ctx: Context, rules: Sequence[type[Rule]], settings: Settings) -> list[Finding]:
    found: list[Finding] = []
    for rule_cls in rules:
        rule = rule_cls(settings.rule_options.get(rule_cls.code))
        found.extend(rule.check(ctx))
    return found


def check_plan(plan: TrainingPlan, *, lines: Sequence[str] = (), settings: Settings | None = None,
               gpu: str | None = None, gpus: int | None = None, assume: Sequence[str] = (),
               rules: Sequence[type[Rule]] | None = None, cells: Sequence[int] = ()) -> FileResult:
    """Findings for one plan, after per-file ignores and noqa comments."""
    from memlint.rules.registry import select

    settings = settings or Settings()
    if rules is None:
        rules = select(settings.select, settings.extend_select, settings.ignore)
    ignored = _per_file_ignored(plan.path, settings)
    if ignored:
        rules = [r for r in rules if not any(s == "ALL" or r.code.startswith(s) for s in ignored)]
    lines = list(lines)
    training = trains_anything(plan)
    if not training:  # an inference or merge script named on the command line (pre-commit names every file)
        rules = [r for r in rules if r.code not in SIZING_NOTES]
    ctx = context_for(plan, settings, gpu, gpus, assume)
    ctx.lines = lines
    ctx.cells = list(cells)
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
    result = FileResult(plan.path, ctx.plan, ctx, kept, lines, suppressed, list(cells))
    result.noqa_file = whole_file or not training  # nothing to answer for a script that trains nothing
    return result


# The notes that say a script could not be sized: noise on a script that trains nothing.
SIZING_NOTES = ("MEM002", "MEM003", "MEM006")


def trains_anything(plan: TrainingPlan) -> bool:
    """A config, or a script or notebook with a trainer or a training loop (or that memlint could not read)."""
    from memlint.extract import trains

    return plan.kind not in ("python", "notebook") or trains(plan)


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
        plan = read_config_text(Path(path), path, source, True) or unreadable(path, "not a recognised config")
    elif not FRAMEWORK_WORDS.search(source.encode("utf-8", "replace")):
        plan = TrainingPlan(path)
        return FileResult(path, plan, Context(plan), [], files.source_lines(source))
    else:
        from memlint.extract.source import transform_lines

        try:
            plan = extract_source(transform_lines(files.source_lines(source), cells=None), path, shown=path)
        except RecursionError:
            plan = unreadable(path, "too deeply nested to parse")
    return check_plan(plan, lines=files.source_lines(source), **kwargs)


def check_target(target: Target, settings: Settings, gpu: str | None = None, gpus: int | None = None,
                 assume: Sequence[str] = (), merge=None) -> FileResult | None:
    """One file of a walk: read, checked, its notebook cells placed in the raw JSON (None: not a
    training file); `merge` applies a launch config to a script's plan. Whatever the file holds,
    a file memlint fails on is a MEM001 note naming the error, and the files after it are still
    checked. A process pool's worker, so everything it takes (but `merge`) and returns pickles."""
    kw = dict(settings=settings, gpu=gpu, gpus=gpus, assume=assume)
    with files.size_limit(settings.max_file_size), files.checked_root(files.target_root(target)), \
            files.lookups() as looked:
        try:
            with _time_budget():
                plan, lines, cells = read_target(target)
                if plan is not None and merge is not None and plan.kind in ("python", "notebook"):
                    plan = merge(plan)
                result = check_plan(plan, lines=lines, cells=cells, **kw) if plan is not None else None
            if result is None:
                return None
        except OutOfTime:
            return check_plan(unreadable(target.shown, f"not analysed: stopped after {MAX_FILE_SECONDS:g} s, over "
                                         "memlint's time budget for one file"), **kw)
        except MemoryError:
            return check_plan(unreadable(target.shown, "not analysed: out of memory reading it"), **kw)
        except RecursionError:
            return check_plan(unreadable(target.shown, "not analysed: nested too deeply to read"), **kw)
        except OverBudget as exc:
            return check_plan(unreadable(target.shown, str(exc)), **kw)
        except MemlintError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug met on one file must not lose the others' reports
            if os.environ.get("MEMLINT_DEBUG"):
                raise
            why = f"memlint could not analyse this file (internal error: {type(exc).__name__}: {str(exc)[:200]})"
            return check_plan(unreadable(target.shown, why), **kw)
        if cells:
            from memlint.extract.ipynb import raw_positions

            try:
                result.raw_positions = raw_positions(files.read_text(target.path).lstrip("\ufeff"))
            except (OSError, UnicodeDecodeError, ValueError, RecursionError):
                pass  # the cells' own lines stand
    result.looked_up = sorted(looked)
    return result


MAX_FILE_SECONDS = 60.0  # one file, everything included: the readers' own budgets (5 s of interpretation) end sooner


class OutOfTime(BaseException):
    """One file past MAX_FILE_SECONDS (a BaseException: no reader's `except Exception` swallows it)."""


@contextmanager
def _time_budget():
    """A wall-clock budget for one file, where a timer can interrupt (the main thread, with SIGALRM): the catch-all
    behind every reader's own size, depth and time budgets."""
    import signal
    import threading

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):  # noqa: ARG001
        raise OutOfTime()

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, MAX_FILE_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _content(path: Path, limit: int | None) -> bytes | None:
    """The bytes a cache entry is keyed by (None: not readable as a regular file within the budget)."""
    try:
        return files.read_bytes(path, limit)
    except OSError:
        return None


def check_stored(target: Target, content: bytes | None, cache: "Cache | None", settings: Settings,
                 *args: Any) -> FileResult | None:
    """check_target, its result written to the cache at once (by the process that made it): a walk stopped
    half-way, or a worker's parent gone, loses none of the files already checked."""
    result = check_target(target, settings, *args)
    if cache is not None and content is not None:
        cache.put(target.shown, target.explicit, content, result)
    return result


def _worker_start(parent: int) -> None:
    """A -j worker: it dies with its parent (a CI cancel, `timeout`, a kill -9 of the parent leave no worker behind,
    reparented to init, holding memory), leaves Ctrl-C to the parent (which ends it), and dies on SIGTERM."""
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:  # Linux: the kernel sends SIGKILL when the parent exits
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError, TypeError):
        pass
    if os.getppid() != parent:  # the parent is already gone
        os._exit(1)

    def watch() -> None:  # elsewhere (and as a second guard): the parent's pid changes when it dies
        import time

        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="memlint-parent-watch", daemon=True).start()


class Terminated(KeyboardInterrupt):
    """SIGTERM to a run with workers: the workers are ended and the run stops as on Ctrl-C (exit 143)."""

    code = 143


def _run(todo: Sequence[tuple[int, bytes | None]], targets: Sequence[Target], jobs: int, settings: Settings,
         cache: "Cache | None", args: tuple) -> Iterator[tuple[int, FileResult | None]]:
    """(index, result) of each file of `todo` as it is checked, by a pool of `jobs` processes where there is more
    than one to do, in the order they finish; each result is in the cache before it is yielded (check_stored)."""
    if not (jobs > 1 and len(todo) > 1):
        for i, content in todo:
            yield i, check_stored(targets[i], content, cache, settings, *args)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = None
    if "fork" in multiprocessing.get_all_start_methods():
        # Workers forked after the heavy imports share them instead of importing the extractor and the
        # estimator once each.
        import memlint.estimate.from_plan  # noqa: F401
        import memlint.extract.build  # noqa: F401
        import memlint.extract.handlers  # noqa: F401
        import memlint.rules.registry as registry

        registry.all_rules()
        context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=context, initializer=_worker_start,
                               initargs=(os.getpid(),))
    try:
        with _sigterm_interrupts():
            # the largest files first: the walk ends with small ones, not with one worker on a long file
            largest = sorted(todo, key=lambda item: -_size(targets[item[0]].path))
            futures = {pool.submit(check_stored, targets[i], content, cache, settings, *args): i for i, content in largest}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
    except BaseException:  # Ctrl-C, SIGTERM: the files not started are dropped, those finished are in the cache
        _end_pool(pool)
        raise
    pool.shutdown(wait=True)


def _end_pool(pool) -> None:
    """Stop a pool now: nothing queued starts, every worker is ended (a running one is killed, not waited for)."""
    import signal

    workers = list((getattr(pool, "_processes", None) or {}).values())  # no public handle before 3.14
    for proc in workers:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except (OSError, AttributeError, TypeError):
            pass
    pool.shutdown(wait=False, cancel_futures=True)


@contextmanager
def _sigterm_interrupts():
    """Inside the block (the main thread), SIGTERM stops the run like Ctrl-C, so its workers are ended too."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):  # noqa: ARG001
        raise Terminated()

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# A walk over more files than this shows a progress bar (where `show_progress` says a terminal is watching)
PROGRESS_FILES = 100


def check_paths(paths: Sequence[str], settings: Settings, *, gpu: str | None = None, gpus: int | None = None,
                assume: Sequence[str] = (), cache: "Cache | None" = None, jobs: int = 1,
                show_progress: bool = False) -> list[FileResult]:
    with files.size_limit(settings.max_file_size):  # a launcher the walk expands is read within it too
        targets = collect(paths, settings)
    return check_targets(targets, settings, gpu=gpu, gpus=gpus, assume=assume, cache=cache, jobs=jobs,
                         show_progress=show_progress)


def check_targets(targets: Sequence[Target], settings: Settings, *, gpu: str | None = None, gpus: int | None = None,
                  assume: Sequence[str] = (), cache: "Cache | None" = None, jobs: int = 1,
                  show_progress: bool = False) -> list[FileResult]:
    """Every target checked: from `cache` where nothing it depends on changed, the rest by `jobs`
    processes. The results, and their order, do not depend on either. A target a launch command
    runs is read with that command's arguments, so it is never cached under the file alone.
    `show_progress`: a bar on stderr (memlint.progress) when more than PROGRESS_FILES are to be checked."""
    from memlint.cache import MISS

    out: list[FileResult | None] = [None] * len(targets)
    todo: list[tuple[int, bytes | None]] = []
    for i, target in enumerate(targets):
        walked = not target.explicit and target.launch is None and target.note is None \
            and target.path.suffix in (".py", ".ipynb")
        content = _content(target.path, settings.max_file_size) \
            if (cache is not None or walked) and target.launch is None and target.note is None else None
        hit = cache.get(target.shown, target.explicit, content) if cache is not None and content is not None else MISS
        if hit is not MISS:
            out[i] = hit
        elif walked and content is not None and not signal_words(content):
            # a walked file with no training signal in its text (read_target says the same): not sent to a worker
            if cache is not None:
                cache.put(target.shown, target.explicit, content, None)
        else:
            todo.append((i, content if cache is not None else None))
    runner = _run(todo, targets, jobs, settings, cache, (gpu, gpus, tuple(assume)))
    with progress.showing("checking files", enabled=show_progress and len(todo) > PROGRESS_FILES, total=len(todo)):
        try:
            for i, result in runner:
                progress.advance()  # a folder walk's bar, when one is shown
                out[i] = result
        finally:  # a Ctrl-C between two results ends the workers now, not when the interpreter exits and waits on them
            runner.close()
    from memlint.extract import untrained_commands

    drop = untrained_commands([(t, r.plan) for t, r in zip(targets, out) if r is not None])
    results = []
    seen: set[tuple] = set()  # a config's findings in a file it follows (its DeepSpeed JSON) are that file's too
    for i, result in enumerate(r for r in out if r is not None):
        if i in drop:
            continue
        keys = [(f.span.path, f.span.line, f.span.col, f.code, f.message) for f in result.findings]
        result.findings = [f for f, k in zip(result.findings, keys) if k not in seen]
        seen.update(keys)
        results.append(result)
    return results


def failing(results: Sequence[FileResult], fail_on: str) -> int:
    """How many findings are at or above `fail_on`."""
    level = SEVERITY_ORDER[fail_on]
    return sum(1 for r in results for f in r.findings if SEVERITY_ORDER[f.severity] >= level)
