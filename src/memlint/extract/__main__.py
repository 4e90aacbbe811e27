"""`python -m memlint.extract PATH...` prints plans as JSON; `--regen-golden` rewrites fixtures/golden
from fixtures/scripts and fixtures/configs.

Golden files are claims: regenerate, then read the diff before committing it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlint.errors import MemlintError
from memlint.extract import extract_file, extract_paths

# The library versions golden files are written against, so they do not drift with the venv.
GOLDEN_VERSIONS = {"transformers": "5.24.0", "torch": "2.13.0", "peft": "0.21.2", "trl": None, "unsloth": None,
                   "axolotl": None, "llamafactory": None, "torchtune": None, "deepspeed": None, "accelerate": None,
                   "litgpt": None, "llm-foundry": None, "oumi": None, "xtuner": None, "llm-toolkit": None}


def fixture_scripts(root: Path) -> list[Path]:
    scripts = root / "scripts"
    return sorted(p for p in scripts.rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file())


def fixture_configs(root: Path) -> list[Path]:
    """Framework configs under fixtures/configs that memlint reads (others are skipped, as in a walk)."""
    from memlint.extract.configs import CONFIG_SUFFIXES, detect_file

    configs = root / "configs"
    return sorted(p for p in configs.rglob("*") if p.suffix in CONFIG_SUFFIXES and p.is_file() and detect_file(p))


def golden_path(root: Path, script: Path) -> Path:
    if script.is_relative_to(root / "scripts"):
        rel = script.relative_to(root / "scripts").as_posix().replace("/", "__")
    else:  # fixtures/configs/x.yaml -> golden/configs__x.yaml.json
        rel = script.relative_to(root).as_posix().replace("/", "__")
    return root / "golden" / f"{rel}.json"


# A field the fixture leaves unknown, with nothing else to say: golden files leave it out, so a new plan field
# rewrites only the goldens of the fixtures that set it.
BARE_UNKNOWN = {"value": None, "source": "unknown", "line": None}


def golden_doc(plan_json: dict) -> dict:
    """The fields a golden file claims: every one the plan says anything about."""
    return {k: v for k, v in plan_json.items() if v != BARE_UNKNOWN}


def regen(root: Path) -> int:
    from memlint.library.versions import pinned_versions

    with pinned_versions(GOLDEN_VERSIONS):
        for script in fixture_scripts(root) + fixture_configs(root):
            plan = extract_file(script)
            out = golden_path(root, script)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(golden_doc(plan.to_json()), indent=2) + "\n", encoding="utf-8")
            print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memlint.extract")
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--regen-golden", action="store_true", help="rewrite fixtures/golden from fixtures/scripts and fixtures/configs")
    ap.add_argument("--fixtures", default="fixtures")
    ap.add_argument("--chains", action="store_true", help="also print how each value was resolved, and the notes")
    ns = ap.parse_args(argv)
    if ns.regen_golden:
        return regen(Path(ns.fixtures))
    try:
        plans = extract_paths(ns.paths)
    except MemlintError as exc:
        print(exc, file=sys.stderr)
        return 2
    out = []
    for p in plans:
        item = {"path": p.path, "plan": p.to_json()}
        if ns.chains:
            item["chains"] = {k: list(v.chain) for k, v in p.fields.items()}
            item["notes"] = list(p.notes)
        out.append(item)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
