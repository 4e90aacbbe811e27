"""PEFT adapters: LoraConfig and its kin, get_peft_model, prepare_model_for_kbit_training, unsloth's
get_peft_model, PeftModel / PeftConfig.from_pretrained of a folder, peft.get_peft_config of a dict,
and a LoRA helper written in the checkout (data/library_api.json "checkout_lora").
"""

from __future__ import annotations

from typing import Any, Callable

from memlint.extract.objects import Method, Model, PeftConfig, Setting
from memlint.extract.values import Alts, Const, Dict, Unknown, flatten
from memlint.library import api
from memlint.extract.handlers.common import Call


class PeftHandlers:
    """Adapters: a model wrapped with its PEFT config."""

    def peft_config(self, c: Call) -> Any:
        return c.new(PeftConfig, f"peft.{c.name}")

    def checkout_lora(self, it: Any, f: Any, name: str, args: list, kwargs: dict, line: int | None) -> Any:
        """A LoRA helper of the script's own checkout (library_api.json "checkout_lora"): DeepSpeed-Chat's
        convert_linear_layer_to_lora(model, part_module_name, lora_dim, ...) replaces every nn.Linear whose name
        contains the part name with its own LoRA layer; read as a LoraConfig on those linears. Its `freeze`
        function (only_optimize_lora_parameters) returns the model unchanged but says only LoRA trains."""
        params = f.node.params
        names = [p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]]

        def arg(key: str, pos: int) -> Any:
            if key in kwargs:
                return kwargs[key]
            at = names.index(key) if key in names else pos
            if at < len(args):
                return args[at]
            return it.param_default(f, key) if key in names else Unknown(f"{key} of {f.qual}()")

        if name in api.checkout_lora_freeze():
            it.facts.lora_freezes.append(line)
            return args[0] if args else kwargs.get("model", Unknown(f"the result of {f.qual}()"))
        spec = api.checkout_lora()[name]
        part = arg(*spec["targets"])
        targets: Any = part
        if isinstance(part, Const) and isinstance(part.value, str):
            last = part.value.rstrip(".").rsplit(".", 1)[-1]
            every = part.value.endswith(".") or last in ("layers", "layer", "h", "blocks", "decoder", "encoder", "model")
            # a path prefix ("decoder.layers.", "layers.") names every linear under it: peft's all-linear
            targets = part.with_value("all-linear" if every else [part.value],
                                      f"nn.Linear modules whose name contains {part.value!r}")
        cfg = PeftConfig(f"{name} (LoRA written in the checkout)", line or 0,
                         {"r": arg(*spec["r"]), "lora_alpha": arg(*spec["alpha"]), "target_modules": targets,
                          "lora_dropout": arg(*spec["dropout"])})
        it.facts.objects.append(cfg)
        return self.wrap_model(it, arg(*spec["model"]), line, peft=cfg)

    def hand_lora(self, it: Any, what: str, rank: Any, line: int | None) -> None:
        """A LoRA layer written by hand (the checkout's module with lora_* parameters, or loralib's lora.Linear) was
        built: recorded as a LoRA config of that rank whose targets memlint does not read (the code that swaps the
        layers in); the plan's method reads it when no PEFT config reaches the trainer (fields/adapters.py)."""
        it.facts.objects.append(PeftConfig(what, line or 0, {"r": rank, "target_modules": Unknown(
            "the modules the checkout's own code replaces with its LoRA layer")}, by_hand=True))

    def loralib_layer(self, c: Call) -> Any:
        """loralib (microsoft/LoRA): `lora.Linear(in, out, r=16)` builds a LoRA layer in place of nn.Linear."""
        r = c.kwargs.get("r", c.args[2] if c.name == "Linear" and len(c.args) > 2 else None)
        if isinstance(r, Const) and isinstance(r.value, int) and r.value > 0:
            self.hand_lora(c.it, f"loralib.{c.name}(...)", r, c.line)
        return Unknown(f"a loralib {c.name} layer")

    def get_peft_model(self, c: Call) -> Any:
        if c.owner in api.unsloth_loaders():
            return self.unsloth_peft(c)
        part = c.arg(0, "model")
        if isinstance(part, Method) and isinstance(part.obj, Model) and part.obj.peft is None:
            # get_peft_model(model.language_model, cfg) (a VLM's language model, in the model class's own method or
            # the script): adapters on a part of the model the run trains, which then trains as LoRA
            part.obj.peft = c.arg(1, "peft_config")
            c.it.facts.note(f"line {c.line}: get_peft_model on .{part.name} of the model: peft freezes that part only; "
                            "the rest of the model stays trainable unless the script freezes it (memlint counts the "
                            "adapters alone)")
            return part
        out = self.wrap_model(c.it, part, c.line, peft=c.arg(1, "peft_config"))
        cast = c.kwargs.get("autocast_adapter_dtype")
        for m in flatten(out) if cast is not None else ():
            if isinstance(m, Model):
                m.adapter_cast = cast
        return out

    def kbit_prep(self, c: Call) -> Any:
        # peft kept prepare_model_for_int8_training as a deprecated alias of the kbit one
        # (peft utils/other.py); alpaca-lora era scripts still call it.
        gc = c.kwargs.get("use_gradient_checkpointing", c.args[1] if len(c.args) > 1 else None)
        if gc is None:
            gc = ("library-default", "peft.prepare_model_for_kbit_training", "use_gradient_checkpointing")
        # peft turns checkpointing on only for a model loaded in 4/8 bits (or GPTQ / AQLM): `if (loaded_in_kbit or
        # is_gptq_quantized ...) and use_gradient_checkpointing` (peft utils/other.py, every release since 0.4)
        out = self.wrap_model(c.it, c.arg(0, "model"), c.line, gc=Setting(gc, c.line, f"{c.name}(...)", kbit_only=True))
        for m in flatten(out):
            if isinstance(m, Model):
                m.kbit_line = c.line
        return out

    def unsloth_peft(self, c: Call) -> Any:
        cfg = PeftConfig("unsloth.FastLanguageModel.get_peft_model", c.line or 0, dict(c.kwargs))
        c.it.facts.objects.append(cfg)
        gc = c.kwargs.get("use_gradient_checkpointing")
        if gc is None:
            gc = ("library-default", "unsloth.FastLanguageModel.get_peft_model", "use_gradient_checkpointing")
        return self.wrap_model(c.it, c.arg(0, "model"), c.line, peft=cfg,
                               gc=Setting(gc, c.line, "FastLanguageModel.get_peft_model(use_gradient_checkpointing=…)"))

    def wrap_model(self, it: Any, model: Any, line: int | None, peft: Any = None, gc: Setting | None = None) -> Any:
        out = None
        for m in flatten(model):
            if isinstance(m, Model):
                w = Model(m.cls, line or 0, base=m, peft=peft)
                if gc is not None:
                    w.gc.append(gc)
                it.facts.objects.append(w)
                r: Any = w
            else:
                r = m if isinstance(m, Unknown) else Unknown("a model memlint could not follow")
            out = r if out is None else Alts((out, r))
        return out if out is not None else Unknown("a model")

    def peft_config_of_folder(self, c: Call) -> Any:
        """PeftConfig.from_pretrained("configs/lora") / LoraConfig.from_pretrained(dir): the
        adapter_config.json of that folder of the checkout, as peft reads it."""
        from memlint.extract import runtime_config

        ref = c.arg(0, "pretrained_model_name_or_path")
        if not (isinstance(ref, Const) and isinstance(ref.value, str)):
            return Unknown(f"{c.owner}.from_pretrained() of a folder memlint cannot read")
        path = ref.value.rstrip("/")
        if not path.endswith(".json"):
            path += "/adapter_config.json"
        d = runtime_config.read(c.it, Const(path, ref.source, ref.line, ref.chain, ref.file), f"{c.owner}.from_pretrained()")
        if not isinstance(d, Dict):
            return d if isinstance(d, Unknown) else Unknown(f"{path}: not a JSON object")
        return self.peft_config_of_dict(c, d, f"{c.owner}.from_pretrained()")

    def peft_config_of_dict(self, c: Call, d: Any = None, how: str = "peft.get_peft_config()") -> Any:
        """peft.get_peft_config(d): the config class d["peft_type"] names (LORA -> LoraConfig), built
        with d's other entries (a `peft_config:` block of a YAML file)."""
        d = c.arg(0, "config_dict") if d is None else d
        if not isinstance(d, Dict):
            return Unknown("peft.get_peft_config() of a dict memlint cannot read")
        kind = d.items.get("peft_type")
        if not (isinstance(kind, Const) and isinstance(kind.value, str)):
            return Unknown(f"{how}: peft_type is unknown")
        names = {"LORA": "LoraConfig", "ADALORA": "AdaLoraConfig", "IA3": "IA3Config", "LOHA": "LoHaConfig",
                 "LOKR": "LoKrConfig", "PREFIX_TUNING": "PrefixTuningConfig", "PROMPT_TUNING": "PromptTuningConfig",
                 "P_TUNING": "PromptEncoderConfig"}
        cls = names.get(kind.value.upper())
        if cls is None:
            return Unknown(f"{how}: peft_type {kind.value!r}")
        o = PeftConfig(f"peft.{cls}", c.line or 0, {k: v for k, v in d.items.items() if k != "peft_type"}, open=d.open)
        o.attrs["peft_type"] = Const(kind.value.upper(), kind.source, kind.line, kind.chain, kind.file)
        c.it.facts.objects.append(o)
        return o


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "get_peft_model": PeftHandlers.get_peft_model,
    "prepare_model_for_kbit_training": PeftHandlers.kbit_prep,
    "prepare_model_for_int8_training": PeftHandlers.kbit_prep,
}

# by qualified name
QUALIFIED: dict[str, Callable[[Any, Call], Any]] = {
    f"loralib.{name}": PeftHandlers.loralib_layer for name in ("Linear", "Embedding", "Conv2d", "MergedLinear")
}
