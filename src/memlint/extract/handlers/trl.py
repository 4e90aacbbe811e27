"""TRL's helpers around its trainers: ModelConfig, get_peft_config / get_quantization_config of the model
arguments, setup_chat_format / clone_chat_template. (Its trainers and configs are data:
memlint.library.api.)
"""

from __future__ import annotations

from typing import Any, Callable

from memlint.extract.objects import DataclassInstance, Obj, PeftConfig, QuantConfig
from memlint.extract.values import Const, Seq, Unknown
from memlint.extract.handlers.common import Call, _PASS


class TrlHandlers:
    """TRL's model arguments and chat-format helpers."""

    def trl_model_config(self, c: Call) -> Any:
        if c.head != "trl":
            return _PASS
        return c.new(DataclassInstance, c.qual, library="trl.ModelConfig")

    def trl_config_of(self, c: Call) -> Any:
        """TRL's get_peft_config / get_quantization_config(model_args): a LoraConfig when
        use_peft, a BitsAndBytesConfig when load_in_4bit/8bit, else None (trl utils.py)."""
        if c.head == "peft" and c.name == "get_peft_config":
            return self.peft_config_of_dict(c)
        if c.head != "trl":
            return _PASS
        m = c.arg(0, "model_args")
        if m is None:
            m = c.kwargs.get("model_config")
        if not isinstance(m, Obj):
            return Unknown(f"{c.qual}() of unknown model arguments")
        field = lambda attr: self.getattr(c.it, m, attr, c.line)  # noqa: E731
        if c.name == "get_peft_config":
            flags = [("use_peft", {"r": "lora_r", "lora_alpha": "lora_alpha", "target_modules": "lora_target_modules"})]
            kind, cls = PeftConfig, "peft.LoraConfig"
        else:
            flags = [("load_in_4bit", {"load_in_4bit": "load_in_4bit", "bnb_4bit_quant_type": "bnb_4bit_quant_type",
                                       "bnb_4bit_use_double_quant": "use_bnb_nested_quant"}),
                     ("load_in_8bit", {"load_in_8bit": "load_in_8bit"})]
            kind, cls = QuantConfig, "transformers.BitsAndBytesConfig"
        off = None
        for flag, mapping in flags:
            on = field(flag)
            if not isinstance(on, Const):
                return Unknown(f"trl.{c.name}(): {flag} is unknown")
            if on.value:
                o = kind(cls, c.line or 0, {k: field(a) for k, a in mapping.items()})
                c.it.facts.objects.append(o)
                return o
            off = off or on
        return Const(None, off.source, off.line, off.chain + (f"trl.{c.name}() returns None",), off.file)

    def chat_format(self, c: Call) -> Any:
        """trl.setup_chat_format / clone_chat_template(model, tokenizer): the same model (its embeddings
        resized to the new special tokens) and tokenizer."""
        return Seq([c.arg(0, "model", Unknown("a model")), c.arg(1, "tokenizer", Unknown("a tokenizer"))], "tuple")


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "ModelConfig": TrlHandlers.trl_model_config,
    "get_peft_config": TrlHandlers.trl_config_of,
    "get_quantization_config": TrlHandlers.trl_config_of,
    "setup_chat_format": TrlHandlers.chat_format,
    "clone_chat_template": TrlHandlers.chat_format,
}
