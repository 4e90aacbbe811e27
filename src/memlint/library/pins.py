"""Library versions a checkout pins for itself: requirements*.txt, pyproject.toml dependencies,
setup.py install_requires, environment.yml (conda and its pip section). Read as text, never
imported or run.

A pin counts when it fixes the behaviour memlint reads from its tables: an exact `==` (a
`==4.46.*` wildcard reads as `>=4.46,<4.47`), `~=`, or an upper bound (`<`, `<=`). A range reads
as the highest version it allows among the breakpoints of memlint's data for that package (the
bounds of every `versions` range in src/memlint/data/), or its own lower bound when that is higher:
every version between two breakpoints behaves the same in the tables, so that version stands for
the newest the range can install. A lower bound alone (`trl>=0.12`) says nothing the installed
version does not: it is not used.

The nearest folder at or above the script that has any pin file is the checkout's (up to the
repository's top, a `.git`, or four folders up when there is none).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from memlint.library.versions import in_range, specifier, version_key

_PIN_FILES = ("requirements.txt", "pyproject.toml", "poetry.lock", "uv.lock", "setup.py", "environment.yml", "environment.yaml")
_MAX_UP = 4
_MAX_LINE = 2_000      # characters of one requirement line read (a URL with a hash is a few hundred)
_MAX_REQ_DEPTH = 2     # `-r other.txt` inside `-r other.txt`
_NAME_HEAD = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")  # a requirement's name: no backtracking


@dataclass(frozen=True)
class Pin:
    package: str   # normalised: lower case, "-" for "_" and "."
    spec: str      # as written: "==0.12.1", ">=4.46,<4.47"
    version: str   # what memlint reads the tables at
    source: str    # "requirements.txt:3"
    installed: bool = False  # a notebook's own `!pip install` line, not a pin file
    dated: bool = False  # not pinned: the newest release before the script's last commit (library/dated.py)

    def describe(self) -> str:
        if self.dated:
            return (f"{self.package} {self.version} (not pinned: assumed the newest release before {self.source}; "
                    "pin it to be exact)")
        exact = self.spec.replace(" ", "") == f"=={self.version}"
        how = "" if exact else (f", read as {self.version}: the newest behaviour the range allows in memlint's "
                                "version tables")
        by = "installed by the notebook's `pip install` at" if self.installed else "pinned by the checkout's"
        return f"{self.package} {self.version} ({by} {self.source}: {self.package}{self.spec}{how})"


def describe_pins(pins) -> list[str]:
    """How the versions defaults are read at are said: each pin on its own; the versions assumed from one date (not
    pinned) together."""
    out: list[str] = []
    dated: dict[str, list[str]] = {}
    for pin in pins:
        if pin.dated:
            dated.setdefault(pin.source, []).append(f"{pin.package} {pin.version}")
        else:
            out.append(pin.describe())
    for source, names in dated.items():
        one = len(names) == 1
        out.append(f"{', '.join(names)} (not pinned: assumed the newest {'release' if one else 'releases'} before "
                   f"{source}; pin {'it' if one else 'them'} to be exact)")
    return out


from memlint.library.versions import normalise  # noqa: E402  (one spelling of a package name)


def _clauses(spec: str) -> list[tuple[str, str]]:
    """(operator, version) of each clause of a range, as packaging reads it; none for a malformed one."""
    try:
        return [(c.operator, c.version) for c in specifier(spec)]
    except ValueError:
        return []


def _bounded(spec: str) -> bool:
    """Whether a range fixes the behaviour: an exact pin (`==`, `===`, `==4.46.*`), `~=`, or an upper bound."""
    return any(op in ("==", "===", "~=", "<", "<=") for op, _ in _clauses(spec))


@lru_cache(maxsize=None)
def breakpoints(package: str) -> tuple[str, ...]:
    """Every version bound memlint's data names for `package`."""
    from memlint import data

    found: set[str] = set()
    defaults = {"preference.json": "trl", "litgpt.json": "litgpt"}

    def walk(node, pkg):
        if isinstance(node, dict):
            pkg = node.get("package", pkg) if isinstance(node.get("package"), str) else pkg
            for k, v in node.items():
                if k in ("versions", "calls", "works", "since", "until") and isinstance(v, str) and pkg:
                    if normalise(pkg) == package:
                        found.update(b for _, b in _clauses(v) if re.match(r"\d", b))
                elif k == "requires" and isinstance(v, dict):
                    for p, r in v.items():
                        if normalise(p) == package and isinstance(r, str):
                            found.update(b for _, b in _clauses(r) if re.match(r"\d", b))
                else:
                    walk(v, pkg)
        elif isinstance(node, list):
            for v in node:
                walk(v, pkg)

    folder = Path(data.__file__).parent
    for f in sorted(folder.glob("*.json")):
        walk(data.load(f.name), defaults.get(f.name))
    return tuple(sorted(found, key=version_key))


