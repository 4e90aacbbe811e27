"""An abstract interpreter over libcst's syntax tree (extract/parsed.py): walks statements in order, never runs them.

It binds names to constants (with where they were written), to objects built by calls it
knows (configs, models, trainers, parsers) and to unknowns, inlines calls to the script's own
functions, keeps every candidate when branches disagree, and records what the training
step will do in `Facts`. The handlers (extract/handlers/) know the libraries.

`Interpreter` is composed of one mixin per body of knowledge:

  the language (no library names; tests/test_architecture.py checks)
    statements.py   blocks, assignments, if / match / loops / with / try, def and class
    expressions.py  names, attributes, subscripts, operators, comparisons, f-strings, comprehensions
    calls.py        the script's own functions inlined, super(), locals(), globals(), exec() of a file
    modules.py      where an import is found (extract/imports.py reads it), each node's line, the budgets
    scope.py        Env, Module and the values only the interpreter makes
    syntax.py       operator and builtin tables, the limits, helpers over libcst nodes
  the idioms
    idioms.py       batching, lengths and accumulation written by hand in plain Python
  the libraries
    libraries.py    tensor padding and array loads by dotted name, dtypes compared, empty-weights
                    contexts, peft's all-linear by hand, a checkout's own optimizer class, the
                    arguments a command-line library fills for an entry point

facts.py holds `Facts`, what the walk records. This module keeps the walk's state and its entry (`run`).
"""

from __future__ import annotations

import re

from pathlib import Path
from typing import Any

import libcst as cst
from memlint.extract import budget
from memlint.extract.imports import Imports, Lazy
from memlint.extract.interp.calls import Calls
from memlint.extract.interp.expressions import Expressions
from memlint.extract.interp.facts import Facts
from memlint.extract.interp.idioms import Idioms
from memlint.extract.interp.libraries import LibraryCalls
from memlint.extract.interp.modules import ModuleFiles
from memlint.extract.interp.scope import SPREAD, BoundStr, BoundUnknown, Env, GlobalsView, Module, SuperOf, _Return
from memlint.extract.interp.statements import Statements
from memlint.extract.interp.syntax import _BUILTIN_CALLS
from memlint.extract.parsed import parse
from memlint.extract.values import Const, Func

__all__ = ["Interpreter", "Facts", "Env", "Module", "SPREAD", "BoundStr", "BoundUnknown", "GlobalsView", "SuperOf",
           "_BUILTIN_CALLS", "parse"]


