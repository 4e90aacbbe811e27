"""Per-rank estimate vs torch's own tensor parallelism on 2 gloo CPU ranks: prints docs/accounting.md's
"Tensor parallelism: measured" rows.

Each run builds a tiny LlamaForCausalLM from its config (random weights: hidden 256, 4 heads, 2 KV heads,
2 layers, vocab 1024, untied lm_head), applies torch.distributed.tensor.parallel.parallelize_module with
the setup's plan (memlint.measure.distributed.tp_plan: ColwiseParallel / RowwiseParallel, and for the
torchtitan layout SequenceParallel norms, vocab-parallel embeddings and, with loss parallelism,
loss_parallel(); the 4-rank row adds FSDP2 `fully_shard` per decoder layer and at the root over the
data-parallel mesh dimension, torchtitan's order), trains two steps (fp32, AdamW foreach, micro-batch 2 × 64) and counts each rank's live
tensor bytes with the storage tracker (local shards of DTensors). Estimated: `estimate(setup, "real")`.

    python benchmarks/tensor_parallel.py        # about three minutes on 2 shared cores
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CONFIG = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=1024, max_position_embeddings=256, tie_word_embeddings=False)
SETUP = dict(dtype="fp32", precision="fp32", batch=2, seq=64, optim="adamw_torch")
RUNS = [
    ("one process (no TP)", "none", {}),
    ("TP 2, transformers plan (embeddings replicated, logits gathered)", "tp", dict(gpus=2, tp=2)),
    ("TP 2 + SP, torchtitan plan, logits gathered", "tp", dict(gpus=2, tp=2, tp_stack="torchtitan", loss_parallel=False)),
    ("TP 2 + SP, torchtitan plan, loss parallel", "tp", dict(gpus=2, tp=2, tp_stack="torchtitan")),
    ("FSDP2 2 × TP 2 (4 ranks, transformers plan)", "tp", dict(gpus=4, tp=2, shard="fsdp")),
]
COLUMNS = ("weights", "gradients", "optimizer", "activations", "logits")


def main() -> int:
    from memlint.estimate import Setup, estimate
    from memlint.estimate import model_state as ms
    from memlint.estimate import tensor_parallel as tpm
    from memlint.measure import tiny_spec
    from memlint.measure.distributed import measure_ranks

    spec = tiny_spec("llama", CONFIG, "tiny-llama-2L-256h")
    print("| run | " + " | ".join(COLUMNS) + " | activations + logits | peak (phase) |")
    print("|---|" + "---:|" * (len(COLUMNS) + 2))
    for label, engine, kw in RUNS:
        s = Setup(spec, **SETUP, **kw)
        ranks = measure_ranks(s, engine=engine, ranks=s.gpus)
        e = estimate(s, "real")
        r = max(ranks, key=lambda x: x.peak)
        c = r.components
        est = {k: e.bytes(k) for k in COLUMNS}
        if s.shard != "none":
            # FSDP's gathered units are live at the lm_head too: the measured `activations` include them
            w = ms.weight_bytes(s.with_(model=tpm.rank_spec(s)), "real")[0]
            est["weights"] = -(-w // s.shard_group)
            est["activations"] += e.bytes("weights") - est["weights"]
        cells = [f"{est[k]:,} / {c[k]:,}" for k in COLUMNS]
        both_e, both_m = est["activations"] + est["logits"], c["activations"] + c["logits"]
        cells.append(f"{both_e:,} / {both_m:,} ({(both_e - both_m) / both_m * 100:+.1f}%)")
        cells.append(f"{e.allocated_peak:,} ({e.peak_phase}) / {r.peak:,} ({r.phase}) "
                     f"{(e.allocated_peak - r.peak) / r.peak * 100:+.1f}%")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
