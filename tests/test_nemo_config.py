"""NVIDIA NeMo 1.x / NeMo-Megatron training YAML (extract/configs/nemo.py): trainer devices/num_nodes/precision,
model micro/global batch (NeMo's accumulation over the data-parallel size), TP/PP/CP, sequence_parallel,
megatron_amp_O2, activations_checkpoint_*, optim.name, peft (lora/qlora/ptuning/none), the model by shape, Hydra
`${...}` references and the launcher's `${peft.model.x}`. Synthetic files written the way NeMo's own
(examples/nlp/language_modeling/tuning/conf/megatron_gpt_finetuning_config.yaml, conf/megatron_llama_config.yaml,
NeMo-Framework-Launcher launcher_scripts/conf/peft/llama/squad.yaml) are; no public file is copied."""

from __future__ import annotations

import subprocess
import sys

from memlint.extract.configs import detect_file, read_config
from memlint.library.versions import pinned_versions

# the shape of tuning/conf/megatron_gpt_finetuning_config.yaml, with LoRA on attention and the MLP
SFT = """\
name: megatron_gpt_peft_${model.peft.peft_scheme}_tuning

trainer:
  devices: 8
  accelerator: gpu
  num_nodes: 2
  precision: bf16-mixed
  max_steps: 20000

exp_manager:
  name: ${name}
  checkpoint_callback_params:
    monitor: validation_${model.data.validation_ds.metric.name}
    model_parallel_size: ${model.tensor_model_parallel_size}

model:
  seed: 1234
  tensor_model_parallel_size: 2 # intra-layer model parallelism
  pipeline_model_parallel_size: 1
  global_batch_size: 128
  micro_batch_size: ${.data.train_ds.micro_batch_size}
  restore_from_path: /models/llama2-7b.nemo
  megatron_amp_O2: True
  sequence_parallel: True
  activations_checkpoint_granularity: full
  activations_checkpoint_method: uniform
  activations_checkpoint_num_layers: 1
  peft:
    peft_scheme: "lora"
    restore_from_path: null
    lora_tuning:
      variant: "canonical"
      target_modules: ['attention', 'mlp_fc1']
      adapter_dim: 16
      alpha: ${model.peft.lora_tuning.adapter_dim}
      adapter_dropout: 0.05
  data:
    train_ds:
      file_names: ???
      global_batch_size: ${model.global_batch_size}
      micro_batch_size: 2
      max_seq_length: 4096
    validation_ds:
      max_seq_length: ${model.data.train_ds.max_seq_length}
      metric:
        name: "loss"
  optim:
    name: distributed_fused_adam
    lr: 1e-4
"""

# the shape of conf/megatron_llama_config.yaml (pretraining: the architecture is in the file)
PRETRAIN = """\
name: megatron_llama
trainer:
  devices: 4
  num_nodes: 1
  precision: 32
exp_manager:
  checkpoint_callback_params:
    model_parallel_size: ${multiply:${model.tensor_model_parallel_size}, ${model.pipeline_model_parallel_size}}
model:
  mcore_gpt: True
  micro_batch_size: 1
  global_batch_size: 16
  tensor_model_parallel_size: 1
  pipeline_model_parallel_size: 1
  encoder_seq_length: 8192
  max_position_embeddings: ${.encoder_seq_length}
  num_layers: 32
  hidden_size: 4096
  ffn_hidden_size: 14336
  num_attention_heads: 32
  num_query_groups: 8
  normalization: 'rmsnorm'
  activation: 'fast-swiglu'
  tokenizer:
    library: huggingface
    type: meta-llama/Meta-Llama-3-8B
  activations_checkpoint_granularity: full
  activations_checkpoint_method: block
  activations_checkpoint_num_layers: 8
  data:
    seq_length: ${model.encoder_seq_length}
  optim:
    name: fused_adam
"""