class Interpreter(Statements, Expressions, Calls, ModuleFiles, Idioms, LibraryCalls, Imports):
    """Walks one script (and the sibling modules it imports) and fills `facts`."""

    def __init__(self, path: Path, source: str, handlers: Any, launch: Any = None) -> None:
        self.path = path
        self.launch = launch         # extract.launch.Launch: the command the script is run with, or None
        self.pad_counts: dict[str, cst.CSTNode] = {}  # name = n - len(ids): the count of a hand padding
        self.pad_prior: dict[int, cst.CSTNode] = {}  # id of `n = min(n, cap)`'s value -> what n was bound to before
        self.dir = path.parent
        self.handlers = handlers
        self.facts = Facts()
        self.modules: dict[Path, Module | None] = {}
        self.retired: list[Module] = []  # modules read in part, then again for more of their names
        self.stack: list[Func] = []
        self.frames: list[Env] = []  # the environments of the functions being called, innermost last
        self.mod: Module | None = None
        self.entry_line: int | None = None  # the script's line that called into a sibling module
        self.returns: list[list] = []
        self.writes: list[dict] = []  # per branch being walked: the object attributes it assigned (branches())
        self.accum: list[Any] = []   # `if step % N == 0:` blocks we are inside
        self.counters: list[tuple[str, ...]] = []  # the names each enclosing loop steps (`accum += 1`)
        self.micro_accum: Any = None  # N of the last `for _ in range(N): ... backward()` loop
        self.length_guards: dict[str, Any] = {}  # `if len(pending) < N: continue`: pending holds N items past it
        self.loop_depth = 0  # loops walked once for all their (unknown) iterations that we are inside
        self.funcs: list[Func] = []
        self.instances: list = []  # objects of the checkout's own classes the run built (Instance), in order
        self.star_imports: list[str] = []
        self.init_imports()
        self.steps = 0
        self.deadline = budget.Deadline()
        self.timed_out = False
        self.exec_depth = 0
        self.layers: Any = None  # custom_model.Layers while a script model's __init__ runs
        self.resolvers: dict = {}  # OmegaConf.register_new_resolver(name, fn): name -> fn
        self.hydra_entries: list = []  # the @hydra.main entries composed so far (composed again on a new resolver)
        self.config_dir: tuple | None = None  # (folder, how): where a config composer's initialize() call points
        self.call_line: int | None = None
        self.call_node: Any = None  # the syntax of the call being read (what its arguments were written as)
        self.source = source
        self.main = self._load(path, source, "__main__", is_main=True)

    # ---- modules ---------------------------------------------------------------------------

    def _load(self, path: Path, source: str, name: str, is_main: bool) -> Module:
        parsed = parse(source)
        env = Env()
        env.vars["__name__"] = Const(name, "literal", None)
        env.vars["__file__"] = Const(str(path), "literal", None)
        return Module(path, name, parsed, env, is_main)

    def run(self) -> Facts:
        self._exec_module(self.main)
        self.facts.reached = {name: len(getattr(self.facts, name)) for name in
                              ("objects", "tokenizer_calls", "chunking", "windows", "random_batches", "joined_caps", "length_args", "target_length_args", "hand_pads", "batch_yields", "micro_slices", "steps", "autocasts", "liger_calls",
                               "backward", "grad_hooks", "hand_quant", "gpu_counts", "trained", "generated_batches")}
        if self.run_entry():
            return self.facts  # a console script's function ran: other functions of its module are other commands
        # Functions nothing called (entry points of other launchers, helpers passed by name)
        # still say how the script trains: walk them once, their parameters at their defaults.
        # Those the script imports by name from its own modules count too (a collate_fn in utils/).
        # A function imported and never used is read now, for that (nothing else of its module: a constant or class
        # imported and unused stays unread).
        for v in list(self.main.env.vars.values()):
            if type(v) is Lazy and v.value is None and self.imports_function(v):
                v.get()
        imported = {id(x) for x in (v.value if type(v) is Lazy else v for v in self.main.env.vars.values())
                    if type(x) is Func}
        for f in list(self.funcs):
            if not f.ran and (f.module is self.main or id(f) in imported):
                self.call_function(f, [], {}, self.line_of(f.node), entry=True)
        if not (self.facts.trained or self.facts.steps or self.facts.backward):
            self.run_uncalled_methods()
        return self.facts

    def run_uncalled_methods(self) -> None:
        """Nothing trained: a method of an object of the checkout's own class the run built, which the script calls
        only in a line it commented out (`# trainer.train()  # uncomment to retrain`), still says how the script
        trains: it runs once on that object, its parameters at their defaults. A method the script never names, or
        names only in live code that does not run (an inference script's unused `finetune()`), is not walked."""
        commented = set(re.findall(r"#[^\n]*?\.(\w+)\(", self.source))
        seen: set[int] = set()
        for inst in list(self.instances)[:8]:
            cls = getattr(inst, "user_class", None)
            if cls is None or id(cls) in seen:
                continue
            seen.add(id(cls))
            for name, f in list(cls.methods.items()):
                if type(f) is Func and not f.ran and name in commented and not name.startswith("_"):
                    self.call_function(f, [inst], {}, self.line_of(f.node), entry=True)
                if self.facts.trained or self.facts.steps or self.facts.backward:
                    return

    def run_entry(self) -> bool:
        """A console script's function (`kit = "kit.cli:train"`): called as the script's command calls it, once. Whether
        there was one to run."""
        name = getattr(self.launch, "entry", None) if self.launch is not None else None
        v = self.main.env.vars.get(name) if name else None
        f = v.get() if type(v) is Lazy else v
        if type(f) is not Func:
            return False
        if not f.ran:
            self.call_function(f, [], {}, self.line_of(f.node), entry=True)
        return True

    def _exec_module(self, mod: Module) -> None:
        prev, self.mod = self.mod, mod
        try:
            self.exec_block(mod.tree.body, mod.env)
        except _Return:
            pass
        finally:
            self.mod = prev
