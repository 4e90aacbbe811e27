"""The llama-recipes layout and its many forks: settings kept as class attributes of dataclasses used as
namespaces (`train_config.batch_size_training`), updated from fire's **kwargs by `update_config((train_config,
fsdp_config), **kwargs)` (isinstance of a class object, hasattr/setattr on a class), the dataset's config class
picked by name from `inspect.getmembers(datasets)`, a plain class attribute of a dataclass, and a dataset that pads
each sample by hand with `torch.cat((ids, torch.zeros(padding)))` where `padding = max_words - ids.shape[0]`."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_CONFIGS = {
    "configs/__init__.py": "from .training import train_config\nfrom .fsdp import fsdp_config\n",
    "configs/training.py": """
        from dataclasses import dataclass

        @dataclass
        class train_config:
            model_name: str = "gpt2"
            enable_fsdp: bool = False
            batch_size_training: int = 4
            dataset = "alpaca_dataset"
    """,
    "configs/fsdp.py": """
        from dataclasses import dataclass

        @dataclass
        class fsdp_config:
            pure_bf16: bool = False
    """,
    "configs/datasets.py": """
        from dataclasses import dataclass

        @dataclass
        class alpaca_dataset:
            dataset: str = "alpaca_dataset"
            max_words: int = 384

        @dataclass
        class grammar_dataset:
            dataset: str = "grammar_dataset"
            max_words: int = 1024
    """,
    "utils/__init__.py": "",
    "utils/config_utils.py": """
        import inspect
        import configs.datasets as datasets

        def update_config(config, **kwargs):
            if isinstance(config, (tuple, list)):
                for c in config:
                    update_config(c, **kwargs)
            else:
                for k, v in kwargs.items():
                    if hasattr(config, k):
                        setattr(config, k, v)

        def generate_dataset_config(train_config, kwargs):
            dataset_config = {k: v for k, v in inspect.getmembers(datasets)}[train_config.dataset]
            update_config(dataset_config, **kwargs)
            return dataset_config
    """,
}

_MAIN = """
    import fire
    import torch
    from torch.utils.data import Dataset, DataLoader
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from configs import train_config, fsdp_config
    from utils.config_utils import update_config, generate_dataset_config

    class InstructionDataset(Dataset):
        def __init__(self, tokenizer, max_words=30):
            self.tokenizer, self.max_words, self.ann = tokenizer, max_words, []
        def __len__(self):
            return len(self.ann)
        def __getitem__(self, index):
            example = torch.tensor(self.tokenizer.encode(self.ann[index]), dtype=torch.int64)
            padding = self.max_words - example.shape[0]
            if padding > 0:
                example = torch.cat((example, torch.zeros(padding, dtype=torch.int64) - 1))
            elif padding < 0:
                example = example[: self.max_words]
            return {"input_ids": example, "labels": example}

    def main(**kwargs):
        update_config((train_config, fsdp_config), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(train_config.model_name)
        if train_config.enable_fsdp and fsdp_config.pure_bf16:
            model.to(torch.bfloat16)
        dataset_config = generate_dataset_config(train_config, kwargs)
        ds = InstructionDataset(AutoTokenizer.from_pretrained(train_config.model_name), dataset_config.max_words)
        opt = torch.optim.AdamW(model.parameters())
        for batch in DataLoader(ds, batch_size=train_config.batch_size_training):
            model(**batch).loss.backward()
            opt.step()

    if __name__ == "__main__":
        fire.Fire(main)
"""


@pytest.mark.parametrize("flags, want", [
    ((), {"model_id": "gpt2", "per_device_batch": 4, "max_length": 384}),
    (("--model_name", "Qwen/Qwen2.5-0.5B", "--batch_size_training", "64", "--enable_fsdp", "--pure_bf16",
      "--dataset", "grammar_dataset"),
     {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 64, "torch_dtype": "bf16", "max_length": 1024}),
])
def test_fire_flags_update_class_namespaces(tmp_path, monkeypatch, flags, want):
    root = _write(tmp_path, {**_CONFIGS, "finetuning.py": _MAIN})
    plan = _command(root, monkeypatch, "python", "finetuning.py", *flags)
    assert _get(plan, *want) == want
    assert _get(plan, "padding") == {"padding": "max_length"}


def test_a_class_attribute_write_is_read_through_the_class(tmp_path, monkeypatch):
    script = """
        from dataclasses import dataclass
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        @dataclass
        class cfg:
            model: str = "gpt2"
            batch = 2

        cfg.model = "Qwen/Qwen2.5-0.5B"
        setattr(cfg, "batch", 8)
        assert hasattr(cfg, "batch") and not hasattr(cfg, "missing")
        model = AutoModelForCausalLM.from_pretrained(cfg.model)
        Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=cfg.batch)).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 8}


