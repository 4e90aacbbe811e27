"""Smaller reading capabilities found by the failure surveys of fresh repositories (synthetic scripts written from
each pattern): python-fire's list literal on the command line, an unannotated class attribute of a config dataclass
read on an instance, TRL's pre-0.9 DPOTrainer(model, ref_model, args=TrainingArguments(...)), a length field of a
TrainingArguments subclass that nothing reads, and the versions a setup shell script installs."""

from __future__ import annotations

from functools import partial

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)


def test_a_fire_list_literal_of_bare_names_is_a_list_of_strings(tmp_path, monkeypatch):
    script = """
        from typing import List
        import fire
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        def train(base_model: str = "Qwen/Qwen2.5-0.5B", lora_target_modules: List[str] = ["q_proj", "v_proj"]):
            model = AutoModelForCausalLM.from_pretrained(base_model)
            model = get_peft_model(model, LoraConfig(r=16, target_modules=lora_target_modules))
            Trainer(model=model, args=TrainingArguments(output_dir="o")).train()

        if __name__ == "__main__":
            fire.Fire(train)
    """
    root = _write(tmp_path, {"finetune.py": script})
    plan = _command(root, monkeypatch, "python", "finetune.py", "--lora_target_modules", "[q_proj,k_proj,v_proj,o_proj]")
    assert plan.fields["lora_targets"].value == ["q_proj", "k_proj", "v_proj", "o_proj"]
    plan = _command(root, monkeypatch, "python", "finetune.py", "--lora_target_modules", "['q_proj', 'o_proj']")
    assert plan.fields["lora_targets"].value == ["q_proj", "o_proj"]


def test_an_unannotated_class_attribute_of_a_config_dataclass_is_read_on_its_instance(tmp_path, monkeypatch):
    script = """
        from dataclasses import dataclass
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
        from transformers import AutoModelForCausalLM

        @dataclass
        class FsdpConfig:
            sharding_strategy = ShardingStrategy.{STRATEGY}
            pure_bf16: bool = True

        cfg = FsdpConfig()
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        model = FSDP(model, sharding_strategy=cfg.sharding_strategy, device_id=0)
        opt = torch.optim.AdamW(model.parameters())
        for batch in loader:
            model(**batch).loss.backward()
            opt.step()
    """
    root = _write(tmp_path, {"train.py": script.replace("{STRATEGY}", "FULL_SHARD")})
    assert _command(root, monkeypatch, "python", "train.py").fields["distributed"].value == "fsdp"
    (tmp_path / "train.py").write_text((tmp_path / "train.py").read_text().replace(
        "    sharding_strategy = ShardingStrategy.FULL_SHARD\n", ""))
    assert _command(root, monkeypatch, "python", "train.py").fields["distributed"].value is None


def test_a_pre_0_9_dpo_trainer_given_a_reference_model_positionally(tmp_path, monkeypatch):
    script = """
        import torch
        from transformers import AutoModelForCausalLM, TrainingArguments
        from trl import DPOTrainer
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
        model_ref = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
        args = TrainingArguments(output_dir="o", per_device_train_batch_size=2, bf16=True)
        DPOTrainer(model, model_ref, args=args, beta=0.1, train_dataset=ds, tokenizer=tok, max_length=1024{PRE}).train()
    """
    for pre, want in (("", "model"), (", precompute_ref_log_probs=True", "precomputed")):
        root = _write(tmp_path / str(bool(pre)), {"requirements.txt": "trl==0.8.6\n",
                                                   "dpo.py": script.replace("{PRE}", pre)})
        plan = _command(root, monkeypatch, "python", "dpo.py")
        assert _get(plan, "trainer", "ref_model") == {"trainer": "DPOTrainer", "ref_model": want}, pre


