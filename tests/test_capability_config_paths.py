"""A repository's own YAML read into argparse defaults and a DeepSpeed JSON the YAML names, as a launcher reads
them: `if os.path.isfile(path): cfg = yaml.safe_load(f) or {}` takes the file's branch when the path names a file
of the checkout (a loaded mapping with items is true), and a path that is the config's value or the option's
default None reads the file the config names. Synthetic checkouts written from the pattern."""

from __future__ import annotations

from functools import partial

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_ARGS = """
    import argparse, os, yaml

    def get_args():
        base = argparse.ArgumentParser(add_help=False)
        base.add_argument("--yaml_config", type=str, default="")
        known, _ = base.parse_known_args()
        if os.path.isfile(known.yaml_config):
            with open(known.yaml_config) as f:
                cfg = yaml.safe_load(f) or {}
        else:
            cfg = {}
        p = argparse.ArgumentParser(parents=[base])
        p.add_argument("--micro_batch", type=int, default=cfg.get("micro_batch", 8))
        p.add_argument("--grad_acc", type=int, default=cfg.get("grad_acc", 8))
        p.add_argument("--precision", default=cfg.get("precision", "fp16"))
        p.add_argument("--ds_config", default=cfg.get("ds_config"))
        return p.parse_args()
"""

_TRAIN = """
    import json, torch, deepspeed
    from transformers import AutoModelForCausalLM
    from cli_args import get_args


    def setup(args):
        with open(args.ds_config) as f:
            ds = json.load(f)
        ds.setdefault(args.precision, {})["enabled"] = True
        ds["train_micro_batch_size_per_gpu"] = args.micro_batch
        ds["gradient_accumulation_steps"] = args.grad_acc
        return ds


    args = get_args()
    ds = setup(args)
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
    engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config_params=ds)
    for batch in []:
        engine.backward(engine(**batch).loss)
        engine.step()
"""

_FILES = {
    "cli_args.py": _ARGS,
    "train.py": _TRAIN,
    "configs/run.yaml": "micro_batch: 2\ngrad_acc: 4\nprecision: bf16\nds_config: configs/ds_z2.json\n",
    "configs/ds_z2.json": '{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", '
                          '"zero_optimization": {"stage": 2}}\n',
}


def test_the_yaml_a_launcher_checks_for_and_the_deepspeed_json_it_names(tmp_path, monkeypatch):
    root = _write(tmp_path, _FILES)
    plan = _command(root, monkeypatch, "deepspeed", "--num_gpus", "2", "train.py", "--yaml_config", "configs/run.yaml")
    assert _get(plan, "per_device_batch", "grad_accum", "precision", "distributed") == {
        "per_device_batch": 2, "grad_accum": 4, "precision": "amp-bf16", "distributed": "zero2"}


def test_a_yaml_path_that_names_no_file_leaves_both_branches(tmp_path, monkeypatch):
    """The file may be made at run time: os.path.isfile of a missing path is unknown, never False."""
    root = _write(tmp_path, _FILES)
    plan = _command(root, monkeypatch, "deepspeed", "--num_gpus", "2", "train.py", "--yaml_config", "configs/gone.yaml")
    # no YAML read: the DeepSpeed JSON it would name is unknown, so are the engine's micro-batch and stage
    assert _get(plan, "per_device_batch", "distributed") == {"per_device_batch": None, "distributed": None}
    assert plan.fields["distributed"].source == "unknown"


_PY_CONFIG = """
    class Recipe:
        def __init__(self, model_name, training_arguments):
            self.model_name = model_name
            self.training_arguments = training_arguments

    config = Recipe(model_name="Qwen/Qwen2.5-1.5B",
                    training_arguments={"per_device_train_batch_size": 3, "gradient_accumulation_steps": 5,
                                        "max_length": 777, "output_dir": "o"})
"""


def test_a_python_config_loaded_by_its_path_is_read_as_a_module(tmp_path, monkeypatch):
    """`spec_from_file_location(name, path)` + `module_from_spec` (+ `exec_module`) or `SourceFileLoader(name,
    path).load_module()` of a file of the checkout: its names read as an import's (nothing runs)."""
    loaders = {
        "spec": "spec = importlib.util.spec_from_file_location('m', a.c)\n"
                "mod = importlib.util.module_from_spec(spec)\n"
                "spec.loader.exec_module(mod)\n",
        "loader": "mod = importlib.machinery.SourceFileLoader('m', a.c).load_module()\n",
    }
    for kind, load in loaders.items():
        script = ("import argparse, importlib.util, importlib.machinery\n"
                  "from transformers import AutoModelForCausalLM\n"
                  "from trl import SFTConfig, SFTTrainer\n"
                  "a = argparse.ArgumentParser(); a.add_argument('-c'); a = a.parse_args()\n" + load +
                  "cfg = getattr(mod, 'config')\n"
                  "args = SFTConfig(**{**{'dataset_text_field': 'text'}, **cfg.training_arguments})\n"
                  "SFTTrainer(model=AutoModelForCausalLM.from_pretrained(cfg.model_name), args=args).train()\n")
        root = _write(tmp_path / kind, {"configs/cfg_a.py": _PY_CONFIG, "train.py": script})
        plan = _command(root, monkeypatch, "python", "train.py", "-c", "configs/cfg_a.py")
        assert _get(plan, "model_id", "per_device_batch", "grad_accum", "max_length") == {
            "model_id": "Qwen/Qwen2.5-1.5B", "per_device_batch": 3, "grad_accum": 5, "max_length": 777}, kind
        missing = _command(root, monkeypatch, "python", "train.py", "-c", "configs/absent.py")
        assert missing.fields["model_id"].value is None, kind


