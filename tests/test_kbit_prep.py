"""prepare_model_for_kbit_training (fp32 upcast of a quantized base's other weights): who calls
it, by version (data/library_api.json "kbit_prep"), and what the estimate does with it."""

import pytest

from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_source
from memlint.library.api import kbit_prep
from memlint.library.versions import pinned_versions


@pytest.mark.parametrize("trainer,version,calls", [
    ("SFTTrainer", "0.25.1", True), ("SFTTrainer", "0.26.0", False), ("SFTTrainer", None, False),
    ("GRPOTrainer", "0.25", True), ("GRPOTrainer", "0.26", False),
    ("RewardTrainer", "0.25", True), ("RewardTrainer", "0.26", False),
    ("DPOTrainer", "0.28.2", True), ("DPOTrainer", "0.29.0", False),
    ("KTOTrainer", "1.3.9", True), ("KTOTrainer", "1.4.0", False),
    ("ORPOTrainer", "0.20", True), ("ORPOTrainer", None, True),
    ("trl.SFTTrainer", "0.20", True),            # the plan may name the class qualified
    ("Trainer", "0.20", False), (None, "0.20", False), ("axolotl", "0.20", False),
])
def test_which_trainer_upcasts_at_which_trl_version(trainer, version, calls):
    with pinned_versions({"trl": version}):
        got, why = kbit_prep(trainer)
    assert got is calls
    assert "prepare_model_for_kbit_training" in why


_SCRIPT = '''import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from trl import SFTTrainer, SFTConfig

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B", torch_dtype=torch.bfloat16,
    quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"))
PREP
model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear"))
SFTTrainer(model=model, args=SFTConfig("o", per_device_train_batch_size=1, max_length=2048, bf16=True)).train()
'''


def _setup(src: str, trl: str | None):
    with pinned_versions({"trl": trl}):
        plan = extract_source(src, "train.py")
        return plan, setup_from_plan(plan)


def test_the_scripts_own_call_upcasts_whatever_the_trainer_does():
    plan, planned = _setup(_SCRIPT.replace("PREP", "model = prepare_model_for_kbit_training(model)"), "0.26")
    assert plan.value("kbit_prep") is True and plan.get("kbit_prep").span.line == 8
    assert planned.setup.kbit_prep


def test_without_a_call_the_installed_trl_decides_and_the_estimate_says_so():
    src = _SCRIPT.replace("PREP", "")
    plan, new = _setup(src, "0.26.1")
    assert not plan.get("kbit_prep").known and not new.setup.kbit_prep
    assert any("no longer calls prepare_model_for_kbit_training at trl 0.26.1" in n for n in new.notes)
    _, old = _setup(src, "0.25.0")
    assert old.setup.kbit_prep
    from memlint.estimate import estimate

    # the upcast costs the fp32 copies of embeddings and lm_head (2 × 128,256 × 4,096 × 2 B more) and more
    assert estimate(old.setup).peak - estimate(new.setup).peak > 2 * 128256 * 4096 * 2


def test_an_assumption_overrides_it():
    from memlint.estimate.from_plan import apply_assumptions

    with pinned_versions({"trl": "0.26"}):
        plan, _ = apply_assumptions(extract_source(_SCRIPT.replace("PREP", ""), "train.py"), ["kbit_prep=true"])
        assert setup_from_plan(plan).setup.kbit_prep


# ---- the adapters' dtype (peft's autocast_adapter_dtype) ------------------------------------------

_LOOP = '''import torch
from transformers import AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
model = get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"])CALL)
CAST
opt = torch.optim.AdamW(model.parameters())
for batch in loader:
    batch = tokenizer(batch, max_length=512, truncation=True, padding="max_length", return_tensors="pt")
    model(**batch).loss.backward()
    opt.step()
'''


def _loop(call: str = "", cast: str = ""):
    from memlint.estimate.from_plan import apply_assumptions

    plan = extract_source(_LOOP.replace("CALL", call).replace("CAST", cast), "train.py")
    plan, _ = apply_assumptions(plan, ["per_device_batch=2"])
    return plan, setup_from_plan(plan).setup


def test_a_plain_bf16_loop_keeps_peft_adapters_in_fp32():
    plan, s = _loop()
    assert plan.value("precision") == "pure-bf16" and not plan.get("adapter_dtype").known
    assert s.adapter_dtype == "fp32"


def test_the_script_can_keep_them_in_the_base_dtype():
    plan, s = _loop(cast="model = model.to(torch.bfloat16)")
    assert plan.value("adapter_dtype") == "bf16" and plan.get("adapter_dtype").span.line == 6
    assert s.adapter_dtype == "bf16"
    plan, s = _loop(call=", autocast_adapter_dtype=False")
    assert plan.value("adapter_dtype") == "bf16" and s.adapter_dtype == "bf16"


@pytest.mark.parametrize("kw", [dict(), dict(recompute=True), dict(lora_dropout=0.0), dict(batch=2, seq=256)],
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_fp32_adapters_without_autocast_match_peft_s_own_trace(kw):
    """The trace runs peft's get_peft_model with its default autocast_adapter_dtype=True on a bf16
    model and no autocast: the casts are peft's, not memlint's idea of them."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from memlint.catalog import resolve
    from memlint.estimate import Setup, estimate
    from memlint.measure import measure

    s = Setup(resolve("Qwen/Qwen2.5-0.5B"), method="lora", precision="pure-bf16", adapter_dtype="fp32",
              **{"seq": 512, **kw})
    measured = measure(s, device="trace").to_json()
    assert estimate(s).allocated_peak == pytest.approx(measured["measured_peak"], rel=0.03)
    assert estimate(s).bytes("gradients") == pytest.approx(measured["components"]["gradients"], rel=0.001)