def test_a_length_field_nothing_reads_is_no_cap(tmp_path, monkeypatch):
    """A TrainingArguments subclass declaring max_seq_length, given to transformers' Trainer (which reads no such
    field) and never read by the script: the length stays the data's; read by the script, it counts."""
    script = """
        from dataclasses import dataclass, field
        from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

        @dataclass
        class MyArgs(TrainingArguments):
            max_seq_length: int = field(default=32768)

        (args,) = HfArgumentParser(MyArgs).parse_args_into_dataclasses()
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        {USE}
        Trainer(model=model, args=args, train_dataset=None).train()
    """
    root = _write(tmp_path / "unused", {"train.py": script.replace("{USE}", "pass")})
    assert _command(root, monkeypatch, "python", "train.py", "--output_dir", "o").fields["max_length"].value is None
    # the checkout's own trainer subclass may read it (a custom loss cutting at args.max_seq_length): it counts
    own = script.replace("{USE}", "pass").replace("Trainer(model=", "MyTrainer(model=").replace(
        "(args,) =", "class MyTrainer(Trainer):\n            def compute_loss(self, model, inputs, **kw):\n"
                     "                return model(**inputs).loss\n\n        (args,) =")
    root = _write(tmp_path / "own", {"train.py": own})
    assert _command(root, monkeypatch, "python", "train.py", "--output_dir", "o").fields["max_length"].value == 32768


def test_a_setup_shell_script_pins_the_versions_it_installs(tmp_path):
    from memlint.library.pins import checkout_pins

    _write(tmp_path, {"train.py": "import transformers\n",
                      "setup.sh": "conda create -n x python=3.10 -y\n"
                                  "pip install transformers==4.34.0 'fschat[train]==0.2.32'\n",
                      "requirements.txt": "peft==0.6.0\n"})
    pins = {p.package: (p.version, p.source.rsplit("/", 1)[-1]) for p in checkout_pins(tmp_path / "train.py")}
    assert pins["transformers"] == ("4.34.0", "setup.sh:2")
    assert pins["peft"] == ("0.6.0", "requirements.txt:1")  # a pin file still comes first
    (tmp_path / "setup.sh").rename(tmp_path / "run_train.sh")  # a launcher is no setup script
    assert "transformers" not in {p.package for p in checkout_pins(tmp_path / "train.py")}


def test_a_setup_script_below_the_repository_hides_none_of_its_pins_and_comments_install_nothing(tmp_path):
    from memlint.library.pins import checkout_pins

    _write(tmp_path, {"requirements.txt": "trl==0.8.6\ntransformers==4.38.2\n",
                      "scripts/install_deps.sh": "pip install deepspeed==0.14.0\n# pip install trl==0.7.4  # old API\n",
                      "scripts/train.py": "import trl\n"}, git=True)
    pins = {p.package: p.version for p in checkout_pins(tmp_path / "scripts/train.py")}
    assert (pins.get("trl"), pins.get("transformers")) == ("0.8.6", "4.38.2")
    (tmp_path / "requirements.txt").unlink()
    pins = {p.package: p.version for p in checkout_pins(tmp_path / "scripts/train.py")}
    assert pins.get("deepspeed") == "0.14.0" and "trl" not in pins  # the setup script, its comment installing nothing


def test_peft_kbit_preparation_turns_checkpointing_on_for_a_kbit_model_only(tmp_path, monkeypatch):
    """prepare_model_for_kbit_training checkpoints a model loaded in 4/8 bits (peft: `if (loaded_in_kbit or
    is_gptq_quantized ...) and use_gradient_checkpointing`), or one the script marks so itself; not a 16-bit one."""
    script = """
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B"{Q})
        {MARK}
        model = prepare_model_for_kbit_training(model)
        model = get_peft_model(model, LoraConfig(r=8))
        Trainer(model=model, args=TrainingArguments("o")).train()
    """
    cases = {"16-bit": ("", "pass", False),
             "4-bit": (", quantization_config=BitsAndBytesConfig(load_in_4bit=True)", "pass", True),
             "marked": ("", "model.is_loaded_in_8bit = True", True)}
    for name, (q, mark, want) in cases.items():
        root = _write(tmp_path / name, {"t.py": script.replace("{Q}", q).replace("{MARK}", mark)})
        assert _command(root, monkeypatch, "python", "t.py").fields["gradient_checkpointing"].value is want, name


