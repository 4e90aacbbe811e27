"""Where the sequence length, padding and packing of a micro-batch are decided (issue 27's capability):
tokenizer calls, hand truncation, hand-written datasets and collators reached indirectly, lengths from
the model or a framework's dataset default, companion pre-tokenizing scripts, legacy trainer keywords.

Each test is a tiny made-up script (or checkout in tmp_path) written from the pattern."""

from __future__ import annotations


from memlint.extract import extract_file, extract_source
from checkouts import write_checkout, field_values as _get


_write = write_checkout



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


# ---- 3. a collate function reached indirectly ---------------------------------------------------

_LOOP_HEAD = '''import functools
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
data = []
'''

_LOOP_TAIL = '''
for batch in loader:
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
'''

_COLLATE = '''
def collate(batch, pad_token_id=0, allowed_max_length=None, device="cpu"):
    longest = max(len(item) + 1 for item in batch)
    rows = []
    for item in batch:
        padded = item + [pad_token_id] * (longest - len(item))
        if allowed_max_length is not None:
            padded = padded[:allowed_max_length]
        rows.append(torch.tensor(padded))
    return {"input_ids": torch.stack(rows).to(device)}
'''


def test_a_partial_of_a_collate_function_binds_its_length_keyword():
    src = _LOOP_HEAD + _COLLATE + '''
collate_fn = functools.partial(collate, allowed_max_length=640, pad_token_id=2)
loader = DataLoader(data, batch_size=6, collate_fn=collate_fn, shuffle=True)
''' + _LOOP_TAIL
    plan = extract_source(src, "train.py")
    assert _get(plan, "max_length", "padding", "per_device_batch") == {"max_length": 640, "padding": "longest",
                                                                       "per_device_batch": 6}


def test_a_lambda_collate_passes_its_keywords_on():
    src = _LOOP_HEAD + _COLLATE + '''
loader = DataLoader(data, batch_size=6, collate_fn=lambda b: collate(b, allowed_max_length=320))
''' + _LOOP_TAIL
    plan = extract_source(src, "train.py")
    assert _get(plan, "max_length", "padding") == {"max_length": 320, "padding": "longest"}


_DATASET_METHOD = '''import argparse
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer


class TrainDataset(torch.utils.data.Dataset):
    def __init__(self, config, tokenizer):
        self.tokenizer = tokenizer
        self.data = []
        self.max_seq_len = config.max_seq_len

    def __getitem__(self, index):
        return self.data[index]

    def encode(self, row):
        ids = self.tokenizer.encode(row["text"], add_special_tokens=False)
        return ids[-self.max_seq_len:]

    def collate_fn(self, batch):
        input_ids = [self.encode(row) for row in batch]
        max_len = max(len(x) for x in input_ids)
        max_len = min(max_len, self.max_seq_len)
        input_ids = [item[:max_len] + [self.tokenizer.eos_token_id] * (max_len - len(item)) for item in input_ids]
        return {"input_ids": torch.LongTensor(input_ids)}

    def __len__(self):
        return len(self.data)


def train(args):
    tokenizer = AutoTokenizer.from_pretrained(args.model_path)
    model = AutoModelForCausalLM.from_pretrained(args.model_path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    train_dataset = TrainDataset(args, tokenizer)
    loader = DataLoader(train_dataset, batch_size=args.bsz, shuffle=True, collate_fn=train_dataset.collate_fn)
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--model_path", default="Qwen/Qwen2.5-0.5B")
    p.add_argument("--max_seq_len", type=int, default=3072)
    p.add_argument("--bsz", type=int, default=2)
    train(p.parse_args())
'''


def test_a_bound_method_of_the_dataset_as_collate_fn_pads_to_the_capped_longest():
    plan = extract_source(_DATASET_METHOD, "train.py")
    assert _get(plan, "max_length", "padding", "packing", "per_device_batch") == {
        "max_length": 3072, "padding": "longest", "packing": False, "per_device_batch": 2}


def test_a_collator_class_with_call_pads_as_its_call_does():
    src = _LOOP_HEAD + '''
class Collator:
    def __init__(self, pad_id, max_length):
        self.pad_id = pad_id
        self.max_length = max_length

    def __call__(self, batch):
        rows = [ids[: self.max_length] for ids in batch]
        return torch.tensor([r + [self.pad_id] * (self.max_length - len(r)) for r in rows])

loader = DataLoader(data, batch_size=4, collate_fn=Collator(0, 256))
''' + _LOOP_TAIL
    plan = extract_source(src, "train.py")
    assert _get(plan, "max_length", "padding") == {"max_length": 256, "padding": "max_length"}


