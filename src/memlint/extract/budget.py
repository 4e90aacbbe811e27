"""What one file may cost extraction: the size of every value the interpreter builds, the
Python it parses, and the time it walks. Past a budget a value is Unknown with a note, never a
crash: a few lines (`s = s + s` nineteen times) must not take 22 GB.

The checks run on every operation, so each is a type test and a comparison. The limits are far
above anything a training script computes (a model id, a path, a batch size).
"""

from __future__ import annotations

import re
import time
from typing import Any

from memlint.errors import MemlintError

MAX_STR = 100_000            # characters of a string the interpreter builds (a format width counts)
MAX_ITEMS = 10_000           # items of a list, tuple, dict or set, nested ones counted
MAX_INT_BITS = 4_096         # bits of an integer (1,233 digits; Python refuses str() past 4,300)
STOPPED_NOTE = "stopped reading after"  # the note a file past MAX_SECONDS carries
MAX_SECONDS = 5.0            # interpreting one script, sibling modules included
MAX_SCRIPT_BYTES = 256_000   # Python parsed per script: the interpreter walks every statement
MAX_SCRIPT_LINES = 10_000    # an 800-line script is a long one
MAX_NOTEBOOK_CELLS = 2_000   # code cells of one notebook
MAX_LOOP_ITEMS = 256        # values one loop variable may take (each is merged with the others)
MAX_ALTERNATIVES = 64        # values one name may hold after branches disagree
MAX_CHAIN = 48               # steps kept in a value's "how it was resolved" chain
SHOWN = 120                  # characters of a value's repr in a chain

OVER = "a value larger than memlint's budget"
MAX_SHELL_VALUE = 100_000    # characters a launcher's variable (or one expanded line) may reach: X=$X$X forty times
MAX_SHELL_DEPTH = 32         # ${A:-${A:-...}} nested this deep at most
MAX_SHELL_SECONDS = 5.0      # reading one launcher's commands
WALL_FACTOR = 6              # the wall-clock cap of a CPU-time budget (a machine shared by six busy processes)
MAX_HYDRA_VALUES = 200_000   # values one Hydra composition may copy and merge (a big option mentioned 500 times)
MAX_JSON_DEPTH = 256         # nesting of a notebook's JSON the position scanner follows  # an Unknown's why, and the note's subject
_DIGITS = re.compile(r"\d+")


def over_script_budget(source: str) -> str | None:
    """Why `source` is past the budget of Python one script may be (None: within it). Checked before a file's
    lines are transformed, so a 2 MB script a launcher names twenty times costs twenty counts, not twenty reads."""
    lines = source.count("\n")
    if lines > MAX_SCRIPT_LINES:
        return f"not analysed: {lines:,} lines, over memlint's budget of {MAX_SCRIPT_LINES:,} lines for one script"
    if len(source) > MAX_SCRIPT_BYTES:
        return (f"not analysed: {len(source):,} characters of Python, over memlint's budget of "
                f"{MAX_SCRIPT_BYTES:,} for one script")
    return None


def fits(value: Any) -> bool:
    """Whether a Python value the interpreter built is within the budget."""
    t = type(value)
    if t is int:
        return value.bit_length() <= MAX_INT_BITS
    if t is str or t is bytes:
        return len(value) <= MAX_STR
    if t in (list, tuple, dict, set, frozenset):
        return _items(value, MAX_ITEMS) >= 0
    return True


def _items(value: Any, left: int) -> int:
    """`left` less the items and characters below `value`; negative once over."""
    stack = [value]
    chars = MAX_STR
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str or t is bytes:
            chars -= len(v)
            if chars < 0:
                return -1
        elif t is int:
            if v.bit_length() > MAX_INT_BITS:
                return -1
        elif t in (list, tuple, set, frozenset):
            left -= len(v)
            if left < 0:
                return -1
            stack.extend(v)
        elif t is dict:
            left -= len(v)
            if left < 0:
                return -1
            stack.extend(v.keys())
            stack.extend(v.values())
    return left


