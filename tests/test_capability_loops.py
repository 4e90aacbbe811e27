"""Hand-written training loops (issue 27's capability): raw PyTorch / DDP / FSDP loops whose plan lives in
the script and its checkout: a launcher's rank variables, a wrapper's `.module`, a token stream cut into
B x T blocks by hand, a probe of the library's own signature (fused AdamW), and configs the checkout
loads into its own dataclasses.

Each test is a tiny made-up script (or checkout in tmp_path) written from the pattern."""

from __future__ import annotations

from pathlib import Path

from memlint.extract import extract_file
from checkouts import write_checkout, plan_of_command as _command, field_values as _get


_write = write_checkout




_STREAM_LOOP = '''import os
import numpy as np
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.out = nn.Linear(32, 100)

    def forward(self, x, y):
        return self.out(self.emb(x)), None

    def make_optimizer(self, lr):
        return torch.optim.AdamW(self.parameters(), lr=lr)


class Stream:
    def __init__(self, rows, width, rank, world):
        self.rows = rows
        self.width = width
        self.world = world
        self.data = torch.tensor(np.load("stream.npy"))
        self.at = rows * width * rank

    def next_batch(self):
        rows, width = self.rows, self.width
        chunk = self.data[self.at : self.at + rows * width + 1]
        x = chunk[:-1].view(rows, width)
        y = chunk[1:].view(rows, width)
        self.at += rows * width * self.world
        return x, y


distributed = int(os.environ.get("RANK", -1)) != -1
if distributed:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
else:
    rank = 0
    world = 1
tokens_per_step = 262144
micro = 16
seq = 512
steps_to_accumulate = tokens_per_step // (micro * seq * world)
stream = Stream(micro, seq, rank, world)
model = Net()
if distributed:
    model = DDP(model)
inner = model.module if distributed else model
opt = inner.make_optimizer(3e-4)
for it in range(10):
    for k in range(steps_to_accumulate):
        x, y = stream.next_batch()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            _, loss = model(x, y)
        (loss / steps_to_accumulate).backward()
    opt.step()
    opt.zero_grad()
'''


def test_a_launcher_sets_rank_so_the_distributed_branch_runs_with_its_world_size(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _STREAM_LOOP})
    plan = _command(root, monkeypatch, "torchrun", "--standalone", "--nproc_per_node=4", "train.py")
    # 262144 // (16 * 512 * 4) = 8, not the single-process branch's 32
    assert plan.fields["grad_accum"].value == 8
    assert plan.fields["num_gpus"].value == 4


def test_a_plain_python_run_takes_the_single_process_branch(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _STREAM_LOOP})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert plan.fields["grad_accum"].value == 32


def test_the_module_of_a_ddp_wrapper_is_the_wrapped_model_and_its_methods_run(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _STREAM_LOOP})
    plan = _command(root, monkeypatch, "torchrun", "--nproc_per_node=2", "train.py")
    assert plan.fields["optimizer"].value == "adamw_torch"  # built by a method reached through model.module
    assert plan.fields["trainer"].value == "custom-loop"


def test_a_contiguous_block_of_a_token_stream_viewed_as_rows_is_a_packed_micro_batch(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _STREAM_LOOP})
    plan = _command(root, monkeypatch, "torchrun", "--nproc_per_node=2", "train.py")
    assert _get(plan, "per_device_batch", "max_length", "padding", "packing") == \
        {"per_device_batch": 16, "max_length": 512, "padding": "packing", "packing": True}


def test_a_slice_whose_length_is_never_viewed_as_rows_is_no_block(tmp_path):
    text = _STREAM_LOOP.replace("x = chunk[:-1].view(rows, width)", "x = chunk[:-1]").replace(
        "y = chunk[1:].view(rows, width)", "y = chunk[1:]")
    plan = extract_file(_write(tmp_path, {"train.py": text}) / "train.py")
    assert plan.fields["packing"].value is not True
    assert plan.fields["per_device_batch"].value != 16


_PROBE = '''import inspect
import torch
import torch.nn as nn

model = nn.Linear(16, 16)
device = "cuda"
fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
use_fused = fused_available and device == "cuda"
extra = dict(fused=True) if use_fused else dict()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **extra)
for step in range(10):
    loss = model(torch.randn(4, 16)).sum()
    loss.backward()
    opt.step()
'''


