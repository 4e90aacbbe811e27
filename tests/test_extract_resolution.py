"""How values resolve: constants, arithmetic, f-strings, argparse, click, fire, dataclasses,
sibling modules, aliases, branches, and configs that never reach the trainer."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from memlint.errors import MemlintError
from memlint.extract import extract_file, extract_paths, extract_source
from memlint.library.versions import in_range, pinned_versions
from memlint.extract.source import transform_lines

NEWEST = {"transformers": None, "torch": None, "peft": None, "trl": None, "unsloth": None}


def plan_of(code: str, tmp_path: Path | None = None, name: str = "train.py", versions=None):
    code = textwrap.dedent(code)
    with pinned_versions(versions or NEWEST):
        if tmp_path is None:
            return extract_source(code, name)
        path = tmp_path / name
        path.write_text(code, encoding="utf-8")
        return extract_file(path)


SFT_TAIL = """
trainer = SFTTrainer(model=model, args=args, peft_config=lora)
trainer.train()
"""


def test_module_constants_and_arithmetic_resolve_with_the_line_they_came_from():
    plan = plan_of("""
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        MICRO = 4
        GLOBAL = 64
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        args = TrainingArguments("out", per_device_train_batch_size=MICRO, gradient_accumulation_steps=int(GLOBAL / MICRO))
        Trainer(model=model, args=args).train()
    """)
    batch, accum = plan.get("per_device_batch"), plan.get("grad_accum")
    assert (batch.value, batch.source, batch.line) == (4, "constant", 3)
    assert (accum.value, accum.source) == (16, "constant")
    assert any("GLOBAL" in step for step in accum.chain)


def test_fstring_over_constants_gives_the_model_id():
    plan = plan_of("""
        from transformers import AutoModelForCausalLM
        ORG = "meta-llama"
        SIZE = 8
        model = AutoModelForCausalLM.from_pretrained(f"{ORG}/Llama-3.1-{SIZE}B")
    """)
    assert plan.get("model_id").value == "meta-llama/Llama-3.1-8B"
    assert plan.get("model_id").source == "constant"


def test_argparse_default_reached_through_args_attribute():
    plan = plan_of("""
        import argparse
        from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments
        MAX_LEN = 2048
        p = argparse.ArgumentParser()
        p.add_argument("--max_len", type=int, default=MAX_LEN)
        p.add_argument("--micro-batch", default="2", type=int)
        p.add_argument("--no-bf16", dest="bf16", action="store_false")
        args = p.parse_args()
        tok = AutoTokenizer.from_pretrained("gpt2")
        enc = tok("hi", max_length=args.max_len, truncation=True, padding="max_length")
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        ta = TrainingArguments("o", per_device_train_batch_size=args.micro_batch, bf16=args.bf16)
        Trainer(model=model, args=ta).train()
    """)
    ml = plan.get("max_length")
    assert (ml.value, ml.source, ml.line) == (2048, "argparse-default", 6)
    assert plan.get("per_device_batch").value == 2  # argparse applies type= to string defaults
    assert plan.get("precision").value == "amp-bf16"  # store_false defaults to True
    assert plan.get("padding").value == "max_length"


def test_click_option_defaults_bind_the_command_parameters():
    plan = plan_of("""
        import click
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM
        @click.command()
        @click.option("--rank", "r", default=64)
        @click.option("--model-id", default="gpt2")
        def main(r, model_id):
            m = get_peft_model(AutoModelForCausalLM.from_pretrained(model_id), LoraConfig(r=r))
            m.train()
        if __name__ == "__main__":
            main()
    """)
    assert plan.get("lora_r").value == 64 and plan.get("lora_r").source == "click-default"
    assert plan.get("model_id").value == "gpt2"


def test_fire_entry_point_uses_keyword_defaults():
    plan = plan_of("""
        import fire
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        def train(base_model: str = "huggyllama/llama-7b", micro_batch_size: int = 4):
            model = AutoModelForCausalLM.from_pretrained(base_model)
            Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=micro_batch_size)).train()
        if __name__ == "__main__":
            fire.Fire(train)
    """)
    assert plan.get("model_id").value == "huggyllama/llama-7b"
    assert plan.get("per_device_batch").source == "function-default"
    assert plan.get("per_device_batch").line == 4


def test_hfargumentparser_reads_dataclass_defaults_and_subclass_overrides():
    plan = plan_of("""
        from dataclasses import dataclass, field
        from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments
        @dataclass
        class ModelArgs:
            model_name: str = field(default="EleutherAI/pythia-410m")
        @dataclass
        class MyArgs(TrainingArguments):
            per_device_train_batch_size: int = 2
            gradient_checkpointing: bool = field(default=True)
        margs, targs = HfArgumentParser((ModelArgs, MyArgs)).parse_args_into_dataclasses()
        model = AutoModelForCausalLM.from_pretrained(margs.model_name)
        Trainer(model=model, args=targs).train()
    """)
    assert plan.get("model_id").value == "EleutherAI/pythia-410m"
    assert plan.get("model_id").source == "dataclass-default"
    assert (plan.get("per_device_batch").value, plan.get("per_device_batch").source) == (2, "dataclass-default")
    assert plan.get("gradient_checkpointing").value is True
    # fields the subclass leaves alone keep the library default
    assert plan.get("grad_accum").value == 1 and plan.get("grad_accum").source == "library-default"


def test_values_imported_from_a_sibling_module(tmp_path):
    (tmp_path / "hparams.py").write_text("MODEL = 'Qwen/Qwen2.5-0.5B'\nBATCH = 3 * 2\n", encoding="utf-8")
    plan = plan_of("""
        import hparams as hp
        from hparams import MODEL
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained(MODEL)
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=hp.BATCH)).train()
    """, tmp_path)
    assert plan.get("model_id").value == "Qwen/Qwen2.5-0.5B"
    batch = plan.get("per_device_batch")
    assert batch.value == 6 and batch.span.path.endswith("hparams.py") and batch.line == 2


def test_import_aliases_resolve_to_the_library_classes():
    plan = plan_of("""
        import transformers as tf
        import torch as T
        from trl import SFTConfig as C, SFTTrainer as ST
        from peft import LoraConfig as LC
        model = tf.AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=T.bfloat16)
        ST(model=model, args=C(output_dir="o", max_length=777), peft_config=LC(r=4)).train()
    """)
    assert plan.get("torch_dtype").value == "bf16"
    assert plan.get("max_length").value == 777
    assert plan.get("trainer").value == "SFTTrainer"
    assert plan.get("method").value == "lora"


def test_the_last_assignment_in_straight_line_code_wins():
    plan = plan_of("""
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        bs = 8
        bs = 2
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=bs)).train()
    """)
    assert plan.get("per_device_batch").value == 2
    assert plan.get("per_device_batch").candidates == ()


def test_branches_that_disagree_keep_every_candidate_and_show_the_worst():
    plan = plan_of("""
        import os
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        if os.environ.get("BIG_GPU"):
            bs = 16
        else:
            bs = 4
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=bs)).train()
    """)
    v = plan.get("per_device_batch")
    assert v.value == 16 and set(v.candidates) == {16, 4}


def test_a_known_condition_takes_one_branch_only():
    plan = plan_of("""
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        DEBUG = False
        bs = 1 if DEBUG else 8
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=bs)).train()
    """)
    assert plan.get("per_device_batch").value == 8 and not plan.get("per_device_batch").candidates


def test_configs_built_but_never_passed_do_not_count():
    plan = plan_of("""
        from peft import LoraConfig
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments
        unused_q = BitsAndBytesConfig(load_in_4bit=True)
        unused_lora = LoraConfig(r=128)
        unused_args = TrainingArguments("x", per_device_train_batch_size=99)
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
    """)
    assert plan.get("method").value == "full"
    assert plan.get("quant_bits").value is None and plan.get("quant_bits").source == "library-default"
    assert plan.get("per_device_batch").value == 2


def test_bare_load_in_4bit_gets_the_library_quantization_defaults():
    plan = plan_of("""
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM
        model = get_peft_model(AutoModelForCausalLM.from_pretrained("m", load_in_4bit=True), LoraConfig())
    """)
    assert plan.get("method").value == "qlora"
    assert plan.get("quant_type").value == "fp4" and plan.get("quant_type").source == "library-default"
    assert plan.get("double_quant").value is False
    assert plan.get("compute_dtype").value == "fp32"
    assert (plan.get("lora_r").value, plan.get("lora_alpha").value) == (8, 8)
    assert plan.get("lora_targets").value is None and plan.get("lora_targets").source == "library-default"


def test_prepare_model_for_kbit_training_turns_on_checkpointing_by_default():
    plan = plan_of("""
        from peft import prepare_model_for_kbit_training
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = prepare_model_for_kbit_training(AutoModelForCausalLM.from_pretrained("m", load_in_8bit=True))
        Trainer(model=model, args=TrainingArguments("o")).train()
    """)
    gc = plan.get("gradient_checkpointing")
    assert gc.value is True and gc.source == "library-default"
    assert plan.get("quant_bits").value == 8 and plan.get("method").value == "full"


def test_trl_defaults_differ_from_transformers_defaults():
    sft = plan_of("""
        from transformers import AutoModelForCausalLM
        from trl import SFTConfig, SFTTrainer
        SFTTrainer(model=AutoModelForCausalLM.from_pretrained("m"), args=SFTConfig("o")).train()
    """)
    hf = plan_of("""
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        Trainer(model=AutoModelForCausalLM.from_pretrained("m"), args=TrainingArguments("o")).train()
    """)
    assert sft.get("gradient_checkpointing").value is True and hf.get("gradient_checkpointing").value is False
    assert sft.get("precision").value == "amp-bf16" and hf.get("precision").value == "fp32"
    assert sft.get("max_length").value == 1024 and sft.get("max_length").source == "library-default"


def test_installed_versions_choose_the_default():
    code = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        Trainer(model=AutoModelForCausalLM.from_pretrained("m"), args=TrainingArguments("o")).train()
    """
    old = plan_of(code, versions={**NEWEST, "transformers": "4.40.0", "torch": "2.3.0"})
    mid = plan_of(code, versions={**NEWEST, "transformers": "4.56.0", "torch": "2.8.0"})
    new = plan_of(code, versions={**NEWEST, "transformers": "5.1.0", "torch": "2.7.1"})
    assert old.get("optimizer").value == "adamw_torch" and old.get("torch_dtype").value == "fp32"
    assert mid.get("optimizer").value == "adamw_torch_fused" and mid.get("torch_dtype").value == "fp32"
    assert new.get("optimizer").value == "adamw_torch" and new.get("torch_dtype").value == "auto"
    assert in_range("4.54.0.dev0", ">=4.54") and not in_range(None, "<5.0") and in_range(None, ">=4.32")


