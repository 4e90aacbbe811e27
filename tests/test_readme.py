"""Every ```console block of the README is what its commands print (scripts/readme_examples.py
regenerates them), so the examples cannot drift from the tool."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("readme_examples", ROOT / "scripts" / "readme_examples.py")
examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(examples)

CASES = [cmd for m in examples.BLOCK.finditer(examples.README.read_text(encoding="utf-8"))
         for cmd in examples.commands(m.group(1))]


def test_the_readme_has_console_examples():
    assert len(CASES) >= 4
    assert any(cmd.startswith("memlint estimate") for cmd, _ in CASES)


@pytest.mark.parametrize("command,shown", CASES, ids=[c for c, _ in CASES])
def test_each_console_example_is_the_commands_output(command, shown):
    got = examples.run(command)
    assert got == shown, f"README example `{command}` drifted; run python scripts/readme_examples.py"
