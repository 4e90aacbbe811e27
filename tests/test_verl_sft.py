"""verl's FSDP SFT trainer run as a module with Hydra overrides over its packaged sft_trainer.yaml, the framework not
being in the checkout: its defaults (data/frameworks.json "verl-sft") under the command's key=value words, and the
accumulation over the data-parallel ranks the launcher starts."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_RUN = """
    torchrun --standalone --nnodes=1 --nproc_per_node={gpus} \\
        -m verl.trainer.fsdp_sft_trainer \\
        model.partial_pretrain=Qwen/Qwen2.5-7B-Instruct \\
        data.train_files=train.parquet \\
        {extra}
"""


def _plan(tmp_path, monkeypatch, gpus: int, extra: str):
    root = _write(tmp_path, {"run.sh": _RUN.format(gpus=gpus, extra=extra)})
    return _command(root, monkeypatch, "bash", "run.sh")


def test_the_packaged_defaults_under_the_overrides(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, 8, "data.max_length=4096 trainer.total_epochs=2")
    assert _get(plan, "model_id", "method", "torch_dtype", "per_device_batch", "max_length", "padding", "precision",
                "optimizer", "attn_implementation", "distributed", "num_gpus", "trainer") == {
        "model_id": "Qwen/Qwen2.5-7B-Instruct", "method": "full", "torch_dtype": "fp32", "per_device_batch": 4,
        "max_length": 4096, "padding": "max_length", "precision": "amp-bf16", "optimizer": "adamw_torch",
        "attn_implementation": "flash_attention_2", "distributed": "fsdp", "num_gpus": 8, "trainer": "verl"}
    assert plan.get("grad_accum").value == 256 // 8 // 4  # the global batch over 8 data-parallel ranks


@pytest.mark.parametrize("gpus, sp, micro, total, accum", [(4, 2, 1, 32, 16), (4, 1, 2, 64, 8), (2, 2, 1, 8, 8)])
def test_the_global_batch_is_split_over_the_data_parallel_ranks(tmp_path, monkeypatch, gpus, sp, micro, total, accum):
    plan = _plan(tmp_path, monkeypatch, gpus, f"ulysses_sequence_parallel_size={sp} data.micro_batch_size_per_gpu={micro} "
                                              f"data.train_batch_size={total}")
    assert plan.get("grad_accum").value == accum


def test_a_lora_rank_makes_it_lora(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, 2, "model.lora_rank=32 model.enable_gradient_checkpointing=True")
    assert _get(plan, "method", "lora_r", "lora_alpha", "gradient_checkpointing") == {
        "method": "lora", "lora_r": 32, "lora_alpha": 16, "gradient_checkpointing": True}
