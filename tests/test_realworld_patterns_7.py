"""Round 6 of the real-world trials (memlint issues #14/#15, docs/realworld.md "Round 6"): misses met
reading fresh public checkouts. `bash scripts/run.sh 2 /ckpt` launch commands read with their
arguments, a dataclass's __post_init__ run after HfArgumentParser fills it, bf16 weights under a
Trainer without bf16/fp16 (pure bf16), and a launcher's script that ran out of its time budget kept.
Synthetic checkouts written the way the real code is; no public file is copied."""

import json

import pytest

from memlint.cli import main
from memlint.errors import MemlintError
from memlint.extract import extract_targets
from memlint.extract import budget
from memlint.extract.launch import shell_script
from memlint.extract.shell import command_targets
from test_realworld_patterns_5 import _write  # noqa: E402  (one way to lay out a synthetic checkout)


def _plans_of_command(words):
    return extract_targets(command_targets(words))


_TRAIN = '''import sys
from dataclasses import dataclass, field
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="gpt2")


def main():
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    Trainer(model=model, args=training_args).train()


if __name__ == "__main__":
    main()
'''


# ---- 1. `bash scripts/run.sh ARGS`: a shell launcher run with its own arguments ------------------


_POSITIONAL_SH = '''# Tested with 2 & 4 GPUs
set -x
if [ "$#" -lt 2 ]; then
    echo "Usage: run.sh <nproc_per_node> <save_path> [other_configs...]"
    exit 1
fi

nproc_per_node=$1
save_path=$2

# Shift the arguments so $@ refers to the rest
shift 2

torchrun --standalone --nnodes=1 --nproc_per_node=$nproc_per_node \\
    train.py \\
    --model_name_or_path Qwen/Qwen2.5-0.5B \\
    --output_dir $save_path \\
    --per_device_train_batch_size 4 $@
'''


def test_bash_command_runs_the_shell_launcher_with_its_positional_arguments(tmp_path, monkeypatch):
    _write(tmp_path, {"train.py": _TRAIN, "examples/run.sh": _POSITIONAL_SH})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["bash", "examples/run.sh", "4", "/ckpt", "--gradient_accumulation_steps", "8"])
    assert plan.get("num_gpus").value == 4  # $1 -> nproc_per_node
    assert plan.get("per_device_batch").value == 4
    assert plan.get("grad_accum").value == 8  # "$@" after `shift 2`: the words after the two arguments
    assert plan.get("model_id").value == "Qwen/Qwen2.5-0.5B"
    assert plan.via.startswith("examples/run.sh:")


def test_the_launcher_read_alone_leaves_its_arguments_unknown(tmp_path, monkeypatch):
    # without a command the positional arguments are unknown: the GPU count is not guessed
    _write(tmp_path, {"train.py": _TRAIN, "examples/run.sh": _POSITIONAL_SH})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["bash", "examples/run.sh"])  # run with no arguments: $1 empty
    assert plan.get("num_gpus").value is None
    from memlint.extract import extract_paths

    (alone,) = extract_paths(["examples/run.sh"])
    assert alone.get("num_gpus").value is None and alone.get("grad_accum").value == 1


def test_script_arguments_a_launcher_ignores_do_not_reach_the_script(tmp_path, monkeypatch):
    # LMFlow's README passes --model_name_or_path to a launcher that hard-codes its own and never uses "$@"
    sh = '''#!/bin/bash
model_name_or_path=meta-llama/Llama-3.2-3B-Instruct
output_dir=output_models/finetune
log_dir=${output_dir}/log/
mkdir -p ${output_dir} ${log_dir}

accelerate launch --num_processes 8 \\
  train.py \\
    --model_name_or_path ${model_name_or_path} \\
    --output_dir ${output_dir} --overwrite_output_dir \\
    --bf16 \\
    > >(tee ${log_dir}/train.log) \\
    2> >(tee ${log_dir}/train.err >&2)
'''
    _write(tmp_path, {"train.py": _TRAIN, "scripts/run_finetune.sh": sh})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["bash", "./scripts/run_finetune.sh", "--model_name_or_path", "gpt2"])
    assert plan.get("model_id").value == "meta-llama/Llama-3.2-3B-Instruct"
    assert plan.get("num_gpus").value == 8 and plan.get("precision").value == "amp-bf16"


