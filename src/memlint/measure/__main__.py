"""python -m memlint.measure MODEL [--method lora ...] -> the Measurement as JSON on stdout.

For benchmarks and GPU checks; the user-facing commands live in the CLI and the magic.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from memlint.errors import MemlintError


def main(argv: list[str] | None = None) -> int:
    from memlint.catalog import resolve
    from memlint.estimate.setup import Setup
    from memlint.measure import measure

    ap = argparse.ArgumentParser(prog="python -m memlint.measure", description=__doc__)
    ap.add_argument("model")
    ap.add_argument("--device", default="auto", help="auto | cuda | cpu | trace")
    ap.add_argument("--steps", type=int, default=2)
    for f in fields(Setup):
        if f.name == "model":
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.type in ("int", int):
            ap.add_argument(flag, type=int, default=f.default)
        elif f.type in ("float", float):
            ap.add_argument(flag, type=float, default=f.default)
        elif f.name == "lora_targets":
            ap.add_argument(flag, default=f.default, help="all-linear or a comma-separated list")
        else:
            ap.add_argument(flag, default=f.default)
    args = ap.parse_args(argv)
    kw = {f.name: getattr(args, f.name) for f in fields(Setup) if f.name != "model"}
    if kw["lora_targets"] != "all-linear":
        kw["lora_targets"] = tuple(t.strip() for t in kw["lora_targets"].split(",") if t.strip())
    try:
        setup = Setup(model=resolve(args.model), **kw)
        m = measure(setup, device=args.device, steps=args.steps)
    except MemlintError as exc:
        print(f"memlint.measure: {exc}", file=sys.stderr)
        return 2
    json.dump(m.to_json(), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
