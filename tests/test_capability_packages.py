"""A project installed from its declared package folders (`python -m pkg.mod` with `where = ["templates/src"]`), a
Hydra config that extends its search path (`hydra: searchpath: [pkg://configs]`), OmegaConf.select of dotted keys,
and a job object called like a function (`Trainer()(cfg)`: its __call__ runs)."""

from __future__ import annotations

from checkouts import field_values, plan_of_command, write_checkout

_PYPROJECT = '''
    [project]
    name = "demo"
    [tool.setuptools.packages.find]
    where = ["templates", "templates/src"]
'''

_LAUNCH = '''
    import hydra
    from omegaconf import DictConfig
    from .train import Job

    @hydra.main(config_path=".", config_name="config", version_base=None)
    def main(cfg: DictConfig):
        return Job()(cfg)

    if __name__ == "__main__":
        main()
'''

_TRAIN = '''
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    class Job:
        def __call__(self, cfg):
            cfg = OmegaConf.create(cfg)
            name = OmegaConf.select(cfg, "trainer.model_name", default="gpt2")
            model = AutoModelForCausalLM.from_pretrained(name)
            args = TrainingArguments("o", per_device_train_batch_size=OmegaConf.select(cfg, "trainer.batch", default=2),
                                     gradient_accumulation_steps=cfg.compute.accum)
            Trainer(model=model, args=args).train()
'''

_CONFIG = '''
    defaults:
      - _global
      - _self_
    trainer:
      model_name: Qwen/Qwen2.5-0.5B
    hydra:
      searchpath:
        - pkg://configs
'''


def test_a_module_of_a_declared_package_folder_with_a_hydra_search_path(tmp_path, monkeypatch):
    root = write_checkout(tmp_path, {
        "pyproject.toml": _PYPROJECT,
        "templates/configs/__init__.py": "",
        "templates/configs/_global.yaml": "defaults:\n  - compute: small\n",
        "templates/configs/compute/small.yaml": "accum: 1\n",
        "templates/configs/compute/big.yaml": "accum: 8\n",
        "templates/src/llm/__init__.py": "",
        "templates/src/llm/job/__init__.py": "",
        "templates/src/llm/job/launch.py": _LAUNCH,
        "templates/src/llm/job/train.py": _TRAIN,
        "templates/src/llm/job/config.yaml": _CONFIG,
    }, dedent=True)
    plan = plan_of_command(root, monkeypatch, "uv", "run", "python", "-m", "llm.job.launch", "compute=big")
    assert field_values(plan, "model_id", "per_device_batch", "grad_accum", "trainer") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 2, "grad_accum": 8, "trainer": "Trainer"}


def test_a_module_of_a_package_folder_setup_py_declares(tmp_path, monkeypatch):
    """setup.py's `package_dir={"": "lib"}` / `find_packages("lib")`, read as text: `python -m demo.train` of the
    editable install runs lib/demo/train.py."""
    train = ("from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
             "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B')\n"
             "Trainer(model=model, args=TrainingArguments('o', per_device_train_batch_size=3)).train()\n")
    for setup in ("setup(name='demo', package_dir={'': 'lib'}, packages=['demo'])\n",
                  "setup(name='demo', packages=find_packages(where='lib'))\n"):
        root = write_checkout(tmp_path / str(len(setup)), {"setup.py": "from setuptools import setup, find_packages\n" + setup,
                                                            "lib/demo/__init__.py": "", "lib/demo/train.py": train})
        plan = plan_of_command(root, monkeypatch, "python", "-m", "demo.train")
        assert plan.value("per_device_batch") == 3
