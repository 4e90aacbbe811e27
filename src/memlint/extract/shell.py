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
from typing import Any, Iterator

from memlint.errors import MemlintError
from memlint.extract.configs.overrides import flags_config
from memlint.extract.launch import (FRAMEWORK_CLIS, Launch, _config_arg, bundled_config_ref, bundled_target,
                                    command_target, console_scripts, framework_config, framework_script, make_command,
                                    parse_command, resolve_module, shell_script, tokens, vendored_entry)
from memlint.vocab import LAUNCHER_NAMES, LAUNCHER_SUFFIXES

_MAX_BYTES = 256_000
_APPEND = re.compile(r"^\s*(?:export\s+|local\s+)?([A-Za-z_][A-Za-z0-9_]*)\+=(?!\()(.*)$")  # X+="more" (not an array's +=(...))
_ASSIGN = re.compile(r"^\s*(?:export\s+|local\s+|readonly\s+|declare\s+(?:-\w+\s+)*)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
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
_ARRAY_DEF = re.compile(r"^\s*(?:local\s+|declare\s+-a\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=\((.*)\)\s*(?:#.*)?$")
_ARRAY_REF = re.compile(r"\$\{(#?)([A-Za-z_][A-Za-z0-9_]*)\[(@|\*|\d+)\]\}")
# bash's associative (and keyed) arrays: `declare -A BS`, `BS["a"]=16`, `declare -A BS=([a]=16 [b]=8)`, `${BS[$KEY]:-8}`
_ASSOC_DECLARE = re.compile(r"^\s*(?:declare|local|typeset)\s+(?:-[A-Za-z]+\s+)*?-[a-zA-Z]*A[a-zA-Z]*\s+(?:-[A-Za-z]+\s+)*"
                            r"([A-Za-z_]\w*)(?:=\((.*)\))?\s*(?:#.*)?$")  # -A, -gA, -Ar, -A -g
_ASSOC_SET = re.compile(r"^\s*([A-Za-z_]\w*)\[([^\]\s]+)\]=(.*)$")
_ASSOC_ITEM = re.compile(r"\[([^\]\s]+)\]=(\"[^\"]*\"|'[^']*'|\S*)")
_ASSOC_REF = re.compile(r"\$\{([A-Za-z_]\w*)\[([^\]{}\s]+)\](?:(:?[-=])(" + _UPTO + r"))?\}")
_DECLARED = "[#declared]"  # env key marking an associative array as declared (a missing key is then unset)
_UNTOLD = "[#untold]"  # env key marking an array given an item under a key memlint could not expand
_SUBST = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(//?)((?:[^/}$]|\$(?!\{))*)/(" + _UPTO + r")\}")
_DEFAULT_HEAD = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-=])")
_POSITIONAL = re.compile(r"""^["']?\$(?:\{\d+\}|\d)["']?$""")
# the launcher's own arguments when a command gives them (`bash run.sh 2 /ckpt`): "$@", $1, ${2}, $#
_POS_REF = re.compile(r'"\$(?:\{@\}|@)"|\$\{(\d+|[@*#])\}|\$(\d|[@*#])')
_POS_KEY = "\x00pos"  # env key of the launcher's positional arguments (joined by NUL)
_SHIFT = re.compile(r"^shift(?:\s+(\d+))?\s*(?:[;#].*)?$")
_BARE_NAME = re.compile(r"(?<![\w$])[A-Za-z_]\w*")
_SMALL_INT = re.compile(r"-?\d{1,18}")
# `$(( ... ))` up to the first `))` whose inner parentheses balance (`$((A / (B * C)))`); [^$] stops at the next `$`:
# no scan to the end per unclosed `$((`
# `$(expr 16 / 8)` and `` `expr 2 \* 2` `` (expr(1)): the words between, no nested substitution
_EXPR = re.compile(r"\$\(\s*expr\s+([^$()`]*)\)|`\s*expr\s+([^$`]*)`")
_ARITH = re.compile(r"\$\(\(((?:[^$()]|\((?:[^$()]|\([^$()]*\))*\))*?)\)\)")
_LAUNCH_WORD = re.compile(r"(?:^|[\s;&|(\"'/])(?:python\d*(?:\.\d+)*|torchrun|accelerate|deepspeed|composer|lightning|fabric\s+run|modal\s+run|"
                          r"(?:uv|poetry|pipenv|pdm|hatch|conda)\s+run|[\w./-]*\w\.py(?=\s|$)|"  # `uv run train.py`, `./train.py`
                          + "|".join(map(re.escape, FRAMEWORK_CLIS)) + r")\b")  # and the framework tools (`llamafactory-cli train`)


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
        if line.endswith("\\") and (buf or not line.lstrip().startswith("#")) \
                and _uncommented(line).endswith("\\"):  # a backslash inside a comment continues nothing
            buf += line[:-1] + " "
            continue
        if _open_quote(buf + line) and i - start < 50:  # `ARGS="` ... `"`: a quoted value over several lines
            buf += line + " "
            continue
        if _open_array(buf + line) and i - start < 50:  # `FILES=("a"` ... `"d")`: an array over several lines
            buf += _uncommented(line) + " "  # a comment after one of its words ends at that line, not the array
            continue
        buf += line
        yield start, buf, tuple(flags) if i > start else ()
        buf = ""
    if buf:
        yield start, buf, tuple(flags)


_ARRAY_OPEN = re.compile(r"^\s*(?:local\s+|declare\s+-a\s+)?[A-Za-z_][A-Za-z0-9_]*\+?=\(")


def _scan(line: str, start: int = 0, comment_after: str = " \t") -> tuple[list[tuple[int, str]], str | None, int | None]:
    """One pass over a shell line from `start`: the characters outside quotes (with their index), the quote left open
    at its end (None: none), and where a `# comment` starts (a `#` outside quotes at the line's start or after one of
    `comment_after`; None: no comment). A backslash escapes the next character outside quotes and inside "..."."""
    bare: list[tuple[int, str]] = []
    q, i = None, start
    while i < len(line):
        c = line[i]
        if q is None:
            if c == "#" and (i == 0 or line[i - 1] in comment_after):
                return bare, None, i
            if c in "'\"":
                q = c
            elif c == "\\":
                i += 1
            else:
                bare.append((i, c))
        elif c == q:
            q = None
        elif c == "\\" and q == '"':
            i += 1
        i += 1
    return bare, q, None


def _uncommented(line: str) -> str:
    """`line` without its trailing `# comment` (a `#` outside quotes that starts a word)."""
    comment = _scan(line)[2]
    return line if comment is None else line[:comment].rstrip()


def _open_array(line: str) -> bool:
    """Whether `line` opens a bash array `A=(` that it does not close (outside quotes and comments)."""
    m = _ARRAY_OPEN.match(line)
    if not m:
        return False
    depth = 1
    for _, c in _scan(line, m.end(), " \t(")[0]:
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth == 0:
            return False
    return True


# `bash -c '…'`, with the shell's own flags around -c (`bash -lc`, `bash -c -eux`, `sh -x -c`)
_SHELL_C = re.compile(r"""(?m)^([^#\n]*?)(?<![\w-])(?:ba|z)?sh\s+(?:-[a-z]+\s+)*-[a-z]*c[a-z]*\s+(?:-[a-z]+\s+)*(["'])""")


# `ssh [options] HOST "…"`: the quoted command runs on the host (the checkout's copy there, as the launcher syncs it)
_SSH = re.compile(r"""(?m)^([^#\n]*?)(?<![\w-])ssh\s+(?:-[pilJFoLRDbcEeOSWw]\s*\S+\s+|-[tTAXYqvnNfCgKkMsxyG46]+\s+)*"""
                  r"""(?:"[^"\n]*"|'[^'\n]*'|[^\s"'-][^\s"']*)\s+(["'])""")


_IN_CONTAINER = re.compile(r"(?<![\w-])(?:singularity|apptainer|docker|podman|nvidia-docker)\s+(?:exec|run)\s")


def _continued(text: str, start: int) -> str:
    """The physical lines before `start` that continue (`\\` at their end) onto the line at `start`."""
    lines = text[:start].split("\n")[:-1]
    kept: list[str] = []
    while lines and lines[-1].rstrip().endswith("\\"):
        kept.insert(0, lines.pop())
    return "\n".join(kept)


def _inline_scripts(text: str) -> str:
    """`srun ... bash -c "…"` / `sh -c '…'`: the quoted string is a script of its own, run where it stands; its
    lines take the place of the command (line numbers kept: the quoted text keeps its newlines), with the escapes
    a double-quoted string undoes (`\\$X` is `$X` inside). An unclosed quote leaves the text as it is."""
    out, pos = [], 0
    for _ in range(64):
        found = [m for m in (_SHELL_C.search(text, pos), _SSH.search(text, pos)) if m is not None]
        if not found:
            break
        m = min(found, key=lambda x: x.start())
        quote, i = m.group(m.lastindex), m.end()
        body = []
        while i < len(text) and text[i] != quote:
            if quote == '"' and text[i] == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\':
                body.append(text[i + 1])
                i += 2
                continue
            body.append(text[i])
            i += 1
        if i >= len(text):
            break
        if m.re is _SHELL_C and "\n" not in body and _IN_CONTAINER.search(_continued(text, m.start()) + m.group(1)):
            # `singularity exec --pwd D -B a:b img bash -c "cmd"`: one command, read with the container's folder
            out.append(text[pos:i + 1])
        else:
            out.append(text[pos:m.start()])
            out.append("".join(body))
        pos = i + 1
    out.append(text[pos:])
    return "".join(out)


_HEREDOC = re.compile(r"""(?<!<)<<(-?)\s*(["']?)([A-Za-z_][A-Za-z0-9_]*)\2(?!\S)""")
_READ_VAR = re.compile(r"^\s*read\s+(?:-[a-zA-Z]+\s+(?:''\s+|\"\"\s+|\$'[^']*'\s+)?)*([A-Za-z_][A-Za-z0-9_]*)\s*<<")
_CAT_VAR = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)=[\"']?\$\(\s*cat\s*<<")
_RUNS_BODY = re.compile(r"^\s*(?:ba|z)?sh\s*(?:-[a-z]+\s*)*<<")


