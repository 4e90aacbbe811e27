"""A launch command's arguments matched to what the script declares, the way the parsers match them
(argparse, HfArgumentParser, click, fire, hydra overrides), without running either.

Pure functions over words and declarations: the interpreter turns the results into values with
the source "command-line".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

_TRUE = {"true", "yes", "y", "1", "t", "on"}
_FALSE = {"false", "no", "n", "0", "f", "off"}


@dataclass(frozen=True)
class Option:
    """One declared argument, as far as matching words to it needs."""

    dest: str
    flags: tuple[str, ...]              # "--lr", "-l"; a positional has none
    action: str = "store"               # store | store_true | store_false | store_const | count | append | boolean_optional
    nargs: Any = None                   # None | "?" | "*" | "+" | int
    const: Any = None


@dataclass
class Matched:
    """What the words set: dest -> the raw word(s) or the action's value; the words nothing claimed."""

    values: dict[str, Any] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)     # dest -> the flag that set it, as written
    rest: list[str] = field(default_factory=list)


def _takes(opt: Option) -> tuple[int, int]:
    """(min, max) words an option consumes after its flag."""
    if opt.action in ("store_true", "store_false", "store_const", "count", "boolean_optional"):
        return 0, 0
    n = opt.nargs
    if n is None:
        return 1, 1
    if n == "?":
        return 0, 1
    if n == "*":
        return 0, 1 << 30
    if n == "+":
        return 1, 1 << 30
    if isinstance(n, int):
        return n, n
    return 1, 1


def match_argparse(options: Sequence[Option], words: Sequence[str], allow_abbrev: bool = True) -> Matched:
    """argparse's matching of `words` to `options` (long-option prefixes, `--x=v`, nargs, positionals
    in order); words no option claims are left in `rest` (parse_known_args keeps them)."""
    by_flag: dict[str, Option] = {}
    for opt in options:
        for f in opt.flags:
            by_flag[f] = opt
        if opt.action == "boolean_optional":
            for f in opt.flags:
                if f.startswith("--"):
                    by_flag["--no-" + f[2:]] = opt
    positionals = [o for o in options if not o.flags]
    out = Matched()
    i = 0
    words = list(words)
    free: list[tuple[int, str]] = []  # (position, word): what no option claims, positionals first
    unclaimed: list[tuple[int, str]] = []
    while i < len(words):
        w = words[i]
        if w == "--":
            free.extend(enumerate(words[i + 1:], i + 1))
            break
        if not w.startswith("-") or _is_number(w):
            free.append((i, w))
            i += 1
            continue
        flag, inline = (w.split("=", 1) + [None])[:2] if w.startswith("--") and "=" in w else (w, None)
        opt = by_flag.get(flag)
        if opt is None and allow_abbrev and flag.startswith("--"):
            hits = {o.dest: o for f, o in by_flag.items() if f.startswith(flag)}
            opt = next(iter(hits.values())) if len(hits) == 1 else None
        if opt is None and not flag.startswith("--") and len(flag) > 2 and flag[:2] in by_flag:
            opt, inline = by_flag[flag[:2]], flag[2:]  # -lvalue
        if opt is None:
            unclaimed.append((i, w))
            i += 1
            continue
        i += 1
        lo, hi = _takes(opt)
        taken: list[str] = []
        if inline is not None:
            taken = [inline]
        else:
            while len(taken) < hi and i < len(words) and (not words[i].startswith("-") or _is_number(words[i])):
                taken.append(words[i])
                i += 1
        out.flags[opt.dest] = flag
        out.values[opt.dest] = _action_value(opt, flag, taken, out.values.get(opt.dest))
    for opt in positionals:  # in declaration order
        lo, hi = _takes(opt)
        if not free:
            break
        taken, free = [w for _, w in free[:hi]], free[hi:]
        out.values[opt.dest] = _action_value(opt, opt.dest, taken, None)
        out.flags[opt.dest] = opt.dest
    out.rest += [w for _, w in sorted(unclaimed + free)]  # in the command's order (parse_known_args' extras)
    return out


def _action_value(opt: Option, flag: str, taken: list[str], before: Any) -> Any:
    a = opt.action
    if a == "store_true":
        return True
    if a == "store_false":
        return False
    if a == "store_const":
        return opt.const
    if a == "count":
        return (before or 0) + 1
    if a == "boolean_optional":
        return not flag.startswith("--no-")
    value: Any = taken if opt.nargs in ("*", "+") or isinstance(opt.nargs, int) else (taken[0] if taken else opt.const)
    if a == "append":
        return [*(before or []), value]
    return value


