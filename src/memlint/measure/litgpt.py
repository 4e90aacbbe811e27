"""Trace one LitGPT fine-tuning step with LitGPT's own model code (the ground truth for
`model_code="litgpt"`).

    python -m memlint.measure.litgpt --name Llama-2-7b-hf --batch 1 --seq 1304 \
        [--lora-r 8 --lora-alpha 16 --lora-dropout 0.05 --targets query,value] \
        [--quantize bnb.nf4-dq] [--precision bf16-true|bf16-mixed|32-true] [--source DIR]

What runs is LitGPT's code, imported from the installed `litgpt` package or from a source
checkout (`--source`: a directory holding `litgpt/` or, for Lit-GPT of 2023, `lit_gpt/`):
`Config.from_name`, its `GPT` (or `lora.GPT` with its LoRA config, `mark_only_lora_as_trainable`),
the training loop of `finetune/lora.py` -- `model(input_ids, lm_head_chunk_size=128)`, the
last chunk shifted, `chunked_cross_entropy(logits, targets[..., 1:])` (chunk_size 128),
`backward`, optimizer step, `zero_grad()` -- or of `finetune/full.py` (`model(input_ids)`, full
logits, `chunked_cross_entropy(logits[..., :-1, :], ...)`), and what Lightning Fabric does around it:
`--precision bf16-true` builds the model with the default dtype bf16 and runs forward under it;
`bf16-mixed` keeps fp32 weights and runs forward under bf16 autocast; `--quantize bnb.*`
replaces every `nn.Linear` (lm_head and LoRA's base layers included: Fabric's
`BitsandbytesPrecision` without ignore_modules) by bitsandbytes' 4-bit layer (memlint's
fake-tensor stand-in, measure/quant.py) and uses `bnb.optim.PagedAdamW`, as finetune/lora.py does.

The model is built on the meta device, materialised as FakeTensors (no RAM) and counted by
`LiveBytes`, the storage tracker behind `memlint measure`. CPU stand-ins for the GPU: AdamW
foreach=True (CUDA's default), SDPA's CPU flash kernel (saves out + fp32 logsumexp, like the CUDA
flash kernel), CUDA's fused dropout (bool mask). Two steps of one micro-batch each; the peak is
the second step's (optimizer state alive). What it does not run: Fabric itself, validation and
the sample generation LitGPT does between steps, FSDP.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TARGETS = ("query", "key", "value", "projection", "mlp", "head")


@dataclass
class LitStep:
    name: str  # a LitGPT Config name ("Llama-2-7b-hf") or None with `config` overrides
    batch: int
    seq: int
    lora_r: int = 0  # 0: full fine-tune (litgpt.model.GPT, every parameter trainable)
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    targets: tuple[str, ...] = ("query", "value")
    precision: str = "bf16-true"
    quantize: str | None = None  # bnb.nf4, bnb.nf4-dq, bnb.fp4, bnb.fp4-dq
    # bitsandbytes < 0.43.2 (what LitGPT pinned until 0.5: 0.41.1 in the 2023 resource tables, 0.42.0 in
    # 0.4.x): MatMul4Bit keeps each 4-bit layer's input for backward (bitsandbytes#1270 removed it)
    bnb_keeps_input: bool = False
    steps: int = 2
    lm_head_chunk_size: int | None = None  # None: what the script passes (128 in finetune/lora.py, none in full.py)
    config: dict[str, Any] = field(default_factory=dict)  # Config(**config) when name is None


def load(source: str | None = None) -> types.SimpleNamespace:
    """LitGPT's modules: from `source` (a checkout) or the installed package. The package's
    __init__ is bypassed (it imports the API and tokenizers, which a trace does not need)."""
    pkg = "litgpt"
    if source is not None:
        root = Path(source)
        pkg = "lit_gpt" if (root / "lit_gpt").is_dir() else "litgpt"
        path = root / pkg
        if pkg in sys.modules and getattr(sys.modules[pkg], "__path__", [None])[0] != str(path):
            raise RuntimeError(f"{pkg} already imported from elsewhere; trace each source in its own process")
        sys.path.insert(0, str(root))
    else:
        spec = importlib.util.find_spec("litgpt")
        if spec is None:
            raise ImportError("litgpt is not installed")
        path = Path(spec.submodule_search_locations[0])
    if pkg not in sys.modules:
        mod = types.ModuleType(pkg)
        mod.__path__ = [str(path)]
        sys.modules[pkg] = mod
    model = importlib.import_module(f"{pkg}.model")  # before config, as the package's __init__ does
    config = importlib.import_module(f"{pkg}.config")
    lora = importlib.import_module(f"{pkg}.lora")
    utils = importlib.import_module(f"{pkg}.utils")
    return types.SimpleNamespace(pkg=pkg, path=str(path), config=config, model=model, lora=lora, utils=utils)


def _lora_kwargs(cfg_cls: type, step: LitStep) -> dict[str, Any]:
    """The LoRA fields of lora.Config by the names this version uses (r/to_query in 2023,
    lora_r/lora_query since)."""
    names = {f.name for f in dataclasses.fields(cfg_cls)}
    new = "lora_r" in names
    kw: dict[str, Any] = {("lora_r" if new else "r"): step.lora_r, ("lora_alpha" if new else "alpha"): step.lora_alpha,
                          ("lora_dropout" if new else "dropout"): step.lora_dropout}
    for t in TARGETS:
        kw[(f"lora_{t}" if new else f"to_{t}")] = t in step.targets
    return kw


def _config(lit: types.SimpleNamespace, step: LitStep) -> Any:
    cls = lit.lora.Config if step.lora_r else lit.config.Config
    extra = _lora_kwargs(cls, step) if step.lora_r else {}
    names = {f.name for f in dataclasses.fields(cls)}
    given = {("_" + k.removesuffix("_name") if k.endswith("_class_name") and k not in names else k): v
             for k, v in step.config.items()}  # Lit-GPT 2023 spells norm_class_name `_norm_class`
    if step.name:
        return cls.from_name(step.name, **given, **extra)
    return cls(**given, **extra)


@contextlib.contextmanager
def _default_dtype(dtype: Any) -> Any:
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _forward_loss(lit: Any, model: Any, ids: Any, targets: Any, chunk: int) -> tuple[Any, Any]:
    """The forward and loss as LitGPT's fine-tuning loops run them: finetune/lora.py with chunked lm_head
    output, finetune/full.py with the full logits; chunked_cross_entropy either way."""
    if chunk:
        logits = model(ids, lm_head_chunk_size=chunk)
        logits[-1] = logits[-1][..., :-1, :]
        return logits, lit.utils.chunked_cross_entropy(logits, targets[..., 1:])
    logits = model(ids)
    return logits, lit.utils.chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])


def _optimizer_phase(tracker: Any, optimizer: Any) -> tuple[int, int]:
    """(the step's peak, the optimizer state's bytes on the device): PagedAdamW's paged state lives outside it."""
    from memlint.measure.optim import paged_state_tensors, state_tensors
    from memlint.measure.tracker import storage_bytes

    tracker.reset_peak_memory_stats()
    optimizer.step()
    paged = list(paged_state_tensors(optimizer))
    opt_bytes = storage_bytes(state_tensors(optimizer)) - storage_bytes(paged)
    for t in paged:
        tracker.exclude(t)
    optimizer.zero_grad()
    return tracker.peak, opt_bytes


