"""Print the DistilBERT / DeBERTa-v3 estimate-vs-trace table of docs/accounting.md (full fine-tune and LoRA, fp32
and amp-fp16): tiny random-weight models of tests/test_encoders_more.py, batch 4 x 256 tokens, AdamW, traced with
`memlint measure`'s fake tensors.  Run: python scripts/encoder_trace_table.py  (needs torch, transformers, peft)"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from memlint.estimate import Setup, estimate  # noqa: E402
from memlint.measure import measure  # noqa: E402
from test_encoders_more import TARGETS, tiny  # noqa: E402


def main() -> int:
    print("| model | method | precision | allocated peak: estimate / trace | saved activations: estimate / trace "
          "| trainable: estimate / peft |")
    print("|---|---|---|---|---|---|")
    for mt in ("distilbert", "deberta-v2"):
        for method in ("full", "lora"):
            for p in ("fp32", "amp-fp16"):
                kw = dict(lora_targets=TARGETS[mt], lora_r=8) if method == "lora" else {}
                s = Setup(tiny(mt), method=method, dtype="fp32", precision=p, batch=4, seq=256, optim="adamw_torch",
                          **kw)
                e, r = estimate(s), measure(s, device="trace")
                ea, ra = e.bytes("activations"), r.components["activations"]
                print(f"| {mt} | {method} | {p} | {e.allocated_peak:,} / {r.measured_peak:,} "
                      f"({e.allocated_peak / r.measured_peak:.3f}) | {ea:,} / {ra:,} ({ea / ra:.3f}) "
                      f"| {e.trainable_params:,} / {r.details['trainable_params']:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
