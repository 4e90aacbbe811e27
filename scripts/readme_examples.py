"""The README's ```console blocks are real output: every `$ memlint …` line in one is run from the
repository root and what it prints (stdout, then stderr) follows it, so an example cannot drift.

    python scripts/readme_examples.py           # rewrite the blocks from what the commands print now
    python scripts/readme_examples.py --check   # exit 1 when a block differs (tests/test_readme.py does this)

Commands run with COLUMNS=100, no colour and no cache, as `memlint` from this checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def commands(block: str) -> list[tuple[str, str]]:
    """(command, the output the block shows for it) for each `$ ` line of a console block."""
    out: list[tuple[str, str]] = []
    for line in block.splitlines(keepends=True):
        if line.startswith("$ "):
            out.append((line[2:].rstrip("\n"), ""))
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + line)
    return out


def run(command: str) -> str:
    """What `command` (a `memlint …` line) prints: stdout, then stderr."""
    argv = shlex.split(command)
    if argv[0] != "memlint":
        raise ValueError(f"README console blocks run memlint only, not {argv[0]!r}")
    env = dict(os.environ, COLUMNS="100", NO_COLOR="1", MEMLINT_NO_CACHE="1", PYTHONPATH=str(ROOT / "src"))
    env.pop("FORCE_COLOR", None)
    proc = subprocess.run([sys.executable, "-m", "memlint", *argv[1:]], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)
    return proc.stdout + proc.stderr


def regenerate(text: str) -> str:
    def block(m: re.Match) -> str:
        body = "".join(f"$ {cmd}\n{run(cmd)}" for cmd, _ in commands(m.group(1)))
        return f"```console\n{body}```"

    return BLOCK.sub(block, text)


def main() -> int:
    text = README.read_text(encoding="utf-8")
    new = regenerate(text)
    if "--check" in sys.argv[1:]:
        if new != text:
            print("README.md: a console block differs from its command's output; run python scripts/readme_examples.py")
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
