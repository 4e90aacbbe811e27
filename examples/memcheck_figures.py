"""The figures in docs/memcheck.md: `%memcheck` on Qwen2.5-0.5B built on the meta device
(shapes from memlint's catalog, no weights), micro-batch 4 × 1024, confirmed by the
fake-tensor trace. Run: python examples/memcheck_figures.py (about a minute on 2 cores)."""

import time
import warnings

import torch
from IPython.core.interactiveshell import InteractiveShell
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from memlint.catalog import resolve

CASES = (  # name, LoRA targets (None: full), weights dtype, gradient checkpointing
    ("full fp32", None, torch.float32, False),
    ("LoRA r=16 q,v, bf16 weights", ["q_proj", "v_proj"], torch.bfloat16, False),
    ("full bf16, checkpointing", None, torch.bfloat16, True),
    ("LoRA r=16 all-linear, fp32, checkpointing", "all-linear", torch.float32, True),
)


def main() -> None:
    warnings.simplefilter("ignore")
    spec = resolve("Qwen/Qwen2.5-0.5B")
    cfg = AutoConfig.for_model(spec.model_type, **dict(spec.config))
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "memlint")
    print("| model | precision | estimate GiB | trace GiB | error | phase (est / trace) | time |")
    print("|---|---|---:|---:|---:|---|---:|")
    for name, targets, dtype, checkpointing in CASES:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        if targets is not None:
            model = get_peft_model(model, LoraConfig(r=16, target_modules=targets, task_type="CAUSAL_LM"))
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        ip.user_ns["model"] = model
        t0 = time.perf_counter()
        r = ip.run_line_magic("memcheck", "model --batch 4 --seq 1024 --device trace -q")
        e, m = r.estimate, r.measured
        err = (e.allocated_peak - m.measured_peak) / m.measured_peak
        print(f"| {name} | {r.setup.precision} | {e.allocated_peak / 2**30:.3f} | {m.measured_peak / 2**30:.3f} | "
              f"{err:+.1%} | {e.peak_phase} / {m.phase} | {time.perf_counter() - t0:.1f} s |")


if __name__ == "__main__":
    main()
