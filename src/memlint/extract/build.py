"""From what the interpreter saw to a TrainingPlan: follow the trainer, not every object.

Only what reaches the training step counts: the trainer that is trained (else the last one
built), its arguments, its model and that model's adapters and quantization. A config built
but never passed anywhere is ignored.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from memlint.extract import custom_model
from memlint.extract.objects import (
    Accelerator, Collator, DataLoader, DeepSpeedEngine, DtypeName, HfConfig, LightningTrainer, Method, Model, Obj, Optimizer,
    Params, PeftConfig, Plugin, QuantConfig, Tokenizer,
    Trainer, TrainingArgs, dtype_of, field_value,
)
from memlint.extract.values import Alts, Const, Dict, Ref, Seq, Unknown, flatten, to_python
from memlint.library import api
from memlint.library.api import checkout_objective
from memlint.library.defaults import default as library_default
from memlint.plan import SOURCES, Span, TrainingPlan, Value
from memlint.vocab import ascii_digits

_NUMERIC = {"lora_r", "lora_alpha", "per_device_batch", "eval_batch", "grad_accum", "max_length", "num_gpus", "target_len"}
# When branches disagree, `value` is the candidate that costs the most memory.
_WORST = {
    "quant_bits": [None, 8, 4],
    "gradient_checkpointing": [False, True],
    "padding": ["max_length", "longest", "packing"],
    "precision": ["fp32", "amp-fp16", "amp-bf16"],
    "torch_dtype": ["fp32", "auto", "bf16", "fp16"],
    # eager keeps the s x s attention scores; the fused kernels do not
    "attn_implementation": None,  # data/library_api.json lists them worst first
    # the full-vocabulary logits of a plain loss cost more than a fused one's chunk
    "fused_loss": [False, "liger", "cce"],
    # DoRA's magnitude products and weight norm cost more than plain LoRA
    "offload_activations": [False, True],
    "use_dora": [True, False],
    # a second model in memory costs the most; precomputed log-probs the least
    "ref_model": ["model", "auto", "precomputed"],
}
# trainer values of loops the script drives itself (no Trainer deciding checkpointing)
_LOOPS = ("custom-loop", "deepspeed-engine", "lightning", "lightning-fabric")


class _Unconvertible(Exception):
    pass


class Builder:
    def __init__(self, path: str, script: Path, facts: Any, launch: Any = None) -> None:
        self.path = path
        self.script = script
        self.facts = facts
        self.launch = launch
        self.fields: dict[str, Value] = {}
        self.notes: list[str] = list(facts.notes)
        self.maybe: dict[str, list[str]] = {}
        self.ds_offload: list[Const] = []  # offload read from a followed DeepSpeed config
        self.ds_optimizer: list[Value] = []  # a followed DeepSpeed config's own optimizer
        self.read_files: list[str] = []  # other files read (a DeepSpeed JSON): the plan's sources

    # ---- values ----------------------------------------------------------------------------

    def put(self, name: str, av: Any, convert: Callable[[Any], Any] = lambda x: x,
            line: int | None = None, why: str = "") -> None:
        """Set a plan field from an abstract value; every candidate kept, unknowns noted."""
        known: list[tuple[Any, Const]] = []
        whys: list[str] = []
        for o in flatten(av) if av is not None else [Unknown(why or "not found in the script")]:
            if isinstance(o, (Seq, Dict)):
                o = to_python(o)
            if isinstance(o, Ref):
                o = Const(o, o.source, o.line or line)
            elif isinstance(o, DtypeName):
                o = o.name.with_value(o.name.value)
            if isinstance(o, Const):
                try:
                    known.append((convert(o.value), o))
                except _Unconvertible as exc:
                    whys.append(str(exc))
            elif isinstance(o, Unknown):
                whys.append(o.why or why or "cannot be known statically")
            elif isinstance(o, Method):
                whys.append(f"a method of {o.obj.cls}")
            else:
                whys.append(why or "cannot be known statically")
        if not known:
            reason = whys[0] if whys else why
            self.fields[name] = Value(None, "unknown", Span(self.path, line) if line else None, (reason,) if reason else ())
            self.notes.append(f"{name} is unknown ({reason}); pass --assume {name}=VALUE")
            return
        distinct: list[tuple[Any, Const]] = []
        for v, c in known:
            if not any(_eq(v, d) for d, _ in distinct):
                distinct.append((v, c))
        pick = distinct[0]
        if len(distinct) > 1 and name in _NUMERIC:
            nums = [d for d in distinct if isinstance(d[0], (int, float)) and not isinstance(d[0], bool)]
            if nums:
                pick = max(nums, key=lambda d: d[0])
        elif len(distinct) > 1 and name in _WORST:
            order = _WORST[name] or list(api.attention())
            pick = min(distinct, key=lambda d: order.index(d[0]) if d[0] in order else len(order))
        value, c = pick
        span = Span(c.file or self.path, c.line or line or 1) if (c.line or line) else None
        cands = tuple(_jsonable(d[0]) for d in distinct) if len(distinct) > 1 else ()
        self.fields[name] = Value(_jsonable(value), c.source, span, tuple(c.chain), cands)
        if whys:
            self.maybe.setdefault(_reason(whys[0]), []).append(name)

    def lib(self, name: str, cls: str, attr: str, line: int | None, convert: Callable = lambda x: x) -> None:
        d = library_default(cls, attr)
        if d is None:
            self.put(name, Unknown(f"no library default for {cls}.{attr}"), line=line)
            return
        self.put(name, Const(d.value, "library-default", line, (d.why,)), convert, line)

    # ---- the plan --------------------------------------------------------------------------

    def build(self) -> TrainingPlan:
        objs = self.facts.objects
        trainers = self.facts.first("objects", Trainer)
        trained = [t for t in self.facts.trained if isinstance(t, Trainer)]
        trainer = (trained or trainers or [None])[-1]
        if len({id(t) for t in trained}) > 1:
            self.notes.append("more than one trainer is trained; the plan follows the last one")
        model: Any = None
        args: Any = None
        if trainer is not None:
            model = trainer.kwargs.get("model")
            args = trainer.kwargs.get("args")
        else:
            model = self.loop_model(objs)

        model_objs = [m for m in flatten(model) if isinstance(m, Model)]
        if trainer is not None and any(isinstance(m, Const) and isinstance(m.value, str) for m in flatten(model)):
            model_objs += self.string_models(trainer, model, args)
        if trainer is not None and not model_objs:
            # `model = helper(model)` through a function memlint cannot follow loses the
            # object; the model the script loaded last before building the trainer is still the
            # best reading (one loaded after training is for inference).
            before = objs[: next((i for i, o in enumerate(objs) if o is trainer), len(objs))]
            loaded = self.loop_model(before) or self.loop_model(objs)
            if isinstance(loaded, Model):
                model_objs = [loaded]
                why = next((u.why for u in flatten(model) if isinstance(u, Unknown) and u.why), "a value memlint cannot follow")
                self.notes.append(f"the trainer's model is {why}; the plan follows the model loaded at line {self.root(loaded).line}")
        # unsloth's kernels and offloaded checkpoints cost less, so a path without it is the worst case
        unsloth = bool(model_objs) and all(self.root(m).loader == "unsloth" for m in model_objs)

        self.model_fields(model_objs, trainer)
        self.peft_fields(model_objs, trainer)
        if trainer is not None:
            self.trainer_fields(trainer, args, model_objs, unsloth)
        else:
            self.loop_fields(objs, model_objs)
        self.gc_field(model_objs)
        self.fused_loss_field(model_objs)
        self.optimizer_in_bwd_field()
        self.offload_activations_field()
        self.float8_field()
        self.vision_fields()
        for why, names in self.maybe.items():
            self.notes.append(f"{', '.join(names)}: on some paths {why}; the plan shows the values memlint can read")
        if self.script.suffix == ".ipynb" and not self.fields.get("num_gpus", Value(None, "unknown")).known:
            self.fields["num_gpus"] = Value(1, "library-default", None, ("a notebook runs one process (one GPU)",))
        plan = TrainingPlan(self.path, self.fields, tuple(dict.fromkeys(self.notes)), kind="notebook" if self.script.suffix == ".ipynb" else "python")
        if self.launch is not None:
            from memlint.extract.launched import apply_launcher

            plan = apply_launcher(plan, self.launch, self.script)
        return plan

    def vision_fields(self) -> None:
        """A vision-language model's image processor: min_pixels / max_pixels passed to AutoProcessor /
        Qwen2VLProcessor / AutoImageProcessor.from_pretrained (Qwen2-VL's smart_resize bounds); left out, the
        processor's own (estimate/vision.py, data/vision.json)."""
        procs = [o for o in self.facts.objects if isinstance(o, Tokenizer) and "Processor" in o.cls]
        for key, name in (("max_pixels", "image_max_pixels"), ("min_pixels", "image_min_pixels")):
            vals = [p.get(key) for p in procs if p.get(key) is not None]
            if vals:
                self.put(name, _alts(vals), _int, procs[0].line)

    def loop_model(self, objs: list) -> Any:
        for eng in self.facts.first("objects", DeepSpeedEngine):
            if isinstance(eng.model, Model):
                return eng.model
        early = self.facts.first("objects", object)
        opts = [o for o in objs if isinstance(o, Optimizer) and any(o is e for e in early)] or \
            [o for o in objs if isinstance(o, Optimizer)]
        for opt in opts:
            for p in flatten(opt.kwargs.get("params")):
                if isinstance(p, Params):
                    return p.model
        models = [o for o in objs if isinstance(o, Model) and any(o is e for e in early)] or \
            [o for o in objs if isinstance(o, Model)]
        models = [m for m in models if not self.root(m).empty] or models  # a weightless skeleton is not trained
        wrapped = {id(o.base) for o in models}
        tops = [m for m in models if id(m) not in wrapped]
        return tops[-1] if tops else None

    def string_models(self, trainer: Obj, model: Any, args: Any) -> list:
        """TRL trainers load the model themselves when given its id."""
        out = []
        for m in flatten(model):
            if isinstance(m, Const) and isinstance(m.value, str):
                kw: dict = {"pretrained_model_name_or_path": m}
                for a in flatten(args):
                    if isinstance(a, Obj):
                        init = a.get("model_init_kwargs")
                        if isinstance(init, Dict):
                            kw.update(init.items)
                out.append(Model(f"trl.{trainer.cls}(model=str)", trainer.line, kw))
        return out

    @staticmethod
    def root(m: Obj) -> Obj:
        while m.base is not None:
            m = m.base
        return m

    def chain(self, m: Obj) -> list[Obj]:
        out = [m]
        while m.base is not None:
            m = m.base
            out.append(m)
        return out

    def model_fields(self, models: list[Obj], trainer: Obj | None) -> None:
        if not models:
            given = trainer.kwargs.get("model") if trainer is not None else None
            why = next((u.why for u in flatten(given) if isinstance(u, Unknown) and u.why), None)
            self.put("model_id", Unknown(f"the trainer's model is {why}" if why else "no model load found"))
            return
        ids, dtypes, attns, quants, heads, labels = [], [], [], [], [], []
        for m in models:
            root = self.root(m)
            kw = root.kwargs
            self.head_of(root, heads, labels)
            mid = kw.get("pretrained_model_name_or_path", kw.get("model_name"))
            if root.loader == "script-class" and root.shape is not None and root.shape.config is None:
                mid = Unknown(root.shape.why)  # the script's own class, its shape unread: nothing to size
            ids.append(mid if mid is not None else Unknown("the model id"))
            line = root.line
            # dtype: the load argument, then any later .to(dtype)/.half()
            dt = kw.get("dtype", kw.get("torch_dtype"))
            later = [d for mm in reversed(self.chain(m)) for d in mm.dtypes]
            if later:
                dtypes.append(later[-1].value)
            elif dt is not None and not (isinstance(dt, Const) and dt.value is None):
                dtypes.append(dt)
            elif root.loader == "script-class":
                dtypes.append(Const("float32", "constant", line, (f"{root.cls}(…): the script's own nn.Module creates its "
                                                                  "parameters in float32",)))
            elif root.loader == "unsloth":
                dtypes.append(_libc("unsloth.FastLanguageModel.from_pretrained", "dtype", line))
            elif root.open:
                dtypes.append(Unknown("dtype may be set by **kwargs"))
            else:
                dtypes.append(_libc("transformers.from_pretrained", "dtype", line))
            attn = kw.get("attn_implementation", root.shape.attention if root.loader == "script-class" else None)
            if attn is None and isinstance(kw.get("use_flash_attention_2"), Const) and kw["use_flash_attention_2"].value:
                attn = kw["use_flash_attention_2"].with_value("flash_attention_2")
            if attn is None or (isinstance(attn, Const) and attn.value is None):
                attn = Unknown("attn_implementation may be set by **kwargs") if root.open else _libc("transformers.from_pretrained", "attn_implementation", line)
            attns.append(attn)
            quants.append(self.quant_of(root))
        self.put("model_id", _alts(ids), _model_id, models[0].line)
        if heads:  # the class names its head (AutoModelForSequenceClassification, BertForTokenClassification ...)
            self.put("task_head", _alts(heads), str, self.root(models[0]).line)
        if labels:
            self.put("num_labels", _alts(labels), _int, self.root(models[0]).line)
        shape = self.root(models[0]).shape
        if shape is not None and self.fields["model_id"].known:
            self.fields["model_id"] = custom_model.with_shape(self.fields["model_id"], shape)
            self.notes.extend(shape.notes)
        self.put("torch_dtype", _alts(dtypes), _dtype, self.root(models[0]).line)
        self.put("attn_implementation", _alts(attns), _attn, self.root(models[0]).line)
        self.tp_fields(models)
        q = {k: _alts([x.get(k) for x in quants]) for k in ("bits", "type", "double", "compute", "group")}
        self.put("quant_bits", q["bits"], _bits, self.root(models[0]).line)
        hqq = any(isinstance(x.get("type"), Const) and x["type"].value == "hqq" for x in quants)
        if (self.fields["quant_bits"].value in (4,) or any(c == 4 for c in self.fields["quant_bits"].candidates)
                or hqq):
            self.put("quant_type", q["type"], _quant_type, self.root(models[0]).line)
            if any(isinstance(x.get("group"), Const) for x in quants):
                self.put("quant_group_size", q["group"], _int, self.root(models[0]).line)
            if not all(isinstance(x.get("group"), Const) for x in quants):  # bitsandbytes' keys (GPTQ/AWQ have none)
                self.put("double_quant", q["double"], _bool, self.root(models[0]).line)
                self.put("compute_dtype", q["compute"], _dtype_strict, self.root(models[0]).line)
        prepared = next((m.kbit_line for m in self.chain(models[0]) if isinstance(m, Model) and m.kbit_line), None)
        if prepared is not None:  # else the trainer decides (library/api.kbit_prep, by installed version)
            self.fields["kbit_prep"] = Value(True, "literal", Span(self.path, prepared),
                                             ("prepare_model_for_kbit_training(model): non-quantized weights upcast to fp32",))

    def head_of(self, root: Obj, heads: list, labels: list) -> None:
        """The output head the loaded class carries (data/library_api.json task_heads) and, for a classification
        head, num_labels= of the load or of the config it is given (else transformers' default, two)."""
        if root.loader != "transformers":
            return
        name = next((p for p in root.cls.split(".") if p[:1].isupper()), root.cls)
        head = api.task_head(name)
        if head is None:
            return
        heads.append(Const(head, "literal", root.line, (f"{name}: the {head} head",)))
        if head in ("sequence-classification", "token-classification"):
            cfg = root.kwargs.get("config")
            n = root.kwargs.get("num_labels")
            if n is None and isinstance(cfg, HfConfig):
                n = cfg.kwargs.get("num_labels")
            labels.append(n if n is not None else _libc("transformers.PretrainedConfig", "num_labels", root.line))

    def parallelism_fields(self, configs: list) -> None:
        """accelerate's ParallelismConfig(tp_size=N, cp_size=N, ...) (accelerate >= 1.10), given to
        TrainingArguments(parallelism_config=...) or Accelerator(parallelism_config=...): the tensor- and
        context-parallel degrees; accelerate's TP applies the model's transformers tp_plan."""
        for pc in configs:
            for o in flatten(pc) if pc is not None else []:
                if not (isinstance(o, Plugin) and o.cls == "ParallelismConfig"):
                    continue
                for key in ("tp_size", "cp_size"):
                    if o.get(key) is not None:
                        self.put(key, o.get(key), _int, o.line)
                tp = self.fields.get("tp_size")
                if tp is not None and tp.known and tp.value != 1:
                    self.fields["tp_stack"] = Value("transformers", "library-default", None,
                                                    ("accelerate's ParallelismConfig(tp_size=...) applies the model's "
                                                     "tp_plan (transformers)",))
                return

    def tp_fields(self, models: list) -> None:
        """from_pretrained(..., tp_plan="auto"): transformers splits the model by its config's base_model_tp_plan
        over every rank of the launcher's world (tp_size "world"), or over `tp_size=` ranks when given."""
        for m in models:
            root = self.root(m)
            plan = root.kwargs.get("tp_plan")
            if not (isinstance(plan, Const) and plan.value not in (None, False)):
                continue
            size = root.kwargs.get("tp_size")
            if isinstance(size, Const) and isinstance(size.value, int) and not isinstance(size.value, bool):
                self.put("tp_size", size, _int, root.line)
            else:
                self.fields["tp_size"] = Value("world", plan.source if plan.source in SOURCES else "literal",
                                               Span(self.path, plan.line or root.line),
                                               (f"from_pretrained(tp_plan={plan.value!r}): the model split over every rank "
                                                "(WORLD_SIZE, the launcher's process count)",))
            self.fields["tp_stack"] = Value("transformers", "library-default", None,
                                            ("transformers' tp_plan: the config class's base_model_tp_plan",))
            return

    def quant_of(self, root: Obj) -> dict:
        kw = root.kwargs
        line = root.line
        if root.loader == "unsloth":
            cls = "unsloth.FastLanguageModel.from_pretrained"
            b4 = kw.get("load_in_4bit", _libc(cls, "load_in_4bit", line))
            b8 = kw.get("load_in_8bit", _libc(cls, "load_in_8bit", line))
            return {
                "bits": _bits_from(b4, b8, line),
                "type": _libc(cls, "bnb_4bit_quant_type", line),
                "double": _libc(cls, "bnb_4bit_use_double_quant", line),
                "compute": kw.get("dtype") if isinstance(kw.get("dtype"), (Ref, DtypeName)) else Unknown("unsloth computes in bf16 where the GPU supports it, else fp16"),
            }
        qc = kw.get("quantization_config")
        if qc is not None:
            opts = [self.quant_of_config(o, root) for o in flatten(qc)]
            return {k: _alts([o.get(k) for o in opts]) for k in ("bits", "type", "double", "compute", "group")}
        return self.quant_of_config(None, root)

    def quant_of_config(self, b: Any, root: Obj) -> dict:
        kw = root.kwargs
        line = root.line
        cls = "transformers.BitsAndBytesConfig"
        if isinstance(b, QuantConfig) and b.cls in ("transformers.GPTQConfig", "transformers.AwqConfig"):
            return _int4_config(b)
        if isinstance(b, QuantConfig) and b.cls == "transformers.HqqConfig":
            return _hqq_config(b)
        if isinstance(b, QuantConfig):
            def field(name: str) -> Any:
                v = b.get(name)
                if v is None or (isinstance(v, Const) and v.value is None and name == "bnb_4bit_compute_dtype"):
                    return _libc(cls, name, b.line) if not b.open else Unknown(f"{name} may be set by **kwargs")
                return v
            bits = _bits_from(b.get("load_in_4bit"), b.get("load_in_8bit"), b.line)
            if not _may_be_4bit(bits):
                return {"bits": bits, "type": None, "double": None, "compute": None}
            return {
                "bits": bits,
                "type": field("bnb_4bit_quant_type"),
                "double": field("bnb_4bit_use_double_quant"),
                "compute": field("bnb_4bit_compute_dtype"),
            }
        if b is not None and not (isinstance(b, Const) and b.value is None):
            return {k: Unknown("a quantization config memlint could not follow") for k in ("bits", "type", "double", "compute")}
        if isinstance(b, Const):
            return {"bits": b.with_value(None, "quantization_config=None: not quantized"), "type": None, "double": None, "compute": None}
        b4, b8 = kw.get("load_in_4bit"), kw.get("load_in_8bit")
        if b4 is None and b8 is None and root.open:
            unk = Unknown("quantization may be set by **kwargs")
            return {"bits": unk, "type": unk, "double": unk, "compute": unk}
        bits = _bits_from(b4, b8, line)
        if not _may_be_4bit(bits):
            return {"bits": bits, "type": None, "double": None, "compute": None}
        return {
            "bits": bits,
            "type": _libc(cls, "bnb_4bit_quant_type", line),
            "double": _libc(cls, "bnb_4bit_use_double_quant", line),
            "compute": _libc(cls, "bnb_4bit_compute_dtype", line),
        }

    def loader_batch(self, line: int | None) -> DataLoader | None:
        """per_device_batch from the training DataLoader (the shuffled one, else the first); the loader."""
        dls = self.facts.first("objects", DataLoader)
        train_dl = next((d for d in dls if isinstance(d.get("shuffle"), Const) and d.get("shuffle").value), dls[0] if dls else None)
        windows = self.facts.first("windows")
        yields = self.facts.first("batch_yields")
        if train_dl is not None:
            bs = train_dl.get("batch_size")
            if isinstance(bs, Const) and bs.value is None and yields:
                # DataLoader(ds, batch_size=None): no batching of its own, the dataset yields whole batches
                y = yields[0]
                n = y.rows.with_value(y.rows.value, f"DataLoader(batch_size=None) (line {train_dl.line}): the dataset "
                                      f"yields batches of {y.rows.value} rows (`if len(batch) == n: yield`, line {y.line})") \
                    if isinstance(y.rows, Const) else y.rows
                self.put("per_device_batch", n, _int, train_dl.line)
                return train_dl
            self.put("per_device_batch", bs if bs is not None else _libc("torch.utils.data.DataLoader", "batch_size", train_dl.line), _int, train_dl.line)
        elif windows:  # nanoGPT's get_batch: torch.stack([data[i : i + n] for i in torch.randint(_, (B,))])
            self.put("per_device_batch", windows[0].rows, _int, windows[0].line)
        else:
            self.put("per_device_batch", Unknown("no DataLoader found"), line=line)
        return train_dl

    def galore_fields(self, each: Any, line: int | None) -> None:
        """GaLore's optim_target_modules and optim_args' rank, when the Trainer's optim is a galore_* name."""
        optim = self.fields.get("optimizer")
        if optim is None or not isinstance(optim.value, str) or not api.galore_optimizer(optim.value):
            return
        self.put("galore_targets", each("optim_target_modules"), _targets, line)
        args = each("optim_args")
        if isinstance(args, Const) and isinstance(args.value, str):
            ranks = [kv.split("=", 1)[1].strip() for kv in args.value.replace(" ", "").split(",") if kv.startswith("rank=")]
            if ranks and ascii_digits(ranks[0]):
                self.put("galore_rank", Const(int(ranks[0]), args.source, args.line, args.chain + ("optim_args rank=",), args.file), _int, line)
                return
        self.put("galore_rank", _libc("transformers.galore_optim_args", "rank", line), _int, line)

    def adapter_dtype(self, models: list[Obj]) -> None:
        """The adapters' dtype where the script decides it: a cast of the peft model after
        get_peft_model (it casts the adapters too), or autocast_adapter_dtype=False (the adapters
        stay in the base's dtype). Else unknown: peft's default applies (estimate/from_plan)."""
        if not models:
            return
        chain = self.chain(models[0])
        at = next((i for i, m in enumerate(chain) if isinstance(m, Model) and m.peft is not None), None)
        if at is None:
            return
        after = [d for m in reversed(chain[: at + 1]) for d in m.dtypes]
        cast = chain[at].adapter_cast
        if after:
            self.put("adapter_dtype", after[-1].value, _dtype, after[-1].line)
        elif isinstance(cast, Const) and cast.value is False and "torch_dtype" in self.fields:
            base = self.fields["torch_dtype"]
            self.fields["adapter_dtype"] = Value(base.value, base.source, Span(self.path, cast.line or chain[at].line),
                                                 ("get_peft_model(..., autocast_adapter_dtype=False): adapters in the base dtype",))

    def peft_fields(self, models: list[Obj], trainer: Obj | None) -> None:
        cfgs: list = []
        for m in models:
            for mm in self.chain(m):
                if mm.peft is not None:
                    cfgs.append(mm.peft)
                    break
        if trainer is not None and trainer.kwargs.get("peft_config") is not None:
            pc = trainer.kwargs["peft_config"]
            if not (isinstance(pc, Const) and pc.value is None):
                cfgs.append(pc)
        line = models[0].line if models else None
        loras = [o for c in cfgs for o in flatten(c) if isinstance(o, PeftConfig)]
        has_none = any(isinstance(o, Const) and o.value is None for c in cfgs for o in flatten(c))
        lost = [o for c in cfgs for o in flatten(c) if isinstance(o, Unknown)]
        if not loras and lost:
            self.put("method", Unknown(f"the PEFT config is {lost[0].why or 'unknown'}"), line=line)
            return
        if not loras:
            if models or trainer is not None:
                self.put("method", Const("full", "literal", line, ("no PEFT adapter reaches the trainer",)), line=line)
            return
        lora = loras[-1]
        bits = self.fields.get("quant_bits")
        bit_opts = (bits.candidates or (bits.value,)) if bits is not None else (None,)
        methods = list(dict.fromkeys("qlora" if b == 4 else "lora" for b in bit_opts))
        if has_none:
            methods.append("full")
        method = min(methods, key=["full", "lora", "qlora"].index)
        q4 = "qlora" in methods
        cands = tuple(methods) if len(methods) > 1 else ()
        self.fields["method"] = Value(method, "literal", Span(self.path, lora.line), (f"{lora.cls.rsplit('.', 1)[-1]} (line {lora.line}) applied" + (" on a 4-bit base" if q4 else ""),), cands)
        self.adapter_dtype(models)
        if lora.adapter:
            for f in ("lora_r", "lora_alpha", "lora_targets", "lora_dropout", "lora_modules_to_save", "lora_task_type"):
                self.put(f, Unknown("read from a saved adapter at run time"), line=lora.line)
            return
        cls = lora.cls if lora.cls.startswith("unsloth") else "peft.LoraConfig"
        for field, arg in (("lora_r", "r"), ("lora_alpha", "lora_alpha"), ("lora_targets", "target_modules"),
                           ("lora_dropout", "lora_dropout"), ("lora_modules_to_save", "modules_to_save"),
                           ("lora_task_type", "task_type")):
            v = lora.get(arg)
            if v is None:
                v = Unknown(f"{arg} may be set by **kwargs") if lora.open else _libc(cls, arg, lora.line)
            conv = (_targets if field in ("lora_targets", "lora_modules_to_save") else _task_type
                    if field == "lora_task_type" else (_int if field == "lora_r" else _number))
            self.put(field, v, conv, lora.line)
        self.dora_field(lora, cls)
        if lora.cls.endswith("(LoRA written in the checkout)") and not self.facts.lora_freezes:
            self.notes.append(f"{lora.cls.split(' ', 1)[0]} (line {lora.line}) without "
                              f"{'/'.join(sorted(api.checkout_lora_freeze()))}(model): the base's other parameters "
                              "(embeddings, norms, lm_head, linears it does not convert) stay trainable; memlint counts "
                              "only the LoRA parameters as trained, so the estimate is a lower bound")
        t = self.fields.get("lora_targets")
        if t is not None and t.source == "library-default" and t.value is None:
            self.notes.append("lora_targets: peft picks target modules by architecture when target_modules is None "
                              "(q_proj and v_proj for Llama-family models); pass --assume lora_targets=... to be exact")

    def dora_field(self, lora: PeftConfig, cls: str) -> None:
        """use_dora: LoraConfig(use_dora=True) (unsloth's get_peft_model takes the same keyword)."""
        v = lora.get("use_dora")
        if v is None and lora.open:
            return  # **kwargs may set it; unknown stays quiet (plain LoRA holds less)
        if v is None:
            d = library_default("peft.LoraConfig", "use_dora")
            v = Const(False if d is None else d.value, "library-default", lora.line, (d.why if d else "LoraConfig",))
        self.put("use_dora", v, _bool, lora.line)

    # ---- HF/TRL trainers -------------------------------------------------------------------

    def args_checkpointing(self, arg_objs: list) -> None:
        """TrainingArguments' gradient_checkpointing (activation_checkpointing in transformers 5), kept for the model's
        own gradient_checkpointing_enable() to join, and a context_fn in gradient_checkpointing_kwargs (said)."""
        gc = []
        for a in arg_objs:
            v = a.get("gradient_checkpointing")
            if v is None:
                v = a.get("activation_checkpointing")
            gc.append(v if v is not None else field_value(a, "gradient_checkpointing"))
        self.args_gc = _alts(gc)
        for a in arg_objs:
            kw = a.get("gradient_checkpointing_kwargs")
            if isinstance(kw, Dict) and "context_fn" in kw.items:
                # transformers passes these to torch.utils.checkpoint.checkpoint: a context_fn is a selective
                # checkpointing policy (create_selective_checkpoint_contexts), the script's own code
                self.notes.append(f"gradient_checkpointing_kwargs (line {a.line}) sets a context_fn, a selective "
                                  "checkpointing policy memlint does not read: estimated as full recompute, which keeps "
                                  "less than any selective policy; torchtitan's op policy: --assume recompute_policy=op-sac")

    def trainer_fields(self, trainer: Obj, args: Any, models: list[Obj], unsloth: bool) -> None:
        name = trainer.cls
        label = "unsloth" if unsloth else name
        how = f"{name}(...) (line {trainer.line})" + (" over an unsloth FastLanguageModel" if unsloth else "")
        shape: tuple = ()
        if trainer.user_class:
            how = f"{trainer.user_class}, a subclass of {name} (line {trainer.line})"
            objective = checkout_objective(trainer.user_class, name)
            if objective is not None:  # the checkout's own SimPO/ORPO/CPO trainer: no reference model
                shape = (("class", trainer.user_class), ("objective", objective))
                how += (f"; its name says {api.objective_name(objective)}: read as that reference-free preference step "
                        "(chosen and rejected in one forward, no reference model; data/preference.json checkout_trainers)")
        self.fields["trainer"] = Value(label, "literal", Span(self.path, trainer.line), (how,), shape=shape)
        arg_objs = [a for a in flatten(args) if isinstance(a, TrainingArgs)]
        if not arg_objs:
            if args is not None and not (isinstance(args, Const) and args.value is None):
                for f in ("per_device_batch", "grad_accum", "optimizer", "precision", "group_by_length", "distributed"):
                    self.put(f, Unknown("the training arguments could not be followed"), line=trainer.line)
                self.padding_and_length(trainer, None, models, unsloth)
                return
            facts = api.trainer(name)
            arg_objs = [TrainingArgs(facts.arguments if facts else "transformers.TrainingArguments", trainer.line)]
        self.args = arg_objs

        def each(attr: str, alias: str | None = None) -> Any:
            vals = []
            for a in arg_objs:
                v = a.get(attr)
                if v is None and alias is not None:
                    v = a.get(alias)
                if v is None:
                    v = field_value(a, attr)
                vals.append(v)
            return _alts(vals)

        line = arg_objs[0].line
        self.put("per_device_batch", each("per_device_train_batch_size", "per_gpu_train_batch_size"), _int, line)
        self.put("eval_batch", each("per_device_eval_batch_size", "per_gpu_eval_batch_size"), _int, line)
        self.put("grad_accum", each("gradient_accumulation_steps"), _int, line)
        # torch_compile=True: the Trainer compiles the model, whose forward computes the loss from the logits
        self.put("compiled_loss", each("torch_compile"), _bool, line)
        self.args_checkpointing(arg_objs)
        optims = trainer.kwargs.get("optimizers")
        opt_objs = []
        if isinstance(optims, Seq) and optims.items:
            opt_objs = [o for o in flatten(optims.items[0]) if isinstance(o, Optimizer)]
        if opt_objs:
            self.optimizer_from(opt_objs)
        else:
            self.put("optimizer", each("optim"), _optim, line)
            self.galore_fields(each, line)
        self.parallelism_fields([a.get("parallelism_config") for a in arg_objs])
        self.precision_from(arg_objs)
        gbl = []
        for a in arg_objs:
            strategy = a.get("train_sampling_strategy")
            if strategy is not None:
                gbl.append(_map_const(strategy, lambda s: s == "group_by_length"))
            else:
                gbl.append(a.get("group_by_length") if a.get("group_by_length") is not None else field_value(a, "group_by_length"))
        self.put("group_by_length", _alts(gbl), _bool, line)
        self.distributed_from(arg_objs)
        if self.ds_optimizer and not opt_objs:  # the DeepSpeed config's optimizer section wins over optim=
            v = self.ds_optimizer[0]
            self.fields["optimizer"] = Value(v.value, v.source, v.span, v.chain + ("a DeepSpeed config's optimizer replaces the Trainer's optim",))
        self.padding_and_length(trainer, arg_objs, models, unsloth)
        if api.trainer(name) is not None and api.trainer(name).reference:
            self.reference_field(trainer, arg_objs)

    def reference_field(self, trainer: Obj, arg_objs: list[Obj]) -> None:
        """ref_model for DPO/KTO: "model" (a second model passed as ref_model=), "auto" (none passed:
        TRL deep-copies a fully fine-tuned model, or runs a peft model with its adapters disabled),
        or "precomputed" (precompute_ref_log_probs=True: the reference ran before training)."""
        line = trainer.line
        rm = trainer.kwargs.get("ref_model")
        vals: list[Any] = []
        for a in arg_objs:
            pre = a.get("precompute_ref_log_probs")
            if pre is None:
                pre = field_value(a, "precompute_ref_log_probs")
            for p in flatten(pre):
                if isinstance(p, Const) and p.value:
                    vals.append(p.with_value("precomputed", "precompute_ref_log_probs=True: reference log-probs computed before training"))
                elif isinstance(p, Const):
                    for r in flatten(rm) if rm is not None else [None]:
                        if r is None or (isinstance(r, Const) and r.value is None):
                            src = r if isinstance(r, Const) else p
                            vals.append(src.with_value("auto", f"no ref_model: {trainer.cls} copies a full model or disables the adapters"))
                        elif isinstance(r, Unknown):
                            vals.append(r)
                        else:
                            vals.append(Const("model", "literal", line, (f"ref_model= a second model (line {line})",)))
                else:
                    vals.append(p)
        self.put("ref_model", _alts(vals), line=line)

    def precision_from(self, arg_objs: list[Obj]) -> None:
        vals = []
        for a in arg_objs:
            bf = a.get("bf16")
            fp = a.get("fp16")
            bf = bf if bf is not None and not (isinstance(bf, Const) and bf.value is None and a.cls.startswith("trl.")) else field_value(a, "bf16")
            fp = fp if fp is not None else field_value(a, "fp16")
            for b in flatten(bf):
                for f in flatten(fp):
                    if isinstance(f, Const) and f.value:
                        vals.append(f.with_value("amp-fp16", "fp16=True"))
                    elif isinstance(b, Const) and b.value:
                        vals.append(b.with_value("amp-bf16", "bf16=True"))
                    elif isinstance(b, Const) and isinstance(f, Const):
                        dt = self.fields.get("torch_dtype")
                        if dt is not None and getattr(dt, "value", None) == "bf16" and dt.source not in ("library-default", "unknown"):
                            # the Trainer autocasts nothing and upcasts nothing: bf16 weights, gradients and
                            # optimizer states, as the loop reader's "pure-bf16"
                            vals.append(Const("pure-bf16", dt.source, dt.line, dt.chain + (
                                "neither bf16 nor fp16 on bf16 weights: trained in bf16 without autocast",),
                                dt.span.path if dt.span and dt.span.path != self.path else None))
                            continue
                        src = b if b.source != "library-default" else f
                        vals.append(src.with_value("fp32", "neither bf16 nor fp16"))
                    else:
                        vals.append(b if isinstance(b, Unknown) else f)
        self.put("precision", _alts(vals), line=arg_objs[0].line)

    def fused_loss_field(self, models: list[Obj]) -> None:
        """fused_loss: Liger's fused linear cross-entropy, from TrainingArguments(use_liger_kernel=...),
        an apply_liger_kernel_to_*() patch or an AutoLigerKernelForCausalLM model.

        Unknown stays quiet: the estimate then counts the full logits, the worst case."""
        line = None
        vals: list[Any] = []
        for patch in self.facts.liger_calls:
            kw, at = patch.kwargs, patch.line
            # the patch functions default fused_linear_cross_entropy=True (liger_kernel/transformers/monkey_patch.py)
            flce = kw.get("fused_linear_cross_entropy", Const(True, "library-default", at, ("liger_kernel's default",)))
            vals.append(_map_const(flce, lambda v: "liger" if v else False))
            line = line or at
        if not vals:
            for m in models:
                r = self.root(m)
                if "AutoLigerKernel" in r.cls:
                    vals.append(Const("liger", "literal", r.line, (f"{r.cls.split('.')[-1]} patches the model with Liger's kernels",)))
        if not vals:
            for a in getattr(self, "args", []):
                v = a.get("use_liger_kernel")
                if v is None and a.cls.startswith("trl."):
                    v = a.get("use_liger")  # TRL 0.12-0.13's own flag, before TrainingArguments had one
                vals.append(_map_const(v if v is not None else field_value(a, "use_liger_kernel"), lambda v: "liger" if v else False))
                line = line or a.line
        if not vals:
            return
        notes = len(self.notes)
        self.put("fused_loss", _alts(vals), line=line)
        del self.notes[notes:]
        for why in list(self.maybe):
            self.maybe[why] = [n for n in self.maybe[why] if n != "fused_loss"]
            if not self.maybe[why]:
                del self.maybe[why]
        if self.fields["fused_loss"].value == "liger":
            self.notes.append("fused_loss: Liger's fused linear cross-entropy replaces the loss only for the model families "
                              "liger_kernel patches (Llama, Mistral, Qwen2, Gemma, ...); memlint trusts the flag")

    def optimizer_in_bwd_field(self) -> None:
        """optimizer_in_bwd: a post-accumulate-grad hook that steps an optimizer (PyTorch's "fuse the
        optimizer step into the backward pass" tutorial, torchtune's register_optim_in_bwd_hooks).
        Unknown stays quiet: the estimate then counts the usual step after backward, the worst case."""
        hooks = self.facts.first("grad_hooks")
        stepping = [h for h in hooks if h.steps]
        if stepping:
            h = stepping[0]
            self.fields["optimizer_in_bwd"] = Value(True, "literal", Span(self.path, h.line) if h.line else None, (
                "p.register_post_accumulate_grad_hook(fn): fn calls an optimizer's .step() as each gradient is "
                "accumulated (the optimizer step fused into backward)",))
        elif any(h.steps is None for h in hooks):
            h = next(h for h in hooks if h.steps is None)
            self.notes.append(f"register_post_accumulate_grad_hook at line {h.line}: a hook memlint cannot read; if it "
                              "steps the optimizer, pass --assume optimizer_in_bwd=true")

    def float8_field(self) -> None:
        """float8_training: torchao's convert_to_float8_training(model) ("all": every linear; "layers" with a
        module_filter_fn), or Accelerator(mixed_precision="fp8"), whose default AO backend converts every linear but
        the first and the last (accelerate utils/ao.py convert_model_to_fp8_ao)."""
        vals: list[Any] = list(self.facts.float8_calls)
        for a in self.facts.first("objects", Accelerator):
            mp = a.get("mixed_precision")
            if isinstance(mp, Const) and mp.value == "fp8":
                vals.append(mp.with_value("layers", "Accelerator(mixed_precision='fp8'): torchao Float8Linear, first and last linear kept"))
        if vals:
            self.put("float8_training", _alts(vals), _float8, vals[0].line)
        gather = list(self.facts.float8_gather)
        if gather:
            self.put("float8_all_gather", _alts(gather), bool, gather[0].line)

    def offload_activations_field(self) -> None:
        """offload_activations: TRL's SFTConfig(activation_offloading=True) moves the saved activations to CPU
        memory, unsloth's use_gradient_checkpointing="unsloth" the checkpointed layer inputs. Unknown stays
        quiet: the estimate then keeps them on the GPU, the worst case."""
        vals: list[Any] = []
        line = None
        for a in getattr(self, "args", []):
            v = a.get("activation_offloading")
            if v is not None:
                vals.append(v)
                line = line or a.line
        if getattr(self, "unsloth_offload", None) is not None:
            vals.append(self.unsloth_offload)
        if vals:
            self.put("offload_activations", _alts(vals), _bool, line)

    def distributed_from(self, arg_objs: list[Obj]) -> None:
        vals = []
        for a in arg_objs:
            ds = a.get("deepspeed")
            fsdp = a.get("fsdp")
            if ds is not None and not (isinstance(ds, Const) and ds.value is None):
                vals.extend(self.deepspeed(x) for x in flatten(ds))
            elif fsdp is not None and not (isinstance(fsdp, Const) and fsdp.value in ("", None, False)):
                vals.extend(_map_const(x, _fsdp) for x in flatten(fsdp))
            elif a.open:
                vals.append(Unknown("deepspeed/fsdp may be set by **kwargs"))
            else:
                d = field_value(a, "deepspeed")
                vals.append(d.with_value("none", "no deepspeed or fsdp") if isinstance(d, Const) else d)
        self.put("distributed", _alts(vals), line=arg_objs[0].line)
        if self.ds_offload:
            self.put("offload", _alts(self.ds_offload), line=arg_objs[0].line)

    def deepspeed(self, v: Any) -> Any:
        """distributed from TrainingArguments(deepspeed=...); the config's offload is kept for `offload`.

        Read by the same DeepSpeed reader as framework configs, so both agree on stage and offload."""
        facts, v = self.deepspeed_config(v)
        if facts is None:
            return v
        dist, off = facts.fields["distributed"], facts.fields["offload"]
        if off.span is not None:
            self.ds_offload.append(Const(off.value, off.source, off.span.line, off.chain, off.span.path))
        else:
            self.ds_offload.append(Const(off.value, off.source, v.line, v.chain + off.chain, v.file))
        if facts.optimizer is not None:
            self.ds_optimizer.append(facts.optimizer)
        if dist.value == "deepspeed" or dist.source == "library-default" and dist.value != "none":
            return v.with_value("deepspeed", "no integer zero_optimization.stage")
        return v.with_value(dist.value, dist.chain[0] if dist.chain else None)

    def deepspeed_config(self, v: Any) -> tuple[Any, Any]:
        """(LaunchFacts of the DeepSpeed config `v` names or builds, the value), or (None, why not)."""
        from memlint.extract.configs.document import Document, load_text
        from memlint.extract.configs.launchers import deepspeed_facts
        from memlint.files import read_text

        if isinstance(v, Dict):
            v = Const(_known_python(v), "literal", None, ("a DeepSpeed config dict built in the script",))
        if not isinstance(v, Const):
            return None, Unknown("a deepspeed config memlint could not follow") if not isinstance(v, Unknown) else v
        cfg = v.value
        if isinstance(cfg, str):
            found = self._find_file(cfg)
            if found is None:
                return None, v.with_value("deepspeed", f"{cfg}: not found next to the script, stage unknown")
            p, shown = found
            self.read_files.append(str(p))
            try:
                doc = load_text(read_text(p), shown, is_json=p.suffix.lower() in (".json", ".conf"))
            except (OSError, UnicodeDecodeError):
                return None, v.with_value("deepspeed", f"{cfg}: unreadable, stage unknown")
        elif isinstance(cfg, dict):
            doc = Document(self.path, cfg)
        else:
            return None, Unknown("a deepspeed value memlint could not read")
        if not doc.ok:
            return None, v.with_value("deepspeed", f"{cfg}: unreadable, stage unknown")
        return deepspeed_facts(doc), v

    def _find_file(self, ref: str) -> tuple[Path, str] | None:
        """A file the script names by a relative path: beside it, in the working directory, in the launch folder."""
        from memlint.files import is_file

        bases = [self.script.parent, Path.cwd()]
        if self.launch is not None and self.launch.cwd:
            bases.insert(1, Path.cwd() / self.launch.cwd)
        for base in bases:
            p = base / os.path.expanduser(ref)
            if is_file(p):
                shown = os.path.normpath(os.path.join(os.path.dirname(self.path), ref)) if base == self.script.parent \
                    else os.path.relpath(p)
                return p, shown
        return None

    def padding_and_length(self, trainer: Obj, arg_objs: list[Obj] | None, models: list[Obj], unsloth: bool) -> None:
        name = trainer.cls
        line = arg_objs[0].line if arg_objs else trainer.line
        data = api.trainer(name).data if api.trainer(name) is not None else "collator"
        if data == "sft" or (name in ("Trainer",) and unsloth and arg_objs and arg_objs[0].cls == "trl.SFTConfig"):
            packs, lengths = [], []

            def sft_field(a: Obj, attr: str) -> Any:
                v = field_value(a, attr)
                if isinstance(v, Unknown) and data == "sft" and a.cls.endswith("TrainingArguments"):
                    # SFTTrainer(args=TrainingArguments(...)) rebuilds it as SFTConfig(**args.to_dict()):
                    # the fields TrainingArguments lacks take SFTConfig's defaults
                    d = library_default("trl.SFTConfig", attr)
                    if d is not None:
                        return Const(d.value, "library-default", a.line or None,
                                     (f"{d.why}; {name} turns a TrainingArguments into an SFTConfig",))
                return v

            for a in arg_objs or []:
                p = trainer.kwargs.get("packing", a.get("packing"))
                packs.append(p if p is not None else sft_field(a, "packing"))
                ml = trainer.kwargs.get("max_seq_length", a.get("max_length", a.get("max_seq_length")))
                if isinstance(ml, Const) and ml.value is None and "max_seq_length" in trainer.kwargs:
                    ml = None  # SFTTrainer(max_seq_length=None) (TRL < 0.20): the trainer's default applies
                if ml is None and unsloth:
                    ml = self.unsloth_length(models)
                if ml is None:
                    ml = sft_field(a, "max_length")
                    if isinstance(ml, Unknown):
                        ml = sft_field(a, "max_seq_length")
                lengths.append(ml)
            pack = _alts(packs) if packs else Unknown("packing")
            self.put("packing", pack, _bool, line)
            self.put("max_length", _alts(lengths) if lengths else Unknown("max_length"), _length, line)
            pv = self.fields["packing"]
            if pv.known:
                kinds = [("packing" if p else "longest") for p in (pv.candidates or (pv.value,))]
                why = "packing=True: fixed blocks of max_length" if pv.value else f"{name} pads each batch to its longest sequence"
                self.fields["padding"] = Value(kinds[0], pv.source, pv.span, pv.chain + (why,), tuple(dict.fromkeys(kinds)) if len(set(kinds)) > 1 else ())
            else:
                self.put("padding", Unknown("packing is unknown"), line=line)
            return
        if data in ("preference", "generation"):
            lengths = []
            for a in arg_objs or []:
                if data == "generation":
                    p = a.get("max_prompt_length") or field_value(a, "max_prompt_length")
                    c = a.get("max_completion_length") or field_value(a, "max_completion_length")
                    if isinstance(p, Const) and isinstance(c, Const) and isinstance(p.value, int) and isinstance(c.value, int):
                        src = c if c.source != "library-default" else p
                        lengths.append(src.with_value(p.value + c.value, f"max_prompt_length {p.value} + max_completion_length {c.value}"))
                    else:
                        lengths.append(p if not isinstance(p, Const) else c)
                else:
                    ml = self.trainer_keyword(trainer, "max_length")
                    ml = ml if ml is not None else a.get("max_length")
                    lengths.append(ml if ml is not None else self.trainer_field(name, a, "max_length"))
            if not arg_objs and self.trainer_keyword(trainer, "max_length") is not None:
                lengths.append(self.trainer_keyword(trainer, "max_length"))
            self.put("max_length", _alts(lengths) if lengths else Unknown("max_length"), _length, line)
            self.put("packing", Const(False, "library-default", line, (f"{name} does not pack",)), _bool, line)
            self.put("padding", Const("longest", "library-default", line, (f"{name} pads each batch to its longest sequence",)), line=line)
            return
        collator = trainer.kwargs.get("data_collator")
        has_tok = trainer.kwargs.get("processing_class", trainer.kwargs.get("tokenizer")) is not None
        self.data_padding(collator, has_tok, trainer.line)
        if not self.fields["max_length"].known:
            own = self.args_length_field(arg_objs or [])
            if own is not None:
                self.put("max_length", own, _length, line)

    @staticmethod
    def args_length_field(arg_objs: list[Obj]) -> Any:
        """A length field the script's own TrainingArguments subclass declares (a checkout GRPOConfig's
        max_seq_len), set in the call, by a later attribute write (`args.max_seq_len = 4096`) or its default:
        the trainer that takes those arguments reads it to cut its sequences."""
        for a in arg_objs:
            c = getattr(a, "user_class", None)
            declared: set = set()
            seen = 0
            while c is not None and hasattr(c, "fields") and seen < 20:
                seen += 1
                declared |= set(c.fields)
                nxt = [b for b in c.bases if hasattr(b, "fields")]
                c = nxt[0] if nxt else None
            for name in sorted(declared & api.length_arguments()):
                v = a.get(name)
                v = v if v is not None else field_value(a, name)
                if isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool) and v.value > 0:
                    return Const(v.value, v.source, v.line, v.chain + (
                        f"{a.user_class.name}.{name}, a length field of the script's own training arguments class, "
                        "read by the trainer it is given to",), v.file)
        return None

    def trainer_keyword(self, trainer: Obj, key: str) -> Any:
        """A length keyword given to the trainer itself (TRL's DPOTrainer(max_length=1536) beside a
        TrainingArguments; data/library_api.json trainer_length_keywords), or None. The versions that
        accept it decide: a checkout pin outside them rejects the call (a note); unpinned, a script that
        passes it runs on a version that takes it."""
        from memlint.library.versions import checkout_pin, in_range

        v = trainer.kwargs.get(key)
        facts = api.trainer_length_keyword(trainer.cls, key)
        if v is None or facts is None:
            return None
        _field, package, versions, ref = facts
        pin = checkout_pin(package)
        if pin is not None and not in_range(pin.version, versions):
            self.notes.append(f"{trainer.cls}({key}=...) (line {trainer.line}): {pin.describe()} does not take it "
                              f"({package}{versions} does: {ref}); not read")
            return None
        if isinstance(v, Const) and v.value is None:
            return None  # None: the trainer's own default applies
        how = f"{trainer.cls}({key}=...) (line {trainer.line}), a keyword {package}{versions} takes ({ref})"
        return v.with_value(v.value, how) if isinstance(v, Const) else v

    def trainer_field(self, name: str, a: Obj, attr: str) -> Any:
        """A field of the trainer's arguments; a TrainingArguments lacks the trainer's own fields
        (max_length): the trainer then falls back to its config class's default."""
        v = field_value(a, attr)
        facts = api.trainer(name)
        if isinstance(v, Unknown) and facts is not None and a.cls.endswith(".TrainingArguments") \
                and facts.arguments != a.cls:
            d = library_default(facts.arguments, attr)
            if d is not None:
                return Const(d.value, "library-default", a.line or None,
                             (f"{d.why}; {name} given a TrainingArguments falls back to it",))
        return v

    def unsloth_length(self, models: list[Obj]) -> Any:
        for m in models:
            r = self.root(m)
            if r.loader == "unsloth":
                v = r.kwargs.get("max_seq_length")
                return v if v is not None else _libc("unsloth.FastLanguageModel.from_pretrained", "max_seq_length", r.line)
        return None

    # ---- padding from tokenizer calls and collators ----------------------------------------

    def target_length(self, calls: list, line: int | None) -> None:
        """An encoder-decoder's target (labels) length: the max_length of a tokenizer call given text_target=
        (`tokenizer(text_target=..., max_length=N)`, labels alone or with the source), else the script's own
        target-length argument (args.max_target_length, data/library_api.json target_length_arguments)."""
        lengths: list = []
        for entry in calls:
            if "text_target" in entry.kwargs:
                kind = entry.kwargs.get("padding")
                kind = "max_length" if isinstance(kind, Const) and kind.value == "max_length" else None
                lengths += _call_lengths(entry.kwargs, kind, entry.tokenizer, entry.method)
        if not any(isinstance(v, (Const, Alts)) for v in lengths):
            for la in self.facts.first("target_length_args"):
                v = la.value
                if isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool) and v.value > 0:
                    lengths = [Const(v.value, v.source, v.line, v.chain + (
                        f"the script's own target-length argument .{la.name} (line {la.line})",), v.file)]
                    break
        if lengths:
            self.put("target_len", _alts(lengths), _length, line)

    def data_padding(self, collator: Any, tokenizer_given: bool, line: int | None) -> None:
        facts = self.facts
        chunking = facts.first("chunking")
        reached_calls = facts.first("tokenizer_calls")
        self.target_length(reached_calls, line)
        reached_calls = [c for c in reached_calls if c.text]  # text_target= alone tokenizes the labels only
        if chunking and (facts.reached.get("chunking", 1) or not facts.reached.get("tokenizer_calls")):
            size, cline = chunking[0].size, chunking[0].line
            self.put("packing", Const(True, "literal", cline, ("token stream cut into fixed blocks: t[i : i + n] for i in range(0, total, n)",)), _bool, cline)
            self.fields["padding"] = Value("packing", "literal", Span(self.path, cline), ("fixed-length blocks, no padding",))
            self.put("max_length", size, _length, cline)
            return
        windows = facts.first("windows")
        if windows and not facts.first("objects", DataLoader):
            size, wline = windows[0].size, windows[0].line
            self.put("packing", Const(True, "literal", wline, ("windows cut at random offsets of one token stream: data[i : i + n] for i in randint(...)",)), _bool, wline)
            self.fields["padding"] = Value("packing", "literal", Span(self.path, wline), ("fixed-length windows, no padding",))
            self.put("max_length", size, _length, wline)
            return
        self.put("packing", Const(False, "library-default", line, ("no packing found",)), _bool, line)
        calls = []
        for entry in reached_calls:
            kw, cl, tok = entry.kwargs, entry.line, entry.tokenizer
            t = kw.get("tokenize")
            if isinstance(t, Const) and t.value is False:
                continue
            calls.append((kw, cl, tok, entry.method))
        pads: list = []
        lengths: list = []
        for kw, cl, tok, method in calls:
            p = kw.get("padding")
            kind = None
            if isinstance(p, Const):
                kind = "max_length" if p.value == "max_length" else "longest" if p.value in (True, "longest") else None
            elif p is not None:
                kind = "unknown"
            if kind:
                pads.append((kind, p if isinstance(p, Const) else Unknown("padding"), cl))
            lengths += _call_lengths(kw, kind, tok, method)
        for c in flatten(collator) if collator is not None else []:
            if isinstance(c, Collator):
                cname = c.cls.rsplit(".", 1)[-1]
                p = c.get("padding")
                if p is None:
                    p = _libc(c.cls, "padding", c.line) if cname in ("DataCollatorWithPadding", "DataCollatorForSeq2Seq") else Const(True, "library-default", c.line, (f"{cname} pads to the longest in the batch",))
                kind = "max_length" if isinstance(p, Const) and p.value == "max_length" else "longest" if isinstance(p, Const) and p.value in (True, "longest") else None
                if kind:
                    pads.append((kind, p, c.line))
                if c.get("max_length") is not None:
                    lengths.append(c.get("max_length"))
        for hp in facts.first("hand_pads"):
            c = hp.length if isinstance(hp.length, Const) else None
            pads.append((hp.kind, Const(hp.kind, "literal", hp.line, ("padding written in the script's own collate code",), hp.file), hp.line))
            if c is not None:
                lengths.append(c)
        if not pads and collator is None and tokenizer_given:
            pads.append(("longest", Const(True, "library-default", line, ("Trainer pads with DataCollatorWithPadding when given a tokenizer",)), line))
        best = next((p for p in pads if p[0] == "max_length"), None) or next((p for p in pads if p[0] == "longest"), None)
        if best is None:
            self.put("padding", Unknown("no padding found in tokenizer calls or collators"), line=line)
        else:
            kind, src, pl = best
            c = src if isinstance(src, Const) else Const(kind, "literal", pl)
            self.fields["padding"] = Value(kind, c.source, Span(c.file or self.path, c.line or pl or 1), c.chain)
        if not any(isinstance(v, (Const, Alts)) for v in lengths):
            # no length read (none, or only calls whose max_length memlint cannot follow, such as a helper's
            # `max_length=tokenizer.model_max_length` of a tokenizer parameter): the script's own length argument
            lengths = self.length_argument() or self.companion_length() or lengths
        self.put("max_length", _alts(lengths) if lengths else Unknown("no max_length in tokenizer calls or collators"), _length, line)

    def companion_length(self) -> list:
        """The length a companion script of the checkout wrote the arrays the script loads at (extract/companion.py)."""
        from memlint.extract.companion import written_length

        names = list(dict.fromkeys(n for n, _ in self.facts.array_loads))
        found = written_length(self.script, names) if names else None
        if found is None and names:
            line = self.facts.array_loads[0][1]
            self.notes.append(f"max_length: the script loads pre-tokenized data ({', '.join(names)}, line {line}); no script "
                              "of the checkout memlint read writes it, so the length it was cut to is not known")
        return [found] if found is not None else []

    def length_argument(self) -> list:
        """The script's own length argument (args.max_seq_length, cfg.cutoff_len) when no tokenizer call
        or collator memlint follows says the length: it caps every sequence wherever it is applied."""
        for la in self.facts.first("length_args"):
            v = la.value
            if isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool) and v.value > 0:
                why = (f"the script's own length argument .{la.name} (line {la.line}), read where it is passed on: "
                       "memlint did not follow the data pipeline that applies it (truncation or a length filter)")
                return [Const(v.value, v.source, v.line, v.chain + (why,), v.file)]
        return []

    # ---- hand-written loops ----------------------------------------------------------------

    def loop_fields(self, objs: list, models: list[Obj]) -> None:
        opts = self.facts.first("objects", Optimizer)
        steps = self.facts.first("steps")
        accs = self.facts.first("objects", Accelerator)
        engines = self.facts.first("objects", DeepSpeedEngine)
        if engines:
            self.engine_fields(engines[-1])
            return
        lightning = [o for o in self.facts.first("objects", LightningTrainer) if o.cls in ("lightning.Trainer", "lightning.Fabric")]
        if lightning:
            self.lightning_fields(lightning[-1], objs)
            return
        # a training loop steps an optimizer, or runs backward through a model it loads or with an optimizer it builds:
        # a backward alone (a kernel's gradient check) or an optimizer built and handed on (a helper) is not one
        if not steps and not (self.facts.backward and (opts or models or self.facts.unknown_steps)):
            for f in ("trainer", "per_device_batch", "grad_accum", "optimizer", "precision", "padding", "max_length"):
                self.put(f, Unknown("no trainer or training loop found"))
            self.args_gc = None
            return
        line = (opts or [None])[0].line if opts else (self.facts.backward or [None])[0]
        self.fields["trainer"] = Value("custom-loop", "literal", Span(self.path, line) if line else None, ("optimizer.step() in the script's own loop",))
        self.args_gc = None
        train_dl = self.loader_batch(None)
        acc = [s.accumulation for s in steps if s.accumulation is not None]
        acc_kw = [a.get("gradient_accumulation_steps") for a in accs if a.get("gradient_accumulation_steps") is not None]
        for a in accs:  # Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=N))
            plug = a.get("gradient_accumulation_plugin")
            if isinstance(plug, Obj) and plug.get("num_steps") is not None:
                acc_kw.append(plug.get("num_steps"))
        if acc_kw:
            self.put("grad_accum", _alts(acc_kw), _int, accs[0].line)
        elif acc:
            self.put("grad_accum", _alts(acc), _int, steps[0].line)
        elif steps:
            self.put("grad_accum", Const(1, "literal", steps[0].line, ("optimizer.step() after every micro-batch",)), _int)
        elif any(h.steps for h in self.facts.first("grad_hooks")):
            hook = next(h for h in self.facts.first("grad_hooks") if h.steps)
            self.put("grad_accum", Const(1, "literal", hook.line, ("a post-accumulate-grad hook steps each parameter in "
                                                                   "every backward",)), _int)
        else:
            self.put("grad_accum", Unknown("no optimizer.step() found"))
        if opts:
            self.optimizer_from(self.stepped(opts, steps), layerwise=any(h.steps for h in self.facts.first("grad_hooks")))
        else:
            self.put("optimizer", Unknown("no optimizer found"))
        self.loop_precision(accs, line)
        self.put("group_by_length", Const(False, "library-default", train_dl.line if train_dl else line, ("DataLoader samples without length grouping",)), _bool)
        dist = []
        for a in accs:
            for plug_name, label in (("deepspeed_plugin", "deepspeed"), ("fsdp_plugin", "fsdp")):
                plug = a.get(plug_name)
                if isinstance(plug, Obj):
                    st = plug.get("zero_stage")
                    if label == "deepspeed" and isinstance(st, Const) and st.value in (1, 2, 3):
                        dist.append(st.with_value(f"zero{st.value}"))
                    else:
                        dist.append(Const(label, "literal", plug.line))
        for m in models:
            for mm in self.chain(m):
                if mm.shard is not None:
                    dist.append(mm.shard.value)
        if self.facts.offloads:
            self.put("offload", _alts(self.facts.offloads))
        if dist:
            self.put("distributed", _alts(dist))
        else:
            why = "Accelerator: sharding comes from `accelerate launch` config, if any" if accs else "a single-process loop"
            self.put("distributed", Const("none", "library-default", line, (why,)))
            if accs:
                self.notes.append("distributed: an `accelerate launch` config may shard the model; pass --assume distributed=... if it does")
        self.parallelism_fields([a.get("parallelism_config") for a in accs])
        collate = train_dl.get("collate_fn") if train_dl is not None else None
        self.data_padding(collate, False, line)

    def lightning_fields(self, tr: LightningTrainer, objs: list) -> None:
        """A Lightning Trainer (or Fabric): precision, accumulation, strategy and devices are its
        arguments (with Lightning's defaults), the micro-batch the DataLoader's, the optimizer the
        module's configure_optimizers' (or the one the script builds for Fabric)."""
        line = tr.line
        fabric = tr.cls == "lightning.Fabric"
        self.fields["trainer"] = Value("lightning-fabric" if fabric else "lightning", "literal", Span(self.path, line),
                                       (f"{tr.cls.split('.')[-1]}(...) (line {line})",))
        self.args_gc = None
        prec = tr.get("precision")
        if prec is None:
            self.put("precision", Const("fp32", "library-default", line, ("lightning's default precision: 32-true",)), line=line)
        else:
            self.put("precision", prec, lambda v: api.lightning_precision(v) or _unconvertible(f"precision {v!r}"), line)
        if not fabric:
            acc = tr.get("accumulate_grad_batches")
            self.put("grad_accum", acc if acc is not None else Const(1, "library-default", line, ("accumulate_grad_batches default 1",)), _int, line)
        else:
            steps = self.facts.first("steps")
            acc = [s.accumulation for s in steps if s.accumulation is not None]
            self.put("grad_accum", _alts(acc) if acc else Const(1, "literal", line, ("an optimizer step every micro-batch",)), _int, line)
        self.lightning_strategy(tr, line)
        dev = tr.get("devices")
        nodes = tr.get("num_nodes")
        if dev is not None:
            self.put("num_gpus", dev, lambda v: _device_count(v, nodes), line)
        train_dl = self.loader_batch(line)
        opts = self.facts.first("objects", Optimizer)
        if opts:
            self.optimizer_from(opts[-1:])
        else:
            self.put("optimizer", Unknown("no optimizer found (configure_optimizers)"), line=line)
        self.put("group_by_length", Const(False, "library-default", line, ("DataLoader samples without length grouping",)), _bool)
        self.data_padding(train_dl.get("collate_fn") if train_dl is not None else None, False, line)

    def lightning_strategy(self, tr: LightningTrainer, line: int) -> None:
        strat = tr.get("strategy")
        vals, offload = [], []
        for s in flatten(strat) if strat is not None else [Const("auto", "library-default", line, ("strategy default 'auto'",))]:
            if isinstance(s, Const) and isinstance(s.value, str):
                name = api.lightning_strategy(s.value)
                vals.append(s.with_value(name) if name else Unknown(f"lightning strategy {s.value!r}"))
                if "offload" in s.value:
                    offload.append(s.with_value("params" if "stage_3" in s.value or "fsdp" in s.value else "optimizer"))
            elif isinstance(s, LightningTrainer) and s.cls == "lightning.DeepSpeedStrategy":
                st = s.get("stage")
                vals.append(st.with_value(f"zero{st.value}") if isinstance(st, Const) and st.value in (1, 2, 3)
                            else Const("deepspeed", "literal", s.line, ("DeepSpeedStrategy",)))
                for key, what in (("offload_parameters", "params"), ("offload_optimizer", "optimizer")):
                    v = s.get(key)
                    if isinstance(v, Const) and v.value:
                        offload.append(v.with_value(what))
                        break
            elif isinstance(s, LightningTrainer) and s.cls == "lightning.FSDPStrategy":
                vals.append(Const("fsdp", "literal", s.line, ("FSDPStrategy",)))
                co = s.get("cpu_offload")
                if isinstance(co, Const) and co.value:
                    offload.append(co.with_value("params"))
            elif isinstance(s, LightningTrainer):
                vals.append(Const("none", "literal", s.line, (f"{s.cls.split('.')[-1]}",)))
            else:
                vals.append(s if isinstance(s, Unknown) else Unknown("a lightning strategy"))
        self.put("distributed", _alts(vals), line=line)
        if offload:
            self.put("offload", _alts(offload), line=line)

    def engine_fields(self, eng: DeepSpeedEngine) -> None:
        """A loop driven by a DeepSpeed engine: micro-batch, accumulation, precision, ZeRO stage, offload
        and the optimizer come from its config (a DataLoader's batch_size is the micro-batch when there is one)."""
        line = eng.line
        self.fields["trainer"] = Value("deepspeed-engine", "literal", Span(self.path, line), (f"deepspeed.initialize (line {line})",))
        self.args_gc = None
        facts, why = self.deepspeed_config(eng.config) if eng.config is not None else (None, Unknown("no DeepSpeed config given"))
        soft = facts.soft if facts is not None else {}
        dls = self.facts.first("objects", DataLoader)
        train_dl = next((d for d in dls if d.get("batch_size") is not None), None)
        if train_dl is not None:
            self.put("per_device_batch", train_dl.get("batch_size"), _int, train_dl.line)
        elif "per_device_batch" in soft:
            self.fields["per_device_batch"] = soft["per_device_batch"]
        else:
            self.put("per_device_batch", Unknown("no train_micro_batch_size_per_gpu in the DeepSpeed config"), line=line)
        if "grad_accum" in soft:
            self.fields["grad_accum"] = soft["grad_accum"]
        else:
            self.put("grad_accum", Const(1, "library-default", line, ("DeepSpeed's gradient_accumulation_steps default: 1",)), _int)
        prec = soft.get("precision")
        self.fields["precision"] = prec if prec is not None else Value("fp32", "library-default", Span(self.path, line),
                                                                         ("no fp16/bf16 section in the DeepSpeed config",))
        if facts is not None:
            for name in ("distributed", "offload"):
                self.fields[name] = facts.fields[name]
            self.notes.extend(facts.notes)
        else:
            self.put("distributed", why, line=line)
        if isinstance(eng.optimizer, Optimizer):
            self.optimizer_from([eng.optimizer])
        elif facts is not None and facts.optimizer is not None:
            self.fields["optimizer"] = facts.optimizer
        else:
            self.put("optimizer", Unknown("the engine's optimizer is not in its config"), line=line)
        self.put("group_by_length", Const(False, "library-default", line, ("DataLoader samples without length grouping",)), _bool)
        self.data_padding(train_dl.get("collate_fn") if train_dl is not None else None, False, line)

    def loop_precision(self, accs: list, line: int | None) -> None:
        vals = []
        for a in accs:
            mp = a.get("mixed_precision")
            if mp is not None:
                vals.append(_map_const(mp, lambda s: {"bf16": "amp-bf16", "fp16": "amp-fp16", "fp8": "amp-bf16", "no": "fp32",
                                                     None: "fp32"}.get(s, "fp32")))  # fp8: bf16 autocast around Float8Linear
        for ac in self.facts.autocasts:
            dtype, device, enabled, aline = ac.dtype, ac.device, ac.enabled, ac.line
            if isinstance(enabled, Const) and not enabled.value:
                continue
            if dtype is None:
                dev = device.value if isinstance(device, Const) else "cuda"
                vals.append(Const("amp-bf16" if dev == "cpu" else "amp-fp16", "library-default", aline, (f"torch.autocast('{dev}') default dtype",)))
            else:
                vals.append(_map_dtype_to_amp(dtype, aline))
        if not vals and self.facts.scalers:
            vals.append(Const("amp-fp16", "literal", self.facts.scalers[0], ("GradScaler implies fp16 autocast",)))
        dt = self.fields.get("torch_dtype")
        if not vals and dt is not None and dt.value == "bf16":  # bf16 weights trained without autocast
            vals.append(Const("pure-bf16", dt.source, dt.line, dt.chain + ("bf16 weights and no autocast: pure bf16",),
                              dt.span.path if dt.span and dt.span.path != self.path else None))
        if not vals:
            vals.append(Const("fp32", "library-default", line, ("no autocast or mixed_precision found",)))
        self.put("precision", _alts(vals), line=line)

    @staticmethod
    def stepped(opts: list[Obj], steps: list) -> list[Obj]:
        """The optimizers a loop steps: those of its last `.step()` call (a name holding one of several
        optimizers, an elif chain on an option memlint cannot read, steps each of them there); with no step
        call (hooks step them), the last built, a GaLore one first (GaLore for the projected weights, a plain
        one for the rest, per parameter: galore_* names that split already)."""
        if steps:
            return [st.optimizer for st in steps if st.line == steps[-1].line]
        galore = [o for o in opts if api.galore_optimizer(o.optim)]
        return galore[-1:] if galore else opts[-1:]

    def optimizer_from(self, opts: list[Obj], layerwise: bool = False) -> None:
        vals = []
        for o in opts:
            name = o.optim
            fused = o.get("fused")
            if name == "adamw_torch" and isinstance(fused, Const) and fused.value:
                name = "adamw_torch_fused"
            how = f"{o.cls} (line {o.line})"
            if layerwise and api.layerwise_optimizer(name):  # one optimizer per parameter, stepped in backward
                name, how = api.layerwise_optimizer(name), how + ", one per parameter stepped by a post-accumulate-grad hook"
            vals.append(Const(name, "literal", o.line, (how,)))
        self.put("optimizer", _alts(vals))

    def gc_field(self, models: list[Obj]) -> None:
        """Checkpointing is on if the model turns it on, else what the training arguments say."""
        args_gc = getattr(self, "args_gc", None)
        per_model = []
        for m in models or [None]:
            resolved = []
            for mm in self.chain(m) if m is not None else []:
                for setting in mm.gc:
                    v, line, how = setting.value, setting.line, setting.how
                    if isinstance(v, tuple):  # ("library-default", cls, field)
                        d = library_default(v[1], v[2])
                        v = Const(d.value, "library-default", line, (d.why,)) if d else Unknown(how)
                    for x in flatten(v):
                        if isinstance(x, Const):
                            if x.value == "unsloth":  # offloaded checkpointing: the checkpointed inputs go to CPU
                                self.unsloth_offload = x.with_value(True, how + ': "unsloth" offloads the checkpointed '
                                                                    "layer inputs to CPU memory")
                            resolved.append(x.with_value(bool(x.value) if not isinstance(x.value, str) else True, how))
                        else:
                            resolved.append(x)
            on = sorted((r for r in resolved if isinstance(r, Const) and r.value), key=lambda r: r.source == "library-default")
            if on:
                per_model.append(on[0])
            elif args_gc is not None:
                per_model.append(args_gc)
            elif resolved:
                per_model.append(_alts(resolved))
            elif self.fields.get("trainer") is not None and self.fields["trainer"].value in _LOOPS:
                line = self.fields["trainer"].line
                per_model.append(Const(False, "library-default", line, ("models load without gradient checkpointing",)))
            else:
                per_model.append(Unknown("no trainer or model found"))
        self.put("gradient_checkpointing", _alts(per_model), _bool)


