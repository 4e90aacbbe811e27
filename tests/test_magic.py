"""%memcheck in a live IPython shell: a tiny real Llama with LoRA, a Trainer over a dataset
with one long sample; the plan read off the objects, the CPU confirmation, the user's state."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("IPython")

from IPython.core.error import UsageError  # noqa: E402

from memlint.estimate import estimate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=512, tie_word_embeddings=False)
LENGTHS = (20, 33, 17, 199, 40, 25, 61)  # one long sample, at index 3


class PadToLongest:
    """A tokenizer-free collator: pads token ids to the batch's longest, rounded up to 8."""

    pad_to_multiple_of = 8

    def __call__(self, rows):
        n = max(len(r["input_ids"]) for r in rows)
        n = -(-n // 8) * 8
        ids = torch.tensor([r["input_ids"] + [0] * (n - len(r["input_ids"])) for r in rows])
        return {"input_ids": ids, "labels": ids.clone()}


def _trainer(tmp: Path, lora: bool = True, **args):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**LLAMA))
    if lora:
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
    data = [{"input_ids": [(7 * i + j) % 1000 for j in range(n)]} for i, n in enumerate(LENGTHS)]
    kw = dict(output_dir=str(tmp), per_device_train_batch_size=2, report_to=[], use_cpu=True,
              optim="adamw_torch", save_strategy="no")
    kw.update(args)
    return Trainer(model=model, args=TrainingArguments(**kw), train_dataset=data, data_collator=PadToLongest())


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    from IPython.core.interactiveshell import InteractiveShell

    warnings.simplefilter("ignore", FutureWarning)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "memlint")
    trainer = _trainer(tmp_path_factory.mktemp("out"), gradient_checkpointing=True)
    ip.user_ns.update(trainer=trainer, model=trainer.model)
    return ip


def _magic(ip):
    return ip.magics_manager.registry["MemcheckMagics"]


def test_importing_memlint_loads_neither_ipython_nor_torch():
    code = ("import sys, memlint; assert callable(memlint.load_ipython_extension); "
            "bad = [m for m in ('IPython', 'torch', 'transformers') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_memcheck_trainer_finds_the_longest_sample_and_its_worst_micro_batch(shell):
    r = shell.run_line_magic("memcheck", "trainer --no-confirm -q")
    f = r.facts
    assert (f.lengths.longest, f.lengths.longest_index, f.lengths.count) == (199, 3, len(LENGTHS))
    assert (f.worst_batch, f.worst_seq) == (2, 200)  # 199 rounded up to the collator's multiple of 8
    assert f.padding == "longest" and f.pad_to_multiple_of == 8
    assert f.lora["r"] == 8 and f.lora["targets"] == ("self_attn.q_proj", "self_attn.v_proj")
    assert f.recompute and f.optim == "adamw_torch" and f.precision == "fp32"
    model = shell.user_ns["model"]
    # two layers of r=8 adapters on q_proj (64 -> 64) and v_proj (64 -> 32)
    assert f.trainable == sum(p.numel() for p in model.parameters() if p.requires_grad) == 2 * 8 * (128 + 96)
    assert f.params == sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    assert r.setup.seq == 200 and r.setup.batch == 2 and r.setup.method == "lora" and r.setup.recompute
    assert r.confirmation is None


def test_batch_and_seq_override_what_the_trainer_says(shell):
    r = shell.run_line_magic("memcheck", "trainer --batch 3 --seq 64 --no-confirm -q")
    assert (r.setup.batch, r.setup.seq) == (3, 64) and r.facts.lengths is None


@pytest.mark.parametrize("device", ["trace", "cpu"])
def test_cpu_confirmation_agrees_with_the_estimate(shell, device):
    r = shell.run_line_magic("memcheck", f"trainer --device {device} -q")
    m, e = r.measured, r.estimate
    assert r.confirmation.mode == device
    assert e.allocated_peak == pytest.approx(m.measured_peak, rel=0.03)  # the tolerance of test_estimate_vs_measure
    assert e.peak_phase == m.phase
    for name in ("weights", "gradients"):
        assert e.bytes(name) == pytest.approx(m.components[name], rel=0.001)
    assert m.method == {"trace": "fake-tensor-trace", "cpu": "cpu-tensor-tracker"}[device]


def _state(model, optimizer):
    import numpy as np

    return {
        "params": {n: p.detach().clone() for n, p in model.named_parameters()},
        "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "optimizer": {k: {s: v.clone() for s, v in st.items()} for k, st in optimizer.state.items()},
        "torch_rng": torch.get_rng_state(),
        "py_rng": random.getstate(),
        "np_rng": np.random.get_state()[1].copy(),
        "modes": {n: m.training for n, m in model.named_modules()},
        "checkpointing": {n: m.gradient_checkpointing for n, m in model.named_modules()
                          if hasattr(m, "gradient_checkpointing")},
        "hooks": sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()),
    }


