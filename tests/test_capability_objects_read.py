"""Values scripts get from objects: a `@property` of a config class is its getter's value, a pydantic model's
`.dict()` / `.model_dump()` its fields, a `...Trainer` of an installed package memlint cannot read is a subclass of
the trainer its library arguments belong to, and `apply_chat_template(..., tokenize=False)` in a dataset map makes
text, not token ids (the trainer still tokenizes and truncates it). Synthetic scripts written from the patterns."""

from __future__ import annotations

from functools import partial

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)


def test_a_property_of_a_config_class_is_its_getters_value(tmp_path, monkeypatch):
    script = """
        from dataclasses import dataclass
        from transformers import AutoModelForCausalLM, TrainingArguments, Trainer

        @dataclass
        class LLM:
            micro_batch_size: int = 4
            batch_size: int = 128

            @property
            def gradient_accumulation_steps(self):
                return self.batch_size // self.micro_batch_size

        class Plain:
            def __init__(self, seq):
                self.seq = seq

            @property
            def doubled(self):
                return self.seq * 2

        cfg, p = LLM(), Plain(256)
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        ids = tok("x", truncation=True, max_length=p.doubled, padding="max_length")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=cfg.micro_batch_size,
                gradient_accumulation_steps=cfg.gradient_accumulation_steps)).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "per_device_batch", "grad_accum", "max_length") == {
        "per_device_batch": 4, "grad_accum": 32, "max_length": 512}


def test_a_pydantic_models_dict_is_its_fields(tmp_path, monkeypatch):
    for method in ("dict", "model_dump"):
        script = f"""
            from pydantic import BaseModel
            from transformers import AutoModelForCausalLM, TrainingArguments, Trainer
            from peft import LoraConfig, get_peft_model

            class LoRa(BaseModel):
                r: int = 8
                lora_alpha: int = 16
                target_modules: list = ["q_proj", "v_proj"]

            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
            model = get_peft_model(model, LoraConfig(**LoRa(r=32).{method}()))
            Trainer(model=model, args=TrainingArguments("o")).train()
        """
        root = _write(tmp_path / method, {"train.py": script})
        plan = _command(root, monkeypatch, "python", "train.py")
        assert _get(plan, "method", "lora_r", "lora_alpha") == {"method": "lora", "lora_r": 32, "lora_alpha": 16}, method


def test_an_installed_packages_trainer_given_training_arguments_is_a_trainer(tmp_path, monkeypatch):
    script = """
        from transformers import AutoModelForCausalLM, TrainingArguments, HfArgumentParser
        from llava.train.llava_trainer import LLaVATrainer
        (targs,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        LLaVATrainer(model=model, args=targs).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py", "--output_dir", "o", "--per_device_train_batch_size",
                    "4", "--gradient_accumulation_steps", "8", "--fp16", "True")
    assert _get(plan, "trainer", "per_device_batch", "grad_accum", "precision") == {
        "trainer": "Trainer", "per_device_batch": 4, "grad_accum": 8, "precision": "amp-fp16"}
    assert "LLaVATrainer" in " ".join(plan.fields["trainer"].chain)
    # a class of another kind (no training arguments given) stays unknown
    (tmp_path / "train.py").write_text(script.replace("args=targs", "config=targs").lstrip("\n").replace("    ", ""))
    assert _command(root, monkeypatch, "python", "train.py", "--output_dir", "o").fields["trainer"].value is None


def test_a_chat_template_rendered_as_text_leaves_the_trainer_to_truncate(tmp_path, monkeypatch):
    script = """
        from datasets import load_dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments
        from trl import SFTTrainer

        tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")

        def fmt(row):
            return {"text": tok.apply_chat_template(row["messages"], tokenize={TOKENIZE})}

        ds = load_dataset("HuggingFaceH4/ultrachat_200k", split="train_sft").map(fmt)
        SFTTrainer(model=model, train_dataset=ds, dataset_text_field="text", max_seq_length=2024,
                   tokenizer=tok, args=TrainingArguments("o", per_device_train_batch_size=8)).train()
    """
    root = _write(tmp_path, {"requirements.txt": "trl==0.8.6\n", "nb.py": script.replace("{TOKENIZE}", "False")})
    assert _command(root, monkeypatch, "python", "nb.py").fields["max_length"].value == 2024
    # tokenized by the script (tokenize=True): trl 0.8.6 takes the rows as they are, untruncated
    (tmp_path / "nb.py").write_text((tmp_path / "nb.py").read_text().replace("tokenize=False", "tokenize=True"))
    assert _command(root, monkeypatch, "python", "nb.py").fields["max_length"].value is None


def test_a_pydantic_dump_keeps_to_its_include_and_exclude(tmp_path, monkeypatch):
    script = """
        from pydantic import BaseModel
        from transformers import AutoModelForCausalLM, TrainingArguments, Trainer
        from peft import LoraConfig, get_peft_model

        class LoRa(BaseModel):
            r: int = 8
            lora_alpha: int = 16
            note: str = "x"

        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        model = get_peft_model(model, LoraConfig(**LoRa(r=32).model_dump({KW})))
        Trainer(model=model, args=TrainingArguments("o")).train()
    """
    cases = {'exclude={"note"}': 32, 'include={"lora_alpha"}': 8, "by_alias=True": None}
    for kw, r in cases.items():
        root = _write(tmp_path / str(abs(hash(kw))), {"train.py": script.replace("{KW}", kw)})
        got = _command(root, monkeypatch, "python", "train.py").fields["lora_r"]
        assert (got.value if got.source != "unknown" else None) == r, kw



def test_adapters_on_a_part_of_the_model_make_it_a_lora_run(tmp_path, monkeypatch):
    """`self.language_model = get_peft_model(self.language_model, cfg)` in the model class's own method (a VLM's
    wrap_llm_lora), or the same in the script: the model the run trains carries the adapters."""
    in_method = """
        import torch, transformers
        from peft import LoraConfig, get_peft_model
        from transformers import PreTrainedModel

        class ChatModel(PreTrainedModel):
            def wrap_llm_lora(self, r=128, lora_alpha=256):
                cfg = LoraConfig(r=r, lora_alpha=lora_alpha, target_modules=["q_proj", "v_proj"])
                self.language_model = get_peft_model(self.language_model, cfg)

        model = ChatModel.from_pretrained("Qwen/Qwen2.5-7B-Instruct", torch_dtype=torch.bfloat16)
        {WRAP}
        transformers.Trainer(model=model, args=transformers.TrainingArguments("o")).train()
    """
    for name, wrap in {"method": "model.wrap_llm_lora(r=8, lora_alpha=16)",
                       "script": "model.language_model = get_peft_model(model.language_model, "
                                 "LoraConfig(r=8, lora_alpha=16, target_modules=['q_proj', 'v_proj']))",
                       "none": "pass"}.items():
        root = _write(tmp_path / name, {"train.py": in_method.replace("{WRAP}", wrap)})
        plan = _command(root, monkeypatch, "python", "train.py")
        if name == "none":
            assert plan.fields["method"].value == "full"
        else:
            assert _get(plan, "method", "lora_r") == {"method": "lora", "lora_r": 8}, name
