"""Launchers that keep the training command in a here-document (`read -r -d '' CMD <<EOF`, `CMD=$(cat <<EOF)`), a
DeepSpeed engine whose config gives the global batch (accumulation = global / (micro x world size)), and
`llamafactory-cli train` given its whole config as flags, with the processes it starts from the visible GPUs."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import write_checkout, plan_of_command as _command, field_values as _get
from memlint.extract import extract_targets
from memlint.extract.shell import _heredocs, command_targets

_write = partial(write_checkout, dedent=True)




_ENGINE = """
    import argparse, deepspeed, torch
    from transformers import AutoModelForCausalLM

    def main():
        p = argparse.ArgumentParser()
        p.add_argument("--pretrain")
        p.add_argument("--max_len", type=int, default=512)
        p.add_argument("--micro_train_batch_size", type=int, default=1)
        p.add_argument("--train_batch_size", type=int, default=128)
        p.add_argument("--zero_stage", type=int, default=0)
        p.add_argument("--bf16", action="store_true")
        args = p.parse_args()
        model = AutoModelForCausalLM.from_pretrained(args.pretrain, torch_dtype=torch.bfloat16)
        tok_kw = dict(max_length=args.max_len, truncation=True, padding="max_length")
        ds_config = {
            "train_batch_size": args.train_batch_size,
            "train_micro_batch_size_per_gpu": args.micro_train_batch_size,
            "zero_optimization": {"stage": args.zero_stage},
            "bf16": {"enabled": args.bf16},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
        }
        engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
        for batch in range(10):
            loss = engine(**batch).loss
            engine.backward(loss)
            engine.step()

    if __name__ == "__main__":
        main()
"""

_HEREDOC_SH = """
    set -x
    BS=256
    MODEL_PATH=Qwen/Qwen2.5-0.5B

    read -r -d '' training_commands <<EOF
    pkg.train_sft \\
       --max_len 2048 \\
       --train_batch_size $BS \\
       --micro_train_batch_size 4 \\
       --pretrain $MODEL_PATH \\
       --zero_stage 2 \\
       --bf16
    EOF

    torchrun --nproc_per_node 4 -m ${training_commands}
