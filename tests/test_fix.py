"""`--fix` codemods: golden before/after scripts in fixtures/fix, idempotency, untouched formatting,
and the re-extracted plan carrying the fixed value.

Findings are built the way a rule builds them: at the span the extracted plan gives the field.
Regenerate the goldens after an intended change: MEMLINT_REGEN=1 python -m pytest tests/test_fix.py
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.extract import extract_source
from memlint.library.versions import pinned_versions
from memlint.extract.source import transform_lines
from memlint.fix import CODEMOD_NAMES, apply_fixes, effective_fix, unified_diff
from memlint.fix.codemods import CODEMODS, keyword_for
from memlint.plan import Span
from memlint.rules.base import Finding, Fix

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "fix"
REGEN = os.environ.get("MEMLINT_REGEN") == "1"

FIELD = {  # codemod -> the plan field its finding points at, and the value the fix sets
    "dynamic-padding": ("padding", "longest"),
    "group-by-length": ("group_by_length", True),
    "gradient-checkpointing": ("gradient_checkpointing", True),
    "double-quant": ("double_quant", True),
    "nf4-quant-type": ("quant_type", "nf4"),
}

# fixture, codemod, transformers version the keywords are read for, outcome, text the fix title or
# skip reason must contain. Outcomes: "safe" (applied by default), "unsafe" (only with
# --unsafe-fixes), "skip" (never applied; the file stays as it is).
CASES = [
    ("padding_map_collator", "dynamic-padding", None, "safe", "DataCollatorWithPadding pads each batch"),
    ("padding_constant", "dynamic-padding", None, "safe", "`PADDING` at line 5"),
    ("padding_collate_fn", "dynamic-padding", None, "safe", "pad each batch to its longest row"),
    ("padding_seq2seq", "dynamic-padding", None, "safe", "DataCollatorForSeq2Seq pads each batch"),
    ("padding_labels_lm_collator", "dynamic-padding", None, "unsafe", "does not pad the labels"),
    ("padding_default_collator", "dynamic-padding", None, "skip", "default_data_collator"),
    ("gbl_missing_v4", "group-by-length", "4.46.0", "safe", "add group_by_length=True"),
    ("gbl_alias_v5", "group-by-length", "5.2.0", "safe", 'add train_sampling_strategy="group_by_length"'),
    ("gbl_false", "group-by-length", "4.46.0", "safe", "was False"),
    ("gbl_sft_config", "group-by-length", None, "safe", "SFTConfig(...)"),
    ("gbl_spaced_keywords", "group-by-length", "4.46.0", "safe", "add group_by_length=True"),
    ("gbl_sequential", "group-by-length", "5.24.0", "unsafe", "replaces the 'sequential' sampling order"),
    ("gc_false_alias", "gradient-checkpointing", None, "safe", "gradient_checkpointing=True in TrainingArguments"),
    ("gc_missing_no_comma", "gradient-checkpointing", None, "safe", "add gradient_checkpointing=True"),
    ("gc_constant", "gradient-checkpointing", None, "safe", "`GRAD_CKPT` at line 4"),
    ("gc_star_kwargs", "gradient-checkpointing", None, "unsafe", "**kwargs"),
    ("gc_argparse", "gradient-checkpointing", None, "skip", "is set from `bool(a.gc)`, not a literal"),
    ("dq_single_line", "double-quant", None, "safe", "add bnb_4bit_use_double_quant=True"),
    ("dq_false_multiline", "double-quant", None, "safe", "was False"),
    ("dq_aligned", "double-quant", None, "safe", "BitsAndBytesConfig(...)"),
    ("dq_8bit", "double-quant", None, "skip", "does not set load_in_4bit=True"),
    ("nf4_missing", "nf4-quant-type", None, "safe", 'add bnb_4bit_quant_type="nf4"'),
    ("nf4_colab_export", "nf4-quant-type", None, "safe", 'add bnb_4bit_quant_type="nf4"'),
    ("nf4_fp4", "nf4-quant-type", None, "unsafe", "replaces an explicit 'fp4'"),
    ("nf4_bare", "nf4-quant-type", None, "unsafe", "builds a new BitsAndBytesConfig"),
    ("nf4_bare_alias", "nf4-quant-type", None, "unsafe", "quantization_config=tf.BitsAndBytesConfig("),
    ("dq_bare", "double-quant", None, "skip", "apply the nf4-quant-type fix first"),
]
IDS = [c[0] for c in CASES]


def _plan_of(source: str, path: str):
    """The plan as `memlint check` reads a script (`!pip` lines of a Colab export made Python)."""
    return extract_source(transform_lines(source.splitlines(), cells=None), path)


def _finding(source: str, path: str, codemod: str, applicability: str = "safe") -> Finding:
    field, _ = FIELD[codemod]
    plan = _plan_of(source, path)
    span = plan.get(field).span or plan.get("quant_bits").span  # 8-bit: double_quant is not set
    assert span is not None, f"{path}: no span for {field}"
    return Finding("MEM300", codemod, f"{field} could be better", "warning", span,
                   fix=Fix(f"fix {field}", applicability, codemod, {}))


def _versions(version):
    return pinned_versions({"transformers": version}) if version else pinned_versions({})


@pytest.mark.parametrize("name,codemod,version,outcome,words", CASES, ids=IDS)
def test_golden(name, codemod, version, outcome, words):
    before_path = FIXTURES / f"{name}.before.py"
    after_path = FIXTURES / f"{name}.after.py"
    before = before_path.read_text()
    with _versions(version):
        finding = _finding(before, str(before_path), codemod)
        default = apply_fixes(before, [finding])
        forced = apply_fixes(before, [finding], unsafe=True)
        fix = effective_fix(before, finding)
    if outcome == "skip":
        assert fix is None
        assert default.source == before and forced.source == before
        (_, reason), = forced.skipped
        assert words in reason
        assert not after_path.exists()
        return
    assert fix is not None and fix.applicability == outcome and words in fix.title, fix
    if outcome == "unsafe":
        assert default.source == before and not default.applied
        assert "--unsafe-fixes" in default.skipped[0][1]
    else:
        assert default.source == forced.source
    after = forced.source
    assert forced.applied == [finding] and not forced.skipped
    if REGEN:
        after_path.write_text(after)
    assert after == after_path.read_text(), f"{name}: fix changed; MEMLINT_REGEN=1 rewrites {after_path.name}"


@pytest.mark.parametrize("name,codemod,version,outcome,words", [c for c in CASES if c[3] != "skip"],
                         ids=[c[0] for c in CASES if c[3] != "skip"])
def test_fixed_plan_has_the_value_and_fixing_again_changes_nothing(name, codemod, version, outcome, words):
    path = str(FIXTURES / f"{name}.before.py")
    before = (FIXTURES / f"{name}.before.py").read_text()
    after = (FIXTURES / f"{name}.after.py").read_text()
    field, want = FIELD[codemod]
    with _versions(version):
        assert _plan_of(before, path).get(field).value != want
        fixed_plan = _plan_of(after, path)
        assert fixed_plan.get(field).value == want
        # the finding as the first run saw it, and placed where a rule would place it on the
        # fixed file: nothing to do, and at least one of them finds the fix already in
        reasons = []
        for finding in (_finding(before, path, codemod), _finding(after, path, codemod)):
            again = apply_fixes(after, [finding], unsafe=True)
            assert again.source == after and not again.applied
            reasons.append(again.skipped[0][1])
        assert any("already" in r for r in reasons), reasons


@pytest.mark.parametrize("name", [c[0] for c in CASES if c[3] != "skip"])
def test_only_the_fixed_lines_change(name):
    before = (FIXTURES / f"{name}.before.py").read_text().splitlines()
    after = (FIXTURES / f"{name}.after.py").read_text().splitlines()
    ops = [op for op in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes() if op[0] != "equal"]
    # the one import a new BitsAndBytesConfig may need
    ops = [op for op in ops if not (op[0] == "insert" and after[op[3]:op[4]] == ["from transformers import BitsAndBytesConfig"])]
    removed = sum(i2 - i1 for _, i1, i2, _, _ in ops)
    added = sum(j2 - j1 for _, _, _, j1, j2 in ops)
    assert len(ops) == 1 and removed <= 1 and added <= 2, ops
    for tag, i1, i2, j1, j2 in ops:
        for old, new in zip(before[i1:i2], after[j1:j2]):
            # a replaced line keeps its indentation, its code up to the keyword, and its comment
            assert new.startswith(old[: len(old) - len(old.lstrip())])
            assert old.split("=")[0] == new.split("=")[0] or "quantization_config=" in new
            assert old.partition("#")[2] == new.partition("#")[2]
    comments = lambda lines: [c for line in lines for c in re.findall(r"#.*", line)]
    assert comments(before) == comments(after)


def _all_findings(source: str, path: str) -> list[Finding]:
    return [_finding(source, path, c) for c in ("dynamic-padding", "group-by-length", "gradient-checkpointing",
                                                "double-quant", "nf4-quant-type")]


COMBINED = '''import transformers as tf
from datasets import load_dataset
from transformers import BitsAndBytesConfig, DataCollatorWithPadding, Trainer

PAD = "max_length"
tok = tf.AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B")
bnb = BitsAndBytesConfig(
    load_in_4bit=True,
    bnb_4bit_compute_dtype="bfloat16",
)
model = tf.AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B", quantization_config=bnb)


def tokenize(batch):
    return tok(batch["text"], truncation=True, max_length=1024, padding=PAD)


ds = load_dataset("x", split="train").map(tokenize, batched=True)
args = tf.TrainingArguments(
    output_dir="out",
    per_device_train_batch_size=4,  # micro batch
    gradient_checkpointing=False,
)
Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok)).train()
'''


def test_every_fix_in_one_file_goes_in_and_the_plan_shows_them_all():
    with pinned_versions({"transformers": "4.46.0"}):
        findings = _all_findings(COMBINED, "train.py")
        result = apply_fixes(COMBINED, findings)
        assert not result.skipped and len(result.applied) == 5
        plan = extract_source(result.source, "train.py")
        for codemod, (field, want) in FIELD.items():
            assert plan.get(field).value == want, field
        # the same findings in another order give the same text; a second run changes nothing
        assert apply_fixes(COMBINED, findings[::-1]).source == result.source
        assert apply_fixes(result.source, findings).source == result.source
    assert 'PAD = False\n' in result.source
    assert "    bnb_4bit_quant_type=\"nf4\",\n    bnb_4bit_use_double_quant=True,\n)" in result.source
    assert "    gradient_checkpointing=True,\n    group_by_length=True,\n)" in result.source
    assert "per_device_train_batch_size=4,  # micro batch\n" in result.source


def test_group_by_length_keyword_follows_the_transformers_version():
    # transformers#43138 (5.2.0) removed group_by_length for train_sampling_strategy
    with pinned_versions({"transformers": "4.46.3"}):
        assert keyword_for("group-by-length") == ("group_by_length", "True")
    with pinned_versions({"transformers": "5.1.0"}):
        assert keyword_for("group-by-length") == ("group_by_length", "True")
    with pinned_versions({"transformers": "5.2.0"}):
        assert keyword_for("group-by-length") == ("train_sampling_strategy", '"group_by_length"')
    with pinned_versions({"transformers": None}):  # not installed: the newest entry
        assert keyword_for("group-by-length") == ("train_sampling_strategy", '"group_by_length"')


def test_a_rule_that_declares_a_fix_unsafe_is_never_made_safe():
    src = (FIXTURES / "gc_false_alias.before.py").read_text()
    finding = _finding(src, "gc.py", "gradient-checkpointing", applicability="unsafe")
    assert effective_fix(src, finding).applicability == "unsafe"
    assert apply_fixes(src, [finding]).source == src
    assert apply_fixes(src, [finding], unsafe=True).source != src


def test_bad_input_is_skipped_with_a_reason_never_raised():
    good = (FIXTURES / "gc_false_alias.before.py").read_text()
    finding = _finding(good, "gc.py", "gradient-checkpointing")
    broken = good.replace("bf16=True,", "bf16=True,,")
    r = apply_fixes(broken, [finding])
    assert r.source == broken and r.skipped[0][1] == "the file does not parse"
    unknown = Finding("MEM300", "x", "m", "warning", finding.span, fix=Fix("t", "safe", "no-such-codemod"))
    assert "unknown codemod" in apply_fixes(good, [unknown]).skipped[0][1]
    elsewhere = Finding("MEM300", "x", "m", "warning", Span("other.py", 7), fix=finding.fix)
    assert "another file" in apply_fixes(good, [elsewhere], path="gc.py").skipped[0][1]
    two = good + 'eval_args = tf.TrainingArguments(output_dir="eval")\n'
    nowhere = Finding("MEM300", "x", "m", "warning", Span("gc.py", 1), fix=finding.fix)
    assert "the file has 2 of them" in apply_fixes(two, [nowhere]).skipped[0][1]
    plain = Finding("MEM300", "x", "m", "warning", finding.span)
    r = apply_fixes(good, [plain])
    assert r.source == good and not r.skipped and not r.applied


def test_a_constant_used_elsewhere_is_left_alone():
    src = (FIXTURES / "gc_constant.before.py").read_text().replace(
        "Trainer(model=model", "print(GRAD_CKPT)\nTrainer(model=model")
    r = apply_fixes(src, [_finding(src, "gc.py", "gradient-checkpointing")])
    assert r.source == src and "also used at line 9" in r.skipped[0][1]


def test_crlf_files_keep_their_line_endings():
    src = (FIXTURES / "gc_missing_no_comma.before.py").read_text().replace("\n", "\r\n")
    r = apply_fixes(src, [_finding(src, "gc.py", "gradient-checkpointing")])
    assert r.applied and "\n" not in r.source.replace("\r\n", "")
    assert "    bf16=True,  # mixed precision\r\n    gradient_checkpointing=True\r\n)" in r.source


def test_unified_diff():
    before = "a = 1\nb = 2\n"
    assert unified_diff("t.py", before, before) == ""
    d = unified_diff("t.py", before, "a = 1\nb = 3")
    assert d.startswith("--- a/t.py\n+++ b/t.py\n@@")
    assert "-b = 2\n+b = 3\n\\ No newline at end of file\n" in d


def test_codemod_names_and_data_file():
    # "suggestion" (MEM101's) sets several fields at once: tests/test_first_hour.py covers it
    assert set(CODEMOD_NAMES) == set(CODEMODS) == set(FIELD) | {"suggestion"}
    data = json.loads((Path(__file__).resolve().parent.parent / "src/memlint/data/fix_keywords.json").read_text())
    assert set(data["keywords"]) == set(CODEMOD_NAMES) - {"dynamic-padding", "suggestion"}
    assert all(spec.get("ref") and spec["keywords"] for spec in data["suggestion"].values())
    for spec in data["keywords"].values():
        assert spec["entries"] and all(e.get("ref") for e in spec["entries"])
    for package in data["collators"].values():
        assert all(v.get("ref") and isinstance(v["pads_labels"], bool) for v in package.values())


def test_fix_package_imports_no_torch_or_transformers():
    code = ("import sys, memlint.fix, memlint.fix.codemods; "
            "bad = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_finding_at_a_related_line_fixes_the_files_only_arguments_call():
    # the longest-sample rule points at max_length (in the tokenizer call); group_by_length goes
    # into the one TrainingArguments(...) the file has
    src = (FIXTURES / "padding_map_collator.before.py").read_text()
    plan = extract_source(src, "t.py")
    at = plan.get("max_length").span
    assert "max_length=2048" in src.splitlines()[at.line - 1]
    finding = Finding("MEM201", "longest-sample-sets-peak", "m", "warning", at,
                      fix=Fix("add group_by_length=True", "unsafe", "group-by-length"))
    with pinned_versions({"transformers": "4.46.0"}):
        r = apply_fixes(src, [finding], unsafe=True)
        assert extract_source(r.source, "t.py").get("group_by_length").value is True
    assert "per_device_train_batch_size=4, bf16=True, group_by_length=True)" in r.source


def test_data_collator_none_is_the_trainers_default():
    src = (FIXTURES / "padding_constant.before.py").read_text().replace(
        "processing_class=tok,", "processing_class=tok, data_collator=None,")
    fix = effective_fix(src, _finding(src, "p.py", "dynamic-padding"))
    assert fix.applicability == "safe" and "DataCollatorWithPadding" in fix.title


def test_lines_added_above_a_finding_move_it():
    # the nf4 fix (bottom) adds an import at the top and the gradient-checkpointing fix (middle)
    # must still find its own call, not the line above it
    src = (
        "from transformers import AutoModelForCausalLM\n"
        "from transformers import TrainingArguments as TA\n"
        "\n"
        "eval_args = TA('eval', per_device_eval_batch_size=4)\n"
        "args = TA('out', per_device_train_batch_size=2, gradient_checkpointing=False)\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B', load_in_4bit=True)\n"
    )
    gc = Finding("MEM203", "x", "m", "warning", Span("t.py", 5), fix=Fix("t", "safe", "gradient-checkpointing"))
    nf4 = Finding("MEM303", "x", "m", "warning", Span("t.py", 6), fix=Fix("t", "safe", "nf4-quant-type"))
    r = apply_fixes(src, [gc, nf4], unsafe=True)
    assert not r.skipped
    lines = r.source.splitlines()
    assert lines[2] == "from transformers import BitsAndBytesConfig"
    assert lines[4] == "eval_args = TA('eval', per_device_eval_batch_size=4)"
    assert lines[5].endswith("gradient_checkpointing=True)")
    assert 'quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")' in lines[6]


def test_a_collator_memlint_cannot_read_makes_dropping_padding_unsafe():
    src = (FIXTURES / "padding_map_collator.before.py").read_text()
    custom = src.replace("data_collator=DataCollatorWithPadding(tokenizer),", "data_collator=my_collate,").replace(
        "def tokenize(batch):", "def my_collate(rows):\n    return rows\n\n\ndef tokenize(batch):")
    finding = _finding(custom, "c.py", "dynamic-padding")
    fix = effective_fix(custom, finding)
    assert fix.applicability == "unsafe" and "the custom collator my_collate()" in fix.title
    assert apply_fixes(custom, [finding]).source == custom
    assert 'padding=False,  # fixed shapes' in apply_fixes(custom, [finding], unsafe=True).source


def test_padding_strategy_enum_is_max_length_too():
    src = (FIXTURES / "padding_map_collator.before.py").read_text()
    enum = src.replace('padding="max_length",', "padding=PaddingStrategy.MAX_LENGTH,").replace(
        "from datasets import load_dataset", "from datasets import load_dataset\nfrom transformers.utils import PaddingStrategy")
    line = next(i for i, t in enumerate(enum.splitlines(), 1) if "PaddingStrategy.MAX_LENGTH," in t)
    finding = Finding("MEM201", "x", "m", "warning", Span("e.py", line), fix=Fix("t", "safe", "dynamic-padding"))
    r = apply_fixes(enum, [finding])
    assert r.applied and "padding=False,  # fixed shapes" in r.source


def _apply_reported_edits(source: str, edits) -> str:
    """Apply (row, col, end_row, end_col, content) edits as a JSON consumer (an editor) would."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", source)]
    out = source
    for sr, sc, er, ec, text in sorted(edits, reverse=True):
        a, b = starts[sr - 1] + sc - 1, starts[er - 1] + ec - 1
        out = out[:a] + text + out[b:]
    return out


