"""One real trl.DPOTrainer.training_step on a tiny random Llama, on CPU, under memlint's
live-storage tracker, against memlint's estimate for the same configuration.

Needs trl (not a test dependency): pip install trl datasets. Run:
    python benchmarks/trl_dpo_step.py [--method full|lora] [--batch B] [--seq S]
training_step is forward + backward (no optimizer step), so the estimate's forward and
backward phases are compared without the optimizer state.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LLAMA = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=32000, max_position_embeddings=1024, tie_word_embeddings=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", choices=("full", "lora"), default="full")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args()

    import random

    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer

    from memlint.estimate import Setup, estimate
    from memlint.measure import tiny_spec
    from memlint.measure.tracker import LiveBytes
    from memlint.measure.trainer_step import tokenizer

    torch.manual_seed(0)
    random.seed(0)
    V = LLAMA["vocab_size"]
    tok = tokenizer(V)
    half = args.seq // 2

    def text(n):  # n tokens, none of them special; the eos TRL appends makes the completion n + 1
        return " ".join(f"w{random.randrange(V - 3)}" for _ in range(n))

    rows = [{"prompt": text(half), "chosen": text(args.seq - half - 1), "rejected": text(args.seq - half - 1)}
            for _ in range(args.batch)]
    cfg = AutoConfig.for_model("llama", **LLAMA)
    ckpt = tempfile.TemporaryDirectory()
    # TRL 1.x reloads the reference from the policy's checkpoint path: save the random model first
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(ckpt.name)
    model = AutoModelForCausalLM.from_pretrained(ckpt.name, dtype=torch.float32, attn_implementation="sdpa")
    peft_config = None
    if args.method == "lora":
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
    with tempfile.TemporaryDirectory() as out:
        conf = DPOConfig(output_dir=out, per_device_train_batch_size=args.batch, max_length=args.seq, bf16=False,
                         fp16=False, use_cpu=True, report_to=[], gradient_checkpointing=False, logging_steps=1,
                         dataloader_num_workers=0)
        trainer = DPOTrainer(model, args=conf, train_dataset=Dataset.from_list(rows), processing_class=tok,
                             peft_config=peft_config)
        batch = next(iter(trainer.get_train_dataloader()))
        shape = tuple(batch["input_ids"].shape)
        policy = trainer.model
        ref = trainer.ref_model
        tracker = LiveBytes()
        with tracker:
            tensors = list(policy.parameters()) + list(policy.buffers())
            if ref is not None:
                tensors += list(ref.parameters()) + list(ref.buffers())
            tracker.track_all(tensors)
            start = tracker.memory_allocated()
            tracker.reset_peak_memory_stats()
            trainer.current_gradient_accumulation_steps = 1  # set by train()'s loop
            trainer.training_step(policy, batch)
            peak = tracker.max_memory_allocated()
    spec = tiny_spec("llama", LLAMA)
    s = Setup(spec, method=args.method, lora_r=16, lora_dropout=0.0, dtype="fp32", precision="fp32", optim="sgd",
              batch=args.batch, seq=shape[1], objective="dpo", trl_version=trl.__version__)
    est = estimate(s)
    o = est.bytes("optimizer")
    est_peak = max(est.phases["forward"], est.phases["backward"]) - o
    print(f"trl {trl.__version__}, {args.method}, fp32, rows x seq = {shape}, ref_model: "
          f"{'copy' if ref is not None else 'adapters disabled'} -> memlint ref_model={s.ref_model}")
    print(f"weights (+ ref) tracked: {start / 2**20:.2f} MiB")
    print(f"measured training_step peak: {peak / 2**20:.2f} MiB")
    print(f"memlint estimate (max(forward, backward) - optimizer state): {est_peak / 2**20:.2f} MiB "
          f"({100 * (est_peak - peak) / peak:+.1f}%)")
    print("estimate components:", {k: f"{c.bytes / 2**20:.2f}" for k, c in est.components.items()})


if __name__ == "__main__":
    main()