def test_a_collate_function_from_a_helper_module_with_a_partial(tmp_path):
    _write(tmp_path, {
        "train.py": _LOOP_HEAD.replace("import functools\n", "import functools\nfrom utils.data import collate\n") + '''
loader = DataLoader(data, batch_size=6, collate_fn=functools.partial(collate, allowed_max_length=512))
''' + _LOOP_TAIL,
        "utils/__init__.py": "",
        "utils/data.py": "import torch\n" + _COLLATE,
        "setup.py": "",
    })
    plan = extract_file(tmp_path / "train.py")
    assert _get(plan, "max_length", "padding") == {"max_length": 512, "padding": "longest"}


def test_a_padded_tensor_cut_along_its_last_dimension_by_a_config_key_is_the_length():
    src = _LOOP_HEAD.replace("import torch\n", "import torch\nfrom torch.nn.utils.rnn import pad_sequence\n") + '''
args = {"context_length": 768, "batch_size": 3}

def collate_fn(batch):
    input_ids = [torch.tensor(item["input_ids"]) for item in batch]
    input_ids = pad_sequence(input_ids, batch_first=True, padding_value=0)[:, :args["context_length"]]
    return {"input_ids": input_ids}

loader = DataLoader(data, batch_size=args["batch_size"], collate_fn=collate_fn)
''' + _LOOP_TAIL
    plan = extract_source(src, "train.py")
    assert _get(plan, "max_length", "padding", "per_device_batch") == {"max_length": 768, "padding": "longest",
                                                                       "per_device_batch": 3}


# ---- 2. hand-written datasets ----------------------------------------------------------------------

_STREAM = '''import torch
from torch.utils.data import IterableDataset


class BatchStream(IterableDataset):
    def __init__(self, data, tokenizer, batch_size, max_length):
        super().__init__()
        self.data = data
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length

    def __iter__(self):
        batch = []
        for example in self.data:
            tok = self.tokenizer(example["text"], max_length=self.max_length, truncation=True,
                                 padding="max_length", return_tensors="pt")
            batch.append(tok)
            if len(batch) == self.batch_size:
                yield self._format(batch)
                batch = []
        if batch:
            yield self._format(batch)

    def _format(self, batch):
        return {"input_ids": torch.stack([b["input_ids"].squeeze(0) for b in batch])}
'''

_STREAM_MAIN = '''import argparse
import datasets
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from data import stream
from data.stream import BatchStream


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, required=True)
    parser.add_argument("--max_length", type=int, default=320)
    parser.add_argument("--accum", type=int, default=4)
    args = parser.parse_args()
    return stream.check(args)


def main(args):
    tokenizer = AutoTokenizer.from_pretrained("t5-base", model_max_length=args.max_length)
    data = datasets.load_dataset("allenai/c4", "en", split="train", streaming=True)
    dataset = BatchStream(data, tokenizer, batch_size=args.batch_size, max_length=args.max_length)
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = 0
    for batch in dataloader:
        step += 1
        loss = model(**batch, labels=batch["input_ids"]).loss
        loss.backward()
        if step % args.accum != 0: continue
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main(parse_args())
'''


def test_an_iterable_dataset_that_yields_whole_batches_sets_the_micro_batch_and_length(tmp_path, monkeypatch):
    # the dataset module lives in a folder without __init__.py, imported as `from data import stream`
    _write(tmp_path, {"main.py": _STREAM_MAIN, "data/stream.py": _STREAM + "\n\ndef check(args):\n    return args\n",
                      "setup.py": ""})
    monkeypatch.chdir(tmp_path)
    from memlint.extract.shell import command_targets
    from memlint.extract import extract_targets

    plan = extract_targets(command_targets(["python", "main.py", "--batch_size", "12"]))[0]
    assert _get(plan, "per_device_batch", "max_length", "padding", "packing", "grad_accum", "trainer") == {
        "per_device_batch": 12, "max_length": 320, "padding": "max_length", "packing": False, "grad_accum": 4,
        "trainer": "custom-loop"}
    assert any("batch_size=None" in c for c in plan.fields["per_device_batch"].chain)


