"""The optimizer step fused into backward (torchtune `optimizer_in_bwd: True`, PyTorch's
register_post_accumulate_grad_hook tutorial): read from configs and scripts, estimated, and checked
against the trace running the library's own mechanism (one optimizer per parameter, stepped and
zeroed by its post-accumulate-grad hook)."""

import json
from pathlib import Path

import pytest

from memlint.cli import main
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate.from_plan import apply_assumptions, setup_from_plan
from memlint.extract import extract_source
from memlint.extract.configs import read_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
# Big enough that the weights, gradients and state outweigh the activations (hidden 256, 4 layers,
# vocabulary 2,000): the optimizer step is the peak of the usual step.
TINY = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=2000, max_position_embeddings=256, tie_word_embeddings=False)

_TUTORIAL = '''import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
optimizer_dict = {p: torch.optim.Adam([p], foreach=False) for p in model.parameters()}

def optimizer_hook(parameter) -> None:
    HOOK_BODY

for p in model.parameters():
    p.register_post_accumulate_grad_hook(optimizer_hook)

for batch in loader:
    loss = model(**batch).loss
    loss.backward()
'''
_STEP = "optimizer_dict[parameter].step()\n    optimizer_dict[parameter].zero_grad()"


def _torchtune(tmp_path, text: str, name: str = "torchtune_full_single_device.yaml"):
    base = (FIXTURES / "torchtune_llama3_2_1B_full_distributed.yaml").read_text()
    p = tmp_path / name
    p.write_text(base.replace("optimizer_in_bwd: False\n", text))
    return read_config(p)


def test_torchtune_optimizer_in_bwd_is_read(tmp_path):
    on = _torchtune(tmp_path, "optimizer_in_bwd: True\n")
    v = on.get("optimizer_in_bwd")
    assert (v.value, v.source) == (True, "literal") and v.span.line
    assert not any("optimizer_in_bwd" in n for n in on.notes) and not on.diagnostics
    assert setup_from_plan(on).setup.optimizer_in_bwd
    off = read_config(FIXTURES / "torchtune_llama3_2_1B_full_distributed.yaml")
    assert off.get("optimizer_in_bwd").value is False
    unset = _torchtune(tmp_path, "")
    assert (unset.get("optimizer_in_bwd").value, unset.get("optimizer_in_bwd").source) == (False, "library-default")


def test_torchtune_refuses_accumulation_and_clipping_with_it_and_lora_recipes_ignore_it(tmp_path):
    base = (FIXTURES / "torchtune_llama3_2_1B_full_distributed.yaml").read_text().replace(
        "optimizer_in_bwd: False", "optimizer_in_bwd: True")
    for old, new, message in (("gradient_accumulation_steps: 1", "gradient_accumulation_steps: 8", "Gradient accumulation"),
                              ("clip_grad_norm: null", "clip_grad_norm: 1.0", "Gradient clipping")):
        p = tmp_path / "full_distributed.yaml"
        p.write_text(base.replace(old, new))
        assert [d.kind for d in read_config(p).diagnostics if message in d.message] == ["bad-value"]
    qlora = (FIXTURES / "torchtune_llama3_1_8B_qlora_single_device.yaml").read_text()
    p = tmp_path / "qlora_single_device.yaml"
    p.write_text(qlora + "\noptimizer_in_bwd: True\n")
    plan = read_config(p)
    assert plan.get("optimizer_in_bwd").value is False
    assert any("no effect in torchtune's LoRA recipes" in n for n in plan.notes)


def test_the_pytorch_tutorial_pattern_is_read_from_a_script():
    plan = extract_source(_TUTORIAL.replace("HOOK_BODY", _STEP), "train.py")
    v = plan.get("optimizer_in_bwd")
    assert (v.value, v.source, v.span.line) == (True, "literal", 12)
    assert plan.value("grad_accum") == 1  # the hook steps in every backward
    plan, _ = apply_assumptions(plan, ["per_device_batch=1", "max_length=512"])
    assert setup_from_plan(plan).setup.optimizer_in_bwd
    # a hook that only logs is no optimizer step; one memlint cannot read is said
    logging = extract_source(_TUTORIAL.replace("HOOK_BODY", "print(parameter.grad.norm())"), "train.py")
    assert not logging.get("optimizer_in_bwd").known
    opaque = extract_source(_TUTORIAL.replace("register_post_accumulate_grad_hook(optimizer_hook)",
                                              "register_post_accumulate_grad_hook(hooks.step_fn)"), "train.py")
    assert any("--assume optimizer_in_bwd=true" in n for n in opaque.notes)


def test_the_estimate_holds_one_gradient_not_all_of_them():
    from memlint.catalog import resolve

    s = Setup(resolve("meta-llama/Llama-3.2-1B"), seq=512, optim="adamw_torch")  # foreach: the step phase peaks
    plain, fused = estimate(s), estimate(s.with_(optimizer_in_bwd=True))
    # Llama-3.2-1B ties lm_head to the embeddings: the largest parameter is the 128,256 x 2,048 embedding
    assert fused.bytes("gradients") == 128256 * 2048 * 2
    assert plain.peak_phase == "optimizer" and fused.phases["optimizer"] < plain.phases["optimizer"]
    assert fused.bytes("optimizer") == plain.bytes("optimizer")  # the state stays whole
    assert fused.allocated_peak < plain.allocated_peak
    assert any("optimizer in backward" in n for n in fused.assumptions)
    with pytest.raises(MemlintError, match="gradient accumulation"):
        s.with_(optimizer_in_bwd=True, grad_accum=4)


def test_cli_flag(capsys):
    base = ["estimate", "--model", "meta-llama/Llama-3.2-1B", "--seq", "512", "--format", "json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(base + ["--optimizer-in-bwd"]) == 0
    fused = json.loads(capsys.readouterr().out)
    assert fused["components"]["gradients"] < plain["components"]["gradients"]


@pytest.mark.parametrize("kw", [dict(), dict(recompute=True), dict(optim="adamw_torch_fused"), dict(optim="adafactor"),
                                dict(dtype="fp32", precision="fp32"), dict(method="lora")],
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_estimate_matches_the_trace_of_per_parameter_optimizers_stepped_by_hooks(kw):
    """The trace registers one optimizer per parameter and a post-accumulate-grad hook that steps and
    zeroes it, as torchtune's register_optim_in_bwd_hooks does; the live-storage tracker counts it."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from memlint.measure import measure, tiny_spec

    s = Setup(tiny_spec("llama", TINY), **{"batch": 1, "seq": 32, **kw}, optimizer_in_bwd=True)
    m = measure(s, device="trace").to_json()
    est = estimate(s)
    assert est.allocated_peak == pytest.approx(m["measured_peak"], rel=0.04 if s.method == "lora" else 0.015)
    assert est.phases["optimizer"] == pytest.approx(m["steps"][-1]["phases"]["optimizer"], rel=0.01)
    assert m["components"]["gradients"] == 0  # every gradient was freed by its hook
    if s.method == "full" and kw.get("optim") != "adafactor":
        usual = measure(s.with_(optimizer_in_bwd=False), device="trace").to_json()
        assert m["measured_peak"] < 0.85 * usual["measured_peak"]
