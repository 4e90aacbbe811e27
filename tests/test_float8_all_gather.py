"""FSDP2's float8 all-gather (#15): torchao Float8LinearConfig(enable_fsdp_float8_all_gather=True), torchtitan's
enable_fsdp_float8_all_gather; plan field float8_all_gather, `estimate --float8-all-gather`. The converted linears'
shards are cast to float8 before the all-gather: the unsharded weight is 1 B an element and is not cast again."""

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate import activations as act
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_source

LLAMA = "meta-llama/Llama-3.1-8B"


def _setup(**kw):
    kw = {"float8": "layers", **kw}
    return Setup(resolve(LLAMA), method="full", precision="master-fp32", dtype="bf16", gpus=8, shard="fsdp",
                 recompute=True, batch=2, seq=4096, **kw)


def test_the_gathered_layer_is_float8_and_the_weight_casts_are_gone():
    off, on = _setup(), _setup(float8_all_gather=True)
    m = off.model
    per_layer = sum(i * o * c for i, o, c in act.float8_linears(off)) // m.layers
    e_off, e_on = estimate(off, "real"), estimate(on, "real")
    # one gathered decoder layer at the peak: its float8 linears at 1 B instead of bf16's 2 B
    assert e_off.bytes("weights") - e_on.bytes("weights") == per_layer * (2 - 1)
    # at few tokens the weight's cast (9 B an element at its peak) is the largest transient; with the float8
    # all-gather only the input is cast
    short_off, short_on = off.with_(seq=256, batch=1), on.with_(seq=256, batch=1)
    f_off, b_off = act.float8_transients(short_off)
    f_on, b_on = act.float8_transients(short_on)
    w = max(i * o for i, o, _ in act.float8_linears(off))
    assert f_off >= 9 * w > f_on == 9 * 256 * max(i for i, _, _ in act.float8_linears(off))
    assert b_on < b_off
    assert any("float8 (enable_fsdp_float8_all_gather)" in a for a in e_on.assumptions)
    # "all" converts lm_head too: the root unit's lm_head is gathered in float8 as well
    all_off, all_on = estimate(_setup(float8="all"), "real"), estimate(_setup(float8="all", float8_all_gather=True), "real")
    assert all_off.bytes("weights") - all_on.bytes("weights") == per_layer + m.hidden * m.vocab


def test_it_needs_float8_under_fsdp():
    with pytest.raises(MemlintError, match="needs --float8 and --shard fsdp"):
        Setup(resolve(LLAMA), method="full", float8_all_gather=True, float8="layers")
    with pytest.raises(MemlintError, match="needs --float8"):
        Setup(resolve(LLAMA), method="full", gpus=8, shard="fsdp", float8_all_gather=True)


def test_torchaos_pre_all_gather_sends_one_byte_an_element():
    """The fact the term rests on, from torchao's own code: WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather
    hands FSDP2 the shard's float8 data."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    m = convert_to_float8_training(torch.nn.Sequential(torch.nn.Linear(64, 128, bias=False)),
                                   config=Float8LinearConfig(enable_fsdp_float8_all_gather=True, emulate=True))
    (data,), _meta = m[0].weight.fsdp_pre_all_gather(None)
    assert data.element_size() == 1 and data.shape == (128, 64)
    plain = convert_to_float8_training(torch.nn.Sequential(torch.nn.Linear(64, 128, bias=False)),
                                       config=Float8LinearConfig(emulate=True))
    assert not hasattr(plain[0].weight, "fsdp_pre_all_gather")  # without it FSDP2 gathers the weight's own dtype


_SCRIPT = '''import torch
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B", torch_dtype=torch.bfloat16)
config = Float8LinearConfig(enable_fsdp_float8_all_gather=GATHER)
convert_to_float8_training(model, config=config, module_filter_fn=lambda m, fqn: fqn != "lm_head")
'''


@pytest.mark.parametrize("gather", [True, False])
def test_the_script_is_read(gather):
    plan = extract_source(_SCRIPT.replace("GATHER", str(gather)), "train.py")
    v = plan.fields["float8_all_gather"]
    assert v.value is gather and v.span.line == 6
    assert plan.value("float8_training") == "layers"


def test_the_torchtitan_job_is_read_and_estimated(tmp_path):
    from memlint.extract.configs import read_config

    p = tmp_path / "llama3_8b.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["quantize.linear.float8"]\n\n'
                 '[training]\nlocal_batch_size = 2\nseq_len = 8192\n\n'
                 '[parallelism]\ndata_parallel_shard_degree = 8\n\n[quantize.linear.float8]\n'
                 'enable_fsdp_float8_all_gather = true\nfilter_fqns = ["output"]\n')
    plan = read_config(p)
    assert plan.value("float8_all_gather") is True and plan.fields["float8_all_gather"].span.line == 14
    s = setup_from_plan(plan, {"gpus": 8}).setup
    assert (s.float8, s.float8_all_gather, s.shard) == ("layers", True, "fsdp")
    old = tmp_path / "old.toml"
    old.write_text('[model]\nname = "llama3"\nflavor = "8B"\n\n[training]\nbatch_size = 2\nseq_len = 8192\n'
                   'data_parallel_shard_degree = 8\n\n'
                   '[float8]\nenable_float8_linear = true\nenable_fsdp_float8_all_gather = true\n')
    assert read_config(old).value("float8_all_gather") is True
    assert read_config(old).value("float8_training") == "layers"
