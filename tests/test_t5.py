"""Encoder-decoders (issue #15): T5 / T5 v1.1 / Flan-T5 / T0 (mT5 / mT0 / byT5 / BART: tests/test_seq2seq_more.py).

Counts against transformers' own T5ForConditionalGeneration, the estimate against `memlint measure`'s fake-tensor
trace of a real step of a tiny random-weight T5 (fp32 and bf16 autocast, eager and SDPA, recompute on and off,
LoRA on peft's T5 default q, v and a full fine-tune), and the plan's target length read from a
run_summarization-style script (tests/data/t5/, synthetic)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memlint.catalog import resolve
from memlint.catalog.spec import spec_from_entry
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate

DATA = Path(__file__).parent / "data" / "t5"


def tiny(gated: bool = True, tie: bool = False, **kw):
    """A tiny T5 counted on the meta device like a catalog entry (random weights at measure time)."""
    pytest.importorskip("transformers")
    from memlint.catalog.meta import count_on_meta

    cfg = {"vocab_size": 512, "d_model": 64, "d_kv": 16, "d_ff": 160, "num_layers": 2, "num_decoder_layers": 3,
           "num_heads": 4, "relative_attention_num_buckets": 32, "dropout_rate": 0.1, "layer_norm_epsilon": 1e-6,
           "feed_forward_proj": "gated-gelu" if gated else "relu", "tie_word_embeddings": tie,
           "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0, **kw}
    return spec_from_entry("tiny-t5", {**count_on_meta("t5", cfg), "model_type": "t5", "config": cfg})


# ----------------------------------------------------------------------------------------------- counts

@pytest.mark.parametrize("gated, tie", [(True, False), (False, True)])
def test_counts_are_transformers_t5(gated, tie):
    torch = pytest.importorskip("torch")
    from transformers import T5Config, T5ForConditionalGeneration

    m = tiny(gated, tie)
    with torch.device("meta"):
        model = T5ForConditionalGeneration(T5Config(**dict(m.config)))
    own = sum(p.numel() for p in model.parameters())  # transformers 5.x ties lm_head in from_config
    lm_head_is_shared = model.lm_head.weight is model.shared.weight
    # an untied checkpoint (v1.1 / Flan-T5: tie_word_embeddings false) carries its own lm_head.weight
    expected = own + (m.vocab * m.hidden if (not tie and lm_head_is_shared) else 0)
    assert m.params == expected
    assert m.tied_embeddings == tie
    assert m.arch["gated_ffn"] is gated and m.arch["encoder_decoder"]
    assert m.arch["scale_decoder_outputs"] == tie  # original T5 rescales by d_model**-0.5 before its tied lm_head
    names = {l.name: l for l in m.linears}
    assert names["encoder.SelfAttention.q"].count == 2 and names["decoder.EncDecAttention.k"].count == 3
    assert names["decoder.DenseReluDense.wo"].role == "mlp_out"
    # relative attention bias only in each stack's first layer: buckets x heads, twice
    assert m.groups["other"] == 2 * 32 * 4


def test_catalog_t5_family():
    sizes = {"t5-small": 60_506_624, "t5-base": 222_903_552, "t5-large": 737_668_096, "t5-3b": 2_851_598_336,
             "t5-11b": 11_307_321_344, "google/flan-t5-small": 76_961_152, "google/flan-t5-base": 247_577_856,
             "google/flan-t5-large": 783_150_080, "google/flan-t5-xl": 2_849_757_184,
             "google/flan-t5-xxl": 11_135_332_352, "google/t5-v1_1-xl": 2_849_757_184,
             "bigscience/T0_3B": 2_849_757_184}
    for mid, n in sizes.items():
        m = resolve(mid)
        assert m.params == n, mid
        assert m.tied_embeddings is (mid.startswith("t5-")), mid
    assert resolve("google/flan-t5-xl").arch["gated_ffn"] and not resolve("t5-3b").arch["gated_ffn"]


# ----------------------------------------------------------------------------------------------- estimate vs trace

CASES = [  # (setup overrides, activations tolerance, peak tolerance): the figures docs/accounting.md quotes
    (dict(), 0.001, 0.01),
    (dict(gated=False, tie=True), 0.001, 0.01),
    (dict(precision="amp-bf16"), 0.001, 0.015),
    (dict(gated=False, tie=True, precision="amp-bf16"), 0.001, 0.015),
    (dict(recompute=True), 0.001, 0.015),
    (dict(method="lora", lora_targets=("q", "v")), 0.001, 0.01),
    (dict(method="lora", lora_targets=("q", "v"), precision="amp-bf16"), 0.005, 0.02),
    (dict(method="lora", lora_targets=("q", "v"), recompute=True), 0.001, 0.03),
    (dict(attn="sdpa"), 0.001, 0.01),
    (dict(attn="sdpa", recompute=True), 0.001, 0.015),
    (dict(attn="sdpa", precision="amp-bf16"), 0.001, 0.015),
    (dict(precision="amp-bf16", recompute=True), 0.001, 0.07),  # backward under autocast + recompute: -4.6 %
    (dict(attn="sdpa", method="lora", lora_targets=("q", "v")), 0.001, 0.01),
]


def _setup(kw: dict) -> Setup:
    kw = dict(kw)
    m = tiny(kw.pop("gated", True), kw.pop("tie", False))
    return Setup(m, **{"batch": 2, "seq": 96, "target_len": 40, "dtype": "fp32", "precision": "fp32",
                       "optim": "adamw_torch", "attn": "eager", **kw})


@pytest.mark.parametrize("kw, act_tol, peak_tol", CASES)
def test_estimate_against_the_trace(kw, act_tol, peak_tol):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from memlint.measure import measure

    s = _setup(kw)
    e = estimate(s)
    m = measure(s, device="trace")
    for k in ("weights", "gradients"):
        assert e.components[k].bytes == m.components[k], k
    act, meas = e.components["activations"].bytes, m.components["activations"]
    assert abs(act - meas) <= act_tol * meas, (act, meas)
    assert abs(e.components["logits"].bytes - m.components["logits"]) <= 16
    peak = e.peak - e.components["overhead"].bytes
    assert abs(peak - m.measured_peak) <= peak_tol * m.measured_peak, (peak, m.measured_peak)


def test_target_length_drives_the_decoder_terms():
    s = _setup({})
    short, long_ = estimate(s.with_(target_len=8)), estimate(s.with_(target_len=80))
    assert long_.components["logits"].bytes == 10 * short.components["logits"].bytes
    assert long_.components["activations"].bytes > short.components["activations"].bytes
    assumed = estimate(s.with_(target_len=None))
    assert s.with_(target_len=None).tgt == s.seq
    assert "assumed" in assumed.components["activations"].formula


# ----------------------------------------------------------------------------------------------- setup / plan / cli

def test_unsupported_setups_are_refused():
    m = tiny()
    with pytest.raises(MemlintError, match="encoder-decoder"):
        Setup(m, method="qlora", quant="nf4")
    with pytest.raises(MemlintError, match="fp16 weights"):
        Setup(m, dtype="fp16")
    with pytest.raises(MemlintError, match="target-len"):
        Setup(m, target_len=0)


def test_plan_reads_the_target_length():
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_file

    plan = extract_file(DATA / "summarization_style.py")
    f = plan.fields
    assert f["target_len"].value == 128 and f["target_len"].source == "argparse-default"
    assert f["max_length"].value == 512  # the labels' text_target= call is not a source length
    s = setup_from_plan(plan).setup
    assert s.model.id == "google/flan-t5-base" and s.target_len == 128 and s.seq == 512


def test_text_target_call_and_unknown_target(tmp_path):
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_file

    src = (DATA / "summarization_style.py").read_text()
    known = tmp_path / "known.py"
    known.write_text(src.replace("max_length=args.max_target_length", "max_length=32"))
    plan = extract_file(known)
    assert plan.fields["target_len"].value == 32 and plan.fields["target_len"].source == "literal"
    unknown = tmp_path / "unknown.py"
    unknown.write_text(src.replace(", max_length=args.max_target_length", "")
                       .replace('parser.add_argument("--max_target_length", type=int, default=128)\n', ""))
    plan = extract_file(unknown)
    assert not plan.fields["target_len"].known
    planned = setup_from_plan(plan)
    assert planned.setup.target_len is None
    assert any("target length unknown" in n for n in planned.notes)


def test_estimate_cli_target_len():
    run = lambda *a: subprocess.run([sys.executable, "-m", "memlint", "estimate", "--model", "google/flan-t5-small",  # noqa: E731
                                     *a], capture_output=True, text=True)
    ok = run("--seq", "512", "--target-len", "64", "--format", "json")
    assert ok.returncode == 0, ok.stderr
    assert "target length (64)" in ok.stdout
    assumed = run("--seq", "512", "--format", "json")
    assert "assumed = the source length (512" in assumed.stdout
    bad = run("--target-len", "-3")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
