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
from typing import Any, Iterable, Iterator, Sequence

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
    root: str | None = None  # the checked root its reads stay in (checkout_root of the path named); None: its own
    note: str | None = None  # refused before it was read (a launcher past its budget): this MEM001 note
    named_launcher: bool = False  # run by a launcher the user named (`bash run.sh`, `make train`, run.sh itself):
                                  # kept with a note when it shows no trainer, unless another of its commands trains
    written_by: Path | None = None  # a file a notebook writes (`%%writefile train.py`): its text is that cell's,
    text: str | None = None         # read from the notebook `written_by`, not from the disk
    writes: dict | None = None      # the config files the launching notebook wrote before the command (absolute path
                                    # -> (text, where)): there for the script's run-time reads


# ---- .gitignore, read by pathspec (gitignore style) ------------------------------------------
#
# Each .gitignore (and info/exclude) is one pathspec.GitIgnoreSpec; the deepest level with a matching
# pattern decides, and within it the last matching pattern (pathspec's own rule). pathspec's regexes
# backtrack on a pattern with many `*` in one segment (`a*a*a*…b` against a 40-character name ran past
# 60 s), so every star of a segment but the last is made atomic and lazy (`(?>[^/]*?X)`), as CPython's
# fnmatch does: the leftmost match of each fixed-width piece is the one a match needs, so the language
# matched is the same and a match attempt is linear in the name.

_STAR = "[^/]*"
# what pathspec writes between segment globs (and around them); anything else leaves a regex as it is
_STRUCTURE = ("(?:(?P<ps_d>/)|$)", "(?P<ps_d>/)", "(?:.+/)?", "(?:/.+)?", "^", "/", "$")
_POSIX_CLASSES = {"alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "blank": " \t", "digit": "0-9", "lower": "a-z",
                  "upper": "A-Z", "xdigit": "0-9A-Fa-f", "space": " \t\n\r\f\v", "punct": "!-/:-@\\[-`{-~",
                  "print": " -~", "graph": "!-~", "cntrl": "\x00-\x1f\x7f"}
_POSIX = re.compile(r"\[:([a-z]+):\]")
_STARS = re.compile(r"(?<!\\)\*{3,}")


