"""Hydra / OmegaConf / Lightning runs read by capability (issue #27, round 9): a @hydra.main app composed from its
config groups with the command's overrides, OmegaConf resolvers the script registers evaluated on known values
(a GPU count the machine decides known only where every count gives the same answer), hydra.utils.instantiate
building the `_target_` (a Lightning Trainer, its strategy, an optimizer), a package's `from . import sub`, token
blocks wrapped in [bos] ... [eos], and a SLURM batch script's GPUs and tasks. Each test is a tiny made-up checkout
written from the pattern; no public file is copied."""

from __future__ import annotations

import textwrap

import pytest
from pathlib import Path

from memlint.extract import extract_targets
from memlint.extract.hydra import Leaf, arithmetic, resolve_tree
from memlint.extract.launch import tokens
from memlint.extract.shell import command_targets, launches
from memlint.extract.values import DeviceCount
from functools import partial
from checkouts import write_checkout


_write = partial(write_checkout, dedent=True, git=True)


def _plan(root: Path, command: str, monkeypatch):
    monkeypatch.chdir(root)
    plans = extract_targets(command_targets(tokens(command)))
    assert len(plans) == 1
    return plans[0]


def _v(plan, field):
    return plan.get(field).value, plan.get(field).source


# ---- the interpolation engine ----------------------------------------------------------------------------------


def _leaf(v):
    return Leaf(v, "c.yaml", 1)


def _calls(name, args, how):
    if name == "gpus":
        return DeviceCount("every GPU the machine shows")
    if name == "ceil_div":
        return (args[0] + args[1] - 1) // args[1]
    if name == "calc":
        return arithmetic(args[0])
    return None


def test_relative_nested_and_resolver_interpolations_resolve():
    tree = {"run": {"total": _leaf(64), "nodes": _leaf(2), "per_node": _leaf("${ceil_div:${.total}, ${calc:${run.nodes} * 4}}"),
                    "name": _leaf("job_${.total}"), "home": _leaf("${oc.env:NOPE,/tmp}")},
            "copy": _leaf("${run.per_node}")}
    resolve_tree(tree, _calls, [])
    assert tree["run"]["per_node"].value == 8
    assert tree["copy"].value == 8
    assert tree["run"]["name"].value == "job_64"
    assert tree["run"]["home"].value == "/tmp"


def test_a_value_of_the_machines_gpu_count_is_known_only_when_every_count_agrees():
    tree = {"data": {"global": _leaf(512), "micro": _leaf("${ceil_div:${.global}, ${calc:${trainer.devices} * 1}}")},
            "trainer": {"devices": _leaf("${gpus:}"),
                        "accum": _leaf("${ceil_div:${data.global}, ${calc:${trainer.devices} * ${data.micro}}}")}}
    resolve_tree(tree, _calls, [])
    assert isinstance(tree["trainer"]["devices"], DeviceCount)
    assert tree["trainer"]["accum"].value == 1  # 512 / (n * ceil(512 / n)) rounds up to 1 for every n
    assert not isinstance(tree["data"]["micro"], Leaf)  # 512, 256, 171, ...: the machine decides


def test_an_unregistered_resolver_and_eval_of_code_stay_unknown():
    tree = {"a": _leaf("${nobody:1}"), "b": _leaf("${calc:'len(__import__(\"os\").listdir())'}")}
    resolve_tree(tree, _calls, [])
    assert not isinstance(tree["a"], Leaf) and not isinstance(tree["b"], Leaf)
    assert arithmetic("(7 + 1) // 2 * 3") == 12 and arithmetic("__import__('os')") is None


# ---- a Hydra + Lightning app ----------------------------------------------------------------------------------------