def _assert_same(a, b):
    for key in ("params", "grads", "optimizer"):
        assert a[key].keys() == b[key].keys(), key
    for n in a["params"]:
        assert torch.equal(a["params"][n], b["params"][n]), n
    for n in a["grads"]:
        assert torch.equal(a["grads"][n], b["grads"][n]), n
    for k in a["optimizer"]:
        for s in a["optimizer"][k]:
            assert torch.equal(a["optimizer"][k][s], b["optimizer"][k][s])
    assert torch.equal(a["torch_rng"], b["torch_rng"])
    assert (a["np_rng"] == b["np_rng"]).all()
    for key in ("requires_grad", "py_rng", "modes", "checkpointing", "hooks"):
        assert a[key] == b[key], key


@pytest.mark.parametrize("device", ["trace", "cpu"])
def test_confirmation_leaves_parameters_optimizer_and_rng_bit_identical(tmp_path, device):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "memlint")
    # a Trainer mid-training: optimizer state, gradients present, eval mode, no checkpointing
    trainer = _trainer(tmp_path)
    model = trainer.model
    trainer.create_optimizer()
    batch = PadToLongest()([trainer.train_dataset[0], trainer.train_dataset[3]])
    model(**batch).loss.backward()
    trainer.optimizer.step()
    model(**batch).loss.backward()  # leave gradients in place
    model.eval()
    random.seed(5)
    ip.user_ns["trainer"] = trainer
    before = _state(model, trainer.optimizer)
    r = ip.run_line_magic("memcheck", f"trainer --device {device} -q")
    assert r.measured is not None and r.oom is None
    _assert_same(before, _state(model, trainer.optimizer))
    if device == "cpu":  # ran on the model itself: every piece of state was put back
        assert "trainable parameters" in r.confirmation.restored and "in place" in r.confirmation.how
    else:
        assert "meta-device copy" in r.confirmation.how


def test_an_oom_during_confirmation_is_the_answer_and_frees_the_gpu(shell, monkeypatch):
    from memlint.notebook import confirm as confirming, live

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 5 << 30)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))

    def fake_measure(setup, device, steps, model):
        assert device == "cuda" and model is lp.model  # in place: the model is on the GPU
        model.train()
        model.gradient_checkpointing_enable()
        with torch.no_grad():
            next(p for p in model.parameters() if p.requires_grad).add_(1.0)
        torch.manual_seed(1234)
        loss = OomLoss()
        loss.backward()  # the phase is read off this line, as off measure's loop

    class OomLoss:
        def backward(self):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has ...")

    trainer = shell.user_ns["trainer"]
    lp = live.from_trainer(trainer)
    lp = dataclasses.replace(lp, facts=dataclasses.replace(lp.facts, device="cuda"))
    model = lp.model
    model.eval()
    before = _state(model, torch.optim.SGD([torch.zeros(1)]))
    c = confirming.confirm(lp, device="cuda", measure_fn=fake_measure)
    assert c.measurement is None
    assert c.oom == "does not fit: OOM in the backward phase after 5.00 GiB allocated (tried to allocate 2.00 GiB more)"
    assert calls == ["empty_cache"]
    after = _state(model, torch.optim.SGD([torch.zeros(1)]))
    _assert_same(before, after)


