"""Round 5: patterns of real training files met on held-out repositories (docs/realworld.md, round 5).

Each test is a synthetic excerpt of a shape met in public scripts, notebooks and launchers; the
comment says which shape. No public file is copied."""

import json
from pathlib import Path

from memlint.extract import extract_file, extract_paths, extract_source
from memlint.extract.launch import command_target
from memlint.extract.shell import launcher_targets, launches
from checkouts import write_checkout


_write = write_checkout


def _plan_of_command(words: list[str]):
    target = command_target(words)
    return target, extract_file(target.path, launch=target.launch)


_TRL_SCRIPT = '''from transformers import AutoModelForCausalLM
from trl import ModelConfig, ScriptArguments, {config}, {trainer}, TrlParser, get_peft_config


def main(script_args, training_args, model_args):
    model = AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        torch_dtype=model_args.torch_dtype,
        attn_implementation=model_args.attn_implementation,
    )
    trainer = {trainer}(model=model, {extra}args=training_args, train_dataset=None, peft_config=get_peft_config(model_args))
    trainer.train()


if __name__ == "__main__":
    parser = TrlParser((ScriptArguments, {config}, ModelConfig))
    main(*parser.parse_args_and_config())
'''
_ACCELERATE = ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: {stage}\n  offload_optimizer_device: none\n"
               "mixed_precision: bf16\nnum_machines: 1\nnum_processes: 8\n")


def test_a_trl_script_with_a_config_flag_reads_the_script_and_its_launcher(tmp_path: Path, monkeypatch):
    # huggingface/open-r1 style: `accelerate launch --config_file zero3.yaml src/pkg/sft.py --config recipe.yaml
    # --model_name_or_path X`: the YAML is the value of a flag, not the script's first argument, so the script
    # (TrlParser: the recipe, then the flags over it) is read; the recipe's model keys go to trl.ModelConfig;
    # the accelerate config's ZeRO stage and process count apply
    recipe = ("model_name_or_path: Qwen/Qwen2.5-0.5B\ntorch_dtype: bfloat16\nattn_implementation: flash_attention_2\n"
              "bf16: true\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 8\nmax_length: 4096\n"
              "gradient_checkpointing: true\noutput_dir: out\n")
    _write(tmp_path, {"sft.py": _TRL_SCRIPT.format(config="SFTConfig", trainer="SFTTrainer", extra=""),
                      "recipe.yaml": recipe, "zero3.yaml": _ACCELERATE.format(stage=3)})
    monkeypatch.chdir(tmp_path)
    cmd = ["accelerate", "launch", "--config_file", "zero3.yaml", "sft.py", "--config", "recipe.yaml"]
    target, plan = _plan_of_command(cmd + ["--model_name_or_path", "Qwen/Qwen2.5-1.5B"])
    assert target.path.name == "sft.py"
    got = {n: plan.fields[n].value for n in ("model_id", "torch_dtype", "attn_implementation", "per_device_batch",
                                             "grad_accum", "max_length", "distributed", "num_gpus", "trainer")}
    assert got == {"model_id": "Qwen/Qwen2.5-1.5B", "torch_dtype": "bf16", "attn_implementation": "flash_attention_2",
                   "per_device_batch": 2, "grad_accum": 8, "max_length": 4096, "distributed": "zero3", "num_gpus": 8,
                   "trainer": "SFTTrainer"}
    assert plan.fields["model_id"].source == "command-line"
    # `--num_processes=3` on the command line wins over the config file's num_processes: 8
    _, plan3 = _plan_of_command(cmd[:4] + ["--num_processes=3"] + cmd[4:])
    assert plan3.fields["num_gpus"].value == 3 and plan3.fields["distributed"].value == "zero3"


def test_a_grpo_recipe_given_by_a_config_flag_trains_at_prompt_plus_completion(tmp_path: Path, monkeypatch):
    # open-r1 / open-rs grpo.py --config recipes/grpo.yaml: max_prompt_length + max_completion_length, not
    # GRPOConfig's default
    recipe = ("model_name_or_path: Qwen/Qwen2.5-0.5B\ntorch_dtype: bfloat16\nbf16: true\nper_device_train_batch_size: 6\n"
              "max_prompt_length: 512\nmax_completion_length: 3584\noutput_dir: out\n")
    _write(tmp_path, {"grpo.py": _TRL_SCRIPT.format(config="GRPOConfig", trainer="GRPOTrainer", extra="reward_funcs=[], "),
                      "grpo.yaml": recipe, "zero2.yaml": _ACCELERATE.format(stage=2)})
    monkeypatch.chdir(tmp_path)
    _, plan = _plan_of_command(["accelerate", "launch", "--config_file", "zero2.yaml", "--num_processes=3", "grpo.py",
                                "--config", "grpo.yaml"])
    got = {n: plan.fields[n].value for n in ("model_id", "max_length", "per_device_batch", "distributed", "num_gpus", "trainer")}
    assert got == {"model_id": "Qwen/Qwen2.5-0.5B", "max_length": 4096, "per_device_batch": 6, "distributed": "zero2",
                   "num_gpus": 3, "trainer": "GRPOTrainer"}