def _heredocs(text: str) -> str:
    """Here-documents, line numbers kept: `read -r -d '' CMD <<EOF` … `EOF` and `CMD=$(cat <<EOF` … `EOF`)` become
    the assignment of the body to CMD (an unquoted delimiter's backslash-newlines joined, as bash reads it; the lines
    one command); `bash <<EOF` keeps its body as the launcher's own lines; any other (`python - <<EOF`, `cat > f
    <<EOF`, `sbatch <<EOF`) is input to its command, not lines of the launcher, and is blanked."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _HEREDOC.search(line) if "<<" in line and not line.lstrip().startswith("#") else None
        if m is None:
            out.append(line)
            i += 1
            continue
        strip_tabs, quoted, delim = m.group(1) == "-", bool(m.group(2)), m.group(3)
        body, j = [], i + 1
        while j < len(lines) and (lines[j].lstrip("\t") if strip_tabs else lines[j]).rstrip() != delim:
            body.append(lines[j].lstrip("\t") if strip_tabs else lines[j])
            j += 1
        if j >= len(lines) or j - i > 400:  # no closing delimiter: not a here-document memlint reads
            out.append(line)
            i += 1
            continue
        closing = 1  # the delimiter line, and a `)` line closing `$(cat <<EOF`
        var = _READ_VAR.match(line) or _CAT_VAR.match(line)
        if var is not None:
            joined = "\n".join(body)
            if not quoted:
                joined = joined.replace("\\\n", " ")
            joined = " ".join(joined.split("\n"))
            escaped = joined.replace("\\", "\\\\").replace('"', '\\"') if not quoted else \
                joined.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
            out.append(f'{var.group(1)}="{escaped}"')
            if _CAT_VAR.match(line) and j + 1 < len(lines) and lines[j + 1].strip() in (")", ')"', ")'"):
                closing = 2
        elif _RUNS_BODY.match(line):
            out.append("")
            out.extend(body)
        else:
            out.append(line[:m.start()].rstrip())
            out.extend("" for _ in body)
        out.extend([""] * (closing + (len(body) if var is not None else 0)))
        i = j + closing
    return "\n".join(out)


_OPTION_LOOP = re.compile(r"""^[ \t]*while\s+(?:\(\(\s*"?\$#"?\s*(?:>\s*0\s*)?\)\)|\[\[?\s*"?\$#"?\s+-(?:gt|ne)\s+0\s*\]\]?)"""
                          r"""\s*;?\s*(?:do)?\s*$""", re.M)
_CASE_HEAD = re.compile(r"""^\s*case\s+"?\$\{?1\}?"?\s+in\s*$""")
_ARM = re.compile(r"^\s*\(?\s*([^()]+?)\s*\)\s*(.*)$")
_ARM_SET = re.compile(r"""([A-Za-z_][A-Za-z0-9_]*)=("\$\{?2\}?"|\$\{?2\}?|"\$\{1#\*=\}"|\$\{1#\*=\}|"[^"$]*"|'[^']*'|[^\s;"'$]+)""")
_ARM_SHIFT = re.compile(r"\bshift(?:\s+(\d+))?")


def _option_loop(text: str, args: tuple[str, ...] | None) -> str:
    """The launcher's own option parser, `while (( "$#" )); do case "$1" in --gpus) gpus="$2"; shift 2;; ... esac;
    done`, run over the launcher's arguments: its lines become the assignments it makes (`gpus='0,1,2,3'`), line
    numbers kept; read alone (no arguments), it assigns nothing and the defaults after it stand."""
    lines = text.split("\n")
    for _ in range(4):
        m = _OPTION_LOOP.search("\n".join(lines))
        if m is None:
            break
        start = "\n".join(lines).count("\n", 0, m.start())
        end = next((j for j in range(start + 1, min(len(lines), start + 400)) if lines[j].strip() in ("done", "done;")),
                   None)
        case = next((j for j in range(start, end or start) if _CASE_HEAD.match(lines[j].replace("do ", "", 1))), None) \
            if end is not None else None
        if end is None or case is None:
            break
        arms = _case_arms("\n".join(lines[case + 1:end]))
        sets = _run_options(arms, list(args or ()))
        said = [f"{k}={shlex.quote(v)}" for k, v in sets.items()][:end - start + 1]  # one assignment a line
        lines[start:end + 1] = said + [""] * (end - start + 1 - len(said))
    return "\n".join(lines)


def _case_arms(body: str) -> list[tuple[list[str], dict[str, str], int]]:
    """(patterns, assignments, shift count) of each `pattern) ... ;;` arm of a `case` body."""
    arms = []
    for chunk in body.split(";;"):
        chunk = chunk.strip()
        if not chunk or chunk.startswith("esac"):
            continue
        m = _ARM.match(chunk.replace("\n", " "))
        if m is None:
            continue
        pats = [p.strip().strip("\"'") for p in m.group(1).split("|")]
        sets = {k: v.strip("\"'") for k, v in _ARM_SET.findall(m.group(2))}
        sh = _ARM_SHIFT.search(m.group(2))
        arms.append((pats, sets, int(sh.group(1) or 1) if sh else 0))
    return arms


def _run_options(arms: list, args: list[str]) -> dict[str, str]:
    """What the option loop assigns, run over `args`."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args) and len(out) < 200:
        a = args[i]
        arm = next((x for x in arms for p in x[0] if p == a or (p.endswith("=*") and a.startswith(p[:-1]))), None)
        if arm is None or not arm[2]:
            i += 1
            continue
        for var, how in arm[1].items():
            if how in ("$2", "${2}"):
                if i + 1 < len(args):
                    out[var] = args[i + 1]
            elif how == "${1#*=}":
                out[var] = a.split("=", 1)[1] if "=" in a else ""
            else:
                out[var] = how
        i += arm[2]
    return out


def _open_quote(line: str) -> bool:
    """Whether `line` ends inside a quoted string (outside a comment)."""
    _, quote, comment = _scan(line)
    return comment is None and quote is not None


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
        if m.group(3) == "@" and m.string[m.start() - 1:m.start()] == '"' and m.string[m.end():m.end() + 1] == '"':
            # "${A[@]}": each element one word, as bash expands it (the quotes around the whole close and reopen)
            return grow('" "'.join(w.replace("\\", "\\\\").replace('"', '\\"') for w in words), m.group(0))
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
    if "${" in text:
        text = _REQUIRED.sub(lambda m: _required(m, env), text)
        text = _POS_DEFAULT.sub(lambda m: _positional_default(m, env), text)
    if _POS_KEY in env:
        text = _checked(_positional(text, env))
    def keyed(m: re.Match) -> str:  # ${BS[$KEY]}, ${BS[a]:-8}: an associative array's item, or its default
        name, key = m.group(1), m.group(2)
        if key in ("@", "*") or key.isdigit():
            return m.group(0)  # an indexed array's (array() above)
        key = _unquote(_VAR.sub(sub, key))
        if "$" in key or "`" in key or name + _DECLARED not in env:
            return m.group(0)
        if f"{name}[{key}]" in env:
            return grow(env[f"{name}[{key}]"], m.group(0))
        if name + _DECLARED in env and name + _UNTOLD not in env and m.group(3) and m.group(4) is not None:
            return grow(_expand(m.group(4), env, depth + 1), m.group(0))
        return m.group(0)

    if "[" in text:
        text = _ASSOC_REF.sub(keyed, text)
    text = _defaults(_ARRAY_REF.sub(array, _SUBST.sub(replace_all, text)), env, depth)
    grown[0] = len(text)
    text = _ARITH.sub(lambda m: _arith(m, env), _VAR.sub(sub, text))
    return _checked(_EXPR.sub(lambda m: _expr_command(m, env), text) if "expr" in text else text)


_POS_DEFAULT = re.compile(r"\$\{([1-9]\d?)(:?)[-=]([^{}$]*)\}")  # ${1:-5}, ${2-/ckpt}: an argument or its default
_REQUIRED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[1-9]\d?)(:?)\?[^{}]*\}")  # ${1:?usage: $0 M}, ${MODEL?unset}


def _required(m: re.Match, env: dict[str, str]) -> str:
    """`${1:?model required}` / `${X?unset}`: the argument (or variable) when it is given (non-empty, for `:?`);
    as written otherwise (bash stops there with the message: nothing after it runs with a value)."""
    key = m.group(1)
    if key.isdigit():
        args = env[_POS_KEY].split("\x00") if env.get(_POS_KEY) else []
        i = int(key)
        value = args[i - 1] if i <= len(args) else None
        return m.group(0) if value is None or (m.group(2) and value == "") else shlex.quote(value)
    value = env.get(key)
    return m.group(0) if value is None or (m.group(2) and value == "") else value


def _positional_default(m: re.Match, env: dict[str, str]) -> str:
    """`${1:-5}`: the launcher's argument when the command gives it (non-empty, for `:-`), else the default (also
    when the file is read alone: as `bash run.sh` with no argument runs it)."""
    args = env[_POS_KEY].split("\x00") if env.get(_POS_KEY) else []
    i = int(m.group(1))
    if i <= len(args) and (args[i - 1] != "" or not m.group(2)):
        return shlex.quote(args[i - 1])
    return m.group(3)


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


def _arith(m: re.Match, env: dict[str, str] | None = None) -> str:
    """$(( 1024 / 8 / 4 )) once its variables are expanded: integer + - * / % and parentheses, as bash
    computes them (division truncates); a bare name (`$((N_GPUS * 2))`) is its variable's value, as in bash;
    anything else stays as written."""
    return _integer_expression(m.group(1), env, m.group(0))


def _expr_command(m: re.Match, env: dict[str, str] | None = None) -> str:
    """`$(expr 16 / $N)` and `` `expr 2 \\* 2` ``: expr(1)'s integer arithmetic, its words an operator or a number once
    the variables are expanded (`\\*` and a quoted `*` are its multiplication); anything else stays as written."""
    words = m.group(1) if m.group(1) is not None else m.group(2)
    words = words.replace("\\*", "*").replace("'*'", "*").replace('"*"', "*").split()
    if len(words) % 2 == 0 or any(len(w) != 1 or w not in "+-*/%" for w in words[1::2]) \
            or not all(re.fullmatch(r"-?\d+", w) for w in words[::2]):
        return m.group(0)  # expr takes each operand and operator as its own word (`expr 16/8` prints 16/8)
    return _integer_expression(" ".join(words), env, m.group(0))


def _integer_expression(expr: str, env: dict[str, str] | None, written: str) -> str:
    import ast

    expr = expr.strip()
    if env:
        expr = _BARE_NAME.sub(lambda n: env[n.group(0)] if _SMALL_INT.fullmatch(env.get(n.group(0), "")) else n.group(0), expr)
    if not re.fullmatch(r"[\d\s+\-*/%()]+", expr):
        return written

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
        return written


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
    from memlint.extract.source import notebook_bytes, notebook_cells

    try:
        lines, _ = notebook_cells(notebook_bytes(path).decode("utf-8", errors="replace"), path)
    except (MemlintError, OSError):
        return ""
    out: list[str] = []
    names: dict[str, str] = {}  # the notebook's own `NAME = literal` lines so far: IPython expands {NAME} / $NAME
    for line in lines:
        s = line.strip()
        if out and out[-1].endswith("\\") and s and not s.startswith("!"):  # a `!` command continued on the next line
            out.append(_expanded(s, names))
            continue
        if not s.startswith(("!", "%")):
            _literal_name(s, names)
        out.append(_expanded(s[1:], names) if s.startswith("!") else "cd " + s[4:] if s.startswith("%cd ") else "")
    return "\n".join(out)


_NAME_ASSIGN = re.compile(r"^([A-Za-z_]\w*)\s*=\s*(.+?)\s*(?:#.*)?$")


def _literal_name(line: str, names: dict[str, str]) -> None:
    """`NAME = 32` / `NAME = 'full'` in a code cell: the value IPython puts in a `!` command's {NAME} (another
    assignment to NAME forgets it)."""
    import ast

    m = _NAME_ASSIGN.match(line)
    if not m:
        return
    try:
        v = ast.literal_eval(m.group(2))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        names.pop(m.group(1), None)
        return
    if isinstance(v, (str, int, float)) and not isinstance(v, bool) and len(str(v)) <= 200:
        names[m.group(1)] = str(v)
    else:
        names.pop(m.group(1), None)


def _expanded(command: str, names: dict[str, str]) -> str:
    """IPython's expansion of a `!` command: {NAME} and $NAME of the notebook's own literal names (others as written)."""
    if not names:
        return command
    command = re.sub(r"\{([A-Za-z_]\w*)\}", lambda m: names.get(m.group(1), m.group(0)), command)
    return re.sub(r"\$([A-Za-z_]\w*)", lambda m: names.get(m.group(1), m.group(0)), command)


_MAKE_RULE = re.compile(r"^([^\s:=#][^:=#]*?)\s*::?(?!=)\s*([^;=#]*?)\s*(?:[;#].*)?$")
_MAKE_OP = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(\?|:|::|\+)?=")


def _make_recipes(text: str, goals: tuple[str, ...] | None, env: dict[str, str], fixed: set[str]):
    """The recipe lines `make GOALS` runs, as _logical_lines yields them: every variable assignment of the
    Makefile applied to `env` first (as make reads the whole file before it runs a recipe; `VAR ?= x` only where
    VAR is not set, a variable set on make's command line (`fixed`) kept over the file's), then each goal's
    prerequisites' recipes before its own, each target once. `goals` None (a Makefile named alone or met in a
    walk): every rule's recipe in file order; () the default goal (the first target)."""
    rules: dict[str, tuple[list[str], list]] = {}
    order: list[str] = []
    current: list[str] | None = None
    for item in _logical_lines(text):
        line = item[1]
        if line.startswith("\t"):
            for t in current or ():
                rules[t][1].append(item)
            continue
        s = re.sub(r"^(?:export|override)\s+", "", line.strip())  # `export VAR = x`: an assignment all the same
        if not s or s.startswith("#"):
            continue
        m = _MAKE_OP.match(s)
        if m:
            current = None
            name, op = m.group(1), m.group(2)
            value = _make_shell_python(_expand(s[m.end():].strip(), env))
            if name in fixed or (op == "?" and name in env):
                continue
            env[name] = f"{env[name]} {value}" if op == "+" and env.get(name) else value
            continue
        rule = _MAKE_RULE.match(s)
        if rule is None:
            current = None
            continue
        current = _expand(rule.group(1), env).split()
        for t in current:
            if t not in rules:
                rules[t] = ([], [])
                order.append(t)
            rules[t][0].extend(_expand(rule.group(2), env).split())
    if goals is None:
        return [item for t in order for item in rules[t][1]]
    if not goals:
        first = next((t for t in order if not t.startswith(".") and "%" not in t), None)
        goals = (first,) if first else ()
    missing = [g for g in goals if g not in rules]
    if missing:
        raise MemlintError(f"make: no rule for the target {missing[0]!r}")
    seq: list = []
    seen: set[str] = set()

    def visit(target: str, depth: int) -> None:
        if target in seen or target not in rules or depth > 64:
            return
        seen.add(target)
        for dep in rules[target][0]:
            visit(dep, depth + 1)
        seq.extend(rules[target][1])

    for g in goals:
        visit(g, 0)
    return seq


