"""The codemods a rule's Fix names: each finds, from a finding's line, the call or constant that sets
a value and returns text edits, how safe they are and a title; Skip says why it cannot.

Keywords that drift with library versions, and which collators pad each batch, are data
(data/fix_keywords.json).

| codemod | finds (from the finding's line) | does | unsafe when |
|---|---|---|---|
| dynamic-padding | a call with padding="max_length" (or PaddingStrategy.MAX_LENGTH) on the line, or the module constant `NAME = "max_length"` passed as padding=NAME | per-batch code (a collator, a collate_fn): "longest"; preprocessing (dataset.map): False | the trainer's collator is unknown, or it does not pad the labels the code sets; skipped when it cannot pad at all (default_data_collator) |
| group-by-length | the TrainingArguments/SFTConfig-like call on the line (else the file's only one) | group_by_length=True, or train_sampling_strategy="group_by_length" on transformers >= 5.2 | it replaces another sampling order, or the call takes **kwargs |
| gradient-checkpointing | same | gradient_checkpointing=True (replaces False/None, or adds it) | the call takes **kwargs |
| double-quant | BitsAndBytesConfig(load_in_4bit=True, ...) on the line (or nested in the call on the line) | bnb_4bit_use_double_quant=True | the call takes **kwargs |
| nf4-quant-type | same; or from_pretrained(..., load_in_4bit=True) without a config | bnb_4bit_quant_type="nf4"; for the bare flag a new BitsAndBytesConfig | it replaces an explicit quant type, or builds a new config |
| suggestion | for each plan field MEM101's suggestion changes, the call that sets it on its line (data/fix_keywords.json "suggestion") | the suggested values (micro-batch and accumulation, recompute, SDPA, an 8-bit optimizer, a fused loss, ...) | always: it changes the run; skipped where a change is not one keyword (LoRA, QLoRA) |

params: {"call": name or [names]} narrows the calls (default: the lists below); dynamic-padding
takes {"keyword": "padding"}. A value set through a module constant is edited at the constant
only when every use of the constant is that same keyword.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import libcst as cst

from memlint import data
from memlint.library.api import training_arguments
from memlint.library.versions import in_range, installed_version
from memlint.fix.doc import NOT_LITERAL, Doc, Edit, Skip, add_keyword, has_star_kwargs, keyword, literal


BNB_CONFIG = ("BitsAndBytesConfig",)
FROM_PRETRAINED = ("from_pretrained",)


@dataclass(frozen=True)
class Planned:
    """What a codemod would do: the edits, "safe" or "unsafe", and a title that says why."""

    edits: tuple[Edit, ...]
    applicability: str
    title: str


def _data() -> dict:
    return data.load("fix_keywords.json")


def keyword_for(codemod: str) -> tuple[str, str]:
    """(keyword, value text) to add for `codemod`, for the installed library version (newest if absent)."""
    spec = _data()["keywords"][codemod]
    version = installed_version(spec["package"])
    for entry in spec["entries"]:
        if in_range(version, entry.get("versions")):
            return entry["keyword"], entry["value"]
    raise Skip(f"no keyword for {codemod} known for {spec['package']} {version}")  # pragma: no cover - data covers all


def _names(params: Mapping[str, Any], default: Sequence[str]) -> tuple[str, ...]:
    call = params.get("call")
    if isinstance(call, str):
        return (call.rsplit(".", 1)[-1],)
    if isinstance(call, (list, tuple)) and call:
        return tuple(str(c).rsplit(".", 1)[-1] for c in call)
    return tuple(default)


def _shown(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else "/".join(names[:2]) + ("/..." if len(names) > 2 else "")


# ---- a keyword set to a literal, in the call or through a module constant ------------------------


@dataclass(frozen=True)
class _Choice:
    """One keyword a codemod may find already in the call, and what to do with its value."""

    keyword: str
    done: Callable[[Any], bool]          # the value is already what the fix wants
    new: str                             # replacement text
    unsafe_when: Callable[[Any], str | None] = lambda v: None  # why replacing this value is unsafe


def _value_target(doc: Doc, call: cst.Call, arg: cst.Arg, names: Sequence[str]) -> tuple[cst.BaseExpression, Any, str]:
    """(node to replace, its literal value, where) for a keyword argument, following a module constant
    when every use of that constant is this same keyword in a call of the same kind."""
    value = arg.value
    lit = literal(doc, value)
    kw = arg.keyword.value
    if lit is not NOT_LITERAL:
        return value, lit, f"line {doc.pos[value].start.line}"
    if isinstance(value, cst.Name):
        const = doc.constant(value.value)
        if const is None:
            raise Skip(f"{kw} is set from `{value.value}`, which is not a single module constant; set it by hand")
        clit = literal(doc, const)
        if clit is NOT_LITERAL:
            raise Skip(f"{kw} is set from `{value.value}` = `{doc.code(const)}`, not a literal; set it by hand")
        for use in doc.uses(value.value):
            p = doc.parent.get(use)
            ok = isinstance(p, cst.Arg) and p.keyword is not None and p.keyword.value == kw
            ok = ok and any(p in c.args for c in doc.calls_to(names))
            if not ok:
                raise Skip(f"{value.value} (line {doc.pos[const].start.line}) is also used at line "
                           f"{doc.pos[use].start.line}; set {kw} by hand")
        return const, clit, f"`{value.value}` at line {doc.pos[const].start.line}"
    raise Skip(f"{kw} is set from `{doc.code(value)}`, not a literal; set it by hand")


def _locate(doc: Doc, line: int, names: Sequence[str], keywords: Sequence[str]) -> cst.Call:
    call = doc.call_at(line, names)
    if call is not None:
        return call
    nested = [c for c in doc.calls_to(names) if _inside_call_spanning(doc, c, line)]
    if len(nested) == 1:  # from_pretrained(..., quantization_config=BitsAndBytesConfig(...)) at its first line
        return nested[0]
    at = doc.assignment_at(line)
    if at is not None:  # the finding points at `NAME = value`, used as kw=NAME in the call
        name = at[0]
        for c in doc.calls_to(names):
            for kw in keywords:
                a = keyword(c, kw)
                if a is not None and isinstance(a.value, cst.Name) and a.value.value == name:
                    return c
    calls = doc.calls_to(names)
    if len(calls) == 1:  # the finding points at a related line (max_length, a default): the file's only such call
        return calls[0]
    where = f"the file has {len(calls)} of them" if calls else "the value is set elsewhere (a command-line default, a config file)"
    raise Skip(f"line {line} is not inside a {_shown(names)}(...) call and {where}; set it by hand")


def _inside_call_spanning(doc: Doc, node: cst.CSTNode, line: int) -> bool:
    p = doc.parent.get(node)
    while p is not None:
        if isinstance(p, cst.Call):
            a, b = doc.lines(p)
            if a <= line <= b:
                return True
        p = doc.parent.get(p)
    return False


def _keyword_fix(doc: Doc, line: int, names: Sequence[str], choices: Sequence[_Choice], add: tuple[str, str],
                 what: str) -> Planned:
    call = _locate(doc, line, names, [c.keyword for c in choices])
    cname = doc.last_name(call.func) or names[0]
    for ch in choices:
        arg = keyword(call, ch.keyword)
        if arg is None:
            continue
        node, lit, where = _value_target(doc, call, arg, names)
        if ch.done(lit):
            raise Skip(f"{ch.keyword} is already {lit!r} ({where})")
        why = ch.unsafe_when(lit)
        title = f"{what}: {ch.keyword}={ch.new} in {cname}(...) ({where}, was {lit!r})"
        return Planned((Edit(doc.start(node), doc.end(node), ch.new),), "unsafe" if why else "safe",
                       title + (f"; unsafe: {why}" if why else ""))
    kw, value = add
    title = f"{what}: add {kw}={value} to {cname}(...) at line {doc.pos[call].start.line}"
    if has_star_kwargs(call):
        return Planned(tuple(add_keyword(doc, call, kw, value)), "unsafe",
                       title + f"; unsafe: the call also takes **kwargs, which may set {kw} too")
    return Planned(tuple(add_keyword(doc, call, kw, value)), "safe", title)


def _truthy(v: Any) -> bool:
    return bool(v) and v is not NOT_LITERAL


def gradient_checkpointing(doc: Doc, line: int, params: Mapping[str, Any]) -> Planned:
    names = _names(params, tuple(training_arguments()))
    choices = [_Choice(k, _truthy, "True") for k in ("gradient_checkpointing", "activation_checkpointing")]
    return _keyword_fix(doc, line, names, choices, keyword_for("gradient-checkpointing"), "Recompute activations")


def group_by_length(doc: Doc, line: int, params: Mapping[str, Any]) -> Planned:
    names = _names(params, tuple(training_arguments()))
    choices = [
        _Choice("group_by_length", _truthy, "True"),
        _Choice("train_sampling_strategy", lambda v: v == "group_by_length", '"group_by_length"',
                lambda v: None if v == "random" else f"replaces the {v!r} sampling order"),
    ]
    return _keyword_fix(doc, line, names, choices, keyword_for("group-by-length"), "Batch samples of similar length")


def _require_4bit(doc: Doc, call: cst.Call) -> None:
    arg = keyword(call, "load_in_4bit")
    if arg is None:
        raise Skip(f"{doc.last_name(call.func)}(...) at line {doc.pos[call].start.line} does not set load_in_4bit=True")
    lit = literal(doc, arg.value)
    if lit is False or lit is None:
        raise Skip(f"load_in_4bit is {lit!r} at line {doc.pos[arg].start.line}: not a 4-bit config")


def _bare_4bit(doc: Doc, line: int) -> cst.Call | None:
    """A from_pretrained(..., load_in_4bit=True) call on `line` that has no quantization_config."""
    call = doc.call_at(line, FROM_PRETRAINED)
    if call is None or keyword(call, "load_in_4bit") is None or keyword(call, "quantization_config") is not None:
        return None
    return call


def double_quant(doc: Doc, line: int, params: Mapping[str, Any]) -> Planned:
    names = _names(params, BNB_CONFIG)
    try:
        call = _locate(doc, line, names, ["bnb_4bit_use_double_quant", "load_in_4bit"])
    except Skip:
        if _bare_4bit(doc, line) is not None:
            raise Skip("load_in_4bit=True is passed to from_pretrained without a BitsAndBytesConfig; "
                       "apply the nf4-quant-type fix first, or pass quantization_config= by hand") from None
        raise
    _require_4bit(doc, call)
    choices = [_Choice("bnb_4bit_use_double_quant", _truthy, "True")]
    return _keyword_fix(doc, doc.pos[call].start.line, names, choices, keyword_for("double-quant"),
                        "Quantize the quantization constants")


def _config_name(doc: Doc) -> tuple[str, list[Edit]]:
    """How this file can name BitsAndBytesConfig, and the import to add when it cannot yet."""
    for local, full in doc.aliases.items():
        if full == "transformers.BitsAndBytesConfig":
            return local, []
    for local, full in doc.aliases.items():
        if full == "transformers":
            return f"{local}.BitsAndBytesConfig", []
    last = None
    for stmt in doc.module.body:
        if isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            last = stmt
    if last is None:
        raise Skip("no import block to add `from transformers import BitsAndBytesConfig` to; add it by hand")
    end_line = doc.pos[last].end.line
    eol = doc.offset(end_line, len(doc.line_text(end_line)))
    nl = "\r\n" if doc.source.startswith("\r\n", eol) else "\n"
    return "BitsAndBytesConfig", [Edit(eol, eol, f"{nl}from transformers import BitsAndBytesConfig")]


def _nf4_from_bare(doc: Doc, call: cst.Call) -> Planned:
    if any(a.keyword is not None and a.keyword.value.startswith("bnb_4bit_") for a in call.args):
        raise Skip("from_pretrained also takes bnb_4bit_* keywords; move them into a BitsAndBytesConfig by hand")
    arg = keyword(call, "load_in_4bit")
    name, edits = _config_name(doc)
    value = doc.code(arg.value)
    new = f'quantization_config={name}(load_in_4bit={value}, bnb_4bit_quant_type="nf4")'
    edits.append(Edit(doc.start(arg.keyword), doc.end(arg.value), new))
    return Planned(tuple(edits), "unsafe",
                   f"Quantize to NF4: replace load_in_4bit={value} at line {doc.pos[arg].start.line} with {new}; "
                   "unsafe: builds a new BitsAndBytesConfig")


def nf4_quant_type(doc: Doc, line: int, params: Mapping[str, Any]) -> Planned:
    names = _names(params, BNB_CONFIG)
    try:
        call = _locate(doc, line, names, ["bnb_4bit_quant_type", "load_in_4bit"])
    except Skip:
        bare = _bare_4bit(doc, line)
        if bare is not None:
            return _nf4_from_bare(doc, bare)
        raise
    _require_4bit(doc, call)
    choices = [_Choice("bnb_4bit_quant_type", lambda v: v == "nf4", '"nf4"',
                       lambda v: f"replaces an explicit {v!r}" if v != "nf4" else None)]
    return _keyword_fix(doc, doc.pos[call].start.line, names, choices, keyword_for("nf4-quant-type"),
                        "Quantize to NF4")


# ---- padding="max_length" -> pad each batch ----------------------------------------------------

_PER_BATCH_KEYWORDS = ("collate_fn", "data_collator")


def _is_max_length(doc: Doc, node: cst.BaseExpression) -> bool:
    if literal(doc, node) == "max_length":
        return True
    return isinstance(node, cst.Attribute) and node.attr.value == "MAX_LENGTH"  # PaddingStrategy.MAX_LENGTH


@dataclass(frozen=True)
class _Batching:
    """How the trainer (or DataLoader) turns rows into a batch: does it pad each batch itself?"""

    pads: bool | None        # True: pads per batch; False: cannot stack uneven rows; None: unknown
    label: str               # what it is, for titles
    pads_labels: bool = True


def _collator_entry(doc: Doc, node: cst.BaseExpression) -> _Batching | None:
    q = doc.qualified(node) or ""
    package, _, _ = q.partition(".")
    name = q.rsplit(".", 1)[-1]
    table = _data()["collators"]
    if package in table and name in table[package]:
        return _Batching(True, name, table[package][name]["pads_labels"])
    if name in table["transformers"]:  # imported some other way: transformers' class of that name
        return _Batching(True, name, table["transformers"][name]["pads_labels"])
    return None


def _classify_collator(doc: Doc, node: cst.BaseExpression, depth: int = 0) -> _Batching:
    no_padding = _data()["trainer_default_collators"]["no_padding"]
    if isinstance(node, cst.Call):
        known = _collator_entry(doc, node.func)
        if known is not None:
            pad = keyword(node, "padding")
            if pad is not None and literal(doc, pad.value) in (False, "do_not_pad"):
                return _Batching(False, f"{known.label}(padding=False)")
            return known
        name = doc.last_name(node.func)
        if name in no_padding:
            return _Batching(False, name)
        return _Batching(None, f"{name or doc.code(node.func)}(...), a collator memlint does not know")
    name = doc.last_name(node)
    if name in no_padding:
        return _Batching(False, name)
    if isinstance(node, cst.Name) and depth < 4:
        if name in doc.functions:
            return _Batching(None, f"the custom collator {name}()")
        const = doc.bindings.get(name, [])
        if len(const) == 1 and isinstance(const[0], cst.Assign):
            return _classify_collator(doc, const[0].value, depth + 1)
    if isinstance(node, cst.Name) and node.value == "None":
        return _Batching(None, "data_collator=None")
    return _Batching(None, f"`{doc.code(node)}`, a collator memlint cannot follow")


def _batching(doc: Doc) -> _Batching:
    """The worst batching over the file's trainers, else its DataLoaders."""
    defaults = _data()["trainer_default_collators"]
    verdicts: list[_Batching] = []
    subclassed = {c.name.value for c in doc.classes if any((doc.last_name(b.value) or "").endswith("Trainer") for b in c.bases)}
    for call in doc.calls:
        name = doc.last_name(call.func) or ""
        if not (name.endswith("Trainer") or name in subclassed):
            continue
        dc = keyword(call, "data_collator")
        if dc is not None and literal(doc, dc.value) is None:
            dc = None  # data_collator=None: the trainer's default
        if dc is not None:
            verdicts.append(_classify_collator(doc, dc.value))
        elif name in defaults["trl"] or (doc.qualified(call.func) or "").startswith("trl."):
            verdicts.append(_Batching(True, f"{name}'s own collator"))
        elif any(keyword(call, k) is not None and literal(doc, keyword(call, k).value) is not None
                 for k in ("processing_class", "tokenizer")):
            verdicts.append(_Batching(True, f"DataCollatorWithPadding ({name}'s default with a tokenizer)", False))
        else:
            verdicts.append(_Batching(False, f"default_data_collator ({name}'s default without a tokenizer)"))
    if not verdicts:
        for call in doc.calls:
            if doc.last_name(call.func) == "DataLoader":
                cf = keyword(call, "collate_fn")
                verdicts.append(_classify_collator(doc, cf.value) if cf is not None else _Batching(False, "DataLoader's default collate"))
    if not verdicts:
        return _Batching(None, "no Trainer or DataLoader shows how batches are made")
    for want in (False, None):
        for v in verdicts:
            if v.pads is want:
                return v
    return verdicts[0]