# the shape of NeMo-Framework-Launcher launcher_scripts/conf/peft/llama/squad.yaml: the stage mounted under `peft`
LAUNCHER = """\
name: megatron_llama_peft_tuning-${peft.model.peft.peft_scheme}
run:
  name: ${.task_name}_${.model_train_name}
  model_train_name: llama2_7b
  task_name: "squad"
  results_dir: ${base_results_dir}/${.model_train_name}/peft_${.name}
trainer:
  devices: 8
  num_nodes: 1
  precision: bf16
exp_manager:
  explicit_log_dir: ${peft.run.results_dir}/results
model:
  tensor_model_parallel_size: ${peft.model.pipeline_model_parallel_size}
  pipeline_model_parallel_size: 1
  global_batch_size: 128
  micro_batch_size: 4
  restore_from_path: ${base_results_dir}/llama2_7b/convert_nemo/results/megatron_llama.nemo
  megatron_amp_O2: False
  peft:
    peft_scheme: "lora"
    lora_tuning:
      adapter_dim: 32
      adapter_dropout: 0.0
  data:
    train_ds:
      max_seq_length: 4096
      pad_to_max_length: ${peft.model.data.train_ds.packed}
      packed: true
  optim:
    name: fused_adam
"""


def _plan(tmp_path, text: str, name: str = "megatron_gpt_finetuning_config.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return read_config(p)


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _at(plan, name: str, text: str, needle: str, value) -> None:
    v = plan.get(name)
    assert v.value == value, (name, v)
    assert v.source == "literal" and v.span is not None and v.span.line == _line(text, needle), (name, v)


def test_sft_config_every_field_and_its_line(tmp_path):
    plan = _plan(tmp_path, SFT)
    assert plan.kind == "nemo"
    _at(plan, "tp_size", SFT, "tensor_model_parallel_size: 2", 2)
    _at(plan, "sequence_parallel", SFT, "sequence_parallel: True", True)
    assert plan.value("tp_stack") == "megatron"
    # 8 devices x 2 nodes = 16 GPUs; data-parallel 16 / (TP 2 x PP 1 x CP 1) = 8
    _at(plan, "num_gpus", SFT, "devices: 8", 16)
    # micro_batch_size: ${.data.train_ds.micro_batch_size} (relative) -> 2; its line is model.micro_batch_size's
    _at(plan, "per_device_batch", SFT, "  micro_batch_size: ${.data", 2)
    assert "-> 2" in plan.get("per_device_batch").chain[0]
    # 128 / (2 x 8) = 8 micro-batches per step
    _at(plan, "grad_accum", SFT, "  global_batch_size: 128", 8)
    # bf16-mixed with megatron_amp_O2: bf16 parameters + fp32 main parameters in the optimizer
    _at(plan, "precision", SFT, "precision: bf16-mixed", "master-fp32")
    _at(plan, "torch_dtype", SFT, "megatron_amp_O2: True", "bf16")
    # a .nemo checkpoint: the architecture is not in the config
    v = plan.get("model_id")
    assert v.source == "unknown" and v.span.line == _line(SFT, "restore_from_path: /models") and ".nemo" in v.chain[0]
    _at(plan, "method", SFT, 'peft_scheme: "lora"', "lora")
    _at(plan, "lora_r", SFT, "adapter_dim: 16", 16)
    _at(plan, "lora_alpha", SFT, "alpha: ${model.peft", 16)  # ${model.peft.lora_tuning.adapter_dim}
    _at(plan, "lora_dropout", SFT, "adapter_dropout: 0.05", 0.05)
    # attention = qkv + dense, mlp_fc1 = gate/up (the canonical variant: separate adapters, as memlint counts them)
    _at(plan, "lora_targets", SFT, "target_modules:", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"])
    assert not any("variant 'nemo'" in n for n in plan.notes)
    _at(plan, "max_length", SFT, "max_seq_length: 4096", 4096)
    assert plan.value("padding") == "longest" and plan.value("packing") is False
    _at(plan, "gradient_checkpointing", SFT, "activations_checkpoint_granularity: full", True)
    _at(plan, "optimizer", SFT, "name: distributed_fused_adam", "adamw_torch_fused")
    _at(plan, "distributed", SFT, "name: distributed_fused_adam", "zero1")
    assert plan.value("trainer") == "nemo" and plan.value("attn_implementation") == "sdpa"
    assert not [d for d in plan.diagnostics if d.kind != "unknown-key"], plan.diagnostics


def test_pretraining_config_resolves_the_model_by_shape(tmp_path):
    plan = _plan(tmp_path, PRETRAIN, "megatron_llama_config.yaml")
    v = plan.get("model_id")
    # the shape (32 x 4096, ffn 14336, 32 heads, 8 groups, gated, rmsnorm) is Llama-3-8B's and Mistral-7B's;
    # the tokenizer names which
    assert v.value == "meta-llama/Meta-Llama-3-8B" and v.span.line == _line(PRETRAIN, "num_layers: 32")
    assert "tokenizer.type" in v.chain[1]
    _at(plan, "precision", PRETRAIN, "precision: 32", "fp32")
    assert plan.value("torch_dtype") == "fp32"
    _at(plan, "num_gpus", PRETRAIN, "devices: 4", 4)
    _at(plan, "grad_accum", PRETRAIN, "global_batch_size: 16", 4)  # 16 / (1 x 4)
    _at(plan, "max_length", PRETRAIN, "encoder_seq_length: 8192", 8192)
    assert plan.value("padding") == "packing" and plan.value("method") == "full"
    # block: the first 8 of 32 layers checkpointed, counted as every 4th layer
    _at(plan, "gradient_checkpointing", PRETRAIN, "activations_checkpoint_granularity: full", True)
    _at(plan, "recompute_every", PRETRAIN, "activations_checkpoint_num_layers: 8", 4)
    _at(plan, "optimizer", PRETRAIN, "name: fused_adam", "adamw_torch_fused")
    assert plan.value("distributed") == "none" and plan.get("tp_size").source == "literal"
    assert plan.get("cp_size").source == "library-default" and plan.value("cp_size") == 1
    # the ${multiply:...} resolver of exp_manager is never read: no finding for it
    assert not [d for d in plan.diagnostics if d.kind != "unknown-key"], plan.diagnostics


def test_shape_without_a_tokenizer_hint_is_ambiguous_not_guessed(tmp_path):
    text = PRETRAIN.replace("    type: meta-llama/Meta-Llama-3-8B\n", "    type: null\n")
    v = _plan(tmp_path, text).get("model_id")
    assert v.source == "unknown" and "different vocabularies" in v.chain[0] and "meta-llama/Meta-Llama-3-8B" in v.chain[0]
    v = _plan(tmp_path, text.replace("hidden_size: 4096", "hidden_size: 4104")).get("model_id")
    assert v.source == "unknown" and "no catalog model of that shape" in v.chain[0]


def test_launcher_stage_refers_to_its_own_keys_through_its_group(tmp_path):
    plan = _plan(tmp_path, LAUNCHER, "squad.yaml")
    assert plan.kind == "nemo"
    _at(plan, "tp_size", LAUNCHER, "tensor_model_parallel_size: ${peft", 1)  # ${peft.model.pipeline_model_parallel_size}
    _at(plan, "padding", LAUNCHER, "pad_to_max_length:", "max_length")  # ${peft.model.data.train_ds.packed} -> True
    _at(plan, "precision", LAUNCHER, "precision: bf16", "amp-bf16")  # O2 off: autocast over fp32 parameters
    _at(plan, "torch_dtype", LAUNCHER, "megatron_amp_O2: False", "fp32")
    _at(plan, "grad_accum", LAUNCHER, "global_batch_size: 128", 4)  # 128 / (4 x 8)
    _at(plan, "lora_alpha", LAUNCHER, "adapter_dim: 32", 32)  # alpha defaults to adapter_dim
    v = plan.get("lora_targets")  # NeMo's default: the fused qkv projection
    assert v.value == ["q_proj", "k_proj", "v_proj"] and v.source == "library-default"
    assert any("variant 'nemo'" in n for n in plan.notes)
    v = plan.get("model_id")  # ${base_results_dir} is the launcher's, not the file's
    assert v.source == "unknown" and "base_results_dir" in v.chain[0]
    # the launcher's prompt-learning / adapter / IA3 stages name their base language_model_path
    text = LAUNCHER.replace("  restore_from_path: ${base_results_dir}", "  language_model_path: /r")
    v = _plan(tmp_path, text, "squad.yaml").get("model_id")
    assert v.source == "unknown" and v.chain[0].startswith("model.language_model_path '/r/") and \
        v.span.line == _line(text, "language_model_path:")


def test_peft_schemes(tmp_path):
    none = _plan(tmp_path, SFT.replace('peft_scheme: "lora"', "peft_scheme: none"))
    _at(none, "method", SFT, 'peft_scheme: "lora"', "full")
    q = _plan(tmp_path, SFT.replace('peft_scheme: "lora"', "peft_scheme: qlora"))
    assert (q.value("method"), q.value("quant_bits"), q.value("quant_type"), q.value("double_quant")) == ("qlora", 4, "nf4", True)
    pt = _plan(tmp_path, SFT.replace('peft_scheme: "lora"', "peft_scheme: ptuning"))
    v = pt.get("method")
    assert v.source == "unknown" and "p-tuning" in v.chain[0] and v.span.line == _line(SFT, 'peft_scheme: "lora"')
    bad = _plan(tmp_path, SFT.replace("['attention', 'mlp_fc1']", "['attention', 'mlp_fc3']"))
    assert bad.get("lora_targets").source == "unknown"
    assert any(d.kind == "bad-value" and "mlp_fc3" in d.message and d.span.line == _line(SFT, "target_modules:")
               for d in bad.diagnostics)


def test_target_modules_of_a_newer_nemo_than_the_installed_one_is_said(tmp_path):
    with pinned_versions({"nemo_toolkit": "1.23.0"}):
        plan = _plan(tmp_path, SFT)
    assert any("lora_tuning.target_modules is read by NeMo >=2.0.0, not by the installed 1.23.0" in n for n in plan.notes)


def test_precision_and_o2_combinations(tmp_path):
    fp16_o2 = _plan(tmp_path, SFT.replace("bf16-mixed", "16").replace("distributed_fused_adam", "fused_adam"))
    assert fp16_o2.get("precision").source == "unknown"
    assert any("fp16 training is not yet supported with O2" in d.message for d in fp16_o2.diagnostics)
    amp16 = _plan(tmp_path, SFT.replace("bf16-mixed", "16").replace("megatron_amp_O2: True", "megatron_amp_O2: False"))
    assert (amp16.value("precision"), amp16.value("torch_dtype")) == ("amp-fp16", "fp32")
    odd = _plan(tmp_path, SFT.replace("bf16-mixed", "bf17"))
    assert odd.get("precision").source == "unknown" and any("bf17" in d.message for d in odd.diagnostics)


def test_batch_and_parallel_sizes_that_do_not_divide_are_findings(tmp_path):
    plan = _plan(tmp_path, SFT.replace("global_batch_size: 128", "global_batch_size: 100"))
    assert plan.get("grad_accum").source == "unknown"
    assert any(d.kind == "bad-value" and "not a multiple of micro_batch_size 2 × data-parallel size 8" in d.message
               and d.span.line == _line(SFT, "  global_batch_size: 128") for d in plan.diagnostics)
    plan = _plan(tmp_path, SFT.replace("devices: 8", "devices: 3").replace("num_nodes: 2", "num_nodes: 1"))  # 3 GPUs, TP 2
    assert plan.get("num_gpus").source == "unknown" and plan.get("grad_accum").source == "unknown"
    assert any("initialize_model_parallel" in d.message for d in plan.diagnostics)
    plan = _plan(tmp_path, SFT.replace("devices: 8", "devices: -1"))
    assert "num_gpus" not in plan.fields and plan.get("grad_accum").source == "unknown"
    assert any("pass --gpus N" in n for n in plan.notes)
    # sequence_parallel without TP: NeMo turns it off
    plan = _plan(tmp_path, SFT.replace("tensor_model_parallel_size: 2", "tensor_model_parallel_size: 1"))
    assert plan.value("sequence_parallel") is False and "tp_stack" not in plan.fields
    assert plan.value("grad_accum") == 4  # 128 / (2 x 16)


def test_recompute_variants(tmp_path):
    sel = _plan(tmp_path, SFT.replace("granularity: full", "granularity: selective"))
    assert sel.value("gradient_checkpointing") is False and "core attention" in sel.get("gradient_checkpointing").chain[0]
    chunk = _plan(tmp_path, SFT.replace("checkpoint_num_layers: 1", "checkpoint_num_layers: 4"))
    assert chunk.value("gradient_checkpointing") is True and any("an underestimate" in n for n in chunk.notes)
    nometh = _plan(tmp_path, SFT.replace("activations_checkpoint_method: uniform", "activations_checkpoint_method: null"))
    assert nometh.get("gradient_checkpointing").source == "unknown"
    assert any("recompute_method" not in d.message and "'uniform' or 'block'" in d.message for d in nometh.diagnostics)
    off = _plan(tmp_path, SFT.replace("activations_checkpoint_granularity: full", "activations_checkpoint_granularity: null"))
    _at(off, "gradient_checkpointing", SFT, "activations_checkpoint_granularity: full", False)


def test_a_misspelt_key_is_reported(tmp_path):
    plan = _plan(tmp_path, SFT.replace("adapter_dropout: 0.05", "adapter_droput: 0.05").replace("num_nodes: 2", "num_node: 2"))
    msgs = [d.message for d in plan.diagnostics if d.kind == "unknown-key"]
    assert any("adapter_droput" in m and "adapter_dropout" in m for m in msgs)
    assert any("num_node" in m and "num_nodes" in m for m in msgs)


def test_generation_config_trains_nothing(tmp_path):
    text = SFT.replace("exp_manager:", "inference:\n  greedy: True\nexp_manager:")
    plan = _plan(tmp_path, text, "megatron_gpt_generate_config.yaml")
    assert plan.fields == {} and "trains nothing" in plan.notes[0]
    assert read_config(tmp_path / "megatron_gpt_generate_config.yaml", explicit=False) is None


def test_unrelated_yaml_is_not_claimed(tmp_path):
    # a NeMo ASR config and a Lightning CLI config: trainer + model, but no Megatron model keys
    asr = "name: Conformer\nmodel:\n  sample_rate: 16000\n  encoder:\n    n_layers: 17\ntrainer:\n  devices: -1\n  precision: 32\nexp_manager:\n  name: x\n"
    cli = "trainer:\n  max_epochs: 3\nmodel:\n  class_path: my.Model\n  init_args:\n    hidden: 32\ndata:\n  batch_size: 8\n"
    for name, text, kind in (("asr.yaml", asr, None), ("cli.yaml", cli, "lightning-cli")):
        (tmp_path / name).write_text(text)
        assert detect_file(tmp_path / name) == kind  # the LightningCLI config is LightningCLI's, not NeMo's
        got = read_config(tmp_path / name, explicit=False)
        assert (got.kind if got is not None else None) == kind
    # and a NeMo file is found in a walk (the prefilter sees only the text)
    (tmp_path / "sft.yaml").write_text(SFT)
    assert read_config(tmp_path / "sft.yaml", explicit=False).kind == "nemo"


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlint", "check", *args], capture_output=True, text=True)


def test_broken_yaml_is_a_syntax_finding_and_bad_input_is_one_line_exit_2(tmp_path):
    p = tmp_path / "megatron_gpt_finetuning_config.yaml"
    p.write_text(SFT.replace("  micro_batch_size: ${.data", "  micro_batch_size: [${.data"))
    r = _check(str(p))
    # detected as NeMo from its text; the parse error is a MEM001 finding at its position, as for every broken
    # YAML/TOML config memlint reads (tests/test_configs.py, tests/test_torchtitan_toml.py): exit 0, no traceback
    assert "Traceback" not in r.stderr and r.returncode == 0, r.stderr
    assert f"{p}:" in r.stdout and "MEM001 note: YAML:" in r.stdout, r.stdout
    assert int(r.stdout.split(":")[1]) >= _line(SFT, "  micro_batch_size: ${.data"), r.stdout
    assert read_config(p).kind == "nemo"
    # bad input on the command line and a missing file: one line on stderr, exit 2
    good = tmp_path / "ok.yaml"
    good.write_text(SFT)
    for args, needle in (((str(good), "--assume", "grad_accum=x"), "grad_accum must be a whole number"),
                         ((str(tmp_path / "nosuch.yaml"),), "no such file")):
        r = _check(*args)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("memlint: error: ") and needle in lines[0], r.stderr


def test_check_cli_sizes_a_config_with_a_model(tmp_path):
    p = tmp_path / "megatron_gpt_finetuning_config.yaml"
    p.write_text(SFT)
    r = _check(str(p))
    assert r.returncode == 0 and "MEM003 note: model_id is unknown" in r.stdout, r.stdout + r.stderr
    r = _check(str(p), "--assume", "model_id=meta-llama/Llama-2-7b-hf", "--gpu", "H100-80GB")
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr and "MEM003 note: model_id" not in r.stdout, r.stdout + r.stderr


def test_nemo_resolvers_are_evaluated_where_read(tmp_path):
    # NeMo registers multiply/sum (hydra_runner.py), the launcher divide_ceil/divide_floor (launcher_scripts/main.py)
    text = PRETRAIN.replace("ffn_hidden_size: 14336", "ffn_hidden_size: ${multiply:1792, ${.num_query_groups}}") \
                   .replace("global_batch_size: 16", "global_batch_size: ${divide_ceil:${.micro_batch_size}, 0.125}") \
                   .replace("devices: 4", "devices: ${sum:2, 2}")
    plan = _plan(tmp_path, text)
    assert plan.value("model_id") == "meta-llama/Meta-Llama-3-8B"  # 1792 x 8 = 14336
    _at(plan, "num_gpus", text, "devices: ${sum", 4)
    _at(plan, "grad_accum", text, "global_batch_size: ${divide_ceil", 2)  # ceil(1 / 0.125) = 8 over 4 ranks of 1
    assert plan.get("grad_accum").chain[0].startswith("global_batch_size 8 / (micro_batch_size 1 × data-parallel 4)")
    # a resolver NeMo does not register stays unknown, never guessed
    plan = _plan(tmp_path, PRETRAIN.replace("micro_batch_size: 1", "micro_batch_size: ${oc.env:MBS}"))
    v = plan.get("per_device_batch")
    assert v.source == "unknown" and "resolver" in v.chain[0] and v.span.line == _line(PRETRAIN, "micro_batch_size: 1")


def test_other_nemo_model_families_and_moe_are_not_taken_for_a_gpt(tmp_path):
    t5 = PRETRAIN.replace("name: megatron_llama", "name: megatron_t5")
    v = _plan(tmp_path, t5).get("model_id")
    assert v.source == "unknown" and "T5" in v.chain[0] and v.span.line == 1
    encdec = PRETRAIN.replace("  mcore_gpt: True\n", "  encoder:\n    num_layers: 12\n  decoder:\n    num_layers: 12\n")
    v = _plan(tmp_path, encdec).get("model_id")
    assert v.source == "unknown" and "encoder-decoder" in v.chain[0] and v.span.line == _line(encdec, "  encoder:")
    # the same dense shape with 8 experts is Mixtral-8x7B's (with Mixtral's vocabulary), never Llama-3-8B's
    moe = PRETRAIN.replace("  mcore_gpt: True\n", "  mcore_gpt: True\n  num_moe_experts: 8\n")
    v = _plan(tmp_path, moe.replace("type: meta-llama/Meta-Llama-3-8B", "type: mistralai/Mixtral-8x7B-v0.1")).get("model_id")
    assert v.value == "mistralai/Mixtral-8x7B-v0.1" and "8 experts" in v.chain[0]
    assert _plan(tmp_path, moe).get("model_id").value != "meta-llama/Meta-Llama-3-8B"


def test_launcher_conversion_stage_trains_nothing(tmp_path):
    text = "run:\n  name: convert\n  nemo_file_name: ${data_dir}/results/llama2_7b.nemo\n" + PRETRAIN.split("\n", 1)[1]
    plan = _plan(tmp_path, text, "convert_llama2_nemo.yaml")
    assert plan.kind == "nemo" and plan.fields == {} and "conversion" in plan.notes[0]


# ---- a Hydra entry script's command (`torchrun megatron_gpt_finetuning.py key=value ...`) ----------------------

_SCRIPT = '''from nemo.core.config import hydra_runner


@hydra_runner(config_path="conf", config_name="megatron_gpt_finetuning_config")
def main(cfg) -> None:
    pass
'''


def _checkout(tmp_path):
    (tmp_path / "examples" / "conf").mkdir(parents=True)
    (tmp_path / "examples" / "megatron_gpt_finetuning.py").write_text(_SCRIPT)
    (tmp_path / "examples" / "conf" / "megatron_gpt_finetuning_config.yaml").write_text(SFT)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "sft.yaml").write_text(PRETRAIN)


def test_hydra_overrides_on_the_command_line_are_command_line_values(tmp_path, monkeypatch):
    from memlint.extract import extract_file
    from memlint.extract.launch import command_target

    _checkout(tmp_path)
    monkeypatch.chdir(tmp_path)
    words = ["torchrun", "--nproc_per_node=8", "examples/megatron_gpt_finetuning.py", "trainer.num_nodes=1",
             "model.micro_batch_size=1", "++model.peft.lora_tuning.target_modules=[attention_qkv,mlp]",
             "model.restore_from_path=/models/llama2-7b.nemo"]
    target = command_target(words)  # the decorator's config_path/config_name, beside the script
    assert target.path == tmp_path / "examples" / "conf" / "megatron_gpt_finetuning_config.yaml"
    plan = extract_file(target.path, launch=target.launch)
    v = plan.get("per_device_batch")
    assert v.value == 1 and v.source == "command-line"
    # ${.data.train_ds.micro_batch_size} in the file is not the command line's: micro_batch_size=1 replaced it
    assert plan.value("grad_accum") == 128 // (1 * 4)  # 8 devices x 1 node / TP 2 = data-parallel 4
    assert plan.get("lora_targets").value == ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]
    assert plan.get("lora_targets").source == "command-line"
    assert plan.value("tp_size") == 2 and plan.get("tp_size").source == "literal"  # still the file's
    # --config-path (relative to the script's folder) / --config-name pick another file
    target = command_target(["python", "examples/megatron_gpt_finetuning.py", "--config-path=../other",
                             "--config-name", "sft", "trainer.devices=2"])
    assert target.path == tmp_path / "other" / "sft.yaml"
    plan = extract_file(target.path, launch=target.launch)
    assert plan.value("model_id") == "meta-llama/Meta-Llama-3-8B" and plan.get("num_gpus").source == "command-line"
    # a script whose decorator names no NeMo config is read as the script it is
    (tmp_path / "examples" / "conf" / "megatron_gpt_finetuning_config.yaml").write_text("a: 1\n")
    assert command_target(words).path == tmp_path / "examples" / "megatron_gpt_finetuning.py"


