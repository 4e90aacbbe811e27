"""The device a script picks for itself, as the CUDA run memlint sizes sees it: `torch.backends.mps.is_available()`
(and torch.xpu's) is False there, `torch.cuda.is_available()` True, and `torch.device("cuda")` is an object whose
`.type` the script tests (`if device.type == "cuda":` loads the model in bf16 with flash attention)."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_SCRIPT = """
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    if torch.backends.mps.is_available():
        device = torch.device("mps")
    elif torch.cuda.is_available():
        device = torch.device({spec})
    else:
        device = torch.device("cpu")
    if {test}:
        model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16, attn_implementation="eager")
    else:
        model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.float32)
    Trainer(model=model, args=TrainingArguments(output_dir="o")).train()
"""


@pytest.mark.parametrize("spec, test, cuda", [
    ('"cuda"', 'device.type == "cuda"', True),
    ('"cuda:0"', 'device.type == "cuda" and device.index == 0', True),
    ('"cuda", 1', 'device.index == 1', True),
    ('"cuda"', 'device.type == "mps"', False),
])
def test_the_script_picks_the_cuda_device(tmp_path, monkeypatch, spec, test, cuda):
    root = _write(tmp_path, {"train.py": _SCRIPT.format(spec=spec, test=test)})
    plan = _command(root, monkeypatch, "python", "train.py")
    want = {"torch_dtype": "bf16", "attn_implementation": "eager"} if cuda else {"torch_dtype": "fp32"}
    assert _get(plan, *want) == want


@pytest.mark.parametrize("high, read", [("model.config.vocab_size", True), ("vocab_size", True), ("2", False)])
def test_random_token_ids_of_a_fixed_shape_are_the_micro_batch(tmp_path, monkeypatch, high, read):
    script = f"""
        import argparse, torch
        from transformers import AutoModelForCausalLM
        p = argparse.ArgumentParser()
        p.add_argument("--batch_size", type=int, default=8)
        p.add_argument("--seq_len", type=int, default=128)
        args = p.parse_args()
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        vocab_size = model.config.vocab_size
        opt = torch.optim.AdamW(model.parameters())
        for step in range(10):
            inp = torch.randint({high}, (args.batch_size, args.seq_len), device="cuda")
            model(input_ids=inp, labels=inp).loss.backward()
            opt.step()
    """
    root = _write(tmp_path, {"bench.py": script})
    plan = _command(root, monkeypatch, "python", "bench.py", "--batch_size", "2", "--seq_len", "4096")
    got = _get(plan, "per_device_batch", "max_length", "padding", "packing")
    if read:
        assert got == {"per_device_batch": 2, "max_length": 4096, "padding": "max_length", "packing": False}
    else:
        assert got["per_device_batch"] is None


@pytest.mark.parametrize("cut", [
    # build-nanogpt's DataLoaderLite: a block past the current position
    "buf = self.tokens[self.pos : self.pos + self.B * self.T + 1]\n                self.pos += self.B * self.T",
    # a streaming batcher: the first B * T + 1 tokens of a buffer, the length bound first
    "required = self.B * self.T + 1\n                buf = torch.tensor(self.tokens[:required])",
])
def test_a_token_stream_cut_into_b_rows_of_t_tokens(tmp_path, monkeypatch, cut):
    script = f"""
        import torch
        from transformers import GPT2LMHeadModel

        class Loader:
            def __init__(self, B, T):
                self.B, self.T, self.pos = B, T, 0
                self.tokens = torch.load("tokens.pt")

            def next_batch(self):
                {cut}
                x = buf[:-1].view(self.B, self.T)
                y = buf[1:].view(self.B, self.T)
                return x, y

        model = GPT2LMHeadModel.from_pretrained("gpt2")
        loader = Loader(B=4, T=512)
        opt = torch.optim.AdamW(model.parameters())
        for step in range(10):
            x, y = loader.next_batch()
            model(input_ids=x, labels=y).loss.backward()
            opt.step()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "per_device_batch", "max_length", "padding") == {"per_device_batch": 4, "max_length": 512,
                                                                      "padding": "packing"}


