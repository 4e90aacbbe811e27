"""The adapters that reach the trainer: the PEFT config on the model or given to the trainer, the method
(full, lora, qlora), the LoRA fields with peft's defaults, DoRA, the adapters' dtype.
"""

from __future__ import annotations

from typing import Any

from memlint.extract.objects import Model, Obj, PeftConfig
from memlint.extract.values import Const, Ref, Unknown, flatten
from memlint.library import api
from memlint.library.defaults import default as library_default
from memlint.plan import Span, Value
from memlint.extract.fields.convert import _Unconvertible, _bool, _dtype, _int, _libc, _targets


class AdapterFields:
    """method, lora_*, use_dora, adapter_dtype."""

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
        if not loras and (models or trainer is not None):
            # no PEFT config reaches the trainer, but the run built LoRA layers written by hand (or loralib's)
            reached = self.facts.objects[:self.facts.reached.get("objects", len(self.facts.objects))]
            loras = [o for o in reached if isinstance(o, PeftConfig) and o.by_hand][-1:]
        if not loras:
            if models or trainer is not None:
                self.put("method", Const("full", "literal", line, ("no PEFT adapter reaches the trainer",)), line=line)
            return
        lora = loras[-1]
        prompt = api.prompt_learning_configs().get(lora.cls.rsplit(".", 1)[-1])
        if prompt is not None:  # virtual tokens on a frozen base: no LoRA rank, alpha or targets
            self.fields["method"] = Value(prompt, "literal", Span(self.path, lora.line), (
                f"{lora.cls.rsplit('.', 1)[-1]} (line {lora.line}) applied: peft's {prompt}, the base frozen",))
            return
        bits = self.fields.get("quant_bits")
        bit_opts = (bits.candidates or (bits.value,)) if bits is not None else (None,)
        methods = list(dict.fromkeys("qlora" if b == 4 else "lora" for b in bit_opts))
        if has_none:
            methods.append("full")
        method = min(methods, key=["full", "lora", "qlora"].index)
        q4 = "qlora" in methods
        cands = tuple(methods) if len(methods) > 1 else ()
        how = f"{lora.cls}, built at line {lora.line}: LoRA written by hand" if lora.by_hand else \
            f"{lora.cls.rsplit('.', 1)[-1]} (line {lora.line}) applied"
        self.fields["method"] = Value(method, "literal", Span(self.path, lora.line), (how + (" on a 4-bit base" if q4 else ""),), cands)
        self.adapter_dtype(models)
        if lora.by_hand:
            self.put("lora_r", lora.get("r"), _int, lora.line)
            self.put("lora_targets", lora.get("target_modules"), _targets, lora.line)
            self.notes.append(f"{lora.cls}: LoRA written by hand; its base parameters are counted frozen and its "
                              "adapters on peft's default target modules for the architecture (the modules the code "
                              "swaps are not read); pass --assume lora_targets=... to be exact")
            return
        if lora.adapter:
            for f in ("lora_r", "lora_alpha", "lora_targets", "lora_dropout", "lora_modules_to_save", "lora_task_type"):
                self.put(f, Unknown("read from a saved adapter at run time"), line=lora.line)
            return
        ada = lora.cls.endswith("AdaLoraConfig")  # AdaLoRA's adapters start at init_r (pruned towards target_r)
        cls = lora.cls if lora.cls.startswith("unsloth") else "peft.AdaLoraConfig" if ada else "peft.LoraConfig"
        for field, arg in (("lora_r", "init_r" if ada else "r"), ("lora_alpha", "lora_alpha"), ("lora_targets", "target_modules"),
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


def _task_type(v: Any) -> str | None:
    """peft's task_type: a string ("SEQ_CLS") or TaskType.SEQ_CLS (the attribute's name, as the enum's value)."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, Ref) and v.qual.startswith("peft.") and ".TaskType." in f".{v.qual}":
        return v.qual.rsplit(".", 1)[-1]
    raise _Unconvertible("task_type")


def _number(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Unconvertible(f"{v!r} is not a number")
    return v