def test_a_recipe_read_as_the_script_first_argument_keeps_the_launcher(tmp_path: Path, monkeypatch):
    # princeton-nlp/SimPO style: `accelerate launch --config_file deepspeed_zero3.yaml scripts/run.py recipe.yaml`
    # whose script hands the YAML to a parser of another module: the recipe is read as a TRL recipe, and
    # the accelerate config still says ZeRO-3 over its num_processes
    script = ("from alignment import H4ArgumentParser\nfrom trl import SFTConfig, SFTTrainer, ModelConfig\n"
              "parser = H4ArgumentParser((ModelConfig, SFTConfig))\nmodel_args, training_args = parser.parse()\n"
              "SFTTrainer(model=model_args.model_name_or_path, args=training_args).train()\n")
    recipe = ("model_name_or_path: Qwen/Qwen2.5-0.5B\ntorch_dtype: bfloat16\nbf16: true\nper_device_train_batch_size: 2\n"
              "gradient_accumulation_steps: 16\nmax_length: 2048\noutput_dir: out\n")
    acc = _ACCELERATE.format(stage=3).replace("num_processes: 8", "num_processes: 4")
    _write(tmp_path, {"scripts/run.py": script, "recipes/r.yaml": recipe, "acc/ds3.yaml": acc})
    monkeypatch.chdir(tmp_path)
    target, plan = _plan_of_command(["accelerate", "launch", "--config_file", "acc/ds3.yaml", "scripts/run.py", "recipes/r.yaml"])
    assert target.path.name == "r.yaml"
    got = {n: plan.fields[n].value for n in ("model_id", "per_device_batch", "grad_accum", "distributed", "num_gpus")}
    assert got == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 2, "grad_accum": 16, "distributed": "zero3", "num_gpus": 4}


_ARGPARSE = '''import argparse
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
p = argparse.ArgumentParser()
p.add_argument("--model_path", default="gpt2")
p.add_argument("--micro_batch", type=int, default=16)
p.add_argument("--accum", type=int, default=1)
a = p.parse_args()
model = AutoModelForCausalLM.from_pretrained(a.model_path)
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=a.micro_batch,
                                            gradient_accumulation_steps=a.accum)).train()
'''


def test_shell_launcher_idioms(tmp_path: Path):
    # Facico/Chinese-Vicuna scripts/finetune.sh: a quoted value followed by a comment holding quotes; the GPU
    # count as the length of a bash array of a comma list (`CUDAs=(${TOT_CUDA//,/ })`, `${#CUDAs[@]}`);
    # the launcher in scripts/ names finetune.py of the folder above it
    launcher = ('TOT_CUDA="2,3"\nCUDAs=(${TOT_CUDA//,/ })\nCUDA_NUM=${#CUDAs[@]}\n'
                'MODEL_PATH="Qwen/Qwen2.5-0.5B" #"other/model" #"./third"\n'
                'CUDA_VISIBLE_DEVICES=${TOT_CUDA} torchrun --nproc_per_node=$CUDA_NUM finetune.py \\\n'
                '--model_path $MODEL_PATH --micro_batch 4\n')
    root = _write(tmp_path, {"finetune.py": _ARGPARSE, "scripts/finetune.sh": launcher})
    [target] = launcher_targets(root / "scripts/finetune.sh", "scripts/finetune.sh", [root])
    assert target.path.resolve() == (root / "finetune.py").resolve()
    assert target.launch.gpus == 2 and target.launch.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    plan = extract_file(target.path, launch=target.launch)
    assert plan.fields["model_id"].value == "Qwen/Qwen2.5-0.5B" and plan.fields["per_device_batch"].value == 4


