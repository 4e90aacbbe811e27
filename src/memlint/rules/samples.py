"""The usual shape of a Hugging Face training script, for the rules' VALID/INVALID samples.

Samples are real scripts that go through the same extraction as a user's file; this
builder only saves each rule from spelling out the same twenty lines.
"""

from __future__ import annotations


def script(
    model: str = "meta-llama/Llama-3.2-1B",
    *,
    batch: int = 1,
    max_length: int = 2048,
    padding: str | None = None,       # tokenizer padding= ("max_length", "longest") or None
    recompute: bool = True,
    optim: str = "adamw_torch",
    precision: str = "bf16=True",
    dtype: str = "torch.bfloat16",
    attn: str = "sdpa",
    bnb: str | None = None,           # BitsAndBytesConfig(...) arguments, e.g. "load_in_4bit=True"
    model_kw: str = "",               # extra from_pretrained keywords, e.g. "load_in_4bit=True"
    lora: str | None = None,          # LoraConfig(...) arguments, e.g. "r=16, target_modules='all-linear'"
    args: str = "",                   # extra TrainingArguments keywords
) -> str:
    imports = "from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments"
    lines = ["import torch", "from datasets import load_dataset", imports]
    if bnb is not None:
        lines.append("from transformers import BitsAndBytesConfig")
    if lora is not None:
        lines.append("from peft import LoraConfig, get_peft_model")
    lines += ["", f'MODEL_ID = "{model}"', "tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)"]
    kw = f"torch_dtype={dtype}, attn_implementation=\"{attn}\""
    if bnb is not None:
        lines.append(f"bnb_config = BitsAndBytesConfig({bnb})")
        kw += ", quantization_config=bnb_config"
    if model_kw:
        kw += ", " + model_kw
    lines.append(f"model = AutoModelForCausalLM.from_pretrained(MODEL_ID, {kw})")
    if lora is not None:
        lines.append(f"model = get_peft_model(model, LoraConfig({lora}, task_type=\"CAUSAL_LM\"))")
    pad = f", padding=\"{padding}\"" if padding else ""
    lines += [
        "",
        "",
        "def tokenize(batch):",
        f"    return tokenizer(batch[\"text\"], truncation=True, max_length={max_length}{pad})",
        "",
        "",
        "dataset = load_dataset(\"imdb\", split=\"train\").map(tokenize, batched=True)",
        "training_args = TrainingArguments(",
        "    output_dir=\"out\",",
        f"    per_device_train_batch_size={batch},",
        f"    gradient_checkpointing={recompute},",
        f"    optim=\"{optim}\",",
        f"    {precision},",
    ]
    lines += [f"    {a.strip()}," for a in args.split(";") if a.strip()]
    lines += [
        ")",
        "collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)",
        "trainer = Trainer(model=model, args=training_args, train_dataset=dataset, data_collator=collator)",
        "trainer.train()",
        "",
    ]
    return "\n".join(lines)
