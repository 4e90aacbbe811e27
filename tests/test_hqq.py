"""HQQ bases (#15): transformers' HqqConfig(nbits, group_size) quantizes on load with hqq's HQQLinear; LLaMA-Factory's
quantization_method: hqq; `estimate --quant hqq --bits N --group-size G`. The packed layout is checked against hqq's
own quantizer on CPU tensors, and the step against a fake-tensor trace of hqq's own HQQLinear under peft's LoRA
(skipped without hqq)."""

import json

import pytest

from memlint.catalog import resolve
from memlint.cli import main
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate import activations as act
from memlint.estimate.from_plan import setup_from_plan
from memlint.estimate.model_state import hqq_linear_bytes, weight_bytes
from memlint.extract import extract_source

LLAMA = "meta-llama/Llama-3.1-8B"
_SCRIPT = '''import torch
from transformers import AutoModelForCausalLM, HqqConfig
from trl import SFTConfig, SFTTrainer
from peft import LoraConfig, get_peft_model
qc = QUANT
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B", quantization_config=qc, torch_dtype=torch.bfloat16)
model = get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))
SFTTrainer(model=model, args=SFTConfig("o", per_device_train_batch_size=2, max_length=512, bf16=True), train_dataset=ds).train()
'''


def test_layout_by_hand():
    # a 4096 x 4096 linear, group 64, bf16 scale and zero: 262,144 groups, W_q [n/g / k, g] for k values a byte
    # (measured with hqq 0.2.8's HQQLinear on CPU: 17,825,792 / 9,437,184 / 7,759,616 / 5,242,880 / 3,145,728 B)
    meta = 2 * 262_144 * 2
    assert hqq_linear_bytes(4096, 4096, 8, 64, 2) == 16_777_216 + meta == 17_825_792
    assert hqq_linear_bytes(4096, 4096, 4, 64, 2) == 8_388_608 + meta == 9_437_184
    assert hqq_linear_bytes(4096, 4096, 3, 64, 2) == 4 * 26_215 * 64 + meta == 7_759_616  # ten a word, rows padded
    assert hqq_linear_bytes(4096, 4096, 3, 64, 2, axis=0) == 4 * 7 * 262_144 + meta == 8_388_608
    assert hqq_linear_bytes(4096, 4096, 2, 64, 2) == 5_242_880
    assert hqq_linear_bytes(4096, 4096, 1, 64, 2) == 3_145_728
    assert hqq_linear_bytes(4096, 4096, 4, -1, 4) == 8_388_608 + 2 * 4096 * 4  # one group per row, fp32 meta


def _hqq_bytes(layer) -> int:
    import torch

    meta = sum(v.numel() * v.element_size() for v in layer.meta.values() if isinstance(v, torch.Tensor))
    return layer.W_q.numel() * layer.W_q.element_size() + meta


@pytest.mark.parametrize("bits", [8, 4, 3, 2, 1])
@pytest.mark.parametrize("axis", [1, 0])
def test_layout_matches_hqqs_own_quantizer(bits, axis):
    torch = pytest.importorskip("torch")
    quantize = pytest.importorskip("hqq.core.quantize")
    torch.manual_seed(0)
    lin = torch.nn.Linear(512, 1536, bias=False).requires_grad_(False)
    cfg = quantize.BaseQuantizeConfig(nbits=bits, group_size=64, axis=axis)
    layer = quantize.HQQLinear(lin, cfg, compute_dtype=torch.bfloat16, device="cpu", del_orig=True)
    assert layer.meta["scale"].dtype == torch.bfloat16 and layer.meta["zero"].dtype == torch.bfloat16
    assert hqq_linear_bytes(512, 1536, bits, 64, 2, axis=axis) == _hqq_bytes(layer)


def test_a_tiny_llamas_weights_match_hqqs_own_layers(tmp_path):
    torch = pytest.importorskip("torch")
    quantize = pytest.importorskip("hqq.core.quantize")
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=256, intermediate_size=704, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=1024)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).requires_grad_(False)
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear):
                    q = quantize.HQQLinear(child, quantize.BaseQuantizeConfig(nbits=4, group_size=64),
                                           compute_dtype=torch.bfloat16, device="cpu", del_orig=True)
                    setattr(parent, name, q)
    hqq = [m for m in model.modules() if isinstance(m, quantize.HQQLinear)]
    assert len(hqq) == 14
    real = sum(_hqq_bytes(m) for m in hqq) + sum(p.numel() * p.element_size() for p in model.parameters()
                                                    if p.dtype != torch.uint8)
    (tmp_path / "config.json").write_text(json.dumps({**cfg.to_dict(), "architectures": ["LlamaForCausalLM"]}))
    s = Setup(resolve(str(tmp_path)), method="qlora", quant="hqq", quant_bits=4, quant_group_size=64, dtype="bf16",
              lora_targets=("q_proj",), lora_r=8, kbit_prep=False)
    est = weight_bytes(s, "real")[0] - 2 * 8 * (256 + 256) * 4  # less the fp32 LoRA q_proj adapters (2 layers, r 8)
    assert est == pytest.approx(real, rel=0.01)
    assert est == real


def test_vocabulary_and_messages():
    spec = resolve(LLAMA)
    Setup(spec, method="qlora", quant="hqq", quant_bits=2)
    Setup(spec, method="lora", quant="hqq", quant_bits=8)
    with pytest.raises(MemlintError, match="HQQ quantizes to"):
        Setup(spec, method="qlora", quant="hqq", quant_bits=7)
    with pytest.raises(MemlintError, match="cannot be fully fine-tuned"):
        Setup(spec, method="full", quant="hqq")


