"""The default rules' precision, measured on a corpus (tests/data/corpus/): healthy runs pass,
known-OOM configurations raise MEM101, and every MEM101's suggested change, applied to the plan
and re-estimated, fits."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from memlint.check import check_plan
from memlint.cli import main
from memlint.config import Settings
from memlint.extract import read_target
from memlint.files import Target
from memlint.vocab import size_text

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "data" / "corpus"
FIXTURES = ROOT / "fixtures"
GPU_LINE = re.compile(r"#\s*memlint-corpus:\s*gpu=(\S+)")


def _corpus(kind: str) -> list[Path]:
    return sorted(p for p in (CORPUS / kind).iterdir() if p.suffix in (".py", ".yml", ".yaml"))


def _gpu(path: Path) -> str:
    m = GPU_LINE.search(path.read_text(encoding="utf-8").splitlines()[0])
    assert m, f"{path.name}: the first line names no GPU"
    return m.group(1)


def _check(capsys, path: Path, gpu: str) -> tuple[int, str]:
    code = main(["check", str(path), "--gpu", gpu, "--no-cache"])
    out, _ = capsys.readouterr()
    return code, out


def test_the_corpus_covers_full_lora_qlora_packed_padded_and_several_gpus():
    healthy, oom = _corpus("healthy"), _corpus("oom")
    assert len(healthy) >= 8 and len(oom) >= 6
    text = "\n".join(p.read_text() for p in healthy)
    for word in ("packing=True", "sample_packing", "DataCollatorForLanguageModeling", "BitsAndBytesConfig",
                 "LoraConfig", "fp16=True", "gradient_checkpointing=False"):
        assert word in text, word
    assert len({_gpu(p) for p in healthy}) >= 5


@pytest.mark.parametrize("path", _corpus("healthy"), ids=lambda p: p.name)
def test_a_healthy_run_passes_the_default_rules(capsys, path):
    # a note may say something (it never fails a run); no warning or error on a run that fits with room
    code, out = _check(capsys, path, _gpu(path))
    assert code == 0, out


@pytest.mark.parametrize("path", _corpus("oom"), ids=lambda p: p.name)
def test_a_known_oom_raises_mem101(capsys, path):
    code, out = _check(capsys, path, _gpu(path))
    assert code == 1 and " MEM101 " in out, out


def _mem101_files() -> list[tuple[Path, str]]:
    cases = [(p, _gpu(p)) for p in _corpus("oom")]
    for p in sorted((FIXTURES / "scripts").rglob("*")) + sorted((FIXTURES / "configs").iterdir()):
        if p.suffix in (".py", ".ipynb", ".yml", ".yaml", ".json"):
            cases.append((p, "RTX4090"))
    return cases


@pytest.mark.parametrize("path,gpu", _mem101_files(), ids=lambda x: x.name if isinstance(x, Path) else x)
def test_every_mem101_suggestion_applied_to_the_plan_fits(path, gpu, monkeypatch):
    """The change MEM101 names, given to the plan as the values it sets (--assume), is estimated
    again: the peak is the one the finding promised, it fits with the headroom, MEM101 is gone."""
    monkeypatch.chdir(ROOT)
    rel = os.path.relpath(path, ROOT)
    target = Target(Path(rel), rel, True)
    plan, lines, cells = read_target(target)
    if plan is None:
        pytest.skip("not a training file")
    result = check_plan(plan, lines=lines, settings=Settings(), gpu=gpu, cells=cells)
    found = [f for f in result.findings if f.code == "MEM101"]
    if not found:
        assert path.parent.name != "oom"
        return
    [f] = found
    suggestion = f.data.get("suggestion")
    assert suggestion is not None, f.message
    again = check_plan(plan, lines=lines, settings=Settings(), gpu=gpu, assume=tuple(suggestion["assume"]),
                       cells=cells)
    est = again.context.estimate
    assert est is not None and est.peak == suggestion["peak_bytes"]
    assert again.context.fit.status == "fits", (f.message, again.context.fit.text())
    assert "MEM101" not in {x.code for x in again.findings}
    # the message names each change and the figure re-estimated
    assert f"{size_text(est.peak)} on {gpu}" in f.message or f"{size_text(est.peak)} on " in f.message
