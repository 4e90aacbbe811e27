"""torchao's low-bit AdamW (adamw_torch_8bit/4bit, axolotl's ao_adamw_*), bitsandbytes' AdEMAMix and RMSprop,
schedule-free, StableAdamW and LOMO: memlint's optimizer-state term against the bytes the libraries' own
optimizers keep after one real step on CPU (a tiny LlamaForCausalLM from a config, random weights, plus
two big standalone shapes), and the names read from scripts and configs."""

from __future__ import annotations

import json
import warnings

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate.model_state import Tensor, _state_bytes_per_tensor, in_backward_step, optimizer_bytes

# hidden 320: every linear and the norms' sizes are multiples of 256 or under 4096 elements, but the
# 32001 x 320 embedding and lm_head are no multiple of 256 (or 128): torchao keeps them unquantized
CFG = {"model_type": "llama", "hidden_size": 320, "intermediate_size": 864, "num_hidden_layers": 2,
       "num_attention_heads": 5, "num_key_value_heads": 1, "vocab_size": 32001, "tie_word_embeddings": False,
       "torch_dtype": "bfloat16", "max_position_embeddings": 256}
BIG = [(4096, 4096), (32001, 128)]  # a 7B-class square projection; a vocab-sized matrix no multiple of 256


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_llama")
    (d / "config.json").write_text(json.dumps(CFG))
    return resolve(str(d))


def _model():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**{k: v for k, v in CFG.items() if k not in ("model_type", "torch_dtype")})
    return LlamaForCausalLM(cfg).to(torch.bfloat16)


def _state_bytes(opt) -> int:
    """Every tensor in opt.state, tensor subclasses (torchao's OptimState8bit/4bit/Fp8) by their inner tensors
    (__tensor_flatten__), each storage once (bitsandbytes shares its qmaps between parameters)."""
    import torch

    seen: set[tuple[int, int]] = set()
    total = 0

    def walk(t):
        nonlocal total
        if type(t) not in (torch.Tensor, torch.nn.Parameter) and hasattr(t, "__tensor_flatten__"):
            names, _ = t.__tensor_flatten__()
            for n in names:
                walk(getattr(t, n))
            return
        st = t.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        if key not in seen:
            seen.add(key)
            total += st.nbytes()

    for state in opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                walk(v)
    return total


def _build(name: str, params, model=None):
    """The optimizer the library builds for `name`: transformers' own Trainer.get_optimizer_cls_and_kwargs for its
    optim names, torchao's classes for axolotl's ao_adamw_* (axolotl instantiates them with their defaults)."""
    import tempfile

    pytest.importorskip("torch")
    if name.startswith("ao_adamw_"):
        ao = pytest.importorskip("torchao.optim")
        cls = {"ao_adamw_8bit": ao.AdamW8bit, "ao_adamw_4bit": ao.AdamW4bit, "ao_adamw_fp8": ao.AdamWFp8}[name]
        return cls(params, lr=1e-4)
    need = {"adamw_torch_8bit": "torchao", "adamw_torch_4bit": "torchao", "schedule_free_adamw": "schedulefree",
            "schedule_free_radam": "schedulefree", "schedule_free_sgd": "schedulefree", "stable_adamw": "optimi",
            "lomo": "lomo_optim"}.get(name, "bitsandbytes")
    pytest.importorskip(need)
    from transformers import Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, optim=name, learning_rate=1e-4, report_to=[])
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    if "model" in kwargs:  # LOMO takes the model itself
        return cls(kwargs.pop("model"), **kwargs)
    opt = cls(params, **kwargs)
    if callable(getattr(opt, "train", None)):  # schedule-free: the Trainer switches it to train mode first
        opt.train()
    return opt


