"""What the walk itself knows of library calls, besides the handlers (extract/handlers/): the calls that
pad a tensor by hand or load an array a companion script wrote (data, by dotted name), torch dtypes
compared, models built under init_empty_weights() or on the meta device, peft's all-linear written by
hand (the find_all_linear_names idiom), the step of a checkout's own torch.optim.Optimizer subclass, an
entry point whose arguments click / typer / fastcore fill (and fastcore's @call_parse, run as it is defined).

The language modules reach these through `self` (LibraryCalls is one of the Interpreter's mixins)."""

from __future__ import annotations

import functools
from typing import Any

import libcst as cst
from memlint.extract.interp.scope import Env
from memlint.extract.interp.idioms import _reporting
from memlint.extract.interp.syntax import _walk
from memlint.extract.objects import Model
from memlint.extract.values import Alts, Class, Const, Func, Ref, Seq, Unknown

# tensors built to pad a sample by hand: torch.full((1, n - l), pad), F.pad(x, (0, n - len(x)))
# torch.cat((ids, torch.zeros(max_words - ids.shape[0]))): a run of pad values appended (llama-recipes' datasets)
_TENSOR_PADS = {"torch.full", "torch.nn.functional.pad", "numpy.full", "numpy.pad", "torch.zeros", "torch.ones",
                "numpy.zeros", "numpy.ones"}
_ARRAY_LOADS = {"numpy.load", "numpy.memmap", "numpy.fromfile", "torch.load"}  # data a companion script may have written
_CONCATS = {"torch.cat", "torch.concat", "torch.concatenate"}
_ONE_ROW = {"unsqueeze": ("0",), "view": ("1", "-1"), "reshape": ("1", "-1")}  # x.unsqueeze(0), x.view(1, -1)


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


def _dtype_ref(v: Any) -> str | None:
    """memlint's name of a torch dtype written as a name (torch.bfloat16, getattr(torch, "float16")), else None."""
    from memlint.extract.objects import DtypeName, dtype_of

    if isinstance(v, DtypeName) or (type(v) is Ref and v.qual.startswith("torch.")):
        return dtype_of(v)
    return None


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


