"""Issue #29's classes for benchmarks/adversarial.py: each class set up in a folder of its own and run in a
fresh interpreter, with its wall time (interpreter start included) and peak RSS (the child's own, from
wait4). The outcomes are tests/test_adversarial.py's business; the last column only says what happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-LEAKED-0123456789"
SCRIPT = ('from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n'
          'model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype="bfloat16")\n'
          'tok(batch, max_length=512, padding="max_length")\n'
          'args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, bf16=True)\n'
          'Trainer(model=model, args=args).train()\n')
_MAIN = ("import contextlib, io, json, sys\nfrom memlint.cli import main\nrc = []\n"
         "for argv in json.loads(sys.argv[1]):\n"
         "    rc.append(main(argv))\n"
         "print('RC', json.dumps(rc))\n")


def _spawn(cmd: list[str], cwd: Path, env: dict | None = None, stdin=None, timeout: float = 900,
           signal_after: Callable[[int], bool] | None = None) -> tuple[float, int, int, str, str]:
    """(wall s, peak RSS MB, exit status, stdout, stderr) of one child, its RSS from wait4."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **(env or {}))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=out, stderr=err,
                                stdin=stdin if stdin is not None else subprocess.DEVNULL)
        status, usage = None, None
        while status is None:
            pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status, usage = st, ru
                break
            if signal_after is not None and signal_after(proc.pid):
                signal_after = None
            if time.perf_counter() - t > timeout:
                proc.kill()
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t
        out.seek(0)
        err.seek(0)
        return wall, usage.ru_maxrss // 1024, proc.returncode, out.read().decode("utf-8", "replace"), \
            err.read().decode("utf-8", "replace")


def _memlint(argvs: list[list[str]], cwd: Path, **kw) -> tuple[float, int, int, str, str]:
    return _spawn([sys.executable, "-c", _MAIN, json.dumps(argvs)], cwd, **kw)


def _said(rc, out: str, err: str, extra: str = "") -> str:
    tail = "traceback" if "Traceback" in err else "internal error" if "internal error" in out + err else "no traceback"
    return f"exit {rc}, {tail}{', ' + extra if extra else ''}"


# ---- the classes -----------------------------------------------------------------------------------------

def _leak(d: Path) -> Iterator[tuple]:
    outside, repo = d / "outside", d / "repo"
    (outside / "home" / ".cache").mkdir(parents=True)
    (outside / "conf").mkdir()
    (repo / ".git").mkdir(parents=True)
    (repo / "conf").mkdir()
    (outside / "token.yaml").write_text(SECRET + "\n")
    (outside / "home" / ".cache" / "tok.json").write_text(json.dumps({"model": SECRET}))
    (outside / "cfg.py").write_text(f"MODEL = {SECRET!r}\n")
    (outside / "cfg.yaml").write_text(f"model: {SECRET}\n")
    (outside / "conf" / "cfg.yaml").write_text(f"model: {SECRET}\n")
    (outside / "train.py").write_text(SCRIPT.replace("Qwen/Qwen2.5-0.5B", SECRET))
    (repo / "conf" / "cfg.yaml").write_text("defaults:\n  - /../../outside/conf@x: cfg\n  - _self_\n")
    (repo / "run.sh").write_text("python ../outside/train.py\n")
    head = "import os, json, yaml\nfrom omegaconf import OmegaConf\nfrom transformers import AutoModelForCausalLM\n"
    roads = ['m = yaml.safe_load(open("../outside/token.yaml"))',
             'm = json.load(open(os.path.expanduser("~/.cache/tok.json")))["model"]',
             'exec(open("../outside/cfg.py").read())\nm = MODEL', 'm = OmegaConf.load("../outside/cfg.yaml").model']
    for i, road in enumerate(roads):
        (repo / f"road{i}.py").write_text(head + road + "\nmodel = AutoModelForCausalLM.from_pretrained(m)\n" +
                                          SCRIPT.split("\n", 2)[2])
    for hydra_path, name in (("../outside/conf", "hydra_path.py"), ("conf", "hydra_defaults.py")):
        (repo / name).write_text(
            f'import hydra\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n'
            f'@hydra.main(config_path="{hydra_path}", config_name="cfg")\ndef main(cfg):\n'
            '    model = AutoModelForCausalLM.from_pretrained(cfg.model)\n'
            '    Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()\n')
    argvs = [["check", ".", "--no-cache", "--exit-zero", "--output-format", f] for f in ("concise", "json", "sarif")]
    wall, rss, rc, out, err = _memlint(argvs, repo, env={"HOME": str(outside / "home")})
    yield ("reads outside the root (8 roads, 3 formats)", wall, rss,
           _said(rc, out, err, f"secret in the reports: {'YES' if SECRET in out + err else 'no'}"))


