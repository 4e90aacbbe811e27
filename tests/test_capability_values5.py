"""Values read as Python runs them: a try body whose handlers catch only a failed import of a package every run has
(its other statements are what runs); getattr(torch, NAME) is truthy; Path(__file__).resolve().parents[N] on sys.path;
LLaMA-Factory's `stage: orpo` (0.6-0.7) is ORPO's trainer."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkouts import field_values, write_checkout
from memlint.extract import extract_targets
from memlint.extract.launch import command_target


def _plan(tmp_path, monkeypatch, files: dict[str, str], script: str = "train.py"):
    write_checkout(tmp_path, files, dedent=True, git=True)
    monkeypatch.chdir(tmp_path)
    return extract_targets([command_target(["python", script])])[0]


@pytest.mark.parametrize("body, want", [
    ("import torch\n    use_fp16 = True", "amp-fp16"),  # the import cannot fail: the body's value
    ("import flash_attn\n    use_fp16 = True", None),  # a package a run may lack: either may run
])
def test_an_import_guard_keeps_the_body_value(tmp_path, monkeypatch, body, want):
    plan = _plan(tmp_path, monkeypatch, {"train.py": f"""
from transformers import AutoModelForCausalLM, TrainingArguments, Trainer
model = AutoModelForCausalLM.from_pretrained("gpt2")
use_fp16 = False
try:
    {body}
except ImportError:
    use_fp16 = False
Trainer(model=model, args=TrainingArguments(output_dir="o", fp16=use_fp16)).train()
"""})
    prec = plan.fields["precision"]
    assert (prec.value if not prec.candidates else None) == want


def test_getattr_of_a_dtype_name_is_truthy(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {"train.py": """
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
storage = getattr(torch, "bfloat16")
dtype = storage if storage else torch.float32
model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=dtype)
Trainer(model=model, args=TrainingArguments(output_dir="o")).train()
"""})
    assert plan.fields["torch_dtype"].value == "bf16"


def test_sys_path_from_path_parents(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {
        "scripts/train.py": """
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from pkg.helpers import load_model
from transformers import TrainingArguments, Trainer
model = load_model("Qwen/Qwen2.5-0.5B-Instruct")
Trainer(model=model, args=TrainingArguments(output_dir="o")).train()
""",
        "lib/pkg/__init__.py": "",
        "lib/pkg/helpers.py": """
def load_model(name):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    return AutoModelForCausalLM.from_pretrained(name, quantization_config=BitsAndBytesConfig(load_in_4bit=True))
"""}, "scripts/train.py")
    assert field_values(plan, "model_id", "quant_bits") == {"model_id": "Qwen/Qwen2.5-0.5B-Instruct", "quant_bits": 4}


def test_llamafactory_stage_orpo(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {"orpo.yaml": """
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
stage: orpo
do_train: true
finetuning_type: lora
dataset: dpo_mix_en
template: llama3
cutoff_len: 1024
output_dir: saves/x
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
"""}, "orpo.yaml")
    assert plan.fields["trainer"].value == "ORPOTrainer"


@pytest.mark.parametrize("launch, want", [(["python", "train.py"], None), (["torchrun", "--nproc_per_node", "2", "train.py"], 2)])
def test_a_launcher_variable_is_unset_under_plain_python(tmp_path, monkeypatch, launch, want):
    write_checkout(tmp_path, {"train.py": """
import os
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
device_map = "auto"
if os.environ.get("LOCAL_RANK") is not None:
    device_map = {"": int(os.environ["LOCAL_RANK"])}
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B", device_map=device_map)
Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=1)).train()
"""}, dedent=True, git=True)
    monkeypatch.chdir(tmp_path)
    plan = extract_targets([command_target(launch)])[0]
    assert plan.fields["num_gpus"].value == want
    if want is None:  # device_map="auto" in one process: every visible GPU
        assert dict(plan.fields["num_gpus"].shape).get("gpus") == "all-visible"


def test_one_line_bodies_run(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {"train.py": """
import yaml
from transformers import AutoModelForCausalLM, TrainingArguments, Trainer
class Cfg:
    def __init__(self, raw): self.raw = raw
    def section(self, name): return self.raw.get(name, {})
class Names: base = "gpt2"
cfg = Cfg(yaml.safe_load(open("exp.yaml")))
tr = cfg.section("training")
bs = 2
if tr: bs = int(tr.get("per_device_train_batch_size", 2))
model = AutoModelForCausalLM.from_pretrained(cfg.section("model").get("name", Names.base))
Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=bs)).train()
""", "exp.yaml": "model:\n  name: Qwen/Qwen2.5-0.5B\ntraining:\n  per_device_train_batch_size: 8\n"})
    assert field_values(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 8}


@pytest.mark.parametrize("completion, want", [
    ("max_seq_length - max_prompt_length", 768),  # the budget left after a prompt length the data decides
    ("max_seq_length - 100", None),  # the prompt's own length is still the data's
])
def test_a_completion_budget_left_from_a_total(tmp_path, monkeypatch, completion, want):
    plan = _plan(tmp_path, monkeypatch, {"train.py": f"""
