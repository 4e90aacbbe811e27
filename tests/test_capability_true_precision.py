"""Lightning's "bf16-true" / "16-true" precision converts the module's parameters (Trainer and Fabric alike): the plan's
torch_dtype says so where the load left the dtype to the library."""

from __future__ import annotations

import pytest

from checkouts import field_values, write_checkout
from memlint.extract import extract_targets
from memlint.extract.launch import command_target

FABRIC = """
import lightning as L
import torch
from transformers import AutoModelForCausalLM
fabric = L.Fabric(accelerator="cuda", devices=1, precision="{precision}")
fabric.launch()
with fabric.init_module():
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B"{dtype})
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = fabric.setup(model, optimizer)
for _ in range(10):
    ids = torch.randint(0, 1000, (4, 256), device=fabric.device)
    loss = model(input_ids=ids, labels=ids).loss
    fabric.backward(loss); optimizer.step(); optimizer.zero_grad()
"""


@pytest.mark.parametrize("precision, dtype, want", [
    ("bf16-true", "", {"torch_dtype": "bf16", "precision": "pure-bf16"}),
    ("16-true", "", {"torch_dtype": "fp16", "precision": "pure-fp16"}),
    ("bf16-mixed", "", {"precision": "amp-bf16"}),
    ("bf16-true", ", torch_dtype=torch.float32", {"torch_dtype": "bf16", "precision": "pure-bf16"}),  # converted at setup
])
def test_true_precision_names_the_parameters_dtype(tmp_path, monkeypatch, precision, dtype, want):
    write_checkout(tmp_path, {"train.py": FABRIC.format(precision=precision, dtype=dtype)}, dedent=True, git=True)
    monkeypatch.chdir(tmp_path)
    plan = extract_targets([command_target(["python", "train.py"])])[0]
    assert field_values(plan, *want) == want
    if precision == "bf16-mixed":
        assert plan.fields["torch_dtype"].value != "bf16"
