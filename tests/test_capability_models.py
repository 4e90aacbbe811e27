"""A repository's own trainer run through its console script over a YAML config: click's positional arguments take
the command's bare words, and a pydantic model built from the loaded dict (`Config.model_validate(d)`,
`Config(**d)`, v1's `parse_obj`) keeps each key under the field it aliases and builds nested models from nested
dicts, so the values reach the trainer's arguments."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_PYPROJECT = """
    [project]
    name = "kit"
    dependencies = ["trl==0.25.1", "transformers==4.57.1"]
    [project.scripts]
    kit = "kit.main:main"
"""

_CONFIG = """
    model: Qwen/Qwen2.5-0.5B
    sequence_length: 4096
    data:
      prepacked: true
    training_args:
      per_device_train_batch_size: 2
      gradient_accumulation_steps: 8
      bf16: true
"""

_MAIN = """
    import click, yaml, trl, transformers
    from pydantic import BaseModel, Field

    class DataConfig(BaseModel):
        prepacked: bool = False
        max_samples: int | None = None

    class RunConfig(BaseModel):
        train_model: str = Field(description="the student", alias="model")
        sequence_length: int = Field(..., description="tokens")
        data: DataConfig = Field(default_factory=DataConfig)
        training_args: dict = Field(default_factory=dict)
        use_flash_attention: bool = Field(True, description="flash")

    def run(config):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            config.train_model, torch_dtype="bfloat16",
            attn_implementation="flash_attention_2" if config.use_flash_attention else None)
        kw = dict(config.training_args)
        max_length = kw.pop("max_length", config.sequence_length)
        args = trl.SFTConfig(**kw, max_length=max_length, packing=config.data.prepacked, output_dir="o")
        trl.SFTTrainer(model=model, args=args, train_dataset=None).train()

    @click.command()
    @click.argument("config_path")
    @click.option("--verbose", "-v", "verbosity", count=True)
    def main(config_path, verbosity):
        with open(config_path) as f:
            d = yaml.safe_load(f)
        config = {build}
        run(config)
