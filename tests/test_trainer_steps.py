"""The estimate against the libraries' own trainers (memlint.measure.trainer_step: transformers' Trainer and TRL's
trainers at the installed versions, two real steps on a tiny model built from a config) and against the stored
full-size traces (docs/trainer_steps.json, written by benchmarks/trainer_steps.py; docs/reserved_grid.json: long
sequences under TRL's fused LM head and one rank of N-GPU FSDP runs, benchmarks/reserved_fit.py --trace-more)."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import pytest

from memlint.catalog import resolve
from memlint.estimate import Setup, estimate

ROOT = Path(__file__).resolve().parent.parent
SLOW = pytest.mark.skipif(os.environ.get("MEMLINT_SLOW") != "1", reason="library trainer traces: set MEMLINT_SLOW=1")
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=4096, max_position_embeddings=512, tie_word_embeddings=False)


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import trainer_steps

    return trainer_steps


def test_the_stored_trainer_traces():
    """Every stored row of the libraries' trainers (24: Trainer, SFT, DPO, KTO, ORPO, Reward) against today's estimate."""
    rows = _bench().compare(json.loads((ROOT / "docs" / "trainer_steps.json").read_text()))
    errs = [abs(r["error"]) for r in rows]
    assert statistics.median(errs) < 0.5
    # the worst: fp32 weights under autocast with checkpointing, the end of backward counted as an upper bound
    assert max(errs) < 8, [(r["label"], round(r["error"], 2)) for r in rows if abs(r["error"]) >= 8]


def test_the_stored_full_size_traces():
    """FSDP ranks (fake process group) and long fused-head sequences: the allocated peak within 3 %."""
    rows = json.loads((ROOT / "docs" / "reserved_grid.json").read_text())
    assert len(rows) >= 18
    for r in rows:
        s = Setup(resolve(r["model"]), **{k: tuple(v) if isinstance(v, list) else v for k, v in r["setup"].items()})
        err = (estimate(s).allocated_peak - r["measured"]) / r["measured"]
        assert abs(err) < 0.03, (r["config"], err)


def _trace_and_estimate(**kw):
    pytest.importorskip("trl")
    from memlint.measure import tiny_spec
    from memlint.measure.trainer_step import trainer_step

    r = trainer_step(config=TINY, batch=2, seq=64, **kw)
    tr = kw.get("trainer", "sft")
    prec = kw.get("precision", "fp32")
    s = Setup(tiny_spec("llama", TINY), method=kw.get("method", "full"), lora_r=16, lora_dropout=0.0,
              dtype={"pure-bf16": "bf16", "pure-fp16": "fp16"}.get(prec, kw.get("weights", "fp32")), precision=prec,
              optim=kw.get("optim", "adamw_torch"), batch=2, seq=r["shape"][1], recompute=kw.get("recompute", False),
              objective="sft" if tr in ("sft", "trainer") else tr, trl_sft=tr == "sft", trl_version=r["versions"]["trl"])
    return r, estimate(s)


def test_sft_trainer_fused_lm_head():
    """TRL's SFTTrainer (>= 1.15: the fused LM head, no full logits), LoRA, bf16 under autocast."""
    trl = pytest.importorskip("trl")
    from memlint.library.versions import in_range

    if not in_range(trl.__version__, ">=1.15"):
        pytest.skip("SFTTrainer's fused LM head is trl >= 1.15")
    r, e = _trace_and_estimate(trainer="sft", method="lora", precision="amp-bf16", weights="bf16")
    assert e.allocated_peak == pytest.approx(r["peak"], rel=0.01)
    assert "fused LM head" in e.components["logits"].formula


def test_pure_fp16_trainer_step_matches_its_trace():
    """transformers' Trainer on fp16 weights with neither bf16 nor fp16 set: fp16 weights, gradients and AdamW
    state, no fp32 master copy (the plan's pure-fp16), traced as the Trainer runs it and estimated alike; pure-bf16
    beside it for the same model costs the same bytes."""
    r, e = _trace_and_estimate(trainer="trainer", precision="pure-fp16")
    assert e.allocated_peak == pytest.approx(r["peak"], rel=0.01)
    rb, eb = _trace_and_estimate(trainer="trainer", precision="pure-bf16")
    assert r["peak"] == pytest.approx(rb["peak"], rel=0.01)


def test_trainer_gives_embeddings_32bit_state_under_a_bnb_8bit_optimizer():
    """transformers' Trainer.create_optimizer registers optim_bits=32 for nn.Embedding with bitsandbytes."""
    pytest.importorskip("bitsandbytes")
    r, e = _trace_and_estimate(trainer="trainer", optim="adamw_bnb_8bit")
    assert e.bytes("optimizer") == pytest.approx(r["optimizer_state"], rel=0.01)
    assert e.allocated_peak == pytest.approx(r["peak"], rel=0.01)
    script_built = estimate(e.setup.with_(trainer_optimizer=False))
    assert script_built.bytes("optimizer") < 0.5 * e.bytes("optimizer")  # the 4096 x 128 embedding in 8 bits


@SLOW
@pytest.mark.parametrize("kw", [dict(trainer="dpo", method="lora"), dict(trainer="dpo"),
                                dict(trainer="sft", precision="amp-bf16"), dict(trainer="kto", method="lora"),
                                dict(trainer="trainer", precision="amp-bf16", recompute=True)],
                         ids=["dpo-lora", "dpo-full", "sft-amp-fp32", "kto-lora", "trainer-recompute"])
def test_more_trainers(kw):
    r, e = _trace_and_estimate(**kw)
    assert e.allocated_peak == pytest.approx(r["peak"], rel=0.02)
