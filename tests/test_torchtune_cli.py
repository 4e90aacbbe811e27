"""`tune run RECIPE --config NAME key=value ...` as torchtune runs it: a built-in config name
(`llama3_2/3B_lora_single_device`, found under a torchtune checkout's recipes/configs or in the installed
distribution's file list, never by importing it), and torchtune's component overrides (`loss=X` over a
`_component_` dict sets its `_component_` and keeps its other fields: torchtune/config/_utils.py
_merge_yaml_and_cli_args). The README's 'Optimization flags' QLoRA command read this way sized nothing for its
chunked loss before: the override replaced the loss dict with a string."""

from __future__ import annotations

import textwrap
from pathlib import Path

from memlint.extract import extract_targets
from memlint.extract.launch import command_target, tokens
from memlint.files import Target

from checkouts import plan_of_command

QLORA = """\
model:
  _component_: torchtune.models.llama3_2.qlora_llama3_2_3b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  lora_rank: 64
  lora_alpha: 128
  lora_dropout: 0.0
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/Llama-3.2-3B-Instruct/original/tokenizer.model
  max_seq_len: null
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
  packed: False
batch_size: 4
optimizer:
  _component_: torch.optim.AdamW
  fused: True
  lr: 3e-4
loss:
  _component_: torch.nn.CrossEntropyLoss
gradient_accumulation_steps: 8
compile: False
enable_activation_checkpointing: True
dtype: bf16
"""


def _plan(root: Path, command: str, monkeypatch):
    monkeypatch.chdir(root)
    [plan] = extract_targets([command_target(tokens(command), root)])
    return plan


def test_a_built_in_config_name_and_component_overrides(tmp_path, monkeypatch):
    cfg = tmp_path / "recipes" / "configs" / "llama3_2" / "3B_qlora_single_device.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(textwrap.dedent(QLORA))
    run = tmp_path / "runs"
    run.mkdir()
    plan = _plan(run, "tune run lora_finetune_single_device --config llama3_2/3B_qlora_single_device "
                      "loss=torchtune.modules.loss.CEWithChunkedOutputLoss optimizer._component_=torch.optim.AdamW "
                      "dataset.packed=True tokenizer.max_seq_len=4096 batch_size=2 gradient_accumulation_steps=1",
                 monkeypatch)
    assert plan.path.endswith("recipes/configs/llama3_2/3B_qlora_single_device.yaml")
    v = plan.value
    assert (v("method"), v("chunked_loss"), v("per_device_batch"), v("max_length"), v("packing")) == ("qlora", 8, 2, 4096, True)
    assert plan.fields["chunked_loss"].source == "command-line"
    # optimizer._component_ over the dict keeps its fused: True
    assert v("optimizer") == "adamw_torch_fused"


def test_a_config_path_still_wins(tmp_path, monkeypatch):
    (tmp_path / "my.yaml").write_text(textwrap.dedent(QLORA))
    plan = _plan(tmp_path, "tune run lora_finetune_single_device --config my.yaml batch_size=1", monkeypatch)
    assert plan.value("per_device_batch") == 1 and plan.value("chunked_loss") == 0


def test_a_distributed_recipe_shards_with_fsdp_over_the_slurm_gpus(tmp_path, monkeypatch):
    # `#SBATCH --gpus 2` sets SLURM_GPUS; torchtune's built-in *_distributed recipes shard the model with FSDP
    lora = QLORA.replace("qlora_llama3_2_3b", "lora_llama3_2_3b")
    (tmp_path / "my.yaml").write_text(textwrap.dedent(lora))
    (tmp_path / "job.slurm").write_text("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gpus 2\n"
                                        "tune run --nproc_per_node=$SLURM_GPUS --nnodes=$SLURM_JOB_NUM_NODES "
                                        "lora_finetune_distributed --config my.yaml\n")
    plan = plan_of_command(tmp_path, monkeypatch, "sbatch", "job.slurm")
    assert (plan.value("distributed"), plan.value("num_gpus")) == ("fsdp", 2)


def test_a_single_device_config_read_alone_trains_on_one_gpu(tmp_path, monkeypatch):
    (tmp_path / "3B_lora_single_device.yaml").write_text(textwrap.dedent(QLORA))
    monkeypatch.chdir(tmp_path)
    [plan] = extract_targets([Target(Path("3B_lora_single_device.yaml"), "3B_lora_single_device.yaml", True)])
    assert (plan.value("distributed"), plan.value("num_gpus")) == ("none", 1)
    (tmp_path / "3B_lora.yaml").write_text(textwrap.dedent(QLORA))
    [plan] = extract_targets([Target(Path("3B_lora.yaml"), "3B_lora.yaml", True)])
    assert plan.value("num_gpus") is None


