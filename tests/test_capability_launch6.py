"""Launch values decided by the command itself: expr(1)'s arithmetic (`$(expr 16 / $N)`, `` `expr 2 \\* 2` ``) and an
accelerate process count the command computes when it runs, which wins over its config file's num_processes."""

from checkouts import plan_of_command, write_checkout

_TRAIN = '''
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
model = AutoModelForCausalLM.from_pretrained("gpt2")
Trainer(model=model, args=args).train()
'''


def test_expr_arithmetic_in_a_launch_command(tmp_path, monkeypatch):
    sh = ("nproc=8\ntorchrun --nproc_per_node $nproc train.py --output_dir o "
          "--gradient_accumulation_steps $(expr 16 / $nproc) --per_device_train_batch_size `expr 2 \\* 3`\n")
    write_checkout(tmp_path, {"train.py": _TRAIN, "run.sh": sh})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert (plan.get("grad_accum").value, plan.get("per_device_batch").value) == (2, 6)


def test_expr_of_something_not_arithmetic_stays_unknown(tmp_path, monkeypatch):
    sh = "torchrun train.py --output_dir o --gradient_accumulation_steps $(expr length abc)\n"
    write_checkout(tmp_path, {"train.py": _TRAIN, "run.sh": sh})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert not plan.get("grad_accum").known


def test_a_process_count_computed_at_run_time_wins_over_the_config_files(tmp_path, monkeypatch):
    acc = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 8\nmixed_precision: 'no'\n"
    sh = "n=$(nvidia-smi --list-gpus | wc -l)\naccelerate launch --config_file acc.yaml --num_processes $n train.py --output_dir o\n"
    write_checkout(tmp_path, {"train.py": _TRAIN, "run.sh": sh, "acc.yaml": acc})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert not plan.get("num_gpus").known and "--num_processes" in plan.get("num_gpus").chain[0]
    write_checkout(tmp_path, {"run.sh": sh.replace("$n", "4")})
    assert plan_of_command(tmp_path, monkeypatch, "bash", "run.sh").get("num_gpus").value == 4


_KEYED = '''declare -A BS
BS["a"]=16
BS[b]=4
declare -A GA=( [a]=2 ["b"]=8 )
KEY="${1:-a}"
torchrun train.py --output_dir o --per_device_train_batch_size ${BS[$KEY]:-8} --gradient_accumulation_steps ${GA[$KEY]}
'''


def test_bash_associative_arrays_keyed_by_the_launchers_argument(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"train.py": _TRAIN, "run.sh": _KEYED})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert (plan.get("per_device_batch").value, plan.get("grad_accum").value) == (16, 2)
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh", "b")
    assert (plan.get("per_device_batch").value, plan.get("grad_accum").value) == (4, 8)
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh", "zz")  # a key the arrays lack: BS's default
    assert plan.get("per_device_batch").value == 8 and not plan.get("grad_accum").known


def test_an_item_set_under_a_key_memlint_cannot_expand_keeps_a_missing_key_unknown(tmp_path, monkeypatch):
    sh = _KEYED.replace('BS[b]=4', 'BS[$(hostname)]=4')
    write_checkout(tmp_path, {"train.py": _TRAIN, "run.sh": sh})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh", "zz")
    assert not plan.get("per_device_batch").known  # the unknown key may be "zz": not the default


_ENV = '''pick_model() {
    case "$1" in
        a) echo /models/qwen-7b ;;
        b|c) echo "Qwen/Qwen2.5-1.5B" ;;
        *) echo gpt2 ;;
    esac
}
size() { echo "$1"; }
'''
_RUN = '''source env.sh
KEY="${1:-b}"
MODEL=$(pick_model "$KEY")
BS=$(size 6)
torchrun train.py --output_dir o --per_device_train_batch_size $BS --run_name $MODEL
'''


