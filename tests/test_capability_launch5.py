"""Job scripts as bash and SLURM read them: a command or arithmetic substitution is one word however many spaces it
holds (`--num_processes $(($SLURM_NNODES * 2))`), and the sizes sbatch allocates are the variables SLURM sets
(SLURM_JOB_NUM_NODES, SLURM_NTASKS, SLURM_GPUS_ON_NODE...)."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import ARGPARSE_TRAIN, field_values as _get, plan_of_command as _command, write_checkout
from memlint.extract.launch import tokens

_write = partial(write_checkout, dedent=True)


@pytest.mark.parametrize("line, words", [
    ("accelerate launch --num_processes $(($N * 2)) train.py", ["accelerate", "launch", "--num_processes", "$(($N * 2))", "train.py"]),
    ('torchrun --master_addr "$(hostname -i | cut -d " " -f1)" x.py', ["torchrun", "--master_addr", '$(hostname -i | cut -d " " -f1)', "x.py"]),
    ("echo '$(a b)' c", ["echo", "$(a b)", "c"]),  # single quotes: no substitution, shlex's own reading
    ("python x.py --n $(( (A + 1) * B ))", ["python", "x.py", "--n", "$(( (A + 1) * B ))"]),
    ("python x.py $(unclosed a b", ["python", "x.py", "$(unclosed", "a", "b"]),
])
def test_a_substitution_is_one_word(line, words):
    assert tokens(line) == words


_SBATCH = """
    #!/bin/bash
    #SBATCH --nodes=4
    #SBATCH --ntasks-per-node=1
    #SBATCH --gres=gpu:a100:2
    export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    srun accelerate launch --multi_gpu \\
        --num_processes {procs} \\
        --num_machines $SLURM_JOB_NUM_NODES --main_process_ip $MASTER_ADDR \\
        train.py --batch_size 2
"""


@pytest.mark.parametrize("procs, gpus", [
    ("$(($SLURM_JOB_NUM_NODES * 2))", 8),
    ("$((SLURM_NNODES * SLURM_GPUS_ON_NODE))", 8),
    ("$SLURM_NTASKS", 4),
    ("$(($UNSET_BY_SLURM * 2))", None),  # not a variable SLURM sets: the count is unknown, the script still read
])
def test_a_job_scripts_process_count_from_the_allocation(tmp_path, monkeypatch, procs, gpus):
    root = _write(tmp_path, {"job.sh": _SBATCH.format(procs=procs), "train.py": ARGPARSE_TRAIN})
    plan = _command(root, monkeypatch, "bash", "job.sh")
    assert _get(plan, "per_device_batch") == {"per_device_batch": 2}
    assert getattr(plan.fields.get("num_gpus"), "value", None) == gpus


def test_an_accelerate_config_relative_to_the_folder_the_command_moved_to(tmp_path, monkeypatch):
    # `cd app && bash scripts/run.sh`, run.sh: `accelerate launch --config_file ../acc/fsdp.yaml train.py`: the config
    # is relative to app/ (where the command runs), not to scripts/ nor to where memlint is run from
    root = _write(tmp_path, {
        "acc/fsdp.yaml": "distributed_type: FSDP\nnum_processes: 4\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n",
        "app/scripts/run.sh": "accelerate launch --config_file ../acc/fsdp.yaml src/train.py --batch_size 2\n",
        "app/src/train.py": ARGPARSE_TRAIN,
    })
    plan = _command(root, monkeypatch, "cd", "app", "&&", "bash", "scripts/run.sh")
    assert _get(plan, "distributed", "num_gpus", "per_device_batch") == {"distributed": "fsdp", "num_gpus": 4,
                                                                          "per_device_batch": 2}


@pytest.mark.parametrize("words, script, processes", [
    ("fabric run --devices 4 --accelerator cuda train.py --lr 1", "train.py", 4),
    ("fabric run model --devices=2 train.py", "train.py", 2),
    ("lightning run model --devices 8 train.py", "train.py", 8),
    ("lightning run app app.py --cloud --name x", "app.py", None),
    ("lightning run experiment train.py --requirements deepspeed --num_nodes=2 --cloud_compute=gpu-fast", "train.py", None),
])
def test_lightning_and_fabric_run_commands(words, script, processes):
    from memlint.extract.launch import parse_command

    launch = parse_command(words.split())
    assert (launch.script, launch.processes) == (script, processes)


@pytest.mark.parametrize("listing, gpus", [
    ("$( scontrol show hostnames $SLURM_JOB_NODELIST )", 12),  # the job's 3 nodes, one name each
    ('$(scontrol show hostnames "$SLURM_JOB_NODELIST")', 12),
    ("$(cat my_hosts.txt)", None),  # a command memlint does not know: the array and its length are unknown
])
def test_an_array_of_the_jobs_hostnames_counts_its_nodes(tmp_path, monkeypatch, listing, gpus):
    job = (f"#!/bin/bash\n#SBATCH --nodes=3\n#SBATCH --gres=gpu:4\nnodes=( {listing} )\nnum_nodes=${{#nodes[@]}}\n"
           "srun torchrun --nnodes $num_nodes --nproc_per_node 4 train.py --batch_size 2\n")
    root = _write(tmp_path, {"job.sh": job, "train.py": ARGPARSE_TRAIN})
    plan = _command(root, monkeypatch, "bash", "job.sh")
    assert getattr(plan.fields.get("num_gpus"), "value", None) == gpus


@pytest.mark.parametrize("devices, processes", [
    ("0,1,2", 3), ("GPU-8a1c2f3e-1111-2222-3333-444455556666", 1), ("1,2,...", None), ("<your_gpus>", None), ("0,", 1),
])
def test_visible_devices_that_are_a_placeholder_give_no_count(devices, processes):
    from memlint.extract.launch import parse_command

    assert parse_command([f"CUDA_VISIBLE_DEVICES={devices}", "python", "train.py"]).processes == processes


def test_an_array_with_a_word_built_around_a_substitution_keeps_its_words(tmp_path, monkeypatch):
    # `--run_name "x_$(basename $model)"` is one word whatever basename prints: the array is read
    job = ('model=gpt2\nrun_name="sft_$(basename $model)_v1"\nargs=(\n  --run_name $run_name\n  --batch_size 3\n)\n'
           'python train.py "${args[@]}"\n')
    root = _write(tmp_path, {"run.sh": job, "train.py": ARGPARSE_TRAIN})
    plan = _command(root, monkeypatch, "bash", "run.sh")
    assert _get(plan, "per_device_batch") == {"per_device_batch": 3}


_MODAL = """
    import modal

    app = modal.App("ft")

    @app.function(gpu="T4")
    def evaluate():
        from transformers import AutoModelForCausalLM
        AutoModelForCausalLM.from_pretrained("gpt2").generate()

    @app.function(gpu={gpu}, timeout=3600)
    def train():
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=2)).train()

    @app.local_entrypoint()
    def main():
        train.remote()
        evaluate.remote()
