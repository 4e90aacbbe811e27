"""Op-level selective activation checkpointing (torchtitan activation_checkpoint.mode "selective" with
selective_ac_option "op"): each checkpointed layer keeps its input, every second mm output and the attention
kernel's output and logsumexp; the rest is recomputed. Checked against a fake-tensor trace of a real step that
runs torchtitan's own policy (measure/sac.py, copied from torchtitan v0.2.2) in torch's
create_selective_checkpoint_contexts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate.activations import op_sac_kept_per_token


def test_op_sac_sits_between_full_recompute_and_none():
    m = resolve("meta-llama/Llama-3.1-8B")
    base = Setup(m, method="full", seq=8192, dtype="bf16", precision="pure-bf16")
    a = [estimate(base.with_(recompute=True)).bytes("activations"),
         estimate(base.with_(recompute=True, recompute_policy="op-sac")).bytes("activations"),
         estimate(base).bytes("activations")]
    assert a[0] < a[1] < a[2]


def test_the_kept_tensors_of_a_llama_layer():
    # Llama's mms in call order: q k v o gate up down; the 1st, 3rd, 5th, 7th are kept (q, v, gate, down)
    s = Setup(resolve("meta-llama/Llama-3.1-8B"), method="full", recompute=True, recompute_policy="op-sac",
              dtype="bf16", precision="pure-bf16")
    kept, why = op_sac_kept_per_token(s)
    assert "q_proj, v_proj, gate_proj, down_proj" in why
    h, kv, inter, heads = 4096, 1024, 14336, 32
    assert kept == 2 * (h + kv + inter + h) + 2 * h + 4 * heads


def test_lora_matmuls_shift_the_count():
    # peft's Linear runs base, lora_A, lora_B: with q_proj adapted the mms are q, qA, qB, k, v, vA, vB, o, ...
    s = Setup(resolve("meta-llama/Llama-3.1-8B"), method="lora", lora_targets=("q_proj", "v_proj"), recompute=True,
              recompute_policy="op-sac")
    _, why = op_sac_kept_per_token(s)
    assert why.startswith("mm outputs of q_proj, q_proj.lora_B, v_proj, v_proj.lora_B, gate_proj, down_proj")


@pytest.mark.parametrize("kwargs, match", [
    (dict(recompute_policy="op-sac"), "needs --recompute"),
    (dict(recompute=True, recompute_policy="op-sac", recompute_every=2), "exclude each other"),
    (dict(recompute=True, recompute_policy="some"), "unknown --recompute-policy"),
])
def test_bad_combinations_are_refused(kwargs, match):
    with pytest.raises(MemlintError, match=match):
        Setup(resolve("HuggingFaceTB/SmolLM2-135M"), **kwargs)


def test_the_estimate_flag():
    run = lambda *a: subprocess.run([sys.executable, "-m", "memlint", "estimate", "--model", "HuggingFaceTB/SmolLM2-135M",
                                     "--format", "json", *a], capture_output=True, text=True)
    full, sac = run("--recompute"), run("--recompute", "--recompute-policy", "op-sac")
    assert full.returncode == sac.returncode == 0, sac.stderr
    bad = run("--recompute-policy", "op-sac")
    assert bad.returncode == 2 and "needs --recompute" in bad.stderr and "Traceback" not in bad.stderr
    import json

    act = lambda r: json.loads(r.stdout)["components"]["activations"]
    assert act(sac) > act(full)


@pytest.mark.parametrize("model, method, seq, phase", [
    ("HuggingFaceTB/SmolLM2-135M", "lora", 512, "backward"),  # a Llama; LoRA's A/B matmuls shift the mm count
    ("Qwen/Qwen2.5-0.5B", "lora", 256, "backward"),           # biased q/k/v: addmm, neither counted nor kept by v0.2.2
    ("HuggingFaceTB/SmolLM2-135M", "full", 512, "optimizer"),  # torchtitan's case: every parameter trains
])
def test_the_estimate_matches_a_trace_of_torchtitans_policy(model, method, seq, phase):
    pytest.importorskip("torch")
    from memlint.measure import measure

    s = Setup(resolve(model), method=method, recompute=True, recompute_policy="op-sac", seq=seq, optim="adamw_torch")
    full = s.with_(recompute_policy="full")
    t_sac, t_full = (measure(x, device="trace").to_json() for x in (s, full))
    e_sac, e_full = estimate(s), estimate(full)
    assert any("op-level SAC" in n for n in t_sac["notes"])
    assert t_sac["phase"] == phase
    assert e_sac.allocated_peak == pytest.approx(t_sac["measured_peak"], rel=0.01)
    # what the policy keeps beyond full recompute, in the saved activations
    kept_traced = t_sac["components"]["activations"] - t_full["components"]["activations"]
    kept_est = e_sac.bytes("activations") - e_full.bytes("activations")
    assert kept_traced > 0
    assert kept_est == pytest.approx(kept_traced, rel=0.02)


def test_a_context_fn_in_gradient_checkpointing_kwargs_is_said(tmp_path):
    from memlint.extract import extract_file

    p = tmp_path / "train.py"
    p.write_text(
        "import functools\n"
        "from torch.utils.checkpoint import create_selective_checkpoint_contexts\n"
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('HuggingFaceTB/SmolLM2-135M')\n"
        "args = TrainingArguments('out', gradient_checkpointing=True, gradient_checkpointing_kwargs={\n"
        "    'use_reentrant': False, 'context_fn': functools.partial(create_selective_checkpoint_contexts, print)})\n"
        "Trainer(model=model, args=args).train()\n")
    plan = extract_file(p)
    assert plan.value("gradient_checkpointing") is True and plan.value("recompute_policy") is None
    assert any("context_fn" in n and "recompute_policy=op-sac" in n for n in plan.notes)
    p.write_text(p.read_text().replace("'context_fn': functools.partial(create_selective_checkpoint_contexts, print)", ""))
    assert not any("context_fn" in n for n in extract_file(p).notes)


def test_a_plan_with_op_sac_and_offloading_estimates_full_recompute():
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.plan import TrainingPlan, Value

    lit = lambda v: Value(v, "literal")
    plan = TrainingPlan("x.yaml", {"model_id": lit("HuggingFaceTB/SmolLM2-135M"), "per_device_batch": lit(1),
                                   "max_length": lit(512), "gradient_checkpointing": lit(True),
                                   "recompute_policy": lit("op-sac"), "offload_activations": lit(True)})
    planned = setup_from_plan(plan)
    assert planned.setup.recompute_policy == "full" and any("offloading is not modelled" in n for n in planned.notes)


if __name__ == "__main__":  # python tests/test_sac.py MODEL METHOD SEQ BATCH: the figures of docs/accounting.md
    from memlint.measure import measure

    model, method, seq, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rows = {}
    for policy in ("full", "op-sac"):
        s = Setup(resolve(model), method=method, recompute=True, recompute_policy=policy, seq=seq, batch=batch,
                  optim="adamw_torch")
        t, e = measure(s, device="trace").to_json(), estimate(s)
        rows[policy] = (e.bytes("activations"), t["components"]["activations"])
        print(f"{policy}: allocated peak estimate {e.allocated_peak:,} trace {t['measured_peak']:,} ({t['phase']}) "
              f"{(e.allocated_peak - t['measured_peak']) / t['measured_peak']:+.4%}; activations estimate "
              f"{e.bytes('activations'):,} trace {t['components']['activations']:,}")
    print(f"kept beyond full recompute: estimate {rows['op-sac'][0] - rows['full'][0]:,} "
          f"trace {rows['op-sac'][1] - rows['full'][1]:,}")
