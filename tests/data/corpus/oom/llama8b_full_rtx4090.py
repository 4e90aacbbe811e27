# memlint-corpus: gpu=RTX4090
"""Llama-3.1-8B full fine-tuning on a 24 GB card: the model state alone is over."""
import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

MODEL = "meta-llama/Llama-3.1-8B"
tok = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.bfloat16)
data = load_dataset("imdb", split="train").map(lambda b: tok(b["text"], truncation=True, max_length=1024), batched=True)
args = TrainingArguments(output_dir="out", per_device_train_batch_size=1, gradient_checkpointing=True, bf16=True)
Trainer(model=model, args=args, train_dataset=data).train()
