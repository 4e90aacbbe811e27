"""Move the test constraints forward: install the newest releases, run the suite, rewrite constraints.txt.

    python scripts/update_constraints.py            # a fresh venv in a temporary folder, then pytest
    python scripts/update_constraints.py --keep DIR # keep the venv in DIR (reuse it to bisect a failure)
    python scripts/update_constraints.py --dry-run  # print what would change, write nothing

The README's test command installs with `-c constraints.txt`, so a new release of transformers (or of
anything else the tests import) cannot turn a fresh clone red overnight. This script is how the file moves:
it installs `.[test]` with no constraints (whatever the index serves today; torch stays at the version the
file pins, the CPU wheel), runs the same pytest command `.ci/run` runs, and only when the suite passes writes
the exact versions it ran with. A red run leaves the file alone and prints the failures. Run it by hand or
from a scheduled job (.github/workflows/constraints.yml).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE = ROOT / "constraints.txt"
PROJECT = "torch-memlint"


def pinned(text: str) -> dict[str, str]:
    """name (normalised) -> version of each `name==version` line."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if m:
            out[normalise(m.group(1))] = m.group(2)
    return out


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def render(freeze: str, torch: str) -> str:
    """constraints.txt from `pip freeze` output: the project itself left out, torch without its local label
    (`2.13.0` admits `2.13.0+cpu` from PyTorch's CPU index and the PyPI build alike)."""
    rows = {}
    for line in freeze.splitlines():
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line.strip())
        if not m or normalise(m.group(1)) == normalise(PROJECT):
            continue
        name, version = m.group(1), m.group(2)
        rows[normalise(name)] = f"{name}=={version.split('+', 1)[0] if normalise(name) == 'torch' else version}"
    rows["torch"] = f"torch=={torch}"
    head = (f"# The versions the test suite last passed with (scripts/update_constraints.py, "
            f"{datetime.date.today().isoformat()}, Python {platform.python_version()}).\n"
            "# Used by the README's test command and .ci/run: pip install -c constraints.txt -e \".[test]\" ...\n"
            "# Move it forward with: python scripts/update_constraints.py\n")
    return head + "".join(rows[k] + "\n" for k in sorted(rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", metavar="DIR", help="create (or reuse) the venv in DIR and keep it")
    ap.add_argument("--dry-run", action="store_true", help="print the changes, leave constraints.txt as it is")
    ap.add_argument("--pytest-args", default="", help="extra arguments for pytest (e.g. '-x')")
    args = ap.parse_args()
    old = pinned(FILE.read_text(encoding="utf-8")) if FILE.exists() else {}
    torch = old.get("torch", "2.13.0")
    tmp = None
    venv = Path(args.keep) if args.keep else Path(tmp := tempfile.mkdtemp(prefix="memlint-constraints-"))
    try:
        py = venv / "bin" / "python"
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--upgrade", "-e", f"{ROOT}[test]",
                        f"torch=={torch}"], check=True, cwd=ROOT)
        freeze = subprocess.run([str(py), "-m", "pip", "freeze", "--exclude-editable"], check=True,
                                capture_output=True, text=True).stdout
        new_text = render(freeze, torch)
        new = pinned(new_text)
        changes = [f"  {k}: {old.get(k, '-')} -> {new.get(k, '-')}" for k in sorted(set(old) | set(new))
                   if old.get(k) != new.get(k)]
        print("changes:" if changes else "no version changed", *changes, sep="\n")
        tests = subprocess.run([str(py), "-m", "pytest", *args.pytest_args.split()], cwd=ROOT)
        if tests.returncode != 0:
            print(f"the suite failed with the newest versions (exit {tests.returncode}): constraints.txt unchanged")
            return 1
        if args.dry_run:
            print("the suite passed; --dry-run: constraints.txt unchanged")
        else:
            FILE.write_text(new_text, encoding="utf-8")
            print(f"the suite passed; wrote {FILE.relative_to(ROOT)}")
        return 0
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
