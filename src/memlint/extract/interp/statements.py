"""Statements: blocks, assignments and their targets, if / match / loops / with / try (each branch on its
own copy of the scope, merged after), and the definitions of functions and classes."""

from __future__ import annotations

from typing import Any

import libcst as cst
from memlint.extract import budget
from memlint.extract.imports import Bases, resolved
from memlint.extract.interp.scope import _ABSENT, Env, GlobalsView, _named
from memlint.extract.interp.syntax import MAX_UNROLL, _PLAIN_SMALL, _loop_counters, _only_raises, _unit_counters, _walk
from memlint.extract.objects import Fields, Method, Obj, Range
from memlint.extract.values import (Alts, Class, Const, Dict, Func, RaisedBy, Ref, Seq, Unknown, flatten, insert_fits, merge,
                                    same_value)
from memlint.library import api


class Statements:
    """The Interpreter's part that walks statements."""

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

    def exec_stmt(self, stmt: cst.CSTNode, env: Env) -> bool:
        self.steps += 1
        if self.timed_out or (not self.steps & 1023 and self.out_of_time()):
            return False
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if self.exec_small(small, env):
                    return True
            return False
        if isinstance(stmt, cst.BaseSmallStatement):  # a one-line body (`def f(x): return x`, `if c: y = 1`)
            return self.exec_small(stmt, env)
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
            case = self.decided_case(stmt, env)
            if case is not None:  # a known subject against literal patterns: the one case Python runs
                return self.exec_block(case.body.body, env) if case is not False else False
            self.branches(env, [lambda e, c=c: self.exec_block(c.body.body, e) for c in stmt.cases], exhaustive=False)
        return False

    def decided_case(self, stmt: cst.Match, env: Env) -> Any:
        """The case `match` runs for a subject memlint knows (a constant), when every pattern up to the one that
        matches is a literal, an `|` of literals or `_` and has no guard: that case, False when none matches; None
        when it cannot tell (the cases are then read as undecided branches)."""
        subject = self.ev(stmt.subject, env)
        if not (isinstance(subject, Const) and isinstance(subject.value, (str, int, float, bool, type(None)))):
            return None
        for case in stmt.cases:
            if case.guard is not None:
                return None
            hit = self._matches(case.pattern, subject.value, env)
            if hit is None:
                return None
            if hit:
                return case
        return False

    def _matches(self, pattern: Any, value: Any, env: Env) -> bool | None:
        if isinstance(pattern, cst.MatchAs) and pattern.pattern is None:
            return True  # `case _:` / `case name:`
        if isinstance(pattern, (cst.MatchValue, cst.MatchSingleton)):
            v = self.ev(pattern.value, env)
            return v.value == value and type(v.value) is type(value) if isinstance(v, Const) else None
        if isinstance(pattern, cst.MatchOr):
            hits = [self._matches(p.pattern, value, env) for p in pattern.patterns]
            return True if any(hits) else None if None in hits else False
        return None

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
        elif isinstance(node, cst.Global):  # `global processor`: its assignments here bind the module's name
            env.global_names = env.global_names | {n.name.value for n in node.names}
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
        if accum is None and self.loop_depth:
            accum = self.counter_test(node, env)
        self.length_guard(node, env)
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
        env.vars = _forked(merged, [r[1] for r in live])
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
        backward_before = len(self.facts.backward)

        def body(e: Env) -> bool:
            if isinstance(node, cst.For):
                items = self.iter_items(self.ev(node.iter, e))
                self.assign(node.target, items, e, node)
            for name in carried:  # `step += 1` in a loop walked once: its value differs on every iteration
                if e.lookup(name) is not None:
                    e.vars[name] = Unknown(f"{name}, which changes on every iteration of the loop at line {self.line_of(node)}")
            self.loop_depth += 1
            self.counters.append(_unit_counters(node))
            try:
                self.exec_block(node.body.body, e)
            finally:
                self.loop_depth -= 1
                self.counters.pop()
            return False
        if not isinstance(node, cst.For):
            self.ev(node.test, env)
            self.buffer_chunk_idiom(node, env)
        self.branches(env, [body], exhaustive=False)
        if isinstance(node, cst.For) and len(self.facts.backward) > backward_before:
            # a loop whose body runs a backward: what it iterates feeds the training step
            self.handlers.on_training_loop(self, [it, *self.wrapped_iterables(node.iter, env)], self.line_of(node))
        if node.orelse is not None:
            self.exec_block(node.orelse.body.body, env)

    def wrapped_iterables(self, node: cst.BaseExpression, env: Env) -> list:
        """What a loop's iterable wraps, read without calling anything again: `enumerate(tqdm(loader))` -> [loader];
        only through calls of one positional argument (not `zip(a, b)`, whose first is not the only one)."""
        for _ in range(4):
            if not (isinstance(node, cst.Call) and len([a for a in node.args if a.keyword is None]) == 1):
                return []
            node = node.args[0].value
            if isinstance(node, (cst.Name, cst.Attribute)):
                return [self.ev(node, env)]
        return []

    @staticmethod
    def known_items(it: Any) -> list | None:
        """The items of a sequence known item by item (at most MAX_UNROLL), else None."""
        if isinstance(it, Seq) and not it.grown and len(it.items) <= MAX_UNROLL \
                and not any(isinstance(x, Unknown) for x in it.items):
            return list(it.items)
        if isinstance(it, Const) and isinstance(it.value, (list, tuple)) and len(it.value) <= MAX_UNROLL:
            return [it.with_value(x) for x in it.value]
        if isinstance(it, Dict) and not it.open and len(it.items) <= MAX_UNROLL:
            return [Const(k, "literal", None, (f"a key of the dict: {k!r}",)) for k in it.items]  # a dict iterates its keys
        if isinstance(it, Const) and isinstance(it.value, dict) and len(it.value) <= MAX_UNROLL:
            return [it.with_value(k) for k in it.value]
        return None

    def iter_items(self, it: Any) -> Any:
        opts = []
        for v in flatten(it):
            if isinstance(v, Seq):
                opts.extend(v.items)
            elif isinstance(v, Const) and isinstance(v.value, (list, tuple)):
                opts.extend(v.with_value(x) for x in v.value)
            elif isinstance(v, Dict) and not v.open and v.items:
                opts.extend(Const(k, "literal", None) for k in v.items)
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
        self.built_without_weights(node, before)

    def exec_try(self, node: cst.Try | cst.TryStar, env: Env) -> None:
        handlers = [lambda e, h=h: self.exec_block(h.body.body, e) for h in node.handlers]
        raised = False
        if handlers and self._import_succeeds(node, env):
            self.exec_block(node.body.body, env)
        elif handlers and all(isinstance(st, cst.SimpleStatementLine) and all(isinstance(x, _PLAIN_SMALL) for x in st.body)
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

    def _import_succeeds(self, node: cst.Try | cst.TryStar, env: Env) -> bool:
        """A try body whose handlers catch only a failed import, and whose imports cannot fail in the run sized: each
        module is one the file already imported (`import x` at the top, then `try: import x` / `except
        ImportError: x = None`) or a package no fine-tuning run starts without (library_api.json
        training_imports). The handlers' fallbacks are then not what runs (`try: import x; flag = x.ready()` /
        `except ImportError: flag = False`: the body's value)."""
        imports = [x for st in node.body.body if isinstance(st, cst.SimpleStatementLine) for x in st.body
                   if isinstance(x, (cst.Import, cst.ImportFrom))]
        if not imports:
            return False
        if not all(h.type is not None and {self.dotted(t).rsplit(".", 1)[-1] for t in (
                [e.value for e in h.type.elements] if isinstance(h.type, cst.Tuple) else [h.type])} <= {
                "ImportError", "ModuleNotFoundError"} for h in node.handlers):
            return False
        for x in imports:
            if isinstance(x, cst.ImportFrom):
                if x.relative or x.module is None:
                    return False
                mods = [self.dotted(x.module)]
            else:
                mods = [self.dotted(a.name) for a in x.names]
            for mod in mods:
                top = mod.split(".")[0]
                known = env.vars.get(top)
                if top not in api.training_imports() and not (type(known) is Ref and known.qual.split(".")[0] == top):
                    return False
        return True

    # ---- binding -----------------------------------------------------------------------------

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
            env.binding(target.value).vars[target.value] = value
        elif isinstance(target, (cst.Tuple, cst.List)):
            elts = target.elements
            star = next((i for i, e in enumerate(elts) if isinstance(e, cst.StarredElement)), None)
            for i, el in enumerate(elts):
                self.assign(el.value, self.unpack(value, i, len(elts), star), env, stmt)
        elif isinstance(target, cst.Attribute):
            base = self.ev(target.value, env)
            for b in flatten(base):
                if isinstance(b, Obj) and target.attr.value == "__dict__" and isinstance(value, Dict) and not value.open:
                    # `self.__dict__ = dictionary` (a config class that is a namespace over a dict): its keys are
                    # the object's attributes
                    for key, item in value.items.items():
                        if isinstance(key, str):
                            self.write(b.attrs, key, item, b)
                elif isinstance(b, Obj):
                    self.write(b.attrs, target.attr.value, value, b)
                    self.handlers.on_setattr(self, b, target.attr.value, value, self.line_of(stmt))
                elif isinstance(b, Class) and target.attr.value != "__dict__":
                    # `train_config.batch_size = 64`: a class used as a namespace of settings, read through the class
                    self.write(b.attribute_store(), target.attr.value, value, b)
                elif isinstance(b, Method):  # model.transformer.x = v: a part of a known object
                    self.handlers.on_sub_setattr(self, b.obj, b.name, target.attr.value, value, self.line_of(stmt))
                elif isinstance(b, Dict):  # cfg.model.microbatch_size = n: an attribute dict (DictConfig, EasyDict)
                    if insert_fits(b, value):
                        b.items[target.attr.value] = value
                    else:
                        b.open = True
        elif isinstance(target, cst.Subscript):
            base = self.ev(target.value, env)
            key = self.subscript_key(target, env)
            for b in flatten(base):
                if isinstance(b, Dict):
                    if isinstance(key, Const) and insert_fits(b, value):
                        # a dict item keeps its last write; under a test memlint cannot decide, each branch's write
                        # is one value of the item (`if probe: kw["x"] = 8 else: kw["x"] = 2`)
                        self.write(b.items, key.value, value, b)
                        b.last[key.value] = value
                    elif _known_keys(key) and insert_fits(b, value):
                        # kw[name] = v, name one of known keys (`"eval_strategy" if probe else "evaluation_strategy"`):
                        # each key may hold v; the dict's other items stay known
                        for k in _known_keys(key):
                            b.items[k] = merge(value, b.items.get(k, Unknown(f"the item {k!r} may not be set")))
                    else:
                        b.open = True
                elif isinstance(b, GlobalsView) and isinstance(key, Const) and isinstance(key.value, str):
                    b.env.vars[key.value] = value
                elif isinstance(b, Fields) and isinstance(key, Const) and isinstance(key.value, str):
                    self.write(b.obj.attrs, key.value, value, b.obj)  # vars(args)["lr"] = v sets args.lr

    def unpack(self, value: Any, i: int, n: int, star: int | None = None) -> Any:
        """Target i of n in `a, b = value`; with a starred target at `star` (`a, *rest = value`), the targets before it
        take the first items, the starred one a list of the middle, those after it the last items."""
        out = None
        for v in flatten(value):
            items = v.items if isinstance(v, Seq) else list(v.value) if isinstance(v, Const) and isinstance(
                v.value, (list, tuple)) else None
            grown = isinstance(v, Seq) and v.grown  # appended to in a loop: its length, so its tail, unknown
            if items is None or (len(items) != n if star is None else len(items) < n - 1) or (
                    grown and star is not None and i > star):
                item = Unknown(v.why if isinstance(v, Unknown) else "an unpacked value")
            else:
                k = i if star is None or i < star else len(items) - (n - i) if i > star else None
                if k is not None:
                    item = items[k] if isinstance(v, Seq) else v.with_value(items[k])
                else:  # the starred target: the items between the others, as a list
                    mid = items[star:len(items) - (n - 1 - star)]
                    item = Seq(list(mid), "list", grown) if isinstance(v, Seq) else v.with_value(list(mid))
            out = item if out is None else merge(out, item)
        return out

    def dotted(self, node: cst.CSTNode) -> str:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Attribute):
            return f"{self.dotted(node.value)}.{node.attr.value}"
        return ""

    # ---- definitions -------------------------------------------------------------------------

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
        self.run_when_defined(f, node)

    def def_class(self, node: cst.ClassDef, env: Env) -> None:
        bases = Bases(self.base_value(a.value, env) for a in node.bases if not a.keyword)
        decos = [self.dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) for d in node.decorators]
        validated = any(isinstance(b, Ref) and b.qual in api.validated_model_bases() or isinstance(b, Class) and b.validated
                        for b in bases)
        is_dc = validated or any(d.split(".")[-1] == "dataclass" for d in decos)
        aliases: dict[str, str] = {}
        nested: dict[str, Class] = {}
        fields: dict[str, Any] = {}
        class_attrs: dict[str, Any] = {}
        lines: dict[str, int | None] = {}
        cls_env = Env(env)
        methods: dict[str, Func] = {}
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else [cst.SimpleStatementLine(body=node.body.body)]
        for stmt in body:  # (a one-line body, `class C: name = "x"`, as one line of it)
            if isinstance(stmt, cst.FunctionDef):
                f = Func(stmt, env, self.mod, f"{node.name.value}.{stmt.name.value}")
                p = stmt.params
                for param in [*p.posonly_params, *p.params, *p.kwonly_params]:
                    if param.default is not None:
                        f.defaults[param.name.value] = self.ev(param.default, env)
                        f.default_source[param.name.value] = ("function-default", f"def {stmt.name.value}({param.name.value}={self.code(param.default)})", self.line_of(param), self.cur_file())
                methods[stmt.name.value] = f
                continue
            if isinstance(stmt, cst.ClassDef):  # a nested class (a model's `class Config:`): present, not read
                class_attrs[stmt.name.value] = Unknown(f"the nested class {stmt.name.value}")
                continue
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                        name = small.target.value
                        fields[name] = self.field_default(small.value, cls_env) if small.value is not None else Unknown(f"field {name} has no default")
                        lines[name] = self.line_of(small)
                        if validated:
                            self.model_field(name, small, cls_env, aliases, nested)
                    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                        name = small.targets[0].target.value
                        cls_env.vars[name] = self.ev(small.value, cls_env)
                        if not is_dc:
                            fields[name] = cls_env.vars[name]
                            lines[name] = self.line_of(small)
                        else:  # `dataset = "alpaca"` in a dataclass: a class attribute, not a field
                            class_attrs[name] = cls_env.vars[name]
        cls = Class(node.name.value, bases, fields, lines, self.line_of(node), is_dc, self.cur_file(), methods,
                    validated, aliases, nested, class_attrs)
        for f in methods.values():
            f.owner = cls
        env.vars[node.name.value] = cls

    def model_field(self, name: str, small: cst.AnnAssign, env: Env, aliases: dict, nested: dict) -> None:
        """A validated model's field: the key an input dict gives it (`Field(alias="model")`, `validation_alias=`)
        and the model class its annotation names (`dataset: DatasetConfig`: a dict given for it builds one)."""
        v = small.value
        if isinstance(v, cst.Call) and self.dotted(v.func).split(".")[-1] in api.positional_field_helpers():
            for a in v.args:
                if a.keyword is not None and a.keyword.value in ("alias", "validation_alias"):
                    key = self.ev(a.value, env)
                    if isinstance(key, Const) and isinstance(key.value, str):
                        aliases[key.value] = name
        ann = self.ev(small.annotation.annotation, env)
        if isinstance(ann, Class) and ann.validated:
            nested[name] = ann

    def field_default(self, value: cst.CSTNode, env: Env) -> Any:
        """A dataclass field's default: dataclasses.field(default=..., default_factory=...) and the helpers that wrap it
        with the same two keywords (library_api.json dataclass_field_helpers; a validated model's Field also takes it as
        its first positional argument, `...` for a required field), else the value itself."""
        if isinstance(value, cst.Call) and self.dotted(value.func).split(".")[-1] in api.dataclass_field_helpers():
            first = value.args[0] if value.args and value.args[0].keyword is None else None
            if first is not None and self.dotted(value.func).split(".")[-1] in api.positional_field_helpers():
                if isinstance(first.value, cst.Ellipsis):
                    return Unknown("a required field")
                return self.ev(first.value, env)
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