"""


@pytest.mark.parametrize("form", ["read", "cat"])
def test_a_command_kept_in_a_heredoc_is_run(tmp_path, monkeypatch, form):
    sh = _HEREDOC_SH
    if form == "cat":
        sh = sh.replace("read -r -d '' training_commands <<EOF", 'training_commands=$(cat <<EOF').replace(
            "    EOF\n", "    EOF\n    )\n")
    root = _write(tmp_path, {"pkg/__init__.py": "", "pkg/train_sft.py": _ENGINE, "run.sh": sh})
    plan = _command(root, monkeypatch, "bash", "run.sh")
    assert _get(plan, "model_id", "per_device_batch", "max_length", "distributed", "num_gpus", "trainer") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 4, "max_length": 2048, "distributed": "zero2",
        "num_gpus": 4, "trainer": "deepspeed-engine"}
    # the engine's global batch over 4 per GPU x 4 processes: DeepSpeed's accumulation
    assert plan.fields["grad_accum"].value == 16


def test_heredoc_lines_keep_their_numbers_and_other_heredocs_are_input():
    text = ("A=1\n"
            "python - <<'PY'\nimport os\nos.system('torchrun train.py')\nPY\n"
            "cat > cfg.yaml <<EOF\nmodel: x\nEOF\n"
            "bash <<EOF\ntorchrun --nproc_per_node 2 train.py\nEOF\n"
            "read -d '' Q <<'EOF'\nno $EXPANSION here\nEOF\n"
            "echo done\n")
    out = _heredocs(text).split("\n")
    assert len(out) == len(text.split("\n"))
    assert "torchrun" not in " ".join(out[1:5]) and "model: x" not in out  # input of python / cat: not commands
    assert out[9] == "torchrun --nproc_per_node 2 train.py"  # bash <<EOF: its body is the launcher's lines
    assert out[11] == 'Q="no \\$EXPANSION here"'  # a quoted delimiter: no expansion
    assert out[14] == "echo done"


def test_an_engine_without_a_known_world_size_leaves_accumulation_unknown(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _ENGINE})
    plan = _command(root, monkeypatch, "python", "train.py", "--pretrain", "gpt2", "--micro_train_batch_size", "2",
                    "--train_batch_size", "64")
    assert not plan.fields["grad_accum"].known


_LF_FLAGS = ("train", "--stage", "sft", "--do_train", "True", "--model_name_or_path", "Qwen/Qwen2.5-7B",
             "--finetuning_type", "lora", "--lora_rank", "32", "--template", "qwen", "--dataset", "a",
             "--cutoff_len", "2048", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "16",
             "--fp16", "True", "--optim", "adamw_torch")


@pytest.mark.parametrize("env, gpus", [("CUDA_VISIBLE_DEVICES=3", 1), ("CUDA_VISIBLE_DEVICES=0,1", 2),
                                       ("NPROC_PER_NODE=4", 4), (None, None)])
def test_llamafactory_cli_given_its_config_as_flags(tmp_path, monkeypatch, env, gpus):
    root = _write(tmp_path, {"README.md": "x\n"})
    words = ([env] if env else []) + ["llamafactory-cli", *_LF_FLAGS]
    plan = _command(root, monkeypatch, *words)
    assert _get(plan, "model_id", "method", "lora_r", "per_device_batch", "grad_accum", "max_length", "precision",
                "optimizer", "trainer") == {
        "model_id": "Qwen/Qwen2.5-7B", "method": "lora", "lora_r": 32, "per_device_batch": 4, "grad_accum": 16,
        "max_length": 2048, "precision": "amp-fp16", "optimizer": "adamw_torch", "trainer": "Seq2SeqTrainer"}
    assert plan.get("num_gpus").value == gpus


def test_llamafactory_flags_in_a_launcher(tmp_path, monkeypatch):
    sh = "CUDA_VISIBLE_DEVICES=3 llamafactory-cli " + " \\\n    ".join(_LF_FLAGS) + "\n"
    root = _write(tmp_path, {"finetune/run.sh": sh})
    plan = _command(root, monkeypatch, "bash", "finetune/run.sh")
    assert _get(plan, "model_id", "lora_r", "num_gpus") == {"model_id": "Qwen/Qwen2.5-7B", "lora_r": 32, "num_gpus": 1}


def test_positional_defaults_are_the_argument_or_the_default(tmp_path, monkeypatch):
    from memlint.extract.shell import launches

    sh = 'ROOM=${1:-5}\nN=${2:-3}\nMODEL="m/r${ROOM}-x"\ntorchrun --nproc_per_node $N train.py --model_name_or_path "${MODEL}"\n'
    root = _write(tmp_path, {"run.sh": sh, "train.py": "import sys\n"})
    for args, model, procs in ((("6", "2"), "m/r6-x", 2), (None, "m/r5-x", 3), (("7",), "m/r7-x", 3),
                               (("", "4"), "m/r5-x", 4)):
        (launch,) = launches(root / "run.sh", "run.sh", args)
        assert (launch.argv[-1], launch.processes) == (model, procs), args


def test_required_arguments_are_the_argument_given(tmp_path, monkeypatch):
    """`MODEL="${1:?usage}"`, `${2?unset}` and `${X:?set X}`: the argument (or variable) when given; as written when
    not (bash stops there), so nothing after it takes a value memlint made up."""
    from memlint.extract.shell import launches

    sh = ('MODEL=${1:?usage: $0 MODEL COND}\nCOND="${2?condition}"\nexport N=3\n'
          'torchrun --nproc_per_node ${N:?N unset} train.py --config "configs/${COND}.yaml" --model "${MODEL}"\n')
    root = _write(tmp_path, {"run.sh": sh, "train.py": "import sys\n"})
    (launch,) = launches(root / "run.sh", "run.sh", ("qwen", "vi"))
    assert (launch.argv, launch.processes) == (("--config", "configs/vi.yaml", "--model", "qwen"), 3)
    (launch,) = launches(root / "run.sh", "run.sh", ("qwen",))
    assert launch.argv[1] == "configs/${2?condition}.yaml"


def test_a_command_built_up_with_appends_and_run_by_eval(tmp_path, monkeypatch):
    """`CMD="accelerate launch ... \"train.py\""`, then `CMD+=" --flag ${VAR}"` lines (some under a test), then
    `eval "${CMD}"`: the command as built."""
    from memlint.extract.shell import launches

    sh = ('BS=4\nUSE_PEFT=True\nCMD="accelerate launch --num_processes 2 \\"train.py\\""\n'
          'CMD+=" --output_dir o"\nif [ "${USE_PEFT}" = "True" ]; then\n    CMD+=" --lora_r 16"\nfi\n'
          'CMD+=" --per_device_train_batch_size ${BS}"\necho "${CMD}"\neval "${CMD}"\n')
    root = _write(tmp_path, {"run.sh": sh, "train.py": "import sys\n"})
    (launch,) = launches(root / "run.sh", "run.sh", None)
    assert (launch.script, launch.processes) == ("train.py", 2)
    assert launch.argv == ("--output_dir", "o", "--lora_r", "16", "--per_device_train_batch_size", "4")


def test_a_loop_over_a_list_of_one_binds_its_variable(tmp_path, monkeypatch):
    """`for MODEL in "${MODELS[@]}"; do` over an array whose other entries are commented out: the one model; a
    loop over several values leaves its variable unknown (each pass takes another)."""
    from memlint.extract.shell import launches

    sh = ('MODELS=(\n    # "big/model-70B"\n    "Qwen/Qwen2.5-0.5B"\n)\nfor MODEL in "${MODELS[@]}"; do\n'
          '    for SEED in 1 2 3\n    do\n        python train.py --model ${MODEL} --seed $SEED\n    done\ndone\n')
    root = _write(tmp_path, {"run.sh": sh, "train.py": "import sys\n"})
    (launch,) = launches(root / "run.sh", "run.sh", None)
    assert launch.argv == ("--model", "Qwen/Qwen2.5-0.5B", "--seed", "$SEED")
    # a brace expansion or a glob is several words: unknown
    sh2 = "for BS in {4..8}; do\n    python train.py --bs $BS\ndone\nfor F in cfg/*.yaml; do\n    python train.py --c $F\ndone\n"
    root = _write(tmp_path / "brace", {"run.sh": sh2, "train.py": "import sys\n"})
    assert [la.argv for la in launches(root / "run.sh", "run.sh", None)] == [("--bs", "$BS"), ("--c", "$F")]


_SBATCH_JOB = """
    #!/bin/bash
    #SBATCH --nodes=1
    #SBATCH --gres=gpu:2
    MODEL=${1:-Qwen/Qwen2.5-0.5B}
    srun accelerate launch --num_processes 2 $SLURM_SUBMIT_DIR/fine_tuning/train.py --model_name_or_path $MODEL
