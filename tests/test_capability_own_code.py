"""The checkout's own code around the libraries: a Trainer subclass whose own __init__ builds the model and the
training arguments, and LoRA written by hand (a module of the script's own that adds low-rank matrices)."""

from __future__ import annotations

from tests.checkouts import field_values, plan_of_command, write_checkout

_OWN_INIT_TRAINER = '''
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    from peft import LoraConfig, get_peft_model

    class ProjectTrainer(Trainer):
        def __init__(self, args, accelerator):
            self.accelerator = accelerator
            model = AutoModelForCausalLM.from_pretrained(args.model_name)
            if args.use_lora:
                model = get_peft_model(model, LoraConfig(r=args.lora_r, target_modules=["q_proj", "v_proj"]))
            hf_args = TrainingArguments(output_dir="out", per_device_train_batch_size=args.batch,
                                        gradient_accumulation_steps=args.accum, bf16=True)
            super().__init__(model=model, args=hf_args, train_dataset=None)
'''

_ENTRY = '''
    import argparse
    from project import ProjectTrainer

    p = argparse.ArgumentParser()
    p.add_argument("--model_name", default="gpt2")
    p.add_argument("--use_lora", action="store_true")
    p.add_argument("--lora_r", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--accum", type=int, default=1)
    args = p.parse_args()
    ProjectTrainer(args, None).train()
'''


def test_a_trainer_subclass_whose_own_init_builds_everything_is_read_through_that_init(tmp_path, monkeypatch):
    root = write_checkout(tmp_path, {"project/__init__.py": "from .trainer import ProjectTrainer\n",
                                     "project/trainer.py": _OWN_INIT_TRAINER, "train.py": _ENTRY}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "train.py", "--use_lora", "--model_name", "Qwen/Qwen2.5-7B",
                           "--batch", "4", "--accum", "8")
    assert field_values(plan, "model_id", "method", "lora_r", "per_device_batch", "grad_accum", "precision") == {
        "model_id": "Qwen/Qwen2.5-7B", "method": "lora", "lora_r": 8, "per_device_batch": 4, "grad_accum": 8,
        "precision": "amp-bf16"}
    assert plan.get("trainer").value == "Trainer"
    # without --use_lora the same __init__ trains the whole model
    plan = plan_of_command(root, monkeypatch, "python", "train.py", "--model_name", "Qwen/Qwen2.5-7B")
    assert plan.get("method").value == "full" and plan.get("per_device_batch").value == 2


def test_a_trainer_subclass_whose_init_forwards_its_arguments_still_reads_the_call(tmp_path, monkeypatch):
    script = '''
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        class WeightedTrainer(Trainer):
            def __init__(self, *args, alpha=0.5, **kwargs):
                super().__init__(*args, **kwargs)
                self.alpha = alpha

        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        WeightedTrainer(model, TrainingArguments("o", per_device_train_batch_size=3), alpha=0.1).train()
    '''
    root = write_checkout(tmp_path, {"train.py": script}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "train.py")
    assert field_values(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 3}


def test_a_trainer_subclass_whose_init_never_calls_super_falls_back_to_the_call(tmp_path, monkeypatch):
    script = '''
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        class OddTrainer(Trainer):
            def __init__(self, model, args):
                self.model = model

        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        OddTrainer(model, TrainingArguments("o", per_device_train_batch_size=5)).train()
    '''
    root = write_checkout(tmp_path, {"train.py": script}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "train.py")
    assert field_values(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 5}


_HAND_LORA_LAYER = '''
    import math
    import torch
    from torch import nn
    from transformers import AutoModelForCausalLM

    class LoRALinear(nn.Module):
        def __init__(self, weight, bias, lora_dim):
            super().__init__()
            row, column = weight.shape
            self.linear = nn.Linear(column, row)
            self.lora_right = nn.Parameter(torch.zeros(column, lora_dim))
            self.lora_left = nn.Parameter(torch.zeros(lora_dim, row))

        def forward(self, x):
            return self.linear(x) + x @ self.lora_right @ self.lora_left

    model = AutoModelForCausalLM.from_pretrained("gpt2")
    lora_dim = 64
    target_names = []
    for name, module in model.named_modules():
        if "attn.c_attn" in name:
            target_names.append(name)
    for name in target_names:
        layer = LoRALinear(weight=model.get_submodule(name).weight, bias=None, lora_dim=lora_dim)
        setattr(model, name, layer)
    for name, param in model.named_parameters():
        param.requires_grad = "lora" in name
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
    for batch in loader:
        model(**batch).loss.backward()
        optimizer.step()
'''


