"""Values real scripts set in ways earlier readers missed (fifth pass): an import guarded by `try`/`except
ImportError` of a package the run cannot start without, or of one the file already imported, took the import; its
fallback (`torch = None`) is not what runs."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_GUARDED = """
    {top}
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    try:
        import {module}
    except {caught}:
        {module} = None

    use_4bit = True
    if use_4bit and not torch.cuda.is_available():
        use_4bit = False
    use_bf16 = False
    if torch is None:
        raise ImportError("no torch")
    else:
        use_bf16 = torch.cuda.is_available()
    model = AutoModelForCausalLM.from_pretrained("gpt2", load_in_4bit=use_4bit)
    if use_4bit:
        model = prepare_model_for_kbit_training(model)
    model = get_peft_model(model, LoraConfig(r=8, task_type="CAUSAL_LM"))
    Trainer(model=model, args=TrainingArguments(output_dir="o", bf16=use_bf16)).train()
"""


@pytest.mark.parametrize("top, module, caught, read", [
    ("import torch", "torch", "ImportError", True),        # imported above: the second import cannot fail
    ("", "torch", "(ImportError, ModuleNotFoundError)", True),  # a package no training run lacks
    ("import torch", "torch", "Exception", False),         # any error: the fallback may be what ran
])
def test_a_guarded_import_of_a_package_the_run_needs_took_the_import(tmp_path, monkeypatch, top, module, caught, read):
    root = _write(tmp_path, {"train.py": _GUARDED.format(top=top, module=module, caught=caught)})
    plan = _command(root, monkeypatch, "python", "train.py")
    got = {n: getattr(plan.fields.get(n), "value", None) for n in ("method", "quant_bits", "precision")}
    if read:
        assert got == {"method": "qlora", "quant_bits": 4, "precision": "amp-bf16"}
    else:
        assert got != {"method": "qlora", "quant_bits": 4, "precision": "amp-bf16"}


def test_an_optional_accelerator_keeps_both_branches(tmp_path, monkeypatch):
    # flash_attn is optional: its fallback may be what runs, so the attention is not taken from the import
    script = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        try:
            import flash_attn
            attn = "flash_attention_2"
        except ImportError:
            attn = "sdpa"
        model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation=attn)
        Trainer(model=model, args=TrainingArguments(output_dir="o")).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert getattr(plan.fields.get("attn_implementation"), "value", None) != "flash_attention_2"


@pytest.mark.parametrize("readme, trl", [
    # the instructions run in order: an unversioned upgrade after a pin installs the newest release (no pin)
    ("```bash\npip install -U -q trl==0.14.0\npip install --upgrade trl\n```\n", None),
    ("```bash\npip install trl==0.14.0\npip install -qU trl\n```\n", None),
    # an unversioned install of an installed package keeps its version (pip: requirement already satisfied)
    ("```bash\npip install trl==0.14.0\npip install trl\n```\n", "0.14.0"),
    # a later pin replaces an earlier one
    ("```bash\npip install trl==0.14.0\n```\nthen\n```bash\npip install -U trl==0.16.1\n```\n", "0.16.1"),
])
def test_the_readmes_install_lines_run_in_order(tmp_path, readme, trl):
    from memlint.library.pins import checkout_pins

    root = _write(tmp_path, {"README.md": readme, "train.py": "import trl\n"})
    assert {p.package: p.version for p in checkout_pins(root / "train.py")}.get("trl") == trl


def test_a_try_body_with_a_compound_statement_is_read(tmp_path, monkeypatch):
    script = """
        import torch
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        try:
            if torch.cuda.is_available():
                import torch.cuda
        except ImportError:
            pass
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=3)).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "gpt2", "per_device_batch": 3}


_ARGV_PARSER = """
    import sys
    from argparse import ArgumentParser
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    def _bool(x):
        return x is not None and x.lower().strip() == "true"

    def parse():
        p = ArgumentParser()
        p.add_argument("-bm", "--base-model", default="gpt2")
        p.add_argument("-bs", "--batch-size", type=int, default=4)
        p.add_argument("--use-bf16", default="false", type=lambda x: _bool(x))
        {parse}

    args = parse()
    model = AutoModelForCausalLM.from_pretrained(args.base_model)
    Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=args.batch_size,
                                                bf16=args.use_bf16)).train()
"""