def test_oom_phase_is_read_off_the_measured_loop():
    from memlint.notebook.confirm import oom_phase

    def run(line_kind):
        try:
            if line_kind == "optimizer":
                optimizer.step()  # noqa: F821 - raises NameError inside the step line
            else:
                model(input_ids=None)  # noqa: F821
        except NameError as exc:
            return oom_phase(exc.__traceback__)

    assert run("optimizer") == "optimizer"
    assert run("forward") == "forward"


def test_html_and_plain_repr_show_the_table(shell):
    r = shell.run_line_magic("memcheck", "trainer --gpu 24 --device trace -q")
    page = r._repr_html_()
    assert "<table>" in page and "longest sample" in page and "#3: 199 tokens" in page
    assert "fake-tensor trace" in page and "estimate vs measured" in page
    text = repr(r)
    assert "allocated peak" in text and "fits on 24 GiB" in text
    assert r.fits is True and r.to_dict()["live"]["longest_sample"] == 199


def test_html_embeds_the_four_bucket_chart_with_the_measured_peak(shell):
    pytest.importorskip("matplotlib")
    r = shell.run_line_magic("memcheck", "trainer --gpu 24 --device trace -q")
    [bar] = r.chart_bars()
    assert bar.measured == r.measured.measured_peak + r.estimate.bytes("overhead")
    assert dict(bar.components) == {k: r.estimate.bytes(k) for k in bar.components}
    assert bar.peak == r.estimate.peak
    page = r._repr_html_()
    assert '<div class="memlint-chart"><?xml' in page and "<svg" in page


def test_display_is_shown_once_and_quiet_shows_nothing(shell, capsys):
    shell.run_cell("r = %memcheck trainer --no-confirm")
    out = capsys.readouterr().out
    assert out.count("read from the live objects") == 1
    shell.run_cell("%memcheck trainer --no-confirm")  # the cell's value: not shown a second time
    assert capsys.readouterr().out.count("read from the live objects") == 1
    shell.run_cell("q = %memcheck -q trainer --no-confirm")
    assert capsys.readouterr().out == ""
    assert shell.user_ns["q"].estimate is not None


def test_a_bare_model_needs_seq_and_takes_batch(shell):
    with pytest.raises(UsageError, match="--seq"):
        shell.run_line_magic("memcheck", "model")
    r = shell.run_line_magic("memcheck", "model --batch 4 --seq 128 --no-confirm -q")
    assert (r.setup.batch, r.setup.seq, r.kind) == (4, 128, "model")
    assert r.setup.optim == _default_optim()


def _default_optim():
    from memlint.notebook.live import _default_optim

    return _default_optim()


@pytest.mark.parametrize("line, message", [
    ("", "needs a target"),
    ("no_such_name", "NameError"),
    ("trainer --steps 9", "--steps"),
    ("trainer --bogus", "unrecognized"),
    ("trainer --run", "--run is for"),
    ("random", "expected a Trainer"),
    ("missing_file.py", "no such file"),
    ("trainer --gpu NoSuchGPU --no-confirm", "unknown GPU"),
])
def test_bad_usage_raises_usage_error(shell, line, message):
    shell.user_ns["random"] = random
    with pytest.raises(UsageError, match=message) as info:
        shell.run_line_magic("memcheck", line)
    if message not in ("unrecognized", "unknown GPU"):
        assert "usage: %memcheck" in str(info.value)  # the usage line comes with the error


def test_gpu_comes_from_the_flag_the_trait_then_tool_memlint(shell, tmp_path, monkeypatch):
    pytest.importorskip("memlint.check")
    magics = _magic(shell)
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\ngpu = "RTX4090"\n')
    monkeypatch.chdir(tmp_path)
    assert shell.run_line_magic("memcheck", "trainer --no-confirm -q").gpu[0] == "RTX4090"
    monkeypatch.setattr(magics, "gpu", "A100-80GB")
    assert shell.run_line_magic("memcheck", "trainer --no-confirm -q").gpu[0] == "A100-80GB"
    assert shell.run_line_magic("memcheck", "trainer --gpu 24 --no-confirm -q").gpu[0] == "24 GiB"


