"""Job scripts that set up a framework and run it from there: `srun` with its options, a launcher copied into a
framework's clone (`cp run.sh app/examples/demo.sh`) and run inside a container whose working folder is a bound
folder of the checkout, and a framework's own entry script that the checkout does not hold (LLaMA-Factory's
`src/train_bash.py --stage sft ...`), recognised by its name and the flags only that framework takes. Also `tune run`'s
processes, a checkout subclass of a transformers model whatever its name, and the load dtypes libraries choose."""

from __future__ import annotations

import json
from functools import partial

import pytest

from checkouts import ARGPARSE_TRAIN, field_values as _get, plan_of_command as _command, write_checkout
from memlint.extract.launch import parse_command

_write = partial(write_checkout, dedent=True)

_LF_FLAGS = """
    CUDA_VISIBLE_DEVICES=0 python ../../src/train_bash.py \\
        --stage sft --do_train \\
        --model_name_or_path meta-llama/Llama-2-7b-hf \\
        --finetuning_type lora --lora_target q_proj,v_proj \\
        --cutoff_len 1024 --per_device_train_batch_size 2 --gradient_accumulation_steps 8 \\
        --quantization_bit 4 --fp16
"""


def test_a_launcher_copied_into_a_framework_clone_and_run_in_a_container_is_read(tmp_path, monkeypatch):
    # srun (options with values) -> bash -c "./job.sh" -> cp demo.sh into the clone -> singularity --pwd (a bound
    # folder of the checkout) -> bash demo.sh -> python ../../src/train_bash.py (LLaMA-Factory's, not in the checkout)
    root = _write(tmp_path, {
        "class/srun.sh": 'srun --job-name demo --nodes 1 --gpus-per-node 1 --account X -o logs/o.out \\\n'
                         '  bash -c "./job.sh" &\n',
        "class/job.sh": """
            #!/bin/bash
            cp demo.sh local/app/LLaMA-Factory/examples/qlora/my_demo.sh
            singularity exec --nv --pwd $HOME/.local/app/LLaMA-Factory/examples/qlora -B ./local:$HOME/.local \\
              images/cuda.sif \\
              bash -c "HF_TOKEN=x bash my_demo.sh"
        """,
        "class/demo.sh": _LF_FLAGS,
    })
    plan = _command(root / "class", monkeypatch, "bash", "srun.sh")
    assert _get(plan, "model_id", "method", "quant_bits", "per_device_batch", "grad_accum", "max_length", "trainer",
                "num_gpus") == {
        "model_id": "meta-llama/Llama-2-7b-hf", "method": "qlora", "quant_bits": 4, "per_device_batch": 2,
        "grad_accum": 8, "max_length": 1024, "trainer": "Seq2SeqTrainer", "num_gpus": 1}


def test_without_the_copy_the_missing_launcher_runs_nothing(tmp_path, monkeypatch):
    # the same job with its `cp` line taken out: nothing is at the container's path, so nothing is read
    root = _write(tmp_path, {
        "job.sh": "singularity exec --pwd /w/app -B ./local:/w img.sif bash -c \"bash my_demo.sh\"\n",
        "demo.sh": _LF_FLAGS,
    })
    from memlint.extract.shell import command_targets

    monkeypatch.chdir(root)
    assert not any("llamafactory" in str(t.path) for t in command_targets(["bash", "job.sh"]))
    (root / "local/app").mkdir(parents=True)
    (root / "job.sh").write_text("cp demo.sh local/app/my_demo.sh\n" + (root / "job.sh").read_text())
    assert [str(t.path.name) for t in command_targets(["bash", "job.sh"])] == ["llamafactory-cli train"]


