"""Config files a script reads at run time (`yaml.safe_load(open("config.yaml"))`, `json.load`,
`OmegaConf.load`, `HfArgumentParser.parse_json_file`), read statically into abstract values.

The file is found the way the script would find it (relative to the working directory, which is
the launch folder or the checkout, else beside the script), read with the safe loader that keeps
each key's line, and every value becomes a Const pointing at its key. OmegaConf/hydra-style
`${a.b}` interpolations are resolved within the file; `${oc.env:X,default}` takes the default.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from memlint.extract.values import Alts, Const, Dict, Seq, Unknown
from memlint.vocab import ascii_digits

MAX_CONFIG_BYTES = 2_000_000
_WHOLE = re.compile(r"^\$\{([^{}]+)\}$")
_PART = re.compile(r"\$\{([^{}]+)\}")


def candidates(it: Any, ref: str) -> list[Path]:
    """Where a relative path written in the script is looked for, in order."""
    p = Path(ref).expanduser()
    if p.is_absolute():
        return [p, *_checkout_copies(it, p)]
    out = []
    launch = getattr(it, "launch", None)
    if launch is not None and launch.cwd:
        out.append(Path.cwd() / launch.cwd / p)
    out += [Path.cwd() / p, it.dir / p]
    origin = getattr(launch, "origin", None)
    if launch is not None and origin and origin != "the command line":
        # the launcher's own folder (`cd "$(dirname "$0")"` before the command, or a path written for it)
        out.append(Path.cwd() / Path(origin).parent / (launch.cwd or "") / p)
    roots = it.import_roots() if hasattr(it, "import_roots") else []
    out += [r / p for r in roots]
    return list(dict.fromkeys(out))


def _checkout_copies(it: Any, p: Path) -> list[Path]:
    """An absolute path on the author's machine (`/home/alice/proj/configs/x.yaml`): the same relative file in
    the checkout, its longest tail first (configs/x.yaml under the launch folder or a folder up to the checkout's
    root, then x.yaml)."""
    launch = getattr(it, "launch", None)
    roots = ([Path.cwd() / launch.cwd] if launch is not None and launch.cwd else []) + [Path.cwd(), it.dir]
    roots += it.import_roots() if hasattr(it, "import_roots") else []
    parts = p.parts[1:]
    return [r.joinpath(*parts[i:]) for i in range(1, len(parts)) for r in dict.fromkeys(roots)]


def find(it: Any, ref: str) -> Path | None:
    """The first candidate that is a file inside the checked root (files.is_file never looks outside it)."""
    from memlint.files import is_file, written_text

    for cand in candidates(it, ref):
        if written_text(cand) is not None or is_file(cand):
            return cand
    return None


def outside(it: Any, ref: str) -> Path | None:
    """The first candidate outside the checked root (what a "not found" really was), if any."""
    from memlint.files import allowed

    return next((c for c in candidates(it, ref) if "\0" not in str(c) and not allowed(c)), None)


def read(it: Any, path_value: Any, how: str) -> Any:
    """The abstract value of the data file `path_value` names (a Const string), or an Unknown saying why. A path that
    is one of several (a config's value or the option's default None): the file each named path holds, None left out
    (opening None fails: that path never reaches here)."""
    if isinstance(path_value, Alts):
        paths = [o for o in path_value.options if not (isinstance(o, Const) and o.value is None)]
        if 1 <= len(paths) <= 4:
            reads = [read(it, p, how) for p in paths]
            return reads[0] if len(reads) == 1 else Alts(tuple(reads))
    if not (isinstance(path_value, Const) and isinstance(path_value.value, str)):
        why = path_value.why if isinstance(path_value, Unknown) and path_value.why else "a path memlint cannot read"
        return Unknown(f"a config file read at run time ({why})")
    ref = path_value.value
    found = find(it, ref)
    if found is None:
        away = outside(it, ref)
        if away is not None:  # `../outside/token`, `~/.cache/x`, `/etc/...`: never read, never shown
            from memlint.files import refuse_outside

            refuse_outside(away)
            return Unknown(f"{ref}: a config file outside the checked root; not read")
        return Unknown(f"{ref}: a config file read at run time, not found in the checkout")
    from memlint.files import read_text, written_text

    written = written_text(found)
    try:
        if written is not None:  # the launching notebook wrote it before the command (its text, not the disk's)
            text = written[0]
            it.facts.note(f"{ref}: read as the notebook writes it at {written[1]} (not the checkout's file)")
        elif found.stat().st_size > MAX_CONFIG_BYTES:
            return Unknown(f"{ref}: larger than {MAX_CONFIG_BYTES // 1_000_000} MB; not read")
        else:
            text = read_text(found, encoding="utf-8-sig")  # a regular file within max-file-size
    except (OSError, UnicodeDecodeError):
        return Unknown(f"{ref}: unreadable")
    from memlint.extract.configs.document import load_text

    shown = _shown(it, found)
    doc = load_text(text, shown, is_json=found.suffix.lower() == ".json")
    if doc.data is None and not doc.ok and doc.diagnostics:
        return Unknown(f"{ref}: {doc.diagnostics[0].message}")
    origin = ""
    if Path(ref).expanduser().is_absolute() and found != Path(ref).expanduser():
        # the script names a file on its author's machine: the checkout's file at the same relative path
        it.facts.note(f"{ref} is a path on the script author's machine; memlint read the checkout's {shown} in its place")
        origin = f", the checkout's copy of {ref}"
    it.facts.note(f"values read from {shown} ({how}) as the script would read it at run time")
    record = getattr(it, "read_files", None)
    if record is not None:
        record.append(str(found))
    return convert(doc.data, doc, shown, (), doc.data, origin)


def _shown(it: Any, path: Path) -> str:
    import os

    try:
        return os.path.relpath(path, Path.cwd())
    except ValueError:
        return str(path)


def convert(data: Any, doc: Any, shown: str, path: tuple, root: Any, origin: str = "") -> Any:
    """Plain data -> Dict / Seq / Const, each Const at its key's line in `shown`."""
    if isinstance(data, dict):
        return Dict({k: convert(v, doc, shown, path + (k,), root, origin) for k, v in data.items()})
    if isinstance(data, list):
        return Seq([convert(v, doc, shown, path + (i,), root, origin) for i, v in enumerate(data)])
    span = doc.span(*path) if path else None
    if isinstance(data, str) and "${" in data:
        data = interpolate(data, root)
        if isinstance(data, Unknown):
            return data
    key = ".".join(str(p) for p in path)
    return Const(data, "literal", span.line if span else None, (f"{key}: {data!r} ({shown}{origin})",), shown)


