"""Round 3c: patterns of real training scripts (docs/realworld.md, round 3c).

Each test is a synthetic excerpt of a shape met in public scripts; the comment says where."""

from pathlib import Path

from memlint.extract import extract_file, extract_source

_LOOP = '''import torch
from torch.optim import AdamW
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer
from accelerate import Accelerator


def training_function(config):
    accelerator = Accelerator()
    batch_size = int(config["batch_size"])
    tokenizer = AutoTokenizer.from_pretrained("gpt2")
    model = AutoModelForCausalLM.from_pretrained("gpt2")
    loader = DataLoader([], batch_size=batch_size)
    optimizer = AdamW(model.parameters(), lr=config["lr"])
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()


def main():
    config = {"lr": 2e-5, "batch_size": 16}
    training_function(config)


if __name__ == "__main__":
    main()
'''


def test_a_library_whose_source_sits_in_the_checkout_is_still_the_library(tmp_path: Path):
    # examples/ inside a library's own repository (accelerate, transformers, peft): `from accelerate
    # import Accelerator` resolves to the checkout's src/accelerate, which is the library, not the script's code
    (tmp_path / "setup.py").write_text("")
    pkg = tmp_path / "src" / "accelerate"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import os\nX = os.environ.get('SOME_FLAG')\nclass Accelerator:\n    pass\n")
    (tmp_path / "examples").mkdir()
    script = tmp_path / "examples" / "train.py"
    script.write_text(_LOOP)
    plan = extract_file(script)
    got = {n: plan.fields[n].value for n in ("model_id", "per_device_batch", "trainer", "optimizer")}
    assert got == {"model_id": "gpt2", "per_device_batch": 16, "trainer": "custom-loop", "optimizer": "adamw_torch"}
    assert not any("SOME_FLAG" in n for n in plan.notes)


def test_min_with_an_unknown_argument_is_the_known_bound():
    # accelerate's run_clm-style scripts: block_size = min(args.block_size, tokenizer.model_max_length)
    src = '''import argparse
from itertools import chain
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--block_size", type=int, default=128)
args = p.parse_args()
tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")
block_size = min(args.block_size, tokenizer.model_max_length)

def group_texts(examples):
    concatenated = {k: list(chain(*examples[k])) for k in examples.keys()}
    total = len(concatenated["input_ids"])
    return {k: [t[i : i + block_size] for i in range(0, total, block_size)] for k, t in concatenated.items()}

Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
'''
    plan = extract_source(src, "train.py")
    ml = plan.fields["max_length"]
    assert ml.value == 128
    assert any("min(" in step and "bound" in step for step in ml.chain)


def test_tokenizer_pad_does_not_truncate_and_max_length_none_truncates_at_the_model_max():
    # accelerate examples/nlp_example.py: tokenizer(..., truncation=True, max_length=None) then a collate_fn
    # with tokenizer.pad(padding="longest", max_length=128 if XLA else None): pad() ignores max_length there
    src = '''from datasets import load_dataset
from torch.utils.data import DataLoader
from torch.optim import AdamW
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")

def tokenize_function(examples):
    return tokenizer(examples["text"], truncation=True, max_length=None)

def collate_fn(examples):
    max_length = 128 if on_xla() else None
    return tokenizer.pad(examples, padding="longest", max_length=max_length, return_tensors="pt")

data = load_dataset("imdb").map(tokenize_function, batched=True)
loader = DataLoader(data["train"], batch_size=8, collate_fn=collate_fn)
optimizer = AdamW(model.parameters())
for batch in loader:
    model(**batch).loss.backward()
    optimizer.step()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["padding"].value == "longest"
    assert plan.fields["max_length"].source == "unknown"
    assert any("model_max_length" in n for n in plan.notes if n.startswith("max_length"))

