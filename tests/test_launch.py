"""Launch commands and the script patterns real repositories use (round 3 of docs/realworld.md):
each test is a small synthetic checkout in the shape a public repository has, read with the
command its README or shell launcher gives."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memlint.errors import MemlintError
from memlint.extract import extract_targets
from memlint.extract.cli_args import Option, match_argparse, match_fields
from memlint.extract.launch import command_target, parse_command, tokens


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return root


def _plan(root: Path, command: str, monkeypatch):
    monkeypatch.chdir(root)
    [plan] = extract_targets([command_target(tokens(command), root)])
    return plan


def _v(plan, field):
    return plan.get(field).value, plan.get(field).source


# ---- the command line itself -----------------------------------------------------------------------


@pytest.mark.parametrize("command, launcher, script, gpus, argv0", [
    ("python train.py --lr 1e-4", "python", "train.py", None, "--lr"),
    ("CUDA_VISIBLE_DEVICES=0,1 python -u train.py", "python", "train.py", 2, None),
    ("torchrun --nproc_per_node=8 --nnodes 2 train.py cfg.py", "torchrun", "train.py", 16, "cfg.py"),
    ("torchrun --standalone train.py", "torchrun", "train.py", 1, None),
    ("python -m torch.distributed.run --nproc_per_node 4 train.py --x 1", "torchrun", "train.py", 4, "--x"),
    ("accelerate launch --num_processes 4 --mixed_precision bf16 train.py --bs 2", "accelerate", "train.py", 4, "--bs"),
    ("uv run python -m accelerate.commands.launch --num_processes 1 t.py", "accelerate", "t.py", 1, None),
    ("deepspeed --num_gpus 2 main.py --zero_stage 3", "deepspeed", "main.py", 2, "--zero_stage"),
    ("deepspeed --module pkg.train --lr 1", "deepspeed", None, None, "--lr"),
    ("cd scripts/train && composer -n 8 train.py yamls/a.yaml", "composer", "train.py", 8, "yamls/a.yaml"),
    ("nohup python train.py > log.txt 2>&1 &", "python", "train.py", None, None),
])
def test_launch_commands_are_read_as_their_launcher_reads_them(command, launcher, script, gpus, argv0):
    launch = parse_command(tokens(command))
    assert launch.launcher == launcher and launch.script == script and launch.gpus == gpus
    assert (launch.argv[0] if launch.argv else None) == argv0


def test_a_command_that_runs_no_python_is_a_clear_error():
    with pytest.raises(MemlintError, match="not a Python launcher"):
        parse_command(tokens("make all"))
    with pytest.raises(MemlintError, match="runs nothing"):
        parse_command(tokens("CUDA_VISIBLE_DEVICES=0"))


def test_argparse_matching_follows_argparse():
    opts = [Option("learning_rate", ("--learning_rate", "--lr")), Option("bf16", ("--bf16",), "store_true"),
            Option("no_cache", ("--cache",), "store_false"), Option("data", ("--data",), nargs="+"),
            Option("model", ())]
    m = match_argparse(opts, ["gpt2", "--lr", "3e-4", "--bf16", "--cache", "--data", "a", "b", "--unknown", "1"])
    assert m.values == {"learning_rate": "3e-4", "bf16": True, "no_cache": False, "data": ["a", "b"], "model": "gpt2"}
    assert match_argparse(opts, ["--learning=1e-5"]).values == {"learning_rate": "1e-5"}  # a unique prefix, --x=v


def test_hfargumentparser_matching_reads_bools_as_transformers_does():
    m = match_fields(["--bf16", "--fp16", "False", "--no_group_by_length", "--lora_r", "8", "--data_path", "a", "b"],
                     {"lora_r", "data_path"}, {"bf16", "fp16", "group_by_length"}, accept_any=True)
    assert m.values == {"bf16": True, "fp16": "False", "group_by_length": False, "lora_r": "8", "data_path": ["a", "b"]}


# ---- HfArgumentParser, argparse and the launcher ---------------------------------------------------

_HF = """
from dataclasses import dataclass, field
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, HfArgumentParser

@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="facebook/opt-125m")

@dataclass
class TrainingArguments(transformers.TrainingArguments):
    model_max_length: int = field(default=512)
    optim: str = field(default="adamw_torch")

class SupervisedDataset:
    def __init__(self, tokenizer):
        self.ids = [tokenizer(t, max_length=tokenizer.model_max_length, truncation=True, padding="longest") for t in ["a"]]

def train():
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, model_max_length=training_args.model_max_length)
    data = SupervisedDataset(tokenizer=tokenizer)
    Trainer(model=model, args=training_args, train_dataset=data).train()

if __name__ == "__main__":
    train()
"""


def test_an_hfargumentparser_script_reads_the_commands_flags(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _HF})
    plan = _plan(root, "torchrun --nproc_per_node=4 train.py --model_name_or_path facebook/opt-6.7b --bf16 True "
                       "--per_device_train_batch_size 4 --gradient_accumulation_steps 8 --fsdp 'full_shard auto_wrap'",
                 monkeypatch)
    assert _v(plan, "model_id") == ("facebook/opt-6.7b", "command-line")
    assert _v(plan, "per_device_batch") == (4, "command-line") and _v(plan, "grad_accum") == (8, "command-line")
    assert _v(plan, "precision") == ("amp-bf16", "command-line")
    assert _v(plan, "distributed") == ("fsdp", "command-line") and _v(plan, "num_gpus") == (4, "command-line")
    # the tokenizer inside a dataset class the script defines, its length the subclass's field default
    assert _v(plan, "max_length") == (512, "dataclass-default")
    assert plan.value("optimizer") == "adamw_torch"


def test_without_the_command_the_same_script_reads_its_defaults(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _HF})
    monkeypatch.chdir(root)
    from memlint.extract import extract_file

    plan = extract_file(root / "train.py")
    assert _v(plan, "model_id") == ("facebook/opt-125m", "dataclass-default")
    assert (plan.get("num_gpus").value, plan.get("num_gpus").source) == (1, "library-default")  # run as `python train.py`


_ARGS = """
import argparse, os
import torch
from transformers import AutoModelForCausalLM, TrainingArguments, Trainer

