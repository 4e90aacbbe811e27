"""Abstract values the interpreter computes: constants with provenance, objects, unknowns.

Nothing here is syntax-tree-shaped except the function and class bodies kept for later calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from memlint.extract import budget
from memlint.plan import SOURCES

_RANK = {s: i for i, s in enumerate(SOURCES)}


@dataclass(frozen=True)
class Const:
    """A Python value known statically, where it came from, and how it was reached."""

    value: Any
    source: str
    line: int | None
    chain: tuple[str, ...] = ()
    file: str | None = None        # set when the value was written in another file (a sibling module)

    def named(self, how: str) -> "Const":
        src = "constant" if self.source == "literal" else self.source
        return Const(self.value, src, self.line, self.chain + (how,), self.file)

    def via(self, source: str, how: str, line: int | None = None, file: str | None = None) -> "Const":
        """The same value reached through a default mechanism (argparse, dataclass, ...).

        A literal written in the mechanism keeps its own line; a value that came from
        elsewhere (a constant) points at the mechanism, the line that sets the default.
        """
        if self.source == "literal" or line is None:
            return Const(self.value, source, self.line, self.chain + (how,), self.file)
        return Const(self.value, source, line, self.chain + (how,), file)

    def with_value(self, value: Any, how: str | None = None) -> "Const":
        return Const(value, self.source, self.line, self.chain + ((how,) if how else ()), self.file)


@dataclass(frozen=True)
class Unknown:
    """A value that cannot be known statically; `why` says what it depends on."""

    why: str = ""
    line: int | None = None


@dataclass(frozen=True, eq=False)
class Remainder(Unknown):
    """`total - part` with `part` unknown: unknown itself, but `part + (total - part)` is `total` (a completion budget
    written as a whole length minus a prompt length the data decides)."""

    total: Any = None
    part: Any = None


@dataclass(frozen=True)
class TokenIds(Unknown):
    """Token ids a tokenizer call returned (the whole output, its `input_ids`, one sample's list): unknown values, each
    sample at most `cap` tokens when the call truncates to a known length; two such lists joined with `+` hold at most
    the sum (a prompt and a response truncated apart, then concatenated: qlora.py's collator)."""

    cap: Any = None
    rows: Any = None         # a Const: the rows when the tokenized list's length is known (`[prompt] * G`)
    generated: bool = False  # a generate() output: prompt + new tokens (what an RL loop then trains on)


@dataclass(frozen=True)
class DeviceCount(Unknown):
    """torch.cuda.device_count() where the launch does not set CUDA_VISIBLE_DEVICES: every GPU the machine shows."""


@dataclass(frozen=True)
class Template(Unknown):
    """A string some of whose parts are not known (an f-string over unknowns): `text` holds the known parts, HOLE
    where each unknown part goes. Unknown to everything but what reads a command line from it."""

    text: str = ""


HOLE = "\x00"


@dataclass(frozen=True)
class RaisedBy(Unknown):
    """The value of a call that raises here (ast.literal_eval of a non-literal): a try around it runs its handler."""


@dataclass(frozen=True)
class Alts:
    """Every value a name may hold when branches disagree. `fork`: (the branching, the branches each option came
    from) when the options are the names' values after one `if` whose test memlint cannot decide; two names of the
    same branching hold their values together (a model id and the keywords it is loaded with)."""

    options: tuple[Any, ...]
    fork: tuple | None = field(default=None, compare=False)


@dataclass(eq=False)
class Seq:
    items: list
    kind: str = "list"
    grown: bool = False  # appended to a number of times memlint does not know (in a loop): its length is unknown


@dataclass(eq=False)
class Dict:
    items: dict
    open: bool = False  # has entries that could not be resolved
    last: dict = field(default_factory=dict)  # each item's last write in the script's text (`if t: d[k] = 3`: 3),
                                              # for readers that take one value per key (a DeepSpeed config dict)


@dataclass(frozen=True)
class Ref:
    """A name from an imported module: `transformers.TrainingArguments`, `torch.bfloat16`."""

    qual: str
    line: int | None = field(default=None, compare=False)
    source: str = field(default="literal", compare=False)

    @property
    def name(self) -> str:
        return self.qual.rsplit(".", 1)[-1]


@dataclass(eq=False)
class Func:
    node: Any                      # libcst.FunctionDef (extract/parsed.py)
    env: Any                       # the Env it closes over
    module: Any                    # the Module state it was defined in
    qual: str
    defaults: dict = field(default_factory=dict)   # param name -> abstract value
    default_source: dict = field(default_factory=dict)  # param name -> provenance of its default
    ran: bool = False
    calls: int = 0
    owner: Any = None              # the Class whose method this is
    click: list = field(default_factory=list)  # (param, flags, action, nargs, type name) of its @click.option/argument decorators
    typer: bool = False            # an @app.command() of a typer.Typer app: typer fills its parameters from the command
    cli: str = ""                  # a CLI library that calls it with the command's words when the script runs: "fastcore" (@call_parse)
    gpus: Any = None               # the GPUs its decorator runs it on (a cloud function's request): a count or DeviceCount


@dataclass(eq=False)
class Class:
    name: str
    bases: list
    fields: dict                   # name -> abstract value of its default (or Unknown)
    field_lines: dict
    line: int
    is_dataclass: bool
    file: str | None = None        # set when defined in a sibling module
    methods: dict = field(default_factory=dict)  # name -> Func (the class's own `def`s)
    validated: bool = False        # a pydantic-style model: keyword fields, a dict for a model-annotated field nests
    aliases: dict = field(default_factory=dict)  # the key an input dict uses -> the field (Field(alias="model"))
    nested: dict = field(default_factory=dict)   # field -> the model Class its annotation names
    class_attrs: dict = field(default_factory=dict)  # a dataclass's plain class attributes (no annotation: no field)

    def lineage(self) -> Iterator[Any]:
        """This class, then its bases breadth first: a class of the checkout (whose own bases follow in turn) or a
        library class as the Ref it is; at most 20 of them (a cycle or a deep hierarchy ends there)."""
        seen, queue = 0, [self]
        while queue and seen < 20:
            seen += 1
            c = queue.pop(0)
            yield c
            if isinstance(c, Class):
                queue.extend(c.bases)

    def class_lookup(self, name: str) -> tuple[str, Any] | None:
        """`name` read on the class object itself: a class attribute set on it (`Cfg.batch = 64`, which a dataclass's
        instances do not see: their defaults were taken when the class was made) before its fields and methods."""
        for c in self.lineage():
            if isinstance(c, Class) and name in c.class_attrs:
                return "field", c.class_attrs[name]
        return self.lookup(name)

    def attribute_store(self) -> dict:
        """Where `Cls.name = v` writes: a dataclass's own class attributes (its instances keep their field defaults),
        another class's attributes (its instances read them through the class)."""
        return self.class_attrs if self.is_dataclass else self.fields

    def lookup(self, name: str) -> tuple[str, Any] | None:
        """("field"|"method", value) of `name` on this class or its user-class bases (MRO order)."""
        for c in self.lineage():
            if isinstance(c, Class) and name in c.fields:
                return "field", c.fields[name]
            if isinstance(c, Class) and name in c.methods:
                return "method", c.methods[name]
            if isinstance(c, Class) and name in c.class_attrs:
                return "field", c.class_attrs[name]
        return None


@dataclass(eq=False)
class ModuleVal:
    name: str
    env: Any


# ---- sizes: what walking a list or dict costs (extract/budget.py has the limits) -----------

def weight(v: Any) -> int:
    """How many values an abstract list or dict holds, nested ones counted as often as they
    appear: what walking it costs. Kept on the container (`_weight`), so the check is an
    attribute read; a container built without `weigh` is weighed on first use."""
    w = getattr(v, "_weight", None)
    if w is not None:
        return w
    if type(v) is Seq or type(v) is Dict:
        w = 1
        for x in (v.items.values() if type(v) is Dict else v.items):
            w += weight(x)
            if w > budget.MAX_ITEMS:
                break
        v._weight = w
        return w
    return 1


def weigh(container: Any, items: Any) -> Any:
    """Set `container`'s weight from its items; None when it is over the budget."""
    w = 1
    for x in items:
        w += weight(x)
    if w > budget.MAX_ITEMS:
        return None
    container._weight = w
    return container


def insert_fits(container: Any, value: Any) -> bool:
    """`d[k] = value` on an abstract dict: within the budget, and not a cycle (`d["self"] = d`)."""
    w = weight(value)
    if weight(container) + w > budget.MAX_ITEMS:
        return False
    if (type(value) is Seq or type(value) is Dict) and _holds(value, container):
        return False
    container._weight = weight(container) + w
    return True


def _holds(v: Any, target: Any) -> bool:
    stack, seen = [v], set()
    while stack:
        x = stack.pop()
        if x is target:
            return True
        if (type(x) is Seq or type(x) is Dict) and id(x) not in seen:
            seen.add(id(x))
            stack.extend(x.items.values() if type(x) is Dict else x.items)
    return False


def weakest(*sources: str) -> str:
    return max(sources, key=lambda s: _RANK.get(s, 0)) if sources else "literal"


def flatten(v: Any) -> list:
    if isinstance(v, Alts):
        out = []
        for o in v.options:
            out.extend(flatten(o))
        return out
    return [v]


def merge(a: Any, b: Any) -> Any:
    """The value of a name after two branches that may disagree."""
    if a is b:
        return a
    opts: list = []
    for o in flatten(a) + flatten(b):
        if any(same_value(o, p) for p in opts):
            continue
        opts.append(o)
    if len(opts) > budget.MAX_ALTERNATIVES:
        return Unknown("one of too many alternatives")
    return opts[0] if len(opts) == 1 else Alts(tuple(opts))


def paired(value: Any, option: Any, other: Any) -> list:
    """The options of `other` set on the same branches as `option` (one of `value`'s options) when both are names of
    one undecided `if` (Alts.fork); every option of `other` otherwise."""
    opts = flatten(other)
    if not (isinstance(value, Alts) and isinstance(other, Alts) and value.fork and other.fork
            and value.fork[0] is other.fork[0]):
        return opts
    mine = next((b for o, b in zip(value.options, value.fork[1]) if o is option), None)
    if mine is None:
        return opts
    return [o for o, b in zip(other.options, other.fork[1]) if b & mine]


def same_value(a: Any, b: Any) -> bool:
    """Whether two values are the same option of a merge (the same object, equal constants, the same library name)."""
    if a is b:
        return True
    if isinstance(a, Const) and isinstance(b, Const):
        return type(a.value) is type(b.value) and a.value == b.value and a.line == b.line
    if isinstance(a, Unknown) and isinstance(b, Unknown):
        return True
    if isinstance(a, Ref) and isinstance(b, Ref):
        return a.qual == b.qual
    return False


def to_python(v: Any) -> Any:
    """Const-ish value -> (python value, source, line, chain); containers resolved when fully known."""
    if isinstance(v, Const):
        return v
    if isinstance(v, Seq):
        parts = [to_python(x) for x in v.items]
        if all(isinstance(p, Const) for p in parts):
            val = [p.value for p in parts]
            if v.kind == "tuple":
                val = tuple(val)
            src = weakest(*(p.source for p in parts)) if parts else "literal"
            first = next((p for p in parts if p.line), None)
            return Const(val, src, first.line if first else None, (), first.file if first else None)
        return Unknown("a list with unknown items")
    if isinstance(v, Dict):
        if v.open:
            return Unknown("a dict with unknown entries")
        out = {}
        for k, x in v.items.items():
            p = to_python(x)
            if not isinstance(p, Const):
                return Unknown("a dict with unknown values")
            out[k] = p.value
        return Const(out, "literal", None, ())
    return v