@pytest.mark.parametrize("script, flags, read", [
    ("src/train.py", "--stage sft --do_train --finetuning_type lora --model_name_or_path Qwen/Qwen2.5-0.5B", True),
    ("train_bash.py", "--stage sft --do_train --finetuning_type full --model_name_or_path Qwen/Qwen2.5-0.5B", True),
    ("src/train.py", "--model_name_or_path Qwen/Qwen2.5-0.5B --finetuning_type lora", False),  # no --stage
    ("src/finetune.py", "--stage sft --finetuning_type lora --model_name_or_path Qwen/Qwen2.5-0.5B", False),
])
def test_a_frameworks_entry_script_missing_from_the_checkout_is_read_by_its_flags(tmp_path, monkeypatch, script,
                                                                                    flags, read):
    from memlint.extract.launch import framework_script

    launch = parse_command(["python", script, *flags.split()])
    tool = framework_script(launch)
    assert (tool is not None) == read
    if read:
        assert (tool.launcher, tool.subcommand, tool.runner, tool.script) == ("llamafactory-cli", "train", "python", None)
        root = _write(tmp_path, {"run.sh": f"python {script} {flags} --per_device_train_batch_size 3\n"})
        assert _get(_command(root, monkeypatch, "bash", "run.sh"), "model_id", "per_device_batch") == {
            "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 3}


def test_the_checkouts_own_script_of_that_name_is_read_as_itself(tmp_path, monkeypatch):
    # a checkout that has its own src/train.py: that file runs, whatever flags it is given
    root = _write(tmp_path, {"src/train.py": ARGPARSE_TRAIN,
                             "run.sh": "python src/train.py --stage sft --finetuning_type lora --batch_size 5\n"})
    plan = _command(root, monkeypatch, "bash", "run.sh")
    assert _get(plan, "per_device_batch", "trainer") == {"per_device_batch": 5, "trainer": "Trainer"}


@pytest.mark.parametrize("words, command", [
    ("srun --job-name demo --gpus-per-node 1 --cpus-per-task 4 python train.py --bs 2", ("train.py", ("--bs", "2"))),
    ("srun -N 1 -o out.log --quit-on-interrupt python train.py", ("train.py", ())),
    ("mpirun -np 4 -x NCCL_DEBUG python train.py", ("train.py", ())),
])
def test_wrapper_options_with_values_are_not_the_command(words, command):
    launch = parse_command(words.split())
    assert (launch.script, launch.argv) == command


@pytest.mark.parametrize("line, cwd", [
    ("cp run.sh app/ex/demo.sh", "app/ex/demo.sh"),
    ("cp -f run.sh app/ex/", "app/ex/run.sh"),
    ("cp run.sh app/ex", "app/ex/run.sh"),  # a folder: the copy keeps its name
])
def test_cp_records_where_the_copy_is(line, cwd):
    from memlint.extract.shell import _copied

    copies: dict[str, str] = {}
    _copied(line, {}, None, copies)
    assert copies == {cwd: "run.sh"}


_TUNE_CONFIG = """
    model:
      _component_: torchtune.models.llama3.lora_llama3_8b
      lora_attn_modules: ['q_proj', 'v_proj']
      lora_rank: 8
    tokenizer:
      _component_: torchtune.models.llama3.llama3_tokenizer
      path: /tmp/Meta-Llama-3-8B/original/tokenizer.model
    checkpointer:
      _component_: torchtune.training.FullModelMetaCheckpointer
      checkpoint_dir: /tmp/Meta-Llama-3-8B/original/
    dataset:
      _component_: torchtune.datasets.alpaca_dataset
    batch_size: 2
    dtype: bf16
"""


@pytest.mark.parametrize("words, gpus, distributed", [
    (["tune", "run", "lora_finetune_single_device", "--config", "my.yaml"], 1, "none"),
    (["tune", "run", "--nproc_per_node", "4", "lora_finetune_distributed", "--config", "my.yaml"], 4, "fsdp"),
])
def test_tune_run_starts_the_processes_its_command_says(tmp_path, monkeypatch, words, gpus, distributed):
    root = _write(tmp_path, {"my.yaml": _TUNE_CONFIG})
    plan = _command(root, monkeypatch, *words)
    assert plan.get("num_gpus").value == gpus
    assert plan.get("distributed").value == distributed


def test_a_checkout_subclass_of_a_transformers_model_loads_whatever_it_is_called(tmp_path, monkeypatch):
    script = """
        from transformers import Qwen2ForCausalLM, Trainer, TrainingArguments

        class Model(Qwen2ForCausalLM):
            def __init__(self, config):
                super().__init__(config)

        model = Model.from_pretrained("Qwen/Qwen2.5-7B-Instruct", attn_implementation="sdpa")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "attn_implementation") == {"model_id": "Qwen/Qwen2.5-7B-Instruct",
                                                             "attn_implementation": "sdpa"}


_BNB = """
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", quantization_config=bnb)
    Trainer(model=model, args=TrainingArguments("o")).train()
"""


@pytest.mark.parametrize("pin, dtype", [("transformers==4.44.2", "fp16"), ("transformers==5.1.0", "auto")])
def test_a_bitsandbytes_load_without_a_dtype_is_float16_before_transformers_5(tmp_path, monkeypatch, pin, dtype):
    root = _write(tmp_path, {"train.py": _BNB, "requirements.txt": pin + "\n"})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert plan.get("torch_dtype").value == dtype


@pytest.mark.parametrize("python", ["$(shell command -v python 2> /dev/null || command -v python3 2> /dev/null || echo python3)",
                                    "$(shell which python3)"])
def test_a_makefile_python_found_by_the_shell_runs_the_recipes_script(tmp_path, monkeypatch, python):
    root = _write(tmp_path, {"src/train.py": ARGPARSE_TRAIN,
                             "Makefile": f"PYTHON := {python}\n\nfinetune:\n\t$(PYTHON) src/train.py --batch_size 6\n"})
    assert _command(root, monkeypatch, "make", "finetune").get("per_device_batch").value == 6


def test_a_make_target_that_runs_no_training_is_a_note_not_an_error(tmp_path, monkeypatch):
    from memlint.extract.shell import command_targets

    root = _write(tmp_path, {"Makefile": "lint:\n\truff check .\n"})
    monkeypatch.chdir(root)
    targets = command_targets(["make", "lint"])
    assert len(targets) == 1 and "`make lint`" in targets[0].note and "runs no Python training" in targets[0].note


@pytest.mark.parametrize("line", ["uv run src/train.py --batch_size 7", "uv run --with torch --frozen src/train.py --batch_size 7",
                                  "poetry run python src/train.py --batch_size 7", "./src/train.py --batch_size 7"])
def test_a_job_script_running_a_python_file_through_a_runner_is_read(tmp_path, monkeypatch, line):
    root = _write(tmp_path, {"src/train.py": ARGPARSE_TRAIN, "job.sh": "#!/bin/bash\n#SBATCH --gpus=1\n" + line + "\n"})
    assert _command(root, monkeypatch, "bash", "job.sh").get("per_device_batch").value == 7


_ACCEL_DS = """
    import torch
    from accelerate import Accelerator, DeepSpeedPlugin
    from transformers import AutoModelForCausalLM
    PLUGIN
    model = AutoModelForCausalLM.from_pretrained("gpt2")
    opt = torch.optim.AdamW(model.parameters())
    loader = torch.utils.data.DataLoader(torch.load("d.pt"), batch_size=1)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize("plugin, distributed, accum", [
    ("accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3, gradient_accumulation_steps=2))",
     "zero3", 2),                                   # the script's own plugin: its stage and accumulation
    ("accelerator = Accelerator()", "zero2", 1),    # --use_deepspeed alone: the plugin's default stage
])
def test_accelerate_use_deepspeed_without_a_stage(tmp_path, monkeypatch, plugin, distributed, accum):
    root = _write(tmp_path, {"train.py": _ACCEL_DS.replace("PLUGIN", plugin)})
    plan = _command(root, monkeypatch, "accelerate", "launch", "--num_processes", "4", "--use_deepspeed", "train.py")
    assert _get(plan, "distributed", "grad_accum", "num_gpus") == {"distributed": distributed, "grad_accum": accum,
                                                                   "num_gpus": 4}


def test_a_command_run_over_ssh_is_the_quoted_commands(tmp_path, monkeypatch):
    # `ssh "$HOST" "cd /workspace/repo && source venv/bin/activate && axolotl train cfg.yml"`: the quoted command runs
    # on the host, from its copy of the checkout (the launcher synced it); options before the host are ssh's own
    cfg = ("base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nlora_r: 8\nmicro_batch_size: 3\n"
           "gradient_accumulation_steps: 2\nsequence_len: 1024\n")
    for line in ('ssh "$HOST" "cd /workspace/repo && source /workspace/venv/bin/activate && axolotl train cfgs/a.yml"',
                 "ssh -p 2222 -i ~/.ssh/key -t $HOST 'axolotl train cfgs/a.yml'"):
        root = _write(tmp_path / str(len(line)), {
            "cfgs/a.yml": cfg,
            "scripts/train.sh": f'HOST="${{1:-}}"\nif [ -n "$HOST" ]; then\n  {line}\nfi\n',
        })
        plan = _command(root, monkeypatch, "bash", "scripts/train.sh", "gpu-box")
        assert _get(plan, "model_id", "per_device_batch", "lora_r") == {
            "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 3, "lora_r": 8}


def test_a_config_the_notebook_writes_from_a_string_is_there_for_the_script_it_runs(tmp_path, monkeypatch):
    # a Colab cell writes the YAML text (`with open("cfg.yaml", "w") as f: f.write(cfg)`), a later cell runs
    # `!python train.py --config cfg.yaml`: the script reads that text, though no cfg.yaml is in the checkout
    from checkouts import write_notebook
    from memlint.extract import extract_paths

    train = ("import argparse, yaml\n"
             "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
             "p = argparse.ArgumentParser(); p.add_argument('--config'); a = p.parse_args()\n"
             "cfg = yaml.safe_load(open(a.config))\n"
             "model = AutoModelForCausalLM.from_pretrained(cfg['model'])\n"
             "Trainer(model=model, args=TrainingArguments('o', per_device_train_batch_size=cfg['batch'])).train()\n")
    root = _write(tmp_path, {"train.py": train})
    write_notebook(root / "nb.ipynb", ['cfg = """\n', "model: Qwen/Qwen2.5-0.5B\n", "batch: 3\n", '"""\n',
                                       "with open('cfg.yaml', 'w') as f:\n", "    f.write(cfg)\n",
                                       "!python train.py --config cfg.yaml\n"])
    monkeypatch.chdir(root)
    plans = [p for p in extract_paths(["nb.ipynb"]) if p.path.endswith("train.py")]
    assert plans and (plans[0].value("model_id"), plans[0].value("per_device_batch")) == ("Qwen/Qwen2.5-0.5B", 3)
    # two writes in one `with` are one file; the script itself written by the notebook (%%writefile) reads it too
    write_notebook(root / "nb2.ipynb", ["%%writefile train2.py\n", *train.splitlines(keepends=True)])
    nb = json.loads((root / "nb2.ipynb").read_text())
    nb["cells"].append({**nb["cells"][0], "source": [
        "with open('cfg2.yaml', 'w') as f:\n", "    f.write('model: Qwen/Qwen2.5-0.5B\\n')\n",
        "    f.write('batch: 5\\n')\n", "!python train2.py --config cfg2.yaml\n"]})
    (root / "nb2.ipynb").write_text(json.dumps(nb))
    plans = [p for p in extract_paths(["nb2.ipynb"]) if "train2.py" in p.path]
    assert plans and (plans[0].value("model_id"), plans[0].value("per_device_batch")) == ("Qwen/Qwen2.5-0.5B", 5)


def test_a_refused_read_keeps_the_plans_launcher():
    # a launched script that reads a file outside the checked root gets a not-read note; the launcher line that runs
    # it (the plan's `via`) is kept, so a notebook's launched training script is still known as launched
    from memlint.extract import not_read
    from memlint.plan import TrainingPlan

    plan = TrainingPlan("scripts/train.py", via="nb.ipynb:12")
    got = not_read(plan, [("/home/u/.cache/x.json", "not read: outside the checked root")])
    assert got.via == "nb.ipynb:12" and got.diagnostics


def test_a_tool_run_by_its_path_and_a_launcher_of_the_authors_machine(tmp_path, monkeypatch):
    # `VAR=x /home/u/proj/scripts/run.sh` (a launcher named by a path of the author's machine, variables before it)
    # runs the checkout's scripts/run.sh, which runs ms-swift by its virtual environment's path ("$SWIFT_BIN" sft)
    root = _write(tmp_path, {
        "run_gpu.sh": "BASE=Qwen/Qwen2.5-0.5B\nBASE_MODEL=\"$BASE\" \\\nMAX_LEN=1024 \\\n"
                      "/home/u/proj/scripts/run_sft.sh\n",
        "scripts/run_sft.sh": "SWIFT_BIN=${SWIFT_BIN:-/home/u/proj/.venv/bin/swift}\n"
                              "\"$SWIFT_BIN\" sft --model \"$BASE_MODEL\" --max_length \"$MAX_LEN\" --train_type lora\n",
    })
    plan = _command(root, monkeypatch, "bash", "run_gpu.sh")
    assert _get(plan, "model_id", "max_length", "method") == {"model_id": "Qwen/Qwen2.5-0.5B", "max_length": 1024,
                                                              "method": "lora"}
