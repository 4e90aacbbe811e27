"""A LightningCLI config whose model and data classes decide the plan: memlint reads them as LightningCLI builds
them (Model(**init_args), Data(**init_args), Trainer(**trainer).fit(model, datamodule=data))."""

from __future__ import annotations

from checkouts import plan_of_command, write_checkout

_MODULE = '''
    import torch
    import bitsandbytes as bnb
    import lightning.pytorch as pl
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    class LlamaModule(pl.LightningModule):
        def __init__(self, config=None, path="meta-llama/Llama-2-7b-hf"):
            super().__init__()
            model = AutoModelForCausalLM.from_pretrained(path, quantization_config=BitsAndBytesConfig(load_in_8bit=True))
            model = prepare_model_for_kbit_training(model)
            self.model = get_peft_model(model, LoraConfig(r=config["r"], lora_alpha=config["lora_alpha"],
                                                          target_modules=["q_proj", "v_proj"]))

        def training_step(self, batch, idx):
            return self.model(**batch).loss

        def configure_optimizers(self):
            return bnb.optim.AdamW8bit(self.parameters(), lr=self.hparams.get("lr", 2e-4))
'''

_CONFIG = '''
    trainer:
      devices: 1
      precision: bf16-mixed
      accumulate_grad_batches: 4
      callbacks:
        - class_path: lightning.pytorch.callbacks.LearningRateMonitor
    model:
      class_path: pkg.llama.LlamaModule
      init_args:
        config:
          r: 32
          lora_alpha: 64
        path: Qwen/Qwen2.5-7B
    data:
      class_path: pkg.data.TextData
      init_args:
        batch_size: 4
        seq_length: 1024
'''

_DATA = '''
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    class TextData(pl.LightningDataModule):
        def __init__(self, batch_size=1, seq_length=512):
            super().__init__()
            self.batch_size = batch_size
            self.seq_length = seq_length

        def train_dataloader(self):
            return DataLoader(self.rows, batch_size=self.batch_size, shuffle=True)
'''


def test_a_lightning_cli_configs_model_class_is_read_by_running_it_on_init_args(tmp_path, monkeypatch):
    root = write_checkout(tmp_path, {"pkg/__init__.py": "", "pkg/llama.py": _MODULE, "pkg/data.py": _DATA,
                                     "pkg/main.py": "from lightning.pytorch.cli import LightningCLI\nLightningCLI()\n",
                                     "configs/run.yaml": _CONFIG}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "pkg/main.py", "fit", "--config", "configs/run.yaml")
    got = {k: plan.fields[k].value for k in ("model_id", "method", "lora_r", "quant_bits", "optimizer", "precision",
                                              "grad_accum", "per_device_batch", "trainer")}
    assert got == {"model_id": "Qwen/Qwen2.5-7B", "method": "lora", "lora_r": 32, "quant_bits": 8,
                   "optimizer": "adamw_bnb_8bit", "precision": "amp-bf16", "grad_accum": 4, "per_device_batch": 4,
                   "trainer": "lightning"}
    assert plan.fields["model_id"].span.path.endswith("run.yaml")  # the value is the config's, shown where it is
    assert any("LightningCLI" in c for c in plan.fields["lora_r"].chain)