def test_a_lora_layer_written_by_hand_makes_the_run_lora_of_the_rank_its_parameters_share(tmp_path, monkeypatch):
    root = write_checkout(tmp_path, {"train.py": _HAND_LORA_LAYER}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "train.py")
    assert field_values(plan, "model_id", "method", "lora_r") == {"model_id": "gpt2", "method": "lora", "lora_r": 64}
    assert "LoRA written by hand" in plan.get("method").chain[0]
    # the same loop with plain nn.Parameters not named lora_*: a full fine-tune of an extra module
    (root / "train.py").write_text((root / "train.py").read_text().replace("lora_right", "right")
                                   .replace("lora_left", "left"))
    assert plan_of_command(root, monkeypatch, "python", "train.py").get("method").value == "full"


def test_a_lora_layer_deriving_from_nn_linear_built_by_a_controller_reads_its_rank(tmp_path, monkeypatch):
    adapters = '''
        import torch.nn as nn

        class LoRAController:
            def __init__(self, r, alpha):
                self.r = r
                self.alpha = alpha

            def insert_adapters(self, model, target_modules):
                for path, module in model.named_modules():
                    if path.split(".")[-1] in target_modules:
                        setattr(model, path, LoRALayer(module, self.r, self.alpha))

        class LoRALayer(nn.Linear):
            def __init__(self, module, r, alpha):
                super().__init__(module.in_features, module.out_features)
                self.weight = module.weight
                self.lora_A = nn.Parameter(self.weight.new_empty(r, module.in_features))
                self.lora_B = nn.Parameter(self.weight.new_empty(module.out_features, r))
    '''
    script = '''
        import sys
        import torch
        from transformers import AutoModelForCausalLM
        from adapters import LoRAController

        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
        controller = LoRAController(r=int(sys.argv[1]), alpha=16)
        controller.insert_adapters(model, ["q_proj", "v_proj"])
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
        for batch in loader:
            model(**batch).loss.backward()
            optimizer.step()
    '''
    root = write_checkout(tmp_path, {"adapters.py": adapters, "train.py": script}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "train.py", "32")
    assert field_values(plan, "method", "lora_r") == {"method": "lora", "lora_r": 32}


def test_loralib_layers_make_the_run_lora_of_their_rank(tmp_path, monkeypatch):
    script = '''
        import torch
        import loralib as lora
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained("gpt2")
        model.lm_head = lora.Linear(768, 50257, r=8, bias=False)
        lora.mark_only_lora_as_trainable(model)
        optimizer = torch.optim.AdamW(model.parameters())
        for batch in loader:
            model(**batch).loss.backward()
            optimizer.step()
    '''
    root = write_checkout(tmp_path, {"train.py": script}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "train.py")
    assert field_values(plan, "method", "lora_r") == {"method": "lora", "lora_r": 8}


def test_a_list_grown_by_append_is_looped_over_with_what_it_holds(tmp_path, monkeypatch):
    # straight-line appends are the list's items; a list grown in a loop has an unknown length but its items
    script = '''
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        from peft import LoraConfig, get_peft_model

        targets = []
        targets.append("q_proj")
        targets.extend(["k_proj", "v_proj"])
        names = []
        for n, _ in some_model_named_modules():
            names.append(n)
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        model = get_peft_model(model, LoraConfig(r=4, target_modules=targets))
        accum = len(names)
        Trainer(model=model, args=TrainingArguments("o", gradient_accumulation_steps=accum)).train()
    '''
    root = write_checkout(tmp_path, {"train.py": script}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "train.py")
    assert plan.get("lora_targets").value == ["q_proj", "k_proj", "v_proj"]
    assert plan.get("grad_accum").value is None  # len() of a list grown in a loop is not 1


