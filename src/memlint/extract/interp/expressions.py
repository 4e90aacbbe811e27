"""Expressions: literals, names, attributes, subscripts and slices, operators, comparisons, f-strings and
comprehensions, each to an abstract value (extract/values.py); a value several branches left is each
of them."""

from __future__ import annotations

import os
import posixpath
from pathlib import PurePosixPath
from typing import Any

import libcst as cst
from memlint.extract import budget
from memlint.extract.imports import SiblingModule, resolved
from memlint.extract.interp.scope import BoundStr, BoundUnknown, Env, GlobalsView, SuperOf, _hashable
from memlint.extract.interp.syntax import (MAX_ALTS, _BINOPS, _BUILTIN_CALLS, _CMPOPS, _DICT_METHODS, _builtin_type,
                                           _is_classmethod, _string_value)
from memlint.extract.objects import BoundMethod, DictMethod, DtypeName, FieldNames, Fields, Obj, OpenFile, RandomOffsets, SeqMethod
from memlint.extract.values import (HOLE, Alts, Class, Const, Dict, Func, ModuleVal, Ref, Remainder, Seq, Template, TokenIds, Unknown,
                                    flatten, merge, to_python, weakest)
from memlint.library import api

_REMOTE_CALLS = ("remote", "local", "spawn", "remote_gen")  # how a decorated remote function is called
_PATH_PARTS = {"parent": lambda p: os.path.dirname(p.rstrip("/")) or ".", "name": lambda p: os.path.basename(p.rstrip("/")),
               "stem": lambda p: os.path.splitext(os.path.basename(p.rstrip("/")))[0],
               "suffix": lambda p: os.path.splitext(p.rstrip("/"))[1]}


def _ancestors(path: str) -> list[str]:
    """pathlib's .parents of `path`, as strings (at most 16): up to "/" for an absolute path, "." for a relative one."""
    out, p = [], path.rstrip("/") or "/"
    while len(out) < 16:
        up = posixpath.dirname(p) or "."
        if up == p:
            break
        out.append(up)
        p = up
    return out


_MAX_REPEAT = 256  # items a repeated list (`[x] * n`) is spelt out to; longer ones stay unknown


