"""Round 3c: patterns of real training scripts (docs/realworld.md, round 3c).

Each test is a synthetic excerpt of a shape met in public scripts; the comment says where."""

from pathlib import Path

from memlint.extract import extract_file, extract_source


def _fields(src: str, *names: str) -> dict:
    plan = extract_source(src, "train.py")
    return {n: plan.fields[n].value for n in names}

_LOOP = '''import torch
from torch.optim import AdamW
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer
from accelerate import Accelerator


def training_function(config):
    accelerator = Accelerator()
    batch_size = int(config["batch_size"])
    tokenizer = AutoTokenizer.from_pretrained("gpt2")
    model = AutoModelForCausalLM.from_pretrained("gpt2")
    loader = DataLoader([], batch_size=batch_size)
    optimizer = AdamW(model.parameters(), lr=config["lr"])
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()


def main():
    config = {"lr": 2e-5, "batch_size": 16}
    training_function(config)


if __name__ == "__main__":
    main()
'''


def test_a_library_whose_source_sits_in_the_checkout_is_still_the_library(tmp_path: Path):
    # examples/ inside a library's own repository (accelerate, transformers, peft): `from accelerate
    # import Accelerator` resolves to the checkout's src/accelerate, which is the library, not the script's code
    (tmp_path / "setup.py").write_text("")
    pkg = tmp_path / "src" / "accelerate"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import os\nX = os.environ.get('SOME_FLAG')\nclass Accelerator:\n    pass\n")
    (tmp_path / "examples").mkdir()
    script = tmp_path / "examples" / "train.py"
    script.write_text(_LOOP)
    plan = extract_file(script)
    got = {n: plan.fields[n].value for n in ("model_id", "per_device_batch", "trainer", "optimizer")}
    assert got == {"model_id": "gpt2", "per_device_batch": 16, "trainer": "custom-loop", "optimizer": "adamw_torch"}
    assert not any("SOME_FLAG" in n for n in plan.notes)


def test_min_with_an_unknown_argument_is_the_known_bound():
    # accelerate's run_clm-style scripts: block_size = min(args.block_size, tokenizer.model_max_length)
    src = '''import argparse
from itertools import chain
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--block_size", type=int, default=128)
args = p.parse_args()
tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")
block_size = min(args.block_size, tokenizer.model_max_length)

def group_texts(examples):
    concatenated = {k: list(chain(*examples[k])) for k in examples.keys()}
    total = len(concatenated["input_ids"])
    return {k: [t[i : i + block_size] for i in range(0, total, block_size)] for k, t in concatenated.items()}

Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()
'''
    plan = extract_source(src, "train.py")
    ml = plan.fields["max_length"]
    assert ml.value == 128
    assert any("min(" in step and "bound" in step for step in ml.chain)


