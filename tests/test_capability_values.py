"""How values flow through a script into the plan (issue #27, "Value flow"): CLI libraries that fill a
function's parameters from the launch command (fastcore's @call_parse, tyro, jsonargparse, fire, typer),
arguments handed on with **locals() / **vars(args) and read back as args["key"] / args.key, branches on
values memlint can or cannot read, keyword dicts and attribute writes, config objects built in code,
config files loaded and merged, and computed values. Synthetic scripts written from the pattern; no
public file is copied."""

from memlint.extract import extract_file, extract_source
from memlint.extract.launch import parse_command
from checkouts import write_checkout


_write = write_checkout


def _plan(tmp_path, monkeypatch, files: dict[str, str], command: list[str] | None = None, script: str = "train.py"):
    _write(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    launch = parse_command(command) if command else None
    return extract_file(tmp_path / script, launch=launch)


def _values(plan, *names):
    return {n: plan.fields[n].value for n in names}


# ---- 1. CLI libraries ------------------------------------------------------------------------------

_CALL_PARSE = '''import torch
import torch.multiprocessing as mp
from fastcore.script import Param, bool_arg, call_parse, store_true
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
from transformers import AutoModelForCausalLM


def train_main(rank, world_size, args):
    model = AutoModelForCausalLM.from_pretrained(args["model_name"], torch_dtype=torch.bfloat16)
    if args["sharding"] == "full_shard":
        strategy = ShardingStrategy.FULL_SHARD
    elif args["sharding"] == "shard_grad_op":
        strategy = ShardingStrategy.SHARD_GRAD_OP
    else:
        raise ValueError("unknown sharding")
    model = FSDP(model, sharding_strategy=strategy)
    if args["checkpointing"]:
        model.gradient_checkpointing_enable()
    loader = torch.utils.data.DataLoader(range(10), batch_size=args["batch_size"])
    opt = torch.optim.AdamW(model.parameters())
    for i, batch in enumerate(loader):
        ids = batch[:, :args["context_length"]]
        loss = model(ids).loss
        loss.backward()
        step_now = (i + 1) % args["gradient_accumulation_steps"] == 0
        if step_now:
            opt.step()


def run(world_size: int = -1, model_name: str = "gpt2", batch_size: int = 1, context_length: int = 512,
        gradient_accumulation_steps: int = 1, sharding: str = "full_shard", checkpointing: bool = False):
    args = dict(locals())
    mp.spawn(train_main, args=(world_size, args), nprocs=torch.cuda.device_count(), join=True)


@call_parse()
def main(
    world_size: int = -1,  # GPUs
    model_name: str = "gpt2",
    batch_size: int = 1,
    context_length: int = 512,
    gradient_accumulation_steps: int = 1,
    sharding: Param("", choices=["full_shard", "shard_grad_op"]) = "full_shard",
    checkpointing: bool_arg = False,
    verbose: store_true = False,
):
    run(**locals())
'''


def test_fastcore_call_parse_entry_reads_the_command_through_locals_and_mp_spawn(tmp_path, monkeypatch):
    # @call_parse() def main(...): fastcore builds an argparse parser from the signature and runs main as it is
    # decorated; main hands everything on with **locals(), the callee keeps dict(locals()) and spawns one process
    # per GPU with it; the values are read back as args["key"] (branches, a slice bound, a modulo test)
    plan = _plan(tmp_path, monkeypatch, {"train.py": _CALL_PARSE},
                 ["python", "train.py", "--model_name", "meta-llama/Llama-2-7b-hf", "--batch_size", "2",
                  "--context_length", "1024", "--gradient_accumulation_steps", "4", "--sharding", "shard_grad_op",
                  "--checkpointing", "true"])
    assert _values(plan, "model_id", "per_device_batch", "max_length", "grad_accum", "distributed",
                   "gradient_checkpointing") == {
        "model_id": "meta-llama/Llama-2-7b-hf", "per_device_batch": 2, "max_length": 1024, "grad_accum": 4,
        "distributed": "fsdp_shard_grad_op", "gradient_checkpointing": True}
    assert plan.fields["model_id"].source == "command-line"


def test_fastcore_call_parse_without_the_flags_keeps_the_signature_defaults(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {"train.py": _CALL_PARSE}, ["python", "train.py"])
    assert _values(plan, "model_id", "per_device_batch", "max_length", "grad_accum", "distributed",
                   "gradient_checkpointing") == {
        "model_id": "gpt2", "per_device_batch": 1, "max_length": 512, "grad_accum": 1, "distributed": "fsdp",
        "gradient_checkpointing": False}
    assert plan.fields["model_id"].source == "function-default"


def test_bare_call_parse_decorator_and_a_flag_annotated_bool(tmp_path, monkeypatch):
    src = '''from fastcore.script import call_parse
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


@call_parse
def main(model: str = "gpt2", bs: int = 8, gc: bool = False):
    m = AutoModelForCausalLM.from_pretrained(model)
    args = TrainingArguments("out", per_device_train_batch_size=bs, gradient_checkpointing=gc)
    Trainer(model=m, args=args).train()
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["python", "train.py", "--model", "facebook/opt-125m", "--gc"])
    assert _values(plan, "model_id", "per_device_batch", "gradient_checkpointing") == {
        "model_id": "facebook/opt-125m", "per_device_batch": 8, "gradient_checkpointing": True}


_TYRO = '''from dataclasses import dataclass, field
from typing import Optional

import torch
import tyro
from peft import LoraConfig
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


@dataclass
class ScriptArguments:
    base_model_name: Optional[str] = field(default="gpt2")
    max_length: Optional[int] = field(default=1024)
    sanity_check: Optional[bool] = field(default=False)
    training_args: TrainingArguments = field(
        default_factory=lambda: TrainingArguments(
            output_dir="./out",
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            fp16=True,
        )
    )
    peft_config: LoraConfig = field(default_factory=lambda: LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM"))


script_args = tyro.cli(ScriptArguments)
model = AutoModelForCausalLM.from_pretrained(script_args.base_model_name, torch_dtype=torch.bfloat16)
from peft import get_peft_model
model = get_peft_model(model, script_args.peft_config)
trainer = Trainer(model=model, args=script_args.training_args)
trainer.train()
'''


def test_tyro_dataclass_with_default_factory_objects_and_nested_flags(tmp_path, monkeypatch):
    # tyro.cli(ScriptArguments): field defaults, default_factory=lambda: TrainingArguments(...) / LoraConfig(...)
    # built as the defaults, `--field value` and `--training_args.field value` / `--peft_config.x a b` over them
    plan = _plan(tmp_path, monkeypatch, {"train.py": _TYRO},
                 ["python", "train.py", "--base_model_name", "meta-llama/Llama-2-7b-hf", "--sanity_check", "False",
                  "--training_args.per_device_train_batch_size", "8", "--training-args.output-dir", "/tmp/x",
                  "--peft_config.target_modules", "q_proj", "v_proj"])
    assert _values(plan, "model_id", "method", "lora_r", "lora_targets", "per_device_batch", "grad_accum") == {
        "model_id": "meta-llama/Llama-2-7b-hf", "method": "lora", "lora_r": 16, "lora_targets": ["q_proj", "v_proj"],
        "per_device_batch": 8, "grad_accum": 2}
    assert plan.fields["per_device_batch"].source == "command-line"


def test_tyro_without_a_command_reads_the_factory_defaults(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {"train.py": _TYRO})
    assert _values(plan, "model_id", "lora_r", "per_device_batch", "grad_accum") == {
        "model_id": "gpt2", "lora_r": 16, "per_device_batch": 4, "grad_accum": 2}


def test_tyro_cli_of_a_function(tmp_path, monkeypatch):
    src = '''import tyro
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


def main(model_name: str = "gpt2", batch_size: int = 2, gradient_checkpointing: bool = False) -> None:
    m = AutoModelForCausalLM.from_pretrained(model_name)
    a = TrainingArguments("out", per_device_train_batch_size=batch_size, gradient_checkpointing=gradient_checkpointing)
    Trainer(model=m, args=a).train()


if __name__ == "__main__":
    tyro.cli(main)
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src},
                 ["python", "train.py", "--model-name", "facebook/opt-350m", "--batch-size", "16", "--gradient-checkpointing"])
    assert _values(plan, "model_id", "per_device_batch", "gradient_checkpointing") == {
        "model_id": "facebook/opt-350m", "per_device_batch": 16, "gradient_checkpointing": True}


