"""What the adversarial inputs cost. Issue #17's set: every one of them checked by one `memlint check`, in a
fresh interpreter, with the total time and the peak resident memory printed (target: under 10 s
and 300 MB together). Before the budgets, single cases took 22 GB or 72 s. Issue #29's classes: one
fresh interpreter per class (reads outside the root, cache links, submodule filters, `python -m`,
shell expansion, a launcher naming a big script, Hydra copies, requirement lines, .gitignore patterns,
deep notebooks, an interrupted `-j` run, blocking reads, cache keys, unicode digits, `memlint clean`,
settings above the top), each with its time and peak RSS.

    python benchmarks/adversarial.py
    python benchmarks/adversarial.py --each    # also one process per issue #17 case: time and RSS of each

A benchmark, not a test: nothing here asserts (tests/test_adversarial.py checks the outcomes).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
TAIL = ('args = TrainingArguments(output_dir="o", per_device_train_batch_size=2)\n'
        'Trainer(model="meta-llama/Llama-3.1-8B", args=args).train()\n')


def _script(body: str) -> str:
    return HEAD + body + TAIL


def _notebook(cells: int) -> str:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "x = 1"}
    first = dict(cell, source="import torch")
    return json.dumps({"cells": [first] + [cell] * (cells - 1), "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def make_cases(folder: Path) -> dict[str, Path]:
    """The adversarial set, written under `folder`: name -> the file to check."""
    moe = folder / "moe"
    moe.mkdir()
    (moe / "config.json").write_text(json.dumps({
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": "88"}))
    texts = {
        "string-doubling.py": _script('s = "a" * 10000\n' + "s = s + s\n" * 19),
        "string-repetition.py": _script('s = "a" * 10000\nt = s * 10000 * 20\n'),
        "fstring-width.py": _script('w = f"{1:1500000000}"\n'),
        "format-width.py": _script('w = "{:1500000000}".format(1)\nv = "%1500000000d" % 1\n'),
        "replace-and-join.py": _script('s = "a" * 90000\nt = s.replace("a", s)\nu = s.join([s, s, s])\n'),
        "list-doubling.py": _script("x = [1, 2, 3]\n" + "x = x + x\n" * 40),
        "nested-lists.py": _script("x = [1]\n" + "x = [x, x]\n" * 40),
        "cyclic-dict.py": _script('d = {}\nd["self"] = d\ne = d\n'),
        "big-shift.py": _script("n = 1 << (1 << 34)\nm = 10 ** 64\nm = m ** 64\nm = m ** 64\n"),
        "huge-int-literal.py": _script(f"n = {'9' * 5000}\n"),
        "int-of-string.py": _script(f"n = int('{'9' * 4000}')\nm = n * n * n\n"),
        "local-moe-string-experts.py": HEAD + 'model = AutoModelForCausalLM.from_pretrained("./moe")\n'
                                       'tok(x, max_length=512, padding="max_length")\n' + TAIL.replace(
                                           '"meta-llama/Llama-3.1-8B"', "model"),
        "100k-lines.py": HEAD + "x = 1\n" * 100_000 + TAIL,
        "deep-parens.py": _script("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n"),
        "notebook-200k-cells.ipynb": _notebook(200_000),
        "notebook-null-source.ipynb": json.dumps({"cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "source": "import torch"},
            {"cell_type": "code", "metadata": {}, "outputs": [], "source": None}], "metadata": {}, "nbformat": 4}),
        "deep.yaml": "base_model: x\nadapter: lora\nd: " + "[" * 5000 + "]" * 5000 + "\n",
        "alias-bomb.yaml": "base_model: x\nadapter: lora\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
        "axolotl-104MB-deepspeed.yaml": "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nmicro_batch_size: 2\n"
                                        "sequence_len: 2048\ndeepspeed: ds_big.json\n",
    }
    out = {}
    for name, text in texts.items():
        (folder / name).write_text(text)
        out[name] = folder / name
    with open(folder / "ds_big.json", "w") as f:  # 104 MB: a DeepSpeed config padded with data
        f.write('{"zero_optimization": {"stage": 3}, "pad": "')
        chunk = "x" * (1 << 20)
        for _ in range(104):
            f.write(chunk)
        f.write('"}')
    out["deepspeed-104MB.json"] = folder / "ds_big.json"
    out["model-id-escapes.py"] = folder / "model-id-escapes.py"
    out["model-id-escapes.py"].write_text(_script('m = "\\x1b]0;TITLE\\x07\\x1b[2J"\nAutoModelForCausalLM.from_pretrained(m)\n'))
    return out


_RUN = ("import contextlib, io, resource, sys, time\n"
        "from memlint.cli import main\n"
        "t = time.perf_counter()\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):\n"
        "    rc = main(sys.argv[1:])\n"
        "print(rc, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
        "out.getvalue().count('\\n'))\n")


def _child(args: list[str], cwd: Path, env: dict | None = None, stdin=None) -> tuple[float, int, str]:
    """Wall time and peak RSS (MB, as the child's own getrusage reports it) of one fresh run."""
    env = dict(os.environ, **(env or {}), PYTHONPATH=str(ROOT / "src"))
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _RUN, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=stdin, timeout=900)
    wall = time.perf_counter() - t
    said = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    parts = said.split()
    if len(parts) != 4:
        return wall, -1, (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return wall, int(parts[2]) // 1024, f"exit {parts[0]}, {parts[3]} lines of findings"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="memlint-adversarial-") as tmp:
        folder = Path(tmp)
        cases = make_cases(folder)
        args = ["check", *[str(p.relative_to(folder)) for p in cases.values()], "--exit-zero", "--gpu", "24"]
        wall, peak, said = _child(args, folder)
        print(f"memlint check of {len(cases)} adversarial inputs, one fresh interpreter (start included):")
        print(f"  total {wall:6.2f} s, peak RSS {peak} MB   (target: under 10 s and 300 MB)   {said}")
        if "--each" in sys.argv:
            print("one process per case (interpreter start and imports included):")
            for name, path in cases.items():
                w, rss, said = _child(["check", str(path.relative_to(folder)), "--exit-zero", "--gpu", "24"], folder)
                print(f"  {name:34s} {w:6.2f} s  {rss:>5} MB   {said}")
    from issue29 import run_classes

    print("issue #29, one fresh interpreter per class (start included; the before figures are the issue's):")
    for name, wall, rss, said in run_classes():
        print(f"  {name:52s} {wall:6.2f} s  {rss:>5} MB   {said}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
