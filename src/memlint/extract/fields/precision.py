"""Precision: bf16= / fp16= of the training arguments (pure bf16 / fp16 on half weights), a loop's autocast,
GradScaler and Accelerator(mixed_precision=), and float8 training (torchao, accelerate's fp8).
"""

from __future__ import annotations

from typing import Any

from memlint.extract.objects import Accelerator, DtypeName, Obj, dtype_of, field_value
from memlint.extract.values import Const, Ref, Unknown, flatten
from memlint.plan import Value
from memlint.library import api
from memlint.extract.fields.convert import _Unconvertible, _alts, _map_const


class PrecisionFields:
    """precision, float8_training, float8_all_gather."""

    def precision_from(self, arg_objs: list[Obj]) -> None:
        vals = []
        for a in arg_objs:
            bf = a.get("bf16")
            fp = a.get("fp16")
            by_model = self.unsloth_precision(a, bf, fp)
            if by_model is not None:
                vals.append(by_model)
                continue
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
                        half = getattr(dt, "value", None) if dt is not None else None
                        if half == "auto" and dt.source != "library-default":
                            # torch_dtype="auto" written: the checkpoint's own dtype, where the catalog knows the model
                            # (transformers 5's default "auto" is left to the estimate: the version is often a guess)
                            dt = self.checkpoint_dtype(dt)
                            half = dt.value
                        kp = self.fields.get("kbit_prep")
                        upcast = kp is not None and kp.value is True  # prepare_model_for_kbit_training: fp32 again
                        if half in ("bf16", "fp16") and (dt.source not in ("library-default", "unknown")
                                                         or dict(dt.shape).get("checkpoint")) and not upcast:
                            # the Trainer autocasts nothing and upcasts nothing: half weights, gradients and
                            # optimizer states, as the loop reader's "pure-bf16" / "pure-fp16"
                            vals.append(Const(f"pure-{half}", dt.source, dt.line, dt.chain + (
                                f"neither bf16 nor fp16 on {half} weights: trained in {half} without autocast",),
                                dt.span.path if dt.span and dt.span.path != self.path else None))
                            continue
                        src = b if b.source != "library-default" else f
                        vals.append(src.with_value("fp32", "neither bf16 nor fp16"))
                    else:
                        vals.append(b if isinstance(b, Unknown) else f)
        self.put("precision", _alts(vals), line=arg_objs[0].line)

    def unsloth_precision(self, a: Obj, bf: Any, fp: Any) -> Any:
        """A TRL config over a model unsloth loaded, the script setting neither fp16 nor bf16 (data/library_api.json
        unsloth_mixed_precision): unsloth's patched trainer autocasts in the model's dtype (fp16 weights: fp16, else
        bf16); None where that does not apply."""
        cli = getattr(a, "cli", {})
        given = [v for v in (bf, fp, cli.get("bf16"), cli.get("fp16")) if v is not None]
        # unsloth reads `getattr(args, "bf16", False)`: only a True (or a value memlint cannot read) turns it off
        if not a.cls.startswith("trl.") or any(not (isinstance(v, Const) and v.value in (False, None)) for v in given):
            return None
        if not self.unsloth_trained:  # the model the trainer trains came from unsloth's loader
            return None
        why = api.unsloth_mixed_precision()
        dt = self.fields.get("torch_dtype")
        if why is None or dt is None:
            return None
        if dt.value == "fp16":
            return Const("amp-fp16", dt.source, dt.line, dt.chain + (f"fp16 weights: fp16 autocast ({why})",))
        if dt.value in ("bf16", "auto") and dt.known:
            return Const("amp-bf16", dt.source, dt.line, dt.chain + (f"{dt.value} weights: bf16 autocast ({why})",))
        return None

    def checkpoint_dtype(self, dt: Any) -> Any:
        """torch_dtype "auto" as the dtype the checkpoint was saved in, when
        memlint's catalog (or the local Hugging Face cache) knows the model; `dt` itself otherwise."""
        mid = self.fields.get("model_id")
        if mid is None or not isinstance(mid.value, str) or not mid.value:
            return dt
        from memlint.catalog import resolve
        from memlint.errors import MemlintError
        from memlint.vocab import dtype_name

        try:
            name = dtype_name(str(resolve(mid.value).torch_dtype or ""))
        except (MemlintError, OSError, ValueError):
            return dt
        if name not in ("bf16", "fp16"):
            return dt
        return Value(name, dt.source, dt.span, dt.chain + (f"torch_dtype auto: {mid.value}'s checkpoint is saved in "
                                                           f"{name} (catalog)",), shape=(("checkpoint", name),))

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

    def loop_precision(self, accs: list, line: int | None) -> None:
        vals = []
        for a in accs:
            mp = a.get("mixed_precision")
            if mp is not None:
                vals.append(_map_const(mp, lambda s: {"bf16": "amp-bf16", "fp16": "amp-fp16", "fp8": "amp-bf16", "no": "fp32",
                                                     None: "fp32"}.get(s, "fp32")))  # fp8: bf16 autocast around Float8Linear
        dt = self.fields.get("torch_dtype")
        for ac in self.facts.autocasts:
            dtype, device, enabled, aline = ac.dtype, ac.device, ac.enabled, ac.line
            if isinstance(enabled, Const) and not enabled.value:
                continue
            if ac.wrap and dt is not None and dt.value in ("bf16", "fp16") and dt.source not in ("library-default", "unknown") \
                    and {dtype_of(d) for d in flatten(dtype)} == {dt.value}:
                # FSDP's param_dtype on weights already in that dtype: its shards are that dtype, no fp32 master copy
                # (a policy on fp32 weights keeps fp32 shards and computes in param_dtype: autocast's accounting)
                vals.append(Const(f"pure-{dt.value}", dt.source, aline, dt.chain + (
                    f"{ac.wrap} (line {aline}) computes in the {dt.value} the weights already have: trained in "
                    f"{dt.value} without an fp32 copy",), dt.span.path if dt.span and dt.span.path != self.path else None))
                continue
            if dtype is None:
                dev = device.value if isinstance(device, Const) else "cuda"
                vals.append(Const("amp-bf16" if dev == "cpu" else "amp-fp16", "library-default", aline, (f"torch.autocast('{dev}') default dtype",)))
            else:
                vals.append(_map_dtype_to_amp(dtype, aline))
        if not vals and self.facts.scalers:
            vals.append(Const("amp-fp16", "literal", self.facts.scalers[0], ("GradScaler implies fp16 autocast",)))
        if not vals and dt is not None and dt.value in ("bf16", "fp16"):  # half weights trained without autocast
            vals.append(Const(f"pure-{dt.value}", dt.source, dt.line, dt.chain + (
                              f"{dt.value} weights and no autocast: pure {dt.value}",),
                              dt.span.path if dt.span and dt.span.path != self.path else None))
        if not vals:
            vals.append(Const("fp32", "library-default", line, ("no autocast or mixed_precision found",)))
        self.put("precision", _alts(vals), line=line)


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


def _float8(v: Any) -> str:
    if v in ("all", "layers", "none"):
        return v
    raise _Unconvertible(f"float8 training {v!r}")
