"""A notebook that builds a framework's config as a dict, dumps it to a file (`yaml.dump(args, f)`,
`json.dump(args, open(NAME, "w"))`) and runs the framework's command on it (`!llamafactory-cli train NAME`): the run
is that config, read from the dict, whatever file of that name the checkout holds or lacks."""

from __future__ import annotations

import pytest

from checkouts import write_notebook
from memlint.extract import extract_paths
from memlint.extract.source import written_configs

_ARGS = [
    "import json, yaml\n",
    "lr = 1e-4\n",
    "args = dict(\n",
    "  stage='sft', do_train=True, model_name_or_path='Qwen/Qwen2.5-0.5B', dataset='alpaca_en_demo',\n",
    "  template='qwen', finetuning_type='lora', lora_target='all', lora_rank=16, output_dir='out',\n",
    "  per_device_train_batch_size=4, gradient_accumulation_steps=2, learning_rate=lr, cutoff_len=1024,\n",
    "  bf16=True, report_to=open('x').read(),\n",  # not a literal: left out
    ")\n",
    "args['per_device_train_batch_size'] = 8\n",
]


@pytest.mark.parametrize("write, run", [
    (["with open('train_qwen.yaml', 'w', encoding='utf-8') as f:\n", "  yaml.dump(args, f, indent=2)\n"],
     "!llamafactory-cli train train_qwen.yaml\n"),
    (["%cd LLaMA-Factory\n", "json.dump(args, open('train_qwen.json', 'w', encoding='utf-8'), indent=2)\n"],
     "!llamafactory-cli train train_qwen.json\n"),
])
def test_a_config_the_notebook_dumps_then_trains_from(tmp_path, monkeypatch, write, run):
    later = ["args = dict(model_name_or_path='other/model', template='qwen')\n",  # a later chat config, other file
             "with open('chat.yaml', 'w') as f:\n", "  yaml.dump(args, f)\n", "!llamafactory-cli chat chat.yaml\n"]
    nb = write_notebook(tmp_path / "tune.ipynb", [*_ARGS, *write, run, *later])
    monkeypatch.chdir(tmp_path)
    plans = [p for p in extract_paths([nb.name]) if p.fields.get("trainer") and p.fields["trainer"].value]
    assert len(plans) == 1
    got = {n: plans[0].fields[n].value for n in ("model_id", "method", "lora_r", "per_device_batch", "grad_accum",
                                                  "max_length", "precision", "trainer")}
    assert got == {"model_id": "Qwen/Qwen2.5-0.5B", "method": "lora", "lora_r": 16, "per_device_batch": 8,
                   "grad_accum": 2, "max_length": 1024, "precision": "amp-bf16", "trainer": "Seq2SeqTrainer"}
    assert plans[0].via.startswith("tune.ipynb:")  # run by the notebook's `!llamafactory-cli train` line


def test_only_literal_values_are_written(tmp_path):
    nb = write_notebook(tmp_path / "n.ipynb", [*_ARGS, "with open('a.yaml', 'w') as f:\n", "  yaml.safe_dump(args, f)\n",
                                               "with open('b.yaml') as f:\n", "  yaml.dump(args, f)\n"])  # read mode
    written = written_configs(nb)
    assert set(written) == {"a.yaml"}
    import json

    doc = json.loads(written["a.yaml"][0])
    assert doc["learning_rate"] == 1e-4 and doc["per_device_train_batch_size"] == 8 and "report_to" not in doc


def test_a_config_written_by_a_writefile_cell_is_read_too(tmp_path, monkeypatch):
    import json

    cells = [["%%writefile train_qwen.yaml\n", "stage: sft\n", "do_train: true\n", "model_name_or_path: Qwen/Qwen2.5-0.5B\n",
              "finetuning_type: lora\n", "per_device_train_batch_size: 4\n", "output_dir: o\n"],
             ["!llamafactory-cli train train_qwen.yaml\n"]]
    doc = {"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
                     for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "tune.ipynb").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    plans = [p for p in extract_paths(["tune.ipynb"]) if p.fields.get("trainer") and p.fields["trainer"].value]
    assert [(p.get("model_id").value, p.get("per_device_batch").value) for p in plans] == [("Qwen/Qwen2.5-0.5B", 4)]
