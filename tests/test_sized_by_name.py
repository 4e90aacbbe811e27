"""A checkpoint the catalog lacks whose name gives its parameter count (llm-jp-13b-v1.0, /data/qwen-1.5b) is sized as
the catalogued dense decoder of that size (of its family when a word of its name is a catalogued family's) in the
middle of the range, said as an assumption, and the estimate says the range the other checkpoints of that size
give. Names that give no size, or whose weights are not a dense checkpoint's, stay unknown."""

from __future__ import annotations

import pytest

from memlint.catalog import resolve
from memlint.catalog.spec import entries, nominal_params, size_candidates, sized_by_name
from memlint.errors import MemlintError


@pytest.mark.parametrize("name, params", [
    ("llm-jp/llm-jp-13b-v1.0", 13_000_000_000),
    ("/data/qwen-1.5b/", 1_500_000_000),
    ("Qwen2___5-1___5B-Instruct", 1_500_000_000),   # ModelScope's spelling of 1.5B
    ("internlm2-chat-1_8b-sft", 1_800_000_000),
    ("org/tiny-350m", 350_000_000),
    ("org/model-4bit", None),                       # a bit width is no size
    ("org/model-v2", None),
    ("org/distill-7b-from-70b", None),              # two sizes: which one is it?
    # a run's saved checkpoint: the folder above it names the model
    ("/home/u/models/luacoder-7b/beta2/checkpoint-2272", 7_000_000_000),
    ("./out/qwen-1.5b-sft/step_500", 1_500_000_000),
    ("/models/llama-7b/lora-adapter-r8", None),       # an adapter saved under its base: not the base's weights
    ("/models/llama-7b/13b-merge", 13_000_000_000),   # the nearest size wins
    ("./checkpoints/pretrain/step_48000_best", None),
])
def test_the_size_a_name_gives(name, params):
    assert nominal_params(name) == params


def test_a_name_of_a_catalogued_family_is_sized_within_that_family():
    spec = resolve("autodl-tmp/qwen-1.5b")
    assert spec.source == "size-name" and spec.assumed_from == "autodl-tmp/qwen-1.5b"
    assert all(entries()[c]["family"].startswith("qwen") for c in size_candidates(spec.assumed_from))
    assert 1.4e9 < spec.params < 1.6e9


def test_a_family_without_that_size_takes_its_checkpoints_near_it():
    hits = size_candidates("Qwen/Qwen9-2B")  # no catalogued Qwen says 2B: those within 35 % of it
    assert hits and all(entries()[c]["family"].startswith("qwen") for c in hits)
    assert all(abs(entries()[c]["params"] - 2e9) <= 0.35 * 2e9 for c in hits)


def test_a_name_of_no_catalogued_family_takes_every_dense_decoder_named_with_that_size():
    hits = size_candidates("some-lab/brand-new-13b-v1.0")
    assert len(hits) >= 3  # Llama-2-13b, OPT-13b, Baichuan2-13B, ...: one per parameter count
    assert len({entries()[c]["params"] for c in hits}) == len(hits)
    assert [entries()[c]["params"] for c in hits] == sorted(entries()[c]["params"] for c in hits)
    spec = sized_by_name("some-lab/brand-new-13b-v1.0")
    assert spec.id == hits[(len(hits) - 1) // 2] and size_candidates(spec.assumed_from) == hits


@pytest.mark.parametrize("name", [
    "TheBloke/Foo-13B-GPTQ",                 # a quantized export
    "org/bar-7b-lora",                       # an adapter
    "org/Mixtral-like-8x7B",                 # experts
    "org/NewMoE-30B-A3B",
    "TIGER-Lab/Foo-8B-siglip-llama3",        # a vision-language model
    "org/Brand-VL-7B",
    "/path/to/13B",                          # a placeholder
    "org/no-size-here",
    "org/gpt-13b",                           # a catalogued family (gpt2, gpt-j ...) with no checkpoint near 13B
])
def test_no_size_is_assumed_where_the_name_does_not_allow_it(name):
    assert sized_by_name(name) is None


def test_an_unsized_unknown_name_is_still_a_clear_error():
    with pytest.raises(MemlintError, match="unknown model"):
        resolve("org/brand-new-model")


def test_a_fine_tune_named_after_its_base_is_still_its_base():
    assert resolve("someone/Qwen3-1.7B-Wordle").source == "named-base"


def test_a_converted_checkpoint_stands_without_its_hf_suffix():
    spec = resolve("D:/models/modelscope/Llama-2-13b")
    assert spec.id == "meta-llama/Llama-2-13b-hf" and spec.source == "folder-name"
    assert resolve("meta-llama/Llama-2-13b").params == resolve("meta-llama/Llama-2-13b-hf").params


def test_the_estimate_says_the_range_of_the_checkpoints_of_that_size(tmp_path, capsys):
    from memlint.cli import main

    (tmp_path / "train.py").write_text(
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('some-lab/brand-new-13b-v1.0', torch_dtype='bfloat16')\n"
        "args = TrainingArguments(output_dir='o', per_device_train_batch_size=1, bf16=True,\n"
        "                         gradient_checkpointing=True)\n"
        "Trainer(model=model, args=args).train()\n")
    main(["plan", str(tmp_path / "train.py"), "--assume", "max_length=1024", "--format", "json"])
    import json

    doc = json.loads(capsys.readouterr().out)
    doc = doc[0] if isinstance(doc, list) else doc
    text = json.dumps(doc)
    assert "its name gives its size" in text and "put the peak between" in text
    lo, hi = (float(x) for x in __import__("re").search(r"between ([\d.]+) GiB \(.*?\) and ([\d.]+) GiB", text).groups())
    assert lo < hi
    peak = doc["estimate"]["peak"] / 2**30
    assert lo <= peak + 0.01 and peak <= hi + 0.01


def test_a_placeholder_prefix_keeps_the_size_of_the_folder_it_names():
    assert sized_by_name("/path/to/llm-jp-13b") is not None
    assert sized_by_name("/path/to/13B") is None
    assert sized_by_name("<model-13b>") is None


def test_a_misspelt_catalogued_id_is_an_error_naming_the_closest():
    with pytest.raises(MemlintError, match="closest known"):
        resolve("meta-llama/Llama-3.1-8b-instrct")
    assert resolve("Qwen/Qwen9.5-2B").source == "size-name"  # a new release of a catalogued organisation