def representative(package: str, spec: str) -> str | None:
    """The version memlint reads a pin as (None: the pin does not bound the version): the exact version
    of an `==` pin, else the highest of memlint's breakpoints for the package and the range's own lower
    bounds that the range allows (packaging's PEP 440 comparison: pre-releases, `+cpu`, `~=`, `==X.*`)."""
    if not _bounded(spec):
        return None
    clauses = _clauses(spec)
    exact = [v for op, v in clauses if op in ("==", "===") and not v.endswith(".*")]
    if exact:
        return exact[0]
    lows = [v.removesuffix(".*") for op, v in clauses if op in (">=", "~=", "==")]
    cands = [b for b in (*breakpoints(package), *lows) if in_range(b, spec)]
    return max(cands, key=version_key) if cands else None  # below every breakpoint, no lower bound: nothing


def _req_lines(text: str) -> list[tuple[int, str]]:
    return [(i, line.split(" #")[0].strip()) for i, line in enumerate(text.splitlines(), 1)]


def _requirement(text: str) -> tuple[str, str] | None:
    """(name, specifier) of a requirement string (`transformers[torch]>=4.46,<4.47 ; python_version > "3.8"`), read
    by packaging (PEP 508), for a package memlint's tables know; None for anything else (options, URLs,
    another package). Lines longer than _MAX_LINE are not read; the name is checked before parsing."""
    if len(text) > _MAX_LINE:
        return None
    head = _NAME_HEAD.match(text)
    if head is None or normalise(head.group(1)) not in _known_packages():
        return None
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(text.strip())
    except InvalidRequirement:
        return None
    if req.url or not req.specifier:
        return None
    return req.name, str(req.specifier)


def _from_requirements(path: Path, rel: str, depth: int = 0) -> list[tuple[str, str, str]]:
    out = []
    text = _read(path)
    if text is None:
        return out
    for i, line in _req_lines(text):
        if line.startswith(("-r", "--requirement")):
            ref = line[2:] if line.startswith("-r") else line[len("--requirement"):]
            ref = ref.lstrip(" =").split()[0] if ref.strip(" =") else ""
            if ref and depth < _MAX_REQ_DEPTH:
                out += _from_requirements(path.parent / ref, os.path.normpath(os.path.join(os.path.dirname(rel), ref)),
                                          depth + 1)
            continue
        req = _requirement(line.split(" --", 1)[0].split("\t--", 1)[0])  # `pkg==1 --hash=sha256:...`
        if req:
            out.append((*req, f"{rel}:{i}"))
    return out


def _quoted_reqs(path: Path, rel: str) -> list[tuple[str, str, str]]:
    """Requirement strings in quotes, line by line (pyproject.toml dependencies, setup.py install_requires)."""
    text = _read(path)
    if text is None:
        return []
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#") or len(line) > _MAX_LINE:
            continue
        for q in re.findall(r"""["']([^"'\n]+)["']""", line):
            req = _requirement(q)
            if req:
                out.append((*req, f"{rel}:{i}"))
    return out


def _conda(item: str) -> str:
    """conda's `name=4.46` (and `name=4.46=build`, `name=4.46.*`) as pip's `name==4.46.*`; anything else as it is."""
    head = _NAME_HEAD.match(item)
    if head is None:
        return item
    rest = item[head.end():].lstrip()
    if not rest.startswith("=") or rest.startswith("=="):
        return item
    version = rest[1:].split("=", 1)[0].strip()
    if not version[:1].isdigit() or not version.isascii() or any(c.isspace() for c in version):
        return item
    return f"{head.group(1)}=={version.removesuffix('.*')}.*"


