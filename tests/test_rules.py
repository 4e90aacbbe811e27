"""Every rule: identity and docs by policy, and its own VALID/INVALID samples (Fixit-style)."""

from __future__ import annotations

import pytest

from memlint.check import check_source
from memlint.config import Settings
from memlint.rules.base import CATEGORIES, CODE_RE, DOC_SECTIONS, NAME_RE, SEVERITIES
from memlint.rules.registry import all_rules, select

RULES = all_rules()


def test_codes_are_unique_named_documented_and_numbered_by_category():
    codes = [r.code for r in RULES]
    names = [r.name for r in RULES]
    assert len(set(codes)) == len(codes)
    assert len(set(names)) == len(names)
    for r in RULES:
        assert CODE_RE.match(r.code), r.code
        assert NAME_RE.match(r.name), r.name
        assert r.severity in SEVERITIES
        assert r.category() in CATEGORIES
        assert r.summary and len(r.summary) < 100, r.code
        doc = r.doc()
        for section in DOC_SECTIONS:
            assert section in doc, f"{r.code}: docstring lacks {section!r}"
        if r.options:
            assert "## Options" in doc, f"{r.code}: options are not documented"
        # every rule says when it fires and what that means for the fit (issue #16)
        assert "## When it fires" in doc, f"{r.code}: no 'When it fires' section"
        if r.advice:
            assert r.severity == "warning" and "note" in doc.split("## When it fires")[1], r.code
        # category policy: notes never fail a run; 4xx are off by default; the rest on
        if r.category() == 0:  # but a misspelt framework key: the run trains something else (issue #30)
            assert r.severity == ("warning" if r.code == "MEM004" else "note"), r.code
        assert r.default_enabled == (r.category() != 4), r.code


def test_every_rule_has_samples_except_config_only_ones():
    for r in RULES:
        if r.code in ("MEM004", "MEM005"):  # exercised by the config fixtures (YAML)
            continue
        assert r.VALID and r.INVALID, r.code


def _sample_params(kind: str):
    return [pytest.param(r, i, id=f"{r.code}-{kind}-{i}") for r in RULES for i, _ in enumerate(getattr(r, kind))]


def _run(rule, sample):
    settings = Settings(rule_options={rule.code: dict(sample.options)} if sample.options else {})
    res = check_source(sample.source, "sample.py", settings=settings, gpu=sample.gpu, assume=sample.assume, rules=[rule])
    return res, [f for f in res.findings if f.code == rule.code]


@pytest.mark.parametrize("rule,i", _sample_params("VALID"))
def test_valid_sample_is_silent(rule, i):
    res, hits = _run(rule, rule.VALID[i])
    assert hits == [], [f.message for f in hits]


@pytest.mark.parametrize("rule,i", _sample_params("INVALID"))
def test_invalid_sample_fires_at_the_line_that_sets_the_value(rule, i):
    sample = rule.INVALID[i]
    res, hits = _run(rule, sample)
    assert hits, f"{rule.code} did not fire (model error: {res.context.model_error})"
    f = hits[0]
    assert f.severity == (sample.severity or rule.severity) and f.name == rule.name
    assert 1 <= f.span.line <= len(res.lines) and f.span.col >= 1
    if sample.at is not None:
        assert sample.at in res.lines[f.span.line - 1], (f.span, res.lines[f.span.line - 1])
    if rule.fix is not None and f.fix is not None:
        assert f.fix.codemod == rule.fix.codemod


def test_default_selection_leaves_heuristics_off_and_all_turns_them_on():
    default = {r.code for r in select(None)}
    assert "MEM401" not in default and "MEM101" in default
    assert {r.code for r in select(["ALL"])} == {r.code for r in RULES}
    assert {r.code for r in select(None, extend=["MEM4"])} >= {"MEM401", "MEM402"}


def test_most_specific_selector_wins_as_in_ruff():
    chosen = {r.code for r in select(["MEM2"], ignore=["MEM20"])}
    assert chosen == set()
    chosen = {r.code for r in select(["MEM203"], ignore=["MEM2"])}
    assert chosen == {"MEM203"}
    chosen = {r.code for r in select(["ALL"], ignore=["MEM1", "MEM0", "MEM3", "MEM4"])}
    assert chosen == {r.code for r in RULES if r.code.startswith("MEM2")}


