"""A LoRA layer written by hand as two nn.Linear layers around a frozen one (`self.lora_down = nn.Linear(base.in_features,
r)`, `self.lora_up = nn.Linear(r, base.out_features)`), cast with `.to(dtype)`, swapped into the model with setattr:
the model trains as LoRA of that rank, whatever sizes the wrapped layers have."""

from checkouts import write_checkout

from memlint.extract import extract_paths

_LAYER = '''
import torch.nn as nn


class LowRankWrapper(nn.Module):
    def __init__(self, base, rank=4, alpha=8):
        super().__init__()
        self.base = base
        self.lora_down = nn.Linear(base.in_features, rank, bias=False)
        self.lora_up = nn.Linear(rank, base.out_features, bias=False)
        if hasattr(base, "weight"):
            self.lora_down = self.lora_down.to(base.weight.dtype)
            self.lora_up = self.lora_up.to(base.weight.dtype)
        for p in base.parameters():
            p.requires_grad = False

    def forward(self, x):
        return self.base(x) + self.lora_up(self.lora_down(x))
'''

_TRAIN = '''
import torch
import torch.nn as nn
from transformers import AutoModelForCausalLM
from layers import LowRankWrapper

model = AutoModelForCausalLM.from_pretrained("gpt2")
for p in model.parameters():
    p.requires_grad = False
for name, module in model.named_modules():
    if isinstance(module, nn.Linear) and name.endswith("q_proj"):
        parent, child = name.rsplit(".", 1)
        setattr(model.get_submodule(parent), child, LowRankWrapper(module, RANK, 32))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
for batch in loader:
    model(**batch).loss.backward()
    optimizer.step()
'''


def test_a_hand_written_lora_of_two_linears_is_lora_of_its_rank(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"layers.py": _LAYER, "train.py": _TRAIN.replace("RANK", "16")})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert (plan.get("method").value, plan.get("lora_r").value) == ("lora", 16)


def test_two_linears_of_unrelated_sizes_are_no_lora(tmp_path, monkeypatch):
    layer = _LAYER.replace("nn.Linear(rank, base.out_features", "nn.Linear(base.out_features, base.in_features")
    write_checkout(tmp_path, {"layers.py": layer, "train.py": _TRAIN.replace("RANK", "16")})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert plan.get("method").value != "lora"
