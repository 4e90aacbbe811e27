"""Values real scripts set in ways the first readers missed: transformers' HfArg dataclass fields, the GPU's compute
capability, a copy of a TRL trainer kept in the repository, a Trainer given DeepSpeed under plain `python`, and a
dataset whose `__getitem__` returns fixed blocks of a token stream."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout, write_notebook

_write = partial(write_checkout, dedent=True)


def test_hfarg_fields_keep_their_defaults(tmp_path, monkeypatch):
    script = """
        from dataclasses import dataclass
        from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments
        from transformers.hf_argparser import HfArg
        from peft import LoraConfig, get_peft_model

        @dataclass
        class Arguments(TrainingArguments):
            model_name_or_path: str = HfArg(default="Qwen/Qwen2.5-0.5B", help="the model")
            lora_r: int = HfArg(default=16, help="rank")
            bf16: bool = HfArg(default=True, help="bf16")

        args = HfArgumentParser(Arguments).parse_args_into_dataclasses()[0]
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
        model = get_peft_model(model, LoraConfig(r=args.lora_r, task_type="CAUSAL_LM"))
        Trainer(model=model, args=args).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py", "--output_dir", "o")
    assert _get(plan, "model_id", "lora_r", "precision") == {"model_id": "Qwen/Qwen2.5-0.5B", "lora_r": 16,
                                                             "precision": "amp-bf16"}


_CAPABILITY = ["import torch\n",
               "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n",
               "if torch.cuda.get_device_capability()[0] >= 8:\n",
               "    attn_implementation = 'flash_attention_2'\n",
               "else:\n",
               "    attn_implementation = 'eager'\n",
               "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B', attn_implementation=attn_implementation)\n",
               "Trainer(model=model, args=TrainingArguments('o')).train()\n"]


@pytest.mark.parametrize("gpu, attn", [("T4", "eager"), ("A100", "flash_attention_2"), ("L4", "flash_attention_2"),
                                       (None, "flash_attention_2")])
def test_the_gpus_compute_capability_picks_the_branch(tmp_path, gpu, attn):
    from memlint.extract import extract_file

    plan = extract_file(write_notebook(tmp_path / "nb.ipynb", _CAPABILITY, gpu))
    assert plan.get("attn_implementation").value == attn
    assert (gpu is None) == any("get_device_capability() is read as (8, 0)" in n for n in plan.notes)


_COPIED_DPO = """
    from transformers import Trainer

    class DPOTrainer(Trainer):
        def __init__(self, model=None, ref_model=None, args=None, beta=0.1, max_length=None, **kwargs):
            self.max_length = max_length
            super().__init__(model=model, args=args, **kwargs)

        def concatenated_forward(self, model, batch):
            return model(**batch)

        def compute_loss(self, model, inputs, return_outputs=False):
            return self.concatenated_forward(model, inputs)
"""


@pytest.mark.parametrize("name, keep, trainer", [
    ("DPOTrainer", "all", "DPOTrainer"),         # TRL's DPOTrainer, copied over transformers' Trainer
    ("DPOTrainer", "none", "Trainer"),           # named so, but without the trainer's methods: not a copy of it
    ("RewardTrainer", "compute_loss", "Trainer"),  # a custom compute_loss alone is any project's own trainer
    # TRL's RewardTrainer copied (v0.4-v0.11 carry __init__, compute_loss and prediction_step only): that trainer
    ("RewardTrainer", "compute_loss+prediction_step", "RewardTrainer"),
    ("MyTrainer", "all", "Trainer"),             # a subclass of its own name
])
def test_a_copy_of_a_trl_trainer_in_the_repository_is_that_trainer(tmp_path, monkeypatch, name, keep, trainer):
    utils = _COPIED_DPO.replace("class DPOTrainer", f"class {name}")
    head, rest = utils.split("        def concatenated_forward")
    if keep == "none":
        utils = head
    elif keep.startswith("compute_loss"):
        utils = head + "        def compute_loss" + rest.split("        def compute_loss")[1].replace(
            "self.concatenated_forward(model, inputs)", "model(**inputs)")
        if keep.endswith("prediction_step"):
            utils += ("\n        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):\n"
                      "            return None, None, None\n")
    script = f"""
        from transformers import AutoModelForCausalLM, TrainingArguments
        from dpo_utils import {name}

        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        trainer = {name}(model=model, ref_model=None, args=TrainingArguments("o"), max_length=1024)
        trainer.train()
    """
    root = _write(tmp_path, {"dpo_utils.py": utils, "train.py": script})
    assert _command(root, monkeypatch, "python", "train.py").get("trainer").value == trainer


