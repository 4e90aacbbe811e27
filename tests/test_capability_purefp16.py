"""Pure fp16 (issue 27's capability): half weights trained in fp16 with no autocast and no fp32 master copy
(model.half() or torch.set_default_dtype(torch.float16) and a plain loop, FSDP's MixedPrecision(param_dtype=float16)
on fp16 weights, a loop driving a DeepSpeed fp16 engine built without an optimizer and updating the weights itself)
is the precision "pure-fp16", accounted as pure-bf16 is with fp16; a DeepSpeed fp16 engine with an optimizer keeps
fp32 master weights in it (amp-style, not pure).

Each test is a tiny made-up script (or checkout in tmp_path) written from the pattern."""

from __future__ import annotations

import json

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import estimate
from memlint.estimate.setup import PRECISIONS, Setup
from memlint.plan.fields import FIELDS
from checkouts import write_checkout


_write = write_checkout


# --------------------------------------------------------------------------- the vocabulary and the estimator
def test_pure_fp16_is_a_precision_of_the_plan_and_the_estimator():
    assert "pure-fp16" in PRECISIONS
    assert "pure-fp16" in next(f for f in FIELDS if f.name == "precision").choices


@pytest.mark.parametrize("method", ["full", "lora"])
def test_pure_fp16_and_pure_bf16_give_the_same_bytes(method):
    spec = resolve("meta-llama/Llama-3.2-1B")
    kw = dict(method=method, batch=2, seq=512, optim="adamw_torch")
    bf = estimate(Setup(spec, dtype="bf16", precision="pure-bf16", **kw))
    fp = estimate(Setup(spec, dtype="fp16", precision="pure-fp16", **kw))
    assert {k: c.bytes for k, c in fp.components.items()} == {k: c.bytes for k, c in bf.components.items()}
    assert fp.peak == bf.peak


def test_pure_fp16_keeps_weights_gradients_and_adam_states_in_fp16():
    spec = resolve("meta-llama/Llama-3.2-1B")
    s = Setup(spec, dtype="fp16", precision="pure-fp16", batch=1, seq=256, optim="adamw_torch")
    est = estimate(s)
    by = {k: c.bytes for k, c in est.components.items()}
    n = spec.params
    assert by["weights"] == n * 2
    assert by["optimizer"] == n * 2 * 2  # two Adam moments in the parameter dtype, no master copy
    assert s.compute_dtype == "fp16"
    amp = estimate(Setup(spec, dtype="fp32", precision="amp-fp16", batch=1, seq=256, optim="adamw_torch"))
    assert amp.components["optimizer"].bytes == n * 4 * 2


def test_pure_fp16_needs_fp16_weights():
    with pytest.raises(MemlintError, match="pure-fp16"):
        Setup(resolve("meta-llama/Llama-3.2-1B"), dtype="bf16", precision="pure-fp16")


# --------------------------------------------------------------------------- reading scripts
from memlint.estimate.from_plan import apply_assumptions, setup_from_plan  # noqa: E402
from memlint.extract import extract_file  # noqa: E402

_HALF_LOOP = '''import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B"){half}
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
for batch in range(10):
    loss = model(batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
'''


def _setup(plan):
    """The estimator's Setup of the plan, its unknown length / batch assumed (as --assume does)."""
    planned = setup_from_plan(plan)
    if planned.setup is None:
        plan, extra = apply_assumptions(plan, [f"{k}=4" if k != "max_length" else "max_length=256" for k in planned.missing])
        planned = setup_from_plan(plan, extra)
    assert planned.setup is not None, planned.missing
    return planned.setup


def _prec(plan) -> tuple:
    return plan.fields["torch_dtype"].value, plan.fields["precision"].value


