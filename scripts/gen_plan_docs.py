"""Write what the plan's field declarations (src/memlint/plan/fields.py) say elsewhere: docs/plan.md, and the plan
part of the shipped JSON Schema of `memlint plan --format json` (src/memlint/data/schema_plan.json).

    python scripts/gen_plan_docs.py          # rewrite both
    python scripts/gen_plan_docs.py --check  # exit 1 when either is stale (tests/test_plan_fields.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
OUT = ROOT / "docs" / "plan.md"
SCHEMA = ROOT / "src" / "memlint" / "data" / "schema_plan.json"


def schema_text() -> str:
    """schema_plan.json with its field list, provenances and per-field value types from the declarations."""
    import json

    from memlint.plan.fields import PLAN_FIELDS, SOURCES, json_schema

    doc = json.loads(SCHEMA.read_text(encoding="utf-8"))
    defs = doc["$defs"]
    defs["field"] = {"enum": list(PLAN_FIELDS)}
    defs["value"]["properties"]["source"] = {"enum": list(SOURCES)}
    plan = {k: v for k, v in json_schema().items() if k not in ("$schema", "title", "$defs")}  # #/$defs/value: ours
    plan["description"] = "every plan field (src/memlint/plan/fields.py), each with its value's type"
    defs["plan"] = plan
    defs["doc"]["properties"]["plan"] = {"$ref": "#/$defs/plan"}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


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
    outputs = {OUT: render(), SCHEMA: schema_text()}
    if "--check" in sys.argv:
        stale = [p for p, text in outputs.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
        for p in stale:
            print(f"{p.relative_to(ROOT)} is stale: run python scripts/gen_plan_docs.py")
        return 1 if stale else 0
    for p, text in outputs.items():
        p.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