def test_jsonargparse_cli_of_a_function_with_a_config_file(tmp_path, monkeypatch):
    src = '''from jsonargparse import CLI
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


def main(model_name: str = "gpt2", batch_size: int = 2, max_steps: int = 10):
    m = AutoModelForCausalLM.from_pretrained(model_name)
    Trainer(model=m, args=TrainingArguments("out", per_device_train_batch_size=batch_size)).train()


if __name__ == "__main__":
    CLI(main)
'''
    files = {"train.py": src, "configs/run.yaml": "model_name: facebook/opt-125m\nbatch_size: 4\n"}
    plan = _plan(tmp_path, monkeypatch, files, ["python", "train.py", "--config", "configs/run.yaml", "--batch_size", "6"])
    assert _values(plan, "model_id", "per_device_batch") == {"model_id": "facebook/opt-125m", "per_device_batch": 6}


def test_fire_entry_and_a_function_called_with_vars_of_parsed_args(tmp_path, monkeypatch):
    # argparse at module level, then train(**vars(args)) into the script's own function with named parameters
    src = '''import argparse
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--model_name", default="gpt2")
parser.add_argument("--batch_size", type=int, default=4)
parser.add_argument("--max_seq_length", type=int, default=256)
args = parser.parse_args()


def train(model_name, batch_size, **kwargs):
    m = AutoModelForCausalLM.from_pretrained(model_name)
    Trainer(model=m, args=TrainingArguments("out", per_device_train_batch_size=batch_size)).train()
    return kwargs["max_seq_length"]


train(**vars(args))
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["python", "train.py", "--model_name", "facebook/opt-1.3b",
                                                            "--batch_size", "3"])
    assert _values(plan, "model_id", "per_device_batch", "max_length") == {
        "model_id": "facebook/opt-1.3b", "per_device_batch": 3, "max_length": 256}


def test_argparse_in_a_module_of_a_folder_without_init(tmp_path, monkeypatch):
    # `from utils import args_utils` where utils/ has no __init__.py (a namespace package): the module's
    # parser and the store_true flag it declares are read; a flag not on the command line is False
    files = {
        "setup.py": "",
        "utils/args_utils.py": '''import argparse


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2")
    p.add_argument("--activation_checkpointing", action="store_true")
    return p.parse_args(argv)