"""

_TRAIN = """
    from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments
    from dataclasses import dataclass

    @dataclass
    class Args:
        model_name_or_path: str = "gpt2"

    args, targs = HfArgumentParser((Args, TrainingArguments)).parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
    Trainer(model=model, args=targs).train()
"""


@pytest.mark.parametrize("words, model", [
    (("sbatch", "jobs/train.slurm"), "Qwen/Qwen2.5-0.5B"),
    (("sbatch", "-p", "gpu", "--gres=gpu:2", "jobs/train.slurm", "Qwen/Qwen2.5-1.5B"), "Qwen/Qwen2.5-1.5B"),
])
def test_an_sbatch_job_script_runs_with_its_arguments_from_the_submit_folder(tmp_path, monkeypatch, words, model):
    root = _write(tmp_path, {"jobs/train.slurm": _SBATCH_JOB, "fine_tuning/train.py": _TRAIN})
    plan = _command(root, monkeypatch, *words)
    assert _get(plan, "model_id", "num_gpus") == {"model_id": model, "num_gpus": 2}


def test_a_slurm_job_script_named_alone_is_a_launcher(tmp_path, monkeypatch):
    from memlint.extract import extract_paths

    root = _write(tmp_path, {"jobs/train.slurm": _SBATCH_JOB, "fine_tuning/train.py": _TRAIN})
    monkeypatch.chdir(root)
    plans = [p for p in extract_paths(["jobs/train.slurm"]) if p.get("trainer").known]
    assert plans and plans[0].get("model_id").value == "Qwen/Qwen2.5-0.5B"


_OPTIONS = """
    while (( "$#" )); do
      case "$1" in
        --gpus)
          gpus="$2"
          shift 2
          ;;
        --model|-m)
          model="$2"
          shift 2
          ;;
        --accum=*)
          accum="${1#*=}"
          shift
          ;;
        --fp16)
          half=true
          shift
          ;;
        *)
          echo "Unknown option: $1"
          exit 1
          ;;
      esac
    done

    gpus=${gpus:-0,1,2,3,4,5,6,7}
    model=${model:-Qwen/Qwen2.5-0.5B}
    accum=${accum:-16}
    CUDA_VISIBLE_DEVICES=${gpus} llamafactory-cli train \\
        --model_name_or_path ${model} --stage sft --do_train --finetuning_type lora --template qwen --dataset a \\
        --cutoff_len 1024 --per_device_train_batch_size 2 --gradient_accumulation_steps ${accum}
