"""A run_summarization-style T5 fine-tune (Seq2SeqTrainer, DataCollatorForSeq2Seq, text_target= labels)."""
import argparse

from datasets import load_dataset
from transformers import (AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainer,
                          Seq2SeqTrainingArguments)

parser = argparse.ArgumentParser()
parser.add_argument("--model_name_or_path", default="google/flan-t5-base")
parser.add_argument("--max_source_length", type=int, default=512)
parser.add_argument("--max_target_length", type=int, default=128)
args = parser.parse_args()

tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
model = AutoModelForSeq2SeqLM.from_pretrained(args.model_name_or_path)
raw = load_dataset("cnn_dailymail", "3.0.0")


def preprocess(batch):
    inputs = ["summarize: " + doc for doc in batch["article"]]
    model_inputs = tokenizer(inputs, max_length=args.max_source_length, truncation=True)
    labels = tokenizer(text_target=batch["highlights"], max_length=args.max_target_length, truncation=True)
    model_inputs["labels"] = labels["input_ids"]
    return model_inputs


train = raw["train"].map(preprocess, batched=True)
collator = DataCollatorForSeq2Seq(tokenizer, model=model)
training_args = Seq2SeqTrainingArguments(output_dir="out", per_device_train_batch_size=8, learning_rate=3e-4,
                                         gradient_checkpointing=True, bf16=True, predict_with_generate=True)
trainer = Seq2SeqTrainer(model=model, args=training_args, train_dataset=train, data_collator=collator,
                         tokenizer=tokenizer)
trainer.train()
