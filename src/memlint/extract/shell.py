"""Shell launchers (`scripts/finetune_7b.sh`, Makefile recipes) read for the training commands they
run: each command that launches a Python script of the checkout becomes a (script, launcher) target,
read with the command's arguments. Nothing is run; variables are expanded from the file's own
assignments (`MODEL=...`, `${MODEL:-default}`, `$(MODEL)` in a Makefile).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from memlint.errors import MemlintError
from memlint.extract.launch import (Launch, command_target, framework_config, parse_command, resolve_module, shell_script,
                                    tokens)
from memlint.vocab import LAUNCHER_NAMES, LAUNCHER_SUFFIXES

_MAX_BYTES = 256_000
_ASSIGN = re.compile(r"^\s*(?:export\s+|local\s+|readonly\s+|declare\s+(?:-\w+\s+)*)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_MAKE_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\?|:|::|\+)?=\s*(.*)$")
# A default's text stops at the next `${` (nested defaults are _defaults' business): each match attempt then
# scans to the next `${`, not to the end of the line (8,000 unclosed `${A:-` were a quadratic scan).
_UPTO = r"(?:[^}$]|\$(?!\{))*"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=])(" + _UPTO + r"))?\}|\$([A-Za-z_][A-Za-z0-9_]*)"
                  r"|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# the launcher's own folder: `$(dirname "${BASH_SOURCE[0]}")`, `$(dirname $0)`, `$(cd "$(dirname "$0")" && pwd)`
_SELF_DIR = re.compile(r"""\$\(\s*dirname\s+["']?(?:\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE|\$\{0\}|\$0)["']?\s*\)"""
                       r"""|`\s*dirname\s+["']?(?:\$\{BASH_SOURCE(?:\[0\])?\}|\$BASH_SOURCE|\$0)["']?\s*`""")
_SELF_DIR_PWD = re.compile(r"""\$\(\s*cd\s+["']?\.["']?\s*(?:&&|;)\s*pwd\s*\)""")
_ARRAY_KEY = "[@]"  # env key of a bash array `A=(x y)` (its words joined by NUL)
_ARRAY_DEF = re.compile(r"^\s*(?:local\s+|declare\s+-a\s+)?([A-Za-z_][A-Za-z0-9_]*)=\((.*)\)\s*(?:#.*)?$")
_ARRAY_REF = re.compile(r"\$\{(#?)([A-Za-z_][A-Za-z0-9_]*)\[(@|\*|\d+)\]\}")
_SUBST = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(//?)((?:[^/}$]|\$(?!\{))*)/(" + _UPTO + r")\}")
_DEFAULT_HEAD = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-=])")
_POSITIONAL = re.compile(r"""^["']?\$(?:\{\d+\}|\d)["']?$""")
# the launcher's own arguments when a command gives them (`bash run.sh 2 /ckpt`): "$@", $1, ${2}, $#
_POS_REF = re.compile(r'"\$(?:\{@\}|@)"|\$\{(\d+|[@*#])\}|\$(\d|[@*#])')
_POS_KEY = "\x00pos"  # env key of the launcher's positional arguments (joined by NUL)
_SHIFT = re.compile(r"^shift(?:\s+(\d+))?\s*(?:[;#].*)?$")
_ARITH = re.compile(r"\$\(\(([^$]*?)\)\)")  # stops at the next `$`: no scan to the end per unclosed `$((`
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
        if _open_quote(buf + line) and i - start < 50:  # `ARGS="` ... `"`: a quoted value over several lines
            buf += line + " "
            continue
        buf += line
        yield start, buf, tuple(flags) if i > start else ()
        buf = ""
    if buf:
        yield start, buf, tuple(flags)


def _open_quote(line: str) -> bool:
    """Whether `line` ends inside a quoted string (outside a comment)."""
    q = None
    i = 0
    while i < len(line):
        c = line[i]
        if q is None:
            if c == "#" and (i == 0 or line[i - 1] in " \t"):
                return False
            if c in "'\"":
                q = c
            elif c == "\\":
                i += 1
        elif c == q:
            q = None
        elif c == "\\" and q == '"':
            i += 1
        i += 1
    return q is not None


def _too_long() -> None:
    from memlint.extract.budget import MAX_SHELL_VALUE, OverBudget

    raise OverBudget(f"not read: a variable expands past {MAX_SHELL_VALUE:,} characters, over memlint's budget for "
                     "a launcher")