def test_a_map_style_dataset_that_pads_in_getitem_pads_to_its_length():
    src = '''import torch
from torch.utils.data import DataLoader, Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

SEQ_LEN = 448


class PaddedDataset(Dataset):
    def __init__(self, rows, tokenizer, max_len=SEQ_LEN):
        self.rows = rows
        self.tokenizer = tokenizer
        self.max_len = max_len

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids = self.tokenizer.encode(self.rows[i])[: self.max_len]
        ids = ids + [self.tokenizer.pad_token_id] * (self.max_len - len(ids))
        return torch.tensor(ids)


tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
loader = DataLoader(PaddedDataset(open("d.txt").read().split("\\n"), tokenizer), batch_size=5, shuffle=True)
for batch in loader:
    model(input_ids=batch, labels=batch).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
'''
    plan = extract_source(src, "train.py")
    assert _get(plan, "max_length", "padding", "per_device_batch") == {"max_length": 448, "padding": "max_length",
                                                                       "per_device_batch": 5}


def test_the_step_of_the_checkouts_own_optimizer_class_is_a_training_step():
    src = '''import torch
from torch.optim import Optimizer
from transformers import AutoModelForCausalLM


class MyAdam(Optimizer):
    def __init__(self, params, lr=1e-3):
        super().__init__(params, dict(lr=lr))

    def step(self, closure=None):
        return None


model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
opt = MyAdam(model.parameters())
for batch in loader:
    model(**batch).loss.backward()
    opt.step()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["trainer"].value == "custom-loop"


def test_the_checkouts_copy_of_a_transformers_model_class_built_from_a_config_is_that_model(tmp_path):
    _write(tmp_path, {
        "setup.py": "",
        "models/modeling.py": '''from torch import nn
from transformers.modeling_utils import PreTrainedModel


class MyPreTrained(PreTrainedModel):
    pass


class MyLlamaForCausalLM(MyPreTrained):
    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
''',
        "train.py": '''import torch
from transformers import AutoConfig
from models.modeling import MyLlamaForCausalLM

config = AutoConfig.from_pretrained("configs/llama_1b.json")
model = MyLlamaForCausalLM(config).to(dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for batch in loader:
    model(**batch).loss.backward()
    optimizer.step()
'''})
    plan = extract_file(tmp_path / "train.py")
    assert _get(plan, "model_id", "method", "trainer") == {"model_id": "configs/llama_1b.json", "method": "full",
                                                          "trainer": "custom-loop"}


# ---- 6b. a length field of the script's own arguments class, written after construction ------------

def test_a_length_field_of_the_checkouts_arguments_class_set_by_attribute_write(tmp_path):
    _write(tmp_path, {
        "setup.py": "",
        "mylib/__init__.py": "from mylib.config import MyConfig\nfrom mylib.trainer import MyTrainer\n\n"
                             "def defaults(run_name):\n    return MyConfig(output_dir=run_name, max_seq_len=2048)\n",
        "mylib/config.py": '''from dataclasses import dataclass, field
from typing import Optional
from transformers import TrainingArguments


@dataclass
class MyConfig(TrainingArguments):
    max_seq_len: Optional[int] = field(default=1024)
    max_tokens: Optional[int] = field(default=None)
''',
        "mylib/trainer.py": "from transformers import Trainer\n\n\nclass MyTrainer(Trainer):\n    pass\n",
        "train.py": '''import mylib
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
args = mylib.defaults("o")
args.per_device_train_batch_size = 4
args.max_tokens = 512
args.max_seq_len = 3072
mylib.MyTrainer(model=model, processing_class=tokenizer, args=args).train()
'''})
    plan = extract_file(tmp_path / "train.py")
    assert _get(plan, "max_length", "per_device_batch") == {"max_length": 3072, "per_device_batch": 4}


# ---- 4. a framework's dataset default, at the version the checkout pins -----------------------------

_TUNE = '''model:
  _component_: torchtune.models.llama2.qlora_llama2_7b
  lora_attn_modules: ['q_proj', 'v_proj']
  lora_rank: 8
tokenizer:
  _component_: torchtune.models.llama2.llama2_tokenizer
  path: /tmp/tokenizer.model
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
  train_on_input: True
batch_size: 2
optimizer:
  _component_: torch.optim.AdamW
  lr: 3e-4
loss:
  _component_: torch.nn.CrossEntropyLoss
epochs: 1
gradient_accumulation_steps: 8
dtype: bf16
enable_activation_checkpointing: True
'''


def test_torchtune_dataset_builder_default_length_at_a_poetry_pinned_version(tmp_path):
    _write(tmp_path, {"cfg.yaml": _TUNE, "pyproject.toml": '[tool.poetry]\nname = "x"\n\n[tool.poetry.dependencies]\n'
                                                          'python = "^3.10"\ntorchtune = "^0.2.0"\n'})
    plan = extract_file(tmp_path / "cfg.yaml")
    v = plan.fields["max_length"]
    assert (v.value, v.source) == (512, "library-default")
    assert any("torchtune 0.2" in c for c in v.chain)


def test_torchtune_dataset_default_from_a_poetry_lock(tmp_path):
    _write(tmp_path, {"cfg.yaml": _TUNE.replace("alpaca_cleaned_dataset", "slimorca_dataset"),
                      "poetry.lock": '[[package]]\nname = "torchtune"\nversion = "0.1.1"\ndescription = "x"\n'})
    assert extract_file(tmp_path / "cfg.yaml").fields["max_length"].value == 1024


def test_torchtune_from_0_3_the_dataset_does_not_truncate_without_a_tokenizer_length(tmp_path):
    _write(tmp_path, {"cfg.yaml": _TUNE, "requirements.txt": "torchtune==0.3.1\n"})
    v = extract_file(tmp_path / "cfg.yaml").fields["max_length"]
    assert v.value is None and "does not truncate" in v.chain[0]


def test_torchtune_dataset_max_seq_len_key_and_tokenizer_key(tmp_path):
    _write(tmp_path, {"a.yaml": _TUNE.replace("  train_on_input: True\n", "  train_on_input: True\n  max_seq_len: 300\n"),
                      "b.yaml": _TUNE.replace("  path: /tmp/tokenizer.model\n", "  path: /tmp/tokenizer.model\n  max_seq_len: 2048\n"),
                      "requirements.txt": "torchtune==0.2.1\n"})
    assert extract_file(tmp_path / "a.yaml").fields["max_length"].value == 300
    assert extract_file(tmp_path / "b.yaml").fields["max_length"].value == 2048


def test_poetry_constraints_read_as_ranges():
    from memlint.library.pins import _poetry_spec

    assert _poetry_spec("^0.1.1") == ">=0.1.1,<0.2"
    assert _poetry_spec("^2.2.1") == ">=2.2.1,<3"
    assert _poetry_spec("~1.2.3") == ">=1.2.3,<1.3"
    assert _poetry_spec("4.40.1") == "==4.40.1"
    assert _poetry_spec("*") is None


# ---- 7. precision: what is not packing, not a length, not a padding rule ----------------------------

_GRPO_LOOP = '''import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import AutoModelForCausalLM, AutoTokenizer

num_per_q = 16
train_batch_size = 4
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)

