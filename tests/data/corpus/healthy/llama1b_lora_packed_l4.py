# memlint-corpus: gpu=L4
"""Llama-3.2-1B LoRA with TRL on a 24 GB L4, packed, recompute on."""
import torch
from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B", torch_dtype=torch.bfloat16)
config = SFTConfig(output_dir="out", per_device_train_batch_size=2, gradient_accumulation_steps=8, max_length=2048,
                   packing=True, gradient_checkpointing=True, bf16=True)
peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
SFTTrainer(model=model, args=config, train_dataset=load_dataset("trl-lib/Capybara", split="train"),
           peft_config=peft_config).train()