_SHELL_PYTHON = re.compile(r"^\$\(shell\s.*?\b(python\d*(?:\.\d+)?)\b")


def _make_shell_python(value: str) -> str:
    """`$(shell command -v python 2> /dev/null || echo python3)`, `$(shell which python3)`: the Python interpreter
    the shell finds, named by the first interpreter the command mentions; any other value as it is."""
    m = _SHELL_PYTHON.match(value)
    return m.group(1) if m else value


def _recipe_lines(text: str, make: tuple | None, env: dict[str, str]):
    """A Makefile's recipe lines to read: `make`'s goals' (its variables set first), else every rule's."""
    env.update(make[1] if make else {})
    return _make_recipes(text, make[0] if make else None, env, set(make[1]) if make else set())


_EXPORT = re.compile(r"^\s*(?:export|declare\s+-x)\s+(.*)$")


_SBATCH = re.compile(r"^#SBATCH\s+(.*)$")


def _slurm_options(words: list[str]) -> dict[str, str]:
    """`--opt=value` / `--opt value` / `-N 2` options of an #SBATCH line or an srun command, long names."""
    short = {"-N": "nodes", "-n": "ntasks", "-G": "gpus"}
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--") and "=" in w:
            k, v = w[2:].split("=", 1)
            out[k] = v
        elif w.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            out[w[2:]] = words[i + 1]
            i += 1
        elif w in short and i + 1 < len(words):
            out[short[w]] = words[i + 1]
            i += 1
        elif w[:2] in short and len(w) > 2:
            out[short[w[:2]]] = w[2:]
        i += 1
    return out


def _slurm_gpus(opts: dict[str, str]) -> int | None:
    """GPUs per node an allocation gets: --gres=gpu[:type]:N, --gpus-per-node=[type:]N, --gpus=N on one node."""
    m = re.search(r"(?:^|,)gpu(?::[\w.-]+)?:(\d+)(?:\(|,|$)", opts.get("gres", ""))
    if m:
        return int(m.group(1))
    for key in ("gpus-per-node", "gpus"):
        raw = opts.get(key, "")
        m = re.fullmatch(r"(?:[\w.-]+:)?(\d+)", raw)
        if m and (key == "gpus-per-node" or opts.get("nodes", "1") == "1"):
            return int(m.group(1))
    return None


def _sbatch_job(text: str) -> dict | None:
    """What a SLURM batch script's `#SBATCH` header asks for: GPUs per node, tasks per node, nodes (None without one)."""
    opts: dict[str, str] = {}
    for raw in text.splitlines()[:200]:
        m = _SBATCH.match(raw.strip())
        if m:
            try:
                opts.update(_slurm_options(shlex.split(m.group(1), comments=True)))
            except ValueError:
                continue
    if not opts:
        return None
    nodes = opts.get("nodes", "").split("-")[0]
    return {"gpus": _slurm_gpus(opts), "tasks": int(opts["ntasks-per-node"]) if opts.get("ntasks-per-node", "").isdigit()
            else None, "nodes": int(nodes) if nodes.isdigit() else None,
            "ntasks": int(opts["ntasks"]) if opts.get("ntasks", "").isdigit() else None,
            "gpus_total": int(m.group(1)) if (m := re.fullmatch(r"(?:[\w.-]+:)?(\d+)", opts.get("gpus", ""))) else None}


def _srun_tasks(launch: Launch, words: list[str], job: dict) -> Launch:
    """`srun python ...` in a batch job: one process per task (srun's own --ntasks-per-node, else the job's), on the
    job's nodes; the tasks are the run's processes (Lightning and torch read SLURM's task variables)."""
    opts = _slurm_options(list(words[1:words.index("python")] if "python" in words else []))
    tasks = int(opts["ntasks-per-node"]) if opts.get("ntasks-per-node", "").isdigit() else job.get("tasks")
    nodes = int(opts["nodes"]) if opts.get("nodes", "").isdigit() else job.get("nodes")
    if not tasks:
        return launch
    return replace(launch, processes=tasks, nodes=nodes if nodes and nodes > 1 else launch.nodes)


def _exports(line: str) -> set[str]:
    """The names an `export X=1 Y` (or `declare -x X=1`) line exports to the commands after it."""
    m = _EXPORT.match(line)
    if not m:
        return set()
    return {w.split("=", 1)[0] for w in m.group(1).split() if re.fullmatch(r"[A-Za-z_]\w*(=.*)?", w)}