@pytest.mark.parametrize("ds, gpus", [("ds.json", 1), (None, 4)])
def test_a_trainer_with_deepspeed_under_plain_python_is_one_process(tmp_path, monkeypatch, ds, gpus):
    script = """
        import sys
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        ds = sys.argv[1] if len(sys.argv) > 1 else None
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        Trainer(model=model, args=TrainingArguments("o", deepspeed=DS)).train()
    """.replace("DS", repr(ds))
    root = _write(tmp_path, {"train.py": script, "ds.json": '{"zero_optimization": {"stage": 3}}',
                             "run.sh": "export CUDA_VISIBLE_DEVICES=0,1,2,3\npython train.py\n"})
    assert _command(root, monkeypatch, "bash", "run.sh").get("num_gpus").value == gpus


_BLOCKS = """
    import torch
    from torch.utils.data import Dataset, DataLoader
    from transformers import AutoModelForCausalLM

    class Blocks(Dataset):
        def __init__(self, tokens, seq_length):
            self.tokens = tokens
            self.seq_length = seq_length

        def __len__(self):
            return len(self.tokens) // self.seq_length

        def __getitem__(self, i):
            start_idx = i * self.seq_length
            END
            return {"input_ids": self.tokens[start_idx:end_idx]}

    model = AutoModelForCausalLM.from_pretrained("gpt2")
    opt = torch.optim.AdamW(model.parameters())
    loader = DataLoader(Blocks(torch.load("t.pt"), seq_length=512), batch_size=4)
    for batch in loader:
        loss = model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.parametrize("end, packed", [("end_idx = start_idx + self.seq_length", True),
                                         ("end_idx = start_idx + self.batch_size", False)])
def test_a_dataset_returning_fixed_blocks_of_a_token_stream_is_packed(tmp_path, monkeypatch, end, packed):
    root = _write(tmp_path, {"train.py": _BLOCKS.replace("END", end)})
    plan = _command(root, monkeypatch, "python", "train.py")
    # not packed: no blocks of seq_length are cut; the dataset's own seq_length (512) is the length fallback
    assert (plan.get("packing").value, plan.get("max_length").value) == ((True, 512) if packed else (False, 512))
    assert packed or any("own length argument" in c for c in plan.get("max_length").chain)
    assert plan.get("per_device_batch").value == 4


_SLICED = """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained("gpt2")
    tok = AutoTokenizer.from_pretrained("gpt2")
    opt = torch.optim.AdamW(model.parameters())
    prompts = [line for line in open("data.txt")]
    micro_batch_size = 2
    for j in range(len(prompts) // micro_batch_size):
        batch = SLICE
        ids = tok(batch, return_tensors="pt", padding=True).input_ids
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.parametrize("cut, batch", [
    ("prompts[j * micro_batch_size:j * micro_batch_size + micro_batch_size]", 2),
    ("prompts[slice(j * micro_batch_size, (j + 1) * micro_batch_size)]", 2),
    ("prompts[j * micro_batch_size:(j + 1) * micro_batch_size]", 2),
    ("prompts[j:j + 3]", None),  # a width not named as a batch size says nothing
])
def test_a_loop_that_cuts_its_batches_from_a_list_has_that_micro_batch(tmp_path, monkeypatch, cut, batch):
    root = _write(tmp_path, {"train.py": _SLICED.replace("SLICE", cut)})
    assert _command(root, monkeypatch, "python", "train.py").get("per_device_batch").value == batch


_HAND_PAD = """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def collate(texts, tok):
        ids = [tok.encode(t) for t in texts]
        lens = [len(x) for x in ids]
        max_len = MAXLEN
        mask = []
        for i in range(len(ids)):
            padding_num = max_len - lens[i]
            ids[i] = ids[i] + [tok.pad_token_id] * padding_num
            mask.append([1.0] * (lens[i] - 1))
        return torch.tensor(ids)

    model = AutoModelForCausalLM.from_pretrained("gpt2")
    tok = AutoTokenizer.from_pretrained("gpt2")
    opt = torch.optim.AdamW(model.parameters())
    rows = [line for line in open("data.txt")]
    batch_size = 4
    for j in range(len(rows) // batch_size):
        ids = collate(rows[j * batch_size:(j + 1) * batch_size], tok)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.parametrize("maxlen, padding", [("max(lens)", "longest"), ("512", "max_length")])
def test_padding_written_by_hand_to_the_longest_of_a_list_of_lengths(tmp_path, monkeypatch, maxlen, padding):
    root = _write(tmp_path, {"train.py": _HAND_PAD.replace("MAXLEN", maxlen)})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert (plan.get("padding").value, plan.get("per_device_batch").value) == (padding, 4)


_UNIMPORTED = ["from transformers import AutoModelForCausalLM\n",
               "# from trl import SFTTrainer, SFTConfig\n",
               "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B')\n",
               "trainer = SFTTrainer(model=model, args=SFTConfig(output_dir='o', per_device_train_batch_size=3))\n",
               "trainer.train()\n"]


@pytest.mark.parametrize("suffix, trainer", [(".ipynb", "SFTTrainer"), (".py", None)])
def test_a_notebook_uses_the_classes_its_kernel_imported_earlier(tmp_path, suffix, trainer):
    from memlint.extract import extract_file

    path = tmp_path / f"train{suffix}"
    if suffix == ".ipynb":
        write_notebook(path, _UNIMPORTED)
    else:
        path.write_text("".join(_UNIMPORTED))
    plan = extract_file(path)
    assert plan.get("trainer").value == trainer
    assert (trainer is not None) == any("never imported in the notebook" in n for n in plan.notes)


@pytest.mark.parametrize("readme, trl", [
    ("## Setup\n\n```bash\npip install trl==0.16.0 peft==0.14.0\n```\n", "0.16.0"),
    ("## Environment\n\n```\ntorch==2.5.0\ntrl==0.12.1\n```\n", "0.12.1"),
    ("Install trl==0.9.6 first (prose outside a code block is not an instruction).\n", None),
])
def test_the_readmes_install_block_pins_versions_last(tmp_path, readme, trl):
    from memlint.library.pins import checkout_pins

    root = _write(tmp_path, {"README.md": readme, "sub/train.py": "print()\n"}, git=True)
    pins = {p.package: (p.version, p.source) for p in checkout_pins(root / "sub" / "train.py")}
    assert pins.get("trl", (None,))[0] == trl
    if trl:
        assert pins["trl"][1].rsplit("/", 1)[-1].startswith("README.md:")
    # a requirements file beside it wins over the README
    (root / "requirements.txt").write_text("trl==0.20.0\n")
    assert {p.package: p.version for p in checkout_pins(root / "sub" / "train.py")}["trl"] == "0.20.0"


def test_a_package_put_on_sys_path_by_pardir_is_imported_and_the_trained_engine_is_read(tmp_path, monkeypatch):
    ds_utils = """
        def get_train_ds_config(offload, stage=2, dtype="bf16"):
            return {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": stage},
                    "bf16": {"enabled": dtype == "bf16"}}
    """
    main = """
        import argparse, os, sys
        sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), os.path.pardir)))
        import deepspeed
        import torch
        from transformers import AutoModelForCausalLM
        from dschat.ds_utils import get_train_ds_config

        p = argparse.ArgumentParser()
        p.add_argument("--zero_stage", type=int, default=0)
        args = p.parse_args()
        ds_config = get_train_ds_config(offload=False, stage=args.zero_stage)
        model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters())
        model, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)
        ref = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16)
        ref, *_ = deepspeed.initialize(model=ref, config=ds_config)
        for batch in torch.utils.data.DataLoader(torch.load("d.pt"), batch_size=2):
            loss = model(**batch).loss
            model.backward(loss)
            model.step()
    """
    root = _write(tmp_path, {"training/dschat/__init__.py": "", "training/dschat/ds_utils.py": ds_utils,
                             "training/dpo/main.py": main}, git=True)
    plan = _command(root / "training" / "dpo", monkeypatch, "deepspeed", "main.py", "--zero_stage", "3")
    assert _get(plan, "distributed", "trainer") == {"distributed": "zero3", "trainer": "deepspeed-engine"}


@pytest.mark.parametrize("load, flags, precision", [
    ("torch_dtype='auto'", "", "pure-bf16"),            # the checkpoint's bf16, no autocast
    ("torch_dtype='auto'", ", bf16=True", "amp-bf16"),
    ("", "", "fp32"),                                   # transformers 4.x (pinned): fp32 weights
])
def test_torch_dtype_auto_trains_in_the_checkpoints_dtype(tmp_path, monkeypatch, load, flags, precision):
    script = f"""
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B"{", " + load if load else ""})
        Trainer(model=model, args=TrainingArguments("o"{flags})).train()
    """
    root = _write(tmp_path, {"train.py": script, "requirements.txt": "transformers==4.46.0\n"})
    assert _command(root, monkeypatch, "python", "train.py").get("precision").value == precision


def test_a_checkout_without_git_imports_its_own_package_from_its_top(tmp_path, monkeypatch):
    # a GitHub archive: no .git, pyproject or setup.py, only the README and .gitignore at its top
    utils = """
        import yaml

        def load_config(path):
            with open(path) as f:
                return yaml.safe_load(f)
    """
    train = """
        import argparse
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        from src.training.utils import load_config

        p = argparse.ArgumentParser()
        p.add_argument("--config", required=True)
        cfg = load_config(p.parse_args().config)
        model = AutoModelForCausalLM.from_pretrained(cfg["model"])
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=cfg["batch"])).train()
    """
    root = _write(tmp_path / "repo", {"README.md": "# x\n", ".gitignore": "out/\n", "src/__init__.py": "",
                                      "src/training/__init__.py": "", "src/training/utils.py": utils,
                                      "src/training/train.py": train,
                                      "config/c.yaml": "model: Qwen/Qwen2.5-0.5B\nbatch: 6\n"})
    plan = _command(root, monkeypatch, "python", "src/training/train.py", "--config", "config/c.yaml")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 6}


def test_training_arguments_spread_by_to_dict_into_an_sft_config(tmp_path, monkeypatch):
    script = """
        from transformers import AutoModelForCausalLM, TrainingArguments
        from trl import SFTConfig, SFTTrainer
        args = TrainingArguments(output_dir="o", per_device_train_batch_size=3, gradient_accumulation_steps=5)
        args = SFTConfig(packing=True, **args.to_dict())
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        SFTTrainer(model=model, args=args).train()
    """
    root = _write(tmp_path, {"train.py": script, "requirements.txt": "trl==0.13.0\ntransformers==4.48.0\n"})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "per_device_batch", "grad_accum", "packing", "precision", "gradient_checkpointing") == {
        "per_device_batch": 3, "grad_accum": 5, "packing": True, "precision": "fp32", "gradient_checkpointing": False}


def test_a_generator_that_yields_whole_batches_gives_the_micro_batch(tmp_path, monkeypatch):
    script = """
        import torch
        from transformers import AutoModelForCausalLM

        def get_batch_iterator(rows, batch_size=1):
            batch = []
            for r in rows:
                batch.append(r)
                if len(batch) == batch_size:
                    yield torch.stack(batch)
                    batch = []

        model = AutoModelForCausalLM.from_pretrained("gpt2")
        opt = torch.optim.AdamW(model.parameters())
        for ids in get_batch_iterator(torch.load("rows.pt"), batch_size=6):
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
    """
    root = _write(tmp_path, {"train.py": script})
    assert _command(root, monkeypatch, "python", "train.py").get("per_device_batch").value == 6