def _checked(text: str) -> str:
    """A value or line within the budget (MAX_SHELL_VALUE characters), else the launcher is past it."""
    from memlint.extract.budget import MAX_SHELL_VALUE

    if len(text) > MAX_SHELL_VALUE:
        _too_long()
    return text


def _expand(text: str, env: dict[str, str], depth: int = 0) -> str:
    """`text` with the launcher's variables expanded; OverBudget past the size or nesting budget (X=$X$X forty
    times, ${A:-${A:-...}} a thousand deep)."""
    from memlint.extract.budget import MAX_SHELL_DEPTH, MAX_SHELL_VALUE, OverBudget

    if depth > MAX_SHELL_DEPTH:
        raise OverBudget(f"not read: defaults nested more than {MAX_SHELL_DEPTH} deep, over memlint's budget for a "
                         "launcher")
    grown = [len(text)]

    def grow(value: str, replaced: str) -> str:
        grown[0] += len(value) - len(replaced)
        if grown[0] > MAX_SHELL_VALUE:
            _too_long()
        return value

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(4) or m.group(5)
        if name in env:
            return grow(env[name], m.group(0))
        if m.group(2) and m.group(3) is not None:  # ${X:-default}
            return grow(_expand(m.group(3), env, depth + 1), m.group(0))
        return m.group(0)

    def array(m: re.Match) -> str:  # ${#A[@]} (its length), ${A[@]} (its words), ${A[0]}
        items = env.get(m.group(2) + _ARRAY_KEY)
        if items is None:
            return m.group(0)
        words = items.split("\x00") if items else []
        if m.group(1):
            return str(len(words))
        if m.group(3) in ("@", "*"):
            return grow(" ".join(words), m.group(0))
        i = int(m.group(3)) if len(m.group(3)) < 8 else len(words)
        return grow(words[i], m.group(0)) if i < len(words) else ""

    def replace_all(m: re.Match) -> str:  # ${X//,/ } and ${X/a/b}: bash's substitution of a literal pattern
        if m.group(1) not in env or any(c in m.group(3) for c in "*?["):
            return m.group(0)
        value, old, new = env[m.group(1)], m.group(3), m.group(4)
        n = (value.count(old) if old else len(value) + 1) if m.group(2) == "//" else 1
        if len(value) + n * max(len(new) - len(old), 0) > MAX_SHELL_VALUE:  # checked before it is built
            _too_long()
        return grow(value.replace(old, new, -1 if m.group(2) == "//" else 1), m.group(0))

    _checked(text)
    if _POS_KEY in env:
        text = _checked(_positional(text, env))
    text = _defaults(_ARRAY_REF.sub(array, _SUBST.sub(replace_all, text)), env, depth)
    grown[0] = len(text)
    return _checked(_ARITH.sub(_arith, _VAR.sub(sub, text)))


def _positional(text: str, env: dict[str, str]) -> str:
    """$1, ${2}, "$@", $* and $# of a launcher run with known arguments (`bash run.sh 2 /ckpt`)."""
    args = env[_POS_KEY].split("\x00") if env[_POS_KEY] else []

    def sub(m: re.Match) -> str:
        if m.group(0).startswith('"'):  # "$@": one word per argument
            return shlex.join(args)
        key = m.group(1) or m.group(2)
        if key == "#":
            return str(len(args))
        if key in "@*":
            return shlex.join(args)
        i = int(key)
        if i == 0:
            return m.group(0)
        return shlex.quote(args[i - 1]) if i <= len(args) else ""

    return _POS_REF.sub(sub, text)


def _shifted(line: str, env: dict[str, str]) -> bool:
    """A `shift` / `shift 2` line of a launcher run with known arguments: "$@" is the rest of them."""
    m = _SHIFT.match(line)
    if not m or _POS_KEY not in env:
        return False
    rest = env[_POS_KEY].split("\x00") if env[_POS_KEY] else []
    env[_POS_KEY] = "\x00".join(rest[int(m.group(1) or 1):])
    return True


def _closers(text: str) -> dict[int, int]:
    """For each `{` of `text` (not after a backslash), where its matching `}` is: one pass, so a thousand
    unclosed `${A:-` cost a scan, not a scan each."""
    out: dict[int, int] = {}
    stack: list[int] = []
    for k, c in enumerate(text):
        if c in "{}" and k and text[k - 1] == "\\":
            continue
        if c == "{":
            stack.append(k)
        elif c == "}" and stack:
            out[stack.pop()] = k
    return out


