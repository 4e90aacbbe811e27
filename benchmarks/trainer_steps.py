"""The estimate against the libraries' own trainers: transformers' Trainer and TRL's SFT, DPO, KTO, ORPO and
Reward trainers at the installed versions, two real training steps each on a tiny model (memlint.measure.trainer_step).

    python benchmarks/trainer_steps.py [--reuse] [--write]

Truth is independent of the estimator: the trainer builds its optimizer (Trainer.create_optimizer), its collator
the batch, and training_step runs its own loss code on real CPU tensors under memlint's live-storage tracker; only
CUDA's kernels are stood in where the CPU runs another one (CUDA autocast's op lists, SDPA kernels and fused dropout
as measure/cuda_emulation.py runs them, TRL's Triton log-prob kernel, CUDA's foreach defaults, paged optimizer state
outside the allocator). Each row compares the traced step-2 peak with `estimate`'s allocated
peak for the same configuration (trl_sft for SFTTrainer, objective for the preference trainers, trl_version the
installed one). `--reuse` takes the traces from docs/trainer_steps.json; `--write` rewrites the marked section of
docs/accuracy.md and the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

JSON = ROOT / "docs" / "trainer_steps.json"
DOC = ROOT / "docs" / "accuracy.md"
BEGIN, END = "<!-- trainer-steps:begin -->", "<!-- trainer-steps:end -->"
# a deeper, narrower-vocabulary Llama where the body (and autocast's weight copies) matter more than the logits
BODY = dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
            vocab_size=1024, max_position_embeddings=4096, tie_word_embeddings=False)

# (label, trainer_step keywords); the default model is measure.trainer_step.LLAMA (hidden 256, 2 layers, V 32000),
# micro-batch 2 x 256, AdamW (torch, foreach as on CUDA)
ROWS = [
    ("Trainer fp32", dict(trainer="trainer")),
    ("Trainer fp32 weights, bf16 autocast", dict(trainer="trainer", precision="amp-bf16")),
    ("Trainer bf16 weights, bf16 autocast", dict(trainer="trainer", precision="amp-bf16", weights="bf16")),
    ("Trainer bf16, adamw_bnb_8bit", dict(trainer="trainer", precision="amp-bf16", weights="bf16", optim="adamw_bnb_8bit")),
    ("Trainer fp32, paged_adamw_8bit", dict(trainer="trainer", optim="paged_adamw_8bit")),
    ("Trainer fp32 weights, bf16 autocast, recompute, SGD (body model)",
     dict(trainer="trainer", precision="amp-bf16", recompute=True, optim="sgd", config=BODY)),
    ("Trainer fp32 weights, bf16 autocast, SGD (body model)",
     dict(trainer="trainer", precision="amp-bf16", optim="sgd", config=BODY)),
    ("SFTTrainer fp32", dict(trainer="sft")),
    ("SFTTrainer fp32 weights, bf16 autocast", dict(trainer="sft", precision="amp-bf16")),
    ("SFTTrainer bf16, autocast", dict(trainer="sft", precision="amp-bf16", weights="bf16")),
    ("SFTTrainer pure bf16", dict(trainer="sft", precision="pure-bf16")),
    ("SFTTrainer LoRA, fp32 weights, autocast", dict(trainer="sft", method="lora", precision="amp-bf16")),
    ("SFTTrainer LoRA, bf16, autocast", dict(trainer="sft", method="lora", precision="amp-bf16", weights="bf16")),
    ("SFTTrainer bf16, autocast, recompute", dict(trainer="sft", precision="amp-bf16", weights="bf16", recompute=True)),
    ("SFTTrainer LoRA, bf16, recompute", dict(trainer="sft", method="lora", precision="amp-bf16", weights="bf16",
                                              recompute=True)),
    ("SFTTrainer LoRA, bf16, adamw_bnb_8bit", dict(trainer="sft", method="lora", precision="amp-bf16", weights="bf16",
                                                   optim="adamw_bnb_8bit")),
    ("DPOTrainer fp32", dict(trainer="dpo")),
    ("DPOTrainer LoRA fp32", dict(trainer="dpo", method="lora")),
    ("DPOTrainer LoRA, bf16, autocast", dict(trainer="dpo", method="lora", precision="amp-bf16", weights="bf16")),
    ("DPOTrainer fp32 weights, bf16 autocast", dict(trainer="dpo", precision="amp-bf16")),
    ("DPOTrainer LoRA, bf16, recompute", dict(trainer="dpo", method="lora", precision="amp-bf16", weights="bf16",
                                              recompute=True)),
    ("KTOTrainer LoRA fp32", dict(trainer="kto", method="lora")),
    ("ORPOTrainer LoRA fp32", dict(trainer="orpo", method="lora")),
    ("RewardTrainer bf16, autocast", dict(trainer="reward", precision="amp-bf16", weights="bf16")),
]


def setup_for(kw: dict, shape: list | None, trl_version: str):
    from memlint.estimate import Setup
    from memlint.measure import tiny_spec
    from memlint.measure.trainer_step import LLAMA

    prec = kw.get("precision", "fp32")
    tr = kw.get("trainer", "sft")
    objective = "sft" if tr in ("sft", "trainer") else tr
    seq = shape[1] if shape else kw.get("seq", 256)
    return Setup(tiny_spec("llama", kw.get("config") or LLAMA), method=kw.get("method", "full"), lora_r=16,
                 lora_dropout=0.0, dtype="bf16" if prec == "pure-bf16" else kw.get("weights", "fp32"),
                 precision=prec, optim=kw.get("optim", "adamw_torch"), batch=kw.get("batch", 2), seq=seq,
                 recompute=kw.get("recompute", False), objective=objective, trl_sft=tr == "sft",
                 trl_version=trl_version)


def trace(rows: list) -> list[dict]:
    from memlint.measure.trainer_step import trainer_step

    out = []
    for label, kw in rows:
        t0 = time.perf_counter()
        r = trainer_step(**kw)
        r.pop("events", None)
        out.append({"label": label, "kw": kw, "shape": r["shape"], "steps": r["step2"], "peak": r["peak"],
                    "phase": r["phase"], "versions": r["versions"], "seconds": round(time.perf_counter() - t0, 1)})
        print(f"{label}: {r['peak']:,} ({r['phase']}) {out[-1]['seconds']} s", file=sys.stderr, flush=True)
    return out


def compare(traced: list[dict]) -> list[dict]:
    from memlint.estimate import estimate

    rows = []
    for t in traced:
        s = setup_for(t["kw"], t["shape"], t["versions"]["trl"])
        e = estimate(s)
        est = e.allocated_peak
        rows.append({**t, "estimate": est, "estimate_phase": e.peak_phase,
                     "error": 100 * (est - t["peak"]) / t["peak"],
                     "phase_errors": {p: 100 * (e.phases[p] - t["steps"][p]) / t["steps"][p] for p in t["steps"]}})
    return rows


def render(rows: list[dict]) -> str:
    errs = [abs(r["error"]) for r in rows]
    v = rows[0]["versions"]
    lines = [BEGIN, "## The libraries' own trainers: estimate vs their training step", "",
             f"Generated by `python benchmarks/trainer_steps.py --write` (trl {v['trl']}, transformers "
             f"{v['transformers']}, torch {v['torch']}). Each row runs two real steps of the library's own trainer "
             "(`memlint.measure.trainer_step`: `Trainer.create_optimizer`, the trainer's collator and `training_step`, "
             "clip + step + zero_grad as the loop runs them) on a tiny Llama built from a config (hidden 256, 2 "
             "layers, vocabulary 32,000; the body model: hidden 512, 4 layers, vocabulary 1,024), micro-batch 2 × 256, "
             "AdamW unless named, real CPU tensors under the live-storage tracker, with CUDA's kernels stood in where "
             "the CPU runs others (CUDA autocast's op lists, its SDPA kernels and fused dropout, measure/cuda_emulation.py; "
             "TRL's Triton log-prob kernel writes its tiles in place and scores only the valid positions; foreach "
             "AdamW and clip_grad_norm; paged state outside the allocator). Measured = the step-2 "
             "peak of live tensor bytes; estimated = `estimate`'s allocated peak for the same setup (`trl_sft` for "
             "SFTTrainer, `--objective` for the others, the installed trl).", "",
             f"**Median |error| {statistics.median(errs):.2f} %, max {max(errs):.2f} %** over {len(rows)} configurations.",
             "", "| trainer and configuration | rows × seq | measured MiB | phase | estimated MiB | error | "
             "forward | backward | optimizer |", "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        pe = r["phase_errors"]
        shape = "×".join(map(str, r["shape"])) if r["shape"] else "—"
        lines.append(f"| {r['label']} | {shape} | {r['peak'] / 2**20:.2f} | {r['phase']} | {r['estimate'] / 2**20:.2f} "
                     f"| {r['error']:+.2f} % | {pe['forward']:+.2f} % | {pe['backward']:+.2f} % | {pe['optimizer']:+.2f} % |")
    lines += ["", "Forward, backward, optimizer: each phase's estimate against the traced phase (the peak is the "
              "largest). TRL's trainers default to gradient checkpointing (trl/trainer/base_config.py); every row "
              "says it either way.", END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reuse", action="store_true", help="the traces of docs/trainer_steps.json")
    ap.add_argument("--write", action="store_true", help="rewrite docs/accuracy.md's section and the JSON")
    a = ap.parse_args(argv)
    traced = json.loads(JSON.read_text()) if a.reuse else trace(ROWS)
    rows = compare(traced)
    text = render(rows)
    print(text)
    if a.write:
        JSON.write_text(json.dumps(traced, indent=1) + "\n")
        doc = DOC.read_text()
        if BEGIN in doc:
            doc = doc[:doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):]
        else:
            doc = doc.rstrip("\n") + "\n\n" + text + "\n"
        DOC.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
