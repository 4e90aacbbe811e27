"""PyTorch and the hand-written training loop: DataLoader, autocast, GradScaler, random offsets into a
token stream, the script's own nn.Module classes (the layers their __init__ builds), and the calls on
objects memlint cannot see that still say what the loop does (backward, step, gradient hooks,
tokenizer-like padding, `.map(fn)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from memlint.extract import custom_model
from memlint.extract.interp import BoundUnknown
from memlint.extract.objects import (
    Autocast, AutocastCall, DataLoader, Dataset, DefaultDtype, FieldNames, GradHook, Instance, Model, Obj, OpenFile, RandomOffsets, Scaler, TokenizerCall,
)
from memlint.extract.values import Class, Const, Func, Seq, Unknown, flatten
from memlint.extract.handlers.common import Call
from memlint.extract.handlers.hf import _TOKENIZE_METHODS


def _record_layer(c: Call) -> None:
    """nn.Linear(in, out, bias=) / nn.Embedding(n, d) built inside a script model's __init__."""
    vals = [a.value if isinstance(a, Const) else None for a in c.args[:2]]
    names = ("in_features", "out_features") if c.name == "Linear" else ("num_embeddings", "embedding_dim")
    for i, n in enumerate(names):
        if i >= len(vals):
            vals.append(None)
        if n in c.kwargs and isinstance(c.kwargs[n], Const):
            vals[i] = c.kwargs[n].value
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return
    if c.name == "Linear":
        c.it.layers.linears.append((vals[0], vals[1], (c.it.cur_file(), c.it.call_line)))
        c.it.layers.files.add(c.it.cur_file() or str(c.it.path))
    else:
        c.it.layers.embeddings.append((vals[0], vals[1]))


