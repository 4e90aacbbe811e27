"""What the activations cost: gradient checkpointing (the model's, the arguments', the one a trainer
turns on for a k-bit model), offloaded activations, and a fused loss (Liger).
"""

from __future__ import annotations

from typing import Any

from memlint.extract.objects import Obj, field_value
from memlint.extract.values import Const, Dict, Unknown, flatten
from memlint.library import api
from memlint.library.defaults import default as library_default
from memlint.extract.fields.convert import _alts, _bool, _map_const


# trainer values of loops the script drives itself (no Trainer deciding checkpointing)
_LOOPS = ("custom-loop", "deepspeed-engine", "lightning", "lightning-fabric")


class ActivationFields:
    """gradient_checkpointing, offload_activations, fused_loss."""

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

    def kbit_checkpointing(self, trainer: Obj) -> Const | None:
        """Gradient checkpointing a trainer turns on itself when it prepares a 4/8-bit model for the peft_config it
        is given (TRL before 0.7.2: prepare_model_for_int8_training with peft's default; library.api)."""
        peft = trainer.kwargs.get("peft_config")
        bits = self.fields.get("quant_bits")
        if peft is None or isinstance(peft, Const) and peft.value is None or bits is None or bits.value not in (4, 8):
            return None
        why = api.kbit_prep_checkpointing(trainer.cls)
        return Const(True, "library-default", trainer.line, (why,)) if why else None

    def gc_field(self, models: list[Obj]) -> None:
        """Checkpointing is on if the model turns it on, else what the training arguments say."""
        args_gc = getattr(self, "args_gc", None)
        forced = getattr(self, "forced_gc", None)
        per_model = []
        for m in models or [None]:
            if forced is not None:
                per_model.append(forced)
                continue
            resolved = []
            bits = self.fields.get("quant_bits")
            unquantized = bits is not None and bits.known and bits.value is None and not bits.candidates
            chain = self.chain(m) if m is not None else []
            # peft tests the model's is_loaded_in_8bit / is_loaded_in_4bit: a script may set them itself
            flagged = any(isinstance(x.attrs.get(k), Const) and x.attrs[k].value is True for x in chain
                          for k in ("is_loaded_in_8bit", "is_loaded_in_4bit"))
            for mm in chain:
                for setting in mm.gc:
                    if setting.kbit_only and unquantized and not flagged:
                        continue  # prepare_model_for_kbit_training on a 16/32-bit model leaves checkpointing off
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