def str2bool(v):
    return v.lower() in ("yes", "true", "1")

p = argparse.ArgumentParser()
p.add_argument("--model", default="gpt2")
p.add_argument("--bs", "--batch_size", type=int, default=1)
p.add_argument("--ckpt", type=str2bool, default=False)
p.add_argument("--no_bf16", action="store_false", dest="bf16")
args = p.parse_args()
accum = int(os.environ.get("ACCUM", 4)) // int(os.environ.get("WORLD_SIZE", 1))
model = AutoModelForCausalLM.from_pretrained(args.model)
targs = TrainingArguments("out", per_device_train_batch_size=args.bs, gradient_accumulation_steps=accum,
                          gradient_checkpointing=args.ckpt, bf16=args.bf16)
Trainer(model=model, args=targs).train()
"""


def test_argparse_flags_types_and_the_environment(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _ARGS})
    plan = _plan(root, "torchrun --nproc_per_node 2 train.py --model Qwen/Qwen2.5-0.5B --batch 8 --ckpt yes --no_bf16",
                 monkeypatch)
    assert _v(plan, "model_id") == ("Qwen/Qwen2.5-0.5B", "command-line")
    assert _v(plan, "per_device_batch") == (8, "command-line")  # --batch: a unique prefix of --batch_size
    assert plan.value("gradient_checkpointing") is True  # type=str2bool: the script's own function ran
    assert plan.value("precision") == "fp32"  # store_false flag given
    # ACCUM is unset: its default; WORLD_SIZE is what torchrun sets for each of its 2 processes
    assert _v(plan, "grad_accum") == (2, "environment-default")


_NAMESPACE = """
import argparse
from dataclasses import dataclass, field
import transformers
from transformers import AutoModelForCausalLM, Seq2SeqTrainer, Seq2SeqTrainingArguments

@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="EleutherAI/pythia-12b")
    bits: int = field(default=4)

