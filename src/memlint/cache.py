"""The result cache, as Ruff's `.ruff_cache`: a checked file's findings and estimate, kept under
`.memlint_cache/` and reused while nothing they depend on changed.

A result is keyed by the file's content and name, memlint's version and its own source files,
the settings (and the command-line values that act like settings), the installed versions of
the libraries whose defaults memlint reads, and the models in the Hugging Face cache; it stays
valid while every other file it was read from (sibling modules, a DeepSpeed JSON it follows, a
local model's config.json: TrainingPlan.sources) has the content it had. A warm hit imports
neither the extractor nor the estimator: the cached result is plain data that the formats render as
they render a fresh one.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from memlint import data
from memlint.errors import MemlintError
from memlint.plan import Span, TrainingPlan
from memlint.rules.base import Context, FileResult, Finding, Fix, Related

CACHE_DIR = ".memlint_cache"
FORMAT = 3  # the layout of an entry; bump when it changes
MISS = object()  # Cache.get: nothing usable cached (None is a cached "not a training file")


try:  # BLAKE2 without hashlib's OpenSSL import (a warm run's largest import after argparse)
    from _blake2 import blake2b as _hash
except ImportError:  # pragma: no cover - CPython always has it
    from hashlib import blake2b as _hash


def _digest(*parts: Any) -> str:
    h = _hash()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode("utf-8", "surrogateescape"))
        h.update(b"\0")
    return h.hexdigest()


def _package_fingerprint() -> str:
    """memlint's own files, __init__.py (its version) included: a new version, or an edited
    checkout, is a different memlint."""
    stats: list[str] = []

    def walk(folder: str, prefix: str) -> None:
        for e in sorted(os.scandir(folder), key=lambda e: e.name):
            if e.is_dir(follow_symlinks=False):
                if e.name != "__pycache__":
                    walk(e.path, prefix + e.name + "/")
            elif e.name.endswith((".py", ".json")):
                st = e.stat()
                stats.append(f"{prefix}{e.name}:{st.st_size}:{st.st_mtime_ns}")

    walk(os.path.dirname(os.path.abspath(__file__)), "")
    return _digest(*stats)


def _packages() -> list[str]:
    """The libraries whose installed version selects a default memlint reads (data files say which)."""
    names = {"transformers", "trl", "peft", "accelerate", "bitsandbytes", "torch"}
    for cls in data.load("library_defaults.json")["classes"].values():
        names.add(cls["package"])
        for cands in cls["fields"].values():
            names.update(p for c in cands for p in c.get("requires", {}))
    names.update(fw["package"] for fw in data.load("frameworks.json")["frameworks"].values() if fw.get("package"))
    return sorted(names)


def _installed(names: Sequence[str]) -> list[str]:
    """`name==version` of each installed distribution, read off the dist-info folders' names
    (a directory listing per path entry; importlib.metadata would scan them once per name)."""
    want = {n.lower().replace("-", "_") for n in names}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        for item in listing:
            if item.endswith((".dist-info", ".egg-info")):
                stem = item.rsplit(".", 1)[0]
                name, _, version = stem.partition("-")
                key = name.lower().replace("-", "_").replace(".", "_")
                if key in want and key not in found:
                    found[key] = version
    return [f"{k}=={found.get(k, '-')}" for k in sorted(want)]


def _hf_models() -> list[str]:
    """The models in the Hugging Face cache (memlint resolves a model id there before its catalog)."""
    env = os.environ
    hub = Path(env["HF_HUB_CACHE"]) if env.get("HF_HUB_CACHE") else \
        Path(env.get("HF_HOME", Path(env.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface")) / "hub"
    try:
        return sorted(f"{e.name}:{e.stat().st_mtime_ns}" for e in os.scandir(hub) if e.name.startswith("models--"))
    except OSError:
        return []


def _state(path: str) -> str:
    """What a file a result depends on is now: its content's digest, or "absent", "dir", "refused" (not a
    regular file, or over max-file-size: read through files.read_bytes, so a FIFO never blocks) or
    "unreadable". A file looked for and missing, or refused, is recorded as such: it may appear or shrink."""
    from memlint.files import Refused, read_bytes

    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "absent"
    except OSError:
        return "unreadable"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    try:
        return _hash(read_bytes(path)).hexdigest()
    except Refused:
        return "refused"
    except FileNotFoundError:
        return "absent"
    except OSError:
        return "unreadable"


class CacheRefused(MemlintError):
    """A cache directory memlint will not use: a link, not a directory, not the user's, not made by memlint."""


