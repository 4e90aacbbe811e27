"""The optimizer: the classes a loop builds and steps (fused, layer-wise in a gradient hook), GaLore's
targets and rank, a DeepSpeed config's optimizer section or the CPU Adam an offloading config swaps in, and an
optimizer stepped inside backward.
"""

from __future__ import annotations

from typing import Any

from memlint.extract.objects import Obj
from memlint.extract.values import Const, Unknown
from memlint.library import api
from memlint.plan import Span, Value
from memlint.vocab import ascii_digits
from memlint.extract.fields.convert import _alts, _int, _libc, _targets


class OptimizerFields:
    """optimizer, galore_*, optimizer_in_bwd."""

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

    def deepspeed_optimizer(self, own: bool, line: int | None) -> None:
        """The Trainer's optimizer under its DeepSpeed config: the config's optimizer section (unless the script passes
        its own), DeepSpeed's CPU Adam where the config offloads the optimizer (accelerate swaps it), unknown where the
        config named is not in the checkout (a section there would win)."""
        if self.ds_optimizer and not own:  # the DeepSpeed config's optimizer section wins over optim=
            v = self.ds_optimizer[0]
            self.fields["optimizer"] = Value(v.value, v.source, v.span, v.chain + ("a DeepSpeed config's optimizer replaces the Trainer's optim",))
        elif self.ds_cpu_optimizer:
            from memlint.extract.configs.launchers import offloaded_optimizer

            swapped = offloaded_optimizer(self.fields.get("optimizer"), self.fields.get("trainer"), self.ds_cpu_optimizer[0], "deepspeed")
            if swapped is not None:
                self.fields["optimizer"] = swapped
        elif self.ds_unread and not own:
            self.put("optimizer", Unknown(f"{self.ds_unread[0]}: an optimizer section there would replace the Trainer's optim"),
                     line=line)

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

    def plugin_cpu_optimizer(self, accs: list) -> None:
        """Accelerator(deepspeed_plugin=DeepSpeedPlugin(offload_optimizer_device="cpu")): accelerate's prepare swaps the
        loop's optimizer for DeepSpeed's CPU Adam (library.api.deepspeed_cpu_optimizer)."""
        from memlint.extract.configs.launchers import offloaded_optimizer

        for a in accs:
            plug = a.get("deepspeed_plugin")
            dev = plug.get("offload_optimizer_device") if isinstance(plug, Obj) else None
            if isinstance(dev, Const) and str(dev.value).lower() in ("cpu", "nvme"):
                cpu = Value("deepspeed_adam", dev.source, Span(self.path, dev.line or plug.line),
                            (f"DeepSpeedPlugin(offload_optimizer_device={dev.value!r}) (line {dev.line or plug.line})",))
                swapped = offloaded_optimizer(self.fields.get("optimizer"), self.fields.get("trainer"), cpu, "accelerate")
                if swapped is not None:
                    self.fields["optimizer"] = swapped
                return

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
            how = getattr(o, "how", None) or f"{o.cls} (line {o.line})"
            if layerwise and api.layerwise_optimizer(name):  # one optimizer per parameter, stepped in backward
                name, how = api.layerwise_optimizer(name), how + ", one per parameter stepped by a post-accumulate-grad hook"
            vals.append(Const(name, "literal", o.line, (how,)))
        self.put("optimizer", _alts(vals))