def _defaults(text: str, env: dict[str, str], depth: int = 0) -> str:
    """`${X:-default}` / `${X-default}` whose default holds `${...}` itself (the regex stops at the first `}`)."""
    out, i = [], 0
    closers: dict[int, int] | None = None
    while True:
        j = text.find("${", i)
        if j < 0:
            return "".join(out) + text[i:]
        m = _DEFAULT_HEAD.match(text, j)
        if m is not None and closers is None:
            closers = _closers(text)
        k = closers.get(j + 1) if m is not None and closers is not None else None
        if k is None or "${" not in text[m.end():k]:
            out.append(text[i:j + 2])
            i = j + 2
            continue
        k += 1  # past the closing brace
        name, op = m.group(1), m.group(2)
        val = env.get(name)
        use_default = val is None or (op.startswith(":") and val == "")
        if op.endswith("="):  # ${X:=v} also assigns
            if use_default:
                env[name] = _expand(text[m.end():k - 1], env, depth + 1)
        out.append(text[i:j])
        out.append(_expand(text[m.end():k - 1], env, depth + 1) if use_default else val)
        i = k


def _arith(m: re.Match) -> str:
    """$(( 1024 / 8 / 4 )) once its variables are expanded: integer + - * / % and parentheses, as bash
    computes them (division truncates); anything else stays as written."""
    import ast

    expr = m.group(1).strip()
    if not re.fullmatch(r"[\d\s+\-*/%()]+", expr):
        return m.group(0)

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            return -ev(n.operand) if isinstance(n.op, ast.USub) else ev(n.operand)
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if isinstance(n.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b != 0:
                q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # C division: toward zero
                return q if not isinstance(n.op, ast.Mod) else a - q * b
        raise ValueError(expr)

    try:
        return str(ev(ast.parse(expr, mode="eval").body))
    except (SyntaxError, ValueError, RecursionError):
        return m.group(0)


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] in "'\"":
        end = _closing_quote(value)
        if end is not None and (not value[end + 1:].strip() or value[end + 1:].strip().startswith("#")):
            return value[1:end]  # `X="v" # a comment "with quotes"`
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value.split(" #", 1)[0].strip()


def _closing_quote(value: str) -> int | None:
    """Where the quote opening `value` closes (a backslash escapes inside double quotes)."""
    q, i = value[0], 1
    while i < len(value):
        if value[i] == "\\" and q == '"':
            i += 2
            continue
        if value[i] == q:
            return i
        i += 1
    return None


def _quoted_alone(value: str) -> bool:
    """A quoted value, perhaps followed by a comment: one word however many spaces it holds."""
    end = _closing_quote(value) if len(value) >= 2 and value[0] in "'\"" else None
    return end is not None and (not value[end + 1:].strip() or value[end + 1:].strip().startswith("#"))


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


def _launcher_text(path: Path) -> str | None:
    """A launcher's text (a notebook's `!` lines), within the launcher budget; None when it is not read."""
    from memlint.files import read_bytes

    try:
        if path.stat().st_size > _MAX_BYTES:
            return None
        if path.suffix == ".ipynb":
            return notebook_shell(path)
        return read_bytes(path).decode("utf-8", errors="replace")  # a regular file within max-file-size
    except OSError:
        return None


