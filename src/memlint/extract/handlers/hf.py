"""Hugging Face transformers and datasets: from_pretrained / from_config (models, tokenizers and
processors, configs, a class of the checkout on a transformers base), TrainingArguments-like classes,
trainers and collators (which ones is data: memlint.library.api), a model's methods (checkpointing,
casts), tokenizer calls, load_dataset and `ds.map(fn)`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from memlint.extract.objects import (
    ClassLoader, Collator, Dataset, DtypeName, HfConfig, Instance, Model, Obj, Params, Partial, PeftConfig, Setting,
    Tokenizer, TokenizerCall, Trainer, TrainingArgs, dtype_of,
)
from memlint.extract.values import Class, Const, Dict, Func, Ref, Seq, TokenIds, Unknown, flatten, weakest
from memlint.library import api
from memlint.extract.handlers.common import Call, _last


_MODEL_CLASS = re.compile(r"^(Auto(Peft)?Model\w*|\w+For[A-Z]\w*|\w+(LM|Model|LMHeadModel))$")


_NOT_MODEL = re.compile(r"Tokenizer|Config|Processor|Extractor|ImageProcessor")


_TOKENIZE_METHODS = {"__call__", "encode", "encode_plus", "batch_encode_plus", "apply_chat_template", "pad"}


def _pretrained_model_class(cls: Any) -> bool:
    """Whether a class of the checkout derives from transformers' PreTrainedModel."""
    return isinstance(cls, Class) and any(isinstance(x, Ref) and x.qual.startswith("transformers.")
                                          and _last(x.qual) == "PreTrainedModel" for x in cls.lineage())


def _vendored_trainer(cls: Class, names: Any) -> str | None:
    """A copy of transformers' Trainer kept in the repository (ChatGLM's ptuning/trainer.py): a class
    of the checkout named like a library trainer that defines its training_step, or derives from one."""
    seen = 0
    stack: list = [cls]
    named, vendored = None, False
    while stack and seen < 20:
        seen += 1
        x = stack.pop()
        if isinstance(x, Class):
            if x.name in names:
                named = named or x.name  # the outermost library name: Seq2SeqTrainer over the copied Trainer
                vendored |= "training_step" in x.methods
            stack.extend(x.bases)
    return named if vendored else None


def _copied_trainer(cls: Class, base: str | None, names: Any) -> str | None:
    """A copy of a library trainer kept in the repository on top of a more general library base (ATM-RAG's
    `class DPOTrainer(Trainer)`, TRL's DPOTrainer copied over transformers' Trainer): the checkout class nearest the
    call whose name is another library trainer's and which carries that trainer's own methods (TRL's
    concatenated_forward or get_batch_loss_metrics: a compute_loss alone is any custom trainer's) is that trainer;
    None for any other class."""
    if base is None:  # no library base: a whole copy of the library's classes (_vendored_trainer)
        return None
    stack: list = [cls]
    for _ in range(20):
        if not stack:
            break
        x = stack.pop(0)
        if isinstance(x, Class):
            if x.name in names and x.name != base and (_TRAINER_LOSS & set(x.methods)
                                                       or _COPIED_OWN.get(x.name, frozenset({""})) <= set(x.methods)):
                return x.name
            stack.extend(x.bases)
    return None


_TRAINER_LOSS = frozenset({"concatenated_forward", "get_batch_loss_metrics"})  # TRL's preference trainers' own
# a trainer copied without those: the methods its copies always carry (TRL's RewardTrainer, v0.4 on: its pairwise
# compute_loss and the prediction_step that returns both rewards; visualize_samples from 0.12)
_COPIED_OWN = {"RewardTrainer": frozenset({"compute_loss", "prediction_step"})}


def _literal_text(text: Any) -> bool:
    """Text written in the script itself: a string literal, or a list or tuple of them."""
    if isinstance(text, Const):
        return isinstance(text.value, str) and text.source in ("literal", "constant")
    return isinstance(text, Seq) and bool(text.items) and not text.grown and all(
        isinstance(x, Const) and isinstance(x.value, str) and x.source in ("literal", "constant") for x in text.items)