def test_shell_script_forms_and_cli_errors(tmp_path, monkeypatch, capsys):
    assert shell_script(["bash", "-x", "run.sh", "1"]) == ("run.sh", ("1",), {}, None)
    assert shell_script(["CUDA_VISIBLE_DEVICES=0,1", "sh", "run.sh"]) == ("run.sh", (), {"CUDA_VISIBLE_DEVICES": "0,1"}, None)
    assert shell_script(["./run.sh", "a", "&&", "echo", "done"]) == ("./run.sh", ("a",), {}, None)
    assert shell_script(["cd", "finetune", "&&", "bash", "run.sh"]) == ("run.sh", (), {}, "finetune")
    assert shell_script(["bash", "-c", "python train.py"]) is None
    assert shell_script(["python", "train.py"]) is None
    _write(tmp_path, {"train.py": _TRAIN, "noop.sh": "echo hello\n"})
    monkeypatch.chdir(tmp_path)
    (noop,) = command_targets(["bash", "noop.sh"])  # memlint's limit, said as a note on the launcher: not an error
    assert "runs no Python training command" in noop.note
    # the CLI: one-line error, exit 2, for a missing script
    assert main(["plan", "--", "bash", "missing.sh", "2"]) == 2
    assert "missing.sh: no such file" in capsys.readouterr().err


def test_variables_set_before_bash_reach_the_launcher(tmp_path, monkeypatch, capsys):
    sh = "python train.py --model_name_or_path Qwen/Qwen2.5-0.5B --per_device_train_batch_size ${BS:-2}\n"
    _write(tmp_path, {"train.py": _TRAIN, "run.sh": sh})
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--format", "json", "--", "BS=16", "bash", "run.sh"]) == 0
    doc = json.loads(capsys.readouterr().out)
    doc = doc[0] if isinstance(doc, list) else doc
    assert doc["plan"]["per_device_batch"]["value"] == 16


# ---- 2. HfArgumentParser builds each dataclass with cls(**values): __post_init__ runs ------------


def test_post_init_of_a_parsed_dataclass_runs_after_the_flags(tmp_path, monkeypatch):
    # LMFlow's ModelArguments: `if self.use_qlora: if not self.use_lora: self.use_lora = True`
    script = '''from dataclasses import dataclass, field
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="Qwen/Qwen2.5-0.5B")
    use_lora: bool = field(default=False)
    use_qlora: bool = field(default=False)
    lora_r: int = field(default=8)

    def __post_init__(self):
        if self.use_qlora:
            if not self.use_lora:
                self.use_lora = True


parser = HfArgumentParser((ModelArguments, TrainingArguments))
model_args, training_args = parser.parse_args_into_dataclasses()
quant = BitsAndBytesConfig(load_in_4bit=True) if model_args.use_qlora else None
model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, quantization_config=quant)
if model_args.use_lora:
    model = get_peft_model(model, LoraConfig(r=model_args.lora_r))
Trainer(model=model, args=training_args).train()
'''
    _write(tmp_path, {"finetune.py": script})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["python", "finetune.py", "--use_qlora", "1", "--lora_r", "16", "--output_dir", "o"])
    assert plan.get("method").value == "qlora" and plan.get("lora_r").value == 16
    (plain,) = _plans_of_command(["python", "finetune.py", "--output_dir", "o"])
    assert plain.get("method").value == "full"


# ---- 3. bf16 weights under a Trainer with neither bf16 nor fp16 ----------------------------------


_SEQ2SEQ_YAML = '''import sys
import torch
import yaml
from transformers import AutoModelForCausalLM, Seq2SeqTrainer, Seq2SeqTrainingArguments

cfg = yaml.safe_load(open(sys.argv[2]))
args = Seq2SeqTrainingArguments(**cfg["training_args"])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.bfloat16)
Seq2SeqTrainer(model=model, args=args).train()
'''


