"""Hand-written loops, second part (issue 27's capability): pure half precision (weights made half by
torch.set_default_dtype / set_default_tensor_type, FSDP's MixedPrecision on weights already in that dtype),
gradient checkpointing a model config carries into the load, a DeepSpeed launch whose GPU list is a shell
variable, an optimizer of the checkout that updates the weights in backward hooks and keeps no state (LOMO's
fused update) driven beside a DeepSpeed engine built without an optimizer.

Each test is a tiny made-up script (or checkout in tmp_path) written from the pattern."""

from __future__ import annotations

import json

import pytest

from memlint.extract import extract_file
from checkouts import write_checkout, plan_of_command as _command, field_values as _get


_write = write_checkout




_DEFAULT_DTYPE = '''import torch
from transformers import AutoModelForCausalLM

def main():
    torch.set_default_dtype(torch.{dtype})
    model = AutoModelForCausalLM.from_pretrained("acme/tiny-lm")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for batch in range(10):
        loss = model(batch).loss
        loss.backward()
        opt.step()

main()
'''


def test_set_default_dtype_before_the_load_is_the_weights_dtype(tmp_path):
    p = _write(tmp_path, {"train.py": _DEFAULT_DTYPE.format(dtype="float16")}) / "train.py"
    plan = extract_file(p)
    assert plan.fields["torch_dtype"].value == "fp16"
    assert plan.fields["torch_dtype"].source == "literal"
    assert plan.fields["torch_dtype"].span.line == 5
    # no autocast on bf16 weights: pure bf16
    p = _write(tmp_path, {"train.py": _DEFAULT_DTYPE.format(dtype="bfloat16")}) / "train.py"
    assert _get(extract_file(p), "torch_dtype", "precision") == {"torch_dtype": "bf16", "precision": "pure-bf16"}


def test_set_default_dtype_after_the_load_changes_nothing_and_an_explicit_dtype_wins(tmp_path):
    after = '''import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("acme/tiny-lm")
torch.set_default_dtype(torch.float16)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for b in range(3):
    model(b).loss.backward()
    opt.step()
'''
    p = _write(tmp_path, {"train.py": after}) / "train.py"
    assert extract_file(p).fields["torch_dtype"].source == "library-default"
    explicit = after.replace('"acme/tiny-lm")\ntorch.set_default_dtype(torch.float16)',
                             '"x")').replace('import torch\n', 'import torch\ntorch.set_default_dtype(torch.float16)\n')
    explicit = explicit.replace('from_pretrained("x")', 'from_pretrained("x", torch_dtype=torch.bfloat16)')
    p = _write(tmp_path, {"train.py": explicit}) / "train.py"
    assert extract_file(p).fields["torch_dtype"].value == "bf16"


def test_set_default_tensor_type_half_and_a_script_module(tmp_path):
    src = '''import torch
import torch.nn as nn

class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, 64)
        self.head = nn.Linear(64, 1000)

torch.set_default_tensor_type(torch.cuda.HalfTensor)
model = LM()
opt = torch.optim.AdamW(model.parameters())
for b in range(3):
    model(b).sum().backward()
    opt.step()
'''
    p = _write(tmp_path, {"train.py": src}) / "train.py"
    assert extract_file(p).fields["torch_dtype"].value == "fp16"


_FSDP = '''import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("acme/tiny-lm", torch_dtype=torch.{weights})
mp = MixedPrecision(param_dtype=torch.{half}, reduce_dtype=torch.{half}, buffer_dtype=torch.{half})
model = FSDP(model, mixed_precision=mp)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
for b in range(3):
    model(b).loss.backward()
    opt.step()
'''


@pytest.mark.parametrize("half, short", [("bfloat16", "bf16"), ("float16", "fp16")])
def test_fsdp_mixed_precision_on_weights_already_half_is_pure_half(tmp_path, half, short):
    p = _write(tmp_path, {"train.py": _FSDP.format(weights=half, half=half)}) / "train.py"
    plan = extract_file(p)
    assert _get(plan, "precision", "distributed") == {"precision": f"pure-{short}", "distributed": "fsdp"}
    # the same policy on fp32 weights keeps fp32 shards and computes in the half dtype: autocast's accounting
    p = _write(tmp_path, {"train.py": _FSDP.format(weights="float32", half=half)}) / "train.py"
    assert extract_file(p).fields["precision"].value == f"amp-{short}"


_CONFIG_GC = '''import torch
from transformers import AutoConfig, AutoModelForCausalLM

config = AutoConfig.from_pretrained("acme/tiny-lm")
config.gradient_checkpointing = {flag}
model = AutoModelForCausalLM.from_pretrained("acme/tiny-lm", config=config)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
for b in range(3):
    model(b).loss.backward()
    opt.step()
'''


