"""Patterns met in public training scripts that once misled extraction.

Each test is a minimal excerpt of a real script's shape; the comment names the source."""

from memlint.extract import extract_source


def _fields(src: str, *names: str) -> dict:
    plan = extract_source(src, "train.py")
    return {n: plan.fields[n].value for n in names}


def test_prepare_model_for_int8_training_keeps_the_model_and_enables_checkpointing():
    # tloen/alpaca-lora finetune.py: the deprecated peft alias of prepare_model_for_kbit_training
    src = '''import torch, transformers
from peft import LoraConfig, get_peft_model, prepare_model_for_int8_training
from transformers import LlamaForCausalLM

model = LlamaForCausalLM.from_pretrained("huggyllama/llama-7b", load_in_8bit=True, torch_dtype=torch.float16)
model = prepare_model_for_int8_training(model)
model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
transformers.Trainer(model=model, args=transformers.TrainingArguments("o", per_device_train_batch_size=4)).train()
'''
    got = _fields(src, "model_id", "method", "quant_bits", "lora_r", "gradient_checkpointing")
    assert got == {"model_id": "huggyllama/llama-7b", "method": "lora", "quant_bits": 8, "lora_r": 8,
                   "gradient_checkpointing": True}


def test_a_model_passed_through_an_unknown_helper_still_names_the_loaded_model():
    src = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
from peft import LoraConfig, get_peft_model
from mylib import wrap

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
model = get_peft_model(model, LoraConfig(r=16))
model = wrap(model)
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["model_id"].value == "meta-llama/Llama-2-7b-hf"
    assert plan.fields["lora_r"].value == 16
    assert any("mylib.wrap()" in n and "line 5" in n for n in plan.notes)


def test_trl_parser_with_remaining_strings_still_unpacks_the_training_arguments():
    # huggingface/trl trl/scripts/sft.py: parse_args_and_config(return_remaining_strings=True)
    src = '''from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser

parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
script_args, training_args, model_args, rest = parser.parse_args_and_config(return_remaining_strings=True)
SFTTrainer(model="Qwen/Qwen2-0.5B", args=training_args).train()
'''
    plan = extract_source(src, "sft.py")
    assert plan.fields["per_device_batch"].source == "library-default"
    assert plan.fields["per_device_batch"].value == 8
    assert plan.fields["model_id"].value == "Qwen/Qwen2-0.5B"


def test_a_model_from_an_unfollowed_helper_says_which_call_instead_of_no_load_found():
    # huggingface/peft examples/sft/train.py: the model comes from a sibling helper
    src = '''from transformers import TrainingArguments
from trl import SFTTrainer
from helpers import create_and_prepare_model

model, peft_config, tokenizer = create_and_prepare_model()
SFTTrainer(model=model, args=TrainingArguments("o"), peft_config=peft_config).train()
'''
    plan = extract_source(src, "train.py")
    assert any("helpers.create_and_prepare_model()" in n for n in plan.notes if n.startswith("model_id"))


_TWO_LOADERS = '''from dataclasses import dataclass, field
from transformers import AutoModelForCausalLM, HfArgumentParser, TrainingArguments
from trl import SFTTrainer

@dataclass
class ModelArguments:
    use_unsloth: bool = field(default=False)
    use_flash_attn: bool = field(default=False)

parser = HfArgumentParser((ModelArguments, TrainingArguments))
if len(sys.argv) == 2:
    args, training_args = parser.parse_json_file(json_file=sys.argv[1])
else:
    args, training_args = parser.parse_args_into_dataclasses()
if args.use_unsloth:
    from unsloth import FastLanguageModel
    model, _ = FastLanguageModel.from_pretrained(model_name="unsloth/llama-3-8b", max_seq_length=2048)
else:
    model = AutoModelForCausalLM.from_pretrained(
        "meta-llama/Meta-Llama-3-8B",
        attn_implementation="flash_attention_2" if args.use_flash_attn else "eager",
    )
SFTTrainer(model=model, args=training_args).train()
'''


def test_a_path_without_unsloth_is_the_worst_case_and_names_the_trl_trainer():
    # huggingface/peft examples/sft: unsloth only when --use_unsloth, a json config on another path
    plan = extract_source("import sys\n" + _TWO_LOADERS, "train.py")
    assert plan.fields["trainer"].value == "SFTTrainer"


def test_eager_attention_is_the_worst_case_among_candidates():
    plan = extract_source("import sys\n" + _TWO_LOADERS, "train.py")
    assert plan.fields["attn_implementation"].value == "eager"
    assert "sdpa" in plan.fields["attn_implementation"].candidates