class HfHandlers:
    """transformers and datasets."""

    def config_class(self, c: Call) -> Any:
        """`LlamaConfig(hidden_size=512, num_hidden_layers=8, ...)`: a config the script builds a model from; its shape
        is read when the model is built (config_shape), after any `config.x = v` the script writes."""
        return HfConfig(c.qual, c.line or 0, dict(c.kwargs), {}, c.open or bool(c.args), built_by=c.name)

    def training_args(self, c: Call) -> Any:
        return c.new(TrainingArgs, api.training_arguments()[c.name], ("output_dir",))

    def trainer(self, c: Call, user: Class | None = None) -> Any:
        facts = api.trainer(c.name)
        if facts.versions is not None:
            from memlint.library.versions import in_range, installed_version, shown_version

            package = facts.arguments.split(".", 1)[0]
            if not in_range(installed_version(package), facts.versions):  # another class of the same name
                return Unknown(f"the result of {c.name}() ({package} {shown_version(package)}: not the {c.name} of "
                               f"{package} {facts.versions} that memlint reads)")
        if facts.api_keywords and not set(facts.api_keywords) & set(c.kwargs):
            # called as another API of the same name (TRL's older PPOTrainer(config, model, ref_model, tokenizer))
            return Unknown(f"the result of {c.name}() (none of {', '.join(facts.api_keywords)}: not the {c.name} "
                           "memlint reads)")
        kwargs = dict(c.kwargs)
        for old, new in facts.aliases:  # an earlier version's keyword for the same parameter
            if old in kwargs and new not in kwargs:
                kwargs[new] = kwargs.pop(old)
        c = dataclasses.replace(c, kwargs=kwargs) if kwargs != c.kwargs else c
        return c.new(Trainer, c.name, facts.positional, user_class=user.name if user else None)

    def collator(self, c: Call) -> Any:
        if c.name == "UnslothVisionDataCollator":
            # unsloth's vision collator truncates at its max_seq_length, else at the model's (the unsloth load's own)
            out = c.new(Collator, f"unsloth.{c.name}", ("model", "processor"))
            cap = c.kwargs.get("max_seq_length")
            model = out.kwargs.get("model")
            if (cap is None or isinstance(cap, Const) and cap.value is None) and isinstance(model, Model):
                root = model
                while root.base is not None:
                    root = root.base
                cap = root.kwargs.get("max_seq_length")
                if cap is None and root.loader == "unsloth":  # the loader's own default
                    from memlint.library.defaults import default as library_default

                    d = library_default("unsloth.FastLanguageModel.from_pretrained", "max_seq_length")
                    cap = Const(d.value, "library-default", c.line, (d.why,)) if d is not None else None
            if isinstance(cap, Const) and isinstance(cap.value, int):
                out.kwargs["max_length"] = cap.with_value(cap.value, f"UnslothVisionDataCollator (line {c.line}) "
                                                                     "truncates at the model's max_seq_length")
            return out
        return c.new(Collator, f"transformers.{c.name}", ("tokenizer",))

    def dataset(self, c: Call) -> Any:
        return Dataset(c.qual, c.line or 0)

    def dataset_from_generator(self, c: Call) -> Any:
        """datasets' Dataset.from_generator(gen, gen_kwargs=...) / IterableDataset.from_generator: the rows `gen` yields
        (a packer, a tokenizing loop), run once as the library runs it."""
        gen = c.arg(0, "generator")
        kw = c.kwargs.get("gen_kwargs")
        if isinstance(gen, Func):
            c.it.call_function(gen, [], dict(kw.items) if isinstance(kw, Dict) else {}, c.line)
        return Dataset(c.qual, c.line or 0)

    def from_pretrained(self, c: Call) -> Any:
        owner, how = c.owner, c.name
        if owner in api.unsloth_loaders():
            kw = dict(c.kwargs)
            if c.args:
                kw.setdefault("model_name", c.args[0])
            model = Model(c.qual, c.line or 0, kw, {}, c.open, loader="unsloth")
            tok = Tokenizer(c.qual, c.line or 0, {"model_max_length": kw.get("max_seq_length")}, unsloth=True)
            c.it.facts.objects.extend([model, tok])
            return Seq([model, tok], "tuple")
        if owner == "PeftModel":
            adapter = PeftConfig("peft.PeftModel.from_pretrained", c.line or 0, {}, {}, True,
                                 adapter=c.arg(1, "model_id"))
            return self.wrap_model(c.it, c.arg(0, "model"), c.line, peft=adapter)
        if owner == "PeftConfig" or owner in api.peft_configs():
            return self.peft_config_of_folder(c)
        if owner == "AutoConfig" or owner.endswith("Config"):
            kw = {"model_id": c.arg(0, "pretrained_model_name_or_path")}
            for key in ("num_labels", "attn_implementation"):  # what a model loaded with config=this one takes from it
                if key in c.kwargs:
                    kw[key] = c.kwargs[key]
            return HfConfig(c.qual, c.line or 0, kw)
        if "Tokenizer" in owner or "Processor" in owner:
            kw = dict(c.kwargs)
            if c.args:
                kw.setdefault("pretrained_model_name_or_path", c.args[0])
            tok = Tokenizer(c.qual, c.line or 0, kw)
            c.it.facts.objects.append(tok)
            return tok
        if _MODEL_CLASS.match(owner) and not _NOT_MODEL.search(owner):
            return self._load_model(c, owner, how)
        return Unknown(f"{owner}.{how}()")

    @staticmethod
    def saved_model(it: Any, model: Any, folder: Any, line: int | None) -> None:
        """`model.save_pretrained("out/adapter")` / `trainer.save_model(...)`: the folder now holds that model (its base's
        id, its adapter), for a later `from_pretrained` of the same folder in the script."""
        if isinstance(folder, Const) and isinstance(folder.value, str) and isinstance(model, Model):
            it.facts.saved_models[folder.value.rstrip("/")] = (model, line)

    @staticmethod
    def saved_base(it: Any, ref: Any) -> Any:
        """The model id a folder the script saved a model to stands for: the saved model's own (its base's, for a
        PEFT model), with the save in its chain; `ref` itself for any other folder."""
        if not (isinstance(ref, Const) and isinstance(ref.value, str)):
            return ref
        hit = it.facts.saved_models.get(ref.value.rstrip("/"))
        if hit is None:
            return ref
        model, at = hit
        while model.base is not None:
            model = model.base
        base = model.kwargs.get("pretrained_model_name_or_path", model.kwargs.get("model_name"))
        if not isinstance(base, Const):
            return ref
        return Const(base.value, base.source, base.line, base.chain + (
            f"{ref.value!r} (line {ref.line}) is the folder the script saved the model to at line {at}: {base.value}",),
            base.file)

    def _load_model(self, c: Call, owner: str, how: str) -> Model:
        kw = dict(c.kwargs)
        shape = None
        if how == "from_config":
            cfg = c.arg(0, "config")
            kw["pretrained_model_name_or_path"] = cfg.kwargs.get("model_id") if isinstance(cfg, Obj) else Unknown("a model config")
            kw["_from_config"] = True
            shape = config_shape(cfg) if isinstance(cfg, HfConfig) and cfg.built_by else None
            if shape is not None:  # a config class the script built: randomly initialised weights of that shape
                kw["pretrained_model_name_or_path"] = Const(shape.described, "literal", c.line, (
                    f"{owner}(...) built from {shape.described}: randomly initialised",)) if shape.config is not None \
                    else Unknown(shape.why)
        elif c.args:
            kw.setdefault("pretrained_model_name_or_path", c.args[0])
        if "pretrained_model_name_or_path" in kw:
            kw["pretrained_model_name_or_path"] = self.saved_base(c.it, kw["pretrained_model_name_or_path"])
        auto_peft = owner.startswith("AutoPeftModel")
        model = Model(c.qual, c.line or 0, kw, {}, c.open, loader="peft-auto" if auto_peft else "transformers", shape=shape)
        if auto_peft:
            model.peft = PeftConfig("peft.AutoPeftModel", c.line or 0, {}, {}, True, adapter=True)
        _config_checkpointing(model, c.arg(0, "config") if how == "from_config" else kw.get("config"), kw, c.line)
        c.it.facts.objects.append(model)
        return model

    @staticmethod
    def mapped_function(it: Any, args: list, kwargs: dict, line: int | None) -> None:
        """datasets' `ds.map(fn, fn_kwargs={...})` / `ds.map(functools.partial(fn, max_len=n))`: fn runs
        once on an example memlint does not know, with the arguments the call binds (the walk of
        uncalled functions would see only their defaults)."""
        fn = args[0] if args else kwargs.get("function")
        extra = kwargs.get("fn_kwargs")
        if isinstance(fn, Partial) and isinstance(fn.func, Func):
            fn_args, fn_kw, target = list(fn.args), dict(fn.kwargs), fn.func
        elif isinstance(fn, Func):  # a function or lambda of the script: its tokenizer calls are the rows' own
            fn_args, fn_kw, target = [], {}, fn
        else:
            return
        if isinstance(extra, Dict):
            fn_kw.update({k: v for k, v in extra.items.items() if isinstance(k, str)})
        # partial(fn, a, b)(example) is fn(a, b, example): the bound positionals come first
        it.call_function(target, [*fn_args, Unknown("a dataset example")], fn_kw, line)

    def model_method(self, it: Any, model: Model, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        if name == "generate":
            return self.generated(it, args, kwargs, line)
        if name == "gradient_checkpointing_enable":
            model.gc.append(Setting(Const(True, "literal", line), line, "model.gradient_checkpointing_enable()"))
            return Const(None, "literal", line)
        if name == "gradient_checkpointing_disable":
            model.gc.append(Setting(Const(False, "literal", line), line, "model.gradient_checkpointing_disable()"))
            return Const(None, "literal", line)
        if name in ("half", "bfloat16", "float"):
            dt = {"half": "torch.float16", "bfloat16": "torch.bfloat16", "float": "torch.float32"}[name]
            model.dtypes.append(Setting(Ref(dt), line, f"model.{name}()"))
            return model
        if name == "to":
            for a in [*args, kwargs.get("dtype")]:
                if isinstance(a, (Ref, DtypeName)) and dtype_of(a):
                    model.dtypes.append(Setting(a, line, "model.to(dtype)"))
            return model
        if name in ("cuda", "cpu", "train", "eval", "requires_grad_"):
            return model
        if name in ("parameters", "named_parameters"):
            return Params("parameters", line or 0, model=model)
        if name == "add_adapter":
            model.peft = args[0] if args else kwargs.get("adapter_config")
            return Const(None, "literal", line)
        if name == "save_pretrained":
            self.saved_model(it, model, args[0] if args else kwargs.get("save_directory"), line)
        if name in ("print_trainable_parameters", "enable_input_require_grads", "resize_token_embeddings", "save_pretrained", "push_to_hub", "config"):
            return Unknown(f".{name}()")
        return Unknown(f"the result of model.{name}()")

    def tokenize(self, it: Any, tok: Tokenizer, args: list, kwargs: dict, line: int | None, name: str = "__call__") -> Any:
        text = args[0] if args else kwargs.get("text")
        # tokenizer("My experiments are going strong!", max_length=10): on text written in the script, a demonstration
        # when another call tokenizes the data (fields/length.py)
        it.facts.tokenizer_calls.append(TokenizerCall(dict(kwargs), line, tok, name,
                                                      bool(args) or "text" in kwargs or "text_target" not in kwargs,
                                                      name != "pad" and _literal_text(text),
                                                      _part_cap(it.call_node)))
        cap, trunc = kwargs.get("max_length"), kwargs.get("truncation")
        capped = isinstance(cap, Const) and isinstance(cap.value, int) and not isinstance(cap.value, bool) \
            and isinstance(trunc, Const) and trunc.value not in (False, None, "do_not_truncate")
        rows = Const(len(text.items), "constant", line, (f"a list of {len(text.items)} texts tokenized at line {line}",)) \
            if isinstance(text, Seq) and text.items and not text.grown else None
        return TokenIds("token ids", line, cap if capped else None, rows=rows)

    @staticmethod
    def generated(it: Any, args: list, kwargs: dict, line: int | None) -> Any:
        """model.generate(**enc, max_new_tokens=C[, num_return_sequences=G]): token ids of at most the prompt's cap + C
        tokens, rows × G of them; what a hand-written RL loop then runs the model on (model(seqs)) is that batch."""
        prompt = next((x for x in [*args, *kwargs.values()] for x in flatten(x) if isinstance(x, TokenIds)), None)
        new, times = kwargs.get("max_new_tokens"), kwargs.get("num_return_sequences")
        cap = prompt.cap if prompt is not None else None
        ok = all(isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool) for v in (cap, new))
        total = Const(cap.value + new.value, weakest(cap.source, new.source), line, (
            *cap.chain, f"model.generate(max_new_tokens={new.value}) (line {line}): the prompt's {cap.value} tokens + "
            f"{new.value} new ones",), cap.file) if ok else None
        rows = prompt.rows if prompt is not None else None
        if isinstance(rows, Const) and isinstance(times, Const) and isinstance(times.value, int):
            rows = rows.with_value(rows.value * times.value, f"× num_return_sequences={times.value}")
        elif times is not None:
            rows = None
        return TokenIds("generated token ids", line, total, rows=rows, generated=True)

    @staticmethod
    def kernel_class(name: str) -> Ref | None:
        """A trainer or training-arguments class memlint knows by this exact name (SFTTrainer, SFTConfig,
        TrainingArguments), as the library that defines it: a notebook cell that uses it without importing it ran in a
        kernel that had imported it."""
        args = api.training_arguments()
        if name in args and args[name].rsplit(".", 1)[-1] == name:
            return Ref(args[name])
        facts = api.trainers().get(name)
        if facts is not None and facts.arguments:
            return Ref(f"{facts.arguments.split('.', 1)[0]}.{name}")
        return None

    def library_init(self, cls: Class) -> Ref | None:
        """`super().__init__(...)` in a checkout subclass of a library trainer or training-arguments class: that
        library class, called with the subclass's arguments (the object memlint reads is built there)."""
        names = {**api.trainers(), **api.training_arguments()}
        return next((b for b in cls.lineage() if isinstance(b, Ref) and _last(b.qual) in names), None)

    def own_trainer_init(self, c: Call, cls: Class, base: str) -> Any:
        """A checkout Trainer subclass with its own `__init__` (`SFTTrainer(args, accelerator)` that loads the model,
        builds TrainingArguments from `args` and calls `super().__init__(model=..., args=...)`): that `__init__` runs
        on the call's arguments and the trainer its `super().__init__` builds is the result, of the class's library
        base `base` (LLaMA-Factory's `CustomDPOTrainer(DPOTrainer)` calls `Trainer.__init__` itself and is still a
        DPOTrainer); None when it built none."""
        init = cls.lookup("__init__")
        if init is None or init[0] != "method" or not isinstance(init[1], Func):
            return None
        start = len(c.it.facts.objects)
        holder = Instance(cls.name, c.line or 0, {}, {}, c.open, user_class=cls)
        c.it.call_function(init[1], [holder, *c.args], dict(c.kwargs), c.line)
        built = [o for o in c.it.facts.objects[start:] if isinstance(o, Trainer)]
        if not built:
            return None
        trainer = built[-1]
        trainer.cls, trainer.user_class = base, cls.name
        for k, v in holder.attrs.items():  # self.x = ... in the __init__: attributes of the trainer
            trainer.attrs.setdefault(k, v)
        return trainer

    def checkout_loader(self, cls: Class, attr: str) -> ClassLoader | None:
        """`Cls.from_pretrained` / `Cls.from_config` of a class the checkout defines on a transformers model base
        (`class LlamaForCausalLM(LlamaPreTrainedModel)`, `LlamaPreTrainedModel(PreTrainedModel)`, `class
        Model(Qwen2ForCausalLM)`: the base makes it a model, whatever the subclass is called)."""
        if attr not in ("from_pretrained", "from_config") or _NOT_MODEL.search(cls.name):
            return None
        base = next((b for b in cls.lineage() if isinstance(b, Ref) and b.qual.split(".", 1)[0] == "transformers"
                     and (_MODEL_CLASS.match(_last(b.qual)) or _last(b.qual) == "PreTrainedModel")), None)
        if base is None:
            return None
        # loaded as the class it is named as when that names a model, else as its transformers base
        named = cls.name if _MODEL_CLASS.match(cls.name) or _last(base.qual) == "PreTrainedModel" else _last(base.qual)
        return ClassLoader(cls, attr, named)


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "from_pretrained": HfHandlers.from_pretrained,
    "from_config": HfHandlers.from_pretrained,
    "load_dataset": HfHandlers.dataset,
    "load_from_disk": HfHandlers.dataset,
    "from_generator": HfHandlers.dataset_from_generator,
}