def trace(step: LitStep, source: str | None = None) -> dict[str, Any]:
    """One LitGPT training step on fake tensors: per-step peaks by phase and the components."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memlint.measure.core import _cuda_dropout
    from memlint.measure.optim import build_optimizer
    from memlint.measure.tracker import LiveBytes, storage_bytes

    t0 = time.perf_counter()
    lit = load(source)
    cfg = _config(lit, step)
    true_dtype = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "32-true": torch.float32,
                  "bf16-mixed": torch.float32}[step.precision]
    mixed = step.precision.endswith("-mixed")
    gpt_cls = lit.lora.GPT if step.lora_r else lit.model.GPT

    tracker = LiveBytes()
    out: dict[str, Any] = {"litgpt": lit.pkg, "source": source or lit.path, "config": cfg.name, "steps": []}
    with torch.device("meta"), _default_dtype(true_dtype):  # fabric.init_module()
        model = gpt_cls(cfg)
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        with _default_dtype(true_dtype):
            model._apply(lambda t: torch.empty_like(t, device="cpu"))
        # finetune/lora.py sets it (the longest sample) outside fabric.init_module: the rope cache is rebuilt
        # in the default dtype, fp32
        model.max_seq_length = step.seq
        if step.lora_r:
            lit.lora.mark_only_lora_as_trainable(model)
        if step.quantize:
            _quantize(model, step.quantize, true_dtype, step.bnb_keeps_input)
        stack.enter_context(_cuda_dropout())
        model.train()
        stack.enter_context(tracker)
        tracker.track_all(list(model.parameters()) + list(model.buffers()))
        out["weights"] = tracker.live
        trainable = [p for p in model.parameters() if p.requires_grad]
        out["trainable_params"] = sum(p.numel() for p in trainable)
        optim = "paged_adamw_32bit" if step.quantize else "adamw_torch"
        optimizer, _ = build_optimizer(optim, model, fake=True, params=trainable)
        marks: dict[str, int] = {}

        def pre_head(_m: Any, _a: Any) -> None:
            marks.setdefault("head", tracker.live)

        handle = model.lm_head.register_forward_pre_hook(pre_head)
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if mixed else (lambda: _default_dtype(true_dtype))
        chunk = step.lm_head_chunk_size if step.lm_head_chunk_size is not None else (128 if step.lora_r else 0)
        out["lm_head_chunk_size"] = chunk
        for n in range(1, step.steps + 1):
            marks.clear()
            phases: dict[str, int] = {}
            ids, targets = (torch.randint(0, cfg.padded_vocab_size, (step.batch, step.seq)) for _ in range(2))
            tracker.begin_phase((n, "forward"))
            tracker.reset_peak_memory_stats()
            start = tracker.live
            with ctx():
                logits, loss = _forward_loss(lit, model, ids, targets, chunk)
            phases["forward"] = tracker.peak
            activations, logits_bytes = marks["head"] - start, tracker.live - marks["head"]
            tracker.begin_phase((n, "backward"))
            tracker.reset_peak_memory_stats()
            loss.backward()  # fabric.backward(loss / accumulation)
            # finetune/lora.py's loop keeps `logits`, `loss`, `input_ids`, `targets` bound until the next
            # iteration rebinds them: the logit chunks stay alive through the optimizer step
            phases["backward"] = tracker.peak
            grads = storage_bytes(p.grad for p in trainable if p.grad is not None)
            tracker.begin_phase((n, "optimizer"))
            phases["optimizer"], opt_bytes = _optimizer_phase(tracker, optimizer)
            phase = max(phases, key=phases.get)
            out["steps"].append({"step": n, "peak": phases[phase], "phase": phase, "phases": phases})
            out["components"] = {"weights": out["weights"], "gradients": grads, "optimizer": opt_bytes,
                                 "activations": activations, "logits": logits_bytes}
        handle.remove()
        del logits, loss, ids, targets, fake
    out["peak"] = out["steps"][-1]["peak"]
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _quantize(model: Any, quantize: str, dtype: Any, keep_input: bool) -> None:
    """Fabric's BitsandbytesPrecision: every nn.Linear (no ignore_modules) becomes 4-bit."""
    import torch

    from memlint.measure.quant import Linear4bit

    kind = quantize.removeprefix("bnb.")
    quant_type, dq = kind.split("-")[0], kind.endswith("-dq")
    if quant_type not in ("nf4", "fp4"):
        raise ValueError(f"--quantize {quantize}: only bnb.nf4, bnb.nf4-dq, bnb.fp4, bnb.fp4-dq are traced")
    for name, module in list(model.named_modules()):
        if type(module) is torch.nn.Linear:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, Linear4bit(module, quant_type, dq, dtype, keep_input=keep_input))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--lora-alpha", type=int, default=16)
    ap.add_argument("--lora-dropout", type=float, default=0.05)
    ap.add_argument("--targets", default="query,value")
    ap.add_argument("--precision", default="bf16-true")
    ap.add_argument("--quantize", default=None)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--bnb-keeps-input", action="store_true", help="bitsandbytes < 0.43.2's MatMul4Bit (keeps its input)")
    ap.add_argument("--source", default=None)
    a = ap.parse_args(argv)
    step = LitStep(a.name, a.batch, a.seq, a.lora_r, a.lora_alpha, a.lora_dropout, tuple(a.targets.split(",")),
                   a.precision, a.quantize, a.bnb_keeps_input, a.steps)
    print(json.dumps(trace(step, a.source)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