@pytest.mark.parametrize("parse, model", [
    ("a = sys.argv\n        a.pop(0)\n        return p.parse_args(a)", "Qwen/Qwen2.5-0.5B"),
    ("return p.parse_args(sys.argv[1:])", "Qwen/Qwen2.5-0.5B"),
    ("return p.parse_args()", "Qwen/Qwen2.5-0.5B"),
    ("return p.parse_args(['--base-model', 'other'])", None),  # the script's own words: not the command's
])
def test_parse_args_given_the_command_line_reads_it(tmp_path, monkeypatch, parse, model):
    root = _write(tmp_path, {"train.py": _ARGV_PARSER.replace("{parse}", parse)})
    plan = _command(root, monkeypatch, "python", "train.py", "--base-model", "Qwen/Qwen2.5-0.5B", "-bs", "2")
    got = {n: getattr(plan.fields.get(n), "value", None) for n in ("model_id", "per_device_batch", "precision")}
    if model is None:
        assert got["model_id"] != "Qwen/Qwen2.5-0.5B"
    else:  # the string default "false" goes through type=: False, so fp32
        assert got == {"model_id": model, "per_device_batch": 2, "precision": "fp32"}


@pytest.mark.parametrize("trl", ["0.15.2", "0.16.1", "0.19.1"])
def test_sft_config_max_seq_length_none_keeps_the_trainers_default(tmp_path, monkeypatch, trl):
    script = """
        from transformers import AutoModelForCausalLM
        from trl import SFTConfig, SFTTrainer
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        SFTTrainer(model=model, args=SFTConfig(output_dir="o", max_seq_length=None)).train()
    """
    root = _write(tmp_path, {"train.py": script, "requirements.txt": f"trl=={trl}\n"})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "max_length") == {"max_length": 1024}


_PARTIAL_MAP = """
    from functools import partial
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments, DataCollatorForSeq2Seq

    def chunk(n, tok, rows):
        buf = sum(tok(rows["text"])["input_ids"], [])
        total = len(buf) // n * n
        return {{"input_ids": [buf[i : i + n] for i in range(0, total, n)]}}

    def tokenize(n, tok, row):
        return tok(row["text"], truncation=True, max_length=n)

    tokenizer = AutoTokenizer.from_pretrained("gpt2")
    model = AutoModelForCausalLM.from_pretrained("gpt2")
    ds = load_dataset("json", data_files="x.json")["train"]
    USE = {use}
    if USE:
        ds = ds.map(partial(chunk, 512, tokenizer), batched=True)
    else:
        ds = ds.map(partial(tokenize, 256, tokenizer))
    Trainer(model=model, args=TrainingArguments(output_dir="o"), train_dataset=ds,
            data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True)).train()
"""


@pytest.mark.parametrize("use, length, padding", [(False, 256, "longest"), (True, 512, "packing")])
def test_a_partial_mapped_over_the_dataset_gets_its_bound_arguments_first(tmp_path, monkeypatch, use, length, padding):
    # partial(f, n, tok)(row) is f(n, tok, row): the map runs the branch taken, not a helper the other branch uses
    root = _write(tmp_path, {"train.py": _PARTIAL_MAP.format(use=use)})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "max_length", "padding") == {"max_length": length, "padding": padding}


@pytest.mark.parametrize("words, gpus", [(("python", "train.py"), 1), (("torchrun", "--nproc_per_node", "2", "train.py"), 2)])
def test_unsloth_in_one_process_is_one_gpu(tmp_path, monkeypatch, words, gpus):
    script = """
        from unsloth import FastLanguageModel
        from trl import SFTConfig, SFTTrainer
        model, tokenizer = FastLanguageModel.from_pretrained("unsloth/Llama-3.2-1B", max_seq_length=2048, load_in_4bit=True)
        model = FastLanguageModel.get_peft_model(model, r=16)
        SFTTrainer(model=model, tokenizer=tokenizer, args=SFTConfig(output_dir="o")).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, *words)
    assert _get(plan, "num_gpus") == {"num_gpus": gpus}


def test_a_data_processor_classs_own_length_cap_is_the_scripts(tmp_path, monkeypatch):
    # `self.max_seq_len = max_seq_len` (default 1024) on the script's own processor, used where it cuts the samples
    script = """
        from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

        class DataProcessor:
            def __init__(self, tokenizer, path=None, max_seq_len: int = 1024):
                self.tok = tokenizer
                self.max_seq_len = int(max_seq_len)

            def encode(self, text):
                ids = self.tok(text)["input_ids"]
                return ids[-self.max_seq_len:]

        tok = AutoTokenizer.from_pretrained("gpt2")
        proc = DataProcessor(tok, path="x.jsonl")
        rows = [proc.encode(t) for t in ["a", "b"]]
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments(output_dir="o"), train_dataset=rows).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "max_length") == {"max_length": 1024}


