"""The model that trains: which object it is (the trainer's, the loop's optimizer's, one a TRL trainer
loads from its id), its id, dtype, attention implementation, head and labels, a vision processor's pixel
bounds, and the quantization fields read from its load.
"""

from __future__ import annotations

from typing import Any

from memlint.extract import custom_model
from memlint.extract.objects import DeepSpeedEngine, DtypeName, HfConfig, Model, Obj, Optimizer, Params, Tokenizer
from memlint.extract.values import Const, Dict, Ref, Unknown, flatten, paired
from memlint.library import api
from memlint.plan import Span, Value
from memlint.extract.fields.convert import _Unconvertible, _alts, _bool, _dtype, _int, _libc


class ModelFields:
    """model_id, torch_dtype, attn_implementation, task_head, the quant_* fields, kbit_prep."""

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
                # the config's model_init_kwargs, or the trainer's own keyword (TRL before 0.9 took it there); set in
                # the same branch of an undecided `if` as the id (alignment-handbook: the id with its keywords, or a
                # loaded PeftModel with None), the keywords of the id's branch
                for a in [*flatten(args), trainer]:
                    if isinstance(a, Obj):
                        init = paired(model, m, a.get("model_init_kwargs"))
                        if len(init) == 1 and isinstance(init[0], Dict):
                            kw.update({k: v for k, v in init[0].items.items() if isinstance(k, str)})
                out.append(Model(f"trl.{trainer.cls}(model=str)", trainer.line, kw))
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
            elif self.default_dtype_at(root) is not None and root.loader in ("script-class", "transformers"):
                dtypes.append(self.default_dtype_at(root))
            elif root.loader == "script-class":
                dtypes.append(Const("float32", "constant", line, (f"{root.cls}(…): the script's own nn.Module creates its "
                                                                  "parameters in float32",)))
            elif root.loader == "transformers" and kw.get("_constructed") is True:
                # `LlamaForCausalLM(config)`: PreTrainedModel.__init__ chooses no dtype (from_pretrained's default and
                # from_config's config.dtype do not apply): the parameters are created in torch's default, float32
                dtypes.append(Const("float32", "constant", line, (f"{root.cls.removesuffix('.from_config')}(config): a model "
                                                                  "class built by its constructor creates its parameters "
                                                                  "in torch's default dtype (float32)",)))
            elif root.loader == "unsloth":  # dtype=None: bf16 or fp16 by the GPU, decided at run time ("auto")
                dtypes.append(self.unsloth_dtype(line))
            elif root.open:
                dtypes.append(Unknown("dtype may be set by **kwargs"))
            elif _bitsandbytes(self.quant_of(root)):  # transformers 4.x forces a bitsandbytes load to float16
                dtypes.append(_libc("transformers.from_pretrained", "dtype_bitsandbytes", line))
            else:
                dtypes.append(_libc("transformers.from_pretrained", "dtype", line))
            attn = _attention_keyword(kw, root)
            if attn is None and isinstance(kw.get("use_flash_attention_2"), Const) and kw["use_flash_attention_2"].value:
                attn = kw["use_flash_attention_2"].with_value("flash_attention_2")
            if attn is None and isinstance(kw.get("config"), HfConfig):  # config=AutoConfig...(attn_implementation=...)
                attn = _config_attention(kw["config"])
            if attn is None and root.loader == "transformers" and root.user_class is not None:
                attn = custom_model.checkout_class_attention(root.user_class)
            if attn is None or (isinstance(attn, Const) and attn.value is None):
                attn = Unknown("attn_implementation may be set by **kwargs") if root.open else _libc("transformers.from_pretrained", "attn_implementation", line)
            attns.append(attn)
            quants.append(self.hand_quant(self.quant_of(root), root, models))
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

    def unsloth_dtype(self, line: int | None) -> Any:
        """unsloth's dtype=None: bf16 where the GPU supports it, else fp16 (FastLanguageModel.from_pretrained); a
        notebook whose Colab or Kaggle metadata names its GPU says which, else it is decided at run time ("auto")."""
        from memlint.extract.source import bf16_assumed

        ok, why = bf16_assumed((self.script,))
        if why is None:
            return _libc("unsloth.FastLanguageModel.from_pretrained", "dtype", line)
        name = "bfloat16" if ok else "float16"
        return Const(name, "environment-default", line, (f"unsloth's dtype=None: {name} on {why}",))

    def default_dtype_at(self, root: Obj) -> Any:
        """The dtype torch.set_default_dtype set before `root` was built (the last such call before it): a model
        loaded without a dtype (transformers creates it in torch's default dtype, then loads the checkpoint into
        it) or built from the script's own nn.Module has its parameters in it. None when no call precedes it."""
        at = next((i for i, o in enumerate(self.facts.objects) if o is root), None)
        if at is None:
            return None
        before = [d for d in self.facts.default_dtypes if d.objects <= at]
        if not before:
            return None
        d = before[-1]
        v = d.dtype
        why = f"{d.how}: modules built afterwards create their parameters in this dtype"
        if isinstance(v, Const):
            return v.named(why)
        if isinstance(v, Ref):
            return Const(v, v.source, d.line, (why,))
        if isinstance(v, DtypeName):
            return v.name.with_value(v.name.value, why)
        return v

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


def _config_attention(cfg: HfConfig) -> Any:
    """The attention a model config carries into from_pretrained(config=cfg): AutoConfig.from_pretrained(...,
    attn_implementation=X), or `cfg._attn_implementation = X` / `cfg.attn_implementation = X` set on it (transformers
    reads config._attn_implementation when the load names none); None when it carries none."""
    for key in ("attn_implementation", "_attn_implementation"):
        v = cfg.get(key)
        if isinstance(v, Const) and isinstance(v.value, str) and v.value:
            return v.named(f"config.{key} = {v.value!r}, the config from_pretrained is given")
    return None


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


def _dtype_strict(v: Any) -> str:
    d = _dtype(v)
    if d == "auto":
        raise _Unconvertible("compute dtype 'auto'")
    return d


def _attn(v: Any) -> str:
    if isinstance(v, str) and v in api.attention():
        return v
    name = api.attention_name(v) if isinstance(v, str) and "/" in v else None  # a Hub kernel repository
    if name is not None:
        return name
    raise _Unconvertible(f"attn_implementation {v!r}")


def _quant_type(v: Any) -> str:
    if v in ("nf4", "fp4", "gptq", "awq", "hqq"):
        return v
    raise _Unconvertible(f"quant type {v!r}")


def _bitsandbytes(quant: dict) -> bool:
    """Whether a load is a bitsandbytes 4- or 8-bit one (every reading of its bits says 4 or 8, its type is no
    GPTQ/AWQ/HQQ)."""
    bits = [x for x in flatten(quant.get("bits")) if x is not None]
    kind = quant.get("type")
    return (bool(bits) and all(isinstance(x, Const) and x.value in (4, 8) for x in bits)
            and not (isinstance(kind, Const) and kind.value in ("gptq", "awq", "hqq", "int4")))


def _attention_keyword(kw: dict, root: Any) -> Any:
    """The load's attention: attn_implementation=, its private spelling `_attn_implementation=` (from_pretrained takes
    both), or a script class's own attention."""
    default = root.shape.attention if root.loader == "script-class" else None
    return kw.get("attn_implementation", kw.get("_attn_implementation", default))
