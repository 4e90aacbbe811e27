"""Library semantics read by capability (issue #27, round 8): a launcher's bash arrays reaching the flags (quoted
"${A[@]}" as separate words, `A+=(...)` appends, a comment after one of an array's words), `python -m pkg.mod` finding
its package's modules in a checkout with no marker, the attention a checkout's model file runs (a flash-attn kernel
handed on as a value; an SDPA call the pinned torch does not have), and a recipe's script that hard-codes its model's
dtype and attention. Each test is a tiny made-up checkout written from the pattern; no public file is copied."""

from __future__ import annotations


from memlint.extract import extract_targets
from memlint.extract.launch import tokens
from memlint.extract.shell import command_targets, launches
from functools import partial
from checkouts import write_checkout


_write = partial(write_checkout, dedent=True)


def _plans(command: str) -> list:
    return extract_targets(command_targets(tokens(command)))


def _v(plan, field):
    return plan.get(field).value, plan.get(field).source


# ---- 1. bash arrays reach the command's flags ---------------------------------------------------------------------

_ARRAY_SH = '''
model=${MODEL:-org/base-7b}
seq=${SEQ:-2}
shard=${SHARD:-"1"}
cmd="torchrun --nproc-per-node=4 -m pkg.train"
args=(
    --model_name_or_path $model   # the checkpoint
    --run_name "a run"
    --per_device_train_batch_size $seq

    --bf16
)
if [ $shard -ne 0 ]; then
    args+=( --fsdp "full_shard auto_wrap" )
fi
if [ $shard -eq 0 ]; then
    args+=( --deepspeed ds.json )
fi
args+=( --gradient_checkpointing )
${cmd} "${args[@]}"
'''


def test_quoted_array_words_appends_and_comments_reach_the_command(tmp_path):
    _write(tmp_path, {"run.sh": _ARRAY_SH})
    (launch,) = launches(tmp_path / "run.sh", "run.sh")
    assert launch.module == "pkg.train"
    assert launch.argv == ("--model_name_or_path", "org/base-7b", "--run_name", "a run", "--per_device_train_batch_size",
                           "2", "--bf16", "--fsdp", "full_shard auto_wrap", "--gradient_checkpointing")


def test_an_unquoted_array_is_still_split_into_words(tmp_path):
    _write(tmp_path, {"run.sh": 'a=(--lr 1 --bf16)\nb=(x "y z")\npython train.py ${a[@]} ${b[@]}\n'})
    (launch,) = launches(tmp_path / "run.sh", "run.sh")
    assert launch.argv == ("--lr", "1", "--bf16", "x", "y", "z")


# ---- 2. `python -m pkg.mod` imports its package from the folder it runs in -----------------------------------------

_FLASH_MODEL = '''
import torch
from torch import nn
from transformers.modeling_utils import PreTrainedModel
from flash_attn import flash_attn_kvpacked_func, flash_attn_varlen_kvpacked_func


class LlamaAttention(nn.Module):
    def forward(self, q, kv, lengths=None):
        fn = flash_attn_varlen_kvpacked_func if lengths is not None else flash_attn_kvpacked_func
        return fn(q, kv, causal=True)


class LlamaPreTrainedModel(PreTrainedModel):
    pass


class LlamaForCausalLM(LlamaPreTrainedModel):
    pass
'''

_MODULE_TRAIN = '''
from dataclasses import dataclass, field
from typing import Optional
from transformers import HfArgumentParser, Trainer, TrainingArguments
from pkg.modeling import LlamaForCausalLM


@dataclass
class ScriptArguments:
    model_name_or_path: Optional[str] = field(default=None)


def main():
    script_args, training_args = HfArgumentParser((ScriptArguments, TrainingArguments)).parse_args_into_dataclasses()
    model = LlamaForCausalLM.from_pretrained(script_args.model_name_or_path)
    Trainer(model=model, args=training_args).train()


if __name__ == "__main__":
    main()
'''


def test_a_module_launch_reads_its_package_without_a_checkout_marker(tmp_path, monkeypatch):
    # an archive of a checkout: no .git, no pyproject.toml; `torchrun -m pkg.train` from its top
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/train.py": _MODULE_TRAIN, "pkg/modeling.py": _FLASH_MODEL})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("torchrun --nproc_per_node 2 -m pkg.train --model_name_or_path org/m --output_dir o")
    assert _v(plan, "model_id") == ("org/m", "command-line")
    # the kernels are handed on as values (`fn = a if x else b`), not called by name: still the model's attention
    assert _v(plan, "attn_implementation") == ("flash_attention_2", "constant")


def test_a_flash_attn_kernel_only_imported_or_in_a_comment_is_not_the_attention(tmp_path, monkeypatch):
    model = _FLASH_MODEL.replace("        fn = flash_attn_varlen_kvpacked_func if lengths is not None else "
                                 "flash_attn_kvpacked_func\n        return fn(q, kv, causal=True)",
                                 "        # flash_attn_func(q, k, v) would be faster\n        return q @ kv")
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/train.py": _MODULE_TRAIN, "pkg/modeling.py": model})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("torchrun --nproc_per_node 2 -m pkg.train --model_name_or_path org/m --output_dir o")
    assert plan.get("attn_implementation").source == "library-default"


# ---- 3. an attention kernel the pinned library does not have does not run ----------------------------------------

_GUARDED_MODEL = '''
import math
import torch
from transformers import PreTrainedModel


class CoreAttention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        major = int(torch.__version__.split(".")[0])
        if major >= 2:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, mask)
        scores = torch.baddbmm(torch.empty(1), q, k.transpose(1, 2), beta=0.0, alpha=1 / math.sqrt(q.shape[-1]))
        return torch.softmax(scores, -1) @ v


class MyGLMPreTrainedModel(PreTrainedModel):
    pass


class MyGLMForConditionalGeneration(MyGLMPreTrainedModel):
    pass
'''

