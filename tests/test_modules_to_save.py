"""peft's modules_to_save (LoraConfig(modules_to_save=[...]), axolotl / TRL lora_modules_to_save, LLaMA-Factory
additional_target): each named module keeps its frozen original and trains a full copy; checked against a trace of
peft's own ModulesToSaveWrapper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlint.catalog import resolve
from memlint.cli import main
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_source
from memlint.extract.configs import read_config
from memlint.plan import Value

_SCRIPT = '''import torch
from transformers import AutoModelForCausalLM, TrainingArguments, Trainer
from peft import LoraConfig, get_peft_model
model = AutoModelForCausalLM.from_pretrained("TinyLlama/TinyLlama-1.1B-Chat-v1.0", torch_dtype=torch.bfloat16)
model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear"SAVE))
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2, bf16=True), train_dataset=ds).train()
'''


def test_loraconfig_modules_to_save_is_read_and_costed():
    plan = extract_source(_SCRIPT.replace("SAVE", ', modules_to_save=["embed_tokens", "lm_head"]'), "train.py")
    v = plan.get("lora_modules_to_save")
    assert (list(v.value), v.source, v.span.line) == (["embed_tokens", "lm_head"], "literal", 5)
    plain = extract_source(_SCRIPT.replace("SAVE", ""), "train.py")
    assert plain.get("lora_modules_to_save").value is None and plain.get("lora_modules_to_save").source == "library-default"
    at = {"max_length": Value(512, "assumed")}
    with_copies = setup_from_plan(plan.with_values(**at)).setup
    without = setup_from_plan(plain.with_values(**at)).setup
    assert with_copies.modules_to_save == ("embed_tokens", "lm_head") and without.modules_to_save == ()
    m = with_copies.model
    assert estimate(with_copies).trainable_params - estimate(without).trainable_params == 2 * m.vocab * m.hidden


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "configs"


@pytest.mark.parametrize("name,key", [("axolotl_llama3_qlora.yml", "lora_modules_to_save:\n  - embed_tokens\n  - lm_head"),
                                      ("llamafactory_llama3_lora_sft.yaml", "additional_target: embed_tokens,lm_head")])
def test_framework_configs_read_their_keys(tmp_path, name, key):
    p = tmp_path / name
    p.write_text((FIXTURES / name).read_text() + "\n" + key + "\n")
    plan = read_config(p)
    v = plan.get("lora_modules_to_save")
    assert list(v.value) == ["embed_tokens", "lm_head"] and v.source == "literal" and not plan.diagnostics
    assert setup_from_plan(plan).setup.modules_to_save == ("embed_tokens", "lm_head")
    assert read_config(FIXTURES / name).get("lora_modules_to_save").value is None


def test_cli_flag_and_refusal(capsys):
    base = ["estimate", "--model", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--method", "lora", "--seq", "512", "--format", "json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(base + ["--modules-to-save", "lm_head"]) == 0
    saved = json.loads(capsys.readouterr().out)
    assert saved["components"]["weights"] > plain["components"]["weights"]
    assert saved["components"]["optimizer"] > plain["components"]["optimizer"]
    with pytest.raises(MemlintError, match="modules-to-save"):
        Setup(resolve("TinyLlama/TinyLlama-1.1B-Chat-v1.0"), modules_to_save=("lm_head",))


@pytest.mark.parametrize("kw", [dict(dtype="bf16", precision="amp-bf16"), dict(dtype="bf16", precision="pure-bf16"),
                                dict(dtype="fp32", precision="amp-bf16")],
                         ids=lambda kw: f"{kw['dtype']}-{kw['precision']}")
@pytest.mark.parametrize("saved", [("lm_head",), ("embed_tokens", "lm_head")], ids="+".join)
def test_estimate_matches_a_trace_of_peft_s_own_wrapper(kw, saved):
    """measure applies peft's get_peft_model with LoraConfig(modules_to_save=...): the copies, their dtype and what
    they save are peft's and torch's."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from memlint.measure import measure

    s = Setup(resolve("TinyLlama/TinyLlama-1.1B-Chat-v1.0"), method="lora", seq=256, batch=2, modules_to_save=saved, **kw)
    m = measure(s, device="trace").to_json()
    est = estimate(s)
    assert est.allocated_peak == pytest.approx(m["measured_peak"], rel=0.015)
    assert est.bytes("gradients") == m["components"]["gradients"]
    assert est.bytes("optimizer") == pytest.approx(m["components"]["optimizer"], rel=1e-5)