_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by memlint.\n"
_MAX_ENTRY = 64_000_000  # bytes of one cached result (a few kB in practice)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _identity(st: os.stat_result) -> str:
    return f"# memlint cache {st.st_dev}:{st.st_ino}\n"


def check_root(root: Path) -> None:
    """Raise CacheRefused unless `root` is absent or a real directory this user's memlint made: not a link, owned
    by this user, holding the CACHEDIR.TAG memlint wrote for this very directory (its device and inode: a folder a
    checkout ships, or a copy, is not the one memlint made)."""
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CacheRefused(f"{root}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise CacheRefused(f"{root}: {'a link' if stat.S_ISLNK(st.st_mode) else 'not a directory'}, not a cache memlint made")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise CacheRefused(f"{root}: owned by another user, not a cache memlint made")
    tag = _read_small(root, "CACHEDIR.TAG")
    if tag is None or _identity(st) not in tag:
        raise CacheRefused(f"{root}: not a cache memlint made here (memlint clean --cache-dir {root} removes it)")


def _read_small(folder: Path, name: str) -> str | None:
    """A small regular file of `folder`, never through a link."""
    try:
        fd = os.open(folder / name, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, 4096).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _real_dir(path: Path, create: bool) -> bool:
    """Whether `path` is a real directory of this user (made, 0o700, when `create`), never a link."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode) and \
        (not hasattr(os, "geteuid") or st.st_uid == os.geteuid())


def _write_new(folder_fd: int, name: str, data: bytes) -> None:
    """Write `name` in the open folder as a new file (never through a link, never over one)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=folder_fd)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)


class Cache:
    """One run's view of the cache: the directory and the key everything in this run shares."""

    def __init__(self, root: Path, key: str) -> None:
        self.root, self.key = root, key
        self.hits = self.misses = 0
        self.broken = False  # a write failed: the rest of the run is uncached

    @classmethod
    def open(cls, root: str | Path, settings: Any, extra: Sequence[Any] = ()) -> "Cache":
        """`settings` (memlint.config.Settings) and `extra` (command-line values, a launch config's
        content) are part of every key. CacheRefused for a directory memlint did not make."""
        check_root(Path(root))
        key = _digest(FORMAT, _package_fingerprint(), settings.show(), settings.root, *extra,
                      *_installed(_packages()), *_hf_models())
        return cls(Path(root), key)

    @property
    def folder(self) -> Path:
        return self.root / f"v{FORMAT}" / self.key[:16]

    def _name(self, shown: str, explicit: bool, content: bytes) -> str:
        return _digest(shown, explicit, content)[:32] + ".json"

    def _entry(self, shown: str, explicit: bool, content: bytes) -> Path:
        return self.folder / self._name(shown, explicit, content)

    def get(self, shown: str, explicit: bool, content: bytes) -> Any:
        """The cached result (None: a file that trains nothing), or MISS. A malformed entry is a miss."""
        try:
            got = self._get(shown, explicit, content)
        except Exception:  # noqa: BLE001 - a bad entry (hand-edited, truncated, another layout) is a miss
            got = MISS
        if got is MISS:
            self.misses += 1
        else:
            self.hits += 1
        return got

    def _get(self, shown: str, explicit: bool, content: bytes) -> Any:
        folder = self.folder
        if not (_real_dir(self.root, False) and _real_dir(folder.parent, False) and _real_dir(folder, False)):
            return MISS
        text = _read_entry(folder, self._name(shown, explicit, content))
        if text is None:
            return MISS
        doc = json.loads(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("sources"), dict):
            return MISS
        for src, state in doc["sources"].items():
            if _state(src) != state:
                return MISS
        return None if doc["result"] is None else from_json(doc["result"], content)

    def put(self, shown: str, explicit: bool, content: bytes, result: FileResult | None) -> None:
        if self.broken:
            return
        sources = {src: _state(src) for src in (dependencies(result) if result is not None else ())}
        doc = {"sources": sources, "result": to_json(result) if result is not None else None}
        try:
            if not self._ready():
                self.broken = True
                return
            fd = _open_dir(self.folder)
            try:
                name = self._name(shown, explicit, content)
                tmp = f"{name}.{os.getpid()}.tmp"
                try:
                    os.unlink(tmp, dir_fd=fd)
                except FileNotFoundError:
                    pass
                _write_new(fd, tmp, json.dumps(doc, separators=(",", ":")).encode("utf-8"))
                os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # atomic; a link named so is replaced, not followed
            finally:
                os.close(fd)
        except (OSError, ValueError, TypeError, CacheRefused):
            self.broken = True  # a read-only tree still checks, uncached

    def _ready(self) -> bool:
        """The cache's folders exist as real directories memlint made (the root marked as Ruff marks its own)."""
        if not os.path.lexists(self.root):
            parent = self.root.parent
            if not os.path.isdir(parent):
                os.makedirs(parent, exist_ok=True)
            try:
                os.mkdir(self.root, 0o700)
            except FileExistsError:  # a parallel run made it first: its tag says so
                pass
            else:
                _mark(self.root)
        check_root(self.root)
        return _real_dir(self.folder.parent, True) and _real_dir(self.folder, True)