def _poetry_spec(spec: str) -> str | None:
    """A Poetry constraint as a PEP 440 one: ^0.1.1 -> >=0.1.1,<0.2.0, ~1.2 -> >=1.2,<1.3, 1.2.3 -> ==1.2.3; a PEP 440
    range as it is (packaging checks it); None for anything else."""
    spec = spec.strip()
    if len(spec) > _MAX_LINE:
        return None
    m = re.fullmatch(r"([\^~])\s*(\d+(?:\.\d+)*)", spec, re.A)
    if m:
        nums = [int(x) for x in m.group(2).split(".")]
        if m.group(1) == "^":
            at = next((i for i, n in enumerate(nums) if n), len(nums) - 1)
        else:
            at = min(1, len(nums) - 1)
        upper = nums[:at] + [nums[at] + 1]
        return f">={m.group(2)},<{'.'.join(map(str, upper))}"
    if re.fullmatch(r"\d+(?:\.\d+)*", spec, re.A):
        return f"=={spec}"
    try:
        specifier(spec)
    except ValueError:
        return None
    return spec


def _poetry_lock(path: Path, rel: str) -> list[tuple[str, str, str]]:
    """The exact versions a poetry.lock or uv.lock resolved (`[[package]]` / `name = "torchtune"` / `version = "0.1.1"`)."""
    text = _read(path)
    if text is None:
        return []
    out, name = [], None
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("[["):
            name = None
        m = re.match(r'^name\s*=\s*"([^"]+)"', line)
        if m:
            name = m.group(1)
            continue
        v = re.match(r'^version\s*=\s*"([0-9][^"]*)"', line)
        if v and name:
            out.append((name, f"=={v.group(1)}", f"{rel}:{i}"))
            name = None
    return out


_POETRY_KEY = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*=\s*")
_POETRY_VERSION = re.compile(r"""\bversion\s*=\s*["']([^"']+)["']""")


def _poetry_dep(line: str) -> tuple[str, str] | None:
    """(name, constraint) of `name = "^0.1.1"` / `name = {version = "^0.1.1", ...}`: scanned once, no backtracking."""
    m = _POETRY_KEY.match(line)
    if m is None:
        return None
    rest = line[m.end():]
    if rest[:1] in ("'", '"'):
        end = rest.find(rest[0], 1)
        return (m.group(1), rest[1:end]) if end > 1 else None
    if rest.startswith("{"):
        v = _POETRY_VERSION.search(rest, 0, rest.find("}") if "}" in rest else len(rest))
        return (m.group(1), v.group(1)) if v else None
    return None


def _poetry_reqs(path: Path, rel: str) -> list[tuple[str, str, str]]:
    """`name = "^0.1.1"` / `name = {version = "^0.1.1", ...}` under [tool.poetry.*dependencies] of a pyproject.toml."""
    text = _read(path)
    if text is None:
        return []
    out, inside = [], False
    for i, line in enumerate(text.splitlines(), 1):
        if len(line) > _MAX_LINE:
            continue
        head = re.match(r"^\s*\[([^\]]+)\]", line)
        if head:
            section = head.group(1).strip()
            inside = section.startswith("tool.poetry") and section.endswith("dependencies")
            continue
        dep = _poetry_dep(line) if inside else None
        if dep and dep[0].lower() != "python":
            spec = _poetry_spec(dep[1])
            if spec is not None:
                out.append((dep[0], spec, f"{rel}:{i}"))
    return out


def _from_environment(path: Path, rel: str) -> list[tuple[str, str, str]]:
    text = _read(path)
    if text is None:
        return []
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        item = line.split(" #")[0].strip()
        if not item.startswith("-") or len(item) > _MAX_LINE:
            continue
        item = item[1:].strip().strip("'\"")
        if "::" in item:  # conda-forge::transformers=4.46
            item = item.split("::", 1)[1]
        req = _requirement(_conda(item))
        if req:
            out.append((*req, f"{rel}:{i}"))
    return out


def _read(path: Path) -> str | None:
    """A pin file's text, through the reader every file goes through (files.read_bytes: a regular file
    only, within max-file-size and the checked root): `-r /dev/stdin` or a FIFO named requirements.txt is
    refused, never waited on."""
    from memlint.files import read_bytes

    try:
        return read_bytes(path, min(1_000_000, _limit())).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _limit() -> int:
    from memlint.files import max_file_size

    return max_file_size()


