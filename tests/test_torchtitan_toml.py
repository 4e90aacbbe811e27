"""torchtitan job TOML files (train_configs/*.toml, torchtitan <= 0.2.2), read with tomllib: [model] name/flavor to
a catalog model, [training], [parallelism], [activation_checkpoint], float8 converters, [optimizer], and the field
names that changed between releases (frameworks.json "torchtitan" "fields")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memlint.extract.configs import detect_file, read_config

# the shape of torchtitan v0.2.2's torchtitan/models/llama3/train_configs/llama3_8b.toml
LLAMA3_8B = """\
[job]
dump_folder = "./outputs"

[model]
name = "llama3"
flavor = "8B"
hf_assets_path = "./assets/hf/Llama-3.1-8B"

[optimizer]
name = "AdamW"
lr = 3e-4

[training]
local_batch_size = 1
seq_len = 8192
max_norm = 1.0

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
context_parallel_degree = 1

[compile]
enable = false

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[quantize.linear.float8]
filter_fqns = ["output"]
"""


def _plan(tmp_path, text, name="job.toml"):
    p = tmp_path / name
    p.write_text(text)
    return read_config(p)


def test_llama3_8b_job(tmp_path):
    plan = _plan(tmp_path, LLAMA3_8B)
    assert plan.kind == "torchtitan"
    v = plan.value
    assert (v("model_id"), v("method"), v("per_device_batch"), v("max_length")) == ("meta-llama/Llama-3.1-8B", "full", 1, 8192)
    assert (v("gradient_checkpointing"), v("recompute_policy"), v("recompute_every")) == (True, "op-sac", None)
    assert (v("optimizer"), v("precision"), v("distributed"), v("tp_size"), v("cp_size")) == \
        ("adamw_torch_fused", "master-fp32", "fsdp", 1, 1)
    assert v("torch_dtype") == "bf16"  # fp32 shards + bf16 compute: bf16 weights + fp32 master, the same bytes
    assert v("float8_training") == "none"  # the section configures; only model.converters turns float8 on
    assert plan.fields["per_device_batch"].span.line == 14
    assert v("num_gpus") is None and any("--gpus" in n for n in plan.notes)


def test_the_op_sac_plan_is_estimated_with_it(tmp_path):
    from memlint.estimate import estimate
    from memlint.estimate.from_plan import setup_from_plan

    plan = _plan(tmp_path, LLAMA3_8B)
    planned = setup_from_plan(plan, {"gpus": 8})
    s = planned.setup
    assert s.recompute and s.recompute_policy == "op-sac" and s.shard == "fsdp" and s.gpus == 8
    full = estimate(s.with_(recompute_policy="full")).bytes("activations")
    assert estimate(s).bytes("activations") > full


@pytest.mark.parametrize("ac, expect", [
    ('mode = "full"', (True, None, None)),
    ('mode = "none"', (False, None, None)),
    ('mode = "selective"\nselective_ac_option = "2"', (True, 2, None)),
    ('mode = "selective"\nselective_ac_option = "op"', (True, None, "op-sac")),
    ("", (True, 2, None)),  # torchtitan's defaults: selective, "2"
])
def test_activation_checkpoint_modes(tmp_path, ac, expect):
    text = LLAMA3_8B.split("[activation_checkpoint]")[0] + ("[activation_checkpoint]\n" + ac + "\n" if ac else "")
    plan = _plan(tmp_path, text)
    assert (plan.value("gradient_checkpointing"), plan.value("recompute_every"), plan.value("recompute_policy")) == expect


def test_a_bad_selective_option_is_a_finding(tmp_path):
    text = LLAMA3_8B.replace('selective_ac_option = "op"', 'selective_ac_option = "ops"')
    plan = _plan(tmp_path, text)
    assert plan.value("gradient_checkpointing") is None
    assert any("selective_ac_option" in d.message for d in plan.diagnostics)


def test_older_names_are_read(tmp_path):
    # before 8570415c3 (2025-06-05): [training] batch_size; before v0.2.0: training.compile and the "float8" converter
    text = (LLAMA3_8B.replace("local_batch_size = 1", "batch_size = 4").replace("[compile]\nenable = false\n", "")
            .replace("max_norm = 1.0", "max_norm = 1.0\ncompile = true")
            .replace("[quantize.linear.float8]", "[float8]")
            .replace('hf_assets_path = "./assets/hf/Llama-3.1-8B"', 'converters = ["float8"]'))
    plan = _plan(tmp_path, text)
    assert plan.value("per_device_batch") == 4
    assert plan.fields["per_device_batch"].span.line == 14
    assert plan.value("float8_training") == "layers"  # filter_fqns = ["output"]: lm_head stays high precision
    assert any("training.compile = true" in n for n in plan.notes)
    assert not plan.diagnostics


def test_a_converter_of_another_release_is_a_finding(tmp_path):
    # torchtitan v0.2.2's own llama3_405b.toml: converters = ["float8"] beside [quantize.linear.float8]
    text = LLAMA3_8B.replace('hf_assets_path = "./assets/hf/Llama-3.1-8B"', 'converters = ["float8"]')
    plan = _plan(tmp_path, text)
    assert plan.value("float8_training") == "layers"
    assert any("'quantize.linear.float8'" in d.message and d.span.line == 7 for d in plan.diagnostics)


def test_parallelism_gives_the_ranks_and_accumulation(tmp_path):
    text = (LLAMA3_8B.replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 4")
            .replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 2")
            .replace("local_batch_size = 1", "local_batch_size = 2\nglobal_batch_size = 32"))
    plan = _plan(tmp_path, text)
    v = plan.value
    assert (v("num_gpus"), v("tp_size"), v("sequence_parallel"), v("tp_stack"), v("grad_accum")) == (8, 2, True, "torchtitan", 4)


@pytest.mark.parametrize("parallel, expect", [
    ({}, ("master-fp32", "bf16")),                                                  # FSDP2 MixedPrecisionPolicy
    ({"data_parallel_shard_degree = -1": "data_parallel_shard_degree = 1"}, ("amp-bf16", "fp32")),  # autocast
    ({"data_parallel_shard_degree = -1": "data_parallel_shard_degree = 1",
      "tensor_parallel_degree = 1": "tensor_parallel_degree = 2"}, ("fp32", "fp32")),  # TP without FSDP: none
])
def test_mixed_precision_follows_maybe_enable_amp(tmp_path, parallel, expect):
    text = LLAMA3_8B
    for a, b in parallel.items():
        text = text.replace(a, b)
    plan = _plan(tmp_path, text)
    assert (plan.value("precision"), plan.value("torch_dtype")) == expect
    text = text.replace("seq_len = 8192", 'seq_len = 8192\nmixed_precision_param = "float32"')
    assert _plan(tmp_path, text).value("precision") == "fp32"


@pytest.mark.parametrize("model, flavor, expect", [
    ("llama3", "70B", "meta-llama/Llama-3.1-70B"), ("qwen3", "0.6B", "Qwen/Qwen3-0.6B"), ("llama3", "debugmodel", None),
    ("deepseek_v3", "16B", None), ("qwen3", "30B-A3B", "Qwen/Qwen3-30B-A3B"), ("qwen3", "debugmodel_moe", None),
])
def test_flavors(tmp_path, model, flavor, expect):
    plan = _plan(tmp_path, LLAMA3_8B.replace('name = "llama3"', f'name = "{model}"').replace('flavor = "8B"', f'flavor = "{flavor}"'))
    assert plan.value("model_id") == expect
    if expect is None:
        assert plan.fields["model_id"].source == "unknown"


def test_a_misspelt_key_is_reported(tmp_path):
    plan = _plan(tmp_path, LLAMA3_8B.replace("seq_len = 8192", "seq_lenn = 8192"))
    assert any("seq_lenn" in d.message and "seq_len" in d.message for d in plan.diagnostics)


def test_other_toml_files_are_not_configs(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.memlint]\nselect = ["ALL"]\n')
    assert detect_file(tmp_path / "pyproject.toml") is None
    assert read_config(tmp_path / "pyproject.toml", explicit=False) is None


def test_broken_toml_is_a_syntax_finding(tmp_path):
    p = tmp_path / "job.toml"
    p.write_text(LLAMA3_8B.replace("seq_len = 8192", "seq_len = = 8192"))
    r = subprocess.run([sys.executable, "-m", "memlint", "check", str(p)], capture_output=True, text=True)
    assert r.returncode == 0 and "Traceback" not in r.stderr  # MEM001, a note, as for broken YAML
    assert f"{p}:15:11: MEM001 note: TOML: Invalid value" in r.stdout


def test_check_cli_on_a_job_file(tmp_path):
    p = tmp_path / "llama3_8b.toml"
    p.write_text(LLAMA3_8B)
    run = lambda *a: subprocess.run([sys.executable, "-m", "memlint", "check", str(p), *a], capture_output=True, text=True)
    r = run()  # data_parallel_shard_degree = -1: the ranks are not in the file
    assert r.returncode == 0 and "MEM003 note: num_gpus is unknown" in r.stdout  # a note: exit 0
    r = run("--gpus", "8", "--gpu", "A100-40GB")
    assert r.returncode == 1 and "MEM101" in r.stdout, r.stdout + r.stderr
    r = run("--gpus", "8", "--gpu", "H200")
    assert r.returncode == 0 and "Traceback" not in r.stderr


# the shape of torchtitan 9dec370's train_configs/llama3_70b.toml (2024-12-26, the commit of its published
# benchmarks/llama3_h100_202412_torchtitan.md): the parallel degrees under [training] and [experimental],
# [optimizer] without implementation, [float8] enable_float8_linear
LLAMA3_70B_2024 = """\
[model]
name = "llama3"
flavor = "70B"

