"""libcst is the parser: grammar newer than the running Python parses, syntax errors are findings with
CPython's words and place, and nesting that would crash libcst's native parser is refused first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memlint.extract import extract_source
from memlint.extract.parsed import MAX_BRACKETS, MAX_CHAIN, ParserSyntaxError, parse, source_of

ROOT = Path(__file__).resolve().parent.parent


def test_a_python_3_12_f_string_reads_on_any_python():
    src = ('from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n'
           'model = AutoModelForCausalLM.from_pretrained("gpt2")\n'
           'name = f"{"run"}-{3}"\n'  # PEP 701: the same quotes inside the replacement field
           'args = TrainingArguments(output_dir=name, per_device_train_batch_size=4)\n'
           'Trainer(model=model, args=args).train()\n')
    plan = extract_source(src, "train.py")
    assert plan.get("per_device_batch").value == 4
    assert not any(d.kind == "syntax-error" for d in plan.diagnostics)


def test_positions_are_libcsts_syntactic_ranges():
    src = "x = (\n    foo(1,\n        2)\n)\n"
    p = parse(src)
    call = p.module.body[0].body[0].value
    r = p.pos[call]
    assert (r.start.line, r.start.column, r.end.line, r.end.column) == (2, 4, 3, 10)
    assert source_of(p, call) == "foo(1,\n        2)"


def test_a_syntax_error_is_located_where_cpython_locates_it():
    with pytest.raises(ParserSyntaxError) as err:
        parse("args = dict(a=1\nb = 2\n")
    assert (err.value.raw_line, err.value.raw_column) == (1, 11)
    assert "never closed" in err.value.message


@pytest.mark.parametrize("src", [
    "x = " + "(" * (MAX_BRACKETS + 1) + "1" + ")" * (MAX_BRACKETS + 1) + "\n",
    "x = " + "[" * 5000 + "]" * 5000 + "\n",
    "x = " + "-" * (MAX_CHAIN + 1) + "1\n",
    "x = 1" + " + 1" * (MAX_CHAIN + 1) + "\n",
    "x = " + "lambda: " * (MAX_CHAIN + 1) + "1\n",
    "x = f" + "()" * (MAX_CHAIN + 1) + "\n",
    "if a: pass\n" + "elif a: pass\n" * (MAX_CHAIN + 1),
    "x = " + "(" * 5000 + "\n",  # never closed
])
def test_nesting_past_the_limits_is_a_syntax_error_not_a_crash(src):
    with pytest.raises(ParserSyntaxError) as err:
        parse(src)
    assert "memlint does not parse it" in err.value.message or "never closed" in err.value.message


def test_a_deeply_nested_file_costs_its_own_report_only(tmp_path):
    """libcst's native parser overflows the C stack at a few thousand nested brackets: the whole run would die
    with a segmentation fault. The tokenizer's guard turns it into one file's MEM001."""
    (tmp_path / "deep.py").write_text("import torch\nx = " + "[" * 3000 + "]" * 3000 + "\n")
    (tmp_path / "train.py").write_text((ROOT / "fixtures" / "scripts" / "trl_sft_qlora.py").read_text())
    out = subprocess.run([sys.executable, "-m", "memlint", "check", "deep.py", "train.py", "--no-cache",
                          "--exit-zero"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "deep.py:2:" in out.stdout and "MEM001" in out.stdout
    assert "train.py:" in out.stdout


def test_long_flat_code_is_not_refused():
    rows = ",\n".join(f"    ({i}, 'x{i}')" for i in range(5000))
    p = parse(f"TABLE = [\n{rows}\n]\n" + "@d\n" * 50 + "def f(): pass\n")
    assert len(p.module.body) == 2


def test_positions_are_those_libcsts_metadata_wrapper_gives():
    """parse() runs PositionProvider without MetadataWrapper's extra visit: the same range for every node."""
    import libcst
    from libcst.metadata import MetadataWrapper, PositionProvider

    src = (ROOT / "fixtures" / "scripts" / "run_clm_style.py").read_text(encoding="utf-8")
    fast = parse(src)
    module = libcst.parse_module(src)
    slow = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    assert len(fast.pos) == len(slow) > 1000
    assert [(r.start, r.end) for r in fast.pos.values()] == [(r.start, r.end) for r in slow.values()]