for prompt, answers in samples():
    prompt_ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    for ii in range(0, num_per_q, train_batch_size):
        sub = answers[ii:ii + train_batch_size]
        completion_ids = pad_sequence([torch.tensor(a) for a in sub], batch_first=True, padding_value=0)
        merged = torch.cat([prompt_ids.repeat(completion_ids.shape[0], 1), completion_ids], dim=1)
        loss = model(merged).logits.mean()
        loss.backward()
        optimizer.step()
'''


def test_samples_cut_into_batches_and_prompt_completion_concatenation_are_not_packing():
    plan = extract_source(_GRPO_LOOP, "train.py")
    assert _get(plan, "padding", "packing") == {"padding": "longest", "packing": False}
    assert plan.fields["max_length"].value != train_batch_size_value()


def train_batch_size_value() -> int:
    return 4


def test_a_token_stream_cut_in_blocks_of_a_length_is_still_packing():
    src = _GRPO_LOOP.replace("for prompt, answers in samples():", "ids = tokenizer(open('t.txt').read())['input_ids']\n"
                             "block_size = 512\nblocks = [ids[i:i + block_size] for i in range(0, len(ids), block_size)]\n"
                             "for prompt, answers in samples():")
    plan = extract_source(src, "train.py")
    assert _get(plan, "packing", "max_length") == {"packing": True, "max_length": 512}


def test_a_plotting_helper_that_pads_a_loss_curve_is_not_a_padding_rule():
    src = _HEAD + '''
import matplotlib.pyplot as plt

def process(example):
    ids = tokenizer(example["text"], truncation=True, max_length=256)["input_ids"]
    return {"input_ids": ids, "labels": ids}

def plot_losses(history, width=50):
    padded = history + [float("nan")] * (width - len(history))
    plt.plot(padded)

ds = ds.map(process)
''' + _TAIL + '''
plot_losses([1.0, 0.5])
'''
    plan = extract_source(src, "train.py")
    assert _get(plan, "max_length", "padding") == {"max_length": 256, "padding": "longest"}


# ---- 5. lengths fixed by a companion script that writes the arrays the training script loads --------

_PREP = '''import os
import numpy as np
import torch
from transformers import AutoTokenizer