def test_a_deepspeed_path_relative_to_the_repository_root_is_found_above_the_config(tmp_path):
    # hiyouga/LLaMA-Factory examples/train_full/llama3_full_sft.yaml names
    # examples/deepspeed/ds_z3_config.json, relative to the root it is launched from
    from memlint.extract import extract_file

    (tmp_path / ".git").mkdir()  # the repository: a file outside the folder named is read inside it only (issue #29)
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    (tmp_path / "examples" / "train_full").mkdir()
    (tmp_path / "examples" / "deepspeed" / "ds_z3_config.json").write_text(
        '{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3}}', encoding="utf-8")
    cfg = tmp_path / "examples" / "train_full" / "llama3_full_sft.yaml"
    cfg.write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nstage: sft\ndo_train: true\n"
                   "finetuning_type: full\ndeepspeed: examples/deepspeed/ds_z3_config.json\ncutoff_len: 2048\n"
                   "per_device_train_batch_size: 1\nbf16: true\n", encoding="utf-8")
    plan = extract_file(cfg)
    assert plan.fields["distributed"].value == "zero3"


def test_large_logits_counts_the_logits_not_autocasts_copy_of_the_fp32_lm_head():
    # axolotl examples/llama-3/qlora-fsdp-70b.yaml: at 1 x 512 the logits are 0.6 GiB, but the
    # fp32 lm_head that k-bit prep leaves (2 GiB bf16 copy under autocast) made MEM205 fire
    from memlint.check import check_plan

    src = '''import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments
from trl import SFTConfig, SFTTrainer
from peft import LoraConfig

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B", torch_dtype=torch.bfloat16,
    quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"))
args = SFTConfig("o", per_device_train_batch_size=2, max_length=2048, bf16=True, gradient_checkpointing=True)
SFTTrainer(model=model, args=args, peft_config=LoraConfig(r=16)).train()
'''
    from memlint.library.versions import pinned_versions

    with pinned_versions({"trl": "0.25.0"}):  # an SFTTrainer that still upcasts the quantized base's lm_head
        _large_logits_checks(src, check_plan)


def _large_logits_checks(src, check_plan):
    result = check_plan(extract_source(src, "train.py"))  # no GPU: a note
    found = [f for f in result.findings if f.code == "MEM205"]
    assert found and found[0].severity == "note", [f.code for f in result.findings]
    # the figure quoted is the estimate table's (one number everywhere); the share that decides is
    # the materialised logits', without the copy a fused loss would keep
    assert found[0].data["logits_bytes"] == result.context.estimate.bytes("logits")
    # trl 0.25's SFTTrainer (data/preference.json sft_layouts): after the model's own loss its metrics hold the saved
    # fp32 log-softmax, accelerate's fp32 logits and a contiguous shifted copy
    assert found[0].data["materialised_bytes"] == (4 + 4) * 128_256 * 2 * 2048 + 4 * 128_256 * 2 * 2047
    assert "lm_head" in result.context.estimate.components["logits"].formula and "lm_head" in found[0].message
    # on an 80 GB card the run fits with room to spare: no MEM205 at all
    roomy = check_plan(extract_source(src, "train.py"), gpu="A100-80GB")
    assert "MEM205" not in {f.code for f in roomy.findings}
    # axolotl's 70B at 1 x 512: the fp32 lm_head's copy alone does not make it fire
    short = check_plan(extract_source(src.replace("per_device_train_batch_size=2, max_length=2048",
                                                  "per_device_train_batch_size=1, max_length=512")
                                      .replace("Llama-3.1-8B", "Llama-3.1-70B"), "train.py"))
    assert short.context.estimate is not None
    assert "MEM205" not in {f.code for f in short.findings}


def test_typing_cast_passes_its_value_through():
    # philschmid training/scripts/run_ds_lora.py: training_args = cast(TrainingArguments, training_args)
    src = '''from typing import cast
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

parser = HfArgumentParser([TrainingArguments])
(training_args,) = parser.parse_args_into_dataclasses()
training_args = cast(TrainingArguments, training_args)
model = AutoModelForCausalLM.from_pretrained("gpt2")
Trainer(model=model, args=training_args).train()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["per_device_batch"].value == 8
    assert plan.fields["per_device_batch"].source == "library-default"


def test_objects_built_in_a_sibling_module_are_placed_at_the_scripts_call(tmp_path):
    # huggingface/peft examples/sft: train.py calls utils.create_and_prepare_model(args); the model
    # id is unknown there, and its span must name a line of train.py, not utils.py's line number
    from memlint.extract import extract_file

    (tmp_path / "utils.py").write_text('''from transformers import AutoModelForCausalLM


