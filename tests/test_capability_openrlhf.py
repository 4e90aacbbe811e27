"""OpenRLHF's DeepSpeed trainers run as `deepspeed --module openrlhf.cli.train_<x> --flag value ...` (the package
installed, not in the checkout): the command's flags over the CLI's defaults (data/frameworks.json "openrlhf"), both
flag spellings (v0.4-v0.10.1 and the sectioned flags of v0.10.2 on), and the accumulation over the processes."""

from checkouts import plan_of_command, write_checkout

_SFT = '''
set -x
read -r -d '' training_commands <<EOF
openrlhf.cli.train_sft \\
   --max_len 4096 \\
   --dataset Open-Orca/OpenOrca \\
   --train_batch_size 256 \\
   --micro_train_batch_size 2 \\
   --pretrain meta-llama/Meta-Llama-3-8B \\
   --zero_stage 3 \\
   --bf16 \\
   --flash_attn \\
   --gradient_checkpointing
EOF

if [[ ${1} != "slurm" ]]; then
    deepspeed --num_gpus 4 --module $training_commands
fi
'''


def test_an_openrlhf_sft_launcher_of_the_old_flags(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"train_sft.sh": _SFT})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "train_sft.sh")
    got = {k: plan.get(k).value for k in ("model_id", "method", "per_device_batch", "grad_accum", "max_length",
                                           "distributed", "num_gpus", "precision", "torch_dtype",
                                           "attn_implementation", "gradient_checkpointing", "optimizer", "padding")}
    assert got == {"model_id": "meta-llama/Meta-Llama-3-8B", "method": "full", "per_device_batch": 2,
                   "grad_accum": 32,  # 256 / 2 / 4 processes
                   "max_length": 4096, "distributed": "zero3", "num_gpus": 4, "precision": "amp-bf16",
                   "torch_dtype": "bf16", "attn_implementation": "flash_attention_2", "gradient_checkpointing": True,
                   "optimizer": "deepspeed_adam", "padding": "longest"}
    assert plan.get("trainer").value == "deepspeed-engine"


def test_openrlhf_sectioned_flags_and_the_dpo_defaults(tmp_path, monkeypatch):
    sh = ("deepspeed --include localhost:0,1 --module openrlhf.cli.train_dpo --model.model_name_or_path Qwen/Qwen2.5-7B "
          "--ds.lora.rank 16 --ds.load_in_4bit --train.micro_batch_size 1\n")
    write_checkout(tmp_path, {"run.sh": sh})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert plan.get("model_id").value == "Qwen/Qwen2.5-7B"
    assert (plan.get("method").value, plan.get("lora_r").value, plan.get("quant_bits").value) == ("qlora", 16, 4)
    assert plan.get("max_length").value == 512 and plan.get("max_length").source == "library-default"  # DPO's 512
    assert plan.get("grad_accum").value == 64  # the default global batch 128 / 1 / 2 processes
    assert plan.get("distributed").value == "zero2"  # --ds.zero_stage's default
    assert dict(plan.get("trainer").shape).get("objective") == "dpo" and plan.get("ref_model").value == "copy"


