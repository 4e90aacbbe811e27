"""GPTQ / AWQ int4 bases (#15): GPTQConfig / AwqConfig in a script, a pre-quantized checkpoint's config.json
quantization_config, `estimate --quant gptq|awq --group-size`, the packed layouts gptqmodel registers and the
dequantized weight its torch kernel saves. Not traced: gptqmodel (the kernels transformers >= 5 and peft load
these bases with) needs torch >= 2.14 and a stack memlint's trace does not install (docs/accounting.md)."""

import json

import pytest

from memlint.catalog import resolve
from memlint.cli import main
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate import activations as act
from memlint.estimate.from_plan import setup_from_plan
from memlint.estimate.model_state import packed_int4_bytes, weight_bytes
from memlint.extract import extract_source

LLAMA2 = "meta-llama/Llama-2-7b-hf"
_SCRIPT = '''import torch
from transformers import AutoModelForCausalLM, GPTQConfig, AwqConfig
from trl import SFTConfig, SFTTrainer
from peft import LoraConfig, get_peft_model
qc = QUANT
model = AutoModelForCausalLM.from_pretrained("MODEL", quantization_config=qc, torch_dtype=torch.float16)
model = get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))
SFTTrainer(model=model, args=SFTConfig("o", per_device_train_batch_size=2, max_length=512, fp16=True), train_dataset=ds).train()
'''


def _script(quant: str, model: str = LLAMA2) -> str:
    return _SCRIPT.replace("QUANT", quant).replace("MODEL", model)


def test_packed_layouts_by_hand():
    # gate_proj of Llama-2-7B: 4096 in, 11008 out, group 128 -> 32 groups, 1376 int32 words of 8 weights per row
    gptq = 4 * 512 * 11008 + 4 * 32 * 1376 + 2 * 32 * 11008 + 4 * 4096  # qweight, qzeros, fp16 scales, g_idx
    awq = 4 * 4096 * 1376 + 4 * 32 * 1376 + 2 * 32 * 11008             # qweight [in, out/8], qzeros, scales
    assert packed_int4_bytes("gptq", 4096, 11008, 128) == gptq == 23_441_408
    assert packed_int4_bytes("awq", 4096, 11008, 128) == awq == 23_425_024
    # group_size -1: one group per column
    assert packed_int4_bytes("gptq", 4096, 4096, -1) == 4 * 512 * 4096 + 4 * 512 + 2 * 4096 + 4 * 4096


def test_vocabulary_and_messages():
    spec = resolve(LLAMA2)
    Setup(spec, method="qlora", quant="gptq")
    Setup(spec, method="qlora", quant="awq", quant_group_size=64)
    with pytest.raises(MemlintError, match="is --method qlora"):
        Setup(spec, method="lora", quant="gptq")
    with pytest.raises(MemlintError, match="cannot be fully fine-tuned"):
        Setup(spec, method="full", quant="awq")
    with pytest.raises(MemlintError, match="gptq or awq"):
        Setup(spec, method="qlora", quant="int8")
    with pytest.raises(MemlintError, match="group-size"):
        Setup(spec, method="qlora", quant="gptq", quant_group_size=0)


def test_kbit_prep_upcasts_awq_but_not_gptq():
    spec = resolve(LLAMA2)
    rest = spec.params - spec.quantizable_params
    g = Setup(spec, method="qlora", quant="gptq", dtype="fp16", precision="amp-fp16", kbit_prep=True)
    a = g.with_(quant="awq")
    wg, wa = weight_bytes(g, "real")[0], weight_bytes(a, "real")[0]
    assert not g.upcasts_kbit and a.upcasts_kbit
    g_idx = 4 * sum(l.in_features * l.count for l in spec.layer_linears())
    assert wa - wg == 2 * rest - g_idx == 520_265_728  # AWQ's embeddings/norms/lm_head upcast to fp32; it has no g_idx


