"""A notebook that names the GPU it runs on only in its text ("Run all on a free Tesla T4 Google Colab instance", as
unsloth's notebooks do): that GPU decides what `dtype=None` and `is_bfloat16_supported()` read, as the Colab
metadata's gpuType does; a text naming several GPUs names none."""

import json

from memlint.extract import extract_paths

_CODE = '''from unsloth import FastLanguageModel, is_bfloat16_supported
from trl import SFTTrainer
from transformers import TrainingArguments

model, tok = FastLanguageModel.from_pretrained("unsloth/llama-3-8b-bnb-4bit", max_seq_length=2048, dtype=None,
                                               load_in_4bit=True)
model = FastLanguageModel.get_peft_model(model, r=16)
args = TrainingArguments(output_dir="o", per_device_train_batch_size=2, fp16=not is_bfloat16_supported(),
                         bf16=is_bfloat16_supported())
SFTTrainer(model=model, tokenizer=tok, args=args, max_seq_length=2048).train()
'''


def _notebook(path, markdown):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": [markdown]},
             {"cell_type": "code", "metadata": {}, "source": [_CODE], "outputs": [], "execution_count": None}]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def test_the_gpu_a_notebooks_text_names_decides_bf16(tmp_path, monkeypatch):
    _notebook(tmp_path / "nb.ipynb", "To run this, press Runtime and Run all on a **free** Tesla T4 Google Colab instance!")
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["nb.ipynb"])
    assert plan.get("torch_dtype").value == "fp16" and plan.get("precision").value == "amp-fp16"
    assert "T4" in plan.get("torch_dtype").chain[-1]


def test_a_text_naming_several_gpus_names_none(tmp_path, monkeypatch):
    _notebook(tmp_path / "nb.ipynb", "Runs on a T4; an A100 is faster.")
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["nb.ipynb"])
    assert plan.get("torch_dtype").value == "auto" and plan.get("precision").value == "amp-bf16"


def test_the_gpu_the_text_says_to_run_on_wins_over_one_it_mentions(tmp_path, monkeypatch):
    _notebook(tmp_path / "nb.ipynb", 'Press "Run all" on a free Tesla T4 Google Colab instance!\n\n'
                                     "News: CodeLlama 34b 2x faster [A100 on Colab](https://example.org)")
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["nb.ipynb"])
    assert plan.get("torch_dtype").value == "fp16"


def test_a_gpu_named_in_a_negation_or_a_malformed_cell_names_none(tmp_path, monkeypatch):
    _notebook(tmp_path / "nb.ipynb", "This notebook does NOT fit on a T4.")
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["nb.ipynb"])
    assert plan.get("torch_dtype").value == "auto"
    nb = tmp_path / "nb.ipynb"
    doc = json.loads(nb.read_text())
    doc["cells"][0]["source"] = ["Run on a free Tesla T4\n", 5]  # a non-string in a markdown cell's source
    nb.write_text(json.dumps(doc))
    (plan,) = extract_paths(["nb.ipynb"])
    assert plan.get("model_id").value == "unsloth/llama-3-8b-bnb-4bit" and plan.get("torch_dtype").value == "fp16"


def test_a_very_long_markdown_line_is_read_in_one_pass(tmp_path, monkeypatch):
    """"run " repeated 24,000 times: the run-on pattern is bounded (a rescan per "run" would never finish this test)."""
    _notebook(tmp_path / "nb.ipynb", "run " * 24000)
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["nb.ipynb"])
    assert plan.get("torch_dtype").value == "auto"
