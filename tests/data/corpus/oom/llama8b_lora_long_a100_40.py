# memlint-corpus: gpu=A100-40GB
"""Llama-3.1-8B LoRA at 8 × 4096 without recompute on a 40 GB A100."""
import torch
from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B", torch_dtype=torch.bfloat16)
args = SFTConfig(output_dir="out", per_device_train_batch_size=8, gradient_accumulation_steps=2, max_length=4096,
                 gradient_checkpointing=False, bf16=True)
SFTTrainer(model=model, args=args, train_dataset=load_dataset("trl-lib/Capybara", split="train"),
           peft_config=LoraConfig(r=16, target_modules="all-linear", task_type="CAUSAL_LM")).train()