def test_gptq_saves_the_dequantized_weight_of_every_linear():
    spec = resolve(LLAMA2)
    s = Setup(spec, method="qlora", quant="gptq", dtype="fp16", precision="amp-fp16", seq=512)
    per_layer = sum(l.in_features * l.out_features for l in spec.layer_linears()) * 2
    assert act.gptq_saved_per_layer(s) == per_layer == 404_750_336
    nf4 = act.activations(s.with_(quant="nf4"), "real")
    gptq = act.activations(s, "real")
    # both on an fp16 residual stream without kbit prep, the same saved tensors but GPTQ's weight copies
    assert gptq.body - act.activations(s.with_(quant="nf4", kbit_prep=False), "real").body == per_layer * 32
    assert nf4.body != gptq.body
    # under recompute only the layer being recomputed holds them
    r = act.activations(s.with_(recompute=True), "real")
    assert r.per_layer - act.activations(s.with_(recompute=True, quant="nf4", kbit_prep=False), "real").per_layer == per_layer
    awq = act.activations(s.with_(quant="awq", kbit_prep=False), "real")
    assert awq.transient == 11008 * 4096 * 2 and awq.body == act.activations(s.with_(quant="nf4", kbit_prep=False), "real").body
    e = estimate(s)
    assert any("gptqmodel's torch kernel" in n for n in e.assumptions)


@pytest.mark.parametrize("quant,kind,group", [("GPTQConfig(bits=4, group_size=64, desc_act=True)", "gptq", 64),
                                              ("AwqConfig()", "awq", 128)])
def test_configs_are_read_from_a_script(quant, kind, group):
    plan = extract_source(_script(quant), "train.py")
    assert plan.get("quant_bits").value == 4 and plan.get("quant_type").value == kind
    assert plan.get("quant_group_size").value == group
    assert "double_quant" not in plan.fields or plan.get("double_quant").value is None
    s = setup_from_plan(plan).setup
    assert (s.method, s.quant, s.quant_group_size) == ("qlora", kind, group)


def test_qwen_finetune_q_lora_branch():
    """Qwen's finetune.py: GPTQConfig(bits=4, disable_exllama=True) if use_lora and q_lora else None."""
    plan = extract_source(_script("GPTQConfig(bits=4, disable_exllama=True) if q_lora else None"), "finetune.py")
    assert 4 in plan.get("quant_bits").candidates or plan.get("quant_bits").value == 4


def _prequantized(tmp_path, method="gptq"):
    cfg = dict(resolve(LLAMA2).config, model_type="llama", architectures=["LlamaForCausalLM"])
    cfg["quantization_config"] = ({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": True}
                                  if method == "gptq" else
                                  {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True})
    d = tmp_path / "Llama-2-7B-GPTQ"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_a_prequantized_checkpoint_decides_the_base(tmp_path):
    d = _prequantized(tmp_path)
    spec = resolve(str(d))
    assert spec.quantization == {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False}
    plan = extract_source(_script("None", model=str(d)), "train.py")
    ps = setup_from_plan(plan)
    assert (ps.setup.method, ps.setup.quant, ps.setup.quant_group_size) == ("qlora", "gptq", 32)
    assert any("pre-quantized GPTQ" in n for n in ps.notes)


def test_cli_flags_and_the_checkpoint_default(tmp_path, capsys):
    assert main(["estimate", "--model", LLAMA2, "--method", "qlora", "--quant", "awq", "--group-size", "64",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = estimate(Setup(resolve(LLAMA2), method="qlora", quant="awq", quant_group_size=64, kbit_prep=out_kbit(out)))
    assert out["components"]["weights"] == want.components["weights"].bytes
    d = _prequantized(tmp_path, "awq")
    assert main(["estimate", "--model", str(d), "--method", "qlora", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = estimate(Setup(resolve(str(d)), method="qlora", quant="awq", quant_group_size=128, kbit_prep=out_kbit(out)))
    assert out["components"]["weights"] == want.components["weights"].bytes


def out_kbit(out: dict) -> bool:
    return any("casts embeddings, norms and lm_head to fp32" in n for n in out["assumptions"])


def test_measure_refuses_a_gptq_base():
    pytest.importorskip("torch")
    from memlint.measure import measure

    with pytest.raises(MemlintError, match="gptqmodel"):
        measure(Setup(resolve("Qwen/Qwen2.5-0.5B"), method="qlora", quant="gptq", seq=64), device="trace")