def create_and_prepare_model(args):
    # padding so that the load sits on a line train.py does not have
    #
    #
    #
    #
    #
    #
    #
    model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
    return model
''', encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text('''import sys
from transformers import Trainer, TrainingArguments
from utils import create_and_prepare_model

model = create_and_prepare_model(sys.argv)
Trainer(model=model, args=TrainingArguments("o")).train()
''', encoding="utf-8")
    plan = extract_file(script)
    span = plan.fields["model_id"].span
    assert span is not None and span.line == 5 and span.path == str(script)


def test_a_walk_skips_scripts_without_a_trainer_or_loop_but_an_explicit_path_is_checked(tmp_path):
    # an inference or adapter-merge script next to the training script (philschmid's
    # merge_adapter_weights.py, peft examples' utils.py) has nothing to size
    from memlint.check import check_paths
    from memlint.config import Settings

    (tmp_path / "merge.py").write_text('from transformers import AutoModelForCausalLM\n'
                                       'm = AutoModelForCausalLM.from_pretrained("gpt2")\nm.save_pretrained("out")\n',
                                       encoding="utf-8")
    (tmp_path / "broken.py").write_text("import torch\nloss.backward()\nx = (\n", encoding="utf-8")
    # a broken file with no training signal is not parsed by a walk (extract.training_signal): not reported
    (tmp_path / "broken_helper.py").write_text("import torch\nx = (\n", encoding="utf-8")
    walked = check_paths([str(tmp_path)], Settings())
    assert [p.name for p in (__import__("pathlib").Path(r.path) for r in walked)] == ["broken.py"]
    named = check_paths([str(tmp_path / "merge.py")], Settings())
    # checked when named, but a script that trains nothing gets no sizing notes (pre-commit names every file, #30)
    assert len(named) == 1 and not any(f.code in ("MEM002", "MEM003", "MEM006") for f in named[0].findings)


def test_axolotl_remapped_and_older_keys_are_not_unknown(tmp_path):
    # axolotl examples/mistral/mixtral-qlora-fsdp.yml (model_config: alias of overrides_of_model_config)
    # and examples/mistral/qlora.yml (eval_table_max_new_tokens, the older eval_max_new_tokens)
    from memlint.extract import extract_file

    cfg = tmp_path / "qlora.yml"
    cfg.write_text("base_model: mistralai/Mistral-7B-v0.1\nadapter: qlora\nload_in_4bit: true\n"
                   "model_config:\n  output_router_logits: true\nmodel_revision: main\n"
                   "eval_table_max_new_tokens: 128\nsequence_len: 1024\nmicro_batch_size: 2\n", encoding="utf-8")
    plan = extract_file(cfg)
    assert [d.message for d in plan.diagnostics if d.kind == "unknown-key"] == []


def test_an_empty_default_model_id_says_it_comes_from_the_command_line():
    # tloen/alpaca-lora finetune.py: base_model: str = ""  # the only required argument
    src = '''import fire, transformers
from transformers import LlamaForCausalLM

def train(base_model: str = ""):
    model = LlamaForCausalLM.from_pretrained(base_model)
    transformers.Trainer(model=model, args=transformers.TrainingArguments("o")).train()

fire.Fire(train)
'''
    plan = extract_source(src, "finetune.py")
    assert plan.fields["model_id"].chain == ("the model id defaults to '': it comes from the command line",)


_TRL_HELPERS = '''from transformers import AutoModelForCausalLM
from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser, get_peft_config, get_quantization_config