def _per_batch(doc: Doc, call: cst.Call) -> bool:
    """Whether this padding call runs once per batch: a collator, or code inside a function used as one."""
    name = doc.last_name(call.func) or ""
    if "Collator" in name:
        return True
    fn = doc.enclosing(call, (cst.FunctionDef, cst.Lambda))
    while fn is not None:
        if isinstance(fn, cst.FunctionDef):
            if fn.name.value in ("__call__", "collate", "collate_fn", "torch_call"):
                return True
            for use in doc.uses(fn.name.value):
                p = doc.parent.get(use)
                if isinstance(p, cst.Arg) and p.keyword is not None and p.keyword.value in _PER_BATCH_KEYWORDS:
                    return True
        else:
            p = doc.parent.get(fn)
            if isinstance(p, cst.Arg) and p.keyword is not None and p.keyword.value in _PER_BATCH_KEYWORDS:
                return True
        fn = doc.enclosing(fn, (cst.FunctionDef, cst.Lambda))
    return False


def _sets_labels(doc: Doc, call: cst.Call) -> bool:
    """Whether the code around this tokenizer call also produces a `labels` column."""
    scope = doc.enclosing(call, (cst.FunctionDef,)) or doc.module
    for n in doc.walk(scope):
        if isinstance(n, cst.SimpleString) and literal(doc, n) == "labels":
            return True
        if isinstance(n, cst.Arg) and n.keyword is not None and n.keyword.value == "labels":
            return True
    return False