def _launcher_text(path: Path) -> str | None:
    """A launcher's text (a notebook's `!` lines), within the launcher budget; None when it is not read."""
    from memlint.files import read_bytes

    try:
        if path.stat().st_size > _MAX_BYTES:
            return None
        if path.suffix == ".ipynb":
            return notebook_shell(path)
        text = read_bytes(path).decode("utf-8", errors="replace")  # a regular file within max-file-size
        return fish_as_bash(text) if path.suffix == ".fish" or text.startswith(("#!/usr/bin/env fish", "#!/usr/bin/fish")) \
            else text
    except OSError:
        return None


_FISH_SET = re.compile(r"^(\s*)set\s+((?:-[a-zA-Z]+\s+|--[a-z]+\s+)*)([A-Za-z_]\w*)\s*(.*)$")
_FISH_OPEN = re.compile(r"^(\s*)(for|while|if|else if|function|begin|switch)\b(.*)$")


def fish_as_bash(text: str) -> str:
    """A fish script's lines as bash would write them, line for line (`set -x VAR value`, `for x in a b` ... `end`, `if` /
    `else if` / `else` ... `end`, `function name` ... `end`, `$argv[1]`): what memlint reads of a launcher is the same
    in both shells once the blocks are spelled alike."""
    out, blocks = [], []
    for line in text.splitlines():
        body = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        line = re.sub(r"\$argv\[(\d)\]", r"${\1}", line).replace("$argv", '"$@"')
        st = _FISH_SET.match(body)
        opened = _FISH_OPEN.match(body)
        if st:
            flags, value = st.group(2), st.group(4).strip()
            words = value if value[:1] in "'\"" and len(value) > 1 and value[-1] == value[0] else f'"{value}"'
            out.append(f"{st.group(1)}{'export ' if ('x' in flags or '--export' in flags) else ''}{st.group(3)}={words}")
        elif opened and opened.group(2) != "else if":
            kind, rest = opened.group(2), opened.group(3).rstrip()
            blocks.append(kind)
            out.append(opened.group(1) + {"for": f"for{rest}; do", "while": f"while{rest}; do", "if": f"if{rest}; then",
                                          "function": f"{rest.split()[0] if rest.split() else 'f'}() {{",
                                          "begin": "{", "switch": f"case{rest} in"}[kind])
        elif opened:
            out.append(f"{opened.group(1)}elif{opened.group(3).rstrip()}; then")
        elif body.strip() == "else":
            out.append(line)
        elif body.strip() == "end" and blocks:
            kind = blocks.pop()
            out.append(body.replace("end", {"for": "done", "while": "done", "if": "fi", "function": "}", "begin": "}",
                                            "switch": "esac"}[kind], 1))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _slurm_env(job: dict, env: dict[str, str], exported: set[str]) -> None:
    """What SLURM sets for a job script's commands: SLURM_SUBMIT_DIR, the folder sbatch ran in (where memlint reads
    from; the launcher's folder and those above it are where its paths are looked up), and the GPUs it allocated per
    node (--gres=gpu:N) as CUDA_VISIBLE_DEVICES."""
    env.setdefault("SLURM_SUBMIT_DIR", ".")
    nodes, per_node = job.get("nodes") or 1, job.get("tasks")
    ntasks = job.get("ntasks") or (nodes * per_node if per_node else None)
    # sbatch(1) OUTPUT ENVIRONMENT VARIABLES: the allocation's sizes, as `$((SLURM_NNODES * 2))` reads them
    for name, value in (("SLURM_JOB_NUM_NODES", nodes), ("SLURM_NNODES", nodes), ("SLURM_NTASKS", ntasks),
                        ("SLURM_NPROCS", ntasks), ("SLURM_NTASKS_PER_NODE", per_node),
                        ("SLURM_GPUS_ON_NODE", job.get("gpus")), ("SLURM_GPUS_PER_NODE", job.get("gpus")),
                        ("SLURM_GPUS", job.get("gpus_total"))):  # set only for --gpus / -G: the job's whole count
        if value is not None:
            env.setdefault(name, str(value))
    if job.get("gpus") and "CUDA_VISIBLE_DEVICES" not in env:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(job["gpus"]))
        exported.add("CUDA_VISIBLE_DEVICES")


def launches(path: Path, shown: str, args: tuple[str, ...] | None = None, env0: dict[str, str] | None = None,
             make: tuple[tuple[str, ...], dict[str, str]] | None = None, text: str | None = None,
             depth: int = 0) -> list[Launch]:
    """The training launches a shell script, Makefile or notebook (its `!` lines) runs, with their line numbers.
    `args`: the script's own arguments when a command runs it (`bash run.sh 2 /ckpt`), read for $1, "$@"
    and `shift`; None (the file read alone) leaves them unknown. `env0`: variables the command sets.
    `make`: (goals, variables) of a `make` command that runs `path`: only those goals' recipes are read.
    `text`: the shell text of `path` when the caller already has it (a README's code blocks)."""
    from memlint.extract.budget import MAX_SHELL_SECONDS, Deadline, OverBudget

    text = _launcher_text(path) if text is None else text
    if text is None:
        return []
    is_make = path.name in LAUNCHER_NAMES or make is not None
    env: dict[str, str] = {**(env0 or {}), **({_POS_KEY: "\x00".join(args)} if args is not None else {})}
    out: list[Launch] = []
    cwd: str | None = None  # where standalone `cd DIR` lines have moved the launcher
    scripts: dict[str, str] | None = None  # the checkout's console scripts, read on the first line that may run one
    exported: set[str] = set(env0 or ())  # variables the commands inherit: the caller's, `export X=...`
    copies: dict[str, str] = {}  # `cp run.sh app/examples/demo.sh`: the copy's path -> the file copied
    job = _sbatch_job(text) if not is_make else None
    if job is not None:
        _slurm_env(job, env, exported)
    if not is_make and "case" in text and "$#" in text:
        text = _option_loop(text, args)
    lines = list(_recipe_lines(text, make, env) if is_make else _logical_lines(_inline_scripts(_heredocs(text))))
    branches: list[list[bool | None]] = []  # the open `if` blocks: [this branch runs, an earlier branch ran]
    deadline = Deadline(MAX_SHELL_SECONDS)
    sourced: set[str] = {str(path.resolve())}  # the files `source`d so far (a file sources each once)
    i = 0
    while i < len(lines):
        line_no, line, flag_lines = lines[i]
        i += 1
        if deadline.passed():
            raise OverBudget(f"not read: stopped reading after {MAX_SHELL_SECONDS:g} s at line {line_no}, over memlint's "
                             "time budget for a launcher")
        stripped = _self_dir(line.strip())
        if not stripped or stripped.startswith("#"):
            continue
        if is_make:  # a recipe line (its variables were read by _make_recipes)
            stripped = stripped.lstrip("@-+ ")
        elif _SOURCE.match(stripped) and not any(taken is False for taken, _ in branches):
            # `source ../generic/finetune.sh` / `. ./env.sh`: its lines run here, in this shell, with its variables
            lines[i:i] = [(line_no, text_line, ()) for _, text_line, _ in _source_lines(stripped, path, env, cwd, sourced)]
            continue
        elif _settles(stripped, path, env, exported, branches):
            continue
        if not is_make and ("(" in stripped or stripped.startswith("function ")):
            _function_def(stripped, lines, i, env)  # kept for `$(name args)`; its lines are read on as before
        if stripped.startswith("cd ") and not is_make:
            cwd = _moved(stripped, env, cwd)
        # the launcher may be in a variable (`LAUNCH="accelerate launch ..."` then `$LAUNCH train.py`, `eval $CMD`)
        launcher_word = _LAUNCH_WORD.search(stripped) or ("$" in stripped and _LAUNCH_WORD.search(_expand(stripped, env)))
        if stripped.startswith("cp ") and not is_make:
            _copied(stripped, env, cwd, copies)
        nested = _nested_script(stripped, path, env, exported, cwd, depth, copies) if not is_make else None
        if nested:  # `bash scripts/train.sh ARGS`: the launches of that launcher
            out.extend(nested)
            continue
        if not launcher_word and not _maybe_console(stripped):
            continue
        expanded = _expand(stripped, env)
        try:
            words = tokens(expanded)
        except MemlintError:
            continue
        if words and words[0] == "eval":  # `eval "$launcher" "$args"`: its words joined by spaces, read again
            try:
                words = tokens(" ".join(words[1:]))
            except MemlintError:
                continue
        elif words and words[0] in ("for", "if", "while", "echo", "then", "do", "elif"):
            words = words[1:]
        if not launcher_word and not (scripts := console_scripts(path.parent) if scripts is None else scripts):
            continue  # no console script of the checkout (`llm-training fit --config X`) to run: they are read once
        prefix = [f"{k}={env[k]}" for k in sorted(exported) if k in env]
        out += _segment_launches(words, prefix, shown, line_no, scripts, cwd, job, flag_lines)
    return out


def _segment_launches(words: list[str], prefix: list[str], shown: str, line_no: int, scripts: dict | None,
                      cwd: str | None, job: dict | None, flag_lines: Any) -> list[Launch]:
    """The launches of one launcher line's commands (`a && b; c`), each run where the line's `cd`s moved it, the
    exported variables (`prefix`) first: the command's own `VAR=x` prefix wins over them."""
    out = []
    for seg, moved in _chain(words):
        try:
            launch = parse_command(prefix + seg, shown, line_no, scripts)
        except MemlintError:
            continue
        here = os.path.join(cwd or "", moved) if moved else cwd
        if here and here != ".":
            launch = replace(launch, cwd=os.path.normpath(os.path.join(here, launch.cwd)) if launch.cwd else here)
        if job is not None and seg and seg[0] == "srun" and launch.launcher == "python":
            launch = _srun_tasks(launch, seg, job)
        out.append(replace(launch, flag_lines=flag_lines) if flag_lines else launch)
    return out


_MAX_SOURCED = 8  # files one launcher sources, at most