def test_kbit_prep_does_not_upcast_an_hqq_base():
    spec = resolve(LLAMA)
    s = Setup(spec, method="qlora", quant="hqq", dtype="bf16", kbit_prep=True)
    assert not s.upcasts_kbit
    assert weight_bytes(s, "real") == weight_bytes(s.with_(kbit_prep=False), "real")
    assert any("peft skips the upcast" in n for n in estimate(s).assumptions)


def test_fewer_bits_fewer_bytes_and_the_saved_inputs():
    spec = resolve(LLAMA)
    s = Setup(spec, method="qlora", quant="hqq", dtype="bf16", precision="amp-bf16", seq=1024, kbit_prep=False)
    w = [weight_bytes(s.with_(quant_bits=b), "real")[0] for b in (8, 4, 3, 2, 1)]
    assert w == sorted(w, reverse=True) and len(set(w)) == 5
    # every quantized linear's input is saved: beside NF4's, per token per layer the normed input of q/k/v
    # and of gate/up (bf16) and down_proj's input (the MLP product, bf16); under autocast the adapters keep copies of their own
    nf4 = act.activations(s.with_(quant="nf4"), "real")
    hqq = act.activations(s, "real")
    extra = 2 * (4096 + 4096 + 14336) * 1024 * 32
    assert hqq.body - nf4.body == extra
    assert hqq.transient == 14336 * 4096 * 3 * 2  # the dequantized down/gate/up weight, three bf16 copies


@pytest.mark.parametrize("quant,bits,group", [("HqqConfig(nbits=2, group_size=32)", 2, 32),
                                              ("HqqConfig()", 4, 64),
                                              ("HqqConfig(nbits=8, group_size=128, axis=1)", 8, 128)])
def test_hqqconfig_is_read_from_a_script(quant, bits, group):
    plan = extract_source(_SCRIPT.replace("QUANT", quant), "train.py")
    assert plan.get("quant_type").value == "hqq" and plan.get("quant_bits").value == bits
    assert plan.get("quant_group_size").value == group
    s = setup_from_plan(plan).setup
    assert (s.quant, s.quant_bits, s.quant_group_size) == ("hqq", bits, group)
    assert s.method == ("qlora" if bits <= 4 else "lora")


def test_llama_factory_quantization_method_hqq(tmp_path):
    from memlint.extract.configs import read_config

    p = tmp_path / "llama3_lora_sft_hqq.yaml"
    p.write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nquantization_bit: 4\n"
                 "quantization_method: hqq\nstage: sft\ndo_train: true\nfinetuning_type: lora\nlora_target: all\n"
                 "dataset: identity\ntemplate: llama3\ncutoff_len: 2048\nper_device_train_batch_size: 1\nbf16: true\n"
                 "output_dir: out\n")
    plan = read_config(p)
    assert (plan.value("quant_type"), plan.value("quant_bits"), plan.value("quant_group_size")) == ("hqq", 4, 64)
    s = setup_from_plan(plan).setup
    assert (s.method, s.quant, s.quant_bits, s.quant_group_size) == ("qlora", "hqq", 4, 64)


def test_cli_flags(capsys):
    assert main(["estimate", "--model", LLAMA, "--method", "qlora", "--quant", "hqq", "--bits", "3",
                 "--group-size", "32", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = Setup(resolve(LLAMA), method="qlora", quant="hqq", quant_bits=3, quant_group_size=32,
              kbit_prep=any("peft skips the upcast" in n for n in out["assumptions"]))
    assert out["components"]["weights"] == estimate(s).components["weights"].bytes
    assert main(["estimate", "--model", LLAMA, "--method", "qlora", "--quant", "hqq", "--bits", "7"]) == 2
    assert "HQQ quantizes to" in capsys.readouterr().err
    assert main(["estimate", "--model", LLAMA, "--method", "qlora", "--bits", "2"]) == 2
    assert "--quant hqq" in capsys.readouterr().err


def test_the_estimate_matches_a_trace_of_hqqs_own_layers():
    pytest.importorskip("torch")
    pytest.importorskip("hqq.core.quantize")
    from memlint.measure import measure

    s = Setup(resolve("HuggingFaceTB/SmolLM2-135M"), method="qlora", quant="hqq", quant_bits=4, quant_group_size=64,
              dtype="bf16", precision="amp-bf16", seq=256, optim="adamw_torch", kbit_prep=False)
    m = measure(s, device="trace").to_json()
    assert any("HqqLoraLinear" in n for n in m["notes"])
    e = estimate(s)
    assert e.components["weights"].bytes == pytest.approx(m["components"]["weights"], rel=1e-5)
    assert e.allocated_peak == pytest.approx(m["measured_peak"], rel=0.01)


@pytest.mark.parametrize("version,works", [("4.46.3", True), ("4.41.0", True), ("4.40.2", False), ("5.24.0", False),
                                           (None, False)])
def test_transformers_quantizes_hqq_on_load_at_4x_only(version, works):
    from memlint.library.api import quantize_on_load
    from memlint.library.versions import pinned_versions

    with pinned_versions({"transformers": version}):
        got, why = quantize_on_load("hqq")
        note = next(n for n in estimate(Setup(resolve(LLAMA), method="qlora", quant="hqq")).assumptions
                    if n.startswith("HQQ"))
    assert got is works
    assert ("from_pretrained raises" in note) is not works and "HQQLinear" in why
