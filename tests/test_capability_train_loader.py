"""The DataLoader a hand-written loop trains on is the one the loop with the backward iterates (directly or through
enumerate/tqdm), not the first one built; the tokenizer calls of another loader's collate_fn are not its padding."""

from __future__ import annotations

import pytest

from checkouts import field_values, write_checkout
from memlint.extract import extract_targets
from memlint.extract.launch import command_target

COLLATE = """
def collate(batch, tokenizer=None, max_length=2048):
    data = tokenizer([b["text"] for b in batch], return_tensors="pt", padding="max_length", truncation=True, max_length=max_length)
    data["labels"] = data["input_ids"].clone()
    return data
"""
TRAIN = """
import argparse, torch
from functools import partial
from torch.utils.data import DataLoader
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorWithPadding
from du import collate
p = argparse.ArgumentParser(); p.add_argument("--tp", type=int, default=1); a = p.parse_args()
tok = AutoTokenizer.from_pretrained("gpt2"); model = AutoModelForCausalLM.from_pretrained("gpt2")
loader = DataLoader([], batch_size=2, collate_fn=partial(collate, tokenizer=tok, max_length=2048))
optimizer = torch.optim.AdamW(model.parameters(), 1e-5)
if a.tp > 1:
    loader = DataLoader([], batch_size=4, collate_fn=DataCollatorWithPadding(tok))
eval_loader = DataLoader([], batch_size=16, collate_fn=partial(collate, tokenizer=tok, max_length=512))
for step, batch in enumerate(tqdm(loader)):
    loss = model(**batch).loss
    loss.backward(); optimizer.step(); optimizer.zero_grad()
with torch.no_grad():
    for batch in eval_loader:
        model(**batch)
"""


def _run(tmp_path, monkeypatch, files: dict[str, str], *argv: str):
    """The plan of `python train.py ARGV` in a checkout of `files`."""
    write_checkout(tmp_path, files, dedent=True, git=True)
    monkeypatch.chdir(tmp_path)
    return extract_targets([command_target(["python", "train.py", *argv])])[0]


def _plan(tmp_path, monkeypatch, *argv: str):
    return _run(tmp_path, monkeypatch, {"train.py": TRAIN, "du.py": COLLATE}, *argv)


@pytest.mark.parametrize("argv, want", [
    (("--tp", "2"), {"per_device_batch": 4, "padding": "longest"}),
    ((), {"per_device_batch": 2, "padding": "max_length"}),
])
def test_the_loop_with_the_backward_names_the_training_loader(tmp_path, monkeypatch, argv, want):
    plan = _plan(tmp_path, monkeypatch, *argv)
    assert field_values(plan, "per_device_batch", "padding") == want
    if not argv:
        assert plan.fields["max_length"].value == 2048  # the eval loader's 512 is not the training step's



OWN_DATASET = """
import torch
from torch.utils.data import Dataset
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer
class Pairs(Dataset):
    def __init__(self, path): self.rows = open(path).readlines()
    def __len__(self): return len(self.rows)
    def __getitem__(self, i): return self.rows[i]
ITER
tok = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
train = Pairs("train.txt")
for idx, ex in enumerate(tqdm(train)):
    ids = tok(ex, return_tensors="pt").input_ids
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); opt.step(); opt.zero_grad()
"""


@pytest.mark.parametrize("own_iter, want", [
    ("", 1),  # a map-style dataset iterated by the training loop: one example a step
    ("    def __iter__(self):\n        yield self.rows\n", None),  # its own __iter__ may yield whole batches: unknown
])
def test_a_training_loop_over_a_dataset_itself_takes_one_example_a_step(tmp_path, monkeypatch, own_iter, want):
    plan = _run(tmp_path, monkeypatch, {"train.py": OWN_DATASET.replace("ITER\n", own_iter)})
    assert plan.fields["per_device_batch"].value == want


WRAPPED = """
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments
tok = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")
ds = Dataset.from_list([{"text": "a"}]).map(lambda ex: tok(ex["text"], truncation=True, max_length=256))
class WrappedCollator:
    def __init__(self, tokenizer):
        self.inner = INNER
    def __call__(self, feats):
        return self.inner(feats)
args = TrainingArguments("out", per_device_train_batch_size=4)
Trainer(model=model, args=args, train_dataset=ds, data_collator=WrappedCollator(tok)).train()
"""


@pytest.mark.parametrize("inner, want", [
    ('DataCollatorWithPadding(tokenizer, padding="max_length", max_length=256)', "max_length"),
    ("DataCollatorWithPadding(tokenizer)", "longest"),
    ("None", None),  # holds no library collator: its own code pads, unread
])
def test_the_script_collator_class_pads_as_the_library_collator_it_holds(tmp_path, monkeypatch, inner, want):
    plan = _run(tmp_path, monkeypatch, {"train.py": WRAPPED.replace("INNER", inner)})
    assert plan.fields["padding"].value == want


SHARED = """
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained("gpt2"); model = AutoModelForCausalLM.from_pretrained("gpt2")
def collate(batch):
    data = tok([b["text"] for b in batch], return_tensors="pt", padding="max_length", truncation=True, max_length=1024)
    data["labels"] = data["input_ids"].clone()
    return data
eval_loader = DataLoader([], batch_size=16, collate_fn=collate)
train_loader = DataLoader([], batch_size=4, shuffle=True, collate_fn=collate)
optimizer = torch.optim.AdamW(model.parameters(), 1e-5)
LOOP
"""
LOOPS = {
    "nested": """
for epoch in range(3):
    for batch in train_loader:
        loss = model(**batch).loss
        loss.backward(); optimizer.step(); optimizer.zero_grad()
    with torch.no_grad():
        for batch in eval_loader:
            model(**batch)
""",
    "zip": """
for vb, tb in zip(eval_loader, train_loader):
    loss = model(**tb).loss
    loss.backward(); optimizer.step(); optimizer.zero_grad()
""",
    "shared": """
def run_epoch(loader, train):
    for batch in loader:
        loss = model(**batch).loss
        if train:
            loss.backward(); optimizer.step(); optimizer.zero_grad()
run_epoch(eval_loader, False)
run_epoch(train_loader, True)
""",
}


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_collate_shared_with_an_eval_loader_built_first_still_pads_the_training_one(tmp_path, monkeypatch, loop):
    plan = _run(tmp_path, monkeypatch, {"train.py": SHARED.replace("LOOP\n", LOOPS[loop])})
    assert field_values(plan, "per_device_batch", "padding", "max_length") == {
        "per_device_batch": 4, "padding": "max_length", "max_length": 1024}
