"""Regenerate src/memlint/catalog/models.json from scripts/catalog_sources.json.

Each model's config is instantiated on the meta device with transformers (no weights,
no network), and the exact parameter counts are read off the module tree.
Run: python scripts/gen_catalog.py   (needs the `catalog` extra: torch, transformers)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from memlint.catalog.meta import count_on_meta  # noqa: E402
SOURCES = ROOT / "scripts" / "catalog_sources.json"
OUTPUT = ROOT / "src" / "memlint" / "catalog" / "models.json"

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="regenerate one id and print it instead of writing")
    ap.add_argument("--update", nargs="+", metavar="ID",
                    help="regenerate these ids (new or changed sources) and keep every other entry as it is")
    args = ap.parse_args(argv)
    import transformers

    sources = json.loads(SOURCES.read_text())["models"]
    if args.only:
        entry = next(e for e in sources if e["id"] == args.only)
        print(json.dumps(count_on_meta(entry["model_type"], entry["config"]), indent=1))
        return 0
    models = {}
    kept = json.loads(OUTPUT.read_text())["models"] if args.update else {}
    for entry in sources:
        if args.update and entry["id"] not in args.update:
            models[entry["id"]] = kept[entry["id"]]
            continue
        counted = count_on_meta(entry["model_type"], entry["config"])
        models[entry["id"]] = {
            "family": entry["family"],
            "aliases": entry.get("aliases", []),
            "text_only": entry.get("text_only", False),
            "torch_dtype": entry["config"].get("torch_dtype", "float32"),
            "model_type": entry["model_type"],
            "config": entry["config"],
            **counted,
        }
        if entry.get("ref"):  # where the config values were read, kept next to the counts
            models[entry["id"]]["ref"] = entry["ref"]
        print(f"{entry['id']:45s} {counted['params']:>16,d}", file=sys.stderr)
    doc = {
        "_generated_by": "scripts/gen_catalog.py",
        "_transformers": json.loads(OUTPUT.read_text())["_transformers"] if args.update else transformers.__version__,
        "models": models,
    }
    OUTPUT.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
