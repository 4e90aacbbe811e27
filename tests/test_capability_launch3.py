"""Launch lines as job scripts write them: a chain of commands (`source activate base && cd /workdir/repo && torchrun
...`), `bash -c` with the shell's own flags, and a container runner in front of the command (singularity / apptainer
exec, docker / podman run) with its options and image."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import ARGPARSE_TRAIN, write_checkout, write_notebook, plan_of_command as _command, field_values as _get
from memlint.extract.launch import parse_command

_write = partial(write_checkout, dedent=True)

_SINGULARITY_JOB = """
    #!/bin/bash
    #SBATCH --gres=gpu:4
    export GPUS_PER_NODE=4
    singularity exec -B .:/workdir \\
        --env GPUS_PER_NODE=$GPUS_PER_NODE \\
        --rocm pytorch.sif \\
        bash -c -eux 'source activate base && \\
        conda activate py310 && \\
        cd /workdir/myrepo && \\
        torchrun --nnodes=1 --nproc_per_node=${GPUS_PER_NODE} src/train.py --model Qwen/Qwen2.5-0.5B --batch_size 8'
"""


def test_a_chain_inside_bash_c_inside_a_container_runs_its_training_command(tmp_path, monkeypatch):
    # /workdir/myrepo is the container's path of the checkout: the script is the checkout's src/train.py
    root = _write(tmp_path, {"src/train.py": ARGPARSE_TRAIN, "slurm/job.slurm": _SINGULARITY_JOB})
    plan = _command(root, monkeypatch, "bash", "slurm/job.slurm")
    assert _get(plan, "model_id", "per_device_batch", "num_gpus") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 8, "num_gpus": 4}


@pytest.mark.parametrize("line", [
    "bash -lc 'cd sub && python train.py --batch_size 3'",
    "sh -x -c 'cd sub && python train.py --batch_size 3'",
    "source venv/bin/activate && cd sub && python train.py --batch_size 3",
    "module load cuda; cd sub; python train.py --batch_size 3",
])
def test_chains_and_shell_flags(tmp_path, monkeypatch, line):
    root = _write(tmp_path, {"sub/train.py": ARGPARSE_TRAIN, "run.sh": line + "\n"})
    plan = _command(root, monkeypatch, "bash", "run.sh")
    assert plan.get("per_device_batch").value == 3


@pytest.mark.parametrize("words, script, argv, cwd", [
    ("singularity exec --nv -B /data:/data --pwd /w/repo image.sif python train.py --bs 4",
     "train.py", ("--bs", "4"), "/w/repo"),
    ("apptainer run --cleanenv --bind=/scratch img.sif python3 train.py", "train.py", (), None),
    ("docker run --rm -it --gpus all --ipc=host -v /x:/workspace -w /workspace nvcr.io/nvidia/pytorch:24.01-py3 "
     "torchrun --nproc_per_node 8 train.py --bs 2", "train.py", ("--bs", "2"), "/x"),
    # the working folder inside a bind is the host's folder it binds: `$(pwd)` is where the command runs
    ("docker run --rm -v $(pwd):/workspace -w /workspace/sub img python train.py", "train.py", (), "sub"),
    ("singularity exec --nv --pwd $HOME/.local/app/ex -B ./local:$HOME/.local img.sif python run.py",
     "run.py", (), "local/app/ex"),
    ("docker run -v $DATA:/data -w /data img python train.py", "train.py", (), "/data"),  # an unknown host folder
    ("podman exec -e A=1 box python train.py", "train.py", (), None),
])
def test_container_runners_run_the_command_after_their_image(words, script, argv, cwd):
    launch = parse_command(words.split())
    assert (launch.script, launch.argv, launch.cwd) == (script, argv, cwd)


def test_a_container_runner_with_no_command_runs_nothing_memlint_reads():
    from memlint.errors import MemlintError

    with pytest.raises(MemlintError):
        parse_command("docker run --rm -v /x:/y myimage".split())


def test_an_accelerate_deepspeed_config_without_a_stage_is_the_plugins_default_zero2(tmp_path, monkeypatch):
    cfg = "distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 2\ndeepspeed_config: {}\n"
    root = _write(tmp_path, {"train.py": ARGPARSE_TRAIN, "ds.yaml": cfg})
    plan = _command(root, monkeypatch, "accelerate", "launch", "--config_file", "ds.yaml", "train.py")
    d = plan.get("distributed")
    assert d.value == "zero2" and d.source == "library-default" and "DeepSpeedPlugin" in d.chain[0]
    (root / "ds.yaml").write_text(cfg.replace("{}", "{zero_stage: 3}"))
    assert _command(root, monkeypatch, "accelerate", "launch", "--config_file", "ds.yaml", "train.py").get(
        "distributed").value == "zero3"


def test_the_gpu_checks_read_as_a_modern_gpu_and_say_so(tmp_path, monkeypatch):
    script = """
        import torch
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        use_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        args = TrainingArguments("o", bf16=use_bf16, fp16=not use_bf16)
        Trainer(model=model, args=args).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert plan.get("precision").value == "amp-bf16"
    assert any("is_bf16_supported() is read as True" in n and "V100" in n for n in plan.notes)


