"""A checkout's preference trainer (SPIN, SimPO: copies of TRL's DPOTrainer) tokenizes the prompt alone, capped at
`max_length=self.max_prompt_length`, and builds the sequence from prompt and response up to its max_length: a length
named for one part (library.api.part_length_words) is not the sequence's. And such a trainer's encoder-decoder
branches (`if model.config.is_encoder_decoder:`) never run for a ...ForCausalLM model, which is decoder-only.
Synthetic checkouts written from the pattern."""

from __future__ import annotations

from functools import partial

from checkouts import plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)


def test_a_causal_lm_is_decoder_only(tmp_path, monkeypatch):
    script = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        bs = 16 if model.config.is_encoder_decoder else 2
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=bs)).train()
    """
    plan = _command(_write(tmp_path, {"train.py": script}), monkeypatch, "python", "train.py")
    assert plan.value("per_device_batch") == 2 and not plan.fields["per_device_batch"].candidates


def test_a_tokenizer_call_capped_at_the_prompts_length_is_not_the_sequences(tmp_path, monkeypatch):
    script = """
        import argparse
        from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments
        p = argparse.ArgumentParser()
        p.add_argument("--max_prompt_length", type=int, default=128)
        p.add_argument("--max_length", type=int, default=1024)
        args = p.parse_args()
        tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")

        def encode(ex):
            prompt = tok(ex["prompt"], truncation=True, max_length=args.max_prompt_length)["input_ids"]
            response = tok(ex["response"], add_special_tokens=False)["input_ids"]
            ids = (prompt + response)[:args.max_length]
            return {"input_ids": ids, "labels": ids}

        ds = load_dataset("json", data_files="d.json")["train"].map(encode)
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        Trainer(model=model, train_dataset=ds, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
    """
    plan = _command(_write(tmp_path, {"train.py": script}), monkeypatch, "python", "train.py")
    assert plan.value("max_length") == 1024


def test_trls_dpo_collator_pads_to_the_longest(tmp_path, monkeypatch):
    # SimPO's trainer (a copy of TRL's DPOTrainer on transformers' Trainer) pads with TRL's DPODataCollatorWithPadding
    script = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        from trl.trainer.utils import DPODataCollatorWithPadding

        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2),
                data_collator=DPODataCollatorWithPadding(pad_token_id=0, label_pad_token_id=-100)).train()
    """
    plan = _command(_write(tmp_path, {"train.py": script, "requirements.txt": "trl==0.11.4\n"}), monkeypatch,
                    "python", "train.py")
    assert plan.value("padding") == "longest"


def test_a_trainer_keyword_given_none_takes_the_trainers_own_fallback(tmp_path, monkeypatch):
    # TRL's DPOTrainer(max_length=None) before 0.12 warned and fell back to 512 (dpo_trainer.py, v0.5-v0.11)
    script = """
        from dataclasses import dataclass, field
        from typing import Optional
        from transformers import AutoModelForCausalLM, HfArgumentParser, TrainingArguments
        from trl import DPOTrainer

        @dataclass
        class Args(TrainingArguments):
            max_length: Optional[int] = field(default=None)

        (args,) = HfArgumentParser((Args,)).parse_args_into_dataclasses()
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        DPOTrainer(model, None, args=args, train_dataset=None, max_length=args.max_length).train()
    """
    for pin, want in (("trl==0.8.6", 512), ("trl==0.12.1", None)):
        root = _write(tmp_path / pin, {"train.py": script, "requirements.txt": pin + "\n"})
        plan = _command(root, monkeypatch, "python", "train.py", "--output_dir", "o")
        assert plan.value("max_length") == want, pin
    # the keyword None leaves the arguments' own value (TRL sets args.max_length only from a keyword not None)
    root = _write(tmp_path / "given", {"train.py": script, "requirements.txt": "trl==0.8.6\n"})
    plan = _command(root, monkeypatch, "python", "train.py", "--output_dir", "o", "--max_length", "2048")
    assert plan.value("max_length") == 2048


def test_max_length_without_truncation_caps_nothing(tmp_path, monkeypatch):
    # tokenizer(text, truncation=False, max_length=8000, return_overflowing_tokens=True): no truncation, so the longest
    # sample decides; with truncation=True the same call caps at 8000
    script = """
        from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments
        tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
        def enc(ex):
            return tok(ex["text"], truncation=TRUNC, max_length=8000, return_overflowing_tokens=True)
        ds = load_dataset("json", data_files="d.json")["train"].map(enc)
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        Trainer(model=model, train_dataset=ds, args=TrainingArguments("o", per_device_train_batch_size=1)).train()
    """
    for trunc, want in (("False", None), ("True", 8000)):
        root = _write(tmp_path / trunc, {"train.py": script.replace("TRUNC", trunc)})
        assert _command(root, monkeypatch, "python", "train.py").value("max_length") == want, trunc
