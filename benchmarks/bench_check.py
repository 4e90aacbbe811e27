"""How fast `memlint check` runs end to end, cold, as pre-commit and CI run it.

    python benchmarks/bench_check.py
    python benchmarks/bench_check.py --against /tmp/base/src   # before/after, interleaved
    python benchmarks/bench_check.py --file PATH   # also side by side on a real script (libcst, torch-preflight)

Same inputs and targets as bench_extract.py (issue #4: one 800-line script <= 0.6 s,
25 scripts <= 3 s), but through the whole command: settings, extraction, estimate, every
default rule, concise output; cold runs start from an empty cache (and write it), the warm
run re-checks the unchanged folder from it (issue #16: <= 0.15 s). A benchmark, not a test:
nothing here asserts.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_extract import RUNS, ROOT, compile_bytecode, make_inputs, timed  # noqa: E402


def compare(other_src: str, runs: int = 15) -> None:
    """Interleave cold runs of this tree and another memlint source tree (`git worktree add
    /tmp/base <rev>`, then --against /tmp/base/src): a 2-core machine's noise is larger than
    most changes, so before/after is measured in alternation, not at different times."""
    import compileall
    import os
    import time

    compileall.compile_dir(os.path.join(other_src, "memlint"), quiet=1)
    compile_bytecode()
    with tempfile.TemporaryDirectory() as tmp:
        script, n_lines, _, _ = make_inputs(Path(tmp))
        code = ("import contextlib, io; from memlint.cli import main\n"
                "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
                f"    main({['check', str(script), '--gpu', 'RTX4090', '-q', '--exit-zero']!r})")
        times: dict[str, list[float]] = {"this tree": [], other_src: []}
        for _ in range(runs):
            for label, src in (("this tree", str(ROOT / "src")), (other_src, other_src)):
                env = dict(os.environ, PYTHONPATH=src, MEMLINT_NO_CACHE="1")  # cold: no cache to read
                t = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)
                times[label].append(time.perf_counter() - t)
    import statistics

    print(f"check one {n_lines}-line script, --gpu: median of {runs} interleaved cold runs")
    for label, xs in times.items():
        print(f"  {label:40s} {statistics.median(xs):6.3f} s")


def _timed(argv: list[str], cache: str | None, runs: int = RUNS, fresh: bool = False) -> float:
    """Median wall time of `memlint` with `argv` in a fresh interpreter; `cache` is the cache folder
    (None: --no-cache), emptied before every run when `fresh` (a cold run that writes its cache)."""
    import os
    import statistics
    import time

    code = ("import contextlib, io; from memlint.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    main({argv!r})")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("MEMLINT_NO_CACHE", None)
    if cache is None:
        env["MEMLINT_NO_CACHE"] = "1"
    else:
        env["MEMLINT_CACHE_DIR"] = cache
    xs = []
    for _ in range(runs):
        if fresh and cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


def _libcst_alone(script: Path) -> float:
    """libcst's own cost on the same file, in a fresh interpreter: import, native parse, PositionProvider over
    every node (what memlint's cold check must stay within 2x of)."""
    code = ("import libcst as cst, libcst.metadata as m\n"
            f"src = open({str(script)!r}, encoding='utf-8').read()\n"
            "w = m.MetadataWrapper(cst.parse_module(src), unsafe_skip_copy=True)\n"
            "w.resolve(m.PositionProvider)\n")
    return timed(code)


def _preflight(script: Path) -> float | None:
    """`torch-preflight check` on the same file, when that peer is installed (pip install torch-preflight)."""
    exe = shutil.which("torch-preflight")
    if exe is None:
        return None
    import statistics
    import time

    xs = []
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run([exe, "check", str(script)], capture_output=True, cwd=ROOT)
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


def side_by_side(path: Path) -> None:
    """memlint check, libcst alone and torch-preflight on one real file (the issue's 841-line QLoRA script:
    artidoro/qlora's qlora.py), median of 5 cold runs each."""
    compile_bytecode()
    lines = path.read_text(encoding="utf-8").count("\n")
    ours = _timed(["check", str(path), "--gpu", "RTX4090", "-q", "--exit-zero"], None)
    alone = _libcst_alone(path)
    peer = _preflight(path)
    print(f"{path} ({lines} lines), median of {RUNS} cold runs")
    print(f"  memlint check --gpu                              {ours:6.3f} s")
    print(f"  libcst alone: import + parse + positions         {alone:6.3f} s   (check / libcst = {ours / alone:.2f})")
    if peer is not None:
        print(f"  torch-preflight check                            {peer:6.3f} s   (check / preflight = {ours / peer:.2f})")


def main() -> None:
    import os

    if len(sys.argv) == 3 and sys.argv[1] == "--against":
        compare(sys.argv[2])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--file":
        side_by_side(Path(sys.argv[2]).resolve())
        return
    with tempfile.TemporaryDirectory() as tmp:
        script, n_lines, folder, files = make_inputs(Path(tmp))
        compile_bytecode()
        cache = str(Path(tmp) / "cache")
        quiet = ["-q", "--exit-zero"]
        bare = timed("pass")
        libcst_alone = _libcst_alone(script)
        peer = _preflight(script)
        one = _timed(["check", str(script), "--gpu", "RTX4090", *quiet], cache, fresh=True)
        many = _timed(["check", str(folder), "--gpu", "RTX4090", *quiet], cache, fresh=True)
        many_1 = _timed(["check", str(folder), "--gpu", "RTX4090", "-j", "1", *quiet], cache, fresh=True)
        nogpu = _timed(["check", str(folder), *quiet], None)
        _timed(["check", str(folder), "--gpu", "RTX4090", *quiet], cache, runs=1)  # fill the cache
        warm = _timed(["check", str(folder), "--gpu", "RTX4090", *quiet], cache)
        proc = subprocess.run([sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", "memlint", "check", str(folder), "--gpu", "RTX4090", "-q",
                               "--no-cache"], capture_output=True, text=True, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    jobs = os.cpu_count() or 1
    print(f"python {sys.version.split()[0]}, {jobs} CPUs, median of {RUNS} runs (fresh interpreter each, bytecode compiled)")
    print(f"  interpreter start alone                          {bare:6.3f} s")
    print(f"  cold: check one {n_lines}-line script, --gpu            {one:6.3f} s   (target <= 0.6 s)")
    print(f"  libcst alone: import + parse + positions, same file {libcst_alone:6.3f} s   "
          f"(check / libcst = {one / libcst_alone:.2f}, target <= 2)")
    if peer is not None:
        print(f"  torch-preflight check, same file                  {peer:6.3f} s   "
              f"(check / preflight = {one / peer:.2f}, target <= 0.25)")
    else:
        print("  torch-preflight check: not installed (pip install torch-preflight to compare)")
    print(f"  cold: check {len(files)} scripts, --gpu, -j {jobs}                {many:6.3f} s   (target <= 3 s)")
    print(f"  cold: check {len(files)} scripts, --gpu, -j 1                {many_1:6.3f} s")
    print(f"  cold: check {len(files)} scripts, fit on all common GPUs    {nogpu:6.3f} s")
    print(f"  warm: re-check the {len(files)} unchanged scripts           {warm:6.3f} s   (target <= 0.15 s)")
    print(f"  ({len(proc.stdout.splitlines())} findings on the {len(files)} scripts)")


if __name__ == "__main__":
    main()
