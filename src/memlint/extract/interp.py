"""An abstract interpreter over libcst's syntax tree (extract/parsed.py): walks statements in order, never runs them.

It binds names to constants (with where they were written), to objects built by calls it
knows (configs, models, trainers, parsers) and to unknowns, inlines calls to the script's own
functions, keeps every candidate when branches disagree, and records what the training
step will do in `Facts`. `handlers.py` knows the libraries; this module knows Python.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
from memlint.extract import budget
from memlint.extract.imports import MAX_SIBLING_BYTES, Bases, FileLines, Imports, Lazy, SiblingModule, resolved
from memlint.extract.parsed import Parsed, ParserSyntaxError, children, parse, source_of

from memlint.extract.objects import (BoundMethod, Chunking, DictMethod, Fields, Method, Model, Obj, OpenFile, Partial, RandomOffsets,
                                     Range, SeqMethod, Window)

_DICT_METHODS = {"get", "items", "keys", "values", "copy", "update", "setdefault", "pop"}

SPREAD = "**"  # kwargs key of the objects a call spreads with **vars(obj)
from memlint.files import is_file, max_file_size, read_text
from memlint.library import api
from memlint.extract.values import Alts, Class, Const, Dict, Func, ModuleVal, RaisedBy, Ref, Seq, Unknown, flatten, merge, to_python, weakest
from memlint.extract.values import insert_fits, weigh

MAX_DEPTH = 12
MAX_ALTS = 16
_PLAIN_SMALL = (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Pass)
MAX_EXEC_DEPTH = 4        # exec(open(f).read()) inside an exec'd file, at most this deep
_CHECKOUT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
MAX_CALLS_PER_FUNC = 256    # inlined walks of one function; later calls give unknown
MAX_UNROLL = 256             # a for loop over a known sequence this short runs once per item
MAX_RECURSION = 4           # a function calling itself (a helper walking a tuple of configs) goes this deep
MAX_STEPS = 200_000         # statements walked per script, all calls included

# tensors built to pad a sample by hand: torch.full((1, n - l), pad), F.pad(x, (0, n - len(x)))
_TENSOR_PADS = {"torch.full", "torch.nn.functional.pad", "numpy.full", "numpy.pad"}
_ARRAY_LOADS = {"numpy.load", "numpy.memmap", "numpy.fromfile", "torch.load"}  # data a companion script may have written

_BINOPS = {
    "Add": operator.add, "Subtract": operator.sub, "Multiply": operator.mul,
    "Divide": operator.truediv, "FloorDivide": operator.floordiv, "Modulo": operator.mod,
    "Power": operator.pow, "BitOr": operator.or_, "BitAnd": operator.and_,
    "LeftShift": operator.lshift, "RightShift": operator.rshift, "BitXor": operator.xor,
}
_CMPOPS = {
    "Equal": operator.eq, "NotEqual": operator.ne, "LessThan": operator.lt,
    "LessThanEqual": operator.le, "GreaterThan": operator.gt, "GreaterThanEqual": operator.ge,
    "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b,
    "Is": operator.is_, "IsNot": operator.is_not,
}
# Builtins that take a value without calling back into it (a user object passed to one is not "handed to the library")
_NO_CALLBACK = frozenset({"super", "isinstance", "issubclass", "hasattr", "getattr", "setattr", "type", "print", "len",
                          "vars", "id", "repr", "str", "callable", "dir"})

_BUILTIN_CALLS = {
    "int": int, "float": float, "str": str, "bool": bool, "abs": abs, "round": round,
    "min": min, "max": max, "len": len, "sum": sum, "list": list, "tuple": tuple, "sorted": sorted,
}


class Env:
    """One scope's names; lookups fall back to the enclosing scope."""

    __slots__ = ("vars", "parent")

    def __init__(self, parent: "Env | None" = None) -> None:
        self.vars: dict[str, Any] = {}
        self.parent = parent

    def lookup(self, name: str) -> Any:
        env: Env | None = self
        while env is not None:
            if name in env.vars:
                v = env.vars[name]
                return v.get() if type(v) is Lazy else v
            env = env.parent
        return None


@dataclass
class Module:
    path: Path
    name: str
    parsed: Parsed  # libcst's tree, each node's range, the text
    env: Env
    is_main: bool
    only: frozenset[str] | None = None  # a module imported from by name: the names walked (extract/slicing.py)
    kept: frozenset[int] = frozenset()  # with `only`: the top-level statements walked (their indexes)
    lines: tuple[int, ...] = ()  # with `only`: the file's line of each line of the text parsed (its kept lines)
    _pos: Any = None

    @property
    def tree(self) -> cst.Module:
        return self.parsed.module

    @property
    def pos(self) -> Any:
        """Each node's range, in the file's lines."""
        if not self.lines:
            return self.parsed.pos
        if self._pos is None:
            self._pos = FileLines(self.parsed.pos, self.lines)
        return self._pos


@dataclass
class Facts:
    """What the analysed code does that the plan needs; filled while walking."""

    objects: list = field(default_factory=list)          # every Obj built, in order (extract/objects.py)
    trained: list = field(default_factory=list)          # Trainers whose .train() was called
    tokenizer_calls: list = field(default_factory=list)  # TokenizerCall
    liger_calls: list = field(default_factory=list)      # LigerPatch: liger_kernel's apply_liger_kernel_to_*()
    float8_calls: list = field(default_factory=list)     # Const: torchao's convert_to_float8_training(model, ...)
    float8_gather: list = field(default_factory=list)    # Const: Float8LinearConfig(enable_fsdp_float8_all_gather=...)
    unknown_steps: list = field(default_factory=list)    # lines of `.step()` on objects memlint does not know
    chunking: list = field(default_factory=list)         # Chunking: t[i : i + n] for i in range(0, _, n)
    windows: list = field(default_factory=list)          # Window: data[i : i + n] for i in <B random offsets>
    length_args: list = field(default_factory=list)      # LengthArg: args.max_seq_length read from the script's arguments
    target_length_args: list = field(default_factory=list)  # LengthArg: args.max_target_length (a seq2seq's labels)
    hand_pads: list = field(default_factory=list)        # HandPad: padding the script writes itself
    batch_yields: list = field(default_factory=list)     # BatchYield: `if len(batch) == n: yield batch` in a dataset
    array_loads: list = field(default_factory=list)      # (file name, line): np.load / torch.load of a named array file
    offloads: list = field(default_factory=list)         # Const offload kinds a wrapper's options set (FSDP CPUOffload)
    autocasts: list = field(default_factory=list)        # AutocastCall
    steps: list = field(default_factory=list)            # OptimizerStep
    backward: list = field(default_factory=list)         # lines of loss.backward()
    scalers: list = field(default_factory=list)          # GradScaler lines
    grad_hooks: list = field(default_factory=list)       # GradHook: p.register_post_accumulate_grad_hook(fn)
    lora_freezes: list = field(default_factory=list)     # lines of the checkout's only_optimize_lora_parameters(model)
    hand_quant: list = field(default_factory=list)       # HandQuant: bitsandbytes linears the script builds or hands to a helper
    gpu_counts: list = field(default_factory=list)       # Const GPU counts, or DeviceCount (every visible GPU): mp.spawn, DataParallel
    notes: list = field(default_factory=list)
    reached: dict = field(default_factory=dict)          # list name -> its length when the script's own run ended

    def first(self, name: str, kind: Any = object) -> list:
        """The entries of list `name` the script's run reached; the ones found only by walking
        functions nothing called (another entry point, a task the configuration does not take) when
        the run reached none of `kind`."""
        entries = getattr(self, name)
        n = self.reached.get(name, len(entries))
        early = [e for e in entries[:n] if isinstance(e, kind)]
        return early if early else [e for e in entries if isinstance(e, kind)]

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


_ABSENT = object()  # a key a branch left unassigned


class _Return(Exception):
    pass