def _source_lines(line: str, path: Path, env: dict[str, str], cwd: str | None, seen: set[str]) -> list:
    """The logical lines of the file a `source FILE` (or `. FILE`) line reads, from where the commands run, then beside
    the launcher and the folders above it (`source "$(dirname "$0")/../generic/x.sh"`), a file of the checkout within
    the launcher budget; [] for any other (a virtualenv's activate, a file outside the checkout, one read before)."""
    from memlint.files import allowed, is_file

    ref = _unquote(_expand(_SOURCE.match(line).group(1), env))
    if not ref or "$" in ref or len(seen) > _MAX_SOURCED:
        return []
    ref = os.path.expanduser(ref)
    target = next((c for c in [Path(os.path.join(cwd or "", ref)), *_beside(path, ref)] if allowed(c) and is_file(c)), None)
    if target is None or str(target.resolve()) in seen or target.suffix not in ("", ".sh", ".bash", ".env"):
        return []
    seen.add(str(target.resolve()))
    text = _launcher_text(target)
    return list(_logical_lines(_inline_scripts(_heredocs(text)))) if text else []


def _moved(line: str, env: dict[str, str], cwd: str | None) -> str | None:
    """The folder a standalone `cd DIR` line moves the launcher to (where it was when DIR cannot be read)."""
    try:
        moved = _cd(tokens(_expand(line, env)), cwd)
    except MemlintError:
        moved = None
    return moved if moved is not None else cwd


def _chain(words: list[str]) -> Iterator[tuple[list[str], str | None]]:
    """The commands of a line joined by `&&`, `;` or `||` (`source activate base && cd /workdir/repo && torchrun ...`),
    each with the folder the chain's `cd DIR` commands before it moved to (None when none did). A leading
    `cd DIR && cmd` stays with its command (parse_command reads it)."""
    seps = ("&&", ";", "||")
    words = [x for w in words for x in ((w[:-1], ";") if len(w) > 1 and w.endswith(";") else (w,))]  # `cuda; cd`
    rest = words[3:] if words[:1] == ["cd"] else words  # `cd DIR && cmd` alone is parse_command's
    if not any(w in seps for w in rest):
        yield words, None
        return
    moved: str | None = None
    seg: list[str] = []
    for w in [*words, "&&"]:
        if w not in seps:
            seg.append(w)
            continue
        if len(seg) == 2 and seg[0] == "cd" and "$" not in seg[1]:
            moved = seg[1] if moved is None or seg[1].startswith(("/", "~")) else os.path.join(moved, seg[1])
        elif seg:
            yield (seg[1:] if seg[0] in ("do", "then", "else", "{") else seg), moved
        seg = []


_MAX_NESTED = 3  # launchers that run launchers: how deep they are followed


def _copied(line: str, env: dict[str, str], cwd: str | None, copies: dict[str, str]) -> None:
    """`cp SRC DST` (`cp -f run.sh app/examples/`): DST (or DST/SRC's name) is SRC from here on, both as paths from
    where the launcher's commands run."""
    try:
        words = [w for w in tokens(_expand(line, env)) if not w.startswith("-")]
    except MemlintError:
        return
    if len(words) != 3 or any("$" in w or "*" in w for w in words[1:]):
        return
    src, dst = (os.path.normpath(os.path.join(cwd or "", os.path.expanduser(w))) for w in words[1:])
    if words[2].endswith("/") or ("." not in os.path.basename(dst) and "." in os.path.basename(src)):  # into a folder
        dst = os.path.join(dst, os.path.basename(src))
    copies[dst] = copies.get(src, src)


_RUNS_LAUNCHER = re.compile(r"\.(?:" + "|".join(x.lstrip(".") for x in LAUNCHER_SUFFIXES) + r")(?=[\s\"';&|)]|$)")


def _beside(path: Path, ref: str) -> list[Path]:
    """`ref` looked up beside the launcher `path` and in the four folders above it (a launcher run from the checkout's
    top or from its own folder names files relative to either)."""
    return [b / ref for b in (path.parent, *list(path.parent.resolve().parents)[:4])]


def _nested_script(line: str, path: Path, env: dict[str, str], exported: set[str], cwd: str | None,
                   depth: int, copies: dict[str, str] | None = None) -> list[Launch]:
    """`bash scripts/train.sh --gpus 0,1 ...` inside a launcher: the launches of that script of the checkout, run with
    its arguments and the exported variables (looked up from where the commands run, then beside this launcher and
    the folders above it); followed `_MAX_NESTED` deep. A script the launcher copied before (`copies`) is the file it
    copied, run where the copy is."""
    from memlint.files import allowed, is_file

    if depth >= _MAX_NESTED or not _RUNS_LAUNCHER.search(line):
        return []
    try:
        words = tokens(_expand(line, env))
    except MemlintError:
        return []
    sh = shell_script(words)
    if sh is None:
        return []
    script, args, env1, moved = sh
    rel = os.path.join(cwd or "", moved or "", os.path.expanduser(script))
    cands = [Path(rel), *_beside(path, script)]
    if copies and (src := copies.get(os.path.normpath(rel))) is not None:
        cands = [Path(src), *_beside(path, src), *cands]
    target = next((c for c in cands if allowed(c) and is_file(c) and c.resolve() != path.resolve()), None)
    if target is None and os.path.isabs(os.path.expanduser(script)):
        # `/home/author/repo/scripts/run.sh` (a launcher of the author's machine): the checkout's file of that tail
        from memlint.extract.launched import author_file

        found = author_file(os.path.expanduser(script), [path.parent, *list(path.resolve().parents)[:4]])
        target = found[0] if found is not None and found[0].resolve() != path.resolve() else None
    if target is None:
        return []
    env0 = {**{k: env[k] for k in exported if k in env}, **env1}
    shown = os.path.normpath(str(target))
    found = launches(target, shown, tuple(args), env0, depth=depth + 1)
    if cwd or moved:
        where = os.path.normpath(os.path.join(cwd or "", moved or ""))
        found = [replace(x, cwd=os.path.normpath(os.path.join(where, x.cwd)) if x.cwd else where) for x in found]
    return found


_IF = re.compile(r"^(if|elif)\s+(.*?)\s*(?:;\s*then)?\s*$")
_TEST = re.compile(r"^(?:\[\[\s+(.*)\s+\]\]|\[\s+(.*)\s+\]|test\s+(.*))$")
_SOURCE = re.compile(r"^(?:source|\.)\s+(\S+)\s*(?:[;#].*)?$")


def _condition(cond: str, env: dict[str, str]) -> bool | None:
    """A `[[ A == B ]]` / `[ A != B ]` / `[ -z A ]` / `[ N -gt M ]` test decided from the launcher's known
    values; None when it is not such a test or a value in it is unknown (the launcher's argument, the machine's)."""
    m = _TEST.match(cond.strip())
    if not m:
        return None
    body = next(g for g in m.groups() if g is not None)
    try:
        words = tokens(_expand(body, env))
    except MemlintError:
        return None
    if any("$" in w or "`" in w for w in words) or any(w in ("&&", "||", "-a", "-o") for w in words):
        return None
    negate = bool(words[:1] == ["!"])
    words = words[1:] if negate else words
    if len(words) == 3 and words[1] in ("==", "=", "!="):
        if m.group(1) is not None and any(c in words[2] for c in "*?["):
            return None  # a glob pattern of `[[ ]]`
        result = (words[0] == words[2]) == (words[1] != "!=")
    elif len(words) == 3 and words[1] in _NUMERIC_TESTS:
        if not all(_SMALL_INT.fullmatch(w) for w in (words[0], words[2])):
            return None
        result = _NUMERIC_TESTS[words[1]](int(words[0]), int(words[2]))
    elif len(words) == 2 and words[0] in ("-z", "-n"):
        result = (words[1] == "") == (words[0] == "-z")
    else:
        return None
    return result != negate


_NUMERIC_TESTS = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-gt": lambda a, b: a > b,
                  "-lt": lambda a, b: a < b, "-ge": lambda a, b: a >= b, "-le": lambda a, b: a <= b}


def _branch(stripped: str, env: dict[str, str], branches: list[list[bool | None]]) -> bool:
    """Follow a multi-line `if`/`elif`/`else`/`fi` block: True for a line that only opens, switches or closes
    a branch. A branch whose test is decided false is not read; an undecided test reads every branch, as before."""
    word = stripped.split(None, 1)[0].rstrip(";")
    if word in ("if", "elif") and not re.search(r"(?:^|[;\s])fi\s*;?\s*$", stripped):
        m = _IF.match(stripped)
        if m is None or (";" in m.group(2) and not _TEST.match(m.group(2).strip())):
            return False  # `if cmd; then python train.py`: a command on the same line, read as before
        test = _condition(m.group(2), env)
        if word == "if" or not branches:
            branches.append([test, test])
            return True
        earlier = branches[-1][1]
        if earlier is True:
            branches[-1][0] = False
        elif earlier is False:
            branches[-1] = [test, test]
        else:
            branches[-1][0] = None if test is not False else False
        return True
    if word == "then" and stripped.rstrip(";") == "then":
        return True
    if word == "else" and stripped.rstrip(";") == "else" and branches:
        earlier = branches[-1][1]
        branches[-1] = [None if earlier is None else not earlier, True if earlier is not None else None]
        return True
    if word == "fi" and stripped.rstrip(";") == "fi":
        if branches:
            branches.pop()
        return True
    return False


def _settles(stripped: str, path: Path, env: dict[str, str], exported: set[str], branches: list[list[bool | None]]) -> bool:
    """Whether a launcher line is settled without running a command: a branch line, a line of a branch that
    does not run, a `source FILE` memlint does not read, or a line that only sets variables."""
    if _branch(stripped, env, branches):
        return True
    if any(taken is False for taken, _ in branches):
        return True
    if _SOURCE.match(stripped):  # a file memlint does not read (a virtualenv's activate): nothing it sets is known
        return True
    return _sets_variables(stripped, env, exported)


_COUNT_LIST = re.compile(r"""\$\(\s*echo\s+["']?\$\{?(\w+)\}?["']?\s*\|\s*(?:tr\s+["']?,["']?\s+["']?\\n["']?\s*\|\s*wc\s+-l"""
                         r"""|awk\s+-F\s*["']?,["']?\s+["']\{\s*print\s+NF;?\s*\}["'])\s*\)""")
_HOSTNAMES = re.compile(r"\$\(\s*scontrol\s+show\s+hostnames?(?:\s+\S+)?\s*\)")