def _is_number(w: str) -> bool:
    try:
        float(w)
    except ValueError:
        return False
    return True


def str_to_bool(text: str) -> bool | None:
    """transformers' string_to_bool (HfArgumentParser's bool fields)."""
    low = str(text).strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


def literal(text: str, like: Any = None) -> Any:
    """A command-line word as the value it becomes, converted to the type of `like` (the default)
    when that is known; else the plainest reading (int, float, bool, None, the string)."""
    if isinstance(like, bool):
        b = str_to_bool(text)
        return text if b is None else b
    if isinstance(like, int):
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return text
    if isinstance(like, float):
        try:
            return float(text)
        except ValueError:
            return text
    if isinstance(like, str):
        return text
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def fire_literal(text: str) -> Any:
    """A command-line word as python-fire reads it (fire.parser._LiteralEval): a Python literal, where a bare name
    inside a list, tuple or dict is its own string (`[q_proj,k_proj]` -> ['q_proj', 'k_proj']); any other word as
    literal() reads it. Parsed, never evaluated."""
    import ast

    stripped = text.strip()
    if not (stripped[:1] in "[({" and stripped[-1:] in "])}"):
        return literal(text)
    try:
        tree = ast.parse(stripped, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return literal(text)

    def value(node: ast.AST, depth: int = 0) -> Any:
        if depth > 8:
            raise ValueError("too deep")
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [value(e, depth + 1) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
            return {value(k, depth + 1): value(v, depth + 1) for k, v in zip(node.keys, node.values)}
        raise ValueError("not a literal")

    try:
        return value(tree)
    except (ValueError, TypeError):
        return text


def match_fields(words: Sequence[str], known: Iterable[str], bools: Iterable[str] = (),
                 accept_any: bool = False, abbrev: Iterable[str] | None = None) -> Matched:
    """HfArgumentParser / fire / typer style `--name value` words: `--name=value`, `--name value`,
    a bool `--name` alone (True) or `--no_name` / `--noname` (False). `known` are the declared field
    names; with `accept_any`, undeclared `--name value` pairs are kept too (a TrainingArguments
    field memlint has no list of)."""
    known = set(known)
    bools = set(bools)
    # argparse (HfArgumentParser included) takes an unambiguous prefix of a long option (allow_abbrev):
    # `--max_seq_len 2048` is `--max_seq_length`; `abbrev` lists every option name that could clash
    every = None if abbrev is None else known | set(abbrev)
    out = Matched()
    i = 0
    words = list(words)
    while i < len(words):
        w = words[i]
        if not w.startswith("--") or w == "--":
            out.rest.append(w)
            i += 1
            continue
        name, inline = (w[2:].split("=", 1) + [None])[:2] if "=" in w else (w[2:], None)
        key = name.replace("-", "_")
        if every is not None and key not in every and len(key) >= 3:
            cands = [k for k in every if k.startswith(key)]
            if len(cands) == 1 and cands[0] in known:
                key = cands[0]
        negated = None
        for prefix in ("no_", "no"):
            if key not in known and key.startswith(prefix) and key[len(prefix):] in bools:
                negated = key[len(prefix):]
        if negated is not None:
            out.values[negated] = False
            out.flags[negated] = w
            i += 1
            continue
        if key not in known and not accept_any:
            out.rest.append(w)
            i += 1
            continue
        i += 1
        if inline is not None:
            value: Any = inline
        elif i < len(words) and not (words[i].startswith("--") and not _is_number(words[i])):
            if key in bools and str_to_bool(words[i]) is None:
                value = True
            else:
                value = words[i]
                i += 1
                # nargs="+" fields (data_path a b c): following bare words belong to it too
                extra = []
                while i < len(words) and not words[i].startswith("-") and key not in bools:
                    extra.append(words[i])
                    i += 1
                if extra:
                    value = [value, *extra]
        else:
            value = True
        out.values[key] = value
        out.flags[key] = "--" + name
    return out


def hydra_overrides(words: Sequence[str]) -> list[tuple[str, str, str]]:
    """hydra's `key=value` overrides: (kind, dotted key, value) with kind "set", "add" (+key), "force"
    (++key), "delete" (~key) or "group" (`group=option` is also a "set"; the caller tells them apart)."""
    out = []
    for w in words:
        if w.startswith("-") or "=" not in w:
            continue
        key, value = w.split("=", 1)
        kind = "set"
        if key.startswith("++"):
            kind, key = "force", key[2:]
        elif key.startswith("+"):
            kind, key = "add", key[1:]
        elif key.startswith("~"):
            kind, key = "delete", key[1:]
        out.append((kind, key, value))
    return out