%s
quantization_config = get_quantization_config(model_args)
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2-0.5B", quantization_config=quantization_config)
SFTTrainer(model=model, args=training_args, peft_config=get_peft_config(model_args)).train()
'''


def test_trl_model_config_defaults_mean_full_training_without_quantization():
    # huggingface/trl trl/scripts/{sft,dpo}.py and examples/scripts/reward_modeling.py
    src = _TRL_HELPERS % ("parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))\n"
                          "script_args, training_args, model_args = parser.parse_args_and_config()")
    plan = extract_source(src, "sft.py")
    assert plan.fields["method"].value == "full"
    assert plan.fields["quant_bits"].value is None and plan.fields["quant_bits"].source == "library-default"


def test_trl_get_peft_and_quantization_config_follow_the_model_config():
    src = _TRL_HELPERS % ("model_args = ModelConfig(use_peft=True, lora_r=32, load_in_4bit=True)\n"
                          "training_args = SFTConfig('o')")
    plan = extract_source(src, "sft.py")
    got = {k: plan.fields[k].value for k in ("method", "lora_r", "lora_alpha", "quant_bits", "quant_type", "double_quant")}
    assert got == {"method": "qlora", "lora_r": 32, "lora_alpha": 32, "quant_bits": 4, "quant_type": "nf4", "double_quant": False}


# ---- round 2: framework configs and notebooks (docs/realworld.md) --------------------------


def _config(tmp_path, name: str, text: str):
    from memlint.extract import extract_file

    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return extract_file(p)


def test_torchtune_base_and_instruct_builders_name_their_checkpoint(tmp_path):
    # pytorch/torchtune recipes/configs/qwen2_5/7B_lora_single_device.yaml: qwen2_5 7B and larger
    # have _base and _instruct builders (same shapes); qwen3, gemma (v1) and phi4 likewise
    from memlint.catalog import resolve

    for component, want in (("qwen2_5.lora_qwen2_5_7b_instruct", "Qwen/Qwen2.5-7B"),
                             ("qwen3.qwen3_1_7b_base", "Qwen/Qwen3-1.7B"),
                             ("gemma.qlora_gemma_7b", "google/gemma-7b"),
                             ("phi4.lora_phi4_14b", "microsoft/phi-4")):
        plan = _config(tmp_path, "tt.yaml", f"model:\n  _component_: torchtune.models.{component}\n"
                                             "  lora_attn_modules: ['q_proj', 'v_proj']\n"
                                             "tokenizer:\n  max_seq_len: 1024\nbatch_size: 2\ndtype: bf16\n")
        assert plan.fields["model_id"].value == want, component
        resolve(want)


def test_the_handbook_qlora_adapter_resolves_to_its_base_shapes():
    # huggingface/alignment-handbook recipes/gemma-7b/dpo/config_qlora.yaml starts from the
    # zephyr-7b-sft-qlora adapter (recipes/zephyr-7b-beta/sft/config_qlora.yaml's hub_model_id)
    from memlint.catalog import resolve

    assert resolve("alignment-handbook/zephyr-7b-sft-qlora").params == resolve("mistralai/Mistral-7B-v0.1").params


def test_activation_offloading_is_read_from_scripts_trl_recipes_axolotl_torchtune_and_unsloth(tmp_path):
    # huggingface/trl examples/notebooks/sft_trl_lora_qlora.ipynb: SFTConfig(activation_offloading=True)
    # on a T4: the estimate keeps only the layers in flight on the GPU
    from memlint.estimate.from_plan import setup_from_plan

    src = '''from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen3-8B")
args = SFTConfig(output_dir="o", max_length=1024, activation_offloading=True, gradient_checkpointing=True)
SFTTrainer(model=model, args=args).train()
'''
    plan = extract_source(src, "train.py")
    v = plan.get("offload_activations")
    assert (v.value, v.source, v.span.line) == (True, "literal", 5)
    assert setup_from_plan(plan).setup.offload_activations
    plan = _config(tmp_path, "recipe.yaml", "model_name_or_path: Qwen/Qwen3-8B\nbf16: true\nmax_length: 1024\n"
                                            "per_device_train_batch_size: 2\nactivation_offloading: true\n")
    assert plan.get("offload_activations").value is True and setup_from_plan(plan).setup.offload_activations
    plan = _config(tmp_path, "tt.yaml", "model:\n  _component_: torchtune.models.qwen3.qwen3_8b_instruct\n"
                                        "batch_size: 2\ndtype: bf16\nenable_activation_offloading: True\n")
    assert plan.get("offload_activations").value is True
    off = extract_source(src.replace("activation_offloading=True", "activation_offloading=False"), "train.py")
    assert off.get("offload_activations").value is False and not setup_from_plan(off).setup.offload_activations
    assert not extract_source(src.replace(", activation_offloading=True", ""), "train.py").get("offload_activations").known
    unsloth = '''from unsloth import FastLanguageModel