def test_raw_loop_optimizer_autocast_and_accumulation():
    plan = plan_of("""
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM
        ACC = 4
        model = AutoModelForCausalLM.from_pretrained("m", torch_dtype=torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        dl = DataLoader([], batch_size=6, shuffle=True)
        for step, batch in enumerate(dl):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**batch).loss
            loss.backward()
            if (step + 1) % ACC == 0:
                opt.step()
    """)
    assert plan.get("trainer").value == "custom-loop"
    assert plan.get("optimizer").value == "adamw_torch_fused"
    assert plan.get("precision").value == "amp-bf16"
    assert plan.get("grad_accum").value == 4 and plan.get("grad_accum").source == "constant"
    assert plan.get("per_device_batch").value == 6


def test_a_script_with_nothing_to_read_says_unknown_not_a_guess():
    plan = plan_of("""
        import sys, yaml
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        cfg = yaml.safe_load(open(sys.argv[1]))
        Trainer(model=AutoModelForCausalLM.from_pretrained(cfg["model"]), args=TrainingArguments(**cfg["args"])).train()
    """)
    assert plan.get("model_id").source == "unknown"
    assert plan.get("per_device_batch").source == "unknown"
    assert any("--assume per_device_batch=" in n for n in plan.notes)


def test_ipython_lines_become_calls_and_keep_line_numbers():
    src = transform_lines(["!pip install trl", "%%capture", "x = 1", "  %time y", "files = !ls", 's = """', "!not magic", '"""'], None)
    lines = src.splitlines()
    assert lines[0] == "get_ipython().system('pip install trl')"
    assert lines[2] == "x = 1"
    assert lines[4] == "files = get_ipython().getoutput('ls')"
    assert lines[6] == "!not magic"  # inside a string: left alone
    assert len(lines) == 8


