"""Starred unpacking (`engine, *_ = deepspeed.initialize(...)`, `first, *rest = xs`): the targets before the star take
the first items, the starred one the middle as a list, those after it the last items."""

from __future__ import annotations

from checkouts import field_values, write_checkout
from memlint.extract import extract_targets
from memlint.extract.launch import command_target


def _plan(tmp_path, monkeypatch, text: str, *argv: str):
    write_checkout(tmp_path, {"train.py": text}, dedent=True, git=True)
    monkeypatch.chdir(tmp_path)
    return extract_targets([command_target(["python", "train.py", *argv])])[0]


def test_starred_targets_take_the_first_middle_and_last_items(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, """
        a, *b, c = (1, 2, 3, 4)
        first, *rest = [5, 6]
        *init, last = (7, 8, 9)
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        n = a + c + first + last + len(b) + len(rest) + len(init)
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=n, gradient_accumulation_steps=b[1])).train()
        """)
    assert field_values(plan, "per_device_batch", "grad_accum") == {"per_device_batch": 24, "grad_accum": 3}


def test_a_deepspeed_engine_unpacked_with_a_star_is_the_engine(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, """
        import argparse, deepspeed
        from transformers import AutoModelForCausalLM
        class Engine:
            def __init__(self, name, cfg):
                m = AutoModelForCausalLM.from_pretrained(name)
                self.actor, *_ = deepspeed.initialize(model=m, config=cfg)
        p = argparse.ArgumentParser(); p.add_argument("--gc", action="store_true"); args = p.parse_args()
        eng = Engine("gpt2", {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}})
        if args.gc:
            eng.actor.gradient_checkpointing_enable()
        for batch in []:
            loss = eng.actor(**batch).loss
            eng.actor.backward(loss); eng.actor.step()
        """, "--gc")
    assert field_values(plan, "gradient_checkpointing", "trainer", "per_device_batch", "distributed") == {
        "gradient_checkpointing": True, "trainer": "deepspeed-engine", "per_device_batch": 4, "distributed": "zero2"}


def test_too_few_items_for_the_targets_are_unknown(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, """
        a, b, *c = (1,)
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=a)).train()
        """)
    assert not plan.fields["per_device_batch"].known


def test_a_list_grown_in_a_loop_leaves_the_starred_length_and_the_tail_unknown(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, """
        import sys
        xs = [3]
        for a in range(int(sys.argv[1])):
            xs.append(5)
        first, *rest, last = xs
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=len(rest), gradient_accumulation_steps=last)).train()
        """)
    assert not plan.fields["per_device_batch"].known and not plan.fields["grad_accum"].known