@pytest.mark.parametrize("demo", [
    'tokenizer.encode("My experiments are going strong!", padding="max_length", max_length=10)',
    'x = tokenizer(["a sentence", "another"], padding="max_length", max_length=10, return_tensors="pt")',
])
def test_a_tokenizer_call_on_text_written_in_the_script_is_a_demonstration(tmp_path, monkeypatch, demo):
    script = f"""
        from datasets import load_dataset
        from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer,
                                  TrainingArguments)
        tokenizer = AutoTokenizer.from_pretrained("gpt2")
        {demo}
        ds = load_dataset("json", data_files="d.json")["train"].map(lambda r: tokenizer(r["text"], truncation=True,
                                                                                      max_length=256))
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments(output_dir="o"), train_dataset=ds,
                data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False)).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "max_length", "padding") == {"max_length": 256, "padding": "longest"}


def test_a_trainer_subclass_built_by_its_own_init_handed_to_a_library_call(tmp_path, monkeypatch):
    # the subclass's trainer object is handed to a library function (a logger): read, not an internal error
    script = """
        import wandb
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        class MyTrainer(Trainer):
            def __init__(self, model_id, batch):
                model = AutoModelForCausalLM.from_pretrained(model_id)
                super().__init__(model=model, args=TrainingArguments("o", per_device_train_batch_size=batch))

        trainer = MyTrainer("gpt2", 3)
        wandb.watch(trainer)
        trainer.train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert not any("could not read" in n for n in plan.notes)
    assert _get(plan, "model_id", "trainer") == {"model_id": "gpt2", "trainer": "Trainer"}


_PACKING_LOOP = """
    import argparse
    import torch
    from torch.utils.data import DataLoader
    from transformers import AutoModelForCausalLM

    class Rows(torch.utils.data.Dataset):
        def __getitem__(self, i):
            return torch.ones(10, dtype=torch.long)

        def __len__(self):
            return 100

        def collate_fn(self, items):
            return torch.nn.utils.rnn.pad_sequence(items, batch_first=True)

        def packing_collate_fn(self, items):
            packed = []
            for ids in items:
                packed.append(ids.flatten())
            return torch.cat(packed, dim=0).unsqueeze(0)

    p = argparse.ArgumentParser()
    p.add_argument("--packing_samples", action="store_true", default=False)
    args = p.parse_args()
    ds = Rows()
    loader = DataLoader(ds, batch_size=4, collate_fn=ds.packing_collate_fn if args.packing_samples else ds.collate_fn)
    model = AutoModelForCausalLM.from_pretrained("gpt2")
    opt = torch.optim.AdamW(model.parameters())
    for batch in loader:
        model(input_ids=batch, labels=batch).loss.backward()
        opt.step()
"""


@pytest.mark.parametrize("flag, padding, packing", [(True, "packing", True), (False, "longest", False)])
def test_a_collate_function_that_concatenates_the_batch_into_one_row_packs(tmp_path, monkeypatch, flag, padding, packing):
    root = _write(tmp_path, {"train.py": _PACKING_LOOP})
    plan = _command(root, monkeypatch, "python", "train.py", *(["--packing_samples"] if flag else []))
    assert _get(plan, "padding", "packing", "per_device_batch") == {"padding": padding, "packing": packing,
                                                                   "per_device_batch": 4}


_SUBCOMMANDS = """
    import argparse
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    def train(args):
        model = AutoModelForCausalLM.from_pretrained(args.model_dir)
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=args.batch_size)).train()

    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--gpu_id", type=int, default=0)
        subparsers = parser.add_subparsers(dest="command")
        t = subparsers.add_parser("train")
        t.add_argument("--model_dir", default="gpt2")
        t.add_argument("--batch_size", type=int, default=2)
        e = subparsers.add_parser("evaluate")
        e.add_argument("--target_model", default="m")
        args = parser.parse_args()
        if args.command is None:
            parser.print_help()
            return
        if args.command == "train":
            train(args)

    if __name__ == "__main__":
        main()
"""


