# memlint-corpus: gpu=RTX4090
"""Qwen2.5-7B QLoRA at 4 × 8192 on a 24 GB card: the 152k-vocabulary logits alone are over."""
import torch
from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from trl import SFTConfig, SFTTrainer

bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                         bnb_4bit_compute_dtype=torch.bfloat16)
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B", quantization_config=bnb, torch_dtype=torch.bfloat16)
args = SFTConfig(output_dir="out", per_device_train_batch_size=4, max_length=8192, gradient_checkpointing=True,
                 bf16=True, optim="paged_adamw_8bit")
SFTTrainer(model=model, args=args, train_dataset=load_dataset("trl-lib/Capybara", split="train"),
           peft_config=LoraConfig(r=16, target_modules="all-linear", task_type="CAUSAL_LM")).train()
