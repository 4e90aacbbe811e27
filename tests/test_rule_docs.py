"""Rule pages come from the rule classes, and docs/rules/ matches the registry."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.rules.base import Fix, Rule
from memlint.report.rule_docs import index_markdown, page_name, render_all, rule_markdown

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "rules"


class PadsRule(Rule):
    """
    ## What it does
    Finds tokenizers that pad every batch to `max_length`.

    ## Why is this bad?
    Every step pays for the longest sequence.

    ## Example
    ```python
    tokenizer(text, padding="max_length", max_length=4096)
    ```

    ## Use instead
    ```python
    tokenizer(text, max_length=4096)  # and a collator that pads per batch
    ```

    ## Options
    `min_length`: below this `max_length` the rule stays silent.
    """

    code = "MEM201"
    name = "pads-to-max-length"
    severity = "warning"
    summary = "every batch is padded to max_length"
    options = {"min_length": 1024}
    fix = Fix("pad per batch", "unsafe", "padding_longest")


class NoisyRule(Rule):
    """
    ## What it does
    Something noisy.
    """

    code = "MEM401"
    name = "noisy-thing"
    summary = "a noisy heuristic"
    default_enabled = False
    options = {"threshold": 0.1, "names": ["a", "b"]}


def test_page_has_identity_table_then_the_docstring_sections():
    page = rule_markdown(PadsRule)
    assert page.startswith("# pads-to-max-length (MEM201)\n\nEvery batch is padded to max_length.\n")
    assert ("| MEM201 | warning | sequence, padding, batch and recompute | yes | pad per batch (unsafe) |"
            in page)
    order = [page.index(s) for s in ("## What it does", "## Why is this bad?", "## Example",
                                     "## Use instead", "## Options")]
    assert order == sorted(order)
    assert "    ## What" not in page  # the docstring is dedented
    assert page.rstrip().endswith("- `min_length` (default: `1024`)")


def test_options_section_is_added_when_the_docstring_has_none():
    page = rule_markdown(NoisyRule)
    assert "| MEM401 | warning | noisy heuristics (off by default) | no | none |" in page
    assert '## Options\n\n- `names` (default: `["a", "b"]`)\n- `threshold` (default: `0.1`)\n' in page


def test_index_groups_rules_by_category_and_links_their_pages():
    index = index_markdown([NoisyRule, PadsRule])
    assert index.index("## MEM2xx") < index.index("## MEM4xx")
    assert "## MEM1xx" not in index  # empty categories are left out
    assert "| MEM201 | [pads-to-max-length](MEM201-pads-to-max-length.md) |" in index
    assert "| MEM401 | [noisy-thing](MEM401-noisy-thing.md) | a noisy heuristic | warning | off | no |" in index
    assert set(render_all([PadsRule, NoisyRule])) == {page_name(PadsRule), page_name(NoisyRule), "index.md"}


@pytest.mark.skipif(importlib.util.find_spec("memlint.rules.registry") is None,
                    reason="the rule registry has not landed yet")
def test_docs_rules_is_up_to_date_with_the_registry():
    from memlint.rules.registry import all_rules

    pages = render_all(all_rules())
    present = {p.name for p in DOCS.glob("*.md")} if DOCS.exists() else set()
    assert present == set(pages), "run: python scripts/gen_rule_docs.py"
    for name, text in pages.items():
        assert (DOCS / name).read_text() == text, f"{name} is stale; run: python scripts/gen_rule_docs.py"


@pytest.mark.skipif(importlib.util.find_spec("memlint.rules.registry") is None,
                    reason="the rule registry has not landed yet")
def test_generator_writes_then_checks_clean(tmp_path):
    script = str(ROOT / "scripts" / "gen_rule_docs.py")
    (tmp_path / "MEM999-gone.md").write_text("a rule that no longer exists\n")
    run = lambda *a: subprocess.run([sys.executable, script, "--out", str(tmp_path), *a],  # noqa: E731
                                    capture_output=True, text=True)
    assert run("--check").returncode == 1
    assert run().returncode == 0
    assert not (tmp_path / "MEM999-gone.md").exists()
    assert run("--check").returncode == 0
    assert (tmp_path / "index.md").exists()