@pytest.mark.parametrize("name,codemod,version,outcome,words", [c for c in CASES if c[3] != "skip"],
                         ids=[c[0] for c in CASES if c[3] != "skip"])
def test_reported_edits_are_the_fix(name, codemod, version, outcome, words):
    """The edits `--output-format json` reports (Ruff's fix.edits) give the file --fix writes."""
    before = (FIXTURES / f"{name}.before.py").read_text()
    with _versions(version):
        finding = _finding(before, str(FIXTURES / f"{name}.before.py"), codemod)
        fix = effective_fix(before, finding)
    assert fix is not None and fix.edits
    assert _apply_reported_edits(before, fix.edits) == (FIXTURES / f"{name}.after.py").read_text()


def test_json_output_carries_ruff_style_edits(capsys):
    from memlint.cli import main

    script = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "aliases.py"
    rc = main(["check", str(script), "--gpu", "RTX4090", "--output-format", "json", "--exit-zero"])
    assert rc == 0
    fixed = [f for f in json.loads(capsys.readouterr().out) if f["fix"]]
    assert fixed
    source = script.read_text()
    for f in fixed:
        edits = f["fix"]["edits"]
        assert edits and all(set(e) == {"content", "location", "end_location"} for e in edits)
        rows = [(e["location"]["row"], e["location"]["column"], e["end_location"]["row"],
                 e["end_location"]["column"], e["content"]) for e in edits]
        assert _apply_reported_edits(source, rows) != source