def _step(opt, params) -> None:
    import torch

    torch.manual_seed(1)
    for p in params:
        p.grad = torch.randn_like(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bitsandbytes: paged optimizers fall back to plain buffers on CPU
        opt.step()


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """torchao steps each parameter through torch.compile(single_param_adam, fullgraph=True) (one compile per shape,
    minutes on CPU); the state it keeps is allocated before that (_AdamBase._new_buffer), so the same function run
    eagerly keeps the same tensors."""
    try:
        import torch
    except ImportError:
        return
    monkeypatch.setattr(torch, "compile", lambda fn=None, **kw: fn if fn is not None else (lambda f: f))


NAMES = ["adamw_torch_8bit", "adamw_torch_4bit", "ao_adamw_8bit", "ao_adamw_4bit", "ao_adamw_fp8",
         "ademamix", "ademamix_8bit", "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit",
         "schedule_free_adamw", "schedule_free_radam", "schedule_free_sgd", "stable_adamw"]


def _one_step(name: str, spec) -> tuple:
    """(the tiny model, the bytes the library's optimizer keeps after one real step, memlint's state term)."""
    model = _model()
    ids = __import__("torch").randint(0, CFG["vocab_size"], (1, 16))
    opt = _build(name, model.parameters(), model)
    model(input_ids=ids, labels=ids).loss.backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.step()
    # the class built from Trainer.get_optimizer_cls_and_kwargs, without create_optimizer's bitsandbytes override for
    # embeddings: what a script that builds the optimizer itself runs (trainer_optimizer=False)
    return model, _state_bytes(opt), optimizer_bytes(Setup(spec, method="full", dtype="bf16", optim=name,
                                                           trainer_optimizer=False), "real")[0]


@pytest.mark.parametrize("name", NAMES)
def test_the_state_term_matches_the_library_on_a_tiny_llama(name, spec):
    model, real, est = _one_step(name, spec)
    assert spec.params == sum(p.numel() for p in model.parameters())
    assert est == pytest.approx(real, rel=0.01), (name, est, real)


@pytest.mark.parametrize("name", ["adamw_torch_8bit", "adamw_torch_4bit", "ao_adamw_4bit", "ao_adamw_fp8",
                                  "ademamix_8bit", "rmsprop_bnb_8bit"])
@pytest.mark.parametrize("shape", BIG)
def test_big_shapes_take_the_quantized_path_or_the_fallback(name, shape):
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.zeros(shape, dtype=torch.bfloat16))
    opt = _build(name, [p])
    _step(opt, [p])
    real = _state_bytes(opt)
    est = _state_bytes_per_tensor(Tensor(*shape), Setup(resolve("HuggingFaceTB/SmolLM2-135M"), optim=name).optimizer, 2)
    assert est == pytest.approx(real, rel=0.01), (name, shape, est, real)
    n = shape[0] * shape[1]
    block = Setup(resolve("HuggingFaceTB/SmolLM2-135M"), optim=name).optimizer["blocksize"]
    if name.startswith(("adamw_torch", "ao_")) and n % block:
        assert real >= 2 * n * 2  # torchao: no multiple of the block size -> two bf16 moments
    else:
        assert real < 2 * n * 2  # quantized (bitsandbytes pads the last block)


def test_the_torchao_step_counts_the_largest_quantized_parameter(spec):
    from memlint.estimate.model_state import optimizer_step_temporaries

    # the 32001 x 320 embedding and lm_head are no multiple of 256: the largest quantized tensor is gate/up (864 x 320)
    s = Setup(spec, method="full", dtype="bf16", optim="adamw_torch_8bit")
    assert optimizer_step_temporaries(s, "real") == 864 * 320 * 8
    assert optimizer_step_temporaries(s.with_(optim="ao_adamw_fp8"), "real") == 0
    # 4-bit (torchao's own 128 block): 32001 x 320 is no multiple of 128 either
    assert optimizer_step_temporaries(s.with_(optim="ao_adamw_4bit"), "real") == 864 * 320 * 26
    assert any("not traced on a GPU" in n for n in estimate(s).assumptions)