"""


@pytest.mark.parametrize("args, want", [
    ((), {"model_id": "Qwen/Qwen2.5-0.5B", "grad_accum": 16, "num_gpus": 8}),   # read alone: the defaults
    (("--gpus", "0,1", "-m", "Qwen/Qwen2.5-7B", "--accum=4", "--fp16"),
     {"model_id": "Qwen/Qwen2.5-7B", "grad_accum": 4, "num_gpus": 2}),
])
def test_a_launchers_own_option_loop_runs_over_its_arguments(tmp_path, monkeypatch, args, want):
    root = _write(tmp_path, {"scripts/train.sh": _OPTIONS})
    plan = _command(root, monkeypatch, "bash", "scripts/train.sh", *args)
    assert _get(plan, *want) == want


def test_a_launcher_that_runs_a_launcher(tmp_path, monkeypatch):
    outer = "bash scripts/train.sh \\\n    --gpus 0,1,2,3 \\\n    --model Qwen/Qwen2.5-1.5B\n"
    root = _write(tmp_path, {"scripts/train.sh": _OPTIONS, "scripts/examples/run_qwen.sh": outer})
    plan = _command(root, monkeypatch, "bash", "scripts/examples/run_qwen.sh")
    assert _get(plan, "model_id", "num_gpus", "grad_accum") == {"model_id": "Qwen/Qwen2.5-1.5B", "num_gpus": 4,
                                                              "grad_accum": 16}
    assert plan.fields["model_id"].span.path.endswith("train.sh")  # said where the command is written


def test_a_launcher_that_runs_itself_is_not_followed_forever(tmp_path, monkeypatch):
    root = _write(tmp_path, {"a.sh": "bash b.sh\n", "b.sh": "bash a.sh\npython train.py\n", "train.py": _TRAIN})
    monkeypatch.chdir(root)
    plans = extract_targets(command_targets(["bash", "a.sh"]))
    assert 1 <= len(plans) <= 3 and all(p.get("trainer").value == "Trainer" for p in plans)


def test_a_module_run_from_a_subfolder_imports_from_there(tmp_path, monkeypatch):
    # `cd hw1 && torchrun -m src.cli.train`: Python's sys.path[0] is hw1, where `from src.trainer import ...` is found
    train = """
        from src.trainer import OwnTrainer
        OwnTrainer("Qwen/Qwen2.5-0.5B").fit()
    """
    trainer = """
        import torch
        from transformers import AutoModelForCausalLM

        class OwnTrainer:
            def __init__(self, name):
                self.model = AutoModelForCausalLM.from_pretrained(name)
                self.opt = torch.optim.AdamW(self.model.parameters())

            def fit(self):
                loader = torch.utils.data.DataLoader(list(range(8)), batch_size=3, shuffle=True)
                for batch in loader:
                    self.model(**batch).loss.backward()
                    self.opt.step()
    """
    root = _write(tmp_path, {"hw1/src/__init__.py": "", "hw1/src/cli/__init__.py": "", "hw1/src/cli/train.py": train,
                             "hw1/src/trainer.py": trainer})
    plan = _command(root, monkeypatch, "cd", "hw1", "&&", "torchrun", "--nproc_per_node", "2", "-m", "src.cli.train")
    assert _get(plan, "model_id", "per_device_batch", "trainer") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 3, "trainer": "custom-loop"}


def test_a_backslash_inside_a_comment_continues_nothing(tmp_path, monkeypatch):
    sh = ("#deepspeed --num_gpus 8 --hostfile $host_file --master_port=29500 \\\n"
          "deepspeed --num_gpus 2 ./train.py\n")
    root = _write(tmp_path, {"launch.slurm": sh, "train.py": _TRAIN})
    plan = _command(root, monkeypatch, "bash", "launch.slurm")
    assert _get(plan, "trainer", "num_gpus") == {"trainer": "Trainer", "num_gpus": 2}


def test_a_script_path_of_the_authors_machine_is_the_checkouts_file(tmp_path, monkeypatch):
    sh = "export CUDA_VISIBLE_DEVICES=0\npython /mnt/efs/someone/projects/Qwen/trl/train.py\n"
    root = _write(tmp_path, {"trl/run.sh": sh, "trl/train.py": _TRAIN})
    plan = _command(root, monkeypatch, "bash", "trl/run.sh")
    assert _get(plan, "trainer", "num_gpus") == {"trainer": "Trainer", "num_gpus": 1}
