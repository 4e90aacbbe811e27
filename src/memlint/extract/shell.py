"""Shell launchers (`scripts/finetune_7b.sh`, Makefile recipes) read for the training commands they
run: each command that launches a Python script of the checkout becomes a (script, launcher) target,
read with the command's arguments. Nothing is run; variables are expanded from the file's own
assignments (`MODEL=...`, `${MODEL:-default}`, `$(MODEL)` in a Makefile).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from memlint.errors import MemlintError
from memlint.extract.launch import Launch, parse_command, resolve_module, tokens
from memlint.vocab import LAUNCHER_NAMES, LAUNCHER_SUFFIXES

_MAX_BYTES = 256_000
_ASSIGN = re.compile(r"^\s*(?:export\s+|local\s+|readonly\s+|declare\s+(?:-\w+\s+)*)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_MAKE_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\?|:|::|\+)?=\s*(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# the launcher's own folder: `$(dirname "${BASH_SOURCE[0]}")`, `$(dirname $0)`, `$(cd "$(dirname "$0")" && pwd)`
_SELF_DIR = re.compile(r"""\$\(\s*dirname\s+["']?(?:\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE|\$\{0\}|\$0)["']?\s*\)"""
                       r"""|`\s*dirname\s+["']?(?:\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE|\$0)["']?\s*`""")
_SELF_DIR_PWD = re.compile(r"""\$\(\s*cd\s+["']?\.["']?\s*(?:&&|;)\s*pwd\s*\)""")
_LAUNCH_WORD = re.compile(r"(?:^|[\s;&|(])(?:python\d*(?:\.\d+)*|torchrun|accelerate|deepspeed|composer|lightning)\b")


def is_launcher(path: Path) -> bool:
    return path.suffix in LAUNCHER_SUFFIXES or path.name in LAUNCHER_NAMES


_FLAG = re.compile(r"(?:^|\s)(--?[A-Za-z][\w.-]*)")


def _logical_lines(text: str) -> Iterator[tuple[int, str, tuple[tuple[str, int], ...]]]:
    """(first line number, the line with its backslash continuations joined, (flag, its line) for
    each option of a continued line)."""
    buf, start, flags = "", 0, []
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf:
            start, flags = i, []
        flags += [(m.group(1), i) for m in _FLAG.finditer(line)]
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        yield start, buf, tuple(flags) if i > start else ()
        buf = ""
    if buf:
        yield start, buf, tuple(flags)


def _expand(text: str, env: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(4) or m.group(5)
        if name in env:
            return env[name]
        if m.group(2) and m.group(3) is not None:  # ${X:-default}
            return _expand(m.group(3), env)
        return m.group(0)
    return _VAR.sub(sub, text)


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value.split(" #", 1)[0].strip()


def _self_dir(text: str) -> str:
    """`$(dirname "${BASH_SOURCE[0]}")` and its spellings as `.`: the launcher's own folder (the folder
    relative paths of a launcher are read from)."""
    return _SELF_DIR_PWD.sub(".", _SELF_DIR.sub(".", text))


def _cd(words: list[str], cwd: str | None) -> str | None:
    """The folder a standalone `cd DIR` line (or `cd DIR || exit 1`) moves the launcher to, relative to
    the launcher's folder; None when the line is not one."""
    if len(words) < 2 or words[0] != "cd" or (len(words) > 2 and words[2] != "||") or "$" in words[1]:
        return None
    if words[1].startswith(("/", "~")):
        return words[1]
    return os.path.normpath(os.path.join(cwd or "", words[1]))


def notebook_shell(path: Path) -> str:
    """A notebook's shell lines (`!python train.py ...`, `%cd dir`) as a shell script, every other line of
    its code cells blank, so line numbers are the notebook's (its code cells' lines, counted in order)."""
    from memlint.extract.source import notebook_cells
    from memlint.files import read_bytes

    try:
        lines, _ = notebook_cells(read_bytes(path).decode("utf-8", errors="replace"), path)
    except (MemlintError, OSError):
        return ""
    out = []
    for line in lines:
        s = line.strip()
        out.append(s[1:] if s.startswith("!") else "cd " + s[4:] if s.startswith("%cd ") else "")
    return "\n".join(out)


def launches(path: Path, shown: str) -> list[Launch]:
    """The training launches a shell script, Makefile or notebook (its `!` lines) runs, with their line numbers."""
    from memlint.files import read_bytes

    try:
        if path.stat().st_size > _MAX_BYTES:
            return []
        if path.suffix == ".ipynb":
            text = notebook_shell(path)
        else:
            text = read_bytes(path).decode("utf-8", errors="replace")  # a regular file within max-file-size
    except OSError:
        return []
    make = path.name in LAUNCHER_NAMES
    env: dict[str, str] = {}
    out: list[Launch] = []
    cwd: str | None = None  # where standalone `cd DIR` lines have moved the launcher
    for line_no, line, flag_lines in _logical_lines(text):
        stripped = _self_dir(line.strip())
        if not stripped or stripped.startswith("#"):
            continue
        if make:
            m = _MAKE_ASSIGN.match(stripped)
            if m and not line.startswith("\t"):
                env[m.group(1)] = _expand(m.group(2).strip(), env)
                continue
            if not line.startswith("\t"):
                continue
            stripped = stripped.lstrip("@-+ ")
        else:
            m = _ASSIGN.match(stripped)
            if m:
                val = m.group(2).strip()
                quoted = len(val) >= 2 and val[0] in "'\"" and val.endswith(val[0])
                if quoted or " " not in val:  # `VAR=value` alone; `VAR=1 python train.py` is a command
                    env[m.group(1)] = _unquote(_expand(val, env))
                    continue
        if stripped.startswith("cd ") and not make:
            try:
                moved = _cd(tokens(_expand(stripped, env)), cwd)
            except MemlintError:
                moved = None
            cwd = moved if moved is not None else cwd
        if not _LAUNCH_WORD.search(stripped):
            continue
        try:
            words = tokens(_expand(stripped, env))
        except MemlintError:
            continue
        if words and words[0] in ("for", "if", "while", "echo", "then", "do", "elif"):
            words = words[1:]
        try:
            launch = parse_command(words, origin=shown, line=line_no)
        except MemlintError:
            continue
        if cwd and cwd != ".":
            launch = replace(launch, cwd=os.path.normpath(os.path.join(cwd, launch.cwd)) if launch.cwd else cwd)
        out.append(replace(launch, flag_lines=flag_lines) if flag_lines else launch)
    return out


def launcher_targets(path: Path, shown: str, roots: list[Path]) -> list:
    """files.Target for each launch of `path` whose script (or module) is a file of the checkout,
    looked up beside the launcher, then in each of `roots` (the checkout, the folder walked)."""
    from memlint.files import Target

    out = []
    for launch in launches(path, shown):
        bases = [path.parent, *roots]
        if launch.cwd:
            bases = [b / launch.cwd for b in bases] + bases
        target = None
        for base in bases:
            if launch.script:
                cand = base / os.path.expanduser(launch.script)
                if cand.is_file() and cand.suffix == ".py":
                    target = cand
            elif launch.module:
                target = resolve_module(launch.module, [base])
            if target is not None:
                break
        if target is None:
            continue
        out.append(Target(target, os.path.normpath(os.path.relpath(target)), False, launch))
    return out
