"""An accelerate examples/nlp_example.py-style loop (synthetic): Accelerator(mixed_precision="fp16"), a padded
collate_fn, AdamW, accelerator.backward."""
import torch
from accelerate import Accelerator
from datasets import load_dataset
from torch.optim import AdamW
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, AutoTokenizer

MAX_GPU_BATCH_SIZE = 16


def training_function():
    accelerator = Accelerator(mixed_precision="fp16")
    tokenizer = AutoTokenizer.from_pretrained("bert-base-cased")
    datasets = load_dataset("glue", "mrpc")

    def tokenize_function(examples):
        return tokenizer(examples["sentence1"], examples["sentence2"], truncation=True, max_length=None)

    tokenized = datasets.map(tokenize_function, batched=True)

    def collate_fn(examples):
        return tokenizer.pad(examples, padding="max_length", max_length=128, return_tensors="pt")

    train_dataloader = DataLoader(tokenized["train"], shuffle=True, collate_fn=collate_fn, batch_size=32)
    model = AutoModelForSequenceClassification.from_pretrained("bert-base-cased", return_dict=True)
    optimizer = AdamW(params=model.parameters(), lr=2e-5)
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
    model.train()
    for step, batch in enumerate(train_dataloader):
        outputs = model(**batch)
        loss = outputs.loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    training_function()