class Interpreter(Imports):
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
        self.mod: Module | None = None
        self.entry_line: int | None = None  # the script's line that called into a sibling module
        self.returns: list[list] = []
        self.writes: list[dict] = []  # per branch being walked: the object attributes it assigned (branches())
        self.accum: list[Any] = []   # `if step % N == 0:` blocks we are inside
        self.micro_accum: Any = None  # N of the last `for _ in range(N): ... backward()` loop
        self.loop_depth = 0  # loops walked once for all their (unknown) iterations that we are inside
        self.funcs: list[Func] = []
        self.star_imports: list[str] = []
        self.init_imports()
        self.steps = 0
        self.deadline = budget.Deadline()
        self.timed_out = False
        self.exec_depth = 0
        self.layers: Any = None  # custom_model.Layers while a script model's __init__ runs
        self.call_line: int | None = None
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
                              ("objects", "tokenizer_calls", "chunking", "windows", "length_args", "target_length_args", "hand_pads", "batch_yields", "steps", "autocasts", "liger_calls",
                               "backward", "grad_hooks", "hand_quant", "gpu_counts")}
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
        return self.facts

    def _exec_module(self, mod: Module) -> None:
        prev, self.mod = self.mod, mod
        try:
            self.exec_block(mod.tree.body, mod.env)
        except _Return:
            pass
        finally:
            self.mod = prev

    def import_roots(self) -> list[Path]:
        """Where an absolute import of the script's own code is found: the script's folder (Python's
        sys.path[0]), the launch command's folder, then each folder up to the checkout's root (a
        .git, pyproject.toml or setup.py) and its src/ (an installed package of the checkout)."""
        if getattr(self, "_roots", None) is None:
            roots = [self.dir]
            if self.launch is not None and self.launch.module:
                roots.append(Path.cwd())
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
                roots = [self.dir]
            if len(roots) > 1 and not any((r / m).exists() for r in roots for m in _CHECKOUT_MARKERS):
                roots = [self.dir]  # no checkout around the script: only its own folder
            from memlint.files import allowed

            self._roots = [r for r in dict.fromkeys(roots) if allowed(r)]  # never a folder outside the checked root
        return self._roots

    def find_module(self, dotted: str, level: int, origin: Path | None = None) -> Path | None:
        """The file `import dotted` (with `level` leading dots) finds in the checkout; a relative one from the module
        being walked, or from `origin`."""
        parts = dotted.split(".") if dotted else []
        if level:
            here = (origin if origin is not None else self.mod.path if self.mod is not None else self.path).parent
            for _ in range(level - 1):
                here = here.parent
            roots = [here]
        elif parts and parts[0] in api.modelled_packages():
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

    # ---- positions and constants -----------------------------------------------------------

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

    # ---- budgets (extract/budget.py) -----------------------------------------------------

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

    # ---- statements ------------------------------------------------------------------------

    def exec_block(self, stmts: Any, env: Env) -> bool:
        """Run statements in order; True when the block always leaves (return/raise/...)."""
        pushed = 0
        try:
            for stmt in stmts:
                if self.exec_stmt(stmt, env):
                    return True
                if self.loop_depth and isinstance(stmt, cst.If):
                    n = self.skip_unless_modulo(stmt, env)
                    if n is not None:  # `if step % N != 0: continue`: what follows runs on every N-th
                        self.accum.append(n)
                        pushed += 1
            return False
        finally:
            for _ in range(pushed):
                self.accum.pop()

    def skip_unless_modulo(self, node: cst.If, env: Env) -> Any:
        """N of `if step % N != 0: continue` (no else): the rest of the loop body is the accumulation step."""
        test = node.test
        if node.orelse is not None or not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                                           and isinstance(test.comparisons[0].operator, cst.NotEqual)):
            return None
        body = node.body.body
        smalls = body if isinstance(node.body, cst.SimpleStatementSuite) else \
            body[0].body if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) else ()
        if not (smalls and all(isinstance(s, cst.Continue) for s in smalls)):
            return None
        return self.modulo_test(test, env)

    def exec_stmt(self, stmt: cst.CSTNode, env: Env) -> bool:
        self.steps += 1
        if self.timed_out or (not self.steps & 1023 and self.out_of_time()):
            return False
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if self.exec_small(small, env):
                    return True
            return False
        if isinstance(stmt, cst.FunctionDef):
            self.def_function(stmt, env)
        elif isinstance(stmt, cst.ClassDef):
            self.def_class(stmt, env)
        elif isinstance(stmt, cst.If):
            return self.exec_if(stmt, env)
        elif isinstance(stmt, (cst.For, cst.While)):
            self.exec_loop(stmt, env)
        elif isinstance(stmt, cst.With):
            self.exec_with(stmt, env)
        elif isinstance(stmt, (cst.Try, cst.TryStar)):
            self.exec_try(stmt, env)
        elif isinstance(stmt, cst.Match):
            self.branches(env, [lambda e, c=c: self.exec_block(c.body.body, e) for c in stmt.cases], exhaustive=False)
        return False

    def exec_small(self, node: cst.CSTNode, env: Env) -> bool:
        if isinstance(node, cst.Assign):
            value = self.ev(node.value, env)
            for t in node.targets:
                self.assign(t.target, value, env, node)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                self.assign(node.target, self.ev(node.value, env), env, node)
        elif isinstance(node, cst.AugAssign):
            cur = self.ev(node.target, env)
            rhs = self.ev(node.value, env)
            op = type(node.operator).__name__.replace("Assign", "")
            self.assign(node.target, self.binop(op, cur, rhs, node), env, node)
        elif isinstance(node, cst.Expr):
            self.ev(node.value, env)
        elif isinstance(node, cst.Return):
            if self.returns:
                self.returns[-1].append(self.ev(node.value, env) if node.value else Const(None, "literal", None))
            return True
        elif isinstance(node, cst.Raise):
            return True
        elif isinstance(node, (cst.Continue, cst.Break)):
            return True
        elif isinstance(node, cst.Import):
            self.do_import(node, env)
        elif isinstance(node, cst.ImportFrom):
            self.do_import_from(node, env)
        return False

    def exec_if(self, node: cst.If, env: Env) -> bool:
        test = self.ev(node.test, env)
        truth = self.truth(test)
        orelse = node.orelse
        def run_else(e: Env) -> bool:
            if orelse is None:
                return False
            if isinstance(orelse, cst.If):
                return self.exec_if(orelse, e)
            return self.exec_block(orelse.body.body, e)
        self.batch_yield_idiom(node, env)
        accum = self.modulo_test(node.test, env)
        if accum is not None and self.loop_depth:
            # `if step % N != 0: continue` in a loop walked once for all its iterations: the counter's first
            # value does not decide it, each side runs on some iteration (the optimizer step on every N-th)
            truth = None
        def run_body(e: Env) -> bool:
            if accum is not None:
                self.accum.append(accum)
            try:
                return self.exec_block(node.body.body, e)
            finally:
                if accum is not None:
                    self.accum.pop()
        if truth is True and _only_raises(node.body):
            # a check that raises with the values memlint read (an option left at a default the script refuses):
            # a run that trains does not take it, so the rest of the file is read as if the check passed
            self.facts.note(f"the check at line {self.line_of(node)} raises with the values memlint read; the rest is "
                            "read as if it passed (pass the option the script requires)")
            return run_else(env)
        if truth is True:
            return run_body(env)
        if truth is False:
            if isinstance(orelse, cst.Else) and _only_raises(orelse.body):
                return False  # `else: raise ValueError(...)` at the end of a chain none of whose tests holds
            return run_else(env)
        return self.branches(env, [run_body, run_else], exhaustive=True)

    def branches(self, env: Env, runs: list, exhaustive: bool) -> bool:
        """Run each branch on its own copy of the scope and merge what they bind: names, and the
        attributes they assign in place (`cfg.quantization = "8bit"` under an unknown test is one value
        on one path, the old one on the other)."""
        before = dict(env.vars)
        results = []
        touched: dict = {}
        for run in runs:
            env.vars = dict(before)
            self.writes.append({})
            try:
                leaves = run(env)
            finally:
                log = self.writes.pop()
            results.append((leaves, env.vars, self._undo_writes(log, touched)))
        if not exhaustive:
            results.append((False, before, {}))
        live = [r for r in results if not r[0]] or results
        merged: dict[str, Any] = {}
        for _, vars_, _ in live:
            for k, v in vars_.items():
                if k in merged and merged[k] is not v:  # an import on one path only: read, to merge its value
                    merged[k] = merge(resolved(merged[k]), resolved(v))
                else:
                    merged[k] = v
        env.vars = merged
        self._merge_writes(touched, [r[2] for r in live])
        return all(r[0] for r in results)

    def write(self, mapping: dict, key: Any, value: Any, owner: Any) -> None:
        """mapping[key] = value (an object's attrs), remembered by the branch being walked."""
        if self.writes:
            self.writes[-1].setdefault((id(mapping), key), (mapping, key, key in mapping, mapping.get(key), owner))
        mapping[key] = value

    @staticmethod
    def _undo_writes(log: dict, touched: dict) -> dict:
        """What one branch assigned in place, put back as it was before the branch (the next starts there)."""
        final = {}
        for k, (mapping, key, had, old, owner) in log.items():
            touched.setdefault(k, (mapping, key, had, old, owner))
            final[k] = mapping.get(key, _ABSENT)
            if had:
                mapping[key] = old
            else:
                mapping.pop(key, None)
        return final

    def _merge_writes(self, touched: dict, finals: list[dict]) -> None:
        for k, (mapping, key, had, old, owner) in touched.items():
            vals = [f.get(k, old if had else _ABSENT) for f in finals]
            if all(v is _ABSENT for v in vals):
                continue
            if any(v is _ABSENT for v in vals) and isinstance(owner, Obj):
                unset = self.handlers.getattr(self, owner, key, None)  # read with the attribute unassigned
                vals = [unset if v is _ABSENT else v for v in vals]
            out = None
            for v in vals:
                if v is not _ABSENT:
                    out = v if out is None else merge(out, v)
            self.write(mapping, key, out, owner)

    def exec_loop(self, node: cst.For | cst.While, env: Env) -> None:
        micro = self.micro_batch_count(node, env)
        backward, steps = len(self.facts.backward), len(self.facts.steps)
        self._exec_loop(node, env)
        if micro is None and isinstance(node, cst.For) and len(self.facts.backward) > backward and len(self.facts.steps) == steps:
            # `for mb in batch.split(k): compute_loss_and_backward(mb)` then one step: the step accumulates a
            # number of backward passes memlint does not count (not 1)
            micro = Unknown(f"the number of micro-batches `for ... in {self.code(node.iter)}` runs before the "
                            f"optimizer step (line {self.line_of(node)})")
        if micro is not None:
            self.micro_accum = micro  # the optimizer step after it accumulates `micro` backward passes

    def micro_batch_count(self, node: cst.For | cst.While, env: Env) -> Any:
        """N of `for i in range(N): ... loss.backward()` with no optimizer step inside: a loop over
        micro-batches whose gradients the step after it applies at once (gradient accumulation)."""
        if not (isinstance(node, cst.For) and isinstance(node.iter, cst.Call) and self.dotted(node.iter.func) == "range"
                and len(node.iter.args) == 1):
            return None
        called = {n.func.attr.value for n in _walk(node.body) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)}
        if "backward" not in called or "step" in called:
            return None
        n = self.ev(node.iter.args[0].value, env)
        return n if isinstance(n, (Const, Alts)) else None

    def _exec_loop(self, node: cst.For | cst.While, env: Env) -> None:
        if isinstance(node, cst.For):
            it = self.ev(node.iter, env)
            known = self.known_items(it)
            if known is not None:  # a loop over a known, short sequence runs once per item, in order
                for item in known:
                    self.assign(node.target, item, env, node)
                    if self.exec_block(node.body.body, env):
                        break
                if node.orelse is not None:
                    self.exec_block(node.orelse.body.body, env)
                return
            if isinstance(node.iter, cst.Call) and self.dotted(node.iter.func) == "range" and len(node.iter.args) == 3 \
                    and isinstance(node.target, cst.Name):
                self.chunk_idiom(node.body, node.target.value, node.iter.args[2].value, env)

        carried = _loop_counters(node)

        def body(e: Env) -> bool:
            if isinstance(node, cst.For):
                items = self.iter_items(self.ev(node.iter, e))
                self.assign(node.target, items, e, node)
            for name in carried:  # `step += 1` in a loop walked once: its value differs on every iteration
                if e.lookup(name) is not None:
                    e.vars[name] = Unknown(f"{name}, which changes on every iteration of the loop at line {self.line_of(node)}")
            self.loop_depth += 1
            try:
                self.exec_block(node.body.body, e)
            finally:
                self.loop_depth -= 1
            return False
        if not isinstance(node, cst.For):
            self.ev(node.test, env)
            self.buffer_chunk_idiom(node, env)
        self.branches(env, [body], exhaustive=False)
        if node.orelse is not None:
            self.exec_block(node.orelse.body.body, env)

    @staticmethod
    def known_items(it: Any) -> list | None:
        """The items of a sequence known item by item (at most MAX_UNROLL), else None."""
        if isinstance(it, Seq) and len(it.items) <= MAX_UNROLL and not any(isinstance(x, Unknown) for x in it.items):
            return list(it.items)
        if isinstance(it, Const) and isinstance(it.value, (list, tuple)) and len(it.value) <= MAX_UNROLL:
            return [it.with_value(x) for x in it.value]
        return None

    def iter_items(self, it: Any) -> Any:
        opts = []
        for v in flatten(it):
            if isinstance(v, Seq):
                opts.extend(v.items)
            elif isinstance(v, Const) and isinstance(v.value, (list, tuple)):
                opts.extend(v.with_value(x) for x in v.value)
            elif isinstance(v, Range):
                opts.append(Unknown("a loop counter"))
            else:
                opts.append(Unknown("an item of a loop"))
        if not opts:
            return Unknown("an item of a loop")
        if len(opts) > budget.MAX_LOOP_ITEMS:
            return Unknown("an item of a loop over many values")
        out = opts[0]
        for o in opts[1:]:
            out = merge(out, o)
        return out

    def exec_with(self, node: cst.With, env: Env) -> None:
        for item in node.items:
            ctx = self.ev(item.item, env)
            if item.asname is not None:
                self.assign(item.asname.name, ctx, env, node)
        before = len(self.facts.objects)
        self.exec_block(node.body.body, env)
        if any(_empty_weights_context(item.item) for item in node.items):
            # `with init_empty_weights(): m = AutoModel.from_config(cfg)`: a skeleton without weights (a
            # checkpoint saver's, a device-map planner's), never the model a loop trains
            for o in self.facts.objects[before:]:
                if isinstance(o, Model):
                    o.empty = True

    def exec_try(self, node: cst.Try | cst.TryStar, env: Env) -> None:
        handlers = [lambda e, h=h: self.exec_block(h.body.body, e) for h in node.handlers]
        raised = False
        if handlers and all(isinstance(st, cst.SimpleStatementLine) and all(isinstance(x, _PLAIN_SMALL) for x in st.body)
                            for st in node.body.body):
            # A body of plain assignments is walked once: a call in it that raises (RaisedBy) runs the
            # handlers; a body that binds only constants raised nothing; otherwise either may have run.
            before = dict(env.vars)
            self.exec_block(node.body.body, env)
            bound = [v for k, v in env.vars.items() if before.get(k) is not v]
            raised = any(isinstance(x, RaisedBy) for v in bound for x in flatten(v))
            if raised:
                self.branches(env, handlers, exhaustive=True)
            elif not all(isinstance(x, Const) for v in bound for x in flatten(v)):
                self.branches(env, handlers, exhaustive=False)
        else:
            self.branches(env, [lambda e: self.exec_block(node.body.body, e), *handlers], exhaustive=True)
        if node.orelse is not None and not raised:
            self.exec_block(node.orelse.body.body, env)
        if node.finalbody is not None:
            self.exec_block(node.finalbody.body.body, env)

    # ---- binding ---------------------------------------------------------------------------

    def assign(self, target: cst.CSTNode, value: Any, env: Env, stmt: cst.CSTNode) -> None:
        if isinstance(target, cst.Name) and getattr(stmt, "value", None) is not None:
            prev = self.pad_counts.get(target.value)
            if prev is not None and any(isinstance(n, cst.Name) and n.value == target.value for n in _walk(stmt.value)):
                self.pad_prior[id(stmt.value)] = prev  # max_len = min(max_len, cap): the max_len before
            self.pad_counts[target.value] = stmt.value  # the expression a name was last bound to
        if isinstance(target, cst.Name):
            if type(value) is Ref:
                value = Ref(value.qual, self.line_of(stmt), "constant")
            elif isinstance(value, (Const, Seq, Dict)):
                value = _named(value, f"{target.value} = {self.code(stmt.value) if getattr(stmt, 'value', None) is not None else '…'} (line {self.line_of(stmt)})")
            env.vars[target.value] = value
        elif isinstance(target, (cst.Tuple, cst.List)):
            elts = target.elements
            star = next((i for i, e in enumerate(elts) if isinstance(e, cst.StarredElement)), None)
            for i, el in enumerate(elts):
                t = el.value
                if star is not None and i >= star:
                    item = Unknown("a starred unpacking")
                else:
                    item = self.unpack(value, i, len(elts))
                self.assign(t, item, env, stmt)
        elif isinstance(target, cst.Attribute):
            base = self.ev(target.value, env)
            for b in flatten(base):
                if isinstance(b, Obj):
                    self.write(b.attrs, target.attr.value, value, b)
                    self.handlers.on_setattr(self, b, target.attr.value, value, self.line_of(stmt))
                elif isinstance(b, Method):  # model.transformer.x = v: a part of a known object
                    self.handlers.on_sub_setattr(self, b.obj, b.name, target.attr.value, value, self.line_of(stmt))
        elif isinstance(target, cst.Subscript):
            base = self.ev(target.value, env)
            key = self.subscript_key(target, env)
            for b in flatten(base):
                if isinstance(b, Dict):
                    if isinstance(key, Const) and insert_fits(b, value):
                        # a dict item keeps its last write (readers of built config dicts take one value)
                        b.items[key.value] = value
                    else:
                        b.open = True
                elif isinstance(b, GlobalsView) and isinstance(key, Const) and isinstance(key.value, str):
                    b.env.vars[key.value] = value
                elif isinstance(b, Fields) and isinstance(key, Const) and isinstance(key.value, str):
                    self.write(b.obj.attrs, key.value, value, b.obj)  # vars(args)["lr"] = v sets args.lr

    def unpack(self, value: Any, i: int, n: int) -> Any:
        out = None
        for v in flatten(value):
            if isinstance(v, Seq) and len(v.items) == n:
                item = v.items[i]
            elif isinstance(v, Const) and isinstance(v.value, (list, tuple)) and len(v.value) == n:
                item = v.with_value(v.value[i])
            else:
                item = Unknown(v.why if isinstance(v, Unknown) else "an unpacked value")
            out = item if out is None else merge(out, item)
        return out

    def dotted(self, node: cst.CSTNode) -> str:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Attribute):
            return f"{self.dotted(node.value)}.{node.attr.value}"
        return ""

    # ---- definitions -----------------------------------------------------------------------

    def def_function(self, node: cst.FunctionDef, env: Env) -> None:
        f = Func(node, env, self.mod, node.name.value)
        p = node.params
        for param in [*p.posonly_params, *p.params, *p.kwonly_params]:
            if param.default is not None:
                f.defaults[param.name.value] = self.ev(param.default, env)
                f.default_source[param.name.value] = ("function-default", f"def {node.name.value}({param.name.value}={self.code(param.default)})", self.line_of(param), self.cur_file())
        value: Any = f
        for deco in node.decorators:
            value = self.handlers.decorate(self, f, deco.decorator, env) or value
        env.vars[node.name.value] = value
        self.funcs.append(f)
        if f.cli == "fastcore" and self.mod is not None and self.mod.is_main:
            # fastcore's @call_parse runs the function as it decorates it when the module is __main__
            self.call_function(f, [], {}, self.line_of(node), entry=True)

    def def_class(self, node: cst.ClassDef, env: Env) -> None:
        bases = Bases(self.base_value(a.value, env) for a in node.bases if not a.keyword)
        decos = [self.dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) for d in node.decorators]
        is_dc = any(d.split(".")[-1] == "dataclass" for d in decos)
        fields: dict[str, Any] = {}
        lines: dict[str, int | None] = {}
        cls_env = Env(env)
        methods: dict[str, Func] = {}
        for stmt in node.body.body:
            if isinstance(stmt, cst.FunctionDef):
                f = Func(stmt, env, self.mod, f"{node.name.value}.{stmt.name.value}")
                p = stmt.params
                for param in [*p.posonly_params, *p.params, *p.kwonly_params]:
                    if param.default is not None:
                        f.defaults[param.name.value] = self.ev(param.default, env)
                        f.default_source[param.name.value] = ("function-default", f"def {stmt.name.value}({param.name.value}={self.code(param.default)})", self.line_of(param), self.cur_file())
                methods[stmt.name.value] = f
                continue
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                        name = small.target.value
                        fields[name] = self.field_default(small.value, cls_env) if small.value is not None else Unknown(f"field {name} has no default")
                        lines[name] = self.line_of(small)
                    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                        name = small.targets[0].target.value
                        cls_env.vars[name] = self.ev(small.value, cls_env)
                        if not is_dc:
                            fields[name] = cls_env.vars[name]
                            lines[name] = self.line_of(small)
        cls = Class(node.name.value, bases, fields, lines, self.line_of(node), is_dc, self.cur_file(), methods)
        for f in methods.values():
            f.owner = cls
        env.vars[node.name.value] = cls

    def field_default(self, value: cst.CSTNode, env: Env) -> Any:
        if isinstance(value, cst.Call) and self.dotted(value.func).split(".")[-1] == "field":
            for a in value.args:
                if a.keyword is not None and a.keyword.value == "default":
                    return self.ev(a.value, env)
                if a.keyword is not None and a.keyword.value == "default_factory":
                    return self.default_factory(a.value, env)
            return Unknown("a field without a default")
        return self.ev(value, env)

    def default_factory(self, node: cst.CSTNode, env: Env) -> Any:
        """field(default_factory=lambda: TrainingArguments(...)) / default_factory=ModelArgs / =list: the value
        the factory builds, built once where the class is defined (each instance starts from it)."""
        factory = self.ev(node, env)
        if isinstance(factory, Func):
            return self.call_function(factory, [], {}, self.line_of(node))
        if isinstance(factory, Ref) and factory.qual in ("builtins.list", "builtins.tuple"):
            return Seq([], "list" if factory.qual == "builtins.list" else "tuple")
        if isinstance(factory, Ref) and factory.qual == "builtins.dict":
            return Dict({})
        if isinstance(factory, (Class, Ref)):
            return self.handlers.call(self, factory, [], {}, False, self.line_of(node), node)
        return Unknown("a default_factory")

    # ---- calls into the script's own functions ---------------------------------------------

    def call_function(self, f: Func, args: list, kwargs: dict, line: int | None, entry: bool = False) -> Any:
        if self.stack.count(f) >= MAX_RECURSION or len(self.stack) >= MAX_DEPTH or f.calls >= MAX_CALLS_PER_FUNC \
                or self.steps > MAX_STEPS:
            if self.steps > MAX_STEPS:
                self.facts.note("the script is too large to follow every call; some values may be unknown")
            return Unknown(f"the result of {f.qual}()")
        f.ran = True
        f.calls += 1
        if f.module is not None and f.module.only is not None:
            self.read_body(f)
        if f.click and not args and not kwargs:  # a @click.command entry: click supplies every option
            kwargs = self.handlers.click_arguments(self, f)
        elif f.typer and not args and not kwargs:  # an @app.command() entry: typer fills it from the command
            args, kwargs = self.handlers.typer_arguments(self, f)
        elif f.cli and not args and not kwargs:  # @call_parse: fastcore fills it from the command
            kwargs = self.handlers.cli_arguments(self, f)
        env = Env(f.env)
        node = f.node
        params = node.params
        positional = [*params.posonly_params, *params.params]
        for i, param in enumerate(positional):
            name = param.name.value
            if i < len(args):
                env.vars[name] = args[i]
            elif name in kwargs:
                env.vars[name] = kwargs[name]
            else:
                env.vars[name] = self.param_default(f, name)
        for param in params.kwonly_params:
            name = param.name.value
            env.vars[name] = kwargs[name] if name in kwargs else self.param_default(f, name)
        if isinstance(params.star_arg, cst.Param):
            env.vars[params.star_arg.name.value] = self.sized(Seq(list(args[len(positional):]), "tuple"), args)
        if params.star_kwarg is not None:
            known = {p.name.value for p in [*positional, *params.kwonly_params]}
            env.vars[params.star_kwarg.name.value] = Dict({k: v for k, v in kwargs.items() if k not in known})
        prev_mod, self.mod = self.mod, f.module
        prev_entry = self.entry_line
        if (prev_mod is None or prev_mod.is_main) and f.module is not None and not f.module.is_main:
            self.entry_line = line
        self.stack.append(f)
        self.returns.append([])
        try:
            if isinstance(node, cst.Lambda):
                result = self.ev(node.body, env)
                self.returns[-1].append(result)
            else:
                body = node.body.body
                self.exec_block(body, env)
        finally:
            rets = self.returns.pop()
            self.stack.pop()
            self.mod = prev_mod
            self.entry_line = prev_entry
        if not rets:
            return Const(None, "literal", None)
        out = rets[0]
        for r in rets[1:]:
            out = merge(out, r)
        if (isinstance(out, (Unknown, Seq, Alts)) or isinstance(out, Const) and isinstance(out.value, (list, tuple, set))) \
                and not isinstance(node, cst.Lambda) and _lists_linear_names(node):
            return self.const("all-linear", node, "constant",
                              (f"{f.qual}(): the names of every Linear of model.named_modules() but lm_head "
                               "(peft's all-linear)",))
        return out

    def param_default(self, f: Func, name: str) -> Any:
        if name not in f.defaults:
            return Unknown(f"parameter {name} of {f.qual}()")
        v = f.defaults[name]
        source, how, line, file = f.default_source.get(name, ("function-default", f"{f.qual}({name}=…)", None, None))
        return self._via(v, source, how, line, file)

    def _via(self, v: Any, source: str, how: str, line: int | None, file: str | None) -> Any:
        if isinstance(v, Const):
            return v.via(source, how, line, file)
        if isinstance(v, Alts):
            return Alts(tuple(self._via(o, source, how, line, file) for o in v.options))
        if isinstance(v, Seq):
            return self.sized(Seq([self._via(x, source, how, line, file) for x in v.items], v.kind), v.items)
        return v

    # ---- expressions -----------------------------------------------------------------------

    def truth(self, v: Any) -> bool | None:
        vals = set()
        for o in flatten(v):
            if isinstance(o, Const):
                try:
                    vals.add(bool(o.value))
                except Exception:
                    return None
            elif isinstance(o, (Obj, Func, Class, Ref, ModuleVal, SiblingModule)):
                vals.add(True)
            else:
                return None
        return vals.pop() if len(vals) == 1 else None

    def batch_yield_idiom(self, node: cst.If, env: Env) -> None:
        """`if len(batch) == n: yield collate(batch)` (or >= n): a generator that yields whole batches of n."""
        from memlint.extract.objects import BatchYield

        test = node.test
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, (cst.Equal, cst.GreaterThanEqual))
                and isinstance(test.left, cst.Call) and self.dotted(test.left.func) == "len"):
            return
        if not any(isinstance(n, cst.Yield) for stmt in node.body.body for n in _walk(stmt)):
            return
        n = self.ev(test.comparisons[0].comparator, env)
        self.facts.batch_yields.append(BatchYield(n, self.line_of(node), self.cur_file()))

    def modulo_test(self, test: cst.CSTNode, env: Env, depth: int = 0) -> Any:
        """N in `if step % N == 0:` (gradient accumulation in a hand-written loop), also through a name
        bound to that test (`accumulate = (i + 1) % N == 0` ... `if accumulate:`)."""
        if isinstance(test, cst.Name) and test.value in self.pad_counts and depth < 2:
            return self.modulo_test(self.pad_counts[test.value], env, depth + 1)
        if isinstance(test, cst.BooleanOperation):
            return self.modulo_test(test.left, env, depth) or self.modulo_test(test.right, env, depth)
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            left = test.left
            if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo):
                n = self.ev(left.right, env)
                return n
        return None

    def ev(self, node: cst.CSTNode, env: Env) -> Any:
        try:
            return self._ev(node, env)
        except RecursionError:
            return Unknown("too deeply nested")

    def _ev(self, node: cst.CSTNode, env: Env) -> Any:
        t = type(node)
        if t is cst.Integer or t is cst.Float:
            try:
                return self.const(node.evaluated_value, node)
            except (ValueError, SyntaxError, OverflowError):  # past int()'s digit limit: Python refuses it too
                return Unknown("a number Python cannot convert")
        if t is cst.SimpleString:
            return self.const(_string_value(node), node)
        if t is cst.ConcatenatedString:
            try:
                return self.const(node.evaluated_value, node)
            except Exception:
                return Unknown("a string")
        if t is cst.Name:
            return self.name(node, env)
        if t is cst.Attribute:
            v = self.attribute(self.ev(node.value, env), node.attr.value, node)
            if type(v) is Ref:
                v = Ref(v.qual, self.line_of(node), "literal")
            return v
        if t is cst.Call:
            return self.call(node, env)
        if t is cst.BinaryOperation:
            if type(node.operator) is cst.Multiply:
                self.hand_pad_idiom(node, env)
            return self.binop(type(node.operator).__name__, self.ev(node.left, env), self.ev(node.right, env), node)
        if t is cst.UnaryOperation:
            return self.unary(node, self.ev(node.expression, env))
        if t is cst.BooleanOperation:
            return self.boolop(node, env)
        if t is cst.Comparison:
            return self.compare(node, env)
        if t is cst.IfExp:
            truth = self.truth(self.ev(node.test, env))
            if truth is True:
                return self.ev(node.body, env)
            if truth is False:
                return self.ev(node.orelse, env)
            return merge(self.ev(node.body, env), self.ev(node.orelse, env))
        if t is cst.FormattedString:
            return self.fstring(node, env)
        if t in (cst.List, cst.Tuple, cst.Set):
            return self.sequence(node, env)
        if t is cst.Dict:
            return self.dict_display(node, env)
        if t is cst.Subscript:
            return self.subscript(node, env)
        if t is cst.Lambda:
            return Func(node, env, self.mod, "<lambda>")
        if t is cst.NamedExpr:
            v = self.ev(node.value, env)
            self.assign(node.target, v, env, node)
            return v
        if t in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
            return self.comprehension(node, env)
        if t is cst.DictComp:
            out = self.comprehension(node, env)
            return out if isinstance(out, Dict) else Unknown("a dict comprehension")
        if t is cst.Ellipsis:
            return Const(..., "literal", self.line_of(node))
        if t is cst.Imaginary:
            return self.const(node.evaluated_value, node)
        if t in (cst.Await, cst.Yield):
            return Unknown("an await/yield")
        return Unknown(f"a {t.__name__}")

    def sequence(self, node: cst.List | cst.Tuple | cst.Set, env: Env) -> Any:
        items = []
        for el in node.elements:
            if isinstance(el, cst.StarredElement):
                inner = self.ev(el.value, env)
                if isinstance(inner, Seq):
                    items.extend(inner.items)
                    continue
                return Unknown("a starred list")
            items.append(self.ev(el.value, env))
        return self.sized(Seq(items, "tuple" if type(node) is cst.Tuple else "list"), items)

    def dict_display(self, node: cst.Dict, env: Env) -> Dict:
        d = Dict({})
        for el in node.elements:
            if isinstance(el, cst.StarredDictElement):
                inner = self.ev(el.value, env)
                if isinstance(inner, Dict):
                    d.items.update(inner.items)
                    d.open |= inner.open
                else:
                    d.open = True
                continue
            k = self.ev(el.key, env)
            if isinstance(k, Const):
                d.items[k.value] = self.ev(el.value, env)
            else:
                d.open = True
        return self.sized(d, d.items.values())

    def name(self, node: cst.Name, env: Env) -> Any:
        n = node.value
        if n in ("True", "False", "None"):
            return self.const({"True": True, "False": False, "None": None}[n], node)
        v = env.lookup(n)
        if v is not None:
            return v
        if n in _BUILTIN_CALLS or n in ("range", "print", "open", "getattr", "input", "dict", "isinstance", "vars", "enumerate", "zip", "map", "filter", "set", "super", "type", "hasattr", "setattr", "iter", "next", "any", "all"):
            return Ref(f"builtins.{n}")
        if self.env_keys:
            v = self.global_name(env, n)
            if v is not None:
                return v
        if self.stars:
            v = self.star_name(env, n)
            if v is not None:
                return v
        for mod in self.star_imports:
            return Ref(f"{mod}.{n}")
        return Unknown(f"the name {n}")

    def attribute(self, base: Any, attr: str, node: cst.CSTNode) -> Any:
        if isinstance(base, Alts):
            out = None
            for o in base.options:
                v = self.attribute(o, attr, node)
                out = v if out is None else merge(out, v)
            return out
        if isinstance(base, Ref):
            if attr == "__name__":  # AutoModelForCausalLM.__name__: registries keyed by class name
                return self.const(base.name, node)
            special = self.handlers.module_attribute(self, base.qual, attr, node)
            return special if special is not None else Ref(f"{base.qual}.{attr}")
        if isinstance(base, SiblingModule):
            return self.module_attribute(base, attr)
        if isinstance(base, ModuleVal):
            v = self.module_name(base.env, attr)
            return resolved(v) if v is not None else Unknown(f"{base.name}.{attr}")
        if isinstance(base, Obj) and attr == "__dict__":  # args.__dict__: vars(args)
            return Fields(base)
        if isinstance(base, Obj):
            return self.handlers.getattr(self, base, attr, self.line_of(node))
        if isinstance(base, SuperOf):
            for b in base.cls.bases:
                hit = b.lookup(attr) if isinstance(b, Class) else None
                if hit is not None:
                    return BoundMethod(hit[1], base.instance) if hit[0] == "method" else hit[1]
            # a library base (nn.Module, Dataset, Trainer): its __init__ and methods do nothing memlint follows
            return Ref("builtins.object") if attr == "__init__" else Unknown(f"super().{attr}")
        if isinstance(base, Class):
            if attr == "__name__":
                return self.const(base.name, node)
            hit = base.lookup(attr)
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func) and _is_classmethod(hit[1]):
                return BoundMethod(hit[1], base)  # Config.from_name("7B"): `cls` is the class
            if hit is None:  # a checkout subclass of a transformers model: from_pretrained is transformers'
                loader = self.handlers.checkout_loader(base, attr)
                if loader is not None:
                    return loader
            return hit[1] if hit is not None else Unknown(f"{base.name}.{attr}")
        if isinstance(base, Const) and isinstance(base.value, str):
            return BoundStr(base, attr)
        if isinstance(base, Fields) and attr in ("update", "setdefault"):  # args.__dict__.update(cfg): sets fields
            return DictMethod(base, attr)
        if isinstance(base, Fields) and attr in _DICT_METHODS:  # vars(args).items(): the fields as a dict
            d = self.handlers.fields_dict(self, base.obj)
            return DictMethod(d, attr) if d is not None else Unknown(f"vars({base.obj.cls}).{attr}()")
        if isinstance(base, Dict):
            if attr in base.items:  # OmegaConf DictConfig, EasyDict, munch: keys as attributes
                return base.items[attr]
            if attr in _DICT_METHODS:
                return DictMethod(base, attr)
            return Unknown(f"{attr} of a config memlint read" if not base.open else f"{attr} (a key memlint cannot see)")
        if isinstance(base, Seq) and attr in ("index", "count"):
            return SeqMethod(base, attr)
        if isinstance(base, OpenFile):
            return base if attr in ("read", "read_text", "readlines", "__enter__") else Unknown(f"file.{attr}")
        if isinstance(base, Unknown):
            return BoundUnknown(base.why or "something unknown", base.line, attr)
        return Unknown(f"attribute {attr}")

    def subscript_key(self, node: cst.Subscript, env: Env) -> Any:
        if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
            return Unknown("a slice")
        return self.ev(node.slice[0].slice.value, env)

    def slice_of(self, base: Any, node: cst.Subscript, env: Env) -> Any:
        """seq[a:b] over a known sequence or string with constant bounds."""
        sl = node.slice[0].slice
        bounds = self._slice_bounds(sl, env)
        if bounds is None:
            return Unknown("a slice with unknown bounds")
        self._slice_cap(sl, bounds, env)
        s = slice(*bounds)
        out = None
        for b in flatten(base):
            if isinstance(b, Seq):
                v: Any = Seq(b.items[s], b.kind)
            elif isinstance(b, Const) and isinstance(b.value, (str, list, tuple)):
                v = b.with_value(b.value[s], "[…]")
            else:
                v = b if isinstance(b, Unknown) else Unknown("a slice")
            out = v if out is None else merge(out, v)
        return out

    def trim_to_longest(self, sl: cst.Slice) -> None:
        """`input_ids[:, :lengths.max() + 1]`: a padded batch cut to its longest row (a collator that trims
        what was stored at a fixed width): padding to the longest of the batch."""
        from memlint.extract.objects import HandPad

        up = sl.upper
        if sl.lower is not None or up is None or (self.stack and _reporting(self.stack[-1].qual)):
            return
        names = [n.value for n in _walk(up) if isinstance(n, cst.Name)]
        code = self.code(up) + " " + " ".join(self.code(self.pad_counts[n]) for n in names if n in self.pad_counts)
        if "max(" in code or ".max()" in code:
            self.facts.hand_pads.append(HandPad("longest", None, self.line_of(sl), self.cur_file()))

    def _slice_bounds(self, sl: cst.Slice, env: Env) -> list | None:
        """[lower, upper, step] of a slice with constant (or absent) bounds, else None."""
        bounds = []
        for part in (sl.lower, sl.upper, sl.step):
            if part is None:
                bounds.append(None)
                continue
            v = self.ev(part, env)
            if not (isinstance(v, Const) and (v.value is None or isinstance(v.value, int))):
                return None
            bounds.append(v.value)
        return bounds

    def _slice_cap(self, sl: cst.Slice, bounds: list, env: Env) -> None:
        """`ids[:max_length]`: a hand truncation to the script's own length (a name the length
        vocabulary knows, data/library_api.json, in any case and under a prefix: a local `MAX_LENGTH = 1024`
        of a map function, a collate function's `allowed_max_length`) is the script's length argument too."""
        from memlint.extract.objects import LengthArg

        lower, upper, step = bounds
        up = sl.upper
        key = up.slice[0].slice.value if isinstance(up, cst.Subscript) and len(up.slice) == 1 \
            and isinstance(up.slice[0].slice, cst.Index) else None
        name = up.value if isinstance(up, cst.Name) else up.attr.value if isinstance(up, cst.Attribute) \
            else key.evaluated_value if isinstance(key, cst.SimpleString) else None  # args["context_length"]
        if name is not None and _length_name(name) and lower in (None, 0) and step is None and isinstance(upper, int) \
                and not isinstance(upper, bool) and upper > 0:
            v = self.ev(sl.upper, env)
            line = self.line_of(sl.upper)
            self.facts.length_args.append(LengthArg(name, v.with_value(upper, f"truncates by slicing [:{name}] (line {line})"), line))

    def subscript(self, node: cst.Subscript, env: Env) -> Any:
        base = self.ev(node.value, env)
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Slice):
            return self.slice_of(base, node, env)
        if len(node.slice) > 1 and isinstance(node.slice[-1].slice, cst.Slice):
            # a tensor cut along its last dimension: pad_sequence(...)[:, :max_len]
            bounds = self._slice_bounds(node.slice[-1].slice, env)
            if bounds is not None:
                self._slice_cap(node.slice[-1].slice, bounds, env)
            else:
                self.trim_to_longest(node.slice[-1].slice)
        key = self.subscript_key(node, env)
        out = None
        for b in flatten(base):
            v: Any
            if not isinstance(key, Const):
                v = Unknown("an item with an unknown key")
            elif isinstance(b, Seq) and isinstance(key.value, int) and -len(b.items) <= key.value < len(b.items):
                v = b.items[key.value]
            elif isinstance(b, Dict) and _hashable(key.value) and key.value in b.items:
                v = b.items[key.value]
                if isinstance(key.value, str) and key.value in api.length_arguments():
                    from memlint.extract.objects import LengthArg  # args["context_length"]: the script's length argument

                    self.facts.length_args.append(LengthArg(key.value, v, self.line_of(node)))
            elif isinstance(b, GlobalsView) and isinstance(key.value, str) and key.value in b.env.vars:
                v = resolved(b.env.vars[key.value])
            elif isinstance(b, Const) and isinstance(b.value, (list, tuple, dict, str)):
                try:
                    v = b.with_value(b.value[key.value], f"[{key.value!r}]")
                except Exception:
                    v = Unknown("an item")
            elif isinstance(b, Fields) and isinstance(key.value, str):  # vars(args)["lr"]: the field
                v = self.handlers.getattr(self, b.obj, key.value, self.line_of(node))
            elif isinstance(b, Obj):
                v = self.handlers.getitem(self, b, key, self.line_of(node))
            elif isinstance(b, Ref):
                v = self.handlers.ref_item(self, b, key, self.line_of(node))
            else:
                v = Unknown("an item")
            out = v if out is None else merge(out, v)
        return out if out is not None else Unknown("an item")

    def binop(self, op: str, a: Any, b: Any, node: cst.CSTNode) -> Any:
        fa, fb = flatten(a), flatten(b)
        if len(fa) * len(fb) > MAX_ALTS:
            return Unknown("too many combinations")
        out = None
        for x in fa:
            for y in fb:
                v = self._binop1(op, x, y, node)
                out = v if out is None else merge(out, v)
        return out

    def _binop1(self, op: str, a: Any, b: Any, node: cst.CSTNode) -> Any:
        if isinstance(a, Const) and isinstance(b, Const) and op in _BINOPS:
            if not budget.binop_fits(op, a.value, b.value):
                return self.over()
            try:
                if op == "Power" and isinstance(b.value, (int, float)) and abs(b.value) > 64:
                    return Unknown("a large power")
                if op == "Modulo" and isinstance(a.value, str):
                    value = a.value % b.value
                else:
                    value = _BINOPS[op](a.value, b.value)
            except Exception:
                return Unknown("an expression that would raise")
            return self._combine(value, node, a, b)
        if isinstance(a, Seq) and isinstance(b, Seq) and op == "Add":
            return self.sized(Seq(a.items + b.items, a.kind), (a, b))
        if isinstance(a, Dict) and isinstance(b, Dict) and op == "BitOr":
            return self.sized(Dict({**a.items, **b.items}, a.open or b.open), (a, b))
        for x in (a, b):
            if isinstance(x, Unknown):
                return x
        return Unknown("an expression over non-constants")

    def _combine(self, value: Any, node: cst.CSTNode, *parts: Const) -> Const:
        if not budget.fits(value):
            return self.over()
        src = weakest(*(p.source for p in parts))
        if src == "literal":
            return self.const(value, node)
        lead = next(p for p in parts if p.source != "literal")
        chain = tuple(c for p in parts for c in p.chain)
        return Const(value, src, lead.line, budget.capped(chain + (f"{self.code(node)} = {budget.shown(value)}",)), lead.file)

    def unary(self, node: cst.UnaryOperation, v: Any) -> Any:
        op = type(node.operator).__name__
        out = None
        for x in flatten(v):
            if op == "Not":
                truth = self.truth(x)
                r = self._combine(not truth, node, x) if truth is not None and isinstance(x, Const) else (
                    self.const(not truth, node) if truth is not None else Unknown(x.why if isinstance(x, Unknown) else "a negation"))
            elif isinstance(x, Const) and isinstance(x.value, (int, float)):
                r = self._combine({"Minus": -x.value, "Plus": +x.value}.get(op, x.value), node, x) if op in ("Minus", "Plus") else Unknown("a bitwise op")
            else:
                r = x if isinstance(x, Unknown) else Unknown("a unary op")
            out = r if out is None else merge(out, r)
        return out

    def boolop(self, node: cst.BooleanOperation, env: Env) -> Any:
        left = self.ev(node.left, env)
        truth = self.truth(left)
        is_and = isinstance(node.operator, cst.And)
        if truth is None:
            right = self.ev(node.right, env)
            rt = self.truth(right)
            if is_and and rt is False:
                return right
            if not is_and and rt is True:
                return right
            return merge(left, right)
        if is_and:
            return self.ev(node.right, env) if truth else left
        return left if truth else self.ev(node.right, env)

    def compare(self, node: cst.Comparison, env: Env) -> Any:
        left = self.ev(node.left, env)
        result: Any = None
        for ct in node.comparisons:
            right = self.ev(ct.comparator, env)
            op = type(ct.operator).__name__
            fl, fr = flatten(left), flatten(right)
            if len(fl) * len(fr) > MAX_ALTS:
                return Unknown("a comparison over too many values")
            r: Any = None
            for a in fl:  # a name that holds one of several values: each pair, the outcomes merged
                for b in fr:
                    one = self._compare_pair(op, a, b, node, ct)
                    if isinstance(one, Unknown):
                        return one
                    r = one if r is None else merge(r, one)
            if isinstance(r, Const) and result is not None and not result.value:
                return result
            if not isinstance(r, Const) and result is not None:
                return Unknown("a chained comparison over several values")
            result = r
            left = right
        return result

    def _compare_pair(self, op: str, left: Any, right: Any, node: cst.Comparison, ct: Any) -> Any:
        if op in ("In", "NotIn") and isinstance(right, (Dict, GlobalsView)) and isinstance(left, Const) \
                and _hashable(left.value) and not getattr(right, "open", False):
            keys = right.items if isinstance(right, Dict) else right.env.vars  # membership needs only the keys
            right = self.const(list(keys), ct.comparator)
        elif op in ("In", "NotIn") and isinstance(right, (Seq, Dict)):
            right = to_python(right)  # `x in ("yes", "true")`: a container of constants
        if isinstance(left, Const) and isinstance(right, Const) and op in _CMPOPS:
            try:
                return self._combine(bool(_CMPOPS[op](left.value, right.value)), node, left, right)
            except Exception:
                return Unknown("a comparison that would raise")
        if op in ("Is", "IsNot") and isinstance(right, Const) and right.value is None and isinstance(left, (Obj, Func, Class, Seq, Dict)):
            return self.const(op == "IsNot", node)
        if op in ("Equal", "NotEqual", "Is", "IsNot") and _builtin_type(left) and _builtin_type(right):
            return self.const((left.qual == right.qual) == (op in ("Equal", "Is")), node)  # type(x) == type(True)
        if op in ("Equal", "NotEqual", "Is", "IsNot") and _dtype_ref(left) and _dtype_ref(right):
            # `bf16 = dtype == torch.bfloat16`: two torch dtypes (an alias such as torch.half compares equal)
            same = _dtype_ref(left) == _dtype_ref(right)
            lead = left if isinstance(left, Const) else right if isinstance(right, Const) else None
            value = same == (op in ("Equal", "Is"))
            if lead is not None:
                return lead.with_value(value, f"{self.code(node)} = {value}")
            src = weakest(*(getattr(x, "source", "literal") for x in (left, right)))
            return Const(value, src, self.line_of(node), (f"{self.code(node)} = {value}",), self.cur_file())
        return Unknown(left.why if isinstance(left, Unknown) else "a comparison")

    def fstring(self, node: cst.FormattedString, env: Env) -> Any:
        parts: list[str] = []
        consts: list[Const] = []
        total = 0
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                parts.append(part.value)
                continue
            v = self.ev(part.expression, env)
            if not isinstance(v, Const):
                return Unknown(v.why if isinstance(v, Unknown) else "an f-string over non-constants")
            spec = ""
            if part.format_spec:
                if not all(isinstance(s, cst.FormattedStringText) for s in part.format_spec):
                    return Unknown("an f-string with a computed format")
                spec = "".join(s.value for s in part.format_spec)
            if not budget.spec_fits(spec):
                return self.over()
            try:
                val = v.value
                if part.conversion == "r":
                    val = repr(val)
                elif part.conversion in ("s", "a"):
                    val = str(val)
                parts.append(format(val, spec))
            except Exception:
                return Unknown("an f-string that would raise")
            total += len(parts[-1])
            if total > budget.MAX_STR:
                return self.over()
            consts.append(v)
        text = "".join(parts)
        if not consts:
            return self.const(text, node)
        return self._combine(text, node, *consts)

    def comprehension(self, node: Any, env: Env) -> Any:
        """A comprehension over a known short sequence (one `for`, no `if`) is evaluated item by item;
        any other is walked once with the loop names bound. Spots the chunking idiom."""
        exact = self.exact_comprehension(node, env)
        if exact is not None:
            return exact
        inner = Env(env)
        comp = node.for_in
        ranges, offsets = [], []
        while comp is not None:
            it = comp.iter
            if isinstance(it, cst.Call) and self.dotted(it.func) == "range" and len(it.args) == 3 and isinstance(comp.target, cst.Name):
                ranges.append((comp.target.value, it.args[2].value))
            items = self.ev(comp.iter, inner)
            if isinstance(items, RandomOffsets) and isinstance(comp.target, cst.Name):
                offsets.append((comp.target.value, items))
            self.assign(comp.target, self.iter_items(items), inner, node)
            comp = comp.inner_for_in
        elt = node.value if isinstance(node, cst.DictComp) else getattr(node, "elt", None)
        if elt is not None:
            for var, step in ranges:
                self.chunk_idiom(elt, var, step, inner)
            for var, ro in offsets:
                self.window_idiom(elt, var, ro, inner)
            self.ev(elt, inner)
        return Unknown("a comprehension")

    def exact_comprehension(self, node: Any, env: Env) -> Any:
        comp = node.for_in
        if comp.inner_for_in is not None:
            return None
        items = self.known_items(self.ev(comp.iter, env))
        if items is None:
            return None
        out = []
        keyed: dict = {}
        for item in items:
            inner = Env(env)
            self.assign(comp.target, item, inner, node)
            keep = True
            for cond in comp.ifs:
                truth = self.truth(self.ev(cond.test, inner))
                if truth is None:
                    return None
                keep = keep and truth
            if not keep:
                continue
            if isinstance(node, cst.DictComp):
                key = self.ev(node.key, inner)
                if not (isinstance(key, Const) and _hashable(key.value)):
                    return None
                keyed[key.value] = self.ev(node.value, inner)
            else:
                out.append(self.ev(node.elt, inner))
        if isinstance(node, cst.DictComp):
            return Dict(keyed)
        return Seq(out, "tuple" if isinstance(node, cst.GeneratorExp) else "list")

    def hand_pad_idiom(self, node: cst.BinaryOperation, env: Env) -> None:
        """`[pad] * (n - len(ids))`: padding to n. n written as min(max(lengths), cap) pads to the
        batch's longest, capped; a known n pads every sample to it."""
        for lst, count in ((node.left, node.right), (node.right, node.left)):
            if not (isinstance(lst, cst.List) and len(lst.elements) == 1):
                continue
            if isinstance(count, cst.Name) and count.value in self.pad_counts:
                count = self.pad_counts[count.value]  # padding_len = max_len - len(ids); [pad] * padding_len
            if not (isinstance(count, cst.BinaryOperation) and isinstance(count.operator, cst.Subtract)):
                continue
            if not self.is_length(count.right):
                continue
            self.record_pad(count.left, self.line_of(node), env)
            return

    def is_length(self, node: cst.CSTNode) -> bool:
        """`len(ids)`, `x.size(-1)`, `x.shape[1]`, or a name bound to one (`l = x.size(-1)`)."""
        if isinstance(node, cst.Name) and node.value in self.pad_counts:
            node = self.pad_counts[node.value]
        code = self.code(node)
        return "len(" in code or "size" in code or "shape" in code

    def tensor_pad_idiom(self, node: cst.Call, env: Env) -> None:
        """`torch.full((1, n - l), pad)`, `F.pad(x, (0, n - x.size(-1)), value=pad)`: a tensor
        padded by hand to n (n the batch's longest when it is a max over the batch)."""
        for a in node.args:
            for sub in _walk(a.value):
                if isinstance(sub, cst.BinaryOperation) and isinstance(sub.operator, cst.Subtract) \
                        and self.is_length(sub.right):
                    self.record_pad(sub.left, self.line_of(node), env)
                    return

    def record_pad(self, target: cst.CSTNode, line: int | None, env: Env) -> None:
        from memlint.extract.objects import HandPad

        if self.stack and _reporting(self.stack[-1].qual):
            return  # padding a list of losses to plot or log: not how the training batch is padded
        for _ in range(3):  # batch_max_len = min(max(lengths), max_len); pad_len = batch_max_len - len(ids)
            if isinstance(target, cst.Name) and target.value in self.pad_counts:
                target = self.pad_counts[target.value]
        code = self.code(target)
        value = self.ev(target, env)
        cap, data_dependent = None, False
        if isinstance(target, cst.Call) and self.dotted(target.func) == "min":  # min(max(lengths), max_len)
            prior = self.pad_prior.get(id(target))
            for a in target.args:
                if prior is not None and isinstance(a.value, cst.Name) and self.pad_counts.get(a.value.value) is target:
                    # n = max(lengths); n = min(n, cap): the n inside min() is the batch's longest
                    code += " " + self.code(prior)
                    v = self.ev(prior, env)
                else:
                    v = self.ev(a.value, env)
                if isinstance(v, Const) and isinstance(v.value, int):
                    cap = v
                else:
                    data_dependent = True
        if isinstance(value, Const) and isinstance(value.value, int) and not data_dependent:
            self.facts.hand_pads.append(HandPad("max_length", value, line, self.cur_file()))
            return
        kind = "longest" if ("max(" in code or cap is not None or "longest" in code) else "max_length"
        self.facts.hand_pads.append(HandPad(kind, cap if cap is not None else value, line, self.cur_file()))

    def buffer_chunk_idiom(self, node: cst.While, env: Env) -> None:
        """`while len(buf) > n: blocks.append(buf[:n]); buf = buf[n:]`: a token buffer cut into blocks of n
        (a packing dataset's __init__). The same n bounds the loop and both slices."""
        heads, tails = {}, set()
        for sub in _walk(node.body):
            if isinstance(sub, cst.Subscript) and len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Slice):
                sl = sub.slice[0].slice
                if sl.step is not None:
                    continue
                if sl.lower is None and sl.upper is not None:
                    heads.setdefault(self.code(sl.upper), (sl.upper, sub))
                elif sl.upper is None and sl.lower is not None:
                    tails.add(self.code(sl.lower))
        test = self.code(node.test)
        for code, (expr, sub) in heads.items():
            if code in tails and "len(" in test and code in test:
                self.facts.chunking.append(Chunking(self.ev(expr, env), self.line_of(sub)))
                return

    def window_idiom(self, elt: cst.CSTNode, var: str, offsets: RandomOffsets, env: Env) -> None:
        """`data[i : i + n] for i in ix` with ix = B random offsets: B windows of n tokens."""
        hit = self._offset_slice(elt, var)
        if hit is not None:
            self.facts.windows.append(Window(offsets.count, self.ev(hit[1], env), self.line_of(hit[0])))

    def chunk_idiom(self, elt: cst.CSTNode, var: str, step: cst.CSTNode, env: Env) -> None:
        """`t[i : i + n] for i in range(0, total, n)`: fixed-length blocks of n tokens. A step named as a
        batch size (`range(0, n_samples, train_batch_size)`) cuts a list of samples into batches, not tokens."""
        name = step.value if isinstance(step, cst.Name) else step.attr.value if isinstance(step, cst.Attribute) else None
        if name is not None and _named_in(name, api.batch_size_names()):
            return
        hit = self._offset_slice(elt, var, self.code(step))
        if hit is not None:
            self.facts.chunking.append(Chunking(self.ev(step, env), self.line_of(hit[0])))

    def _offset_slice(self, elt: cst.CSTNode, var: str, n: str | None = None) -> tuple[cst.Subscript, cst.CSTNode] | None:
        """The first `x[var : var + n]` in `elt` (n written as `n` when given): (the subscript, n)."""
        for sub in _walk(elt):
            if isinstance(sub, cst.Subscript) and len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Slice):
                sl = sub.slice[0].slice
                if (sl.lower is not None and self.code(sl.lower) == var and isinstance(sl.upper, cst.BinaryOperation)
                        and isinstance(sl.upper.operator, cst.Add) and self.code(sl.upper.left) == var
                        and (n is None or self.code(sl.upper.right) == n)):
                    return sub, sl.upper.right
        return None

    # ---- calls -----------------------------------------------------------------------------

    def call(self, node: cst.Call, env: Env) -> Any:
        if isinstance(node.func, cst.Name) and node.func.value in ("exec", "globals") and env.lookup(node.func.value) is None:
            return self.exec_or_globals(node, env)
        if isinstance(node.func, cst.Name) and node.func.value in ("locals", "vars") and not node.args \
                and env.lookup(node.func.value) is None:
            return self.locals_of(env)
        if isinstance(node.func, cst.Name) and node.func.value == "super" and env.lookup("super") is None:
            return self.super_of(node, env)
        func = self.ev(node.func, env)
        if type(func) is Ref and func.qual in _TENSOR_PADS:
            self.tensor_pad_idiom(node, env)
        if type(func) is Ref and func.qual in _ARRAY_LOADS and node.args:
            from memlint.extract.companion import array_name

            name = array_name(node.args[0].value)
            if name is not None:
                self.facts.array_loads.append((name, self.line_of(node)))
        if type(func) is Ref and func.qual.endswith("nn.utils.rnn.pad_sequence") \
                and not (self.stack and _reporting(self.stack[-1].qual)):  # pads to the batch's longest
            from memlint.extract.objects import HandPad

            self.facts.hand_pads.append(HandPad("longest", None, self.line_of(node), self.cur_file()))
        args: list = []
        kwargs: dict = {}
        open_kwargs = False
        for a in node.args:
            if a.star == "*":
                v = self.ev(a.value, env)
                if isinstance(v, Seq):
                    args.extend(v.items)
                else:
                    open_kwargs = True
            elif a.star == "**":
                v = self.ev(a.value, env)
                for d in flatten(v):
                    every = self.handlers.fields_dict(self, d.obj) if isinstance(d, Fields) else None
                    if every is not None:  # **vars(args) of a parsed namespace: each argument as a keyword
                        kwargs.update(every.items)
                        open_kwargs |= every.open
                    elif isinstance(d, Fields):
                        kwargs.setdefault(SPREAD, []).append(d.obj)
                    elif isinstance(d, Dict):
                        kwargs.update(d.items)
                        open_kwargs |= d.open
                    elif isinstance(d, Const) and isinstance(d.value, dict):
                        kwargs.update({k: d.with_value(x, f"[{k!r}]") for k, x in d.value.items()})
                    else:
                        open_kwargs = True
            elif a.keyword is not None:
                kwargs[a.keyword.value] = self.ev(a.value, env)
            else:
                args.append(self.ev(a.value, env))
        line = self.line_of(node)
        out = None
        for f in flatten(func):
            r = self.call_value(f, args, kwargs, open_kwargs, line, node)
            out = r if out is None else merge(out, r)
        return out

    def locals_of(self, env: Env) -> Any:
        """locals() / vars(): in a function, a snapshot of its own names as a dict (`f(**locals())`,
        `args = dict(locals())`); at module level, the module's namespace (globals())."""
        if env.parent is None:
            return GlobalsView(env)
        names = {k: resolved(v) for k, v in env.vars.items()}  # a name imported in the function: read now
        return self.sized(Dict(names), names.values())

    def spread_into(self, f: Func, kwargs: dict, line: int | None) -> dict:
        """`train(**vars(args))` into the script's own function: each parameter the spread objects' fields
        name gets that field (the parsed value or its default); a `**kwargs` parameter takes every field
        when the object lists them all (argparse's namespace). Explicit keywords win."""
        params = f.node.params
        names = [p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]]
        out: dict = {}
        for obj in kwargs[SPREAD]:
            every = self.handlers.fields_dict(self, obj)
            if every is not None and not every.open:
                for k, v in every.items.items():
                    if isinstance(k, str) and (k in names or params.star_kwarg is not None):
                        out.setdefault(k, v)
                continue
            for n in names:
                if n not in out and self.handlers.declares(obj, n):
                    out[n] = self.handlers.getattr(self, obj, n, line)
        rest = {k: v for k, v in kwargs.items() if k != SPREAD}
        return {**out, **rest}

    def super_of(self, node: cst.Call, env: Env) -> Any:
        """super() / super(C, self) in a method: the bases of its class, bound to the instance."""
        args = [self.ev(a.value, env) for a in node.args]
        if len(args) == 2 and isinstance(args[0], Class):
            cls, inst = args[0], args[1]
        else:
            f = self.stack[-1] if self.stack else None
            params = [*f.node.params.posonly_params, *f.node.params.params] if f is not None and \
                isinstance(f.node, cst.FunctionDef) else []
            cls = f.owner if f is not None else None
            inst = env.lookup(params[0].name.value) if params else None
        if not isinstance(cls, Class) or inst is None:
            return Unknown("super()")
        return SuperOf(cls, inst)

    def exec_or_globals(self, node: cst.Call, env: Env) -> Any:
        """`globals()`: the module's namespace, read and written like a dict. `exec(open(path).read())`
        (nanoGPT's configurator and the config files it runs): the file the script names is parsed and
        walked in the calling namespace, as Python runs it; nothing is executed."""
        root = env
        while root.parent is not None:
            root = root.parent
        if node.func.value == "globals":
            return GlobalsView(root)
        src = self.ev(node.args[0].value, env) if node.args else None
        path = src.path if isinstance(src, OpenFile) else None
        if not (isinstance(path, Const) and isinstance(path.value, str)):
            self.facts.note("the script exec()s code memlint cannot find; what it sets is unknown")
            return Const(None, "literal", self.line_of(node))
        from memlint.extract import runtime_config

        found = runtime_config.find(self, path.value)
        if found is None and runtime_config.outside(self, path.value) is not None:
            from memlint.files import refuse_outside

            refuse_outside(runtime_config.outside(self, path.value))
            self.facts.note(f"exec() of {path.value}: outside the checked root, not read; what it sets is unknown")
            return Const(None, "literal", self.line_of(node))
        if found is None or self.exec_depth >= MAX_EXEC_DEPTH:
            self.facts.note(f"exec() of {path.value}: not found in the checkout; what it sets is unknown")
            return Const(None, "literal", self.line_of(node))
        try:
            if found.stat().st_size > MAX_SIBLING_BYTES:
                raise OSError("too large")
            text = read_text(found, min(MAX_SIBLING_BYTES, max_file_size()), what="sibling-module budget")
            mod = self._load(found, text, "__exec__", is_main=False)
        except (OSError, UnicodeDecodeError, ParserSyntaxError):
            self.facts.note(f"exec() of {path.value}: unreadable; what it sets is unknown")
            return Const(None, "literal", self.line_of(node))
        mod.env = root
        prev, self.mod = self.mod, mod
        prev_entry = self.entry_line
        self.entry_line = self.entry_line or self.line_of(node)
        self.exec_depth += 1
        try:
            self.exec_block(mod.tree.body, env)
        except _Return:
            pass
        finally:
            self.exec_depth -= 1
            self.mod, self.entry_line = prev, prev_entry
        return Const(None, "literal", self.line_of(node))

    def call_value(self, f: Any, args: list, kwargs: dict, open_kwargs: bool, line: int | None, node: cst.Call) -> Any:
        if SPREAD in kwargs and isinstance(f, (Func, BoundMethod)):
            kwargs = self.spread_into(f.func if isinstance(f, BoundMethod) else f, kwargs, line)
        if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in _CLASS_CHECKS):
            self.handlers.quantized_linear_args(self, f, args, kwargs, line)
        if SPREAD in kwargs and not (isinstance(f, Ref) and f.name in ("Namespace", "SimpleNamespace")):
            kwargs = {k: v for k, v in kwargs.items() if k != SPREAD}
            open_kwargs = True
        if isinstance(f, Func):
            name = f.qual.rsplit(".", 1)[-1]
            if name in api.checkout_lora() or name in api.checkout_lora_freeze():
                f.ran = True  # modelled: its body (a walk over named_modules()) is not followed
                return self.handlers.checkout_lora(self, f, name, args, kwargs, line)
            return self.call_function(f, args, kwargs, line)
        if isinstance(f, BoundMethod):
            if f.func.qual.rsplit(".", 1)[-1] == "step" and _optimizer_class(getattr(f.instance, "user_class", None)):
                self.facts.unknown_steps.append(line)  # the step of the checkout's own torch Optimizer subclass
            return self.call_function(f.func, [f.instance, *args], kwargs, line)
        # Objects built inside a sibling module are placed at the script's call into it: their
        # lines are reported against the script (values keep their own file and line).
        at = line if self.cur_file() is None else (self.entry_line or line)
        self.call_line = line  # the call's own line in its own file (the layers a script model builds)
        result = self.handlers.call(self, f, args, kwargs, open_kwargs, at, node)
        if isinstance(f, Ref) and (f.name.removeprefix("builtins.") in _NO_CALLBACK or f.qual == "functools.partial"):
            # super(C, self), isinstance(x, C), print(x): nothing calls x back; partial(f, k=v) binds
            # f's arguments, and whatever calls the partial later runs f with them
            return result
        # A function handed to something memlint does not model (dataset.map(tokenize),
        # trainer callbacks) may still run: walk it once with unknown arguments.
        for v in [*args, *kwargs.values()]:
            for x in flatten(v):
                if isinstance(x, Func) and not x.ran:
                    self.call_function(x, [], {}, line)
                elif isinstance(x, Partial):
                    if isinstance(x.func, Func) and not x.func.ran:
                        self.call_function(x.func, x.args, dict(x.kwargs), line)
                elif isinstance(x, BoundMethod) and isinstance(x.func, Func) and not x.func.ran:
                    # collate_fn=dataset.collate_fn: the library calls the method of that instance
                    self.call_function(x.func, [x.instance], {}, line)
                elif isinstance(x, Obj) and getattr(x, "user_class", None) is not None and not getattr(x, "_protocols_ran", False):
                    # a collator, dataset or model of the script's own class handed to the library: the
                    # library calls its __call__ / __getitem__ / __iter__, with this instance as self
                    x._protocols_ran = True
                    for name in ("__call__", "__getitem__", "__iter__"):
                        hit = x.user_class.lookup(name)
                        if hit is not None and hit[0] == "method" and isinstance(hit[1], Func):
                            self.call_function(hit[1], [x], {}, line)
        return result


