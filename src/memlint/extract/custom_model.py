"""A model class of the script's own checkout (`class GPT(nn.Module)`), read as a shape.

When a script builds its own `nn.Module` from a config object whose values the interpreter
reads (nanoGPT's `GPT(GPTConfig(n_layer=12, ...))`, lit-llama's `LLaMA(LLaMAConfig.from_name("7B"))`,
lit_gpt's `GPT(Config.from_name(name))`), the shape is put in the words of a Hugging Face
config.json (`model_type` gpt2 or llama), so the catalog counts it as it counts a local
checkpoint. What decides the family is read, not guessed: the config's keys, and the
`nn.Linear` / `nn.Embedding` layers the interpreter saw the class's `__init__` build (the MLP's
inner width is the Linear pair hidden -> m -> hidden; two Linears into m: a gated MLP). A shape
that cannot be read stays unknown, with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memlint.extract.objects import DataclassInstance, Instance, Obj, field_value
from memlint.extract.values import Const, Dict, Seq, Unknown, flatten
from memlint.plan import Value

# config key spellings, first found wins
_KEYS = {
    "layers": ("n_layer", "num_hidden_layers", "n_layers", "num_layers"),
    "heads": ("n_head", "num_attention_heads", "n_heads"),
    "hidden": ("n_embd", "hidden_size", "dim", "d_model", "emb_dim"),
    "kv": ("n_kv_heads", "n_query_groups", "num_key_value_heads", "n_kv_head"),
    "inter": ("intermediate_size", "ffn_dim", "hidden_dim"),
    "vocab": ("padded_vocab_size", "vocab_size"),
    "positions": ("block_size", "max_position_embeddings", "n_positions", "max_seq_len", "context_length"),
    "bias": ("bias",),
}


@dataclass
class Layers:
    """The layers a script's own module built while its __init__ ran: (in, out, bias) and embeddings."""

    linears: list[tuple[int, int, Any]] = field(default_factory=list)  # (in, out, the call's file and line)
    embeddings: list[tuple[int, int]] = field(default_factory=list)
    files: set = field(default_factory=set)  # the files whose code built them
    tokens: list[str] = field(default_factory=list)  # token embeddings read from a parameter table (how), sized or not


@dataclass(frozen=True)
class Table(Unknown):
    """A tensor a script model's __init__ creates with its size written out (`torch.empty((V, D))`,
    `torch.randn(V, D)`), or the `nn.Parameter` made of it: its values are unknown, its dimensions
    (ints, or None where unread) are what a token embedding kept as a bare parameter is sized by."""

    dims: tuple = ()
    parameter: bool = False
    sources: tuple = ()   # the value each dimension was read from (a Const), or None where unread
    # methods that give the same tensor or layer back, its sizes kept (`self.lora_A = self.lora_A.to(dtype)`)
    kept_by_moves = ("to", "cuda", "cpu", "float", "half", "bfloat16", "requires_grad_", "type")


# torch calls that create a tensor of the size their arguments write out
_FACTORIES = frozenset({"empty", "zeros", "ones", "randn", "rand", "Tensor", "FloatTensor"})
_NEW_FACTORIES = frozenset({"new_empty", "new_zeros", "new_ones"})


def table_of(name: str, args: list, kwargs: dict, line: int | None) -> Table | None:
    """The Table a torch call inside a script model's __init__ makes: a factory's size (`(V, D)` as one tuple or as
    separate arguments, or `size=`), or `nn.Parameter(t)` of such a tensor; None for any other call."""
    if name == "Parameter":
        t = args[0] if args else kwargs.get("data")
        if isinstance(t, Table):
            return Table(f"an nn.Parameter of {len(t.dims)} dimensions", line, t.dims, True, t.sources)
        return None
    if name not in _FACTORIES:
        return None
    return _sized(f"the result of torch.{name}()", args, kwargs, line)


def method_table(attr: str, args: list, kwargs: dict, line: int | None) -> Table | None:
    """`weight.new_empty(r, in_features)` (new_zeros, new_ones): a tensor of the size its arguments write out."""
    return _sized(f"the result of ….{attr}()", args, kwargs, line) if attr in _NEW_FACTORIES else None


def _sized(why: str, args: list, kwargs: dict, line: int | None) -> Table | None:
    size = kwargs.get("size")
    if size is None:
        size = args[0] if len(args) == 1 and isinstance(args[0], Seq) else args
    items = size.items if isinstance(size, Seq) else size if isinstance(size, list) else None
    if not items:
        return None
    return Table(why, line, tuple(_whole(x) for x in items), sources=tuple(_dim_const(x) for x in items))


