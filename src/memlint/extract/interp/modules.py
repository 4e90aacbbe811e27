"""The files a walk reads and where it stands in them: where an import of the script's own code is found
(a library whose calls are modelled is never read), each node's line and source, and the budgets
(extract/budget.py) that stop a walk or a value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import libcst as cst
from memlint.extract import budget
from memlint.extract.interp.syntax import MAX_STEPS, _CHECKOUT_MARKERS, _one_line, _shown
from memlint.extract.parsed import source_of
from memlint.extract.values import Const, Unknown, weigh
from memlint.files import is_file
from memlint.library import api


class ModuleFiles:
    """The Interpreter's part that knows files and positions."""

    def import_roots(self) -> list[Path]:
        """Where an absolute import of the script's own code is found: the script's folder (Python's
        sys.path[0]), the launch command's folder, then each folder up to the checkout's root (a
        .git, pyproject.toml or setup.py) and its src/ (an installed package of the checkout)."""
        if getattr(self, "_roots", None) is None:
            roots = [self.dir]
            if self.launch is not None and self.launch.module:
                # `python -m pkg.mod` puts the working directory on sys.path: the launch's own (`cd DIR && ...`)
                roots.append(Path.cwd() / self.launch.cwd if self.launch.cwd else Path.cwd())
            own = list(roots)  # what Python's sys.path holds with no checkout around
            cur = self.dir.absolute()  # a relative "." has no parent to walk up to
            for _ in range(8):
                if any((cur / m).exists() for m in _CHECKOUT_MARKERS):
                    roots += [cur, cur / "src"]
                    break
                if cur.parent == cur:
                    break
                cur = cur.parent
                roots.append(cur)
            else:
                roots = own
            if len(roots) > len(own) and not any((r / m).exists() for r in roots for m in _CHECKOUT_MARKERS):
                roots = own  # no checkout around the script: only its own folder (and a module run's directory)
            if roots == own:
                roots += self._archive_roots()
            from memlint.files import allowed

            self._roots = [r for r in dict.fromkeys(roots) if allowed(r)]  # never a folder outside the checked root
        return self._roots

    def _archive_roots(self) -> list[Path]:
        """A checkout without .git, pyproject or setup.py (a GitHub archive): the folders from the script's up to the
        checked root memlint settled from the project's README, LICENSE or .gitignore, where `python src/train.py`'s
        `from src.data import x` finds its package (the repository's top on the path, as its README runs it)."""
        from memlint.files import root_in_force

        top = root_in_force()
        if not top:
            return []
        top_path, cur, out = Path(top).resolve(), self.dir.resolve(), []
        if top_path != cur and top_path not in cur.parents:
            return []
        while cur != top_path and len(out) < 8:
            cur = cur.parent
            out.append(cur)
        return out

    def add_import_root(self, folder: str, first: bool) -> bool:
        """`sys.path.append(folder)` / `sys.path.insert(0, folder)`: imports are found there too, when the folder is
        inside the checked root (a relative folder is read from the working directory, as Python does)."""
        from memlint.files import allowed

        p = Path(folder)
        p = (p if p.is_absolute() else Path.cwd() / p).resolve()
        if not p.is_dir() or not allowed(p):
            return False
        roots = [r for r in self.import_roots() if r.resolve() != p]
        self._roots = [p, *roots] if first else [*roots, p]
        return True

    def find_module(self, dotted: str, level: int, origin: Path | None = None, copy: bool = False) -> Path | None:
        """The file `import dotted` (with `level` leading dots) finds in the checkout; a relative one from the module
        being walked, or from `origin`. `copy`: a modelled library's own module too, where the checkout holds a copy
        of the library (a fork: read only for a name the library's data does not know)."""
        parts = dotted.split(".") if dotted else []
        if level:
            here = (origin if origin is not None else self.mod.path if self.mod is not None else self.path).parent
            for _ in range(level - 1):
                here = here.parent
            roots = [here]
        elif parts and parts[0] in api.modelled_packages() and not copy:
            return None  # the library (its calls are modelled), even where its source is in the script's checkout
        else:
            roots = self.import_roots()
        for base in roots:
            cand = base.joinpath(*parts).with_suffix(".py") if parts else None
            pkg = base.joinpath(*parts, "__init__.py")
            target = cand if cand is not None and is_file(cand) else pkg if is_file(pkg) else None
            if target is not None and (parts or level):
                return target
        return None

    def library_copy_name(self, path: Path) -> list[str] | None:
        """The dotted parts of a module of the checkout's copy of a modelled library (a fork of it the script puts on
        sys.path: `pkg/sub/x.py` under an import root, pkg a modelled library -> ["pkg", "sub", "x"]), or None."""
        rp = path.resolve()
        for root in self.import_roots():
            try:
                rel = rp.relative_to(root.resolve())
            except ValueError:
                continue
            parts = list(rel.with_suffix("").parts)
            if len(parts) > 1 and parts[0] in api.modelled_packages():
                return parts[:-1] if parts[-1] == "__init__" else parts
        return None

    # ---- positions and constants -------------------------------------------------------------

    def line_of(self, node: cst.CSTNode) -> int | None:
        mod = self.mod
        try:
            return mod.pos[node].start.line if mod else None
        except KeyError:
            for m in [self.main, *[x for x in self.modules.values() if x], *self.retired]:
                if node in m.pos:
                    return m.pos[node].start.line
            return None

    def cur_file(self) -> str | None:
        return None if (self.mod is None or self.mod.is_main) else _shown(self.mod.path)

    def const(self, value: Any, node: cst.CSTNode | None, source: str = "literal", chain: tuple = ()) -> Const:
        return Const(value, source, self.line_of(node) if node is not None else None, chain, self.cur_file())

    def code(self, node: cst.CSTNode) -> str:
        for m in (self.mod, self.main, *self.modules.values(), *self.retired):
            if m is not None and node in m.pos:
                return _one_line(source_of(m.parsed, node))
        return "…"

    # ---- budgets (extract/budget.py) ---------------------------------------------------------

    def out_of_time(self) -> bool:
        """Past the file's time budget: no statement or call is walked any more."""
        if self.deadline.passed():
            self.timed_out = True
            self.steps = MAX_STEPS + 1
            self.facts.note(f"{budget.STOPPED_NOTE} {budget.MAX_SECONDS:g} s (memlint's time budget for one "
                            "file); values set later in the file are unknown")
        return self.timed_out

    def over(self) -> Unknown:
        self.facts.note(f"{budget.OVER} (a string over {budget.MAX_STR:,} characters, a list over "
                        f"{budget.MAX_ITEMS:,} items or an integer over {budget.MAX_INT_BITS:,} bits) is unknown")
        return Unknown(budget.OVER)

    def sized(self, container: Any, items: Any) -> Any:
        """A list or dict built from `items`, or Unknown when it holds more than the budget."""
        return weigh(container, items) or self.over()