def _optimizer_class(cls: Any) -> bool:
    """Whether a class of the script's checkout derives from torch.optim.Optimizer."""
    stack, seen = [cls], 0
    while stack and seen < 20:
        seen += 1
        x = stack.pop()
        if isinstance(x, Ref) and (x.qual.endswith("optim.Optimizer") or x.qual.endswith("optim.optimizer.Optimizer")):
            return True
        if isinstance(x, Class):
            stack.extend(x.bases)
    return False


def _length_name(name: str) -> bool:
    """A name the length vocabulary knows (data/library_api.json length_arguments), in any case, alone
    or as the end of a longer name: MAX_LENGTH, allowed_max_length, train_max_seq_len."""
    return _named_in(name, api.length_arguments())


def _reporting(qual: str) -> bool:
    """A function whose name says it reports (plot_losses, print_batch; its first word in data/library_api.json
    reporting_words): what it pads is a figure's or a printout's, not a training batch."""
    return qual.rsplit(".", 1)[-1].lower().strip("_").split("_")[0] in api.reporting_words()


def _named_in(name: str, vocabulary: frozenset[str]) -> bool:
    """`name` is one of `vocabulary`, in any case, alone or as the end of a longer name."""
    low = name.lower()
    return any(low == v or low.endswith("_" + v) for v in vocabulary)