def test_a_probe_of_adamw_signature_for_fused_is_decided_by_the_torch_version(tmp_path):
    from memlint.library.versions import pinned_versions

    path = _write(tmp_path, {"train.py": _PROBE}) / "train.py"
    with pinned_versions({"torch": "2.4.0"}):
        assert extract_file(path).fields["optimizer"].value == "adamw_torch_fused"
    with pinned_versions({"torch": "1.13.1"}):
        assert extract_file(path).fields["optimizer"].value == "adamw_torch"


def test_a_probe_of_a_callable_memlint_does_not_know_stays_unknown(tmp_path):
    text = _PROBE.replace("inspect.signature(torch.optim.AdamW)", "inspect.signature(torch.optim.NAdam)").replace(
        "lr=1e-3, **extra)", "lr=1e-3, fused=use_fused)")
    plan = extract_file(_write(tmp_path, {"train.py": text}) / "train.py")
    assert plan.fields["optimizer"].value == "adamw_torch"  # fused unknown: not claimed


_SYS_PATH_TRAIN = '''import os
import sys
sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "lib")))
import torch
from torch.utils.data import DataLoader
from settings.values import BATCH

model = torch.nn.Linear(4, 4)
opt = torch.optim.AdamW(model.parameters())
for x in DataLoader(list(range(10)), batch_size=BATCH, shuffle=True):
    model(x).sum().backward()
    opt.step()
'''


def test_a_folder_put_on_sys_path_is_where_the_scripts_imports_are_found(tmp_path, monkeypatch):
    root = _write(tmp_path, {"README.md": "x", "lib/settings/__init__.py": "", "lib/settings/values.py": "BATCH = 7\n",
                             "scripts/train.py": _SYS_PATH_TRAIN})
    monkeypatch.chdir(root / "scripts")
    assert extract_file(Path("train.py")).fields["per_device_batch"].value == 7
    (root / "scripts/train.py").write_text(_SYS_PATH_TRAIN.replace("sys.path.append(", "print("))
    # lib/ is no package root of the project (its top and the script's folder are): not on the path, not found
    assert extract_file(Path("train.py")).fields["per_device_batch"].value != 7


_MATH_CONFIG = '''import math
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


class Cfg:
    def __init__(self, hidden_size=256, num_hidden_layers=4, **kwargs):
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = kwargs.get("num_attention_heads", 8)
        self.vocab_size = kwargs.get("vocab_size", 6400)
        self.intermediate_size = kwargs.get("intermediate_size", math.ceil(hidden_size * math.pi / 64) * 64)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)


class LM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([MLP(cfg) for _ in range(cfg.num_hidden_layers)])
        self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)


class Batches:
    def __init__(self, indices, batch_size):
        self.indices = indices
        self.batch_size = batch_size

    def __iter__(self):
        batch = []
        for i in self.indices:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []


model = LM(Cfg(hidden_size=512))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
loader = DataLoader(list(range(100)), batch_sampler=Batches(list(range(100)), 12))
for batch in loader:
    loss = model(batch).sum()
    loss.backward()
    opt.step()
'''


def test_math_of_known_numbers_is_computed(tmp_path):
    plan = extract_file(_write(tmp_path, {"train.py": _MATH_CONFIG}) / "train.py")
    # 512 * pi / 64 = 25.13 -> 26 * 64 = 1664: the gated MLP's width, read from the Linears
    assert "1664" in " ".join(plan.fields["model_id"].chain) or plan.fields["model_id"].shape
    assert plan.fields["model_id"].known


def test_a_dataloader_over_a_batch_sampler_takes_the_samplers_batch_size(tmp_path):
    plan = extract_file(_write(tmp_path, {"train.py": _MATH_CONFIG}) / "train.py")
    assert plan.fields["per_device_batch"].value == 12


def test_a_dataloader_over_torchs_batch_sampler_takes_its_batch_size(tmp_path):
    text = _MATH_CONFIG.replace("batch_sampler=Batches(list(range(100)), 12)",
                                "batch_sampler=torch.utils.data.BatchSampler(range(100), 24, drop_last=True)")
    plan = extract_file(_write(tmp_path, {"train.py": text}) / "train.py")
    assert plan.fields["per_device_batch"].value == 24


# ---- a YAML file merged over the checkout's dataclass tree (OmegaConf.structured / merge / from_cli) -----------