def test_a_plain_loop_on_half_weights_is_pure_fp16(tmp_path):
    p = _write(tmp_path, {"train.py": _HALF_LOOP.format(half=".half()")}) / "train.py"
    plan = extract_file(p)
    assert _prec(plan) == ("fp16", "pure-fp16")
    s = _setup(plan)
    assert (s.dtype, s.precision) == ("fp16", "pure-fp16")
    # the same loop under fp16 autocast is amp-style
    amp = _HALF_LOOP.format(half="").replace("    loss = model(batch).loss",
                                             "    with torch.autocast('cuda', dtype=torch.float16):\n"
                                             "        loss = model(batch).loss")
    p = _write(tmp_path, {"train.py": amp}) / "train.py"
    assert extract_file(p).fields["precision"].value == "amp-fp16"


def test_set_default_dtype_fp16_before_the_load_is_pure_fp16(tmp_path):
    src = _HALF_LOOP.format(half="").replace("from transformers import AutoModelForCausalLM\n",
                                             "from transformers import AutoModelForCausalLM\n"
                                             "torch.set_default_dtype(torch.float16)\n")
    p = _write(tmp_path, {"train.py": src}) / "train.py"
    plan = extract_file(p)
    assert _prec(plan) == ("fp16", "pure-fp16")
    assert plan.fields["precision"].span.line == 3


def test_a_trainer_on_fp16_weights_without_fp16_flag_is_pure_fp16(tmp_path):
    src = '''import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B", torch_dtype=torch.{dt})
args = TrainingArguments("out", per_device_train_batch_size=2{flag})
Trainer(model=model, args=args, train_dataset=[]).train()
'''
    p = _write(tmp_path, {"train.py": src.format(dt="float16", flag="")}) / "train.py"
    assert _prec(extract_file(p)) == ("fp16", "pure-fp16")
    p = _write(tmp_path, {"train.py": src.format(dt="bfloat16", flag="")}) / "train.py"
    assert _prec(extract_file(p)) == ("bf16", "pure-bf16")
    p = _write(tmp_path, {"train.py": src.format(dt="float32", flag=", fp16=True")}) / "train.py"
    assert _prec(extract_file(p)) == ("fp32", "amp-fp16")


# FSDP's fp16 policy on fp16 weights: test_capability_loops2.py (parametrized over both half dtypes)