"""


@pytest.mark.parametrize("gpu, gpus", [
    ('"H100:2"', 2), ('"a100-80gb"', 1), ('["H100:8", "A100:8"]', 8), ("modal.gpu.A100(count=4, size='80GB')", 4),
    ("GPU_CONFIG", None),  # a name memlint cannot read: the count is unknown
])
def test_a_modal_function_runs_on_the_gpus_it_asks_for(tmp_path, monkeypatch, gpu, gpus):
    root = _write(tmp_path, {"train.py": _MODAL.format(gpu=gpu)})
    plan = _command(root, monkeypatch, "modal", "run", "train.py::main")
    assert getattr(plan.fields.get("num_gpus"), "value", None) == gpus
    assert _get(plan, "per_device_batch") == {"per_device_batch": 2}


@pytest.mark.parametrize("count", [
    "$(echo $GPUS | tr ',' '\\n' | wc -l)", "$(echo \"${GPUS}\" | awk -F',' '{print NF}')",
])
def test_a_count_of_a_comma_list_of_gpus(tmp_path, monkeypatch, count):
    job = f'GPUS="0,1,2,3,4,5"\nN={count}\naccelerate launch --num_processes $N train.py --batch_size 2\n'
    root = _write(tmp_path, {"run.sh": job, "train.py": ARGPARSE_TRAIN})
    plan = _command(root, monkeypatch, "bash", "run.sh")
    assert _get(plan, "num_gpus", "per_device_batch") == {"num_gpus": 6, "per_device_batch": 2}


@pytest.mark.parametrize("source", ['source "$(dirname "$0")/../generic/run_common.sh"', ". scripts/generic/run_common.sh"])
def test_a_sourced_script_runs_its_commands_with_the_callers_variables(tmp_path, monkeypatch, source):
    # the model's launcher exports its values and sources a shared script that builds the command and runs it
    root = _write(tmp_path, {
        "scripts/gemma/ft.sh": f'export MODEL="Qwen/Qwen2.5-0.5B"\nexport BATCH=6\n{source}\n',
        "scripts/generic/run_common.sh": 'EXTRA="--batch_size $BATCH"\npython train.py --model "$MODEL" $EXTRA\n',
        "train.py": ARGPARSE_TRAIN,
    })
    plan = _command(root, monkeypatch, "bash", "scripts/gemma/ft.sh")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 6}


def test_a_sourced_file_of_variables_sets_them_for_the_lines_after(tmp_path, monkeypatch):
    root = _write(tmp_path, {"env.sh": "BATCH=5\n", "run.sh": "source env.sh\npython train.py --batch_size $BATCH\n",
                             "train.py": ARGPARSE_TRAIN})
    plan = _command(root, monkeypatch, "bash", "run.sh")
    assert _get(plan, "per_device_batch") == {"per_device_batch": 5}


@pytest.mark.parametrize("expr, value", [
    ("$((GLOBAL / (PER * GPUS)))", "4"), ("$(( (GLOBAL / PER) / GPUS ))", "4"), ("$((2 * (3 + (4 - 1))))", "12"),
    ("$((GLOBAL / (PER * UNSET)))", "$((GLOBAL / (PER * UNSET)))"),  # a name not set: left as written
])
def test_shell_arithmetic_with_nested_parentheses(expr, value):
    from memlint.extract.shell import _expand

    assert _expand(expr, {"GLOBAL": "128", "PER": "4", "GPUS": "8"}) == value
