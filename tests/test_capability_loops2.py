"""Hand-written loops, second part (issue 27's capability): pure half precision (weights made half by
torch.set_default_dtype / set_default_tensor_type, FSDP's MixedPrecision on weights already in that dtype),
gradient checkpointing a model config carries into the load, a DeepSpeed launch whose GPU list is a shell
variable, an optimizer of the checkout that updates the weights in backward hooks and keeps no state (LOMO's
fused update) driven beside a DeepSpeed engine built without an optimizer.

Each test is a tiny made-up script (or checkout in tmp_path) written from the pattern."""

from __future__ import annotations

import json
from pathlib import Path

from memlint.extract import extract_file, extract_targets
from memlint.extract.shell import command_targets


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def _get(plan, *names: str) -> dict:
    return {n: plan.fields[n].value for n in names}


def _command(root: Path, monkeypatch, *words: str):
    monkeypatch.chdir(root)
    plans = extract_targets(command_targets(list(words)))
    assert len(plans) == 1
    return plans[0]


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
mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16)
model = FSDP(model, mixed_precision=mp)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
for b in range(3):
    model(b).loss.backward()
    opt.step()
'''


def test_fsdp_mixed_precision_on_weights_already_bf16_is_pure_bf16(tmp_path):
    p = _write(tmp_path, {"train.py": _FSDP.format(weights="bfloat16")}) / "train.py"
    plan = extract_file(p)
    assert _get(plan, "precision", "distributed") == {"precision": "pure-bf16", "distributed": "fsdp"}
    # the same policy on fp32 weights keeps fp32 shards and computes in bf16: autocast's accounting
    p = _write(tmp_path, {"train.py": _FSDP.format(weights="float32")}) / "train.py"
    assert extract_file(p).fields["precision"].value == "amp-bf16"


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