def test_openrlhf_reward_model_defaults_and_an_unknown_process_count(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"rm.sh": "deepspeed --module openrlhf.cli.train_rm --pretrain gpt2 --param_dtype fp16\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "rm.sh")
    assert plan.get("per_device_batch").value == 1  # train_rm's micro-batch default
    assert (plan.get("torch_dtype").value, plan.get("precision").value) == ("fp16", "amp-fp16")
    assert not plan.get("grad_accum").known  # the global batch over processes the launcher does not count
    assert dict(plan.get("trainer").shape).get("objective") == "reward"


def test_an_openrlhf_command_without_its_bf16_switch_before_param_dtype(tmp_path, monkeypatch):
    """`--flash_attn` exists only before v0.8.10, so the command runs a version whose --bf16 switch is off: the Actor
    loads torch_dtype='auto' and DeepSpeed trains in fp32."""
    write_checkout(tmp_path, {"sft.sh": "deepspeed --module openrlhf.cli.train_sft --pretrain gpt2 --flash_attn\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "sft.sh")
    assert (plan.get("torch_dtype").value, plan.get("precision").value) == ("auto", "fp32")


def test_the_checkouts_own_copy_of_the_cli_tells_its_versions_defaults(tmp_path, monkeypatch):
    """A fork of OpenRLHF run from its repository: its train_sft.py declares --flash_attn and --bf16 (before v0.8.10),
    so a command giving neither trains with eager attention, torch_dtype 'auto' and DeepSpeed in fp32."""
    cli = ('import argparse\np = argparse.ArgumentParser()\np.add_argument("--flash_attn", action="store_true")\n'
           'p.add_argument("--bf16", action="store_true")\np.add_argument("--pretrain", type=str)\n')
    write_checkout(tmp_path, {"openrlhf/__init__.py": "", "openrlhf/cli/__init__.py": "", "openrlhf/cli/train_sft.py": cli,
                              "sft.sh": "deepspeed --module openrlhf.cli.train_sft --pretrain gpt2\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "sft.sh")
    assert plan.get("attn_implementation").value == "eager"
    assert (plan.get("torch_dtype").value, plan.get("precision").value) == ("auto", "fp32")


def test_openrlhf_ray_ppo_submitted_as_a_ray_job(tmp_path, monkeypatch):
    """`ray job submit ... -- python3 -m openrlhf.cli.train_ppo_ray ...`: the command after `--` runs; the actor's
    processes are --actor_num_nodes × --actor_num_gpus_per_node, its length the prompt's and the generation's, and
    no estimate (memlint models no PPO step), said."""
    sh = ("ray job submit --address=http://127.0.0.1:8265 -- python3 -m openrlhf.cli.train_ppo_ray "
          "--actor_num_nodes 1 --actor_num_gpus_per_node 4 --pretrain Qwen/Qwen2.5-7B --micro_train_batch_size 2 "
          "--train_batch_size 128 --prompt_max_len 1024 --generate_max_len 512 --zero_stage 3 --bf16\n")
    write_checkout(tmp_path, {"run.sh": sh})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    got = {k: plan.get(k).value for k in ("model_id", "num_gpus", "per_device_batch", "grad_accum", "max_length",
                                           "distributed", "trainer")}
    assert got == {"model_id": "Qwen/Qwen2.5-7B", "num_gpus": 4, "per_device_batch": 2, "grad_accum": 16,
                   "max_length": 1536, "distributed": "zero3", "trainer": "deepspeed-engine"}
    assert "PPO" in dict(plan.get("trainer").shape)["not_modelled"]


def test_openrlhf_lora_targets_4bit_format_and_packing(tmp_path, monkeypatch):
    """--target_modules (nargs="*") defaults to all-linear; --load_in_4bit is NF4 with double quantization; packing
    switches attention to flash_attention_2 over an eager flag; a DPO step materialises fp32 logits (Actor.forward)."""
    sh = ("deepspeed --module openrlhf.cli.train_sft --pretrain gpt2 --lora_rank 8 --load_in_4bit --packing_samples "
          "--attn_implementation eager --param_dtype bf16\n"
          "deepspeed --module openrlhf.cli.train_dpo --pretrain gpt2 --lora_rank 8 --target_modules q_proj v_proj\n")
    write_checkout(tmp_path, {"sft.sh": sh.splitlines()[0] + "\n", "dpo.sh": sh.splitlines()[1] + "\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "sft.sh")
    assert plan.get("lora_targets").value == "all-linear"
    assert (plan.get("quant_type").value, plan.get("double_quant").value) == ("nf4", True)
    assert plan.get("attn_implementation").value == "flash_attention_2"
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "dpo.sh")
    assert plan.get("lora_targets").value == ["q_proj", "v_proj"]


def test_an_openrlhf_dpo_estimate_counts_fp32_logits(tmp_path, monkeypatch, capsys):
    from memlint.cli import main

    write_checkout(tmp_path, {"dpo.sh": "deepspeed --num_gpus 1 --module openrlhf.cli.train_dpo --pretrain gpt2 "
                                        "--param_dtype bf16 --micro_train_batch_size 1 --max_len 512\n"})
    monkeypatch.chdir(tmp_path)
    main(["plan", "dpo.sh"])
    out = capsys.readouterr().out
    assert "2·b·s·V × 4 B logits" in out and "the trainer's fp32 copy" in out
