"""A Hub fine-tune the catalog lacks, named after its base (org/Base-Size-suffix), is sized as that base and every
report says it was assumed from the name; quantized exports, adapters and ambiguous names are not."""

from __future__ import annotations

import pytest

from memlint.catalog import resolve
from memlint.catalog.spec import named_after_base
from memlint.errors import MemlintError


@pytest.mark.parametrize("name, base", [
    ("someone/Qwen3-1.7B-Wordle", "Qwen/Qwen3-1.7B"),
    ("lab/llama-7b-hf", "huggyllama/llama-7b"),
    ("my-org/Mistral-7B-v0.1-sft", "mistralai/Mistral-7B-v0.1"),
])
def test_a_fine_tune_named_after_its_base_is_sized_as_that_base(name, base):
    spec = resolve(name)
    assert spec.id == base and spec.assumed_from == name and spec.source == "named-base"


@pytest.mark.parametrize("name", [
    "TheBloke/Llama-2-7B-GPTQ",  # quantized export: other shapes
    "someone/Qwen3-1.7B-lora-adapter",  # an adapter, not a model
    "org/zephyr-7b-sft-full",  # no catalogued name with its size in it
    "org/my-model",
    "meta-llama/Llama-2-7b-hf",  # catalogued itself: not an assumption
])
def test_no_base_is_assumed_where_the_name_does_not_say_it(name):
    assert named_after_base(name) is None


def test_an_unknown_name_without_a_size_is_still_a_clear_error():
    with pytest.raises(MemlintError, match="unknown model"):
        resolve("org/totally-new-architecture")


def test_the_plan_says_the_base_was_assumed(tmp_path, capsys):
    from memlint.cli import main

    (tmp_path / "train.py").write_text(
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('someone/Qwen3-1.7B-Wordle')\n"
        "args = TrainingArguments(output_dir='o', per_device_train_batch_size=2)\n"
        "Trainer(model=model, args=args, max_seq_length=512).train()\n")
    main(["plan", str(tmp_path / "train.py"), "--assume", "max_length=512"])
    out = " ".join(capsys.readouterr().out.split())
    assert "sized as Qwen/Qwen3-1.7B, the catalogued base its name names" in out
