"""Every GPU check of issues #3 and #6 in one run: for a session that is lent a GPU.

    PYTHONPATH=src python benchmarks/gpu_confirm.py --out "$OUT"            # on a CUDA machine
    python benchmarks/gpu_confirm.py --out /tmp/gpu --device trace --quick  # rehearsal on CPU

What it runs, each section on its own (one failing is recorded and the next runs):
1. `%memcheck trainer` on the tiny Llama + LoRA Trainer of tests/test_magic.py, moved to the
   GPU, confirmed in place: estimate vs max_memory_allocated / max_memory_reserved, and the
   user's state (parameters, gradients, optimizer state, RNG states, modes) compared bit for
   bit before and after.
2. `%memcheck model --batch 4 --seq 1024` on Qwen2.5-0.5B with random weights on the GPU,
   for the four configurations of docs/memcheck.md.
3. `memlint.measure` (the allocator counters) against the real accounting for a small matrix:
   Qwen2.5-0.5B full / LoRA / QLoRA NF4 (bitsandbytes' own 4-bit kernels) and, without
   --quick, Llama-3.1-8B LoRA and QLoRA at 1 x 2048 with recompute; max_memory_reserved beside
   the estimate's reserved peak and the allocator model's replay of the same step's trace (#15).
4. The OOM path: a per-process memory cap just above what is in use, then a step that cannot
   fit; the answer must be "does not fit: OOM ...", and the allocator must be back where it was.

Writes gpu_confirm.json (every number) and gpu_confirm.md (tables for docs/memcheck.md and
docs/accuracy.md) under --out. On the GPU image of this workplace memlint's own needs that are
not installed there (libcst, bitsandbytes, ipython and its dependencies) travel as wheels.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
import traceback
import warnings
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

GIB = 2**30
QWEN, LLAMA = "Qwen/Qwen2.5-0.5B", "meta-llama/Llama-3.1-8B"
MEMCHECK_CASES = (  # name, LoRA targets (None: full), weights dtype name, gradient checkpointing
    ("full fp32", None, "float32", False),
    ("LoRA r=16 q,v, bf16 weights", ["q_proj", "v_proj"], "bfloat16", False),
    ("full bf16, checkpointing", None, "bfloat16", True),
    ("LoRA r=16 all-linear, fp32, checkpointing", "all-linear", "float32", True),
)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _env(device: str) -> dict:
    import torch

    env = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "device": device,
           **{p: _version(p) for p in ("torch", "transformers", "peft", "bitsandbytes", "accelerate", "libcst")}}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, gpu_total_bytes=props.total_memory, cuda=torch.version.cuda)
    return env


def _shell():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "memlint")
    return ip


def _state(model, optimizer) -> dict:
    import numpy as np
    import torch

    st = {
        "params": {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()},
        "grads": {n: p.grad.to("cpu", copy=True) for n, p in model.named_parameters() if p.grad is not None},
        "optimizer": {k: {s: (v.to("cpu", copy=True) if torch.is_tensor(v) else v) for s, v in st.items()}
                      for k, st in ((id(k), st) for k, st in optimizer.state.items())},
        "torch_rng": torch.get_rng_state(),
        "py_rng": random.getstate(),
        "np_rng": np.random.get_state()[1].copy(),
        "modes": {n: m.training for n, m in model.named_modules()},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
    }
    if torch.cuda.is_available():
        st["cuda_rng"] = torch.cuda.get_rng_state()
    return st


def _differences(a: dict, b: dict) -> list[str]:
    import torch

    out = []
    for key in ("params", "grads"):
        if a[key].keys() != b[key].keys():
            out.append(f"{key}: names differ")
        out += [f"{key}: {n}" for n in a[key] if n in b[key] and not torch.equal(a[key][n], b[key][n])]
    for k in a["optimizer"]:
        for s, v in a["optimizer"][k].items():
            w = b["optimizer"].get(k, {}).get(s)
            same = torch.equal(v, w) if torch.is_tensor(v) and torch.is_tensor(w) else v == w
            if not same:
                out.append(f"optimizer state {s}")
    for key in ("torch_rng", "cuda_rng"):
        if key in a and not torch.equal(a[key], b[key]):
            out.append(key)
    if not (a["np_rng"] == b["np_rng"]).all():
        out.append("np_rng")
    out += [key for key in ("py_rng", "modes", "requires_grad") if a[key] != b[key]]
    return out


def _row(name: str, est_alloc: int, measured, est_reserved: int | None = None) -> dict:
    row = {"name": name, "estimate_allocated": int(est_alloc), "measured_allocated": int(measured.measured_peak),
           "error": (est_alloc - measured.measured_peak) / measured.measured_peak, "phase": measured.phase,
           "method": measured.method}
    res = getattr(measured, "reserved", None)
    if res:  # the allocator's own counter on CUDA; the replayed allocator model on a trace
        row["measured_reserved"], row["reserved_method"] = int(res["peak"]), res["method"]
    elif measured.method == "cuda-allocator":
        row["measured_reserved"] = int(measured.measured_peak + measured.components.get("overhead", 0))
    if est_reserved is not None:
        row["estimate_reserved"] = int(est_reserved)
    return row


def memcheck_tiny(device: str, tmp: Path) -> dict:
    import torch
    from test_magic import PadToLongest, _trainer

    warnings.simplefilter("ignore")
    ip = _shell()
    trainer = _trainer(tmp, gradient_checkpointing=True)
    model = trainer.model
    if device == "cuda":
        model.to("cuda")
    trainer.create_optimizer()
    batch = PadToLongest()([trainer.train_dataset[0], trainer.train_dataset[3]])
    batch = {k: v.to(next(model.parameters()).device) for k, v in batch.items()}
    model(**batch).loss.backward()
    trainer.optimizer.step()
    model(**batch).loss.backward()  # leave gradients and optimizer state in place
    model.eval()
    random.seed(5)
    torch.manual_seed(7)
    ip.user_ns["trainer"] = trainer
    before = _state(model, trainer.optimizer)
    r = ip.run_line_magic("memcheck", f"trainer --device {device} -q")
    diffs = _differences(before, _state(model, trainer.optimizer))
    out = {"longest_sample": getattr(r.facts, "longest", None), "oom": r.oom, "state_differences": diffs,
           "how": getattr(r.confirmation, "how", None), "restored": getattr(r.confirmation, "restored", None)}
    if r.measured is not None:
        out.update(_row("tiny Llama + LoRA Trainer", r.estimate.allocated_peak, r.measured))
    return out


def memcheck_qwen(device: str) -> list[dict]:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from memlint.catalog import resolve

    warnings.simplefilter("ignore")
    spec = resolve(QWEN)
    cfg = AutoConfig.for_model(spec.model_type, **dict(spec.config))
    ip = _shell()
    rows = []
    for name, targets, dtype, checkpointing in MEMCHECK_CASES:
        t0 = time.perf_counter()
        try:
            with torch.device("cuda" if device == "cuda" else "meta"):
                model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
            if targets is not None:
                model = get_peft_model(model, LoraConfig(r=16, target_modules=targets, task_type="CAUSAL_LM"))
            if checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            ip.user_ns["model"] = model
            r = ip.run_line_magic("memcheck", f"model --batch 4 --seq 1024 --device {device} -q")
            row = _row(name, r.estimate.allocated_peak, r.measured) if r.measured is not None else {"name": name}
            row.update(oom=r.oom, seconds=round(time.perf_counter() - t0, 1), precision=r.setup.precision)
        except Exception as exc:  # record and go on
            row = {"name": name, "error_text": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        rows.append(row)
        ip.user_ns.pop("model", None)
        model = None
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def measure_matrix(device: str, quick: bool) -> list[dict]:
    import torch

    from memlint.catalog import resolve
    from memlint.estimate import Setup, estimate
    from memlint.measure import measure

    cases = [
        (QWEN, dict(method="full", recompute=True)),
        (QWEN, dict(method="lora")),
        (QWEN, dict(method="qlora", quant="nf4", recompute=True)),
    ]
    if not quick:
        cases += [(LLAMA, dict(method="lora", recompute=True)), (LLAMA, dict(method="qlora", quant="nf4", recompute=True))]
    rows = []
    for model_id, kw in cases:
        setup = Setup(model=resolve(model_id), batch=1, seq=2048, **kw)
        name = f"{model_id.split('/')[-1]} {kw['method']}{' recompute' if kw.get('recompute') else ''} 1x2048"
        t0 = time.perf_counter()
        try:
            m = measure(setup, device=device, steps=2)
            e = estimate(setup, "real")
            row = _row(name, e.allocated_peak, m, e.reserved_peak)
            row["seconds"] = round(time.perf_counter() - t0, 1)
            if device == "cuda":  # issue #15: the allocator model's replay of the trace against the allocator
                row["replay_reserved"] = int(measure(setup, device="trace", steps=2).reserved_peak)
                row["replay_error"] = (row["replay_reserved"] - row["measured_reserved"]) / row["measured_reserved"]
        except Exception as exc:
            row = {"name": name, "error_text": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def oom_path(device: str) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from memlint.catalog import resolve

    if device != "cuda":
        return {"skipped": "needs CUDA"}
    warnings.simplefilter("ignore")
    spec = resolve(QWEN)
    cfg = AutoConfig.for_model(spec.model_type, **dict(spec.config))
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    total = torch.cuda.get_device_properties(0).total_memory
    cap = baseline + 4 * GIB  # the fp32 model plus 4 GiB: its AdamW state alone needs more
    torch.cuda.set_per_process_memory_fraction(cap / total)
    ip = _shell()
    ip.user_ns["model"] = model
    try:
        r = ip.run_line_magic("memcheck", "model --batch 8 --seq 4096 --device cuda -q")
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    torch.cuda.synchronize()
    return {"oom": r.oom, "fits": r.fits, "cap_bytes": cap, "baseline_allocated": baseline,
            "allocated_after": torch.cuda.memory_allocated(), "released": torch.cuda.memory_allocated() == baseline}


def _markdown(results: dict) -> str:
    env = results["env"]
    lines = [f"# GPU confirmation, {env['date']}", "",
             f"{env.get('gpu', env['device'])}, torch {env['torch']}, transformers {env['transformers']}, "
             f"peft {env['peft']}, bitsandbytes {env['bitsandbytes']}", "",
             "| check | estimate GiB (allocated) | measured allocated GiB | measured reserved GiB | error | phase "
             "| estimate reserved GiB | replayed reserved GiB (trace) | replay error |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    rows = []
    tiny = results.get("memcheck_tiny")
    if isinstance(tiny, dict) and "estimate_allocated" in tiny:
        rows.append(tiny)
    for key in ("memcheck_qwen", "measure_matrix"):
        if isinstance(results.get(key), list):
            rows += results[key]
    for r in rows:
        if "estimate_allocated" not in r:
            lines.append(f"| {r['name']} | — | — | — | {r.get('error_text') or r.get('oom') or 'no measurement'} | |")
            continue
        reserved = f"{r['measured_reserved'] / GIB:.3f}" if "measured_reserved" in r else "—"
        est_res = f"{r['estimate_reserved'] / GIB:.3f}" if "estimate_reserved" in r else "—"
        replay = f"{r['replay_reserved'] / GIB:.3f} | {r['replay_error']:+.1%}" if "replay_reserved" in r else "— | —"
        lines.append(f"| {r['name']} | {r['estimate_allocated'] / GIB:.3f} | {r['measured_allocated'] / GIB:.3f} | "
                     f"{reserved} | {r['error']:+.1%} | {r['phase']} | {est_res} | {replay} |")
    if isinstance(tiny, dict):
        lines += ["", f"State after the in-place confirmation: "
                      f"{'bit-identical' if not tiny.get('state_differences') else tiny.get('state_differences')}"]
    oom = results.get("oom_path")
    if isinstance(oom, dict):
        lines += ["", f"OOM path: {json.dumps(oom)}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", choices=("cuda", "trace"), default=None, help="default: cuda when available")
    ap.add_argument("--quick", action="store_true", help="leave out the 8B rows")
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "trace")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"env": _env(device)}
    sections = (("memcheck_tiny", lambda: memcheck_tiny(device, args.out / "trainer_tmp")),
                ("memcheck_qwen", lambda: memcheck_qwen(device)),
                ("measure_matrix", lambda: measure_matrix(device, args.quick)),
                ("oom_path", lambda: oom_path(device)))
    for key, run in sections:
        t0 = time.perf_counter()
        try:
            results[key] = run()
        except Exception as exc:
            results[key] = {"error_text": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        print(f"{key}: {time.perf_counter() - t0:.1f} s", flush=True)
        (args.out / "gpu_confirm.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    md = _markdown(results)
    (args.out / "gpu_confirm.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