"""

_WANT = {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 2, "grad_accum": 8, "max_length": 4096,
         "packing": True, "precision": "amp-bf16", "attn_implementation": "flash_attention_2"}


@pytest.mark.parametrize("build", ["RunConfig.model_validate(d)", "RunConfig(**d)", "RunConfig.parse_obj(d)"])
def test_a_console_script_reads_its_yaml_through_a_pydantic_model(tmp_path, monkeypatch, build):
    root = _write(tmp_path, {"pyproject.toml": _PYPROJECT, "kit/__init__.py": "", "kit/main.py": _MAIN.format(build=build),
                             "cfg.yml": _CONFIG})
    plan = _command(root, monkeypatch, "kit", "-v", "cfg.yml")
    assert _get(plan, *_WANT) == _WANT


def test_without_the_alias_the_key_is_not_the_field(tmp_path, monkeypatch):
    # `model:` is the alias of train_model; a model whose field has no alias leaves train_model unset
    main = _MAIN.format(build="RunConfig.model_validate(d)").replace(', alias="model"', "")
    root = _write(tmp_path, {"pyproject.toml": _PYPROJECT, "kit/__init__.py": "", "kit/main.py": main, "cfg.yml": _CONFIG})
    plan = _command(root, monkeypatch, "kit", "cfg.yml")
    assert _get(plan, "model_id")["model_id"] is None
    assert _get(plan, "per_device_batch")["per_device_batch"] == 2


def test_a_nested_model_keeps_its_defaults_for_keys_the_dict_leaves_out(tmp_path, monkeypatch):
    cfg = _CONFIG.replace("      prepacked: true\n", "      max_samples: 10\n")
    root = _write(tmp_path, {"pyproject.toml": _PYPROJECT, "kit/__init__.py": "",
                             "kit/main.py": _MAIN.format(build="RunConfig.model_validate(d)"), "cfg.yml": cfg})
    plan = _command(root, monkeypatch, "kit", "cfg.yml")
    assert _get(plan, "packing", "max_length") == {"packing": False, "max_length": 4096}


@pytest.mark.parametrize("words, batch", [(("cfg.yml",), 2), (("cfg.yml", "small.yml"), 1)])
def test_click_arguments_take_the_bare_words_in_order(tmp_path, monkeypatch, words, batch):
    main = """
        import click, yaml
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        @click.command()
        @click.argument("config_path")
        @click.argument("override", required=False, default=None)
        @click.option("--dry-run", is_flag=True)
        def main(config_path, override, dry_run):
            d = yaml.safe_load(open(override or config_path))
            model = AutoModelForCausalLM.from_pretrained(d["model"])
            args = TrainingArguments(output_dir="o", per_device_train_batch_size=d["batch"])
            Trainer(model=model, args=args).train()

        if __name__ == "__main__":
            main()
    """
    root = _write(tmp_path, {"train.py": main, "cfg.yml": "model: gpt2\nbatch: 2\n", "small.yml": "model: gpt2\nbatch: 1\n"})
    plan = _command(root, monkeypatch, "python", "train.py", "--dry-run", *words)
    assert _get(plan, "per_device_batch") == {"per_device_batch": batch}


@pytest.mark.parametrize("path", [
    'Path(__file__).parent / "configs" / "config.yaml"',
    'Path(__file__).resolve().parent / "configs/config.yaml"',
    'Path("configs") / "config.yaml"',
    '"configs" / Path("config.yaml")',
])
def test_a_pathlib_path_joined_with_slash_names_the_config(tmp_path, monkeypatch, path):
    script = f"""
        import yaml
        from pathlib import Path
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        cfg = yaml.safe_load(open({path}))
        model = AutoModelForCausalLM.from_pretrained(cfg["model"])
        Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=cfg["batch"])).train()
    """
    root = _write(tmp_path, {"train.py": script, "configs/config.yaml": "model: gpt2\nbatch: 3\n"})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "gpt2", "per_device_batch": 3}


def test_a_loader_module_builds_dataclasses_from_its_own_yaml(tmp_path, monkeypatch):
    # configs/loader.py reads the YAML beside itself and converts each section into a dataclass key by key
    loader = """
        import typing, yaml
        from dataclasses import dataclass
        from pathlib import Path

        @dataclass
        class ModelConfig:
            model_name: str = "gpt2"
            max_seq_length: int = 128

        @dataclass
        class TrainConfig:
            per_device_train_batch_size: int = 1
            learning_rate: float = 1e-4

        def load_yaml_config(config_path=None):
            if config_path is None:
                config_path = Path(__file__).parent / "config.yaml"
            with open(config_path, "r") as f:
                return yaml.safe_load(f)

        def dict_to_dataclass(cls, data):
            fieldtypes = {f.name: f.type for f in cls.__dataclass_fields__.values()}
            converted = {}
            for k, v in data.items():
                if k not in fieldtypes:
                    continue
                if fieldtypes[k] == float and isinstance(v, str):
                    converted[k] = float(v)
                else:
                    converted[k] = v
            return cls(**converted)

        def load_config(config_path=None):
            y = load_yaml_config(config_path)
            return dict_to_dataclass(ModelConfig, y["model"]), dict_to_dataclass(TrainConfig, y["training"])
    """
    script = """
        from configs.loader import load_config
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        m, t = load_config()
        model = AutoModelForCausalLM.from_pretrained(m.model_name)
        args = TrainingArguments(output_dir="o", per_device_train_batch_size=t.per_device_train_batch_size)
        Trainer(model=model, args=args).train()
    """
    config = "model:\n  model_name: Qwen/Qwen2.5-0.5B\ntraining:\n  per_device_train_batch_size: 4\n  learning_rate: '2e-5'\n"
    root = _write(tmp_path, {"train.py": script, "configs/__init__.py": "", "configs/loader.py": loader,
                             "configs/config.yaml": config})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 4}


def test_a_console_script_of_a_src_layout_package_runs_its_init(tmp_path, monkeypatch):
    # `kit = "kit:main"`: main lives in src/kit/__init__.py (no __main__ guard: the console script calls it)
    init = """
        import sys, yaml
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        def main():
            cfg = yaml.safe_load(open(sys.argv[1]))
            model = AutoModelForCausalLM.from_pretrained(cfg["model"])
            Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=cfg["batch"])).train()
    """
    pyproject = _PYPROJECT.replace('"kit.main:main"', '"kit:main"')
    root = _write(tmp_path, {"pyproject.toml": pyproject, "src/kit/__init__.py": init, "job.yaml": "model: gpt2\nbatch: 5\n"})
    plan = _command(root, monkeypatch, "uv", "run", "kit", "job.yaml")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "gpt2", "per_device_batch": 5}


@pytest.mark.parametrize("parse", [
    "json.loads(r'''\n{\"model\": {\"id\": \"Qwen/Qwen2.5-0.5B\"}, \"batch\": 6}\n''')",
    "yaml.safe_load('''\nmodel:\n  id: Qwen/Qwen2.5-0.5B\nbatch: 6\n''')",
    "tomllib.loads('''\nbatch = 6\n[model]\nid = \"Qwen/Qwen2.5-0.5B\"\n''')",
])
def test_a_config_written_as_text_in_the_script_is_parsed(tmp_path, monkeypatch, parse):
    script = "import json, tomllib, yaml\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n" \
             f"CFG = {parse}\n" \
             "model = AutoModelForCausalLM.from_pretrained(CFG['model']['id'])\n" \
             "Trainer(model=model, args=TrainingArguments(output_dir='o', per_device_train_batch_size=CFG['batch'])).train()\n"
    root = write_checkout(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 6}


def test_a_click_group_subcommand_takes_the_words_after_its_name(tmp_path, monkeypatch):
    script = """
        import click
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        @click.group()
        def cli():
            pass

        @cli.command()
        @click.argument("model_name")
        @click.option("--shuffle/--no-shuffle", default=False)
        def finetune(model_name, shuffle):
            model = AutoModelForCausalLM.from_pretrained(model_name)
            Trainer(model=model, args=TrainingArguments(output_dir="o")).train()

        if __name__ == "__main__":
            cli()
    """
    root = _write(tmp_path, {"cli.py": script})
    plan = _command(root, monkeypatch, "python", "cli.py", "finetune", "--shuffle", "Qwen/Qwen2.5-0.5B")
    assert _get(plan, "model_id") == {"model_id": "Qwen/Qwen2.5-0.5B"}


def test_a_console_script_runs_its_own_function_of_a_module_with_several(tmp_path, monkeypatch):
    init = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        def train():
            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
            Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=2)).train()

        def evaluate():
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=16)).train()
    """
    pyproject = _PYPROJECT.replace('kit = "kit.main:main"', 'kit-train = "kit:train"\nkit-eval = "kit:evaluate"')
    root = _write(tmp_path, {"pyproject.toml": pyproject, "src/kit/__init__.py": init})
    assert _get(_command(root, monkeypatch, "kit-train"), "model_id") == {"model_id": "Qwen/Qwen2.5-0.5B"}
    assert _get(_command(root, monkeypatch, "kit-eval"), "model_id") == {"model_id": "gpt2"}