def test_a_model_object_is_no_string_so_a_load_guarded_by_isinstance_str_is_not_taken(tmp_path, monkeypatch):
    script = """
        import torch
        from transformers import AutoModelForCausalLM

        class MyTrainer:
            def __init__(self, model, lr=1e-5):
                if isinstance(model, str):
                    model = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float16)
                self.model = model
                self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr)

            def train(self, batches):
                for b in batches:
                    self.model(**b).loss.backward()
                    self.opt.step()

        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-1.5B-Instruct", torch_dtype=torch.bfloat16)
        MyTrainer(model).train([])
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "torch_dtype") == {"model_id": "Qwen/Qwen2.5-1.5B-Instruct", "torch_dtype": "bf16"}


def test_a_deepspeed_json_named_by_an_authors_absolute_path_is_the_checkouts_file_of_that_tail(tmp_path, monkeypatch):
    """`deepspeed $prefix/Repo/train.py --deepspeed $prefix/Repo/scripts/zero3.json` with prefix empty: both are the
    checkout's files of the same longest tail, the JSON as the script is (said in a note)."""
    train = """
        from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments
        (targs,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        Trainer(model=model, args=targs).train()
    """
    root = _write(tmp_path, {
        "pyproject.toml": "[project]\nname = 'x'\n",
        "llava/train.py": train,
        "scripts/zero3.json": '{"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}\n',
        "scripts/stage3.sh": "export prefix=\ndeepspeed $prefix/Repo/llava/train.py --deepspeed $prefix/Repo/scripts/zero3.json"
                             " --output_dir o --per_device_train_batch_size 4\n",
    })
    plan = _command(root, monkeypatch, "bash", "scripts/stage3.sh")
    assert _get(plan, "distributed", "per_device_batch") == {"distributed": "zero3", "per_device_batch": 4}
    assert any("read as the checkout's scripts/zero3.json" in n for n in plan.notes)


def test_isfile_of_an_authors_absolute_path_stays_unknown(tmp_path, monkeypatch):
    """`os.path.exists("/home/alice/proj/src/big.yaml")` is False on the user's machine whatever the checkout holds
    under src/: memlint never answers True for it (both branches stay; the larger batch is the worst case)."""
    script = """
        import os, yaml
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        cfg = {"bs": 2}
        if os.path.exists("/home/alice/proj/src/big.yaml"):
            cfg = yaml.safe_load(open("/home/alice/proj/src/big.yaml"))
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=cfg["bs"])).train()
    """
    root = _write(tmp_path, {"src/train.py": script, "src/big.yaml": "bs: 1\n", "pyproject.toml": "[project]\nname='x'\n"})
    got = _command(root, monkeypatch, "python", "src/train.py").fields["per_device_batch"]
    assert got.value == 2 and set(got.candidates) == {1, 2}


_DS_TRAIN = """
    from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments
    (targs,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
    Trainer(model=model, args=targs).train()
"""


def test_a_deepspeed_json_whose_folder_was_renamed_is_the_checkouts_one_file_of_that_name(tmp_path, monkeypatch):
    """`--deepspeed ./configs/ds.json` where the checkout holds config/ds.json only (its folder renamed after the
    launcher was written): that file, said in a note; with two files of the name, which one ran is unknown."""
    files = {
        "pyproject.toml": "[project]\nname = 'x'\n",
        "hf/train.py": _DS_TRAIN,
        "hf/config/ds.json": '{"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW"}}\n',
        "hf/run.sh": "cd hf\ntorchrun --nproc_per_node=4 train.py --deepspeed ./configs/ds.json --output_dir o\n",
    }
    plan = _command(_write(tmp_path / "one", files), monkeypatch, "bash", "hf/run.sh")
    assert _get(plan, "distributed", "num_gpus") == {"distributed": "zero2", "num_gpus": 4}
    assert any("./configs/ds.json is not in the checkout: read as its only file of that name, hf/config/ds.json" in n
               for n in plan.notes)
    files["old/ds.json"] = '{"zero_optimization": {"stage": 3}}\n'
    plan = _command(_write(tmp_path / "two", files), monkeypatch, "bash", "hf/run.sh")
    assert plan.value("distributed") == "deepspeed"


def test_a_missing_deepspeed_json_names_its_stage_as_a_hint_never_a_value(tmp_path, monkeypatch):
    root = _write(tmp_path, {
        "pyproject.toml": "[project]\nname = 'x'\n",
        "train.py": _DS_TRAIN,
        "run.sh": "deepspeed --include localhost:0 train.py --deepspeed ds_zero2_no_offload.json --output_dir o\n",
    })
    plan = _command(root, monkeypatch, "bash", "run.sh")
    assert plan.value("distributed") == "deepspeed"
    assert any("the name suggests ZeRO-2: pass --assume distributed=zero2" in n for n in plan.notes)