MAX_LEN = 4096
PAD = 0

def main(out):
    tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
    rows = []
    for text in open("raw.txt"):
        ids = tok(text)["input_ids"][:MAX_LEN]
        rows.append(ids + [PAD] * (MAX_LEN - len(ids)))
    np.save(os.path.join(out, "tokens.npy"), np.array(rows))

if __name__ == "__main__":
    main("data")
'''

_PRE_TOKENIZED_TRAIN = '''import os
import numpy as np
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self, folder):
        self.ids = torch.from_numpy(np.load(os.path.join(folder, "tokens.npy")))

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

    def __len__(self):
        return self.ids.size(0)


class TrimCollator:
    def __call__(self, rows):
        input_ids = torch.stack([r["input_ids"] for r in rows])
        last = (input_ids != 0).sum(dim=1).max()
        return {"input_ids": input_ids[:, :last], "labels": input_ids[:, :last]}


model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
args = TrainingArguments("o", per_device_train_batch_size=1)
Trainer(model=model, args=args, train_dataset=TokenDataset("data"), data_collator=TrimCollator()).train()
'''


def test_a_companion_that_writes_the_loaded_array_fixes_the_length(tmp_path):
    _write(tmp_path, {"setup.py": "", "scripts/prepare.py": _PREP, "train.py": _PRE_TOKENIZED_TRAIN})
    plan = extract_file(tmp_path / "train.py")
    v = plan.fields["max_length"]
    assert (v.value, v.source) == (4096, "constant")
    assert any("writes tokens.npy" in c for c in v.chain) and v.span.path.endswith("prepare.py")
    assert plan.fields["padding"].value == "longest"  # the collator trims each batch to its longest row


def test_a_script_that_writes_another_file_is_no_companion(tmp_path):
    _write(tmp_path, {"setup.py": "", "scripts/prepare.py": _PREP.replace("tokens.npy", "other.npy"),
                      "train.py": _PRE_TOKENIZED_TRAIN})
    plan = extract_file(tmp_path / "train.py")
    assert plan.fields["max_length"].value is None
    assert any("pre-tokenized data (tokens.npy" in n for n in plan.notes)


# ---- 8. a data-dependent length always gets an answer --------------------------------------------

def test_an_untruncated_length_with_an_unknown_micro_batch_still_gets_the_longest_sequence_answer():
    from memlint.estimate.conditional import conditional

    src = '''import os
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

def collate(rows):
    return tokenizer([r["text"] for r in rows], padding=True, return_tensors="pt")

loader = DataLoader(rows, batch_size=int(os.environ["BSZ"]), collate_fn=collate)
for batch in loader:
    model(**batch, labels=batch["input_ids"]).loss.backward()
    optimizer.step()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["max_length"].value is None and plan.fields["per_device_batch"].value is None
    c = conditional(plan)
    assert c is not None and c.unknown == ("max_length", "per_device_batch") and c.batch == 1
    assert all(r.max_seq and r.max_seq >= 128 for r in c.rows if r.gpu != "RTX4090")
    assert "micro-batch 1" in c.text()


def test_a_map_function_from_a_helper_module_truncating_by_its_own_constant(tmp_path):
    _write(tmp_path, {
        "setup.py": "",
        "helpers/prep.py": '''def tokenize_fn(example, tokenizer):
    MAX_SEQ_LEN = 1536
    ids = tokenizer(example["prompt"] + example["answer"])["input_ids"]
    return {"input_ids": ids[:MAX_SEQ_LEN], "labels": ids[:MAX_SEQ_LEN]}
''',
        "train.py": _HEAD + '''from functools import partial
from helpers.prep import tokenize_fn

ds = ds.map(partial(tokenize_fn, tokenizer=tokenizer))
''' + _TAIL})
    plan = extract_file(tmp_path / "train.py")
    assert _get(plan, "max_length", "padding") == {"max_length": 1536, "padding": "longest"}


# ---- a dataset the script tokenized itself, handed to SFTTrainer ----------------------------------------------

_PRETOKENIZED = '''from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, TrainingArguments
from trl import SFTTrainer

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
data = load_dataset("some/prompts")
data = data.map(lambda samples: tokenizer(samples["prompt"]{TRUNC}), batched=True)
train = data["train"].select(range(50))
train = train.remove_columns("act")
trainer = SFTTrainer(model=model, args=TrainingArguments("out", per_device_train_batch_size=2), train_dataset=train,
                     dataset_text_field="prompt", tokenizer=tokenizer,
                     data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
trainer.train()
'''