_GUARDED_TRAIN = '''
import argparse
from transformers import Trainer, TrainingArguments
from glm.modeling_glm import MyGLMForConditionalGeneration

p = argparse.ArgumentParser()
p.add_argument("--model_name_or_path", default="my-glm-6b")
args = p.parse_args()
model = MyGLMForConditionalGeneration.from_pretrained(args.model_name_or_path)
Trainer(model=model, args=TrainingArguments(output_dir="o")).train()
'''


def _guarded(tmp_path, monkeypatch, pin: str):
    _write(tmp_path, {"glm/__init__.py": "", "glm/modeling_glm.py": _GUARDED_MODEL, "train.py": _GUARDED_TRAIN,
                      "requirements.txt": f"torch{pin}\ntransformers==4.33.0\n"})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("python train.py")
    return plan


def test_sdpa_behind_a_torch_version_test_under_a_torch_1_pin_is_the_files_own_attention(tmp_path, monkeypatch):
    plan = _guarded(tmp_path, monkeypatch, "==1.13.0+cu116")
    assert _v(plan, "attn_implementation") == ("eager", "constant")
    assert any("torch >=2.0" in c for c in plan.get("attn_implementation").chain)


def test_sdpa_under_a_torch_2_pin_is_sdpa(tmp_path, monkeypatch):
    plan = _guarded(tmp_path, monkeypatch, "==2.1.2")
    assert _v(plan, "attn_implementation") == ("sdpa", "constant")


# ---- 4. a recipe's script that hard-codes its model's load arguments ----------------------------------------------

_RECIPE = '''
model_name_or_path: org/sft-8b
bf16: true
per_device_train_batch_size: 1
gradient_accumulation_steps: 16
gradient_checkpointing: true
max_length: 2048
max_prompt_length: 1024
beta: 0.1
'''

_DPO_SCRIPT = '''
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from alignment import H4ArgumentParser
from trl import DPOConfig, DPOTrainer, ModelConfig

if __name__ == "__main__":
    parser = H4ArgumentParser((DPOConfig, ModelConfig))
    training_args, model_config = parser.parse()
    model = AutoModelForCausalLM.from_pretrained(
        model_config.model_name_or_path,
        LOAD_KWARGS
    )
    tok = AutoTokenizer.from_pretrained(model_config.model_name_or_path)
    DPOTrainer(model, None, args=training_args, tokenizer=tok).train()
'''


def _recipe_plan(tmp_path, monkeypatch, load_kwargs: str):
    _write(tmp_path, {"cfg/recipe.yaml": _RECIPE, "run_dpo.py": _DPO_SCRIPT.replace("LOAD_KWARGS", load_kwargs)})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("accelerate launch run_dpo.py cfg/recipe.yaml")
    return plan


def test_a_recipe_scripts_constant_load_arguments_are_what_loads(tmp_path, monkeypatch):
    plan = _recipe_plan(tmp_path, monkeypatch, 'attn_implementation="flash_attention_2", torch_dtype=torch.float16,')
    assert plan.get("model_id").value == "org/sft-8b" and plan.get("grad_accum").value == 16
    assert _v(plan, "torch_dtype") == ("fp16", "literal")
    assert _v(plan, "attn_implementation") == ("flash_attention_2", "literal")
    assert plan.get("precision").value == "amp-bf16"  # the recipe's bf16 still trains it


def test_a_recipe_scripts_load_arguments_from_its_parsed_config_leave_the_recipe_reading(tmp_path, monkeypatch):
    plan = _recipe_plan(tmp_path, monkeypatch, "torch_dtype=model_config.torch_dtype, "
                                               "attn_implementation=model_config.attn_implementation,")
    assert plan.get("torch_dtype").source == "library-default"
    assert plan.get("attn_implementation").source == "library-default"


# ---- 5. the attention a model config carries into from_pretrained(config=...) -------------------------------------

_CONFIG_SCRIPT = '''
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

mid = "org/base-1b"
SETUP
model = AutoModelForCausalLM.from_pretrained(mid, config=config)
Trainer(model=model, args=TrainingArguments(output_dir="o")).train()
'''


def _config_plan(tmp_path, monkeypatch, setup: str):
    _write(tmp_path, {"train.py": _CONFIG_SCRIPT.replace("SETUP", setup)})
    monkeypatch.chdir(tmp_path)
    (plan,) = _plans("python train.py")
    return plan


def test_a_configs_attn_implementation_argument_reaches_the_model(tmp_path, monkeypatch):
    plan = _config_plan(tmp_path, monkeypatch, 'config = AutoConfig.from_pretrained(mid, attn_implementation="eager")')
    assert _v(plan, "attn_implementation") == ("eager", "constant")


def test_an_attn_implementation_set_on_the_config_reaches_the_model(tmp_path, monkeypatch):
    plan = _config_plan(tmp_path, monkeypatch, 'config = AutoConfig.from_pretrained(mid)\n'
                                               'config._attn_implementation = "flash_attention_2"')
    assert _v(plan, "attn_implementation") == ("flash_attention_2", "constant")


def test_a_config_that_carries_no_attention_leaves_the_library_default(tmp_path, monkeypatch):
    plan = _config_plan(tmp_path, monkeypatch, 'config = AutoConfig.from_pretrained(mid)\nconfig.use_cache = False')
    assert plan.get("attn_implementation").source == "library-default"
