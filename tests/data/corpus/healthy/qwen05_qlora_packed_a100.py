# memlint-corpus: gpu=A100-80GB
"""Qwen2.5-0.5B QLoRA with TRL, packed sequences: a 2.5 GiB-class run on an 80 GB card."""
import torch
from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from trl import SFTConfig, SFTTrainer

MODEL_ID = "Qwen/Qwen2.5-0.5B"
bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                         bnb_4bit_compute_dtype=torch.bfloat16)
model = AutoModelForCausalLM.from_pretrained(MODEL_ID, quantization_config=bnb, torch_dtype=torch.bfloat16)
args = SFTConfig(output_dir="out", per_device_train_batch_size=2, gradient_accumulation_steps=8,
                 gradient_checkpointing=True, max_length=2048, packing=True, bf16=True, optim="adamw_torch")
trainer = SFTTrainer(model=model, args=args, train_dataset=load_dataset("trl-lib/Capybara", split="train"),
                     peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
trainer.train()
