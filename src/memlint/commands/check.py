"""`memlint check`: flags -> settings -> engine (memlint.check) -> formats, exit code.

The report goes to stdout (or -o), the human summary to stderr; colour only on a
terminal (NO_COLOR / FORCE_COLOR respected).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TextIO

from memlint.errors import MemlintError
from memlint.report.formats import FORMATS
from memlint.vocab import ascii_digits

def add_check_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders (default: .); - reads stdin")
    g = p.add_argument_group("what to check against")
    g.add_argument("--gpu", metavar="NAME|GiB", help="GPU to check against (default: [tool.memlint] gpu; "
                                                     "else fit is reported for common GPUs without failing)")
    g.add_argument("--gpus", type=int, metavar="N", help="GPUs the run spans (sharded runs are estimated per GPU)")
    g.add_argument("--assume", action="append", default=[], metavar="KEY=VALUE",
                   help="value for a field the script leaves unknown (repeatable)")
    g.add_argument("--launch-config", metavar="PATH",
                   help="an accelerate or DeepSpeed config the scripts are launched with")
    g.add_argument("--accounting", choices=("real", "textbook"), default=None)
    g.add_argument("--no-readme-command", action="store_true",
                   help="read a file named alone as it is, not as the command its README documents for it runs it")
    w = p.add_argument_group("which files")
    w.add_argument("--extend-exclude", metavar="PATTERNS",
                   help="comma-separated glob patterns to exclude on top of `exclude` in [tool.memlint]")
    w.add_argument("--force-exclude", action="store_true", default=None,
                   help="apply the exclusions to files named on the command line too (pre-commit names every file)")
    add_read_outside(g)
    r = p.add_argument_group("rule selection")
    r.add_argument("--select", metavar="CODES", help="comma-separated codes or prefixes (MEM1, MEM201) or ALL")
    r.add_argument("--extend-select", metavar="CODES", help="codes to enable on top of the selection")
    r.add_argument("--ignore", metavar="CODES", help="codes or prefixes to disable")
    r.add_argument("--fail-on", choices=("note", "warning", "error"), default=None,
                   help="lowest severity that makes the exit code 1 (default: warning)")
    o = p.add_argument_group("output")
    o.add_argument("--output-format", choices=FORMATS, default=None, help="default: concise")
    o.add_argument("-o", "--output-file", metavar="PATH", help="write the report to PATH instead of stdout")
    o.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    o.add_argument("--statistics", action="store_true", help="count findings per rule instead of listing them")
    o.add_argument("--show-settings", action="store_true", help="print the resolved settings and exit")
    o.add_argument("--stdin-filename", metavar="PATH", help="the name of the file read from stdin")
    o.add_argument("--config", metavar="PATH|KEY=VALUE", action="append",
                   help="settings file (default: the closest pyproject.toml with [tool.memlint], or memlint.toml); "
                        "or a KEY = VALUE setting that overrides it, as in [tool.memlint] (repeatable: "
                        "--config gpu=A100-80GB --config 'options.low-headroom.min-headroom=0.15')")
    o.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr, no progress display")
    o.add_argument("--watch", action="store_true",
                   help="check again whenever a checked file (or the settings file) changes; Ctrl-C stops")
    o.add_argument("--no-color", action="store_true")
    c = p.add_argument_group("speed")
    c.add_argument("--no-cache", action="store_true", help="neither read nor write the cache (.memlint_cache/)")
    c.add_argument("--cache-dir", metavar="PATH", help="where the cache lives (default: .memlint_cache beside the "
                                                       "config file, else in the working directory; "
                                                       "MEMLINT_CACHE_DIR)")
    from memlint.commands.common import add_online_flag

    add_online_flag(g)
    c.add_argument("-j", "--jobs", type=int, metavar="N", default=None,
                   help="processes for a folder walk (default: the CPU count; the results do not depend on it)")
    f = p.add_argument_group("fixes")
    f.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    f.add_argument("--unsafe-fixes", action="store_true", help="also apply (with --fix) or show unsafe fixes")
    f.add_argument("--diff", action="store_true", help="show the fixes as a unified diff; write nothing")
    f.add_argument("--show-fixes", action="store_true",
                   help="list the fixes applied (with --fix) per file and rule; mark unsafe fixes in the report")
    f.add_argument("--exit-non-zero-on-fix", action="store_true",
                   help="exit 1 when --fix changed a file, even if no finding remains (a pre-commit hook's contract)")
    f.add_argument("--add-noqa", action="store_true",
                   help="add `# noqa: CODE` to every line with a finding (existing noqa codes are kept)")


def add_read_outside(p) -> None:
    p.add_argument("--read-outside", action="append", default=[], metavar="PATH",
                   help="also read files under PATH that scripts name outside the checked root (the repository, or "
                        "the folder named); by default they are not read (repeatable)")


def allow_named(args: argparse.Namespace) -> None:
    """The paths the user named are read wherever they are; so is what --read-outside lets in."""
    from memlint import files

    files.reset_allowed()
    named = [p for p in getattr(args, "paths", None) or () if p != "-"]
    config = getattr(args, "config", None)
    named += [getattr(args, "launch_config", None),
              *([c for c in config if "=" not in c] if isinstance(config, list) else [config])]
    for p in getattr(args, "read_outside", None) or ():
        if not os.path.exists(p):
            raise MemlintError(f"--read-outside {p}: no such file or directory")
        named.append(p)
    files.allow(p for p in named if p)


def _codes(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [c.strip() for c in text.split(",") if c.strip()]


def resolve_settings(args: argparse.Namespace):
    from memlint.config import load_settings, split_config_args, with_overrides
    from memlint.rules.registry import check_selectors

    start = Path(args.paths[0]) if args.paths and args.paths[0] != "-" else Path(args.stdin_filename or ".")
    if not start.exists():
        start = Path(".")
    path, overrides = split_config_args(args.config)
    s = with_overrides(load_settings(start, path), overrides)
    changes = {}
    if args.select is not None:
        changes["select"] = tuple(check_selectors(_codes(args.select), "--select"))
    if args.extend_select is not None:
        changes["extend_select"] = s.extend_select + tuple(check_selectors(_codes(args.extend_select), "--extend-select"))
    if args.ignore is not None:
        changes["ignore"] = s.ignore + tuple(check_selectors(_codes(args.ignore), "--ignore"))
    if args.fail_on:
        changes["fail_on"] = args.fail_on
    if getattr(args, "extend_exclude", None):
        changes["extend_exclude"] = s.extend_exclude + tuple(_codes(args.extend_exclude))
    if getattr(args, "force_exclude", None):
        changes["force_exclude"] = True
    if getattr(args, "online", None):
        changes["online"] = True  # part of the settings the cache keys results by
    if args.accounting:
        changes["accounting"] = args.accounting
    if args.gpu:
        from memlint.gpu import find_gpu

        find_gpu(args.gpu)
        changes["gpu"] = args.gpu
    if args.gpus is not None:
        if args.gpus < 1:
            raise MemlintError("--gpus must be at least 1")
        changes["gpus"] = args.gpus
    if getattr(args, "no_readme_command", False):
        changes["readme_command"] = False
    return s.with_(**changes)


def _color(args: argparse.Namespace, stream: TextIO) -> bool:
    if args.no_color or os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def _launch(plans_cfg: str | None):
    if not plans_cfg:
        return None
    from memlint.extract.configs import merge_launch_config

    if not Path(plans_cfg).is_file():
        raise MemlintError(f"--launch-config {plans_cfg}: no such file")
    return lambda plan: merge_launch_config(plan, plans_cfg)


# --watch: how often the files are looked at (seconds), and (tests) how many checks before it returns
WATCH_INTERVAL = 0.5
WATCH_ROUNDS: int | None = None


def _stamps(args: argparse.Namespace, settings) -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file a check of `args` reads, and of the settings file."""
    from memlint.check import collect

    out = {}
    names = [str(t.path) for t in collect(args.paths or ["."], settings)] + ([settings.path] if settings.path else [])
    for name in names:
        try:
            st = os.stat(name)
            out[name] = (st.st_mtime_ns, st.st_size)
        except OSError:
            out[name] = (0, -1)
    return out


