"""Calls: the script's own functions inlined (parameters bound, every return merged), super(), locals(),
globals() and exec() of a file the script names; a call of anything else goes to the handlers
(extract/handlers/), and a function handed to one is walked once."""

from __future__ import annotations

from typing import Any

import libcst as cst
from memlint.extract.imports import MAX_SIBLING_BYTES, resolved
from memlint.extract.interp.scope import SPREAD, Env, GlobalsView, SuperOf, _Return
from memlint.extract.interp.syntax import (MAX_CALLS_PER_FUNC, MAX_DEPTH, MAX_EXEC_DEPTH, MAX_RECURSION, MAX_STEPS,
                                           _CLASS_CHECKS, _NO_CALLBACK)
from memlint.extract.objects import BoundMethod, Fields, Obj, OpenFile, Partial
from memlint.extract.parsed import ParserSyntaxError
from memlint.extract.values import Alts, Class, Const, Dict, Func, Ref, Seq, TokenIds, Unknown, flatten, merge
from memlint.files import max_file_size, read_text
from memlint.library import api


class Calls:
    """The Interpreter's part that calls."""

    # ---- calls into the script's own functions -----------------------------------------------

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
        args, kwargs = self.entry_arguments(f, args, kwargs)
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
        self.frames.append(env)
        self.returns.append([])
        first = len(self.facts.objects)
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
            self.frames.pop()
            self.mod = prev_mod
            self.entry_line = prev_entry
            if f.gpus is not None:  # the objects built in this run live on the GPUs the decorator asks for
                self.facts.remote_runs.append((f.gpus, first, len(self.facts.objects)))
        if not rets:
            return Const(None, "literal", None)
        out = rets[0]
        for r in rets[1:]:
            out = merge(out, r)
        return self.all_linear_names(f, node, out)

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

    # ---- calls -------------------------------------------------------------------------------

    def call(self, node: cst.Call, env: Env) -> Any:
        if isinstance(node.func, cst.Name) and node.func.value in ("exec", "globals") and env.lookup(node.func.value) is None:
            return self.exec_or_globals(node, env)
        if isinstance(node.func, cst.Name) and node.func.value in ("locals", "vars") and not node.args \
                and env.lookup(node.func.value) is None:
            return self.locals_of(env)
        if isinstance(node.func, cst.Name) and node.func.value == "super" and env.lookup("super") is None:
            return self.super_of(node, env)
        if isinstance(node.func, cst.Name) and node.func.value == "slice" and len(node.args) == 2 \
                and env.lookup("slice") is None:  # slice(j * k, (j + 1) * k): as rows[j * k : (j + 1) * k]
            self.batch_slice_idiom(cst.Slice(lower=node.args[0].value, upper=node.args[1].value), env)
        func = self.ev(node.func, env)
        self.callee_idioms(func, node, env)
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
                    elif isinstance(d, TokenIds):  # **enc of a tokenizer's output: its input_ids (and attention mask)
                        kwargs.setdefault("input_ids", d)
                        open_kwargs = True
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
            if f.func.qual.rsplit(".", 1)[-1] == "step" and self._optimizer_class(getattr(f.instance, "user_class", None)):
                self.facts.unknown_steps.append(line)  # the step of the checkout's own torch Optimizer subclass
            return self.call_function(f.func, [f.instance, *args], kwargs, line)
        # Objects built inside a sibling module are placed at the script's call into it: their
        # lines are reported against the script (values keep their own file and line).
        at = line if self.cur_file() is None else (self.entry_line or line)
        self.call_line = line  # the call's own line in its own file (the layers a script model builds)
        self.call_node = node  # and its syntax (the expressions its arguments were written as)
        result = self.handlers.call(self, f, args, kwargs, open_kwargs, at, node)
        if isinstance(f, Ref) and (f.name.removeprefix("builtins.") in _NO_CALLBACK or f.qual == "functools.partial"):
            # super(C, self), isinstance(x, C), print(x): nothing calls x back; partial(f, k=v) binds
            # f's arguments, and whatever calls the partial later runs f with them
            return result
        # A function handed to something memlint does not model (dataset.map(tokenize),
        # trainer callbacks) may still run: walk it once with unknown arguments.
        self.walk_handed(args, kwargs, line)
        return result

    def walk_handed(self, args: list, kwargs: dict, line: int | None) -> None:
        """Walk the functions, partials, bound methods and the script's own objects handed to a call memlint models
        only by its result: the library calls them back."""
        for v in [*args, *kwargs.values()]:
            for x in flatten(v):
                start = len(self.facts.tokenizer_calls)
                if isinstance(x, Func) and not x.ran:
                    self.call_function(x, [], {}, line)
                elif isinstance(x, Partial):
                    if isinstance(x.func, Func) and not x.func.ran:
                        self.call_function(x.func, x.args, dict(x.kwargs), line)
                elif isinstance(x, BoundMethod) and isinstance(x.func, Func) and not x.func.ran:
                    # collate_fn=dataset.collate_fn: the library calls the method of that instance
                    self.call_function(x.func, [x.instance], {}, line)
                elif isinstance(x, Obj) and isinstance(getattr(x, "user_class", None), Class) \
                        and not getattr(x, "_protocols_ran", False):
                    # a collator, dataset or model of the script's own class handed to the library: the
                    # library calls its __call__ / __getitem__ / __iter__, with this instance as self
                    x._protocols_ran = True
                    for name in ("__call__", "__getitem__", "__iter__"):
                        hit = x.user_class.lookup(name)
                        if hit is not None and hit[0] == "method" and isinstance(hit[1], Func):
                            self.call_function(hit[1], [x], {}, line)
                if len(self.facts.tokenizer_calls) > start:  # what this callback tokenized, for the readers
                    self.facts.handed_calls.append((start, len(self.facts.tokenizer_calls), handed_target(x)))


def handed_target(x: Any) -> Any:
    """What a callback handed to a library call runs: the function of a partial or bound method, else itself."""
    return x.func if isinstance(x, (Partial, BoundMethod)) else x
