# memlint-corpus: gpu=RTX4090
"""SmolLM2-360M full fine-tuning without gradient checkpointing: small enough not to need it."""
import torch
from datasets import load_dataset
from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer,
                          TrainingArguments)

MODEL = "HuggingFaceTB/SmolLM2-360M"
tok = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.bfloat16)
ds = load_dataset("roneneldan/TinyStories", split="train").map(
    lambda b: tok(b["text"], truncation=True, max_length=512), batched=True)
args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, gradient_checkpointing=False, bf16=True)
Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorForLanguageModeling(tok, mlm=False)).train()
