"""memlint.measure: the measured ground truth (fake-tensor trace == real CPU execution)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memlint.errors import MemlintError  # noqa: E402
from memlint.estimate.setup import Setup  # noqa: E402
from memlint.measure import measure, tiny_spec  # noqa: E402

LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256, tie_word_embeddings=False)
QWEN_TIED = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=800, max_position_embeddings=256, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def llama():
    return tiny_spec("llama", LLAMA)


@pytest.fixture(scope="module")
def qwen():
    return tiny_spec("qwen2", QWEN_TIED)


def _setup(spec, **kw):
    kw.setdefault("batch", 2)
    kw.setdefault("seq", 32)
    return Setup(model=spec, **kw)


def _bnb_ok() -> bool:
    try:
        import bitsandbytes  # noqa: F401
    except Exception:
        return False
    return True


CASES = [
    {},
    {"recompute": True},
    {"method": "lora"},
    {"method": "lora", "recompute": True},
    {"method": "lora", "precision": "pure-bf16"},
    {"optim": "adamw_torch_fused"},
    {"optim": "adamw_torch_forloop"},
    {"optim": "adafactor"},
    {"optim": "sgd"},
    {"precision": "master-fp32"},
    {"dtype": "fp32", "precision": "fp32"},
    {"dtype": "fp32", "precision": "amp-bf16"},
    {"attn": "eager"},
    pytest.param({"method": "qlora", "quant": "nf4", "recompute": True},
                 marks=pytest.mark.skipif(not _bnb_ok(), reason="bitsandbytes")),
    pytest.param({"method": "qlora", "quant": "fp4", "double_quant": False},
                 marks=pytest.mark.skipif(not _bnb_ok(), reason="bitsandbytes")),
    pytest.param({"optim": "adamw_bnb_8bit"}, marks=pytest.mark.skipif(not _bnb_ok(), reason="bitsandbytes")),
]


@pytest.mark.parametrize("extra", CASES, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "default")
def test_fake_trace_equals_real_cpu_byte_for_byte(llama, extra):
    setup = _setup(llama, **extra)
    fake = measure(setup, device="trace").to_json()
    real = measure(setup, device="cpu").to_json()
    assert fake["method"] == "fake-tensor-trace" and real["method"] == "cpu-tensor-tracker"
    assert fake["steps"] == real["steps"]
    assert fake["components"] == real["components"]
    assert fake["reserved"] == real["reserved"]  # the same allocation sequence, replayed


def test_tied_embeddings_stay_tied_in_the_trace(qwen):
    setup = _setup(qwen)
    fake = measure(setup, device="trace")
    real = measure(setup, device="cpu")
    assert fake.to_json()["steps"] == real.to_json()["steps"]
    # one embedding matrix, counted once: weights = params * 2 bytes + the rotary buffers
    buffers = fake.components["weights"] - qwen.params * 2
    assert 0 <= buffers <= 1024
    assert fake.details["trainable_params"] == qwen.params


def test_to_json_shape(llama):
    j = measure(_setup(llama), device="trace").to_json()
    assert set(j["components"]) == {"weights", "gradients", "optimizer", "activations", "logits", "overhead"}
    assert all(isinstance(v, int) for v in j["components"].values())
    assert j["measured_peak"] == j["steps"][1]["peak"] and j["phase"] == j["steps"][1]["phase"]
    assert [s["step"] for s in j["steps"]] == [1, 2]
    for s in j["steps"]:
        assert set(s["phases"]) == {"forward", "backward", "optimizer"}
        assert s["peak"] == max(s["phases"].values()) and s["phases"][s["phase"]] == s["peak"]
    assert j["device"] == "cpu (fake-tensor trace)" and j["components"]["overhead"] == 0


def test_full_bf16_adamw_components(llama):
    m = measure(_setup(llama), device="trace")
    c = m.components
    param_bytes = llama.params * 2
    n_tensors = 2 * 9 + 3  # per layer: 7 linears + 2 norms; embed, lm_head, final norm
    assert c["gradients"] == param_bytes
    # AdamW keeps m and v in the parameter dtype, plus a 4-byte step per parameter tensor
    assert c["optimizer"] == 2 * param_bytes + 4 * n_tensors
    assert c["weights"] - param_bytes < 1024  # + rotary inv_freq buffers
    # logits: bf16 lm_head output + fp32 upcast + fp32 log_softmax, b*s*vocab each
    tokens = 2 * 32
    assert c["logits"] >= tokens * llama.vocab * (2 + 4 + 4)
    assert c["activations"] > 0


def test_step2_forward_carries_the_optimizer_state(llama):
    m = measure(_setup(llama), device="trace")
    s1, s2 = m.steps
    assert s2.phases["forward"] - s1.phases["forward"] == m.components["optimizer"]
    assert m.measured_peak == s2.peak >= s1.peak


def test_lora_adapters_fp32_on_bf16_base(llama):
    m = measure(_setup(llama, method="lora", lora_r=8), device="trace")
    lora_params = sum(l.count * 8 * (l.in_features + l.out_features) for l in llama.layer_linears())
    assert m.details["trainable_params"] == lora_params
    assert m.details["trainable_bytes"] == 4 * lora_params  # fp32 adapters (peft autocast_adapter_dtype)
    assert m.components["gradients"] == 4 * lora_params
    assert m.details["param_dtypes"]["bfloat16"] == llama.params * 2
    pure = measure(_setup(llama, method="lora", lora_r=8, precision="pure-bf16"), device="trace")
    assert pure.details["trainable_bytes"] == 2 * lora_params


def test_recompute_lowers_activations(llama):
    plain = measure(_setup(llama), device="trace").components["activations"]
    rc = measure(_setup(llama, recompute=True), device="trace").components["activations"]
    assert rc < plain / 3


@pytest.mark.skipif(not _bnb_ok(), reason="bitsandbytes")
@pytest.mark.parametrize("double_quant,kbit_prep", [(True, False), (False, False), (True, True)])
def test_qlora_weights_match_the_packed_4bit_formula(llama, double_quant, kbit_prep):
    r = 8
    setup = _setup(llama, method="qlora", quant="nf4", double_quant=double_quant, lora_r=r, kbit_prep=kbit_prep)
    m = measure(setup, device="trace")
    quantized = [(l.in_features * l.out_features, l.count) for l in llama.layer_linears()]
    q_bytes = 0
    for numel, count in quantized:
        per = numel // 2  # packed uint8, two 4-bit values a byte
        blocks = math.ceil(numel / 64)
        if double_quant:  # uint8 absmax + fp32 absmax per 256 blocks + 256-entry fp32 code + fp32 offset
            per += blocks + 4 * math.ceil(blocks / 256) + 256 * 4 + 4
        else:
            per += 4 * blocks
        per += 16 * 4  # the NF4 code (16 fp32 values) each QuantState carries
        q_bytes += per * count
    unquantized = llama.params - sum(n * c for n, c in quantized)  # embeddings, norms, lm_head
    lora = sum(l.count * r * (l.in_features + l.out_features) for l in llama.layer_linears())
    w = m.components["weights"]
    unq_bytes = 4 if kbit_prep else 2  # prepare_model_for_kbit_training upcasts them to fp32
    buffers = w - (q_bytes + unq_bytes * unquantized + 4 * lora)
    assert 0 <= buffers <= 1024, buffers  # rotary inv_freq
    assert m.details["quantized_linears"] == sum(c for _, c in quantized)


def test_lora_dropout_saves_a_bool_mask(llama):
    # CUDA's fused native_dropout keeps a bool mask (1 byte an element), not CPU's
    # float noise tensor: the trace uses the CUDA kernel.
    a = measure(_setup(llama, method="lora", lora_dropout=0.0), device="trace").components["activations"]
    b = measure(_setup(llama, method="lora", lora_dropout=0.05), device="trace").components["activations"]
    lora_inputs = 2 * 32 * sum(l.count * l.in_features for l in llama.layer_linears())
    assert 0 < b - a <= lora_inputs  # at most one byte per element of each adapter's input


def test_grad_accum_carries_the_gradients_into_the_next_forward(llama):
    one = measure(_setup(llama), device="trace")
    two = measure(_setup(llama, grad_accum=2), device="trace")
    assert two.steps[1].phases["forward"] - one.steps[1].phases["forward"] == one.components["gradients"]
    assert two.components["activations"] == one.components["activations"]


def test_flash_attention_is_traced_as_sdpa_with_a_note(llama):
    m = measure(_setup(llama, attn="flash_attention_2"), device="trace")
    sdpa = measure(_setup(llama, attn="sdpa"), device="trace")
    assert any("flash_attention_2" in n for n in m.notes)
    assert m.to_json()["steps"] == sdpa.to_json()["steps"]


def test_unsupported_setups_raise(llama):
    with pytest.raises(MemlintError):
        measure(_setup(llama, gpus=2, shard="zero3"), device="trace")
    with pytest.raises(MemlintError):
        measure(_setup(llama), device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(MemlintError):
            measure(_setup(llama), device="cuda")


def test_auto_device_without_cuda_is_the_trace(llama):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert measure(_setup(llama), steps=1).method == "fake-tensor-trace"


def test_importing_measure_does_not_import_torch():
    code = "import sys, memlint.measure; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MEMLINT_SLOW") != "1", reason="8B trace: set MEMLINT_SLOW=1")
def test_llama31_8b_full_finetune_trace_finishes():
    from memlint.catalog import resolve

    spec = resolve("meta-llama/Llama-3.1-8B")
    m = measure(Setup(model=spec, batch=1, seq=2048), device="trace")
    c = m.components
    assert c["weights"] - spec.params * 2 < 4096
    assert c["gradients"] == spec.params * 2
    assert m.phase == "optimizer"
    assert m.measured_peak > c["weights"] + c["gradients"] + c["optimizer"]


# ------------------------------------------------------------------------------ reserved (issue #15)
def test_the_event_log_replays_to_the_live_counter_phase_by_phase():
    """The allocation sequence the tracker records, replayed through the allocator model, adds up
    to the tracker's own live bytes: its requested-bytes peak in every phase is the tracker's peak."""
    from memlint.measure.allocator import replay
    from memlint.measure.tracker import LiveBytes

    peaks = {}
    with LiveBytes() as t:
        w = torch.randn(256, 256, requires_grad=True)
        for step in (1, 2):
            t.begin_phase((step, "forward"))
            t.reset_peak_memory_stats()
            x = torch.randn(64, 256)
            y = (x @ w).relu().square().sum()
            peaks[(step, "forward")] = t.max_memory_allocated()
            t.begin_phase((step, "backward"))
            t.reset_peak_memory_stats()
            y.backward()
            del x, y
            peaks[(step, "backward")] = t.max_memory_allocated()
            w.grad = None
        buf = torch.empty(1000)
        buf.resize_(5000)  # grows in place: one RESIZE event
        t.track(buf)
        assert t.events[-1][0] == "resize"
    r = replay(t.events)
    assert {k: r.phases[k].requested for k in peaks} == peaks
    for k in peaks:
        assert r.phases[k].reserved >= r.phases[k].allocated >= r.phases[k].requested


def test_excluded_storages_are_retracted_from_the_event_log():
    from memlint.measure.allocator import replay
    from memlint.measure.tracker import LiveBytes

    with LiveBytes() as t:
        keep, paged = torch.empty(1 << 20), torch.empty(3 << 20)
        assert t.exclude(paged) == 12 << 20
        del paged
    r = replay(t.events)
    assert r.peak_allocated == 4 << 20 and [e[0] for e in t.events] == ["alloc", "retracted"]
    del keep


def test_reserved_is_reported_per_phase_and_the_trace_equals_real_cpu(llama, monkeypatch):
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(var, raising=False)
    setup = _setup(llama, method="lora")
    fake, real = measure(setup, device="trace").to_json(), measure(setup, device="cpu").to_json()
    assert fake["reserved"] == real["reserved"]
    res = fake["reserved"]
    assert res["method"] == "allocator-model" and res["alloc_conf"] == "default"
    assert [s["step"] for s in res["steps"]] == [1, 2]
    for s, live in zip(res["steps"], fake["steps"]):
        for phase in ("forward", "backward", "optimizer"):
            # segments hold blocks; blocks hold at least what was asked for (512-byte rounding)
            assert s["phases"][phase] >= s["allocated"][phase] >= live["phases"][phase]
            assert s["phases"][phase] % (2 << 20) == 0  # whole 2 MiB / 20 MiB / 2 MiB-rounded segments
    ordered = [s["phases"][p] for s in res["steps"] for p in ("forward", "backward", "optimizer")]
    assert ordered == sorted(ordered)  # reserved never shrinks without empty_cache
    assert res["peak"] == res["steps"][1]["phases"][res["phase"]] == max(res["steps"][1]["phases"].values())
    assert res["allocated_peak"] >= fake["measured_peak"]
    assert res["expandable_segments"]["peak"] > 0
    assert measure(setup, device="trace", alloc_conf="expandable_segments:True").to_json()["reserved"]["peak"] \
        == res["expandable_segments"]["peak"]


def test_memlint_measure_prints_allocated_and_reserved_side_by_side(capsys):
    import json

    from memlint.cli import main

    argv = ["measure", "--model", "HuggingFaceTB/SmolLM2-135M", "--method", "lora", "--seq", "64"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "allocated peak" in out and "reserved peak (allocator model)" in out and "expandable_segments" in out
    assert main(argv + ["--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["reserved"]["method"] == "allocator-model" and doc["reserved"]["peak"] >= doc["measured_peak"]
    est = doc["estimate"]
    assert est["reserved_peak"] == doc["peak"] - 512 * 2**20 >= est["allocated_peak"]


def test_measure_takes_the_estimate_flags_and_keeps_library_noise_out(tmp_path):
    """`memlint measure --gpu RTX4090` (the README's flags), and nothing the libraries say while the
    step runs (transformers' FutureWarnings, bitsandbytes' kernel notices) reaches the output."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "src"), PYTHONWARNINGS="default")
    argv = [sys.executable, "-m", "memlint", "measure", "--model", "HuggingFaceTB/SmolLM2-135M", "--method", "qlora",
            "--seq", "128", "--gpu", "RTX4090", "--accounting", "real", "--device", "cpu"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "on RTX4090" in proc.stdout and "fits" in proc.stdout
    noise = [ln for ln in (proc.stdout + proc.stderr).splitlines()
             if "Warning" in ln or "warn(" in ln or "Failed to load" in ln or "deprecated" in ln.lower()]
    assert noise == [], noise
    doc = subprocess.run(argv + ["--format", "json"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert json.loads(doc.stdout)["fits"]["RTX4090"]["verdict"] == "fits"
