"""How training scripts write batching, lengths and accumulation by hand, in plain Python: `if step % N`
(gradient accumulation), a loop over micro-batches before one step, `[pad] * (n - len(ids))` and its
tensor forms, `t[i : i + n]` chunks and random windows, a token buffer cut into blocks, a generator
yielding whole batches, `ids[:max_length]`. Each spotted idiom is a fact (extract/objects.py); the
vocabularies (length and batch-size names, reporting words) are data (memlint.library.api)."""

from __future__ import annotations

import re
from typing import Any

import libcst as cst
from memlint.extract.interp.scope import Env
from memlint.extract.interp.syntax import _walk
from memlint.extract.objects import Chunking, MicroSlice, RandomOffsets, Window
from memlint.extract.values import Alts, Const, TokenIds, Unknown, weakest
from memlint.library import api


class Idioms:
    """The Interpreter's part that knows the idioms."""

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

    def exec_loop(self, node: cst.For | cst.While, env: Env) -> None:
        micro = self.micro_batch_count(node, env)
        backward, steps, divisors = len(self.facts.backward), len(self.facts.steps), len(self.facts.loss_divisors)
        self._exec_loop(node, env)
        accumulated = len(self.facts.backward) > backward and len(self.facts.steps) == steps
        if micro is None and accumulated and _range_with_step(node, self.dotted):
            # `for i in range(0, n, k): train_micro_step(rows[i:i + k])`: the backward is in a function it calls
            micro = self.micro_slice_count(node, env)
        if isinstance(micro, Unknown) and accumulated and len(self.facts.loss_divisors) > divisors:
            # the count is unknown, but the loss each backward takes is divided by the accumulation the author set
            micro = self.facts.loss_divisors[-1]
        if micro is None and isinstance(node, cst.For) and accumulated:
            # `for mb in batch.split(k): compute_loss_and_backward(mb)` then one step: the step accumulates a
            # number of backward passes memlint does not count (not 1)
            micro = Unknown(f"the number of micro-batches `for ... in {self.code(node.iter)}` runs before the "
                            f"optimizer step (line {self.line_of(node)})")
        if micro is not None:
            self.micro_accum = micro  # the optimizer step after it accumulates `micro` backward passes

    def accumulation_divisor(self, node: cst.CSTNode, value: Any) -> None:
        """`loss / gradient_accumulation_steps` (any name of data/library_api.json accumulation_names): the number of
        backward passes the author accumulates per optimizer step, kept for a loop whose own count is unknown."""
        name = node.value if isinstance(node, cst.Name) else node.attr.value if isinstance(node, cst.Attribute) else None
        if name is None or not _named_in(name, api.accumulation_names()):
            return
        if isinstance(value, Const) and isinstance(value.value, int) and not isinstance(value.value, bool) and value.value > 0:
            self.facts.loss_divisors.append(value.with_value(value.value, (
                f"the loss is divided by {self.code(node)} = {value.value} before each backward (line "
                f"{self.line_of(node)}): {value.value} micro-batches per optimizer step")))

    def length_guard(self, node: cst.If, env: Env) -> None:
        """`if len(pending) < N: continue` (no else): past it, the list the loop collects batches in holds N of them
        (the batches a later `for b in pending: ... backward()` accumulates before one step)."""
        test = node.test
        if node.orelse is not None or not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                                           and isinstance(test.comparisons[0].operator, (cst.LessThan, cst.NotEqual))):
            return
        left = test.left
        if not (isinstance(left, cst.Call) and isinstance(left.func, cst.Name) and left.func.value == "len"
                and len(left.args) == 1 and isinstance(left.args[0].value, cst.Name)):
            return
        body = node.body.body
        smalls = body if isinstance(node.body, cst.SimpleStatementSuite) else \
            body[0].body if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) else ()
        if not (smalls and all(isinstance(s, cst.Continue) for s in smalls)):
            return
        n = self.ev(test.comparisons[0].comparator, env)
        if isinstance(n, Const) and isinstance(n.value, int) and not isinstance(n.value, bool) and n.value > 0:
            name = left.args[0].value.value
            self.length_guards[name] = n.with_value(n.value, f"`{self.code(test)}: continue` (line {self.line_of(node)}): "
                                                             f"{name} holds {n.value} batches past it")

    def micro_batch_count(self, node: cst.For | cst.While, env: Env) -> Any:
        """N of `for i in range(N): ... loss.backward()` with no optimizer step inside: a loop over
        micro-batches whose gradients the step after it applies at once (gradient accumulation); the N batches a
        `for b in pending:` loop runs when `if len(pending) < N: continue` collected them."""
        called = {n.func.attr.value for n in _walk(node.body) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)}
        if isinstance(node, cst.For) and isinstance(node.iter, cst.Name) and node.iter.value in self.length_guards:
            if "backward" in called and "step" not in called:
                return self.length_guards[node.iter.value]
            return None
        if isinstance(node, cst.For) and isinstance(node.iter, cst.Call) and self.dotted(node.iter.func) == "enumerate" \
                and node.iter.args and isinstance(node.iter.args[0].value, cst.Name) \
                and node.iter.args[0].value.value in self.length_guards:  # for i, b in enumerate(pending)
            if "backward" in called and "step" not in called:
                return self.length_guards[node.iter.args[0].value.value]
            return None
        if not (isinstance(node, cst.For) and isinstance(node.iter, cst.Call) and self.dotted(node.iter.func) == "range"
                and len(node.iter.args) in (1, 3)):
            return None
        if "backward" not in called or "step" in called:
            return None
        if len(node.iter.args) == 3:
            return self.micro_slice_count(node, env)
        n = self.ev(node.iter.args[0].value, env)
        return n if isinstance(n, (Const, Alts)) else None

    def micro_slice_count(self, node: cst.For, env: Env) -> Any:
        """`for i in range(0, len(rows), micro_batch_size): ... loss.backward()` then one step: micro-batches of k rows
        (the step named as a batch size), ceil(n / k) of them (unknown when n is)."""
        start, total, step = (a.value for a in node.iter.args)
        name = step.value if isinstance(step, cst.Name) else step.attr.value if isinstance(step, cst.Attribute) else \
            step.slice[-1].slice.value.evaluated_value if isinstance(step, cst.Subscript) and isinstance(
                getattr(step.slice[-1].slice, "value", None), cst.SimpleString) else None
        if not (isinstance(start, cst.Integer) and start.value == "0" and isinstance(name, str)
                and _named_in(name, api.batch_size_names())):
            return None
        rows, n = self.ev(step, env), self.ev(total, env)
        how = f"`for ... in {self.code(node.iter)}` cuts the batch into micro-batches of {self.code(step)} rows, a backward each"
        self.facts.micro_slices.append(MicroSlice(rows, self.line_of(node), how))
        if isinstance(rows, Const) and isinstance(n, Const) and isinstance(rows.value, int) and isinstance(n.value, int) \
                and rows.value > 0 and n.value > 0:  # an empty list here is one the loop fills as it runs
            count = -(-n.value // rows.value)
            return n.with_value(count, f"ceil({n.value} / {rows.value}) = {count} micro-batches before the step")
        return Unknown(f"the number of micro-batches `for ... in {self.code(node.iter)}` runs before the optimizer step "
                       f"(line {self.line_of(node)})")

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

    def counter_test(self, node: cst.If, env: Env) -> Any:
        """N of `accum += 1` ... `if accum == N: optimizer.step(); accum = 0` (or `>= N`): a counter the loop steps,
        reset in the block its test guards, counts the backward passes each optimizer step accumulates."""
        test = node.test
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name)
                and isinstance(test.comparisons[0].operator, (cst.Equal, cst.GreaterThanEqual))
                and self.counters and test.left.value in self.counters[-1]):
            return None
        name = test.left.value
        resets = any(isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name)
                     and n.targets[0].target.value == name and isinstance(n.value, cst.Integer)
                     and n.value.evaluated_value == 0 for n in _walk(node.body))
        if not resets:
            return None
        n = self.ev(test.comparisons[0].comparator, env)
        return n if isinstance(n, (Const, Unknown)) else None

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
            if not (self.is_length(count.right) or self._length_item(count.right) and self._one_width(count.left)):
                continue
            self.record_pad(count.left, self.line_of(node), env)
            return

    @staticmethod
    def _length_item(node: cst.CSTNode) -> bool:
        """`lens[i]`: an item of a list of the samples' lengths (its name ends in len/lens/length/lengths)."""
        return isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) \
            and node.value.value.lower().endswith(("len", "lens", "length", "lengths"))

    def _one_width(self, node: cst.CSTNode) -> bool:
        """A width every row is brought to: `max_len` bound to `max(lengths)` or to a number, not another row's own
        length (`[1.0] * (full_lens[i] - prompt_lens[i])` fills a mask)."""
        if isinstance(node, cst.Name) and node.value in self.pad_counts:
            node = self.pad_counts[node.value]
        return isinstance(node, cst.Integer) or isinstance(node, cst.Call) and self.dotted(node.func) == "max" \
            or isinstance(node, (cst.Name, cst.Attribute))

    def joined_ids(self, a: Any, b: Any, node: cst.CSTNode) -> Any:
        """`source_ids + target_ids`: two token lists truncated apart and concatenated hold at most the sum of their caps
        (qlora.py's collator: source_max_len + target_max_len); the sum is the sample's length when both are known."""
        caps = [x.cap for x in (a, b)]
        if not all(isinstance(c, Const) and isinstance(c.value, int) for c in caps):
            return TokenIds("token ids", self.line_of(node), None)
        line = self.line_of(node)
        total = Const(caps[0].value + caps[1].value, weakest(caps[0].source, caps[1].source), line,
                      (*caps[0].chain, *caps[1].chain, f"two token lists truncated apart ({caps[0].value} and "
                       f"{caps[1].value} tokens) joined at line {line}: {self.code(node)}"), caps[0].file)
        self.facts.joined_caps.append(total)
        return TokenIds("token ids", line, total)

    def is_length(self, node: cst.CSTNode) -> bool:
        """`len(ids)`, `x.size(-1)`, `x.shape[1]`, or a name bound to one (`l = x.size(-1)`)."""
        if isinstance(node, cst.Name) and node.value in self.pad_counts:
            node = self.pad_counts[node.value]
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            return False  # `k - len(x) % k`: up to the next multiple of k (a reshape), no common length
        code = self.code(node)
        return "len(" in code or "size" in code or "shape" in code

    def record_pad(self, target: cst.CSTNode, line: int | None, env: Env) -> None:
        from memlint.extract.objects import HandPad

        if self.stack and _reporting(self.stack[-1].qual):
            return  # padding a list of losses to plot or log: not how the training batch is padded
        for _ in range(3):  # batch_max_len = min(max(lengths), max_len); pad_len = batch_max_len - len(ids)
            if isinstance(target, cst.Name) and target.value in self.pad_counts:
                target = self.pad_counts[target.value]
        code = self.code(target)
        value = self.ev(target, env)
        if re.search(r"\blen\(|\.size\(|\.shape\b", code) and "max(" not in code and "min(" not in code \
                and not (isinstance(value, Const) and isinstance(value.value, int)):
            # `[-100] * (batch["input_ids"].shape[1] - len(labels))`, `[True] * (len(seq) - n_prompt)`: brought to the
            # width of another tensor the script already has (a batch the tokenizer padded, the sequence itself), so
            # this is not where the batch's padding is decided
            return
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
        (a packing dataset's __init__, a generator that yields each block); the buffer's length also as a tensor's
        (`buf.numel()`, `buf.size(0)`, `buf.shape[0]`). The same n bounds the loop and both slices."""
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
            if code in tails and any(w in test for w in ("len(", ".numel()", ".size(", ".shape[")) and code in test:
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
            n = self.ev(step, env)
            extra = _wrapped_tokens(elt, hit[0])
            if extra and isinstance(n, Const) and isinstance(n.value, int) and not isinstance(n.value, bool):
                # `[bos] + t[i : i + n] + [eos]`: each block is the slice with the list literals around it
                n = n.with_value(n.value + extra, f"[...] + {self.code(hit[0])} + [...]: {extra} more token(s) around "
                                                  f"each block of {n.value} (line {self.line_of(hit[0])})")
            self.facts.chunking.append(Chunking(n, self.line_of(hit[0])))

    def stream_block_idiom(self, sl: cst.Slice, env: Env) -> None:
        """`buf = tokens[pos : pos + B * T + 1]` then `buf[:-1].view(B, T)` (or .reshape) in the same function:
        a micro-batch of B rows of T tokens cut contiguously from one token stream (packed, no padding)."""
        upper = sl.upper
        if isinstance(upper, cst.Name) and upper.value in self.pad_counts:  # required = B * T + 1; buf[:required]
            upper = self.pad_counts[upper.value]
        if sl.step is not None or not isinstance(upper, cst.BinaryOperation):
            return
        terms: list = []
        _add_terms(upper, terms)
        lower = self.code(sl.lower) if sl.lower is not None else None
        rest = [t for t in terms if self.code(t) != lower and not isinstance(t, cst.Integer)]
        # [pos : pos + B * T + 1] past a position, or [: B * T + 1] from the start of a buffer
        anchored = len(rest) < len(terms) if lower is not None else any(isinstance(t, cst.Integer) for t in terms)
        if len(rest) != 1 or not anchored or not (isinstance(rest[0], cst.BinaryOperation)
                                                  and isinstance(rest[0].operator, cst.Multiply)):
            return
        rows, size = self.code(rest[0].left), self.code(rest[0].right)
        scope = self.stack[-1].node if self.stack else None
        for sub in _walk(scope) if scope is not None else ():
            if isinstance(sub, cst.Call) and isinstance(sub.func, cst.Attribute) and sub.func.attr.value in ("view", "reshape") \
                    and len(sub.args) == 2 and [self.code(a.value) for a in sub.args] == [rows, size]:
                self.facts.windows.append(Window(
                    self.ev(rest[0].left, env), self.ev(rest[0].right, env), self.line_of(sub),
                    f"a contiguous block of one token stream cut into rows: [{lower or ''} : {self.code(sl.upper)}]"
                    f" then .{sub.func.attr.value}({rows}, {size})"))
                return

    def item_block_idiom(self, sl: cst.Slice, env: Env) -> None:
        """A dataset's `__getitem__` that returns `tokens[start : start + n]` (or `end = start + n` then
        `tokens[start:end]`): every sample is one fixed block of n tokens of a token stream (packed, no padding)."""
        if sl.lower is None or sl.upper is None or sl.step is not None or not self.stack \
                or self.stack[-1].qual.rsplit(".", 1)[-1] != "__getitem__" or self.facts.chunking:
            return
        lower, upper = self.code(sl.lower), sl.upper
        if isinstance(upper, cst.Name):  # `end = start + n` earlier in the method
            upper = next((a.value for a in _walk(self.stack[-1].node) if isinstance(a, cst.Assign)
                          and len(a.targets) == 1 and self.code(a.targets[0].target) == upper.value), None)
        if not (isinstance(upper, cst.BinaryOperation) and isinstance(upper.operator, cst.Add)
                and self.code(upper.left) == lower):
            return
        step = upper.right
        name = step.value if isinstance(step, cst.Name) else step.attr.value if isinstance(step, cst.Attribute) else None
        if name is not None and _named_in(name, api.batch_size_names()):
            return  # `self.data[i : i + self.batch_size]`: a batch of samples, not a block of tokens
        n = self.ev(step, env)
        if isinstance(n, Const) and isinstance(n.value, int) and not isinstance(n.value, bool) and n.value > 1:
            self.facts.chunking.append(Chunking(n, self.line_of(sl), f"each sample is one block of {n.value} tokens of "
                                                                     f"a token stream: [{lower} : {self.code(sl.upper)}] "
                                                                     "in the dataset's __getitem__"))

    def batch_slice_idiom(self, sl: cst.Slice, env: Env) -> None:
        """`prompts[j * k : j * k + k]` or `rows[j * k : (j + 1) * k]` with k named as a batch size
        (`micro_batch_size`): a batch of k samples cut from a list, the micro-batch of a loop with no DataLoader."""
        if sl.lower is None or sl.upper is None or sl.step is not None:
            return
        up = sl.upper
        k = None
        if isinstance(up, cst.BinaryOperation) and isinstance(up.operator, cst.Add) \
                and self.code(up.left) == self.code(sl.lower):
            k = up.right
        elif isinstance(up, cst.BinaryOperation) and isinstance(up.operator, cst.Multiply) \
                and isinstance(sl.lower, cst.BinaryOperation) and isinstance(sl.lower.operator, cst.Multiply) \
                and self.code(up.right) == self.code(sl.lower.right):  # (j + 1) * k after j * k
            k = up.right
        name = k.value if isinstance(k, cst.Name) else k.attr.value if isinstance(k, cst.Attribute) else None
        if name is None or not _named_in(name, api.batch_size_names()) or name.lower().startswith(("eval", "val", "test")):
            return
        rows = self.ev(k, env)
        if isinstance(rows, Const) and isinstance(rows.value, int) and not isinstance(rows.value, bool) and rows.value > 0:
            self.facts.batch_slices.append(rows.with_value(rows.value, f"[{self.code(sl.lower)} : {self.code(up)}] "
                                                                       f"(line {self.line_of(sl)}): batches of "
                                                                       f"{self.code(k)} = {rows.value} samples"))

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


def _wrapped_tokens(elt: cst.CSTNode, sub: cst.Subscript) -> int:
    """The elements of the list literals a sum joins to the slice `sub` (`[bos] + x[i:i+n] + [eos]`: 2); 0 when the
    slice is not a term of such a sum."""
    for node in _walk(elt):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            terms: list = []
            _add_terms(node, terms)
            if any(t is sub for t in terms):
                lists = [t for t in terms if t is not sub]
                if lists and all(isinstance(t, cst.List) and not any(isinstance(e, cst.StarredElement)
                                                                     for e in t.elements) for t in lists):
                    return sum(len(t.elements) for t in lists)
                return 0
    return 0


def _add_terms(node: cst.CSTNode, out: list) -> None:
    """The terms of a sum `a + b + c`, in order."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        _add_terms(node.left, out)
        _add_terms(node.right, out)
    else:
        out.append(node)


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


def _range_with_step(node: cst.For | cst.While, dotted: Any) -> bool:
    """`for i in range(start, stop, step)`."""
    return isinstance(node, cst.For) and isinstance(node.iter, cst.Call) and dotted(node.iter.func) == "range" \
        and len(node.iter.args) == 3

