"""Names set together in one branch of a test memlint cannot decide stay together: alignment-handbook's DPO script
passes the model as its id with the loading keywords, or (for an adapter checkpoint) as a loaded PeftModel with the
keywords set to None. Read name by name, the id would meet None and load in fp32 without its quantization; a call
given both values is read once per branch, each with that branch's values. Synthetic checkouts from the pattern."""

from __future__ import annotations

from functools import partial

from checkouts import plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_DPO = """
    import os
    import torch
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments
    from trl import DPOTrainer

    def is_adapter_model(path):
        return "adapter_config.json" in os.listdir(path)

    model = "Qwen/Qwen2.5-7B"
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    model_kwargs = dict(torch_dtype=torch.bfloat16, quantization_config=quant)
    if is_adapter_model(model):
        base = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B", **model_kwargs)
        model = PeftModel.from_pretrained(base, model)
        model_kwargs = None
    args = TrainingArguments("o", per_device_train_batch_size=2, bf16=True)
    trainer = DPOTrainer(model, None, model_init_kwargs=model_kwargs, args=args, train_dataset=None,
                         peft_config=LoraConfig(r=16), max_length=1024, max_prompt_length=512)
    trainer.train()
"""


def test_a_model_and_its_loading_keywords_set_in_one_branch_are_read_together(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _DPO, "requirements.txt": "trl==0.8.6\ntransformers==4.40.0\npeft==0.10.0\n"})
    plan = _command(root, monkeypatch, "python", "train.py")
    got = {k: plan.value(k) for k in ("model_id", "method", "quant_bits", "torch_dtype")}
    assert got == {"model_id": "Qwen/Qwen2.5-7B", "method": "qlora", "quant_bits": 4, "torch_dtype": "bf16"}
    assert not any("more than one trainer" in n for n in plan.notes)  # one trainer, read once


def test_a_name_the_test_does_not_touch_keeps_every_value(tmp_path, monkeypatch):
    # `model` holds two values before the `if`; only `args` is set in its branches: both values of each stay
    script = """
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        base = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        model = get_peft_model(base, LoraConfig(r=8, target_modules=["q_proj"])) if input() else base
        if input():
            args = TrainingArguments("o", per_device_train_batch_size=2)
        else:
            args = TrainingArguments("o", per_device_train_batch_size=4)
        Trainer(model=model, args=args).train()
    """
    plan = _command(_write(tmp_path, {"train.py": script}), monkeypatch, "python", "train.py")
    assert set(plan.fields["per_device_batch"].candidates) == {2, 4}
    assert not any("more than one trainer" in n for n in plan.notes)


def test_names_of_different_tests_still_combine_freely(tmp_path, monkeypatch):
    # two independent undecided tests: each name keeps every value (no branch ties them)
    script = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        bs = 2
        if input():
            bs = 8
        accum = 4
        if input():
            accum = 1
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=bs,
                                                    gradient_accumulation_steps=accum)).train()
    """
    plan = _command(_write(tmp_path, {"train.py": script}), monkeypatch, "python", "train.py")
    assert set(plan.fields["per_device_batch"].candidates) == {2, 8}
    assert set(plan.fields["grad_accum"].candidates) == {1, 4}


def test_a_deepspeed_dict_item_written_in_both_branches_reads_its_last_write(tmp_path, monkeypatch):
    # OpenRLHF's get_ds_train_config: `if dynamic: ds["train_micro_batch_size_per_gpu"] = 1 else: ... = micro`; the
    # DeepSpeed dict's reader takes one value per key, the last written (as a dict item kept its last write before)
    script = """
        import argparse, deepspeed
        from transformers import AutoModelForCausalLM
        p = argparse.ArgumentParser()
        p.add_argument("--micro", type=int, default=2)
        p.add_argument("--dynamic", action="store_true")
        args = p.parse_args()
        ds = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}
        if args.dynamic or input():
            ds["train_micro_batch_size_per_gpu"] = 1
        else:
            ds["train_micro_batch_size_per_gpu"] = args.micro
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
        for batch in loader:
            loss = engine(**batch).loss
            engine.backward(loss)
            engine.step()
    """
    plan = _command(_write(tmp_path, {"train.py": script}), monkeypatch, "python", "train.py", "--micro", "4")
    assert (plan.value("per_device_batch"), plan.value("distributed")) == (4, "zero2")
    # written on one branch only: still its last write in the text (not the value before the test)
    one = script.replace('    ds["train_micro_batch_size_per_gpu"] = 1\n', '    ds["zero_optimization"] = {"stage": 3}\n')
    plan = _command(_write(tmp_path / "one", {"train.py": one}), monkeypatch, "python", "train.py", "--micro", "4")
    assert plan.value("distributed") == "zero3"