def _tokens(rx: str) -> list[tuple[str, str]] | None:
    """pathspec's regex as (kind, text) tokens: "star", "atom" (one character wide) or "cut" (between
    segments); None for anything it does not write."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(rx)
    while i < n:
        cut = next((t for t in _STRUCTURE if rx.startswith(t, i)), None)
        if rx.startswith(_STAR, i):
            out.append(("star", _STAR))
            i += len(_STAR)
        elif rx.startswith("[^/]", i) and not rx.startswith("[^/]+", i):
            out.append(("atom", "[^/]"))  # `?`
            i += 4
        elif rx.startswith("[^/]+", i):
            out.append(("cut", "[^/]+"))  # a whole-segment `*`: a segment of its own
            i += 5
        elif cut is not None:
            out.append(("cut", cut))
            i += len(cut)
        elif rx[i] == "\\" and i + 1 < n:
            out.append(("atom", rx[i:i + 2]))
            i += 2
        elif rx[i] == "[":
            j = i + 1
            j += rx[j:j + 1] == "^"
            j += rx[j:j + 1] == "]"
            k = rx.find("]", j)
            if k < 0:
                return None
            atom = rx[i:k + 1]
            out.append(("atom", atom[:-1] + "/]" if atom.startswith("[^") else atom))  # `[!a]` never matches `/`
            i = k + 1
        elif rx[i] in "()|?*+{}.":
            return None
        else:
            out.append(("atom", rx[i]))
            i += 1
    return out


def _linear(rx: str) -> str:
    """`rx` with every `*` of a segment but its last atomic and lazy (see above); `rx` itself when pathspec
    wrote something else."""
    toks = _tokens(rx)
    if toks is None:
        return rx
    out: list[str] = []
    run: list[tuple[str, str]] = []

    def flush() -> None:
        stars = [i for i, (kind, _) in enumerate(run) if kind == "star"]
        if len(stars) < 2:
            out.extend(t for _, t in run)
        else:
            out.extend(t for _, t in run[:stars[0]])
            for a, b in zip(stars, stars[1:]):  # every star but the last: leftmost, committed
                out.append("(?>[^/]*?" + "".join(t for _, t in run[a + 1:b]) + ")")
            out.extend(t for _, t in run[stars[-1]:])
        run.clear()

    for kind, text in toks:
        if kind == "cut":
            flush()
            out.append(text)
        else:
            run.append((kind, text))
    flush()
    return "".join(out)


def _as_git_reads(line: str) -> str:
    """Where pathspec reads a line otherwise than git: `[[:digit:]]` (git's bracket classes) as `[0-9]`, and
    `dir/**/` (the folders inside dir, not dir itself) as `dir/*/`, `***` as `**`, which ignores the same folders in a walk
    that never enters an ignored one."""
    if "[:" in line:
        line = _POSIX.sub(lambda m: _POSIX_CLASSES.get(m.group(1), m.group(0)), line)
    if "***" in line:  # git reads any run of two or more stars as `**`
        line = _STARS.sub("**", line)
    body = line.rstrip(" ")
    if body.endswith("/**/") and body.strip("!/*"):
        line = body[:-4] + "/*/"
    return line


def parse_gitignore(text: str) -> Any:
    """One .gitignore (or info/exclude) file as a pathspec.GitIgnoreSpec, None when it has no pattern."""
    lines = [_as_git_reads(ln.removesuffix("\r")) for ln in text.removeprefix("\ufeff").split("\n")
             if ln.strip() and not ln.startswith("#")]
    if not lines:
        return None
    from pathspec import GitIgnoreSpec
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

    patterns = []
    for line in lines:
        try:
            pat = GitIgnoreSpecPattern(line)
        except (ValueError, re.error):  # a pattern git never matches (a trailing backslash)
            continue
        if pat.regex is not None:
            try:
                pat.regex = re.compile(_linear(pat.regex.pattern))
            except re.error:
                pass
        patterns.append(pat)
    return GitIgnoreSpec(patterns, backend="simple") if patterns else None


# One level of ignore rules: the folder (relative to the repository, "" at its top) and its spec.
Level = tuple[str, Any]


def ignored(rel: str, is_dir: bool, levels: Sequence[Level]) -> bool:
    """Whether git ignores `rel` (a path from the repository's top, `/`-separated) by these
    levels, outermost first: the deepest level with a matching pattern decides, and within a
    file the last matching pattern. Leading folders are the walk's business (it does not enter
    an ignored one, so nothing below it is re-included, as in git)."""
    for base, spec in reversed(levels):
        if spec is None or (base and not rel.startswith(base + "/")):
            continue
        sub = rel[len(base) + 1:] if base else rel
        got = spec.check_file(sub + "/" if is_dir else sub)
        if got.include is not None:
            return got.include
    return False


def _read_ignore_file(path: Path) -> Any:
    try:
        return parse_gitignore(read_bytes(path, 1 << 20, what="ignore-file budget").decode("utf-8", "replace"))
    except OSError:  # absent, not a regular file, over 1 MB: no patterns
        return None


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


# ---- the checked root: nothing outside it is read ---------------------------------------------
#
# A script under review names files (`yaml.safe_load(open("../../token"))`, `exec(open(p).read())`, a Hydra
# `config_path`, a launcher's `python ../x.py`): each is read only when it lies in the checked root, the
# repository the path named on the command line is in, else the folder named (the working directory when
# that holds it). A file outside is refused like a FIFO, so its content never reaches a report; the user
# opts in with `--read-outside PATH`, and the paths the user names (a file, `--launch-config`) are read.

OUTSIDE = "not read: outside the checked root"
_guards: list[tuple[str, ...]] = []   # the real paths reads are kept in, innermost last
_named: list[str] = []                # paths the user named or let in (--read-outside): always readable
_looked: list[set[str]] = []          # lookups() recorders: every path probed or read


def _real(path: str | os.PathLike) -> str:
    return os.path.realpath(os.path.abspath(path))


def _too_wide() -> set[str]:
    """Folders that are never a checkout's root: /, the home folder and the temporary folder and what holds them."""
    import tempfile

    out = {os.path.sep}
    for base in (os.path.expanduser("~"), tempfile.gettempdir()):
        d = _real(base)
        while True:
            out.add(d)
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
    return out


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def checkout_root(named: str | os.PathLike) -> str:
    """The checked root of a path the user named: the top of the git repository it is in, else the working
    directory when it holds the path, else the folder named (a file's own folder); never /, the home folder or
    the temporary folder (a shared /tmp is no checkout)."""
    start = _real(named)
    if not os.path.isdir(start):
        start = os.path.dirname(start)
    wide = _too_wide()
    top = _find_top(Path(start))
    if top is not None and _real(top) not in wide:
        return _real(top)
    cwd = _real(os.getcwd())
    base = cwd if cwd not in wide and _under(start, cwd) else start
    return _marked_top(base, wide)


# What the top of a project holds: a checkout without its .git (a release archive, `git archive`, a zip from
# GitHub) is still one project, from the README or pyproject beside which its subfolders' commands run.
_PROJECT_MARKERS = ("README.md", "README.rst", "README", "LICENSE", "LICENSE.md", "LICENSE.txt", "pyproject.toml",
                    "setup.py", "setup.cfg", ".gitignore")
MARKER_LEVELS = 3  # folders above the working directory (or the folder named) looked at for them


def _marked_top(base: str, wide: set[str]) -> str:
    """The highest of `base` and the MARKER_LEVELS folders above it that holds a project marker, never a folder
    that is never a root; `base` itself when none does (`cd math-rm && torchrun ... --deepspeed ../ds/z3.json` in
    an archive of a repository reads ../ds from the repository's top, where its README is)."""
    best, d = base, base
    for _ in range(MARKER_LEVELS):
        parent = os.path.dirname(d)
        if parent == d or parent in wide:
            break
        d = parent
        if any(os.path.lexists(os.path.join(d, m)) for m in _PROJECT_MARKERS):
            best = d
    return best


def target_root(target: "Target") -> str:
    """The checked root a target's reads stay in."""
    return target.root if target.root is not None else checkout_root(target.path)


def allow(paths: Iterable[str | os.PathLike]) -> None:
    """Paths the user named (files and folders on the command line, --launch-config, --read-outside): read
    wherever they are."""
    for p in paths:
        if p and p != "-":
            _named.append(_real(p))


def reset_allowed() -> None:
    _named.clear()


@contextmanager
def checked_root(*roots: str | os.PathLike | None) -> Iterator[None]:
    """Inside the block, files outside `roots` (and the paths the user named) are refused."""
    _guards.append(tuple(_real(r) for r in roots if r is not None))
    try:
        yield
    finally:
        _guards.pop()


@contextmanager
def unguarded() -> Iterator[None]:
    """memlint's own look-ups (the Hugging Face cache, an installed library's files): not the checkout's."""
    _guards.append(())
    try:
        yield
    finally:
        _guards.pop()


def guarded() -> bool:
    return bool(_guards) and bool(_guards[-1])


def allowed(path: str | os.PathLike) -> bool:
    """Whether memlint may read `path` now: inside the checked root, or named by the user, or no root in force."""
    if not _guards or not _guards[-1]:
        return True
    try:
        real = _real(path)
    except (OSError, ValueError):
        return False
    return any(_under(real, r) for r in _guards[-1]) or any(_under(real, n) for n in _named)


def root_in_force() -> str | None:
    return _guards[-1][0] if _guards and _guards[-1] else None


def outside(path: str | os.PathLike) -> str:
    """The few words a refused outside path gets (with how to opt in)."""
    root = root_in_force()
    try:
        folder = os.path.dirname(_real(path)) or str(path)
    except (OSError, ValueError):  # a NUL in the name
        return OUTSIDE
    return f"{OUTSIDE} {root} (--read-outside {folder} reads it)" if root else OUTSIDE


def refuse_outside(path: str | os.PathLike) -> "Refused":
    """Refused (recorded as a refusal) for a path outside the checked root."""
    return _refuse(path, outside(path))


@contextmanager
def lookups() -> Iterator[set[str]]:
    """Every path probed (is_file, is_dir) or read inside the block, found or not: what a cached result
    depends on (a file looked for and missing, or refused, may appear or shrink later)."""
    got: set[str] = set()
    _looked.append(got)
    try:
        yield got
    finally:
        _looked.remove(got)


def _note_lookup(path: str | os.PathLike) -> None:
    if _looked:
        key = os.path.abspath(path)
        for rec in _looked:
            rec.add(key)


def is_file(path: str | os.PathLike) -> bool:
    """Path.is_file for a path a checkout names: False outside the checked root (never even looked at), and
    recorded for the cache either way."""
    if not allowed(path):
        return False
    _note_lookup(path)
    try:
        return os.path.isfile(path)
    except (OSError, ValueError):
        return False


def is_dir(path: str | os.PathLike) -> bool:
    """Path.is_dir, as is_file."""
    if not allowed(path):
        return False
    _note_lookup(path)
    try:
        return os.path.isdir(path)
    except (OSError, ValueError):
        return False


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


_written: list[dict[str, tuple[str, str]]] = []  # files a notebook writes before the command it runs


@contextmanager
def written_overlay(written: dict[str, tuple[str, str]] | None) -> Iterator[None]:
    """Inside the block, the files a notebook wrote before running a script (`f.write(yaml_text)` to cfg.yaml, then
    `!python train.py --config cfg.yaml`) are there for the script: absolute path -> (text, where it was written)."""
    _written.append(dict(written or {}))
    try:
        yield
    finally:
        _written.pop()


def written_text(path: str | os.PathLike) -> tuple[str, str] | None:
    """(text, where it was written) of a file a notebook wrote (written_overlay), else None."""
    return _written[-1].get(os.path.abspath(path)) if _written else None


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
    name = os.fspath(path)
    if ("\0" if isinstance(name, str) else b"\0") in name:
        raise _refuse(path, "not read: no file name (a NUL byte in it)")
    _note_lookup(path)
    if not allowed(path):
        raise refuse_outside(path)
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
            root = checkout_root(p)
            for f in walk(p, exclude):
                targets.append(Target(f, os.path.normpath(str(f)), False, root=root))
        elif p.exists() or p.is_symlink():
            targets.append(Target(p, os.path.normpath(raw), True, root=checkout_root(p)))
        else:
            raise MemlintError(f"{raw}: no such file or directory")
    seen, out = set(), []
    for t in targets:
        key = os.path.abspath(t.path)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out
