"""Hand-written loops read by capability (issue #27, round 9): a collection the loop grows and tests the length of
is loop-carried, an attribute write into a config dict, a checkout iterator class built with its micro-batch size,
and the processes an accelerate config file starts. Synthetic checkouts written from the patterns; no public file
is copied."""

from __future__ import annotations

import textwrap
from pathlib import Path

from memlint.extract import extract_targets
from memlint.extract.launch import tokens
from memlint.extract.shell import command_targets

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


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


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