@pytest.mark.parametrize("extra, gpus", [
    ("", 1),                                                    # run as `python train.py`: one process
    ('\n    import torch\n    model = torch.nn.DataParallel(model)', None),  # spreads over every visible GPU
    ('\n    args.deepspeed = "ds.json"', None),                # DeepSpeed needs a launcher's processes
])
def test_a_script_named_alone_runs_as_python_runs_it(tmp_path, monkeypatch, extra, gpus):
    from memlint.extract import extract_targets
    from memlint.files import Target
    from pathlib import Path

    script = f"""
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    model = AutoModelForCausalLM.from_pretrained("gpt2")
    args = TrainingArguments(output_dir="o"){extra}
    Trainer(model=model, args=args).train()
    """
    root = _write(tmp_path, {"train.py": script, "ds.json": '{"zero_optimization": {"stage": 2}}'})
    monkeypatch.chdir(root)
    [plan] = extract_targets([Target(Path("train.py"), "train.py", True)])
    assert plan.value("num_gpus") == gpus


def test_random_token_ids_with_low_high_and_size_keyword(tmp_path, monkeypatch):
    script = """
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        opt = torch.optim.AdamW(model.parameters())
        with torch.no_grad():
            model(torch.randint(0, model.config.vocab_size, size=(1, 8)))  # a warm-up call
        for step in range(10):
            inp = torch.randint(0, model.config.vocab_size, size=(6, 256))
            model(input_ids=inp, labels=inp).loss.backward()
            opt.step()
    """
    root = _write(tmp_path, {"bench.py": script})
    plan = _command(root, monkeypatch, "python", "bench.py")
    assert _get(plan, "per_device_batch", "max_length") == {"per_device_batch": 6, "max_length": 256}


def test_zero_rows_filling_out_a_short_batch_are_not_sample_padding(tmp_path, monkeypatch):
    script = """
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorWithPadding
        tok = AutoTokenizer.from_pretrained("gpt2")
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        B = 8
        def collate(texts):
            x = tok(texts, padding="longest", truncation=True, max_length=512, return_tensors="pt")["input_ids"]
            if x.size(0) < B:
                x = torch.cat([x, torch.zeros(B - x.size(0), x.size(1), dtype=x.dtype)])
            return {"input_ids": x, "labels": x}
        ds = [t for t in open("data.txt")]
        opt = torch.optim.AdamW(model.parameters())
        for batch in DataLoader(ds, batch_size=B, collate_fn=collate):
            model(**batch).loss.backward()
            opt.step()
    """
    root = _write(tmp_path, {"train.py": script, "data.txt": "a\n"})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "padding") == {"padding": "longest"}


@pytest.mark.parametrize("files", [
    {"train.py": "import os\nLOCAL_RANK = int(os.environ['LOCAL_RANK'])\n"},           # written for a launcher
    {"run.sh": "torchrun --nproc_per_node 8 \\\n    train.py --lr 1e-4\n"},              # a launcher beside it
    {"README.md": "Train with `accelerate launch --num_processes 4 train.py`.\n\nOr `python train.py` on one GPU.\n"},
])
def test_a_script_meant_for_a_launcher_is_not_assumed_one_process(tmp_path, monkeypatch, files):
    from pathlib import Path

    from memlint.extract import extract_targets
    from memlint.files import Target

    body = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments(output_dir="o")).train()
    """
    import textwrap
    script = files.pop("train.py", "") + textwrap.dedent(body)
    root = write_checkout(tmp_path, {"train.py": script, **files})
    monkeypatch.chdir(root)
    [plan] = extract_targets([Target(Path("train.py"), "train.py", True)])
    assert plan.value("num_gpus") is None


@pytest.mark.parametrize("meta, dtype, precision", [
    ({"kaggle": {"accelerator": "nvidiaTeslaT4", "isGpuEnabled": True}}, "fp16", "amp-fp16"),
    ({"kaggle": {"accelerator": "nvidiaTeslaP100"}}, "fp16", "amp-fp16"),
    ({"colab": {"gpuType": "A100"}}, "bf16", "amp-bf16"),
    ({}, "auto", "amp-bf16"),  # no GPU named: unsloth decides at run time; bf16 support assumed (said)
])
def test_a_notebooks_saved_gpu_decides_unsloth_and_bf16(tmp_path, monkeypatch, meta, dtype, precision):
    plan = _unsloth_notebook_plan(tmp_path, monkeypatch, meta,
                                  ", fp16=not is_bfloat16_supported(), bf16=is_bfloat16_supported()")
    assert (plan.value("torch_dtype"), plan.value("precision")) == (dtype, precision)


@pytest.mark.parametrize("attn, want", [
    ("kernels-community/vllm-flash-attn3", "flash_attention_3"),
    ("kernels-community/flash-attn3", "flash_attention_3"),
    ("kernels-community/flash-attn", "flash_attention_2"),
    ("kernels-community/some-other-kernel", None),
])
def test_a_hub_kernel_attention_is_the_attention_its_repository_names(tmp_path, monkeypatch, attn, want):
    script = f"""
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="{attn}")
        Trainer(model=model, args=TrainingArguments(output_dir="o")).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "attn_implementation") == {"attn_implementation": want}