parser = transformers.HfArgumentParser((ModelArguments, Seq2SeqTrainingArguments))
model_args, training_args, extra = parser.parse_args_into_dataclasses(return_remaining_strings=True)
args = argparse.Namespace(**vars(model_args), **vars(training_args))
model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, load_in_4bit=args.bits == 4)
Seq2SeqTrainer(model=model, args=training_args).train()
"""


def test_a_namespace_merging_the_parsed_dataclasses_reads_each_field(tmp_path, monkeypatch):
    root = _write(tmp_path, {"qlora.py": _NAMESPACE})
    plan = _plan(root, "python qlora.py --model_name_or_path huggyllama/llama-7b --bits 4", monkeypatch)
    assert _v(plan, "model_id") == ("huggyllama/llama-7b", "command-line")
    assert plan.value("quant_bits") == 4 and plan.value("num_gpus") == 1


def test_a_json_arguments_file_named_on_the_command_line(tmp_path, monkeypatch):
    root = _write(tmp_path, {
        "train.py": """
            import argparse
            from dataclasses import dataclass, field
            from transformers import AutoModelForCausalLM, HfArgumentParser, TrainingArguments, Trainer

            @dataclass
            class CustomArgs:
                model_name_or_path: str = field(default=None)
                max_seq_length: int = field(default=512)

            p = argparse.ArgumentParser()
            p.add_argument("--train_args_file", type=str, default="args/default.json")
            a = p.parse_args()
            args, training_args = HfArgumentParser((CustomArgs, TrainingArguments)).parse_json_file(json_file=a.train_args_file)
            model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
            Trainer(model=model, args=training_args).train()
            """,
        "args/qlora.json": json.dumps({"model_name_or_path": "Qwen/Qwen2.5-7B", "per_device_train_batch_size": 2,
                                       "gradient_accumulation_steps": 16, "fp16": True, "optim": "paged_adamw_32bit"},
                                      indent=1),
    })
    plan = _plan(root, "python train.py --train_args_file args/qlora.json", monkeypatch)
    assert _v(plan, "model_id") == ("Qwen/Qwen2.5-7B", "literal")
    assert plan.get("model_id").span.path.endswith("qlora.json") and plan.get("model_id").span.line == 2
    assert plan.value("per_device_batch") == 2 and plan.value("grad_accum") == 16
    assert plan.value("optimizer") == "paged_adamw_32bit" and plan.value("precision") == "amp-fp16"


def test_a_yaml_config_read_at_run_time_with_interpolation(tmp_path, monkeypatch):
    root = _write(tmp_path, {
        "train.py": """
            import yaml
            from omegaconf import OmegaConf
            from transformers import AutoModelForCausalLM, TrainingArguments, Trainer

            with open("configs/base.yaml") as f:
                raw = yaml.safe_load(f)
            cfg = OmegaConf.load("configs/base.yaml")
            model = AutoModelForCausalLM.from_pretrained(cfg.model.name)
            args = TrainingArguments("out", per_device_train_batch_size=raw["train"]["batch_size"],
                                     gradient_accumulation_steps=cfg.train.get("accum", 1))
            Trainer(model=model, args=args).train()
            """,
        "configs/base.yaml": "model:\n  name: Qwen/Qwen2.5-0.5B\ntrain:\n  batch_size: 6\n  accum: ${train.batch_size}\n",
    })
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.value("model_id") == "Qwen/Qwen2.5-0.5B" and plan.value("per_device_batch") == 6
    assert plan.value("grad_accum") == 6  # ${train.batch_size}


def test_a_package_of_the_checkout_is_followed_and_relative_imports_resolve(tmp_path, monkeypatch):
    root = _write(tmp_path, {
        "mypkg/__init__.py": "",
        "mypkg/configs.py": "MODEL = 'Qwen/Qwen2.5-0.5B'\nfrom .sizes import BATCH\n",
        "mypkg/sizes.py": "BATCH = 3\n",
        "scripts/train.py": """
            from transformers import AutoModelForCausalLM, TrainingArguments, Trainer
            from mypkg.configs import MODEL, BATCH
            model = AutoModelForCausalLM.from_pretrained(MODEL)
            Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=BATCH)).train()
            """,
    })
    plan = _plan(root, "python scripts/train.py", monkeypatch)
    assert plan.value("model_id") == "Qwen/Qwen2.5-0.5B" and plan.value("per_device_batch") == 3
    assert plan.get("per_device_batch").span.path.endswith("sizes.py")


def test_hand_written_padding_in_a_collator_class(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": """
        from transformers import AutoModelForCausalLM, TrainingArguments, Trainer

        class Collator:
            def __init__(self, pad_id, max_len):
                self.pad_id, self.max_len = pad_id, max_len

            def __call__(self, batch):
                lengths = [len(x["input_ids"]) for x in batch]
                longest = min(max(lengths), self.max_len)
                out = []
                for x in batch:
                    pad = longest - len(x["input_ids"])
                    out.append(x["input_ids"] + [self.pad_id] * pad)
                return out

        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o"), data_collator=Collator(0, 1024)).train()
        """})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.value("padding") == "longest" and plan.value("max_length") == 1024


def test_a_pretraining_branch_the_run_does_not_take_does_not_decide_the_padding(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": """
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments, Trainer
        TASK = "sft"

        def group_texts(ids, block):
            return [ids[i : i + block] for i in range(0, len(ids), block)]

        def pretrain_data(tok):
            return group_texts(tok("x")["input_ids"], 4096)

        tok = AutoTokenizer.from_pretrained("gpt2")
        rows = tok(["a"], padding="max_length", max_length=256, truncation=True)
        if TASK == "pretrain":
            rows = pretrain_data(tok)
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o"), train_dataset=rows).train()
        """})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.value("padding") == "max_length" and plan.value("max_length") == 256 and plan.value("packing") is False


def test_a_deepspeed_engine_loop_reads_its_config_dict(tmp_path, monkeypatch):
    root = _write(tmp_path, {
        "utils/ds.py": """
            def get_train_ds_config(offload, dtype, stage=2):
                return {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                        "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu" if offload else "none"}},
                        dtype: {"enabled": True}, "gradient_accumulation_steps": 1}
            """,
        "main.py": """
            import argparse, deepspeed
            from torch.utils.data import DataLoader
            from deepspeed.ops.adam import FusedAdam
            from transformers import AutoModelForCausalLM
            from utils.ds import get_train_ds_config

            p = argparse.ArgumentParser()
            p.add_argument("--model_name_or_path", type=str)
            p.add_argument("--per_device_train_batch_size", type=int, default=16)
            p.add_argument("--zero_stage", type=int, default=0)
            p.add_argument("--offload", action="store_true")
            p = deepspeed.add_config_arguments(p)
            args = p.parse_args()
            ds_config = get_train_ds_config(offload=args.offload, dtype="bf16", stage=args.zero_stage)
            ds_config["train_micro_batch_size_per_gpu"] = args.per_device_train_batch_size
            model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
            loader = DataLoader([], batch_size=args.per_device_train_batch_size)
            optimizer = FusedAdam(model.parameters(), lr=1e-5)
            model, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, args=args, config=ds_config)
            for batch in loader:
                loss = model(**batch).loss
                model.backward(loss)
                model.step()
            """,
    })
    plan = _plan(root, "deepspeed --num_gpus 8 main.py --model_name_or_path meta-llama/Llama-2-7b-hf "
                       "--per_device_train_batch_size 4 --zero_stage 3 --offload --deepspeed", monkeypatch)
    assert plan.value("trainer") == "deepspeed-engine" and plan.value("per_device_batch") == 4
    assert plan.value("distributed") == "zero3" and plan.value("offload") == "optimizer"
    assert plan.value("precision") == "amp-bf16" and plan.value("optimizer") == "deepspeed_adam"
    assert plan.value("num_gpus") == 8 and plan.value("model_id") == "meta-llama/Llama-2-7b-hf"


def test_accelerate_launch_options_shard_and_cast_a_custom_loop(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": """
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM
        acc = Accelerator()
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        opt = torch.optim.AdamW(model.parameters())
        dl = DataLoader([], batch_size=2, shuffle=True)
        model, opt, dl = acc.prepare(model, opt, dl)
        for b in dl:
            acc.backward(model(**b).loss)
            opt.step()
        """})
    plan = _plan(root, "accelerate launch --num_processes 4 --mixed_precision bf16 --use_deepspeed --zero_stage 2 train.py",
                 monkeypatch)
    assert _v(plan, "distributed") == ("zero2", "command-line") and plan.value("num_gpus") == 4
    assert _v(plan, "precision") == ("amp-bf16", "command-line")


def test_memlint_check_and_plan_take_the_command_after_a_double_dash(tmp_path):
    root = _write(tmp_path, {"train.py": _HF})
    cmd = [sys.executable, "-m", "memlint"]
    launch = ["torchrun", "--nproc_per_node", "2", "train.py", "--model_name_or_path", "Qwen/Qwen2.5-0.5B",
              "--per_device_train_batch_size", "2", "--bf16", "True"]
    out = subprocess.run([*cmd, "plan", "--format", "json", "--", *launch], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["plan"]["model_id"]["source"] == "command-line" and doc["estimate"] is not None
    chk = subprocess.run([*cmd, "check", "--gpu", "A100-80GB", "--", *launch], cwd=root, capture_output=True, text=True)
    assert chk.returncode in (0, 1) and "Traceback" not in chk.stderr
    bad = subprocess.run([*cmd, "plan", "--", "torchrun", "missing.py"], cwd=root, capture_output=True, text=True)
    assert bad.returncode == 2 and "missing.py: no such file" in bad.stderr and "Traceback" not in bad.stderr


def test_fire_kwargs_update_dataclass_configs_in_the_checkouts_package(tmp_path, monkeypatch):
    """llama-cookbook's shape: fire.Fire(main), main(**kwargs) updating dataclass configs of a package
    with hasattr/setattr (also `--fsdp_config.pure_bf16`), FSDP wrapping, torch's activation checkpointing."""
    root = _write(tmp_path, {
        "src/cookbook/__init__.py": "",
        "src/cookbook/configs.py": """
            from dataclasses import dataclass
            @dataclass
            class train_config:
                model_name: str = "PATH/to/Model"
                batch_size_training: int = 4
                gradient_accumulation_steps: int = 1
                enable_fsdp: bool = False
            @dataclass
            class fsdp_config:
                pure_bf16: bool = False
            """,
        "src/cookbook/utils.py": """
            def update_config(config, **kwargs):
                if isinstance(config, (tuple, list)):
                    for c in config:
                        update_config(c, **kwargs)
                else:
                    for k, v in kwargs.items():
                        if hasattr(config, k):
                            setattr(config, k, v)
                        elif "." in k:
                            config_name, param_name = k.split(".")
                            if type(config).__name__ == config_name and hasattr(config, param_name):
                                setattr(config, param_name, v)
            """,
        "src/cookbook/finetuning.py": """
            import fire, torch
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
            from torch.utils.data import DataLoader
            from transformers import LlamaForCausalLM
            from cookbook.configs import train_config as TRAIN_CONFIG, fsdp_config as FSDP_CONFIG
            from cookbook.utils import update_config

            def main(**kwargs):
                train_config, fsdp_config = TRAIN_CONFIG(), FSDP_CONFIG()
                update_config((train_config, fsdp_config), **kwargs)
                model = LlamaForCausalLM.from_pretrained(train_config.model_name)
                if fsdp_config.pure_bf16:
                    model.to(torch.bfloat16)
                if train_config.enable_fsdp:
                    model = FSDP(model)
                    apply_activation_checkpointing(model)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
                dl = DataLoader([], batch_size=train_config.batch_size_training)
                for step, batch in enumerate(dl):
                    model(**batch).loss.backward()
                    if (step + 1) % train_config.gradient_accumulation_steps == 0:
                        opt.step()

            if __name__ == "__main__":
                fire.Fire(main)
            """,
    })
    plan = _plan(root, "torchrun --nproc_per_node 8 src/cookbook/finetuning.py --enable_fsdp --model_name "
                       "meta-llama/Llama-3.1-8B --fsdp_config.pure_bf16 --batch_size_training 2", monkeypatch)
    assert _v(plan, "model_id") == ("meta-llama/Llama-3.1-8B", "command-line")
    assert plan.value("per_device_batch") == 2 and plan.value("grad_accum") == 1
    assert plan.value("distributed") == "fsdp" and plan.value("gradient_checkpointing") is True
    assert plan.value("precision") == "pure-bf16" and plan.value("num_gpus") == 8