def _cache_links(d: Path) -> Iterator[tuple]:
    victim, repo = d / "victim", d / "repo"
    victim.mkdir()
    (repo / ".git").mkdir(parents=True)
    (repo / "train.py").write_text(SCRIPT)
    cache = repo / ".memlint_cache"
    cache.mkdir()
    (cache / "CACHEDIR.TAG").symlink_to(victim / "tag")
    (cache / ".gitignore").symlink_to(victim / "gitignore")
    (cache / "v3").symlink_to(victim)
    wall, rss, rc, out, err = _memlint([["check", "train.py", "--exit-zero"]], repo)
    yield ("cache links (tag, .gitignore, v3/)", wall, rss,
           _said(rc, out, err, f"files written outside: {len(list(victim.iterdir()))}"))


def _submodule(d: Path) -> Iterator[tuple]:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "core.fsmonitor=false",
           "-c", "core.hooksPath=/dev/null", "-c", "protocol.file.allow=always"]
    sub, top = d / "sub", d / "top"
    for repo in (sub, top):
        repo.mkdir()
        subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
        (repo / "train.py").write_text(SCRIPT)
        subprocess.run([*git, "add", "."], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-qm", "x"], cwd=repo, check=True)
    subprocess.run([*git, "submodule", "-q", "add", str(sub), "sub"], cwd=top, check=True, capture_output=True)
    subprocess.run([*git, "commit", "-qm", "sub"], cwd=top, check=True)
    pwned = d / "PWNED"
    subprocess.run(["git", "config", "filter.evil.clean", f"touch {pwned}; cat"], cwd=top / "sub", check=True)
    (top / "sub" / ".gitattributes").write_text("*.py filter=evil\n")
    st = (top / "sub" / "train.py").stat()
    os.utime(top / "sub" / "train.py", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    (top / "train.py").write_text(SCRIPT.replace("size=2", "size=4"))
    wall, rss, rc, out, err = _memlint([["diff", "HEAD"]], top)
    yield ("memlint diff, a submodule's clean filter", wall, rss,
           _said(rc, out, err, f"filter ran: {'YES' if pwned.exists() else 'no'}"))


def _python_m(d: Path) -> Iterator[tuple]:
    for mod in ("json", "tomllib", "argparse"):
        (d / f"{mod}.py").write_text(f"open('PWNED-{mod}', 'w')\nraise SystemExit(7)\n")
    (d / "pyproject.toml").write_text('[tool.memlint]\ngpu = "RTX4090"\n')
    (d / "train.py").write_text(SCRIPT)
    wall, rss, rc, out, err = _spawn([sys.executable, "-m", "memlint", "check", ".", "--no-cache"], d)
    yield ("python -m memlint beside json.py, tomllib.py", wall, rss,
           _said(rc, out, err, f"shadowing modules run: {len(list(d.glob('PWNED*')))}"))


def _shell(d: Path) -> Iterator[tuple]:
    (d / "train.py").write_text(SCRIPT)
    (d / "doubling.sh").write_text("X=ab\n" + "X=$X$X\n" * 40 + "python train.py --name $X\n")
    (d / "nested.sh").write_text("python train.py --n " + "${A:-" * 1200 + "x" + "}" * 1200 + "\n")
    (d / "unclosed.sh").write_text("python train.py --n " + "${A:-" * 8000 + "\n")
    wall, rss, rc, out, err = _memlint([["check", ".", "--no-cache", "--exit-zero"]], d)
    yield ("shell: X=$X$X x40, ${A:-...} 1,200 deep, 8,000 unclosed", wall, rss,
           _said(rc, out, err, f"launcher notes: {out.count('not read: ')}"))


def _launcher(d: Path) -> Iterator[tuple]:
    (d / "big.py").write_text(SCRIPT + "# @hydra_runner\n" + "x = 1\n" * 331_000)
    (d / "run.sh").write_text("".join(f"python big.py --seed {i}\n" for i in range(20)))
    wall, rss, rc, out, err = _memlint([["check", "run.sh", "--no-cache", "--exit-zero"]], d)
    yield (f"launcher: 20 lines naming a {(d / 'big.py').stat().st_size / 1e6:.1f} MB script", wall, rss,
           _said(rc, out, err))


def _hydra(d: Path) -> Iterator[tuple]:
    (d / "conf" / "big").mkdir(parents=True)
    (d / "conf" / "big" / "opt.yaml").write_text("".join(f"k{i}: {i}\n" for i in range(20_000)))
    (d / "conf" / "cfg.yaml").write_text("defaults:\n" + "".join(f"  - big@m{i}: opt\n" for i in range(500)) +
                                         "  - _self_\nmodel: Qwen/Qwen2.5-0.5B\n")
    (d / "train.py").write_text(
        "import hydra\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        '@hydra.main(config_path="conf", config_name="cfg")\ndef main(cfg):\n'
        "    model = AutoModelForCausalLM.from_pretrained(cfg.model)\n"
        '    Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()\n')
    wall, rss, rc, out, err = _memlint([["check", "train.py", "--no-cache", "--exit-zero"]], d)
    yield ("Hydra: 500 mentions of a 20,000-key option", wall, rss, _said(rc, out, err))


def _requirements(d: Path) -> Iterator[tuple]:
    (d / ".git").mkdir()
    (d / "train.py").write_text(SCRIPT)
    (d / "requirements.txt").write_text("trl==1" + " " * 1500 + "x\n" + "peft" + "==1 ," * 350 + "!\n")
    wall, rss, rc, out, err = _memlint([["check", "train.py", "--no-cache", "--exit-zero"]], d)
    yield ("requirements.txt: 1.5 kB crafted lines", wall, rss, _said(rc, out, err))


def _gitignore(d: Path) -> Iterator[tuple]:
    (d / ".git").mkdir()
    (d / ".gitignore").write_text("a*" * 40 + "b\n")
    for n in ("a" * 40 + ".py", "a" * 200 + ".py"):
        (d / n).write_text(SCRIPT)
    wall, rss, rc, out, err = _memlint([["check", ".", "--no-cache", "--exit-zero"]], d)
    yield (".gitignore: a*a*...b (40 stars), 40-200 character names", wall, rss, _said(rc, out, err))


def _notebook(d: Path) -> Iterator[tuple]:
    meta: dict = {}
    cur = meta
    for _ in range(700):
        cur["x"] = {}
        cur = cur["x"]
    (d / "deep.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                                         "source": SCRIPT}], "metadata": meta, "nbformat": 4}))
    (d / "train.py").write_text(SCRIPT)
    wall, rss, rc, out, err = _memlint([["check", ".", "--no-cache", "--exit-zero", "--output-format", "sarif"]], d)
    yield ("notebook metadata nested 700 deep", wall, rss, _said(rc, out, err))


_SLOW = """
import sys, time
import memlint.check as c
real = c.read_target
def slow(target):
    if target.path.name.startswith("slow"):
        time.sleep(600)
    return real(target)
c.read_target = slow
from memlint.cli import main
sys.exit(main(["check", "-j", "2", ".", "--exit-zero"]))
"""


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _interrupted(d: Path) -> Iterator[tuple]:
    for n in ("fast", "slow1", "slow2"):
        (d / f"{n}.py").write_text(SCRIPT)
    seen: dict = {}

    def end_when_busy(pid: int) -> bool:
        workers = _children(pid)
        if len(workers) >= 2 and list((d / ".memlint_cache").glob("v*/*/*.json")):
            seen["workers"], seen["t"] = workers, time.perf_counter()
            os.kill(pid, signal.SIGTERM)
            return True
        return False

    wall, rss, rc, out, err = _spawn([sys.executable, "-c", _SLOW], d, signal_after=end_when_busy, timeout=120)
    left = [w for w in seen.get("workers", ()) if Path(f"/proc/{w}").exists()
            and Path(f"/proc/{w}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    cached = len(list((d / ".memlint_cache").glob("v*/*/*.json")))
    yield ("check -j 2 ended by SIGTERM mid-run", wall, rss,
           f"exit {rc}, workers left: {len(left)}, results kept in the cache: {cached}")


def _blocking(d: Path) -> Iterator[tuple]:
    (d / ".git").mkdir()
    (d / "train.py").write_text(SCRIPT)
    (d / "requirements.txt").write_text("-r /dev/stdin\ntrl==0.12.1\n")
    os.mkfifo(d / "requirements-dev.txt")
    os.mkfifo(d / "pyproject.toml")
    _memlint([["check", "train.py", "--exit-zero"]], d)
    os.mkfifo(d / "fifo")
    for e in (d / ".memlint_cache").glob("v*/*/*.json"):
        doc = json.loads(e.read_text())
        doc["sources"][str(d / "fifo")] = "0"
        e.write_text(json.dumps(doc))
    held = subprocess.PIPE
    wall, rss, rc, out, err = _memlint([["check", "train.py", "--exit-zero"]], d, stdin=held, timeout=120)
    yield ("-r /dev/stdin, FIFO pin files, a FIFO cache source", wall, rss, _said(rc, out, err))


def _cache_keys(d: Path) -> Iterator[tuple]:
    (d / "train.py").write_text(SCRIPT.replace("bf16=True", 'bf16=True, deepspeed="ds.json"'))
    argv = ["check", "train.py", "--gpus", "8", "--exit-zero"]
    _memlint([argv], d)
    (d / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    for e in (d / ".memlint_cache").glob("v*/*/*.json"):
        e.write_text(e.read_text() + "{")  # and a malformed entry beside it
    wall, rss, rc, out, err = _memlint([argv], d)
    cold = _memlint([[*argv, "--no-cache"]], d)[3]
    yield ("cache: a missing file appears, a malformed entry", wall, rss,
           _said(rc, out, err, f"same report as a cold run: {'yes' if out == cold else 'NO'}"))


def _digits(d: Path) -> Iterator[tuple]:
    (d / "train.py").write_text(SCRIPT)
    (d / "axo.yaml").write_text('base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nmicro_batch_size: "²"\n')
    (d / "run.sh").write_text("torchrun --nproc_per_node ² train.py\n")
    wall, rss, rc, out, err = _memlint([["check", ".", "--no-cache", "--exit-zero"],
                                        ["check", "train.py", "--assume", "max_length=²"]], d)
    yield ("unicode digits: --assume max_length=², configs", wall, rss, _said(rc, out, err))


def _clean(d: Path) -> Iterator[tuple]:
    victim = d / "victim"
    victim.mkdir()
    (d / "linked").mkdir()
    (d / "linked" / ".memlint_cache").symlink_to(victim)
    (d / "evil\x1b]0;T\x07" / ".memlint_cache").mkdir(parents=True)
    wall, rss, rc, out, err = _memlint([["clean"]], d)
    yield ("memlint clean: a linked and a foreign .memlint_cache", wall, rss,
           _said(rc, out, err, f"escape bytes printed: {'YES' if chr(27) in err else 'no'}"))


def _settings(d: Path) -> Iterator[tuple]:
    repo = d / "checkout"
    (repo / ".git").mkdir(parents=True)
    (repo / "train.py").write_text(SCRIPT)
    (d / ".memlint.toml").write_text('ignore = ["ALL"]\n')
    wall, rss, rc, out, err = _memlint([["check", "train.py", "--no-cache"]], repo)
    yield ("a .memlint.toml above the repository top", wall, rss,
           _said(rc, out, err, f"findings kept: {'yes' if 'MEM' in out else 'NO'}"))


CLASSES = (_leak, _cache_links, _submodule, _python_m, _shell, _launcher, _hydra, _requirements, _gitignore,
           _notebook, _interrupted, _blocking, _cache_keys, _digits, _clean, _settings)


def run_classes(_child=None) -> Iterator[tuple[str, float, int, str]]:
    for make in CLASSES:
        with tempfile.TemporaryDirectory(prefix="memlint-29-") as tmp:
            try:
                yield from make(Path(tmp))
            except (OSError, subprocess.SubprocessError) as exc:
                yield (make.__name__.strip("_"), 0.0, 0, f"not run: {exc}")


if __name__ == "__main__":
    for row in run_classes():
        print(f"  {row[0]:52s} {row[1]:6.2f} s  {row[2]:>5} MB   {row[3]}")