_MAX_FORK = 4  # branches of one `if` whose names keep their values together


def _forked(merged: dict, branches: list[dict]) -> dict:
    """`merged` with each name the branches bound differently marked with the branch each of its values came from
    (values.Alts.fork), so that a reader of two names set together in one branch (`model` and `model_kwargs`) can
    pair their values (fields/model.py string_models)."""
    if not 1 < len(branches) <= _MAX_FORK:
        return merged
    token = object()
    for k, m in merged.items():
        if not isinstance(m, Alts) or m.fork is not None or any(k not in b for b in branches) \
                or all(b[k] is branches[0][k] for b in branches):  # the same value on every branch: not this `if`'s
            continue
        per = [flatten(resolved(b[k])) for b in branches]
        sets = tuple(frozenset(i for i, vals in enumerate(per) if any(same_value(o, x) for x in vals))
                     for o in m.options)
        if all(sets):
            merged[k] = Alts(m.options, (token, sets))
    return merged


def _known_keys(key: Any) -> tuple:
    """The keys an item key may be when it is one of several constants (Alts of hashable constants), else ()."""
    if not isinstance(key, Alts):
        return ()
    opts = tuple(flatten(key))
    if not opts or not all(isinstance(o, Const) and isinstance(o.value, (str, int)) for o in opts):
        return ()
    return tuple(dict.fromkeys(o.value for o in opts))