def test_a_value_the_launchers_own_function_echoes(tmp_path, monkeypatch):
    train = _TRAIN.replace('from_pretrained("gpt2")', "from_pretrained(args.run_name)")
    write_checkout(tmp_path, {"train.py": train, "env.sh": _ENV, "run.sh": _RUN})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert (plan.get("model_id").value, plan.get("per_device_batch").value) == ("Qwen/Qwen2.5-1.5B", 6)
    assert plan_of_command(tmp_path, monkeypatch, "bash", "run.sh", "a").get("model_id").value == "/models/qwen-7b"
    assert plan_of_command(tmp_path, monkeypatch, "bash", "run.sh", "zz").get("model_id").value == "gpt2"


def test_a_function_whose_output_memlint_cannot_tell_leaves_the_value_unset(tmp_path, monkeypatch):
    env = "pick_model() {\n    ls /models | head -1\n}\n"
    train = _TRAIN.replace('from_pretrained("gpt2")', "from_pretrained(args.run_name)")
    write_checkout(tmp_path, {"train.py": train, "env.sh": env, "run.sh": _RUN.replace("BS=$(size 6)", "BS=2")})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert plan.get("model_id").value != "Qwen/Qwen2.5-1.5B" and plan.get("per_device_batch").value == 2


def test_a_function_naming_its_argument_before_its_case(tmp_path, monkeypatch):
    env = ('export BIG="/cache/models--Qwen--Qwen2.5-7B"\n'
           'model_path() {\n    local key="$1"\n    case "$key" in\n        big) echo "$BIG" ;;\n'
           '        *) echo "" ;;\n    esac\n}\n')
    run = 'source env.sh\nMODEL=$(model_path "${1:-big}")\ntorchrun train.py --output_dir o --run_name $MODEL\n'
    train = _TRAIN.replace('from_pretrained("gpt2")', "from_pretrained(args.run_name)")
    write_checkout(tmp_path, {"train.py": train, "env.sh": env, "run.sh": run})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert plan.get("model_id").value == "/cache/models--Qwen--Qwen2.5-7B"


_LF_TRAIN = 'from llamafactory.train.tuner import run_exp\n\n\ndef main():\n    run_exp()\n\n\nif __name__ == "__main__":\n    main()\n'
_LF_FLAGS = ("--model_name_or_path meta-llama/Llama-3.1-8B --stage sft --do_train --finetuning_type lora --lora_rank 64 "
             "--cutoff_len 4096 --bf16 true --per_device_train_batch_size 1")


def test_a_vendored_llama_factory_entry_script_is_the_tools_command(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"LLaMA-Factory/src/train.py": _LF_TRAIN, "LLaMA-Factory/src/llamafactory/__init__.py": "",
                              "run.sh": f"torchrun --nproc_per_node 2 LLaMA-Factory/src/train.py {_LF_FLAGS}\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert (plan.get("model_id").value, plan.get("lora_r").value, plan.get("max_length").value) == (
        "meta-llama/Llama-3.1-8B", 64, 4096)
    assert plan.get("gradient_checkpointing").value is True  # LLaMA-Factory's default, not the Trainer's
    assert plan.get("num_gpus").value == 2


