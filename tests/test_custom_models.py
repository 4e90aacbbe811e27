"""Round 3d: a model class of the script's own checkout (docs/realworld.md, round 3d).

Synthetic checkouts of the shapes met in nanoGPT and lit-llama (no corpus file is copied): the
model is an `nn.Module` of the checkout built from a config whose values the interpreter reads."""

from pathlib import Path

from memlint.catalog import catalog_entry
from memlint.catalog.local import count_gpt2_like, spec_from_shape
from memlint.estimate.from_plan import setup_from_plan
from checkouts import write_checkout
from memlint.extract import extract_file

_GPT = '''import torch
import torch.nn as nn
from torch.nn import functional as F
from dataclasses import dataclass


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = Attention(config)
        self.mlp = MLP(config)


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    bias: bool = True


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def configure_optimizers(self, lr):
        return torch.optim.AdamW(self.parameters(), lr=lr)
'''

_TRAIN = '''import torch
from model import GPTConfig, GPT

n_layer = 6
n_head = 6
n_embd = 384
block_size = 256
model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, bias=False, vocab_size=None)
model_args["vocab_size"] = 50304
model = GPT(GPTConfig(**model_args))
model.to("cuda")
optimizer = model.configure_optimizers(6e-4)
for step in range(10):
    loss = model(None)
    loss.backward()
    optimizer.step()
'''


def _checkout(tmp_path: Path, files: dict) -> Path:
    return write_checkout(tmp_path, files) / "train.py"


def test_a_gpt_of_the_checkout_is_read_as_its_gpt2_shape(tmp_path: Path):
    plan = extract_file(_checkout(tmp_path, {"model.py": _GPT, "train.py": _TRAIN}))
    mid = plan.get("model_id")
    assert mid.value.startswith("model.GPT(GPTConfig(n_layer=6, n_head=6, n_embd=384")
    assert dict(mid.shape) == {"model_type": "gpt2", "n_layer": 6, "n_head": 6, "n_embd": 384, "n_positions": 256,
                               "vocab_size": 50304, "tie_word_embeddings": True, "bias": False}
    assert plan.value("torch_dtype") == "fp32"  # an nn.Module's parameters are created in float32
    assert plan.value("attn_implementation") == "sdpa"  # model.py calls F.scaled_dot_product_attention
    assert plan.value("method") == "full"
    assert plan.value("optimizer") == "adamw_torch"  # the class's own configure_optimizers ran
    planned = setup_from_plan(plan.with_values(), {})
    # the model's block_size, read from its config where the class builds its position embeddings, caps the
    # length (no sequence can be longer); the batch is the script's to say
    assert plan.value("max_length") == 256
    assert planned.missing == ("per_device_batch",)


def test_the_shape_is_sized_with_gpt2_accounting_and_said_so(tmp_path: Path):
    from memlint.plan import Value

    plan = extract_file(_checkout(tmp_path, {"model.py": _GPT, "train.py": _TRAIN}))
    plan = plan.with_values(per_device_batch=Value(4, "assumed"), max_length=Value(256, "assumed"))
    planned = setup_from_plan(plan, {})
    spec = planned.setup.model
    assert spec.source == "script-class"
    # nanoGPT's own count for this shape without biases: wte + wpe + 12 h^2 per layer + one weight per LayerNorm
    h, L = 384, 6
    assert spec.params == 50304 * h + 256 * h + L * 12 * h * h + (2 * L + 1) * h
    assert any("script's own class" in n and "GPT-2" in n and "bias=False" in n for n in planned.notes)


def test_gpt2_closed_form_equals_the_catalogued_gpt2s():
    for cid in ("openai-community/gpt2", "openai-community/gpt2-medium", "openai-community/gpt2-large",
                "openai-community/gpt2-xl"):
        spec = catalog_entry(cid)
        counted = count_gpt2_like({"model_type": "gpt2", **spec.config})
        assert counted["params"] == spec.params, cid
        assert counted["groups"] == dict(spec.groups), cid


def test_a_shape_equal_to_a_catalogued_checkpoint_reuses_its_counts():
    # GPT.from_pretrained('gpt2-xl') builds GPTConfig(n_layer=48, n_head=25, n_embd=1600, vocab 50257, bias=True)
    spec = spec_from_shape({"model_type": "gpt2", "n_layer": 48, "n_head": 25, "n_embd": 1600, "n_positions": 1024,
                            "vocab_size": 50257, "tie_word_embeddings": True}, "model.GPT(...)")
    assert spec.params == catalog_entry("gpt2-xl").params
    assert spec.source == "script-class"


