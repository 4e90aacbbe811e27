"""Write docs/plan.md: the plan's fields from their declarations (src/memlint/plan/fields.py).

    python scripts/gen_plan_docs.py          # rewrite docs/plan.md
    python scripts/gen_plan_docs.py --check  # exit 1 when docs/plan.md is stale (tests/test_plan_fields.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
OUT = ROOT / "docs" / "plan.md"


def render() -> str:
    from memlint.plan.fields import GROUPS, rows

    lines = ["# The training plan's fields", "",
             "Generated from their declarations (`src/memlint/plan/fields.py`) by `python scripts/gen_plan_docs.py`;",
             "`memlint plan --fields` prints the same table. Each field is a value with its provenance (literal,",
             "constant, command-line, ... library-default, assumed, unknown) and the line that set it. `--assume` takes",
             "the field's name, its short names and the Hugging Face argument names listed; the estimate flag describes",
             "the same thing to `memlint estimate` and `memlint measure`. Among the values branches may give a field,",
             "the estimate takes the worst case named.", ""]
    table = rows()
    for group in GROUPS:
        mine = [r for r in table if r["group"] == group]
        if not mine:
            continue
        lines += [f"## {group[0].upper()}{group[1:]}", "",
                  "| field | kind | meaning | also --assume | estimate flag | worst case |", "|---|---|---|---|---|---|"]
        for r in mine:
            names = ", ".join(f"`{n.strip()}`" for n in r["also --assume"].split(",") if n.strip())
            flag = f"`{r['estimate flag']}`" if r["estimate flag"] else ""
            lines.append(f"| `{r['field']}` | {r['kind']} | {r['meaning']} | {names} | {flag} | {r['worst case']} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print("docs/plan.md is stale: run python scripts/gen_plan_docs.py")
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