def binop_fits(op: str, a: Any, b: Any) -> bool:
    """Whether `a op b` stays within the budget, decided before it is computed."""
    ta, tb = type(a), type(b)
    if op == "Multiply":
        if ta in (str, bytes, list, tuple) and tb is int:
            return len(a) * max(b, 0) <= (MAX_STR if ta in (str, bytes) else MAX_ITEMS)
        if tb in (str, bytes, list, tuple) and ta is int:
            return len(b) * max(a, 0) <= (MAX_STR if tb in (str, bytes) else MAX_ITEMS)
        if ta is int and tb is int:
            return a.bit_length() + b.bit_length() <= MAX_INT_BITS
    elif op == "Add" and ta is tb and ta in (str, bytes, list, tuple):
        return len(a) + len(b) <= (MAX_STR if ta in (str, bytes) else MAX_ITEMS)
    elif op == "LeftShift" and ta is int and tb is int:
        return b <= MAX_INT_BITS and a.bit_length() + b <= MAX_INT_BITS
    elif op == "Power" and tb is int and ta in (int, float):
        return ta is float or b <= 0 or a.bit_length() * b <= MAX_INT_BITS
    elif op == "Modulo" and ta in (str, bytes):
        return spec_fits(a) and len(a) + a.count("%" if ta is str else b"%") * _longest(b) <= MAX_STR
    return True


def _longest(args: Any) -> int:
    """The longest text one argument of a format may become."""
    vals = args.values() if isinstance(args, dict) else args if isinstance(args, (tuple, list)) else (args,)
    return max((len(v) if isinstance(v, (str, bytes)) else len(str(v)) for v in vals), default=0)


def spec_fits(spec: str | bytes) -> bool:
    """Whether every width and precision written in a format (a `%` format, a format spec)
    is within the budget: `f"{x:1500000000}"` allocates 1.5 GB before anything can be checked."""
    if isinstance(spec, bytes):
        spec = spec.decode("latin-1")
    return all(len(d) < 6 or int(d) <= MAX_STR for d in _DIGITS.findall(spec))


def format_fits(fmt: str, args: list, kwargs: dict) -> bool:
    """str.format: the widths in the replacement fields, no width taken from an argument, and
    the fields times the longest argument within the budget."""
    import string

    try:
        fields = [spec for _, name, spec, _ in string.Formatter().parse(fmt) if name is not None]
    except ValueError:
        return True  # str.format raises the same error: an Unknown anyway
    if not all("{" not in spec and spec_fits(spec) for spec in fields):
        return False
    return len(fmt) + len(fields) * _longest([*args, *kwargs.values()]) <= MAX_STR


def join_fits(sep: str, items: list) -> bool:
    if len(items) > MAX_ITEMS:
        return False
    total = len(sep) * max(len(items) - 1, 0)
    for x in items:
        total += len(x) if isinstance(x, (str, bytes)) else 0
    return total <= MAX_STR


def replace_fits(s: str, old: str, new: str, count: int = -1) -> bool:
    if len(new) <= len(old):
        return True
    n = s.count(old) if old else len(s) + 1
    if count >= 0:
        n = min(n, count)
    return len(s) + n * (len(new) - len(old)) <= MAX_STR


def shown(value: Any) -> str:
    """A value's repr for a chain, cut to SHOWN characters."""
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def capped(chain: tuple[str, ...]) -> tuple[str, ...]:
    """A chain of at most MAX_CHAIN steps: the first ones and the last ones."""
    if len(chain) <= MAX_CHAIN:
        return chain
    head = MAX_CHAIN // 4
    return chain[:head] + ("…",) + chain[-(MAX_CHAIN - head - 1):]


class OverBudget(MemlintError):
    """A file past one of its budgets (size, depth, time): a one-line MEM001 note on it, never a crash."""


class Deadline:
    """The time one script's interpretation may take; checked every 1,024 statements.

    Counted in this thread's CPU time, so a file reads the same on an idle laptop and on a CI runner or a
    pre-commit run sharing its cores (wall-clock budgets dropped files at random under load); a wall-clock
    cap of WALL_FACTOR times the budget still ends a read that waits instead of computing."""

    __slots__ = ("cpu_end", "wall_end")

    def __init__(self, seconds: float | None = None) -> None:
        budget = MAX_SECONDS if seconds is None else seconds
        self.cpu_end = time.thread_time() + budget
        self.wall_end = time.monotonic() + budget * WALL_FACTOR

    def passed(self) -> bool:
        return time.thread_time() > self.cpu_end or time.monotonic() > self.wall_end