def _padding_rewrite(doc: Doc, call: cst.Call) -> tuple[str, str, str | None]:
    """(new value text, title, why unsafe or None) for the padding keyword of one call."""
    if _per_batch(doc, call):
        return '"longest"', "pad each batch to its longest row", None
    tensors = keyword(call, "return_tensors")
    b = _batching(doc)
    if tensors is not None and literal(doc, tensors.value) is not None:
        # padding=False cannot return a tensor of uneven rows; "longest" pads each map chunk only
        new, what = '"longest"', "pad each chunk to its longest row (return_tensors needs equal rows)"
    else:
        new, what = "False", (f"leave rows unpadded; {b.label} pads each batch" if b.pads
                              else "leave rows unpadded for the collator to pad")
    if b.pads is False:
        raise Skip(f"{b.label} cannot stack rows of different lengths: pass a padding collator "
                   "(e.g. data_collator=DataCollatorWithPadding(tokenizer)) before dropping padding=\"max_length\"")
    if b.pads is None:
        return new, what, f"{b.label}: memlint cannot tell that it pads each batch"
    if not b.pads_labels and _sets_labels(doc, call):
        return new, what, f"{b.label} does not pad the labels this code sets; use DataCollatorForSeq2Seq"
    return new, what, None


def dynamic_padding(doc: Doc, line: int, params: Mapping[str, Any]) -> Planned:
    kw = str(params.get("keyword", "padding"))
    candidates = []
    for c in doc.calls:
        a = keyword(c, kw)
        if a is None:
            continue
        first, last = doc.lines(c)
        if first <= line <= last:
            candidates.append(c)
    calls = sorted(candidates, key=lambda c: doc.end(c) - doc.start(c))[:1]
    const_name = None
    if not calls:
        at = doc.assignment_at(line)
        if at is None:
            raise Skip(f"no call with {kw}=... at line {line}")
        const_name = at[0]
        calls = [c for c in doc.calls if (a := keyword(c, kw)) is not None
                 and isinstance(a.value, cst.Name) and a.value.value == const_name]
        if not calls:
            raise Skip(f"{const_name} (line {line}) is not passed as {kw}=...")
    arg = keyword(calls[0], kw)
    value = arg.value
    if isinstance(value, cst.Name) and literal(doc, value) is NOT_LITERAL:
        const_name = value.value
        const = doc.constant(const_name)
        if const is None:
            raise Skip(f"{kw} is set from `{const_name}`, which is not a single module constant; set it by hand")
        users = []
        for use in doc.uses(const_name):
            p = doc.parent.get(use)
            if not (isinstance(p, cst.Arg) and p.keyword is not None and p.keyword.value == kw):
                raise Skip(f"{const_name} (line {doc.pos[const].start.line}) is also used at line "
                           f"{doc.pos[use].start.line}; set {kw} by hand")
            users.append(doc.enclosing(p, (cst.Call,)))
        node, where = const, f"`{const_name}` at line {doc.pos[const].start.line}"
    else:
        users, node, where = [calls[0]], value, f"line {doc.pos[value].start.line}"
    if not _is_max_length(doc, node):
        lit = literal(doc, node)
        if lit is NOT_LITERAL:
            raise Skip(f"{kw} is set from `{doc.code(node)}`, not a literal; set it by hand")
        raise Skip(f"{kw} is already {lit!r} ({where})")
    rewrites = {_padding_rewrite(doc, u) for u in users}
    if len({r[0] for r in rewrites}) > 1:
        raise Skip(f"{const_name} is used by calls that need different padding; set each by hand")
    new, what, why = sorted(rewrites, key=lambda r: r[2] is None)[0]
    title = f"Pad dynamically: {kw}={new} ({where}): {what}"
    return Planned((Edit(doc.start(node), doc.end(node), new),), "unsafe" if why else "safe",
                   title + (f"; unsafe: {why}" if why else ""))