def test_bf16_weights_without_amp_flags_train_in_pure_bf16(tmp_path, monkeypatch):
    # GLM-4's finetune.py: the model loaded in bf16, the YAML's training_args set neither bf16 nor fp16
    _write(tmp_path, {"finetune.py": _SEQ2SEQ_YAML,
                      "configs/lora.yaml": "training_args:\n  output_dir: ./output\n  per_device_train_batch_size: 1\n",
                      "configs/amp.yaml": "training_args:\n  output_dir: ./output\n  bf16: true\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["python", "finetune.py", "Qwen/Qwen2.5-0.5B", "configs/lora.yaml"])
    prec = plan.get("precision")
    assert prec.value == "pure-bf16" and "without autocast" in prec.chain[-1]
    (amp,) = _plans_of_command(["python", "finetune.py", "Qwen/Qwen2.5-0.5B", "configs/amp.yaml"])
    assert amp.get("precision").value == "amp-bf16"


def test_default_dtype_without_amp_flags_stays_fp32(tmp_path, monkeypatch):
    script = _SEQ2SEQ_YAML.replace(", torch_dtype=torch.bfloat16", "")
    _write(tmp_path, {"finetune.py": script, "c.yaml": "training_args:\n  output_dir: ./output\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["python", "finetune.py", "Qwen/Qwen2.5-0.5B", "c.yaml"])
    assert plan.get("precision").value == "fp32"


# ---- 4. a launcher's script past its time budget is kept, not dropped as a helper -----------------


def test_launched_script_out_of_time_is_kept_with_the_budget_note(tmp_path, monkeypatch, capsys):
    # the deadline is checked every 1,024 statements: a long module body before main() runs past it
    slow = _TRAIN.replace("\n\nif __name__", "\n" + "x = 1\n" * 3000 + "\n\nif __name__")
    _write(tmp_path, {"train.py": slow, "scripts/run.sh": "torchrun --nproc_per_node 2 train.py --output_dir o\n",
                      "helper.py": "import torch\nx = 1\n"})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(budget, "MAX_SECONDS", 0.0)
    from memlint.extract import extract_paths

    (plan,) = extract_paths(["scripts/run.sh"])
    assert plan.path == "train.py" and any(n.startswith(budget.STOPPED_NOTE) for n in plan.notes)
    assert not plan.get("trainer").known and plan.get("num_gpus").value == 2
    assert main(["plan", "--format", "json", "scripts/run.sh"]) == 0  # was: "no Python scripts ... found", exit 2
    doc = json.loads(capsys.readouterr().out)
    assert (doc[0] if isinstance(doc, list) else doc)["path"] == "train.py"
    # a walk still drops files that train nothing (the helper): only the launched script is kept
    assert main(["plan", "--format", "json", "."]) == 0
    docs = json.loads(capsys.readouterr().out)
    docs = docs if isinstance(docs, list) else [docs]
    assert [d["path"] for d in docs] == ["train.py"]


# ---- 5. a model built under init_empty_weights() is a skeleton, not the model the loop trains -----


_LOOP_WITH_SAVER = '''import torch
from accelerate import init_empty_weights
from transformers import AutoConfig, AutoModelForCausalLM


class Saver:
    def __init__(self, model):
        self.model = model

    def save(self, path):
        # verl's checkpoint manager: an empty model of the same config, for save_pretrained
        config = AutoConfig.from_pretrained("Qwen/Qwen2.5-0.5B")
        with {ctx}:
            save_model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
        save_model.save_pretrained(path, state_dict=self.model.state_dict())


def build_optimizer(params, name):
    return OPTIMIZERS[name](params)


model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.float32)
optimizer = build_optimizer(model.parameters(), "adamw")
saver = Saver(model)
for step, batch in enumerate(loader):
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 100 == 0:
        saver.save("ckpt")
'''


@pytest.mark.parametrize("ctx", ["init_empty_weights()", 'torch.device("meta")'])
def test_a_loop_trains_the_loaded_model_not_an_empty_weights_skeleton(tmp_path, monkeypatch, ctx):
    _write(tmp_path, {"train.py": _LOOP_WITH_SAVER.format(ctx=ctx)})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["python", "train.py"])
    assert plan.get("model_id").value == "Qwen/Qwen2.5-0.5B"
    assert plan.get("torch_dtype").value == "fp32"  # the skeleton's bf16 was read before


def test_without_the_empty_weights_context_the_later_model_is_still_taken(tmp_path, monkeypatch):
    # the same loop with a plain `with torch.no_grad():` keeps the old choice (the last model built): the
    # fix is the weightless context, not a preference for the first model
    _write(tmp_path, {"train.py": _LOOP_WITH_SAVER.format(ctx="torch.no_grad()")})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["python", "train.py"])
    assert plan.get("torch_dtype").value == "bf16"


# ---- 6. an optimizer class looked up by name; micro-batches split off a batch --------------------


_VERL_STEP = '''import importlib
import torch
from transformers import AutoModelForCausalLM


def build_optimizer(parameters, impl, name):
    module = importlib.import_module(impl)
    optimizer_cls = getattr(module, name)
    return optimizer_cls(parameters, lr=1e-5)


class SFT:
    def __init__(self, micro):
        self.model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        self.optimizer = build_optimizer(self.model.parameters(), "torch.optim", "AdamW")
        self.micro = micro

    def _loss_and_backward(self, mb, n):
        loss = self.model(**mb).loss / n
        loss.backward()
        return loss

    def training_step(self, batch):
        self.optimizer.zero_grad()
        micro_batches = batch.split(self.micro)
        for mb in micro_batches:
            self._loss_and_backward(mb, len(micro_batches))
        self.optimizer.step()


trainer = SFT(4)
for batch in loader:
    trainer.training_step(batch)
'''


def test_an_optimizer_class_imported_by_name_is_the_library_optimizer(tmp_path, monkeypatch):
    # verl's build_optimizer: getattr(importlib.import_module(config.optimizer_impl), config.optimizer)
    _write(tmp_path, {"train.py": _VERL_STEP})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["python", "train.py"])
    assert plan.get("optimizer").value == "adamw_torch"


def test_micro_batches_backwarded_in_a_helper_leave_the_accumulation_unknown(tmp_path, monkeypatch):
    # one optimizer step after a loop over micro-batches whose backward runs in a helper: not "1 per micro-batch"
    _write(tmp_path, {"train.py": _VERL_STEP})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["python", "train.py"])
    acc = plan.get("grad_accum")
    assert acc.value is None and acc.source == "unknown"
    assert any("micro-batches `for ... in micro_batches`" in n for n in plan.notes)
    # a step after every backward still reads 1
    _write(tmp_path, {"train.py": _VERL_STEP.replace("        for mb in micro_batches:\n            self._loss_and_backward(mb, len(micro_batches))\n",
                                                     "        self._loss_and_backward(batch, 1)\n")})
    (plan,) = _plans_of_command(["python", "train.py"])
    assert plan.get("grad_accum").value == 1


def test_fully_shard_in_place_then_the_optimizer_over_the_same_model(tmp_path, monkeypatch):
    # FSDP2 shards in place: verl's apply_fsdp2(model, ...) calls fully_shard(model) and the optimizer is
    # built over model.parameters() afterwards; the plan read the unsharded model the optimizer names
    script = '''import torch
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM


def apply_fsdp2(model, fsdp_kwargs):
    for name, module in model.named_modules():
        if module.__class__.__name__ == "Qwen2DecoderLayer":
            fully_shard(module, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)


model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
apply_fsdp2(model, {"reshard_after_forward": True})
optimizer = torch.optim.AdamW(model.parameters())
for batch in loader:
    model(**batch).loss.backward()
    optimizer.step()
'''
    _write(tmp_path, {"train.py": script})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans_of_command(["torchrun", "--nproc_per_node", "4", "train.py"])
    assert plan.get("distributed").value == "fsdp" and plan.get("num_gpus").value == 4
    assert plan.get("optimizer").value == "adamw_torch"
