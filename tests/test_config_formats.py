"""LitGPT, llm-foundry (Composer), oumi, LLM-Finetuning-Toolkit YAML and xtuner Python configs:
told apart by their keys, read the way each framework reads them (defaults, derived values,
substitutions from data/frameworks.json), and bad or misspelt input reported, never guessed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_file, extract_paths
from memlint.extract.__main__ import GOLDEN_VERSIONS
from memlint.extract.configs import detect_file, read_config
from memlint.extract.configs.document import load_text
from memlint.extract.configs.interpolate import resolve
from memlint.library.versions import pinned_versions
from memlint.plan import TrainingPlan

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIGS = FIXTURES / "configs"


def cfg(name: str) -> TrainingPlan:
    with pinned_versions(GOLDEN_VERSIONS):
        return read_config(CONFIGS / name, shown=f"configs/{name}")


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return p


def plan_of(tmp_path: Path, name: str, text: str) -> TrainingPlan:
    with pinned_versions(GOLDEN_VERSIONS):
        return extract_file(write(tmp_path, name, text))


def diags(plan: TrainingPlan, kind: str) -> list[str]:
    return [d.message for d in plan.diagnostics if d.kind == kind]


# ---- telling the formats apart --------------------------------------------------------------


@pytest.mark.parametrize("name, kind", [
    ("litgpt_llama3_qlora.yaml", "litgpt"),
    ("litgpt_mistral_full.yaml", "litgpt"),
    ("foundry_llama3_lora.yaml", "llm-foundry"),
    ("oumi_qwen_qlora_train.yaml", "oumi"),
    ("llmtune_mistral_qlora.yml", "llmtune"),
    ("github_workflow.yml", None),
    ("tokenizer_config.json", None),
    ("dataset_card.yaml", None),
    ("axolotl_llama3_qlora.yml", "axolotl"),  # the older formats keep their kinds
    ("trl_zephyr_sft_qlora.yaml", "trl-recipe"),
    ("torchtune_llama3_2_1B_full_distributed.yaml", "torchtune"),
])
def test_the_new_formats_are_told_apart_by_their_keys(name, kind):
    assert detect_file(CONFIGS / name) == kind
    if kind is not None:
        assert cfg(name).kind == kind


@pytest.mark.parametrize("name, text", [
    ("mkdocs.yml", "site_name: docs\nnav:\n  - index.md\ntheme:\n  name: material\n"),
    ("docker-compose.yml", "services:\n  train:\n    image: pytorch\n    command: python train.py\n"),
    # an oumi inference config and an llm-foundry eval config: same projects, nothing trains
    ("infer.yaml", "model:\n  model_name: meta-llama/Llama-3.1-8B-Instruct\ngeneration:\n  max_new_tokens: 128\nengine: VLLM\n"),
    ("eval.yaml", "models:\n- model_name: mpt\n  model:\n    name: hf_causal_lm\nicl_tasks: tasks.yaml\nmax_seq_len: 1024\n"),
    ("paths.yaml", "checkpoint_dir: /data/ckpt\nlogging_dir: /data/logs\n"),  # a path alone is no litgpt config
    ("model_card.yaml", "model:\n  name: x\ntraining:\n  data: y\n"),  # model and training, but no model.model_name
])
def test_ordinary_yaml_is_no_framework_config(tmp_path, name, text):
    assert detect_file(write(tmp_path, name, text)) is None


def test_a_walk_reads_the_new_configs_and_skips_the_ordinary_yaml():
    with pinned_versions(GOLDEN_VERSIONS):
        plans = {Path(p.path).name: p.kind for p in extract_paths([str(CONFIGS)])}
    assert plans["litgpt_llama3_qlora.yaml"] == "litgpt" and plans["oumi_qwen_qlora_train.yaml"] == "oumi"
    assert plans["foundry_llama3_lora.yaml"] == "llm-foundry" and plans["llmtune_mistral_qlora.yml"] == "llmtune"
    assert "github_workflow.yml" not in plans and "tokenizer_config.json" not in plans


# ---- LitGPT ---------------------------------------------------------------------------------


def test_litgpt_derives_accumulation_from_the_global_batch_and_the_devices():
    plan = cfg("litgpt_mistral_full.yaml")  # global 32 over 4 devices = 8 per rank, micro 2
    ga = plan.get("grad_accum")
    assert (ga.value, ga.source, ga.line) == (4, "literal", 9)
    assert "32 // (devices × num_nodes 4) = 8 per rank" in ga.chain[0]
    # more than one device: FSDP with activation checkpointing, read from litgpt's full.py
    assert plan.value("distributed") == "fsdp" and plan.value("num_gpus") == 4
    assert plan.value("gradient_checkpointing") is True
    assert plan.value("method") == "full" and "full.yaml" in plan.get("method").chain[0]
    assert (plan.value("torch_dtype"), plan.value("precision")) == ("fp32", "amp-bf16")  # bf16-mixed keeps fp32 weights


def test_litgpt_qlora_swaps_the_optimizer_and_reads_quantize():
    plan = cfg("litgpt_llama3_qlora.yaml")
    assert (plan.value("method"), plan.value("quant_bits"), plan.value("quant_type"), plan.value("double_quant")) == ("qlora", 4, "nf4", True)
    opt = plan.get("optimizer")  # the YAML says torch.optim.AdamW; under bnb litgpt uses PagedAdamW
    assert opt.value == "paged_adamw_32bit" and "instantiate_bnb_optimizer" in opt.chain[-1]
    assert (plan.value("precision"), plan.value("torch_dtype")) == ("pure-bf16", "bf16")
    assert {"q_proj", "k_proj", "v_proj", "o_proj"} <= set(plan.value("lora_targets"))
    assert "gate_proj" not in plan.value("lora_targets")  # lora_mlp: false
    assert plan.value("padding") == "longest" and plan.value("attn_implementation") == "sdpa"


def test_litgpt_checkpoint_dir_is_kept_as_written_and_estimated_as_its_hub_checkpoint():
    plan = cfg("litgpt_llama3_qlora.yaml")
    mid = plan.get("model_id")
    assert mid.value == "checkpoints/meta-llama/Meta-Llama-3-8B-Instruct"
    assert mid.candidates[-1] == "meta-llama/Meta-Llama-3-8B-Instruct"
    with pinned_versions(GOLDEN_VERSIONS):
        planned = setup_from_plan(plan)
    assert planned.setup is not None and planned.setup.model.params > 7e9


def test_litgpt_defaults_come_from_its_setup_signature(tmp_path):
    plan = plan_of(tmp_path, "lora.yaml", """
        checkpoint_dir: checkpoints/meta-llama/Llama-3.2-1B
        precision: bf16-true
        lora_r: 4
        train:
          epochs: 1
    """)
    assert plan.get("per_device_batch").source == "library-default" and plan.value("per_device_batch") == 1
    assert plan.value("grad_accum") == 16  # TrainArgs(global_batch_size=16, micro_batch_size=1) in lora.py, one device
    assert plan.value("lora_alpha") == 16 and plan.get("lora_alpha").source == "library-default"
    assert plan.value("optimizer") == "adamw_torch" and plan.value("gradient_checkpointing") is False
    assert plan.get("max_length").source == "unknown"  # max_seq_length None: the longest sample of the data
    assert any("--assume max_length" in n for n in plan.notes)


def test_litgpt_refuses_quantize_with_mixed_precision_and_on_several_devices(tmp_path):
    plan = plan_of(tmp_path, "qlora.yaml", """
        checkpoint_dir: checkpoints/x/y
        quantize: bnb.nf4
        devices: 2
        lora_r: 8
    """)
    bad = diags(plan, "bad-value")
    assert any("Quantization and mixed precision is not supported" in m for m in bad)  # precision unset: bf16-mixed
    assert any("not supported for multi-GPU" in m for m in bad)


def test_litgpt_refuses_unknown_keys_at_the_top_and_in_train(tmp_path):
    plan = plan_of(tmp_path, "lora.yaml", """
        checkpoint_dir: checkpoints/x/y
        lora_rank: 16
        lora_alpha: 32
        gradient_checkpointing: true
        train:
          micro_batch_sise: 2
          learning_rate: 0.001
    """)
    unknown = diags(plan, "unknown-key")
    assert "unknown litgpt key 'lora_rank' (did you mean 'lora_r'?)" in unknown
    assert any(m.startswith("unknown litgpt key 'gradient_checkpointing'") for m in unknown)
    assert "unknown litgpt train key 'micro_batch_sise' (did you mean 'micro_batch_size'?)" in unknown
    assert "unknown litgpt train key 'learning_rate' (did you mean 'optimizer.init_args.lr'?)" in unknown
    clean = [d for d in cfg("litgpt_llama3_qlora.yaml").diagnostics if d.kind == "unknown-key"]
    assert clean == []


def test_litgpt_auto_devices_leave_the_gpu_count_unknown_without_a_diagnostic(tmp_path):
    plan = plan_of(tmp_path, "full.yaml", "checkpoint_dir: checkpoints/x/y\ndevices: auto\ntrain:\n  micro_batch_size: 2\n")
    assert plan.get("num_gpus").source == "unknown" and plan.get("grad_accum").source == "unknown"
    assert plan.get("distributed").source == "unknown"
    assert diags(plan, "bad-value") == []


def test_litgpt_without_lora_keys_or_a_telling_name_leaves_the_method_unknown(tmp_path):
    text = "checkpoint_dir: checkpoints/x/y\nprecision: bf16-true\nnum_nodes: 1\n"
    assert plan_of(tmp_path, "config.yaml", text).get("method").source == "unknown"
    assert plan_of(tmp_path, "adapter.yaml", text).get("method").source == "unknown"


def test_litgpt_pretrain_config_reads_the_model_name_and_its_own_defaults(tmp_path):
    plan = plan_of(tmp_path, "tinyllama.yaml", """
        model_name: tiny-llama-1.1b
        tokenizer_dir: checkpoints/meta-llama/Llama-2-7b-hf
        devices: 8
        train:
          global_batch_size: 512
          max_seq_length: 2048
    """)
    assert plan.kind == "litgpt" and plan.value("model_id") == "tiny-llama-1.1b" and plan.value("method") == "full"
    assert plan.value("per_device_batch") == 4 and plan.value("grad_accum") == 16  # 512 // 8 // 4
    assert plan.value("distributed") == "fsdp" and plan.value("gradient_checkpointing") is False
    assert plan.value("padding") == "packing"


# ---- llm-foundry ----------------------------------------------------------------------------


def test_foundry_resolves_variables_and_points_at_the_line_that_uses_them():
    plan = cfg("foundry_llama3_lora.yaml")
    ml = plan.get("max_length")
    assert (ml.value, ml.source, ml.line) == (4096, "literal", 38)  # train_loader.dataset.max_seq_len: ${variables.max_seq_len}
    assert "${variables.max_seq_len} -> 4096" in ml.chain[0]
    assert plan.value("model_id") == "meta-llama/Meta-Llama-3-8B"
    assert (plan.value("method"), plan.value("lora_r"), plan.value("lora_alpha")) == ("lora", 32, 64)
    assert (plan.value("distributed"), plan.value("gradient_checkpointing")) == ("fsdp_shard_grad_op", True)
    assert (plan.value("padding"), plan.value("optimizer"), plan.value("precision")) == ("packing", "decoupled_lionw", "amp-bf16")
    assert plan.value("attn_implementation") == "flash_attention_2" and plan.value("torch_dtype") == "fp32"
    assert plan.get("grad_accum").source == "unknown"  # global 64 over an unknown number of GPUs
    assert [d for d in plan.diagnostics if d.kind == "unknown-key"] == []


def test_interpolation_is_static_and_names_what_it_cannot_resolve():
    doc = load_text("a: 1\nb: ${a}\nc:\n  x: 2\n  y: ${.x}\n  z: ${..a}\nd: run_${a}_${c.x}\ne: ${oc.env:HOME}\nf: ${f}\ng: ${nope}\n", "x.yaml")
    res = resolve(doc)
    assert doc.data == {"a": 1, "b": 1, "c": {"x": 2, "y": 2, "z": 1}, "d": "run_1_2", "e": "${oc.env:HOME}", "f": "${f}", "g": "${nope}"}
    assert "resolver" in res.unresolved[("e",)] and "itself" in res.unresolved[("f",)] and "names no key" in res.unresolved[("g",)]
    assert doc.span("c", "y").line == 5  # positions stay those of the file


def test_foundry_reports_a_reference_to_nothing_and_a_top_level_key_it_refuses(tmp_path):
    plan = plan_of(tmp_path, "ft.yaml", """
        variables:
          global_seed: 17
        global_seed: 17
        max_seq_len: 512
        seed: ${global_sed}
        model:
          name: hf_causal_lm
          pretrained_model_name_or_path: gpt2
        train_loader:
          name: finetuning
          dataset:
            max_seq_len: ${max_seq_len}
            decoder_only_format: true
        optimizer:
          name: decoupled_adamw
        max_duration: 1ep
        global_train_batch_size: 8
        device_train_microbatch_size: 8
        precision: fp32
        icl_max_seq_len: 1024
    """)
    assert any("${global_sed} names no key" in m for m in diags(plan, "bad-value"))
    unknown = diags(plan, "unknown-key")
    assert "unknown llm-foundry key 'global_seed' (did you mean 'variables.global_seed'?)" in unknown
    assert "unknown llm-foundry key 'icl_max_seq_len': llm-foundry refuses to start with it" in unknown
    # micro-batch 8 covers the global batch 8: one step per batch on any number of GPUs
    assert plan.value("grad_accum") == 1 and plan.value("max_length") == 512
    assert (plan.value("padding"), plan.value("distributed"), plan.value("gradient_checkpointing")) == ("max_length", "none", False)
    assert plan.value("attn_implementation") == "eager"  # hf_base.py: None -> eager, not transformers' sdpa


def test_foundry_auto_microbatch_is_unknown_and_text_loaders_pack(tmp_path):
    plan = plan_of(tmp_path, "pretrain.yaml", """
        max_seq_len: 2048
        model:
          name: mpt_causal_lm
          d_model: 768
          n_layers: 12
        train_loader:
          name: text
          dataset:
            max_seq_len: ${max_seq_len}
        max_duration: 100ba
        global_train_batch_size: 256
        device_train_microbatch_size: auto
        optimizer:
          name: decoupled_adamw
    """)
    assert plan.get("per_device_batch").source == "unknown" and plan.get("model_id").source == "unknown"
    assert plan.value("padding") == "packing" and plan.value("attn_implementation") == "flash_attention_2"  # MPT's default attn_impl
    assert plan.value("precision") == "amp-bf16" and plan.get("precision").source == "library-default"


def test_foundry_optimizers_are_known_to_the_estimator():
    plan = cfg("foundry_llama3_lora.yaml")
    with pinned_versions(GOLDEN_VERSIONS):
        planned = setup_from_plan(plan, {"gpus": 8})
    assert planned.setup is not None and planned.setup.optim == "decoupled_lionw"
    assert planned.setup.optimizer["states"] == 1
    assert not any("not in memlint's table" in n for n in planned.notes)


# ---- oumi -----------------------------------------------------------------------------------


def test_oumi_reads_its_sections_with_its_dataclass_defaults():
    plan = cfg("oumi_qwen_qlora_train.yaml")
    assert (plan.value("method"), plan.value("quant_bits"), plan.value("double_quant"), plan.value("compute_dtype")) == ("qlora", 4, True, "bf16")
    assert plan.get("quant_bits").line == 29  # peft.q_lora, q_lora_bits left at 4
    assert (plan.value("max_length"), plan.get("max_length").line) == (4096, 4)  # model.model_max_length
    assert plan.value("precision") == "pure-bf16"  # mixed_precision_dtype NONE over bf16 weights
    assert plan.value("eval_batch") == 8 and plan.get("eval_batch").source == "library-default"
    assert plan.value("trainer") == "oumi" and plan.value("distributed") == "none"
    assert [d for d in plan.diagnostics if d.kind == "unknown-key"] == []


def test_oumi_refuses_unknown_keys_at_every_level(tmp_path):
    plan = plan_of(tmp_path, "train.yaml", """
        model:
          model_name: gpt2
          torch_dtype: bfloat16
        training:
          trainer_type: TRL_SFT
          per_device_train_batch_sise: 4
          gradient_checkpointing: true
        peft:
          lora_rank: 8
        lora:
          r: 8
    """)
    unknown = diags(plan, "unknown-key")
    assert "unknown oumi model key 'torch_dtype' (did you mean 'torch_dtype_str'?)" in unknown
    assert "unknown oumi training key 'per_device_train_batch_sise' (did you mean 'per_device_train_batch_size'?)" in unknown
    assert "unknown oumi training key 'gradient_checkpointing' (did you mean 'enable_gradient_checkpointing'?)" in unknown
    assert "unknown oumi peft key 'lora_rank' (did you mean 'lora_r'?)" in unknown
    assert "unknown oumi key 'lora' (did you mean 'peft'?)" in unknown
    assert plan.value("per_device_batch") == 8  # the misspelt key is ignored: TrainingParams' default


def test_oumi_trainers_defaults_and_distributed(tmp_path):
    plan = plan_of(tmp_path, "dpo.yaml", """
        model:
          model_name: meta-llama/Llama-3.2-1B-Instruct
        training:
          trainer_type: TRL_DPO
          use_peft: true
          mixed_precision_dtype: BF16
        peft:
          q_lora: true
        deepspeed:
          enable_deepspeed: true
          zero_stage: "3"
          offload_param:
            device: cpu
    """)
    assert plan.value("trainer") == "DPOTrainer"
    assert (plan.value("method"), plan.value("quant_type"), plan.value("compute_dtype")) == ("qlora", "fp4", "fp32")  # PeftParams defaults
    assert (plan.value("distributed"), plan.value("offload")) == ("zero3", "params")
    assert any("Model must be loaded in fp32" in m for m in diags(plan, "bad-value"))  # torch_dtype_str auto, not float32
    assert plan.get("max_length").source == "unknown"  # no model_max_length: the tokenizer's own


def test_oumi_packing_uses_the_model_max_length_or_1024(tmp_path):
    plan = plan_of(tmp_path, "pt.yaml", """
        model:
          model_name: gpt2
        data:
          train:
            pack: true
            datasets:
              - dataset_name: HuggingFaceFW/fineweb-edu
        training:
          trainer_type: TRL_SFT
    """)
    assert (plan.value("packing"), plan.value("padding"), plan.value("max_length")) == (True, "packing", 1024)


# ---- LLM-Finetuning-Toolkit -----------------------------------------------------------------


def test_llmtune_always_packs_checkpoints_and_trains_lora():
    plan = cfg("llmtune_mistral_qlora.yml")
    assert (plan.value("method"), plan.value("quant_bits"), plan.value("double_quant")) == ("qlora", 4, True)
    assert (plan.value("packing"), plan.value("padding"), plan.value("gradient_checkpointing")) == (True, "packing", True)
    assert (plan.value("max_length"), plan.value("optimizer"), plan.value("trainer")) == (2048, "paged_adamw_8bit", "SFTTrainer")


def test_llmtune_drops_keys_its_pydantic_models_do_not_have(tmp_path):
    plan = plan_of(tmp_path, "config.yml", """
        ablation:
          use_ablate: false
        model:
          hf_model_ckpt: facebook/opt-125m
          bitsandbytes:
            load_in_4bit: true
        lora:
          r: 8
        training:
          training_args:
            per_device_train_batch_size: 2
            max_steps: 100
            gradient_checkpointing: false
          sft_args:
            max_seq_lenght: 512
        qa: {}
        inference: {}
        data: {}
    """)
    unknown = diags(plan, "unknown-key")
    assert any(m.startswith("unknown llmtune training.training_args key 'max_steps': llmtune ignores it") for m in unknown)
    assert "unknown llmtune training.sft_args key 'max_seq_lenght' (did you mean 'max_seq_length'?)" in unknown
    assert plan.value("max_length") == 1024  # the misspelt key is dropped: TRL 0.8's min(model_max_length, 1024)
    assert plan.value("gradient_checkpointing") is True  # lora.py turns it on whatever training_args says


def test_llmtune_ablation_lists_are_candidates_and_need_use_ablate(tmp_path):
    text = """
        ablation:
          use_ablate: {}
        model:
          hf_model_ckpt: mistralai/Mistral-7B-v0.1
          bitsandbytes:
            load_in_4bit: true
        lora:
          r: [16, 64, 32]
        training:
          training_args:
            per_device_train_batch_size: 2
          sft_args:
            max_seq_length: 1024
    """
    plan = plan_of(tmp_path, "a.yml", text.format("true"))
    r = plan.get("lora_r")
    assert r.candidates == (16, 64, 32) and diags(plan, "bad-value") == []
    with pinned_versions(GOLDEN_VERSIONS):
        assert setup_from_plan(plan).setup.lora_r == 64  # the worst case
    plan = plan_of(tmp_path, "b.yml", text.format("false"))
    assert any("lora.r is a list" in m for m in diags(plan, "bad-value"))
    assert plan.get("lora_r").source == "unknown"


def test_llmtune_needs_a_bitsandbytes_section(tmp_path):
    plan = plan_of(tmp_path, "c.yml", "ablation: {}\nmodel:\n  hf_model_ckpt: gpt2\n  quantize: false\nlora: {}\ntraining:\n  training_args: {}\n  sft_args: {}\n")
    assert any("no model.bitsandbytes section" in m for m in diags(plan, "bad-value"))
    assert plan.value("method") == "lora" and plan.value("quant_bits") is None


# ---- xtuner ---------------------------------------------------------------------------------


def test_xtuner_config_reads_its_dict_trees():
    with pinned_versions(GOLDEN_VERSIONS):
        plan = extract_file(FIXTURES / "scripts" / "xtuner_qwen_qlora_config.py")
    assert plan.kind == "xtuner"
    mid = plan.get("model_id")
    assert (mid.value, mid.source, mid.line) == ("Qwen/Qwen2.5-7B-Instruct", "constant", 19)  # the module-level name
    assert (plan.value("method"), plan.value("lora_r"), plan.value("quant_bits"), plan.value("compute_dtype")) == ("qlora", 32, 4, "bf16")
    assert plan.value("lora_targets") == "all-linear"  # target_modules None: find_all_linear_names
    assert (plan.value("per_device_batch"), plan.value("grad_accum"), plan.value("max_length")) == (2, 8, 4096)
    assert (plan.value("padding"), plan.value("precision"), plan.value("optimizer")) == ("longest", "amp-bf16", "adamw_torch")
    assert plan.value("gradient_checkpointing") is True and plan.get("gradient_checkpointing").source == "library-default"


XT_HEAD = """
from mmengine.optim import {wrapper}
from torch.optim import AdamW
from transformers import AutoModelForCausalLM
from xtuner.model import {model}
"""


def test_xtuner_dpo_without_lora_is_a_full_dpo_run_and_optim_wrapper_sets_precision(tmp_path):
    plan = plan_of(tmp_path, "dpo_cfg.py", XT_HEAD.format(wrapper="OptimWrapper", model="DPO") + """