def watch(args: argparse.Namespace) -> int:
    """Ruff's --watch: check, then check again each time a file the check reads changes (polled: no
    dependency); the exit code of the last check when stopped by WATCH_ROUNDS, 0 on Ctrl-C."""
    import time

    from memlint import files

    args.watch = False
    if args.fix or args.diff or args.add_noqa or args.paths == ["-"]:
        raise MemlintError("--watch checks files as they change: not with --fix, --diff, --add-noqa or stdin")
    rounds, code = 0, 0
    try:
        while True:
            settings = resolve_settings(args)
            before = _stamps(args, settings)
            files.configure(None)
            with files.once_per_run():
                code = run_check(args)
            rounds += 1
            if WATCH_ROUNDS is not None and rounds >= WATCH_ROUNDS:
                return code
            if not args.quiet:
                sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] watching {len(before)} files for changes "
                                 "(Ctrl-C stops)\n")
                sys.stderr.flush()
            while _stamps(args, settings) == before:
                time.sleep(WATCH_INTERVAL)
    except KeyboardInterrupt:
        return 0


def run_check(args: argparse.Namespace) -> int:
    if getattr(args, "watch", False):
        return watch(args)
    from memlint import files
    from memlint.check import check_paths, check_plan, check_source, check_target, collect, failing
    from memlint.report.formats import summary

    settings = resolve_settings(args)
    files.configure(settings.max_file_size)
    allow_named(args)
    if args.online or settings.online:
        from memlint.commands.common import go_online

        go_online(args, settings)
    if args.show_settings:
        print(settings.show())
        return 0
    fmt = args.output_format or "concise"
    if args.stdin_filename and args.paths and args.paths != ["-"]:
        raise MemlintError("--stdin-filename reads stdin: pass - (or no path) as the only path")
    from_stdin = args.paths == ["-"] or (not args.paths and args.stdin_filename is not None)
    paths = args.paths or ["."]
    merge = _launch(args.launch_config)
    fixed = 0  # files --fix changed
    kw = dict(gpu=None, gpus=None, assume=args.assume)
    if args.assume:  # a bad --assume is a usage error before any file is read
        from memlint.estimate.from_plan import apply_assumptions
        from memlint.plan import TrainingPlan

        apply_assumptions(TrainingPlan("<assume>"), args.assume)

    if from_stdin:
        name, source = _read_stdin(args, settings)
        with files.checked_root(files.checkout_root(args.stdin_filename or ".")):  # stdin reads as if it were the file
            result = check_source(source, name, settings=settings, **kw)
        if merge is not None and result.plan.kind in ("python", "notebook"):
            result = check_plan(merge(result.plan), lines=result.lines, settings=settings, **kw)
        if args.fix or args.diff:
            return _fix_stdin(source, result, name, args)
        results = [result]
    elif getattr(args, "launch_words", None):
        from memlint.check import check_targets
        from memlint.extract.shell import command_targets

        results = check_targets([*command_targets(args.launch_words), *(collect(args.paths, settings) if args.paths else [])],
                                settings, **kw, cache=_cache(args, settings), jobs=_jobs(args))
        if merge is not None:
            results = [check_plan(merge(r.plan), lines=r.lines, settings=settings, **kw) if r.plan.kind in ("python", "notebook")
                       else r for r in results]
    elif merge is None and not (args.fix or args.diff or args.add_noqa):
        from memlint import progress

        results = check_paths(paths, settings, **kw, cache=_cache(args, settings), jobs=_jobs(args),
                              show_progress=progress.wanted(args.quiet))
    else:
        results = [r for target in collect(paths, settings)
                   if (r := check_target(target, settings, assume=args.assume, merge=merge)) is not None]
        if args.add_noqa:
            return _add_noqa(results, args)
        if args.fix or args.diff:
            results, code, fixed = _fix_files(results, settings, args, kw)
            if args.diff:
                return code

    _write_report(results, fmt, args, settings)
    if not args.quiet:
        sys.stdout.flush()
        sys.stderr.write(summary(results, show_fixes=args.unsafe_fixes or args.show_fixes,
                                 fail_on=None if args.exit_zero else settings.fail_on))
    if args.exit_non_zero_on_fix and fixed:
        return 1
    if args.exit_zero:
        return 0
    return 1 if failing(results, settings.fail_on) else 0


