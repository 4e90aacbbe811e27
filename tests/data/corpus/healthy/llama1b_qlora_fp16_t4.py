# memlint-corpus: gpu=T4
"""Llama-3.2-1B QLoRA on a T4: fp16 compute, double quantization, paged 8-bit AdamW."""
import torch
from datasets import load_dataset
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import (AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, DataCollatorForLanguageModeling,
                          Trainer, TrainingArguments)

MODEL_ID = "meta-llama/Llama-3.2-1B"
bnb_config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=torch.float16)
model = AutoModelForCausalLM.from_pretrained(MODEL_ID, quantization_config=bnb_config, torch_dtype=torch.float16)
model = prepare_model_for_kbit_training(model)
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)
data = load_dataset("imdb", split="train").map(lambda b: tokenizer(b["text"], truncation=True, max_length=1024),
                                               batched=True)
args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, gradient_accumulation_steps=8,
                         gradient_checkpointing=True, fp16=True, optim="paged_adamw_8bit")
Trainer(model=model, args=args, train_dataset=data,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False)).train()
