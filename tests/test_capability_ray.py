"""Ray Train: TorchTrainer(train_loop_per_worker, train_loop_config=cfg, scaling_config=ScalingConfig(num_workers=N,
use_gpu=True)).fit() runs the function with the config on N GPU workers (CPU workers without use_gpu=True; Ray 2.x's
TransformersTrainer trains the Trainer its init function returns)."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_TORCH = """
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    def train_func(config):
        model = AutoModelForCausalLM.from_pretrained(config["model"])
        args = TrainingArguments(output_dir="o", per_device_train_batch_size=config["bs"])
        Trainer(model=model, args=args).train()

    trainer = TorchTrainer(train_func, train_loop_config={{"model": "Qwen/Qwen2.5-0.5B", "bs": 4}},
                           scaling_config=ScalingConfig(num_workers=4{gpu}))
    trainer.fit()
"""

_TRANSFORMERS = """
    from ray.air import ScalingConfig
    from ray.train.huggingface import TransformersTrainer
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    def trainer_init_per_worker(train_dataset, eval_dataset=None, **config):
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        return Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=2))

    TransformersTrainer(trainer_init_per_worker=trainer_init_per_worker,
                        scaling_config=ScalingConfig(num_workers=2, use_gpu=True)).fit()
"""


@pytest.mark.parametrize("gpu, gpus", [(", use_gpu=True", 4), ("", None)])
def test_a_torch_trainer_runs_its_function_on_its_workers(tmp_path, monkeypatch, gpu, gpus):
    root = _write(tmp_path, {"train.py": _TORCH.format(gpu=gpu)})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 4}
    if gpus:
        assert _get(plan, "num_gpus") == {"num_gpus": gpus}


def test_a_transformers_trainer_trains_the_trainer_its_function_builds(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _TRANSFORMERS})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "per_device_batch", "num_gpus") == {"model_id": "gpt2", "per_device_batch": 2,
                                                                      "num_gpus": 2}