def _read_stdin(args: argparse.Namespace, settings) -> tuple[str, str]:
    """(the name stdin is read as, its text): within max-file-size, UTF-8."""
    name = args.stdin_filename or "<stdin>"
    raw = sys.stdin.buffer.read(settings.max_file_size + 1)
    if len(raw) > settings.max_file_size:
        raise MemlintError(f"{name}: over the max-file-size of {settings.max_file_size:,} bytes")
    try:
        return name, raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MemlintError(f"{name}: not UTF-8 text (invalid byte at offset {exc.start})") from None


def _width(stream: TextIO) -> int | None:
    """The terminal's columns, for the full format to wrap to: a terminal's own, or COLUMNS; None when piped."""
    import shutil

    if ascii_digits(os.environ.get("COLUMNS", "")):
        return int(os.environ["COLUMNS"])
    if hasattr(stream, "isatty") and stream.isatty():
        return shutil.get_terminal_size().columns
    return None


def _jobs(args) -> int:
    if args.jobs is not None:
        if args.jobs < 1:
            raise MemlintError("--jobs must be at least 1")
        return args.jobs
    return os.cpu_count() or 1


def _cache(args, settings):
    """The cache this run reads and writes, or None (--no-cache, MEMLINT_NO_CACHE)."""
    if args.no_cache or os.environ.get("MEMLINT_NO_CACHE"):
        return None
    from memlint.cache import CACHE_DIR, Cache, CacheRefused
    from memlint.vocab import printable

    root = args.cache_dir or os.environ.get("MEMLINT_CACHE_DIR") or os.path.join(settings.root or ".", CACHE_DIR)
    extra = [tuple(args.assume)]
    try:
        return Cache.open(root, settings, extra)
    except CacheRefused as exc:  # a link, another user's folder, one a checkout ships: the run goes on uncached
        sys.stderr.write(f"memlint: not using the cache: {printable(str(exc))}\n")
        return None


