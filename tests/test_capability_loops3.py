"""Hand-written loops read by capability (issue #27, round 9): a collection the loop grows and tests the length of
is loop-carried, an attribute write into a config dict, a checkout iterator class built with its micro-batch size,
and the processes an accelerate config file starts. Synthetic checkouts written from the patterns; no public file
is copied."""

from __future__ import annotations

import textwrap

from memlint.extract import extract_targets
from memlint.extract.launch import tokens
from memlint.extract.shell import command_targets
from functools import partial
from checkouts import plan_of_command, write_checkout

_LOOP = '''
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

cfg = {"model": {"batch_size": 32, "accum": 1, "microbatch_size": None}}
accelerator = Accelerator()
cfg["model"]["microbatch_size"] = None


class Batches:
    def __init__(self, data, microbatch_size, global_batch_size):
        self.data, self.n = data, microbatch_size

    def __iter__(self):
        for i in range(0, len(self.data), self.n):
            yield self.data[i : i + self.n]


class Config(dict):
    __getattr__ = dict.__getitem__


def main(config):
    config.model.microbatch_size = config.model.batch_size / (accelerator.num_processes * config.model.accum)
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model, optimizer = accelerator.prepare(model, optimizer)
    batches = Batches([], microbatch_size=config.model.microbatch_size, global_batch_size=config.model.batch_size)
    pending = []
    for batch in batches:
        pending.append(batch)
        if len(pending) < config.model.accum:
            continue
        optimizer.zero_grad()
        for b in pending:
            accelerator.backward(model(**b).loss)
        optimizer.step()
        pending = []
'''


_write = partial(write_checkout, dedent=True)


def test_a_loop_over_a_checkout_iterator_with_accumulated_batches_and_an_accelerate_config(tmp_path, monkeypatch):
    """`accelerator.num_processes` is the accelerate config's num_processes; `cfg.model.x = …` writes the config dict;
    the loop body after `if len(pending) < accum: continue` still runs (the list grows on every iteration); the
    checkout iterator's microbatch_size (not its global batch) is the micro-batch."""
    src = _LOOP + '''
from omegaconf import OmegaConf
main(OmegaConf.create({"model": {"batch_size": 32, "accum": 1, "microbatch_size": None}}))
'''
    acc = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: bf16\n"
    _write(tmp_path, {"train.py": src, "acc.yaml": acc})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_targets(command_targets(tokens("accelerate launch --config_file acc.yaml train.py")))
    assert plan.get("trainer").value == "custom-loop"
    assert plan.get("per_device_batch").value == 8  # 32 / (4 processes × 1)
    assert plan.get("optimizer").value == "adamw_torch"
    assert plan.get("grad_accum").value == 1
    (tmp_path / "train.py").write_text(textwrap.dedent(src).lstrip("\n").replace('"accum": 1', '"accum": 4'))
    (plan,) = extract_targets(command_targets(tokens("accelerate launch --config_file acc.yaml train.py")))
    # `if len(pending) < 4: continue` then `for b in pending: backward`: 4 micro-batches of 32 / (4 × 4) per step
    assert (plan.get("per_device_batch").value, plan.get("grad_accum").value) == (2, 4)


def test_a_list_the_loop_grows_without_testing_its_length_keeps_its_items(tmp_path, monkeypatch):
    from memlint.extract.interp.syntax import _loop_counters
    import libcst as cst

    grown_and_tested = cst.parse_module("for b in x:\n    acc.append(b)\n    if len(acc) < 4:\n        continue\n").body[0]
    only_grown = cst.parse_module("for p in x:\n    params.append(p)\n    n += 1\n").body[0]
    assert _loop_counters(grown_and_tested) == ("acc",)
    assert _loop_counters(only_grown) == ("n",)  # params is built up, not a counter the body tests


def test_accelerate_notebook_launcher_runs_its_function_in_num_processes(tmp_path, monkeypatch):
    from memlint.extract import extract_file

    src = '''
from accelerate import Accelerator, notebook_launcher
from transformers import AutoModelForSeq2SeqLM
import torch


def training_loop(batch_size):
    accelerator = Accelerator(mixed_precision="bf16")
    model = AutoModelForSeq2SeqLM.from_pretrained("google/flan-t5-base")
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    for batch in torch.utils.data.DataLoader([], batch_size=batch_size):
        accelerator.backward(model(**batch).loss)
        optimizer.step()


notebook_launcher(training_loop, ({BS},){N})
'''
    for n, want in ((", num_processes=2", 2), ("", None)):
        _write(tmp_path, {"train.py": src.replace("{BS}", "4").replace("{N}", n)})
        monkeypatch.chdir(tmp_path)
        plan = extract_file(tmp_path / "train.py")
        assert plan.get("per_device_batch").value == 4  # fn(*args): the function ran with the launcher's arguments
        assert plan.get("num_gpus").value == want, n  # not given: one process per visible GPU, unknown here


def test_a_base_prepared_for_kbit_training_under_a_trainer_without_autocast_is_not_pure_half(tmp_path, monkeypatch):
    from memlint.extract import extract_file

    src = '''
import torch
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.float16{Q})
{PREP}model = get_peft_model(model, LoraConfig(r=8))
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
'''
    q4 = ", quantization_config=BitsAndBytesConfig(load_in_4bit=True)"
    prep = "model = prepare_model_for_kbit_training(model)\n"
    # prepare_model_for_kbit_training upcasts the half weights it does not quantize: fp32 training, no autocast;
    # without it the half weights train as they are
    for q, p, want in ((q4, prep, "fp32"), (q4, "", "pure-fp16"), ("", "", "pure-fp16")):
        _write(tmp_path, {"train.py": src.replace("{Q}", q).replace("{PREP}", p)})
        monkeypatch.chdir(tmp_path)
        assert extract_file(tmp_path / "train.py").get("precision").value == want, (q, p)


def test_a_counter_the_loop_steps_and_resets_under_its_test_counts_the_accumulation(tmp_path, monkeypatch):
    """`accum += 1` ... `if accum == args.accum_steps: scaler.step(opt); ...; accum = 0`: the optimizer steps once every
    accum_steps backward passes; a counter tested without a reset (`if step == 1000: break`) is no accumulation."""
    script = """
        import argparse, torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM
        p = argparse.ArgumentParser()
        p.add_argument("--accum_steps", type=int, default=4)
        args = p.parse_args()
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B").cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        loader = DataLoader(ds, batch_size=2)
        accum = 0
        step = 0
        for batch in loader:
            loss = model(**batch).loss / args.accum_steps
            loss.backward()
            accum += 1
            step += 1
            if step == 1000:
                break
            if accum == args.accum_steps:
                opt.step()
                opt.zero_grad()
                accum = 0
    """
    root = write_checkout(tmp_path, {"train.py": script}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "train.py", "--accum_steps", "16")
    assert (plan.value("grad_accum"), plan.value("per_device_batch")) == (16, 2)
    # a running total stepped by something else (tokens seen) is no count of passes
    tokens = script.replace("accum += 1", "accum += batch['input_ids'].numel()")
    root = write_checkout(tmp_path / "tokens", {"train.py": tokens}, dedent=True)
    assert plan_of_command(root, monkeypatch, "python", "train.py", "--accum_steps", "16").value("grad_accum") != 16
