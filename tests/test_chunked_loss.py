"""torchtune's CEWithChunkedOutputLoss (#15): read from a torchtune config, `estimate --chunked-loss K`, and checked
against torchtune's own loss module run on real CPU tensors under memlint's live-storage counter. The module is
loaded from its file (modules/loss/ce_chunked_output_loss.py imports only torch): torchtune's package __init__ needs
torchao and datasets. Skipped where torchtune is not installed (`pip install --no-deps --target DIR torchtune`,
then PYTHONPATH=DIR)."""

import importlib.util
from pathlib import Path

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate import activations as act
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract.configs import read_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
QLORA = "torchtune_llama3_1_8B_qlora_single_device.yaml"


def test_read_from_torchtune_configs(tmp_path):
    plan = read_config(FIXTURES / QLORA)
    assert plan.get("chunked_loss").value == 8 and plan.get("chunked_loss").source == "literal"
    assert setup_from_plan(plan).setup.chunked_loss == 8
    p = tmp_path / "custom.yaml"
    p.write_text((FIXTURES / QLORA).read_text().replace(
        "_component_: torchtune.modules.loss.CEWithChunkedOutputLoss",
        "_component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n  num_output_chunks: 16"))
    assert read_config(p).get("chunked_loss").value == 16
    p.write_text((FIXTURES / QLORA).read_text().replace("CEWithChunkedOutputLoss", "LinearCrossEntropyLoss"))
    assert setup_from_plan(read_config(p)).setup.chunked_loss == 0


def test_terms_and_validation():
    s = Setup(resolve("meta-llama/Llama-3.1-8B"), method="lora", seq=2048, precision="pure-bf16", recompute=True)
    n = 2048 * 128256
    c = act.activations(s.with_(chunked_loss=8), "real")
    assert c.logits_forward == 2 * n + 4 * n + 4 * n // 8 and c.logits_backward == 4 * n + 8 * n // 8
    assert c.logits_forward < act.activations(s, "real").logits_forward
    with pytest.raises(MemlintError, match="chunked"):
        s.with_(chunked_loss=8, fused_loss=True)
    assert estimate(s.with_(chunked_loss=8)).peak < estimate(s).peak


def _torchtune_loss():
    spec = importlib.util.find_spec("torchtune")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchtune is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "modules" / "loss" / "ce_chunked_output_loss.py"
    mod_spec = importlib.util.spec_from_file_location("_tt_ce_chunked", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod.CEWithChunkedOutputLoss


@pytest.mark.parametrize("k,dtype", [(8, "fp32"), (4, "fp32"), (8, "bf16")])
def test_matches_torchtune_s_own_loss(k, dtype):
    torch = pytest.importorskip("torch")

    from memlint.measure.tracker import LiveBytes

    CE = _torchtune_loss()
    spec = resolve("Qwen/Qwen2.5-0.5B")
    T, V, H = 256, spec.vocab, spec.hidden
    s = Setup(spec, method="lora", seq=T, dtype=dtype, precision="pure-bf16" if dtype == "bf16" else "fp32",
              chunked_loss=k)
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
    terms = act.activations(s, "real")
    # the frozen lm_head (LoRA), stored transposed: CPU F.linear in bf16 keeps a transposed copy of the weight that a
    # GPU matmul does not make, which would hide what the loss holds
    Wt = (torch.randn(V, H, dtype=tdt) * 0.02).t().contiguous()
    labels = torch.randint(0, V, (1, T))
    with LiveBytes() as lb:
        h = torch.randn(1, T, H, dtype=tdt, requires_grad=True)
        base = lb.memory_allocated()
        lb.reset_peak_memory_stats()
        logits = [chunk @ Wt for chunk in h.chunk(k, dim=1)]       # torchtune's output projection, chunked
        loss = CE(num_output_chunks=k)(logits, labels)
        fwd = lb.max_memory_allocated() - base
        del logits                                                  # the recipe's `del logits` before backward
        lb.reset_peak_memory_stats()
        base_b = lb.memory_allocated()
        loss.backward()
        bwd = max(lb.max_memory_allocated() - base, base_b - base)
    grad_h = T * H * tdt.itemsize
    # CPU's matmul of the chunk against the frozen weight keeps one weight-sized (V x H) buffer alive that is no part
    # of the loss (the same figure for 4 and 8 chunks, fp32 and bf16); taken out of both phases
    fwd -= V * H * tdt.itemsize
    bwd -= V * H * tdt.itemsize
    assert fwd == pytest.approx(terms.logits_forward, rel=0.02)
    assert bwd - grad_h == pytest.approx(terms.logits_backward, rel=0.02)
    print(f"k={k} {dtype}: forward traced {fwd} estimated {terms.logits_forward}; backward traced {bwd - grad_h} "
          f"estimated {terms.logits_backward}")


def test_the_fused_loss_lever_replaces_the_chunked_loss():
    """A torchtune config with the chunked loss, checked without --gpu: the what-ifs (the smallest GPU that fits,
    MEM205's fused cross-entropy) swap the chunked loss for the fused one instead of combining them (exit 2 before)."""
    from pathlib import Path

    from memlint.cli import main
    from memlint.estimate import Setup, estimate
    from memlint.estimate.levers import _fused

    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "configs" / "torchtune_llama3_1_8B_qlora_single_device.yaml"
    assert main(["check", str(fixture), "--exit-zero", "-q"]) == 0
    from memlint.catalog import resolve

    s = Setup(resolve("meta-llama/Llama-3.1-8B"), method="lora", chunked_loss=8)
    step = _fused(s)
    fused = estimate(s.with_(**step.changes))
    assert fused.setup.fused_loss and not fused.setup.chunked_loss