model = dict(type=DPO, beta=0.1, use_activation_checkpointing=False,
             llm=dict(type=AutoModelForCausalLM.from_pretrained, pretrained_model_name_or_path="gpt2"))
train_dataloader = dict(batch_size=4, dataset=dict(max_length=1024, pack_to_max_length=False))
optim_wrapper = dict(type=OptimWrapper, optimizer=dict(type=AdamW, lr=1e-5), accumulative_counts=2)
""")
    assert (plan.value("trainer"), plan.value("method"), plan.value("precision")) == ("DPOTrainer", "full", "fp32")
    assert plan.value("gradient_checkpointing") is False and plan.get("gradient_checkpointing").source == "constant"  # written in the model dict
    assert (plan.value("per_device_batch"), plan.value("grad_accum"), plan.value("max_length")) == (4, 2, 1024)


def test_xtuner_llava_with_a_frozen_llm_and_no_lora_leaves_the_method_unknown(tmp_path):
    plan = plan_of(tmp_path, "llava_cfg.py", XT_HEAD.format(wrapper="AmpOptimWrapper", model="LLaVAModel") + """
model = dict(type=LLaVAModel, freeze_llm=True, freeze_visual_encoder=True,
             llm=dict(type=AutoModelForCausalLM.from_pretrained, pretrained_model_name_or_path="lmsys/vicuna-7b-v1.5"))