# ---- MEM101's suggestion: every plan value it changes, at the line that sets it -------------------------------


def _suggested_value(field: str, value: Any) -> str:
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _one_change(doc: Doc, line: int, field: str, value: Any) -> Planned:
    """One plan field set to `value` in the call that sets it on `line` (or the file's only such call)."""
    spec = _data()["suggestion"].get(field)
    if spec is None:
        raise Skip(f"the suggestion changes {field}, which no keyword of one call sets; apply it by hand")
    calls = spec["calls"]
    if calls == "training_arguments":
        names = tuple(training_arguments())
    elif calls == "any":
        names = tuple({doc.last_name(c.func) for c in doc.calls if doc.last_name(c.func)})
    else:
        names = tuple(calls)
    text = _suggested_value(field, value)
    choices = [_Choice(k, lambda v, want=value: v == want, text) for k in spec["keywords"]]
    return _keyword_fix(doc, line, names, choices, (spec["keywords"][0], text), "MEM101's suggestion")


def suggestion(doc: Doc, line: int, params: Mapping[str, Any]) -> Planned:
    """MEM101's cheapest set of changes that fits, applied: params {"changes": [{"field", "value", "line"}]} (plan
    fields, the values the suggestion gives them, and the line that sets each; None: the finding's line). Each is
    made in turn on the text the previous one left; the result is one edit over the changed region. Unsafe: it
    changes the run (its step time, or its numerics: SDPA and a fused loss are not bit-identical)."""
    changes = list(params.get("changes") or ())
    if not changes:
        raise Skip("the suggestion has no change a script can say")
    source, titles = doc.source, []
    # bottom-up, so the lines of the changes still to make stay where the plan says
    for ch in sorted(changes, key=lambda c: -(c.get("line") or line)):
        cur = Doc.of(source)
        try:
            planned = _one_change(cur, ch.get("line") or line, ch["field"], ch["value"])
        except Skip as exc:
            if "is already" in str(exc):
                continue
            raise
        from memlint.fix.doc import apply_edits

        source = apply_edits(source, planned.edits)
        titles.append(planned.title.split(": ", 1)[1].split("; unsafe", 1)[0])
    if source == doc.source:
        raise Skip("the suggestion is already applied")
    a = 0
    while a < min(len(source), len(doc.source)) and source[a] == doc.source[a]:
        a += 1
    b = 0
    while b < min(len(source), len(doc.source)) - a and source[-1 - b] == doc.source[-1 - b]:
        b += 1
    edit = Edit(a, len(doc.source) - b, source[a:len(source) - b])
    return Planned((edit,), "unsafe", "Apply MEM101's suggestion: " + "; ".join(reversed(titles))
                   + "; unsafe: it changes the run (step time, numerics)")


CODEMODS: dict[str, Callable[[Doc, int, Mapping[str, Any]], Planned]] = {
    "suggestion": suggestion,
    "dynamic-padding": dynamic_padding,
    "group-by-length": group_by_length,
    "gradient-checkpointing": gradient_checkpointing,
    "double-quant": double_quant,
    "nf4-quant-type": nf4_quant_type,
}
