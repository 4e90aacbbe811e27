"""A checkout nn.Module whose token embedding is a bare 2-D parameter (issue #27, round 9b).

Synthetic checkouts written from the pattern (no corpus file is copied): a masked-diffusion DiT keeps its token
embedding as `nn.Parameter(torch.empty((vocab, dim)))` indexed in `forward`, not as nn.Embedding; a model looks
its ids up with `F.embedding(ids, self.weight)`. Such a module is a language model: its attention kernel and the
float32 dtype a script-built nn.Module has are read as for any checkout model. A 2-D parameter that is sliced
(a positional table) or multiplied (a projection) is not a token embedding."""

from pathlib import Path

from memlint.extract import extract_file
from functools import partial
from checkouts import write_checkout

_DIT = '''import math
import torch
import torch.nn as nn
import torch.nn.functional as F
import flash_attn


class Block(nn.Module):
    def __init__(self, dim, n_heads, cond_dim, mlp_ratio=4):
        super().__init__()
        self.n_heads = n_heads
        self.attn_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attn_out = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))
        self.adaLN_modulation = nn.Linear(cond_dim, 6 * dim)

    def forward(self, x, cu_seqlens, seq_len):
        qkv = self.attn_qkv(x)
        x = flash_attn.flash_attn_interface.flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, seq_len, 0., causal=False)
        return self.attn_out(x)


class EmbeddingLayer(nn.Module):
    def __init__(self, dim, vocab_dim):
        super().__init__()
        self.embedding = nn.Parameter(torch.empty((vocab_dim, dim)))
        torch.nn.init.kaiming_uniform_(self.embedding, a=math.sqrt(5))

    def forward(self, x):
        return self.embedding[x]


class TinyDiT(nn.Module):
    def __init__(self, config, vocab_size: int):
        super().__init__()
        self.vocab_embed = EmbeddingLayer(config.model.hidden_size, vocab_size)
        self.blocks = nn.ModuleList([Block(config.model.hidden_size, config.model.n_heads, config.model.cond_dim)
                                     for _ in range(config.model.n_blocks)])
        self.output_layer = nn.Linear(config.model.hidden_size, vocab_size)

    def forward(self, indices, sigma):
        x = self.vocab_embed(indices)
        for block in self.blocks:
            x = block(x, None, None)
        return self.output_layer(x)
'''

_TRAIN = '''import torch
from types import SimpleNamespace
from models import TinyDiT

config = SimpleNamespace(model=SimpleNamespace(hidden_size=256, n_heads=4, cond_dim=64, n_blocks=4))
model = TinyDiT(config, vocab_size=1000)
model.to("cuda")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for step in range(10):
    loss = model(None, None).sum()
    loss.backward()
    optimizer.step()
'''


def _checkout(tmp_path: Path, files: dict) -> Path:
    return write_checkout(tmp_path, files) / "train.py"


def test_a_dit_whose_token_embedding_is_an_indexed_parameter_is_a_language_model(tmp_path: Path):
    plan = extract_file(_checkout(tmp_path, {"models.py": _DIT, "train.py": _TRAIN}))
    # the checkout's own module, read as the model: its fused kernel, and fp32 (torch's default dtype; no cast)
    assert plan.value("attn_implementation") == "flash_attention_2"
    assert plan.get("attn_implementation").span.path.endswith("models.py")
    assert plan.value("torch_dtype") == "fp32"
    assert plan.get("torch_dtype").source != "library-default"
    assert plan.value("method") == "full"


def test_a_cast_or_a_default_dtype_before_the_build_is_the_modules_dtype(tmp_path: Path):
    cast = _TRAIN.replace('model.to("cuda")', 'model.to("cuda", dtype=torch.bfloat16)')
    assert extract_file(_checkout(tmp_path, {"models.py": _DIT, "train.py": cast})).value("torch_dtype") == "bf16"
    default = _TRAIN.replace("config = ", "torch.set_default_dtype(torch.float16)\nconfig = ")
    assert extract_file(_checkout(tmp_path, {"models.py": _DIT, "train.py": default})).value("torch_dtype") == "fp16"


def test_the_table_may_be_the_models_own_attribute_built_with_randn_or_zeros(tmp_path: Path):
    model = _DIT.replace("self.vocab_embed = EmbeddingLayer(config.model.hidden_size, vocab_size)",
                         "self.tok = nn.Parameter(torch.randn(vocab_size, config.model.hidden_size))") \
                .replace("x = self.vocab_embed(indices)", "x = self.tok[indices.long()]")
    plan = extract_file(_checkout(tmp_path, {"models.py": model, "train.py": _TRAIN}))
    assert plan.value("attn_implementation") == "flash_attention_2"
    assert plan.value("torch_dtype") == "fp32"


