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