def test_a_lightning_trainer_reads_precision_strategy_and_devices(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": """
        import argparse, torch
        import lightning.pytorch as pl
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM

        class LM(pl.LightningModule):
            def __init__(self, name):
                super().__init__()
                self.model = AutoModelForCausalLM.from_pretrained(name)
            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-4)
            def train_dataloader(self):
                return DataLoader([], batch_size=self.bs, shuffle=True)

        p = argparse.ArgumentParser()
        p.add_argument("--devices", type=int, nargs="+", default=[0])
        p.add_argument("--precision", default="32")
        a = p.parse_args()
        lm = LM("Qwen/Qwen2.5-0.5B")
        lm.bs = 16
        trainer = pl.Trainer(devices=a.devices, precision=a.precision, strategy="deepspeed_stage_3_offload",
                             accumulate_grad_batches=4)
        trainer.fit(lm)
        """})
    plan = _plan(root, "python train.py --devices 0 1 --precision bf16-mixed", monkeypatch)
    assert plan.value("trainer") == "lightning" and plan.value("model_id") == "Qwen/Qwen2.5-0.5B"
    assert plan.value("precision") == "amp-bf16" and plan.value("num_gpus") == 2 and plan.value("grad_accum") == 4
    assert plan.value("distributed") == "zero3" and plan.value("offload") == "params"
    assert plan.value("per_device_batch") == 16 and plan.value("optimizer") == "adamw_torch"


def test_a_reader_bug_costs_one_file_its_plan_not_a_traceback(tmp_path, monkeypatch):
    from memlint.extract import build

    monkeypatch.setattr(build.Builder, "model_fields", lambda *a, **k: 1 / 0)
    root = _write(tmp_path, {"train.py": _HF})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.diagnostics and plan.diagnostics[0].kind == "unreadable"
    assert "ZeroDivisionError" in plan.notes[0] and "please report" in plan.notes[0]


# ---- always an answer ---------------------------------------------------------------------------------

_UNSIZED = """
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments, Trainer
model = AutoModelForCausalLM.from_pretrained(MODEL)
tok = AutoTokenizer.from_pretrained("x")
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2, bf16=True), tokenizer=tok).train()
"""


def test_an_unknown_max_length_gets_the_longest_sequence_that_fits():
    from memlint.estimate.conditional import conditional
    from memlint.estimate.core import estimate, find_gpu
    from memlint.estimate.from_plan import apply_assumptions, setup_from_plan
    from memlint.extract import extract_source

    plan = extract_source(_UNSIZED.replace("MODEL", "'Qwen/Qwen2.5-0.5B'"), "t.py")
    gpu = find_gpu("RTX4090")
    c = conditional(plan, {}, gpu)
    assert c.kind == "max_seq" and c.unknown == ("max_length",) and c.batch == 2
    n = c.rows[0].max_seq
    assert n and n % 128 == 0
    from memlint.gpu import fit_of

    # fits as every front door says it: with the 10% headroom free
    fits = lambda seq: fit_of(estimate(setup_from_plan(apply_assumptions(plan, [f"max_length={seq}"])[0]).setup), gpu).ok
    assert fits(n) and not fits(n + 128)  # the answer is the boundary, recomputed by the estimator
    assert "fits at micro-batch 2" in c.text() and "RTX4090" in c.text()


def test_an_unknown_model_gets_the_plan_costed_on_common_checkpoints():
    from memlint.estimate.conditional import conditional
    from memlint.estimate.core import find_gpu
    from memlint.extract import extract_source

    from memlint.plan import Value

    plan = extract_source(_UNSIZED.replace("MODEL", "sys.argv[1]"), "t.py")
    plan = plan.with_values(max_length=Value(1024, "assumed"))
    c = conditional(plan, {}, find_gpu("A100-80GB"))
    assert c.kind == "checkpoints" and "model_id" in c.unknown
    assert [r.model for r in c.rows][:2] == ["meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B"]
    assert all(r.peak and r.fits is not None for r in c.rows)
    assert "conditional on the model" in c.text()


def test_an_unknown_micro_batch_gets_the_largest_micro_batch_that_fits():
    from memlint.estimate.conditional import conditional
    from memlint.estimate.core import estimate, find_gpu
    from memlint.estimate.from_plan import apply_assumptions, setup_from_plan
    from memlint.extract import extract_source
    from memlint.gpu import fit_of
    from memlint.plan import Value

    src = _UNSIZED.replace("MODEL", "'Qwen/Qwen2.5-0.5B'").replace("per_device_train_batch_size=2", "per_device_train_batch_size=int(sys.argv[1])")
    plan = extract_source(src, "t.py").with_values(max_length=Value(2048, "assumed"))
    gpu = find_gpu("RTX4090")
    c = conditional(plan, {}, gpu)
    assert c.kind == "max_batch" and c.unknown == ("per_device_batch",) and c.seq == 2048
    b = c.rows[0].max_batch
    fits = lambda n: fit_of(estimate(setup_from_plan(apply_assumptions(plan, [f"per_device_batch={n}"])[0]).setup), gpu).ok
    assert b and fits(b) and not fits(b + 1)  # the boundary, recomputed by the estimator
    assert "largest micro-batch that fits at 2,048 tokens" in c.text()


def test_an_unknown_model_and_micro_batch_get_the_checkpoints_at_micro_batch_1():
    from memlint.estimate.conditional import conditional
    from memlint.estimate.core import find_gpu
    from memlint.extract import extract_source
    from memlint.plan import Value

    src = _UNSIZED.replace("MODEL", "sys.argv[1]").replace("per_device_train_batch_size=2", "per_device_train_batch_size=int(sys.argv[2])")
    plan = extract_source(src, "t.py").with_values(max_length=Value(1024, "assumed"))
    c = conditional(plan, {}, find_gpu("A100-80GB"))
    assert c.kind == "checkpoints" and set(c.unknown) == {"model_id", "per_device_batch"} and c.batch == 1
    assert all(r.peak for r in c.rows) and "at micro-batch 1" in c.text()


def test_require_estimate_fails_a_run_memlint_could_not_size(tmp_path):
    (tmp_path / "train.py").write_text(_UNSIZED.replace("MODEL", "sys.argv[1]"))
    cmd = [sys.executable, "-m", "memlint", "check", "train.py", "--gpu", "RTX4090", "--select", "MEM006"]
    quiet = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert quiet.returncode == 0
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\nrequire-estimate = true\n")
    strict = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert strict.returncode == 1 and "MEM006 error: not sized" in strict.stdout and "require-estimate" in strict.stdout
    plan = subprocess.run([sys.executable, "-m", "memlint", "plan", "--format", "json", "train.py"], cwd=tmp_path,
                          capture_output=True, text=True)
    doc = json.loads(plan.stdout)
    assert doc["estimate"] is None and doc["conditional"]["unknown"]


# ---- shell launchers in a folder walk --------------------------------------------------------------


_LAUNCHER = """
#!/bin/bash
MODEL=Qwen/Qwen2.5-0.5B
NGPU=${NGPU:-2}
echo "training $MODEL"
torchrun --nproc_per_node=$NGPU train.py \\
    --model_name_or_path $MODEL \\
    --per_device_train_batch_size 4 \\
    --bf16 True
