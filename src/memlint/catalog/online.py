"""`--online` (or `online = true` in [tool.memlint]): a model id memlint does not know is looked up on the
Hugging Face Hub, and only its config.json is fetched, through huggingface_hub, into the HF cache that memlint
reads offline afterwards. Never by default, never any other file, never trust_remote_code (the JSON is read,
no code is imported). huggingface_hub is imported only here, only when asked."""

from __future__ import annotations

import re
from pathlib import Path

from memlint.errors import MemlintError

HINT = "memlint --online fetches its config.json from the Hugging Face Hub (or online = true in [tool.memlint])"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[A-Za-z0-9][\w.\-]{0,95}$")

_enabled = False


def enable(on: bool) -> None:
    """Turn the lookup on for this run (the CLI's --online or the settings' online)."""
    global _enabled
    _enabled = bool(on)


def enabled() -> bool:
    return _enabled


def looks_like_repo_id(model: str) -> bool:
    """`org/name` as the Hub spells a repository: not a path, not a URL."""
    return bool(_REPO_ID.match(model)) and ".." not in model


def fetch_config(model_id: str) -> Path:
    """The Hub's config.json of `model_id`, downloaded into the HF cache (huggingface_hub's own, with its token
    and its HF_HUB_OFFLINE); one clear error for everything that can go wrong."""
    if not looks_like_repo_id(model_id):
        raise MemlintError(f"{model_id!r}: not a Hugging Face repository id (org/name) to fetch config.json for")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise MemlintError("--online needs huggingface_hub: pip install huggingface_hub") from None
    try:
        return Path(hf_hub_download(repo_id=model_id, filename="config.json"))
    except Exception as exc:  # noqa: BLE001 - not found, gated, offline, network: one line, exit 2
        why = " ".join(str(exc).split())[:200] or type(exc).__name__
        gated = " (a gated model needs `huggingface-cli login` or HF_TOKEN)" if "401" in why or "403" in why else ""
        raise MemlintError(f"{model_id}: could not fetch config.json from the Hugging Face Hub: "
                           f"{type(exc).__name__}: {why}{gated}") from None