def linear_table(args: list, kwargs: dict, line: int | None) -> Table:
    """`nn.Linear(in_features, out_features)` inside a script model's __init__: a Table of its (in, out), each dimension
    the int it was read as or None (a LoRA layer's `nn.Linear(base.in_features, r)` and `nn.Linear(r,
    base.out_features)` share r whatever the wrapped layer's sizes)."""
    dims = [args[i] if i < len(args) else kwargs.get(n) for i, n in enumerate(("in_features", "out_features"))]
    return Table("an nn.Linear", line, tuple(_whole(d) for d in dims), True, tuple(_dim_const(d) for d in dims))


def _dim_const(v: Any) -> Const | None:
    opts = flatten(v)
    return opts[0] if len(opts) == 1 and isinstance(opts[0], Const) and _whole(v) is not None else None


def lora_rank(model: Obj) -> Const | None:
    """The rank of a LoRA layer written by hand: the class keeps two or more parameters named lora_* (`self.lora_A =
    nn.Parameter(w.new_empty(r, in_features))`, `self.lora_right = nn.Parameter(torch.zeros(column, lora_dim))`);
    the rank is the dimension they share (the smallest shared one), as the Const it was read from. None when the
    class keeps no such pair or no shared dimension is read."""
    tables = [v for k, v in model.attrs.items() if "lora" in str(k).lower() and isinstance(v, Table) and v.parameter]
    if len(tables) < 2:
        return None
    known = [{d: src for d, src in zip(t.dims, t.sources or (None,) * len(t.dims)) if d is not None} for t in tables]
    shared = {d for d in set(known[0]).intersection(*known[1:]) if d > 0}  # lora_dim=0: no adapter is built
    if not shared:
        return None
    rank = min(shared)
    src = next((k[rank] for k in known if k.get(rank) is not None), None)
    return src.with_value(rank) if src is not None else Const(rank, "literal", tables[0].line)


def _whole(v: Any) -> int | None:
    """A dimension: the int it is, the largest of several known ints, else None."""
    opts = flatten(v)
    nums = [o.value for o in opts if isinstance(o, Const) and isinstance(o.value, int) and not isinstance(o.value, bool)]
    return max(nums) if nums and len(nums) == len(opts) else None


def token_tables(cls: Any, model: Any, layers: Layers) -> None:
    """A 2-D parameter the class keeps (`self.embedding = nn.Parameter(torch.empty((V, D)))`) that its methods index
    by token ids, as nn.Embedding does (`self.embedding[x]` with x an argument of the method, or
    `F.embedding(x, self.embedding)`): the class's token embedding, recorded as one (V, D) when both are read. A
    table sliced (`self.pos[:T]`), added or multiplied (a positional table, a projection) is not one."""
    tables = {k: v for k, v in model.attrs.items() if isinstance(v, Table) and v.parameter and len(v.dims) == 2}
    if not tables:
        return
    for attr, how in _indexed_by_ids(cls, set(tables)).items():
        rows, cols = tables[attr].dims
        if rows is not None and cols is not None:
            layers.embeddings.append((rows, cols))
        layers.tokens.append(f"{cls.name}.{attr}: a {rows if rows is not None else '?'} × "
                             f"{cols if cols is not None else '?'} parameter {how}")


def _indexed_by_ids(cls: Any, attrs: set) -> dict[str, str]:
    """{attr: how} of the `self.<attr>` tables the class's methods (its own and its checkout bases') look token ids up
    in: subscripted by an argument of the method (or a call/attribute on one: `x.long()`), or given to
    F.embedding / torch.embedding as the weight."""
    import libcst as cst

    from memlint.extract.interp.syntax import _walk
    from memlint.extract.values import Class

    def self_attr(n: Any) -> str | None:
        if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and n.value.value == "self" \
                and n.attr.value in attrs:
            return n.attr.value
        return None

    def root_name(n: Any) -> str | None:
        while True:
            if isinstance(n, cst.Name):
                return n.value
            if isinstance(n, cst.Attribute):
                n = n.value
            elif isinstance(n, cst.Call):
                n = n.func
            else:
                return None

    found: dict[str, str] = {}
    for k in cls.lineage():
        if not isinstance(k, Class):
            continue
        for fname, f in k.methods.items():
            node = getattr(f, "node", None)
            if node is None or fname == "__init__":
                continue
            params = {p.name.value for p in node.params.params if p.name.value != "self"}
            for n in _walk(node.body):
                if isinstance(n, cst.Subscript) and (a := self_attr(n.value)) and len(n.slice) == 1 \
                        and isinstance(n.slice[0].slice, cst.Index) and root_name(n.slice[0].slice.value) in params:
                    found.setdefault(a, f"indexed by the token ids {fname}() is given (self.{a}[...])")
                elif isinstance(n, cst.Call) and isinstance(n.func, (cst.Attribute, cst.Name)) and \
                        (n.func.attr.value if isinstance(n.func, cst.Attribute) else n.func.value) == "embedding":
                    weight = next((x.value for x in n.args if x.keyword is not None and x.keyword.value == "weight"),
                                  n.args[1].value if len(n.args) > 1 and n.args[1].keyword is None else None)
                    if (a := self_attr(weight)):
                        found.setdefault(a, f"given to {fname}()'s embedding(ids, self.{a}) lookup")
    return found


