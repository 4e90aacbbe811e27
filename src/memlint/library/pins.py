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

from memlint.library.versions import _cmp, _vtuple, in_range

_PIN_FILES = ("requirements.txt", "pyproject.toml", "poetry.lock", "setup.py", "environment.yml", "environment.yaml")
_MAX_UP = 4
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
# `trl==0.12.1`, `transformers[torch]>=4.46,<4.47`, `peft ~= 0.13.0 ; python_version > "3.8"`
_REQ = re.compile(rf"^\s*(?P<name>{_NAME})\s*(?:\[[^\]]*\])?\s*(?P<spec>(?:(?:==|~=|>=|<=|!=|<|>|=)\s*[0-9][0-9A-Za-z.*+!-]*\s*,?\s*)+)\s*(?:;.*)?$")


@dataclass(frozen=True)
class Pin:
    package: str   # normalised: lower case, "-" for "_" and "."
    spec: str      # as written: "==0.12.1", ">=4.46,<4.47"
    version: str   # what memlint reads the tables at
    source: str    # "requirements.txt:3"
    installed: bool = False  # a notebook's own `!pip install` line, not a pin file

    def describe(self) -> str:
        exact = self.spec.replace(" ", "") == f"=={self.version}"
        how = "" if exact else (f", read as {self.version}: the newest behaviour the range allows in memlint's "
                                "version tables")
        by = "installed by the notebook's `pip install` at" if self.installed else "pinned by the checkout's"
        return f"{self.package} {self.version} ({by} {self.source}: {self.package}{self.spec}{how})"


from memlint.library.versions import normalise  # noqa: E402  (one spelling of a package name)


def _clauses(spec: str) -> list[tuple[str, str]]:
    out = []
    for clause in spec.split(","):
        m = re.match(r"\s*(==|~=|>=|<=|!=|<|>|=)\s*(\S+)", clause)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def _as_range(spec: str) -> str | None:
    """`spec` as memlint's range syntax, or None when it has no exact pin and no upper bound."""
    parts: list[str] = []
    upper = False
    for op, v in _clauses(spec):
        if op == "!=":
            continue
        if op in ("==", "=") and "*" in v:  # ==4.46.*
            base = [int(x) for x in v.rstrip(".*").split(".") if x.isdigit()]
            if not base:
                return None
            nxt = base[:-1] + [base[-1] + 1]
            parts += [f">={'.'.join(map(str, base))}", f"<{'.'.join(map(str, nxt))}"]
            upper = True
        elif op in ("==", "="):
            parts.append(f"=={v}")
            upper = True
        elif op == "~=":
            base = [int(x) for x in v.split(".") if x.isdigit()]
            if len(base) < 2:
                return None
            nxt = base[:-2] + [base[-2] + 1]
            parts += [f">={v}", f"<{'.'.join(map(str, nxt))}"]
            upper = True
        else:
            parts.append(f"{op}{v}")
            upper = upper or op in ("<", "<=")
    return ",".join(parts) if upper else None


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
    return tuple(sorted(found, key=_vtuple))


def representative(package: str, spec: str) -> str | None:
    """The version memlint reads a pin as (None: the pin does not bound the version)."""
    rng = _as_range(spec)
    if rng is None:
        return None
    exact = [v for op, v in _clauses(rng) if op == "=="]
    if exact:
        return exact[0]
    lows = [v for op, v in _clauses(rng) if op in (">=",)]
    cands = [b for b in (*breakpoints(package), *lows) if in_range(b, rng)]
    if not cands:
        return None  # below every breakpoint with no lower bound: nothing to stand for it
    best = cands[0]
    for c in cands[1:]:
        if _cmp(_vtuple(c), _vtuple(best)) > 0:
            best = c
    return best


def _req_lines(text: str) -> list[tuple[int, str]]:
    return [(i, line.split(" #")[0].strip()) for i, line in enumerate(text.splitlines(), 1)]


def _from_requirements(path: Path, rel: str, depth: int = 0) -> list[tuple[str, str, str]]:
    out = []
    text = _read(path)
    if text is None:
        return out
    for i, line in _req_lines(text):
        m = re.match(r"^(?:-r|--requirement)\s*(\S+)", line)
        if m and depth < 2:
            sub = path.parent / m.group(1)
            out += _from_requirements(sub, os.path.normpath(os.path.join(os.path.dirname(rel), m.group(1))), depth + 1)
            continue
        req = _REQ.match(line)
        if req:
            out.append((req.group("name"), req.group("spec"), f"{rel}:{i}"))
    return out


def _quoted_reqs(path: Path, rel: str) -> list[tuple[str, str, str]]:
    """Requirement strings in quotes, line by line (pyproject.toml dependencies, setup.py install_requires)."""
    text = _read(path)
    if text is None:
        return []
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for q in re.findall(r"""["']([^"'\n]+)["']""", line):
            req = _REQ.match(q)
            if req:
                out.append((req.group("name"), req.group("spec"), f"{rel}:{i}"))
    return out