def check(args):
    args.save_dir = "out"
    return args
''',
        "train.py": '''from utils import args_utils
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

args = args_utils.check(args_utils.parse(None))
model = AutoModelForCausalLM.from_pretrained(args.model)
if args.activation_checkpointing:
    model.gradient_checkpointing_enable()
Trainer(model=model, args=TrainingArguments("out")).train()
'''}
    plan = _plan(tmp_path, monkeypatch, files, ["python", "train.py", "--model", "facebook/opt-125m"])
    assert _values(plan, "model_id", "gradient_checkpointing") == {"model_id": "facebook/opt-125m",
                                                                   "gradient_checkpointing": False}
    plan = _plan(tmp_path, monkeypatch, files, ["python", "train.py", "--activation_checkpointing"])
    assert _values(plan, "model_id", "gradient_checkpointing") == {"model_id": "gpt2", "gradient_checkpointing": True}


# ---- 2. branching on values memlint can or cannot read ----------------------------------------------

_OPT_CHAIN = '''import argparse
import torch
import bitsandbytes as bnb
from transformers import AutoModelForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--optimizer", default="adam")
p.add_argument("--activation_checkpointing", action="store_true")
args = p.parse_args()
model = AutoModelForCausalLM.from_pretrained("gpt2")
if args.activation_checkpointing:
    model.gradient_checkpointing_enable()
if args.optimizer.lower() == "adam":
    optimizer = torch.optim.AdamW(model.parameters())
elif args.optimizer.lower() == "sgd":
    optimizer = torch.optim.SGD(model.parameters())
elif args.optimizer.lower() == "adam8bit":
    optimizer = bnb.optim.Adam8bit(model.parameters())
else:
    raise ValueError(f"Optimizer {args.optimizer} not supported")
for batch in range(10):
    model(batch).loss.backward()
    optimizer.step()
'''


def test_an_elif_chain_on_a_known_option_takes_its_branch(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {"train.py": _OPT_CHAIN}, ["python", "train.py", "--optimizer", "SGD"])
    assert _values(plan, "optimizer", "gradient_checkpointing") == {"optimizer": "sgd", "gradient_checkpointing": False}


def test_an_elif_chain_on_an_unknown_option_keeps_every_candidate():
    # read without a command and with the option's default unknown: every branch is a candidate, the
    # plan does not commit to one of them silently
    src = _OPT_CHAIN.replace('p.add_argument("--optimizer", default="adam")', 'p.add_argument("--optimizer", required=True)')
    plan = extract_source(src, "train.py")
    v = plan.fields["optimizer"]
    assert set(v.candidates) == {"adamw_torch", "sgd", "adamw_bnb_8bit"}


def test_an_unknown_guard_that_raises_does_not_end_the_file():
    src = '''import os
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

if not torch.cuda.is_available():
    raise RuntimeError("needs a GPU")
if os.environ.get("SOME_FLAG") == "1":
    raise SystemExit(0)
model = AutoModelForCausalLM.from_pretrained("gpt2")
Trainer(model=model, args=TrainingArguments("out", per_device_train_batch_size=3)).train()
'''
    plan = extract_source(src, "train.py")
    assert _values(plan, "model_id", "per_device_batch") == {"model_id": "gpt2", "per_device_batch": 3}


def test_fsdp_sharding_from_an_unknown_chain_is_every_candidate():
    src = '''import os
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
from transformers import AutoModelForCausalLM

mode = os.environ["SHARDING"]
if mode == "full":
    s = ShardingStrategy.FULL_SHARD