from datasets import load_dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer
max_seq_length = 768
ds = load_dataset("trl-lib/tldr", split="train")
longest = max(len(x) for x in ds["prompt"])
max_prompt_length = longest + 1
max_completion_length = {completion}
args = GRPOConfig(output_dir="o", per_device_train_batch_size=4, num_generations=4,
                  max_prompt_length=max_prompt_length, max_completion_length=max_completion_length)
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
GRPOTrainer(model=model, reward_funcs=[], args=args, train_dataset=ds).train()
"""})
    assert plan.fields["max_length"].value == want


def test_copies_keep_their_values_and_leave_the_original(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {"train.py": """
import copy
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
base = {"model": {"id": "gpt2"}, "train": {"bs": 4, "acc": 2}}
cfg = copy.deepcopy(dict(base))
cfg["train"]["acc"] = 8
shallow = copy.copy(base)
model = AutoModelForCausalLM.from_pretrained(cfg["model"]["id"])
args = TrainingArguments("o", per_device_train_batch_size=shallow["train"]["bs"], gradient_accumulation_steps=base["train"]["acc"])
Trainer(model=model, args=args).train()
"""})
    assert field_values(plan, "model_id", "per_device_batch", "grad_accum") == {
        "model_id": "gpt2", "per_device_batch": 4, "grad_accum": 2}  # the deep copy's write leaves base's 2


def test_a_yaml_parser_in_any_imported_sibling_is_found_every_run(tmp_path):
    """Which sibling modules are read must not depend on set order (PYTHONHASHSEED): the same answer every run."""
    import os
    import subprocess
    import sys

    names = [f"mod{i:02d}" for i in range(30)]
    files = {f"{n}.py": "X = 1\n" for n in names}
    files["mod24.py"] = "def parse(p):\n    return p.parse_yaml_file('cfg.yaml')\n"
    files["train.py"] = "".join(f"import {n}\n" for n in names)
    write_checkout(tmp_path, files)
    code = ("import sys; from pathlib import Path; from memlint.extract.launch import _parses_yaml_itself; "
            f"print(_parses_yaml_itself(Path({str(tmp_path / 'train.py')!r})))")
    src = str(Path(__file__).resolve().parents[1] / "src")
    got = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": src}).stdout.strip()
           for seed in range(6)}
    assert got == {"True"}


def test_a_notebook_shell_command_continued_and_expanded(tmp_path, monkeypatch):
    import json

    cells = [["BATCH = 16\n", "MODEL = 'Qwen/Qwen2.5-0.5B'\n"],
             ["!python /content/drive/MyDrive/proj/train.py \\\n", "    --model {MODEL} \\\n", "    --batch_size $BATCH\n"]]
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    write_checkout(tmp_path, {"run.ipynb": json.dumps(nb), "train.py": """
import argparse
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
p = argparse.ArgumentParser()
p.add_argument("--model")
p.add_argument("--batch_size", type=int, default=1)
a = p.parse_args()
model = AutoModelForCausalLM.from_pretrained(a.model)
Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=a.batch_size)).train()
"""}, git=True)
    monkeypatch.chdir(tmp_path)
    from memlint.extract import extract_paths

    launched = [p for p in extract_paths(["run.ipynb"]) if p.path.endswith("train.py")]
    assert launched and field_values(launched[0], "model_id", "per_device_batch") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 16}


def test_a_path_made_absolute_against_the_project_root_is_read(tmp_path, monkeypatch):
    """`path if path.is_absolute() else ROOT / path` (a project_path helper) then `.open()`: the checkout's config."""
    from checkouts import plan_of_command, write_checkout

    script = """
        import yaml
        from pathlib import Path
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        ROOT = Path(__file__).resolve().parents[1]
        def project_path(value):
            path = Path(value).expanduser()
            return path if path.is_absolute() else ROOT / path
        with project_path("configs/c.yaml").open(encoding="utf-8") as h:
            cfg = yaml.safe_load(h)
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=cfg["bs"])).train()
    """
    root = write_checkout(tmp_path, {"src/train.py": script, "src/__init__.py": "", "configs/c.yaml": "bs: 3\n"},
                          dedent=True)
    assert plan_of_command(root, monkeypatch, "python", "-m", "src.train").value("per_device_batch") == 3