@dataclass(frozen=True)
class Shape:
    """What the script's class is: its description (`model.GPT(GPTConfig(n_layer=12, ...))`), the
    HF-style config it counts as (None: unknown), why not, and the line of the config."""

    described: str
    config: dict | None
    why: str = ""
    family_how: str = ""
    attention: Any = None          # a Const: the attention the class's files call (sdpa, flash-attn, xformers)
    notes: tuple[str, ...] = ()
    origin: str = "the script's own class"  # where the shape was read


def with_shape(v: Value, shape: Shape) -> Value:
    """The plan's model_id Value carrying the HF-style config (or, unknown, the reason in its chain). A shape that
    is exactly a catalogued checkpoint's (rasbt's GPTModel built from gpt2-medium's emb_dim, n_layers, n_heads,
    vocabulary and context) is named by that checkpoint; the count is still the script's class's."""
    if shape.config is None:
        return replace(v, chain=v.chain + (f"not sized: {shape.why}",))
    v = replace(v, chain=v.chain + (f"shape read from {shape.origin}: {shape.family_how}",),
                shape=tuple(shape.config.items()))
    named = catalog_named(shape.config) if not shape.config.get("_built") else None  # a built config is counted itself
    if named is not None:
        v = replace(v, value=named[0], chain=v.chain + (named[1],))
    return v


def catalog_named(config: dict) -> tuple[str, str] | None:
    """(the hub id, why) of the one catalogued checkpoint whose architecture is the HF-style `config` a script's
    class counts as (layers, heads, width, MLP, vocabulary, positions); None when none or several sizes match."""
    from memlint.catalog import entries

    gpt2 = config.get("model_type") == "gpt2"
    want = ((config.get("n_layer"), config.get("n_head"), config.get("n_embd"), 4 * config.get("n_embd", 0), config.get("n_head"),
             config.get("vocab_size"), config.get("n_positions"), "plain") if gpt2 else
            (config.get("num_hidden_layers"), config.get("num_attention_heads"), config.get("hidden_size"),
             config.get("intermediate_size"), config.get("num_key_value_heads"), config.get("vocab_size"),
             config.get("max_position_embeddings"), "gated"))
    found = []
    for mid, e in sorted(entries().items()):
        a = e.get("arch") or {}
        have = (a.get("num_layers"), a.get("num_heads"), a.get("hidden_size"), a.get("intermediate_size"),
                a.get("num_kv_heads"), a.get("vocab_size"), a.get("max_position_embeddings"), a.get("mlp"))
        if a.get("model_type") == config.get("model_type") and have == want and not a.get("num_experts"):
            found.append((mid, e))
    if not found or len({e["params"] for _, e in found}) > 1:
        return None
    mid, e = min(found, key=lambda f: (len(f[0]), f[0]))
    short = next((x for x in e.get("aliases", []) if "/" not in x), None)
    name = short or mid
    return name, (f"the shape is {mid}'s in memlint's catalog (layers, heads, width, MLP, vocabulary and positions): "
                  f"named {name}")


def ties_weights(init_node: Any) -> bool:
    """`self.transformer.wte.weight = self.lm_head.weight` in the class's __init__: tied embeddings."""
    import libcst as cst

    from memlint.extract.parsed import children

    def walk(n: Any):
        yield n
        for c in children(n):
            yield from walk(c)

    for n in walk(init_node) if init_node is not None else ():
        if isinstance(n, cst.Assign) and isinstance(n.value, cst.Attribute) and n.value.attr.value == "weight" and \
                any(isinstance(t.target, cst.Attribute) and t.target.attr.value == "weight" for t in n.targets):
            return True
    return False


def is_module_class(cls: Any, base_of) -> bool:
    """A class of the checkout that is an nn.Module: derived from Module, or from one of torch's layers
    (`class LoRALayer(nn.Linear)`)."""
    if base_of(cls, ("Module",)) == "Module":
        return True
    return any(getattr(b, "qual", "").startswith("torch.") and b.qual.rsplit(".", 1)[-1] in _TORCH_LAYERS
               for b in cls.lineage())


