"""What `accelerate launch`'s own flags do to a Trainer script: --mixed_precision reaches a Trainer whose training
arguments set neither fp16 nor bf16 (TrainingArguments.__post_init__ keeps ACCELERATE_MIXED_PRECISION), and DeepSpeed
flags without --use_deepspeed are ignored (accelerate's _validate_launch_command)."""

from __future__ import annotations

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
