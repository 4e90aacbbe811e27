"""verl's PPO/GRPO trainer run as a module with Hydra overrides over its packaged ppo_trainer.yaml (Ray workers, the
framework not in the checkout): the actor's micro-batch, the accumulation over the data-parallel ranks the config's
trainer.n_gpus_per_node × nnodes make, the prompt + response length, unpadded rows, and the defaults by verl's
version (data/frameworks.json "verl-ppo")."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_RUN = """
    python3 -m verl.trainer.main_ppo \\
        algorithm.adv_estimator=grpo \\
        data.max_prompt_length=512 data.max_response_length=1024 \\
        actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct \\
        actor_rollout_ref.actor.ppo_mini_batch_size=256 \\
        actor_rollout_ref.rollout.n=5 \\
        {extra}
"""


def _plan(tmp_path, monkeypatch, extra: str, requirements: str = ""):
    files = {"run.sh": _RUN.format(extra=extra)}
    if requirements:
        files["requirements.txt"] = requirements
    return _command(_write(tmp_path, files), monkeypatch, "bash", "run.sh")


def test_grpo_under_the_packaged_defaults(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 "
                                        "actor_rollout_ref.model.use_remove_padding=True trainer.n_gpus_per_node=8")
    assert _get(plan, "model_id", "per_device_batch", "grad_accum", "max_length", "padding", "num_gpus", "distributed",
                "precision", "torch_dtype", "trainer") == {
        "model_id": "Qwen/Qwen2.5-3B-Instruct", "per_device_batch": 16, "grad_accum": 10,  # 256 × 5 / 8 / 16
        "max_length": 1536, "padding": "packing", "num_gpus": 8, "distributed": "fsdp", "precision": "amp-bf16",
        "torch_dtype": "fp32", "trainer": "verl"}


@pytest.mark.parametrize("extra, batch, accum", [
    ("actor_rollout_ref.actor.ppo_micro_batch_size=64 trainer.n_gpus_per_node=4 trainer.nnodes=2", 8, 20),  # global
    ("actor_rollout_ref.actor.use_dynamic_bsz=True trainer.n_gpus_per_node=8", None, None),  # a token budget
])
def test_the_micro_batch_forms(tmp_path, monkeypatch, extra, batch, accum):
    plan = _plan(tmp_path, monkeypatch, extra)
    assert (plan.get("per_device_batch").value, plan.get("grad_accum").value) == (batch, accum)


@pytest.mark.parametrize("verl, checkpointing", [("0.1", False), ("0.4.1", True)])
def test_recompute_defaults_by_verls_version(tmp_path, monkeypatch, verl, checkpointing):
    plan = _plan(tmp_path, monkeypatch, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", f"verl=={verl}\n")
    assert plan.get("gradient_checkpointing").value is checkpointing
    assert plan.get("padding").value == "max_length"  # use_remove_padding off by default before v0.7


def test_a_lora_rank_makes_it_lora(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "actor_rollout_ref.model.lora_rank=32 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4")
    assert _get(plan, "method", "lora_r") == {"method": "lora", "lora_r": 32}