def lookup(root: Any, dotted: str) -> Any:
    cur = root
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and ascii_digits(part) and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return MISSING
    return cur


MISSING = object()


def interpolate(text: str, root: Any, depth: int = 0) -> Any:
    """OmegaConf's `${a.b}` (and `${oc.env:X,default}`) within one document."""
    if depth > 8:
        return Unknown(f"{text}: interpolation too deep")
    m = _WHOLE.match(text)
    if m:
        v = _resolve(m.group(1), root)
        if v is MISSING:
            return Unknown(f"{text}: interpolation memlint cannot resolve")
        return interpolate(v, root, depth + 1) if isinstance(v, str) and "${" in v else v

    def sub(mm: re.Match) -> str:
        v = _resolve(mm.group(1), root)
        if v is MISSING:
            raise KeyError(mm.group(1))
        return str(v)

    try:
        return _PART.sub(sub, text)
    except KeyError:
        return Unknown(f"{text}: interpolation memlint cannot resolve")


def _resolve(expr: str, root: Any) -> Any:
    expr = expr.strip()
    if expr.startswith("oc.env:"):
        parts = expr[len("oc.env:"):].split(",", 1)
        return parts[1].strip() if len(parts) > 1 else MISSING
    if ":" in expr:  # another resolver (oc.select, eval, ...)
        return MISSING
    return lookup(root, expr)
