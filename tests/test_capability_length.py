"""Where the sequence length, padding and packing of a micro-batch are decided (issue 27's capability):
tokenizer calls, hand truncation, hand-written datasets and collators reached indirectly, lengths from
the model or a framework's dataset default, companion pre-tokenizing scripts, legacy trainer keywords.

Each test is a tiny made-up script (or checkout in tmp_path) written from the pattern."""

from __future__ import annotations

from pathlib import Path

from memlint.extract import extract_file, extract_source


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def _get(plan, *names: str) -> dict:
    return {n: plan.fields[n].value for n in names}


_HEAD = '''import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
ds = load_dataset("json", data_files="d.json")["train"]
'''

_TAIL = '''
args = TrainingArguments("o", per_device_train_batch_size=4)
Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True)).train()
'''


# ---- 1. truncation by slicing with a local constant ------------------------------------------

def test_a_local_upper_case_constant_sliced_in_a_map_function_is_the_length():
    src = _HEAD + '''
def process(example):
    MAX_LENGTH = 384
    ids = tokenizer(example["text"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    if len(ids) > MAX_LENGTH:
        ids = ids[:MAX_LENGTH]
    return {"input_ids": ids, "labels": ids}

ds = ds.map(process, remove_columns=ds.column_names)
''' + _TAIL
    plan = extract_source(src, "train.py")
    assert _get(plan, "max_length", "padding", "packing") == {"max_length": 384, "padding": "longest", "packing": False}


def test_a_slice_by_a_name_outside_the_length_vocabulary_is_not_a_length():
    src = _HEAD + '''
def process(example):
    KEEP = 3
    ids = tokenizer(example["text"])["input_ids"]
    return {"input_ids": ids, "labels": ids, "first": ids[:KEEP]}

ds = ds.map(process)
''' + _TAIL
    plan = extract_source(src, "train.py")
    assert plan.fields["max_length"].value is None


# ---- 6. legacy trainer keywords that set the length -------------------------------------------

_DPO = '''from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments
from trl import DPOTrainer

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
args = TrainingArguments("o", per_device_train_batch_size=2)
trainer = DPOTrainer(model, None, args=args, train_dataset=None, tokenizer=tokenizer, beta=0.1,
                     max_prompt_length=512, max_length=768)
trainer.train()
'''


def test_dpo_trainer_length_keywords_beside_training_arguments_set_the_length(tmp_path):
    _write(tmp_path, {"train.py": _DPO})
    plan = extract_file(tmp_path / "train.py")
    assert _get(plan, "max_length", "padding") == {"max_length": 768, "padding": "longest"}
    assert any("trl<0.13" in c for c in plan.fields["max_length"].chain)


def test_a_pin_that_no_longer_takes_the_keyword_leaves_it_unread_with_a_note(tmp_path):
    _write(tmp_path, {"train.py": _DPO, "requirements.txt": "trl==0.14.0\ntransformers==4.47.0\n"})
    plan = extract_file(tmp_path / "train.py")
    assert plan.fields["max_length"].value != 768
    assert any("DPOTrainer(max_length=...)" in n and "not read" in n for n in plan.notes)


def test_dpo_trainer_without_a_length_over_training_arguments_takes_the_config_default(tmp_path):
    _write(tmp_path, {"train.py": _DPO.replace(",\n                     max_prompt_length=512, max_length=768", ""),
                      "requirements.txt": "trl==0.8.6\n"})
    plan = extract_file(tmp_path / "train.py")
    assert plan.fields["max_length"].value == 512
    assert plan.fields["max_length"].source == "library-default"
