"""Framework configs (axolotl, LLaMA-Factory, TRL recipes, torchtune, DeepSpeed, accelerate) read
into plans: formats told apart, values pointing at their YAML lines, defaults as data, bad input
as diagnostics, and launcher configs merged onto a script's plan."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.errors import MemlintError
from memlint.extract import extract_file, extract_paths
from memlint.extract.__main__ import GOLDEN_VERSIONS
from memlint.extract.configs import detect_file, merge_launch_config, read_config
from memlint.extract.configs.document import load_text
from memlint.extract.configs.frameworks import table
from memlint.library.versions import in_range, pinned_versions
from memlint.plan import Span, TrainingPlan, Value

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
SCRIPTS = CONFIGS.parent / "scripts"


def cfg(name: str) -> TrainingPlan:
    with pinned_versions(GOLDEN_VERSIONS):
        return read_config(CONFIGS / name, shown=f"configs/{name}")


@pytest.mark.parametrize("name, kind", [
    ("axolotl_llama3_qlora.yml", "axolotl"),
    ("axolotl_broken.yml", "axolotl"),  # told by its top-level keys although it does not parse
    ("llamafactory_llama3_lora_sft.yaml", "llama-factory"),
    ("trl_zephyr_sft_qlora.yaml", "trl-recipe"),
    ("torchtune_llama3_1_8B_qlora_single_device.yaml", "torchtune"),
    ("ds_zero3_offload.json", "deepspeed"),
    ("accelerate_fsdp2.yaml", "accelerate"),
    ("dataset_card.yaml", None),
])
def test_formats_are_told_apart_by_their_keys(name, kind):
    assert detect_file(CONFIGS / name) == kind
    if kind is not None:
        assert cfg(name).kind == kind


def test_values_point_at_the_yaml_line_and_column_of_their_key():
    plan = cfg("axolotl_llama3_qlora.yml")
    assert plan.get("max_length") == Value(4096, "literal", Span("configs/axolotl_llama3_qlora.yml", 19, 1), ("sequence_len: 4096",))
    assert plan.get("per_device_batch").span.line == 37
    tt = cfg("torchtune_llama3_1_8B_qlora_single_device.yaml")
    assert tt.get("lora_r").span == Span("configs/torchtune_llama3_1_8B_qlora_single_device.yaml", 12, 3)  # nested key: its own column


def test_a_misspelt_key_is_an_unknown_key_diagnostic_at_the_key_and_the_default_applies():
    plan = cfg("axolotl_misspelt_key.yml")
    diags = [(d.kind, d.message, d.span.line, d.span.col) for d in plan.diagnostics]
    assert ("unknown-key", "unknown axolotl key 'max_seq_len' (did you mean 'sequence_len'?)", 11, 1) in diags
    assert ("unknown-key", "unknown axolotl key 'gradient_acumulation_steps' (did you mean 'gradient_accumulation_steps'?)", 18, 1) in diags
    # ... and the run silently trains at axolotl's default sequence length
    v = plan.get("max_length")
    assert (v.value, v.source) == (512, "library-default")
    assert "axolotl" in v.chain[0] and "sequence_len" in v.chain[0]


def test_real_configs_raise_no_unknown_key_diagnostics():
    clean = [p.name for p in CONFIGS.iterdir() if detect_file(p) and "misspelt" not in p.name and "accelerate_deepspeed" not in p.name]
    assert len(clean) >= 12
    for name in clean:
        assert [d for d in cfg(name).diagnostics if d.kind == "unknown-key"] == [], name


def test_accelerate_refuses_every_unknown_key_so_memlint_reports_every_one():
    plan = cfg("accelerate_deepspeed_zero3.yaml")
    [d] = [d for d in plan.diagnostics if d.kind == "unknown-key"]
    assert d.message == "unknown accelerate key 'num_gpu': accelerate refuses to start with it"
    assert (d.span.line, d.span.col) == (17, 1)


def test_a_python_tag_is_a_bad_value_and_is_never_called(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a) or 0)
    plan = cfg("axolotl_python_tag.yml")
    assert calls == []
    [d] = plan.diagnostics
    assert d.kind == "bad-value" and "!!python/object/apply:os.system" in d.message
    assert (d.span.line, d.span.col) == (7, 19)
    assert plan.get("per_device_batch").source == "unknown"  # not a default: the file did say something
    assert plan.value("max_length") == 2048  # the rest of the file is still read


def test_broken_yaml_is_a_syntax_error_diagnostic_not_a_traceback():
    plan = cfg("axolotl_broken.yml")
    assert plan.fields == {} and plan.kind == "axolotl"
    [d] = plan.diagnostics
    assert d.kind == "syntax-error" and d.message.startswith("YAML:")
    assert (d.span.line, d.span.col) == (7, 2)


def test_broken_json_is_a_syntax_error_at_its_position(tmp_path):
    p = tmp_path / "ds_config.json"
    p.write_text('{\n  "zero_optimization": {"stage": 3,}\n}\n')
    plan = read_config(p)
    [d] = plan.diagnostics
    assert plan.kind == "deepspeed" and d.kind == "syntax-error"
    assert d.span.line == 2


def test_json_values_keep_json_types_and_tabs_still_give_positions():
    doc = load_text('{\n\t"optimizer": {"params": {"lr": 1e-5}},\n\t"zero_optimization": {"stage": 2}\n}', "x.json", is_json=True)
    assert doc.get("optimizer", "params", "lr") == 1e-5  # YAML 1.1 alone would read a string
    assert doc.span("zero_optimization", "stage").line == 3


def test_an_alias_bomb_is_unreadable_not_a_hang():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    doc = load_text("\n".join(lines) + "\n", "bomb.yaml")
    assert [d.kind for d in doc.diagnostics] == ["unreadable"]


def test_a_yaml_that_is_no_framework_config_is_a_note_when_named_and_skipped_in_a_walk(capsys):
    plan = extract_file(CONFIGS / "dataset_card.yaml")
    assert not any(v.known for v in plan.fields.values())
    assert any("not a config memlint reads" in n for n in plan.notes)
    from memlint.cli import main

    assert main(["plan", str(CONFIGS / "dataset_card.yaml")]) == 0  # memlint's limit, not the user's error
    assert "not a config memlint reads" in " ".join(capsys.readouterr().out.split())
    with pinned_versions(GOLDEN_VERSIONS):
        plans = extract_paths([CONFIGS])
    names = {Path(p.path).name for p in plans}
    assert "dataset_card.yaml" not in names
    assert {"axolotl_llama3_qlora.yml", "ds_zero3_offload.json", "accelerate_fsdp2.yaml"} <= names


def test_a_walk_skips_model_files_and_unreadable_yaml_without_error(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True, "model_max_length": 8192}))
    (tmp_path / "weights.yaml").write_bytes(b"\xff\xfe\x00binary")
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 1}}))
    plans = extract_paths([tmp_path])
    assert [(Path(p.path).name, p.kind, p.value("distributed")) for p in plans] == [("ds.json", "deepspeed", "zero1")]


def test_llama_factory_defaults_and_silent_substitutions_come_from_data():
    plan = cfg("llamafactory_llama3_qlora_sft.yaml")
    assert plan.value("method") == "qlora" and plan.value("quant_bits") == 4
    gc = plan.get("gradient_checkpointing")
    assert (gc.value, gc.source) == (True, "library-default")  # LLaMA-Factory turns it on unless disabled
    assert "llamafactory (not installed: newest known)" in gc.chain[0]
    assert (plan.value("double_quant"), plan.value("lora_r"), plan.value("lora_alpha")) == (True, 8, 16)
    assert plan.value("lora_targets") == ["q_proj", "v_proj"]
    assert plan.value("padding") == "packing"
    lora = cfg("llamafactory_llama3_lora_sft.yaml")
    assert lora.value("lora_targets") == "all-linear" and lora.value("padding") == "longest"


def test_axolotl_qlora_uses_its_own_bnb_config_and_lora_with_4bit_uses_transformers_defaults(tmp_path):
    q = cfg("axolotl_llama3_qlora.yml")
    assert (q.value("quant_type"), q.value("double_quant"), q.value("compute_dtype")) == ("nf4", True, "bf16")
    p = tmp_path / "lora4.yml"
    p.write_text("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nload_in_4bit: true\nlora_r: 8\nlora_target_linear: true\nmicro_batch_size: 1\n")
    with pinned_versions(GOLDEN_VERSIONS):
        plan = read_config(p)
    assert (plan.value("quant_bits"), plan.value("quant_type"), plan.value("double_quant")) == (4, "fp4", False)
    assert plan.value("method") == "qlora"  # LoRA over a 4-bit base, whatever the adapter key calls it


def test_torchtune_builder_names_the_model_and_the_method():
    plan = cfg("torchtune_llama3_1_8B_qlora_single_device.yaml")
    assert (plan.value("model_id"), plan.value("method"), plan.value("quant_bits")) == ("meta-llama/Llama-3.1-8B", "qlora", 4)
    assert plan.value("lora_targets") == ["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert (plan.value("precision"), plan.value("optimizer"), plan.value("max_length")) == ("pure-bf16", "adamw_torch_fused", 2048)
    full = cfg("torchtune_llama3_2_1B_full_distributed.yaml")
    assert (full.value("method"), full.value("optimizer"), full.value("distributed"), full.value("offload")) == ("full", "paged_adamw_8bit", "fsdp", "params")


def test_trl_recipe_reads_model_config_and_sft_config_fields():
    plan = cfg("trl_zephyr_sft_qlora.yaml")
    assert (plan.value("method"), plan.value("lora_r"), plan.value("double_quant")) == ("qlora", 16, False)
    assert (plan.value("per_device_batch"), plan.value("eval_batch"), plan.value("max_length")) == (4, 8, 2048)
    assert plan.value("trainer") == "SFTTrainer"


def test_a_followed_deepspeed_config_gives_stage_and_offload_with_its_own_file_and_line():
    plan = cfg("axolotl_fft_zero3.yml")
    dist, off = plan.get("distributed"), plan.get("offload")
    assert (dist.value, off.value) == ("zero3", "params")
    assert off.span == Span("configs/ds_zero3_offload.json", 12, 4)
    # the DeepSpeed file's explicit micro-batch agrees with micro_batch_size: no conflict reported
    assert plan.value("per_device_batch") == 1 and plan.diagnostics == ()
    lf = cfg("llamafactory_qwen_full_ds_z2.yaml")
    assert (lf.value("distributed"), lf.value("offload")) == ("zero2", "optimizer")


def test_a_deepspeed_file_that_is_not_there_leaves_the_stage_unknown_with_a_hint(tmp_path):
    p = tmp_path / "axolotl.yml"
    # (a file axolotl ships, deepspeed_configs/zero3_bf16.json, is read from memlint's data: test_framework_deepspeed.py)
    p.write_text("base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: 1\ndeepspeed: my_configs/zero3_bf16_tuned.json\n")
    plan = read_config(p)
    assert plan.value("distributed") == "deepspeed" and plan.get("distributed").span.line == 3
    assert any("pass --assume distributed=zero3" in n for n in plan.notes)


def test_a_script_and_a_config_naming_the_same_deepspeed_json_agree(tmp_path):
    shutil.copy(CONFIGS / "ds_zero3_offload.json", tmp_path / "ds.json")
    script = tmp_path / "train.py"
    script.write_text(
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B')\n"
        "args = TrainingArguments('out', per_device_train_batch_size=1, deepspeed='ds.json')\n"
        "Trainer(model=model, args=args).train()\n")
    axo = tmp_path / "axolotl.yml"
    axo.write_text("base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: 1\nsequence_len: 2048\ndeepspeed: ds.json\n")
    with pinned_versions(GOLDEN_VERSIONS):
        from_script, from_yaml = extract_file(script), read_config(axo)
    for name in ("distributed", "offload"):
        assert from_script.value(name) == from_yaml.value(name), name
    assert from_script.value("offload") == "params"
    assert from_script.get("offload").span.path.endswith("ds.json")


def test_axolotl_fsdp_settings_give_sharding_and_offload(tmp_path):
    p = tmp_path / "fsdp.yml"
    p.write_text("base_model: meta-llama/Llama-3.1-70B\nadapter: qlora\nload_in_4bit: true\nmicro_batch_size: 1\n"
                 "fsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n  fsdp_offload_params: false\n  fsdp_version: 2\n"
                 "  fsdp_reshard_after_forward: false\n")
    plan = read_config(p)
    assert (plan.value("distributed"), plan.value("offload")) == ("fsdp_shard_grad_op", "none")
    assert plan.get("distributed").span.line == 11
    p.write_text("base_model: meta-llama/Llama-3.1-70B\nmicro_batch_size: 1\nfsdp_config:\n  fsdp_offload_params: true\n")
    plan = read_config(p)
    assert (plan.value("distributed"), plan.value("offload")) == ("fsdp", "params")


def test_merge_launch_config_lays_sharding_and_process_count_over_a_script_plan():
    with pinned_versions(GOLDEN_VERSIONS):
        script = extract_file(SCRIPTS / "hf_trainer_full.py")
    merged = merge_launch_config(script, CONFIGS / "accelerate_fsdp2.yaml")
    assert (merged.value("distributed"), merged.value("num_gpus"), merged.value("offload")) == ("fsdp", 8, "none")
    assert merged.get("num_gpus").span.path.endswith("accelerate_fsdp2.yaml")
    assert merged.value("model_id") == script.value("model_id") and merged.path == script.path
    ds = merge_launch_config(script, CONFIGS / "ds_zero2_offload.json")
    assert (ds.value("distributed"), ds.value("offload")) == ("zero2", "optimizer")
    # "auto" micro-batch: the script's own value stays
    assert ds.get("per_device_batch") == script.get("per_device_batch")


def test_merge_reports_a_deepspeed_micro_batch_that_contradicts_the_script(tmp_path):
    plan = TrainingPlan("train.py", {"per_device_batch": Value(4, "literal", Span("train.py", 9, 5))})
    merged = merge_launch_config(plan, CONFIGS / "ds_zero3_offload.json")
    [d] = [d for d in merged.diagnostics if d.kind == "bad-value"]
    assert d.message.startswith("DeepSpeed config train_micro_batch_size_per_gpu: 1, but the training arguments give per_device_batch=4")
    assert d.span.path.endswith("ds_zero3_offload.json") and d.span.line == 28
    assert merged.value("per_device_batch") == 4  # the script's value is kept; the conflict is the finding
    open_plan = TrainingPlan("train.py", {"per_device_batch": Value(8, "library-default")})
    assert merge_launch_config(open_plan, CONFIGS / "ds_zero3_offload.json").value("per_device_batch") == 1


def test_merge_refuses_a_file_that_is_not_a_launcher_config():
    with pytest.raises(MemlintError, match="not an accelerate or DeepSpeed config"):
        merge_launch_config(TrainingPlan("train.py"), CONFIGS / "axolotl_llama3_qlora.yml")
    with pytest.raises(MemlintError, match="no such file"):
        merge_launch_config(TrainingPlan("train.py"), CONFIGS / "missing.json")


def test_every_framework_fact_cites_its_source_and_has_a_valid_version_range():
    for name, fw in table().items():
        assert fw["ref"] and fw["keys"], name
        for key, entries in fw["defaults"].items():
            for e in entries:
                assert e.get("ref"), (name, key)
                in_range("1.0", e.get("versions"))  # raises on a malformed range
        for key, sub in fw.get("substitutions", {}).items():
            assert sub.get("ref"), (name, key)


def test_reading_configs_imports_neither_torch_nor_libcst():
    code = ("import sys; from memlint.extract.configs import read_config; "
            f"read_config({str(CONFIGS / 'axolotl_fft_zero3.yml')!r}); "
            "bad = [m for m in ('torch', 'transformers', 'libcst', 'peft') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_cli_plan_shows_a_config_plan_and_its_estimate(capsys):
    from memlint.cli import main

    with pinned_versions(GOLDEN_VERSIONS):
        rc = main(["plan", str(CONFIGS / "llamafactory_llama3_qlora_sft.yaml")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "meta-llama/Meta-Llama-3-8B-Instruct" in out and "peak" in out
    assert json.loads(json.dumps(cfg("llamafactory_llama3_qlora_sft.yaml").to_json()))["max_length"]["line"] == 15


@pytest.mark.parametrize("axolotl, transformers, want", [
    (None, "5.24.0", "adamw_torch_fused"),      # not installed: the newest axolotl's own default
    ("0.12.2", "4.40.0", "adamw_torch_fused"),  # axolotl >= 0.7 sets it whatever transformers says
    ("0.6.0", "4.40.0", "adamw_torch"),         # older axolotl leaves it to TrainingArguments
    ("0.4.0", "4.30.0", "adamw_hf"),
])
def test_axolotl_optimizer_default_follows_the_installed_versions(tmp_path, axolotl, transformers, want):
    path = tmp_path / "axolotl.yml"
    path.write_text("base_model: meta-llama/Llama-3.1-8B\nsequence_len: 1024\nmicro_batch_size: 1\n", encoding="utf-8")
    with pinned_versions({**GOLDEN_VERSIONS, "axolotl": axolotl, "transformers": transformers}):
        plan = read_config(path)
    v = plan.get("optimizer")
    assert (v.value, v.source) == (want, "library-default")
    assert ("axolotl" in v.chain[0]) and (axolotl is None or axolotl in v.chain[0])


def test_llama_factory_export_and_chat_configs_train_nothing_and_a_walk_skips_them(tmp_path):
    # hiyouga/LLaMA-Factory examples/merge_lora/*.yaml and examples/inference/*.yaml carry the
    # model keys but no do_train: true, so llamafactory-cli trains nothing (MEM202/MEM205 fired on them)
    (tmp_path / "merge.yaml").write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\n"
                                         "adapter_name_or_path: saves/lora\ntemplate: llama3\nexport_dir: out\n")
    (tmp_path / "chat.yaml").write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\n"
                                        "template: llama3\nfinetuning_type: lora\ninfer_backend: huggingface\n")
    (tmp_path / "sft.yaml").write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nstage: sft\n"
                                       "do_train: true\nfinetuning_type: lora\ncutoff_len: 1024\n")
    assert [p.path for p in extract_paths([tmp_path])] == [str(tmp_path / "sft.yaml")]
    merge = read_config(tmp_path / "merge.yaml")
    assert merge.kind == "llama-factory" and not merge.fields
    assert merge.notes == ("an export (adapter merge) config for llamafactory-cli export: it trains nothing, "
                           "so there is no training step to size",)
    assert "llamafactory-cli chat" in read_config(tmp_path / "chat.yaml").notes[0]
    out = subprocess.run([sys.executable, "-m", "memlint", "check", str(tmp_path / "merge.yaml"), "--gpu", "A100-80GB"],
                         capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, "")


def test_fp16_compute_that_a_framework_derives_from_fp16_points_at_the_fp16_key(tmp_path):
    # hiyouga/LLaMA-Factory examples/extras/fsdp_qlora/llama3_lora_sft.yaml: quantization_bit: 4 and
    # fp16: true; the bnb compute dtype follows fp16, and MEM302 was reported at 1:1
    p = tmp_path / "qlora.yaml"
    p.write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nquantization_bit: 4\nstage: sft\n"
                 "do_train: true\nfinetuning_type: lora\ncutoff_len: 1024\nper_device_train_batch_size: 1\nfp16: true\n")
    out = subprocess.run([sys.executable, "-m", "memlint", "check", str(p), "--gpu", "A100-80GB", "--select", "MEM302"],
                         capture_output=True, text=True)
    assert out.stdout.startswith(f"{p}:8:1: MEM302 note: fp16 compute where bf16 is available"), out.stdout


def test_llama_factory_model_arguments_of_recent_versions_are_known_keys(tmp_path):
    # hiyouga/LLaMA-Factory src/llamafactory/hparams/model_args.py: init_special_tokens and use_kv_cache
    # were reported as misspellings of split_special_tokens and use_cache (MEM004 on real keys)
    p = tmp_path / "lf.yaml"
    p.write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nstage: sft\ndo_train: true\n"
                 "init_special_tokens: noise_init\nuse_kv_cache: true\nfp8_backend: auto\nuse_v1_kernels: false\n"
                 "cuttoff_len: 1024\n")
    diags = [d.message for d in read_config(p).diagnostics if d.kind == "unknown-key"]
    assert diags == ["unknown llama-factory key 'cuttoff_len' (did you mean 'cutoff_len'?)"]


def test_deepspeed_zero_keys_by_field_name_are_known_and_a_followed_file_is_reported_once(tmp_path):
    # axolotl deepspeed_configs/zero3_bf16_cpuoffload_params.json writes gather_16bit_weights_on_model_save,
    # max_live_parameters, ...: DeepSpeedZeroConfig's field names (populate_by_name) beside their stage3_ aliases.
    # Checking that JSON and the axolotl config that follows it reported its finding twice.
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "z3.json").write_text(json.dumps({"zero_optimization": {
        "stage": 3, "gather_16bit_weights_on_model_save": True, "max_live_parameters": 0, "prefetch_bucket_size": "auto",
        "stage3_max_reuse_distanse": 0}, "train_micro_batch_size_per_gpu": "auto"}))
    (tmp_path / "train.yml").write_text("base_model: meta-llama/Llama-3.2-1B\nsequence_len: 1024\nmicro_batch_size: 1\n"
                                        "sample_packing: true\ndeepspeed: ds/z3.json\n")
    diags = [d.message for d in read_config(tmp_path / "ds" / "z3.json").diagnostics if d.kind == "unknown-key"]
    assert diags == ["unknown deepspeed zero_optimization key 'stage3_max_reuse_distanse' (did you mean 'stage3_max_reuse_distance'?)"]
    out = subprocess.run([sys.executable, "-m", "memlint", "check", str(tmp_path), "--select", "MEM004", "--gpus", "2"],
                         capture_output=True, text=True)
    assert out.stdout.count("stage3_max_reuse_distanse") == 1, out.stdout


def test_axolotl_unfrozen_parameters_says_the_estimate_trains_every_parameter(tmp_path):
    # axolotl examples/mistral/bigstral-ds-zero3.yaml trains only the layers unfrozen_parameters matches
    p = tmp_path / "partial.yml"
    p.write_text("base_model: meta-llama/Llama-3.2-1B\nsequence_len: 1024\nmicro_batch_size: 1\nsample_packing: true\n"
                 "unfrozen_parameters:\n  - ^lm_head.weight$\n  - model.layers.1[0-5]+.mlp\n")
    assert any(n.startswith("unfrozen_parameters: only parameters matching its 2 pattern(s) train") for n in read_config(p).notes)
