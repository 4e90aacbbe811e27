"""A repository's own config named alone (no framework reader knows its format) is read as the checkout's script that
reads it runs: a script whose @hydra.main names it, or one with its path as a string; a script that reads it without
training (an inference script) is not that answer, and with no reader the plan stays a note."""

from __future__ import annotations

from functools import partial

from checkouts import write_checkout
from memlint.extract import extract_file

_write = partial(write_checkout, dedent=True)

_CONF = """
    model:
      name: microsoft/phi-2
    train:
      batch_size: 8
      accumulate: 4
"""

_HYDRA_TRAIN = """
    import hydra
    import lightning as L
    import torch
    from transformers import AutoModelForCausalLM

    class Module(L.LightningModule):
        def __init__(self, name):
            super().__init__()
            self.model = AutoModelForCausalLM.from_pretrained(name)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters())

    @hydra.main(version_base=None, config_path="../conf", config_name="config")
    def main(cfg):
        loader = torch.utils.data.DataLoader(list(range(8)), batch_size=cfg.train.batch_size, shuffle=True)
        trainer = L.Trainer(accumulate_grad_batches=cfg.train.accumulate, devices=1)
        trainer.fit(Module(cfg.model.name), loader)

    if __name__ == "__main__":
        main()
"""

_INFER = """
    import hydra
    from transformers import AutoModelForCausalLM

    @hydra.main(version_base=None, config_path="../conf", config_name="config")
    def main(cfg):
        AutoModelForCausalLM.from_pretrained(cfg.model.name).generate()
"""


def test_a_hydra_config_is_read_as_the_script_that_trains_from_it(tmp_path, monkeypatch):
    root = _write(tmp_path, {"conf/config.yaml": _CONF, "inference/infer.py": _INFER, "src/fine_tune.py": _HYDRA_TRAIN})
    monkeypatch.chdir(root)
    plan = extract_file(root / "conf/config.yaml", None, "conf/config.yaml")
    assert plan.get("model_id").value == "microsoft/phi-2"
    assert plan.get("per_device_batch").value == 8 and plan.get("trainer").value == "lightning"
    assert any("read as src/fine_tune.py runs it" in n for n in plan.notes)


def test_a_config_path_in_a_string_names_its_reader(tmp_path, monkeypatch):
    train = """
        import yaml, torch
        from transformers import AutoModelForCausalLM
        cfg = yaml.safe_load(open("configs/run.yaml"))
        model = AutoModelForCausalLM.from_pretrained(cfg["model"]["name"])
        opt = torch.optim.AdamW(model.parameters())
        for batch in torch.utils.data.DataLoader(list(range(8)), batch_size=cfg["train"]["batch_size"]):
            model(**batch).loss.backward()
            opt.step()
    """
    root = _write(tmp_path, {"configs/run.yaml": _CONF, "train.py": train})
    monkeypatch.chdir(root)
    plan = extract_file(root / "configs/run.yaml", None, "configs/run.yaml")
    assert plan.get("model_id").value == "microsoft/phi-2" and plan.get("per_device_batch").value == 8


def test_without_a_training_reader_the_config_stays_a_note(tmp_path, monkeypatch):
    root = _write(tmp_path, {"conf/config.yaml": _CONF, "inference/infer.py": _INFER})
    monkeypatch.chdir(root)
    plan = extract_file(root / "conf/config.yaml", None, "conf/config.yaml")
    assert not plan.fields and any("not a config memlint reads" in n for n in plan.notes)


_AXOLOTL = """
    base_model: NousResearch/Llama-2-7b-hf
    load_in_4bit: true
    adapter: qlora
    lora_r: 32
    lora_target_linear: true
    sequence_len: 4096
    micro_batch_size: 1
    gradient_accumulation_steps: 4
    bf16: true
    datasets:
      - path: x
        type: alpaca
"""


def test_a_command_whose_script_is_a_framework_cloned_apart_reads_its_config(tmp_path, monkeypatch, capsys):
    import json

    from memlint.cli import main

    root = _write(tmp_path, {"configs/q.yaml": _AXOLOTL})
    monkeypatch.chdir(root)
    rc = main(["plan", "--format", "json", "--", "accelerate", "launch", "axolotl/scripts/finetune.py", "configs/q.yaml"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["plan"]["model_id"]["value"] == "NousResearch/Llama-2-7b-hf"
    assert doc["plan"]["lora_r"]["value"] == 32
    assert any("axolotl/scripts/finetune.py is not in this checkout" in n for n in doc["notes"])
    # no config of a known framework among its arguments: still the user's error
    assert main(["plan", "--", "python", "not_here.py", "configs/other.yaml"]) == 2
