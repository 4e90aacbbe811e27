"""A run_glue.py-style script (synthetic): HfArgumentParser dataclasses, AutoConfig with num_labels, Trainer."""
from dataclasses import dataclass, field

from datasets import load_dataset
from transformers import (AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding,
                          HfArgumentParser, Trainer, TrainingArguments)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="bert-base-cased")


@dataclass
class DataTrainingArguments:
    max_seq_length: int = field(default=128)
    pad_to_max_length: bool = field(default=True)


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    raw = load_dataset("glue", "mrpc")
    config = AutoConfig.from_pretrained(model_args.model_name_or_path, num_labels=2, finetuning_task="mrpc")
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model = AutoModelForSequenceClassification.from_pretrained(model_args.model_name_or_path, config=config)
    padding = "max_length" if data_args.pad_to_max_length else False

    def preprocess(examples):
        return tokenizer(examples["sentence1"], examples["sentence2"], padding=padding,
                         max_length=data_args.max_seq_length, truncation=True)

    train = raw["train"].map(preprocess, batched=True)
    trainer = Trainer(model=model, args=training_args, train_dataset=train, tokenizer=tokenizer)
    trainer.train()


if __name__ == "__main__":
    main()