@pytest.mark.parametrize("words, model, batch", [
    (("train", "--model_dir", "Qwen/Qwen2.5-0.5B", "--batch_size", "8"), "Qwen/Qwen2.5-0.5B", 8),
    (("--gpu_id", "1", "train"), "gpt2", 2),  # the subcommand's defaults
])
def test_argparse_subcommands_read_the_named_subcommands_arguments(tmp_path, monkeypatch, words, model, batch):
    root = _write(tmp_path, {"main.py": _SUBCOMMANDS})
    plan = _command(root, monkeypatch, "python", "main.py", *words)
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": model, "per_device_batch": batch}


@pytest.mark.parametrize("config, bits, known", [("Mxfp4Config(dequantize=True)", None, True),
                                                 ("Mxfp4Config()", None, False)])
def test_an_mxfp4_checkpoint_dequantized_on_load_trains_unquantized(tmp_path, monkeypatch, config, bits, known):
    script = f"""
        import torch
        from transformers import AutoModelForCausalLM, Mxfp4Config
        from peft import LoraConfig, get_peft_model
        from trl import SFTConfig, SFTTrainer
        model = AutoModelForCausalLM.from_pretrained("openai/gpt-oss-20b", dtype=torch.bfloat16,
                                                     quantization_config={config})
        model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear"))
        SFTTrainer(model=model, args=SFTConfig(output_dir="o")).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    got = plan.get("quant_bits")
    assert (got.value, got.known) == (bits, known)


@pytest.mark.parametrize("weights, bits", [('weights="int4"', 4), ('weights="int8"', 8), ("", 8)])
def test_a_quanto_config_quantizes_the_base_to_its_weight_width(tmp_path, monkeypatch, weights, bits):
    script = f"""
        from transformers import AutoModelForCausalLM, QuantoConfig
        from peft import LoraConfig, get_peft_model
        from trl import SFTConfig, SFTTrainer
        model = AutoModelForCausalLM.from_pretrained("gpt2", quantization_config=QuantoConfig({weights}))
        model = get_peft_model(model, LoraConfig(r=8))
        SFTTrainer(model=model, args=SFTConfig(output_dir="o")).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "quant_bits", "method") == {"quant_bits": bits, "method": "qlora" if bits == 4 else "lora"}


@pytest.mark.parametrize("lib", ["draccus", "pyrallis"])
def test_a_dataclass_config_a_wrap_decorator_builds_from_the_command(tmp_path, monkeypatch, lib):
    script = f"""
        from dataclasses import dataclass
        import {lib}
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        @dataclass
        class FinetuneConfig:
            model_path: str = "gpt2"
            batch_size: int = 2

        @{lib}.wrap()
        def finetune(cfg: FinetuneConfig) -> None:
            model = AutoModelForCausalLM.from_pretrained(cfg.model_path)
            Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=cfg.batch_size)).train()

        if __name__ == "__main__":
            finetune()
    """
    root = _write(tmp_path, {"finetune.py": script})
    plan = _command(root, monkeypatch, "python", "finetune.py", "--model_path", "Qwen/Qwen2.5-0.5B", "--batch_size", "16")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 16}


@pytest.mark.parametrize("config, rank", [("AdaLoraConfig(init_r=12, target_r=4, lora_alpha=32)", 12),
                                          ("AdaLoraConfig(lora_alpha=32)", 12), ("LoraConfig(r=16)", 16)])
def test_adalora_adapters_start_at_init_r(tmp_path, monkeypatch, config, rank):
    script = f"""
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        from peft import AdaLoraConfig, LoraConfig, get_peft_model
        model = get_peft_model(AutoModelForCausalLM.from_pretrained("gpt2"), {config})
        Trainer(model=model, args=TrainingArguments("o")).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "method", "lora_r") == {"method": "lora", "lora_r": rank}


def test_from_pretrained_takes_the_private_attention_keyword(tmp_path, monkeypatch):
    script = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2", _attn_implementation="flash_attention_2")
        Trainer(model=model, args=TrainingArguments("o")).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "attn_implementation") == {"attn_implementation": "flash_attention_2"}