def test_gradient_checkpointing_carried_by_the_config_into_the_load(tmp_path):
    p = _write(tmp_path, {"train.py": _CONFIG_GC.format(flag="True")}) / "train.py"
    v = extract_file(p).fields["gradient_checkpointing"]
    assert v.value is True and v.source == "literal"
    assert any("post_init" in c or "builds" in c or "built" in c for c in v.chain)
    p = _write(tmp_path, {"train.py": _CONFIG_GC.format(flag="False")}) / "train.py"
    assert extract_file(p).fields["gradient_checkpointing"].value is False
    # set on the config after the model was built: nothing reads it
    late = _CONFIG_GC.format(flag="True").replace(
        'config.gradient_checkpointing = True\nmodel = AutoModelForCausalLM.from_pretrained("acme/tiny-lm", config=config)\n',
        'model = AutoModelForCausalLM.from_pretrained("acme/tiny-lm", config=config)\nconfig.gradient_checkpointing = True\n')
    p = _write(tmp_path, {"train.py": late}) / "train.py"
    assert extract_file(p).fields["gradient_checkpointing"].value is False


def test_gradient_checkpointing_keyword_of_from_pretrained(tmp_path):
    src = _CONFIG_GC.format(flag="False").replace('config=config)', 'gradient_checkpointing=True)')
    p = _write(tmp_path, {"train.py": src}) / "train.py"
    assert extract_file(p).fields["gradient_checkpointing"].value is True


def test_deepspeed_include_list_from_a_shell_variable_is_the_users_environment(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _DEFAULT_DTYPE.format(dtype="float16")})
    plan = _command(root, monkeypatch, "deepspeed", "--include", "localhost:$GPUS", "train.py")
    assert "num_gpus" not in plan.fields or plan.fields["num_gpus"].value is None
    plan = _command(root, monkeypatch, "deepspeed", "--include", "localhost:0,1", "train.py")
    assert plan.fields["num_gpus"].value == 2


_HOOK_OPT = '''import torch
from torch.optim import Optimizer


class FusedSGD(Optimizer):
    def __init__(self, model, lr=1e-3):
        self.model = model
        self.lr = lr
        for n, p in self.model.named_parameters():
            if p.requires_grad:
                p.register_hook(self.update)
        super().__init__(self.model.parameters(), dict(lr=lr))

    def update(self, grad):
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                if p.grad is not None:
                    g = p.grad.to(torch.float32)
                    p.grad = None
                    w = p.data.to(torch.float32)
                    w.add_(g, alpha=-self.lr)
                    p.data.copy_(w){extra}
        return grad

    def fused_backward(self, loss, lr):
        self.lr = lr
        loss.backward()
        self.update(0)
'''

_ENGINE_LOOP = '''import deepspeed
import torch
from transformers import AutoModelForCausalLM
from hookopt import FusedSGD


class Runner:
    def __init__(self, model, cfg):
        self.engine, _, _, _ = deepspeed.initialize(config=cfg, model=model)
        self.opt = FusedSGD(model, 0.01)

    def train(self, loader):
        for batch in loader:
            loss = self.engine(**batch).loss
            self.opt.fused_backward(loss, 0.01)


model = AutoModelForCausalLM.from_pretrained("acme/tiny-lm")
loader = torch.utils.data.DataLoader(range(10), batch_size=4)
Runner(model, "ds.json").train(loader)
'''

_DS = {"fp16": {"enabled": True}, "zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 2,
       "gradient_accumulation_steps": 1}


def test_stateless_hook_optimizer_beside_an_engine_without_optimizer(tmp_path):
    root = _write(tmp_path, {"hookopt.py": _HOOK_OPT.format(extra=""), "train.py": _ENGINE_LOOP,
                             "ds.json": json.dumps(_DS)})
    plan = extract_file(root / "train.py")
    assert _get(plan, "optimizer", "trainer", "distributed", "per_device_batch", "grad_accum") == {
        "optimizer": "lomo", "trainer": "custom-loop", "distributed": "zero3", "per_device_batch": 4, "grad_accum": 1}
    assert any("register_hook" in c for c in plan.fields["optimizer"].chain)


def test_a_hook_optimizer_that_keeps_state_is_not_read_as_stateless(tmp_path):
    extra = "\n                    self.buf = torch.zeros_like(w)"
    root = _write(tmp_path, {"hookopt.py": _HOOK_OPT.format(extra=extra), "train.py": _ENGINE_LOOP,
                             "ds.json": json.dumps(_DS)})
    plan = extract_file(root / "train.py")
    assert plan.fields["optimizer"].value != "lomo"
    # the engine still runs the step's bookkeeping: a loop over an engine, its optimizer unknown
    assert plan.fields["trainer"].value == "deepspeed-engine"


