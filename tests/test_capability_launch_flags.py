"""What `accelerate launch`'s own flags do to a Trainer script: --mixed_precision reaches a Trainer whose training
arguments set neither fp16 nor bf16 (TrainingArguments.__post_init__ keeps ACCELERATE_MIXED_PRECISION), and DeepSpeed
flags without --use_deepspeed are ignored (accelerate's _validate_launch_command)."""

from __future__ import annotations

import pytest

from checkouts import field_values, plan_of_command, write_checkout

TRAIN = """
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("gpt2")
Trainer(model=model, args=TrainingArguments("out", per_device_train_batch_size=2{extra}), train_dataset=None).train()
"""
DS = '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}'


def _plan(tmp_path, monkeypatch, command: str, extra: str = ""):
    root = write_checkout(tmp_path, {"train.py": TRAIN.format(extra=extra), "ds.json": DS,
                                     "run.sh": command + "\n"}, dedent=True, git=True)
    return plan_of_command(root, monkeypatch, "bash", "run.sh")


def test_launcher_mixed_precision_reaches_a_trainer_that_sets_none(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "accelerate launch --num_processes 2 --mixed_precision bf16 train.py")
    assert field_values(plan, "precision", "num_gpus") == {"precision": "amp-bf16", "num_gpus": 2}
    assert "neither fp16 nor bf16" in plan.fields["precision"].chain[0]


def test_the_training_arguments_own_precision_wins_over_the_launcher(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "accelerate launch --num_processes 2 --mixed_precision bf16 train.py",
                 extra=", fp16=True")
    assert plan.fields["precision"].value == "amp-fp16"


def test_deepspeed_config_file_without_use_deepspeed_is_ignored(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "accelerate launch --mixed_precision bf16 --deepspeed_config_file ds.json train.py")
    assert plan.fields["distributed"].value == "none"
    assert "without --use_deepspeed" in plan.fields["distributed"].chain[0]


def test_deepspeed_config_file_with_use_deepspeed_is_read(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch,
                 "accelerate launch --use_deepspeed --num_processes 2 --deepspeed_config_file ds.json train.py")
    assert plan.fields["distributed"].value == "zero2"


LOOP = """
import torch
from accelerate import Accelerator
from accelerate.utils import DummyOptim, DummyScheduler
from transformers import AutoModelForCausalLM
accelerator = Accelerator(gradient_accumulation_steps=4, mixed_precision="bf16")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", torch_dtype=torch.bfloat16)
loader = torch.utils.data.DataLoader(torch.randint(0, 1000, (64, 512)), batch_size=2)
optim = {optimizer}(model.parameters(), lr=2e-5)
model, optim, loader = accelerator.prepare(model, optim, loader)
for batch in loader:
    with accelerator.accumulate(model):
        loss = model(input_ids=batch, labels=batch).loss
        accelerator.backward(loss); optim.step(); optim.zero_grad()
"""
ACCELERATE_DS = """
compute_environment: LOCAL_MACHINE
deepspeed_config:
  deepspeed_config_file: ds.json
distributed_type: DEEPSPEED
num_machines: 1
num_processes: 2
"""


@pytest.mark.parametrize("section, optimizer, want", [
    (', "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}', "DummyOptim", "deepspeed_adam"),
    ("", "torch.optim.AdamW", "deepspeed_adam"),  # no section, optimizer offloaded: accelerate swaps in CPU Adam
])
def test_an_accelerate_deepspeed_optimizer_section_builds_the_loop_optimizer(tmp_path, monkeypatch, section, optimizer, want):
    ds = '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}' + section + '}'
    root = write_checkout(tmp_path, {"train.py": LOOP.format(optimizer=optimizer), "ds.json": ds, "ds.yaml": ACCELERATE_DS,
                                     "run.sh": "accelerate launch --config_file ds.yaml train.py\n"}, dedent=True, git=True)
    plan = plan_of_command(root, monkeypatch, "bash", "run.sh")
    assert field_values(plan, "optimizer", "distributed") == {"optimizer": want, "distributed": "zero3"}


def test_deepspeed_flags_beside_use_fsdp_leave_fsdp(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "accelerate launch --use_fsdp --num_processes 2 --zero_stage 3 train.py")
    assert plan.fields["distributed"].value == "fsdp"


def test_launcher_mixed_precision_reaches_a_trainer_whose_flags_are_false(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "accelerate launch --num_processes 2 --mixed_precision bf16 train.py",
                 extra=", bf16=False, fp16=False")
    assert plan.fields["precision"].value == "amp-bf16"


def test_a_client_optimizer_beside_an_optimizer_section_is_kept_and_said(tmp_path, monkeypatch):
    ds = '{"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}'
    root = write_checkout(tmp_path, {"train.py": LOOP.format(optimizer="torch.optim.SGD"), "ds.json": ds,
                                     "ds.yaml": ACCELERATE_DS, "run.sh": "accelerate launch --config_file ds.yaml train.py\n"},
                          dedent=True, git=True)
    plan = plan_of_command(root, monkeypatch, "bash", "run.sh")
    assert plan.fields["optimizer"].value == "sgd"
    assert any("refuses both" in n for n in plan.notes)
