"""Two readings a real collator and a real keyword dict broke: a list brought to the width of a tensor the script
already padded is not where the batch's padding is decided, and a dict item written under one of two known keys
leaves the dict's other items known."""

from checkouts import write_checkout

from memlint.extract import extract_paths

_COLLATOR = '''
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

tok = AutoTokenizer.from_pretrained("gpt2")


class Collator:
    def __init__(self, tok):
        self.tok = tok

    def __call__(self, feats):
        labels = [f.pop("labels") for f in feats]
        batch = self.tok.pad(feats, padding=True, return_tensors="pt")
        max_length = batch["input_ids"].shape[1]
        out = []
        for lab in labels:
            padding = [-100] * (max_length - len(lab))
            out.append(lab + padding)
        batch["labels"] = out
        return batch


model = AutoModelForCausalLM.from_pretrained("gpt2")
args = TrainingArguments(output_dir="o", per_device_train_batch_size=4)
Trainer(model=model, args=args, data_collator=Collator(tok)).train()
'''


def test_labels_brought_to_the_padded_batchs_width_leave_the_tokenizer_padding(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"train.py": _COLLATOR})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert plan.get("padding").value == "longest"


def test_a_hand_pad_to_a_fixed_width_is_still_read(tmp_path, monkeypatch):
    fixed = _COLLATOR.replace('max_length = batch["input_ids"].shape[1]', "max_length = 512")
    write_checkout(tmp_path, {"train.py": fixed})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert plan.get("padding").value == "max_length"


_KWARGS = '''
import os
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

kwargs = {"output_dir": "o", "per_device_train_batch_size": 2}
key = "eval_strategy" if os.environ.get("NEW") else "evaluation_strategy"
kwargs[key] = "no"
model = AutoModelForCausalLM.from_pretrained("gpt2")
Trainer(model=model, args=TrainingArguments(**kwargs)).train()
'''


def test_an_item_under_one_of_two_known_keys_keeps_the_dict_known(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"train.py": _KWARGS})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert plan.get("distributed").value == "none" and plan.get("distributed").source == "library-default"
    assert plan.get("per_device_batch").value == 2


def test_an_item_under_an_unknown_key_still_opens_the_dict(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"train.py": _KWARGS.replace('key = "eval_strategy" if os.environ.get("NEW") else '
                                                         '"evaluation_strategy"', 'key = os.environ["KEY"]')})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert not plan.get("distributed").known


def test_a_hand_pad_to_the_longest_length_in_the_batch_is_still_read(tmp_path, monkeypatch):
    longest = _COLLATOR.replace('max_length = batch["input_ids"].shape[1]', "max_length = max(len(x) for x in labels)")
    longest = longest.replace('self.tok.pad(feats, padding=True, return_tensors="pt")', "{}")  # the hand pad alone
    write_checkout(tmp_path, {"train.py": longest})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert plan.get("padding").value == "longest"


def test_a_pad_to_a_width_read_from_a_config_is_still_max_length(tmp_path, monkeypatch):
    """`[eos] * (block_size - len(ids))`, block_size from a JSON memlint cannot read: a fixed width all the same
    (only a width that is another tensor's own length leaves the padding to where that tensor was padded)."""
    train = '''
import json
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

cfg = json.load(open("missing.json"))
block_size = cfg["block_size"]


def collate(rows):
    return [r["ids"] + [0] * (block_size - len(r["ids"])) for r in rows]


model = AutoModelForCausalLM.from_pretrained("gpt2")
Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=2), data_collator=collate).train()
'''
    write_checkout(tmp_path, {"train.py": train})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert plan.get("padding").value == "max_length"
