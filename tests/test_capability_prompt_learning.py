"""peft's prompt-learning methods (PrefixTuningConfig, PromptTuningConfig, PromptEncoderConfig): the plan names the
method and no LoRA fields; the estimate sizes a frozen base with adapters standing in for the virtual tokens, and
says so."""

from __future__ import annotations

import pytest

from checkouts import write_checkout
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_targets
from memlint.extract.launch import command_target
from memlint.plan import Value

SCRIPT = """
from transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments
from peft import {cls}, TaskType, get_peft_model
model = AutoModelForSeq2SeqLM.from_pretrained("google/flan-t5-base")
model = get_peft_model(model, {cls}(task_type=TaskType.SEQ_2_SEQ_LM, num_virtual_tokens=20))
args = Seq2SeqTrainingArguments("out", per_device_train_batch_size=8)
Seq2SeqTrainer(model=model, args=args, train_dataset=None).train()
"""


@pytest.mark.parametrize("cls, method", [("PrefixTuningConfig", "prefix-tuning"), ("PromptTuningConfig", "prompt-tuning"),
                                         ("PromptEncoderConfig", "p-tuning")])
def test_prompt_learning_is_named_and_not_estimated(tmp_path, monkeypatch, cls, method):
    write_checkout(tmp_path, {"train.py": SCRIPT.format(cls=cls)}, dedent=True, git=True)
    monkeypatch.chdir(tmp_path)
    plan = extract_targets([command_target(["python", "train.py"])])[0]
    assert plan.fields["method"].value == method
    assert not plan.get("lora_r").known
    planned = setup_from_plan(plan.with_values(max_length=Value(512, "assumed")))
    assert planned.setup is not None and planned.setup.method == "lora"
    assert any(n.startswith(f"{method}: estimated as a frozen base") for n in planned.notes)
