# memlint-corpus: gpu=A100-40GB
"""Gemma-2-2B LoRA at 2 × 2048 on a 40 GB A100: a 256k vocabulary, with room to spare."""
import torch
from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer

model = AutoModelForCausalLM.from_pretrained("google/gemma-2-2b", torch_dtype=torch.bfloat16,
                                             attn_implementation="eager")
args = SFTConfig(output_dir="gemma-lora", per_device_train_batch_size=2, gradient_accumulation_steps=4,
                 gradient_checkpointing=True, max_length=2048, packing=False, bf16=True)
SFTTrainer(model=model, args=args, train_dataset=load_dataset("trl-lib/Capybara", split="train"),
           peft_config=LoraConfig(r=16, target_modules="all-linear", task_type="CAUSAL_LM")).train()