elif mode == "grad":
    s = ShardingStrategy.SHARD_GRAD_OP
model = FSDP(AutoModelForCausalLM.from_pretrained("gpt2"), sharding_strategy=s)
opt = torch.optim.AdamW(model.parameters())
for b in range(3):
    model(b).loss.backward()
    opt.step()
'''
    v = extract_source(src, "train.py").fields["distributed"]
    assert set(v.candidates) == {"fsdp", "fsdp_shard_grad_op"}


def test_a_loop_counter_is_not_its_first_value_and_continue_skips_to_the_step(tmp_path, monkeypatch):
    # `global_step += 1` ... `if global_step % accum != 0: continue` then optimizer.step(): accumulation over
    # `accum` micro-batches, with accum a global batch divided by micro-batch x world size
    src = '''import argparse
import os
import torch
from transformers import AutoModelForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--batch_size", type=int, default=8)
p.add_argument("--total_batch_size", type=int, default=None)
p.add_argument("--gradient_accumulation", type=int, default=None)
args = p.parse_args()
world_size = int(os.environ["WORLD_SIZE"])
if args.total_batch_size is not None:
    if args.gradient_accumulation is None:
        args.gradient_accumulation = args.total_batch_size // (args.batch_size * world_size)
model = AutoModelForCausalLM.from_pretrained("gpt2")
optimizer = torch.optim.AdamW(model.parameters())
loader = torch.utils.data.DataLoader(range(100), batch_size=args.batch_size)
global_step = 0
for batch in loader:
    global_step += 1
    loss = model(batch).loss / args.gradient_accumulation
    loss.backward()
    if global_step % args.gradient_accumulation != 0:
        continue
    optimizer.step()
    optimizer.zero_grad()
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src},
                 ["torchrun", "--nproc_per_node", "8", "train.py", "--batch_size", "16", "--total_batch_size", "512"])
    assert _values(plan, "per_device_batch", "grad_accum") == {"per_device_batch": 16, "grad_accum": 4}
    # the world size left to the launch environment (plain python): the accumulation is unknown, not 1
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["python", "train.py", "--batch_size", "16",
                                                            "--total_batch_size", "512"])
    assert plan.fields["grad_accum"].value is None


# ---- 3. keyword dicts and attribute writes -----------------------------------------------------------

def test_keyword_dicts_spread_into_calls():
    src = '''import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from trl import SFTConfig, SFTTrainer

quant_kwargs = dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
model_kwargs = {"torch_dtype": torch.bfloat16, "quantization_config": BitsAndBytesConfig(**quant_kwargs)}
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", **model_kwargs)
cfg = SFTConfig(output_dir="out", max_seq_length=2048, per_device_train_batch_size=2)
SFTTrainer(model=model, args=cfg).train()
'''
    plan = extract_source(src, "train.py")
    assert _values(plan, "quant_bits", "torch_dtype", "max_length", "per_device_batch") == {
        "quant_bits": 4, "torch_dtype": "bf16", "max_length": 2048, "per_device_batch": 2}


def test_attribute_writes_after_construction(tmp_path, monkeypatch):
    # a length argument the trainer's own code reads, set after the arguments are built; a part of the model
    # switched to recompute by attribute; setattr with a literal name
    files = {"setup.py": "", "mylib/__init__.py": '''from transformers import TrainingArguments


class MyConfig(TrainingArguments):
    pass


def defaults(run_name):
    return MyConfig(output_dir="out", run_name=run_name, gradient_checkpointing=False)
''', "train.py": '''import mylib
from transformers import AutoModelForCausalLM, Trainer

model = AutoModelForCausalLM.from_pretrained("gpt2")
model.config.use_cache = False
model.transformer.gradient_checkpointing = True
training_args = mylib.defaults(run_name="x")
training_args.per_device_train_batch_size = 8
training_args.max_seq_len = 4096
setattr(training_args, "gradient_accumulation_steps", 4)
Trainer(model=model, args=training_args).train()
'''}
    plan = _plan(tmp_path, monkeypatch, files, ["python", "train.py"])
    assert _values(plan, "per_device_batch", "grad_accum", "max_length", "gradient_checkpointing") == {
        "per_device_batch": 8, "grad_accum": 4, "max_length": 4096, "gradient_checkpointing": True}


# ---- 4. computed values -----------------------------------------------------------------------------

def test_precision_flags_computed_from_a_dtype():
    src = '''import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

dtype = torch.bfloat16
model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=dtype)
bf16 = dtype == torch.bfloat16
args = TrainingArguments("out", bf16=bf16, fp16=not bf16)
Trainer(model=model, args=args).train()
'''
    plan = extract_source(src, "train.py")
    assert _values(plan, "torch_dtype", "precision") == {"torch_dtype": "bf16", "precision": "amp-bf16"}


