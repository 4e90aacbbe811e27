"""Placeholders where a model id belongs: `<your_model_path>`, `path/to/model`, `{path_to_your_model}`,
`/path/to/llama`, `YOUR_MODEL`, `xxx`, `$MODEL_KEY` (a shell variable the documented command leaves for the
user to set). A README or a launcher writes them for the user to fill in; they name no checkpoint, so the model id is kept as written with the source "placeholder" (not known: nothing is sized
from it) and the user is told to --assume it. A placeholder folder whose
last name is a checkpoint memlint knows (`/path/to/Qwen2.5-7B`) still names that checkpoint."""

from __future__ import annotations

import re
from dataclasses import replace

from memlint.catalog.names import is_placeholder  # noqa: F401 - the extractor's name for it
from memlint.plan import TrainingPlan, Value

# a folder named like a checkpoint: a parameter count (Qwen2___5-Coder-1___5B, llama-2-7b-hf, 70B)
_SIZED = re.compile(r"(?:^|[^A-Za-z0-9])\d+(?:[._]+\d+)?[bBmM](?:[^A-Za-z0-9]|$)")


def _names_a_model(text: str) -> bool:
    """A placeholder prefix in front of a folder that names a checkpoint (`/path/to/Qwen2___5-Coder-1___5B/`):
    the user's local copy of that model, which memlint sizes by the folder's name where it knows it."""
    last = [p for p in re.split(r"[/\\]", text.strip()) if p]
    if last and _SIZED.search(last[-1]) and not is_placeholder(last[-1]):
        return True
    from memlint.catalog import resolve
    from memlint.errors import MemlintError

    try:
        resolve(text)
    except MemlintError:
        return False
    return True


def unplaceholder(plan: TrainingPlan | None) -> TrainingPlan | None:
    """`plan` with a placeholder model id marked (kept as written, not known), and a note that says what to
    --assume."""
    if plan is None:
        return plan
    v = plan.fields.get("model_id")
    if v is None or not v.known:
        return plan
    values = list(v.candidates) if v.candidates else [v.value]
    if not all(isinstance(x, str) and is_placeholder(x) and not _names_a_model(x) for x in values):
        return plan
    shown = ", ".join(repr(x) for x in values)
    why = f"{shown} is a placeholder for the user to fill in, not a model id"
    fields = dict(plan.fields)
    fields["model_id"] = Value(v.value, "placeholder", v.span, (*v.chain, why), v.candidates)
    note = f"model_id is unknown ({why}); pass --assume model_id=<the Hugging Face id or local path>"
    return replace(plan, fields=fields, notes=tuple(dict.fromkeys([*plan.notes, note])))