def launches(path: Path, shown: str, args: tuple[str, ...] | None = None, env0: dict[str, str] | None = None) -> list[Launch]:
    """The training launches a shell script, Makefile or notebook (its `!` lines) runs, with their line numbers.
    `args`: the script's own arguments when a command runs it (`bash run.sh 2 /ckpt`), read for $1, "$@"
    and `shift`; None (the file read alone) leaves them unknown. `env0`: variables the command sets."""
    from memlint.extract.budget import MAX_SHELL_SECONDS, Deadline, OverBudget

    text = _launcher_text(path)
    if text is None:
        return []
    make = path.name in LAUNCHER_NAMES
    env: dict[str, str] = {**(env0 or {}), **({_POS_KEY: "\x00".join(args)} if args is not None else {})}
    out: list[Launch] = []
    cwd: str | None = None  # where standalone `cd DIR` lines have moved the launcher
    deadline = Deadline(MAX_SHELL_SECONDS)
    for line_no, line, flag_lines in _logical_lines(text):
        if deadline.passed():
            raise OverBudget(f"not read: stopped reading after {MAX_SHELL_SECONDS:g} s at line {line_no}, over memlint's "
                             "time budget for a launcher")
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
            if _shifted(stripped, env):
                continue
            arr = _ARRAY_DEF.match(stripped)
            if arr:  # `CUDAs=(${TOT_CUDA//,/ })`: a bash array of the expanded words
                expanded = _expand(arr.group(2), env)
                try:
                    env[arr.group(1) + _ARRAY_KEY] = "\x00".join(tokens(expanded))
                except MemlintError:
                    pass
                continue
            m = _ASSIGN.match(stripped)
            if m:
                val = m.group(2).strip()
                if _POSITIONAL.match(val) and _POS_KEY not in env:  # `X=${1}`: the launcher's own argument, unknown here (X stays unset,
                    continue                # so a later `${X:-default}` is the default it documents)
                if val.startswith("$(") and val.endswith(")"):  # `X=$((A / B))` computed, `X=$(nvidia-smi ...)` unknown:
                    got = _expand(val, env)                     # X stays unset unless it came out a number
                    if re.fullmatch(r"-?\d+", got):
                        env[m.group(1)] = got
                    else:
                        env.pop(m.group(1), None)
                    continue
                if _quoted_alone(val) or " " not in val.split(" #", 1)[0].strip():  # `VAR=value` alone; `VAR=1 python train.py` is a command
                    env[m.group(1)] = _unquote(_expand(val, env))
                    continue
        if stripped.startswith("cd ") and not make:
            expanded = _expand(stripped, env)
            try:
                moved = _cd(tokens(expanded), cwd)
            except MemlintError:
                moved = None
            cwd = moved if moved is not None else cwd
        if not _LAUNCH_WORD.search(stripped):
            continue
        expanded = _expand(stripped, env)
        try:
            words = tokens(expanded)
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


def launcher_targets(path: Path, shown: str, roots: list[Path], args: tuple[str, ...] | None = None,
                     env0: dict[str, str] | None = None, root: str | None = None) -> list:
    """files.Target for each launch of `path` whose script (or module) is a file of the checkout,
    looked up beside the launcher, then in each of `roots` (the checkout, the folder walked).
    `args`/`env0`: the launcher's arguments and variables when a command runs it (see `launches`). A script
    outside the checked root (`python ../outside/x.py`) is not looked at; each target keeps `root`."""
    from memlint.files import Target, is_file

    out = []
    for launch in launches(path, shown, args, env0):
        # beside the launcher, then the folders above it up to the checkout (`bash scripts/train.sh` run from
        # the folder that holds train.py), then the roots
        ups = [a for a in path.parent.resolve().parents][:4]
        stop = [r.resolve() for r in roots]
        bases = [path.parent]
        for a in ups:
            bases.append(a)
            if a in stop:
                break
        bases += [r for r in roots if r.resolve() not in {b.resolve() for b in bases}]
        if launch.cwd:
            bases = [b / launch.cwd for b in bases] + bases
        target = None
        for base in bases:
            if launch.script:
                cand = base / os.path.expanduser(launch.script)
                if cand.suffix == ".py" and is_file(cand):
                    target = cand
            elif launch.module:
                target = resolve_module(launch.module, [base])
            if target is not None:
                # the framework config the script or module runs (a Hydra entry script's NeMo config, a `train.py
                # recipe.yaml` recipe, `-m torchtitan.train --job.config_file X`): the run is that config
                target = framework_config(launch, base) or target
                break
        if target is None:
            continue
        out.append(Target(target, os.path.normpath(os.path.relpath(target)), False, launch, root=root))
    return out


def command_targets(words, cwd: Path | None = None) -> list:
    """The files a launch command runs, as files.Target carrying each Launch: one for a Python launcher
    (launch.command_target), one per training command for a shell script run with its arguments
    (`bash scripts/run.sh 2 /ckpt`: $1, "$@" and `shift` read with them)."""
    cwd = cwd or Path.cwd()
    sh = shell_script(words)
    if sh is None:
        return [command_target(words, cwd)]
    script, args, env, moved = sh
    base = cwd / moved if moved else cwd
    path = base / os.path.expanduser(script)
    shown = os.path.normpath(os.path.join(moved or "", script))
    if not path.is_file():
        raise MemlintError(f"{shown}: no such file (the command's shell script)")
    from memlint import files
    from memlint.extract.budget import OverBudget

    root = files.checkout_root(path)
    try:
        with files.checked_root(root):
            targets = launcher_targets(path, shown, [base], args=args, env0=env, root=root)
    except OverBudget as exc:  # the launcher past a budget: a MEM001 note on it
        return [files.Target(path, shown, True, root=root, note=str(exc))]
    if not targets:
        raise MemlintError(f"{shown}: runs no Python training command memlint reads")
    return targets
