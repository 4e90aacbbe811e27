"""Which files of a walked checkout are training files (extract.trains): a hand-written loop steps an optimizer, or
runs backward with an optimizer it builds, a model it loads, or a `.step()` on an optimizer memlint cannot see built.
A gradient check (backward alone, a kernel's test) and a helper that builds an optimizer and hands it on are not
training files: a walk of torchtitan's checkout had flagged its MoE kernels and fault-tolerance manager with three
MEM003s each."""

from memlint.extract import extract_paths

KERNEL_TEST = '''import torch
def test_combine():
    out = torch.randn(8, 4, requires_grad=True)
    weight = torch.empty(8).fill_(1.0)
    p = torch.matmul(weight, out)
    p.sum().backward()
'''
OPTIMIZER_HELPER = '''import torch
def outer_optimizers(model_parts):
    return [torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.7, momentum=0.9) for m in model_parts]
'''
OWN_OPTIMIZER_LOOP = '''import torch
from mypkg.optim import build_optimizers
from mypkg.model import Transformer
model = Transformer()
optimizers = build_optimizers(model)
for batch in range(10):
    loss = model(batch).sum()
    loss.backward()
    optimizers.step()
'''
TORCH_LOOP = '''import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
for batch in loader:
    model(**batch).loss.backward()
    opt.step()
'''


def test_only_training_loops_are_training_files(tmp_path):
    for name, text in (("kernel_test.py", KERNEL_TEST), ("helper.py", OPTIMIZER_HELPER),
                       ("own_loop.py", OWN_OPTIMIZER_LOOP), ("torch_loop.py", TORCH_LOOP)):
        (tmp_path / name).write_text(text)
    found = {p.path.rsplit("/", 1)[-1]: p.value("trainer") for p in extract_paths([tmp_path])}
    assert found == {"own_loop.py": "custom-loop", "torch_loop.py": "custom-loop"}


def test_a_named_file_is_still_read(tmp_path):
    p = tmp_path / "kernel_test.py"
    p.write_text(KERNEL_TEST)
    (plan,) = extract_paths([p])
    assert plan.value("trainer") is None  # read, with nothing to size: its fields say why


# ---- a walk reads only files with a training signal (extract.training_signal; issue #26, item 3) ---------------

MODEL_MODULE = '''"""A model definition, as a vendored library has thousands: it imports torch and trains nothing.

Example:

    >>> trainer = Trainer(model=model)
    >>> trainer.train()
    >>> loss.backward()
"""
import torch
from torch import nn


class Block(nn.Module):  # not a training loop: optimizer.step() is the caller's
    def forward(self, x):
        return torch.relu(x)
'''
SIGNALS = {
    "hf_trainer.py": 'from transformers import Trainer\nTrainer(model=m, args=a).train()\n',
    "trl_subclass.py": 'import trl\nclass MyTrainer(trl.SFTTrainer):\n    pass\n',
    "lightning_fit.py": 'import lightning as L\nimport torch\nL.Trainer(max_epochs=1).fit(module)\n',
    "fabric.py": 'import torch\nfrom lightning import Fabric\nfabric = Fabric()\n',
    "ds_engine.py": 'import deepspeed\nengine, *_ = deepspeed.initialize(model=m, config="ds.json")\n',
    "xtuner_cfg.py": 'import torch\nfrom transformers import AutoModelForCausalLM\nfrom xtuner.model import SupervisedFinetune\n'
                     'model = dict(type=SupervisedFinetune, llm=dict(type=AutoModelForCausalLM.from_pretrained,\n'
                     '    pretrained_model_name_or_path="Qwen/Qwen2.5-0.5B"))\n',
    "loop.py": TORCH_LOOP,
}


def test_the_signal_is_code_not_a_docstring_or_a_comment():
    from memlint.extract import signal_words, training_signal

    assert signal_words(MODEL_MODULE.encode()) and not training_signal(MODEL_MODULE.encode())
    assert not training_signal(b"import torch\n# optimizer.step()\nx = 'loss.backward()'\n")
    assert not training_signal(b"import torch\nself.training = True\nmodel.train_dataset = d\n")  # not .train(
    for name, text in SIGNALS.items():
        assert training_signal(text.encode()), name
    # a notebook's JSON is its text; a file that does not tokenize is read (the parse reports it)
    assert training_signal(b'{"cells": [{"source": "import torch\\nloss.backward()"}]}', notebook=True)
    assert training_signal(b"import torch\nloss.backward()\nx = (\n")


def test_a_walk_parses_only_the_files_with_a_training_signal(tmp_path, monkeypatch):
    import memlint.extract.interp as interp

    vendored = tmp_path / "vendor" / "lib"
    vendored.mkdir(parents=True)
    for i in range(20):
        (vendored / f"modeling_{i}.py").write_text(MODEL_MODULE)
    (vendored / "__init__.py").write_text("import torch\nfrom .modeling_0 import *\n")
    for name, text in SIGNALS.items():
        (tmp_path / name).write_text(text)
    parsed: list[str] = []
    real = interp.parse
    monkeypatch.setattr(interp, "parse", lambda source: parsed.append(source) or real(source))
    found = {p.path.rsplit("/", 1)[-1] for p in extract_paths([tmp_path])}
    assert found == set(SIGNALS) - {"trl_subclass.py"}  # a trainer class defined and never built: read, not kept
    assert not any("class Block" in text for text in parsed)  # no model module was parsed
    assert len(parsed) == len(SIGNALS)


def test_every_fixture_that_trains_shows_a_training_signal():
    # the fixtures' goldens say which scripts train (a trainer or a loop): a walk must not skip one of them
    import json
    from pathlib import Path

    from memlint.extract import training_signal

    root = Path(__file__).resolve().parent.parent / "fixtures"
    checked = 0
    for golden in (root / "golden").glob("*.json"):
        name = golden.name.removesuffix(".json")
        trainer = json.loads(golden.read_text()).get("trainer", {}).get("value")
        script = next((p for p in (root / "scripts").rglob(name.replace("__", "/")) if p.is_file()), None)
        if trainer is None or script is None or script.suffix not in (".py", ".ipynb"):
            continue
        assert training_signal(script.read_bytes(), script.suffix == ".ipynb"), script
        checked += 1
    assert checked >= 20