def test_the_checkpoint_folder_names_the_instruct_variant_of_the_builders_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = {}
    for folder in ("/tmp/Llama-3.2-3B-Instruct/", "/tmp/Llama-3.2-3B/", "/tmp/my-finetune/", "/tmp/Llama-3.2-3B-Instruct-abl/"):
        (tmp_path / "c.yaml").write_text(textwrap.dedent(QLORA) + f"checkpointer:\n  checkpoint_dir: {folder}\n")
        [plan] = extract_targets([Target(Path("c.yaml"), "c.yaml", True)])
        got[folder] = plan.value("model_id")
    assert got == {"/tmp/Llama-3.2-3B-Instruct/": "meta-llama/Llama-3.2-3B-Instruct",
                   "/tmp/Llama-3.2-3B/": "meta-llama/Llama-3.2-3B", "/tmp/my-finetune/": "meta-llama/Llama-3.2-3B",
                   "/tmp/Llama-3.2-3B-Instruct-abl/": "meta-llama/Llama-3.2-3B"}


def test_the_command_recipe_wins_over_a_single_device_config_name(tmp_path, monkeypatch):
    lora = QLORA.replace("qlora_llama3_2_3b", "lora_llama3_2_3b")
    (tmp_path / "3B_lora_single_device.yaml").write_text(textwrap.dedent(lora))
    plan = plan_of_command(tmp_path, monkeypatch, "tune", "run", "--nproc_per_node", "4", "lora_finetune_distributed",
                           "--config", "3B_lora_single_device.yaml")
    assert (plan.value("distributed"), plan.value("num_gpus")) == ("fsdp", 4)


def test_a_config_named_by_the_authors_absolute_path_and_a_recipe_without_its_suffix(tmp_path, monkeypatch):
    # `tune run --nproc_per_node 1 proj/full_finetune_single_device --config /lfs/u/proj-repo/proj/configs/c.yaml`
    # in a launcher: the config is the checkout's proj/configs/c.yaml (the longest tail of the author's path that
    # is a file here), the recipe the checkout's proj/full_finetune_single_device.py
    full = QLORA.replace("qlora_llama3_2_3b", "llama3_2_3b").replace("batch_size: 4", "batch_size: 7")
    (tmp_path / "proj" / "configs").mkdir(parents=True)
    (tmp_path / "proj" / "configs" / "c.yaml").write_text(textwrap.dedent(full))
    (tmp_path / "proj" / "full_finetune_single_device.py").write_text("model = shard_model(model)\n")
    (tmp_path / "proj" / "scripts").mkdir()
    (tmp_path / "proj" / "scripts" / "train.sh").write_text(
        "tune run --nproc_per_node 1 proj/full_finetune_single_device "
        "--config /lfs/local/0/u/proj-repo/proj/configs/c.yaml\n")
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "proj/scripts/train.sh")
    assert plan.path.endswith("proj/configs/c.yaml")
    assert (plan.value("per_device_batch"), plan.value("trainer")) == (7, "torchtune")
    # a path under the author's home written with `~`
    monkeypatch.setenv("HOME", "/home/someone-else")
    (tmp_path / "proj" / "scripts" / "home.sh").write_text(
        "tune run --nproc_per_node 1 proj/full_finetune_single_device --config ~/proj-repo/proj/configs/c.yaml\n")
    assert plan_of_command(tmp_path, monkeypatch, "bash", "proj/scripts/home.sh").value("per_device_batch") == 7
    # the recipe file was found: its sharding call decides the distributed field
    assert plan.value("distributed") == "fsdp"


def test_interpolations_resolve_and_an_unknown_builder_loads_its_checkpoint_folder(tmp_path, monkeypatch):
    # torchtune loads its YAML with OmegaConf: `checkpoint_dir: ${model_dir}` is the top-level model_dir, `${batch}` an
    # int; a builder memlint's table lacks (a generic builder with its sizes written out) is the checkpoint it loads
    cfg = """\
model_dir: /data/ckpts/base-model
batch: 6
model:
  _component_: torchtune.models.llama2.lora_llama2
  lora_attn_modules: ['q_proj', 'v_proj']
  vocab_size: 32000
  num_layers: 22
  lora_rank: 8
  lora_alpha: 16
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: ${model_dir}
batch_size: ${batch}
dtype: bf16
"""
    (tmp_path / "c.yaml").write_text(cfg)
    plan = _plan(tmp_path, "tune run lora_finetune_single_device --config c.yaml", monkeypatch)
    assert (plan.value("model_id"), plan.value("per_device_batch"), plan.value("method")) == ("/data/ckpts/base-model", 6, "lora")