train_dataloader = dict(batch_size=32, dataset=dict(max_length=1472))
optim_wrapper = dict(type=AmpOptimWrapper, optimizer=dict(type=AdamW, lr=1e-3))
""")
    assert plan.get("method").source == "unknown" and plan.value("precision") == "amp-fp16"  # AmpOptimWrapper(dtype=None): fp16
    assert any("vision encoder" in n for n in plan.notes)


def test_a_module_with_a_model_dict_that_is_not_xtuner_is_read_as_a_script(tmp_path):
    plan = plan_of(tmp_path, "mmdet_cfg.py", "import torch\nmodel = dict(type='FasterRCNN', backbone=dict(type='ResNet'))\n")
    assert plan.kind == "python" and plan.get("trainer").source == "unknown"


def test_reading_an_xtuner_config_imports_nothing_from_it(tmp_path):
    import sys

    p = write(tmp_path, "cfg.py", XT_HEAD.format(wrapper="AmpOptimWrapper", model="SupervisedFinetune")
              + "import memlint_probe_module\nmodel = dict(type=SupervisedFinetune, llm=dict(type=AutoModelForCausalLM.from_pretrained, "
              "pretrained_model_name_or_path='gpt2'))\n")
    plan = extract_file(p)
    assert plan.kind == "xtuner" and "memlint_probe_module" not in sys.modules and "xtuner" not in sys.modules


def test_xtuner_values_it_cannot_know_stay_unknown_instead_of_taking_defaults(tmp_path):
    plan = plan_of(tmp_path, "env_cfg.py", XT_HEAD.format(wrapper="AmpOptimWrapper", model="SupervisedFinetune") + """