def test_world_size_from_the_launch_environment_divides_the_global_batch(tmp_path, monkeypatch):
    src = '''import os
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

batch_size = 128
micro_batch_size = 4
world_size = int(os.environ.get("WORLD_SIZE", 1))
gradient_accumulation_steps = batch_size // micro_batch_size
ddp = world_size != 1
if ddp:
    gradient_accumulation_steps = gradient_accumulation_steps // world_size
model = AutoModelForCausalLM.from_pretrained("gpt2")
args = TrainingArguments("out", per_device_train_batch_size=micro_batch_size,
                         gradient_accumulation_steps=gradient_accumulation_steps)
Trainer(model=model, args=args).train()
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["torchrun", "--nproc_per_node=2", "train.py"])
    assert _values(plan, "per_device_batch", "grad_accum") == {"per_device_batch": 4, "grad_accum": 16}
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["python", "train.py"])
    assert _values(plan, "grad_accum") == {"grad_accum": 32}


# ---- 5. config objects built in code ------------------------------------------------------------------

def test_a_deepspeed_dict_built_in_code_with_its_optimizer_block(tmp_path, monkeypatch):
    src = '''import deepspeed
import torch
from transformers import AutoModelForCausalLM

ds_config = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 8,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
}
model = AutoModelForCausalLM.from_pretrained("gpt2")
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
for batch in range(10):
    loss = engine(batch).loss
    engine.backward(loss)
    engine.step()
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["deepspeed", "--num_gpus", "4", "train.py"])
    assert _values(plan, "per_device_batch", "grad_accum", "distributed", "optimizer", "precision") == {
        "per_device_batch": 2, "grad_accum": 8, "distributed": "zero2", "optimizer": "deepspeed_adam",
        "precision": "amp-bf16"}


def test_accelerate_plugins_and_mixed_precision_built_in_code(tmp_path, monkeypatch):
    src = '''import torch
from accelerate import Accelerator, DeepSpeedPlugin
from transformers import AutoModelForCausalLM

plugin = DeepSpeedPlugin(zero_stage=3, gradient_accumulation_steps=2, offload_optimizer_device="cpu")
accelerator = Accelerator(mixed_precision="bf16", deepspeed_plugin=plugin, gradient_accumulation_steps=2)
model = AutoModelForCausalLM.from_pretrained("gpt2")
optimizer = torch.optim.AdamW(model.parameters())
loader = torch.utils.data.DataLoader(range(10), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.accumulate(model):
        loss = model(batch).loss
        accelerator.backward(loss)
        optimizer.step()
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["accelerate", "launch", "--num_processes", "2", "train.py"])
    assert _values(plan, "per_device_batch", "grad_accum", "distributed", "precision") == {
        "per_device_batch": 4, "grad_accum": 2, "distributed": "zero3", "precision": "amp-bf16"}


def test_a_deepspeed_dict_handed_to_training_arguments(tmp_path, monkeypatch):
    src = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

ds = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}}
args = TrainingArguments("out", per_device_train_batch_size=2, bf16=True, deepspeed=ds)
Trainer(model=AutoModelForCausalLM.from_pretrained("gpt2"), args=args).train()
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["deepspeed", "--num_gpus", "2", "train.py"])
    assert _values(plan, "per_device_batch", "distributed") == {"per_device_batch": 2, "distributed": "zero3"}


# ---- 6. config files loaded and merged ----------------------------------------------------------------

def test_yaml_sections_merged_and_updated(tmp_path, monkeypatch):
    src = '''import sys
import yaml
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

with open("configs/exp.yaml") as f:
    cfg = yaml.safe_load(f)
exp = "small"
conf = {**cfg["global"], **cfg[exp]}
conf.update({"grad_accum": 4})
model = AutoModelForCausalLM.from_pretrained(conf["model"])
args = TrainingArguments("out", per_device_train_batch_size=conf["batch_size"],
                         gradient_accumulation_steps=conf["grad_accum"])
Trainer(model=model, args=args).train()
'''
    files = {"train.py": src, "configs/exp.yaml": "global:\n  model: gpt2\n  batch_size: 8\n  grad_accum: 1\n"
                                                   "small:\n  batch_size: 2\nlarge:\n  batch_size: 1\n"}
    plan = _plan(tmp_path, monkeypatch, files)
    assert _values(plan, "model_id", "per_device_batch", "grad_accum") == {
        "model_id": "gpt2", "per_device_batch": 2, "grad_accum": 4}


def test_omegaconf_merge_of_a_file_and_the_command_line(tmp_path, monkeypatch):
    src = '''from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

