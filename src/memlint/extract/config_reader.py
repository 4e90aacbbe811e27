"""A config named alone in a format no framework reader knows (a repository's own Hydra or YAML config): the
checkout's script that reads it, found without running anything, and the plan of that script's run.

A script reads the config when its `@hydra.main(config_path=..., config_name=...)` names it (relative to the
script's folder), or when a string literal of the script is the config's path (relative to the script's folder or to
the checkout's root: `yaml.safe_load(open("configs/train.yaml"))`, an argparse default). Scripts are looked for in the
config's checkout: at most MAX_SCRIPTS Python files, the config's stem in their text first; of those that read it,
the first whose plan trains (a trainer or a training loop) is the answer."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

MAX_SCRIPTS = 400
_SKIP = {".git", ".venv", "venv", "node_modules", "__pycache__", "site-packages", "build", "dist", ".tox"}
_HYDRA = re.compile(r"""@hydra\.main\(([^)]*)\)""", re.S)
_KW = re.compile(r"""(config_path|config_name)\s*=\s*(['"])([^'"]*)\2""")
_STRING = re.compile(r"""(['"])([^'"\n]{3,200})\1""")


def _candidates(config: Path, root: Path) -> list[tuple[Path, str]]:
    """The checkout's Python files (MAX_SCRIPTS at most) whose text holds the config's stem, with their text."""
    from memlint.files import read_text

    out: list[tuple[Path, str]] = []
    seen = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.startswith("."))
        for n in sorted(names):
            if not n.endswith(".py"):
                continue
            seen += 1
            if seen > MAX_SCRIPTS:
                return out
            p = Path(folder) / n
            try:
                text = read_text(p)
            except Exception:  # noqa: BLE001 - an unreadable file reads nothing
                continue
            if config.stem in text:
                out.append((p, text))
    return out


def _reads(script: Path, text: str, config: Path, root: Path) -> bool:
    """Whether the script's text names the config: its @hydra.main, or a string of the config's path."""
    target = config.resolve()
    for m in _HYDRA.finditer(text):
        kw = {k: v for k, _, v in _KW.findall(m.group(1))}
        if "config_name" in kw:
            name = kw["config_name"] if kw["config_name"].endswith((".yaml", ".yml")) else kw["config_name"] + ".yaml"
            if (script.parent / kw.get("config_path", ".") / name).resolve() == target:
                return True
    for m in _STRING.finditer(text):
        ref = m.group(2)
        if ref.endswith(config.suffix) and any((base / ref).resolve() == target for base in (script.parent, root)):
            return True
    return False


def reading_script(config: Path, shown: str, extract_file: Any) -> Any:
    """The plan of the checkout's script that reads `config` (None when no script of the checkout trains from it);
    `extract_file` is memlint.extract's, passed in."""
    from memlint import files

    root = Path(files.checkout_root(config))
    for script, text in _candidates(config, root):
        if not _reads(script, text, config, root):
            continue
        rel = os.path.relpath(script)
        try:
            plan = extract_file(script, None, rel)
        except Exception:  # noqa: BLE001 - a script memlint cannot read is no answer
            continue
        if plan.get("trainer").known:
            from dataclasses import replace

            note = (f"{shown} is read as {rel} runs it: that script reads this config (no framework memlint knows "
                    "reads it alone)")
            return replace(plan, notes=(note,) + plan.notes, via=plan.via or rel)
    return None