_APP = {
    "train.py": '''
        import hydra
        import lightning as L
        import torch
        from omegaconf import OmegaConf

        import pkg

        OmegaConf.register_new_resolver("n_gpus", torch.cuda.device_count)
        OmegaConf.register_new_resolver("ceil", lambda a, b: (a + b - 1) // b)
        OmegaConf.register_new_resolver("ev", eval)


        class Module(L.LightningModule):
            def __init__(self, cfg):
                super().__init__()
                self.cfg = cfg
                self.net = pkg.net.Net(cfg.net.vocab, cfg.net.width)

            def configure_optimizers(self):
                return hydra.utils.instantiate(self.cfg.optim, params=self.parameters())

            def training_step(self, batch, i):
                return self.net(batch).sum()


        def blocks(ids, size):
            out = []
            n = size - 2
            for i in range(0, len(ids), n):
                out.append([0] + ids[i : i + n] + [1])
            return out


        @hydra.main(version_base=None, config_path="conf", config_name="main")
        def main(cfg):
            data = blocks(list(range(10000)), cfg.net.seq)
            loader = torch.utils.data.DataLoader(data, batch_size=cfg.data.micro)
            trainer = hydra.utils.instantiate(cfg.trainer, strategy=hydra.utils.instantiate(cfg.strategy))
            trainer.fit(Module(cfg), loader)


        if __name__ == "__main__":
            main()
    ''',
    "pkg/__init__.py": "from . import net\n",
    "pkg/net.py": '''
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self, vocab, width):
                super().__init__()
                self.emb = nn.Embedding(vocab, width)
                self.out = nn.Linear(width, vocab)

            def forward(self, x):
                return self.out(self.emb(x))
    ''',
    "conf/main.yaml": '''
        defaults:
          - _self_
          - net: tiny
          - /strategy: ddp

        data:
          total: 256
          micro: ${ceil:${.total}, ${ev:${trainer.devices} * ${trainer.num_nodes}}}

        optim:
          _target_: torch.optim.AdamW
          lr: 1e-4

        trainer:
          _target_: lightning.Trainer
          devices: ${n_gpus:}
          num_nodes: 1
          precision: bf16-mixed
          accumulate_grad_batches: ${ceil:${data.total}, ${ev:${trainer.devices} * ${data.micro} * ${trainer.num_nodes}}}
    ''',
    "conf/net/tiny.yaml": "vocab: 100\nwidth: 32\nseq: 64\n",
    "conf/net/big.yaml": "vocab: 1000\nwidth: 64\nseq: 256\n",
    "conf/strategy/ddp.yaml": "_target_: lightning.pytorch.strategies.DDPStrategy\nfind_unused_parameters: false\n",
}


def test_a_hydra_lightning_app_reads_its_trainer_from_instantiate(tmp_path, monkeypatch):
    root = _write(tmp_path, _APP)
    plan = _plan(root, "python train.py net=big data.total=512", monkeypatch)
    assert _v(plan, "trainer")[0] == "lightning"
    assert _v(plan, "precision")[0] == "amp-bf16"
    assert _v(plan, "optimizer")[0] == "adamw_torch"
    assert _v(plan, "distributed")[0] == "none"  # DDPStrategy: every rank holds the whole model
    assert _v(plan, "grad_accum")[0] == 1  # the same for every GPU count the machine may have
    assert _v(plan, "per_device_batch")[1] == "unknown"  # 512 / the machine's GPUs
    assert _v(plan, "max_length")[0] == 256  # the chosen group's seq, [0] + 254 tokens + [1]
    assert _v(plan, "packing")[0] is True


def test_the_launchs_visible_gpus_decide_the_device_count_resolver(tmp_path, monkeypatch):
    root = _write(tmp_path, _APP)
    plan = _plan(root, "CUDA_VISIBLE_DEVICES=0,1,2,3 python train.py data.micro=16 data.total=512", monkeypatch)
    assert _v(plan, "per_device_batch")[0] == 16
    assert _v(plan, "grad_accum")[0] == 8  # ceil(512 / (4 GPUs x 16))
    assert _v(plan, "num_gpus")[0] == 4


def test_a_resolver_registered_after_the_entry_is_decorated_is_used(tmp_path, monkeypatch):
    files = dict(_APP)
    text = textwrap.dedent(files["train.py"])
    regs = [ln for ln in text.splitlines() if ln.startswith("OmegaConf.register_new_resolver")]
    for ln in regs:
        text = text.replace(ln + "\n", "")
    text = text.replace('if __name__ == "__main__":\n', 'if __name__ == "__main__":\n' + "".join(f"    {ln}\n" for ln in regs))
    files["train.py"] = text
    root = _write(tmp_path, files)
    plan = _plan(root, "CUDA_VISIBLE_DEVICES=0,1 python train.py", monkeypatch)
    assert _v(plan, "per_device_batch")[0] == 128
    assert _v(plan, "grad_accum")[0] == 1


