"""`[tool.memlint]` in the closest pyproject.toml, or a memlint.toml / .memlint.toml.

Unknown keys are an error that names the key (a misspelt `ignore` silently ignored is
how a linter loses trust); so is broken TOML. Command-line flags override the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from memlint.errors import MemlintError
from memlint.files import MAX_FILE_SIZE, Refused, read_bytes

SEVERITY_ORDER = {"note": 0, "warning": 1, "error": 2}
CONFIG_FILES = (".memlint.toml", "memlint.toml", "pyproject.toml")  # first found in a directory wins


@dataclass(frozen=True)
class Settings:
    gpu: str | None = None
    gpus: int | None = None
    select: tuple[str, ...] | None = None          # None: the default rule set
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    fail_on: str = "warning"                        # lowest severity that makes the exit code 1
    assume: Mapping[str, Any] = field(default_factory=dict)
    rule_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # code -> options
    exclude: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()            # more patterns on top of `exclude` (Ruff's extend-exclude)
    force_exclude: bool = False                     # exclude files named on the command line too (pre-commit)
    online: bool = False                            # fetch an unknown model's config.json from the Hub (opt-in)
    accounting: str = "real"
    max_increase: str | None = None                 # `memlint diff` budget: "2GiB" or "10%"
    max_file_size: int = MAX_FILE_SIZE              # bytes: a larger script or config is a MEM001 note
    require_estimate: bool = False                  # a training script memlint cannot size fails the run
    docs_url: str | None = None                     # where the rule pages live (json `url`, SARIF `helpUri`)
    readme_command: bool = True                     # a file named alone runs as its README's command for it
    path: str | None = None                         # the file these came from
    root: str | None = None                         # its directory (per-file-ignores are relative to it)

    def with_(self, **changes: Any) -> "Settings":
        return replace(self, **changes)

    @property
    def min_headroom(self) -> float:
        """The headroom every front door weighs a fit by: MEM102's `min-headroom` option."""
        from memlint.gpu import MIN_HEADROOM

        return float(self.rule_options.get("MEM102", {}).get("min-headroom", MIN_HEADROOM))

    @property
    def excluded(self) -> tuple[str, ...]:
        """Every exclude pattern: `exclude` and `extend-exclude`."""
        return self.exclude + self.extend_exclude

    def assume_list(self) -> list[str]:
        from memlint.plan import assume_args

        return assume_args(self.assume)

    def show(self) -> str:
        lines = [f"config file: {self.path or '(none: defaults)'}"]
        for name in ("gpu", "gpus", "select", "extend_select", "ignore", "per_file_ignores", "fail_on",
                     "assume", "rule_options", "exclude", "extend_exclude", "force_exclude", "online", "accounting",
                     "max_increase", "require_estimate", "docs_url", "max_file_size", "readme_command"):
            lines.append(f"{name.replace('_', '-')} = {getattr(self, name)!r}")
        return "\n".join(lines)


_UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_budget(text: str, where: str = "--max-increase") -> tuple[str, float]:
    """"2GiB" -> ("bytes", 2147483648.0); "10%" -> ("percent", 10.0)."""
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%|[kmgt]?i?b)?\s*", text, flags=re.I)
    if not m:
        raise MemlintError(f"{where}: {text!r} is not a size (2GiB, 500MiB) or a percentage (10%)")
    num, unit = float(m.group(1)), (m.group(2) or "gib").lower()
    if unit == "%":
        return "percent", num
    if unit not in _UNITS:
        raise MemlintError(f"{where}: unknown unit in {text!r}")
    return "bytes", num * _UNITS[unit]


KEYS = {"gpu", "gpus", "select", "extend-select", "ignore", "per-file-ignores", "fail-on", "assume", "options",
        "exclude", "extend-exclude", "force-exclude", "online", "accounting", "max-increase", "require-estimate",
        "docs-url", "max-file-size", "readme-command"}


def parse_size(value: Any, where: str) -> int:
    """`max-file-size`: bytes, or a size with a unit ("2MB", "512KiB")."""
    if isinstance(value, str):
        kind, amount = parse_budget(value, where)
        if kind == "bytes" and amount < 1 << 40:
            return int(amount)
    elif isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 40:
        return value
    raise MemlintError(f"{where}: `max-file-size` must be a size in bytes or with a unit (2MB, 512KiB), not {value!r:.40}")


