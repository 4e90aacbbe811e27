"""`from m import a` walks only what `a` needs of m (extract/slicing.py), with m's line numbers kept."""

from __future__ import annotations

import textwrap
from pathlib import Path

from memlint.extract import extract_file
from memlint.extract.slicing import needed_source
from memlint.library.versions import pinned_versions

NEWEST = {"transformers": None, "torch": None, "peft": None, "trl": None, "unsloth": None}

UTILS = textwrap.dedent('''\
    import argparse, os
    from transformers import TrainingArguments

    BASE = 4
    UNUSED_TABLE = {i: i * i for i in range(10)}

    def unrelated(x):
        return x + UNUSED_TABLE[1]

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=BASE * 2)
    args, _ = parser.parse_known_args()

    CONFIG = {"model": "Qwen/Qwen2.5-0.5B"}
    CONFIG["max_length"] = 512

    def make_args(out):
        return TrainingArguments(out, per_device_train_batch_size=args.batch)
    a = 1; b = 2
    if __name__ == "__main__":
        unrelated(3)
''')


def test_only_what_the_names_need_is_kept_line_for_line():
    part = needed_source(UTILS, {"make_args"})
    assert part is not None
    assert part.count("\n") == UTILS.count("\n")  # every line is still there
    kept = [n for n, line in enumerate(part.splitlines(), 1) if line.strip()]
    original = UTILS.splitlines()
    for n in kept:
        assert part.splitlines()[n - 1] == original[n - 1]
    text = "\n".join(part.splitlines()[n - 1] for n in kept)
    assert "def make_args" in text and "parser.add_argument" in text and "BASE = 4" in text
    assert "import argparse" in text and "from transformers import TrainingArguments" in text
    assert "def unrelated" not in text and "UNUSED_TABLE" not in text and "__main__" not in text
    assert 'CONFIG["max_length"]' not in text


def test_a_mutation_of_a_needed_name_is_kept():
    part = needed_source(UTILS, {"CONFIG"})
    assert 'CONFIG["max_length"] = 512' in part and "def make_args" not in part


def test_everything_needed_or_unparsable_reads_the_whole_module():
    assert needed_source("A = 1\nB = A\n", {"B"}) is None
    assert needed_source("def f(:\n", {"f"}) is None
    # a line shared by a kept and a dropped statement stays whole
    assert needed_source("a = 1; b = 2\nc = 3\n", {"a"}) == "a = 1; b = 2\n\n"


def test_a_script_reads_a_sliced_sibling_with_its_real_lines(tmp_path: Path):
    (tmp_path / "utils.py").write_text(UTILS, encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent('''\
        from utils import make_args, CONFIG
        from transformers import AutoModelForCausalLM, Trainer
        model = AutoModelForCausalLM.from_pretrained(CONFIG["model"])
        Trainer(model=model, args=make_args("o")).train()
    '''), encoding="utf-8")
    with pinned_versions(NEWEST):
        plan = extract_file(script)
    assert plan.get("model_id").value == "Qwen/Qwen2.5-0.5B"
    batch = plan.get("per_device_batch")
    assert batch.value == 8
    assert batch.span.path.endswith("utils.py") and batch.line == 11


def test_a_second_import_of_more_names_reads_more_of_the_module(tmp_path: Path):
    (tmp_path / "hp.py").write_text("MODEL = 'gpt2'\nBATCH = 3\nOTHER = 1\n", encoding="utf-8")
    (tmp_path / "helpers.py").write_text("from hp import BATCH\nB2 = BATCH * 2\n", encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent('''\
        from helpers import B2
        from hp import MODEL
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained(MODEL)
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=B2)).train()
    '''), encoding="utf-8")
    with pinned_versions(NEWEST):
        plan = extract_file(script)
    assert plan.get("model_id").value == "gpt2" and plan.get("model_id").line == 1
    assert plan.get("per_device_batch").value == 6


def test_a_table_filled_by_calls_at_module_level_keeps_those_calls():
    text = textwrap.dedent('''\
        TEMPLATES = dict()

        def register_template(name, fmt):
            TEMPLATES[name] = fmt

        def unrelated():
            return 1

        register_template("default", "{x}")
        register_template("qwen", "<|im_start|>{x}")
    ''')
    part = needed_source(text, {"TEMPLATES"})
    assert part is not None and 'register_template("qwen"' in part and "def register_template" in part
    assert "def unrelated" not in part
