# memlint-corpus: gpu=T4
"""Gemma-2-9B LoRA on a 16 GB T4 in fp16: the half-precision base is 17 GiB."""
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("google/gemma-2-9b", torch_dtype=torch.float16)
model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))


def tokenize(batch, tokenizer):
    return tokenizer(batch["text"], truncation=True, max_length=512)


args = TrainingArguments(output_dir="out", per_device_train_batch_size=1, gradient_checkpointing=True, fp16=True)
Trainer(model=model, args=args).train()
