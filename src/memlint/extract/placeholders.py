"""Placeholders where a model id belongs: `<your_model_path>`, `path/to/model`, `{path_to_your_model}`,
`/path/to/llama`, `YOUR_MODEL`, `xxx`, `$MODEL_KEY` (a shell variable the documented command leaves for the
user to set). A README or a launcher writes them for the user to fill in; they name no checkpoint, so the model id is kept as written with the source "placeholder" (not known: nothing is sized
from it) and the user is told to --assume it. A placeholder folder whose
last name is a checkpoint memlint knows (`/path/to/Qwen2.5-7B`) still names that checkpoint."""

from __future__ import annotations

import re
from dataclasses import replace

from memlint.plan import TrainingPlan, Value

_BRACKETS = re.compile(r"<[^<>]*>|\{[^{}]*\}")        # <your_model_path>, {path_to_your_model}
_PATH_TO = re.compile(r"(?:^|[/\\])path[/_ -]?to(?:[/\\_ -]|$)", re.I)   # path/to/model, /path_to/llama
_YOURS = re.compile(r"(?:^|[/\\_ .-])your(?:[_ -]|$)", re.I)  # your_model, YOUR_MODEL, /your/path
_FILLER = re.compile(r"(?:^|[/\\_ .-])(?:xxx+|\.\.\.)(?:[/\\_ .-]|$)", re.I)  # xxx, xxxx/xxx
_SHELL_VAR = re.compile(r"\$(?:\{[A-Za-z_]\w*[^}]*\}|[A-Za-z_]\w*)")  # $MODEL_KEY, ${BASE_MODEL}: never expanded
_CAPS = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")  # MODEL_PATH, BASE_MODEL_DIR: a shell-style name
# a folder named like a checkpoint: a parameter count (Qwen2___5-Coder-1___5B, llama-2-7b-hf, 70B)
_SIZED = re.compile(r"(?:^|[^A-Za-z0-9])\d+(?:[._]+\d+)?[bBmM](?:[^A-Za-z0-9]|$)")


def is_placeholder(text: str) -> bool:
    """Whether `text`, given where a model id or path belongs, is a placeholder rather than a model."""
    t = text.strip()
    if not t:
        return False
    if _BRACKETS.search(t) or _PATH_TO.search(t) or _YOURS.search(t) or _FILLER.search(t):
        return True
    parts = [p for p in re.split(r"[/\\]", t) if p]
    if parts and _SHELL_VAR.fullmatch(parts[-1]):  # a shell variable nobody set: the user's to fill in
        return True
    return bool(parts) and all(_CAPS.fullmatch(p) for p in parts)


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
