"""Research loops read through the script's own plumbing: a config class that is a namespace over the YAML it is
given (`self.__dict__ = dictionary`), the script's own nn.Module around the Hugging Face model (moved, cast and wrapped
in FSDP / DDP as a whole), and the training DataLoader told from evaluation ones by its sampler's shuffling."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import write_checkout, plan_of_command as _command, field_values as _get

_write = partial(write_checkout, dedent=True)




_RUN = """
    import argparse, yaml, torch
    from torch import nn
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler
    from transformers import AutoModelForCausalLM
    from utils import Config


    class Wrapper(nn.Module):
        def __init__(self, base_causallm, latent_id):
            super().__init__()
            self.base_causallm = base_causallm
            self.latent_id = latent_id

        def forward(self, **batch):
            return self.base_causallm(**batch)


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("config_file")
        args = parser.parse_args()
        with open(args.config_file) as f:
            configs = Config(yaml.safe_load(f))
        model = AutoModelForCausalLM.from_pretrained(configs.model_id)
        if configs.wrap:
            model = Wrapper(model, 3)
        model = model.to(0)
        if configs.bf16:
            model.to(torch.bfloat16)
        if configs.only_eval:
            parallel_model = DDP(model, device_ids=[0])
        else:
            parallel_model = FSDP(model, device_id=0)
        optimizer = torch.optim.AdamW(parallel_model.parameters(), lr=1e-4)
        valid = DataLoader(list(range(8)), batch_size=1, sampler=DistributedSampler(list(range(8)), shuffle=False))
        train = DataLoader(list(range(8)), batch_size=configs.batch_size_training, shuffle=False,
                           sampler=DistributedSampler(list(range(8)), shuffle=True))
        for step, batch in enumerate(train):
            loss = parallel_model(**batch).loss / configs.gradient_accumulation_steps
            loss.backward()
            if (step + 1) % configs.gradient_accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()


    if __name__ == "__main__":
        main()
"""

_UTILS = """
    class Config:
        # to access a dict with object.key
        def __init__(self, dictionary):
            self.__dict__ = dictionary
"""


@pytest.mark.parametrize("wrap, bf16, only_eval, want", [
    (True, False, False, {"distributed": "fsdp", "precision": "fp32"}),
    (True, True, False, {"distributed": "fsdp", "precision": "pure-bf16"}),   # the wrapper's cast casts the model
    (False, True, False, {"distributed": "fsdp", "precision": "pure-bf16"}),
    (True, False, True, {"distributed": "none", "precision": "fp32"}),        # DDP of the wrapper: replicated
])
def test_a_yaml_namespace_class_and_a_wrapped_model(tmp_path, monkeypatch, wrap, bf16, only_eval, want):
    cfg = (f"model_id: openai-community/gpt2\nwrap: {wrap}\nbf16: {bf16}\nonly_eval: {only_eval}\n"
           "batch_size_training: 32\ngradient_accumulation_steps: 2\n")
    root = _write(tmp_path, {"run.py": _RUN, "utils.py": _UTILS, "args/cfg.yaml": cfg})
    plan = _command(root, monkeypatch, "torchrun", "--nproc_per_node", "4", "run.py", "args/cfg.yaml")
    assert _get(plan, "model_id", "per_device_batch", "grad_accum", "num_gpus") == {
        "model_id": "openai-community/gpt2", "per_device_batch": 32, "grad_accum": 2, "num_gpus": 4}
    assert _get(plan, *want) == want


def test_an_open_dictionary_leaves_the_attributes_unknown(tmp_path, monkeypatch):
    run = _RUN.replace("configs = Config(yaml.safe_load(f))", "configs = Config(json.load(f))") \
        .replace("import argparse, yaml, torch", "import argparse, json, yaml, torch")
    root = _write(tmp_path, {"run.py": run, "utils.py": _UTILS})  # the JSON is not in the checkout
    plan = _command(root, monkeypatch, "torchrun", "--nproc_per_node", "4", "run.py", "args/missing.json")
    assert not plan.fields["model_id"].known and not plan.fields["per_device_batch"].known


def test_the_shuffling_loader_is_the_training_one(tmp_path, monkeypatch):
    # without the samplers' shuffling the first DataLoader (evaluation, batch 1) would be taken
    run = """
        import torch
        from torch.utils.data import DataLoader, RandomSampler, SequentialSampler
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        opt = torch.optim.AdamW(model.parameters())
        ev = DataLoader(list(range(8)), batch_size=1, sampler=SequentialSampler(list(range(8))))
        tr = DataLoader(list(range(8)), batch_size=6, sampler=RandomSampler(list(range(8))))
        for batch in tr:
            model(**batch).loss.backward()
            opt.step()
    """
    root = _write(tmp_path, {"train.py": run})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert plan.fields["per_device_batch"].value == 6