def _hostnames(words: list[str], env: dict[str, str]) -> list[str] | None:
    """An array's words with `$(scontrol show hostnames $SLURM_JOB_NODELIST)` as the job's nodes, one word each (its
    count is the allocation's, SLURM_JOB_NUM_NODES); None when a command substitution left is not known."""
    out: list[str] = []
    for w in words:
        if _HOSTNAMES.fullmatch(w) and env.get("SLURM_JOB_NUM_NODES", "").isdigit():
            out += [f"node{i}" for i in range(int(env["SLURM_JOB_NUM_NODES"]))]
        elif w.startswith("$(") and w.endswith(")") and not w.startswith("$(("):
            return None  # a command's output, split into words: how many is not known
        else:
            out.append(w)
    return out


_FOR_HEAD = re.compile(r"^for\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\s+(.+?)\s*(?:;\s*do)?\s*$")


def _loop_variable(stripped: str, env: dict[str, str]) -> bool:
    """`for MODEL in "${MODELS[@]}"; do` (its body on the lines that follow): the loop variable is the list's one
    word when the list has one (the others commented out), unknown otherwise (each pass takes another)."""
    m = _FOR_HEAD.match(stripped)
    if m is None or re.search(r"\bdo\s+\S", stripped):
        return False
    try:
        words = tokens(_expand(m.group(2), env))
    except MemlintError:
        words = []
    if len(words) == 1 and not any(c in words[0] for c in "${*?["):  # (brace expansion and globs are several words)
        env[m.group(1)] = words[0]
    else:
        env.pop(m.group(1), None)
    return True


_FN = "\x00fn:"  # env key of a shell function's body (its lines joined by newlines)
# (each matched against a right-stripped line, its pattern ending in a greedy `(.*)`: no backtracking over long lines)
_FUNC_DEF = re.compile(r"^(?:function\s+([A-Za-z_][\w-]*)\s*(?:\(\s*\))?|([A-Za-z_][\w-]*)\s*\(\s*\))\s*\{\s*(.*)$")
_ECHO = re.compile(r"^\s*(?:echo|printf\s+['\"]%s\\?n?['\"])\s+(\S.*)$")
_MAX_ECHO = 2000  # characters of an echoed value memlint reads
_MAX_FUNCTION_LINES = 200
_LOCAL_ARG = re.compile(r"""^\s*(?:local\s+)?([A-Za-z_]\w*)=["']?\$(?:\{(\d)\}|(\d))["']?\s*$""")
_CASE_ON = re.compile(r"""^\s*case\s+"?\$\{?([A-Za-z_]\w*|\d)\}?"?\s+in\s*$""")


def _function_def(stripped: str, lines: list, i: int, env: dict[str, str]) -> None:
    """`name() {` (or `function name {`) at line i-1: its body, up to the `}` that closes it, kept under env[_FN+name]
    for a later `$(name args)`; a one-line `name() { echo ...; }` too."""
    m = _FUNC_DEF.match(stripped.rstrip())
    if m is None:
        return
    name, rest = m.group(1) or m.group(2), m.group(3).rstrip()
    if rest.endswith("}"):  # one line: `pick() { echo "/models/$1"; }`
        env[_FN + name] = rest[:-1].strip().rstrip(";")
        return
    body, depth = ([rest] if rest else []), 1
    for _, text, _ in lines[i:i + _MAX_FUNCTION_LINES]:
        t = text.strip()
        depth += t.endswith("{") - (t == "}" or t.startswith("}"))
        if depth <= 0:
            env[_FN + name] = "\n".join(body)
            return
        body.append(text)


def _function_output(val: str, env: dict[str, str]) -> str | None:
    """What `$(name args)` prints when `name` is the launcher's function and its body echoes one value for these
    arguments: a single `echo X`, or the `case "$1" in pattern) echo X ;; esac` arm the first argument selects
    (`*` the fallback); None for anything else (a pipe, a command's output, no arm)."""
    import fnmatch

    try:
        words = tokens(_expand(val[2:-1].strip(), env))
    except MemlintError:
        return None
    body = env.get(_FN + words[0]) if words else None
    if body is None or any(c in val for c in "|`"):
        return None
    fenv = {**env, _POS_KEY: "\x00".join(words[1:])}
    lines = body.splitlines()
    for ln in lines:  # `local key="$1"`: the function's own names for its arguments
        loc = _LOCAL_ARG.match(ln)
        if loc:
            n = int(loc.group(2) or loc.group(3))
            fenv[loc.group(1)] = words[n] if n < len(words) else ""
    head = next((j for j, ln in enumerate(lines) if _CASE_ON.match(ln)), None)
    if head is None:
        text = _echoed(lines[0]) if len(lines) == 1 else None
    else:
        sel = _CASE_ON.match(lines[head]).group(1)
        arg = (words[int(sel)] if int(sel) < len(words) else "") if sel.isdigit() else fenv.get(sel)
        if arg is None:
            return None
        text = None
        for chunk in "\n".join(lines[head + 1:]).split(";;"):
            chunk = chunk.strip()
            arm = _ARM.match(chunk.replace("\n", " ")) if len(chunk) <= _MAX_ECHO else None
            if arm is None or chunk.startswith("esac"):
                continue
            if any(fnmatch.fnmatchcase(arg, p.strip().strip("\"'")) for p in arm.group(1).split("|")):
                text = _echoed(arm.group(2))
                break
    if text is None:
        return None
    out = _unquote(_expand(text, fenv))
    return out if "$" not in out and "`" not in out else None


def _echoed(line: str) -> str | None:
    """The words `echo X` (or `printf '%s\\n' X`) prints, when the line is that one command (no pipe, no second command,
    no redirection, no command substitution): None otherwise."""
    line = line.strip()
    if len(line) > _MAX_ECHO:
        return None
    m = _ECHO.match(line)
    if m is None:
        return None
    text = m.group(1).rstrip().removesuffix(";").rstrip()
    try:
        words = shlex.split(text, posix=True)
    except ValueError:
        return None
    bare = re.sub(r'"[^"]*"|\'[^\']*\'', "", text)  # the text outside quotes
    if not words or any(c in bare for c in "|;&><`") or "$(" in text:
        return None
    return text


def _unquoted_parts(text: str, sep: str) -> list[str]:
    """`text` split at each `sep` outside quotes (the non-empty parts)."""
    parts, cur, quote = [], [], None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def _keyed_array(stripped: str, env: dict[str, str]) -> bool:
    """`declare -A BS` / `declare -A BS=([a]=16 [b]=8)` / `BS["a"]=16` / `BS[$KEY]=16`: each item under `BS[key]`
    (a key memlint cannot expand is an item it does not know); True when the line was one of these."""
    parts = _unquoted_parts(stripped, ";")
    if len(parts) > 1 and all(_ASSOC_SET.match(p) or _ASSOC_DECLARE.match(p) for p in parts):
        return all([_keyed_array(p.strip(), env) for p in parts])  # `BS[big]=4; BS[huge]=1`: each, in order
    dec = _ASSOC_DECLARE.match(stripped)
    if dec:
        env[dec.group(1) + _DECLARED] = "1"
        for item in _ASSOC_ITEM.finditer(dec.group(2) or ""):
            env[f"{dec.group(1)}[{_unquote(item.group(1))}]"] = _unquote(_expand(item.group(2), env))
        return True
    it = _ASSOC_SET.match(stripped)
    if not it or it.group(1) + _DECLARED not in env:
        return False  # `A[i]=x` of an array `declare -A` did not make keyed: bash's indexed array, not read
    key = _unquote(_expand(it.group(2), env))
    if "$" in key or "`" in key:
        env[it.group(1) + _UNTOLD] = "1"  # an item under a key memlint cannot tell: a missing key may be it
        return True
    try:  # `BS[big]="4"; BS[huge]=1`: the value is the first word, up to an unquoted `;`
        lex = shlex.shlex(it.group(3).strip(), posix=True, punctuation_chars=";&|")
        lex.whitespace_split = True
        value = next(iter(lex), "")
    except ValueError:
        return True
    env[f"{it.group(1)}[{key}]"] = _expand(value, env)
    return True


def _sets_variables(stripped: str, env: dict[str, str], exported: set[str]) -> bool:
    """Read a shell line that only sets variables (`shift`, an array, `X=...`, `export X=...`, a loop's head) into
    `env` and `exported`; False for a line that runs a command (`VAR=1 python train.py` included)."""
    if _shifted(stripped, env) or _loop_variable(stripped, env):
        return True
    if _keyed_array(stripped, env):
        return True
    arr = _ARRAY_DEF.match(stripped)
    if arr:  # `CUDAs=(${TOT_CUDA//,/ })`: a bash array of the expanded words; `A+=(x y)` appends to it
        expanded = _expand(arr.group(3), env)
        key = arr.group(1) + _ARRAY_KEY
        try:
            words = _hostnames(tokens(expanded), env)
        except MemlintError:
            return True
        if words is None:  # a command's output memlint does not know: the array is unknown
            env.pop(key, None)
            return True
        if arr.group(2) and env.get(key):
            words = env[key].split("\x00") + words
        env[key] = "\x00".join(words)
        return True
    exported |= _exports(stripped)
    app = _APPEND.match(stripped)
    if app is not None:  # `CMD+=" --lora_r ${R}"`: the string grows (a command built up, then `eval "$CMD"`)
        val = app.group(2).strip()
        if _quoted_alone(val) or " " not in val:
            env[app.group(1)] = env.get(app.group(1), "") + _unquote(_expand(val, env))
        else:
            env.pop(app.group(1), None)
        return True
    m = _ASSIGN.match(stripped)
    if not m:
        return False
    val = m.group(2).strip()
    if "?" in val:  # `MODEL=${1:?usage: run.sh MODEL}`: the argument given (its message's spaces are no command)
        val = _REQUIRED.sub(lambda r: _required(r, env), val)
    if _POSITIONAL.match(val) and _POS_KEY not in env:  # `X=${1}`: the launcher's own argument, unknown here (X stays
        return True                                     # unset, so a later `${X:-default}` is the default it documents)
    counted = _COUNT_LIST.fullmatch(val.strip())
    if counted and env.get(counted.group(1)) and "$" not in env[counted.group(1)]:
        # `N=$(echo $GPUS | tr ',' '\n' | wc -l)` / `awk -F, '{print NF}'`: the items of a comma list
        env[m.group(1)] = str(len([x for x in env[counted.group(1)].split(",") if x.strip()]))
        return True
    if val.startswith("$(") and val.endswith(")") and (out := _function_output(val, env)) is not None:
        env[m.group(1)] = out  # `MODEL=$(model_path "$KEY")`: what the launcher's own function echoes for that argument
        return True
    if val.startswith("$(") and val.endswith(")"):  # `X=$((A / B))` computed, `X=$(nvidia-smi ...)` unknown:
        got = _expand(val, env)                     # X stays unset unless it came out a number
        if re.fullmatch(r"-?\d+", got):
            env[m.group(1)] = got
        else:
            env.pop(m.group(1), None)
        return True
    if _quoted_alone(val) or " " not in val.split(" #", 1)[0].strip():  # `VAR=value` alone; `VAR=1 python train.py`
        env[m.group(1)] = _unquote(_expand(val, env))                    # is a command
        return True
    if val[:1] in "'\"":  # `X="accelerate launch --ip "$ADDR" --port 1"`: quoted parts joined into one word
        try:
            words = tokens(_expand(val, env))
        except MemlintError:
            return False
        if len(words) == 1:
            env[m.group(1)] = words[0]
            return True
    return False