@dataclass(eq=False)
class SuperOf:
    """super() inside a method of `cls`: attribute lookups start at its bases, bound to `instance`."""

    cls: Class
    instance: Any


@dataclass(eq=False)
class GlobalsView:
    """globals(): the module namespace (an Env), read and written by key."""

    env: Env


@dataclass(frozen=True)
class BoundStr:
    """A method of a known string: "a/b".split("/")."""

    base: Const
    attr: str


@dataclass(frozen=True)
class BoundUnknown(Unknown):
    """A method or attribute of something unknown: dataset.map, loss.backward."""

    attr: str = ""


@functools.lru_cache(maxsize=4096)
def _lists_linear_names(node: cst.FunctionDef) -> bool:
    """The find_all_linear_names idiom (QLoRA and its forks): a function that walks
    `model.named_modules()`, keeps the names of modules that are `isinstance` of a Linear class
    (nn.Linear, bnb's Linear4bit/Linear8bitLt) and drops lm_head: peft's all-linear, by hand."""
    walks = tests = drops_head = False
    for n in _walk(node):
        if isinstance(n, cst.Attribute) and n.attr.value == "named_modules":
            walks = True
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "isinstance":
            tests = True
        elif isinstance(n, cst.SimpleString) and "lm_head" in n.value:
            drops_head = True
    if not (walks and tests and drops_head):
        return False
    return any(isinstance(n, cst.Name) and "Linear" in n.value or isinstance(n, cst.Attribute) and "Linear" in n.attr.value
               for n in _walk(node))


