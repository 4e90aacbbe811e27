"""A model a script builds from a transformers config class it writes (`LlamaForCausalLM(LlamaConfig(hidden_size=512,
...))`, `AutoModelForCausalLM.from_config(GPT2Config(n_layer=4))`): sized from the class's defaults under the script's
keywords (library_api.json config_classes), in float32, randomly initialised; unknown where a keyword is."""

from __future__ import annotations

import pytest

from checkouts import write_checkout
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_targets
from memlint.extract.launch import command_target
from memlint.plan import Value

SCRIPT = """
from transformers import AutoTokenizer, {imports}, Trainer, TrainingArguments
tok = AutoTokenizer.from_pretrained("gpt2")
config = {config}
model = {model}
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=8, bf16=True), train_dataset=None).train()
"""


def _plan(tmp_path, monkeypatch, imports: str, config: str, model: str):
    write_checkout(tmp_path, {"train.py": SCRIPT.format(imports=imports, config=config, model=model)}, dedent=True, git=True)
    monkeypatch.chdir(tmp_path)
    return extract_targets([command_target(["python", "train.py"])])[0]


def _llama_params(h: int, inter: int, layers: int, vocab: int) -> int:
    # embeddings + lm_head (untied) + per layer: q, k, v, o (h*h each, kv heads = heads), gate/up/down, two RMSNorms; final norm
    return 2 * vocab * h + layers * (4 * h * h + 3 * h * inter + 2 * h) + h


def test_a_llama_built_from_its_config_class_is_sized_from_defaults_and_keywords(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "LlamaConfig, LlamaForCausalLM",
                 "LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8)",
                 "LlamaForCausalLM(config)")
    mid = plan.fields["model_id"]
    assert mid.known and dict(mid.shape)["vocab_size"] == 32000  # LlamaConfig's default
    assert plan.fields["torch_dtype"].value == "fp32"
    planned = setup_from_plan(plan.with_values(max_length=Value(512, "assumed")))
    assert planned.setup is not None
    assert planned.setup.model.params == _llama_params(512, 1376, 8, 32000)
    assert any("randomly initialised" in n for n in planned.notes)


def test_attribute_map_names_and_from_config(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "AutoModelForCausalLM, GPT2Config",
                 "GPT2Config(num_hidden_layers=4, n_embd=256, n_head=4)", "AutoModelForCausalLM.from_config(config)")
    shape = dict(plan.fields["model_id"].shape)
    assert (shape["n_layer"], shape["n_embd"], shape["n_head"], shape["vocab_size"]) == (4, 256, 4, 50257)


@pytest.mark.parametrize("config", ["LlamaConfig(vocab_size=len(tok), hidden_size=512)", "LlamaConfig(**kwargs_from_somewhere)"])
def test_a_keyword_memlint_cannot_read_leaves_the_model_unknown(tmp_path, monkeypatch, config):
    plan = _plan(tmp_path, monkeypatch, "LlamaConfig, LlamaForCausalLM", config, "LlamaForCausalLM(config)")
    assert not plan.fields["model_id"].known
    assert "LlamaConfig(...)" in " ".join(plan.fields["model_id"].chain) + str(plan.fields["model_id"].value)


def _real_params(build: str) -> int:
    """The parameter count transformers itself builds, on the meta device (the truth the estimate is checked against)."""
    import torch
    import transformers as T

    with torch.device("meta"):
        model = eval(build, {"T": T})
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("imports, config, after, model, real", [
    ("LlamaConfig, LlamaForCausalLM", "LlamaConfig(hidden_size=512, intermediate_size=1376, num_attention_heads=8)",
     "config.num_hidden_layers = 2", "LlamaForCausalLM(config)",
     "T.LlamaForCausalLM(T.LlamaConfig(hidden_size=512, intermediate_size=1376, num_attention_heads=8, num_hidden_layers=2))"),
    ("GPT2Config, GPT2LMHeadModel", "GPT2Config(n_layer=4, n_embd=256, n_head=4, n_inner=4096)", "", "GPT2LMHeadModel(config)",
     "T.GPT2LMHeadModel(T.GPT2Config(n_layer=4, n_embd=256, n_head=4, n_inner=4096))"),
    ("BartConfig, BartForConditionalGeneration", "BartConfig(encoder_layers=2, decoder_layers=2)", "",
     "BartForConditionalGeneration(config)", "T.BartForConditionalGeneration(T.BartConfig(encoder_layers=2, decoder_layers=2))"),
    ("T5Config, T5ForConditionalGeneration", 'T5Config(num_layers=2, num_decoder_layers=8, feed_forward_proj="gated-gelu")', "",
     "T5ForConditionalGeneration(config)",
     'T.T5ForConditionalGeneration(T.T5Config(num_layers=2, num_decoder_layers=8, feed_forward_proj="gated-gelu"))'),
])
def test_the_count_is_the_built_models(tmp_path, monkeypatch, imports, config, after, model, real):
    plan = _plan(tmp_path, monkeypatch, imports, config + ("\n" + after if after else ""), model)
    planned = setup_from_plan(plan.with_values(max_length=Value(512, "assumed")))
    assert planned.setup.model.params == _real_params(real)


def test_a_keyword_whose_alias_changed_across_versions_leaves_the_model_unknown(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "BartConfig, BartForConditionalGeneration", "BartConfig(num_hidden_layers=2)",
                 "BartForConditionalGeneration(config)")
    assert not plan.fields["model_id"].known
    assert "different transformers versions" in plan.fields["model_id"].chain[-1]
