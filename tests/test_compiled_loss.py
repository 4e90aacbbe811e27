"""The cross-entropy under torch.compile (plan field compiled_loss, `estimate --compiled-loss`): torchtune's
`compile: true` (training.compile_loss: CEWithChunkedOutputLoss's per-chunk upcast + cross-entropy), torchtitan's
[compile] components with "loss", TrainingArguments(torch_compile=True) (the forward with its loss). Inductor fuses
the fp32 upcast and the log-softmax: only the logsumexp is saved beside the half logits."""

from __future__ import annotations

import pytest

from memlint.catalog import resolve
from memlint.estimate import Setup, estimate
from memlint.extract import extract_source


def test_inductor_saves_no_fp32_log_softmax():
    """The fact the term rests on, measured: what autograd keeps for F.cross_entropy(x.float()) on half logits,
    eager and compiled by inductor (the CPU backend; skipped where it cannot compile)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    def ce(logits, labels):
        return F.cross_entropy(logits.float(), labels, reduction="sum")

    T, V = 256, 4096
    x = torch.randn(T, V, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, V, (T,))

    def saved(fn) -> int:
        seen: dict[int, int] = {}

        def pack(t):
            if t.data_ptr() != x.data_ptr():  # the logits themselves are alive anyway
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(x, y).backward()
        return sum(seen.values())

    try:
        compiled = torch.compile(ce, backend="inductor")
        compiled(x, y).backward()
    except Exception as exc:  # no C++ toolchain for inductor's CPU kernels
        pytest.skip(f"inductor cannot compile here: {type(exc).__name__}")
    assert saved(ce) >= 4 * T * V  # eager: the fp32 log-softmax
    assert saved(compiled) <= 16 * T + 1024  # compiled: the logsumexp, the int64 labels (and scalars)


def test_the_logits_term():
    base = Setup(resolve("meta-llama/Llama-3.2-3B"), method="lora", lora_r=16, precision="pure-bf16", dtype="bf16",
                 recompute=True, batch=2, seq=4096)
    n = 2 * 4096 * base.model.vocab
    eager, comp = estimate(base, "real"), estimate(base.with_(compiled_loss=True), "real")
    assert eager.components["logits"].bytes - comp.components["logits"].bytes == (2 + 4 + 4) * n - 2 * n - 4 * 2 * 4096
    chunked = base.with_(chunked_loss=8)
    e8, c8 = estimate(chunked, "real"), estimate(chunked.with_(compiled_loss=True), "real")
    assert c8.components["logits"].bytes == 2 * n + 4 * 2 * 4096  # the half chunks and their logsumexp
    assert c8.allocated_peak < e8.allocated_peak


def test_the_readers(tmp_path):
    from memlint.extract.configs import read_config

    src = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
args = TrainingArguments("out", per_device_train_batch_size=2, torch_compile=COMPILE, bf16=True)
Trainer(model=model, args=args, train_dataset=ds).train()
'''
    assert extract_source(src.replace("COMPILE", "True"), "t.py").value("compiled_loss") is True
    assert extract_source(src.replace("COMPILE", "False"), "t.py").value("compiled_loss") is False
    tune = tmp_path / "tune.yaml"
    tune.write_text("model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_3b\nbatch_size: 2\ncompile: True\n"
                    "loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\ndtype: bf16\n")
    plan = read_config(tune)
    assert plan.value("compiled_loss") is True and plan.fields["compiled_loss"].span.line == 4
    titan = tmp_path / "job.toml"
    titan.write_text('[model]\nname = "llama3"\nflavor = "8B"\n\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n\n'
                     '[compile]\nenable = true\ncomponents = ["model"]\n')
    assert read_config(titan).value("compiled_loss") is False  # the loss is not among the components
    titan.write_text(titan.read_text().replace('components = ["model"]\n', ""))
    assert read_config(titan).value("compiled_loss") is True  # v0.2.x: ["model", "loss"] by default
