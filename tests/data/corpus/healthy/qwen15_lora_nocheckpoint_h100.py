# memlint-corpus: gpu=H100-80GB
"""Qwen2.5-1.5B LoRA without recompute on an H100: recompute would only cost compute here."""
import torch
from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-1.5B", torch_dtype=torch.bfloat16)
args = SFTConfig(output_dir="out", per_device_train_batch_size=4, max_length=2048, gradient_checkpointing=False,
                 bf16=True, packing=True)
SFTTrainer(model=model, args=args, train_dataset=load_dataset("trl-lib/Capybara", split="train"),
           peft_config=LoraConfig(r=32, lora_alpha=64, target_modules="all-linear", task_type="CAUSAL_LM")).train()