[optimizer]
name = "AdamW"
lr = 1.5e-4

[training]
batch_size = 8
seq_len = 8192
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 8  # 8-way TP
compile = false

[experimental]
context_parallel_degree = 1
pipeline_parallel_degree = 1

[activation_checkpoint]
mode = 'full'

[float8]
enable_float8_linear = false
"""


def test_the_2024_layout_is_read(tmp_path):
    # before 785c34c99 (2025-03-18) the degrees sat in [training]/[experimental]; before 6e4988550 (2025-02-24)
    # AdamW ran foreach unless [optimizer] fused = true; before 57387af0e [float8] enable_float8_linear
    plan = _plan(tmp_path, LLAMA3_70B_2024)
    v = plan.value
    assert (v("model_id"), v("per_device_batch"), v("tp_size"), v("sequence_parallel"), v("cp_size")) == \
        ("meta-llama/Llama-3.1-70B", 8, 8, True, 1)
    assert plan.fields["tp_size"].span.line == 14
    assert (v("distributed"), v("optimizer"), v("float8_training")) == ("fsdp", "adamw_torch_foreach", "none")
    assert plan.fields["distributed"].span.line == 13
    assert any("older layout" in c for c in plan.fields["optimizer"].chain)
    assert not plan.diagnostics and not [n for n in plan.notes if "not by the installed" in n and "parallel" not in n]
    fused = _plan(tmp_path, LLAMA3_70B_2024.replace("lr = 1.5e-4", "lr = 1.5e-4\nfused = true"))
    assert fused.value("optimizer") == "adamw_torch_fused" and fused.fields["optimizer"].span.line == 6
    f8 = _plan(tmp_path, LLAMA3_70B_2024.replace("enable_float8_linear = false", "enable_float8_linear = true"))
    assert f8.value("float8_training") == "layers" and f8.fields["float8_training"].span.line == 25
    cp = _plan(tmp_path, LLAMA3_70B_2024.replace("context_parallel_degree = 1", "context_parallel_degree = 2")
               .replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 4"))
    assert (cp.value("cp_size"), cp.value("num_gpus")) == (2, 64)


def test_context_parallel_ranks_are_fsdp_ranks(tmp_path):
    # FSDP 1 / CP 8 (torchtitan's published 8B table 2): the FSDP mesh dimension is dp_shard × cp
    from memlint.check import context_for
    from memlint.config import Settings
    from memlint.estimate import estimate

    text = (LLAMA3_8B.replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 1")
            .replace("context_parallel_degree = 1", "context_parallel_degree = 8")
            .replace("seq_len = 8192", "seq_len = 65536"))
    plan = _plan(tmp_path, text)
    assert (plan.value("distributed"), plan.value("num_gpus"), plan.value("cp_size")) == ("fsdp", 8, 8)
    s = context_for(plan, Settings()).planned.setup
    assert (s.shard, s.dp, s.shard_group) == ("fsdp", 1, 8)
    four = context_for(_plan(tmp_path, text.replace("data_parallel_shard_degree = 1", "data_parallel_shard_degree = 2")
                             .replace("context_parallel_degree = 8", "context_parallel_degree = 4")
                             .replace("seq_len = 65536", "seq_len = 32768")), Settings()).planned.setup
    # the same states per rank and the same tokens per rank: the same optimizer bytes
    assert estimate(s, "real").bytes("optimizer") == estimate(four, "real").bytes("optimizer")


@pytest.mark.parametrize("command", [
    "torchrun --nproc_per_node=8 -m torchtitan.train --job.config_file ./train_configs/llama3_8b.toml "
    "--training.local_batch_size 2 --parallelism.tensor_parallel_degree=2",
    "NGPU=${NGPU:-8}\ntorchrun --nproc_per_node ${NGPU} torchtitan/train.py --job.config_file=train_configs/llama3_8b.toml "
    "--training.local_batch_size=2 --parallelism.tensor_parallel_degree 2",
])
def test_a_launch_script_runs_the_job_file_with_its_overrides(tmp_path, monkeypatch, command):
    """torchtitan's own launch idiom (run_train.sh): the entry module or script, the job file from --job.config_file,
    `--section.key value` overrides over it, the GPUs from torchrun."""
    from memlint.extract import extract_paths

    (tmp_path / "torchtitan").mkdir()
    (tmp_path / "torchtitan" / "__init__.py").write_text("")
    (tmp_path / "torchtitan" / "train.py").write_text("import torch\n\ndef main():\n    pass\n")
    (tmp_path / "train_configs").mkdir()
    (tmp_path / "train_configs" / "llama3_8b.toml").write_text(LLAMA3_8B)
    (tmp_path / "run.sh").write_text("#!/bin/bash\nset -ex\n" + command + "\n")
    monkeypatch.chdir(tmp_path)
    plans = [p for p in extract_paths([tmp_path / "run.sh"]) if p.kind == "torchtitan"]
    assert len(plans) == 1, plans
    v = plans[0].value
    assert (v("per_device_batch"), v("tp_size"), v("num_gpus"), v("sequence_parallel")) == (2, 2, 8, True)
    assert plans[0].fields["per_device_batch"].source == "command-line"
    assert plans[0].fields["per_device_batch"].span.line == 3 + command.count("\n")