def _add_noqa(results, args) -> int:
    """Ruff's --add-noqa: `# noqa: CODE` on every line with a finding, merged into a noqa already there."""
    from memlint.fix.noqa import add_noqa

    findings = [f for r in results for f in r.findings]
    added, skipped = add_noqa(findings)
    if not args.quiet:
        sys.stderr.write(f"Added {added} noqa directive{'s' if added != 1 else ''}.\n")
        for where, why in skipped:
            sys.stderr.write(f"memlint: no noqa added at {where}: {why}\n")
    return 0


def _write_report(results, fmt: str, args: argparse.Namespace, settings) -> None:
    """The report to stdout or -o; a file that cannot be written (a missing folder, a full
    disk) is one line, exit 2."""
    from memlint.report.formats import statistics, write_results, write_statistics

    out: TextIO
    try:
        out = open(args.output_file, "w", encoding="utf-8") if args.output_file else sys.stdout
        try:
            color = _color(args, out) and not args.output_file
            if args.statistics:
                write_statistics(statistics(results), out, fmt, color=color)
            else:
                write_results(results, fmt, out, color=color, show_fixes=args.unsafe_fixes or args.show_fixes,
                              docs_url=settings.docs_url,
                              width=_width(out) if not args.output_file else None)
        finally:
            if args.output_file:
                out.close()
    except BrokenPipeError:
        raise
    except OSError as exc:
        where = f"-o {args.output_file}" if args.output_file else "stdout"
        raise MemlintError(f"{where}: cannot write the report ({exc.strerror or exc})") from None