base = OmegaConf.load("configs/base.yaml")
cfg = OmegaConf.merge(base, OmegaConf.create({"train": {"batch_size": 16}}))
model = AutoModelForCausalLM.from_pretrained(cfg.model.name)
Trainer(model=model, args=TrainingArguments("out", per_device_train_batch_size=cfg.train.batch_size)).train()
'''
    files = {"train.py": src, "configs/base.yaml": "model:\n  name: gpt2\ntrain:\n  batch_size: 4\n"}
    plan = _plan(tmp_path, monkeypatch, files)
    assert _values(plan, "model_id", "per_device_batch") == {"model_id": "gpt2", "per_device_batch": 16}


def test_a_default_config_path_on_the_authors_machine_is_read_from_the_checkout(tmp_path, monkeypatch):
    src = '''import argparse
import json
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--config", default="/home/alice/projects/tuner/configs/train.json")
args = p.parse_args()
with open(args.config) as f:
    cfg = json.load(f)
model = AutoModelForCausalLM.from_pretrained(cfg["model"])
Trainer(model=model, args=TrainingArguments("out", per_device_train_batch_size=cfg["bs"])).train()
'''
    files = {"setup.py": "", "train.py": src, "configs/train.json": '{"model": "gpt2", "bs": 6}'}
    plan = _plan(tmp_path, monkeypatch, files, ["python", "train.py"])
    assert _values(plan, "model_id", "per_device_batch") == {"model_id": "gpt2", "per_device_batch": 6}
    assert any("configs/train.json" in step for step in plan.fields["model_id"].chain)


def test_jsonargparse_parser_with_a_config_file_action(tmp_path, monkeypatch):
    src = '''from jsonargparse import ActionConfigFile, ArgumentParser
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

parser = ArgumentParser()
parser.add_argument("--config", action=ActionConfigFile)
parser.add_argument("--model", type=str, default="gpt2")
parser.add_argument("--batch_size", type=int, default=1)
parser.add_argument("--max_seq_length", type=int, default=128)
args = parser.parse_args()
model = AutoModelForCausalLM.from_pretrained(args.model)
max_len = args.max_seq_length
Trainer(model=model, args=TrainingArguments("out", per_device_train_batch_size=args.batch_size)).train()
'''
    files = {"train.py": src, "cfg.yaml": "model: facebook/opt-125m\nbatch_size: 4\nmax_seq_length: 512\n"}
    plan = _plan(tmp_path, monkeypatch, files, ["python", "train.py", "--config", "cfg.yaml", "--batch_size", "2"])
    assert _values(plan, "model_id", "per_device_batch", "max_length") == {
        "model_id": "facebook/opt-125m", "per_device_batch": 2, "max_length": 512}


def test_fire_entry_with_the_accumulation_divided_by_the_launchers_world_size(tmp_path, monkeypatch):
    src = '''import os
import fire
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


def train(base_model: str = "", batch_size: int = 128, micro_batch_size: int = 4):
    gradient_accumulation_steps = batch_size // micro_batch_size
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    ddp = world_size != 1
    if ddp:
        gradient_accumulation_steps = gradient_accumulation_steps // world_size
    model = AutoModelForCausalLM.from_pretrained(base_model)
    args = TrainingArguments("out", per_device_train_batch_size=micro_batch_size,
                             gradient_accumulation_steps=gradient_accumulation_steps)
    Trainer(model=model, args=args).train()


if __name__ == "__main__":
    fire.Fire(train)
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src},
                 ["torchrun", "--nproc_per_node=2", "train.py", "--base_model", "gpt2", "--batch_size", "16"])
    assert _values(plan, "model_id", "per_device_batch", "grad_accum") == {
        "model_id": "gpt2", "per_device_batch": 4, "grad_accum": 2}


def test_model_init_kwargs_of_a_trl_config_load_the_model_a_trainer_is_given_by_name():
    src = '''import torch
from trl import SFTConfig, SFTTrainer

cfg = SFTConfig(output_dir="out", model_init_kwargs={"torch_dtype": torch.bfloat16}, per_device_train_batch_size=2)
SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=cfg).train()
'''
    plan = extract_source(src, "train.py")
    assert _values(plan, "model_id", "torch_dtype", "per_device_batch") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "torch_dtype": "bf16", "per_device_batch": 2}


def test_a_check_that_raises_on_the_values_read_is_read_as_passed():
    # `--optimizer` without a default: read alone, the option is None and the chain ends in `else: raise`;
    # a required option checked by hand: the raise is not the run memlint sizes, the rest of the file is read
    src = '''import argparse
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--model", default=None)
p.add_argument("--optimizer", choices=["adamw_torch", "sgd"])
args = p.parse_args()
if args.model is None:
    raise ValueError("--model is required")
if args.optimizer == "adamw_torch":
    optim = "adamw_torch"
elif args.optimizer == "sgd":
    optim = "sgd"
else:
    raise ValueError("unknown optimizer")
model = AutoModelForCausalLM.from_pretrained("gpt2")
Trainer(model=model, args=TrainingArguments("out", per_device_train_batch_size=3)).train()
'''
    plan = extract_source(src, "train.py")
    assert _values(plan, "model_id", "per_device_batch") == {"model_id": "gpt2", "per_device_batch": 3}
    assert any("raises with the values memlint read" in n for n in plan.notes)


