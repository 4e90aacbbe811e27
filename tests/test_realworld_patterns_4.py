"""Round 4: patterns of real training files met on held-out repositories (docs/realworld.md, round 4).

Each test is a synthetic excerpt of a shape met in public scripts; the comment says which shape."""

from pathlib import Path

from memlint.extract import extract_file, extract_source
from checkouts import write_checkout


def _fields(src: str, *names: str) -> dict:
    plan = extract_source(src, "train.py")
    return {n: plan.fields[n].value for n in names}


_write = write_checkout


_ARGPARSE = '''import argparse
from transformers import AutoModelForCausalLM
p = argparse.ArgumentParser()
p.add_argument("--model_name_or_path")
p.add_argument("--per_device_train_batch_size", type=int, default=16)
args = p.parse_args()
model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
'''


def test_a_launcher_that_cds_into_the_script_folder_first(tmp_path: Path):
    # finetune/scripts/run.sh: `cd "$(dirname "${BASH_SOURCE[0]}")/../sft/"` (or `cd ../sft/`) on its own
    # line, then `deepspeed main.py ...`: main.py is in finetune/sft, not beside the launcher
    from memlint.extract.shell import launcher_targets

    body = " \\\n\t--model_name_or_path /base_model --per_device_train_batch_size 2\n"
    root = _write(tmp_path, {"finetune/sft/main.py": _ARGPARSE,
                             "finetune/scripts/a.sh": '#!/bin/bash\ncd "$(dirname "${BASH_SOURCE[0]}")/../sft/"\n\ndeepspeed main.py' + body,
                             "finetune/scripts/b.sh": "cd ../sft/ || exit 1\ndeepspeed main.py" + body,
                             "finetune/scripts/c.sh": 'HERE=$(cd "$(dirname "$0")" && pwd)\ncd $HERE/../sft\npython main.py' + body})
    for name in ("a.sh", "b.sh", "c.sh"):
        [target] = launcher_targets(root / "finetune/scripts" / name, f"finetune/scripts/{name}", [root])
        assert target.path.resolve() == (root / "finetune/sft/main.py").resolve(), name
        plan = extract_file(target.path, launch=target.launch)
        assert plan.fields["model_id"].value == "/base_model", name


_TYPER = '''import functools
from typing import Annotated
import ruamel.yaml as yaml
import typer
from pathlib import Path
from peft import get_peft_config, get_peft_model
from transformers import AutoModelForCausalLM, Seq2SeqTrainer, Seq2SeqTrainingArguments, DataCollatorForSeq2Seq
from datasets import load_dataset

app = typer.Typer()


def _parser():
    parser = yaml.YAML(typ="safe", pure=True)
    parser.indent(mapping=2)
    return parser


def process(batch, tokenizer, max_input_length, max_output_length):
    out = []
    for ids in batch["ids"]:
        max_length = max_input_length + max_output_length + 1
        out.append(ids[:max_length])
    return {"input_ids": out}


@app.command()
def main(
    data_dir: Annotated[str, typer.Argument(help="")],
    model_dir: Annotated[str, typer.Argument(help="")],
    config_file: Annotated[str, typer.Argument(help="")],
    resume: str = typer.Argument(default=""),
):
    cfg = _parser().load(Path(config_file).expanduser().resolve())
    model = AutoModelForCausalLM.from_pretrained(model_dir, trust_remote_code=True)
    model = get_peft_model(model, get_peft_config(cfg["peft_config"]))
    ds = load_dataset("json", data_dir=data_dir)
    ds = ds.map(functools.partial(process, tokenizer=None, max_input_length=cfg["max_input_length"],
                                  max_output_length=cfg["max_output_length"]), batched=True)
    args = Seq2SeqTrainingArguments(**cfg["training_args"])
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=ds["train"],
                             data_collator=DataCollatorForSeq2Seq(tokenizer=None, padding="longest"))
    trainer.train()


if __name__ == "__main__":
    app()
'''
_TYPER_YAML = '''max_input_length: 128
max_output_length: 256
training_args:
  output_dir: ./output
  per_device_train_batch_size: 4
peft_config:
  peft_type: LORA
  task_type: CAUSAL_LM
  r: 8
  lora_alpha: 32
'''


def test_a_typer_command_its_yaml_config_and_a_partial_mapped_over_the_dataset(tmp_path: Path, monkeypatch):
    # typer positional arguments (Annotated[str, typer.Argument()]), a ruamel YAML(typ="safe").load(path),
    # peft.get_peft_config(dict with peft_type), ds.map(functools.partial(fn, max_len=...)) where fn
    # truncates by slicing ids[:max_length]
    from memlint.extract.launch import parse_command

    _write(tmp_path, {"finetune.py": _TYPER, "configs/lora.yaml": _TYPER_YAML})
    monkeypatch.chdir(tmp_path)
    launch = parse_command(["python", "finetune.py", "data/", "THUDM/chatglm3-6b", "configs/lora.yaml"])
    plan = extract_file(tmp_path / "finetune.py", launch=launch)
    got = {n: plan.fields[n].value for n in ("model_id", "method", "lora_r", "per_device_batch", "max_length", "trainer")}
    assert got == {"model_id": "THUDM/chatglm3-6b", "method": "lora", "lora_r": 8, "per_device_batch": 4,
                   "max_length": 385, "trainer": "Seq2SeqTrainer"}
    # without the command, the positional model directory stays unknown
    assert extract_file(tmp_path / "finetune.py").fields["model_id"].value is None


