"""`memlint rule CODE` and `memlint rule --all`: a rule's documentation, or the list of rules."""

from __future__ import annotations

import argparse

from memlint.errors import MemlintError


def run_rule(args: argparse.Namespace) -> int:
    from memlint.report.rule_docs import rule_json, rule_markdown
    from memlint.rules.registry import all_rules, lookup

    if args.all:
        if args.code:
            raise MemlintError("pass a rule code or --all, not both")
        if args.output_format == "json":
            import json

            print(json.dumps([rule_json(r) for r in all_rules()], indent=2))
            return 0
        for r in all_rules():
            on = "" if r.default_enabled else "  (off by default)"
            fix = " [*]" if r.fix is not None else ""
            print(f"{r.code}  {r.name:32} {r.severity:8} {r.summary}{fix}{on}")
        return 0
    if not args.code:
        raise MemlintError("pass a rule code (memlint rule MEM201) or --all")
    r = lookup(args.code)
    if args.output_format == "json":
        import json

        print(json.dumps(rule_json(r), indent=2))
        return 0
    print(rule_markdown(r))
    return 0


def add_parser(sub) -> None:
    rp = sub.add_parser("rule", help="explain a rule (memlint rule MEM201) or list them all (--all)")
    rp.add_argument("code", nargs="?", metavar="CODE|NAME")
    rp.add_argument("--all", action="store_true", help="list every rule")
    rp.add_argument("--output-format", choices=("text", "json"), default="text")
    rp.set_defaults(func=run_rule)
