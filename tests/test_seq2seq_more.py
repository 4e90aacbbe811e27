"""More encoder-decoders (issue #15): mT5 / mT0 (model_type mt5), byT5 (T5 with asymmetric stacks) and BART.

Counts against transformers' own MT5ForConditionalGeneration / T5ForConditionalGeneration built on the meta device
(lm_head untied as from_pretrained loads these checkpoints); the estimate against `memlint measure`'s fake-tensor
trace of a real step of a tiny random-weight mT5 with byT5's shape (an encoder 3x the decoder: 3 + 1 layers), so
the per-layer terms of each stack are checked apart; BART (BartForConditionalGeneration: post-LN, learned positions
with offset 2, tied lm_head, final_logits_bias) counted and traced the same way; a run_summarization-style script
for mT5 and BART ids (synthetic)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memlint.catalog import resolve
from memlint.catalog.spec import spec_from_entry
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate

T5_SCRIPT = Path(__file__).parent / "data" / "t5" / "summarization_style.py"


def tiny(model_type: str = "mt5", layers: int = 3, decoder_layers: int = 1, **kw):
    pytest.importorskip("transformers")
    from memlint.catalog.meta import count_on_meta

    cfg = {"vocab_size": 1024, "d_model": 64, "d_kv": 16, "d_ff": 160, "num_layers": layers,
           "num_decoder_layers": decoder_layers, "num_heads": 4, "relative_attention_num_buckets": 32,
           "dropout_rate": 0.1, "layer_norm_epsilon": 1e-6, "feed_forward_proj": "gated-gelu",
           "tie_word_embeddings": False, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0, **kw}
    return spec_from_entry(f"tiny-{model_type}", {**count_on_meta(model_type, cfg), "model_type": model_type,
                                                  "config": cfg})


# ----------------------------------------------------------------------------------------------- counts

def test_mt5_counts_are_transformers_mt5():
    torch = pytest.importorskip("torch")
    from transformers import MT5Config, MT5ForConditionalGeneration

    m = tiny()
    with torch.device("meta"):
        model = MT5ForConditionalGeneration(MT5Config(**dict(m.config)))
    # transformers 5.x's MT5Config forces tying; an mT5 checkpoint carries its own lm_head.weight
    assert model.lm_head.weight is model.shared.weight
    assert m.params == sum(p.numel() for p in model.parameters()) + m.vocab * m.hidden
    assert not m.tied_embeddings and m.groups["lm_head"] == m.vocab * m.hidden
    assert m.arch["gated_ffn"] and m.arch["encoder_decoder"] and m.arch["num_decoder_layers"] == 1
    assert m.arch["scale_decoder_outputs"] is False  # MT5ForConditionalGeneration never rescales before lm_head
    names = {l.name: l for l in m.linears}
    assert names["encoder.SelfAttention.q"].count == 3 and names["decoder.EncDecAttention.k"].count == 1
    assert names["encoder.DenseReluDense.wi_1"].role == "mlp_in"


def test_catalog_mt5_mt0_byt5():
    sizes = {  # transformers' own counts (scripts/gen_catalog.py); the published sizes in the comment
        "google/mt5-small": 300_176_768, "google/mt5-base": 582_401_280, "google/mt5-large": 1_229_581_312,
        "google/mt5-xl": 3_742_619_648, "google/mt5-xxl": 12_921_057_280,  # mT0 card: 300M 580M 1.2B 3.7B 13B
        "google/byt5-small": 299_637_760, "google/byt5-base": 581_653_248, "google/byt5-large": 1_228_183_552,
        "google/byt5-xl": 3_737_801_728, "google/byt5-xxl": 12_906_899_328,  # ByT5 paper: 300M 582M 1.2B 3.74B 12.9B
    }
    for mid, n in sizes.items():
        m = resolve(mid)
        assert m.params == n and not m.tied_embeddings and m.arch["gated_ffn"], mid
    for size in ("small", "base", "large", "xl", "xxl"):
        assert resolve(f"bigscience/mt0-{size}").params == resolve(f"google/mt5-{size}").params
    assert resolve("bigscience/mt0-xxl-mt").params == resolve("bigscience/mt0-xxl").params  # an alias
    mt5 = resolve("mt5-small")
    assert mt5.model_type == "mt5" and mt5.vocab == 250_112
    # the 250k vocabulary: the untied embedding and lm_head are 85 % of mt5-small
    assert mt5.groups["embeddings"] == mt5.groups["lm_head"] == 250_112 * 512
    byt5 = resolve("google/byt5-small")
    assert byt5.model_type == "t5" and byt5.vocab == 384
    assert (byt5.layers, byt5.arch["num_decoder_layers"]) == (12, 4)


def test_catalog_entries_are_what_transformers_builds():
    pytest.importorskip("transformers")
    from memlint.catalog.meta import count_on_meta

    for mid in ("google/mt5-small", "bigscience/mt0-base", "google/byt5-small"):
        m = resolve(mid)
        fresh = count_on_meta(m.model_type, dict(m.config))
        assert fresh["params"] == m.params and fresh["groups"] == dict(m.groups), mid


# ----------------------------------------------------------------------------------------------- estimate vs trace

CASES = [  # (setup overrides, activations tolerance, peak tolerance): the figures docs/accounting.md quotes
    (dict(), 0.001, 0.01),
    (dict(precision="amp-bf16"), 0.001, 0.015),
    (dict(recompute=True), 0.001, 0.015),
    (dict(method="lora", lora_targets=("q", "v")), 0.001, 0.01),
    (dict(attn="sdpa"), 0.001, 0.01),
    (dict(attn="sdpa", precision="amp-bf16"), 0.001, 0.015),
    (dict(attn="sdpa", recompute=True), 0.001, 0.015),
    (dict(attn="sdpa", method="lora", lora_targets=("q", "v")), 0.001, 0.01),
    (dict(attn="sdpa", method="lora", lora_targets=("q", "v"), precision="amp-bf16"), 0.01, 0.025),  # +2.0 % peak
    (dict(decoder_layers=3, layers=1, attn="sdpa", recompute=True), 0.001, 0.02),  # a one-layer encoder
]


@pytest.mark.parametrize("kw, act_tol, peak_tol", CASES)
def test_mt5_estimate_against_the_trace(kw, act_tol, peak_tol):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from memlint.measure import measure

    kw = dict(kw)
    m = tiny(layers=kw.pop("layers", 3), decoder_layers=kw.pop("decoder_layers", 1))
    s = Setup(m, **{"batch": 2, "seq": 96, "target_len": 40, "dtype": "fp32", "precision": "fp32",
                    "optim": "adamw_torch", "attn": "eager", **kw})
    e = estimate(s)
    r = measure(s, device="trace")
    for k in ("weights", "gradients"):
        assert e.components[k].bytes == r.components[k], k
    act, meas = e.components["activations"].bytes, r.components["activations"]
    assert abs(act - meas) <= act_tol * meas, (act, meas)
    assert abs(e.components["logits"].bytes - r.components["logits"]) <= 16
    peak = e.peak - e.components["overhead"].bytes
    assert abs(peak - r.measured_peak) <= peak_tol * r.measured_peak, (peak, r.measured_peak)


# ----------------------------------------------------------------------------------------------- scripts

@pytest.mark.parametrize("model_id", ["google/mt5-small", "bigscience/mt0-base", "google/byt5-small"])
def test_summarization_script_for_mt5_ids(tmp_path, model_id):
    """AutoModelForSeq2SeqLM + Seq2SeqTrainer + DataCollatorForSeq2Seq with --max_target_length: the plan's model
    and target length, and `memlint check` sizes it (the 250k-vocabulary logits rule quotes the target length and
    offers no fused loss, which memlint does not model for an encoder-decoder)."""
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_file

    script = tmp_path / "train.py"
    script.write_text(T5_SCRIPT.read_text().replace("google/flan-t5-base", model_id))
    plan = extract_file(script)
    s = setup_from_plan(plan).setup
    assert s.model.id == model_id and s.target_len == 128 and s.seq == 512 and s.seq2seq
    run = subprocess.run([sys.executable, "-m", "memlint", "check", str(script)],
                         capture_output=True, text=True)
    assert run.returncode in (0, 1) and "Traceback" not in run.stderr and "error" not in run.stderr, run.stderr
    assert f"{script}: peak " in run.stdout  # the run's peak (the summary line, on stdout)
    from memlint.estimate import estimate
    from memlint.estimate.activations import autocast_weight_copies

    e = estimate(s)
    share = (e.bytes("logits") - autocast_weight_copies(s)[1]) / e.allocated_peak
    lines = [l for l in run.stdout.splitlines() if "MEM205" in l]
    # the rule fires where the logits are at least a fifth of the peak (mT0-base at 8 x 128: 19 %, since the loss
    # runs as CUDA runs it: no fp32 upcast of half logits for T5, whose loss does not cast them)
    assert bool(lines) == (s.model.vocab > 200_000 and share >= 0.2), (share, lines)
    for line in lines:
        assert "× 128 (the target length)" in line and "fused cross-entropy" not in line


# ----------------------------------------------------------------------------------------------- BART

def tiny_bart(**kw):
    pytest.importorskip("transformers")
    from memlint.catalog.meta import count_on_meta

    cfg = {"vocab_size": 1024, "d_model": 64, "encoder_layers": 3, "decoder_layers": 2, "encoder_attention_heads": 4,
           "decoder_attention_heads": 4, "encoder_ffn_dim": 160, "decoder_ffn_dim": 160, "max_position_embeddings": 128,
           "activation_function": "gelu", "dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1,
           "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2, **kw}
    return spec_from_entry("tiny-bart", {**count_on_meta("bart", cfg), "model_type": "bart", "config": cfg})


def test_bart_counts_are_transformers_bart():
    torch = pytest.importorskip("torch")
    from transformers import BartConfig, BartForConditionalGeneration

    m = tiny_bart()
    with torch.device("meta"):
        model = BartForConditionalGeneration(BartConfig(**dict(m.config)))
    assert m.params == sum(p.numel() for p in model.parameters())  # lm_head tied to the shared embedding
    assert m.tied_embeddings and m.groups["lm_head"] == 0
    # learned positions with BART's offset 2, in each stack
    assert model.model.encoder.embed_positions.weight.shape[0] == 128 + 2
    assert m.groups["embeddings"] == 1024 * 64 + 2 * 130 * 64
    # layernorm_embedding in each stack; 2 LayerNorms per encoder layer, 3 per decoder layer (weight and bias)
    assert m.groups["norms"] == (2 + 3 * 2 + 2 * 3) * 2 * 64
    assert m.arch["final_logits_bias"] == 1024 and m.arch["post_norm"] and not m.arch["gated_ffn"]
    names = {l.name: l for l in m.linears}
    assert names["encoder.self_attn.q_proj"].count == 3 and names["decoder.encoder_attn.k_proj"].count == 2
    assert names["decoder.fc2"].role == "mlp_out" and names["encoder.fc1"].bias


def test_catalog_bart():
    sizes = {"facebook/bart-base": 139_420_416, "facebook/bart-large": 406_291_456,
             "facebook/bart-large-cnn": 406_290_432}
    for mid, n in sizes.items():
        m = resolve(mid)
        assert m.params == n and m.tied_embeddings and m.arch["post_norm"], mid
    # keras-hub's presets count 1024 positions: transformers' BartLearnedPositionalEmbedding adds 2 rows per stack
    assert sizes["facebook/bart-base"] - 139_417_344 == 2 * 2 * 768
    assert sizes["facebook/bart-large"] - 406_287_360 == 2 * 2 * 1024
    assert resolve("facebook/bart-large-cnn").vocab == 50_264
    for mid in sizes:  # a fresh count of the cited config is the entry
        from memlint.catalog.meta import count_on_meta

        m = resolve(mid)
        assert count_on_meta("bart", dict(m.config))["params"] == m.params


BART_CASES = [  # (setup overrides, activations tolerance, peak tolerance): the figures docs/accounting.md quotes
    (dict(), 0.001, 0.01),
    (dict(precision="amp-bf16"), 0.002, 0.015),
    (dict(attn="sdpa"), 0.001, 0.01),
    (dict(attn="sdpa", precision="amp-bf16"), 0.002, 0.02),
    (dict(attention_dropout=0.0, activation_dropout=0.0), 0.001, 0.01),  # bart-large-cnn-style dropouts
    (dict(method="lora", lora_targets=("q_proj", "v_proj")), 0.001, 0.01),
    (dict(method="lora", lora_targets=("q_proj", "v_proj"), precision="amp-bf16"), 0.01, 0.025),
    (dict(method="lora", lora_targets=("q_proj", "v_proj"), attn="sdpa"), 0.001, 0.01),
    (dict(method="lora", lora_targets=("q_proj", "v_proj"), attn="sdpa", precision="amp-bf16"), 0.01, 0.03),
    (dict(method="lora", lora_targets="all-linear"), 0.001, 0.01),
    (dict(method="lora", lora_targets="all-linear", precision="amp-bf16"), 0.015, 0.02),
    (dict(method="lora", lora_targets="all-linear", attn="sdpa", precision="amp-bf16"), 0.06, 0.02),  # said
]


@pytest.mark.parametrize("kw, act_tol, peak_tol", BART_CASES)
def test_bart_estimate_against_the_trace(kw, act_tol, peak_tol):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from memlint.measure import measure

    kw = dict(kw)
    m = tiny_bart(**{k: kw.pop(k) for k in ("attention_dropout", "activation_dropout") if k in kw})
    s = Setup(m, **{"batch": 2, "seq": 96, "target_len": 40, "dtype": "fp32", "precision": "fp32",
                    "optim": "adamw_torch", "attn": "eager", **kw})
    e = estimate(s)
    r = measure(s, device="trace")
    for k in ("weights", "gradients"):  # the weights hold final_logits_bias (a buffer)
        assert e.components[k].bytes == r.components[k], k
    act, meas = e.components["activations"].bytes, r.components["activations"]
    assert abs(act - meas) <= act_tol * meas, (act, meas)
    assert abs(e.components["logits"].bytes - r.components["logits"]) <= 16
    peak = e.peak - e.components["overhead"].bytes
    assert abs(peak - r.measured_peak) <= peak_tol * r.measured_peak, (peak, r.measured_peak)


def test_bart_refusals_and_notes():
    m = tiny_bart()
    with pytest.raises(MemlintError, match="gradient checkpointing on BART"):
        Setup(m, recompute=True)
    e = estimate(Setup(m, method="lora", lora_targets="all-linear", precision="amp-bf16", attn="sdpa", target_len=8))
    notes = " ".join(e.assumptions)
    assert "BART: post-LN" in notes and "5.5 %" in notes and "dropout 0.1 in every layer" not in notes


@pytest.mark.parametrize("model_id", ["facebook/bart-base", "facebook/bart-large-cnn"])
def test_summarization_script_for_bart_ids(tmp_path, model_id):
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_file

    script = tmp_path / "train.py"
    script.write_text(T5_SCRIPT.read_text().replace("google/flan-t5-base", model_id)
                      .replace("gradient_checkpointing=True, ", ""))
    s = setup_from_plan(extract_file(script)).setup
    assert s.model.id == model_id and s.target_len == 128 and s.seq == 512 and s.seq2seq
    run = subprocess.run([sys.executable, "-m", "memlint", "check", str(script)], capture_output=True, text=True)
    assert run.returncode in (0, 1) and "Traceback" not in run.stderr and "error" not in run.stderr, run.stderr
    assert f"{script}: peak " in run.stdout


@pytest.mark.parametrize("family", ["mt5", "bart"])
@pytest.mark.parametrize("kw", [dict(), dict(attn="sdpa", precision="amp-bf16")])
def test_shared_embedding_gradients_at_the_peak(family, kw):
    """A vocabulary large against the body (as mt5-small's 250k against d 512): the peak is where the shared
    embedding's gradients meet in autograd's input buffer (core.shared_embedding_moment / tied_accumulation);
    before they were counted the estimate read 12-13 % under the trace at mt5-small's and bart-base's real shapes."""
    pytest.importorskip("torch")
    from memlint.measure import measure

    m = tiny(vocab_size=32768) if family == "mt5" else tiny_bart(vocab_size=32768)
    s = Setup(m, **{"batch": 2, "seq": 96, "target_len": 40, "dtype": "fp32", "precision": "fp32",
                    "optim": "adamw_torch", "attn": "eager", **kw})
    e = estimate(s)
    r = measure(s, device="trace")
    peak = e.peak - e.components["overhead"].bytes
    # fp32: within 0.1 %; amp-bf16 SDPA +1.2 % (mT5) / +1.7 % (BART) at this V (the backward at the logits, not located)
    tol = 0.001 if not kw else 0.02
    assert abs(peak - r.measured_peak) <= tol * r.measured_peak, (peak, r.measured_peak)