def test_config_trait_is_read_at_load(tmp_path):
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from memlint.notebook.magic import MemcheckMagics

    cfg = Config()
    cfg.MemcheckMagics.gpu = "L4"
    cfg.MemcheckMagics.confirm = False
    ip = InteractiveShell.instance()
    m = MemcheckMagics(shell=ip, config=cfg)
    assert (m.gpu, m.confirm) == ("L4", False)


def test_file_target_is_checked_statically_like_the_cli(shell):
    pytest.importorskip("memlint.check")
    path = ROOT / "fixtures" / "scripts" / "hf_trainer_full.py"
    r = shell.run_line_magic("memcheck", f"{path} --gpu RTX4090 -q")
    assert r.kind == "file" and len(r.files) == 1
    assert {"MEM101", "MEM201"} <= {f.code for f in r.files[0].findings}
    assert r.files[0].context.estimate is not None and "MEM101" in repr(r)


def test_a_variable_naming_a_script_is_checked_statically(shell):
    pytest.importorskip("memlint.check")
    shell.user_ns["script"] = str(ROOT / "fixtures" / "scripts" / "hf_trainer_full.py")
    r = shell.run_line_magic("memcheck", "script --gpu RTX4090 -q")
    assert r.kind == "file" and "MEM101" in {f.code for f in r.files[0].findings}


def test_flash_attention_is_traced_as_sdpa_on_the_copy_only(tmp_path):
    from memlint.notebook import confirm as confirming, live

    trainer = _trainer(tmp_path)
    base = trainer.model.get_base_model()
    base.config._attn_implementation = "flash_attention_2"
    lp = live.from_trainer(trainer)
    assert lp.setup.attn == "flash_attention_2"
    c = confirming.confirm(lp, device="trace")
    assert any("traced as sdpa" in n for n in c.notes)
    assert base.config._attn_implementation == "flash_attention_2"  # the user's model keeps its choice
    assert estimate(lp.setup).allocated_peak == pytest.approx(c.measurement.measured_peak, rel=0.03)


def test_cell_magic_reads_the_cell_without_running_it_unless_run(shell):
    pytest.importorskip("memlint.check")
    cell = (ROOT / "fixtures" / "scripts" / "hf_trainer_full.py").read_text()
    r = shell.run_cell_magic("memcheck", "--gpu RTX4090 -q", "CELL_RAN = True\n" + cell)
    assert "CELL_RAN" not in shell.user_ns
    assert r.kind == "cell" and "MEM101" in {f.code for f in r.files[0].findings}
    shell.run_cell_magic("memcheck", "--run -q", "import torch\nCELL_RAN = torch.__name__\n")
    assert shell.user_ns["CELL_RAN"] == "torch"


def test_quantization_is_read_off_bitsandbytes_layers():
    bnb = pytest.importorskip("bitsandbytes")
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from memlint.notebook.confirm import confirm
    from memlint.notebook.live import from_model, read_model

    model = LlamaForCausalLM(LlamaConfig(**LLAMA))
    for layer in model.model.layers:
        for name in ("gate_proj", "up_proj", "down_proj"):
            lin = getattr(layer.mlp, name)
            setattr(layer.mlp, name, bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=False,
                                                        compute_dtype=torch.bfloat16, quant_type="nf4",
                                                        compress_statistics=True))
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    info = read_model(model)
    assert (info["quant"], info["double_quant"], info["compute_dtype"]) == ("nf4", True, "bf16")
    assert info["lora"]["r"] == 4 and info["lora"]["targets"] == ("self_attn.q_proj",)
    # fp32 embeddings beside a bf16-compute 4-bit base: prepare_model_for_kbit_training ran
    lp = from_model(model, batch=2, seq=32)
    s = lp.setup
    assert (s.method, s.quant, s.double_quant, s.kbit_prep, s.dtype) == ("qlora", "nf4", True, True, "bf16")
    c = confirm(lp, device="trace")  # a 4-bit base is rebuilt from the config for the trace
    assert "fresh model built from your model's config" in c.how
    assert estimate(s).allocated_peak == pytest.approx(c.measurement.measured_peak, rel=0.03)


