"""LightningCLI called in a script (`LightningCLI(Model, DataModule, trainer_defaults={...})`, run as `python main.py
fit --model.lr 3e-3 --data.batch_size 4 --trainer.precision bf16-mixed [--config cfg.yaml]`): the model and data
module are built from their `__init__` parameters (command words over a config file's sections over the defaults),
lightning's Trainer from trainer_defaults under the file's and the command's trainer values, and `fit` runs their
hooks. Lightning's `strategy="deepspeed"` is DeepSpeedStrategy at its default stage 2. Synthetic checkouts."""

from __future__ import annotations

from functools import partial

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_MODULES = """
    import torch
    import lightning as L
    from torch.utils.data import DataLoader
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorWithPadding


    class CausalLM(L.LightningModule):
        def __init__(self, model_name: str = "Qwen/Qwen2.5-0.5B", learning_rate: float = 2e-5):
            super().__init__()
            self.save_hyperparameters()
            self.model = AutoModelForCausalLM.from_pretrained(model_name, torch_dtype=torch.bfloat16)

        def training_step(self, batch, batch_idx):
            return self.model(**batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=self.hparams.learning_rate)


    class TextData(L.LightningDataModule):
        def __init__(self, tokenizer_name: str = "Qwen/Qwen2.5-0.5B", batch_size: int = 8, max_length: int = 512):
            super().__init__()
            self.batch_size = batch_size
            self.tok = AutoTokenizer.from_pretrained(tokenizer_name)
            self.max_length = max_length

        def collate(self, rows):
            return self.tok([r["text"] for r in rows], truncation=True, max_length=self.max_length,
                            padding="max_length", return_tensors="pt")

        def train_dataloader(self):
            return DataLoader([], batch_size=self.batch_size, shuffle=True, collate_fn=self.collate)
"""

_MAIN = """
    from lightning.pytorch.cli import LightningCLI
    from modules import CausalLM, TextData

    if __name__ == "__main__":
        LightningCLI(CausalLM, TextData, trainer_defaults={"precision": "bf16-mixed", "accumulate_grad_batches": 4,
                                                          "strategy": "deepspeed"})
"""


def _checkout(tmp_path, main=_MAIN, **more):
    return _write(tmp_path, {"modules.py": _MODULES, "main.py": main, **more})


def test_the_command_builds_the_model_and_data_module_and_fits(tmp_path, monkeypatch):
    root = _checkout(tmp_path)
    plan = _command(root, monkeypatch, "python", "main.py", "fit", "--model.model_name", "Qwen/Qwen2.5-1.5B",
                    "--data.batch_size", "2", "--data.max_length=1024", "--trainer.accumulate_grad_batches", "8")
    assert _get(plan, "trainer", "model_id", "per_device_batch", "grad_accum", "max_length", "padding", "precision",
                "distributed", "optimizer") == {
        "trainer": "lightning", "model_id": "Qwen/Qwen2.5-1.5B", "per_device_batch": 2, "grad_accum": 8,
        "max_length": 1024, "padding": "max_length", "precision": "amp-bf16", "distributed": "zero2",
        "optimizer": "adamw_torch"}
    assert plan.fields["per_device_batch"].source == "command-line"


def test_without_words_the_parameters_defaults_and_trainer_defaults_stand(tmp_path, monkeypatch):
    root = _checkout(tmp_path)
    plan = _command(root, monkeypatch, "python", "main.py", "fit")
    assert _get(plan, "model_id", "per_device_batch", "grad_accum", "max_length") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 8, "grad_accum": 4, "max_length": 512}


def test_a_config_file_sits_under_the_command_words(tmp_path, monkeypatch):
    config = """
        trainer:
          accumulate_grad_batches: 2
          strategy: ddp
        model:
          model_name: Qwen/Qwen2.5-3B
        data:
          batch_size: 1
          max_length: 2048
    """
    root = _checkout(tmp_path, **{"configs/run.yaml": config})
    plan = _command(root, monkeypatch, "python", "main.py", "fit", "--config", "configs/run.yaml",
                    "--data.batch_size", "3")
    assert _get(plan, "model_id", "per_device_batch", "grad_accum", "max_length", "distributed") == {
        "model_id": "Qwen/Qwen2.5-3B", "per_device_batch": 3, "grad_accum": 2, "max_length": 2048,
        "distributed": "none"}


def test_run_false_builds_without_fitting_and_the_script_fits_the_cli_objects(tmp_path, monkeypatch):
    main = """
        from lightning.pytorch.cli import LightningCLI
        from modules import CausalLM, TextData

        cli = LightningCLI(CausalLM, TextData, run=False, trainer_defaults={"precision": "16-mixed"})
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    """
    root = _checkout(tmp_path, main=main)
    plan = _command(root, monkeypatch, "python", "main.py", "--data.batch_size", "4")
    assert _get(plan, "trainer", "per_device_batch", "precision") == {
        "trainer": "lightning", "per_device_batch": 4, "precision": "amp-fp16"}


def test_a_deepspeed_strategy_object_without_a_stage_is_stage_two(tmp_path, monkeypatch):
    main = """
        import lightning as L
        from lightning.pytorch.strategies import DeepSpeedStrategy
        from modules import CausalLM, TextData

        trainer = L.Trainer(strategy=DeepSpeedStrategy(offload_optimizer=True), precision="bf16-mixed")
        trainer.fit(CausalLM(), datamodule=TextData())
    """
    root = _checkout(tmp_path, main=main)
    plan = _command(root, monkeypatch, "python", "main.py")
    assert _get(plan, "distributed", "offload") == {"distributed": "zero2", "offload": "optimizer"}


def test_configs_and_words_apply_in_the_commands_order_a_config_before_the_subcommand_nested_by_it(tmp_path, monkeypatch):
    root = _checkout(tmp_path, **{
        "top.yaml": "fit:\n  data:\n    batch_size: 32\n    max_length: 4096\n",
        "sub.yaml": "data:\n  batch_size: 16\n",
        "data.yaml": "batch_size: 5\nmax_length: 128\n",
    })
    plan = _command(root, monkeypatch, "python", "main.py", "--config", "top.yaml", "fit")
    assert _get(plan, "per_device_batch", "max_length") == {"per_device_batch": 32, "max_length": 4096}
    plan = _command(root, monkeypatch, "python", "main.py", "fit", "--data.batch_size", "2", "--config", "sub.yaml")
    assert plan.fields["per_device_batch"].value == 16  # the later --config wins
    plan = _command(root, monkeypatch, "python", "main.py", "fit", "--config", "sub.yaml", "--data.batch_size", "2")
    assert plan.fields["per_device_batch"].value == 2
    plan = _command(root, monkeypatch, "python", "main.py", "fit", "--data", "data.yaml")
    assert _get(plan, "per_device_batch", "max_length") == {"per_device_batch": 5, "max_length": 128}


def test_a_subcommand_other_than_fit_trains_nothing(tmp_path, monkeypatch):
    root = _checkout(tmp_path)
    assert _command(root, monkeypatch, "python", "main.py", "validate").fields["per_device_batch"].value is None
