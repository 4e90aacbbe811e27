# memlint-corpus: gpu=A100-80GB
"""Mistral-7B full fine-tuning with AdamW on one 80 GB A100: weights, gradients and two moments."""
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("mistralai/Mistral-7B-v0.3", torch_dtype=torch.float32)


def tokenize(batch, tokenizer):
    return tokenizer(batch["text"], truncation=True, max_length=2048)


args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, gradient_checkpointing=True, bf16=True,
                         optim="adamw_torch")
Trainer(model=model, args=args).train()