def test_shell_positional_defaults_multiline_quotes_and_arithmetic(tmp_path: Path):
    # QwenLM/Qwen2.5-Coder finetuning/sft/scripts/sft.sh: `MODEL=${2}` then `MODEL=${MODEL:-"/path"}` (the
    # launcher's own arguments are unknown: the documented default), a default holding `${...}` itself, a
    # `DISTRIBUTED_ARGS="` quoted over several lines, `GPUS=$(python -c ...)` (unknown: stays unset),
    # `ACC=$(($TOTAL / $MICRO))` computed; train.py lives in the folder above scripts/
    launcher = ('OUT=${3}\nMODEL=${2}\nMODEL=${MODEL:-"Qwen/Qwen2.5-0.5B"}\nOUT=${OUT:-"/ckpt/lr${LR}-bs${BS}/"}\n'
                'GPUS_PER_NODE=$(python -c "import torch; print(torch.cuda.device_count());")\n'
                'DISTRIBUTED_ARGS="\n    --nproc_per_node 4 \\\n    --nnodes 1\n"\n'
                'TOTAL=64\nMICRO=4\nACC=$(($TOTAL / $MICRO / 2))\nWORLD=$(($GPUS_PER_NODE * 1))\n'
                'cd ROOT_PATH="/path/to/sft/";\n'
                'torchrun ${DISTRIBUTED_ARGS} train.py --model_path ${MODEL} --micro_batch ${MICRO} --accum ${ACC} --out ${OUT}\n')
    root = _write(tmp_path, {"sft/train.py": _ARGPARSE.replace('a = p.parse_args()', 'p.add_argument("--out")\na = p.parse_args()'),
                             "sft/scripts/run.sh": launcher})
    [launch] = launches(root / "sft/scripts/run.sh", "run.sh")
    assert launch.gpus == 4 and launch.script == "train.py"
    assert "--out" in launch.argv and launch.argv[launch.argv.index("--out") + 1] == "/ckpt/lr${LR}-bs${BS}/"
    [target] = launcher_targets(root / "sft/scripts/run.sh", "sft/scripts/run.sh", [root])
    assert target.path.resolve() == (root / "sft/train.py").resolve()
    plan = extract_file(target.path, launch=target.launch)
    got = {n: plan.fields[n].value for n in ("model_id", "per_device_batch", "grad_accum", "num_gpus")}
    assert got == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 4, "grad_accum": 8, "num_gpus": 4}
    # an unknown GPU count stays unknown instead of splitting the command
    bad = root / "sft/scripts/bad.sh"
    bad.write_text('N=$(nvidia-smi -L | wc -l)\nACC=$((64 / $N))\ntorchrun --nproc-per-node ${N} train.py --accum ${ACC}\n')
    [b] = launches(bad, "bad.sh")
    assert b.gpus is None and b.script == "train.py" and b.argv == ("--accum", "${ACC}")


def test_a_notebook_pip_magic_continued_over_lines(tmp_path: Path):
    # google-gemini/gemma-cookbook: `%pip install --upgrade \` followed by indented `"pkg==x" \` lines:
    # IPython joins them into the magic; read as Python they were an indentation error and the notebook read nothing
    cells = [{"cell_type": "code", "source": ['%pip install  --upgrade \\\n', '  "datasets==3.3.2" \\\n', '  "trl==0.15.2" \\\n',
                                             '  sentencepiece\n']},
             {"cell_type": "code", "source": ["from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n",
                                             "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B')\n",
                                             "Trainer(model=model, args=TrainingArguments('o', per_device_train_batch_size=3)).train()\n"]}]
    nb = tmp_path / "ft.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    [plan] = extract_paths([nb])
    assert plan.value("model_id") == "Qwen/Qwen2.5-0.5B" and plan.value("per_device_batch") == 3
    assert plan.get("model_id").span.line == 6  # line numbers still the notebook's


def test_sft_trainer_given_training_arguments_takes_sft_config_defaults():
    # gemma-cookbook notebooks: SFTTrainer(args=transformers.TrainingArguments(...)): TRL rebuilds it as
    # SFTConfig(**args.to_dict()), so max_length and packing are SFTConfig's defaults, and gradient
    # checkpointing stays TrainingArguments' (off)
    from memlint.library.versions import pinned_versions

    src = ("import transformers\nfrom trl import SFTTrainer\nfrom transformers import AutoModelForCausalLM\n"
           "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B')\n"
           "trainer = SFTTrainer(model=model, train_dataset=None, args=transformers.TrainingArguments(\n"
           "    per_device_train_batch_size=1, gradient_accumulation_steps=4, output_dir='o', optim='paged_adamw_8bit'))\n"
           "trainer.train()\n")
    with pinned_versions({"trl": "0.22.0"}):
        plan = extract_source(src, "nb.py")
    got = {n: plan.fields[n].value for n in ("max_length", "packing", "padding", "gradient_checkpointing")}
    assert got == {"max_length": 1024, "packing": False, "padding": "longest", "gradient_checkpointing": False}
    assert plan.fields["max_length"].source == "library-default"
    assert "turns a TrainingArguments into an SFTConfig" in " ".join(plan.fields["max_length"].chain)
    # a plain Trainer with TrainingArguments has no such default
    plan = extract_source(src.replace("SFTTrainer(", "transformers.Trainer("), "nb.py")
    assert plan.fields["max_length"].value is None