"""


def test_a_shell_launcher_is_read_as_the_command_it_runs(tmp_path, monkeypatch):
    from memlint.extract.shell import launches, launcher_targets

    root = _write(tmp_path, {"train.py": _HF, "scripts/run.sh": _LAUNCHER, "scripts/other.sh": "ls -la\n"})
    monkeypatch.chdir(root)
    [launch] = launches(root / "scripts/run.sh", "scripts/run.sh")
    assert launch.launcher == "torchrun" and launch.gpus == 2 and launch.line == 5
    assert launch.argv[:2] == ("--model_name_or_path", "Qwen/Qwen2.5-0.5B")  # variables expanded, defaults taken
    assert launch.line_of("--per_device_train_batch_size 4") == 7  # a continued line keeps each flag's own line
    assert launches(root / "scripts/other.sh", "scripts/other.sh") == []
    [target] = launcher_targets(root / "scripts/run.sh", "scripts/run.sh", [root])
    [plan] = extract_targets([target])
    assert _v(plan, "model_id") == ("Qwen/Qwen2.5-0.5B", "command-line")
    assert _v(plan, "per_device_batch") == (4, "command-line") and plan.get("per_device_batch").span.line == 7
    assert _v(plan, "num_gpus") == (2, "command-line") and plan.via == "scripts/run.sh:5"


def test_a_makefile_recipe_launches_with_make_variables(tmp_path, monkeypatch):
    from memlint.extract.shell import launches

    root = _write(tmp_path, {"train.py": _HF, "Makefile": (
        "BS ?= 8\n"
        "train:\n"
        "\tpython train.py --model_name_or_path gpt2 --per_device_train_batch_size $(BS)\n"
        "lint:\n"
        "\truff check .\n")})
    monkeypatch.chdir(root)
    [launch] = launches(root / "Makefile", "Makefile")
    assert launch.script == "train.py" and launch.argv[-1] == "8" and launch.line == 3


def test_checking_a_folder_reads_each_script_through_its_launchers(tmp_path):
    root = _write(tmp_path, {"train.py": _HF, "scripts/run.sh": _LAUNCHER})
    out = subprocess.run([sys.executable, "-m", "memlint", "plan", "--format", "json", "."], cwd=root,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    docs = json.loads(out.stdout)
    docs = docs if isinstance(docs, list) else [docs]
    via = [d for d in docs if d.get("via")]
    assert via and via[0]["via"] == "scripts/run.sh:5" and via[0]["plan"]["num_gpus"]["value"] == 2
    chk = subprocess.run([sys.executable, "-m", "memlint", "check", "scripts/run.sh", "--gpu", "RTX4090"], cwd=root,
                         capture_output=True, text=True)
    assert chk.returncode in (0, 1) and "Traceback" not in chk.stderr, chk.stderr


def test_a_dataset_calling_super_init_keeps_its_attributes_for_getitem(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": """
        import transformers
        from torch.utils.data import Dataset

        class LazyDataset(Dataset):
            def __init__(self, raw, tokenizer):
                super(LazyDataset, self).__init__()
                self.tokenizer = tokenizer

            def __getitem__(self, i):
                return self.tokenizer([self.raw[i]], padding="max_length", max_length=self.tokenizer.model_max_length)

        model = transformers.AutoModelForCausalLM.from_pretrained("gpt2")
        tok = transformers.AutoTokenizer.from_pretrained("gpt2", model_max_length=1024)
        data = dict(train_dataset=LazyDataset([], tokenizer=tok))
        trainer = transformers.Trainer(model=model, args=transformers.TrainingArguments("o"), **data)
        trainer.train()
    """})
    monkeypatch.chdir(root)
    [plan] = extract_targets([command_target(tokens("python train.py"), root)])
    assert _v(plan, "max_length") == (1024, "literal")


# ---- exec'd configurators, globals(), try around literal_eval --------------------------------------


_CONFIGURATOR = """
import sys
from ast import literal_eval
for arg in sys.argv[1:]:
    if '=' not in arg:
        assert not arg.startswith('--')
        config_file = arg
        exec(open(config_file).read())
    else:
        assert arg.startswith('--')
        key, val = arg.split('=')
        key = key[2:]
        if key in globals():
            try:
                attempt = literal_eval(val)
            except (SyntaxError, ValueError):
                attempt = val
            assert type(attempt) == type(globals()[key])
            globals()[key] = attempt
        else:
            raise ValueError(f"Unknown config key: {key}")