def test_a_function_mapped_with_fn_kwargs_runs_with_them():
    # ds.map(tokenize_fn, batched=True, fn_kwargs={"tokenizer": tokenizer}): the tokenizer call inside
    # reads tokenizer.model_max_length, set by from_pretrained(model_max_length=...)
    src = '''from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

def tokenize_fn(examples, tokenizer):
    return tokenizer(examples["text"], padding="longest", max_length=tokenizer.model_max_length, truncation=True)

tokenizer = AutoTokenizer.from_pretrained("gpt2", model_max_length=1024)
model = AutoModelForCausalLM.from_pretrained("gpt2")
ds = load_dataset("json", data_files="x.json", split="train")
ds = ds.map(tokenize_fn, batched=True, fn_kwargs={"tokenizer": tokenizer})
Trainer(model=model, args=TrainingArguments(output_dir="o"), train_dataset=ds).train()
'''
    assert _fields(src, "max_length", "padding") == {"max_length": 1024, "padding": "longest"}


def test_a_collator_of_a_sibling_module_that_pads_with_pad_sequence(tmp_path: Path):
    # from build_dataset import DataCollatorForSupervisedDataset: its __call__ pads with
    # torch.nn.utils.rnn.pad_sequence, i.e. to the longest sample of the batch
    coll = '''from dataclasses import dataclass
import torch


@dataclass
class DataCollatorForSupervisedDataset(object):
    tokenizer: object

    def __call__(self, instances):
        input_ids = [instance["input_ids"] for instance in instances]
        input_ids = torch.nn.utils.rnn.pad_sequence(input_ids, batch_first=True, padding_value=0)
        return dict(input_ids=input_ids)
'''
    train = '''from build_dataset import DataCollatorForSupervisedDataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments
tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")
collator = DataCollatorForSupervisedDataset(tokenizer=tokenizer)
Trainer(model=model, args=TrainingArguments(output_dir="o"), train_dataset=None, data_collator=collator).train()
'''
    _write(tmp_path, {"build_dataset.py": coll, "train.py": train})
    assert extract_file(tmp_path / "train.py").fields["padding"].value == "longest"


def test_a_script_that_reads_its_yaml_and_the_flags_after_it(tmp_path: Path, monkeypatch):
    # `torchrun train.py config.yaml --deepspeed=ds.json`: the script calls parser.parse_yaml_file(argv[1])
    # or parser.parse_yaml_and_args(argv[1], argv[2:]) itself, so the script (with the YAML and the flags
    # over it) is read, not the YAML alone as a recipe
    from memlint.extract.launch import command_target

    script = '''import os
import sys
from dataclasses import dataclass, field
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default=None)


class MyParser(HfArgumentParser):
    def parse_yaml_and_args(self, yaml_arg, other_args=None):
        return self.parse_yaml_file(yaml_arg)


def main():
    parser = MyParser((ModelArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".yaml"):
        model_args, training_args = parser.parse_yaml_file(os.path.abspath(sys.argv[1]))
    elif len(sys.argv) > 2 and sys.argv[1].endswith(".yaml"):
        model_args, training_args = parser.parse_yaml_and_args(os.path.abspath(sys.argv[1]), sys.argv[2:])
    else:
        model_args, training_args = parser.parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    Trainer(model=model, args=training_args, train_dataset=None).train()


if __name__ == "__main__":
    main()
'''
    yaml = "model_name_or_path: gpt2\nper_device_train_batch_size: 4\ngradient_accumulation_steps: 8\nbf16: true\noutput_dir: out\n"
    ds = '{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3}}'
    _write(tmp_path, {"train.py": script, "config.yaml": yaml, "ds.json": ds})
    monkeypatch.chdir(tmp_path)
    target = command_target(["torchrun", "--nproc_per_node=8", "train.py", "config.yaml", "--deepspeed=ds.json"])
    assert target.path.name == "train.py"
    plan = extract_file(target.path, launch=target.launch)
    got = {n: plan.fields[n].value for n in ("model_id", "per_device_batch", "grad_accum", "distributed", "trainer")}
    assert got == {"model_id": "gpt2", "per_device_batch": 4, "grad_accum": 8, "distributed": "zero3", "trainer": "Trainer"}


def test_a_notebook_that_runs_a_script_is_its_launcher(tmp_path):
    # THUDM/ChatGLM3 finetune_demo/lora_finetune.ipynb: `!CUDA_VISIBLE_DEVICES=0 python finetune_hf.py data/ MODEL configs/lora.yaml`
    import json

    from memlint.extract import extract_paths

    (tmp_path / "train.py").write_text(
        "import argparse\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "p = argparse.ArgumentParser()\np.add_argument('--model', default='gpt2')\np.add_argument('--bs', type=int, default=8)\n"
        "a = p.parse_args()\nmodel = AutoModelForCausalLM.from_pretrained(a.model)\n"
        "Trainer(model=model, args=TrainingArguments('o', per_device_train_batch_size=a.bs)).train()\n")
    cells = [{"cell_type": "code", "source": ["!pip install -q transformers\n", "import os"]},
             {"cell_type": "markdown", "source": ["# train"]},
             {"cell_type": "code", "source": ["!CUDA_VISIBLE_DEVICES=0 python train.py --model Qwen/Qwen2.5-0.5B --bs 2"]}]
    nb = tmp_path / "run.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    plans = extract_paths([nb])
    assert [p.path.endswith("run.ipynb") for p in plans] == [True, False]
    launched = plans[1]
    assert launched.via.endswith("run.ipynb:3")  # the notebook's code-cell line
    assert launched.value("model_id") == "Qwen/Qwen2.5-0.5B" and launched.value("per_device_batch") == 2
    assert launched.get("model_id").source == "command-line"