def test_tokenizer_pad_does_not_truncate_and_max_length_none_truncates_at_the_model_max():
    # accelerate examples/nlp_example.py: tokenizer(..., truncation=True, max_length=None) then a collate_fn
    # with tokenizer.pad(padding="longest", max_length=128 if XLA else None): pad() ignores max_length there
    src = '''from datasets import load_dataset
from torch.utils.data import DataLoader
from torch.optim import AdamW
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")

def tokenize_function(examples):
    return tokenizer(examples["text"], truncation=True, max_length=None)

def collate_fn(examples):
    max_length = 128 if on_xla() else None
    return tokenizer.pad(examples, padding="longest", max_length=max_length, return_tensors="pt")

data = load_dataset("imdb").map(tokenize_function, batched=True)
loader = DataLoader(data["train"], batch_size=8, collate_fn=collate_fn)
optimizer = AdamW(model.parameters())
for batch in loader:
    model(**batch).loss.backward()
    optimizer.step()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["padding"].value == "longest"
    assert plan.fields["max_length"].source == "unknown"
    assert any("model_max_length" in n for n in plan.notes if n.startswith("max_length"))


def test_a_missing_checkpoint_folder_named_like_a_catalogued_checkpoint_is_sized_as_it_and_says_so():
    # FastChat's and alpaca's READMEs: --model_name_or_path ~/model_weights/llama-7b (the user's own conversion)
    from memlint.catalog import resolve

    spec = resolve("~/no-such-dir-memlint/llama-7b")
    assert (spec.id, spec.source, spec.assumed_from) == ("huggyllama/llama-7b", "folder-name", "~/no-such-dir-memlint/llama-7b")
    assert resolve("./ckpt/Llama-2-7b-hf/").id == "meta-llama/Llama-2-7b-hf"
    spec = resolve("ChatGLM2-6B")  # a bare name: a folder of the working directory, as from_pretrained reads it
    assert (spec.id, spec.source, spec.assumed_from) == ("THUDM/chatglm2-6b", "folder-name", "ChatGLM2-6B")
    # another organisation's llama-7b is sized by the size its name gives, said as such (catalog.spec.sized_by_name)
    assert resolve("someorg/llama-7b").source == "size-name"
    for named in ("/path_of_model_folder/70B", "<your_path_to_hf_converted_llama_ckpt>", "llama"):
        try:
            got = resolve(named)
        except Exception:
            continue
        raise AssertionError(f"{named!r} resolved to {got.id}")


def test_folder_spellings_of_a_catalogued_checkpoint():
    """ModelScope writes `.` as `___` (Qwen2___5-Coder-1___5B); folders write `_` for `-` (llama_7b); a folder named
    after a base with more around it (yahma_llama_7b, Qwen2.5-7B-sft) keeps that base's shapes; an adapter or a
    quantized export does not, and a name with no catalogued base in it names nothing."""
    from memlint.catalog import resolve

    for path, want in (("/models/Qwen/Qwen2___5-Coder-1___5B/", "Qwen/Qwen2.5-Coder-1.5B"),
                       ("/data/llama_7b", "huggyllama/llama-7b"), ("/model/yahma_llama_7b", "huggyllama/llama-7b"),
                       ("/srv/ckpt/Qwen2.5-7B-sft", "Qwen/Qwen2.5-7B")):
        spec = resolve(path)
        assert (spec.id, spec.source, spec.assumed_from) == (want, "folder-name", path), path
    for path in ("/srv/ckpt/Qwen2.5-7B-lora", "/srv/ckpt/Qwen2.5-7B-gptq", "/data/my-model", "/base_model"):
        try:
            got = resolve(path)
        except Exception:
            continue
        raise AssertionError(f"{path!r} resolved to {got.id}")


def test_a_path_in_a_hugging_face_cache_layout_is_the_id_it_caches():
    """`…/hub/models--ORG--NAME/snapshots/HASH` (a shared cache on the author's machine, not on this one) is a copy of
    ORG/NAME: sized as that checkpoint, with the path kept as what it is assumed from."""
    from memlint.catalog import hub_cache_id, resolve

    path = "/home/shared/hub/models--meta-llama--Llama-2-7b-hf/snapshots/8c22764a7e3675c50d4c7c9a4edb474456022b16"
    assert hub_cache_id(path) == "meta-llama/Llama-2-7b-hf"
    assert hub_cache_id("../cache/models--Qwen--Qwen2.5-0.5B/") == "Qwen/Qwen2.5-0.5B"
    spec = resolve(path)
    assert (spec.id, spec.assumed_from) == ("meta-llama/Llama-2-7b-hf", path)
    for other in ("/data/models/llama-2-7b-hf-models--x", "models--only", "/srv/models/Llama-2-7b-hf/snapshots/abc"):
        assert hub_cache_id(other) is None, other


def test_an_estimate_on_a_checkpoint_assumed_from_its_folder_name_says_the_assumption():
    from memlint.check import check_source

    src = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("~/no-such-dir-memlint/llama-7b", torch_dtype="bfloat16")
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=1, bf16=True),
        data_collator=None).train()
'''
    res = check_source(src, "train.py", assume=["max_length=512"])
    ctx = res.context
    assert ctx.estimate is not None and ctx.estimate.setup.model.id == "huggyllama/llama-7b"
    assert any("not on this machine" in a and "assumption" in a for a in ctx.planned.notes)
    notes = [f for f in res.findings if f.code == "MEM002"]
    assert notes and "huggyllama/llama-7b" in notes[0].message and "assumption" in notes[0].message


def test_a_buffer_cut_into_blocks_in_a_while_loop_is_packing():
    # llama-cookbook data/concatenator.py ConcatDataset(chunk_size=train_config.context_length)
    src = '''from torch.utils.data import DataLoader, Dataset
from transformers import AutoModelForCausalLM
from torch.optim import AdamW

class Concat(Dataset):
    def __init__(self, dataset, chunk_size=4096):
        self.chunk_size = chunk_size
        self.samples = []
        buffer = {"input_ids": [], "labels": []}
        for sample in dataset:
            buffer = {k: v + sample[k] for k, v in buffer.items()}
            while len(next(iter(buffer.values()))) > self.chunk_size:
                self.samples.append({k: v[:self.chunk_size] for k, v in buffer.items()})
                buffer = {k: v[self.chunk_size:] for k, v in buffer.items()}

model = AutoModelForCausalLM.from_pretrained("gpt2")
loader = DataLoader(Concat(load(), chunk_size=1024), batch_size=4)
optimizer = AdamW(model.parameters())
for batch in loader:
    model(**batch).loss.backward()
    optimizer.step()
'''
    got = _fields(src, "packing", "padding", "max_length", "per_device_batch")
    assert got == {"packing": True, "padding": "packing", "max_length": 1024, "per_device_batch": 4}


