"""float8 training (#15): torchao's convert_to_float8_training, accelerate mixed_precision="fp8" (AO backend),
LLaMA-Factory / axolotl fp8: true; plan field float8_training, `estimate --float8 all|layers`. torchao's
matmul_with_hp_or_float8_args saves the high-precision input and weight (as a bf16 linear does) and casts to float8
on the fly: the weights and saved activations stay, the casts are transients. Checked against fake-tensor traces of
torchao's own Float8Linear (torch._scaled_mm has a fake kernel; skipped without torchao)."""

import json

import pytest

from memlint.catalog import resolve
from memlint.cli import main
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate import activations as act
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_source

SMOL = "HuggingFaceTB/SmolLM2-135M"
_LOOP = '''import torch
from torchao.float8 import convert_to_float8_training
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer
from accelerate import Accelerator
tok = AutoTokenizer.from_pretrained("HuggingFaceTB/SmolLM2-135M")
model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M", torch_dtype=torch.float32)
ds = ds.map(lambda e: tok(e["text"], truncation=True, max_length=512, padding="max_length"))
loader = DataLoader(ds, batch_size=2, shuffle=True)
CONVERT
acc = Accelerator(mixed_precision=MP)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
model, opt = acc.prepare(model, opt)
for batch in loader:
    loss = model(**batch).loss
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
'''


def _loop(convert: str = "", mp: str = '"bf16"') -> str:
    return _LOOP.replace("CONVERT", convert).replace("MP", mp)


def test_weights_and_saved_activations_do_not_change_the_casts_are_transients():
    s = Setup(resolve("meta-llama/Llama-3.1-8B"), method="full", dtype="bf16", precision="pure-bf16", seq=2048)
    f = s.with_(float8="layers")
    e, ef = estimate(s), estimate(f)
    for k in ("weights", "gradients", "optimizer", "activations"):
        assert ef.components[k].bytes == e.components[k].bytes
    fwd, bwd = act.float8_transients(f)
    t = 2048
    # forward: the input cast of down_proj (T x 14336) or a weight cast (14336 x 4096), 9 B an element at the peak
    assert fwd == max(9 * t * 14336, t * 14336 + 9 * 14336 * 4096)
    assert bwd > 0 and act.float8_transients(s) == (0, 0)
    assert any("float8" in n for n in ef.assumptions)


def test_fp32_weights_under_autocast_keep_no_half_copies_of_converted_linears():
    s = Setup(resolve("meta-llama/Llama-3.1-8B"), method="full", dtype="fp32", precision="amp-bf16", seq=1024)
    body, head = act.autocast_weight_copies(s)
    assert body > 0 and head > 0
    assert act.autocast_weight_copies(s.with_(float8="layers")) == (0, head)
    assert act.autocast_weight_copies(s.with_(float8="all")) == (0, 0)


def test_only_full_fine_tuning():
    with pytest.raises(MemlintError, match="full fine-tuning"):
        Setup(resolve(SMOL), method="lora", float8="layers")
    with pytest.raises(MemlintError, match="--float8"):
        Setup(resolve(SMOL), float8="rowwise")


@pytest.mark.parametrize("convert,mp,want,prec", [
    ("convert_to_float8_training(model)", '"bf16"', "all", "amp-bf16"),
    ("convert_to_float8_training(model, module_filter_fn=lambda m, fqn: fqn != 'lm_head')", '"no"', "layers", "fp32"),
    ("", '"fp8"', "layers", "amp-bf16"),
])
def test_the_script_is_read(convert, mp, want, prec):
    plan = extract_source(_loop(convert, mp), "train.py")
    assert plan.get("float8_training").value == want
    assert plan.get("precision").value == prec
    s = setup_from_plan(plan).setup
    assert s.float8 == want


def test_no_float8_without_it():
    plan = extract_source(_loop(), "train.py")
    assert not plan.get("float8_training").known
    assert setup_from_plan(plan).setup.float8 == "none"


def test_configs_are_read(tmp_path):
    from memlint.extract.configs import read_config

    acc = tmp_path / "accelerate_fp8.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: fp8\n"
                   "fp8_config:\n  backend: AO\nnum_processes: 1\n")
    plan = read_config(acc)
    assert plan.value("float8_training") == "layers" and plan.value("precision") == "amp-bf16"
    lf = tmp_path / "llama3_full_fp8.yaml"
    lf.write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nstage: sft\ndo_train: true\n"
                  "finetuning_type: full\ndataset: identity\ntemplate: llama3\ncutoff_len: 1024\n"
                  "per_device_train_batch_size: 1\nbf16: true\nfp8: true\nfp8_backend: torchao\noutput_dir: out\n")
    plan = read_config(lf)
    assert plan.value("float8_training") == "layers"
    assert setup_from_plan(plan).setup.float8 == "layers"


def test_cli_flag(capsys):
    assert main(["estimate", "--model", SMOL, "--float8", "all", "--dtype", "bf16", "--precision", "pure-bf16",
                 "--seq", "512", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = estimate(Setup(resolve(SMOL), dtype="bf16", precision="pure-bf16", seq=512, float8="all"))
    assert out["peak"] == want.peak
    assert main(["estimate", "--model", SMOL, "--method", "lora", "--float8", "layers"]) == 2


@pytest.mark.parametrize("scope", ["layers", "all"])
def test_the_estimate_matches_a_trace_of_torchaos_float8_linear(scope):
    pytest.importorskip("torchao.float8")
    from memlint.measure import measure

    s = Setup(resolve(SMOL), method="full", dtype="bf16", precision="pure-bf16", seq=256, optim="adamw_torch",
              float8=scope)
    m = measure(s, device="trace").to_json()
    assert any("Float8Linear" in n for n in m["notes"])
    e = estimate(s)
    for k in ("weights", "activations"):
        assert e.components[k].bytes == pytest.approx(m["components"][k], rel=0.01)
    traced = m["steps"][-1]["phases"]
    for phase in ("forward", "backward"):
        assert e.phases[phase] == pytest.approx(traced[phase], rel=0.02)
    assert e.allocated_peak == pytest.approx(m["measured_peak"], rel=0.01)