_OMEGA_TRAIN = '''from dataclasses import dataclass, field
from omegaconf import OmegaConf
import torch
from torch.utils.data import DataLoader


@dataclass
class DataArgs:
    batch_size: int = 2
    seq_len: int = 512


@dataclass
class OptimArgs:
    lr: float = 1e-3
    fused: bool = False


@dataclass
class TrainArgs:
    name: str = "run"
    accum: int = 1
    data: DataArgs = field(default_factory=DataArgs)
    optim: OptimArgs = field(default_factory=OptimArgs)


def train(args: TrainArgs):
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=args.optim.lr, fused=args.optim.fused)
    loader = DataLoader(list(range(64)), batch_size=args.data.batch_size, shuffle=True)
    for step, x in enumerate(loader):
        loss = model(x).sum() / args.accum
        loss.backward()
        if (step + 1) % args.accum == 0:
            opt.step()


def main():
    cli_args = OmegaConf.from_cli()
    file_cfg = OmegaConf.load(cli_args.config)
    del cli_args.config
    default_cfg = OmegaConf.structured(TrainArgs())
    cfg = OmegaConf.merge(default_cfg, file_cfg, cli_args)
    cfg = OmegaConf.to_object(cfg)
    train(cfg)


if __name__ == "__main__":
    main()
'''

_OMEGA_YAML = '''name: debug
optim:
  fused: true
data:
  batch_size: 24
'''


def test_a_yaml_merged_over_the_dataclass_tree_sets_its_nested_fields(tmp_path, monkeypatch):
    root = _write(tmp_path, {"app/__init__.py": "", "app/train.py": _OMEGA_TRAIN, "app/configs/debug.yaml": _OMEGA_YAML})
    plan = _command(root, monkeypatch, "torchrun", "--nproc-per-node", "2", "-m", "app.train", "config=app/configs/debug.yaml")
    assert plan.fields["per_device_batch"].value == 24      # the YAML's data.batch_size over DataArgs' 2
    assert plan.fields["optimizer"].value == "adamw_torch_fused"  # optim.fused from the YAML
    assert plan.fields["grad_accum"].value == 1             # TrainArgs.accum's default: the YAML leaves it


def test_a_dotted_command_line_key_overrides_the_yaml(tmp_path, monkeypatch):
    root = _write(tmp_path, {"app/__init__.py": "", "app/train.py": _OMEGA_TRAIN, "app/configs/debug.yaml": _OMEGA_YAML})
    plan = _command(root, monkeypatch, "torchrun", "--nproc-per-node", "2", "-m", "app.train",
                    "config=app/configs/debug.yaml", "data.batch_size=6", "accum=4")
    assert plan.fields["per_device_batch"].value == 6
    assert plan.fields["grad_accum"].value == 4


def test_structured_of_the_class_itself_and_a_classmethod_load(tmp_path):
    text = _OMEGA_TRAIN.replace('''def main():
    cli_args = OmegaConf.from_cli()
    file_cfg = OmegaConf.load(cli_args.config)
    del cli_args.config
    default_cfg = OmegaConf.structured(TrainArgs())
    cfg = OmegaConf.merge(default_cfg, file_cfg, cli_args)
    cfg = OmegaConf.to_object(cfg)
    train(cfg)''', '''def load(cls, path, overrides=None):
    schema = OmegaConf.structured(cls)
    conf = OmegaConf.merge(schema, OmegaConf.load(path))
    conf = OmegaConf.merge(conf, OmegaConf.from_dotlist(overrides))
    return OmegaConf.to_object(conf)


def main():
    train(load(TrainArgs, "debug.yaml", ["data.batch_size=12"]))''')
    plan = extract_file(_write(tmp_path, {"train.py": text, "debug.yaml": _OMEGA_YAML}) / "train.py")
    assert plan.fields["per_device_batch"].value == 12
    assert plan.fields["optimizer"].value == "adamw_torch_fused"


def test_a_merge_with_a_config_memlint_cannot_read_leaves_the_fields_unknown(tmp_path):
    text = _OMEGA_TRAIN.replace("OmegaConf.load(cli_args.config)", "OmegaConf.load(pick_a_file())")
    plan = extract_file(_write(tmp_path, {"train.py": text}) / "train.py")
    assert plan.fields["per_device_batch"].value != 2  # not DataArgs' default: the file may set it