_COOKBOOK_CONFIGS = '''import fire
from dataclasses import asdict, dataclass
from peft import LoraConfig, PrefixTuningConfig, get_peft_model
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments

@dataclass
class train_config:
    quantization: str = None
    enable_fsdp: bool = False
    peft_method: str = "lora"

@dataclass
class lora_config:
    r: int = 8
    lora_alpha: int = 32

@dataclass
class prefix_config:
    num_virtual_tokens: int = 30

@dataclass
class quantization_config:
    quant_type: str = "fp4"

    def create_bnb_config(self, quantization):
        if quantization == "4bit":
            return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=self.quant_type)
        return BitsAndBytesConfig(load_in_8bit=True)

def update_config(config, **kwargs):
    for k, v in kwargs.items():
        if hasattr(config, k):
            setattr(config, k, v)

def main(**kwargs):
    cfg = train_config()
    update_config(cfg, **kwargs)
    if cfg.quantization:
        if type(cfg.quantization) == type(True):
            cfg.quantization = "8bit"
        if cfg.quantization == "8bit" and cfg.enable_fsdp:
            raise ValueError("8bit quantization is not supported with FSDP")
        bnb = quantization_config().create_bnb_config(cfg.quantization)
    configs = (lora_config, prefix_config)
    names = tuple(c.__name__.rstrip("_config") for c in configs)
    config = configs[names.index(cfg.peft_method)]()
    peft_config = (LoraConfig, PrefixTuningConfig)[names.index(cfg.peft_method)](**asdict(config))
    model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", quantization_config=bnb)
    model = get_peft_model(model, peft_config)
    Trainer(model=model, args=TrainingArguments("o")).train()

if __name__ == "__main__":
    fire.Fire(main)
'''


def test_config_dataclasses_picked_by_name_and_a_method_that_builds_the_quantization_config(tmp_path: Path):
    # llama-cookbook finetuning.py: type(x) == type(True), an attribute set under an unknown test, a raise on
    # the other path, names.index(...), asdict(config) into LoraConfig, quant_config.create_bnb_config(...)
    from memlint.extract import extract_targets
    from memlint.extract.launch import command_target

    (tmp_path / "train.py").write_text(_COOKBOOK_CONFIGS)
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        plans = extract_targets([command_target(["python", "train.py", "--enable_fsdp", "--quantization", "4bit"])])
    finally:
        os.chdir(cwd)
    got = {n: plans[0].fields[n].value for n in ("model_id", "method", "lora_r", "quant_bits", "quant_type")}
    assert got == {"model_id": "meta-llama/Llama-2-7b-hf", "method": "qlora", "lora_r": 8, "quant_bits": 4, "quant_type": "fp4"}


def test_an_attribute_set_under_an_unknown_test_keeps_both_values():
    src = '''from dataclasses import dataclass
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
import os

@dataclass
class Cfg:
    batch: int = 4

cfg = Cfg()
if os.environ.get("BIG"):
    cfg.batch = 16
model = AutoModelForCausalLM.from_pretrained("gpt2")
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=cfg.batch)).train()
'''
    plan = extract_source(src, "train.py")
    v = plan.fields["per_device_batch"]
    assert sorted([v.value, *v.candidates]) == [4, 16] or set(v.candidates) >= {4, 16}


def test_a_collator_subclassing_a_library_collator_pads_as_its_base():
    # databrickslabs/dolly training/trainer.py: class DataCollatorForCompletionOnlyLM(DataCollatorForLanguageModeling)
    src = '''from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments

class CompletionOnly(DataCollatorForLanguageModeling):
    def torch_call(self, examples):
        batch = super().torch_call(examples)
        return batch

tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")
collator = CompletionOnly(tokenizer=tokenizer, mlm=False, return_tensors="pt", pad_to_multiple_of=8)
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2), data_collator=collator).train()
'''
    assert _fields(src, "padding")["padding"] == "longest"


def test_the_script_s_own_length_argument_caps_the_length_when_no_tokenizer_call_is_followed():
    # allenai/open-instruct finetune.py: transform_fn_args = [{"max_seq_length": args.max_seq_length}, {}]
    # handed to a registry of dataset transforms memlint does not follow
    from memlint.extract import extract_source

    src = '''import argparse
from transformers import AutoModelForCausalLM
from accelerate import Accelerator
from torch.utils.data import DataLoader
from mydata import get_cached_dataset

p = argparse.ArgumentParser()
p.add_argument("--max_seq_length", type=int, default=2048)
p.add_argument("--batch_size", type=int, default=4)
args = p.parse_args()
accelerator = Accelerator()
transform_fn_args = [{"max_seq_length": args.max_seq_length}, {}]
ds = get_cached_dataset(transform_fn_args=transform_fn_args)
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True)
opt = torch.optim.AdamW(model.parameters())
for batch in loader:
    accelerator.backward(model(**batch).loss)
    opt.step()
'''
    plan = extract_source(src, "train.py")
    v = plan.fields["max_length"]
    assert v.value == 2048 and any("length argument .max_seq_length" in c for c in v.chain)
    # a tokenizer call the script makes wins over the argument
    with_call = src.replace("ds = get_cached_dataset(transform_fn_args=transform_fn_args)",
                            "ds = raw.map(lambda e: tok(e['text'], truncation=True, max_length=512))")
    assert extract_source(with_call, "train.py").fields["max_length"].value == 512
    # an argument left at None caps nothing
    none = src.replace('default=2048', 'default=None')
    assert extract_source(none, "train.py").fields["max_length"].value is None
