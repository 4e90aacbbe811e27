"""A model's quantization as its load says it: bitsandbytes' load_in_4bit/8bit and BitsAndBytesConfig,
GPTQ / AWQ / HQQ configs, unsloth's defaults, and bitsandbytes linears the script puts in by hand.
"""

from __future__ import annotations

import re

from typing import Any

from memlint.extract.objects import DtypeName, Model, Obj, QuantConfig
from memlint.extract.values import Const, Ref, Unknown, flatten
from memlint.extract.fields.convert import _alts, _libc


# a Hub id of a checkpoint saved by bitsandbytes in 4 bits, alone or as a folder of a path (the Hub cache's
# models--unsloth--X-bnb-4bit/snapshots/<hash>)
_BNB_4BIT_NAME = re.compile(r"[-_.]bnb[-_]4bit$|(?:^|/)models--[^/]*[-_.]bnb[-_]4bit(?:/|$)", re.I)


class QuantFields:
    """bits, quant type, double quantization, compute dtype, group size of one model."""

    def hand_quant(self, q: dict, root: Model, models: list) -> dict:
        """A model the load leaves unquantized whose linears the script replaces with bitsandbytes' own: handed to a
        helper with the model (`replace_linear(model.model, Linear4bit)`: that model), or built where memlint does not
        see which model they go in (facts.hand_quant: every model the script trains)."""
        bits = q.get("bits")
        # layers built inside a helper that was handed a model are that model's, not every model's
        reached = self.facts.hand_quant[: self.facts.reached.get("hand_quant", len(self.facts.hand_quant))]
        hq = root.hand_quant or ([] if any(isinstance(o, Model) and o.hand_quant for o in self.facts.objects)
                                 else reached)  # layers built in a function the run never called quantize nothing
        if not hq or not (isinstance(bits, Const) and bits.value is None):
            return q
        return {"bits": _alts([h.bits for h in hq]), "type": _alts([h.quant_type for h in hq]),
                "double": _alts([h.double for h in hq]),
                "compute": _alts([h.compute for h in hq]) or Unknown("the compute dtype of the script's own 4-bit linears"),
                "group": None}

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
        if isinstance(b, QuantConfig) and b.cls == "transformers.Mxfp4Config":
            return _mxfp4_config(b)
        if isinstance(b, QuantConfig) and b.cls == "transformers.QuantoConfig":
            return _quanto_config(b)
        if isinstance(b, QuantConfig):
            def field(name: str) -> Any:
                v = b.get(name)
                if v is None or (isinstance(v, Const) and v.value is None and name == "bnb_4bit_compute_dtype"):
                    return _libc(cls, name, b.line) if not b.open else Unknown(f"{name} may be set by **kwargs")
                return v
            bits = _flagless_bnb(b, _bits_from(b.get("load_in_4bit"), b.get("load_in_8bit"), b.line))
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
        b4, b8 = kw.get("load_in_4bit"), kw.get("load_in_8bit")
        mid = kw.get("pretrained_model_name_or_path")
        off = all(x is None or isinstance(x, Const) and not x.value for x in (b4, b8))
        if off and isinstance(mid, Const) and isinstance(mid.value, str) and _BNB_4BIT_NAME.search(mid.value.rstrip("/")):
            # a checkpoint saved quantized by bitsandbytes (unsloth's `-bnb-4bit` mirrors): its config.json carries
            # the quantization_config from_pretrained applies with no argument
            why = (f"{mid.value}: a checkpoint saved in 4-bit by bitsandbytes; from_pretrained applies the "
                   "quantization_config of its config.json")
            unsloth = mid.value.lower().startswith("unsloth/") or "models--unsloth--" in mid.value.lower()
            return {"bits": mid.with_value(4, why),
                    "type": mid.with_value("nf4", why + " (unsloth's mirrors: nf4)") if unsloth else Unknown(why),
                    "double": mid.with_value(True, why + " (unsloth's mirrors: double quantization)") if unsloth
                    else Unknown(why),
                    "compute": Unknown(f"{why}: its compute dtype")}
        if isinstance(b, Const):
            return {"bits": b.with_value(None, "quantization_config=None: not quantized"), "type": None, "double": None, "compute": None}
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


def _flagless_bnb(b: QuantConfig, bits: Any) -> Any:
    """The bits of a BitsAndBytesConfig that sets neither load_in flag to True: 4 from transformers 4.38 (its quantizer
    picks 4-bit unless load_in_8bit), unquantized before (library_api.json bnb_config_without_flags)."""
    from memlint.library import api
    from memlint.library.versions import in_range, installed_version, shown_version

    if b.open or b.cls != "transformers.BitsAndBytesConfig" or not (isinstance(bits, Const) and bits.value is None):
        return bits
    versions, n, why = api.bnb_config_without_flags()
    if not in_range(installed_version("transformers"), versions):
        return bits
    return Const(n, "library-default", b.line, (f"BitsAndBytesConfig(...) without load_in_4bit/load_in_8bit quantizes "
                                                 f"to {n} bits in {shown_version('transformers')} ({why})",))


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


def _mxfp4_config(b: QuantConfig) -> dict:
    """Mxfp4Config(dequantize=True): an MXFP4 checkpoint (gpt-oss) dequantized to bf16 on load, so the base trained is
    not quantized; without dequantize the MXFP4 weights stay, which memlint does not size."""
    deq = b.get("dequantize")
    if isinstance(deq, Const) and deq.value is True:
        return {"bits": deq.with_value(None, "Mxfp4Config(dequantize=True): the MXFP4 weights dequantized on load"),
                "type": None, "double": None, "compute": None}
    unk = Unknown("Mxfp4Config without dequantize=True: MXFP4 weights, which memlint does not size")
    return {"bits": unk, "type": unk, "double": None, "compute": None}


_QUANTO_BITS = {"int8": 8, "float8": 8, "int4": 4, "int2": 2}  # transformers QuantoConfig(weights=...)


def _quanto_config(b: QuantConfig) -> dict:
    """QuantoConfig(weights="int4") (optimum-quanto): the base's linear weights quantized to that many bits on load
    (weights default "int8"; activations, when given, are not stored between steps)."""
    w = b.get("weights")
    name = w.value if isinstance(w, Const) else "int8" if w is None else None
    if name not in _QUANTO_BITS:
        unk = Unknown(f"QuantoConfig(weights={name!r}): not a width memlint knows")
        return {"bits": unk, "type": unk, "double": None, "compute": None}
    how = f"QuantoConfig(weights={name!r})" + ("" if w is not None else " (transformers' default)")
    # sized as packed integer weights of that width (the 4-bit formats memlint names are bitsandbytes' and the
    # checkpoints'; quanto's own per-group scales are not counted)
    bits = Const(_QUANTO_BITS[name], "literal" if w is not None else "library-default", b.line, (how,))
    if bits.value != 4:
        return {"bits": bits, "type": None, "double": None, "compute": None}
    other = Unknown(f"{how}: quanto's int4, not a bitsandbytes 4-bit format (sized as packed 4-bit weights)")
    return {"bits": bits, "type": other, "double": other, "compute": None}


def _may_be_4bit(bits: Any) -> bool:
    return any(not isinstance(x, Const) or x.value == 4 for x in flatten(bits))