class LoopHandlers:
    """torch and the script's own loop."""

    def on_training_loop(self, it: Any, values: list, line: int | None) -> None:
        """A `for` loop whose body ran a backward: the DataLoaders it iterates (directly or wrapped by enumerate/tqdm)
        are the training step's."""
        for v in values:
            for x in flatten(v):
                if isinstance(x, DataLoader) and x not in it.facts.train_loaders:
                    it.facts.train_loaders.append(x)
                elif _map_style_dataset(x) and all(d is not x for d, _ in it.facts.train_datasets):
                    it.facts.train_datasets.append((x, line))

    def dataloader(self, c: Call) -> Any:
        dl = c.new(DataLoader, "torch.utils.data.DataLoader", ("dataset", "batch_size"))
        sampler = dl.kwargs.get("batch_sampler")
        if "batch_size" not in dl.kwargs and isinstance(sampler, (Instance, Obj)):
            # DataLoader(ds, batch_sampler=S): S yields the batches; a BatchSampler, or the script's own sampler
            # class, keeps their size as its batch_size (torch's BatchSampler attribute)
            n = sampler.get("batch_size")
            if isinstance(n, Const):
                dl.kwargs["batch_size"] = n.with_value(n.value, f"DataLoader(batch_sampler={sampler.cls.rsplit('.', 1)[-1]}(...)) "
                                                                f"(line {c.line}): its batch_size")
        return dl

    def sampler(self, c: Call) -> Any:
        """torch's DistributedSampler(ds, shuffle=...) / RandomSampler / SequentialSampler: kept, so that a DataLoader
        built with one says whether it shuffles (a training loader does)."""
        if c.head != "torch":
            return Unknown(f"the result of {c.qual}()")
        kw = dict(c.kwargs)
        if c.args:
            kw.setdefault("dataset", c.args[0])
        return Obj(c.qual, c.line or 0, kw, {}, c.open)  # not an object of the run's facts: a DataLoader's argument

    def batch_sampler(self, c: Call) -> Any:
        """torch.utils.data.BatchSampler(sampler, batch_size, drop_last)."""
        if c.head != "torch":
            return Unknown(f"the result of {c.qual}()")
        return Obj(c.qual, c.line or 0, {**dict(zip(("sampler", "batch_size", "drop_last"), c.args)), **c.kwargs})

    def scaler(self, c: Call) -> Any:
        c.it.facts.scalers.append(c.line)
        return Scaler(c.qual, c.line)

    def autocast(self, c: Call) -> Any:
        cuda_amp = "cuda.amp" in c.qual
        device = Const("cuda", "literal", c.line) if cuda_amp else c.kwargs.get("device_type", c.args[0] if c.args else None)
        c.it.facts.autocasts.append(AutocastCall(c.kwargs.get("dtype"), device, c.kwargs.get("enabled"), c.line))
        return Autocast(c.qual, c.line or 0)

    def random_offsets(self, c: Call) -> Any:
        """torch.randint([low,] high, (B,)) / numpy.random.randint(low, high, size=B): B offsets into
        a token stream (the size's first entry; a scalar size for numpy)."""
        if c.qual.startswith("torch"):
            size = c.kwargs.get("size", c.args[-1] if len(c.args) >= 2 else None)
        else:
            size = c.kwargs.get("size", c.args[2] if len(c.args) > 2 else None)
        if isinstance(size, Seq) and size.items:
            size = size.items[0]
        if size is None:
            return Unknown("random integers")
        return RandomOffsets(size, c.line)

    def dataclass_fields(self, c: Call) -> Any:
        """dataclasses.fields(SFTConfig) of a library config class: its fields, whose names a script collects to keep
        only the keywords its installed version takes; dataclasses.is_dataclass of one: True."""
        cls = library_config_class(c.arg(0, "class_or_instance"))
        if cls is None:
            return Unknown(f"dataclasses.{c.name}() of a class memlint does not know")
        return FieldNames(cls, c.line) if c.name == "fields" else Const(True, "literal", c.line, (f"{cls} is a dataclass",))

    def signature(self, c: Call) -> Any:
        """inspect.signature(torch.optim.AdamW): its parameters at the version the checkout pins (or the installed
        one), so `'fused' in inspect.signature(torch.optim.AdamW).parameters` (a probe of the library) is decided."""
        from memlint.extract.objects import Namespace
        from memlint.extract.values import Ref
        from memlint.library import api
        from memlint.library.versions import in_range, installed_version, shown_version

        f = c.arg(0, "obj")
        known = api.signature_keywords(f.qual) if type(f) is Ref else None
        if known is None and (cls := library_config_class(f)) is not None:
            # a config class's keywords are its fields (`'max_seq_length' in inspect.signature(SFTConfig).parameters`)
            return Namespace("inspect.Signature", c.line or 0, {"parameters": FieldNames(cls, c.line)}, {}, False)
        if known is None:
            return Unknown("the signature of a callable memlint does not know")
        package, keywords, ref = known
        version = installed_version(package)
        names = tuple(k for k, spec in keywords.items() if in_range(version, spec))
        why = f"inspect.signature({f.qual}): its parameters in {shown_version(package)}" + (f" ({ref})" if ref else "")
        params = Const(names, "library-default", c.line, (why,), c.it.cur_file())
        return Namespace("inspect.Signature", c.line or 0, {"parameters": params}, {}, False)

    def default_dtype(self, c: Call) -> Any:
        """torch.set_default_dtype(torch.float16) / torch.set_default_tensor_type(torch.cuda.HalfTensor): modules built
        afterwards create their parameters in that dtype (a from_pretrained without a dtype among them)."""
        from memlint.extract.values import Ref

        a = c.arg(0, "d") if c.name == "set_default_dtype" else c.arg(0, "t")
        if c.name == "set_default_tensor_type":
            text = a.qual if type(a) is Ref else a.value if isinstance(a, Const) and isinstance(a.value, str) else ""
            kind = text.rsplit(".", 1)[-1]
            name = {"HalfTensor": "float16", "BFloat16Tensor": "bfloat16", "FloatTensor": "float32"}.get(kind)
            a = Const(name, "literal", c.line, (f"torch.set_default_tensor_type({text}) (line {c.line})",)) if name else None
        if a is not None:
            c.it.facts.default_dtypes.append(DefaultDtype(a, c.line, len(c.it.facts.objects), f"torch.{c.name}(...) (line {c.line})"))
        return Const(None, "literal", c.line)

    def cuda_available(self, c: Call) -> Any:
        """torch.cuda.is_available(): True, the run memlint sizes is on a GPU (`"cuda" if torch.cuda.is_available()
        else "cpu"`, `fp16=torch.cuda.is_available()`)."""
        return Const(True, "environment-default", c.line, (f"torch.cuda.is_available() (line {c.line}): True on the GPU "
                                                            "memlint sizes",))

    def device(self, c: Call) -> Any:
        """torch.device("cuda") / torch.device("cuda:1") / torch.device("cuda", 1): an object whose `.type` and
        `.index` the script tests (`if device.type == "cuda":`)."""
        kind = c.arg(0, "type")
        if not (isinstance(kind, Const) and isinstance(kind.value, str)):
            return Unknown("torch.device() of an unknown device")
        name, _, index = kind.value.partition(":")
        idx = c.arg(1, "index")
        index_v = Const(int(index), "literal", c.line) if index.isdigit() else idx if idx is not None \
            else Const(None, "literal", c.line)
        return Instance("device", c.line or 0, dict(c.kwargs), {"type": kind.with_value(name), "index": index_v}, c.open)

    def other_backend_available(self, c: Call) -> Any:
        """torch.backends.mps.is_available() / torch.xpu.is_available() (and is_built): False, the run memlint sizes
        is on an NVIDIA GPU (`if torch.backends.mps.is_available(): device = "mps" elif torch.cuda.is_available()`)."""
        return Const(False, "environment-default", c.line, (f"{c.qual}() (line {c.line}): False on the CUDA GPU "
                                                             "memlint sizes",))

    def bf16_supported(self, c: Call) -> Any:
        """torch.cuda.is_bf16_supported() / unsloth's is_bfloat16_supported(): True on the GPUs fine-tuning runs on today
        (Ampere and newer: A100, H100, L4, RTX 30/40/50), said as an assumption; a T4 or V100 takes the other branch."""
        from memlint.extract.source import bf16_assumed

        ok, why = bf16_assumed((Path(str(c.it.path)), Path(getattr(c.it.launch, "origin", "") or "x")))
        if why is not None:  # the notebook's Colab metadata names its GPU (gpus.json says whether it has bf16)
            return Const(ok, "literal", c.line, (f"{c.name}() (line {c.line}): {ok} on {why}",))
        c.it.facts.note(f"line {c.line}: {c.name}() is read as True (an Ampere or newer GPU); on a T4 or V100 it is "
                        "False and the script takes its other branch")
        return Const(True, "environment-default", c.line, (f"{c.name}() (line {c.line}): True on Ampere and newer GPUs (assumed)",))

    def device_capability(self, c: Call) -> Any:
        """torch.cuda.get_device_capability(): (major, minor) of the GPU a Colab notebook's metadata names, else (8, 0),
        an Ampere GPU (the GPUs fine-tuning runs on today), said as an assumption: `if
        torch.cuda.get_device_capability()[0] >= 8:` picks FlashAttention-2 and bf16 on those."""
        from memlint.extract.source import notebook_gpu
        from memlint.gpu import family_capability

        nb = next((p for p in (Path(str(c.it.path)), Path(getattr(c.it.launch, "origin", "") or "x"))
                   if p.suffix == ".ipynb"), None)
        named = notebook_gpu(nb) if nb is not None else None
        cap = family_capability(named[0]) if named is not None else None
        if cap is not None:
            why = f"{c.name}() (line {c.line}): {cap} on {named[1]}"
            return Seq([Const(cap[0], "literal", c.line, (why,)), Const(cap[1], "literal", c.line, (why,))], "tuple")
        c.it.facts.note(f"line {c.line}: {c.name}() is read as (8, 0), an Ampere GPU; on a T4 or V100 (7.x) the script "
                        "takes its other branch")
        why = f"{c.name}() (line {c.line}): (8, 0) on an Ampere GPU (assumed)"
        return Seq([Const(8, "environment-default", c.line, (why,)), Const(0, "environment-default", c.line, (why,))],
                   "tuple")

    def unknown_method(self, it: Any, f: BoundUnknown, args: list, kwargs: dict, line: int | None) -> Any:
        if f.same is not None:  # `enc.to("cuda")` of token ids: the same ids, on the device
            return f.same
        if f.attr == "backward":
            it.facts.backward.append(line)
        if f.attr == "step" and not args:  # an optimizer memlint cannot see built (`self.optimizers.step()`)
            it.facts.unknown_steps.append(line)
        if f.attr == "register_post_accumulate_grad_hook":
            it.facts.grad_hooks.append(GradHook(_steps_an_optimizer(args[0] if args else kwargs.get("hook")), line))
        if ("padding" in kwargs or "truncation" in kwargs) and f.attr in _TOKENIZE_METHODS:
            it.facts.tokenizer_calls.append(TokenizerCall(kwargs, line, None, f.attr))
        if f.attr in ("map", "filter"):
            self.mapped_function(it, args, kwargs, line)
        if f.attr == "load" and f.why.startswith("the result of ruamel.yaml.YAML(") and args:
            from memlint.extract import runtime_config  # ruamel: yaml.YAML(typ="safe").load(path)

            src = args[0]
            if isinstance(src, OpenFile):
                return runtime_config.read(it, src.path, "ruamel.yaml.YAML().load()")
            if isinstance(src, Const) and isinstance(src.value, str):
                return runtime_config.read(it, src, "ruamel.yaml.YAML().load()")
        if it.layers is not None:  # inside a script module's __init__: `weight.new_empty(r, in_features)`
            table = custom_model.method_table(f.attr, args, kwargs, line)
            if table is not None:
                return table
        return Unknown(f"the result of ….{f.attr}()")

    def script_model(self, c: Call, cls: Class) -> Any:
        """`GPT(config)`, a model class of the script's checkout: its __init__ runs (the layers it builds
        recorded), and the model is a Model whose shape is read from the config (extract/custom_model.py)."""
        outer = c.it.layers
        layers = c.it.layers = custom_model.Layers()
        model = Model(cls.name, c.line or 0, {}, {}, c.open, loader="script-class", user_class=cls)
        init = cls.lookup("__init__")
        try:
            if init is not None and init[0] == "method":
                c.it.call_function(init[1], [model, *c.args], dict(c.kwargs), c.line)
        finally:
            c.it.layers = outer
        rank = custom_model.lora_rank(model)
        if rank is not None:  # a LoRA layer written in the checkout: the model it goes into trains as LoRA
            self.hand_lora(c.it, f"{cls.name} ({cls.file or 'the script'}:{cls.line})", rank, c.line)
        custom_model.token_tables(cls, model, layers)  # a bare parameter indexed by token ids is an embedding
        if outer is not None:  # a module built inside another's __init__: its layers are the outer one's
            outer.linears += layers.linears
            outer.embeddings += layers.embeddings
            outer.files |= layers.files
            outer.tokens += layers.tokens
            return model
        if not layers.embeddings and not layers.tokens:  # no token embedding: a loss, a head or a block, not an LM
            return Instance(cls.name, c.line or 0, {}, model.attrs, c.open, user_class=cls)
        where = f"{Path(cls.file).stem if cls.file else Path(str(c.it.path)).stem}.{cls.name}"
        cfg = custom_model.config_arg(c.args, c.kwargs)
        tied = custom_model.ties_weights(init[1].node if init is not None and init[0] == "method" else None)
        model.shape = custom_model.shape_of(where, cfg, layers, tied)
        model.kwargs["pretrained_model_name_or_path"] = Const(
            model.shape.described, "constant", c.line, (f"{cls.name}(…) at line {c.line}: the script's own model class "
                                                        f"({cls.file or 'the script'}:{cls.line})",))
        c.it.facts.objects.append(model)
        return model