def test_the_collators_padding_decides_the_worst_micro_batch():
    from transformers import DataCollatorForLanguageModeling, DataCollatorWithPadding, default_data_collator

    from memlint.notebook.live import collator_padding, worst_micro_batch

    lengths = [5, 300, 17, 120, 90]
    cases = [
        (DataCollatorWithPadding(tokenizer=None, padding="max_length", max_length=512), (2, 512)),
        (DataCollatorWithPadding(tokenizer=None, pad_to_multiple_of=64), (2, 320)),
        (DataCollatorForLanguageModeling(tokenizer=None, mlm=False), (2, 300)),
        (default_data_collator, (2, 300)),
        (type("PaddingFree", (), {"padding_free": True})(), (1, 420)),  # TRL: the 2 longest in one row
    ]
    for collator, (rows, cols) in cases:
        assert worst_micro_batch(lengths, 2, *collator_padding(collator))[:2] == (rows, cols), collator
    # fewer samples than the batch: the worst micro-batch holds them all
    assert worst_micro_batch([7, 9], 8, "longest", None, None)[:2] == (2, 9)


def test_lengths_come_from_a_columnar_dataset_or_a_list_of_rows():
    from memlint.errors import MemlintError
    from memlint.notebook.live import Lengths, sample_lengths

    class Columns:  # the part of datasets.Dataset that is read
        column_names = ["input_ids", "attention_mask"]

        def __getitem__(self, key):
            assert key == "input_ids"
            return [[1] * n for n in (3, 40, 7)]

    assert sample_lengths(Columns()) == [3, 40, 7]
    assert Lengths.of([3, 40, 7]) == Lengths(3, 40, 1, 7, 40)
    with pytest.raises(MemlintError, match="tokenize it first"):
        sample_lengths([{"text": "hello"}])
    with pytest.raises(MemlintError, match="streaming"):
        sample_lengths(iter([{"input_ids": [1]}]))


def test_the_notebook_runs_headless_and_renders_the_table():
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    path = ROOT / "examples" / "memcheck.ipynb"
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    htmls = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
             if "data" in o and "text/html" in o["data"]]
    page = "\n".join(htmls)
    assert "estimate vs measured" in page and "longest sample" in page
    assert "fake-tensor trace" in page or "cuda-allocator" in page
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors


def test_a_cuda_measurement_decides_the_verdict_by_what_the_allocator_reserved(shell):
    from memlint.notebook.confirm import Confirmation
    from memlint.notebook.result import MemcheckResult
    from memlint.measure.core import Measurement, StepMeasurement

    r = shell.run_line_magic("memcheck", "trainer --gpu 24 --no-confirm -q")
    peak = r.estimate.allocated_peak
    m = Measurement(components={"weights": 1, "gradients": 1, "optimizer": 1, "activations": 1, "logits": 1,
                                "overhead": 3 << 30},
                    steps=[StepMeasurement(2, peak, "backward", {"backward": peak})], device="H100",
                    method="cuda-allocator")
    conf = Confirmation(m, None, "cuda", "CUDA, on your model in place", r.setup)
    fits = MemcheckResult("trainer", "trainer", r.setup, r.estimate, r.facts, conf, gpu=r.gpu)
    assert fits.fits is True and "measured 3.01 GiB reserved + context" in repr(fits)
    tight = dataclasses.replace(fits, gpu=("4 GiB", 4 << 30, 1 << 30))  # 3 GiB reserved + 1 GiB context > 4 GiB
    assert tight.fits is False and "does not fit on 4 GiB" in repr(tight)
    oom = Confirmation(None, "does not fit: OOM in the forward phase after 3.90 GiB allocated", "cuda", "", r.setup)
    assert dataclasses.replace(fits, confirmation=oom).fits is False


def test_a_cpu_step_past_the_hosts_memory_is_not_run(shell, monkeypatch):
    """%memcheck --device cpu used to grow past the host's RAM and kill the kernel: the estimate says first."""
    from memlint.notebook import confirm

    monkeypatch.setattr(confirm, "host_available", lambda: 1 << 20)  # 1 MiB free
    r = shell.run_line_magic("memcheck", "trainer --device cpu -q")
    assert r.confirmation is None and r.estimate is not None
    assert any(n.startswith("not run on CPU: the step needs about") and "--device trace" in n for n in r.notes)
    assert confirm.host_shortfall(r.estimate, available=1 << 40) is None