_HF_DATACLASS = '''from dataclasses import dataclass, field
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class DataArguments:
    max_seq_length: int = field(default=4096)
    max_prompt_tokens: int = field(default=128)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="gpt2")


parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
model_args, data_args, training_args = parser.parse_args_into_dataclasses()
model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
enc = tokenizer(["text"], truncation=True, padding="max_length", max_length=data_args.max_seq_length)
Trainer(model=model, args=training_args).train()
'''


def test_an_abbreviated_flag_of_hf_argument_parser(tmp_path: Path, monkeypatch):
    # pacman100/LLM-Workshop run_peft.sh: `--max_seq_len 2048` for a field max_seq_length: argparse (which
    # HfArgumentParser is) takes an unambiguous prefix of a long option
    _write(tmp_path, {"train.py": _HF_DATACLASS})
    monkeypatch.chdir(tmp_path)
    _, plan = _plan_of_command(["python", "train.py", "--max_seq_len", "2048", "--output_dir", "o",
                                "--per_device_train_batch_size", "2"])
    assert plan.fields["max_length"].value == 2048 and plan.fields["per_device_batch"].value == 2
    # an ambiguous prefix (max_seq_length and max_prompt_tokens both start with "max_") is not taken
    _, plan = _plan_of_command(["python", "train.py", "--max_", "2048", "--output_dir", "o"])
    assert plan.fields["max_length"].value == 4096


def test_peft_config_from_a_folder_of_the_checkout(tmp_path: Path, monkeypatch):
    # Qwen2.5-Coder finetuning/sft/train.py: PeftConfig.from_pretrained(args.peft_config_path) with
    # --peft_config_path ./configs/lora: the folder's adapter_config.json is the LoRA config
    script = ('import argparse\nfrom peft import PeftConfig, get_peft_model\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n'
              'p = argparse.ArgumentParser()\np.add_argument("--peft_config_path")\na = p.parse_args()\n'
              'model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")\n'
              'model = get_peft_model(model, PeftConfig.from_pretrained(a.peft_config_path))\n'
              'Trainer(model=model, args=TrainingArguments("o")).train()\n')
    adapter = {"peft_type": "LORA", "r": 8, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}
    _write(tmp_path, {"train.py": script, "configs/lora/adapter_config.json": json.dumps(adapter)})
    monkeypatch.chdir(tmp_path)
    _, plan = _plan_of_command(["python", "train.py", "--peft_config_path", "./configs/lora"])
    got = {n: plan.fields[n].value for n in ("method", "lora_r", "lora_alpha")}
    assert got == {"method": "lora", "lora_r": 8, "lora_alpha": 32}
    # a folder that is not there: the method is not guessed
    _, plan = _plan_of_command(["python", "train.py", "--peft_config_path", "./nowhere"])
    assert plan.fields["method"].value != "lora"


def test_a_training_arguments_subclass_length_field_caps_when_the_tokenizer_call_cannot_be_followed():
    # stanford_alpaca-style `class TrainingArguments(transformers.TrainingArguments): model_max_length: int`
    # whose only tokenizer call is in a helper taking the tokenizer as a parameter
    # (`max_length=tokenizer.model_max_length`) and is not followed: the field is the script's own length argument
    src = '''from dataclasses import dataclass, field
import transformers
from transformers import Trainer


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    model_max_length: int = field(default=512)


def _tokenize_fn(strings, tokenizer):
    return [tokenizer(s, padding="longest", max_length=tokenizer.model_max_length, truncation=True) for s in strings]


parser = transformers.HfArgumentParser((TrainingArguments,))
(training_args,) = parser.parse_args_into_dataclasses()
model = transformers.AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
tokenizer = transformers.AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B", model_max_length=training_args.model_max_length)
Trainer(model=model, tokenizer=tokenizer, args=training_args).train()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["max_length"].value == 512
    assert "length argument" in " ".join(plan.fields["max_length"].chain)