_CLASS_CHECKS = frozenset({"issubclass", "isinstance", "type", "print", "repr", "str", "id", "hasattr", "getattr"})
_SCALAR_TYPES = frozenset({"builtins.bool", "builtins.int", "builtins.float", "builtins.str", "builtins.NoneType",
                           "builtins.list", "builtins.tuple", "builtins.dict"})


def _is_classmethod(f: Func) -> bool:
    node = f.node
    return isinstance(node, cst.FunctionDef) and any(
        isinstance(d.decorator, cst.Name) and d.decorator.value == "classmethod" for d in node.decorators)


def _only_raises(block: Any) -> bool:
    """A block that ends in `raise` with no other way out (`if bad: log(...); raise ValueError(...)`)."""
    stmts = list(block.body) if hasattr(block, "body") else []
    last = stmts[-1] if stmts else None
    if not (isinstance(last, cst.SimpleStatementLine) and last.body and isinstance(last.body[-1], cst.Raise)):
        return False
    return not any(isinstance(n, (cst.Return, cst.Break, cst.Continue)) for st in stmts for n in _walk(st))


@functools.lru_cache(maxsize=4096)
def _loop_counters(node: cst.For | cst.While) -> tuple[str, ...]:
    """Names a loop's body steps with `name += ...` (not inside a nested function or class)."""
    names: list[str] = []
    stack: list = list(children(node.body))
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.AugAssign) and isinstance(n.target, cst.Name) and n.target.value not in names:
            names.append(n.target.value)
        stack.extend(children(n))
    return tuple(names)