_TORCH_LAYERS = frozenset({"Linear", "Embedding", "Conv1d", "Conv2d", "LayerNorm"})


def _read(cfg: Any, names: tuple[str, ...], notes: list[str]) -> tuple[str, Any] | None:
    """(key, value) of the first spelling the config has; of several candidates the largest (the worst case)."""
    for name in names:
        opts = flatten(_get(cfg, name))
        known = [o.value for o in opts if isinstance(o, Const) and o.value is not None
                 and not isinstance(o.value, (list, dict))]
        if not known:
            continue
        nums = [x for x in known if isinstance(x, int) and not isinstance(x, bool)]
        pick = max(nums) if nums and len(nums) == len(known) else known[0]
        unknown = [o.why for o in opts if isinstance(o, Unknown)]
        if unknown or len(set(map(repr, known))) > 1:
            notes.append(f"{name} of the script's model config: {pick!r} of {sorted(set(map(repr, known)))}"
                         + (f", or a value memlint cannot read ({unknown[0]})" if unknown else "")
                         + "; sized with the largest")
        return name, pick
    return None


def _get(cfg: Any, name: str) -> Any:
    if isinstance(cfg, Dict):
        return cfg.items.get(name)
    if isinstance(cfg, Obj):
        if name in cfg.attrs:
            return cfg.attrs[name]
        if isinstance(cfg, (DataclassInstance, Instance)) or name in cfg.kwargs:
            return field_value(cfg, name) if not isinstance(cfg, Instance) else cfg.kwargs.get(name)
    return None


def config_arg(args: list, kwargs: dict) -> Any:
    """The config object a model class is built from: its first argument, or `config=`."""
    for v in [kwargs.get("config"), *(args[:1])]:
        for o in flatten(v):
            if isinstance(o, (DataclassInstance, Instance, Dict)):
                return o
    return None


def shape_of(where: str, cfg: Any, layers: Layers, tied: bool) -> Shape:
    """The HF-style config of a script's model class built from `cfg`, the attention its files call."""
    notes: list[str] = []
    shape = _shape(where, cfg, layers, tied, notes)
    return replace(shape, attention=_attention(layers.files, where), notes=tuple(notes))


def _shape(where: str, cfg: Any, layers: Layers, tied: bool, notes: list[str]) -> Shape:
    vals = {k: _read(cfg, names, notes) for k, names in _KEYS.items()} if cfg is not None else {}
    cfg_name = getattr(cfg, "cls", "a config") if cfg is not None else None
    shown = ", ".join(f"{v[0]}={v[1]!r}" for k, v in vals.items() if v is not None)
    described = f"{where}({cfg_name}({shown}))" if cfg is not None else f"{where}(…)"
    if cfg is None:
        return Shape(described, None, f"{where} is the script's own model class, built from no config memlint can read")
    missing = [_KEYS[k][0] for k in ("layers", "heads", "hidden", "vocab") if vals.get(k) is None]
    if missing:
        return Shape(described, None, f"{where} is the script's own model class; its {', '.join(missing)} cannot be read statically")
    L, heads, h, V = (vals[k][1] for k in ("layers", "heads", "hidden", "vocab"))
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (L, heads, h, V)):
        return Shape(described, None, f"{where}: its shape values are not whole numbers")
    pos = vals["positions"][1] if vals.get("positions") else None
    bias = vals["bias"][1] if vals.get("bias") else None
    inner, gated = _mlp_width(layers, h)
    learned_positions = pos is not None and (pos, h) in layers.embeddings
    if learned_positions and not gated:
        if inner not in (None, 4 * h):
            return Shape(described, None, f"{where}: a GPT-2 layout with an MLP of width {inner}, not 4 × {h}")
        config = {"model_type": "gpt2", "n_layer": L, "n_head": heads, "n_embd": h, "n_positions": pos,
                  "vocab_size": V, "tie_word_embeddings": tied}
        if bias is False:
            config["bias"] = False  # nanoGPT's bias=False: no bias in its Linears and LayerNorms
        return Shape(described, config, family_how="learned position embeddings (block_size × n_embd), a 4 × n_embd "
                     "GELU MLP: counted as HF GPT-2 (GPT2LMHeadModel)")
    if gated:
        inter = vals["inter"][1] if vals.get("inter") and isinstance(vals["inter"][1], int) else inner
        if not isinstance(inter, int):
            return Shape(described, None, f"{where}: the MLP width of a gated MLP cannot be read")
        kv = vals["kv"][1] if vals.get("kv") and isinstance(vals["kv"][1], int) else heads
        config = {"model_type": "llama", "num_hidden_layers": L, "num_attention_heads": heads, "hidden_size": h,
                  "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": V,
                  "max_position_embeddings": pos, "tie_word_embeddings": tied}
        return Shape(described, config, family_how=f"a gated MLP (two Linears {h} -> {inter}, one back) and no learned "
                     "position embeddings: counted as HF Llama (LlamaForCausalLM)")
    return Shape(described, None, f"{where}: the script's own model class is neither a GPT-2 nor a Llama layout memlint "
                 "recognises from the layers its __init__ builds")


