"""One table of defaults (data/library_defaults.json "run_defaults") for estimate, plan and %memcheck,
and the LoRA dropout as a plan field (each adapter with dropout > 0 keeps a dropped copy of its input)."""

from __future__ import annotations

import pytest

from memlint.cli import main
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_source
from memlint.extract.configs import read_config
from memlint.library.defaults import run_default, run_default_names

SCRIPT = '''from transformers import AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
from trl import SFTConfig, SFTTrainer

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B", torch_dtype="bfloat16")
model = get_peft_model(model, LoraConfig(r=16{dropout}, target_modules="all-linear"))
args = SFTConfig("o", per_device_train_batch_size=1, bf16=True, max_length=1024)
SFTTrainer(model=model, args=args, train_dataset=ds).train()
'''


def test_every_run_default_resolves_and_says_where_it_comes_from():
    for name in run_default_names():
        d = run_default(name)
        assert d.value is not None and d.why


def test_estimate_help_shows_each_default(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, name in (("--optim", "optim"), ("--lora-r", "lora_r"), ("--lora-dropout", "lora_dropout"),
                       ("--grad-accum", "grad_accum"), ("--attn", "attn")):
        assert f"default: {run_default(name).value}" in text, flag
    assert "default: off" in text  # --recompute


def test_a_script_s_lora_dropout_is_read_and_reaches_the_estimate():
    plan = extract_source(SCRIPT.format(dropout=", lora_dropout=0.1"), "train.py")
    v = plan.fields["lora_dropout"]
    assert (v.value, v.source) == (0.1, "literal")
    setup = setup_from_plan(plan, {}).setup
    assert setup.lora_dropout == 0.1 and setup.lora_r == 16
    assert setup_from_plan(extract_source(SCRIPT.format(dropout=""), "train.py"), {}).setup.lora_dropout == 0.0


def test_an_unset_lora_dropout_is_peft_s_default():
    plan = extract_source(SCRIPT.format(dropout=""), "train.py")
    v = plan.fields["lora_dropout"]
    assert (v.value, v.source) == (0.0, "library-default")


@pytest.mark.parametrize("text, want", [
    ("base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_r: 16\nlora_dropout: 0.05\n", (0.05, "literal")),
    ("base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_r: 16\n", (0.0, "library-default")),
])
def test_axolotl_lora_dropout(tmp_path, text, want):
    p = tmp_path / "axolotl.yml"
    p.write_text(text + "sequence_len: 1024\nmicro_batch_size: 1\n")
    plan = read_config(p)
    v = plan.fields["lora_dropout"]
    assert (v.value, v.source) == want


def test_trl_recipe_lora_dropout_defaults_to_model_config_s():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "recipe.yaml"
        p.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nuse_peft: true\nlora_r: 16\nmax_length: 1024\n"
                     "per_device_train_batch_size: 2\n")
        plan = read_config(p)
    v = plan.fields["lora_dropout"]
    assert (v.value, v.source) == (0.05, "library-default")


def test_pure_bf16_training_converts_fp32_created_weights():
    """Lightning's / LitGPT's "bf16-true" on a model created in fp32 (an nn.Module of the script's own):
    the precision plugin converts the weights, so the estimate is of bf16 weights, not an invalid Setup."""
    from memlint.plan import TrainingPlan, Value

    fields = {"model_id": Value("Qwen/Qwen2.5-0.5B", "literal"), "torch_dtype": Value("fp32", "library-default"),
              "precision": Value("pure-bf16", "literal"), "method": Value("full", "literal"),
              "per_device_batch": Value(2, "literal"), "max_length": Value(256, "literal")}
    planned = setup_from_plan(TrainingPlan("train.py", fields), {})
    assert planned.setup.dtype == "bf16" and planned.setup.precision == "pure-bf16"
    assert any("converts the fp32 weights to bf16" in n for n in planned.notes)


def test_the_fast_version_read_agrees_with_importlib_metadata():
    """library.versions reads `<name>-<version>.dist-info/METADATA` itself (importing importlib.metadata
    costs a tenth of a cold check); for every distribution installed here it must give importlib.metadata's
    version, or defer to it (None)."""
    from importlib import metadata

    from memlint.library.versions import _dist_info_version

    names = sorted({d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]})
    assert len(names) > 20
    for name in names:
        fast = _dist_info_version(name)
        if fast is not None:
            assert fast == metadata.version(name), name
    assert _dist_info_version("surely-not-an-installed-distribution") in ("", None)