def test_a_pydantic_field_with_an_alias_ignores_its_own_name(tmp_path, monkeypatch):
    # pydantic's default: a field declared with alias="model" is set by "model" only (not by "train_model")
    cfg = _CONFIG.replace("model: Qwen/Qwen2.5-0.5B", "train_model: Qwen/Qwen2.5-0.5B")
    root = _write(tmp_path, {"pyproject.toml": _PYPROJECT, "kit/__init__.py": "",
                             "kit/main.py": _MAIN.format(build="RunConfig.model_validate(d)"), "cfg.yml": cfg})
    plan = _command(root, monkeypatch, "kit", "cfg.yml")
    assert _get(plan, "model_id")["model_id"] is None


@pytest.mark.parametrize("words, want", [
    (("train", "--model", "Qwen/Qwen2.5-0.5B", "--bs", "4"), {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 4}),
    (("eval",), {"model_id": "gpt2", "per_device_batch": 64}),
])
def test_argparse_subcommands_dispatch_through_set_defaults(tmp_path, monkeypatch, words, want):
    # `sub.set_defaults(func=train)` then `args.func(args)`: the subcommand's function runs; set_defaults' keys take no
    # word of the command line; the script's own run decides the trainer before functions nothing called
    script = """
        import argparse
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        def train(args):
            model = AutoModelForCausalLM.from_pretrained(args.model)
            Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=args.bs)).train()

        def evaluate(args):
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=64)).train()

        def main():
            p = argparse.ArgumentParser()
            sub = p.add_subparsers(dest="cmd", required=True)
            t = sub.add_parser("train")
            t.add_argument("--model", default="gpt2")
            t.add_argument("--bs", type=int, default=2)
            t.set_defaults(func=train)
            e = sub.add_parser("eval")
            e.set_defaults(func=evaluate)
            args = p.parse_args()
            args.func(args)

        if __name__ == "__main__":
            main()
    """
    root = _write(tmp_path, {"cli.py": script})
    plan = _command(root, monkeypatch, "python", "cli.py", *words)
    assert _get(plan, *want) == want