def _fixable(results, args) -> dict:
    allowed = {"safe", "unsafe"} if args.unsafe_fixes else {"safe"}
    return {id(r): [f for f in r.findings if f.fix is not None and f.fix.applicability in allowed] for r in results}


def _apply(source: str, findings, unsafe: bool, path: str):
    from memlint.fix import apply_fixes

    return apply_fixes(source, findings, unsafe=unsafe, path=path)


def _fix_files(results, settings, args, kw):
    from memlint.check import check_source

    from memlint.fix import unified_diff

    todo = _fixable(results, args)
    out_results, diffs, changed = [], [], 0
    applied: list[tuple[str, list]] = []  # (path, findings whose fixes went in), for --show-fixes
    for r in results:
        fixes = todo[id(r)]
        if not fixes or r.plan.kind != "python":
            out_results.append(r)
            continue
        before = "\n".join(r.lines) + "\n"
        try:
            before = Path(r.path).read_text(encoding="utf-8")
        except OSError:
            pass
        res = _apply(before, fixes, args.unsafe_fixes, r.path)
        if res.source == before:
            out_results.append(r)
            continue
        changed += 1
        applied.append((r.path, res.applied))
        if args.diff:
            diffs.append(unified_diff(r.path, before, res.source))
            out_results.append(r)
            continue
        Path(r.path).write_text(res.source, encoding="utf-8")
        out_results.append(check_source(res.source, r.path, settings=settings, **kw))
    if args.diff:
        sys.stdout.write("".join(diffs))
        if not args.quiet:
            n = sum(len(todo[id(r)]) for r in results)
            sys.stderr.write(f"Would fix {n} finding{'s' if n != 1 else ''} in {changed} file{'s' if changed != 1 else ''}.\n"
                             if changed else "No fixes available.\n")
        return out_results, (1 if changed and not args.exit_zero else 0), changed
    if not args.quiet and changed:
        sys.stderr.write(f"Fixed {changed} file{'s' if changed != 1 else ''}.\n")
        if args.show_fixes:
            sys.stderr.write(_fixes_list(applied))
    return out_results, 0, changed


def _fixes_list(applied) -> str:
    """Ruff's --show-fixes: 'Fixed 3 findings:' then per file, per rule, how many."""
    from collections import Counter

    from memlint.vocab import printable

    n = sum(len(fs) for _, fs in applied)
    out = [f"Fixed {n} finding{'s' if n != 1 else ''}:"]
    for path, fs in applied:
        out.append(f"- {printable(path)}:")
        for (code, name), k in sorted(Counter((f.code, f.name) for f in fs).items()):
            out.append(f"    {k} × {code} ({name})")
    return "\n".join(out) + "\n"


def _fix_stdin(source: str, result, name: str, args) -> int:
    fixes = _fixable([result], args)[id(result)]
    new = _apply(source, fixes, args.unsafe_fixes, name).source if fixes else source
    if args.diff:
        from memlint.fix import unified_diff

        sys.stdout.write(unified_diff(name, source, new) if new != source else "")
        return 1 if new != source and not args.exit_zero else 0
    sys.stdout.write(new)  # Ruff's contract: `--fix -` prints the fixed source
    return 0


def add_parser(sub) -> None:
    c = sub.add_parser("check", help="check training scripts and configs (the default: memlint PATH…)")
    add_check_flags(c)
    c.set_defaults(func=run_check)