class Expressions:
    """The Interpreter's part that evaluates expressions."""

    def truth(self, v: Any) -> bool | None:
        vals = set()
        for o in flatten(v):
            if isinstance(o, Const):
                try:
                    vals.add(bool(o.value))
                except Exception:
                    return None
            elif isinstance(o, (Obj, Func, Class, Ref, ModuleVal, SiblingModule, DtypeName)):  # getattr(mod, NAME) too
                vals.add(True)
            elif isinstance(o, (Dict, Seq)) and o.items:  # a dict or list that holds an item (a loaded config)
                vals.add(True)
            else:
                return None
        return vals.pop() if len(vals) == 1 else None

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
                value = node.evaluated_value  # None where a part is an f-string
            except Exception:
                value = None
            # f-strings among the parts: each part's value, joined
            return self.const(value, node) if isinstance(value, (str, bytes)) else self.concatenated(node, env)
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
            left, right = self.ev(node.left, env), self.ev(node.right, env)  # left first, as Python does
            if type(node.operator) is cst.Divide:
                self.accumulation_divisor(node.right, right)
            return self.binop(type(node.operator).__name__, left, right, node)
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
        if n in _BUILTIN_CALLS or n in ("range", "print", "open", "getattr", "input", "dict", "isinstance", "vars", "enumerate", "zip", "map", "filter", "set", "super", "type", "hasattr", "setattr", "iter", "next", "any", "all", "eval"):
            return Ref(f"builtins.{n}")
        v = self.imported_global(env, n)
        if v is not None:
            return v
        if str(self.path).endswith(".ipynb"):  # a notebook's kernel may hold an import its cells no longer make
            hit = self.handlers.kernel_class(n)
            if hit is not None:
                self.facts.note(f"{n} is used but never imported in the notebook: read as {hit.qual} (an import an "
                                "earlier run of the kernel made)")
                return hit
        return Unknown(f"the name {n}")

    def imported_global(self, env: Env, n: str) -> Any:
        """A module-level name the script's own assignments do not bind: one its environment-key reads or its
        `from m import *` bring (None when neither does)."""
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
        return None

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
        if isinstance(base, Func) and base.gpus is not None and attr in _REMOTE_CALLS:
            return base  # f.remote(...) of a function its decorator runs on remote GPUs: runs f there
        if isinstance(base, Obj) and attr == "__dict__":  # args.__dict__: vars(args)
            return Fields(base)
        if isinstance(base, Obj):
            return self.handlers.getattr(self, base, attr, self.line_of(node))
        if isinstance(base, SuperOf):
            for b in base.cls.bases:
                hit = b.lookup(attr) if isinstance(b, Class) else None
                if hit is not None:
                    return BoundMethod(hit[1], base.instance) if hit[0] == "method" else hit[1]
            if attr == "__init__":  # a library base whose construction memlint reads (a Trainer): built from these arguments
                lib = self.handlers.library_init(base.cls)
                return lib if lib is not None else Ref("builtins.object")
            # a library base (nn.Module, Dataset): its __init__ and methods do nothing memlint follows
            return Unknown(f"super().{attr}")
        if isinstance(base, Class):
            if attr == "__name__":
                return self.const(base.name, node)
            hit = base.class_lookup(attr)
            if hit is not None and hit[0] == "method" and isinstance(hit[1], Func) and _is_classmethod(hit[1]):
                return BoundMethod(hit[1], base)  # Config.from_name("7B"): `cls` is the class
            if hit is None:  # a checkout subclass of a transformers model: from_pretrained is transformers'
                loader = self.handlers.class_loader(base, attr)
                if loader is not None:
                    return loader
            return hit[1] if hit is not None else Unknown(f"{base.name}.{attr}")
        if isinstance(base, Const) and isinstance(base.value, str):
            if attr in _PATH_PARTS:  # Path(p).parent / .name / .stem / .suffix: a path is a string here
                return base.with_value(_PATH_PARTS[attr](base.value), f".{attr}")
            if attr == "parents":  # Path(__file__).resolve().parents[1]: the ancestors, nearest first
                return Seq([base.with_value(x, f".parents[{i}]") for i, x in enumerate(_ancestors(base.value))], "tuple")
            return BoundStr(base, attr)
        if isinstance(base, FieldNames) and attr == "keys":  # signature.parameters.keys(): the same names
            return DictMethod(base, attr)
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
        if isinstance(base, Seq) and attr in ("index", "count", "append", "extend", "insert"):
            return SeqMethod(base, attr)
        if isinstance(base, OpenFile):
            return base if attr in ("read", "read_text", "readlines", "__enter__") else Unknown(f"file.{attr}")
        if isinstance(base, TokenIds) and attr in ("input_ids", "data"):
            return base  # a tokenizer output's input_ids: the same token ids
        if isinstance(base, Unknown):
            moved = base if isinstance(base, TokenIds) and attr in ("to", "cuda", "cpu", "long", "int") else None
            if getattr(base, "kept_by_moves", ()) and attr in base.kept_by_moves:
                moved = base  # a layer's `.to(dtype)` / `.cuda()`: the same layer (its sizes kept)
            return BoundUnknown(base.why or "something unknown", base.line, attr, moved)
        return Unknown(f"attribute {attr}")

    def subscript_key(self, node: cst.Subscript, env: Env) -> Any:
        if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
            return Unknown("a slice")
        return self.ev(node.slice[0].slice.value, env)

    def slice_of(self, base: Any, node: cst.Subscript, env: Env) -> Any:
        """seq[a:b] over a known sequence or string with constant bounds."""
        sl = node.slice[0].slice
        self.stream_block_idiom(sl, env)
        self.item_block_idiom(sl, env)
        self.batch_slice_idiom(sl, env)
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
            if isinstance(b, TokenIds):  # out["input_ids"], ids[i]: token ids still, at most as many
                v = b
            elif not isinstance(key, Const):
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
            elif isinstance(b, GlobalsView) and isinstance(key.value, str) and key.value.isidentifier():
                # globals()[name] of a name a star import brings: the module's namespace holds it as the name does
                v = self.imported_global(b.env, key.value)
                v = Unknown(f"globals()[{key.value!r}]") if v is None else v
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
        if isinstance(a, FieldNames) and op == "Subtract":
            # `set(sig.parameters) - {"self"}`: the fields (self is none of them); another name taken out: unknown
            names = to_python(b)
            return a if isinstance(names, Const) and isinstance(names.value, (set, frozenset, list, tuple)) \
                and set(names.value) <= {"self"} else Unknown("a class's field names with some taken out")
        if isinstance(a, Const) and isinstance(b, Const) and op in _BINOPS:
            if not budget.binop_fits(op, a.value, b.value):
                return self.over()
            try:
                if op == "Power" and isinstance(b.value, (int, float)) and abs(b.value) > 64:
                    return Unknown("a large power")
                if op == "Modulo" and isinstance(a.value, str):
                    value = a.value % b.value
                elif op == "Divide" and isinstance(a.value, str) and isinstance(b.value, str):
                    # paths are strings here; `base / "config.yaml"` runs only when one side is a pathlib path, and
                    # pathlib drops "." parts (Path(".") / "models" is "models")
                    value = str(PurePosixPath(a.value) / b.value)
                else:
                    value = _BINOPS[op](a.value, b.value)
            except Exception:
                return Unknown("an expression that would raise")
            return self._combine(value, node, a, b)
        if isinstance(a, Seq) and isinstance(b, Seq) and op == "Add":
            return self.sized(Seq(a.items + b.items, a.kind), (a, b))
        if op == "Multiply" and isinstance(b, Seq) and isinstance(a, Const):
            a, b = b, a
        if op == "Multiply" and isinstance(a, Seq) and isinstance(b, Const) and type(b.value) is int \
                and not a.grown and 0 <= len(a.items) * b.value <= _MAX_REPEAT:
            return self.sized(Seq(a.items * b.value, a.kind), (a,))  # `[prompt] * G`: G copies, G rows
        if op == "Add" and isinstance(a, TokenIds) and isinstance(b, TokenIds):
            return self.joined_ids(a, b, node)
        if isinstance(a, Dict) and isinstance(b, Dict) and op == "BitOr":
            return self.sized(Dict({**a.items, **b.items}, a.open or b.open), (a, b))
        if op == "Subtract" and isinstance(a, Const) and type(a.value) is int and isinstance(b, Unknown) \
                and not isinstance(b, Remainder):
            return Remainder(f"{self.code(node)}: {a.value} minus {b.why or 'an unknown'}", None, a, b)
        if op == "Add":  # part + (total - part): the total
            for x, y in ((a, b), (b, a)):
                if isinstance(y, Remainder) and y.part is x:
                    return y.total.with_value(y.total.value, f"{self.code(node)} = {y.total.value} (the unknown part "
                                                             "added back to what remained of the total)")
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
        if op in ("In", "NotIn") and isinstance(right, FieldNames):
            has = right.has(left.value) if isinstance(left, Const) and isinstance(left.value, str) else None
            if has is None:
                return Unknown(f"whether {right.cls} has a field {getattr(left, 'value', '?')!r} in the installed version")
            return Const(has.value == (op == "In"), "library-default", self.line_of(node), (has.why,), self.cur_file())
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
        if op in ("Equal", "NotEqual", "Is", "IsNot") and self._dtype_ref(left) and self._dtype_ref(right):
            # `bf16 = dtype == torch.bfloat16`: two torch dtypes (an alias such as torch.half compares equal)
            same = self._dtype_ref(left) == self._dtype_ref(right)
            lead = left if isinstance(left, Const) else right if isinstance(right, Const) else None
            value = same == (op in ("Equal", "Is"))
            if lead is not None:
                return lead.with_value(value, f"{self.code(node)} = {value}")
            src = weakest(*(getattr(x, "source", "literal") for x in (left, right)))
            return Const(value, src, self.line_of(node), (f"{self.code(node)} = {value}",), self.cur_file())
        return Unknown(left.why if isinstance(left, Unknown) else "a comparison")

    def concatenated(self, node: cst.ConcatenatedString, env: Env) -> Any:
        """`f"a {x} " f"b {y}"`: the parts joined; a Template where a part is not known."""
        left, right = self.ev(node.left, env), self.ev(node.right, env)
        texts = []
        for v in (left, right):
            if isinstance(v, Const) and isinstance(v.value, str):
                texts.append(v.value)
            elif isinstance(v, Template):
                texts.append(v.text)
            else:
                return Unknown(v.why if isinstance(v, Unknown) else "a string")
        text = "".join(texts)
        if len(text) > budget.MAX_STR:
            return self.over()
        if isinstance(left, Const) and isinstance(right, Const):
            return self._combine(text, node, left, right)
        hole = left if isinstance(left, Template) else right
        return Template(hole.why, self.line_of(node), text)

    def fstring(self, node: cst.FormattedString, env: Env) -> Any:
        parts: list[str] = []
        consts: list[Const] = []
        total = 0
        holes: list[Any] = []  # the parts not known: the string is a Template of the known ones
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                parts.append(part.value)
                continue
            v = self.ev(part.expression, env)
            if not isinstance(v, Const):
                holes.append(v)
                parts.append(v.text if isinstance(v, Template) else HOLE)
                total += len(parts[-1])
                if total > budget.MAX_STR:
                    return self.over()
                continue
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
        if holes:
            first = holes[0]
            return Template(first.why if isinstance(first, Unknown) else "an f-string over non-constants",
                            self.line_of(node), text)
        if not consts:
            return self.const(text, node)
        return self._combine(text, node, *consts)

    def comprehension(self, node: Any, env: Env) -> Any:
        """A comprehension over a known short sequence (one `for`, no `if`) is evaluated item by item;
        any other is walked once with the loop names bound. Spots the chunking idiom."""
        exact = self.exact_comprehension(node, env)
        if exact is not None:
            return exact
        names = self.field_names_comprehension(node, env)
        if names is not None:
            return names
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

    def field_names_comprehension(self, node: Any, env: Env) -> FieldNames | None:
        """`{f.name for f in fields(Cls)}` (a set or list, no `if`): the class's field names."""
        comp = node.for_in
        if isinstance(node, cst.DictComp) or comp.inner_for_in is not None or comp.ifs \
                or not isinstance(comp.target, cst.Name):
            return None
        elt = node.elt
        if not (isinstance(elt, cst.Attribute) and elt.attr.value == "name" and isinstance(elt.value, cst.Name)
                and elt.value.value == comp.target.value):
            return None
        names = self.ev(comp.iter, env)
        return names if isinstance(names, FieldNames) else None

    def field_probe(self, test: Any, env: Env) -> bool:
        """Whether `test` asks whether a class's field names hold a name memlint's tables do not list (`k in valid`):
        a key the script wrote for that class, kept (the class takes it, or memlint reads nothing of it)."""
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                and type(test.comparisons[0].operator).__name__ == "In"):
            return False
        right = self.ev(test.comparisons[0].comparator, env)
        left = self.ev(test.left, env)
        return isinstance(right, FieldNames) and isinstance(left, Const) and isinstance(left.value, str) \
            and right.has(left.value) is None

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
                if truth is None and self.field_probe(cond.test, inner):
                    truth = True  # a key written for the class that memlint's tables do not list: kept
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