@pytest.mark.parametrize("gpu, precision", [("T4", "amp-fp16"), ("A100", "amp-bf16"), (None, "amp-bf16")])
def test_a_colab_notebooks_gpu_decides_the_bf16_check(tmp_path, gpu, precision):
    from memlint.extract import extract_file

    code = ["import torch\n", "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n",
            "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-0.5B')\n",
            "args = TrainingArguments('o', bf16=torch.cuda.is_bf16_supported(), fp16=not torch.cuda.is_bf16_supported())\n",
            "Trainer(model=model, args=args).train()\n"]
    plan = extract_file(write_notebook(tmp_path / "nb.ipynb", code, gpu))
    assert plan.get("precision").value == precision


def test_accelerate_launch_reads_the_deepspeed_file_its_command_names(tmp_path, monkeypatch):
    import json

    ds = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": "auto"}}
    root = _write(tmp_path, {"train.py": ARGPARSE_TRAIN, "configs/ds.conf": json.dumps(ds)})
    plan = _command(root, monkeypatch, "accelerate", "launch", "--num_processes", "4", "--use_deepspeed",
                    "--deepspeed_config_file", "configs/ds.conf", "train.py")
    assert _get(plan, "distributed", "offload", "num_gpus") == {"distributed": "zero3", "offload": "optimizer", "num_gpus": 4}


def test_a_recipe_trained_in_the_scripts_own_loop_is_a_custom_loop(tmp_path, monkeypatch):
    script = """
        import sys, yaml, torch
        from transformers import AutoModelForCausalLM
        cfg = yaml.safe_load(open(sys.argv[1]))
        model = AutoModelForCausalLM.from_pretrained(cfg["model_name_or_path"])
        optimizer = torch.optim.AdamW(model.parameters())
        for batch in loader:
            model(**batch).loss.backward()
            optimizer.step()
    """
    recipe = "model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_seq_length: 1024\nper_device_train_batch_size: 2\n"
    root = _write(tmp_path, {"train.py": script, "recipe.yaml": recipe})
    plan = _command(root, monkeypatch, "accelerate", "launch", "--num_processes", "2", "train.py", "recipe.yaml")
    assert plan.kind == "trl-recipe" and plan.get("trainer").value == "custom-loop"


def test_a_config_the_launcher_names_from_its_own_folder_is_read(tmp_path, monkeypatch):
    # `cd "$(dirname "$0")"` then `--config recipe.yaml`: the recipe beside the launcher is what the script loads
    script = """
        import argparse, yaml
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        p = argparse.ArgumentParser()
        p.add_argument("--config")
        cfg = yaml.safe_load(open(p.parse_args().config))
        model = AutoModelForCausalLM.from_pretrained(cfg["model"])
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=cfg["bs"])).train()
    """
    launcher = '#!/bin/bash\ncd "$(dirname "$0")"\npython ../../scripts/train.py --config recipe.yaml\n'
    root = _write(tmp_path, {"scripts/train.py": script, "recipes/small/run.sh": launcher,
                             "recipes/small/recipe.yaml": "model: Qwen/Qwen2.5-0.5B\nbs: 3\n"})
    plan = _command(root, monkeypatch, "bash", "recipes/small/run.sh")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 3}