from trl import SFTConfig, SFTTrainer
model, tok = FastLanguageModel.from_pretrained("unsloth/Llama-3.2-1B", max_seq_length=2048, load_in_4bit=True)
model = FastLanguageModel.get_peft_model(model, r=16, use_gradient_checkpointing="unsloth")
SFTTrainer(model=model, args=SFTConfig(output_dir="o", per_device_train_batch_size=2)).train()
'''
    assert extract_source(unsloth, "train.py").get("offload_activations").value is True
    assert not extract_source(unsloth.replace('"unsloth"', "True"), "train.py").get("offload_activations").known


def test_an_unsloth_prequantized_mirror_has_the_shapes_of_the_checkpoint_it_quantizes():
    # huggingface/trl examples/notebooks/sft_trl_lora_qlora.ipynb loads unsloth/qwen3-14b-unsloth-bnb-4bit
    import pytest

    from memlint.catalog import resolve
    from memlint.errors import MemlintError

    spec = resolve("unsloth/qwen3-14b-unsloth-bnb-4bit")
    assert (spec.id, spec.params) == ("unsloth/qwen3-14b-unsloth-bnb-4bit", resolve("Qwen/Qwen3-14B").params)
    assert resolve("unsloth/Qwen3-4B-bnb-4bit").params == resolve("Qwen/Qwen3-4B").params
    with pytest.raises(MemlintError):  # no catalog entry of that name: still unknown, never a guess
        resolve("unsloth/some-model-7b-bnb-4bit")


def test_unsloth_gradient_checkpointing_offloads_to_cpu():
    # unslothai/notebooks python_scripts/Llama3_(8B)-ORPO.py: get_peft_model(use_gradient_checkpointing="unsloth")
    # keeps the checkpointed layer inputs in CPU memory: the plan field offload_activations
    src = '''from unsloth import FastLanguageModel
from trl import SFTConfig, SFTTrainer

model, tok = FastLanguageModel.from_pretrained(model_name="unsloth/llama-3-8b-bnb-4bit", max_seq_length=2048, load_in_4bit=True)
model = FastLanguageModel.get_peft_model(model, r=16, use_gradient_checkpointing="unsloth")
SFTTrainer(model=model, args=SFTConfig(output_dir="o", per_device_train_batch_size=2)).train()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["gradient_checkpointing"].value is True
    v = plan.get("offload_activations")
    assert v.value is True and v.span.line == 5 and "offloads the checkpointed layer inputs" in v.chain[-1]
    plain = extract_source(src.replace('"unsloth"', "True"), "train.py")
    assert not plain.get("offload_activations").known


def test_a_length_read_from_model_config_is_the_published_configs():
    # databrickslabs/dolly training/trainer.py: max_length from model.config under one of several names
    src = '''from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("EleutherAI/pythia-6.9b")
tokenizer = AutoTokenizer.from_pretrained("EleutherAI/pythia-6.9b")
max_length = None
for length_setting in ["n_positions", "max_position_embeddings", "seq_length"]:
    max_length = getattr(model.config, length_setting, None)
    if max_length:
        break
if not max_length:
    max_length = 1024
ds = [].map(lambda b: tokenizer(b["text"], max_length=max_length, truncation=True))
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=6), train_dataset=ds).train()
'''
    plan = extract_source(src, "train.py")
    assert plan.value("max_length") == 2048
    assert any("config.json: max_position_embeddings = 2048" in c for c in plan.get("max_length").chain)
    # a model the catalog does not know: the config's value stays unknown, nothing is guessed
    plan = extract_source(src.replace("EleutherAI/pythia-6.9b", "someone/unknown-model"), "train.py")
    assert plan.value("max_length") != 2048


def test_a_partial_handed_to_dataset_map_runs_with_its_bound_arguments():
    # databrickslabs/dolly training/trainer.py: partial(preprocess_batch, max_length=..., tokenizer=...)
    # passed to dataset.map; building the partial does not call the function
    src = '''from functools import partial
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

def preprocess_batch(batch, tokenizer, max_length):
    return tokenizer(batch["text"], max_length=max_length, truncation=True)

def preprocess_dataset(tokenizer, max_length):
    dataset = load_dataset("x")["train"]
    fn = partial(preprocess_batch, max_length=max_length, tokenizer=tokenizer)
    return dataset.map(fn, batched=True)

model = AutoModelForCausalLM.from_pretrained("EleutherAI/pythia-6.9b")
tokenizer = AutoTokenizer.from_pretrained("EleutherAI/pythia-6.9b")
ds = preprocess_dataset(tokenizer=tokenizer, max_length=1536)
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=6), train_dataset=ds).train()
'''
    assert extract_source(src, "train.py").value("max_length") == 1536


def test_axolotl_activation_offloading_and_offloaded_checkpointing(tmp_path):
    base = "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 2\nsequence_len: 1024\n"
    for extra, on in (("activation_offloading: true\n", True), ("activation_offloading: legacy\n", True),
                      ("gradient_checkpointing: offload\n", True), ("gradient_checkpointing: true\n", False), ("", False)):
        plan = _config(tmp_path, "axolotl.yml", base + extra)
        assert plan.get("offload_activations").value is on, extra