_F_EMBEDDING = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class TokenTable(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n, d))

    def forward(self, ids):
        return F.embedding(ids, self.weight)


class Net(nn.Module):
    def __init__(self, vocab, dim, depth):
        super().__init__()
        self.emb = TokenTable(vocab, dim)
        self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(depth)])

    def forward(self, ids):
        x = self.emb(ids)
        for layer in self.layers:
            x = F.scaled_dot_product_attention(x, x, x)
        return x
'''

_NET_TRAIN = '''import torch
from net import Net

model = Net(32000, 512, 6)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(10):
    loss = model(None).sum()
    loss.backward()
    optimizer.step()
'''


def test_a_custom_embedding_module_looking_ids_up_with_f_embedding_counts(tmp_path: Path):
    plan = extract_file(_checkout(tmp_path, {"net.py": _F_EMBEDDING, "train.py": _NET_TRAIN}))
    assert plan.value("attn_implementation") == "sdpa"  # net.py calls F.scaled_dot_product_attention
    assert plan.value("torch_dtype") == "fp32"
    assert plan.get("torch_dtype").source != "library-default"


def test_a_weight_keyword_to_torch_embedding_counts(tmp_path: Path):
    net = _F_EMBEDDING.replace("F.embedding(ids, self.weight)", "torch.nn.functional.embedding(input=ids, weight=self.weight)")
    plan = extract_file(_checkout(tmp_path, {"net.py": net, "train.py": _NET_TRAIN}))
    assert plan.value("attn_implementation") == "sdpa"
    assert plan.value("torch_dtype") == "fp32"


def test_a_positional_table_or_a_projection_is_not_a_token_embedding(tmp_path: Path):
    # a 2-D parameter sliced by position, and one multiplied in: neither looks ids up, so the module is no language
    # model memlint reads (a block, a head): the plan keeps no model of it
    for use in ("return x + self.weight[: x.shape[1]]", "return ids @ self.weight", "return F.linear(ids, self.weight)",
                "return self.weight[0]"):
        net = _F_EMBEDDING.replace("return F.embedding(ids, self.weight)", use)
        plan = extract_file(_checkout(tmp_path, {"net.py": net, "train.py": _NET_TRAIN}))
        assert plan.value("attn_implementation") != "sdpa", use
        assert plan.get("torch_dtype").value != "fp32" or plan.get("torch_dtype").source == "unknown", use


def test_a_3d_parameter_indexed_by_ids_is_not_a_token_embedding(tmp_path: Path):
    net = _F_EMBEDDING.replace("torch.zeros(n, d)", "torch.zeros(4, n, d)") \
                      .replace("return F.embedding(ids, self.weight)", "return self.weight[ids]")
    plan = extract_file(_checkout(tmp_path, {"net.py": net, "train.py": _NET_TRAIN}))
    assert plan.value("attn_implementation") != "sdpa"


_write = partial(write_checkout, dedent=True, git=True)


def test_a_dit_built_by_hydra_instantiate_is_read(tmp_path: Path, monkeypatch):
    from memlint.extract import extract_targets
    from memlint.extract.launch import tokens
    from memlint.extract.shell import command_targets

    root = _write(tmp_path, {
        "models/__init__.py": "",
        "models/dit.py": _DIT.replace("config.model.", "").replace(
            "def __init__(self, config, vocab_size: int)", "def __init__(self, hidden_size, n_heads, cond_dim, n_blocks, vocab_size)"),
        "cfg/c.yaml": '''
            bs: 4
            model:
              _target_: models.dit.TinyDiT
              hidden_size: 256
              n_heads: 4
              cond_dim: 64
              n_blocks: 4
              vocab_size: 1000
        ''',
        "run.py": '''
            import hydra
            import torch


            @hydra.main(config_path="cfg", config_name="c")
            def main(cfg):
                model = hydra.utils.instantiate(cfg.model)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
                for batch in torch.utils.data.DataLoader(range(100), batch_size=cfg.bs):
                    model(batch, None).sum().backward()
                    opt.step()


            main()
        ''',
    })
    monkeypatch.chdir(root)
    (plan,) = extract_targets(command_targets(tokens("python run.py")))
    assert plan.value("attn_implementation") == "flash_attention_2"
    assert plan.value("torch_dtype") == "fp32"


_REGISTRY_TRAIN = '''import torch
from types import SimpleNamespace
from models import TinyDiT