"""

_EXEC_TRAIN = """
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM
model_name = 'gpt2'
batch_size = 12
block_size = 1024
dtype = 'bfloat16'
exec(open('configurator.py').read())
model = AutoModelForCausalLM.from_pretrained(model_name)
loader = DataLoader(range(10), batch_size=batch_size)
opt = torch.optim.AdamW(model.parameters())
for x in loader:
    loss = model(x).loss
    loss.backward()
    opt.step()
"""


def test_an_execd_configurator_applies_config_files_and_key_value_overrides(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _EXEC_TRAIN, "configurator.py": _CONFIGURATOR,
                             "config/small.py": "batch_size = 4\nmodel_name = 'gpt2-medium'\n"})
    plan = _plan(root, "python train.py config/small.py", monkeypatch)
    assert plan.get("per_device_batch").value == 4 and plan.get("per_device_batch").span.path == "config/small.py"
    assert plan.get("model_id").value == "gpt2-medium"
    plan = _plan(root, "python train.py config/small.py --batch_size=32 --model_name=gpt2-large", monkeypatch)
    assert _v(plan, "per_device_batch") == (32, "command-line")   # literal_eval succeeded: the except never ran
    assert _v(plan, "model_id") == ("gpt2-large", "command-line")  # not a literal: the handler's string
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("per_device_batch").value == 12


def test_a_find_all_linear_names_helper_is_peft_all_linear(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": """
        import bitsandbytes as bnb
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        def find_all_linear_names(model):
            names = set()
            for name, module in model.named_modules():
                if isinstance(module, bnb.nn.Linear4bit):
                    names.add(name.split('.')[-1])
            if 'lm_head' in names:
                names.remove('lm_head')
            return list(names)

        model = AutoModelForCausalLM.from_pretrained("EleutherAI/pythia-1b", load_in_4bit=True)
        model = get_peft_model(model, LoraConfig(r=8, target_modules=find_all_linear_names(model)))
    """})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("lora_targets").value == "all-linear"


def test_peft_default_targets_are_per_model_type_data():
    from memlint.catalog import resolve
    from memlint.estimate.from_plan import _targets
    from memlint.library.defaults import lora_default_targets

    assert lora_default_targets("gpt_neox").value == ("query_key_value",)
    assert lora_default_targets("llama").value == ("q_proj", "v_proj")
    assert lora_default_targets("no_such_type") is None

    class _V:
        def __init__(self, value):
            self.value = value

    notes: list[str] = []
    spec = resolve("EleutherAI/pythia-1b")
    assert _targets(lambda f: _V(None), "lora", spec, notes) == ("query_key_value",) and "gpt_neox" in notes[0]
    notes.clear()
    assert _targets(lambda f: _V(["nonexistent_proj"]), "lora", spec, notes) == "all-linear" and "match no" in notes[0]


# ---- Hydra ---------------------------------------------------------------------------------------------


_HYDRA_TRAIN = """
import hydra
import transformers
from omegaconf import DictConfig, open_dict

MODELS = {}

def register(cls):
    MODELS[cls.__name__] = cls

register(transformers.AutoModelForCausalLM)

def get_model(cfg):
    args = cfg.model_args
    with open_dict(args):
        path = args.pop("pretrained_model_name_or_path", None)
    return MODELS[cfg.get("handler", "AutoModelForCausalLM")].from_pretrained(path, **args)

@hydra.main(version_base=None, config_path="../configs", config_name="train.yaml")
def main(cfg: DictConfig):
    model = get_model(cfg.model)
    args = transformers.TrainingArguments(**dict(cfg.trainer.args))
    trainer = transformers.Trainer(model=model, args=args)
    trainer.train()

if __name__ == "__main__":
    main()