def test_capacity_rules_stay_silent_without_a_gpu_or_with_an_unknown_value():
    from memlint.rules.samples import script

    src = script(batch=8, recompute=False)
    assert not [f for f in check_source(src, "s.py").findings if f.code.startswith("MEM1")]
    unknown = src.replace("per_device_train_batch_size=8", "per_device_train_batch_size=int(input())")
    codes = [f.code for f in check_source(unknown, "s.py", gpu="RTX4090").findings]
    assert "MEM003" in codes and not [c for c in codes if c.startswith("MEM1")]


def test_exceeds_gpu_says_by_how_much_and_names_the_cheapest_change_that_fits():
    from memlint.estimate import estimate
    from memlint.gpu import find_gpu
    from memlint.rules.samples import script

    res = check_source(script(batch=8, recompute=False), "s.py", gpu="RTX4090")
    [f] = [f for f in res.findings if f.code == "MEM101"]
    gpu = find_gpu("RTX4090")
    setup = res.context.setup
    assert f.data["peak_bytes"] == estimate(setup, "real").peak
    assert f"by {(f.data['peak_bytes'] - gpu.total) / (1 << 30):.1f} GiB" in f.message
    # the cheapest change is named with its line, and re-estimated it fits with the headroom
    suggestion = f.data["suggestion"]
    assert "fits with " in f.message and " at s.py:" in f.message
    again = check_source(script(batch=8, recompute=False), "s.py", gpu="RTX4090", assume=tuple(suggestion["assume"]))
    assert again.context.estimate.peak == suggestion["peak_bytes"] <= 0.9 * gpu.total
    assert not [x for x in again.findings if x.code in ("MEM101", "MEM102")]
    # levers already on are never suggested; the help ranks the others by what they save
    assert "gradient checkpointing" in f.hint and f.hint.startswith("levers by what each saves here: ")
    on = check_source(script(batch=8, recompute=True), "s.py", gpu="RTX4090")
    for x in on.findings:
        if x.code == "MEM101":
            assert "gradient_checkpointing" not in x.message and "gradient checkpointing" not in (x.hint or "")
    assert {r.label for r in f.related} >= {"max_length set here", "model set here"}


def test_sharded_run_without_a_gpu_count_is_a_note_not_a_capacity_finding():
    path = "fixtures/scripts/deepspeed_zero3.py"
    src = open(path, encoding="utf-8").read()
    codes = [f.code for f in check_source(src, path, gpu="H100").findings]
    assert "MEM003" in codes and "MEM101" not in codes
    # the DeepSpeed JSON it names cannot be found from elsewhere: the stage is unknown too
    away = check_source(src, "elsewhere/ds.py", gpu="H100", gpus=8)
    assert [f for f in away.findings if f.code == "MEM003" and "distributed" in f.message]
    per_rank = check_source(src, path, gpu="H100", gpus=8)
    assert per_rank.context.estimate is not None and per_rank.context.setup.gpus == 8


def test_longest_sample_rule_reproduces_the_step_213_scaling():
    """Seed article: 4 samples padded from ~1024 to 8192 tokens: 8x the activations."""
    from memlint.rules.samples import script

    src = script(batch=4, max_length=8192, lora="r=16, target_modules='all-linear'")
    [f] = [f for f in check_source(src, "s.py").findings if f.code == "MEM202"]
    ratio = f.data["worst_bytes"] / f.data["typical_bytes"]
    assert 7.5 <= ratio <= 8.5, ratio


def test_a_findings_figures_are_the_estimate_tables():
    """One number everywhere: what a finding quotes of the estimate is the table's figure."""
    from pathlib import Path

    from memlint.check import check_paths
    from memlint.vocab import size_text

    root = Path(__file__).resolve().parent.parent
    seen = set()
    for r in check_paths([str(root / "fixtures" / "scripts"), str(root / "fixtures" / "configs")], Settings(),
                         gpu="RTX4090"):
        est = r.context.estimate
        for f in r.findings:
            if "logits_bytes" in f.data:
                assert f.data["logits_bytes"] == est.bytes("logits")
                assert f": {size_text(est.bytes('logits'))} of the {size_text(est.peak)} peak" in f.message
                seen.add(f.code)
            if f.code in ("MEM101", "MEM102"):
                assert f.data["peak_bytes"] == est.peak and f"peak {size_text(est.peak)}" in f.message
                seen.add(f.code)
    assert {"MEM101", "MEM205"} <= seen
