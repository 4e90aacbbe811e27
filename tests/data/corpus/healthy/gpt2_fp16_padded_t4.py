# memlint-corpus: gpu=T4
"""GPT-2 on a free Colab T4: fp16 (the T4 has no bf16), padded per batch."""
from datasets import load_dataset
from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer,
                          TrainingArguments)

tokenizer = AutoTokenizer.from_pretrained("openai-community/gpt2")
tokenizer.pad_token = tokenizer.eos_token
model = AutoModelForCausalLM.from_pretrained("openai-community/gpt2")
train = load_dataset("wikitext", "wikitext-2-raw-v1", split="train").map(
    lambda b: tokenizer(b["text"], truncation=True, max_length=1024, padding="longest"), batched=True)
args = TrainingArguments(output_dir="gpt2-out", per_device_train_batch_size=4, fp16=True)
Trainer(model=model, args=args, train_dataset=train,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False)).train()