def _poetry_spec(spec: str) -> str | None:
    """A Poetry constraint as a PEP 440 one: ^0.1.1 -> >=0.1.1,<0.2.0, ~1.2 -> >=1.2,<1.3, 1.2.3 -> ==1.2.3."""
    spec = spec.strip()
    m = re.fullmatch(r"([\^~])\s*(\d+(?:\.\d+)*)", spec)
    if m:
        nums = [int(x) for x in m.group(2).split(".")]
        if m.group(1) == "^":
            at = next((i for i, n in enumerate(nums) if n), len(nums) - 1)
        else:
            at = min(1, len(nums) - 1)
        upper = nums[:at] + [nums[at] + 1]
        return f">={m.group(2)},<{'.'.join(map(str, upper))}"
    if re.fullmatch(r"\d+(?:\.\d+)*", spec):
        return f"=={spec}"
    if re.fullmatch(r"(?:(?:==|~=|>=|<=|!=|<|>)\s*[0-9][0-9A-Za-z.*+!-]*\s*,?\s*)+", spec):
        return spec
    return None


def _poetry_lock(path: Path, rel: str) -> list[tuple[str, str, str]]:
    """The exact versions a poetry.lock resolved (`[[package]]` / `name = "torchtune"` / `version = "0.1.1"`)."""
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


_POETRY_DEP = re.compile(rf"""^\s*({_NAME})\s*=\s*(?:["']([^"']+)["']|\{{[^}}]*\bversion\s*=\s*["']([^"']+)["'])""")


def _poetry_reqs(path: Path, rel: str) -> list[tuple[str, str, str]]:
    """`name = "^0.1.1"` / `name = {version = "^0.1.1", ...}` under [tool.poetry.*dependencies] of a pyproject.toml."""
    text = _read(path)
    if text is None:
        return []
    out, inside = [], False
    for i, line in enumerate(text.splitlines(), 1):
        head = re.match(r"^\s*\[([^\]]+)\]", line)
        if head:
            section = head.group(1).strip()
            inside = section.startswith("tool.poetry") and section.endswith("dependencies")
            continue
        m = _POETRY_DEP.match(line) if inside else None
        if m and m.group(1).lower() != "python":
            spec = _poetry_spec(m.group(2) or m.group(3))
            if spec is not None:
                out.append((m.group(1), spec, f"{rel}:{i}"))
    return out


def _from_environment(path: Path, rel: str) -> list[tuple[str, str, str]]:
    text = _read(path)
    if text is None:
        return []
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*-\s*(.+?)\s*$", line.split(" #")[0])
        if not m:
            continue
        item = m.group(1).strip("'\"")
        if "::" in item:  # conda-forge::transformers=4.46
            item = item.split("::", 1)[1]
        conda = re.match(rf"^({_NAME})\s*=([0-9][^=\s]*?)(?:\.\*)?(?:=\S+)?$", item)
        if conda:  # conda's `name=4.46` (and name=4.46=build) is 4.46.*
            item = f"{conda.group(1)}=={conda.group(2)}.*"
        req = _REQ.match(item)
        if req:
            out.append((req.group("name"), req.group("spec"), f"{rel}:{i}"))
    return out


def _read(path: Path) -> str | None:
    """A pin file's text (library/ sits below memlint.files: a plain bounded read)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(1_000_001)
        return raw.decode("utf-8") if len(raw) <= 1_000_000 else None
    except (OSError, UnicodeDecodeError):
        return None


def _pin_folder(start: Path) -> Path | None:
    folder = start.resolve()
    for n, d in enumerate((folder, *folder.parents)):
        if any((d / name).is_file() for name in _PIN_FILES) or any(d.glob("requirements*.txt")):
            return d
        if os.path.lexists(d / ".git") or n >= _MAX_UP:
            return None
    return None


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
    def rel(name: str) -> str:
        return os.path.join(prefix, name) if prefix else name

    found: list[tuple[str, str, str]] = []
    reqs = sorted(folder.glob("requirements*.txt"), key=lambda f: (f.name != "requirements.txt", f.name))
    for f in reqs:
        found += _from_requirements(f, rel(f.name))
    for name, reader in (("pyproject.toml", _quoted_reqs), ("poetry.lock", _poetry_lock), ("setup.py", _quoted_reqs),
                         ("environment.yml", _from_environment), ("environment.yaml", _from_environment),
                         ("pyproject.toml", _poetry_reqs)):
        if (folder / name).is_file():
            found += reader(folder / name, rel(name))
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
            req = _REQ.match(w)
            if w.startswith("-") or not req:
                continue
            pkg = normalise(req.group("name"))
            spec = req.group("spec").strip().rstrip(",").replace(" ", "")
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
