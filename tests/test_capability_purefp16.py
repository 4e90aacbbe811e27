"""Pure fp16 (issue 27's capability): half weights trained in fp16 with no autocast and no fp32 master copy
(model.half() or torch.set_default_dtype(torch.float16) and a plain loop, FSDP's MixedPrecision(param_dtype=float16)
on fp16 weights, a loop driving a DeepSpeed fp16 engine built without an optimizer and updating the weights itself)
is the precision "pure-fp16", accounted as pure-bf16 is with fp16; a DeepSpeed fp16 engine with an optimizer keeps
fp32 master weights in it (amp-style, not pure).

Each test is a tiny made-up script (or checkout in tmp_path) written from the pattern."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import estimate
from memlint.estimate.setup import PRECISIONS, Setup
from memlint.plan.fields import FIELDS


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


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