def find_config(start: Path) -> Path | None:
    """The closest config file at or above `start` that has memlint settings, up to the checked root (the
    repository's top, else the folder named or the working directory holding it): a `.memlint.toml` in a shared
    folder above the checkout (/tmp) says nothing about it."""
    from memlint.files import checkout_root

    d = start.resolve()
    if d.is_file():
        d = d.parent
    top = Path(checkout_root(d))
    for folder in (d, *d.parents):
        if folder != top and top not in folder.parents:
            break  # above the checked root
        for name in CONFIG_FILES:
            p = folder / name
            if not p.is_file():
                continue
            if name != "pyproject.toml":
                return p
            data = _read_toml(p, only_if="memlint")  # no [tool.memlint] without the word: not worth parsing
            if data is None:
                continue
            if isinstance(data.get("tool"), dict) and "memlint" in data["tool"]:
                return p
    return None


def _read_toml(path: Path, only_if: str | None = None) -> dict | None:
    """A TOML file's table; any failure is one line (MemlintError). With `only_if`, a file whose
    text lacks that word is None, unparsed (and tomllib not imported)."""
    try:
        text = read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise MemlintError(f"{path}: no such config file") from None
    except UnicodeDecodeError as exc:
        raise MemlintError(f"{path}: invalid TOML: {exc}") from None
    except Refused as exc:
        raise MemlintError(str(exc)) from None
    except OSError as exc:
        raise MemlintError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if only_if is not None and only_if not in text:
        return None
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MemlintError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise MemlintError(f"{path}: invalid TOML: nested too deeply") from None