def _config_checkpointing(model: Model, cfg: Any, kw: dict, line: int | None) -> None:
    """gradient_checkpointing carried by the config the model is built from (`config.gradient_checkpointing = True`
    set before the load, or from_pretrained(..., gradient_checkpointing=True), which sets it on the config):
    transformers' post_init turns checkpointing on (library/api.config_checkpointing, by version). Read as the
    load runs: an attribute set on the config afterwards does nothing."""
    v = kw.get("gradient_checkpointing")
    how = "from_pretrained(gradient_checkpointing=...)"
    if v is None and isinstance(cfg, HfConfig):
        v, how = cfg.get("gradient_checkpointing"), "config.gradient_checkpointing of the config the model is built from"
    if v is None:
        return
    why = api.config_checkpointing()
    if why is None:
        return
    model.gc.append(Setting(v, line, f"{how}: {why}"))


def config_shape(cfg: HfConfig) -> Any:
    """The custom_model.Shape of a model built from a config class the script writes: the class's __init__ defaults
    (library_api.json config_classes) under the script's keywords and later attribute writes; unknown where a keyword
    that sets the shape is, or one whose meaning changed across versions is given."""
    from memlint.catalog.local import RECORDED_SHAPE_KEYS, SHAPE_KEYS
    from memlint.extract.custom_model import Shape

    entry = api.config_classes()[cfg.built_by]
    described = f"{cfg.built_by}(...) (line {cfg.line})"
    given = {entry["aliases"].get(k, k): v for k, v in {**cfg.kwargs, **cfg.attrs}.items()}
    shaped = set(entry["defaults"]) | set(SHAPE_KEYS) | set(RECORDED_SHAPE_KEYS) | set(api.config_shape_keywords())
    unread = [k for k, v in given.items() if k in shaped and not (isinstance(v, Const) and _literal(v.value))]
    unstable = [k for k in given if k in entry.get("version_dependent", ())]
    if cfg.open or unread or unstable:
        why = (f"{', '.join(unread)} not known" if unread else f"{', '.join(unstable)} means different things in "
               "different transformers versions" if unstable else "arguments memlint cannot read")
        return Shape(described, None, f"{described}: {why}")
    config = {"model_type": entry["model_type"], **entry["defaults"],
              **{k: v.value for k, v in given.items() if isinstance(v, Const) and _literal(v.value)}, "_built": described}
    how = f"transformers {cfg.built_by}'s defaults, the script's " + (
        ", ".join(f"{k}={config[k]}" for k in given if k in shaped) or "no shape keywords")
    return Shape(described, config, family_how=how, origin=f"the {cfg.built_by} the script builds")


def _literal(x: Any) -> bool:
    return x is None or isinstance(x, (bool, int, float, str))


def _part_cap(node: Any) -> bool:
    """Whether a tokenizer call's max_length is written as a length named for one part of the sequence
    (`max_length=self.max_prompt_length`, `max_length=args.max_response_len`: library.api.part_length_words)."""
    import libcst as cst

    if not isinstance(node, cst.Call):
        return False
    arg = next((a for a in node.args if a.keyword is not None and a.keyword.value == "max_length"), None)
    expr = arg.value if arg is not None else None
    name = expr.attr.value if isinstance(expr, cst.Attribute) else expr.value if isinstance(expr, cst.Name) else None
    if name is None:
        return False
    words = name.lower().split("_")
    return any(w in api.part_length_words() for w in words)