def _mlp_width(layers: Layers, h: int) -> tuple[int | None, bool]:
    """m of the Linear pair h -> m -> h (m != h), and whether two Linears (two lines of code) go
    into m: a gated MLP (SwiGLU's w1 and w3)."""
    sites: dict[tuple[int, int], set] = {}
    for i, o, site in layers.linears:
        sites.setdefault((i, o), set()).add(site)
    for (i, o) in sites:
        if o == h and i != h and (h, i) in sites:
            return i, len(sites[(h, i)]) >= 2
    return None, False


def _kernels() -> list[tuple[Any, str, bool, str, str | None, str | None]]:
    """(compiled pattern, attention, must be called, what it is, package, versions) of each attention kernel a model's
    code may run, in the order checked (data/library_api.json attention_kernels)."""
    from memlint import data

    return [(re.compile(e["pattern"] + (r"\s*\(" if e.get("called") else "")), e["attention"], bool(e.get("called")),
             e.get("ref", ""), e.get("package"), e.get("versions"))
            for e in data.load("library_api.json")["attention_kernels"]["entries"]]


def _code_lines(text: str) -> str:
    """The file's text with its import lines and comment lines blanked (their line numbers kept): a kernel only imported
    (behind a try, for a fallback) or named in a comment is not one the code runs."""
    return "\n".join("" if ln.lstrip().startswith(("#", "import ", "from ")) else ln for ln in text.splitlines())


def checkout_class_attention(cls: Any) -> Any:
    """The attention a transformers model class of the checkout's own file runs (LongAlign's modeling_llama.py calls
    flash_attn_varlen_func itself): read from its code, unless the file picks a kernel by config._attn_implementation
    as transformers' own modelling files do (then the library's default applies: None)."""
    from memlint.files import read_text

    f = getattr(cls, "file", None)
    if not f:
        return None
    try:
        text = read_text(Path(f), 2_000_000, what="model source")
    except Exception:  # noqa: BLE001 - unreadable: nothing learnt
        return None
    if "_attn_implementation" in text or "ATTENTION_CLASSES" in text:
        return None
    got = _attention({f}, cls.name)
    # its own code's kernel; eager only when the file has a fused kernel that the versions read rule out (ChatGLM2's
    # SDPA behind `torch.__version__ >= 2` under a torch 1.13 pin), not for a file that calls none (the library's)
    return got if isinstance(got, Const) and (got.value != "eager" or len(got.chain) > 1) else None


def _attention(files: set, where: str) -> Any:
    """The attention kernel the model's own files call: flash-attn, xformers, SDPA; none of them: eager."""
    from memlint.files import read_text
    from memlint.library.versions import in_range, installed_version

    absent: list[str] = []
    first = None
    for f in sorted(str(x) for x in files if x):
        try:
            text = _code_lines(read_text(Path(f), 2_000_000, what="model source"))
        except Exception:  # noqa: BLE001 - unreadable: nothing learnt
            continue
        for rx, kind, called, ref, package, versions in _kernels():
            m = rx.search(text)
            if not m:
                continue
            line = text[: m.start()].count("\n") + 1
            name = m.group().rstrip("( \t")
            if package and versions and not in_range(installed_version(package), versions):
                first = first or f
                absent.append(f"{Path(f).name}:{line} {name} needs {package} {versions} ({ref}), not the {package} "
                              f"{installed_version(package)} read: that path does not run")
                continue
            how = "calls" if called else "runs"
            from memlint.library import api  # xformers' kernel is accounted as SDPA's (data/library_api.json aliases)

            return Const(api.attention_name(kind) or kind, "constant", None,
                         (f"{Path(f).name}:{line} {how} {name}() in {where}'s code", *absent), f)
    if absent:
        return Const("eager", "constant", None, (f"{where}'s own attention (matmul and softmax)", *absent), first)
    if files:
        return Const("eager", "constant", None, (f"{where}'s code calls no fused attention kernel",))
    return Unknown(f"the attention {where} uses")