def test_bad_input_raises_one_line_errors(tmp_path):
    with pytest.raises(MemlintError, match="no such file"):
        extract_file(tmp_path / "missing.py")
    bad = tmp_path / "latin1.py"
    bad.write_bytes(b"x = '\xe9'\n")
    with pytest.raises(MemlintError, match="not UTF-8"):
        extract_file(bad)
    nb = tmp_path / "broken.ipynb"
    nb.write_text("{not json", encoding="utf-8")
    with pytest.raises(MemlintError, match="not a notebook"):
        extract_file(nb)
    with pytest.raises(MemlintError, match="no such file or directory"):
        extract_paths([str(tmp_path / "nope")])


_TRAINS = "from transformers import Trainer\nTrainer(model=None, args=None).train()\n"


def test_extract_paths_expands_folders_as_check_walks_them(tmp_path):
    """`memlint plan DIR` and `memlint check DIR` read the same files: training scripts and
    framework configs; helpers, data files and non-training YAML are skipped in a walk."""
    from memlint.check import check_paths
    from memlint.config import Settings

    (tmp_path / "a.py").write_text(_TRAINS, encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text(_TRAINS, encoding="utf-8")
    (tmp_path / "helper.py").write_text("import torch\nx = 1\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("z", encoding="utf-8")
    (tmp_path / "card.yaml").write_text("license: mit\n", encoding="utf-8")
    plans = extract_paths([str(tmp_path)])
    assert [Path(p.path).name for p in plans] == ["a.py", "b.py"]
    assert [Path(r.path).name for r in check_paths([str(tmp_path)], Settings())] == ["a.py", "b.py"]
    # a file named on the command line is read as asked, training script or not
    assert [Path(p.path).name for p in extract_paths([str(tmp_path / "helper.py")])] == ["helper.py"]


def test_importing_extract_does_not_import_torch_or_transformers():
    import subprocess
    import sys

    code = "import sys, memlint.extract; from memlint.extract import extract_source; extract_source('import torch\\n'); print(sorted(m for m in ('torch', 'transformers', 'IPython', 'peft', 'trl') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