def _read_entry(folder: Path, name: str) -> str | None:
    """A cache entry's text: a regular file, never through a link, at most _MAX_ENTRY bytes."""
    try:
        fd = os.open(folder / name, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_ENTRY:
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8")
    finally:
        os.close(fd)


def _mark(root: Path) -> None:
    """What Ruff writes into its cache (a .gitignore that ignores everything, and CACHEDIR.TAG), written as new
    files in the directory memlint has just made; the tag records that directory's identity."""
    fd = _open_dir(root)
    try:
        _write_new(fd, ".gitignore", b"# Automatically created by memlint.\n*\n")
        _write_new(fd, "CACHEDIR.TAG", (_TAG + _identity(os.fstat(fd))).encode("utf-8"))
    finally:
        os.close(fd)


def dependencies(result: FileResult) -> list[str]:
    """The other files a result depends on: the plan's sources, a local model's config.json, and every path the
    check looked up, found or not (FileResult.looked_up)."""
    out = list(result.plan.sources)
    setup = getattr(result.context, "setup", None)
    model = getattr(setup, "model", None)
    if model is not None and getattr(model, "source", "") == "local":
        p = Path(model.id)
        out.append(str(p / "config.json") if p.is_dir() else str(p))
    out += getattr(result, "looked_up", ())
    return list(dict.fromkeys(out))


def is_cache(folder: str | Path) -> bool:
    """Whether `folder` is a memlint cache: a real directory (not a link) holding memlint's CACHEDIR.TAG."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return False
    tag = _read_small(Path(folder), "CACHEDIR.TAG")
    return tag is not None and tag.startswith(_TAG.splitlines()[0]) and "created by memlint" in tag


def clean(root: str | Path) -> tuple[list[Path], list[Path]]:
    """Remove the cache under `root` and any `.memlint_cache` below it (`memlint clean`): (removed, refused). A
    `.memlint_cache` that is a link or holds no memlint CACHEDIR.TAG is refused, never deleted."""
    removed, refused = [], []
    for folder, dirs, _ in os.walk(root):
        if CACHE_DIR in dirs:
            p = Path(folder) / CACHE_DIR
            if remove_cache(p):
                removed.append(p)
            else:
                refused.append(p)
        dirs[:] = [d for d in dirs if d not in (CACHE_DIR, ".git", ".venv", "node_modules", "__pycache__")]
    return removed, refused


def remove_cache(folder: str | Path) -> bool:
    """Delete `folder` when it is a memlint cache (is_cache); links inside are removed, never followed."""
    import shutil

    if not is_cache(folder):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


# ---- a FileResult as plain data, and back ---------------------------------------------------


def _span(s: Span) -> list:
    return [s.path, s.line, s.col]


def _finding(f: Finding) -> dict:
    fix = None
    if f.fix is not None:
        fix = {"title": f.fix.title, "applicability": f.fix.applicability, "codemod": f.fix.codemod,
               "params": dict(f.fix.params), "edits": [list(e) for e in f.fix.edits]}
    return {"code": f.code, "name": f.name, "message": f.message, "severity": f.severity, "span": _span(f.span),
            "related": [[_span(r.span), r.label] for r in f.related], "fix": fix, "hint": f.hint,
            "data": json.loads(json.dumps(dict(f.data), default=str))}


def _unfinding(d: dict) -> Finding:
    fix = None
    if d["fix"] is not None:
        x = d["fix"]
        fix = Fix(x["title"], x["applicability"], x["codemod"], x["params"], tuple(tuple(e) for e in x["edits"]))
    return Finding(d["code"], d["name"], d["message"], d["severity"], Span(*d["span"]),
                   tuple(Related(Span(*s), label) for s, label in d["related"]), fix, d["hint"], d["data"])


def _estimate(est: Any) -> dict | None:
    if est is None:
        return None
    s = est.setup
    return {"accounting": est.accounting, "peak": est.peak, "peak_phase": est.peak_phase,
            "paged_optimizer": est.paged_optimizer, "reserved_peak": est.reserved_peak,
            "components": [[name, c.bytes] for name, c in est.components.items()],
            "peak_terms": [list(t) for t in getattr(est, "peak_terms", ())],
            "setup": {"model": s.model.id, "batch": s.batch, "seq": s.seq, "gpus": s.gpus, "shard": s.shard,
                      "compute_dtype": s.compute_dtype, "attn": s.attn}}


def to_json(r: FileResult) -> dict:
    ctx = r.context
    planned = getattr(ctx, "planned", None)
    return {"path": r.path, "kind": r.plan.kind, "via": r.plan.via, "sources": list(r.plan.sources),
            "findings": [_finding(f) for f in r.findings], "suppressed": r.suppressed, "cells": r.cells,
            "has_lines": bool(r.lines),
            "raw": [list(p) for p in r.raw_positions],
            "gpu": list(ctx.gpu) if ctx.gpu else None, "model_error": ctx.model_error,
            "min_headroom": ctx.min_headroom,
            "missing": list(getattr(planned, "missing", ()) or ()), "estimate": _estimate(ctx.estimate),
            "conditional": ctx.conditional.text() if ctx.conditional is not None else None,
            "noqa_file": r.noqa_file}


class _Conditional(NamedTuple):
    """A cached conditional answer (estimate.conditional.Conditional): its sentence."""

    sentence: str

    def text(self) -> str:
        return self.sentence


class _Component(NamedTuple):
    bytes: int


class _Setup(NamedTuple):
    model: Any
    batch: int
    seq: int
    gpus: int
    shard: str
    compute_dtype: str
    attn: str


class _Model(NamedTuple):
    id: str


class CachedEstimate(NamedTuple):
    """What the formats read of an Estimate, from the cache: the same figures, no estimator (plain
    NamedTuples: a warm run builds no dataclass it can avoid)."""

    accounting: str
    peak: int
    peak_phase: str
    paged_optimizer: int
    components: Mapping[str, _Component]
    setup: _Setup

    def bytes(self, name: str) -> int:
        return self.components[name].bytes

    reserved_peak: int = 0
    peak_terms: tuple = ()

    @property
    def allocated_peak(self) -> int:
        return self.peak - self.components["overhead"].bytes


class _Planned(NamedTuple):
    setup: Any = None
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def from_json(d: dict, content: bytes | None = None) -> FileResult:
    from memlint.gpu import Gpu

    est = None
    if d["estimate"] is not None:
        e = d["estimate"]
        s = dict(e["setup"])
        setup = _Setup(_Model(s.pop("model")), **s)
        est = CachedEstimate(e["accounting"], e["peak"], e["peak_phase"], e["paged_optimizer"],
                             {name: _Component(b) for name, b in e["components"]}, setup, e["reserved_peak"],
                             tuple(tuple(t) for t in e.get("peak_terms", ())))
    plan = TrainingPlan(d["path"], kind=d["kind"], via=d["via"], sources=tuple(d["sources"]))
    ctx = Context(plan, planned=_Planned(None, tuple(d["missing"])), estimate=est,
                  gpu=Gpu(*d["gpu"]) if d["gpu"] else None, model_error=d["model_error"],
                  min_headroom=d["min_headroom"], cells=d["cells"],
                  conditional=_Conditional(d["conditional"]) if d.get("conditional") else None)
    lines = _lines(content, d) if d["has_lines"] else []
    return FileResult(d["path"], plan, ctx, [_unfinding(f) for f in d["findings"]], lines, d["suppressed"],
                      d["cells"], [tuple(p) for p in d["raw"]], bool(d.get("noqa_file")))


def _lines(content: bytes | None, d: dict) -> list[str]:
    """The file's lines as the check saw them (a notebook's code cells, joined)."""
    if content is None:
        return []
    text = content.decode("utf-8-sig", "replace")
    if d["kind"] == "notebook":
        from memlint.extract.source import notebook_cells

        try:
            return notebook_cells(text, Path(d["path"]))[0]
        except Exception:  # noqa: BLE001 - a cached notebook always parsed; be safe
            return []
    from memlint.files import source_lines

    return source_lines(text)