class LibraryCalls:
    """The Interpreter's part that knows library names."""

    _optimizer_class = staticmethod(_optimizer_class)
    _dtype_ref = staticmethod(_dtype_ref)

    def tensor_pad_idiom(self, node: cst.Call, env: Env, qual: str = "") -> None:
        """`torch.full((1, n - l), pad)`, `F.pad(x, (0, n - x.size(-1)), value=pad)`: a tensor
        padded by hand to n (n the batch's longest when it is a max over the batch)."""
        sized = [a for a in node.args if a.keyword is None]
        if qual.endswith((".zeros", ".ones")) and (len(sized) != 1 or isinstance(sized[0].value, (cst.Tuple, cst.List))):
            return  # torch.zeros(B - x.size(0), x.size(1)): rows filling out a short batch, not a sample's padding
        for a in node.args:
            value = a.value
            if isinstance(value, cst.Name) and value.value in self.pad_counts:
                value = self.pad_counts[value.value]  # padding = max_words - ids.shape[0]; torch.zeros(padding)
            for sub in _walk(value):
                if isinstance(sub, cst.BinaryOperation) and isinstance(sub.operator, cst.Subtract) \
                        and self.is_length(sub.right):
                    self.record_pad(sub.left, self.line_of(node), env)
                    return

    def callee_idioms(self, func: Any, node: cst.Call, env: Env) -> None:
        """A call of a library name that shows how the script pads or loads its data, before its arguments are
        read: a tensor padded by hand (torch.full, F.pad), an array file a companion script wrote (np.load,
        torch.load), pad_sequence (pads to the batch's longest)."""
        if type(func) is Ref and func.qual in _TENSOR_PADS:
            self.tensor_pad_idiom(node, env, func.qual)
        if type(func) is Ref and func.qual in _ARRAY_LOADS and node.args:
            from memlint.extract.companion import array_name

            name = array_name(node.args[0].value)
            if name is not None:
                self.facts.array_loads.append((name, self.line_of(node)))
        self.packed_row_idiom(node, env)
        if type(func) is Ref and func.qual == "torch.randint":
            self.random_tokens_idiom(node, env)
        if type(func) is Ref and func.qual.endswith("nn.utils.rnn.pad_sequence") \
                and not (self.stack and _reporting(self.stack[-1].qual)):  # pads to the batch's longest
            from memlint.extract.objects import HandPad

            self.facts.hand_pads.append(HandPad("longest", None, self.line_of(node), self.cur_file()))

    def random_tokens_idiom(self, node: cst.Call, env: Env) -> None:
        """`torch.randint(model.vocab_size, (batch_size, seq_len))`: random token ids (the high bound named as a
        vocabulary size) of a two-dimensional shape: a synthetic micro-batch of B rows of T tokens."""
        from memlint.extract.objects import RandomBatch

        pos = [a.value for a in node.args if a.keyword is None]
        kw = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        # randint(high, size) / randint(low, high, size) / randint(low, high, size=...) / randint(high, size=...)
        size = kw.get("size", pos[-1] if len(pos) >= 2 else None)
        bounds = pos if "size" in kw else pos[:-1]
        high = kw.get("high", bounds[1] if len(bounds) >= 2 else bounds[0] if bounds else None)
        if high is None or "vocab" not in self.code(high).lower() or not isinstance(size, (cst.Tuple, cst.List)) \
                or len(size.elements) != 2:
            return
        rows, length = (self.ev(e.value, env) for e in size.elements)
        self.facts.random_batches.append(RandomBatch(rows, length, self.line_of(node)))

    def packed_row_idiom(self, node: cst.Call, env: Env) -> None:
        """`torch.cat(packed_input_ids, dim=0).unsqueeze(0)` in a collate function: the batch's samples concatenated
        into one row (a packing collator: OpenRLHF's packing_collate_fn, flash-attn varlen batches), no padding."""
        f = node.func
        if not (isinstance(f, cst.Attribute) and f.attr.value in _ONE_ROW and isinstance(f.value, cst.Call)
                and [self.code(a.value) for a in node.args] == list(_ONE_ROW[f.attr.value])):
            return
        if not (self.stack and "collate" in self.stack[-1].qual.lower()):
            return
        inner = f.value
        head = self.ev(inner.func, env)
        if type(head) is Ref and head.qual in _CONCATS and inner.args and isinstance(inner.args[0].value, cst.Name):
            from memlint.extract.objects import HandPad

            self.facts.hand_pads.append(HandPad("packing", None, self.line_of(node), self.cur_file()))

    def all_linear_names(self, f: Func, node: cst.CSTNode, out: Any) -> Any:
        """What a script's function returned (`out`), or peft's all-linear when the function is the
        find_all_linear_names idiom and returned a list memlint does not know item by item."""
        if (isinstance(out, (Unknown, Seq, Alts)) or isinstance(out, Const) and isinstance(out.value, (list, tuple, set))) \
                and not isinstance(node, cst.Lambda) and _lists_linear_names(node):
            return self.const("all-linear", node, "constant",
                              (f"{f.qual}(): the names of every Linear of model.named_modules() but lm_head "
                               "(peft's all-linear)",))
        return out

    def built_without_weights(self, node: cst.With, before: int) -> None:
        """The models built in a `with` block (the objects from index `before` on) hold no weights when the
        block is init_empty_weights() or the meta device."""
        if any(_empty_weights_context(item.item) for item in node.items):
            # `with init_empty_weights(): m = AutoModel.from_config(cfg)`: a skeleton without weights (a
            # checkpoint saver's, a device-map planner's), never the model a loop trains
            for o in self.facts.objects[before:]:
                if isinstance(o, Model):
                    o.empty = True

    def entry_arguments(self, f: Func, args: list, kwargs: dict) -> tuple[list, dict]:
        """The arguments of an entry point called with none that a command-line library fills itself (click,
        typer, fastcore; extract/handlers/entrypoints.py), else the call's own."""
        if f.click and not args and not kwargs:  # a @click.command entry: click supplies every option
            kwargs = self.handlers.click_arguments(self, f)
        elif f.typer and not args and not kwargs:  # an @app.command() entry: typer fills it from the command
            args, kwargs = self.handlers.typer_arguments(self, f)
        elif f.cli and not args and not kwargs:  # @call_parse: fastcore fills it from the command
            kwargs = self.handlers.cli_arguments(self, f)
        return args, kwargs

    def run_when_defined(self, f: Func, node: cst.FunctionDef) -> None:
        """A function its decorator runs as it is defined."""
        if f.cli == "fastcore" and self.mod is not None and self.mod.is_main:
            # fastcore's @call_parse runs the function as it decorates it when the module is __main__
            self.call_function(f, [], {}, self.line_of(node), entry=True)
