"""What library calls mean (issue #27, library semantics): each test is a tiny made-up checkout in the
shape real training code has, read as its launch command reads it. Library facts come from data with
version ranges (src/memlint/data/library_api.json, library_defaults.json), so the tests pin versions."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from memlint.extract import extract_targets
from memlint.extract.launch import command_target, tokens
from memlint.library.versions import pinned_versions
import pytest
from functools import partial
from checkouts import git_commit, write_checkout
from memlint.extract.shell import command_targets


_write = partial(write_checkout, dedent=True)


def _plan(root: Path, command: str, monkeypatch):
    monkeypatch.chdir(root)
    [plan] = extract_targets([command_target(tokens(command), root)])
    return plan


def _notebook(cells: list[str]) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                  "source": textwrap.dedent(c).lstrip("\n")} for c in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


# ---- 1. hand-made quantization ------------------------------------------------------------------------

_REPLACE = '''
    import torch
    import bitsandbytes as bnb
    from torch import nn
    from transformers import AutoModelForCausalLM
    from peft import LoraConfig, get_peft_model

    def replace_linear(model, linear_replacement, skip_modules=("lm_head",), **kwargs):
        for name, module in model.named_children():
            if len(list(module.children())) > 0:
                replace_linear(module, linear_replacement, skip_modules, **kwargs)
            if isinstance(module, nn.Linear) and name not in skip_modules:
                if issubclass(linear_replacement, bnb.nn.Linear4bit):
                    model._modules[name] = linear_replacement(module.in_features, module.out_features, **kwargs)
        return model

    model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", torch_dtype=torch.bfloat16)
    {quantize}
    model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for batch in range(3):
        loss = model(**batch).loss
        loss.backward()
        opt.step()
'''


def test_linears_replaced_by_bitsandbytes_4bit_in_a_helper_make_a_4bit_base_and_qlora(tmp_path, monkeypatch):
    quantize = 'model.model = replace_linear(model.model, bnb.nn.Linear4bit, compute_dtype=torch.bfloat16, quant_type="nf4")'
    root = _write(tmp_path, {"train.py": _REPLACE.replace("{quantize}", quantize)})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("quant_bits").value == 4 and plan.get("quant_bits").source == "literal"
    assert "bitsandbytes" in plan.get("quant_bits").chain[0]
    assert plan.get("method").value == "qlora"
    assert plan.get("quant_type").value == "nf4"
    assert plan.get("compute_dtype").value == "bf16"


def test_a_loop_that_sets_linear4bit_modules_quantizes_with_the_class_defaults(tmp_path, monkeypatch):
    quantize = '''for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear):
            parent = model.get_submodule(name.rsplit(".", 1)[0])
            setattr(parent, name.rsplit(".", 1)[-1], bnb.nn.Linear4bit(module.in_features, module.out_features))'''
    root = _write(tmp_path, {"train.py": _REPLACE.replace("    {quantize}", textwrap.indent(quantize, "    "))})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("quant_bits").value == 4
    assert plan.get("method").value == "qlora"
    # bitsandbytes' Linear4bit defaults: quant_type="fp4", compress_statistics=True (double quantization)
    assert (plan.get("quant_type").value, plan.get("quant_type").source) == ("fp4", "library-default")
    assert plan.get("double_quant").value is True


def test_linear8bitlt_keeping_fp16_weights_by_default_is_not_a_quantized_base(tmp_path, monkeypatch):
    kept = _REPLACE.replace("{quantize}", "model.model = replace_linear(model.model, bnb.nn.Linear8bitLt)")
    root = _write(tmp_path, {"train.py": kept.replace("bnb.nn.Linear4bit):", "bnb.nn.Linear8bitLt):")})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("quant_bits").value is None
    assert plan.get("method").value == "lora"
    int8 = _REPLACE.replace("{quantize}", "model.model = replace_linear(model.model, bnb.nn.Linear8bitLt, has_fp16_weights=False)")
    (tmp_path / "train.py").write_text(textwrap.dedent(int8).lstrip("\n"))
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("quant_bits").value == 8


def test_a_class_check_on_linear4bit_alone_quantizes_nothing(tmp_path, monkeypatch):
    quantize = 'print(issubclass(nn.Linear, bnb.nn.Linear4bit))'
    root = _write(tmp_path, {"train.py": _REPLACE.replace("{quantize}", quantize)})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("quant_bits").value is None
    assert plan.get("method").value == "lora"


# ---- 2. a model built from the checkout ------------------------------------------------------------------

_GPT = '''
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.qkv = nn.Linear(cfg["emb_dim"], 3 * cfg["emb_dim"], bias=cfg["qkv_bias"])
            self.proj = nn.Linear(cfg["emb_dim"], cfg["emb_dim"])
            self.fc = nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"])
            self.out = nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"])
            self.norm1 = nn.LayerNorm(cfg["emb_dim"])
            self.norm2 = nn.LayerNorm(cfg["emb_dim"])


    class GPTModel(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
            self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
            self.trf_blocks = nn.Sequential(*[Block(cfg) for _ in range(cfg["n_layers"])])
            self.final_norm = nn.LayerNorm(cfg["emb_dim"])
            self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)
'''

_GPT_TRAIN = '''
    import torch
    from model import GPTModel

    BASE_CONFIG = {"vocab_size": 50257, "context_length": 1024, "drop_rate": 0.0, "qkv_bias": True}
    model_configs = {
        "gpt2-small (124M)": {"emb_dim": 768, "n_layers": 12, "n_heads": 12},
        "gpt2-medium (355M)": {"emb_dim": 1024, "n_layers": 24, "n_heads": 16},
    }
    CHOOSE_MODEL = "gpt2-medium (355M)"
    BASE_CONFIG.update(model_configs[CHOOSE_MODEL])
    model = GPTModel(BASE_CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    for input_batch, target_batch in range(10):
        loss = torch.nn.functional.cross_entropy(model(input_batch).flatten(0, 1), target_batch.flatten())
        loss.backward()
        optimizer.step()
'''


def test_a_gpt_built_from_a_config_dict_is_sized_and_named_by_the_catalogued_shape(tmp_path, monkeypatch):
    root = _write(tmp_path, {"model.py": _GPT, "train.py": _GPT_TRAIN})
    plan = _plan(root, "python train.py", monkeypatch)
    mid = plan.get("model_id")
    assert mid.value == "gpt2-medium"  # emb_dim / n_layers / n_heads / context_length spellings, gpt2-medium's shape
    assert dict(mid.shape)["n_embd"] == 1024 and dict(mid.shape)["tie_word_embeddings"] is False
    assert any("openai-community/gpt2-medium" in c for c in mid.chain)
    # a shape no catalogued checkpoint has keeps the script's own description
    odd = _GPT_TRAIN.replace('"n_layers": 24', '"n_layers": 23')
    (tmp_path / "train.py").write_text(textwrap.dedent(odd).lstrip("\n"))
    mid = _plan(root, "python train.py", monkeypatch).get("model_id")
    assert mid.value.startswith("model.GPTModel(") and dict(mid.shape)["n_layer"] == 23


_LLAMA_1B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 5461,
             "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 24, "vocab_size": 32000,
             "max_position_embeddings": 1024}


def test_a_transformers_class_built_from_a_local_config_json_is_that_config(tmp_path, monkeypatch):
    src = '''
        import torch
        from transformers import AutoConfig, LlamaForCausalLM
        config = AutoConfig.from_pretrained("configs/llama_1b.json")
        model = LlamaForCausalLM(config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for batch in range(10):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
    '''
    root = _write(tmp_path, {"train.py": src, "configs/llama_1b.json": json.dumps(_LLAMA_1B)})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("model_id").value == "configs/llama_1b.json"
    from memlint.catalog import resolve

    monkeypatch.chdir(root)
    assert resolve("configs/llama_1b.json").params > 1_000_000_000  # counted from the checkout's own config


_MODELING = '''
    import torch
    from torch import nn
    from transformers.modeling_utils import PreTrainedModel
    try:
        from flash_attn.flash_attn_interface import flash_attn_unpadded_func
    except ImportError:
        from flash_attn.flash_attn_interface import flash_attn_varlen_func as flash_attn_unpadded_func


    class LlamaPreTrainedModel(PreTrainedModel):
        pass


    class LlamaAttention(nn.Module):
        def forward(self, q, k, v, cu):
            return flash_attn_unpadded_func(q, k, v, cu, cu, 1, 1, 0.0)


    class LlamaForCausalLM(LlamaPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
'''

_MAIN = '''
    import torch
    import transformers
    from transformers import Trainer, TrainingArguments

    def train():
        from modeling_llama import LlamaForCausalLM
        model = LlamaForCausalLM.from_pretrained("org/some-llama-7b", torch_dtype=torch.bfloat16, trust_remote_code=True)
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=1)).train()

    if __name__ == "__main__":
        train()
'''


def test_a_checkout_subclass_of_a_transformers_model_loads_the_hub_id_and_runs_its_own_attention(tmp_path, monkeypatch):
    root = _write(tmp_path, {"modeling_llama.py": _MODELING, "main.py": _MAIN})
    plan = _plan(root, "python main.py", monkeypatch)
    assert plan.get("model_id").value == "org/some-llama-7b"
    assert plan.get("torch_dtype").value == "bf16"
    attn = plan.get("attn_implementation")
    assert attn.value == "flash_attention_2" and "flash_attn_unpadded_func" in attn.chain[0]
    # a copy of transformers' own modelling file picks the kernel by config: the library default applies
    by_config = _MODELING.replace("pass\n", "_supports_flash_attn_2 = True\n    # config._attn_implementation\n", 1)
    (tmp_path / "modeling_llama.py").write_text(textwrap.dedent(by_config).lstrip("\n"))
    plan = _plan(root, "python main.py", monkeypatch)
    assert plan.get("attn_implementation").value != "flash_attention_2"


# ---- 3. trainer subclasses of the checkout ------------------------------------------------------------------

def test_a_recipe_run_by_a_script_whose_trainer_subclasses_trainer_is_a_trainer(tmp_path, monkeypatch):
    # the recipe's `beta` reads as DPO; the script builds `SelfPlayTrainer(Trainer)`, whatever loss it computes
    script = '''
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        class SelfPlayTrainer(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False):
                chosen = model(inputs["chosen_input_ids"]).logits
                rejected = model(inputs["rejected_input_ids"]).logits
                return -(chosen - rejected).sigmoid().log().mean()

        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        SelfPlayTrainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
    '''
    recipe = "model_name_or_path: Qwen/Qwen2.5-0.5B\nbeta: 0.1\nmax_length: 1024\nper_device_train_batch_size: 8\n"
    root = _write(tmp_path, {"run.py": script, "config.yaml": recipe})
    plan = _plan(root, "accelerate launch run.py config.yaml", monkeypatch)
    t = plan.get("trainer")
    assert t.value == "Trainer" and "SelfPlayTrainer, a subclass of Trainer" in t.chain[0]
    assert "the recipe alone reads as DPOTrainer" in t.chain[0]


# ---- 4. accelerate / DeepSpeed rewrites ---------------------------------------------------------------------

_DS_OFFLOAD = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
               "train_micro_batch_size_per_gpu": "auto"}

_HF_MAIN = '''
    from dataclasses import dataclass, field
    import transformers
    from transformers import AutoModelForCausalLM, Trainer

    @dataclass
    class TrainingArguments(transformers.TrainingArguments):
        optim: str = field(default="adamw_torch")

    parser = transformers.HfArgumentParser((TrainingArguments,))
    (training_args,) = parser.parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
    Trainer(model=model, args=training_args).train()
'''


def test_the_trainer_under_a_deepspeed_config_offloading_the_optimizer_steps_deepspeeds_cpu_adam(tmp_path, monkeypatch):
    root = _write(tmp_path, {"main.py": _HF_MAIN, "ds/z3.json": json.dumps(_DS_OFFLOAD),
                             "requirements.txt": "transformers==4.33.0\naccelerate==0.21.0\n"})
    cmd = "deepspeed --num_gpus 8 main.py --output_dir o --per_device_train_batch_size 1 --deepspeed ds/z3.json"
    plan = _plan(root, cmd, monkeypatch)
    opt = plan.get("optimizer")
    assert opt.value == "deepspeed_adam"
    assert "DeepSpeedCPUAdam" in opt.chain[-1] and "transformers 4.33.0" in opt.chain[-1]
    assert plan.get("distributed").value == "zero3"
    # before transformers 4.30 the Trainer handed its own optimizer to deepspeed.initialize, unchanged
    (tmp_path / "requirements.txt").write_text("transformers==4.29.2\naccelerate==0.21.0\n")
    assert _plan(root, cmd, monkeypatch).get("optimizer").value == "adamw_torch"
    # zero_force_ds_cpu_optimizer: false keeps the client optimizer
    (tmp_path / "requirements.txt").write_text("transformers==4.33.0\naccelerate==0.21.0\n")
    (tmp_path / "ds/z3.json").write_text(json.dumps({**_DS_OFFLOAD, "zero_force_ds_cpu_optimizer": False}))
    assert _plan(root, cmd, monkeypatch).get("optimizer").value == "adamw_torch"


def test_an_accelerate_loop_under_a_config_offloading_the_optimizer_steps_cpu_adam(tmp_path, monkeypatch):
    loop = '''
        import torch
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM
        accelerator = Accelerator(mixed_precision="bf16")
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        model, optimizer = accelerator.prepare(model, optimizer)
        for batch in range(10):
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
    '''
    cfg = ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
           "  offload_optimizer_device: {dev}\n  offload_param_device: none\n  zero_stage: 2\nnum_processes: 8\n")
    root = _write(tmp_path, {"train.py": loop, "ds.yaml": cfg.format(dev="cpu"), "requirements.txt": "accelerate==0.34.2\n"})
    plan = _plan(root, "accelerate launch --config_file ds.yaml train.py", monkeypatch)
    assert plan.get("optimizer").value == "deepspeed_adam"
    assert plan.get("optimizer").chain[0].startswith("torch.optim.AdamW")
    (tmp_path / "ds.yaml").write_text(cfg.format(dev="none"))
    assert _plan(root, "accelerate launch --config_file ds.yaml train.py", monkeypatch).get("optimizer").value == "adamw_torch"


def test_a_deepspeed_json_not_in_the_checkout_leaves_the_optimizer_unknown(tmp_path, monkeypatch):
    root = _write(tmp_path, {"main.py": _HF_MAIN})
    plan = _plan(root, "deepspeed main.py --output_dir o --deepspeed configs/ds.json", monkeypatch)
    opt = plan.get("optimizer")
    assert opt.value is None and opt.source == "unknown" and "configs/ds.json" in opt.chain[0]
    assert plan.get("distributed").value == "deepspeed"  # DeepSpeed runs; its stage is unknown


# ---- 5. every visible GPU ---------------------------------------------------------------------------------------

def test_device_map_auto_in_a_notebook_spreads_over_every_visible_gpu(tmp_path, monkeypatch):
    nb = _notebook(['''
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", device_map="auto")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
    '''])
    root = _write(tmp_path, {"ft.ipynb": nb})
    monkeypatch.chdir(root)
    from memlint.extract import extract_paths

    [plan] = extract_paths(["ft.ipynb"])
    g = plan.get("num_gpus")
    assert g.value is None and g.source == "unknown" and 'device_map="auto"' in g.chain[0]
    assert any("--assume num_gpus=N" in n for n in plan.notes)
    # device_map={"": 0}: one GPU, the notebook's one process
    (tmp_path / "ft.ipynb").write_text(nb.replace('device_map=\\"auto\\"', 'device_map={\\"\\": 0}'))
    [plan] = extract_paths(["ft.ipynb"])
    assert plan.get("num_gpus").value == 1


_SPAWN = '''
    import torch
    import torch.multiprocessing as mp
    from transformers import AutoModelForCausalLM

    def worker(rank, world_size):
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for batch in range(10):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()

    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        mp.spawn(worker, args=(world_size,), nprocs=world_size, join=True)
'''


def test_mp_spawn_over_device_count_is_every_visible_gpu_or_the_ones_the_launch_shows(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _SPAWN})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("num_gpus").value is None and plan.get("num_gpus").source == "unknown"
    plan = _plan(root, "CUDA_VISIBLE_DEVICES=4,5,6 python train.py", monkeypatch)
    assert plan.get("num_gpus").value == 3


def test_data_parallel_replicates_on_every_visible_gpu_or_the_device_ids_given(tmp_path, monkeypatch):
    src = '''
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        model = torch.nn.DataParallel(model{ids})
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for batch in range(10):
            loss = model(**batch).loss.mean()
            loss.backward()
            optimizer.step()
    '''
    root = _write(tmp_path, {"a.py": src.replace("{ids}", ""), "b.py": src.replace("{ids}", ", device_ids=[0, 1]")})
    a = _plan(root, "python a.py", monkeypatch)
    assert a.get("num_gpus").value is None and "DataParallel" in a.get("num_gpus").chain[0]
    assert a.get("model_id").value == "Qwen/Qwen2.5-0.5B"  # DataParallel trains the model it wraps
    assert _plan(root, "python b.py", monkeypatch).get("num_gpus").value == 2


# ---- 7. library defaults at the version the checkout (or the notebook) installs --------------------------------

_SFT_NB = ['''!pip install -q accelerate==0.21.0 peft==0.4.0 bitsandbytes==0.40.2 transformers==4.31.0 trl=={trl}''', '''
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments
    from peft import LoraConfig
    from trl import SFTTrainer
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float16)
    model = AutoModelForCausalLM.from_pretrained("NousResearch/Llama-2-7b-chat-hf", quantization_config=bnb)
    args = TrainingArguments(output_dir="./results", per_device_train_batch_size=4, optim="paged_adamw_32bit")
    trainer = SFTTrainer(model=model, train_dataset=None, peft_config=LoraConfig(r=64), dataset_text_field="text",
                         max_seq_length=None, args=args, packing=False)
    trainer.train()
''']


def test_a_notebooks_pip_install_pins_trl_whose_kbit_preparation_turns_recompute_on(tmp_path, monkeypatch):
    root = _write(tmp_path, {"ft.ipynb": _notebook([c.replace("{trl}", "0.4.7") for c in _SFT_NB])})
    monkeypatch.chdir(root)
    from memlint.extract import extract_paths

    [plan] = extract_paths(["ft.ipynb"])
    assert {p.package: p.version for p in plan.versions}["trl"] == "0.4.7"
    assert any("installed by the notebook" in p.describe() for p in plan.versions)
    gc = plan.get("gradient_checkpointing")
    assert gc.value is True and "prepare_model_for_int8_training" in gc.chain[0] and "trl 0.4.7" in gc.chain[0]
    # from trl 0.7.2 the preparation follows the training arguments' gradient_checkpointing
    (tmp_path / "ft.ipynb").write_text(_notebook([c.replace("{trl}", "0.7.4") for c in _SFT_NB]))
    [plan] = extract_paths(["ft.ipynb"])
    assert plan.get("gradient_checkpointing").value is False


_DPO = '''
    from transformers import AutoModelForCausalLM, TrainingArguments
    from trl import DPOTrainer
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
    args = TrainingArguments(output_dir="o", per_device_train_batch_size=4, gradient_checkpointing=True)
    DPOTrainer(model, args=args, train_dataset=None, beta=0.1{kw}).train()
'''


def test_dpo_trainers_own_max_length_keyword_of_older_trl_sets_the_length(tmp_path, monkeypatch):
    root = _write(tmp_path, {"a.py": _DPO.replace("{kw}", ", max_prompt_length=1024, max_length=1536"),
                             "b.py": _DPO.replace("{kw}", "")})
    ml = _plan(root, "python a.py", monkeypatch).get("max_length")
    assert ml.value == 1536 and "DPOTrainer(max_length=...)" in ml.chain[-1]
    # left out with TrainingArguments: DPO's own default at the TRL version read
    for trl, want in (("0.11.4", 512), ("0.13.0", None), ("0.14.0", 1024)):
        with pinned_versions({"trl": trl}):
            got = _plan(root, "python b.py", monkeypatch).get("max_length")
        assert got.value == want, trl
        if want is None:
            assert "no truncation" in got.chain[0]


# ---- 6. placeholders are no model ids ----------------------------------------------------------------------------

def test_placeholder_model_paths_are_unknown_with_a_note_saying_what_to_assume(tmp_path, monkeypatch):
    from memlint.extract.placeholders import is_placeholder

    for text in ("<your_model_path>", "path/to/model", "{path_to_your_model}", "/path/to/llama", "YOUR_MODEL", "xxx",
                 "/MODEL_PATH/", "./models/your-model", "$MODEL_KEY", "${BASE_MODEL}", "/data/$model",
                 "/BASE/MODEL/PATH", "/POLICY/BASE/MODEL/PATH", "DATA/PATH", "MODEL-DIR", "/data/CKPT-FILE",
                 "path2llama", "/data/path2model"):
        assert is_placeholder(text), text
    for text in ("meta-llama/Llama-2-7b-hf", "gpt2", "~/model_weights/llama-7b", "/data/LLM_MODELS/qwen", "THUDM/chatglm3-6b",
                 "$HOME/models/llama-7b", "BAAI/bge-large-en", "GPT2", "/MODELS/llama-7b", "GPT-J",
                 "./LLAMA-2-7B", "EleutherAI/GPT-NEOX-20B", "/DATA/MODELS/LLAMA2_7B", "BAAI/AQUILA", "N/A",
                 "pathology-model", "/data/path22/model"):
        assert not is_placeholder(text), text
    src = '''
        import argparse
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        p = argparse.ArgumentParser()
        p.add_argument("--model_name_or_path", default="{default}")
        args = p.parse_args()
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=1)).train()
    '''
    root = _write(tmp_path, {"train.py": src.replace("{default}", "<your_model_path>"),
                             "run.sh": "MODEL=/path/to/your/model\npython train.py --model_name_or_path $MODEL\n"})
    plan = _plan(root, "python train.py", monkeypatch)
    mid = plan.get("model_id")
    assert mid.value == "<your_model_path>" and mid.source == "placeholder" and not mid.known
    assert "placeholder" in mid.chain[-1]
    assert any("--assume model_id=" in n and "placeholder" in n for n in plan.notes)
    from memlint.extract.shell import launcher_targets

    [target] = launcher_targets(root / "run.sh", "run.sh", [root])
    [sh] = extract_targets([target])
    assert not sh.get("model_id").known and "placeholder" in sh.get("model_id").chain[-1]
    from memlint.estimate.from_plan import setup_from_plan

    planned = setup_from_plan(plan)  # nothing is sized from a placeholder: the model is what is missing
    assert planned.setup is None and "model_id" in planned.missing
    # a placeholder folder whose name is a checkpoint's stays that checkpoint (sized by the folder's name)
    kept = _plan(root, "python train.py --model_name_or_path /path/to/models/Qwen2.5-7B-Instruct", monkeypatch)
    assert kept.get("model_id").value == "/path/to/models/Qwen2.5-7B-Instruct"


# ---- 8. framework rewrites at run time ------------------------------------------------------------------------------

_UNSLOTH_GRPO = '''
    from unsloth import FastLanguageModel
    from trl import GRPOConfig, GRPOTrainer
    model, tokenizer = FastLanguageModel.from_pretrained(model_name="unsloth/Qwen2.5-1.5B-Instruct", max_seq_length=1024,
                                                         load_in_4bit=True)
    model = FastLanguageModel.get_peft_model(model, r=32, lora_alpha=64, use_gradient_checkpointing="unsloth")
    args = GRPOConfig(output_dir="outputs", per_device_train_batch_size={batch}, gradient_accumulation_steps=1,
                      num_generations=4, max_prompt_length=256, max_completion_length=768, optim="adamw_8bit")
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[len], args=args, train_dataset=None)
    trainer.train()
'''


def test_unsloths_grpo_config_sets_the_batch_to_the_number_of_generations(tmp_path, monkeypatch):
    root = _write(tmp_path, {"a.py": _UNSLOTH_GRPO.replace("{batch}", "1"), "b.py": _UNSLOTH_GRPO.replace("{batch}", "8")})
    plan = _plan(root, "python a.py", monkeypatch)
    b = plan.get("per_device_batch")
    assert b.value == 4 and "num_generations=4" in b.chain[-1] and "unsloth" in b.chain[-1]
    assert plan.get("trainer").value == "GRPOTrainer"  # a GRPO run over an unsloth model is still GRPO's
    assert plan.get("max_length").value == 1024
    # a batch that is a multiple of num_generations is kept
    assert _plan(root, "python b.py", monkeypatch).get("per_device_batch").value == 8
    # TRL's own GRPOConfig over a transformers model rewrites nothing
    plain = """
        from transformers import AutoModelForCausalLM
        from trl import GRPOConfig, GRPOTrainer
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-1.5B-Instruct")
        args = GRPOConfig(output_dir="outputs", per_device_train_batch_size=1, num_generations=4)
        GRPOTrainer(model=model, reward_funcs=[len], args=args, train_dataset=None).train()
    """
    (tmp_path / "c.py").write_text(textwrap.dedent(plain).lstrip("\n"))
    assert _plan(root, "python c.py", monkeypatch).get("per_device_batch").value == 1
    # under TRL 0.14, which counts prompts (each sampled num_generations times), unsloth rewrites nothing: 1 prompt × 4
    (tmp_path / "requirements.txt").write_text("trl==0.14.0\n")
    b = _plan(root, "python a.py", monkeypatch).get("per_device_batch")
    assert b.value == 4 and "counts prompts" in b.chain[-1]


def test_a_trainer_subclass_whose_arguments_carry_num_generations_runs_grpos_step(tmp_path, monkeypatch):
    # a library's own GRPO trainer on transformers' Trainer (not TRL's), with its own GRPOConfig
    lib = '''
        from dataclasses import dataclass, field
        from transformers import Trainer, TrainingArguments

        @dataclass
        class GRPOConfig(TrainingArguments):
            num_generations: int = field(default=8)
            max_prompt_length: int = field(default=512)
            max_completion_length: int = field(default=1024)

        class {name}(Trainer):
            def _prepare_inputs(self, inputs):
                return inputs

        def grpo_defaults(run_name):
            return GRPOConfig(output_dir=run_name, per_device_train_batch_size=8, gradient_checkpointing=True)
    '''
    script = '''
        from transformers import AutoModelForCausalLM
        import mylib
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        args = mylib.grpo_defaults("run")
        args.num_generations = 16
        mylib.{name}(model=model, args=args).train()
    '''
    root = _write(tmp_path, {"mylib/__init__.py": lib.replace("{name}", "RolloutTrainer"),
                             "train.py": script.replace("{name}", "RolloutTrainer")})
    plan = _plan(root, "python train.py", monkeypatch)
    t = plan.get("trainer")
    assert t.value == "GRPOTrainer" and "num_generations" in t.chain[0]  # read from its arguments, not its name
    assert plan.get("max_length").value == 1536  # max_prompt_length + max_completion_length
    # without num_generations a subclass named GRPOTrainer is still a Trainer
    def without(text: str, word: str) -> str:
        return "\n".join(line for line in textwrap.dedent(text).splitlines() if word not in line).lstrip("\n") + "\n"

    (tmp_path / "mylib/__init__.py").write_text(without(lib.replace("{name}", "GRPOTrainer"), "num_generations"))
    (tmp_path / "train.py").write_text(without(script.replace("{name}", "GRPOTrainer"), "num_generations"))
    assert _plan(root, "python train.py", monkeypatch).get("trainer").value == "Trainer"


def test_a_trainer_copy_given_trls_grpo_config_runs_grpos_step(tmp_path, monkeypatch):
    """A repository's copy of TRL's GRPO trainer on transformers' Trainer, given TRL's own GRPOConfig that the script
    leaves num_generations out of: TRL's class has the field (at its default), so the step is GRPO's."""
    copy = '''
        from transformers import Trainer

        class VisionGRPOTrainer(Trainer):
            def __init__(self, model, reward_funcs, args=None, train_dataset=None, **kwargs):
                super().__init__(model=model, args=args, train_dataset=train_dataset)
    '''
    script = '''
        from trl import {args_class}
        from copied import VisionGRPOTrainer
        args = {args_class}(output_dir="o", per_device_train_batch_size=2, max_prompt_length=256,
                            max_completion_length=256)
        VisionGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[len], args=args).train()
    '''
    root = _write(tmp_path, {"copied.py": copy, "train.py": script.replace("{args_class}", "GRPOConfig")})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("trainer").value == "GRPOTrainer" and "num_generations" in " ".join(plan.get("trainer").chain)
    assert plan.get("max_length").value == 512
    # TRL's SFTConfig has no num_generations: the copy given it is a Trainer
    (tmp_path / "train.py").write_text(textwrap.dedent(script.replace("{args_class}", "SFTConfig")).lstrip("\n"))
    assert _plan(root, "python train.py", monkeypatch).get("trainer").value == "Trainer"


def test_a_model_id_given_to_a_trainer_subclass_of_transformers_trainer_is_loaded_by_its_own_init(tmp_path, monkeypatch):
    """transformers' Trainer takes only a model object: a subclass called with a model id loads it in its own
    __init__ (a copied GRPO trainer with its own attn_implementation= keyword), which is what runs."""
    copy = '''
        from transformers import AutoModelForCausalLM, Trainer

        class VisionGRPOTrainer(Trainer):
            def __init__(self, model, reward_funcs, args=None, attn_implementation="sdpa", **kwargs):
                init = args.model_init_kwargs or {}
                init["attn_implementation"] = attn_implementation
                if isinstance(model, str):
                    model = AutoModelForCausalLM.from_pretrained(model, **init)
                super().__init__(model=model, args=args)
    '''
    script = '''
        from trl import GRPOConfig
        from copied import VisionGRPOTrainer
        args = GRPOConfig(output_dir="o", per_device_train_batch_size=2)
        VisionGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[len], args=args,
                          attn_implementation="flash_attention_2").train()
    '''
    root = _write(tmp_path, {"copied.py": copy, "train.py": script})
    plan = _plan(root, "python train.py", monkeypatch)
    assert (plan.get("trainer").value, plan.get("model_id").value, plan.get("attn_implementation").value) == (
        "GRPOTrainer", "Qwen/Qwen2.5-0.5B-Instruct", "flash_attention_2")


def test_a_known_but_unresolvable_model_id_with_an_unknown_length_still_gets_the_checkpoint_table(tmp_path, monkeypatch):
    # the checkout's LlamaForCausalLM.from_pretrained("org/some-llama-7b") names the model; memlint cannot size it offline
    root = _write(tmp_path, {"modeling_llama.py": _MODELING, "main.py": _MAIN})
    plan = _plan(root, "python main.py", monkeypatch)
    from memlint.estimate.conditional import conditional

    cond = conditional(plan)
    assert cond is not None and cond.rows  # the table of checkpoints, or the one its name stands for


def test_galores_own_optimizer_classes_in_a_checkout_are_the_trainers_galore_optims(tmp_path, monkeypatch):
    # the GaLore repository ships galore_torch itself: its classes are the library's, not the script's own code
    root = _write(tmp_path, {
        "galore_torch/__init__.py": "from .adamw import GaLoreAdamW\nfrom .adamw8bit import GaLoreAdamW8bit\n",
        "galore_torch/adamw.py": "import torch\nclass GaLoreAdamW(torch.optim.Optimizer):\n    pass\n",
        "galore_torch/adamw8bit.py": "import torch\nclass GaLoreAdamW8bit(torch.optim.Optimizer):\n    pass\n",
        "train.py": '''
            import torch
            from transformers import AutoModelForCausalLM
            from galore_torch import GaLoreAdamW, GaLoreAdamW8bit
            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
            optimizer = GaLoreAdamW8bit([{"params": list(model.parameters()), "rank": 128}], lr=1e-3)
            for batch in range(10):
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
        '''})
    assert _plan(root, "python train.py", monkeypatch).get("optimizer").value == "galore_adamw_8bit"


def test_accelerate_flags_and_a_deepspeed_plugin_offloading_the_optimizer_swap_it_too(tmp_path, monkeypatch):
    loop = '''
        import torch
        from accelerate import Accelerator, DeepSpeedPlugin
        from transformers import AutoModelForCausalLM
        accelerator = Accelerator({plugin})
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        model, optimizer = accelerator.prepare(model, optimizer)
        for batch in range(10):
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
    '''
    plugin = 'deepspeed_plugin=DeepSpeedPlugin(zero_stage=2, offload_optimizer_device="cpu")'
    root = _write(tmp_path, {"a.py": loop.replace("{plugin}", ""), "b.py": loop.replace("{plugin}", plugin)})
    flags = "accelerate launch --use_deepspeed --zero_stage 2 --offload_optimizer_device cpu --num_processes 2 a.py"
    assert _plan(root, flags, monkeypatch).get("optimizer").value == "deepspeed_adam"
    b = _plan(root, "python b.py", monkeypatch).get("optimizer")
    assert b.value == "deepspeed_adam" and "DeepSpeedPlugin(offload_optimizer_device='cpu')" in b.chain[-2]
    assert _plan(root, "python a.py", monkeypatch).get("optimizer").value == "adamw_torch"


def test_grpos_prompt_truncation_default_by_trl_version(tmp_path, monkeypatch):
    src = '''
        from transformers import AutoModelForCausalLM
        from trl import GRPOConfig, GRPOTrainer
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        args = GRPOConfig(output_dir="o", per_device_train_batch_size=8, num_generations=8, max_completion_length=1024)
        GRPOTrainer(model=model, reward_funcs=[len], args=args, train_dataset=None).train()
    '''
    root = _write(tmp_path, {"g.py": src})
    with pinned_versions({"trl": "0.19.0"}):
        assert _plan(root, "python g.py", monkeypatch).get("max_length").value == 512 + 1024
    with pinned_versions({"trl": "0.26.0"}):  # max_prompt_length deprecated to None: prompts are not truncated
        ml = _plan(root, "python g.py", monkeypatch).get("max_length")
    assert ml.value is None and "no truncation" in ml.chain[0]


def test_quantized_linears_or_data_parallel_in_a_function_the_run_never_calls_change_nothing(tmp_path, monkeypatch):
    src = '''
        import torch
        import bitsandbytes as bnb
        from transformers import AutoModelForCausalLM

        def to_4bit(module):  # a helper no code path calls
            return bnb.nn.Linear4bit(module.in_features, module.out_features)

        def multi_gpu(model):
            return torch.nn.DataParallel(model)

        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for batch in range(10):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
    '''
    plan = _plan(_write(tmp_path, {"train.py": src}), "python train.py", monkeypatch)
    assert plan.get("quant_bits").value is None and plan.get("num_gpus").value == 1


def test_a_grpo_step_with_untruncated_prompts_takes_the_scripts_own_length_cap(tmp_path, monkeypatch):
    lib = '''
        from dataclasses import dataclass, field
        from typing import Optional
        from transformers import Trainer, TrainingArguments

        @dataclass
        class GRPOConfig(TrainingArguments):
            num_generations: int = field(default=8)
            max_prompt_length: Optional[int] = field(default=None)
            max_completion_length: Optional[int] = field(default=None)
            max_seq_len: Optional[int] = field(default=None)

        class RolloutTrainer(Trainer):
            def __init__(self, model, args, **kwargs):
                self.max_seq_len = args.max_seq_len
                super().__init__(model=model, args=args, **kwargs)
    '''
    script = '''
        from transformers import AutoModelForCausalLM
        from mylib import GRPOConfig, RolloutTrainer
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        args = GRPOConfig(output_dir="o", per_device_train_batch_size=8)
        args.max_seq_len = 4096
        RolloutTrainer(model=model, args=args).train()
    '''
    root = _write(tmp_path, {"mylib/__init__.py": lib, "train.py": script})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("trainer").value == "GRPOTrainer"
    assert plan.get("max_length").value == 4096 and "max_seq_len" in plan.get("max_length").chain[-1]


def test_a_uv_lock_pins_the_checkout_and_trl_turns_recompute_on_from_0_22(tmp_path, monkeypatch):
    src = '''
        from transformers import AutoModelForCausalLM
        from trl import ORPOConfig, ORPOTrainer
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        ORPOTrainer(model=model, args=ORPOConfig(output_dir="o", per_device_train_batch_size=2), train_dataset=None).train()
    '''
    lock = '[[package]]\nname = "trl"\nversion = "{v}"\nsource = {{ registry = "https://pypi.org/simple" }}\n'
    root = _write(tmp_path, {"pyproject.toml": '[project]\nname = "x"\ndependencies = ["trl"]\n',
                             "uv.lock": lock.format(v="0.15.2"), "orpo/train.py": src})
    plan = _plan(root, "python orpo/train.py", monkeypatch)
    assert {p.package: p.version for p in plan.versions}["trl"] == "0.15.2"
    assert plan.get("gradient_checkpointing").value is False
    (tmp_path / "uv.lock").write_text(lock.format(v="0.22.0"))
    assert _plan(root, "python orpo/train.py", monkeypatch).get("gradient_checkpointing").value is True


def test_a_class_of_a_foreign_package_is_not_the_hugging_face_class_of_its_name(tmp_path, monkeypatch):
    """composer.Trainer (llm-foundry's train_from_yaml builds one) is Composer's, not transformers' Trainer: the
    trainer is never read as the Hugging Face one, while transformers' Trainer in the same shape still is."""
    src = '''
        from transformers import AutoModelForCausalLM
        from {pkg} import Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=2)).train()
    '''
    root = _write(tmp_path / "a", {"train.py": src.format(pkg="composer")})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("trainer").value != "Trainer" and plan.get("per_device_batch").value != 2
    root = _write(tmp_path / "b", {"train.py": src.format(pkg="transformers")})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("trainer").value == "Trainer" and plan.get("per_device_batch").value == 2


# ---- a per-device batch that counts prompts, by version ----------------------------------------------------------

_GRPO = '''
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
    args = GRPOConfig("out", per_device_train_batch_size=4, {GEN}max_prompt_length=128, max_completion_length=64)
    GRPOTrainer(model=model, reward_funcs=[len], args=args).train()
'''


def test_grpo_at_trl_0_14_counts_prompts_each_sampled_num_generations_times(tmp_path, monkeypatch):
    for trl, gen, want in (("0.14.0", "num_generations=6, ", 24), ("0.14.0", "", 32), ("0.15.2", "num_generations=2, ", 4)):
        root = _write(tmp_path / f"{trl}{gen[:18]}", {"requirements.txt": f"trl=={trl}\n",
                                                      "train.py": _GRPO.replace("{GEN}", gen)})
        plan = _plan(root, "python train.py", monkeypatch)
        pdb = plan.get("per_device_batch")
        assert pdb.value == want, (trl, gen, pdb)
        assert ("counts prompts" in " ".join(pdb.chain)) is (trl == "0.14.0")


# ---- an unpinned library, read at the newest release before the script's last commit ----------------------------

def test_an_unpinned_library_is_read_at_the_newest_release_before_the_scripts_last_commit(tmp_path, monkeypatch):
    import shutil

    if shutil.which("git") is None:
        pytest.skip("no git")
    from memlint.library.dated import dated_pins

    src = '''
        from transformers import AutoModelForCausalLM, TrainingArguments
        from trl import SFTTrainer
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        SFTTrainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
    '''
    old = _write(tmp_path / "old", {"train.py": src})
    git_commit(old, "2024-03-01")
    pins = {p.package: p for p in dated_pins(old / "train.py", set())}
    assert pins["trl"].version == "0.7.11" and pins["trl"].dated  # trl 0.8.0 is tagged 2024-03-19
    assert "last commit (2024-03-01)" in pins["trl"].describe()
    plan = _plan(old, "python train.py", monkeypatch)
    assert any(p.package == "trl" and p.version == "0.7.11" for p in plan.versions)
    pinned = _write(tmp_path / "pinned", {"train.py": src, "requirements.txt": "trl==0.12.0\n"})
    git_commit(pinned, "2024-03-01")
    plan = _plan(pinned, "python train.py", monkeypatch)  # a pin wins over the date
    assert [p.version for p in plan.versions if p.package == "trl"] == ["0.12.0"]
    loose = _write(tmp_path / "loose", {"train.py": src})  # no git history: nothing assumed
    assert dated_pins(loose / "train.py", set()) == ()


@pytest.mark.parametrize("date, dtype, optimizer, attention", [
    ("2023-06-01", "float32", "adamw_hf", "eager"),          # transformers 4.29: float32 loads, adamw_hf, no SDPA
    ("2024-06-01", "float32", "adamw_torch", "sdpa"),        # transformers 4.41
])
def test_an_unpinned_transformers_is_read_at_the_release_of_the_scripts_day(tmp_path, monkeypatch, date, dtype,
                                                                             optimizer, attention):
    import shutil

    if shutil.which("git") is None:
        pytest.skip("no git")
    src = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
    """
    root = _write(tmp_path, {"train.py": src})
    git_commit(root, date)
    plan = _plan(root, "python train.py", monkeypatch)
    assert (plan.get("torch_dtype").value, plan.get("optimizer").value, plan.get("attn_implementation").value) == (
        {"float32": "fp32"}.get(dtype, dtype), optimizer, attention)
    assert any(p.package == "transformers" and p.dated for p in plan.versions)


@pytest.mark.parametrize("date, cutoff", [("2024-03-01", 1024), ("2025-04-01", 2048)])
def test_a_llama_factory_run_from_flags_is_dated_by_its_launcher(tmp_path, monkeypatch, date, cutoff):
    # `python src/train_bash.py --stage sft ...` in a launcher, LLaMA-Factory not in the checkout: the launcher's date
    # picks the release (cutoff_len's default is 1024 before LLaMA-Factory 0.9.1, 2048 from it)
    import shutil

    if shutil.which("git") is None:
        pytest.skip("no git")
    run = ("python src/train_bash.py --stage sft --do_train --model_name_or_path Qwen/Qwen2.5-0.5B --finetuning_type lora "
           "--per_device_train_batch_size 2 --output_dir o\n")
    root = _write(tmp_path, {"run.sh": run})
    git_commit(root, date)
    monkeypatch.chdir(root)
    [plan] = extract_targets(command_targets(["bash", "run.sh"]))
    assert plan.get("max_length").value == cutoff
    assert any(p.package == "llamafactory" and p.dated for p in plan.versions)


def test_a_file_with_no_git_history_is_dated_by_its_modification_time_when_it_is_older_than_today(tmp_path):
    # an archive of the repository (GitHub's tarball or zip) keeps each file's commit time; a fresh file dates nothing
    import datetime
    import os

    from memlint.library.dated import dated_pins, last_change

    src = "from trl import SFTTrainer\n"
    f = _write(tmp_path / "archive", {"train.py": src}) / "train.py"
    assert dated_pins(f, set()) == ()
    when = datetime.datetime(2024, 3, 1, 12, tzinfo=datetime.timezone.utc).timestamp()
    os.utime(f, (when, when))
    last_change.cache_clear()
    pins = {p.package: p for p in dated_pins(f, set())}
    assert pins["trl"].version == "0.7.11" and "modification time (no git history) (2024-03-01)" in pins["trl"].describe()


@pytest.mark.parametrize("trl, expected", [("0.19.1", 512), ("0.21.0", 1024)])
def test_an_attribute_a_config_class_no_longer_has_is_read_by_nothing(tmp_path, monkeypatch, trl, expected):
    # SFTConfig.max_seq_length was renamed max_length (removed in TRL 0.20): set as an attribute it is ignored there
    src = '''
        from transformers import AutoModelForCausalLM
        from trl import SFTConfig, SFTTrainer
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        args = SFTConfig(output_dir="o", per_device_train_batch_size=2)
        args.max_seq_length = 512
        SFTTrainer(model=model, args=args).train()
    '''
    root = _write(tmp_path, {"train.py": src, "requirements.txt": f"trl=={trl}\n"})
    plan = _plan(root, "python train.py", monkeypatch)
    assert plan.get("max_length").value == expected
    assert any("has no max_seq_length" in n for n in plan.notes) == (expected == 1024)


def test_a_trainer_keyword_a_dated_version_lacks_is_read_a_pinned_one_is_not(tmp_path, monkeypatch):
    # DPOTrainer(max_length=...) is taken by TRL < 0.13: a version assumed from the file's date (2025) yields to the
    # keyword the script passes (it ran on a version that takes it); a pin of 0.17 rejects it
    import datetime
    import os
    import shutil

    if shutil.which("git") is None:
        pytest.skip("no git")
    src = '''
        from transformers import AutoModelForCausalLM, TrainingArguments
        from trl import DPOTrainer
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        DPOTrainer(model, None, args=TrainingArguments("o", per_device_train_batch_size=1), beta=0.1,
                   max_length=1536, max_prompt_length=1024).train()
    '''
    dated = _write(tmp_path / "dated", {"train.py": src})
    git_commit(dated, "2025-05-11")
    assert _plan(dated, "python train.py", monkeypatch).get("max_length").value == 1536
    pinned = _write(tmp_path / "pinned", {"train.py": src, "requirements.txt": "trl==0.17.0\n"})
    assert _plan(pinned, "python train.py", monkeypatch).get("max_length").value != 1536