def _dtype_ref(v: Any) -> str | None:
    """memlint's name of a torch dtype written as a name (torch.bfloat16, getattr(torch, "float16")), else None."""
    from memlint.extract.objects import DtypeName, dtype_of

    if isinstance(v, DtypeName) or (type(v) is Ref and v.qual.startswith("torch.")):
        return dtype_of(v)
    return None


def _builtin_type(v: Any) -> bool:
    """type(x) of a known constant, or a builtin type named in the script (bool, int, str)."""
    return type(v) is Ref and v.qual in _SCALAR_TYPES


@functools.lru_cache(maxsize=8192)
def _one_line(text: str | None) -> str:
    """A node's source on one line, at most 80 characters (the same node is shown many times)."""
    if text is None:
        return "…"
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


@functools.lru_cache(maxsize=1024)
def _shown(path: Path) -> str:
    """A module's path as findings show it: relative to the working directory when it is inside it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except (ValueError, OSError):
        return str(path)


def _string_value(node: cst.SimpleString) -> Any:
    """The value of a string literal; the common plain case without ast.literal_eval."""
    raw = node.value
    q = 3 if raw[-3:] in ('"""', "'''") and len(raw) >= 6 else 1
    i = 0
    while raw[i] not in "'\"":
        i += 1
    prefix = raw[:i].lower()
    body = raw[i + q : len(raw) - q]
    if prefix in ("", "u") and "\\" not in body or prefix == "r":
        return body
    try:
        return node.evaluated_value
    except Exception:
        return None