# ---- conversions ------------------------------------------------------------------------------

def _reason(why: str) -> str:
    """'optim comes from a config file given at run time' -> 'the value comes from ...'."""
    for marker in (" comes from ", " may be set by "):
        if marker in why:
            return "the value" + why[why.index(marker):]
    return why


def _eq(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return list(v)
    return v



def _call_lengths(kw: dict, kind: str | None, tok: Any, method: str) -> list:
    """The lengths one tokenizer call caps its rows at. tokenizer.pad() never truncates: its max_length only
    counts under padding="max_length". max_length=None (or missing) under truncation is the tokenizer's
    model_max_length."""
    trunc = kw.get("truncation")
    ml = kw.get("max_length")
    if method == "pad" and kind != "max_length":
        return []
    if ml is not None and not all(isinstance(x, Const) and x.value is None for x in flatten(ml)):
        return [ml]
    if (isinstance(trunc, Const) and trunc.value) or kind == "max_length":
        mml = tok.get("model_max_length") if isinstance(tok, Obj) else None
        return [mml if mml is not None else Unknown("the tokenizer's model_max_length (max_length=None truncates there)")]
    return [ml] if ml is not None else []

def _alts(vals: list) -> Any:
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return vals[0] if len(vals) == 1 else Alts(tuple(vals))


def _task_type(v: Any) -> str | None:
    """peft's task_type: a string ("SEQ_CLS") or TaskType.SEQ_CLS (the attribute's name, as the enum's value)."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, Ref) and v.qual.startswith("peft.") and ".TaskType." in f".{v.qual}":
        return v.qual.rsplit(".", 1)[-1]
    raise _Unconvertible("task_type")


def _libc(cls: str, attr: str, line: int | None) -> Any:
    d = library_default(cls, attr)
    if d is None:
        return Unknown(f"no library default for {cls}.{attr}")
    return Const(d.value, "library-default", line, (d.why,))


def _unconvertible(why: str) -> Any:
    raise _Unconvertible(why)


def _device_count(v: Any, nodes: Any) -> int:
    """Lightning's devices= (an int, a list of ids, "0,1", -1/"auto") times num_nodes."""
    n_nodes = nodes.value if isinstance(nodes, Const) and isinstance(nodes.value, int) else 1
    if isinstance(v, bool):
        raise _Unconvertible("devices")
    if isinstance(v, int) and v > 0:
        return v * n_nodes
    if isinstance(v, (list, tuple)):
        return len(v) * n_nodes
    if isinstance(v, str) and ascii_digits(v.replace(",", "").strip()):
        parts = [p for p in v.split(",") if p.strip()]
        return (len(parts) if "," in v else int(v)) * n_nodes
    raise _Unconvertible(f"devices={v!r}: the GPUs the machine has")


def _known_python(d: Dict) -> dict:
    """A dict's entries that are known, as plain data (unknown entries left out: the reader's defaults apply)."""
    out = {}
    for k, x in d.items.items():
        if isinstance(x, Dict):
            out[k] = _known_python(x)
            continue
        p = to_python(x)
        if isinstance(p, Const):
            out[k] = p.value
    return out


def _map_const(v: Any, fn: Callable) -> Any:
    out = []
    for x in flatten(v):
        if isinstance(x, Const):
            try:
                out.append(x.with_value(fn(x.value)))
            except Exception:
                out.append(Unknown("a value memlint could not read"))
        else:
            out.append(x)
    return _alts(out)


def _map_dtype_to_amp(dtype: Any, line: int | None) -> Any:
    out = []
    for d in flatten(dtype):
        name = dtype_of(d)
        if name in ("bf16", "fp16"):
            src = d.source if isinstance(d, (Ref, Const)) else (d.name.source if isinstance(d, DtypeName) else "literal")
            ln = (d.line if isinstance(d, (Ref, Const)) else None) or line
            out.append(Const(f"amp-{name}", src, ln, (f"torch.autocast(dtype={name})",)))
        else:
            out.append(Unknown("an autocast dtype memlint could not read"))
    return _alts(out)


def _bits_from(b4: Any, b8: Any, line: int | None) -> Any:
    out = []
    for x in flatten(b4) if b4 is not None else [None]:
        if isinstance(x, Const) and x.value:
            out.append(x.with_value(4, "load_in_4bit=True"))
            continue
        if x is not None and not isinstance(x, Const):
            out.append(x)
            continue
        for y in flatten(b8) if b8 is not None else [None]:
            if isinstance(y, Const) and y.value:
                out.append(y.with_value(8, "load_in_8bit=True"))
            elif y is not None and not isinstance(y, Const):
                out.append(y)
            else:
                src = x if isinstance(x, Const) else y if isinstance(y, Const) else None
                out.append(src.with_value(None, "not quantized") if src else Const(None, "library-default", line, ("from_pretrained loads unquantized unless told otherwise",)))
    return _alts(out)


def _int4_config(b: QuantConfig) -> dict:
    """GPTQConfig / AwqConfig: bits (GPTQ requires it, AWQ defaults to 4), the method as the quant type, group_size."""
    kind = "gptq" if b.cls.endswith("GPTQConfig") else "awq"
    bits = b.get("bits") or _libc(b.cls, "bits", b.line)
    group = b.get("group_size") or _libc(b.cls, "group_size", b.line)
    return {"bits": bits, "type": Const(kind, "literal", b.line, (f"{b.cls.split('.')[-1]}(...)",)),
            "double": None, "compute": None, "group": group}


def _hqq_config(b: QuantConfig) -> dict:
    """HqqConfig(nbits=4, group_size=64, axis=..., skip_modules=['lm_head']): quantized on load by hqq; nbits any of
    8/6/5/4/3/2/1 (a dynamic_config per layer tag is not followed: the first value is the model's)."""
    bits = b.get("nbits") or _libc(b.cls, "nbits", b.line)
    group = b.get("group_size") or _libc(b.cls, "group_size", b.line)
    return {"bits": bits, "type": Const("hqq", "literal", b.line, ("HqqConfig(...)",)),
            "double": None, "compute": None, "group": group}


def _may_be_4bit(bits: Any) -> bool:
    return any(not isinstance(x, Const) or x.value == 4 for x in flatten(bits))


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (_INF, -_INF) or v != int(v):
        raise _Unconvertible(f"{v!r} is not an integer")
    return int(v)


_INF = float("inf")


def _number(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Unconvertible(f"{v!r} is not a number")
    return v


def _length(v: Any) -> int:
    if v is None:
        raise _Unconvertible("max_length is None: no truncation, the longest sample decides")
    return _int(v)


def _bool(v: Any) -> bool:
    if isinstance(v, str) and v == "unsloth":
        return True
    if not isinstance(v, (bool, int)) and v is not None:
        raise _Unconvertible(f"{v!r} is not a boolean")
    return bool(v)


def _bits(v: Any) -> Any:
    if v not in (4, 8, None, 1, 2, 3, 5, 6):  # bitsandbytes 4/8; HQQ also 1/2/3/5/6
        raise _Unconvertible(f"{v!r} bits")
    return v


def _model_id(v: Any) -> str:
    if not isinstance(v, str) or not v:
        if v is None or v == "":  # alpaca-lora's `base_model: str = ""  # the only required argument`
            raise _Unconvertible(f"the model id defaults to {v!r}: it comes from the command line")
        raise _Unconvertible("the model id is not a string")
    return v


def _dtype(v: Any) -> str:
    d = dtype_of(v)
    if d is None:
        raise _Unconvertible(f"dtype {v!r}")
    return d


def _dtype_strict(v: Any) -> str:
    d = _dtype(v)
    if d == "auto":
        raise _Unconvertible("compute dtype 'auto'")
    return d


def _attn(v: Any) -> str:
    if isinstance(v, str) and v in api.attention():
        return v
    raise _Unconvertible(f"attn_implementation {v!r}")


def _float8(v: Any) -> str:
    if v in ("all", "layers", "none"):
        return v
    raise _Unconvertible(f"float8 training {v!r}")


def _quant_type(v: Any) -> str:
    if v in ("nf4", "fp4", "gptq", "awq", "hqq"):
        return v
    raise _Unconvertible(f"quant type {v!r}")


def _targets(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple, set)) and all(isinstance(x, str) for x in v):
        return list(v)
    raise _Unconvertible("target_modules")


def _optim(v: Any) -> str:
    if isinstance(v, Ref):
        return v.name.lower()
    if isinstance(v, str):
        return v.lower()
    raise _Unconvertible(f"optim {v!r}")


def _fsdp(v: Any) -> str:
    if v is True:
        return "fsdp"
    text = " ".join(v) if isinstance(v, (list, tuple)) else str(v)
    if "shard_grad_op" in text:
        return "fsdp_shard_grad_op"
    if "full_shard" in text or "hybrid_shard" in text or text.strip():
        return "fsdp"
    return "none"
