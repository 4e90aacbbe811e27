"""Whether a text where a model id or path belongs is a placeholder for the user to fill in (`<your_model_path>`,
`path/to/model`, `YOUR_MODEL`, `$MODEL_KEY`) rather than a model: read by the catalog (a placeholder names no
checkpoint, not even by the size in it) and by the extractor (extract/placeholders.py)."""

from __future__ import annotations

import re

_BRACKETS = re.compile(r"<[^<>]*>|\{[^{}]*\}")        # <your_model_path>, {path_to_your_model}
# path/to/model, /path_to/llama, /path_of_model_folder/8B, path2llama
_PATH_TO = re.compile(r"(?:^|[/\\])path(?:[/_ -]?(?:to|of)(?:[/\\_ -]|$)|2[a-z])", re.I)
_YOURS = re.compile(r"(?:^|[/\\_ .-])your(?:[_ -]|$)", re.I)  # your_model, YOUR_MODEL, /your/path
_FILLER = re.compile(r"(?:^|[/\\_ .-])(?:xxx+|\.\.\.)(?:[/\\_ .-]|$)", re.I)  # xxx, xxxx/xxx
_SHELL_VAR = re.compile(r"\$(?:\{[A-Za-z_]\w*[^}]*\}|[A-Za-z_]\w*)")  # $MODEL_KEY, ${BASE_MODEL}: never expanded
_CAPS = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")  # MODEL_PATH, BASE_MODEL_DIR: a shell-style name
_CAPS_WORD = re.compile(r"[A-Z][A-Z0-9_]*")  # /BASE/MODEL/PATH, /DATA/PATH: a path spelled in capitals, word by word
# PATH-TO-DS-CONFIG, MODEL-DIR: capital words joined by hyphens, one of them a word that names a place to fill in
_CAPS_HYPHENS = re.compile(r"[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+")
_FILL_WORDS = {"PATH", "DIR", "FOLDER", "FILE", "CONFIG", "CKPT", "CHECKPOINT", "NAME", "YOUR", "MY"}


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
    if parts and _CAPS_HYPHENS.fullmatch(parts[-1]) and _FILL_WORDS & set(parts[-1].split("-")):
        return True
    if len(parts) >= 2 and all(_CAPS_WORD.fullmatch(p) for p in parts) and parts[-1] in _FILL_WORDS | {"MODEL"}:
        return True  # capitals throughout, ending in a word that names what to fill in
    return bool(parts) and all(_CAPS.fullmatch(p) for p in parts)
