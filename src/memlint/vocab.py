"""The words every stage shares: dtype names, components, units, file suffixes.

Attention implementations are data (memlint.library.api.attention); everything here is a
fixed vocabulary of memlint's own.
"""

from __future__ import annotations

import re

# Per-GPU memory components, in the order every table shows them. Multi-GPU estimates add
# "buffers" (communication buckets, staging) before "overhead".
COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")

GIB = 1 << 30  # bytes inside, GiB only at the edge

PY_SUFFIXES = (".py", ".ipynb")
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")  # read only when their keys say which framework they belong to
READABLE_SUFFIXES = PY_SUFFIXES + CONFIG_SUFFIXES
# Shell launchers: a folder walk reads the training commands they run (extract/shell.py)
LAUNCHER_SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch", ".fish")  # SLURM job scripts are shell scripts; fish's
# blocks are read as bash's (extract/shell.py fish_as_bash)
LAUNCHER_NAMES = ("Makefile", "makefile", "GNUmakefile")

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}



def _dtype_aliases() -> dict[str, str]:
    """Every spelling of a floating dtype a script, a config or torch uses -> memlint's name: the "dtypes" table
    of data/aliases.json (read here as a file: this level imports nothing of memlint)."""
    global _DTYPE_ALIASES
    if _DTYPE_ALIASES is None:
        import json
        from pathlib import Path

        _DTYPE_ALIASES = json.loads((Path(__file__).parent / "data" / "aliases.json").read_text("utf-8"))["dtypes"]
    return _DTYPE_ALIASES


_DTYPE_ALIASES: dict[str, str] | None = None


def ascii_digits(text: str) -> bool:
    """Whether `text` is a decimal number int() reads: ASCII digits only (`²`, `³` and `١` pass str.isdigit())."""
    return text.isascii() and text.isdigit()


def dtype_name(text: object) -> str | None:
    """"torch.bfloat16", "bfloat16", "bf16" -> "bf16"; "auto" -> "auto"; anything else -> None."""
    if not isinstance(text, str):
        return None
    return _dtype_aliases().get(text.strip().lower().removeprefix("torch."))


def gib(n: int | float, places: int = 2) -> str:
    """Bytes as GiB for people: 1,234.57."""
    return f"{n / GIB:,.{places}f}"


def signed_gib(n: int | float, places: int = 2) -> str:
    """A change in bytes as signed GiB: +1.25 / -0.50."""
    return f"{'+' if n >= 0 else '-'}{abs(n) / GIB:,.{places}f}"


def size_text(n: int | float) -> str:
    """Bytes for a message: GiB with one decimal, MiB below 1 GiB (3.2 GiB, 742 MiB)."""
    if abs(n) < GIB:
        return f"{n / (1 << 20):,.0f} MiB"
    return f"{n / GIB:.1f} GiB"


# What a terminal acts on instead of printing: C0 and C1 controls (ESC starts a title change or a
# screen clear, CR and newline forge lines), DEL, bidirectional overrides (text that reads one
# way and runs another) and lone surrogates (a file name that is not UTF-8). Tab stays.
_UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                          "\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\x1b": "\\x1b"}


def _escape(m: re.Match) -> str:
    c = m.group()
    n = ord(c)
    if c in _NAMED:
        return _NAMED[c]
    if 0xDC80 <= n <= 0xDCFF:  # a byte os.fsdecode could not decode
        return f"\\x{n - 0xDC00:02x}"
    return f"\\x{n:02x}" if n <= 0xFF else f"\\u{n:04x}"


def printable(text: object) -> str:
    """`text` safe to print on a terminal: every control character (ESC, BEL, CR, newline), bidi
    override and undecodable byte written as an escape (\\x1b, \\n, \\u202e). File names, model ids
    and source lines come from the files under review; every human format prints them through this."""
    s = text if isinstance(text, str) else str(text)
    return _UNPRINTABLE.sub(_escape, s) if _UNPRINTABLE.search(s) else s