"""

_HYDRA_FILES = {
    "src/train.py": _HYDRA_TRAIN,
    "configs/train.yaml": """
        defaults:
          - _self_
          - model: small
          - trainer: finetune
          - experiment: null
        task: ???
    """,
    "configs/model/small.yaml": """
        model_args:
          pretrained_model_name_or_path: Qwen/Qwen2.5-0.5B
          torch_dtype: bfloat16
    """,
    "configs/model/large.yaml": """
        model_args:
          pretrained_model_name_or_path: Qwen/Qwen2.5-7B
          torch_dtype: bfloat16
    """,
    "configs/trainer/finetune.yaml": """
        args:
          output_dir: ${paths.out}/run
          per_device_train_batch_size: 8
          gradient_accumulation_steps: ${trainer.accum}
          bf16: true
        accum: 4
    """,
    "configs/experiment/big.yaml": """
        # @package _global_
        defaults:
          - override /model: large
        trainer:
          args:
            per_device_train_batch_size: 2
        paths:
          out: /tmp
    """,
}


def test_a_hydra_entry_receives_the_composed_config(tmp_path, monkeypatch):
    root = _write(tmp_path, _HYDRA_FILES)
    plan = _plan(root, "python src/train.py task=x", monkeypatch)
    assert plan.get("model_id").value == "Qwen/Qwen2.5-0.5B" and plan.get("model_id").span.path == "configs/model/small.yaml"
    assert plan.get("per_device_batch").value == 8 and plan.get("grad_accum").value == 4  # ${trainer.accum}
    assert plan.get("torch_dtype").value == "bf16"
    # an experiment (package _global_) overrides a group's option and values; the command line has the last word
    plan = _plan(root, "python src/train.py experiment=big trainer.args.gradient_accumulation_steps=16", monkeypatch)
    assert plan.get("model_id").value == "Qwen/Qwen2.5-7B"
    assert plan.get("per_device_batch").value == 2
    assert _v(plan, "grad_accum") == (16, "command-line")
    plan = _plan(root, "python src/train.py model=large", monkeypatch)  # a group chosen on the command line
    assert plan.get("model_id").value == "Qwen/Qwen2.5-7B"


def test_hydra_composition_never_raises_on_missing_or_cyclic_configs(tmp_path, monkeypatch):
    files = dict(_HYDRA_FILES)
    files["configs/train.yaml"] = "defaults:\n  - model: missing\n  - loop\n"
    files["configs/loop.yaml"] = "defaults:\n  - loop\n"
    root = _write(tmp_path, files)
    plan = _plan(root, "python src/train.py", monkeypatch)
    assert not plan.get("model_id").known
    assert any("missing.yaml not found" in n for n in plan.notes)


# ---- framework tools' command-line overrides ---------------------------------------------------------


_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "configs"


@pytest.mark.parametrize("command, field, value", [
    ("axolotl train {dir}/axolotl_llama3_qlora.yml --micro_batch_size 3", "per_device_batch", 3),
    ("axolotl train {dir}/axolotl_llama3_qlora.yml --sequence_len=512", "max_length", 512),
    ("llamafactory-cli train {dir}/llamafactory_llama3_lora_sft.yaml per_device_train_batch_size=5", "per_device_batch", 5),
    ("tune run lora_finetune_single_device --config {dir}/torchtune_llama3_1_8B_qlora_single_device.yaml batch_size=7",
     "per_device_batch", 7),
    ("oumi train -c {dir}/oumi_qwen_qlora_train.yaml --training.per_device_train_batch_size 6", "per_device_batch", 6),
    ("litgpt finetune_lora --config {dir}/litgpt_llama3_qlora.yaml --train.micro_batch_size 9", "per_device_batch", 9),
])
def test_a_framework_tools_overrides_apply_to_its_config(command, field, value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    [plan] = extract_targets([command_target(tokens(command.format(dir=_FIXTURES)), tmp_path)])
    assert _v(plan, field) == (value, "command-line")
    [plain] = extract_targets([command_target(tokens(command.format(dir=_FIXTURES).rsplit(" ", 1)[0]
                                                     if "=" in command.rsplit(" ", 1)[1] else
                                                     command.format(dir=_FIXTURES).rsplit(" ", 2)[0]), tmp_path)])
    assert plain.get(field).value != value and plain.get(field).source != "command-line"


def test_litgpt_without_a_config_reads_its_defaults_and_the_commands_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmd = "litgpt finetune_full meta-llama/Llama-3.2-1B --train.micro_batch_size 2 --train.max_seq_length 512"
    [plan] = extract_targets([command_target(tokens(cmd), tmp_path)])
    assert _v(plan, "model_id") == ("meta-llama/Llama-3.2-1B", "command-line")
    assert plan.get("method").value == "full"
    assert _v(plan, "per_device_batch") == (2, "command-line") and _v(plan, "max_length") == (512, "command-line")
    [lora] = extract_targets([command_target(tokens("litgpt finetune meta-llama/Llama-3.2-1B"), tmp_path)])
    assert lora.get("method").value == "lora"  # `litgpt finetune` is finetune_lora


def test_click_options_reach_a_kwargs_entry_and_read_the_command(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": """
        import click
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        def train(*, input_model, per_device_train_batch_size, bf16, gradient_checkpointing):
            model = AutoModelForCausalLM.from_pretrained(input_model)
            args = TrainingArguments("o", per_device_train_batch_size=per_device_train_batch_size, bf16=bf16,
                                     gradient_checkpointing=gradient_checkpointing)
            Trainer(model=model, args=args).train()

        @click.command()
        @click.option("--input-model", type=str, default="gpt2")
        @click.option("--per-device-train-batch-size", type=int, default=8)
        @click.option("--bf16", type=bool, default=None)
        @click.option("--gradient-checkpointing/--no-gradient-checkpointing", default=True)
        def main(**kwargs):
            train(**kwargs)

        if __name__ == "__main__":
            main()
    """})
    plan = _plan(root, "python train.py --input-model EleutherAI/pythia-1b --per-device-train-batch-size 6 --bf16 true",
                 monkeypatch)
    assert _v(plan, "model_id") == ("EleutherAI/pythia-1b", "command-line")
    assert _v(plan, "per_device_batch") == (6, "command-line") and plan.get("precision").value == "amp-bf16"
    assert _v(plan, "gradient_checkpointing") == (True, "click-default")
    plan = _plan(root, "python train.py", monkeypatch)
    assert _v(plan, "per_device_batch") == (8, "click-default") and plan.get("model_id").value == "gpt2"


def test_a_parser_subclass_and_an_accumulation_plugin(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": """
        from dataclasses import dataclass, field
        import torch
        from accelerate import Accelerator
        from accelerate.utils import GradientAccumulationPlugin
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM, HfArgumentParser

        class ArgumentParserPlus(HfArgumentParser):
            def parse_yaml_and_args(self, path):
                return None

        @dataclass
        class Args:
            model_name_or_path: str = "gpt2"
            per_device_train_batch_size: int = 2
            gradient_accumulation_steps: int = 1

        args, = ArgumentParserPlus((Args,)).parse_args_into_dataclasses()
        acc = Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=args.gradient_accumulation_steps))
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
        loader = DataLoader([], batch_size=args.per_device_train_batch_size, shuffle=True)
        opt = torch.optim.AdamW(model.parameters())
        model, opt, loader = acc.prepare(model, opt, loader)
        for batch in loader:
            with acc.accumulate(model):
                acc.backward(model(**batch).loss)
                opt.step()
    """})
    plan = _plan(root, "python train.py --model_name_or_path Qwen/Qwen2.5-0.5B --gradient_accumulation_steps 4", monkeypatch)
    assert _v(plan, "model_id") == ("Qwen/Qwen2.5-0.5B", "command-line")
    assert _v(plan, "grad_accum") == (4, "command-line") and plan.get("per_device_batch").value == 2


def test_dotted_argparse_dests_hierarchized_into_namespaces(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": """
        import argparse
        from types import SimpleNamespace
        import deepspeed
        from transformers import AutoModelForCausalLM

        def hierarchize(args):
            root = {}
            for k, v in vars(args).items():
                parts = k.split(".")
                node = root
                for p in parts[:-1]:
                    node = node.setdefault(p, {})
                node[parts[-1]] = v

            def build(x):
                if isinstance(x, dict):
                    return SimpleNamespace(**{k: build(v) for k, v in x.items()})
                return x
            return build(root)

        parser = argparse.ArgumentParser()
        parser.add_argument("--model.name_or_path", type=str, default="gpt2")
        parser.add_argument("--train.micro_batch_size", type=int, default=8)
        parser.add_argument("--ds.zero_stage", type=int, default=2)
        args = hierarchize(parser.parse_args())
        model = AutoModelForCausalLM.from_pretrained(args.model.name_or_path)
        config = {"train_micro_batch_size_per_gpu": args.train.micro_batch_size, "bf16": {"enabled": True},
                  "zero_optimization": {"stage": args.ds.zero_stage}}
        engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        for batch in []:
            engine.backward(engine(**batch).loss)
            engine.step()
    """})
    plan = _plan(root, "deepspeed train.py --model.name_or_path Qwen/Qwen2.5-0.5B --train.micro_batch_size 2", monkeypatch)
    assert _v(plan, "model_id") == ("Qwen/Qwen2.5-0.5B", "command-line")
    assert plan.get("per_device_batch").value == 2 and plan.get("distributed").value == "zero2"


def test_a_vendored_copy_of_the_trainer_is_the_library_trainer(tmp_path, monkeypatch):
    root = _write(tmp_path, {
        "trainer.py": """
            class Trainer:
                def __init__(self, model=None, args=None, **kw):
                    self.model = model
                def training_step(self, model, inputs):
                    return None
                def train(self):
                    return None
        """,
        "trainer_seq2seq.py": "from trainer import Trainer\n\nclass Seq2SeqTrainer(Trainer):\n    pass\n",
        "main.py": """
            from transformers import AutoModelForCausalLM, Seq2SeqTrainingArguments
            from trainer_seq2seq import Seq2SeqTrainer
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            args = Seq2SeqTrainingArguments("o", per_device_train_batch_size=3)
            Seq2SeqTrainer(model=model, args=args).train()
        """})
    plan = _plan(root, "python main.py", monkeypatch)
    assert plan.get("trainer").value == "Seq2SeqTrainer" and plan.get("per_device_batch").value == 3


def test_zero_on_one_gpu_keeps_the_fp32_master_copy():
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.plan import TrainingPlan, Value

    fields = {"model_id": Value("Qwen/Qwen2.5-0.5B", "literal"), "method": Value("full", "literal"),
              "per_device_batch": Value(1, "literal"), "max_length": Value(512, "literal"),
              "precision": Value("amp-bf16", "literal"), "distributed": Value("zero2", "literal"),
              "trainer": Value("deepspeed-engine", "literal")}
    planned = setup_from_plan(TrainingPlan("t.py", fields))
    assert planned.setup.precision == "master-fp32" and planned.setup.shard == "none"


def test_a_collate_function_in_the_scripts_own_package_pads_tensors_by_hand(tmp_path, monkeypatch):
    # New2World/pretrained-LLM-practice myutils/data.py: torch.full((1, longest - l), pad) in a
    # collate_fn the script imports and passes through functools.partial (never called in the script)
    root = _write(tmp_path, {
        "myutils/__init__.py": "",
        "myutils/data.py": """
            import torch
            import torch.nn.functional as F

            def collate(batch, pad_token_id):
                longest = max(x["input_ids"].size(-1) for x in batch)
                ids = []
                for i in range(len(batch)):
                    l = batch[i]["input_ids"].size(-1)
                    ids.append(torch.concat([batch[i]["input_ids"], torch.full((1, longest - l), pad_token_id)], dim=-1))
                return {"input_ids": torch.concat(ids)}

            def collate_fixed(batch):
                return [F.pad(x, (0, 512 - x.size(-1)), value=0) for x in batch]
            """,
        "train.py": """
            from functools import partial
            import torch
            from torch.utils.data import DataLoader
            from transformers import AutoModelForCausalLM
            from myutils.data import {name}

            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
            dl = DataLoader([], batch_size=2, collate_fn={fn})
            opt = torch.optim.AdamW(model.parameters())
            for batch in dl:
                model(**batch).loss.backward()
                opt.step()
            """.replace("{name}", "collate").replace("{fn}", "partial(collate, pad_token_id=0)"),
        "fixed.py": """
            import torch
            from torch.utils.data import DataLoader
            from transformers import AutoModelForCausalLM
            from myutils.data import collate_fixed

            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
            opt = torch.optim.AdamW(model.parameters())
            for batch in DataLoader([], batch_size=2, collate_fn=collate_fixed):
                model(**batch).loss.backward()
                opt.step()
            """,
    })
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.value("padding") == "longest" and plan.get("padding").span.path.endswith("data.py")
    plan = _plan(root, "python fixed.py", monkeypatch)
    assert plan.value("padding") == "max_length" and plan.value("max_length") == 512