def _named(v: Any, how: str, memo: set | None = None) -> Any:
    """A literal bound to a name becomes a constant, inside containers too."""
    if isinstance(v, Const):
        return v.named(how) if v.source == "literal" else v
    # containers keep their identity: `node = root; node[k] = v` changes root, as in Python
    # (each container visited once: a list shared twice is not walked twice, a cycle ends)
    if isinstance(v, (Seq, Dict)):
        memo = set() if memo is None else memo
        if id(v) in memo:
            return v
        memo.add(id(v))
        if isinstance(v, Seq):
            v.items[:] = [_named(x, how, memo) for x in v.items]
        else:
            for k, x in list(v.items.items()):
                v.items[k] = _named(x, how, memo)
    return v


def _hashable(v: Any) -> bool:
    try:
        hash(v)
        return True
    except TypeError:
        return False


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(children(n))


def _empty_weights_context(expr: cst.CSTNode) -> bool:
    """`init_empty_weights()` (accelerate, also as `accelerate.init_empty_weights()`) or
    `torch.device("meta")` as a with-item: modules built inside hold no weights."""
    if not isinstance(expr, cst.Call):
        return False
    f = expr.func
    name = f.value if isinstance(f, cst.Name) else f.attr.value if isinstance(f, cst.Attribute) else None
    if name == "init_empty_weights":
        return True
    if name == "device" and expr.args and isinstance(expr.args[0].value, cst.SimpleString):
        return expr.args[0].value.value.strip("'\"") == "meta"
    return False