_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_NOT_CONSOLE = {"echo", "export", "cd", "mkdir", "rm", "cp", "mv", "set", "if", "fi", "then", "else", "for", "do", "done",
                "while", "source", ".", "exit", "wait", "sleep", "cat", "ls", "pip", "git", "wget", "curl", "conda", "unset",
                "local", "declare", "shift", "return", "true", "false", "case", "esac", "trap", "tee", "touch", "chmod", "date",
                "printf", "read", "test", "[", "[[", "}", "{", "nvidia-smi", "huggingface-cli", "hf", "tar", "unzip"}


def _maybe_console(line: str) -> bool:
    """Whether a line may run a console script: its first word is a command name, not a shell builtin or common tool."""
    first = next((w for w in line.split() if not _ENV_ASSIGN.match(w)), "")
    return bool(re.fullmatch(r"[A-Za-z][\w.-]*", first)) and first not in _NOT_CONSOLE


def launcher_targets(path: Path, shown: str, roots: list[Path], args: tuple[str, ...] | None = None,
                     env0: dict[str, str] | None = None, make: tuple | None = None, named: bool = False,
                     root: str | None = None, skipped: list | None = None) -> list:
    """files.Target for each launch of `path` whose script (or module) is a file of the checkout,
    looked up beside the launcher, then in each of `roots` (the checkout, the folder walked).
    `args`/`env0`/`make`: the launcher's arguments and variables when a command runs it (see `launches`);
    `named`: the user named the launcher (its commands are not dropped for showing no trainer). A script
    outside the checked root (`python ../outside/x.py`) is not looked at; each target keeps `root`. `skipped`: the
    launches whose script, module or config is no file memlint reads are appended to it."""
    from memlint.files import Target, is_file

    out = []
    # the files a notebook writes itself, read on first need: `%%writefile NAME` cells, and for a framework command's
    # config also a config dumped from a dict the notebook builds (`yaml.dump(args, f)`: a second parse, so only then)
    written: dict[str, dict] = {}
    for launch in launches(path, shown, args, env0, make):
        kind = "script" if launch.script else "config" if not launch.module and launch.launcher in FRAMEWORK_CLIS else None
        ref = launch.script if kind == "script" else _config_arg(launch) if kind else None
        if path.suffix == ".ipynb" and ref:
            if kind not in written:
                from memlint.extract.source import written_configs, written_files

                written[kind] = written_files(path) if kind == "script" else {**written_configs(path),
                                                                                  **written_files(path)}
            key = os.path.normpath(os.path.join(launch.cwd or "", os.path.expanduser(ref)))
            if key in written[kind]:  # what the notebook wrote runs, whatever a file of that name on disk holds
                text, cell_line = written[kind][key]
                where = f"{key} (written by {shown}:{cell_line})"
                out.append(Target(path.parent / key, where, False, launch, root=root, named_launcher=named,
                                  written_by=path, text=text,
                                  writes=_notebook_writes(path, shown, written) if kind == "script" else None))
                continue
        bases = _launch_bases(path, roots, launch)
        target, launch = _author_script(launch, bases)
        launch = _author_config(launch, bases)
        if target is None:
            target, launch = _target_in(launch, bases)
        if target is None and (tool := framework_script(launch)) is not None and flags_config(tool):
            # `python ../../src/train_bash.py --stage sft ...` in the framework's clone: the flags are the config
            launch, target = tool, path.parent / f"{tool.launcher} {tool.subcommand}"
        if target is None and (ref := bundled_config_ref(launch)) is not None:
            # torchtune's own config, torchtune not installed here (its text is read at the checkout's pinned version)
            out.append(replace(bundled_target(launch, ref, path.parent), root=root, named_launcher=named))
            continue
        if target is None:
            if skipped is not None:
                skipped.append(launch)
            continue
        writes = _notebook_writes(path, shown, written) if path.suffix == ".ipynb" and launch.script else None
        out.append(Target(target, os.path.normpath(os.path.relpath(target)), False, launch, root=root,
                          named_launcher=named, writes=writes))
    return out


def _launch_bases(path: Path, roots: list[Path], launch: Launch) -> list[Path]:
    """Where a launch's script, module or config is looked up: beside the launcher, then the folders above it up to
    the checkout (`bash scripts/train.sh` run from the folder that holds train.py), then the roots; a `cd DIR` of the
    launch first (an author's absolute folder: the checkout's folder of the same tail)."""
    ups = [a for a in path.parent.resolve().parents][:4]
    stop = [r.resolve() for r in roots]
    bases = [path.parent]
    for a in ups:
        bases.append(a)
        if a in stop:
            break
    bases += [r for r in roots if r.resolve() not in {b.resolve() for b in bases}]
    if launch.cwd and os.path.isabs(os.path.expanduser(launch.cwd)):
        mapped = _checkout_folder(launch.cwd, bases)
        bases = ([mapped] if mapped is not None else []) + bases
    elif launch.cwd:
        bases = [b / launch.cwd for b in bases] + bases
    return bases


def _target_in(launch: Launch, bases: list[Path]) -> tuple[Path | None, Launch]:
    """(the file the launch runs, found under the first of `bases` that holds it; the launch, as the framework tool's
    command when that file is a vendored framework's entry script); (None, launch) when none holds it."""
    from memlint.files import is_file

    target = None
    for base in bases:
        if launch.script:
            cand = base / os.path.expanduser(launch.script)
            if cand.suffix == ".py" and is_file(cand):
                target = cand
                tool = vendored_entry(launch, cand)
                if tool is not None and flags_config(tool):  # a vendored LLaMA-Factory's src/train.py --stage sft
                    return cand.parent / f"{tool.launcher} {tool.subcommand}", tool
        elif launch.module:
            target = resolve_module(launch.module, [base], package=launch.entry is not None)
        elif launch.launcher in FRAMEWORK_CLIS:  # `llamafactory-cli train X.yaml`, `torchrun -m axolotl.cli.train X.yml`
            if flags_config(launch):  # `llamafactory-cli train --stage sft ...`: the flags are the config
                from memlint.extract.launch import packaged_copy

                copy = next((c for b in bases if (c := packaged_copy(launch, b)) is not None), None)
                return copy or base / f"{launch.launcher} {launch.subcommand}", launch
            target = _tool_config(launch, base)
            if target is not None:
                return target, launch
        if target is not None:
            # the framework config the script or module runs (a Hydra entry script's NeMo config, a `train.py
            # recipe.yaml` recipe, `-m torchtitan.train --job.config_file X`): the run is that config
            return framework_config(launch, base) or target, launch
    return None, launch


def _notebook_writes(path: Path, shown: str, written: dict) -> dict | None:
    """The config files a notebook writes (from a dict or a string) before it runs a script: absolute path -> (text,
    where), for the script's run-time reads (files.written_overlay); read once per notebook into `written`."""
    if "configs" not in written:
        from memlint.extract.source import written_configs

        written["configs"] = {os.path.abspath(path.parent / k): (text, f"{shown}:{line}")
                              for k, (text, line) in written_configs(path).items()}
    return written["configs"] or None


def _author_script(launch: Launch, bases: list[Path]) -> tuple[Path | None, Launch]:
    """`python /mnt/author/Qwen/trl/train_grpo.py`: a script of the author's machine; the checkout's file of the same
    longest tail (launched.author_file), as a `cd /home/author/...` is read; (None, launch) for any other script."""
    from memlint.files import is_file

    script = os.path.expanduser(launch.script) if launch.script else ""
    if not script or not os.path.isabs(script) or is_file(Path(script)):
        return None, launch
    from memlint.extract.launched import author_file

    found = author_file(script, bases)
    if found is None or found[0].suffix != ".py":
        return None, launch
    return found[0], replace(launch, script=os.path.relpath(found[0]))


def _author_config(launch: Launch, bases: list[Path]) -> Launch:
    """`tune run R --config /lfs/u/proj/configs/x.yaml`: a framework tool's config named by a path of the author's
    machine; the launch given the checkout's file of the same longest tail (launched.author_file), as a script of
    the author's machine is read; the launch unchanged for any other command."""
    from memlint.files import is_file

    if launch.launcher not in FRAMEWORK_CLIS or launch.script or launch.module:
        return launch
    raw = _config_arg(launch) or ""
    ref = os.path.expanduser(raw)
    if not ref or not os.path.isabs(ref) or is_file(Path(ref)):
        return launch
    from memlint.extract.launched import author_file

    found = author_file(ref, bases)
    if found is None:
        return launch
    new = os.path.relpath(found[0])
    argv = tuple(new if w == raw else (w.split("=", 1)[0] + "=" + new if w.endswith("=" + raw) else w)
                 for w in launch.argv)
    return replace(launch, argv=argv)


