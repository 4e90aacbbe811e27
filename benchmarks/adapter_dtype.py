"""fp32 LoRA adapters on a bf16 base without autocast (peft's default autocast_adapter_dtype=True in a
plain bf16 loop): memlint's estimate against the fake-tensor trace of peft's own model, at full size.

    python benchmarks/adapter_dtype.py

Prints one line per configuration: the traced step-2 peak, the estimate's allocated peak, the error.
The trace builds the real transformers model on the meta device, applies peft's get_peft_model and
(for QLoRA) bitsandbytes' 4-bit layout, and runs two training steps under FakeTensorMode.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from memlint.catalog import resolve  # noqa: E402
from memlint.estimate import GIB, Setup, estimate  # noqa: E402

LORA = dict(lora_r=16, lora_dropout=0.05)
CASES = [
    ("meta-llama/Llama-3.1-8B", dict(method="lora", **LORA, seq=2048)),
    ("meta-llama/Llama-3.1-8B", dict(method="lora", **LORA, seq=2048, recompute=True)),
    ("meta-llama/Llama-3.1-8B", dict(method="qlora", quant="nf4", **LORA, seq=2048, kbit_prep=False)),
    ("mistralai/Mistral-7B-v0.1", dict(method="lora", lora_r=64, lora_dropout=0.05, batch=4, seq=512)),
]


def main() -> int:
    from memlint.measure import measure

    for model, kw in CASES:
        t0 = time.perf_counter()
        s = Setup(resolve(model), precision="pure-bf16", adapter_dtype="fp32", optim="adamw_torch", **kw)
        traced = measure(s, device="trace").to_json()["measured_peak"]
        est = estimate(s).allocated_peak
        shown = " ".join(f"{k}={v}" for k, v in kw.items())
        print(f"{model} {shown}: trace {traced / GIB:.2f} GiB, estimate {est / GIB:.2f} GiB, "
              f"{(est - traced) / traced * 100:+.2f}% ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