def test_a_dataclass_keeps_its_field_defaults_for_instances_after_a_class_write(tmp_path, monkeypatch):
    script = """
        from dataclasses import dataclass
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        @dataclass
        class TC:
            batch: int = 4

        TC.batch = 64
        assert hasattr(TC, "__dataclass_fields__")
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=TC().batch)).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "per_device_batch") == {"per_device_batch": 4}


@pytest.mark.parametrize("join, want", [
    ("tokenized_source + tokenized_target", 1280),   # qlora.py: prompt and response truncated apart, then joined
    ("tokenized_source", 1024),                      # the prompt alone
])
def test_two_token_lists_truncated_apart_and_joined_hold_the_sum_of_their_caps(tmp_path, monkeypatch, join, want):
    script = f"""
        import torch
        from dataclasses import dataclass
        from torch.nn.utils.rnn import pad_sequence
        from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

        @dataclass
        class DataCollatorForCausalLM:
            tokenizer: object
            source_max_len: int
            target_max_len: int

            def __call__(self, instances):
                sources = [ex["input"] for ex in instances]
                targets = [ex["output"] for ex in instances]
                src = self.tokenizer(sources, max_length=self.source_max_len, truncation=True, add_special_tokens=False)
                tgt = self.tokenizer(targets, max_length=self.target_max_len, truncation=True, add_special_tokens=False)
                input_ids = []
                for tokenized_source, tokenized_target in zip(src["input_ids"], tgt["input_ids"]):
                    input_ids.append(torch.tensor({join}))
                input_ids = pad_sequence(input_ids, batch_first=True, padding_value=0)
                return {{"input_ids": input_ids, "labels": input_ids}}

        tok = AutoTokenizer.from_pretrained("gpt2")
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        collator = DataCollatorForCausalLM(tokenizer=tok, source_max_len=1024, target_max_len=256)
        Trainer(model=model, args=TrainingArguments(output_dir="o"), data_collator=collator, train_dataset=[]).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "max_length", "padding") == {"max_length": want, "padding": "longest"}


@pytest.mark.parametrize("size", ["buf.numel()", "len(buf)", "buf.size(0)", "buf.shape[0]"])
def test_a_generator_that_cuts_a_filling_buffer_into_blocks_packs(tmp_path, monkeypatch, size):
    script = f"""
        import torch as t
        import datasets as ds
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        class Data:
            def __init__(self, max_seq_length):
                self.max_seq_length = max_seq_length

            def chunk_iterable(self, it):
                buf = t.empty(0)
                for eg in it:
                    buf = t.cat((buf, eg["input_ids"]))
                    while {size} >= self.max_seq_length:
                        yield {{"input_ids": buf[: self.max_seq_length]}}
                        buf = buf[self.max_seq_length :]

            def train_dataset(self):
                return ds.Dataset.from_generator(lambda: self.chunk_iterable(ds.load_dataset("x", split="train")))

        model = AutoModelForCausalLM.from_pretrained("gpt2")
        data = Data(2048)
        Trainer(model=model, args=TrainingArguments(output_dir="o"), train_dataset=data.train_dataset()).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "max_length", "padding", "packing") == {"max_length": 2048, "padding": "packing", "packing": True}