import os
import torch
model = dict(type=SupervisedFinetune, llm=dict(type=AutoModelForCausalLM.from_pretrained, pretrained_model_name_or_path="gpt2"),
             lora=dict(r=int(os.environ["LORA_R"]), lora_alpha=16))
train_dataloader = dict(batch_size=int(os.environ["BATCH"]), dataset=dict(max_length=512))
optim_wrapper = dict(type=AmpOptimWrapper, optimizer=dict(type=AdamW), dtype=torch.bfloat16)
""")
    assert plan.get("lora_r").source == "unknown" and plan.get("per_device_batch").source == "unknown"
    assert plan.value("lora_alpha") == 16 and plan.value("grad_accum") == 1  # accumulative_counts absent: mmengine's 1
    assert plan.value("precision") == "amp-bf16"  # dtype=torch.bfloat16, not only the string spelling


@pytest.mark.parametrize("words, env, want", [
    (["--deepspeed", "deepspeed_zero3"], "", ("zero3", "none", 1)),
    (["--deepspeed", "deepspeed_zero2_offload"], "NPROC_PER_NODE=4 ", ("zero2", "optimizer", 4)),
    ([], "", ("none", "none", 1)),
])
def test_xtuner_train_reads_its_deepspeed_name_and_processes(tmp_path, monkeypatch, words, env, want):
    import shutil

    from checkouts import plan_of_command

    shutil.copy(FIXTURES / "scripts" / "xtuner_qwen_qlora_config.py", tmp_path / "cfg.py")
    (tmp_path / "run.sh").write_text(f"{env}xtuner train cfg.py {' '.join(words)} --work-dir out\n")
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert (plan.value("distributed"), plan.value("offload"), plan.value("num_gpus")) == want
