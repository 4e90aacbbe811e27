"""Which files memlint reads: the paths named on the command line, and the readable files a walk of
a folder finds (.gitignore respected, tool and build folders skipped, symlinks not followed).

One walker for every command: `check`, `plan` and the pre-commit hook see the same files. The
ignore rules are read as git reads them, never by running git: git obeys the repository's own
`.git/config`, and `core.fsmonitor` in a checkout under review is a command.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from memlint.errors import MemlintError
from memlint.vocab import LAUNCHER_NAMES, LAUNCHER_SUFFIXES, READABLE_SUFFIXES

_PY_NEWLINE = re.compile(r"\r\n|\r|\n")


def source_lines(text: str) -> list[str]:
    """A source text's lines as Python numbers them: broken at \\n, \\r\\n and \\r only (str.splitlines
    also breaks at \\f, \\v, \\x1c-\\x1e, \\x85 and \\u2028, which Python's tokenizer keeps inside a line, so
    every finding after one would point a line too low)."""
    lines = _PY_NEWLINE.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines

_SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".nox",
              ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist", "site-packages", ".ipynb_checkpoints"}


@dataclass(frozen=True)
class Target:
    path: Path
    shown: str       # as the user named it (relative), for output
    explicit: bool   # named on the command line, not found by a walk
    launch: Any = None  # the command that runs it (extract.launch.Launch), when one is known
    named_launcher: bool = False  # run by a launcher the user named (`bash run.sh`, `make train`, run.sh itself):
                                  # kept with a note when it shows no trainer, unless another of its commands trains


# ---- .gitignore, as git's dir.c and wildmatch.c read it ---------------------------------------

class IgnorePattern(NamedTuple):
    regex: "re.Pattern[str] | None"  # None: a pattern git never matches (a trailing backslash, [:bad:])
    negated: bool
    dir_only: bool
    basename: bool                   # no slash but a trailing one: matched against the name at any depth


_CLASSES = {"alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f",
            "digit": "0-9", "graph": "\\x21-\\x7e", "lower": "a-z", "print": "\\x20-\\x7e",
            "punct": "!-/:-@\\[-`{-~", "space": " \\t\\n\\r\\f\\v", "upper": "A-Z", "xdigit": "0-9A-Fa-f"}


def _bracket(p: str, i: int) -> tuple[str, int] | None:
    """The regex of the bracket expression opening at p[i] and where it ends; None where
    wildmatch gives up on the whole pattern (no closing bracket, an unknown [:class:])."""
    n, j = len(p), i + 1
    negated = j < n and p[j] in "!^"
    j += negated
    items: list[str] = []
    prev: str | None = None
    first = True
    while True:
        if j >= n:
            return None
        c = p[j]
        if c == "]" and not first:
            break
        first = False
        if c == "\\":
            j += 1
            if j >= n:
                return None
            c = p[j]
            items.append(re.escape(c))
        elif c == "-" and prev is not None and j + 1 < n and p[j + 1] != "]":
            j += 1
            hi = p[j]
            if hi == "\\":
                j += 1
                if j >= n:
                    return None
                hi = p[j]
            if prev <= hi:
                items.append(f"{re.escape(prev)}-{re.escape(hi)}")
            prev, j = None, j + 1
            continue
        elif c == "[" and j + 1 < n and p[j + 1] == ":":
            k = p.find("]", j + 2)
            if k == -1:
                return None
            if k - 1 < j + 2 or p[k - 1] != ":":  # no ":]": the "[" is a plain character
                items.append("\\[")
                prev, j = "[", j + 1
                continue
            name = p[j + 2 : k - 1]
            if name not in _CLASSES:
                return None
            items.append(_CLASSES[name])
            prev, j = None, k + 1
            continue
        else:
            items.append(re.escape(c))
        prev, j = c, j + 1
    body = "".join(items)
    if negated:
        return f"[^{body}/]", j + 1
    return (f"(?!/)[{body}]" if body else "(?!)"), j + 1


def _wildmatch(p: str) -> str | None:
    """A wildmatch pattern (WM_PATHNAME) as a regex: `*`, `?` and classes stop at `/`; `**/`,
    `/**/` and `/**` span folders; `\\` escapes."""
    out: list[str] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "*":
            j = i
            while j < n and p[j] == "*":
                j += 1
            at_start = i == 0 or p[i - 1] == "/"
            slash_next = j < n and (p[j] == "/" or p[j : j + 2] == "\\/")
            if j - i >= 2 and at_start and (j == n or slash_next):
                if j == n:
                    out.append(".*")
                else:
                    out.append("(?:.*/)?")
                    j += 2 if p[j] == "\\" else 1
            else:
                out.append("[^/]*")
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            got = _bracket(p, i)
            if got is None:
                return None
            out.append(got[0])
            i = got[1]
            continue
        elif c == "\\":
            if i + 1 >= n:
                return None
            i += 1
            out.append(re.escape(p[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _trim(line: str) -> str:
    """Trailing spaces go unless escaped with a backslash (dir.c trim_trailing_spaces)."""
    end, i, n = None, 0, len(line)
    while i < n:
        c = line[i]
        if c == " ":
            if end is None:
                end = i
        elif c == "\\":
            i += 1
            if i >= n:
                return line
            end = None
        else:
            end = None
        i += 1
    return line if end is None else line[:end]


def parse_gitignore(text: str) -> list[IgnorePattern]:
    """The patterns of one .gitignore (or info/exclude) file, in file order."""
    out: list[IgnorePattern] = []
    for raw in text.removeprefix("\ufeff").split("\n"):
        if not raw or raw.startswith("#"):
            continue
        line = _trim(raw[:-1] if raw.endswith("\r") else raw)
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        dir_only = line.endswith("/")
        if dir_only:
            line = line[:-1]
        if not line:
            continue
        basename = "/" not in line
        if not basename and line.startswith("/"):
            line = line[1:]
        rx = _wildmatch(line)
        out.append(IgnorePattern(re.compile(rx, re.S) if rx is not None else None, negated, dir_only, basename))
    return out


# One level of ignore rules: the folder (relative to the repository, "" at its top) and its patterns.
Level = tuple[str, list[IgnorePattern]]


def ignored(rel: str, is_dir: bool, levels: Sequence[Level]) -> bool:
    """Whether git ignores `rel` (a path from the repository's top, `/`-separated) by these
    levels, outermost first: the deepest level with a matching pattern decides, and within a
    file the last matching pattern. Leading folders are the walk's business (it does not enter
    an ignored one, so nothing below it is re-included, as in git)."""
    name = rel.rsplit("/", 1)[-1]
    for base, patterns in reversed(levels):
        if base and not rel.startswith(base + "/"):
            continue
        sub = rel[len(base) + 1:] if base else rel
        for pat in reversed(patterns):
            if pat.regex is None or (pat.dir_only and not is_dir):
                continue
            if pat.regex.fullmatch(name if pat.basename else sub):
                return not pat.negated
    return False


def _read_ignore_file(path: Path) -> list[IgnorePattern]:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
            return []
        return parse_gitignore(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []


def _git_dir(folder: Path) -> Path | None:
    """The git directory of a repository whose top is `folder`: `.git`, or the one a `.git`
    file (a worktree, a submodule) names; its `commondir` holds info/exclude."""
    dot = folder / ".git"
    if dot.is_dir():
        return dot
    if not dot.is_file():
        return None
    try:
        first = read_bytes(dot, 4096).decode("utf-8", "replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not first.startswith("gitdir:"):
        return None
    gd = Path(first[7:].strip())
    gd = gd if gd.is_absolute() else folder / gd
    try:
        common = read_bytes(gd / "commondir", 4096).decode("utf-8", "replace").strip()
    except OSError:
        return gd
    return gd / common if common else gd


def _repo_levels(top: Path) -> list[Level]:
    """A repository's own rules below any .gitignore: $GIT_DIR/info/exclude, then the top's .gitignore."""
    try:
        gd = _git_dir(top)
    except OSError:
        gd = None
    levels: list[Level] = [("", _read_ignore_file(gd / "info" / "exclude"))] if gd is not None else []
    return levels + [("", _read_ignore_file(top / ".gitignore"))]


def _find_top(root: Path) -> Path | None:
    d = root.resolve()
    for folder in (d, *d.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return None


def _start(root: Path) -> tuple[str, list[Level]] | None:
    """Where a walk of `root` starts in its repository (the path from the top, and the rules
    of the folders down to `root`), or None when git ignores `root` itself."""
    top = _find_top(root)
    if top is None:
        return "", [("", _read_ignore_file(root / ".gitignore"))]
    levels = _repo_levels(top)
    rel = root.resolve().relative_to(top).as_posix()
    if rel == ".":
        return "", levels
    cur = ""
    for part in rel.split("/"):
        cur = f"{cur}/{part}" if cur else part
        if ignored(cur, True, levels):
            return None
        levels = levels + [(cur, _read_ignore_file(top / cur / ".gitignore"))]
    return rel, levels


def walk(root: Path, exclude: Sequence[str] = ()) -> Iterable[Path]:
    """Readable candidate files under `root`, .gitignore respected, symlinks not followed."""
    start = _start(root)
    if start is None:
        return
    prefix, levels = start
    stack: list[tuple[Path, str, list[Level]]] = [(root, prefix, levels)]
    while stack:
        folder, folder_rel, levels = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            p = Path(e.path)
            rel = p.relative_to(root).as_posix()
            if any(fnmatch.fnmatch(rel, x) or fnmatch.fnmatch(e.name, x) for x in exclude):
                continue
            if e.is_symlink():
                continue  # a link may point outside the tree or back into it
            repo_rel = f"{folder_rel}/{e.name}" if folder_rel else e.name
            try:
                is_dir = e.is_dir(follow_symlinks=False)
                is_file = e.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if e.name in _SKIP_DIRS or e.name.startswith(".") or ignored(repo_rel, True, levels):
                    continue
                if os.path.lexists(os.path.join(e.path, ".git")):  # a repository of its own: its own rules
                    stack.append((p, "", _repo_levels(p)))
                else:
                    stack.append((p, repo_rel, levels + [(repo_rel, _read_ignore_file(p / ".gitignore"))]))
            elif is_file and (p.suffix in READABLE_SUFFIXES or p.suffix in LAUNCHER_SUFFIXES
                              or p.name in LAUNCHER_NAMES) and not ignored(repo_rel, False, levels):
                yield p


# ---- reading: regular files only, within a size budget ----------------------------------------

MAX_FILE_SIZE = 2_000_000  # bytes; [tool.memlint] max-file-size. A training config or script is a few kB.
_limit = [MAX_FILE_SIZE]
_recorders: list[list[tuple[str, str]]] = []


class Refused(OSError, MemlintError):
    """A file memlint does not read: not a regular file (a FIFO, a device), or over the size
    budget. An OSError, so every reader's `except OSError` already treats it as unreadable;
    `why` says it in a few words."""

    def __init__(self, path: str | os.PathLike, why: str) -> None:
        super().__init__(f"{os.fspath(path)}: {why}")
        self.path, self.why = os.fspath(path), why


def max_file_size() -> int:
    return _limit[-1]


def configure(limit: int | None) -> None:
    """The limit for this run (a command's settings); None puts the default back."""
    _limit[0] = MAX_FILE_SIZE if limit is None else limit


@contextmanager
def size_limit(limit: int | None) -> Iterator[None]:
    """Reads inside the block refuse files larger than `limit` bytes (None: the default)."""
    _limit.append(MAX_FILE_SIZE if limit is None else limit)
    try:
        yield
    finally:
        _limit.pop()


@contextmanager
def refusals() -> Iterator[list[tuple[str, str]]]:
    """Collects (path, why) for every file refused inside the block: the files a script or
    config follows (sibling modules, a DeepSpeed JSON, a model's config.json), reported as notes."""
    got: list[tuple[str, str]] = []
    _recorders.append(got)
    try:
        yield got
    finally:
        _recorders.remove(got)


def _refuse(path: str | os.PathLike, why: str) -> Refused:
    for rec in _recorders:
        rec.append((os.fspath(path), why))
    return Refused(path, why)


def _mb(n: int) -> str:
    return f"{n / 1_000_000:,.1f} MB" if n >= 100_000 else f"{n:,} bytes"


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


# One run's reads (`once_per_run`): a file several readers want (a notebook is read as Python, for
# its `!python` launch lines, for its raw JSON positions, and for the cache key) is read once. Keyed
# by the file's identity and stat, so a file rewritten during the run (`--fix`) is read again.
class _Memo(dict):
    held = 0  # bytes of text held


_memo: list[_Memo] = []
_MEMO_BYTES = 256_000_000  # past this much held text, later files are read as before, uncached


@contextmanager
def once_per_run() -> Iterator[None]:
    """Inside the block every regular file is read from disk at most once (while it is unchanged)."""
    _memo.append(_Memo())
    try:
        yield
    finally:
        _memo.pop()


def _memo_key(path: str | os.PathLike) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def read_bytes(path: str | os.PathLike, limit: int | None = None, what: str = "max-file-size") -> bytes:
    """The content of a regular file of at most `limit` bytes (default: max-file-size; `what`
    names the limit in the refusal); inside `once_per_run`, from the run's memo when already read.

    Opened without blocking and checked on the open descriptor, so a FIFO or /dev/zero named
    `train.py` is refused, not read forever. Raises Refused (an OSError) or OSError."""
    limit = max_file_size() if limit is None else limit
    memo = _memo[-1] if _memo else None
    key = _memo_key(path) if memo is not None else None
    if key is not None and key in memo:
        content = memo[key]
        if len(content) > limit:
            raise _refuse(path, f"not read: {_mb(len(content))}, over the {what} of {_mb(limit)}")
        return content
    content = _read_file(path, limit, what)
    if key is not None and len(content) == key[3] and memo.held + len(content) <= _MEMO_BYTES:
        memo[key] = content
        memo.held += len(content)
    return content


def _read_file(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """The one place a file's content is read from disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
            raise _refuse(path, f"not read: {kind}, not a regular file")
        if st.st_size > limit:
            raise _refuse(path, f"not read: {_mb(st.st_size)}, over the {what} of {_mb(limit)}")
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise _refuse(path, f"not read: over the {what} of {_mb(limit)}")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, limit: int | None = None, encoding: str = "utf-8",
              what: str = "max-file-size") -> str:
    """read_bytes, decoded (UnicodeDecodeError on bad bytes, as Path.read_text)."""
    return read_bytes(path, limit, what).decode(encoding)


def collect(paths: Sequence[str], exclude: Sequence[str] = ()) -> list[Target]:
    """The files to read, in order, once each: named files as given, folders walked."""
    targets: list[Target] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in walk(p, exclude):
                targets.append(Target(f, os.path.normpath(str(f)), False))
        elif p.exists() or p.is_symlink():
            targets.append(Target(p, os.path.normpath(raw), True))
        else:
            raise MemlintError(f"{raw}: no such file or directory")
    seen, out = set(), []
    for t in targets:
        key = os.path.abspath(t.path)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out