_LLAMA = '''import torch.nn as nn
import torch.nn.functional as F
from dataclasses import dataclass


def find_multiple(n, k):
    if n % k == 0:
        return n
    return n + k - (n % k)


@dataclass
class LLaMAConfig:
    block_size: int = 2048
    vocab_size: int = 32000
    padded_vocab_size: int = None
    n_layer: int = 32
    n_head: int = 32
    n_embd: int = 4096

    def __post_init__(self):
        if self.padded_vocab_size is None:
            self.padded_vocab_size = find_multiple(self.vocab_size, 64)

    @classmethod
    def from_name(cls, name):
        return cls(**llama_configs[name])


llama_configs = {"7B": dict(n_layer=32, n_head=32, n_embd=4096), "tiny": dict(n_layer=2, n_head=4, n_embd=256)}


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden_dim = 4 * config.n_embd
        n_hidden = find_multiple(int(2 * hidden_dim / 3), 256)
        self.c_fc1 = nn.Linear(config.n_embd, n_hidden, bias=False)
        self.c_fc2 = nn.Linear(config.n_embd, n_hidden, bias=False)
        self.c_proj = nn.Linear(n_hidden, config.n_embd, bias=False)


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class LLaMA(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
        self.wte = nn.Embedding(config.padded_vocab_size, config.n_embd)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = Attention(config)
        self.mlp = MLP(config)
'''

_FT = '''import torch
from lit_model import LLaMA, LLaMAConfig

config = LLaMAConfig.from_name("7B")
model = LLaMA(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for step in range(10):
    loss = model(None)
    loss.backward()
    optimizer.step()
'''


def test_a_llama_of_the_checkout_from_a_named_config_is_read_with_its_mlp_width(tmp_path: Path):
    plan = extract_file(_checkout(tmp_path, {"lit_model.py": _LLAMA, "train.py": _FT}))
    shape = dict(plan.get("model_id").shape)
    # the MLP width is what the class computes: find_multiple(int(8 * 4096 / 3), 256) = 11008
    assert shape == {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
                     "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
                     "max_position_embeddings": 2048, "tie_word_embeddings": False}
    spec = spec_from_shape(shape, plan.value("model_id"))
    assert spec.params == catalog_entry("huggyllama/llama-7b").params  # the same shape as HF's LLaMA-7B


def test_a_module_built_from_no_readable_config_stays_unknown_with_the_reason(tmp_path: Path):
    train = _TRAIN.replace("model = GPT(GPTConfig(**model_args))", "model = GPT(load_config())")
    plan = extract_file(_checkout(tmp_path, {"model.py": _GPT, "train.py": train}))
    mid = plan.get("model_id")
    assert not mid.shape
    assert any("not sized" in c for c in mid.chain) or not mid.known


def test_random_windows_of_one_token_stream_are_a_packed_micro_batch():
    # karpathy/nanoGPT train.py get_batch: B windows of block_size tokens at random offsets
    from memlint.extract import extract_source

    src = '''import numpy as np
import torch
batch_size = 12
block_size = 1024

def get_batch(split):
    data = np.memmap("train.bin", dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
    return x, y

from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("openai-community/gpt2")
optimizer = torch.optim.AdamW(model.parameters())
X, Y = get_batch("train")
model(X, labels=Y).loss.backward()
optimizer.step()
'''
    plan = extract_source(src, "train.py")
    got = {f: plan.fields[f].value for f in ("per_device_batch", "max_length", "packing", "padding")}
    assert got == {"per_device_batch": 12, "max_length": 1024, "packing": True, "padding": "packing"}
    assert plan.fields["per_device_batch"].span.line == 3  # batch_size = 12, where the value is set
    # numpy's randint(low, high, size) and a window that is not data[i : i + n] say nothing
    other = src.replace("torch.randint(len(data) - block_size, (batch_size,))", "np.random.randint(0, len(data) - block_size, batch_size)")
    assert extract_source(other, "train.py").fields["per_device_batch"].value == 12
    shifted = src.replace("data[i:i+block_size]", "data[i]").replace("data[i+1:i+1+block_size]", "data[i + 1]")
    assert extract_source(shifted, "train.py").fields["max_length"].value is None