def test_instantiate_builds_a_checkout_target_with_the_configs_keys(tmp_path, monkeypatch):
    root = _write(tmp_path, {
        "run.py": '''
            import hydra
            import torch


            @hydra.main(config_path="cfg", config_name="c")
            def main(cfg):
                model = hydra.utils.instantiate(cfg.model)
                opt = hydra.utils.instantiate(cfg.opt, model.parameters())
                for batch in torch.utils.data.DataLoader(range(100), batch_size=cfg.bs):
                    model(batch).sum().backward()
                    opt.step()


            main()
        ''',
        "models/__init__.py": "",
        "models/lm.py": '''
            import torch.nn as nn


            class LM(nn.Module):
                def __init__(self, vocab, dim):
                    super().__init__()
                    self.e = nn.Embedding(vocab, dim)
                    self.h = nn.Linear(dim, vocab)
        ''',
        "cfg/c.yaml": '''
            bs: 4
            model:
              _target_: models.lm.LM
              vocab: 500
              dim: 16
            opt:
              _target_: torch.optim.SGD
              _partial_: false
              lr: 0.1
        ''',
    })
    plan = _plan(root, "python run.py ++bs=8", monkeypatch)
    assert _v(plan, "optimizer")[0] == "sgd"
    assert _v(plan, "per_device_batch")[0] == 8
    assert _v(plan, "torch_dtype")[0] == "fp32"  # the checkout's own nn.Module


# ---- SLURM ---------------------------------------------------------------------------------------------------------


def test_an_sbatch_scripts_gpus_and_tasks_are_the_runs(tmp_path, monkeypatch):
    root = _write(tmp_path, {"job.sh": '''
        #!/bin/bash
        #SBATCH -J x
        #SBATCH -N 1
        #SBATCH --ntasks-per-node=4
        #SBATCH --gres=gpu:a100:4   # four GPUs
        srun python -u -m train lr=1
    ''', "train.py": "print(1)\n"})
    monkeypatch.chdir(root)
    [launch] = launches(root / "job.sh", "job.sh")
    assert launch.env.get("CUDA_VISIBLE_DEVICES") == "0,1,2,3"
    assert launch.processes == 4 and launch.module == "train"


def test_a_shell_script_without_sbatch_lines_is_unchanged(tmp_path, monkeypatch):
    root = _write(tmp_path, {"run.sh": "python train.py\n", "train.py": "print(1)\n"})
    monkeypatch.chdir(root)
    [launch] = launches(root / "run.sh", "run.sh")
    assert "CUDA_VISIBLE_DEVICES" not in launch.env and launch.processes is None


def test_a_resolver_given_a_whole_node_is_unknown_not_an_error():
    tree = {"dirs": [_leaf("/a"), _leaf("/b")], "run": _leaf("${ceil_div:x, ${dirs}}"), "pick": _leaf("${oc.select:nope, ${dirs}}")}
    resolve_tree(tree, _calls, [])
    assert not isinstance(tree["run"], Leaf) and not isinstance(tree["pick"], Leaf)


_COMPOSE = """
    import argparse
    from pathlib import Path
    from hydra import {init}, compose
    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

    def load_config(config_file, overrides=[]):
        {where}
        with {init}({key}=config_dir, version_base=None):
            config = compose(config_name=Path(config_file).name, overrides=overrides)
        OmegaConf.resolve(config)
        return OmegaConf.to_container(config)

    p = argparse.ArgumentParser()
    p.add_argument("-c", "--config_file", required=True)
    p.add_argument("-o", "--overrides", nargs="+", default=[])
    a = p.parse_args()
    cfg = load_config(a.config_file, a.overrides)
    targs, = HfArgumentParser((TrainingArguments,)).parse_dict(cfg["training_args"], allow_extra_keys=True)
    model = AutoModelForCausalLM.from_pretrained(cfg["model"]["name"])
    collator = instantiate(cfg["collator"])
    Trainer(model=model, args=targs, data_collator=collator).train()
"""


@pytest.mark.parametrize("init, key, where", [
    ("initialize_config_dir", "config_dir", "config_dir = Path(config_file).parent.absolute().__str__()"),
    ("initialize", "config_path", 'config_dir = "conf"'),  # relative to the module that calls initialize()
])
def test_a_config_composed_by_hydras_compose_api_in_a_helper(tmp_path, monkeypatch, init, key, where):
    root = _write(tmp_path, {
        "train.py": _COMPOSE.replace("{init}", init).replace("{key}", key).replace("{where}", where),
        "conf/train.yaml": "defaults:\n  - model: small\n  - _self_\ncollator:\n  _target_: mypkg.collate.Collator.build\n"
                           "training_args:\n  per_device_train_batch_size: 4\n  bf16: true\n",
        "conf/model/small.yaml": "name: gpt2\n",
        "mypkg/__init__.py": "",  # a class's own method as the _target_
        "mypkg/collate.py": "class Collator:\n    @classmethod\n    def build(cls):\n        return cls()\n",
    })
    plan = _plan(root, "python train.py -c conf/train.yaml -o training_args.per_device_train_batch_size=8 "
                       "model.name=Qwen/Qwen2.5-0.5B", monkeypatch)
    got = {n: plan.get(n).value for n in ("model_id", "per_device_batch", "precision")}
    assert got == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 8, "precision": "amp-bf16"}