def test_an_engine_given_its_optimizer_stays_the_engines_loop(tmp_path):
    src = _ENGINE_LOOP.replace("deepspeed.initialize(config=cfg, model=model)",
                               "deepspeed.initialize(config=cfg, model=model, optimizer=torch.optim.AdamW(model.parameters()))")
    root = _write(tmp_path, {"hookopt.py": _HOOK_OPT.format(extra=""), "train.py": src, "ds.json": json.dumps(_DS)})
    plan = extract_file(root / "train.py")
    assert _get(plan, "optimizer", "trainer") == {"optimizer": "adamw_torch", "trainer": "deepspeed-engine"}


def test_cd_then_a_shell_script_reads_relative_paths_from_that_folder(tmp_path, monkeypatch):
    run = "deepspeed --include localhost:0 src/train.py\n"
    src = _ENGINE_LOOP.replace('"ds.json"', '"config/ds.json"')
    root = _write(tmp_path, {"proj/run.sh": run, "proj/src/train.py": src, "proj/src/hookopt.py": _HOOK_OPT.format(extra=""),
                             "proj/config/ds.json": json.dumps(_DS)})
    plan = _command(root, monkeypatch, "cd", "proj", "&&", "bash", "run.sh")
    assert _get(plan, "distributed", "num_gpus") == {"distributed": "zero3", "num_gpus": 1}


_TUNE_CFG = '''model:
  _component_: torchtune.models.llama3_1.lora_llama3_1_8b
  lora_attn_modules: ['q_proj', 'v_proj']
  lora_rank: 8
  lora_alpha: 16
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/tokenizer.model
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/ckpt
  checkpoint_files: [a.safetensors]
  model_type: LLAMA3
dataset:
  _component_: torchtune.datasets.alpaca_dataset
batch_size: 2
optimizer:
  _component_: torch.optim.AdamW
  lr: 3e-4
loss:
  _component_: torch.nn.CrossEntropyLoss
epochs: 1
gradient_accumulation_steps: 4
dtype: bf16
enable_activation_checkpointing: False
'''

_TUNE_RECIPE = '''import torch
from torch.distributed.fsdp import FullyShardedDataParallel as Sharded, ShardingStrategy


class Recipe:
    def setup_model(self, model):
        return {wrap}
'''


def test_tune_run_recipe_file_decides_the_sharding(tmp_path, monkeypatch):
    for wrap, want in (("Sharded(module=model, sharding_strategy=ShardingStrategy.FULL_SHARD)", "fsdp"),
                       ("Sharded(model, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP)", "fsdp_shard_grad_op"),
                       ("model", "none")):
        root = _write(tmp_path, {"cfg/run.yaml": _TUNE_CFG, "my_recipe.py": _TUNE_RECIPE.format(wrap=wrap)})
        plan = _command(root, monkeypatch, "tune", "run", "--nproc_per_node", "4", "my_recipe.py", "--config", "cfg/run.yaml")
        assert plan.fields["distributed"].value == want, wrap
        assert plan.fields["distributed"].span.path.endswith("my_recipe.py")
    # a built-in recipe named without a file: the config alone does not say
    plan = _command(root, monkeypatch, "tune", "run", "lora_finetune_x", "--config", "cfg/run.yaml")
    assert plan.fields["distributed"].value is None


def test_trainer_keyword_model_init_kwargs_load_the_model_it_names(tmp_path):
    src = '''from transformers import BitsAndBytesConfig, TrainingArguments
from trl import SFTTrainer
from peft import LoraConfig

kwargs = dict(attn_implementation="flash_attention_2", torch_dtype="auto",
              quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"))
args = TrainingArguments(output_dir="out", per_device_train_batch_size=1, fp16=True)
trainer = SFTTrainer(model="acme/tiny-lm", model_init_kwargs=kwargs, args=args, train_dataset=None,
                     peft_config=LoraConfig(r=16), max_seq_length=1024, packing=True)
trainer.train()
'''
    p = _write(tmp_path, {"train.py": src}) / "train.py"
    plan = extract_file(p)
    assert _get(plan, "model_id", "method", "quant_bits", "attn_implementation") == {
        "model_id": "acme/tiny-lm", "method": "qlora", "quant_bits": 4, "attn_implementation": "flash_attention_2"}


def test_a_size_folder_inside_a_family_folder_names_the_checkpoint():
    from memlint.catalog.spec import named_by_folder

    spec = named_by_folder("/remote-home/share/llama_hf/7B")
    assert spec is not None and spec.id == "huggyllama/llama-7b" and spec.assumed_from.endswith("llama_hf/7B")
    assert named_by_folder("/data/llama/7b").id == "huggyllama/llama-7b"
    # a word with a digit is a version: never dropped to reach another model's name (Llama-2/13b is Llama 2's, by
    # its -hf-less name, never Llama 1's llama-13b)
    assert named_by_folder("/data/Llama-2/13b").id == "meta-llama/Llama-2-13b-hf"
    assert named_by_folder("/data/Llama-9/13b") is None
    # a placeholder or a size alone names nothing
    assert named_by_folder("/path/to/70B") is None
    assert named_by_folder("/models/7B") is None
