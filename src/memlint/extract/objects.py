"""The objects a training script builds, as the interpreter knows them: one class per kind.

`handlers/` builds them from the calls it knows (a model load, a LoRA config, training
arguments, a trainer, a data loader, ...), `build.py` (its groups in `fields/`) reads them into
plan fields. Each kind is a class with its own typed fields, so a misspelt kind or attribute
fails loudly instead of silently reading as absent. `field_value` and `dtype_of` read values off them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from memlint.extract.values import Alts, Class, Const, Ref, Seq, Unknown
from memlint.library.defaults import default as library_default
from memlint.vocab import dtype_name


@dataclass(eq=False)
class Obj:
    """An object built by a call the analyzer knows."""

    cls: str                       # the class or function as written, resolved: "trl.SFTConfig"
    line: int
    kwargs: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)   # attributes assigned after construction
    open: bool = False             # built with **kwargs memlint could not resolve

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        return self.kwargs.get(name, default)


# ---- records of what the script does to an object ------------------------------------------


class Setting(NamedTuple):
    """A value given to a model after it was built: `model.gradient_checkpointing_enable()`,
    `model.to(torch.bfloat16)`. `value` is an abstract value, or a (source, class, field)
    triple naming the library default that applies."""

    value: Any
    line: int | None
    how: str
    kbit_only: bool = False          # peft's k-bit preparation: applies to a 4/8-bit (or GPTQ) model only


# ---- models and what wraps them --------------------------------------------------------------


@dataclass(eq=False)
class Model(Obj):
    """A model load (`from_pretrained`), or a wrapper of one (`get_peft_model(base, cfg)`)."""

    loader: str = "transformers"   # transformers | unsloth | peft-auto
    base: "Model | None" = None    # the wrapped model, for a wrapper
    peft: Any = None               # the PEFT config (or adapter) applied here
    gc: list[Setting] = field(default_factory=list)       # gradient checkpointing turned on/off
    dtypes: list[Setting] = field(default_factory=list)   # later casts: .to(dtype), .half()
    shard: Setting | None = None   # a wrapper's data parallelism: FSDP(model) / fully_shard / DDP
    kbit_line: int | None = None
    adapter_cast: Any = None       # get_peft_model(..., autocast_adapter_dtype=...) as given   # the line of prepare_model_for_kbit_training(model) that made this wrapper
    user_class: Any = None         # loader "script-class": the script's own nn.Module class
    shape: Any = None              # its custom_model.Shape (the HF-style config it counts as, or why not)
    empty: bool = False            # built under accelerate's init_empty_weights(): a skeleton without weights
    hand_quant: list = field(default_factory=list)  # HandQuant: bitsandbytes linears the script put in this model itself


@dataclass(eq=False)
class PeftConfig(Obj):
    """LoraConfig and its siblings; `adapter` is set for an adapter read from disk, `by_hand` for a LoRA layer the
    checkout writes itself (or loralib's), whose rank is read and whose targets are not."""

    adapter: Any = None
    by_hand: bool = False


class QuantConfig(Obj):
    """transformers.BitsAndBytesConfig."""


@dataclass(eq=False)
class HfConfig(Obj):
    """AutoConfig.from_pretrained(...) or `model.config`; or a config class the script builds (`LlamaConfig(...)`:
    built_by names it, kwargs hold its keywords)."""

    built_by: str | None = None


@dataclass(eq=False)
class Tokenizer(Obj):
    unsloth: bool = False          # returned by unsloth's loader (model_max_length = max_seq_length)


# ---- training ---------------------------------------------------------------------------------


@dataclass(eq=False)
class TrainingArgs(Obj):
    """TrainingArguments, SFTConfig, ...; `cls` is the library class whose defaults apply."""

    user_class: Class | None = None   # the script's subclass, whose field defaults come first
    from_parser: str | None = None    # the HfArgumentParser method that produced it
    from_file: bool = False           # parsed from a config file given at run time
    cli: dict = field(default_factory=dict)   # field -> the value the launch command (or a config file it names) gives it

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        return self.kwargs.get(name, self.cli.get(name, default))


@dataclass(eq=False)
class DataclassInstance(Obj):
    """An instance of a dataclass the script defines (or a library one, such as trl.ModelConfig)."""

    user_class: Class | None = None
    library: str | None = None        # a library dataclass whose defaults are data
    from_parser: str | None = None
    from_file: bool = False
    cli: dict = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        return self.kwargs.get(name, self.cli.get(name, default))


@dataclass(eq=False)
class Trainer(Obj):
    user_class: str | None = None     # the script's subclass name, when it subclasses a trainer


@dataclass(eq=False)
class Optimizer(Obj):
    optim: str = ""                   # the Trainer optim name of the class


@dataclass(eq=False)
class Params(Obj):
    """model.parameters(): ties an optimizer to the model it trains."""

    model: Any = None


class Collator(Obj):
    pass


class DataLoader(Obj):
    pass


@dataclass(eq=False)
class Dataset(Obj):
    """datasets' Dataset / DatasetDict (load_dataset, Dataset.from_*): its splits and views are itself."""

    tokenized_by: tuple = ()          # TokenizerCall of the functions its `.map` ran: rows already hold input_ids


class Accelerator(Obj):
    pass


class LightningTrainer(Obj):
    """lightning's Trainer(precision=..., strategy=..., devices=..., accumulate_grad_batches=...) or
    Fabric(...): `cls` says which."""


@dataclass(eq=False)
class DeepSpeedEngine(Obj):
    """deepspeed.initialize(model=..., optimizer=..., config=...): the engine that trains the model."""

    model: Any = None
    optimizer: Any = None
    config: Any = None                # the config dict, or the path of its JSON


class Accumulate(Obj):
    """accelerator.accumulate(model)."""


class Plugin(Obj):
    """accelerate's DeepSpeedPlugin / FullyShardedDataParallelPlugin."""


class Autocast(Obj):
    pass


class Scaler(Obj):
    pass


# ---- command-line parsing and plumbing ---------------------------------------------------------


@dataclass(eq=False)
class ArgParser(Obj):
    """argparse.ArgumentParser (or one of its groups, which share the parser's table)."""

    args: dict = field(default_factory=dict)    # dest -> ArgSpec
    order: list = field(default_factory=list)
    subs: dict = field(default_factory=dict)    # add_subparsers(): subcommand name -> its ArgParser
    sub_dest: str | None = None                 # add_subparsers(dest=...): the attribute naming the subcommand
    sub_class: Any = None                       # add_subparsers(parser_class=...): the class add_parser() builds


class ArgSpec(NamedTuple):
    """One add_argument call."""

    kwargs: dict
    line: int | None
    flag: str
    file: str | None = None
    flags: tuple = ()                 # every option string ("--lr", "-l"); () for a positional


@dataclass(eq=False)
class ArgNamespace(Obj):
    """parser.parse_args(): attributes read the argument defaults."""

    parser: ArgParser | None = None
    given: bool = False               # parsed from an explicit list memlint cannot read
    cli: dict = field(default_factory=dict)   # dest -> the value the launch command gives it


@dataclass(eq=False)
class HfParser(Obj):
    """HfArgumentParser / TrlParser over dataclasses."""

    classes: list = field(default_factory=list)
    own: Any = None                   # ArgParser of the arguments added with add_argument / set_defaults, if any
    defaults: dict = field(default_factory=dict)  # set_defaults(key=v) of a key a dataclass declares: its new default
    user_class: Any = None            # the checkout's subclass (H4ArgumentParser): its own methods run


@dataclass(eq=False)
class Partial(Obj):
    """functools.partial(func, *args, **kwargs)."""

    func: Any = None
    args: list = field(default_factory=list)


class Range(Obj):
    pass


@dataclass(eq=False)
class Instance(Obj):
    """An instance of a class the script defines (not a dataclass): its `__init__` ran, its methods run."""

    user_class: Class | None = None


@dataclass(eq=False)
class OpenFile:
    """open(path) / Path(path).read_text(): a file the script reads, by the path it names."""

    path: Any                         # the abstract path value (a Const string when known)


@dataclass(frozen=True)
class FieldNames:
    """The field names of a library config class (`{f.name for f in dataclasses.fields(SFTConfig)}`,
    `inspect.signature(TrainingArguments.__init__).parameters`): a script probing which fields its installed library
    has. Membership is decided where memlint's tables say (library.defaults.has_field), unknown for other names."""

    cls: str            # the library class: "trl.SFTConfig"
    line: int | None

    def has(self, name: str) -> Any:
        from memlint.library.defaults import has_field

        return has_field(self.cls, name)


@dataclass(eq=False)
class DictMethod:
    """d.get / d.items / d.update ... of a known dict (or OmegaConf / EasyDict config)."""

    dict: Any
    name: str


@dataclass(eq=False)
class SeqMethod:
    """seq.index / seq.count of a known list or tuple; seq.append / extend / insert of a list."""

    seq: Any
    name: str


@dataclass(eq=False)
class Fields:
    """vars(obj) / obj.__dict__: an object's fields as a mapping, for `**vars(obj)`."""

    obj: Obj


@dataclass(eq=False)
class Namespace(Obj):
    """argparse.Namespace(**vars(model_args), **vars(training_args)): attributes read the merged objects."""

    sources: list = field(default_factory=list)


@dataclass(eq=False)
class BoundMethod:
    """instance.method: the script's own function with `self` bound."""

    func: Any
    instance: Obj


@dataclass(eq=False)
class Method:
    """A method of a known object, not yet called: `model.gradient_checkpointing_enable`."""

    obj: Obj
    name: str


@dataclass(eq=False)
class ClassLoader:
    """`LlamaForCausalLM.from_pretrained` where the class is the checkout's own subclass of a transformers model
    (LongAlign's modeling_llama): transformers' loader, the class's own code."""

    cls: Any
    name: str
    owner: str = ""  # the class name transformers' loader is read as (the subclass's, or its transformers base's)


@dataclass(frozen=True)
class DtypeName:
    """getattr(torch, NAME): a dtype named by a (possibly non-literal) string."""

    ref: Ref
    name: Const


# ---- what the training step does (Facts entries) -----------------------------------------------


class TokenizerCall(NamedTuple):
    kwargs: dict
    line: int | None
    tokenizer: Tokenizer | None = None
    method: str = "__call__"  # "pad": tokenizer.pad(), which pads and never truncates
    text: bool = True  # the call tokenizes source text (positional or text=); False: text_target= only (labels)
    literal: bool = False  # on text written in the script (`tok("hello", max_length=10)`): a demonstration, unless no
                           # call on the data says more
    part: bool = False     # capped at a length named for one part (max_length=self.max_prompt_length): the prompt's
                           # cap, not the sequence's


class OptimizerStep(NamedTuple):
    optimizer: Optimizer
    accumulation: Any                 # N of an enclosing `if step % N == 0:`, or None
    line: int | None


class AutocastCall(NamedTuple):
    dtype: Any
    device: Any
    enabled: Any
    line: int | None
    wrap: str = ""   # the parallel wrapper whose mixed-precision policy computes in `dtype` (FSDP's MixedPrecision)


class DefaultDtype(NamedTuple):
    """`torch.set_default_dtype(torch.float16)`: the parameters of every module built after it (a transformers model
    loaded without a dtype, the script's own nn.Module) are created in that dtype. `objects` is how many objects were
    built before the call (those are not affected)."""
    dtype: Any
    line: int | None
    objects: int
    how: str


class GradHook(NamedTuple):
    """`p.register_post_accumulate_grad_hook(fn)`: `steps` says whether fn calls an optimizer's
    `.step()` (the optimizer fused into backward), None when fn is not the script's own function."""

    steps: bool | None
    line: int | None


class HandQuant(NamedTuple):
    """bitsandbytes' quantized linears the script puts in a model itself: `Linear4bit(...)` built, or the class
    handed to a helper (`replace_linear(model, Linear4bit, quant_type="nf4")`). Values are abstract (Const)."""

    bits: Any
    quant_type: Any
    double: Any
    compute: Any
    line: int | None
    how: str


class LigerPatch(NamedTuple):
    qual: str
    kwargs: dict
    line: int | None


class HandPad(NamedTuple):
    """`ids + [pad] * (n - len(ids))`, `F.pad(x, (0, n - x.size(-1)))`, `pad_sequence(...)`: padding the
    script writes itself. `kind` is max_length (to a fixed n) or longest (to the batch's longest,
    `length` then its cap, when one is written: min(max(lengths), max_len))."""

    kind: str
    length: Any
    line: int | None
    file: str | None = None           # set when written in another module of the checkout


class LengthArg(NamedTuple):
    """The script read its own length argument (args.max_seq_length, cfg.cutoff_len): a cap on the
    sequence length wherever it is applied (truncation or a filter)."""

    name: str
    value: Any
    line: int | None


class RandomOffsets(NamedTuple):
    """torch.randint(high, (B,)) / np.random.randint(high, size=B): B random start offsets."""

    count: Any
    line: int | None


class Window(NamedTuple):
    """`torch.stack([data[i : i + n] for i in ix])` over B random offsets: a micro-batch of B
    windows of n tokens cut from one token stream (nanoGPT's get_batch): packed, no padding."""

    rows: Any
    size: Any
    line: int | None
    how: str = "windows cut at random offsets of one token stream: data[i : i + n] for i in randint(...)"


class RandomBatch(NamedTuple):
    """`torch.randint(vocab_size, (B, T))`: a synthetic micro-batch of B rows of exactly T random token ids (a
    benchmark or a smoke-test loop): every row is full, none is padded or packed."""

    rows: Any
    size: Any
    line: int | None
    how: str = "random token ids of a fixed shape (B, T): every row T tokens"


class BatchYield(NamedTuple):
    """`if len(batch) == n: yield ...`: a dataset's __iter__ that yields whole batches of n rows (its
    DataLoader built with batch_size=None): the micro-batch is n."""

    rows: Any
    line: int | None
    file: str | None = None


class MicroSlice(NamedTuple):
    """`for i in range(0, n, k): ... loss.backward()` with one optimizer step after it, k named as a batch size: the
    loop cuts a batch into micro-batches of k rows, each its own forward and backward (the micro-batch is k)."""

    rows: Any
    line: int | None
    how: str


class Chunking(NamedTuple):
    """`t[i : i + n] for i in range(0, total, n)`: fixed blocks of n tokens (or a dataset's `__getitem__` that
    returns one such block per index)."""

    size: Any
    line: int | None
    how: str = "token stream cut into fixed blocks: t[i : i + n] for i in range(0, total, n)"


# ---- reading values off objects -------------------------------------------------------------------


def dtype_of(v: Any) -> str | None:
    """memlint's dtype name of an abstract value (torch.bfloat16, "bf16", getattr(torch, name))."""
    if isinstance(v, DtypeName):
        v = v.name.value
    if isinstance(v, Ref):
        v = v.name
    if isinstance(v, Const):
        v = v.value
    return dtype_name(v)


def _via_default(v: Any, how: str, line: int | None, file: str | None) -> Any:
    if isinstance(v, Const):
        return v.via("dataclass-default", how, line, file)
    if isinstance(v, Alts):
        return Alts(tuple(o.via("dataclass-default", how, line, file) if isinstance(o, Const) else o for o in v.options))
    if isinstance(v, Seq):
        return Seq([o.via("dataclass-default", how, line, file) if isinstance(o, Const) else o for o in v.items], v.kind)
    return v


def field_value(obj: TrainingArgs | DataclassInstance | Obj, attr: str) -> Any:
    """A field of a config/dataclass instance: set in the call, else class default, else library."""
    if attr in obj.kwargs:
        return obj.kwargs[attr]
    cli = getattr(obj, "cli", None)
    if cli and attr in cli:
        return cli[attr]
    if obj.open:
        return Unknown(f"{attr} may be set by **kwargs")
    if getattr(obj, "from_file", False):
        return Unknown(f"{attr} comes from a config file given at run time")
    c = getattr(obj, "user_class", None)
    seen = 0
    while isinstance(c, Class) and seen < 20:
        seen += 1
        if attr in c.fields:
            return _via_default(c.fields[attr], f"{c.name}.{attr} default (line {c.field_lines.get(attr)})",
                                c.field_lines.get(attr), c.file)
        nxt = [b for b in c.bases if isinstance(b, Class)]
        c = nxt[0] if nxt else None
    if isinstance(obj, TrainingArgs):
        return lib_default(obj, attr)
    lib = getattr(obj, "library", None)
    if lib:
        d = library_default(lib, attr)
        if d is not None:
            return Const(list(d.value) if isinstance(d.value, list) else d.value, "library-default", obj.line or None, (d.why,))
        return Unknown(f"{attr} of {lib} (library dataclass memlint has no defaults for)")
    return Unknown(f"{obj.cls}.{attr}")


def lib_default(obj: Obj, attr: str, cls: str | None = None) -> Any:
    """The installed library's default for a field the script leaves out, as a constant."""
    d = library_default(cls or obj.cls, attr)
    if d is None:
        return Unknown(f"{attr} (memlint has no library default for {cls or obj.cls})")
    value = d.value
    if value == "not fp16":  # TRL: bf16 unset -> on unless fp16 is on
        fp16 = obj.get("fp16")
        if fp16 is None:
            fp16 = lib_default(obj, "fp16", cls)
        if not isinstance(fp16, Const):
            return Unknown("bf16 follows fp16, which is unknown")
        value = not fp16.value
    if isinstance(value, list):
        value = list(value)
    return Const(value, "library-default", obj.line or None, (d.why,))
