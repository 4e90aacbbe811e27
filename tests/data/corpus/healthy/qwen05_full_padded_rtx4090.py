# memlint-corpus: gpu=RTX4090
"""Qwen2.5-0.5B full fine-tuning with the HF Trainer, padded per batch by the collator."""
import torch
from datasets import load_dataset
from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer,
                          TrainingArguments)

MODEL_ID = "Qwen/Qwen2.5-0.5B"
tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)
model = AutoModelForCausalLM.from_pretrained(MODEL_ID, torch_dtype=torch.bfloat16, attn_implementation="sdpa")


def tokenize(batch):
    return tokenizer(batch["text"], truncation=True, max_length=1024)


data = load_dataset("imdb", split="train").map(tokenize, batched=True)
args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, gradient_accumulation_steps=4,
                         gradient_checkpointing=True, bf16=True, optim="adamw_torch")
Trainer(model=model, args=args, train_dataset=data,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False)).train()
