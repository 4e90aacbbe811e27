"""xtuner (mmengine) Python configs: `xtuner train xtuner/configs/**/*_qlora_*.py`.

The config is a module of assignments that mmengine turns into objects from `dict(type=X, ...)`
trees. The abstract interpreter has already evaluated those assignments (nothing is imported or
run); this module reads the `model`, `train_dataloader` and `optim_wrapper` trees into a plan the
way xtuner builds them. Facts are in data/frameworks.json under "xtuner".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memlint import data
from memlint.extract.values import Alts, Const, Dict, Ref, Seq, Unknown, to_python
from memlint.plan import Diagnostic, Span, TrainingPlan, Value
from memlint.vocab import dtype_name

_KIND = "xtuner"


def _fw() -> dict:
    return data.load("frameworks.json")["frameworks"][_KIND]


def _type(d: Any) -> Ref | None:
    t = d.items.get("type") if isinstance(d, Dict) else None
    return t if isinstance(t, Ref) else None


def is_xtuner(names: dict) -> bool:
    """Whether a module's names have an xtuner config's shape: `model = dict(type=<an xtuner model>, llm=...)`
    (InternVL names its checkpoint `model_path` instead of an llm dict)."""
    t = _type(names.get("model"))
    if t is None or not t.qual.startswith("xtuner.") or t.name not in _fw()["models"]:
        return False
    items = names["model"].items
    return isinstance(items.get("llm"), Dict) or "model_path" in items


def xtuner_plan(shown: str, names: dict) -> TrainingPlan | None:
    """The plan of an xtuner config, or None when the module does not have that shape."""
    if not is_xtuner(names):
        return None
    r = _Reader(shown, names)
    r.read()
    return TrainingPlan(shown, r.fields, tuple(dict.fromkeys(r.notes)), tuple(r.diagnostics), _KIND)


def xtuner_launched(plan: TrainingPlan, launch: Any) -> TrainingPlan:
    """`xtuner train CONFIG --deepspeed NAME` with NPROC_PER_NODE: the ZeRO stage and offload of xtuner's DeepSpeed
    config NAME (frameworks.json deepspeed_names; a JSON path is read as DeepSpeed's), and torchrun's processes."""
    from memlint.extract.launched import _value

    argv, fields = list(launch.argv), {}
    ref = next((w.split("=", 1)[1] for w in argv if w.startswith("--deepspeed=")), None)
    if ref is None and "--deepspeed" in argv and argv.index("--deepspeed") + 1 < len(argv):
        ref = argv[argv.index("--deepspeed") + 1]
    names = _fw().get("deepspeed_names", {})
    if ref is not None and ref in names and not ref.startswith("_"):
        stage, offload = names[ref]
        fields["distributed"] = _value(launch, f"zero{stage}", f"--deepspeed {ref}")
        fields["offload"] = _value(launch, offload, f"--deepspeed {ref}")
    elif ref is not None and ref.endswith(".json"):
        from memlint.extract.configs.launchers import deepspeed_facts, find_deepspeed

        doc, _ = find_deepspeed(Path(plan.path), plan.path, ref)
        if doc is not None:
            got = deepspeed_facts(doc).fields
            fields.update({k: got[k] for k in ("distributed", "offload") if k in got})
    nproc = launch.env.get("NPROC_PER_NODE", "").strip()
    if nproc.isdigit() and int(nproc) > 0:  # xtuner's entry point runs torchrun --nproc_per_node NPROC_PER_NODE
        fields["num_gpus"] = _value(launch, int(nproc), f"NPROC_PER_NODE={nproc}")
    return plan.with_values(**fields) if fields else plan


class _Reader:
    def __init__(self, shown: str, names: dict) -> None:
        self.shown = shown
        self.names = names
        self.fields: dict[str, Value] = {}
        self.notes: list[str] = []
        self.diagnostics: list[Diagnostic] = []
        self.model: Dict = names["model"]
        llm = self.model.items.get("llm")
        self.llm: Dict = llm if isinstance(llm, Dict) else Dict({})
        self.vl = _fw()["substitutions"]["vision_language"]["value"].get(_type(self.model).name)  # LLaVA / InternVL facts, or None

    # ---- values ------------------------------------------------------------------------------

    def span(self, v: Any) -> Span | None:
        line = getattr(v, "line", None)
        return Span(getattr(v, "file", None) or self.shown, line) if line else None

    def put(self, name: str, v: Any, value: Any = None, chain: tuple[str, ...] = ()) -> None:
        """`name` from an interpreted value (a Const or a Ref); `value` replaces what it holds."""
        shown = value if value is not None else v.value if isinstance(v, Const) else v.qual
        source = v.source if isinstance(v, (Const, Ref)) else "literal"
        own = v.chain if isinstance(v, Const) else (f"{v.qual}",)
        self.fields[name] = Value(shown, source, self.span(v), own + chain)

    def lib(self, name: str, value: Any, why: str) -> None:
        self.fields[name] = Value(value, "library-default", None, (why,))

    def unknown(self, name: str, why: str) -> None:
        self.fields[name] = Value(None, "unknown", None, (why,))
        self.notes.append(f"{name} is unknown ({why}); pass --assume {name}=VALUE")

    def default(self, key: str) -> tuple[Any, str]:
        e = _fw()["defaults"][key][0]
        return e["value"], f"xtuner default {key}={e['value']!r}: {e['ref']}"

    def const(self, d: Any, key: str) -> Const | None:
        """A known constant at `d[key]`; an unknown one is named in a note."""
        v = d.items.get(key) if isinstance(d, Dict) else None
        if isinstance(v, Alts) or isinstance(v, Unknown):
            self.notes.append(f"{key}: its value depends on the run ({getattr(v, 'why', '') or 'several branches'})")
            return None
        v = to_python(v) if isinstance(v, (Seq, Dict)) else v
        return v if isinstance(v, Const) else None

    def written(self, d: Any, key: str) -> bool:
        return isinstance(d, Dict) and key in d.items

    def typed(self, name: str, d: Any, key: str, kind: type, default: tuple[Any, str] | None = None) -> Any:
        """`name` from `d[key]` when it is a constant of `kind`; unknown when written but not one
        (an environment variable, a computed value), else `default` (value, why) when given."""
        c = self.const(d, key)
        if c is not None and isinstance(c.value, kind) and not (kind is int and isinstance(c.value, bool)):
            self.put(name, c)
            return c.value
        if self.written(d, key):
            self.unknown(name, f"{key} is not a {kind.__name__} memlint can read statically")
        elif default is not None:
            self.lib(name, *default)
            return default[0]
        return None

    # ---- the plan ----------------------------------------------------------------------------

    def read(self) -> None:
        self._model()
        self._lora_and_quant()
        self._data()
        self._optim()
        fw = _fw()
        model_type = _type(self.model)
        trainer = fw["models"][model_type.name]
        self.fields["trainer"] = Value(trainer, "literal", self.span(model_type), (f"model = dict(type={model_type.name})",))
        _, why = self.default("launch")
        self.lib("distributed", "none", why)
        self.lib("num_gpus", 1, why)
        self.lib("offload", "none", why)
        self.lib("group_by_length", False, "xtuner samples with DefaultSampler / SequenceParallelSampler (no length grouping)")
        self.lib("fused_loss", False, "xtuner computes the loss from full logits")
        if model_type.name in ("LLaVAModel", "InternVL_V1_5"):
            self.notes.append(f"{model_type.name}: memlint sizes the language model (model.llm); the vision encoder and projector are not counted")
        sp = self.names.get("sequence_parallel_size")
        if isinstance(sp, Const) and isinstance(sp.value, int) and sp.value > 1:
            self.notes.append(f"sequence_parallel_size {sp.value}: each rank holds 1/{sp.value} of every sequence; memlint counts whole sequences")

    def _model(self) -> None:
        key = (self.vl or {}).get("model_path")
        mid = self.const(self.model, key) if key else self.const(self.llm, "pretrained_model_name_or_path")
        if mid is not None and isinstance(mid.value, str) and mid.value.strip():
            self.put("model_id", mid, mid.value.strip())
        else:
            self.unknown("model_id", "model.llm.pretrained_model_name_or_path is not a constant")
        dt = self.llm.items.get("torch_dtype")
        name = dtype_name(dt.qual if isinstance(dt, Ref) else dt.value if isinstance(dt, Const) else None)
        if self.vl and self.vl.get("torch_dtype"):
            self.lib("torch_dtype", self.vl["torch_dtype"], _fw()["substitutions"]["vision_language"]["ref"])
        elif name:
            self.put("torch_dtype", dt, name)
        else:
            from memlint.library.defaults import default as library_default

            dd = library_default("transformers.from_pretrained", "dtype")
            self.lib("torch_dtype", dd.value if dd else None, (dd.why if dd else "from_pretrained default") + " (model.llm sets no torch_dtype)")
        self.typed("gradient_checkpointing", self.model, "use_activation_checkpointing", bool, self.default("use_activation_checkpointing"))
        attn = self.const(self.llm, "attn_implementation")
        varlen = self.const(self.model, "use_varlen_attn")
        if attn is not None and isinstance(attn.value, str):
            self.put("attn_implementation", attn)
        elif varlen is not None and varlen.value is True:
            self.put("attn_implementation", varlen, "flash_attention_2", ("use_varlen_attn: flash_attn_varlen_func over the packed samples",))
        else:
            v, why = self.default("attn_implementation")
            self.lib("attn_implementation", v, why)
            self.notes.append("xtuner switches to flash_attention_2 and bf16 weights when flash_attn is installed; memlint reads the "
                              "default install (sdpa, the config's torch_dtype)")

    def _lora_and_quant(self) -> None:
        lora = self.model.items.get((self.vl or {}).get("lora", "lora"))
        q = self.llm.items.get("quantization_config")
        bits = self._internvl_quant()
        if isinstance(q, Dict):
            b4, b8 = self.const(q, "load_in_4bit"), self.const(q, "load_in_8bit")
            if b4 is not None and b4.value is True:
                bits = 4
                self.put("quant_bits", b4, 4)
                for name, key in (("quant_type", "bnb_4bit_quant_type"), ("double_quant", "bnb_4bit_use_double_quant")):
                    c = self.const(q, key)
                    if c is not None:
                        self.put(name, c)
                    else:
                        self._bnb_default(name, key)
                cd = q.items.get("bnb_4bit_compute_dtype")
                cname = dtype_name(cd.qual if isinstance(cd, Ref) else cd.value if isinstance(cd, Const) else None)
                if cname:
                    self.put("compute_dtype", cd, cname)
                else:
                    self._bnb_default("compute_dtype", "bnb_4bit_compute_dtype")
            elif b8 is not None and b8.value is True:
                bits = 8
                self.put("quant_bits", b8, 8)
        if bits is None:
            self.lib("quant_bits", None, "model.llm has no quantization_config loading 4 or 8 bits")
        frozen = self.const(self.model, "freeze_llm")
        if not isinstance(lora, Dict) and frozen is not None and frozen.value is True:
            self.unknown("method", "freeze_llm: true without llm_lora: only the projector trains on a frozen language model, "
                         "which memlint does not model (--assume method=lora comes close)")
            return
        if not isinstance(lora, Dict):
            if bits:
                self.diagnostics.append(Diagnostic("bad-value", "a quantized model.llm without model.lora: the frozen quantized base has nothing to train",
                                                   self.fields["quant_bits"].span or Span(self.shown, 1)))
            self.lib("method", "full", "model has no lora: every parameter of model.llm trains")
            return
        t = _type(lora)
        first = next((v for v in lora.items.values() if isinstance(v, Const) and v.line), None)  # the dict's own line is not kept
        self.fields["method"] = Value("qlora" if bits == 4 else "lora", "literal", self.span(first),
                                      (f"model.lora = dict(type={t.name if t else '?'}, ...)",))
        for name, key in (("lora_r", "r"), ("lora_alpha", "lora_alpha")):
            if self.typed(name, lora, key, int) is None and not self.written(lora, key):
                self._peft_default(name, key)
        tm = self.const(lora, "target_modules")
        if tm is not None and tm.value:
            v = tm.value
            self.put("lora_targets", tm, "all-linear" if v == "all-linear" else [v] if isinstance(v, str) else [str(x) for x in v])
        else:
            self.lib("lora_targets", *self.default("lora_target_modules"))

    def _internvl_quant(self) -> int | None:
        """InternVL's quantization_llm flag: xtuner builds the 4-bit config itself (frameworks.json)."""
        spec = (self.vl or {}).get("quantization_llm")
        flag = self.const(self.model, "quantization_llm")
        if not spec or flag is None or flag.value is not True:
            return None
        ref = _fw()["substitutions"]["vision_language"]["ref"]
        self.put("quant_bits", flag, spec["bits"], (ref,))
        for name in ("quant_type", "double_quant", "compute_dtype"):
            self.lib(name, spec[name], ref)
        return spec["bits"]

    def _bnb_default(self, name: str, attr: str) -> None:
        from memlint.library.defaults import default as library_default

        dd = library_default("transformers.BitsAndBytesConfig", attr)
        value = dtype_name(str(dd.value)) if dd and name == "compute_dtype" else dd.value if dd else None
        self.lib(name, value, dd.why if dd else f"BitsAndBytesConfig {attr}")

    def _peft_default(self, name: str, attr: str) -> None:
        from memlint.library.defaults import default as library_default

        dd = library_default("peft.LoraConfig", attr)
        self.lib(name, dd.value if dd else None, dd.why if dd else f"peft LoraConfig {attr}")

    def _data(self) -> None:
        loader = self.names.get("train_dataloader")
        fw = _fw()
        if not isinstance(loader, Dict):
            self.unknown("per_device_batch", "no train_dataloader = dict(...)")
            self.unknown("max_length", "no train_dataloader = dict(...)")
            return
        self.typed("per_device_batch", loader, "batch_size", int, self.default("batch_size"))
        ds = loader.items.get("dataset")
        if _type(ds) is not None and _type(ds).name == "ConcatDataset":
            parts = ds.items.get("datasets")
            ds = parts.items[0] if isinstance(parts, Seq) and parts.items else ds
        ml = self.const(ds, "max_length") if isinstance(ds, Dict) else None
        ml = ml or (self.names.get("max_length") if isinstance(self.names.get("max_length"), Const) else None)
        if ml is not None and isinstance(ml.value, int):
            self.put("max_length", ml)
        else:
            self.unknown("max_length", "the dataset's max_length is not a constant")
        pack = self.const(ds, "pack_to_max_length") if isinstance(ds, Dict) else None
        ref_pack = fw["substitutions"]["packing"]["ref"]
        if pack is not None and isinstance(pack.value, bool):
            self.put("packing", pack, chain=(ref_pack,))
            packed = pack.value
        else:
            packed = isinstance(ds, Dict) and _type(ds) is not None and _type(ds).name == "process_hf_dataset"
            self.lib("packing", packed, f"process_hf_dataset(pack_to_max_length=True) default; {ref_pack}" if packed else "the dataset does not pack")
        if packed:
            self.fields["padding"] = Value("packing", self.fields["packing"].source, self.fields["packing"].span, self.fields["packing"].chain)
        else:
            self.lib("padding", "longest", fw["substitutions"]["collator_padding"]["ref"])
        if isinstance(ds, Dict) and "max_packed_length" in ds.items:
            self.notes.append("max_packed_length: preference pairs are packed into rows of max_packed_length tokens; memlint counts "
                              "chosen and rejected rows of max_length each")

    def _optim(self) -> None:
        from memlint.extract.configs.common import optimizer_of_class

        ow = self.names.get("optim_wrapper")
        if not isinstance(ow, Dict):
            self.unknown("optimizer", "no optim_wrapper = dict(...)")
            self.unknown("precision", "no optim_wrapper = dict(...)")
            self.unknown("grad_accum", "no optim_wrapper = dict(...)")
            return
        opt = _type(ow.items.get("optimizer"))
        if opt is not None:
            name = optimizer_of_class(opt.qual)
            self.fields["optimizer"] = Value(name or opt.qual, opt.source, self.span(opt), (f"optim_wrapper.optimizer type={opt.qual}",))
        else:
            self.unknown("optimizer", "optim_wrapper.optimizer has no known type")
        self.typed("grad_accum", ow, "accumulative_counts", int, self.default("accumulative_counts"))
        self._precision(ow)

    def _precision(self, ow: Dict) -> None:
        wrapper = _type(ow)
        table = _fw()["substitutions"]["optim_wrappers"]["value"]
        kind = table.get(wrapper.name) if wrapper else None
        if kind == "amp":
            dt = ow.items.get("dtype")
            dt = dt if isinstance(dt, Ref) else self.const(ow, "dtype")  # 'bfloat16' or torch.bfloat16
            name = dtype_name(dt.qual if isinstance(dt, Ref) else dt.value) if dt is not None else None
            if dt is None and self.written(ow, "dtype"):
                self.unknown("precision", "optim_wrapper dtype is not a constant memlint can read")
            elif dt is None:
                v, why = self.default("amp_dtype")
                self.fields["precision"] = Value(f"amp-{v}", "library-default", self.span(wrapper), (f"optim_wrapper type={wrapper.name}", why))
            elif name in ("fp16", "bf16"):
                self.put("precision", dt, f"amp-{name}", (f"optim_wrapper type={wrapper.name}: autocast to {name}",))
            else:
                self.put("precision", dt, "fp32", (f"AmpOptimWrapper dtype {name or 'float64'}: no half-precision autocast",))
        elif kind == "fp32":
            self.fields["precision"] = Value("fp32", "literal", self.span(wrapper), (f"optim_wrapper type={wrapper.name}: no autocast",))
        else:
            self.unknown("precision", f"optim_wrapper type {wrapper.qual if wrapper else '?'} is not one memlint models")
