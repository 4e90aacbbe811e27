"""A Python launcher: a script or console-script CLI that trains nothing itself and starts the training run with
subprocess or os.system (`subprocess.run(f"torchrun --nproc_per_node {n} {dpo.__file__} {' '.join(rest)}",
shell=True)`) is read as the command it runs, with the words it builds: f-strings (implicitly concatenated too) over
what is known, the arguments parse_known_args() leaves, and a word memlint does not know left unknown."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import ARGPARSE_TRAIN, field_values as _get, plan_of_command as _command, write_checkout
from memlint.extract.cli_args import Option, match_argparse

_write = partial(write_checkout, dedent=True)

_CLI = """
    import argparse, os, subprocess, sys

    def run_distributed_task(file, args):
        command = (
            f"torchrun --nnodes {os.environ.get('NNODES', '1')} "
            f"--nproc_per_node {os.environ.get('NPROC_PER_NODE', '2')} --master_port {os.environ['PORT']} "
            f"{file} {' '.join(args)}"
        )
        sys.exit(subprocess.run(command, shell=True).returncode)

    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("command", choices=["sft", "dpo"])
        args, rest = parser.parse_known_args()
        if args.command == "sft":
            from .train import sft
            run_distributed_task(sft.__file__, rest)
        elif args.command == "dpo":
            from .train import dpo
            run_distributed_task(dpo.__file__, rest)
"""


def _package(tmp_path):
    return _write(tmp_path, {
        "pyproject.toml": "[project]\nname = \"pkg\"\n[project.scripts]\npkg-cli = \"pkg.cli:main\"\n",
        "pkg/__init__.py": "", "pkg/train/__init__.py": "", "pkg/cli.py": _CLI,
        "pkg/train/sft.py": ARGPARSE_TRAIN.replace("gpt2", "sft-model"),
        "pkg/train/dpo.py": ARGPARSE_TRAIN,
    })


def test_a_console_script_cli_that_starts_torchrun_is_read_as_the_run_it_starts(tmp_path, monkeypatch):
    root = _package(tmp_path)
    plan = _command(root, monkeypatch, "pkg-cli", "dpo", "--model", "Qwen/Qwen2.5-0.5B", "--batch_size", "3")
    assert _get(plan, "model_id", "per_device_batch", "num_gpus") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 3, "num_gpus": 2}
    assert plan.path.endswith("pkg/train/dpo.py") and plan.via.startswith("pkg/cli.py:")


@pytest.mark.parametrize("call", [
    'subprocess.run(["torchrun", "--nproc_per_node", str(n), "train.py", "--batch_size", "4"])',
    'subprocess.check_call(["accelerate", "launch", "--num_processes", f"{n}", "train.py", "--batch_size", "4"])',
    'os.system(f"torchrun --nproc_per_node={n} train.py --batch_size 4")',
    'subprocess.Popen("CUDA_VISIBLE_DEVICES=0,1,2 python train.py " "--batch_size 4", shell=True)',
])
def test_a_launcher_script_runs_the_command_it_builds(tmp_path, monkeypatch, call):
    launcher = f"import os, subprocess\nn = 3\n{call}\n"
    root = _write(tmp_path, {"run.py": launcher, "train.py": ARGPARSE_TRAIN})
    plan = _command(root, monkeypatch, "python", "run.py")
    assert _get(plan, "per_device_batch", "num_gpus") == {"per_device_batch": 4, "num_gpus": 3}


def test_a_script_that_trains_keeps_its_own_plan_beside_what_it_runs(tmp_path, monkeypatch):
    # a trainer script that runs an evaluation command afterwards is the trainer script's run
    script = ARGPARSE_TRAIN + 'import subprocess\nsubprocess.run(["python", "eval.py"])\n'
    root = _write(tmp_path, {"train.py": script, "eval.py": ARGPARSE_TRAIN.replace("gpt2", "other")})
    plan = _command(root, monkeypatch, "python", "train.py", "--batch_size", "2")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "gpt2", "per_device_batch": 2}


def test_implicitly_concatenated_f_strings_are_one_string(tmp_path):
    from memlint.extract import extract_source

    src = ('from transformers import AutoModelForCausalLM\nsize = "0.5B"\n'
           'model = AutoModelForCausalLM.from_pretrained(f"Qwen/Qwen2.5-" f"{size}")\n')
    assert extract_source(src, tmp_path / "t.py").get("model_id").value == "Qwen/Qwen2.5-0.5B"


def test_parse_known_args_leaves_the_other_words_in_the_commands_order():
    opts = [Option("command", (), "store", None, None), Option("backend", ("--backend",), "store", None, None)]
    got = match_argparse(opts, ["dpo", "--model", "x", "--backend", "hf", "--bf16", "True", "--flag"])
    assert got.values == {"command": "dpo", "backend": "hf"}
    assert got.rest == ["--model", "x", "--bf16", "True", "--flag"]
