"""DoRA (peft LoraConfig(use_dora=True), axolotl peft_use_dora, LLaMA-Factory / TRL use_dora, torchtune
model.use_dora): read from scripts and configs, estimated, and checked against a trace of peft's own
DoRA layers (tuners/lora/dora.py)."""

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

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
_SCRIPT = '''import torch
from transformers import AutoModelForCausalLM, TrainingArguments, Trainer
from peft import LoraConfig, get_peft_model
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear"DORA))
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2, bf16=True), train_dataset=ds).train()
'''


def test_loraconfig_use_dora_is_read_from_a_script():
    plan = extract_source(_SCRIPT.replace("DORA", ", use_dora=True"), "train.py")
    v = plan.get("use_dora")
    assert (v.value, v.source, v.span.line) == (True, "literal", 5)
    plain = extract_source(_SCRIPT.replace("DORA", ""), "train.py").get("use_dora")
    assert (plain.value, plain.source) == (False, "library-default") and "peft 0.9.0" in plain.chain[0]


@pytest.mark.parametrize("name,key", [("axolotl_llama3_qlora.yml", "peft_use_dora: true"),
                                      ("llamafactory_llama3_lora_sft.yaml", "use_dora: true"),
                                      ("trl_zephyr_sft_qlora.yaml", "use_dora: true")])
def test_framework_configs_read_their_dora_keys(tmp_path, name, key):
    p = tmp_path / name
    p.write_text((FIXTURES / name).read_text() + "\n" + key + "\n")
    plan = read_config(p)
    assert plan.get("use_dora").value is True and plan.get("use_dora").source == "literal" and not plan.diagnostics
    assert setup_from_plan(plan).setup.use_dora
    assert read_config(FIXTURES / name).get("use_dora").value is False


def test_torchtune_model_use_dora(tmp_path):
    text = (FIXTURES / "torchtune_llama3_1_8B_qlora_single_device.yaml").read_text()
    p = tmp_path / "qlora_single_device.yaml"
    p.write_text(text.replace("  _component_: torchtune.models.llama3_1.qlora_llama3_1_8b\n",
                              "  _component_: torchtune.models.llama3_1.qlora_llama3_1_8b\n  use_dora: True\n", 1))
    plan = read_config(p)
    assert plan.get("use_dora").value is True and not plan.diagnostics
    assert any("DoRALinear" in n for n in plan.notes)


def test_the_magnitude_vector_trains_and_the_weight_norm_is_transient():
    s = Setup(resolve("meta-llama/Llama-3.1-8B"), method="lora", seq=1024, recompute=True)
    lora, dora = estimate(s), estimate(s.with_(use_dora=True))
    # one magnitude value per output feature of every adapted linear: 32 × (4096 + 1024 + 1024 + 4096 + 14336 × 2 + 4096)
    mags = 32 * (4096 * 3 + 1024 * 2 + 14336 * 2)
    assert dora.trainable_params - lora.trainable_params == mags
    assert dora.bytes("gradients") - lora.bytes("gradients") == mags * 4
    assert dora.allocated_peak > lora.allocated_peak
    with pytest.raises(MemlintError, match="LoRA variant"):
        Setup(resolve("meta-llama/Llama-3.1-8B"), use_dora=True)


def test_cli_flag(capsys):
    base = ["estimate", "--model", "Qwen/Qwen2.5-0.5B", "--method", "lora", "--seq", "512", "--format", "json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(base + ["--use-dora"]) == 0
    dora = json.loads(capsys.readouterr().out)
    assert dora["components"]["activations"] > plain["components"]["activations"]
    assert main(["estimate", "--model", "Qwen/Qwen2.5-0.5B", "--use-dora"]) == 2


@pytest.mark.parametrize("kw", [dict(), dict(lora_dropout=0.0), dict(precision="pure-bf16", lora_dropout=0.0)],
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_estimate_matches_a_trace_of_peft_s_own_dora(kw):
    """measure applies peft's get_peft_model with LoraConfig(use_dora=True): the DoRA layers, their weight
    norm and their casts are peft's."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from memlint.measure import measure

    s = Setup(resolve("Qwen/Qwen2.5-0.5B"), method="lora", use_dora=True, **{"seq": 256, **kw})
    m = measure(s, device="trace").to_json()
    est = estimate(s)
    assert est.allocated_peak == pytest.approx(m["measured_peak"], rel=0.02)
    assert est.bytes("gradients") == pytest.approx(m["components"]["gradients"], rel=0.001)
    assert est.bytes("optimizer") == pytest.approx(m["components"]["optimizer"], rel=0.001)
