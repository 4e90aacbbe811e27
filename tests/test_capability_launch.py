"""Launches read by capability (issue #27, round 7): a framework's entry module run by a process launcher, a
package's console script, `make TARGET`, a launcher held in a shell variable, a named launcher whose command shows no
trainer, notebooks with a cell that is not Python or saved outputs over the size budget, and the README's own command
for a file named alone. Each test is a tiny made-up checkout written from the pattern; no public file is copied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlint.cli import main
from memlint.errors import MemlintError
from memlint.extract import extract_paths, extract_targets
from memlint.extract.launch import entry_module, make_command, parse_command, tokens
from memlint.extract.shell import command_targets, launches
from memlint.files import checked_root
from functools import partial
from checkouts import ARGPARSE_TRAIN, write_checkout


_write = partial(write_checkout, dedent=True)


def _plans(words: list[str] | str) -> list:
    return extract_targets(command_targets(tokens(words) if isinstance(words, str) else words))


def _v(plan, field):
    return plan.get(field).value, plan.get(field).source


_TRAIN = '''
import os
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained(os.environ.get("BASE_MODEL", "gpt2"))
args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, bf16=True)
Trainer(model=model, args=args).train()
'''

_MERGE = '''
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("gpt2")
model.save_pretrained("merged")
'''

_AXOLOTL = '''
base_model: Qwen/Qwen2.5-0.5B
sequence_len: 2048
sample_packing: true
micro_batch_size: 2
gradient_accumulation_steps: 4
bf16: auto
flash_attention: true
optimizer: adamw_torch_fused
datasets:
  - path: tatsu-lab/alpaca
    type: alpaca
'''

_ZERO3 = '''
{"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto"}
'''


# ---- 1. a framework's entry module under a process launcher -----------------------------------------------------


@pytest.mark.parametrize("command, tool, sub, runner, gpus", [
    ("torchrun --nproc_per_node 8 --master_port 20001 -m axolotl.cli.train cfg.yml --deepspeed ds.json",
     "axolotl", "train", "torchrun", 8),
    ("accelerate launch --num_processes 2 -m axolotl.cli.train cfg.yml", "axolotl", "train", "accelerate", 2),
    ("accelerate launch --module axolotl.cli.train cfg.yml", "axolotl", "train", "accelerate", None),
    ("python -m axolotl.cli.main train cfg.yml", "axolotl", "train", "python", None),
    ("CUDA_VISIBLE_DEVICES=0,1 python -m llamafactory.cli train cfg.yml", "llamafactory-cli", "train", "python", 2),
    ("torchrun --nproc_per_node 4 -m llamafactory.launcher cfg.yml", "llamafactory-cli", "train", "torchrun", 4),
])
def test_a_framework_entry_module_is_the_frameworks_own_command(command, tool, sub, runner, gpus):
    launch = parse_command(tokens(command))
    assert (launch.launcher, launch.subcommand, launch.runner, launch.gpus) == (tool, sub, runner, gpus)
    assert launch.module is None and launch.argv[0] == "cfg.yml"


def test_entry_modules_are_data_and_a_non_training_subcommand_is_refused():
    assert entry_module("axolotl.cli.train") == ("axolotl", "train")
    assert entry_module("mypkg.train") is None
    with pytest.raises(MemlintError, match="does not train"):
        parse_command(tokens("python -m llamafactory.cli chat cfg.yml"))
    # a module of no framework stays a module launch
    assert parse_command(tokens("torchrun -m mypkg.train --lr 1")).module == "mypkg.train"


def test_torchrun_module_of_a_framework_not_in_the_checkout_reads_its_config(tmp_path, monkeypatch):
    # the config's folder is the working directory; the DeepSpeed JSON comes from the command line only; the
    # checkout (an archive: no .git) has its README at the top, so ../ds is inside it
    _write(tmp_path, {"README.md": "# a checkout\n", "rm/cfg.yml": _AXOLOTL, "ds/zero3.json": _ZERO3})
    monkeypatch.chdir(tmp_path / "rm")
    (plan,) = _plans("torchrun --nproc_per_node 8 -m axolotl.cli.train cfg.yml --deepspeed ../ds/zero3.json")
    assert _v(plan, "model_id") == ("Qwen/Qwen2.5-0.5B", "literal")
    assert plan.get("per_device_batch").value == 2 and plan.get("grad_accum").value == 4
    assert plan.get("max_length").value == 2048 and plan.get("packing").value is True
    assert plan.get("distributed").value == "zero3"
    assert _v(plan, "num_gpus") == (8, "command-line")


def test_four_processes_without_sharding_are_data_parallel(tmp_path, monkeypatch):
    _write(tmp_path, {"cfg.yml": _AXOLOTL})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans('CUDA_VISIBLE_DEVICES="0,1,2,3" torchrun --nproc_per_node 4 -m axolotl.cli.train cfg.yml')
    assert plan.get("num_gpus").value == 4 and plan.get("distributed").value == "none"
    assert plan.get("optimizer").value == "adamw_torch_fused"


def test_a_framework_tool_in_a_shell_launcher_is_read(tmp_path, monkeypatch):
    sh = '''
    CONFIG=examples/sft.yml
    accelerate launch --num_processes 4 -m axolotl.cli.train $CONFIG
    FORCE_TORCHRUN=1 llamafactory-cli train examples/lf.yaml
    '''
    lf = '''
    model_name_or_path: Qwen/Qwen2.5-1.5B
    stage: sft
    do_train: true
    finetuning_type: lora
    lora_rank: 8
    cutoff_len: 1024
    per_device_train_batch_size: 1
    '''
    _write(tmp_path, {"run.sh": sh, "examples/sft.yml": _AXOLOTL, "examples/lf.yaml": lf})
    monkeypatch.chdir(tmp_path)
    axo, lf_plan = _plans("bash run.sh")
    assert axo.get("model_id").value == "Qwen/Qwen2.5-0.5B" and axo.get("num_gpus").value == 4
    assert axo.via == "run.sh:2"
    assert lf_plan.get("model_id").value == "Qwen/Qwen2.5-1.5B" and lf_plan.get("lora_r").value == 8


# ---- 3. `make TARGET` -----------------------------------------------------------------------------------------


_MAKEFILE = '''
.PHONY: train eval

PYTHON ?= uv run
GPUS := 2

prepare:
\t$(PYTHON) python prepare.py

train: prepare
\tBASE_MODEL="Qwen/Qwen2-0.5B-Instruct" $(PYTHON) accelerate launch --num_processes $(GPUS) train.py

eval:
\t$(PYTHON) python merge.py
'''


def test_make_target_runs_its_recipe_with_make_variables(tmp_path, monkeypatch):
    _write(tmp_path, {"Makefile": _MAKEFILE, "train.py": _TRAIN, "merge.py": _MERGE, "prepare.py": "print(1)\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("make train")
    assert _v(plan, "model_id") == ("Qwen/Qwen2-0.5B-Instruct", "command-line")  # VAR=... inside the recipe
    assert plan.get("num_gpus").value == 2 and plan.via == "Makefile:10"
    # a variable given to make wins over the file's (`GPUS := 2`); the default goal is the first target
    (plan,) = _plans("make train GPUS=4")
    assert plan.get("num_gpus").value == 4
    (merge,) = _plans("make eval")  # the named target's script builds no trainer: kept, and said so
    assert merge.path.endswith("merge.py") and any("no trainer" in n for n in merge.notes)
    with pytest.raises(MemlintError, match="no rule for the target 'deploy'"):
        _plans("make deploy")


def test_make_command_options():
    assert make_command(tokens("make -C exp -j 8 train MODEL=x")) == (None, ("train",), {"MODEL": "x"}, {}, "exp")
    assert make_command(tokens("cd a && make -f train.mk")) == ("train.mk", (), {}, {}, "a")
    assert make_command(tokens("python train.py")) is None


def test_make_variables_are_read_before_any_recipe(tmp_path):
    # make reads the whole file first: a variable assigned below the rule still reaches its recipe
    mk = "train:\n\t$(LAUNCH) train.py\n\nexport LAUNCH = torchrun --nproc_per_node 2\nLAUNCH ?= python\n"
    _write(tmp_path, {"Makefile": mk, "train.py": _TRAIN})
    (launch,) = launches(tmp_path / "Makefile", "Makefile", make=(("train",), {}))
    assert launch.launcher == "torchrun" and launch.gpus == 2


# ---- 4. a launcher held in a shell variable; accelerate without a config ------------------------------------------


def test_a_launcher_in_a_shell_variable_is_expanded(tmp_path, monkeypatch):
    sh = '''
    # sh scripts/run.sh
    LAUNCH="accelerate launch --config_file scripts/multi_gpu.yaml --num_processes=8"
    base_model_name="meta-llama/Llama-2-7b-hf"

    PYTHONPATH=. $LAUNCH scripts/train.py \\
        --base_model_name ${base_model_name}

    PYTHONPATH=. python scripts/merge.py --base_model_name ${base_model_name}
    '''
    acc = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 8\nmixed_precision: 'no'\n"
    _write(tmp_path, {"scripts/run.sh": sh, "scripts/multi_gpu.yaml": acc, "scripts/train.py": _TRAIN,
                      "scripts/merge.py": _MERGE})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["scripts/run.sh"])  # the merge command shows no trainer: the training one is the plan
    assert plan.path.endswith("train.py") and plan.via == "scripts/run.sh:5"
    assert plan.get("num_gpus").value == 8


def test_accelerate_launch_without_a_config_leaves_the_sharding_to_the_machine(tmp_path, monkeypatch):
    """No --config_file and nothing in the command that settles the processes: the machine's saved `accelerate config`
    decides the sharding (unknown); CUDA_VISIBLE_DEVICES alone gives the process count accelerate defaults to (one per
    visible GPU: launch.py _validate_launch_command), and over several, DDP."""
    _write(tmp_path, {"train.py": _TRAIN})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("accelerate launch train.py")
    assert _v(plan, "distributed") == (None, "unknown")
    assert "saved accelerate config" in plan.get("distributed").chain[0]
    (plan,) = _plans("CUDA_VISIBLE_DEVICES=0,1,2 accelerate launch train.py")
    assert _v(plan, "num_gpus") == (3, "command-line") and plan.get("distributed").value == "none"
    (plan,) = _plans("accelerate launch --num_processes 1 train.py")
    assert plan.get("distributed").value == "none" and plan.get("num_gpus").value == 1
    (plan,) = _plans("accelerate launch --use_fsdp train.py")
    assert plan.get("distributed").value == "fsdp"


def test_accelerate_launch_with_a_config_file_keeps_its_process_count(tmp_path, monkeypatch):
    """CUDA_VISIBLE_DEVICES does not override the num_processes of the --config_file (accelerate reads the file's)."""
    acc = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: 'no'\n"
    _write(tmp_path, {"train.py": _TRAIN, "acc.yaml": acc})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("CUDA_VISIBLE_DEVICES=0,1 accelerate launch --config_file acc.yaml train.py")
    assert plan.get("num_gpus").value == 4


# ---- 5. a named launcher whose command shows no trainer ------------------------------------------------------------


_WORKERS = '''
import hydra
import ray


@hydra.main(config_path="config", config_name="ppo", version_base=None)
def main(config):
    ray.init()
    ray.get(run.remote(config))


@ray.remote
def run(config):
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(config.model.path)


if __name__ == "__main__":
    main()
'''


def test_a_named_launchers_module_without_a_trainer_is_kept_with_a_note(tmp_path, monkeypatch, capsys):
    sh = "python3 -m rl.trainer.main_ppo \\\n  model.path=$BASE_MODEL \\\n  trainer.n_gpus_per_node=$N_GPUS\n"
    _write(tmp_path, {"scripts/train.sh": sh, "rl/__init__.py": "", "rl/trainer/__init__.py": "",
                      "rl/trainer/main_ppo.py": _WORKERS, "rl/trainer/config/ppo.yaml": "model:\n  path: null\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("N_GPUS=2 bash ./scripts/train.sh")
    assert plan.path.endswith("main_ppo.py") and plan.via == "scripts/train.sh:1"
    assert any("-m rl.trainer.main_ppo, in which memlint finds no trainer" in n for n in plan.notes)
    assert not plan.get("num_gpus").known  # python starts one process, but its workers may spread over more
    (alone,) = extract_paths(["scripts/train.sh"])  # the launcher named alone: the same
    assert alone.path.endswith("main_ppo.py")
    assert main(["plan", "--", "bash", "scripts/train.sh"]) == 0
    capsys.readouterr()
    assert extract_paths(["."]) == [] or all(not p.path.endswith("main_ppo.py") for p in extract_paths(["."]))


# ---- 6. notebooks: a cell that is not Python; saved outputs over the size budget ------------------------------------


def _notebook(cells: list[tuple[str, str]], outputs: list | None = None) -> str:
    return json.dumps({"cells": [{"cell_type": kind, "metadata": {}, "source": src,
                                  **({"outputs": outputs or [], "execution_count": None} if kind == "code" else {})}
                                 for kind, src in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


_NB_CELLS = [
    ("markdown", "# Fine-tune"),
    ("code", "# pip install trl\nimport torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments"),
    ("code", "# download the data first\nhuggingface-cli download --repo-type dataset org/data --local-dir data"),
    ("code", "model = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.bfloat16)"),
    ("code", "args = TrainingArguments(output_dir='o', per_device_train_batch_size=8, bf16=True)\n"
             "Trainer(model=model, args=args).train()"),
]


def test_a_cell_that_is_not_python_costs_that_cell_only(tmp_path, monkeypatch):
    _write(tmp_path, {"nb.ipynb": _notebook(_NB_CELLS)})
    monkeypatch.chdir(tmp_path)
    for plan in (extract_paths(["nb.ipynb"])[0], extract_paths(["."])[0]):  # named, and found by a walk
        assert plan.get("model_id").value == "gpt2" and plan.get("per_device_batch").value == 8
        assert plan.get("trainer").value == "Trainer" and not plan.diagnostics
        assert any(n.startswith("code cell 2 (line 4) is not Python (syntax error at line 5") for n in plan.notes)


def test_a_notebook_of_broken_cells_is_still_a_syntax_error(tmp_path, monkeypatch):
    bad = [("code", f"x = (\ny{i} = 1") for i in range(12)]  # more broken cells than memlint skips
    _write(tmp_path, {"nb.ipynb": _notebook(bad), "script.py": "import torch\nhuggingface-cli download x\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["nb.ipynb"])
    assert plan.diagnostics and plan.diagnostics[0].kind == "syntax-error"
    (plan,) = extract_paths(["script.py"])  # a script has no cells: the file is the unit
    assert plan.diagnostics[0].kind == "syntax-error"


def test_saved_outputs_over_the_size_budget_are_not_code(tmp_path, monkeypatch):
    from memlint import files

    image = {"output_type": "display_data", "data": {"image/png": "A" * 300_000}, "metadata": {}}
    _write(tmp_path, {"nb.ipynb": _notebook([c for c in _NB_CELLS if "huggingface" not in c[1]], [image])})
    monkeypatch.chdir(tmp_path)
    with files.size_limit(200_000):  # the file is ~1.2 MB, its code a few hundred bytes
        (plan,) = extract_paths(["nb.ipynb"])
        assert plan.get("model_id").value == "gpt2" and not plan.diagnostics
        assert any("with its saved outputs, over the max-file-size" in n for n in plan.notes)
        (walked,) = extract_paths(["."])
        assert walked.get("per_device_batch").value == 8
    with files.size_limit(100_000):  # past 8 × the limit: refused as before
        with pytest.raises(MemlintError, match="max-file-size"):
            extract_paths(["nb.ipynb"])


# ---- 7. the README's own command for a file named alone --------------------------------------------------------------





def test_a_file_named_alone_runs_as_its_readme_documents(tmp_path, monkeypatch, capsys):
    readme = '''
    # Finetuning

    Run it from this folder:

    ```bash
    $ CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node 2 train.py \\
        --model Qwen/Qwen2.5-0.5B --batch_size 8
    ```

    ```python
    python train.py --batch_size 99   # python code, not a command
    ```
    '''
    _write(tmp_path, {"ch1/train.py": ARGPARSE_TRAIN, "ch1/README.md": readme})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["ch1/train.py"])
    assert plan.get("model_id").value == "Qwen/Qwen2.5-0.5B" and plan.get("per_device_batch").value == 8
    assert plan.get("num_gpus").value == 2 and plan.via == "ch1/README.md:6"
    assert any(n.startswith("read as ch1/README.md:6 runs it") for n in plan.notes)
    (alone,) = extract_paths(["ch1/train.py"], readme=False)  # --no-readme-command
    assert alone.get("model_id").value == "gpt2" and alone.via is None
    assert main(["plan", "--no-readme-command", "--format", "json", "ch1/train.py"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["per_device_batch"]["value"] == 1
    assert main(["check", "--no-readme-command", "--no-cache", "--exit-zero", "-q", "ch1/train.py"]) == 0
    (walked,) = extract_paths(["."])  # a walk reads files as they are
    assert walked.get("model_id").value == "gpt2"


def test_a_readme_with_several_runs_of_the_file_leaves_it_alone(tmp_path, monkeypatch):
    readme = '''
    ```bash
    python train.py --model a/pretrain
    ```
    ```sh
    cd . && python train.py --model b/sft
    ```
    '''
    docs = "```console\n$ python ../train.py --model c/x\n```\n"
    _write(tmp_path, {"train.py": ARGPARSE_TRAIN, "README.md": readme, "docs/usage.md": docs})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert plan.get("model_id").value == "gpt2" and plan.via is None


def test_a_readme_command_for_a_config_and_only_inside_the_checked_root(tmp_path, monkeypatch):
    readme = "```\ncd train && llamafactory-cli train examples/sft.yaml\n```\n"
    lf = "model_name_or_path: Qwen/Qwen2.5-1.5B\nstage: sft\ndo_train: true\nfinetuning_type: full\n"
    _write(tmp_path, {"repo/README.md": readme, "repo/train/examples/sft.yaml": lf,
                      "README.md": "```\npython repo/other/train.py --model outside/x\n```\n",
                      "repo/other/train.py": ARGPARSE_TRAIN})
    monkeypatch.chdir(tmp_path / "repo")
    (plan,) = extract_paths(["train/examples/sft.yaml"])
    assert plan.via == "README.md:2" and any("README's command" in n for n in plan.notes)
    (plan,) = extract_paths(["other/train.py"])  # the README above the folder memlint runs in is not read
    assert plan.get("model_id").value == "gpt2"


# ---- 2. a package's console script; LightningCLI configs ---------------------------------------------------------------


_LIGHTNING_CFG = '''
seed_everything: 42
trainer:
  strategy:
    class_path: mypkg.lightning.DeepSpeedStrategy
    init_args:
      stage: 3
  precision: bf16-true
  accumulate_grad_batches: 4
  callbacks:
    - class_path: LearningRateMonitor
model:
  class_path: mypkg.lms.CLM
  init_args.config:
    model:
      model_config:
        hf_path: Qwen/Qwen2.5-0.5B
        enable_gradient_checkpointing: true
    optim:
      optimizer_class: deepspeed.ops.adam.FusedAdam
data:
  class_path: mypkg.data.SFTDataModule
  init_args.config:
    dataset_kwargs:
      path: org/some-dataset
    tokenizer:
      class_path: HFTokenizer
      init_args:
        path: Qwen/Qwen2.5-0.5B
    batch_size: 2
    packing_method: GROUP_BY_LENGTH
    max_length: 2048
'''

_CLI = '''
from lightning.pytorch.cli import LightningCLI


def main():
    LightningCLI(save_config_kwargs={"overwrite": True})
'''


def _package(tmp_path: Path, how: str = "pyproject") -> Path:
    entry = {"pyproject": ("pyproject.toml", '[project]\nname = "mypkg"\n[project.scripts]\nmy-train = "mypkg.cli.main:main"\n'),
             "setup.py": ("setup.py", "from setuptools import setup\nsetup(name='mypkg', entry_points={'console_scripts': "
                                      "['my-train = mypkg.cli.main:main']})\n"),
             "setup.cfg": ("setup.cfg", "[options.entry_points]\nconsole_scripts =\n    my-train = mypkg.cli.main:main\n")}[how]
    return _write(tmp_path, {entry[0]: entry[1], "src/mypkg/__init__.py": "", "src/mypkg/cli/__init__.py": "",
                             "src/mypkg/cli/main.py": _CLI, "config/sft.yaml": _LIGHTNING_CFG})


@pytest.mark.parametrize("how", ["pyproject", "setup.py", "setup.cfg"])
def test_a_console_script_of_the_checkout_runs_its_module(tmp_path, monkeypatch, how):
    from memlint.extract.launch import console_scripts

    _package(tmp_path, how)
    assert console_scripts(tmp_path / "config") == {"my-train": "mypkg.cli.main:main"}
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("my-train fit --config config/sft.yaml")
    assert plan.kind == "lightning-cli" and plan.path == "config/sft.yaml"


def test_a_lightning_cli_config_is_read_generically(tmp_path, monkeypatch):
    _package(tmp_path)
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("my-train fit --config config/sft.yaml")
    got = {f: plan.get(f).value for f in ("model_id", "method", "torch_dtype", "precision", "per_device_batch", "grad_accum",
                                          "max_length", "packing", "padding", "gradient_checkpointing", "optimizer",
                                          "distributed", "trainer")}
    assert got == {"model_id": "Qwen/Qwen2.5-0.5B", "method": "full", "torch_dtype": "bf16", "precision": "amp-bf16",
                   "per_device_batch": 2, "grad_accum": 4, "max_length": 2048, "packing": True, "padding": "packing",
                   "gradient_checkpointing": True, "optimizer": "deepspeed_adam", "distributed": "zero3",
                   "trainer": "lightning"}
    assert not plan.get("num_gpus").known  # devices: auto, and Lightning starts its own processes
    (alone,) = extract_paths(["config/sft.yaml"])  # named alone, and found by a walk
    assert alone.get("model_id").value == "Qwen/Qwen2.5-0.5B"
    assert [p.path for p in extract_paths(["config"])] == ["config/sft.yaml"]
    # a subcommand that does not train does not read the config as a run
    (val,) = _plans("my-train validate --config config/sft.yaml")
    assert val.kind != "lightning-cli"


def test_lightning_trainer_arguments_by_their_registered_names(tmp_path, monkeypatch):
    cfg = '''
    trainer:
      strategy: ddp
      precision: 16-mixed
      devices: [0, 1, 2]
    model:
      class_path: m.Model
      init_args:
        model_name_or_path: gpt2
        lora_rank: 8
        load_in_4bit: true
    data:
      class_path: m.Data
      init_args:
        train_batch_size: 4
        max_seq_length: 512
        pad_to_multiple_of: 8
    optimizer: adamw_torch_fused
    '''
    _write(tmp_path, {"c.yaml": cfg})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["c.yaml"])
    assert (plan.get("method").value, plan.get("lora_r").value, plan.get("quant_bits").value) == ("qlora", 8, 4)
    assert (plan.get("precision").value, plan.get("torch_dtype").value) == ("amp-fp16", "fp32")
    assert (plan.get("distributed").value, plan.get("num_gpus").value) == ("none", 3)
    assert plan.get("padding").value == "longest" and plan.get("packing").value is False
    assert plan.get("optimizer").value == "adamw_torch_fused" and plan.get("grad_accum").source == "library-default"


def test_console_script_in_a_shell_launcher(tmp_path, monkeypatch):
    _package(tmp_path)
    _write(tmp_path, {"scripts/train.sh": "export WANDB_MODE=offline\nmy-train fit --config config/sft.yaml\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["scripts/train.sh"])
    assert plan.kind == "lightning-cli" and plan.via == "scripts/train.sh:2"


# ---- 8. other frameworks' own configs: nanotron; a config nobody reads is said to be unread ---------------------------


_NANOTRON = '''
general: {project: debug, run: tiny, seed: 42}
parallelism: {dp: 2, pp: 1, tp: 2, tp_mode: REDUCE_SCATTER}
model:
  dtype: bfloat16
  init_method: {std: 0.025}
  make_vocab_size_divisible_by: 1
  model_config:
    hidden_size: 512
    intermediate_size: 1376
    is_llama_config: true
    max_position_embeddings: 2048
    num_attention_heads: 8
    num_hidden_layers: 4
    num_key_value_heads: 4
    tie_word_embeddings: true
    vocab_size: 32000
optimizer:
  accumulate_grad_in_fp32: true
  optimizer_factory: {name: adamW, torch_adam_is_fused: true, adam_beta1: 0.9, adam_beta2: 0.95, adam_eps: 1.0e-08}
  zero_stage: 0
tokens: {micro_batch_size: 3, batch_accumulation_per_replica: 2, sequence_length: 1024, train_steps: 10}
'''


def test_nanotron_run_config_given_by_its_flag(tmp_path, monkeypatch):
    run = "import sys\nfrom nanotron.trainer import DistributedTrainer\nDistributedTrainer(sys.argv[2]).train()\n"
    _write(tmp_path, {"run_train.py": run, "examples/tiny.yaml": _NANOTRON})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("torchrun --nproc_per_node=4 run_train.py --config-file examples/tiny.yaml")
    got = {f: plan.get(f).value for f in ("method", "torch_dtype", "precision", "per_device_batch", "grad_accum", "max_length",
                                          "packing", "gradient_checkpointing", "optimizer", "distributed", "num_gpus",
                                          "tp_size", "sequence_parallel", "trainer")}
    assert got == {"method": "full", "torch_dtype": "bf16", "precision": "amp-bf16", "per_device_batch": 3, "grad_accum": 2,
                   "max_length": 1024, "packing": True, "gradient_checkpointing": False, "optimizer": "adamw_torch_fused",
                   "distributed": "none", "num_gpus": 4, "tp_size": 2, "sequence_parallel": True, "trainer": "nanotron"}
    assert dict(plan.get("model_id").shape)["num_hidden_layers"] == 4  # the inline model_config is the model's shape
    from memlint.estimate.from_plan import setup_from_plan

    assert setup_from_plan(plan, {}).setup is not None  # sized: a from-scratch model counted from its config
    (alone,) = extract_paths(["examples/tiny.yaml"])  # named alone and found by a walk
    assert alone.kind == "nanotron" and [p.kind for p in extract_paths(["examples"])] == ["nanotron"]


def test_a_config_flag_of_no_known_format_is_said_to_be_unread(tmp_path, monkeypatch):
    run = '''
import sys
import torch
from mylib import load_config, Trainer

cfg = load_config(sys.argv[2])
Trainer(cfg).train()
for p in torch.nn.Linear(2, 2).parameters():
    torch.optim.SGD([p], lr=0.1).step()
'''
    _write(tmp_path, {"run.py": run, "cfg.yaml": "experiment:\n  name: x\n  width: 4\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("python run.py --config-file cfg.yaml")
    assert any(n.startswith("cfg.yaml (--config-file): a config of a format memlint does not read, not read") for n in plan.notes)


def test_exported_and_inherited_variables_reach_the_command(tmp_path, monkeypatch):
    sh = """
    export CUDA_VISIBLE_DEVICES=0,1,2
    export BASE_MODEL
    BASE_MODEL=${BASE_MODEL:-gpt2}
    NOT_EXPORTED=1
    N=$((N_GPUS * 2))
    deepspeed train.py
    torchrun --nproc_per_node $N train.py
    """
    _write(tmp_path, {"run.sh": sh, "train.py": _TRAIN})
    monkeypatch.chdir(tmp_path)
    ds, tr = _plans("N_GPUS=2 BASE_MODEL=Qwen/Qwen2.5-0.5B bash run.sh")
    assert ds.get("num_gpus").value == 3  # deepspeed over the exported CUDA_VISIBLE_DEVICES
    assert _v(ds, "model_id") == ("Qwen/Qwen2.5-0.5B", "command-line")  # os.environ sees the caller's variable
    assert tr.get("num_gpus").value == 4  # $((N_GPUS * 2)) from the caller's N_GPUS
    launch = launches(tmp_path / "run.sh", "run.sh")[0]
    assert "NOT_EXPORTED" not in launch.env and launch.env["BASE_MODEL"] == "gpt2"


def test_a_wrapper_that_calls_its_packages_train_function(tmp_path, monkeypatch):
    # the launcher's script mentions no training library itself: its package's train() is the plan
    pkg_train = """
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


    def train(model_name="gpt2", batch_size=4):
        model = AutoModelForCausalLM.from_pretrained(model_name)
        Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=batch_size)).train()
    """
    wrapper = 'from mypkg.train import train\n\nif __name__ == "__main__":\n    train(model_name="Qwen/Qwen2.5-0.5B")\n'
    _write(tmp_path, {"pyproject.toml": '[project]\nname = "mypkg"\n', "src/mypkg/__init__.py": "",
                      "src/mypkg/train.py": pkg_train, "scripts/run.py": wrapper,
                      "run.sh": "torchrun --nproc_per_node 2 scripts/run.py\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["run.sh"])
    assert plan.path == "scripts/run.py" and plan.get("trainer").value == "Trainer"
    assert plan.get("model_id").value == "Qwen/Qwen2.5-0.5B" and plan.get("per_device_batch").value == 4
    assert plan.get("num_gpus").value == 2


_HF_ARGS_TRAIN = '''
from dataclasses import dataclass, field
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="gpt2")


parser = HfArgumentParser((ModelArguments, TrainingArguments))
model_args, training_args = parser.parse_args_into_dataclasses()
model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
Trainer(model=model, args=training_args).train()
'''


def test_a_sourced_args_file_and_an_eval_of_two_strings(tmp_path, monkeypatch):
    """`source common.sh` sets the launcher's variables; `eval "$header" "$args"` runs the words of both strings
    joined; a bash array written over several lines expands to its words."""
    common = """
    export header="torchrun --nproc_per_node 2 \\
    -m pkg.train"
    export base_args="--per_device_train_batch_size 3 \\
    --gradient_accumulation_steps 16 --bf16 True"
    """
    sh = """
    #!/bin/bash
    source scripts/common.sh
    model_path=$1
    files=("a.jsonl"
        "b.jsonl")
    args="$base_args --model_name_or_path $model_path --output_dir out --train_files ${files[@]} 2>&1 | tee log"
    eval "$header" "$args"
    """
    _write(tmp_path, {"scripts/common.sh": common, "scripts/run.sh": sh, "pkg/__init__.py": "",
                      "pkg/train.py": _HF_ARGS_TRAIN})
    monkeypatch.chdir(tmp_path)
    (launch,) = launches(tmp_path / "scripts/run.sh", "scripts/run.sh", ("Qwen/Qwen2.5-0.5B",))
    assert launch.module == "pkg.train" and launch.processes == 2
    assert launch.argv[-3:] == ("--train_files", "a.jsonl", "b.jsonl")
    (plan,) = _plans("bash scripts/run.sh Qwen/Qwen2.5-0.5B")
    assert _v(plan, "model_id") == ("Qwen/Qwen2.5-0.5B", "command-line")
    assert plan.get("per_device_batch").value == 3 and plan.get("grad_accum").value == 16
    assert plan.get("num_gpus").value == 2


def test_a_sourced_file_is_read_only_inside_the_checked_root(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    _write(outside, {"common.sh": 'export LAUNCH="torchrun --nproc_per_node 8"\n'})
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    _write(root, {"run.sh": "source ../outside/common.sh\n$LAUNCH train.py\npython train.py\n", "train.py": _TRAIN})
    monkeypatch.chdir(root)
    with checked_root(root):
        got = launches(root / "run.sh", "run.sh")
    assert [g.launcher for g in got] == ["python"]  # `$LAUNCH` stayed unknown: no command on its line
    got = launches(root / "run.sh", "run.sh")  # no root in force: the file is read (the same call, proving the test)
    assert [g.launcher for g in got] == ["torchrun", "python"]


@pytest.mark.parametrize("model, fsdp", [("big/model-13b", True), ("small/model-7b", False)])
def test_a_branch_decided_by_known_values_is_the_only_one_read(tmp_path, monkeypatch, model, fsdp):
    sh = """
    model_path=$1
    extra=""
    if [[ $model_path == "big/model-13b" ]]; then
        extra="--fsdp 'full_shard auto_wrap'"
    elif [ "$model_path" = "other/model" ]
    then
        extra="--deepspeed ds.json"
    else
        extra="--per_device_train_batch_size 2"
    fi
    if [[ ! -d $OUT ]]; then
        mkdir -p $OUT
    fi
    python train.py --model_name_or_path $model_path $extra
    """
    _write(tmp_path, {"run.sh": sh, "train.py": _HF_ARGS_TRAIN})
    monkeypatch.chdir(tmp_path)
    (launch,) = launches(tmp_path / "run.sh", "run.sh", (model,))
    assert ("--fsdp" in launch.argv) is fsdp and "--deepspeed" not in launch.argv
    assert ("--per_device_train_batch_size" in launch.argv) is (not fsdp)


def test_an_undecided_branch_is_read_as_before(tmp_path, monkeypatch):
    """A test on a value the launcher does not know (its argument, not given) decides nothing: the variables
    of every branch are read in order, as a launcher without branches would be."""
    sh = """
    BS=4
    if [ "$1" == "large" ]; then
        BS=1
    fi
    python train.py --per_device_train_batch_size $BS
    """
    _write(tmp_path, {"run.sh": sh, "train.py": _HF_ARGS_TRAIN})
    monkeypatch.chdir(tmp_path)
    (launch,) = launches(tmp_path / "run.sh", "run.sh")
    assert launch.argv[-1] == "1"
    (launch,) = launches(tmp_path / "run.sh", "run.sh", ("small",))
    assert launch.argv[-1] == "4"


def _code_cells(cells: list[str]) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                  "source": c.splitlines(keepends=True)} for c in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_a_file_the_notebook_writes_and_launches_is_read_from_its_cell(tmp_path, monkeypatch):
    """`%%writefile train.py` then `!accelerate launch train.py ...`: the launched file is the cell's text (a
    `-a` cell appends to it), with the notebook's own pip installs as its library versions, whatever a file of that
    name on disk holds."""
    cells = ["!pip install -q trl==0.12.0 transformers==4.46.0\n",
             "%%writefile train.py\nimport sys\nfrom transformers import AutoModelForCausalLM\n"
             "from trl import SFTConfig, SFTTrainer\nmodel = AutoModelForCausalLM.from_pretrained(sys.argv[1])\n",
             "%%writefile -a train.py\nSFTTrainer(model=model, args=SFTConfig('o', per_device_train_batch_size=3, "
             "max_seq_length=512)).train()\n",
             "!accelerate launch --num_processes 2 train.py Qwen/Qwen2.5-0.5B\n"]
    _write(tmp_path, {"nb.ipynb": _code_cells(cells), "train.py": "print('an older copy')\n"})
    monkeypatch.chdir(tmp_path)
    plans = extract_paths(["nb.ipynb"])
    (plan,) = [p for p in plans if p.path.startswith("train.py")]
    assert plan.path == "train.py (written by nb.ipynb:3)" and plan.via == "nb.ipynb:9"
    assert _v(plan, "model_id") == ("Qwen/Qwen2.5-0.5B", "command-line")
    assert plan.get("per_device_batch").value == 3 and plan.get("num_gpus").value == 2
    assert plan.get("max_length").value == 512  # trl 0.12's max_seq_length, as the notebook installs it
    assert any(p.package == "trl" and p.version == "0.12.0" for p in plan.versions)


def test_a_script_run_by_bash_c_is_read_as_the_launchers_own_lines(tmp_path, monkeypatch):
    """`srun ... bash -c "…"` (a SLURM job's step, a container's command): the quoted string is a script; its
    variables (\\$X escaped inside double quotes) and its launch are read, line numbers kept."""
    sh = '''#!/bin/bash
#SBATCH --gres=gpu:4
setup() {
    echo "on $(hostname)"
}
export -f setup
srun --nodes=1 --ntasks-per-node=1 bash -c "
setup
export MODEL=Qwen/Qwen2.5-0.5B
torchrun --nproc_per_node 4 \\
    train.py --model_name_or_path \\$MODEL --per_device_train_batch_size 2
python -m eval.run --model \\$MODEL
"
sh -c 'python train.py --model_name_or_path gpt2'
'''
    _write(tmp_path, {"run.sh": sh, "train.py": _HF_ARGS_TRAIN})
    monkeypatch.chdir(tmp_path)
    got = launches(tmp_path / "run.sh", "run.sh")
    assert [(g.launcher, g.line) for g in got if g.script == "train.py"] == [("torchrun", 10), ("python", 14)]
    tr = got[0]
    assert tr.processes == 4 and tr.argv[:2] == ("--model_name_or_path", "Qwen/Qwen2.5-0.5B")


def test_an_unclosed_bash_c_string_leaves_the_launcher_as_it_was(tmp_path, monkeypatch):
    sh = 'python train.py --model_name_or_path gpt2\nbash -c "python train.py\n'
    _write(tmp_path, {"run.sh": sh, "train.py": _HF_ARGS_TRAIN})
    monkeypatch.chdir(tmp_path)
    assert [g.line for g in launches(tmp_path / "run.sh", "run.sh")][:1] == [1]


def test_a_launcher_written_for_the_authors_machine_reads_the_checkouts_files(tmp_path, monkeypatch):
    """`cd /home/author/repo/pkg` and `--config_file /home/author/repo/configs/x.yml` name the author's machine: the
    checkout's folder and file of the same tail are read (said in a note); a launcher held in a variable whose quoted
    parts are joined (`L="accelerate launch --ip "$ADDR" --role $NODE:"`) and accelerate's torchrun options
    (--role, --tee) are read as bash and accelerate read them."""
    sh = '''#!/bin/bash
cd /home/author/repo/pkg
MASTER_ADDR=$(hostname)
LAUNCHER="accelerate launch \\
    --config_file /home/author/repo/configs/fsdp8.yml \\
    --main_process_ip "$MASTER_ADDR" \\
    --machine_rank \\$SLURM_PROCID \\
    --role $SLURMD_NODENAME: \\
    --tee 3 \\
    "
CMD="-m training.run --model_name_or_path Qwen/Qwen2.5-0.5B --per_device_train_batch_size 2"
srun --jobid $SLURM_JOB_ID bash -c "$LAUNCHER $CMD" 2>&1
'''
    acc = ("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 8\nmixed_precision: bf16\n"
           "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n")
    _write(tmp_path, {"scripts/train.sh": sh, "configs/fsdp8.yml": acc, "pkg/training/__init__.py": "",
                      "pkg/training/run.py": _HF_ARGS_TRAIN})
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["scripts/train.sh"])
    assert plan.path.endswith("training/run.py")
    assert plan.get("per_device_batch").value == 2 and plan.get("num_gpus").value == 8
    assert plan.get("distributed").value == "fsdp"
    assert any("not on this machine" in n for n in plan.notes)


def test_accelerate_launch_with_a_process_count_it_cannot_read_or_on_the_cpu(tmp_path, monkeypatch):
    _write(tmp_path, {"train.py": _TRAIN})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("CUDA_VISIBLE_DEVICES=0,1,2,3 accelerate launch --num_processes $NP train.py")
    assert not plan.get("num_gpus").known  # the command's own count, unread: not the visible GPUs
    (plan,) = _plans("CUDA_VISIBLE_DEVICES=0,1,2,3 accelerate launch --cpu train.py")
    assert plan.get("num_gpus").value != 4