def test_vars_of_parsed_args_read_as_a_dict_and_a_wrapped_config(tmp_path, monkeypatch):
    src = '''import argparse
import yaml
from easydict import EasyDict
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--model", default="gpt2")
p.add_argument("--config", default="cfg.yaml")
args = vars(p.parse_args())
cfg = EasyDict(yaml.safe_load(open(args["config"])))
model = AutoModelForCausalLM.from_pretrained(args["model"])
Trainer(model=model, args=TrainingArguments("out", per_device_train_batch_size=cfg.train.batch_size)).train()
'''
    files = {"train.py": src, "cfg.yaml": "train:\n  batch_size: 12\n"}
    plan = _plan(tmp_path, monkeypatch, files, ["python", "train.py", "--model", "facebook/opt-125m"])
    assert _values(plan, "model_id", "per_device_batch") == {"model_id": "facebook/opt-125m", "per_device_batch": 12}


def test_world_size_from_torch_distributed_and_the_accelerator(tmp_path, monkeypatch):
    src = '''import torch
import torch.distributed as dist
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

global_batch = 256
micro = 4
accelerator = Accelerator()
accum = global_batch // (micro * dist.get_world_size())
assert accum == global_batch // (micro * accelerator.num_processes)
model = AutoModelForCausalLM.from_pretrained("gpt2")
opt = torch.optim.AdamW(model.parameters())
loader = torch.utils.data.DataLoader(range(100), batch_size=micro)
for step, batch in enumerate(loader):
    model(batch).loss.backward()
    if (step + 1) % accum == 0:
        opt.step()
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["torchrun", "--nproc_per_node", "8", "train.py"])
    assert _values(plan, "per_device_batch", "grad_accum") == {"per_device_batch": 4, "grad_accum": 8}
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["python", "train.py"])
    assert plan.fields["grad_accum"].value is None
    with_acc = src.replace("micro * dist.get_world_size()", "micro * accelerator.num_processes")
    plan = _plan(tmp_path, monkeypatch, {"train.py": with_acc}, ["accelerate", "launch", "--num_processes", "2", "train.py"])
    assert _values(plan, "grad_accum") == {"grad_accum": 32}


def test_a_config_file_merged_into_parsed_args(tmp_path, monkeypatch):
    # args.__dict__.update(yaml) and setattr over its items; TrainingArguments(**vars(args)) of the result
    src = '''import argparse
import yaml
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--config", default="cfg.yaml")
p.add_argument("--model", default="gpt2")
p.add_argument("--output_dir", default="out")
p.add_argument("--per_device_train_batch_size", type=int, default=1)
args = p.parse_args()
with open(args.config) as f:
    cfg = yaml.safe_load(f)
args.__dict__.update(cfg["model"])
for k, v in cfg["train"].items():
    setattr(args, k, v)
model = AutoModelForCausalLM.from_pretrained(args.model)
Trainer(model=model, args=TrainingArguments(output_dir=args.output_dir,
                                            per_device_train_batch_size=args.per_device_train_batch_size)).train()
'''
    files = {"train.py": src, "cfg.yaml": "model:\n  model: facebook/opt-125m\ntrain:\n  per_device_train_batch_size: 5\n"}
    plan = _plan(tmp_path, monkeypatch, files, ["python", "train.py"])
    assert _values(plan, "model_id", "per_device_batch") == {"model_id": "facebook/opt-125m", "per_device_batch": 5}


def test_training_arguments_built_from_vars_of_parsed_args(tmp_path, monkeypatch):
    src = '''import argparse
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--output_dir", default="out")
p.add_argument("--per_device_train_batch_size", type=int, default=2)
p.add_argument("--gradient_accumulation_steps", type=int, default=8)
args = p.parse_args()
Trainer(model=AutoModelForCausalLM.from_pretrained("gpt2"), args=TrainingArguments(**vars(args))).train()
'''
    plan = _plan(tmp_path, monkeypatch, {"train.py": src}, ["python", "train.py", "--per_device_train_batch_size", "4"])
    assert _values(plan, "per_device_batch", "grad_accum", "gradient_checkpointing") == {
        "per_device_batch": 4, "grad_accum": 8, "gradient_checkpointing": False}


# ---- Lightning's self.hparams ----------------------------------------------------------------------

_LIGHTNING_HPARAMS = '''import argparse
import pytorch_lightning as pl
from peft import LoraConfig, get_peft_model
from torch.utils.data import DataLoader
from transformers import AutoModelForSeq2SeqLM