def test_a_train_py_of_the_checkouts_own_taking_similar_flags_is_read_as_itself(tmp_path, monkeypatch):
    own = _TRAIN.replace("from transformers import", "import sys  # --stage --finetuning_type\nfrom transformers import")
    write_checkout(tmp_path, {"src/train.py": own, "run.sh": f"python src/train.py --output_dir o {_LF_FLAGS}\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert plan.get("trainer").value == "Trainer"  # the script itself, not LLaMA-Factory


def test_a_function_that_pipes_or_runs_two_commands_gives_no_value(tmp_path, monkeypatch):
    env = "upper() { echo \"$1\" | sed 's/x/Qwen/'; }\nbs() { echo 8; echo 16; }\n"
    run = 'source env.sh\nMODEL=$(upper "x/Qwen2-0.5B")\nBS=$(bs)\ntorchrun train.py --output_dir o --run_name $MODEL\n'
    train = _TRAIN.replace('from_pretrained("gpt2")', "from_pretrained(args.run_name)")
    write_checkout(tmp_path, {"train.py": train, "env.sh": env, "run.sh": run})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert plan.get("model_id").value != "x/Qwen2-0.5B | sed 's/x/Qwen/'" and "|" not in str(plan.get("model_id").value)


def test_a_very_long_echo_line_is_read_without_a_stall(tmp_path, monkeypatch):
    """Each pattern over a function's lines ends in a greedy group: a 20,000-character line is one pass, not a cubic
    backtrack (a stalled read would never finish this test)."""
    env = "f() { echo a" + " " * 20000 + "x; }\n"
    run = "source env.sh\nBS=$(f)\ntorchrun train.py --output_dir o --per_device_train_batch_size 4\n"
    write_checkout(tmp_path, {"train.py": _TRAIN, "env.sh": env, "run.sh": run})
    assert plan_of_command(tmp_path, monkeypatch, "bash", "run.sh").get("per_device_batch").value == 4


def test_associative_array_edge_cases(tmp_path, monkeypatch):
    run = ('declare -A BS\nBS[big]="4"; BS[huge]=1\nK="${1:-huge}"\n'
           'torchrun train.py --output_dir o --per_device_train_batch_size ${BS[$K]:-2} '
           '--gradient_accumulation_steps $(expr 16/8)\n')
    write_checkout(tmp_path, {"train.py": _TRAIN, "run.sh": run})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert plan.get("per_device_batch").value == 1  # the second item of the line, as bash sets it
    assert not plan.get("grad_accum").known  # `expr 16/8` prints 16/8: no arithmetic without spaces
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh", "big")
    assert plan.get("per_device_batch").value == 4


def test_a_fish_launcher_is_read_as_its_bash_twin(tmp_path, monkeypatch):
    fish = ("#!/usr/bin/env fish\nset -x CUDA_VISIBLE_DEVICES 0,1\nset BS 4\n"
            "for lr in 1e-4 3e-4\n    if test $lr = 1e-4\n        torchrun --nproc_per_node 2 train.py --output_dir o \\\n"
            "            --per_device_train_batch_size $BS --learning_rate $lr\n    end\nend\n")
    write_checkout(tmp_path, {"train.py": _TRAIN, "sweep.fish": fish})
    plan = plan_of_command(tmp_path, monkeypatch, "fish", "sweep.fish")
    assert (plan.get("per_device_batch").value, plan.get("num_gpus").value) == (4, 2)


def test_fish_blocks_close_as_bash_blocks():
    from memlint.extract.shell import fish_as_bash

    out = fish_as_bash("function go\n  echo hi\nend\nif test -n x\n  a\nelse if test y\n  b\nelse\n  c\nend\n")
    assert out.splitlines() == ["go() {", "  echo hi", "}", "if test -n x; then", "  a", "elif test y; then", "  b",
                                "else", "  c", "fi"]


def test_associative_arrays_declared_with_other_flags_too(tmp_path, monkeypatch):
    for decl in ("declare -gA BS", "declare -Ar BS=([big]=4)", "declare -A -g BS"):
        run = f"{decl}\nBS[big]=4\nSIZE=big\ntorchrun train.py --output_dir o --per_device_train_batch_size ${{BS[$SIZE]}}\n"
        write_checkout(tmp_path, {"train.py": _TRAIN, "run.sh": run})
        assert plan_of_command(tmp_path, monkeypatch, "bash", "run.sh").get("per_device_batch").value == 4, decl


def test_a_vendored_llmtuner_entry_script_is_followed_as_the_checkouts_code(tmp_path, monkeypatch):
    old = _LF_TRAIN.replace("from llamafactory.train.tuner import run_exp", "from llmtuner import run_exp")
    write_checkout(tmp_path, {"src/train_bash.py": old, "src/llmtuner/__init__.py": "def run_exp():\n    pass\n",
                              "run.sh": f"torchrun --nproc_per_node 2 src/train_bash.py {_LF_FLAGS}\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert "llamafactory-cli" not in plan.path  # the checkout's own (pre-0.7.1) code, not the reader of newer flags