def test_a_checkpoint_saved_in_4_bit_is_loaded_quantized_without_a_config(tmp_path, monkeypatch):
    script = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        from peft import LoraConfig, get_peft_model
        model = AutoModelForCausalLM.from_pretrained("{ID}", device_map={"": 0})
        model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
        Trainer(model=model, args=TrainingArguments("o")).train()
    """
    for mid, want in (("unsloth/llama-3-8b-Instruct-bnb-4bit", {"method": "qlora", "quant_bits": 4, "quant_type": "nf4"}),
                      ("meta-llama/Meta-Llama-3-8B-Instruct", {"method": "lora", "quant_bits": None})):
        root = _write(tmp_path / mid.split("/")[0], {"t.py": script.replace("{ID}", mid)})
        plan = _command(root, monkeypatch, "python", "t.py")
        assert _get(plan, *want) == want, mid


def test_unsloths_vision_collator_truncates_at_the_models_max_seq_length(tmp_path, monkeypatch):
    script = """
        from unsloth import FastVisionModel
        from unsloth.trainer import UnslothVisionDataCollator
        from trl import SFTTrainer, SFTConfig

        model, tokenizer = FastVisionModel.from_pretrained("unsloth/Qwen2.5-VL-7B-Instruct", load_in_4bit=True,
                                                           max_seq_length=4096)
        model = FastVisionModel.get_peft_model(model, r=16, lora_alpha=16)
        SFTTrainer(model=model, tokenizer=tokenizer, train_dataset=[],
                   data_collator=UnslothVisionDataCollator(model, tokenizer{CAP}),
                   args=SFTConfig(per_device_train_batch_size=2, output_dir="o", dataset_text_field="",
                                  dataset_kwargs={"skip_prepare_dataset": True})).train()
    """
    for cap, want in (("", 4096), (", max_seq_length=1024", 1024)):
        root = _write(tmp_path / str(want), {"train.py": script.replace("{CAP}", cap)})
        plan = _command(root, monkeypatch, "python", "train.py")
        assert _get(plan, "max_length", "padding") == {"max_length": want, "padding": "longest"}, cap


def test_unsloths_vision_collator_falls_back_to_the_loaders_default_length(tmp_path, monkeypatch):
    script = """
        from unsloth import FastVisionModel
        from unsloth.trainer import UnslothVisionDataCollator
        from trl import SFTTrainer, SFTConfig

        model, tokenizer = FastVisionModel.from_pretrained("unsloth/Qwen2.5-VL-7B-Instruct", load_in_4bit=True)
        SFTTrainer(model=model, tokenizer=tokenizer, train_dataset=[],
                   data_collator=UnslothVisionDataCollator(model, tokenizer, max_seq_length=None),
                   args=SFTConfig(per_device_train_batch_size=2, output_dir="o", dataset_text_field="",
                                  dataset_kwargs={"skip_prepare_dataset": True})).train()
    """
    root = _write(tmp_path, {"train.py": script})
    assert _command(root, monkeypatch, "python", "train.py").fields["max_length"].value == 2048



def test_a_bnb_4bit_checkpoint_loads_quantized_whatever_the_load_flags_say(tmp_path, monkeypatch):
    """A checkpoint saved in 4-bit by bitsandbytes (its folder in the Hub cache, `.../models--unsloth--X-bnb-4bit/
    snapshots/<hash>`) loads quantized from its config.json: `quantization_config=None` and `load_in_4bit=False` ask
    for no quantization but do not undo the checkpoint's own."""
    script = """
        import argparse
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments
        from peft import LoraConfig, get_peft_model
        p = argparse.ArgumentParser()
        p.add_argument("--load_in_4bit", type=lambda s: s == "True", default=False)
        args = p.parse_args()
        quant = BitsAndBytesConfig(load_in_4bit=True) if args.load_in_4bit else None
        model = AutoModelForCausalLM.from_pretrained("{ID}", quantization_config=quant)
        model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
        Trainer(model=model, args=TrainingArguments("o")).train()
    """
    path = "/mnt/hub/models--unsloth--Meta-Llama-3.1-8B-Instruct-bnb-4bit/snapshots/0123abc"
    root = _write(tmp_path, {"t.py": script.replace("{ID}", path)})
    plan = _command(root, monkeypatch, "python", "t.py", "--load_in_4bit", "False")
    assert _get(plan, "method", "quant_bits", "quant_type") == {"method": "qlora", "quant_bits": 4, "quant_type": "nf4"}
    # a folder under one named so is something else (a model merged back to 16 bits)
    root = _write(tmp_path / "merged", {"t.py": script.replace("{ID}", "outputs/Qwen2.5-7B-bnb-4bit/merged_16bit")})
    assert _command(root, monkeypatch, "python", "t.py").value("quant_bits") is None
