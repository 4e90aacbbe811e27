"""Static extraction: read a training script or notebook into a TrainingPlan, never running it.

The only package that imports libcst. `extract_file` takes one .py/.ipynb or a framework config
(extract/configs, YAML/JSON); `extract_paths` expands folders. Unreadable input raises MemlintError; a syntax error gives a plan whose
notes say so (a finding, not a crash).
"""

from __future__ import annotations

from pathlib import Path

from memlint.errors import MemlintError
from memlint.plan import TrainingPlan

__all__ = ["extract_file", "extract_paths", "extract_source", "SYNTAX_ERROR_NOTE"]

SYNTAX_ERROR_NOTE = "syntax error"  # notes of a plan that could not be parsed start with this
_SUFFIXES = (".py", ".ipynb")
_CONFIG_SUFFIXES = (".yaml", ".yml", ".json")  # read only when their keys say which framework they belong to


def extract_file(path: str | Path) -> TrainingPlan:
    """The training plan of one script, notebook or framework config (.yaml/.yml/.json)."""
    p = Path(path)
    if p.suffix.lower() in _CONFIG_SUFFIXES:
        from memlint.extract.configs import read_config

        return read_config(p, shown=str(path))
    from memlint.extract.source import read_source

    return extract_source(read_source(p), p, shown=str(path))


def extract_source(source: str, path: str | Path = "<string>", shown: str | None = None) -> TrainingPlan:
    """The training plan of Python source text (already IPython-transformed for notebooks)."""
    import libcst as cst

    from memlint.extract.build import Builder
    from memlint.extract.handlers import Handlers
    from memlint.extract.interp import Interpreter

    p = Path(path)
    name = shown if shown is not None else str(path)
    try:
        # CPython's parser first: it words errors better, and it refuses nesting deep
        # enough to overflow libcst's native parser (which would crash the process).
        compile(source, name, "exec", flags=0x400, dont_inherit=True)  # ast.PyCF_ONLY_AST
    except SyntaxError as err:
        return _syntax_error_plan(name, err.lineno or 1, err.offset or 1, err.msg)
    except (ValueError, RecursionError, MemoryError) as err:  # NUL bytes, nesting beyond the recursion limit
        return _syntax_error_plan(name, 1, 1, f"cannot parse: {type(err).__name__}: {err}")
    try:
        interp = Interpreter(p, source, Handlers())
    except cst.ParserSyntaxError as exc:  # syntax CPython accepts and libcst does not (yet)
        return _syntax_error_plan(name, exc.raw_line, exc.raw_column + 1, exc.message)
    facts = interp.run()
    return Builder(name, p, facts).build()


def _syntax_error_plan(name: str, line: int, col: int, msg: str) -> TrainingPlan:
    from memlint.plan import Diagnostic, Span

    note = f"{SYNTAX_ERROR_NOTE} at line {line}, column {col}: {msg}"
    return TrainingPlan(name, {}, (note,), (Diagnostic("syntax-error", f"SyntaxError: {msg}", Span(name, line, col)),))


def extract_paths(paths: list[str] | list[Path]) -> list[TrainingPlan]:
    """Plans for files and for the .py/.ipynb files and framework configs inside folders (sorted, recursive)."""
    plans = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files = sorted(
                f for f in p.rglob("*")
                if f.suffix.lower() in _SUFFIXES + _CONFIG_SUFFIXES and f.is_file()
                and not any(part.startswith(".") or part in ("__pycache__", "node_modules") for part in f.relative_to(p).parts)
            )
            for f in files:
                plan = extract_file(f) if f.suffix.lower() in _SUFFIXES else _config_in_walk(f)
                if plan is not None:
                    plans.append(plan)
        elif p.exists():
            plans.append(extract_file(p))
        else:
            raise MemlintError(f"{raw}: no such file or directory")
    return plans


def _config_in_walk(path: Path) -> TrainingPlan | None:
    """A YAML/JSON file met in a folder: its plan when it is a framework config, else skipped."""
    from memlint.extract.configs import read_config

    try:
        return read_config(path, shown=str(path), explicit=False)
    except MemlintError:  # unreadable, not UTF-8, too large: not a config, as far as a walk goes
        return None
