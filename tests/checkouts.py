"""One way to lay out a synthetic checkout for the tests: files by relative path, optionally dedented (a test's
indented triple-quoted text, leading newlines dropped) and marked as a git checkout (an empty .git folder)."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_checkout(root: Path, files: dict[str, str], *, dedent: bool = False, git: bool = False) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n") if dedent else text, encoding="utf-8")
    if git:
        (root / ".git").mkdir(exist_ok=True)
    return root


def git_commit(root: Path, date: str) -> None:
    """Make `root` a real git checkout whose one commit (every file) is dated `date` (YYYY-MM-DD)."""
    import os
    import subprocess

    env = {**os.environ, "GIT_COMMITTER_DATE": f"{date}T12:00:00", "GIT_AUTHOR_DATE": f"{date}T12:00:00"}
    for cmd in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True, env=env, capture_output=True)


def write_notebook(path: Path, source: list[str], colab_gpu: str | None = None) -> Path:
    """A one-cell notebook of `source` lines at `path`, its Colab metadata naming `colab_gpu` (gpuType) when given."""
    import json

    meta = {"colab": {"provenance": [], **({"gpuType": colab_gpu} if colab_gpu else {})}, "accelerator": "GPU"}
    cell = {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}
    path.write_text(json.dumps({"cells": [cell], "metadata": meta, "nbformat": 4, "nbformat_minor": 5}))
    return path


def plan_of_command(root: Path, monkeypatch, *words: str):
    """The one plan of a launch command run from `root` (`bash run.sh ...`, `torchrun ... train.py`)."""
    from memlint.extract import extract_targets
    from memlint.extract.shell import command_targets

    monkeypatch.chdir(root)
    plans = extract_targets(command_targets(list(words)))
    assert len(plans) == 1
    return plans[0]


def field_values(plan, *names: str) -> dict:
    """The plan's values of `names`, by name."""
    return {n: plan.fields[n].value for n in names}


# a Trainer script whose model and micro-batch come from argparse (--model, --batch_size), for launch tests
ARGPARSE_TRAIN = '''
import argparse
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--model", default="gpt2")
p.add_argument("--batch_size", type=int, default=1)
a = p.parse_args()
model = AutoModelForCausalLM.from_pretrained(a.model)
Trainer(model=model, args=TrainingArguments(output_dir="o", per_device_train_batch_size=a.batch_size)).train()
'''
