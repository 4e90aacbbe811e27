"""LoRA written in the checkout (DeepSpeed-Chat's convert_linear_layer_to_lora, copied by Yi and others):
read as a LoraConfig on the linears it converts (library_api.json "checkout_lora")."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from memlint.extract import extract_file
from memlint.extract.launch import parse_command
from memlint.library.versions import pinned_versions

NEWEST = {"transformers": None, "torch": None, "peft": None, "trl": None, "unsloth": None}

LORA_PY = '''\
import torch
from torch import nn


class LinearLayer_LoRA(nn.Module):
    def __init__(self, weight, lora_dim=0, lora_scaling=1, lora_droppout=0, bias=None):
        super().__init__()
        self.weight = weight
        self.lora_right_weight = nn.Parameter(torch.zeros(weight.shape[1], lora_dim))
        self.lora_left_weight = nn.Parameter(torch.zeros(lora_dim, weight.shape[0]))
        self.weight.requires_grad = False


def convert_linear_layer_to_lora(model, part_module_name, lora_dim=0, lora_scaling=1, lora_droppout=0):
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and part_module_name in name:
            setattr(model, name, LinearLayer_LoRA(module.weight, lora_dim, lora_scaling, lora_droppout))
    return model


def only_optimize_lora_parameters(model, force_optimize_params=[]):
    for name, param in model.named_parameters():
        param.requires_grad = "lora_" in name
    return model
'''

MAIN_PY = '''\
import argparse
from transformers import AutoModelForCausalLM
from dschat.utils.module.lora import convert_linear_layer_to_lora, only_optimize_lora_parameters

parser = argparse.ArgumentParser()
parser.add_argument("--model_name_or_path", type=str, default="facebook/opt-1.3b")
parser.add_argument("--lora_dim", type=int, default=0)
parser.add_argument("--lora_module_name", type=str, default="decoder.layers.")
parser.add_argument("--only_optimize_lora", action="store_true")
args = parser.parse_args()

model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
if args.lora_dim > 0:
    model = convert_linear_layer_to_lora(model, args.lora_module_name, args.lora_dim, lora_droppout=0.1)
    if args.only_optimize_lora:
        model = only_optimize_lora_parameters(model)
'''


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / "setup.py").write_text("", encoding="utf-8")
    pkg = tmp_path / "dschat" / "utils" / "module"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "dschat", tmp_path / "dschat" / "utils", pkg):
        (d / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "lora.py").write_text(LORA_PY, encoding="utf-8")
    (tmp_path / "main.py").write_text(MAIN_PY, encoding="utf-8")
    return tmp_path / "main.py"


def plan_of(script: Path, *argv: str):
    with pinned_versions(NEWEST):
        return extract_file(script, launch=parse_command(["python", str(script), *argv]))


def test_the_checkout_helper_is_a_lora_on_the_linears_it_converts(checkout: Path):
    plan = plan_of(checkout, "--lora_dim", "128", "--only_optimize_lora")
    assert plan.get("method").value == "lora" and plan.get("method").line == 14
    assert plan.get("lora_r").value == 128 and plan.get("lora_r").source == "command-line"
    assert plan.get("lora_targets").value == "all-linear"  # "decoder.layers." is every linear in the blocks
    assert plan.get("lora_dropout").value == 0.1
    assert not any("lower bound" in n for n in plan.notes)


def test_without_the_freeze_the_other_parameters_train_and_it_is_said(checkout: Path):
    plan = plan_of(checkout, "--lora_dim", "8", "--lora_module_name", "q_proj")
    assert plan.get("method").value == "lora" and list(plan.get("lora_targets").value) == ["q_proj"]
    assert plan.get("lora_dropout").value == 0.1
    assert any("only_optimize_lora_parameters" in n and "lower bound" in n for n in plan.notes)


def test_lora_dim_zero_is_a_full_fine_tune(checkout: Path):
    assert plan_of(checkout).get("method").value == "full"
