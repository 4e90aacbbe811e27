"""`tune run RECIPE.py --config X.yaml`: a recipe file of the checkout (a copied and edited torchtune recipe) decides
whether the run shards the model, which the config alone does not say: the recipe's own code wraps the model in
FSDP (FullyShardedDataParallel(...), fully_shard(...), torchtune's shard_model(...)) or in DDP, or neither.
The file is parsed, never run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from memlint.plan import Span, TrainingPlan, Value

# calls that shard a module across the processes (FSDP1, FSDP2, torchtune's FSDP2 helper), and DDP's replication
_SHARDING = frozenset({"FullyShardedDataParallel", "fully_shard", "shard_model"})
_REPLICATING = frozenset({"DistributedDataParallel"})
MAX_RECIPE_BYTES = 1_000_000


def _recipe_file(launch: Any) -> Path | None:
    """The recipe `tune run` is given as a file: the first word of its arguments that names an existing .py file
    (torchrun's options come before it)."""
    from memlint.files import is_file

    base = Path.cwd() / launch.cwd if launch.cwd else Path.cwd()
    for w in launch.argv:
        if w == "--config":
            break
        if w.startswith("-"):
            continue
        if w.endswith(".py") and is_file(base / w):
            return base / w
        if "/" in w and is_file(base / f"{w}.py"):  # `tune run recipes/my_recipe --config X`: the checkout's file
            return base / f"{w}.py"
    return None


_TORCHRUN_VALUED = frozenset({"--nproc_per_node", "--nproc-per-node", "--nnodes", "--node_rank", "--node-rank",
                              "--master_addr", "--master-addr", "--master_port", "--master-port", "--rdzv_backend",
                              "--rdzv-backend", "--rdzv_endpoint", "--rdzv-endpoint", "--rdzv_id", "--rdzv-id"})


def recipe_word(launch: Any) -> tuple[str | None, str | None]:
    """(the recipe `tune run` runs, its --nproc_per_node or None) from the command's words: torchrun's options come
    before the recipe (`tune run --nproc_per_node 4 lora_finetune_distributed --config X`)."""
    words, nproc, i = list(launch.argv), None, 0
    while i < len(words) and words[i].startswith("-") and words[i] != "--config":
        opt, _, inline = words[i].partition("=")
        value = inline if inline else (words[i + 1] if opt in _TORCHRUN_VALUED and i + 1 < len(words) else None)
        if opt in ("--nproc_per_node", "--nproc-per-node"):
            nproc = value
        i += 1 if inline or opt not in _TORCHRUN_VALUED else 2
    if i >= len(words) or words[i].startswith("-"):
        return None, nproc
    return Path(words[i]).stem, nproc


def _wraps(parsed: Any) -> tuple[str | None, int | None, str]:
    """('fsdp' | 'fsdp_shard_grad_op' | 'none', line, call name) of the recipe's first sharding or replicating call,
    or (None, None, '') when it makes none. Import aliases (`FullyShardedDataParallel as FSDP`) are followed."""
    import libcst as cst

    tree, pos = parsed.module, parsed.pos
    alias: dict[str, str] = {}
    for node in _walk(tree):
        if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            for n in node.names:
                name = n.name.value if isinstance(n.name, cst.Name) else None
                if name and n.asname is not None and isinstance(n.asname.name, cst.Name):
                    alias[n.asname.name.value] = name
    for node in _walk(tree):
        if not isinstance(node, cst.Call):
            continue
        f = node.func
        name = f.value if isinstance(f, cst.Name) else f.attr.value if isinstance(f, cst.Attribute) else None
        name = alias.get(name, name)
        if name in _SHARDING:
            text = tree.code_for_node(node)
            kind = "fsdp_shard_grad_op" if "SHARD_GRAD_OP" in text else "none" if "NO_SHARD" in text else "fsdp"
            return kind, pos[node].start.line if node in pos else None, name
        if name in _REPLICATING:
            return "none", pos[node].start.line if node in pos else None, name
    return None, None, ""


def _walk(node: Any):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def recipe_sharding(plan: TrainingPlan, launch: Any) -> TrainingPlan:
    """The distributed field of a torchtune config from the recipe file `tune run` runs, when the config leaves it open."""
    import os

    from memlint import files
    from memlint.extract.parsed import parse

    path = _recipe_file(launch)
    if path is None:
        return plan
    try:
        text = files.read_text(path, MAX_RECIPE_BYTES, what="recipe file")
        parsed = parse(text)
    except Exception:  # unreadable or not Python: the config's own answer stands
        return plan
    kind, line, name = _wraps(parsed)
    shown = os.path.relpath(path)
    if kind is None:
        v = Value("none", "literal", Span(shown, 1), (f"the recipe {shown} wraps the model in no FSDP or DDP: one "
                                                      "process holds it whole",))
    else:
        v = Value(kind, "literal", Span(shown, line or 1), (f"the recipe {shown} wraps the model in {name}(...)"
                                                            f"{' (line %d)' % line if line else ''}",))
    notes = tuple(n for n in plan.notes if not n.startswith("distributed is unknown"))
    return replace(plan.with_values(distributed=v), notes=notes, sources=tuple(dict.fromkeys((*plan.sources, str(path)))))
