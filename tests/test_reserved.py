"""The estimator's reserved peak (estimate/reserved.py) against the allocator-model replays it was
fitted on (docs/accuracy.json, written by benchmarks/accuracy.py, docs/reserved_fit.json, by
benchmarks/reserved_fit.py --trace, and docs/reserved_grid.json, by --trace-more long|multi: long sequences under
TRL's fused LM head and one rank of N-GPU FSDP runs at full size). No trace runs here: the replays are data, so a
change to the estimate that the fit no longer covers fails this file."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from memlint import data
from memlint.catalog import resolve
from memlint.estimate import GIB, Setup, estimate
from memlint.estimate.evaluation import eval_estimate

ROOT = Path(__file__).resolve().parent.parent
ROWS = [r for name in ("accuracy.json", "reserved_fit.json", "reserved_grid.json")
        for r in json.loads((ROOT / "docs" / name).read_text()) if r.get("reserved_method") == "allocator-model"]


def _setup(row: dict) -> Setup:
    return Setup(resolve(row["model"]), **{k: tuple(v) if isinstance(v, list) else v for k, v in row["setup"].items()})


def test_the_accuracy_matrix_carries_replayed_reserved_figures():
    assert len(ROWS) >= 60
    for r in ROWS:
        assert r["measured_reserved"] >= r["measured"]  # reserved holds at least the live bytes


@pytest.mark.parametrize("row", ROWS, ids=[r["config"] for r in ROWS])
def test_estimated_reserved_is_within_ten_percent_of_the_replay(row):
    e = estimate(_setup(row), "real")
    assert e.reserved_peak >= e.allocated_peak
    assert e.bytes("overhead") == e.context + e.reserved_peak - e.allocated_peak
    # ten: the fit covers FSDP ranks and long fused-head sequences too (the formula before it: up to 82 % over there)
    assert abs(e.reserved_peak - row["measured_reserved"]) / row["measured_reserved"] < 0.10


def test_the_stored_fit_is_the_fit_of_the_stored_replays():
    """data/cuda_allocator.json's residuals are what its coefficients give on docs/accuracy.json."""
    fit = data.load("cuda_allocator.json")["reserved_fit"]
    errs = [abs(estimate(_setup(r), "real").reserved_peak - r["measured_reserved"]) / r["measured_reserved"] for r in ROWS]
    assert fit["residuals"]["configurations"] == len(ROWS)
    assert statistics.median(errs) == pytest.approx(fit["residuals"]["median_abs_error"], abs=0.002)
    assert max(errs) == pytest.approx(fit["residuals"]["max_abs_error"], abs=0.002)
    assert all(v >= 0 for v in fit["coefficients"].values())


def test_lora_at_a_large_micro_batch_allocates_about_four_fifths_of_what_it_reserves():
    """Issue #15: on LoRA/QLoRA at large micro-batches the allocated peak is 0.75-0.80 x reserved."""
    for method, quant in (("lora", "none"), ("qlora", "nf4")):
        e = estimate(Setup(resolve("meta-llama/Llama-3.1-8B"), method=method, quant=quant, recompute=True,
                           batch=4, seq=8192), "real")
        # the replays say 0.79 / 0.80; the formula, fitted over FSDP ranks and long sequences too, is within 4 % of them
        assert 0.75 <= e.allocated_peak / e.reserved_peak <= 0.85
    small = estimate(Setup(resolve("meta-llama/Llama-3.1-8B"), method="lora", recompute=True, seq=2048), "real")
    assert small.allocated_peak / small.reserved_peak > 0.9


def test_a_fused_loss_leaves_no_half_logits_hole():
    base = Setup(resolve("meta-llama/Llama-3.1-8B"), method="lora", recompute=True, batch=2, seq=4096)
    plain, fused = estimate(base, "real"), estimate(base.with_(fused_loss=True), "real")
    half_logits = 2 * 4096 * base.model.vocab * 2
    slack = lambda e: e.reserved_peak - e.allocated_peak  # noqa: E731
    assert slack(plain) - slack(fused) == pytest.approx(
        data.load("cuda_allocator.json")["reserved_fit"]["coefficients"]["logits_half"] * half_logits, rel=0.01)


def test_textbook_has_no_allocator_slack_and_eval_has_some():
    s = Setup(resolve("Qwen/Qwen2.5-0.5B"), method="full")
    book = estimate(s, "textbook")
    assert book.reserved_peak == book.allocated_peak == book.peak
    ev = eval_estimate(s, eval_batch=8)
    assert ev.overhead > 512 << 20  # the context plus the forward's slack
    assert ev.overhead - (512 << 20) < 2 * GIB


@pytest.mark.parametrize("parallel", [dict(tp=8, tp_stack="torchtitan", sequence_parallel=True), dict(cp=8)])
def test_the_slack_counts_one_ranks_tokens(parallel):
    """A rank under sequence or context parallelism holds 1/8 of the hidden states (and, under the loss-parallel
    torchtitan plan or CP, of the logits): the slack's features are that rank's, not the whole sequence's."""
    from memlint.estimate import reserved
    from memlint.estimate.core import _model_terms

    base = Setup(resolve("meta-llama/Llama-3.1-70B"), method="full", precision="master-fp32", dtype="bf16", gpus=64,
                 shard="fsdp", recompute=True, batch=8, seq=8192)
    par = base.with_(**parallel)
    f1 = reserved.features(base, _model_terms(base, "real")[5])
    rank, *_ = _model_terms(par, "real")
    f8 = reserved.features(rank, _model_terms(par, "real")[5])
    assert f8.hidden_states * 8 == f1.hidden_states
    assert f8.layer < f1.layer / 4  # the rank's share of a layer (TP splits its heads and MLP, CP its tokens)
    assert f8.logits_half * 8 == pytest.approx(f1.logits_half, rel=1e-3)
    e1, e8 = estimate(base, "real"), estimate(par, "real")
    assert (e8.reserved_peak - e8.allocated_peak) < (e1.reserved_peak - e1.allocated_peak) / 4