def test_check_of_a_hydra_command(tmp_path, monkeypatch):
    _checkout(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = _check("--no-cache", "--assume", "model_id=meta-llama/Llama-2-7b-hf", "--gpu", "T4", "--",
               "torchrun", "--nproc_per_node=8", "examples/megatron_gpt_finetuning.py", "trainer.num_nodes=1",
               "model.micro_batch_size=8")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "examples/conf/megatron_gpt_finetuning_config.yaml" in r.stdout and "MEM101" in r.stdout, r.stdout
    assert "at micro-batch 8 × 4096" in r.stdout and "(8 GPUs, zero1)" in r.stdout, r.stdout  # the command's micro-batch


def test_a_shell_launcher_of_the_hydra_script_is_read_as_its_config(tmp_path, monkeypatch):
    _checkout(tmp_path)
    (tmp_path / "run.sh").write_text("#!/bin/bash\ntorchrun --nproc_per_node=8 examples/megatron_gpt_finetuning.py \\\n"
                                     "    trainer.num_nodes=1 \\\n    model.micro_batch_size=8\n")
    monkeypatch.chdir(tmp_path)
    r = _check("--no-cache", "--assume", "model_id=meta-llama/Llama-2-7b-hf", "--gpu", "T4", "run.sh")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "run.sh:2:1: MEM101" in r.stdout and "at micro-batch 8 × 4096" in r.stdout, r.stdout  # the command's line


def test_the_recompute_lever_is_spelled_as_nemo_reads_it(tmp_path):
    p = tmp_path / "sft.yaml"
    p.write_text(SFT.replace("activations_checkpoint_granularity: full", "activations_checkpoint_granularity: null")
                 .replace("      micro_batch_size: 2", "      micro_batch_size: 1"))
    r = _check("--no-cache", "--assume", "model_id=meta-llama/Llama-2-7b-hf", "--gpu", "L4", str(p))
    line = _line(SFT, "activations_checkpoint_granularity: full")
    # MEM101's cheapest fix on a 24 GB card is recompute, at the line of the key NeMo reads, in NeMo's words
    assert (f"fits with activations_checkpoint_granularity: full (with activations_checkpoint_method: uniform and "
            f"activations_checkpoint_num_layers: 1) at {p}:{line}") in r.stdout, r.stdout
    assert "activations_checkpoint_granularity: true" not in r.stdout and f"{p}:{line}:3: MEM203" in r.stdout, r.stdout


def _megatron_calculator():
    """megatron-core's num_microbatches_calculator.py (pure Python), loaded by path: megatron.core's __init__ needs
    torch and more; skipped where megatron-core is not installed (`pip install --no-deps megatron-core`)."""
    import importlib.util

    import pytest

    spec = importlib.util.find_spec("megatron")
    roots = list(spec.submodule_search_locations or ()) if spec else []
    files = [f for r in roots if (f := __import__("pathlib").Path(r) / "core" / "num_microbatches_calculator.py").is_file()]
    if not files:
        pytest.skip("megatron-core is not installed")
    mod_spec = importlib.util.spec_from_file_location("_megatron_nmc", files[0])
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod


def test_accumulation_is_megatrons_num_microbatches(tmp_path):
    # ground truth: Megatron's own calculator over the data-parallel size parallel_state.initialize_model_parallel
    # derives (world // (TP x PP x CP), a non-dividing world refused)
    nmc = _megatron_calculator()
    import itertools

    for dev, tp, pp, cp, micro, glob in itertools.product((4, 8), (1, 2), (1, 2), (1, 2), (1, 3), (48, 100)):
        text = (SFT.replace("devices: 8", f"devices: {dev}").replace("tensor_model_parallel_size: 2", f"tensor_model_parallel_size: {tp}")
                .replace("pipeline_model_parallel_size: 1", f"pipeline_model_parallel_size: {pp}\n  context_parallel_size: {cp}")
                .replace("  global_batch_size: 128", f"  global_batch_size: {glob}")
                .replace("      micro_batch_size: 2", f"      micro_batch_size: {micro}"))
        world = dev * 2
        try:
            ref = nmc._build_num_microbatches_calculator(0, None, glob, micro, world // (tp * pp * cp), False).get() \
                if world % (tp * pp * cp) == 0 else None
        except AssertionError:
            ref = None
        assert _plan(tmp_path, text).get("grad_accum").value == ref, (dev, tp, pp, cp, micro, glob)
