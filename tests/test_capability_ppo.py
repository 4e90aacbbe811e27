"""TRL's PPOTrainer (the Trainer-based one, trl 0.12 and later): its plan read from the trainer's keywords and PPOConfig's
own defaults by version, with no estimate (its step is not modelled); TRL's older PPOTrainer, another class of the
same name stepped by the script's own `.step()`, is not read as it."""

from __future__ import annotations

import pytest

from checkouts import write_checkout
from memlint.errors import MemlintError
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_targets
from memlint.extract.launch import command_target
from memlint.library.versions import pinned_versions
from memlint.plan import Value

NEW_API = """
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
from trl import PPOConfig, PPOTrainer
tok = AutoTokenizer.from_pretrained("Qwen/Qwen2-0.5B-Instruct")
policy = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2-0.5B-Instruct")
value = AutoModelForSequenceClassification.from_pretrained("Qwen/Qwen2-0.5B-Instruct", num_labels=1)
reward = AutoModelForSequenceClassification.from_pretrained("Qwen/Qwen2-0.5B-Instruct", num_labels=1)
args = PPOConfig(output_dir="out", per_device_train_batch_size=4, gradient_accumulation_steps=2)
trainer = PPOTrainer({keywords}, train_dataset=None, peft_config=LoraConfig(r=16))
trainer.train()
"""
KEYWORDS = {"new": "args=args, processing_class=tok, model=policy, ref_model=None, reward_model=reward, value_model=value",
            "0.12": "config=args, processing_class=tok, policy=policy, ref_policy=None, reward_model=reward, value_model=value",
            "positional": "args, tok, policy, None, reward, value_model=value"}
OLD_API = """
from transformers import AutoTokenizer
from trl import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer
config = PPOConfig(model_name="gpt2", batch_size=16, mini_batch_size=4)
model = AutoModelForCausalLMWithValueHead.from_pretrained(config.model_name)
tok = AutoTokenizer.from_pretrained(config.model_name)
ppo_trainer = PPOTrainer(config, model, None, tok)
for batch in ppo_trainer.dataloader:
    stats = ppo_trainer.step(batch["query"], batch["response"], batch["reward"])
"""


def _plan(tmp_path, monkeypatch, text: str, trl: str):
    write_checkout(tmp_path, {"train.py": text}, dedent=True, git=True)
    monkeypatch.chdir(tmp_path)
    with pinned_versions({"trl": trl}):
        return extract_targets([command_target(["python", "train.py"])])[0]


@pytest.mark.parametrize("how", sorted(KEYWORDS))
def test_ppo_trainer_reads_its_keywords_and_peft_config(tmp_path, monkeypatch, how):
    plan = _plan(tmp_path, monkeypatch, NEW_API.format(keywords=KEYWORDS[how]), "0.17.0")
    got = {k: plan.fields[k].value for k in ("trainer", "model_id", "method", "lora_r", "per_device_batch", "grad_accum",
                                             "padding", "packing")}
    assert got == {"trainer": "PPOTrainer", "model_id": "Qwen/Qwen2-0.5B-Instruct", "method": "lora", "lora_r": 16,
                   "per_device_batch": 4, "grad_accum": 2, "padding": "longest", "packing": False}
    assert not plan.fields["max_length"].known
    assert "does not truncate prompts" in plan.fields["max_length"].chain[0] and "response_length 53" in plan.fields["max_length"].chain[0]


@pytest.mark.parametrize("trl, bf16, checkpointing", [("0.17.0", "fp32", False), ("0.19.0", "amp-bf16", False),
                                                      ("0.22.2", "amp-bf16", True)])
def test_ppo_config_defaults_by_version(tmp_path, monkeypatch, trl, bf16, checkpointing):
    plan = _plan(tmp_path, monkeypatch, NEW_API.format(keywords=KEYWORDS["new"]), trl)
    assert (plan.fields["precision"].value, plan.fields["gradient_checkpointing"].value) == (bf16, checkpointing)


def test_ppo_has_no_estimate_and_says_why(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, NEW_API.format(keywords=KEYWORDS["new"]), "0.17.0")
    with pytest.raises(MemlintError, match="PPO's step .* is not modelled"):
        setup_from_plan(plan.with_values(max_length=Value(512, "assumed")))


@pytest.mark.parametrize("trl", ["0.11.4", None])  # pinned before 0.12, or unpinned: the call's own keywords tell
def test_the_older_ppo_trainer_is_not_read_as_the_trainer_based_one(tmp_path, monkeypatch, trl):
    plan = _plan(tmp_path, monkeypatch, OLD_API, trl)
    assert plan.fields["trainer"].value != "PPOTrainer"
    assert plan.fields["per_device_batch"].value != 8  # not TrainingArguments' default for a config without the field


def test_ppo_configs_default_sft_model_path(tmp_path, monkeypatch):
    text = NEW_API.format(keywords=KEYWORDS["new"]).replace(
        'policy = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2-0.5B-Instruct")',
        "policy = AutoModelForCausalLM.from_pretrained(args.sft_model_path)")
    text = text.replace("args = PPOConfig(", "args = PPOConfig(").replace("tok = AutoTokenizer", "args = PPOConfig(output_dir='out', per_device_train_batch_size=4, gradient_accumulation_steps=2)\ntok = AutoTokenizer", 1)
    plan = _plan(tmp_path, monkeypatch, text, "0.17.0")
    assert plan.fields["model_id"].value == "EleutherAI/pythia-160m"
