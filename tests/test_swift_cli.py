"""ms-swift's `swift sft|pt|rlhf` read as its CLI parses them: flags (2.x-4.x spellings) or a YAML file (4.x), with
ms-swift's own defaults, the processes NPROC_PER_NODE starts and the DeepSpeed presets it ships."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)


def _plan(tmp_path, monkeypatch, script: str):
    root = _write(tmp_path, {"run.sh": script})
    return _command(root, monkeypatch, "bash", "run.sh")


def test_swift_sft_with_few_flags_takes_ms_swifts_defaults(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, """
        CUDA_VISIBLE_DEVICES=0 swift sft --model Qwen/Qwen2.5-7B-Instruct --dataset a.jsonl --max_length 2048
    """)
    assert _get(plan, "model_id", "method", "lora_r", "lora_alpha", "lora_targets", "per_device_batch", "grad_accum",
                "gradient_checkpointing", "padding", "packing", "trainer", "num_gpus", "distributed") == {
        "model_id": "Qwen/Qwen2.5-7B-Instruct", "method": "lora", "lora_r": 8, "lora_alpha": 32,
        "lora_targets": "all-linear", "per_device_batch": 1, "grad_accum": 16, "gradient_checkpointing": True,
        "padding": "longest", "packing": False, "trainer": "Seq2SeqTrainer", "num_gpus": 1, "distributed": "none"}
    assert plan.get("max_length").value == 2048 and plan.get("max_length").source == "command-line"


@pytest.mark.parametrize("dtype, precision", [("bfloat16", "amp-bf16"), ("float16", "amp-fp16"), ("float32", "amp-fp16")])
def test_the_load_dtype_decides_the_autocast(tmp_path, monkeypatch, dtype, precision):
    plan = _plan(tmp_path, monkeypatch, f"swift sft --model Qwen/Qwen2.5-0.5B --torch_dtype {dtype} --max_length 512\n")
    assert plan.get("precision").value == precision


@pytest.mark.parametrize("rlhf_type, trainer", [("dpo", "DPOTrainer"), ("kto", "KTOTrainer"), ("orpo", "ORPOTrainer"),
                                                ("simpo", "CPOTrainer"), ("rm", "RewardTrainer"), (None, "DPOTrainer")])
def test_swift_rlhf_names_the_trainer_of_its_rlhf_type(tmp_path, monkeypatch, rlhf_type, trainer):
    flag = f"--rlhf_type {rlhf_type} " if rlhf_type else ""
    plan = _plan(tmp_path, monkeypatch, f"swift rlhf {flag}--model Qwen/Qwen2.5-0.5B --max_length 1024\n")
    assert plan.get("trainer").value == trainer


def test_grpo_sizes_the_prompt_and_its_completion(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "swift rlhf --rlhf_type grpo --model Qwen/Qwen2.5-0.5B --max_length 1024 "
                                        "--max_completion_length 256\n")
    assert _get(plan, "max_length", "trainer") == {"max_length": 1280, "trainer": "GRPOTrainer"}


def test_nproc_per_node_starts_processes_and_fills_the_accumulation_over_them(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, """
        NPROC_PER_NODE=4 CUDA_VISIBLE_DEVICES=0,1,2,3 swift sft --model Qwen/Qwen2.5-7B \\
            --train_type full --per_device_train_batch_size 2 --deepspeed zero3_offload --max_length 4096
    """)
    assert _get(plan, "num_gpus", "grad_accum", "method", "distributed", "offload") == {
        "num_gpus": 4, "grad_accum": 2, "method": "full", "distributed": "zero3", "offload": "params"}


@pytest.mark.parametrize("preset, distributed", [("zero2", "zero2"), ("zero3", "zero3"), ("zero1", "zero1"),
                                                 ("'default-zero3'", "zero3"), ("default-zero2", "zero2"),
                                                 ("zero3-offload", "zero3")])  # the last three: ms-swift 2.x's names
def test_the_deepspeed_presets_are_the_files_ms_swift_ships(tmp_path, monkeypatch, preset, distributed):
    plan = _plan(tmp_path, monkeypatch, f"NPROC_PER_NODE=2 swift sft --model Qwen/Qwen2.5-0.5B --deepspeed {preset} "
                                        "--max_length 512\n")
    assert plan.get("distributed").value == distributed


def test_bitsandbytes_4bit_lora_is_qlora(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "swift sft --model Qwen/Qwen2.5-7B --train_type lora --quant_method bnb "
                                        "--quant_bits 4 --lora_rank 64 --max_length 1024\n")
    assert _get(plan, "method", "quant_bits", "quant_type", "double_quant", "lora_r") == {
        "method": "qlora", "quant_bits": 4, "quant_type": "nf4", "double_quant": True, "lora_r": 64}


def test_ms_swift_2x_spellings(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, """
        swift sft --model_type qwen-7b-chat --model_id_or_path qwen/Qwen-7B-Chat --sft_type lora \\
            --quantization_bit 4 --dtype bf16 --batch_size 2 --max_length 1024
    """)
    assert _get(plan, "model_id", "method", "quant_bits", "torch_dtype", "per_device_batch") == {
        "model_id": "qwen/Qwen-7B-Chat", "method": "qlora", "quant_bits": 4, "torch_dtype": "bf16",
        "per_device_batch": 2}


def test_a_yaml_config_given_first_is_read_and_the_flags_after_it_win(tmp_path, monkeypatch):
    root = _write(tmp_path, {"sft.yaml": """
        model: Qwen/Qwen2.5-1.5B-Instruct
        train_type: lora
        lora_rank: 16
        per_device_train_batch_size: 4
        max_length: 2048
        attn_impl: flash_attn
        packing: true
    """})
    plan = _command(root, monkeypatch, "swift", "sft", "sft.yaml", "--lora_rank", "32")
    assert _get(plan, "model_id", "lora_r", "per_device_batch", "attn_implementation", "padding", "packing") == {
        "model_id": "Qwen/Qwen2.5-1.5B-Instruct", "lora_r": 32, "per_device_batch": 4,
        "attn_implementation": "flash_attention_2", "padding": "packing", "packing": True}


def test_an_ms_swift_config_read_alone_is_recognised(tmp_path):
    from memlint.extract.configs import read_config

    path = tmp_path / "sft.yaml"
    path.write_text("model: Qwen/Qwen2.5-1.5B-Instruct\ntrain_type: full\nper_device_train_batch_size: 2\n"
                    "max_length: 1024\n")
    plan = read_config(path)
    assert plan.kind == "ms-swift"
    assert _get(plan, "method", "per_device_batch", "grad_accum") == {"method": "full", "per_device_batch": 2,
                                                                      "grad_accum": 8}


def test_swift_commands_that_do_not_train_are_not_read(tmp_path, monkeypatch):
    from memlint.extract.shell import command_targets

    root = _write(tmp_path, {"run.sh": "conda activate swift\nswift infer --model Qwen/Qwen2.5-0.5B\n"
                                       "swift export --adapters out/ckpt\n"})
    monkeypatch.chdir(root)
    targets = command_targets(["bash", "run.sh"])
    assert [t.launch for t in targets] == [None] and "runs no Python training command" in targets[0].note