def init_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model_name_or_path", default="google/flan-t5-base")
    p.add_argument("--train_batch_size", type=int, default=64)
    p.add_argument("--use_lora", action="store_true")
    p.add_argument("--use_gradient_checkpointing", action="store_true")
    return p.parse_args()


class Module(pl.LightningModule):
    def __init__(self, hparams):
        super().__init__()
        self.save_hyperparameters(hparams)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(self.hparams.model_name_or_path)
        if self.hparams.use_lora:
            self.model = get_peft_model(self.model, LoraConfig(r=8))
        if self.hparams.use_gradient_checkpointing:
            self.model.gradient_checkpointing_enable()

    def training_step(self, batch, i):
        return self.model(**batch).loss

    def train_dataloader(self):
        return DataLoader([], batch_size=self.hparams.train_batch_size)


pl.Trainer(precision="bf16-mixed").fit(Module(init_args()))
'''

_LIGHTNING_INIT_ARGS = '''import lightning as L
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM


class Module(L.LightningModule):
    def __init__(self, model_name: str = "gpt2", batch_size: int = 3, lr: float = 1e-4):
        super().__init__()
        self.save_hyperparameters()
        self.model = AutoModelForCausalLM.from_pretrained(self.hparams.model_name)

    def train_dataloader(self):
        return DataLoader([], batch_size=self.hparams.batch_size)

    def training_step(self, batch, i):
        return self.model(**batch).loss


L.Trainer().fit(Module(model_name="Qwen/Qwen2.5-0.5B"))
'''


def test_lightning_hparams_are_the_namespace_save_hyperparameters_was_given(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {"train.py": _LIGHTNING_HPARAMS},
                 ["python", "train.py", "--model_name_or_path", "google/flan-t5-xl", "--train_batch_size", "1"])
    assert _values(plan, "model_id", "per_device_batch", "method", "gradient_checkpointing") == \
        {"model_id": "google/flan-t5-xl", "per_device_batch": 1, "method": "full", "gradient_checkpointing": False}
    plan = _plan(tmp_path, monkeypatch, {"train.py": _LIGHTNING_HPARAMS},
                 ["python", "train.py", "--use_lora", "--use_gradient_checkpointing"])
    assert _values(plan, "model_id", "per_device_batch", "method", "gradient_checkpointing") == \
        {"model_id": "google/flan-t5-base", "per_device_batch": 64, "method": "lora", "gradient_checkpointing": True}


def test_lightning_hparams_saved_with_no_argument_are_the_init_arguments(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, {"train.py": _LIGHTNING_INIT_ARGS})
    assert _values(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 3}


# ---- a folder the script saved a model to, loaded again -------------------------------------------------------

_SAVE_THEN_LOAD = '''from peft import AutoPeftModelForCausalLM, LoraConfig
from transformers import AutoModelForCausalLM, TrainingArguments
from trl import DPOConfig, DPOTrainer, SFTTrainer

base_name = "Qwen/Qwen2.5-0.5B"
model = AutoModelForCausalLM.from_pretrained(base_name)
trainer = SFTTrainer(model=model, args=TrainingArguments("out", per_device_train_batch_size=2),
                     peft_config=LoraConfig(r=8))
trainer.train()
{SAVE}

model = {LOADER}.from_pretrained("{FOLDER}")
dpo = DPOTrainer(model, args=DPOConfig("out2", per_device_train_batch_size=1), peft_config=LoraConfig(r=16))
dpo.train()
'''


def test_a_folder_the_script_saved_its_model_to_is_that_model_when_loaded_again(tmp_path, monkeypatch):
    for save, loader in (('trainer.model.save_pretrained("tiny-qlora")', "AutoPeftModelForCausalLM"),
                         ('trainer.save_model("tiny-qlora/")', "AutoModelForCausalLM")):
        src = _SAVE_THEN_LOAD.replace("{SAVE}", save).replace("{LOADER}", loader).replace("{FOLDER}", "tiny-qlora")
        plan = _plan(tmp_path, monkeypatch, {"train.py": src})
        mid = plan.fields["model_id"]
        assert (mid.value, plan.fields["trainer"].value) == ("Qwen/Qwen2.5-0.5B", "DPOTrainer"), save
        assert any("saved the model to" in c for c in mid.chain)
    src = _SAVE_THEN_LOAD.replace("{SAVE}", 'trainer.model.save_pretrained("tiny-qlora")').replace(
        "{LOADER}", "AutoModelForCausalLM").replace("{FOLDER}", "other-folder")
    plan = _plan(tmp_path, monkeypatch, {"train.py": src})
    assert plan.fields["model_id"].value == "other-folder"  # a folder the script did not write stays as written
