# memlint-corpus: gpu=L4
"""Llama-3.2-1B full fine-tuning at 32 × 2048 without recompute on a 24 GB L4."""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments

MODEL_ID = "meta-llama/Llama-3.2-1B"
tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)
model = AutoModelForCausalLM.from_pretrained(MODEL_ID, torch_dtype=torch.bfloat16)


def tokenize(batch):
    return tokenizer(batch["text"], truncation=True, max_length=2048)


args = TrainingArguments(output_dir="out", per_device_train_batch_size=32, bf16=True, gradient_checkpointing=False)
Trainer(model=model, args=args, data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False)).train()