BACKBONES = {"dit": TinyDiT}


def build_backbone(name, config, vocab_size):
    return BACKBONES[name](config, vocab_size=vocab_size)


config = SimpleNamespace(model=SimpleNamespace(hidden_size=256, n_heads=4, cond_dim=64, n_blocks=4))
model = build_backbone("dit", config, 1000)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for step in range(10):
    loss = model(None, None).sum()
    loss.backward()
    optimizer.step()
'''


def test_a_dit_from_a_registry_through_a_factory_is_read(tmp_path: Path):
    plan = extract_file(_checkout(tmp_path, {"models.py": _DIT, "train.py": _REGISTRY_TRAIN}))
    assert plan.value("attn_implementation") == "flash_attention_2"
    assert plan.value("torch_dtype") == "fp32"


_LIGHTNING_TRAIN = '''import lightning as L
import torch
from types import SimpleNamespace
from models import TinyDiT


class Diffusion(L.LightningModule):
    def __init__(self, config):
        super().__init__()
        self.config = config
        if config.backbone == "dit":
            self.backbone = TinyDiT(config, vocab_size=config.vocab)

    def training_step(self, batch, i):
        return self.backbone(batch, None).sum()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.backbone.parameters(), lr=3e-4)


config = SimpleNamespace(backbone="dit", vocab=1000,
                         model=SimpleNamespace(hidden_size=256, n_heads=4, cond_dim=64, n_blocks=4))
trainer = L.Trainer(precision="bf16-mixed", devices=1)
trainer.fit(Diffusion(config), torch.utils.data.DataLoader(range(10), batch_size=8))
'''


def test_a_lightning_module_holding_the_dit_as_its_backbone_is_read(tmp_path: Path):
    # Lightning's bf16-mixed keeps the fp32 parameters the nn.Module creates; autocast runs the matmuls in bf16
    plan = extract_file(_checkout(tmp_path, {"models.py": _DIT, "train.py": _LIGHTNING_TRAIN}))
    assert plan.value("trainer") == "lightning"
    assert plan.value("attn_implementation") == "flash_attention_2"
    assert plan.value("torch_dtype") == "fp32"
    assert plan.value("precision") == "amp-bf16"


_HF_CLASS_TRAIN = '''import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

config = AutoConfig.from_pretrained("meta-llama/Llama-2-7b-hf")
model = LlamaForCausalLM(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(10):
    model(None).loss.backward()
    optimizer.step()
'''


def test_a_transformers_class_built_by_its_constructor_is_fp32_not_from_pretrained_auto(tmp_path: Path):
    # PreTrainedModel.__init__ picks no dtype: transformers>=5's from_pretrained default ("auto") does not apply
    plan = extract_file(_checkout(tmp_path, {"train.py": _HF_CLASS_TRAIN}))
    assert plan.value("torch_dtype") == "fp32"
    assert plan.get("torch_dtype").source == "constant"
    cast = _HF_CLASS_TRAIN.replace("model = LlamaForCausalLM(config)", "model = LlamaForCausalLM(config).to(torch.bfloat16)")
    assert extract_file(_checkout(tmp_path, {"train.py": cast})).value("torch_dtype") == "bf16"
    default = _HF_CLASS_TRAIN.replace("config = ", "torch.set_default_dtype(torch.bfloat16)\nconfig = ")
    assert extract_file(_checkout(tmp_path, {"train.py": default})).value("torch_dtype") == "bf16"
    # a load still takes from_pretrained's own default
    loaded = _HF_CLASS_TRAIN.replace("model = LlamaForCausalLM(config)", 'model = LlamaForCausalLM.from_pretrained("x/y")')
    assert extract_file(_checkout(tmp_path, {"train.py": loaded})).get("torch_dtype").source == "library-default"


def test_a_checkout_copy_of_a_transformers_class_built_from_a_config_is_fp32(tmp_path: Path):
    modeling = '''from transformers import PreTrainedModel, LlamaConfig


class MyLlamaForCausalLM(PreTrainedModel):
    config_class = LlamaConfig

    def __init__(self, config):
        super().__init__(config)
'''
    train = _HF_CLASS_TRAIN.replace("model = LlamaForCausalLM(config)", "model = MyLlamaForCausalLM(config)") \
                           .replace("import torch\n", "import torch\nfrom modeling_my import MyLlamaForCausalLM\n")
    plan = extract_file(_checkout(tmp_path, {"modeling_my.py": modeling, "train.py": train}))
    assert plan.value("torch_dtype") == "fp32"