def test_the_one_process_reading_looks_at_the_text_read_not_the_file_now(tmp_path, monkeypatch):
    # `memlint diff` reads a script's text at BASE: whether it was written for a launcher is that text's, not the
    # working copy's
    from memlint.extract import extract_source

    body = ("from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
            "model = AutoModelForCausalLM.from_pretrained('gpt2')\n"
            "Trainer(model=model, args=TrainingArguments(output_dir='o')).train()\n")
    ranked = "import os\nLOCAL_RANK = int(os.environ['LOCAL_RANK'])\n" + body
    (tmp_path / "train.py").write_text(ranked)
    monkeypatch.chdir(tmp_path)
    assert extract_source(body, tmp_path / "train.py", "train.py").value("num_gpus") == 1
    (tmp_path / "train.py").write_text(body)
    assert extract_source(ranked, tmp_path / "train.py", "train.py").value("num_gpus") is None


@pytest.mark.parametrize("meta, pins, precision", [
    ({"colab": {"gpuType": "T4"}}, "", "amp-fp16"),       # fp16 weights on the T4: unsloth autocasts in fp16
    ({"colab": {"gpuType": "A100"}}, "", "amp-bf16"),
    ({"colab": {"gpuType": "T4", "explicit": True}}, "", "amp-fp16"),  # fp16=False, bf16=False: the same
    ({"colab": {"gpuType": "T4"}}, "unsloth==2024.8\ntrl==0.9.6\n", "pure-fp16"),  # before unsloth patched TRL
])
def test_unsloth_sets_mixed_precision_from_the_models_dtype(tmp_path, monkeypatch, meta, pins, precision):
    explicit = ", fp16=False, bf16=False" if meta["colab"].pop("explicit", False) else ""
    if pins:
        (tmp_path / "requirements.txt").write_text(pins)
    plan = _unsloth_notebook_plan(tmp_path, monkeypatch, meta, ", per_device_train_batch_size=2" + explicit)
    assert plan.value("precision") == precision


def _unsloth_notebook_plan(tmp_path, monkeypatch, meta: dict, config_args: str):
    """The plan of a one-cell unsloth SFT notebook saved with notebook metadata `meta`, its SFTConfig(...) given
    `config_args` after output_dir."""
    import json

    from memlint.extract import extract_file

    source = [
        "from unsloth import FastLanguageModel, is_bfloat16_supported\n",
        "from trl import SFTTrainer, SFTConfig\n",
        "model, tok = FastLanguageModel.from_pretrained('unsloth/Llama-3.2-1B', max_seq_length=1024, dtype=None, "
        "load_in_4bit=True)\n",
        "model = FastLanguageModel.get_peft_model(model, r=16)\n",
        f"args = SFTConfig(output_dir='o'{config_args})\n",
        "SFTTrainer(model=model, tokenizer=tok, args=args, train_dataset=None).train()\n",
    ]
    cell = {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}
    nb = tmp_path / "nb.ipynb"
    nb.write_text(json.dumps({"cells": [cell], "metadata": meta, "nbformat": 4, "nbformat_minor": 5}))
    monkeypatch.chdir(tmp_path)
    return extract_file(nb)
