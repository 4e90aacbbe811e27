"""Write docs/rules/: one page per registered rule, from its docstring, and an index.

    python scripts/gen_rule_docs.py           # regenerate
    python scripts/gen_rule_docs.py --check   # exit 1 if docs/rules/ is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from memlint.report.rule_docs import render_all  # noqa: E402
from memlint.rules.registry import all_rules  # noqa: E402

DOCS = ROOT / "docs" / "rules"


def stale(docs: Path, pages: dict[str, str]) -> list[str]:
    """Files that differ from what the registry generates, or that no rule owns any more."""
    out = [name for name, text in pages.items()
           if not (docs / name).exists() or (docs / name).read_text() != text]
    if docs.exists():
        out += sorted(p.name for p in docs.glob("*.md") if p.name not in pages)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report whether docs/rules/ is up to date")
    ap.add_argument("--out", type=Path, default=DOCS, help="folder to write (default: docs/rules)")
    args = ap.parse_args(argv)
    pages = render_all(all_rules())
    changed = stale(args.out, pages)
    if args.check:
        for name in changed:
            print(f"out of date: {args.out / name}", file=sys.stderr)
        return 1 if changed else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in changed:
        path = args.out / name
        if name in pages:
            path.write_text(pages[name])
        else:
            path.unlink()
    print(f"{len(pages)} files in {args.out}, {len(changed)} changed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