def _steps_an_optimizer(fn: Any) -> bool | None:
    """Does a gradient hook call `<something>.step()`? (PyTorch's "fuse the optimizer step into the
    backward pass" tutorial and torchtune's register_optim_in_bwd_hooks: `optimizer_dict[p].step()`.)
    None when the hook is not the script's own function."""
    import libcst as cst

    from memlint.extract.parsed import children

    node = fn.node if isinstance(fn, Func) else None
    if node is None:
        return None
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "step":
            return True
        stack.extend(children(n))
    return False


# the library calls this module answers, by qualified name (handlers/__init__.py merges the tables)
QUALIFIED: dict[str, Callable[[Any, Call], Any]] = {
    "torch.randint": LoopHandlers.random_offsets,
    "numpy.random.randint": LoopHandlers.random_offsets,
    "inspect.signature": LoopHandlers.signature,
    "dataclasses.fields": LoopHandlers.dataclass_fields,
    "dataclasses.is_dataclass": LoopHandlers.dataclass_fields,
    "torch.set_default_dtype": LoopHandlers.default_dtype,
    "torch.set_default_tensor_type": LoopHandlers.default_dtype,
    "torch.cuda.is_available": LoopHandlers.cuda_available,
    "torch.device": LoopHandlers.device,
    "torch.backends.mps.is_available": LoopHandlers.other_backend_available,
    "torch.backends.mps.is_built": LoopHandlers.other_backend_available,
    "torch.mps.is_available": LoopHandlers.other_backend_available,
    "torch.xpu.is_available": LoopHandlers.other_backend_available,
}


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "DataLoader": LoopHandlers.dataloader,
    "BatchSampler": LoopHandlers.batch_sampler,
    "DistributedSampler": LoopHandlers.sampler,
    "RandomSampler": LoopHandlers.sampler,
    "SequentialSampler": LoopHandlers.sampler,
    "autocast": LoopHandlers.autocast,
    "GradScaler": LoopHandlers.scaler,
    "is_bfloat16_supported": LoopHandlers.bf16_supported,
    "is_bf16_supported": LoopHandlers.bf16_supported,
    "get_device_capability": LoopHandlers.device_capability,
}


def _map_style_dataset(x: Any) -> bool:
    """A dataset whose iteration yields one example at a time: a datasets Dataset, or an object of the script's own
    class with __getitem__ and no __iter__ of its own (an __iter__ may yield whole batches)."""
    if isinstance(x, Dataset):
        return True
    cls = getattr(x, "user_class", None)
    return isinstance(x, Obj) and isinstance(cls, Class) and cls.lookup("__getitem__") is not None \
        and cls.lookup("__iter__") is None


def library_config_class(f: Any) -> str | None:
    """The library config class (data/library_defaults.json's name) a value names: `SFTConfig`, `SFTConfig.__init__`
    imported from trl, transformers' TrainingArguments; None for anything else."""
    from memlint.extract.values import Ref
    from memlint.library import api

    if type(f) is not Ref:
        return None
    qual = f.qual.removesuffix(".__init__")
    if qual.split(".", 1)[0] not in ("trl", "transformers", "unsloth"):
        return None
    return api.training_arguments().get(qual.rsplit(".", 1)[-1])
