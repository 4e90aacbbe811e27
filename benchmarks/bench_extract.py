"""How fast `memlint plan` reads scripts: cold, in a fresh interpreter, as a user runs it.

    python benchmarks/bench_extract.py

Prints (1) one 800-line training script, cold, interpreter start included, and (2) a folder of
25 scripts (the fixtures, padded to 25) in one process. Targets from issue #4: <= 0.6 s and
<= 3 s. A benchmark, not a test: nothing here asserts.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "scripts"
RUNS = 5

_HELPER = '''

def {name}(examples, tokenizer=None, max_length={n}):
    """Helper {i}: reshape a batch before it reaches the collator."""
    out = {{"input_ids": [], "attention_mask": []}}
    for ids in examples["input_ids"]:
        ids = ids[:max_length]
        if len(ids) < {n} // 2:
            ids = ids + [0] * 3
        out["input_ids"].append(ids)
        out["attention_mask"].append([1] * len(ids))
    scale = {i} * 2 + WARMUP_STEPS // 10
    if scale > 100:
        logger.info("scaled %d", scale)
    return out
'''


def long_script() -> str:
    """A run_clm-style script grown to 800 lines with helpers of the kind real scripts carry."""
    base = (FIXTURES / "run_clm_style.py").read_text(encoding="utf-8")
    head, sep, tail = base.partition('\nif __name__ == "__main__":')
    parts = [head, "\nWARMUP_STEPS = 500\n"]
    i = 0
    while sum(p.count("\n") for p in parts) < 800 - 4:
        parts.append(_HELPER.format(name=f"transform_{i}", i=i, n=128 * (1 + i % 8)))
        i += 1
    text = "".join(parts) + sep + tail
    lines = text.splitlines()
    return "\n".join(lines[:800]) + "\n" if len(lines) > 800 else text


def compile_bytecode() -> None:
    """Write memlint's .pyc files, as `pip install` (and pre-commit's install) does.

    An editable install under PYTHONDONTWRITEBYTECODE=1 (set on some CI images) would
    otherwise compile every module on every run, which is not what users run.
    """
    import compileall

    compileall.compile_dir(str(ROOT / "src" / "memlint"), quiet=1)


def timed(code: str) -> float:
    runs = []
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def make_inputs(tmp: Path) -> tuple[Path, int, Path, list[Path]]:
    """The 800-line script and a folder of 25 scripts (the fixtures, padded with copies)."""
    script = tmp / "train_long.py"
    script.write_text(long_script(), encoding="utf-8")
    n_lines = script.read_text(encoding="utf-8").count("\n")
    folder = tmp / "scripts"
    shutil.copytree(FIXTURES, folder)
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".py", ".ipynb"))
    k = 0
    while len(files) < 25:
        extra = folder / f"copy_{k}.py"
        shutil.copy(FIXTURES / "trl_sft_qlora.py", extra)
        files.append(extra)
        k += 1
    return script, n_lines, folder, files


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script, n_lines, folder, files = make_inputs(Path(tmp))
        compile_bytecode()
        bare = timed("pass")
        imp = timed("import memlint.extract.interp")
        one = timed(f"from memlint.extract import extract_file; extract_file({str(script)!r})")
        many = timed(f"from memlint.extract import extract_paths; extract_paths([{str(folder)!r}])")
    print(f"python {sys.version.split()[0]}, median of {RUNS} cold runs (fresh interpreter each, bytecode compiled)")
    print(f"  interpreter start alone             {bare:6.3f} s")
    print(f"  start + import memlint.extract      {imp:6.3f} s")
    print(f"  one {n_lines}-line script                {one:6.3f} s   (target <= 0.6 s)")
    print(f"  folder of {len(files)} scripts                {many:6.3f} s   (target <= 3 s)")


if __name__ == "__main__":
    main()
