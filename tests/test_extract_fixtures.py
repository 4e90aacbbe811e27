"""Every fixture script reads into the plan its golden file claims, and reading runs nothing."""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import pytest

from memlint.extract import extract_file
from memlint.extract.__main__ import BARE_UNKNOWN, GOLDEN_VERSIONS, fixture_configs, fixture_scripts, golden_path
from memlint.library.versions import pinned_versions
from memlint.plan import PLAN_FIELDS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCRIPTS = fixture_scripts(FIXTURES)
CONFIGS = fixture_configs(FIXTURES)  # axolotl, LLaMA-Factory, TRL, torchtune, DeepSpeed, accelerate


def test_there_are_enough_fixtures_and_each_has_a_golden_file():
    assert len(SCRIPTS) >= 20
    assert len(CONFIGS) >= 12
    missing = [s.name for s in SCRIPTS + CONFIGS if not golden_path(FIXTURES, s).is_file()]
    assert not missing, f"no golden plan for {missing}: run python -m memlint.extract --regen-golden"


@pytest.mark.parametrize("script", SCRIPTS + CONFIGS, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_fixture_reads_into_its_golden_plan(script: Path):
    with pinned_versions(GOLDEN_VERSIONS):
        plan = extract_file(script).to_json()
    claimed = json.loads(golden_path(FIXTURES, script).read_text(encoding="utf-8"))
    assert list(claimed) == [k for k in PLAN_FIELDS if k in claimed]  # plan fields, in the plan's order
    golden = {k: claimed.get(k, BARE_UNKNOWN) for k in PLAN_FIELDS}  # a field left out is claimed unknown
    diffs = {k: (golden[k], plan[k]) for k in PLAN_FIELDS if golden[k] != plan[k]}
    assert not diffs, "field: (golden, got)\n" + "\n".join(f"{k}: {v}" for k, v in diffs.items())


def test_a_script_that_writes_files_and_calls_input_is_read_without_running(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    asked = []
    monkeypatch.setattr(builtins, "input", lambda *a: asked.append(a) or "y")
    before = set(os.listdir(tmp_path))
    plan = extract_file(FIXTURES / "scripts" / "side_effects.py")
    assert asked == []
    assert set(os.listdir(tmp_path)) == before
    assert not (FIXTURES / "scripts" / "MEMLINT_SIDE_EFFECT.txt").exists()
    # ... and the plan is still read past the input() and the early exit branch
    assert plan.value("model_id") == "facebook/opt-350m"
    assert plan.value("per_device_batch") == 16


def test_a_syntax_error_is_a_note_not_a_crash():
    plan = extract_file(FIXTURES / "scripts" / "broken_syntax.py")
    assert plan.fields == {}
    assert plan.notes and plan.notes[0].startswith("syntax error at line 3")
    assert "never closed" in plan.notes[0]