_ENGINE = '''import deepspeed
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B")
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
engine, _, _, _ = deepspeed.initialize(model=model, config="ds.json"{given})
loader = torch.utils.data.DataLoader(range(10), batch_size=4)
for batch in loader:
    loss = engine(batch).loss
    {backward}
'''
_DS = {"fp16": {"enabled": True}, "zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 4}


def test_a_loop_over_a_deepspeed_fp16_engine_without_optimizer_is_pure_fp16(tmp_path):
    src = _ENGINE.format(given="", backward="loss.backward()\n    opt.step()\n    opt.zero_grad()")
    root = _write(tmp_path, {"train.py": src, "ds.json": json.dumps(_DS)})
    plan = extract_file(root / "train.py")
    assert (plan.fields["precision"].value, plan.fields["trainer"].value) == ("pure-fp16", "custom-loop")
    s = _setup(plan)
    assert (s.dtype, s.precision) == ("fp16", "pure-fp16")  # no fp32 master copy
    # bf16 section: the same, in bf16
    root = _write(tmp_path, {"ds.json": json.dumps({**_DS, "fp16": {"enabled": False}, "bf16": {"enabled": True}})})
    assert extract_file(root / "train.py").fields["precision"].value == "pure-bf16"


def test_a_deepspeed_fp16_engine_with_its_optimizer_keeps_fp32_masters(tmp_path):
    # the script's optimizer handed to the engine
    src = _ENGINE.format(given=", optimizer=opt", backward="engine.backward(loss)\n    engine.step()")
    root = _write(tmp_path, {"train.py": src, "ds.json": json.dumps(_DS)})
    plan = extract_file(root / "train.py")
    assert (plan.fields["precision"].value, plan.fields["trainer"].value) == ("amp-fp16", "deepspeed-engine")
    s = _setup(plan)
    assert s.precision == "master-fp32"
    # an optimizer of the config's
    src = _ENGINE.format(given="", backward="engine.backward(loss)\n    engine.step()")
    ds = {**_DS, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}
    root = _write(tmp_path, {"train.py": src, "ds.json": json.dumps(ds)})
    plan = extract_file(root / "train.py")
    assert plan.fields["precision"].value == "amp-fp16"
    assert _setup(plan).precision == "master-fp32"


def test_a_trainer_on_fp16_weights_under_zero_still_keeps_deepspeeds_master_copy(tmp_path):
    src = '''import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B", torch_dtype=torch.float16)
args = TrainingArguments("out", per_device_train_batch_size=2, deepspeed="ds.json")
Trainer(model=model, args=args, train_dataset=[]).train()
'''
    root = _write(tmp_path, {"train.py": src, "ds.json": json.dumps({"zero_optimization": {"stage": 3}})})
    plan = extract_file(root / "train.py")
    assert plan.fields["distributed"].value == "zero3"
    assert _setup(plan).precision == "master-fp32"


# --------------------------------------------------------------------------- framework configs
_AXOLOTL = '''base_model: meta-llama/Llama-3.2-1B
datasets:
  - path: tatsu-lab/alpaca
    type: alpaca
sequence_len: 512
micro_batch_size: 2
gradient_accumulation_steps: 1
optimizer: adamw_torch
learning_rate: 0.0001
bf16: false
{half}: true
'''


def test_axolotl_float16_is_pure_fp16_and_fp16_autocasts(tmp_path):
    p = _write(tmp_path, {"cfg.yml": _AXOLOTL.format(half="float16")}) / "cfg.yml"
    assert _prec(extract_file(p)) == ("fp16", "pure-fp16")
    p = _write(tmp_path, {"cfg.yml": _AXOLOTL.format(half="fp16")}) / "cfg.yml"
    assert _prec(extract_file(p)) == ("fp16", "amp-fp16")


def test_torchtune_dtype_fp16_is_pure_fp16(tmp_path):
    tune = '''model:
  _component_: torchtune.models.llama3_2.llama3_2_1b
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/tokenizer.model
  max_seq_len: 512
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
batch_size: 2
optimizer:
  _component_: torch.optim.AdamW
  lr: 3e-4
loss:
  _component_: torch.nn.CrossEntropyLoss
epochs: 1
dtype: {dt}
'''
    p = _write(tmp_path, {"cfg.yaml": tune.format(dt="fp16")}) / "cfg.yaml"
    assert _prec(extract_file(p)) == ("fp16", "pure-fp16")
    p = _write(tmp_path, {"cfg.yaml": tune.format(dt="bf16")}) / "cfg.yaml"
    assert _prec(extract_file(p)) == ("bf16", "pure-bf16")


def test_lightning_16_true_is_pure_fp16(tmp_path):
    lit = "checkpoint_dir: checkpoints/meta-llama/Llama-3.2-1B\nprecision: {p}\ntrain:\n  epochs: 1\n  micro_batch_size: 2\n"
    p = _write(tmp_path, {"lora.yaml": lit.format(p="16-true")}) / "lora.yaml"
    assert _prec(extract_file(p)) == ("fp16", "pure-fp16")
    p = _write(tmp_path, {"lora.yaml": lit.format(p="16-mixed")}) / "lora.yaml"
    assert _prec(extract_file(p)) == ("fp32", "amp-fp16")


# --------------------------------------------------------------------------- the other front doors
def test_the_estimate_command_takes_pure_fp16(capsys):
    from memlint.cli import main

    assert main(["estimate", "--model", "meta-llama/Llama-3.2-1B", "--precision", "pure-fp16", "--dtype", "fp16",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    n = out["model"]["params"]
    assert out["components"]["weights"] == n * 2 and out["components"]["optimizer"] == n * 2 * 2


def test_a_live_model_with_fp16_weights_and_no_autocast_is_pure_fp16():
    from memlint.notebook.live import _precision

    assert _precision("fp16", False, False, []) == ("fp16", "pure-fp16")
    assert _precision("bf16", False, False, []) == ("bf16", "pure-bf16")
    assert _precision("fp32", False, True, []) == ("fp32", "amp-fp16")
