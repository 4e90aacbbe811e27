"""How long `memlint check -j 2 .` takes at the root of a tree that vendors a library (issue #26, item 3).

    python benchmarks/bench_walk.py                       # transformers' installed source tree, copied
    python benchmarks/bench_walk.py --tree PATH           # any folder (copied, so its cache is the bench's own)
    python benchmarks/bench_walk.py --interrupt 10        # also: stop a cold walk after 10 s, then resume it

A new user's walk at the root of a repository that vendors a library (transformers' own source tree: 2,951 files)
had not finished after 15 minutes, and left no cache to resume from. Targets on 2 cores: cold <= 60 s, warm <= 1 s.
Cold starts from an empty cache (and writes it); warm re-checks the unchanged tree from it (median of 3). With
--interrupt, a cold walk is stopped (SIGINT, as Ctrl-C) after that many seconds; the results it finished are in the
cache, and the resumed walk checks only the rest. Run it when the machine is idle: the load average is printed,
and on a loaded machine both figures grow (memlint's per-file budget is the thread's CPU time, with a wall-clock cap
six times that, so a loaded machine cuts few files short, but the walk takes longer).
A benchmark, not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLD_TARGET, WARM_TARGET = 60.0, 1.0


def installed_transformers() -> Path:
    spec = importlib.util.find_spec("transformers")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("transformers is not installed: pass --tree PATH")
    return Path(next(iter(spec.submodule_search_locations)))


def copy_tree(src: Path, dest: Path) -> int:
    """`src` copied under `dest` (no __pycache__): the walk's root; the number of .py files in it."""
    shutil.copytree(src, dest / src.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return sum(1 for _ in (dest / src.name).rglob("*.py"))


def run(root: Path, cache: Path, jobs: int, interrupt: float | None = None) -> tuple[float, float, int, str]:
    """One `memlint check -j N .` in `root`: wall seconds, CPU seconds (its processes and workers), exit code,
    the last line of stderr. `interrupt`: SIGINT to the process group after that many seconds."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), MEMLINT_CACHE_DIR=str(cache))
    env.pop("MEMLINT_NO_CACHE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", "memlint", "check", "-j", str(jobs), "--exit-zero", "."],
                            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=interrupt)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the command and its workers
        _, err = proc.communicate()
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "")
    return wall, cpu, proc.returncode, last


def signals(root: Path) -> tuple[int, int, int]:
    """What the walk does with each .py/.ipynb file of `root` (extract.training_signal, the test check_targets and
    read_target apply): (parsed, skipped by their text alone, skipped after tokenizing)."""
    sys.path.insert(0, str(ROOT / "src"))
    from memlint.extract import signal_words, training_signal

    parsed = by_text = by_tokens = 0
    for path in root.rglob("*"):
        if path.suffix not in (".py", ".ipynb") or not path.is_file():
            continue
        raw = path.read_bytes()
        if not signal_words(raw):
            by_text += 1
        elif not training_signal(raw, path.suffix == ".ipynb"):
            by_tokens += 1
        else:
            parsed += 1
    return parsed, by_text, by_tokens


def entries(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("*.json")) if cache.exists() else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, help="the folder to walk (default: transformers' installed source tree)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--interrupt", type=float, metavar="SECONDS", help="also stop a cold walk after SECONDS, then resume")
    args = ap.parse_args()
    src = args.tree or installed_transformers()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        root.mkdir()
        n = copy_tree(src, root)
        cache = Path(tmp) / "cache"
        load = os.getloadavg()
        cold, cold_cpu, code, last = run(root, cache, args.jobs)
        cached = entries(cache)
        warm = [run(root, cache, args.jobs) for _ in range(args.warm_runs)]
        print(f"memlint check -j {args.jobs} . over {src} ({n:,} .py files, copied); python {sys.version.split()[0]}, "
              f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} before the cold run")
        print(f"  cold: {cold:7.2f} s wall, {cold_cpu:7.2f} s CPU   (target <= {COLD_TARGET:g} s)   exit {code}: {last}")
        parsed, by_text, by_tokens = signals(root)  # after the timed runs: never in their way
        print(f"        {cached:,} cache entries written; {parsed:,} files parsed (a training signal), "
              f"{by_text + by_tokens:,} skipped before parsing ({by_text:,} by their text, {by_tokens:,} by their tokens)")
        print(f"  warm: {statistics.median(w[0] for w in warm):7.2f} s wall, {statistics.median(w[1] for w in warm):7.2f} "
              f"s CPU   (target <= {WARM_TARGET:g} s; median of {len(warm)})")
        if args.interrupt:
            shutil.rmtree(cache, ignore_errors=True)
            stopped, _, code, _ = run(root, cache, args.jobs, interrupt=args.interrupt)
            kept = entries(cache)
            resumed, resumed_cpu, code2, _ = run(root, cache, args.jobs)
            print(f"  interrupted after {stopped:.1f} s (exit {code}): {kept:,} results already in the cache; "
                  f"resumed: {resumed:.2f} s wall, {resumed_cpu:.2f} s CPU (exit {code2})")
        print(f"  load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
