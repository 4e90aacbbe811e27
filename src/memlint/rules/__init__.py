"""The rules: small classes over plain data (plan, estimate). `registry()` lists them."""

from memlint.rules.base import Context, FileResult, Finding, Fix, Related, Rule, Sample

__all__ = ["Context", "FileResult", "Finding", "Fix", "Related", "Rule", "Sample"]