def _pin_folder(start: Path) -> Path | None:
    from memlint.files import is_file

    folder = start.resolve()
    scripted: Path | None = None
    for n, d in enumerate((folder, *folder.parents)):
        if any(is_file(d / name) for name in _PIN_FILES) or any(_requirement_files(d)) or _readme_pins(d, ""):
            return d
        if scripted is None and _script_pins(d, ""):
            scripted = d  # a setup script's installs: the pins only where no folder up to the top has pin files
        if os.path.lexists(d / ".git") or n >= _MAX_UP:
            return scripted
    return scripted


def _requirement_files(folder: Path) -> list[Path]:
    """requirements*.txt (and the singular requirement*.txt some checkouts write) of a folder inside the
    checked root (none outside it)."""
    from memlint.files import allowed

    if not allowed(folder):
        return []
    try:
        return [folder / n for n in sorted(os.listdir(folder)) if n.startswith("requirement") and n.endswith(".txt")]
    except OSError:
        return []


def checkout_pins(script: str | os.PathLike) -> tuple[Pin, ...]:
    """The pins of the checkout `script` is in, for the packages memlint's data knows, first pin
    of a package winning (requirements.txt, then requirements*.txt, pyproject.toml, poetry.lock, setup.py,
    environment.yml, then a Poetry constraint in pyproject.toml, read as the newest its range allows)."""
    p = Path(script)
    if not p.exists():
        return ()
    folder = _pin_folder(p.parent if p.is_file() or not p.is_dir() else p)
    if folder is None:
        return ()
    return _pins_in(folder, _shown_prefix(folder))


def _shown_prefix(folder: Path) -> str:
    try:
        rel = os.path.relpath(folder)
    except ValueError:
        return str(folder)
    return "" if rel == "." else rel


def _pins_in(folder: Path, prefix: str) -> tuple[Pin, ...]:
    from memlint.files import is_file

    def rel(name: str) -> str:
        return os.path.join(prefix, name) if prefix else name

    found: list[tuple[str, str, str]] = []
    reqs = sorted(_requirement_files(folder), key=lambda f: (f.name not in ("requirements.txt", "requirement.txt"), f.name))
    for f in reqs:
        found += _from_requirements(f, rel(f.name))
    for name, reader in (("pyproject.toml", _quoted_reqs), ("poetry.lock", _poetry_lock), ("uv.lock", _poetry_lock),
                         ("setup.py", _quoted_reqs),
                         ("environment.yml", _from_environment), ("environment.yaml", _from_environment),
                         ("pyproject.toml", _poetry_reqs)):
        if is_file(folder / name):
            found += reader(folder / name, rel(name))
    found += _script_pins(folder, prefix)  # a setup script's installs
    found += _readme_pins(folder, rel("README.md"))  # last: the README's install instructions
    known = _known_packages()
    out: dict[str, Pin] = {}
    for name, spec, source in found:
        pkg = normalise(name)
        if pkg not in known or pkg in out:
            continue
        spec = spec.strip().rstrip(",").replace(" ", "")
        version = representative(pkg, spec)
        if version is not None:
            out[pkg] = Pin(pkg, spec, version, source)
    return tuple(out.values())


_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_README = ("README.md", "readme.md", "Readme.md")


def _readme_pins(folder: Path, shown: str) -> list[tuple[str, str, str]]:
    """The versions a folder's README tells the user to install, inside its fenced code blocks: `pip install
    trl==0.16.0 peft==0.14.0` lines and requirement lines (`transformers==4.48.2` alone on a line). Read after every
    pin file (the README is the weakest word on a version)."""
    from memlint.files import is_file

    path = next((folder / n for n in _README if is_file(folder / n)), None)
    text = _read(path) if path is not None else None
    if not text:
        return []
    return _install_lines(text, shown or path.name, fences=True)


_SETUP_SCRIPT = re.compile(r"(?:setup|install|env|environment|prepare|requirements)[\w.-]*\.sh", re.I)


def _script_pins(folder: Path, prefix: str) -> list[tuple[str, str, str]]:
    """The versions a setup shell script of the folder installs (`setup.sh`, `install_env.sh`: `pip install
    transformers==4.34.0` lines), read after the pin files and before the README."""
    from memlint.files import allowed, is_file

    if not allowed(folder):
        return []
    try:
        names = sorted(n for n in os.listdir(folder) if _SETUP_SCRIPT.fullmatch(n))[:8]
    except OSError:
        return []
    out: list[tuple[str, str, str]] = []
    for f in (folder / n for n in names):
        if is_file(f):
            text = _read(f)
            if text:
                out += _install_lines(text, os.path.join(prefix, f.name) if prefix else f.name, fences=False)
    return out