def _checkout_folder(folder: str, bases: list[Path]) -> Path | None:
    """The checkout's folder an absolute folder of the author's machine stands for (`cd /home/u/gritlm/gritlm` in a
    checkout of gritlm: its gritlm/): the longest tail of its path that is a folder under one of `bases` (the launcher's
    folder and those above it, the checkout); None when none is, or when the folder is on this machine itself."""
    from memlint.files import allowed

    parts = [p for p in Path(os.path.expanduser(folder)).parts if p not in ("/", "\\")]
    for k in range(len(parts)):
        tail = Path(*parts[k:])
        for base in bases:
            cand = base / tail
            if allowed(cand) and cand.is_dir():
                return cand
    return None


def _tool_config(launch: Launch, base: Path) -> Path | None:
    """The config file a framework tool's command in a launcher trains from, looked up from `base`."""
    from memlint.extract.launch import tool_config

    ref = _config_arg(launch)
    if ref is None:
        return None
    cand = tool_config(launch, base, os.path.expanduser(ref))
    return cand if cand.is_file() else None


def command_targets(words, cwd: Path | None = None) -> list:
    """The files a launch command runs, as files.Target carrying each Launch: one for a Python launcher
    (launch.command_target), one per training command for a shell script run with its arguments
    (`bash scripts/run.sh 2 /ckpt`: $1, "$@" and `shift` read with them)."""
    cwd = cwd or Path.cwd()
    made = make_command(words)
    if made is not None:
        return _make_targets(made, cwd)
    sh = shell_script(words)
    if sh is None:
        from memlint import files
        from memlint.errors import NotFollowed

        try:
            return [command_target(words, cwd)]
        except NotFollowed as exc:  # a program memlint does not read: a note on the command, not an error
            shown = " ".join(words[:4]) + (" …" if len(words) > 4 else "")
            return [files.Target(cwd / "<command>", shown, True, note=f"`{shown}`: {exc}")]
    script, args, env, moved = sh
    base = cwd / moved if moved else cwd
    path = base / os.path.expanduser(script)
    shown = os.path.normpath(os.path.join(moved or "", script))
    if not path.is_file():
        raise MemlintError(f"{shown}: no such file (the command's shell script)")
    from memlint import files
    from memlint.extract.budget import OverBudget

    root = files.checkout_root(path)
    skipped: list = []
    try:
        with files.checked_root(root):
            targets = launcher_targets(path, shown, [base], args=args, env0=env, root=root, named=True,
                                       skipped=skipped)
    except OverBudget as exc:  # the launcher past a budget: a MEM001 note on it
        return [files.Target(path, shown, True, root=root, note=str(exc))]
    if not targets:  # a note on the launcher, saying what it runs: memlint's limit, not the user's error
        return [files.Target(path, shown, True, root=root, note=unfollowed(shown, skipped))]
    if moved:
        # `cd DIR && bash run.sh`: the script's commands run in DIR, so the relative paths their programs open
        # (a DeepSpeed JSON, a config file) are DIR's; a launch's cwd is relative to where memlint reads from
        targets = [replace(t, launch=replace(t.launch, cwd=os.path.normpath(os.path.join(moved, t.launch.cwd or ""))))
                   if getattr(t, "launch", None) is not None else t for t in targets]
    return targets


def unfollowed(shown: str, skipped: list) -> str:
    """What a launcher the user named runs, when memlint reads none of it: each command's program and what it names
    that is no file of the checkout (an installed package's module, a script or config elsewhere)."""
    if not skipped:
        return (f"{shown}: runs no Python training command memlint reads (no python, torchrun, accelerate, deepspeed "
                "or framework command line whose script or config is in this checkout): name the training script or "
                "config, or its launch command after --")
    said = []
    for launch in skipped[:3]:
        what = (f"-m {launch.module}" if launch.module else launch.script or
                f"{launch.launcher} {launch.subcommand or ''}".strip())
        where = f"line {launch.line}" if launch.line else launch.origin
        why = ("a module of no package in this checkout (an installed library's)" if launch.module else
               "no such Python file in this checkout" if launch.script else "its config is not in this checkout")
        said.append(f"`{launch.launcher} {what}` ({where}): {why}" if launch.launcher != "python" or launch.module
                    else f"`python {what}` ({where}): {why}")
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return (f"{shown}: no training command memlint reads: " + "; ".join(said) + more +
            ": name the training script or config, or its launch command after --")


def _make_targets(made, cwd: Path) -> list:
    """The files `make GOALS` runs: the training commands of those goals' recipes (and their prerequisites'), read
    with make's variables (`PYTHON ?= uv run`, `make train MODEL=x`) and each recipe line's own `VAR=x cmd`."""
    makefile, goals, variables, env, moved = made
    base = cwd / moved if moved else cwd
    if makefile is None:
        makefile = next((n for n in ("GNUmakefile", "makefile", "Makefile") if (base / n).is_file()), "Makefile")
    path = base / os.path.expanduser(makefile)
    shown = os.path.normpath(os.path.join(moved or "", makefile))
    if not path.is_file():
        raise MemlintError(f"{shown}: no such file (the command's Makefile)")
    skipped: list = []
    targets = launcher_targets(path, shown, [base], env0=env, make=(goals, variables), named=True, skipped=skipped)
    if not targets:  # as for a shell script: a note on the Makefile, memlint's limit rather than the user's error
        from memlint import files

        what = f"make {' '.join(goals)}".strip() if goals else "make (the default goal)"
        return [files.Target(path, shown, True, root=files.checkout_root(path),
                             note=unfollowed(f"{shown}: `{what}`", skipped))]
    return targets


# ---- the README's own command for a file named alone ------------------------------------------------------------

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
_SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh", "shell-session", "sh-session", "shellsession", "terminal"}
_PROMPT = re.compile(r"^(?:\$|>|#\s*\$)\s+")
MAX_DOC_FILES = 24  # docs/*.md files looked at beside a README, per folder
_README_NAMES = ("README.md", "readme.md", "Readme.md", "README.MD", "README.markdown", "README")


def readme_shell(text: str) -> str:
    """The shell code blocks of a Markdown file (```bash, ```sh, ```console, or no language) as a shell script, every
    other line blank so line numbers are the file's; a `$ ` prompt is taken off a command."""
    out: list[str] = []
    fence: str | None = None
    shell = False
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence, shell = m.group(1), m.group(2).lower() in _SHELL_LANGS
            out.append("")
        elif fence is not None and line.strip().startswith(fence[0] * 3) and not line.strip().strip(fence[0]):
            fence = None
            out.append("")
        else:
            out.append(_PROMPT.sub("", line.lstrip()) if fence is not None and shell else "")
    return "\n".join(out)


def _docs(folder: Path) -> list[Path]:
    found = [folder / n for n in _README_NAMES if (folder / n).is_file()][:1]
    docs = folder / "docs"
    if docs.is_dir():
        found += sorted(p for p in docs.glob("*.md") if p.is_file())[:MAX_DOC_FILES]
    return found


def readme_launch(path: Path, top: Path | None = None) -> Launch | None:
    """The command a README (or docs/*.md) beside `path` or in a folder above it, up to `top` (the folder memlint
    was run from; only files inside it are read), documents for that very file: `python train.py --lr 1e-4`,
    `cd finetune && torchrun --nproc_per_node 8 train.py ...`, `llamafactory-cli train examples/x.yaml`. The
    closest folder whose Markdown launches the file decides: its command when it documents one (repeated or
    not), None when it documents several different runs of the file (which one is meant is not known) or none."""
    top = (top or Path.cwd()).resolve()
    target = path.resolve()
    if top not in target.parents:
        return None
    folders = [target.parent]
    while folders[-1] != top and top in folders[-1].parents:
        folders.append(folders[-1].parent)
    for folder in folders:
        found: list[Launch] = []
        for md in _docs(folder):
            found += [launch for launch in _documented(md) if _launches_file(launch, [md.parent, top], target)]
        runs = {(la.launcher, la.script, la.module, la.argv, la.processes, la.nodes, tuple(sorted(la.options.items())),
                 tuple(sorted(la.env.items()))) for la in found}
        if len(runs) == 1:
            return replace(found[0], documented=True)
        if runs:
            return None
    return None


_DOC_MEMO: dict[tuple, list[Launch]] = {}  # a README's commands, once per run for every file named beside it


def _documented(md: Path) -> list[Launch]:
    """The commands of a Markdown file's shell code blocks (read once while it is unchanged)."""
    from memlint.files import read_bytes

    try:
        st = md.stat()
    except OSError:
        return []
    key = (str(md.resolve()), st.st_mtime_ns, st.st_size, os.getcwd())
    if key not in _DOC_MEMO:
        try:
            text = readme_shell(read_bytes(md).decode("utf-8", errors="replace"))
        except OSError:
            return []
        if len(_DOC_MEMO) >= 64:
            _DOC_MEMO.clear()
        _DOC_MEMO[key] = launches(md, os.path.relpath(md), text=text)
    return _DOC_MEMO[key]


def _launches_file(launch: Launch, bases: list[Path], target: Path) -> bool:
    """Whether `launch`, run from one of `bases` (its `cd DIR` applied), runs `target` (as its script, its module,
    its framework tool's config, or the config its script is given)."""
    for base in bases:
        base = base / launch.cwd if launch.cwd else base
        if launch.script and (base / os.path.expanduser(launch.script)).resolve() == target:
            return True
        if launch.module and (found := resolve_module(launch.module, [base], package=launch.entry is not None)) is not None and found.resolve() == target:
            return True
        if launch.launcher in FRAMEWORK_CLIS and not launch.script and not launch.module:
            found = _tool_config(launch, base)
            if found is not None and found.resolve() == target:
                return True
        if launch.script and target.suffix in (".yaml", ".yml", ".json", ".toml"):
            if any((base / w).resolve() == target for w in launch.argv if not w.startswith("-") and "=" not in w):
                return True
    return False