def _pretokenized(tmp_path, monkeypatch, trl: str, trunc: str = "", name: str = "a"):
    root = _write(tmp_path / name, {"requirements.txt": f"trl=={trl}\ntransformers==4.40.0\n",
                                    "train.py": _PRETOKENIZED.replace("{TRUNC}", trunc)})
    monkeypatch.chdir(root)
    return extract_file(root / "train.py")


def test_sft_takes_a_pretokenized_dataset_as_it_is_at_the_versions_that_do(tmp_path, monkeypatch):
    plan = _pretokenized(tmp_path, monkeypatch, "0.8.6")
    ml = plan.fields["max_length"]
    assert ml.source == "unknown" and "no truncation" in " ".join(ml.chain)  # the longest sample decides
    assert plan.fields["packing"].value is False
    plan = _pretokenized(tmp_path, monkeypatch, "0.8.6", ", truncation=True, max_length=256", "b")
    assert plan.fields["max_length"].value == 256  # the script's own truncation
    plan = _pretokenized(tmp_path, monkeypatch, "0.19.0", name="c")  # truncates a processed dataset too (truncate_dataset)
    assert plan.fields["max_length"].value == 1024 and plan.fields["max_length"].source == "library-default"


def test_a_dataset_mapped_without_a_tokenizer_is_tokenized_by_sft(tmp_path, monkeypatch):
    src = _PRETOKENIZED.replace('tokenizer(samples["prompt"]{TRUNC})', '{"prompt": samples["prompt"]}')
    root = _write(tmp_path, {"requirements.txt": "trl==0.8.6\n", "train.py": src})
    monkeypatch.chdir(root)
    plan = extract_file(root / "train.py")
    assert plan.fields["max_length"].value == 1024  # SFTTrainer's max_seq_length default at 0.8.6


_SKIP_PREPARE = '''from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoProcessor
from trl import SFTConfig, SFTTrainer

processor = None


def collate_fn(examples):
    texts = [processor.apply_chat_template(e["messages"], tokenize=False) for e in examples]
    batch = processor(text=texts, return_tensors="pt", padding=True{TRUNC})
    batch["labels"] = batch["input_ids"].clone()
    return batch


def main():
    global processor
    processor = AutoProcessor.from_pretrained("Qwen/Qwen2-VL-2B-Instruct")
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
    args = SFTConfig("out", per_device_train_batch_size=4, packing=True, max_seq_length=4096)
    args.dataset_kwargs = {"skip_prepare_dataset": True}
    SFTTrainer(model=model, args=args, train_dataset=load_dataset("x")["train"], data_collator=collate_fn).train()


main()
'''


def test_sft_told_to_skip_preparing_the_dataset_takes_the_collators_batches(tmp_path, monkeypatch):
    """dataset_kwargs={"skip_prepare_dataset": True}: SFTTrainer neither packs nor truncates; the script's collate
    function (its processor, bound by a `global` statement) pads each batch; with no truncation the longest sample
    decides, and with one the call's max_length does."""
    root = _write(tmp_path / "a", {"requirements.txt": "trl==0.14.0\n", "train.py": _SKIP_PREPARE.replace("{TRUNC}", "")})
    monkeypatch.chdir(root)
    plan = extract_file(root / "train.py")
    assert _get(plan, "packing", "padding") == {"packing": False, "padding": "longest"}
    ml = plan.fields["max_length"]
    assert ml.source == "unknown" and "no truncation" in " ".join(ml.chain)
    root = _write(tmp_path / "b", {"requirements.txt": "trl==0.14.0\n",
                                   "train.py": _SKIP_PREPARE.replace("{TRUNC}", ", truncation=True, max_length=1024")})
    monkeypatch.chdir(root)
    assert _get(extract_file(root / "train.py"), "max_length", "packing") == {"max_length": 1024, "packing": False}
    root = _write(tmp_path / "c", {"requirements.txt": "trl==0.14.0\n",
                                   "train.py": _SKIP_PREPARE.replace("{TRUNC}", "").replace(
                                       '    args.dataset_kwargs = {"skip_prepare_dataset": True}\n', "")})
    monkeypatch.chdir(root)
    assert _get(extract_file(root / "train.py"), "max_length", "packing") == {"max_length": 4096, "packing": True}