def test_a_recipe_settles_the_trainer_when_the_script_trains_one_of_several_by_stage(tmp_path, monkeypatch):
    # a framework's entry script (LLaMA-Factory's run_exp) trains the trainer of the recipe's stage; read alone the
    # stage is unknown, each stage's trainer is a candidate, and the recipe's `stage: sft` names the one that runs
    script = '''
        import sys
        from transformers import AutoModelForCausalLM, Seq2SeqTrainer, Seq2SeqTrainingArguments, Trainer
        from trl import DPOTrainer

        class CustomSeq2SeqTrainer(Seq2SeqTrainer):
            def __init__(self, finetuning_args, **kwargs):
                self.finetuning_args = finetuning_args
                super().__init__(**kwargs)

        class CustomDPOTrainer(DPOTrainer):
            def __init__(self, model, **kwargs):
                Trainer.__init__(self, model=model, **kwargs)

        stage = read_stage(sys.argv[1])
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        args = Seq2SeqTrainingArguments("o", per_device_train_batch_size=2)
        if stage == "sft":
            CustomSeq2SeqTrainer(finetuning_args=None, model=model, args=args).train()
        elif stage == "dpo":
            CustomDPOTrainer(model, args=args).train()
    '''
    root = write_checkout(tmp_path, {"train.py": script}, dedent=True)
    alone = plan_of_command(root, monkeypatch, "python", "train.py", "x")
    t = alone.get("trainer")
    assert t.value == "DPOTrainer" and set(t.candidates) == {"Seq2SeqTrainer", "DPOTrainer"}  # CustomDPOTrainer: a DPOTrainer


def test_an_unsloth_sft_run_names_its_trainer_class_and_keeps_unsloths_step(tmp_path, monkeypatch):
    # labellers name the trainer class (SFTTrainer); the estimate still takes unsloth's own step (no k-bit preparation)
    from memlint.estimate.from_plan import setup_from_plan, trainer_step

    script = '''
        from unsloth import FastLanguageModel
        from trl import SFTConfig, SFTTrainer
        model, tokenizer = FastLanguageModel.from_pretrained("unsloth/Llama-3.2-1B-Instruct", max_seq_length=2048,
                                                             load_in_4bit=True)
        model = FastLanguageModel.get_peft_model(model, r=16)
        SFTTrainer(model=model, tokenizer=tokenizer, args=SFTConfig(output_dir="o", per_device_train_batch_size=2)).train()
    '''
    root = write_checkout(tmp_path, {"train.py": script}, dedent=True)
    plan = plan_of_command(root, monkeypatch, "python", "train.py")
    t = plan.get("trainer")
    assert t.value == "SFTTrainer" and dict(t.shape).get("stack") == "unsloth"
    assert trainer_step(plan.get) == "unsloth"
    setup = setup_from_plan(plan).setup
    assert setup is not None and not setup.kbit_prep


def test_a_trainer_given_an_optimizer_memlint_does_not_model_says_so(tmp_path, monkeypatch):
    """`Trainer(optimizers=(FiraAdamW(...), None))` with the checkout's own Optimizer subclass: that optimizer replaces
    the arguments' optim, so the optimizer is unknown (the class named), never the arguments' default; a torch
    optimizer given the same way is read."""
    from checkouts import plan_of_command, write_checkout

    opt = ("import torch\nclass FiraAdamW(torch.optim.Optimizer):\n"
           "    def __init__(self, params, lr=1e-3):\n        super().__init__(params, dict(lr=lr))\n")
    script = """
        import torch, transformers
        from transformers import AutoModelForCausalLM
        from myopt import FiraAdamW
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        optimizer = OPT
        transformers.Trainer(model=model, optimizers=(optimizer, None),
                             args=transformers.TrainingArguments("o", per_device_train_batch_size=2)).train()
    """
    for made, want in (("FiraAdamW(model.parameters(), lr=0.1)", None), ("torch.optim.SGD(model.parameters(), lr=0.1)", "sgd")):
        root = write_checkout(tmp_path / want if want else tmp_path / "own",
                              {"myopt.py": opt, "train.py": script.replace("OPT", made)}, dedent=True)
        plan = plan_of_command(root, monkeypatch, "python", "train.py")
        assert plan.value("optimizer") == want
        if want is None:
            assert any("FiraAdamW" in n for n in plan.notes)