def test_transformers_builds_torchao_with_a_256_block():
    pytest.importorskip("torchao")
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.zeros(1024, 1024))
    for name, bits in (("adamw_torch_4bit", 4), ("adamw_torch_8bit", 8)):
        opt = _build(name, [p])
        _step(opt, [p])
        m = opt.state[p]["exp_avg"]
        assert m.codes.numel() * (8 // bits) // m.scale.numel() == 256
        assert Setup(resolve("HuggingFaceTB/SmolLM2-135M"), optim=name).optimizer["blocksize"] == 256
    assert Setup(resolve("HuggingFaceTB/SmolLM2-135M"), optim="ao_adamw_4bit").optimizer["blocksize"] == 128


def test_stable_adamw_adds_a_kahan_buffer_only_on_16_bit_parameters(spec):
    bf16 = optimizer_bytes(Setup(spec, method="full", dtype="bf16", optim="stable_adamw"), "real")[0]
    fp32 = optimizer_bytes(Setup(spec, method="full", dtype="fp32", precision="fp32", optim="stable_adamw"), "real")[0]
    assert bf16 == 3 * spec.params * 2 and fp32 == 2 * spec.params * 4


def test_lomo_keeps_no_state_and_at_most_two_gradients(spec):
    """LOMO's Tensor hooks update the parameters whose gradient arrived and drop that gradient: measured with a
    post-accumulate-grad hook summing the live .grad bytes plus the arriving gradient, during fused_backward."""
    torch = pytest.importorskip("torch")
    model = _model()
    opt = _build("lomo", None, model)
    live = [0]
    arriving = {}

    def seen_arriving(p):
        def hook(g):
            arriving["bytes"] = g.numel() * g.element_size()
            return g
        return hook

    def after(_p):
        now = sum(q.grad.numel() * q.grad.element_size() for q in model.parameters() if q.grad is not None)
        live[0] = max(live[0], now + arriving.get("bytes", 0))

    for p in model.parameters():
        p.register_hook(seen_arriving(p))
        p.register_post_accumulate_grad_hook(after)
    ids = torch.randint(0, CFG["vocab_size"], (1, 16))
    opt.fused_backward(model(input_ids=ids, labels=ids).loss, 1e-4)
    assert not opt.state and all(p.grad is None for p in model.parameters())
    s = Setup(spec, method="full", dtype="bf16", optim="lomo")
    assert optimizer_bytes(s, "real")[0] == 0 and s.steps_in_backward
    g, tmp, _ = in_backward_step(s, "real")
    largest = max(p.numel() for p in model.parameters()) * 2
    assert largest < live[0] <= g == 2 * largest
    assert tmp == 2 * largest // 2 * 4  # the fp32 gradient and parameter of a bf16 parameter


def test_lomo_accumulates_nothing():
    m = resolve("HuggingFaceTB/SmolLM2-135M")
    with pytest.raises(MemlintError, match="nothing accumulates"):
        Setup(m, optim="lomo", grad_accum=4)
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_source
    from memlint.plan import TrainingPlan, Value

    src = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M")
args = TrainingArguments("o", per_device_train_batch_size=2, gradient_accumulation_steps=4, optim="lomo")
Trainer(model=model, args=args, train_dataset=ds).train()
'''
    plan = extract_source(src, "train.py")
    fields = {k: plan.fields[k] for k in plan.fields if plan.fields[k].known}
    fields["max_length"] = Value(256, "literal")
    planned = setup_from_plan(TrainingPlan("train.py", fields), {})
    assert planned.setup.optim == "lomo" and planned.setup.grad_accum == 1
    assert any("accumulate nothing" in n for n in planned.notes)


def test_adalomo_keeps_fp32_factored_moments(spec):
    s = Setup(spec, method="full", dtype="bf16", optim="adalomo")
    h, v, i = CFG["hidden_size"], CFG["vocab_size"], CFG["intermediate_size"]
    kv = h // CFG["num_attention_heads"] * CFG["num_key_value_heads"]
    per_layer = (h + h) * 2 + (kv + h) * 2 + (i + h) * 3 + 2 * h  # q o, k v, gate up down, two norms
    want = 4 * (2 * per_layer + (v + h) * 2 + h)  # + embed, lm_head, the final norm
    assert optimizer_bytes(s, "real")[0] == want


def test_textbook_and_estimate_run_for_every_new_name():
    m = resolve("HuggingFaceTB/SmolLM2-135M")
    for name in NAMES + ["lomo", "adalomo", "paged_ademamix_32bit", "paged_ademamix_8bit"]:
        s = Setup(m, optim=name)
        assert estimate(s).peak > 0 and estimate(s, "textbook").peak > 0
    # the textbook moments scale with the code width: 4-bit AdamW half of 8-bit, AdEMAMix 3 states
    n = m.params
    tb = {k: optimizer_bytes(Setup(m, optim=k), "textbook")[0] for k in ("adamw_torch_4bit", "adamw_torch_8bit", "ademamix")}
    assert tb["adamw_torch_8bit"] - tb["adamw_torch_4bit"] == n and tb["ademamix"] == n * (4 + 12)


SCRIPT = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M")
args = TrainingArguments("o", per_device_train_batch_size=2, optim="OPTIM")
Trainer(model=model, args=args, train_dataset=ds).train()
'''

LOOP = '''import torch
from MODULE import CLS
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M")
opt = CLS(model.parameters(), lr=1e-5)
for batch in dl:
    model(**batch).loss.backward()
    opt.step()
    opt.zero_grad()
'''


@pytest.mark.parametrize("optim", ["adamw_torch_4bit", "adamw_torch_8bit", "ademamix_8bit", "paged_ademamix_32bit",
                                   "rmsprop_bnb", "schedule_free_radam", "stable_adamw", "lomo"])
def test_training_arguments_optim_is_read(optim):
    from memlint.extract import extract_source

    assert extract_source(SCRIPT.replace("OPTIM", optim), "train.py").fields["optimizer"].value == optim


@pytest.mark.parametrize("module, cls, optim", [
    ("torchao.optim", "AdamW8bit", "ao_adamw_8bit"), ("torchao.prototype.low_bit_optim", "AdamW4bit", "ao_adamw_4bit"),
    ("torchao.optim", "AdamWFp8", "ao_adamw_fp8"), ("bitsandbytes.optim", "AdEMAMix8bit", "ademamix_8bit"),
    ("bitsandbytes.optim", "AdamW", "adamw_bnb_32bit"), ("bitsandbytes.optim", "RMSprop8bit", "rmsprop_bnb_8bit"),
    ("schedulefree", "AdamWScheduleFree", "schedule_free_adamw"), ("optimi", "StableAdamW", "stable_adamw"),
])
def test_a_custom_loop_optimizer_class_is_read(module, cls, optim):
    from memlint.extract import extract_source

    src = LOOP.replace("MODULE", module).replace("CLS", cls)
    assert extract_source(src, "train.py").fields["optimizer"].value == optim


TORCHTUNE = '''output_dir: /tmp/o
model:
  _component_: torchtune.models.llama3_2.llama3_2_1b
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/tok.model
  max_seq_len: 512
optimizer:
  _component_: COMPONENT
  lr: 2e-5
batch_size: 1
gradient_accumulation_steps: 1
'''


@pytest.mark.parametrize("component, optim", [
    ("torchao.optim.AdamW8bit", "ao_adamw_8bit"), ("torchao.optim.AdamW4bit", "ao_adamw_4bit"),
    ("torchao.prototype.low_bit_optim.AdamWFp8", "ao_adamw_fp8"), ("bitsandbytes.optim.PagedAdEMAMix8bit", "paged_ademamix_8bit"),
    ("bitsandbytes.optim.RMSprop", "rmsprop_bnb"),
])
def test_torchtune_component_is_read(tmp_path, component, optim):
    from memlint.extract import extract_file

    f = tmp_path / "cfg.yaml"
    f.write_text(TORCHTUNE.replace("COMPONENT", component))
    assert extract_file(str(f)).fields["optimizer"].value == optim


@pytest.mark.parametrize("text, optim", [
    ("base_model: HuggingFaceTB/SmolLM2-135M\noptimizer: ao_adamw_4bit\nsequence_len: 512\nmicro_batch_size: 1\n"
     "datasets:\n  - path: x\n    type: alpaca\n", "ao_adamw_4bit"),
    ("do_train: true\nmodel_name_or_path: HuggingFaceTB/SmolLM2-135M\nstage: sft\nfinetuning_type: full\n"
     "optim: adamw_torch_8bit\ncutoff_len: 512\nper_device_train_batch_size: 1\ndataset: alpaca_en_demo\n", "adamw_torch_8bit"),
])
def test_axolotl_and_llamafactory_optim_is_read(tmp_path, text, optim):
    from memlint.extract import extract_file

    f = tmp_path / ("axolotl.yml" if "base_model" in text else "llamafactory.yaml")
    f.write_text(text)
    assert extract_file(str(f)).fields["optimizer"].value == optim


def test_the_cli_accepts_the_new_names(capsys):
    from memlint.cli import main

    for name in ("adamw_torch_4bit", "ao_adamw_fp8", "ademamix_8bit", "schedule_free_sgd", "lomo"):
        assert main(["estimate", "--model", "HuggingFaceTB/SmolLM2-135M", "--optim", name, "--seq", "256"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the table wraps its notes at the terminal's width
    assert "block-quantized 4-bit" in out and "no optimizer state" in out


def _compiled_step_peak(name: str, compiled: bool = True) -> tuple[int, int]:
    """(peak bytes allocated on CPU during step 2, elements) of torchao's optimizer `name` on one 2048 x 2048 bf16
    parameter: torch.profiler's allocation records (profile_memory) in time order, from the step's start."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import torchao.optim as ao

    p = torch.nn.Parameter(torch.randn(2048, 2048, dtype=torch.bfloat16))
    opt = getattr(ao, name)([p])
    p.grad = torch.randn_like(p)
    opt.step()  # step 1: the state, and the compile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        opt.step()
    allocs = []

    def walk(n):
        t = n.typed
        if isinstance(t, tuple) and len(t) > 1 and type(t[1]).__name__.endswith("Allocation"):
            allocs.append((n.start_time_ns, t[1].alloc_size, t[1].total_allocated))
        for c in n.children:
            walk(c)

    for r in prof.profiler.kineto_results.experimental_event_tree():
        walk(r)
    allocs.sort()
    base = allocs[0][2] - allocs[0][1] if allocs else 0
    return max((a[2] for a in allocs), default=base) - base, p.numel()


if __name__ == "__main__":  # the figures in docs/accounting.md: python tests/test_lowbit_optimizers.py [--step]
    import sys
    import tempfile
    from pathlib import Path

    import torch

    if "--step" in sys.argv:  # torchao's compiled step (minutes: one compile per optimizer)
        for name in ("AdamW8bit", "AdamW4bit", "AdamWFp8"):
            peak, n = _compiled_step_peak(name)
            print(f"  {name:10s} compiled step on CPU: peak {peak:,} B over a {n:,}-element bf16 parameter = "
                  f"{peak / n:.2f} B per element")
        sys.exit(0)

    torch.compile = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)  # as the _eager fixture
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(CFG))
        m = resolve(d)
        print(f"tiny Llama ({m.params:,} bf16 parameters): optimizer state after one step, library vs memlint")
        for name in NAMES:
            _, real, est = _one_step(name, m)
            print(f"  {name:22s} {real:>12,} B  memlint {est:>12,} B  {100 * (est - real) / real:+.4f} %")
    for shape in BIG:
        for name in ("adamw_torch_8bit", "adamw_torch_4bit", "ao_adamw_4bit", "ao_adamw_fp8", "ademamix_8bit",
                     "rmsprop_bnb_8bit"):
            p = torch.nn.Parameter(torch.zeros(shape, dtype=torch.bfloat16))
            opt = _build(name, [p])
            _step(opt, [p])
            real = _state_bytes(opt)
            est = _state_bytes_per_tensor(Tensor(*shape), Setup(resolve("HuggingFaceTB/SmolLM2-135M"), optim=name).optimizer, 2)
            print(f"  {str(shape):14s} {name:18s} {real:>12,} B  memlint {est:>12,} B  {100 * (est - real) / real:+.4f} %")
