"""The result cache and the parallel walk: a warm re-check gives what a cold one gives (every format,
same order), imports neither libcst nor the estimator, and is invalidated by whatever it depends on:
the file, the settings, the files it read (a sibling module, a DeepSpeed JSON)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.cli import main
from memlint.report.formats import FORMATS

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of the fixture scripts and configs to check, with its own cache."""
    monkeypatch.delenv("MEMLINT_NO_CACHE", raising=False)
    monkeypatch.delenv("MEMLINT_CACHE_DIR", raising=False)
    shutil.copytree(SCRIPTS, tmp_path / "scripts")
    shutil.copytree(ROOT / "fixtures" / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_warm_run_prints_what_a_cold_one_prints(tree, capsys, fmt):
    argv = ["check", "scripts", "configs", "--gpu", "RTX4090", "--output-format", fmt]
    cold = run(capsys, *argv, "--no-cache", "-j", "1")
    first = run(capsys, *argv)          # fills the cache
    warm = run(capsys, *argv)           # reads it
    assert (tree / ".memlint_cache").is_dir()
    assert cold == first == warm


def test_parallel_results_are_those_of_one_process_in_the_same_order(tree, capsys):
    one = run(capsys, "check", "scripts", "configs", "--gpu", "RTX4090", "--no-cache", "-j", "1")
    two = run(capsys, "check", "scripts", "configs", "--gpu", "RTX4090", "--no-cache", "-j", "2")
    assert one == two and one[1].count("\n") > 20


def test_a_warm_check_imports_neither_the_extractor_nor_the_estimator(tree, capsys):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("MEMLINT_NO_CACHE", None)
    argv = ["check", "scripts", "--gpu", "RTX4090", "-q", "--exit-zero", "-j", "1"]
    code = ("import contextlib, io, sys; from memlint.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(%r)\n"
            "bad = sorted({m for m in sys.modules if m.startswith(('libcst', 'memlint.extract.interp', 'memlint.estimate'))})\n"
            "print(','.join(bad))" % (argv,))
    cold = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tree)
    assert "memlint.extract.interp" in cold.stdout and "memlint.estimate" in cold.stdout, cold.stdout + cold.stderr
    assert "libcst" in cold.stdout, cold.stdout  # the lint path parses with libcst (extract/parsed.py)
    warm = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tree)
    assert warm.returncode == 0 and warm.stdout.strip() == "", warm.stdout + warm.stderr


def test_a_changed_file_or_setting_is_checked_again(tree, capsys):
    path = tree / "scripts" / "branches.py"
    _, before, _ = run(capsys, "check", str(path), "--gpu", "RTX4090")
    assert " MEM101 " in before
    path.write_text(path.read_text().replace('MODEL = "meta-llama/Llama-2-13b-hf"', 'MODEL = "Qwen/Qwen2.5-0.5B"'))
    _, after, _ = run(capsys, "check", str(path), "--gpu", "RTX4090")
    _, fresh, _ = run(capsys, "check", str(path), "--gpu", "RTX4090", "--no-cache")
    assert after == fresh != before
    _, h200, _ = run(capsys, "check", str(path), "--gpu", "B200")
    _, h200_fresh, _ = run(capsys, "check", str(path), "--gpu", "B200", "--no-cache")
    assert h200 == h200_fresh != after  # a setting is part of the key


def test_a_result_follows_the_sibling_module_and_the_deepspeed_json_it_read(tree, capsys):
    train, settings = tree / "scripts" / "sibling_import" / "train.py", tree / "scripts" / "sibling_import" / "settings.py"
    _, before, _ = run(capsys, "check", str(train), "--gpu", "RTX4090")
    assert " MEM101 " in before
    settings.write_text(settings.read_text().replace("MICRO_BATCH = 16", "MICRO_BATCH = 1"))
    _, after, _ = run(capsys, "check", str(train), "--gpu", "RTX4090")
    _, fresh, _ = run(capsys, "check", str(train), "--gpu", "RTX4090", "--no-cache")
    assert after == fresh != before
    cfg, ds = tree / "configs" / "axolotl_fft_zero3.yml", tree / "configs" / "ds_zero3_offload.json"
    _, before, _ = run(capsys, "check", str(cfg), "--gpu", "RTX4090", "--gpus", "8")
    assert '"stage": 3' in ds.read_text()
    ds.write_text(ds.read_text().replace('"stage": 3', '"stage": 2'))
    _, after, _ = run(capsys, "check", str(cfg), "--gpu", "RTX4090", "--gpus", "8")
    _, fresh, _ = run(capsys, "check", str(cfg), "--gpu", "RTX4090", "--gpus", "8", "--no-cache")
    assert after == fresh != before


def test_clean_removes_the_cache(tree, capsys):
    run(capsys, "check", "scripts", "--gpu", "RTX4090")
    assert (tree / ".memlint_cache").is_dir()
    assert (tree / ".memlint_cache" / ".gitignore").read_text().strip().endswith("*")
    code, _, err = run(capsys, "clean")
    assert code == 0 and "Removing cache at" in err and not (tree / ".memlint_cache").exists()
    assert run(capsys, "clean")[2].startswith("No .memlint_cache")


def test_no_cache_writes_nothing(tree, capsys):
    run(capsys, "check", "scripts", "--gpu", "RTX4090", "--no-cache")
    assert not (tree / ".memlint_cache").exists()


def test_each_result_is_cached_as_soon_as_it_is_known(tree, monkeypatch):
    """A walk stopped half-way (Ctrl-C) keeps the files it finished: the next run checks only the rest."""
    from memlint import check
    from memlint.cache import MISS, Cache
    from memlint.config import Settings

    settings = Settings()
    targets = check.collect(["scripts"], settings)
    stop = len(targets) // 2
    real = check.check_target

    def interrupted(target, *args):
        if target == targets[stop]:
            raise KeyboardInterrupt
        return real(target, *args)

    monkeypatch.setattr(check, "check_target", interrupted)
    cache = Cache.open(tree / ".memlint_cache", settings)
    with pytest.raises(KeyboardInterrupt):
        check.check_targets(targets, settings, cache=cache, jobs=1)
    done = [cache.get(t.shown, t.explicit, t.path.read_bytes()) is not MISS for t in targets]
    assert all(done[:stop]) and not done[stop]
    # after it, only the files a walk skips by their text (no training signal: never sent to be checked)
    assert [t.path.name for t, d in zip(targets[stop:], done[stop:]) if d] == \
        [t.path.name for t in targets[stop:] if not check.signal_words(t.path.read_bytes())]


def test_workers_write_their_results_themselves(tree, monkeypatch):
    """With -j, each worker writes the result it made: one the parent never received is not lost."""
    from memlint import check
    from memlint.cache import Cache
    from memlint.config import Settings

    log = tree / "writers.txt"
    real = Cache.put

    def put(self, *args):
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
        return real(self, *args)

    monkeypatch.setattr(Cache, "put", put)
    settings = Settings()
    targets = check.collect(["scripts"], settings)
    check.check_targets(targets, settings, cache=Cache.open(tree / ".memlint_cache", settings), jobs=2)
    writers = set(log.read_text().split())
    assert writers - {str(os.getpid())}  # the workers' own pids
