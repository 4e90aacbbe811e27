"""A framework config names a DeepSpeed file by its path in the framework's own repository (LLaMA-Factory's
examples/deepspeed/ds_z3_offload_config.json, axolotl's deepspeed_configs/zero2.json) and the checkout lacks it: the
file as the framework shipped it when the config was last committed (data/framework_deepspeed.json). A DeepSpeed file
with an optimizer section replaces the framework config's optimizer; one that offloads the optimizer without one
makes accelerate swap in DeepSpeed's CPU Adam."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import git_commit, write_checkout
from memlint.extract import extract_file

_write = partial(write_checkout, dedent=True)

_LF = """
    model_name_or_path: Qwen/Qwen2.5-7B
    stage: sft
    do_train: true
    finetuning_type: full
    deepspeed: {DS}
    dataset: alpaca_en_demo
    template: qwen
    cutoff_len: 2048
    per_device_train_batch_size: 1
    gradient_accumulation_steps: 8
    bf16: true
    optim: adamw_torch
"""

_AX = """
    base_model: mistralai/Mistral-7B-v0.1
    adapter: lora
    lora_r: 16
    lora_target_linear: true
    sequence_len: 4096
    micro_batch_size: 2
    gradient_accumulation_steps: 4
    optimizer: adamw_bnb_8bit
    bf16: auto
    deepspeed: {DS}
    datasets:
      - path: x
        type: alpaca
"""


def _fields(path):
    plan = extract_file(path)
    return {k: plan.get(k).value for k in ("distributed", "offload", "optimizer")}, plan


@pytest.mark.parametrize("ref, want", [
    ("examples/deepspeed/ds_z3_offload_config.json", {"distributed": "zero3", "offload": "params", "optimizer": "deepspeed_adam"}),
    ("examples/deepspeed/ds_z2_offload_config.json", {"distributed": "zero2", "offload": "optimizer", "optimizer": "deepspeed_adam"}),
    ("examples/deepspeed/ds_z3_config.json", {"distributed": "zero3", "offload": "none", "optimizer": "adamw_torch"}),
    ("../LLaMA-Factory/examples/deepspeed/ds_z2_config.json", {"distributed": "zero2", "offload": "none", "optimizer": "adamw_torch"}),
])
def test_llama_factory_shipped_files_are_read_when_the_checkout_lacks_them(tmp_path, ref, want):
    root = _write(tmp_path, {"sft/train.yaml": _LF.replace("{DS}", ref)})
    got, plan = _fields(root / "sft/train.yaml")
    assert got == want
    assert any("is not in this checkout: read as the file llama-factory ships" in n for n in plan.notes)


def test_a_file_of_the_checkout_wins_over_the_shipped_one(tmp_path):
    root = _write(tmp_path, {"train.yaml": _LF.replace("{DS}", "examples/deepspeed/ds_z3_offload_config.json"),
                             "examples/deepspeed/ds_z3_offload_config.json": '{"zero_optimization": {"stage": 2}}'})
    got, _ = _fields(root / "train.yaml")
    assert got == {"distributed": "zero2", "offload": "none", "optimizer": "adamw_torch"}


def test_an_unshipped_name_stays_unknown_with_its_hint(tmp_path):
    root = _write(tmp_path, {"train.yaml": _LF.replace("{DS}", "configs/my_zero3.json")})
    plan = extract_file(root / "train.yaml")
    assert plan.get("distributed").value == "deepspeed"  # ZeRO of an unknown stage
    assert any("the name suggests ZeRO-3" in n for n in plan.notes)


@pytest.mark.parametrize("date, want_opt", [
    ("2023-11-01", "deepspeed_adam"),   # axolotl's deepspeed/zero3.json then had an optimizer section (AdamW)
    ("2024-06-01", "adamw_bnb_8bit"),   # dropped on 2024-01-25: the config's own optimizer runs
])
def test_axolotl_shipped_files_by_the_configs_date(tmp_path, date, want_opt):
    ref = "deepspeed/zero3.json" if date < "2024-01-24" else "deepspeed_configs/zero3.json"
    root = _write(tmp_path, {"cfg/lora.yml": _AX.replace("{DS}", ref)})
    git_commit(root, date)
    got, _ = _fields(root / "cfg/lora.yml")
    assert got == {"distributed": "zero3", "offload": "none", "optimizer": want_opt}


def test_axolotl_before_the_file_existed_is_not_read_as_it(tmp_path):
    root = _write(tmp_path, {"cfg/lora.yml": _AX.replace("{DS}", "deepspeed_configs/zero3_bf16_cpuoffload_all.json")})
    git_commit(root, "2024-02-01")  # shipped from 2024-04-01
    got, _ = _fields(root / "cfg/lora.yml")
    assert got["distributed"] == "deepspeed"


def test_a_checkout_deepspeed_file_with_an_optimizer_section_replaces_the_framework_optimizer(tmp_path):
    root = _write(tmp_path, {"cfg/lora.yml": _AX.replace("{DS}", "cfg/zero3_bf16.json"),
                             "cfg/zero3_bf16.json": '{"zero_optimization": {"stage": 3}, "bf16": {"enabled": true},'
                                                    ' "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}'})
    plan = extract_file(root / "cfg/lora.yml")
    opt = plan.get("optimizer")
    assert opt.value == "deepspeed_adam" and plan.get("distributed").value == "zero3"
    assert any("replaces the config's optimizer 'adamw_bnb_8bit'" in c for c in opt.chain)
