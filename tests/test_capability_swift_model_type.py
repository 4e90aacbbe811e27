"""ms-swift 2.x's `--model_type` alone names a checkpoint of its registry (data/swift_model_types.json, generated from
ms-swift's register_model calls by scripts/gen_swift_model_types.py): the model is its Hugging Face id."""

from checkouts import plan_of_command, write_checkout

from memlint.data import load


def test_a_registered_model_type_is_its_checkpoint(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"run.sh": "CUDA_VISIBLE_DEVICES=0 swift sft --model_type qwen1half-7b-chat --sft_type lora "
                                        "--dataset alpaca-zh --batch_size 2\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert plan.get("model_id").value == "qwen/Qwen1.5-7B-Chat"  # the ModelScope id 2.x downloads
    assert "ModelScope" in plan.get("model_id").chain[0] and plan.get("per_device_batch").value == 2
    write_checkout(tmp_path, {"run.sh": "USE_HF=1 swift sft --model_type qwen1half-7b-chat --sft_type lora --dataset x\n"})
    assert plan_of_command(tmp_path, monkeypatch, "bash", "run.sh").get("model_id").value == "Qwen/Qwen1.5-7B-Chat"


def test_a_modelscope_id_is_sized_as_its_hugging_face_twin():
    from memlint.catalog import resolve

    spec = resolve("ZhipuAI/chatglm2-6b")
    assert (spec.id, spec.source, spec.assumed_from) == ("THUDM/chatglm2-6b", "hub-twin", "ZhipuAI/chatglm2-6b")


def test_a_model_type_of_no_registry_entry_stays_unknown(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"run.sh": "swift sft --model_type qwen2_5 --train_type lora --dataset x\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert not plan.get("model_id").known  # 3.x's model_type is a family, not a checkpoint


def test_the_registry_holds_ids_of_both_hubs():
    table = load("swift_model_types.json")["model_types"]
    assert len(table) > 300
    assert table["qwen2-7b-instruct"] == ["qwen/Qwen2-7B-Instruct", "Qwen/Qwen2-7B-Instruct"]


def test_a_checkpoint_folder_given_by_ckpt_dir_is_the_model(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"run.sh": "swift rlhf --rlhf_type grpo --ckpt_dir out/v0/checkpoint-100 --train_type full\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert plan.get("model_id").value == "out/v0/checkpoint-100"


def test_model_types_registered_in_a_loop_are_in_the_registry():
    table = load("swift_model_types.json")["model_types"]
    assert table["qwen2_5-7b-instruct"] == ["qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"]