def test_a_module_run_finds_its_packages_in_the_working_directory_without_checkout_markers(tmp_path, monkeypatch):
    root = _write(tmp_path, {
        "app/__init__.py": "", "app/main/__init__.py": "",
        "app/main/train.py": _SYS_PATH_TRAIN.replace("from settings.values import BATCH", "from lib.values import BATCH"),
        "lib/__init__.py": "", "lib/values.py": "BATCH = 5\n",
    })
    plan = _command(root, monkeypatch, "torchrun", "--nproc_per_node=2", "-m", "app.main.train")
    assert plan.fields["per_device_batch"].value == 5


# ---- a checkout's optimizer subclass, a loop cutting a batch into micro-batches ---------------------------------


_RL_LOOP = '''import math
import torch
from torch.optim import AdamW


class OffloadableAdamW(AdamW):
    def __init__(self, params, lr=1e-3, enabled=True):
        super().__init__(params, lr=lr)
        self.enabled = enabled

    def step(self, closure=None):
        return super().step(closure)


def update(model, optimizer, rows, micro_batch_size):
    for i in range(0, len(rows), micro_batch_size):
        part = rows[i : i + micro_batch_size]
        loss = model(torch.tensor(part)).sum()
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()


model = torch.nn.Linear(4, 4)
optimizer = OffloadableAdamW(model.parameters(), lr=1e-5, enabled=False)
for step in range(10):
    rows = ROWS
    update(model, optimizer, rows, micro_batch_size=4)
'''


def test_a_checkout_subclass_of_a_library_optimizer_steps_as_its_base(tmp_path):
    plan = extract_file(_write(tmp_path, {"train.py": _RL_LOOP.replace("ROWS", "fetch()")}) / "train.py")
    assert plan.fields["optimizer"].value == "adamw_torch"
    assert plan.fields["trainer"].value == "custom-loop"


def test_a_loop_cutting_a_batch_into_micro_batches_sets_the_micro_batch_and_their_count(tmp_path):
    rows = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]"
    plan = extract_file(_write(tmp_path, {"train.py": _RL_LOOP.replace("ROWS", rows)}) / "train.py")
    assert plan.fields["per_device_batch"].value == 4
    assert plan.fields["grad_accum"].value == 4  # ceil(14 / 4)
    unknown_rows = extract_file(_write(tmp_path, {"train.py": _RL_LOOP.replace("ROWS", "fetch()")}) / "train.py")
    assert unknown_rows.fields["per_device_batch"].value == 4
    assert not unknown_rows.fields["grad_accum"].known


def test_a_range_step_not_named_as_a_batch_size_is_not_a_micro_batch(tmp_path):
    text = _RL_LOOP.replace("micro_batch_size", "stride").replace("ROWS", "[0, 1, 2, 3, 4, 5, 6, 7]")
    plan = extract_file(_write(tmp_path, {"train.py": text}) / "train.py")
    assert plan.fields["per_device_batch"].value != 4


def test_padding_up_to_a_multiple_is_not_padding_to_a_common_length():
    from memlint.extract import extract_source

    src = '''import numpy as np
import torch
from torch.utils.data import DataLoader

def periodic(arr, period):
    return np.pad(arr, (0, period - (len(arr) % period)), constant_values=-1).reshape(-1, period)

model = torch.nn.Linear(4, 4)
opt = torch.optim.AdamW(model.parameters())
for x in DataLoader(list(range(8)), batch_size=2, shuffle=True):
    periodic(x, 3)
    model(x).sum().backward()
    opt.step()
'''
    plan = extract_source(src, "train.py")
    assert plan.fields["padding"].value != "max_length"


def test_an_xformers_kernel_in_the_checkouts_model_is_accounted_as_sdpa(tmp_path):
    model = '''import torch.nn as nn
from xformers.ops import memory_efficient_attention


class Cfg:
    def __init__(self):
        self.n_layer = 2
        self.n_head = 4
        self.n_embd = 64
        self.vocab_size = 100


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c.n_embd, 256, bias=False)
        self.w3 = nn.Linear(c.n_embd, 256, bias=False)
        self.w2 = nn.Linear(256, c.n_embd, bias=False)

    def forward(self, q, k, v):
        return memory_efficient_attention(q, k, v)


class Net(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.emb = nn.Embedding(c.vocab_size, c.n_embd)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
'''
    train = '''import torch
from net import Cfg, Net

model = Net(Cfg())
opt = torch.optim.AdamW(model.parameters())
for i in range(10):
    model(torch.zeros(2, 8)).sum().backward()
    opt.step()
'''
    plan = extract_file(_write(tmp_path, {"net.py": model, "train.py": train}) / "train.py")
    assert plan.fields["attn_implementation"].value == "sdpa"