def _install_lines(text: str, shown: str, fences: bool) -> list[tuple[str, str, str]]:
    """The `pip install pkg==x` (and bare requirement) lines of instructions, in order (a later install of a package
    wins); `fences`: only inside a Markdown file's fenced code blocks."""
    out: dict[str, tuple[str, str, str] | None] = {}
    fenced = not fences
    for i, line in enumerate(text.splitlines(), 1):
        if fences and _FENCE.match(line):
            fenced = not fenced
            continue
        body = re.sub(r"^\s*(?:\$|>)\s+", "", line.split(" #")[0]).strip()
        if not fenced or not body or body.startswith("#"):  # a commented-out install runs nothing
            continue
        words = body.split()
        upgrade = False
        if "install" in words[:4] and any(re.fullmatch(r"(?:\S*/)?pip3?|uv|python3?", w) for w in words[:3]):
            opts = [w for w in words[words.index("install") + 1:] if w.startswith("-")]
            upgrade = any(w in ("-U", "--upgrade") or (re.fullmatch(r"-[a-zA-Z]+", w) and "U" in w) for w in opts)
            reqs = [w.strip("'\"") for w in words[words.index("install") + 1:] if not w.startswith("-")]
        else:
            reqs = [body] if re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+\s*(?:==|>=|~=|<=|<|>)[^\s;]+", body) else []
        for w in reqs:
            req = _requirement(w)
            if req is not None:
                out[normalise(req[0])] = (req[0], req[1], f"{shown}:{i}")
            elif upgrade and (head := _NAME_HEAD.match(w)) is not None and head.group(0) == w:
                # `pip install --upgrade trl` after `pip install trl==0.14.0`: the newest release, no pin
                out[normalise(head.group(1))] = None
    return [v for v in out.values() if v is not None]


def install_pins(source: str, shown: str) -> tuple[Pin, ...]:
    """The versions a notebook installs for itself: `!pip install -q trl==0.4.7 peft==0.4.0` and `%pip install`
    lines, as IPython-transformed source holds them (`get_ipython().system('pip install ...')`). They are what
    the notebook runs with, so they come before the checkout's pin files; the last install of a package wins."""
    import ast
    import shlex

    known = _known_packages()
    out: dict[str, Pin] = {}
    for i, line in enumerate(source.splitlines(), 1):
        m = re.match(r"\s*get_ipython\(\)\.(system|run_line_magic)\((.*)\)\s*$", line)
        if not m:
            continue
        try:
            args = ast.literal_eval(f"({m.group(2)},)")
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        text = " ".join(str(a) for a in args) if m.group(1) == "run_line_magic" else str(args[0])
        try:
            words = shlex.split(text.split("&&")[0].split(";")[0])
        except ValueError:
            continue
        if "install" not in words or not any(re.fullmatch(r"(?:\S*/)?pip3?(?:\.\S*)?|uv", w) for w in words[:3]):
            continue
        for w in words[words.index("install") + 1:]:
            req = None if w.startswith("-") else _requirement(w)
            if req is None:
                continue
            pkg = normalise(req[0])
            spec = req[1].strip().rstrip(",").replace(" ", "")
            version = representative(pkg, spec) if pkg in known else None
            if version is not None:
                out.pop(pkg, None)
                out[pkg] = Pin(pkg, spec, version, f"{shown}:{i}", installed=True)
    return tuple(out.values())


def pin_files(pins: tuple[Pin, ...]) -> tuple[str, ...]:
    """The files the pins were read from (a cached result is only as fresh as they are)."""
    return tuple(dict.fromkeys(p.source.rsplit(":", 1)[0] for p in pins))


@lru_cache(maxsize=None)
def _known_packages() -> frozenset[str]:
    """Packages whose behaviour memlint's data tables by version."""
    from memlint import data

    names: set[str] = {"trl", "litgpt"}

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("package"), str):
                names.add(normalise(node["package"]))
            if isinstance(node.get("requires"), dict):
                names.update(normalise(k) for k in node["requires"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    folder = Path(data.__file__).parent
    for f in folder.glob("*.json"):
        walk(data.load(f.name))
    return frozenset(names)
