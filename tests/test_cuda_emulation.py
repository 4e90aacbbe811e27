"""The trace runs what a CUDA step runs (measure/cuda_emulation.py): CUDA autocast's op lists read from torch itself,
CUDA's SDPA kernel choice, the fused dropout; and the front doors' handling of a trace that disagrees with the
estimate. No GPU, no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import needs_torch

ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------------------------- autocast's op lists

@needs_torch
def test_the_packaged_lists_are_the_installed_torchs_and_torch_registers_each():
    """data/cuda_autocast.json equals the installed torch's ATen/autocast_mode.h (when the versions match), and every
    op in it has an AutocastCUDA kernel in the dispatcher (the CPU build registers them too)."""
    import torch

    from memlint.measure.cuda_emulation import autocast_policies, parse_autocast_header

    doc = json.loads((ROOT / "src/memlint/data/cuda_autocast.json").read_text())
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if header.is_file() and torch.__version__.split("+")[0] == doc["torch"]:
        assert parse_autocast_header(header.read_text()) == doc["policies"]
    policies, source = autocast_policies()
    registered = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    assert set(policies) <= registered
    # the rest of CUDA's registrations are not policies: a banned op and cuDNN's own convolutions
    assert registered - set(policies) <= {"aten::binary_cross_entropy", "aten::cudnn_convolution",
                                          "aten::cudnn_convolution_transpose"}
    assert policies["aten::layer_norm"] == "fp32" and policies["aten::softmax.int"] == "fp32_set_opt_dtype"
    assert policies["aten::linear"] == "lower_precision_fp"


@needs_torch
def test_cpu_autocast_runs_cudas_policies():
    """Inside the emulation, torch.autocast('cpu') casts as CUDA's autocast does: layer_norm, pow and softmax in fp32,
    matmuls in half; cross_entropy (on no CUDA list) decomposes with autocast on: a half log-softmax (the loss passes
    its input's dtype) and nll_loss on an fp32 copy. Outside it, CPU autocast is itself again."""
    import torch
    import torch.nn.functional as F

    from memlint.measure.cuda_emulation import autocast, cuda_kernels

    saved = []
    with cuda_kernels(fake=False):
        x = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(64, 64, requires_grad=True)
        with autocast(torch.bfloat16):
            assert F.layer_norm(x, (64,)).dtype == torch.float32
            assert torch.pow(x, 3.0).dtype == torch.float32
            assert torch.softmax(x, -1).dtype == torch.float32
            assert F.linear(x.float(), w).dtype == torch.bfloat16
            with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.dtype) or t, lambda t: t):
                loss = F.cross_entropy(x, torch.randint(0, 64, (8,)))
        assert loss.dtype == torch.float32 and saved[:2] == [torch.bfloat16, torch.float32]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.layer_norm(x, (64,)).dtype == torch.bfloat16  # CPU's own lists again


@needs_torch
def test_dropout_keeps_a_bool_mask():
    import torch
    import torch.nn.functional as F

    from memlint.measure.cuda_emulation import cuda_kernels

    with cuda_kernels(fake=False):
        y = F.dropout(torch.randn(4, 4, requires_grad=True), 0.1, True)
        assert y.grad_fn.name() == "NativeDropoutBackward0" and y.grad_fn._saved_result1.dtype == torch.bool
        assert F.dropout(torch.ones(3), 0.0, True).equal(torch.ones(3))


# ----------------------------------------------------------------------------------------------- SDPA

def test_sdpa_kernel_choice_is_cudas():
    from memlint.estimate.decoder import sdpa_kernel

    assert sdpa_kernel(2, False, 128, 128, gqa=True) == "flash"      # half, no mask: flash (GQA native)
    assert sdpa_kernel(2, True, 128, 128, gqa=False) == "efficient"  # a mask: the memory-efficient kernel
    assert sdpa_kernel(4, False, 64, 64, gqa=False) == "efficient"   # fp32: no flash
    assert sdpa_kernel(4, False, 64, 64, gqa=True) == "math"         # fp32 GQA at torch 2.13: the math path
    assert sdpa_kernel(2, False, 288, 288, gqa=False) == "efficient"  # head dim past flash's 256
    assert sdpa_kernel(4, False, 66, 66, gqa=False) == "math"        # not a multiple of the alignment


@needs_torch
@pytest.mark.parametrize("fake", [True, False])
def test_sdpa_with_dropout_keeps_no_scores(fake):
    """Dropout inside SDPA: CUDA's fused kernels keep q, k, v, the output and a logsumexp; the CPU's own dispatch would
    run the math path and keep the s x s scores."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memlint.measure.cuda_emulation import autocast, cuda_kernels

    big = []
    mode = FakeTensorMode() if fake else None
    with cuda_kernels(fake=fake):
        if mode:
            mode.__enter__()
        q = torch.randn(2, 4, 256, 32, requires_grad=True)
        with autocast(torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(
                lambda t: big.append(t.dim() >= 2 and t.shape[-1] == t.shape[-2] == 256) or t, lambda t: t):
            F.scaled_dot_product_attention(q, q, q, dropout_p=0.1, is_causal=True)
        if mode:
            mode.__exit__(None, None, None)
    assert big and not any(big)


# ----------------------------------------------------------------------------------------------- the front doors

class _Est:
    def __init__(self, peak: int, overhead: int):
        from types import SimpleNamespace

        self.peak, self.allocated_peak = peak, peak - overhead
        self.setup = SimpleNamespace(compute_dtype="bf16", attn="sdpa")


def test_a_disagreeing_trace_is_said_and_judged_by_the_larger():
    from memlint.gpu import find_gpu, fit_reconciled, reconcile

    gpu = find_gpu("24")
    est = _Est(12 << 30, 1 << 30)               # 11 GiB allocated + 1 GiB overhead
    agree = reconcile(est, int(11.2 * (1 << 30)))
    assert not agree.disagrees and agree.source == "estimate" and agree.words() == ""
    r = reconcile(est, 25 << 30)                # the trace: far larger
    assert r.disagrees and r.source == "trace" and r.peak == 26 << 30
    assert "disagree by -56.0%" in r.words() and "the trace's" in r.words()
    assert fit_reconciled(est, 25 << 30, gpu).status == "over"
    assert fit_reconciled(est, None, gpu).status == "fits"
    low = reconcile(est, 8 << 30)               # the trace smaller: the estimate's stays
    assert low.disagrees and low.source == "estimate" and low.peak == est.peak


@needs_torch
def test_measure_json_says_when_the_trace_disagrees(monkeypatch):
    from memlint.catalog import resolve
    from memlint.estimate import Setup, estimate
    from memlint.gpu import find_gpu
    from memlint.report.measure_view import to_json

    s = Setup(resolve("Qwen/Qwen2.5-0.5B"), seq=512)
    est = estimate(s)
    doc = {"components": {}, "measured_peak": est.allocated_peak * 2, "phase": "backward", "device": "cpu",
           "method": "fake-tensor-trace", "steps": [], "notes": []}
    out = to_json(s, doc, est, [find_gpu("RTX4090")])
    assert out["agreement"]["disagrees"] and out["agreement"]["verdict_uses"] == "trace"
    assert out["fits"]["RTX4090"]["peak"] > est.peak


def test_host_memory_is_read_without_psutil():
    from memlint.notebook.confirm import host_available

    n = host_available()
    assert n is None or n > 0
