"""Iterating a dict gives its keys (`{name: {} for name in SECTIONS}`, `for k in cfg:`), and pathlib's `/` drops "."
parts as pathlib does (`Path(".") / "models"` is "models")."""

from checkouts import write_checkout

from memlint.extract import extract_paths

_LOADER = '''
import dataclasses
import yaml


@dataclasses.dataclass
class Sft:
    batch: int = 1
    model_dir: str = "x"


SECTIONS = {"sft": Sft}


def load(path):
    sections = {name: {} for name in SECTIONS}
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    for name, values in data.items():
        if name in sections and isinstance(values, dict):
            sections[name].update(values)
    return Sft(**sections["sft"])
'''

_TRAIN = '''
from pathlib import Path
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
from loader import load

cfg = load("cfg.yaml")
root = Path(".")
model = AutoModelForCausalLM.from_pretrained(str(root / cfg.model_dir))
Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=cfg.batch)).train()
'''


def test_sections_keyed_by_a_dicts_keys_and_a_pathlib_join(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"loader.py": _LOADER, "train.py": _TRAIN,
                              "cfg.yaml": "sft:\n  batch: 4\n  model_dir: models/base\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert (plan.get("model_id").value, plan.get("per_device_batch").value) == ("models/base", 4)


def test_a_loop_over_a_dict_binds_its_keys(tmp_path, monkeypatch):
    train = '''
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

sizes = {"tiny": 2}
for name in sizes:
    bs = sizes[name]
model = AutoModelForCausalLM.from_pretrained("gpt2")
Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=bs)).train()
'''
    write_checkout(tmp_path, {"train.py": train})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert plan.get("per_device_batch").value == 2


_MATCH = '''
import argparse
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--technique", default="full")
args = p.parse_args()
model = AutoModelForCausalLM.from_pretrained("gpt2")
match args.technique:
    case "full":
        pass
    case "lora" | "qlora":
        model = get_peft_model(model, LoraConfig(r=8))
    case _:
        raise ValueError(args.technique)
Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=2)).train()
'''


def test_match_on_a_known_subject_runs_its_one_case(tmp_path, monkeypatch):
    from checkouts import plan_of_command

    write_checkout(tmp_path, {"train.py": _MATCH})
    assert plan_of_command(tmp_path, monkeypatch, "python", "train.py").get("method").value == "full"
    plan = plan_of_command(tmp_path, monkeypatch, "python", "train.py", "--technique", "qlora")
    assert (plan.get("method").value, plan.get("lora_r").value) == ("lora", 8)