def _strs(value: Any, key: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MemlintError(f"{where}: `{key}` must be a list of strings")
    return tuple(value)


def parse_settings(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """[tool.memlint] as Settings keyword arguments; every key and option checked."""
    from memlint.rules.registry import check_selectors

    unknown = sorted(set(table) - KEYS)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(KEYS), n=1, cutoff=0.6)
        hint = f"did you mean `{close[0]}`? " if close else ""
        raise MemlintError(f"{where}: unknown key `{unknown[0]}` in [tool.memlint] ({hint}known: {', '.join(sorted(KEYS))})")
    out: dict[str, Any] = {}
    if "gpu" in table:
        if not isinstance(table["gpu"], (str, int, float)):
            raise MemlintError(f"{where}: `gpu` must be a GPU name or a size in GiB")
        from memlint.gpu import find_gpu

        find_gpu(str(table["gpu"]))  # an unknown GPU is a config error now, not at the first capacity rule
        out["gpu"] = str(table["gpu"])
    if "gpus" in table:
        if not isinstance(table["gpus"], int) or isinstance(table["gpus"], bool) or table["gpus"] < 1:
            raise MemlintError(f"{where}: `gpus` must be a positive integer")
        out["gpus"] = table["gpus"]
    if "select" in table:
        out["select"] = tuple(check_selectors(_strs(table["select"], "select", where), where))
    if "extend-select" in table:
        out["extend_select"] = tuple(check_selectors(_strs(table["extend-select"], "extend-select", where), where))
    if "ignore" in table:
        out["ignore"] = tuple(check_selectors(_strs(table["ignore"], "ignore", where), where))
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise MemlintError(f"{where}: `per-file-ignores` must be a table of glob = [codes]")
        out["per_file_ignores"] = {g: tuple(check_selectors(_strs(c, f"per-file-ignores.{g}", where), where))
                                   for g, c in pfi.items()}
    if "fail-on" in table:
        if not isinstance(table["fail-on"], str) or table["fail-on"] not in SEVERITY_ORDER:
            raise MemlintError(f"{where}: `fail-on` must be one of {', '.join(SEVERITY_ORDER)}")
        out["fail_on"] = table["fail-on"]
    if "assume" in table:
        if not isinstance(table["assume"], dict):
            raise MemlintError(f"{where}: `assume` must be a table of field = value")
        from memlint.estimate.from_plan import apply_assumptions
        from memlint.plan import TrainingPlan

        s = Settings(assume=table["assume"])
        apply_assumptions(TrainingPlan("<config>"), s.assume_list())  # names every bad field now
        out["assume"] = dict(table["assume"])
    if "options" in table:
        out["rule_options"] = _rule_options(table["options"], where)
    if "exclude" in table:
        out["exclude"] = _strs(table["exclude"], "exclude", where)
    if "extend-exclude" in table:
        out["extend_exclude"] = _strs(table["extend-exclude"], "extend-exclude", where)
    for key in ("force-exclude", "online", "readme-command"):
        if key in table:
            if not isinstance(table[key], bool):
                raise MemlintError(f"{where}: `{key}` must be true or false")
            out[key.replace("-", "_")] = table[key]
    if "accounting" in table:
        if not isinstance(table["accounting"], str) or table["accounting"] not in ("real", "textbook"):
            raise MemlintError(f"{where}: `accounting` must be real or textbook")
        out["accounting"] = table["accounting"]
    if "docs-url" in table:
        url = table["docs-url"]
        if not isinstance(url, str) or not url.startswith(("https://", "http://", "file://")):
            raise MemlintError(f"{where}: `docs-url` must be an absolute URL (https://…)")
        out["docs_url"] = url
    if "max-increase" in table:
        parse_budget(str(table["max-increase"]), where)
        out["max_increase"] = str(table["max-increase"])
    if "require-estimate" in table:
        if not isinstance(table["require-estimate"], bool):
            raise MemlintError(f"{where}: `require-estimate` must be true or false")
        out["require_estimate"] = table["require-estimate"]
    if "max-file-size" in table:
        out["max_file_size"] = parse_size(table["max-file-size"], where)
    return out


def _rule_options(opts: Any, where: str) -> dict[str, dict]:
    """[tool.memlint.options]: each rule's table, every option known and of its default's type."""
    from memlint.rules.registry import lookup

    if not isinstance(opts, dict):
        raise MemlintError(f"{where}: `options` must be a table of rule tables")
    parsed = {}
    for key, values in opts.items():
        rule = lookup(key)
        if not isinstance(values, dict):
            raise MemlintError(f"{where}: `options.{key}` must be a table")
        for opt, val in values.items():
            _check_option(rule, opt, val, where)
        parsed[rule.code] = dict(values)
    return parsed


def _check_option(rule: Any, opt: str, val: Any, where: str) -> None:
    if opt not in rule.options:
        known = ", ".join(rule.options) or "none"
        raise MemlintError(f"{where}: unknown option `{opt}` for {rule.code} ({rule.name}); options: {known}")
    default = rule.options[opt]
    if isinstance(default, (int, float)) and (isinstance(val, bool) or not isinstance(val, (int, float))):
        raise MemlintError(f"{where}: option `{opt}` of {rule.code} must be a number")
    least = 1 if isinstance(default, int) else 0  # a length or a byte count; a fraction or a ratio
    if isinstance(default, (int, float)) and not least <= val <= 1 << 53:  # NaN and inf fail too
        raise MemlintError(f"{where}: option `{opt}` of {rule.code} must be a number from {least} to 2**53")


def load_settings(start: str | Path = ".", config: str | Path | None = None) -> Settings:
    """Settings from `config` if given, else from the closest config file at or above `start`."""
    path = Path(config) if config is not None else find_config(Path(start))
    if path is None:
        return Settings()
    data = _read_toml(path)
    tool = data.get("tool", {}) if path.name == "pyproject.toml" else {}
    if path.name == "pyproject.toml" and not isinstance(tool, dict):
        raise MemlintError(f"{path}: [tool] must be a table")
    table = tool.get("memlint", {}) if path.name == "pyproject.toml" else data
    if not isinstance(table, dict):
        raise MemlintError(f"{path}: [tool.memlint] must be a table")
    kwargs = parse_settings(table, str(path))
    return Settings(**kwargs, path=str(path), root=str(path.parent))


def split_config_args(values: "list[str] | str | None") -> tuple[str | None, list[str]]:
    """`--config` as Ruff takes it: a settings file, and/or inline `KEY = VALUE` overrides (TOML; a bare word
    value is read as a string: `--config gpu=A100-80GB`). Returns (the file or None, the overrides)."""
    if values is None:
        return None, []
    if isinstance(values, str):
        values = [values]
    path, inline = None, []
    for v in values:
        if "=" in v and not Path(v).is_file():
            inline.append(v)
        elif path is not None:
            raise MemlintError(f"--config {v}: one settings file at most (already {path})")
        else:
            path = v
    return path, inline


def with_overrides(settings: Settings, overrides: list[str]) -> Settings:
    """`settings` with each `KEY = VALUE` override applied, checked as [tool.memlint] keys are."""
    import tomllib

    for text in overrides:
        key, _, raw = text.partition("=")
        try:
            table = tomllib.loads(f"{key.strip()} = {raw.strip()}")
        except tomllib.TOMLDecodeError:
            try:  # a bare word: a string
                table = tomllib.loads(f"{key.strip()} = {_toml_string(raw.strip())}")
            except tomllib.TOMLDecodeError as exc:
                raise MemlintError(f"--config {text!r}: not a KEY = VALUE setting ({exc})") from None
        kwargs = parse_settings(table, f"--config {text!r}")
        if "rule_options" in kwargs:  # one rule's option: merged into the others
            merged = {code: dict(opts) for code, opts in settings.rule_options.items()}
            for code, opts in kwargs["rule_options"].items():
                merged.setdefault(code, {}).update(opts)
            kwargs["rule_options"] = merged
        settings = settings.with_(**kwargs)
    return settings


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text)
