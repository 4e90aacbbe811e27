"""Quantization: BitsAndBytesConfig, GPTQ / AWQ / HQQ configs, and bitsandbytes' own linear layers
built by hand or handed to a helper that swaps a model's linears (data/library_api.json "bnb_linears").
"""

from __future__ import annotations

from typing import Any, Callable

from memlint.extract.objects import HandQuant, Method, Model, QuantConfig
from memlint.extract.values import Const, Ref, flatten
from memlint.library import api
from memlint.extract.handlers.common import Call


def _hand_quant(it: Any, name: str, kwargs: dict, line: int | None, how: str, models: list | None = None) -> None:
    """Record bitsandbytes' `name` layers with the keywords they are built with (their defaults otherwise): on the
    models the call is given (`replace_linear(model.model, Linear4bit)`), else for the script."""
    facts = api.bnb_linear(name)
    for key, keeps in facts.get("unless", {}).items():
        v = kwargs.get(key)
        if v is None or isinstance(v, Const) and v.value == keeps:  # the default (or the value) keeps weights unquantized
            return
    why = f"{how}: {facts['bits']}-bit bitsandbytes linears ({facts['ref']})"
    bits = Const(facts["bits"], "literal", line, (why,))
    qt = kwargs.get("quant_type")
    if qt is None and "quant_type" in facts:
        qt = Const(facts["quant_type"], "library-default", line, (f"{name}'s quant_type default ({facts['ref']})",))
    double = kwargs.get("compress_statistics")
    if double is None and "double_quant" in facts:
        double = Const(facts["double_quant"], "library-default", line, (f"{name}'s compress_statistics default ({facts['ref']})",))
    got = HandQuant(bits, qt, double, kwargs.get("compute_dtype"), line, how)
    for m in models or ():
        while m.base is not None:
            m = m.base
        m.hand_quant.append(got)
    if not models:
        it.facts.hand_quant.append(got)


class QuantHandlers:
    """Quantization configs and hand-made quantized layers."""

    def bnb_config(self, c: Call) -> Any:
        return c.new(QuantConfig, "transformers.BitsAndBytesConfig")

    def int4_config(self, c: Call) -> Any:
        """GPTQConfig(bits=4, group_size=128, ...) / AwqConfig(...) / HqqConfig(nbits=4, group_size=64) / Mxfp4Config
        (gpt-oss): a GPTQ / AWQ / HQQ / MXFP4 base (fields/quant.py quant_of_config)."""
        return c.new(QuantConfig, f"transformers.{c.name}")

    def quantized_linear_args(self, it: Any, f: Any, args: list, kwargs: dict, line: int | None) -> None:
        """A bitsandbytes linear class handed to a call (`replace_linear(model, bnb.nn.Linear4bit, quant_type="nf4")`,
        `partial(Linear4bit, ...)`): the call puts those layers in a model; its keywords are the layers'. A builtin
        (issubclass(cls, Linear4bit), isinstance) only looks at the class."""
        if isinstance(f, Ref) and f.qual.startswith("builtins."):
            return
        given = [*args, *kwargs.values()]
        for a in given:
            if isinstance(a, Ref) and a.qual.split(".", 1)[0] == "bitsandbytes" and api.bnb_linear(a.name) is not None:
                models = [m.obj if isinstance(m, Method) else m for g in given for m in flatten(g)
                          if isinstance(m, Model) or isinstance(m, Method) and isinstance(m.obj, Model)]
                _hand_quant(it, a.name, kwargs, line, f"{a.name} handed to a call (line {line})", models)


# the library calls this module answers, by last component (handlers/__init__.py merges the tables)
BY_NAME: dict[str, Callable[[Any, Call], Any]] = {
    "BitsAndBytesConfig": QuantHandlers.bnb_config,
    "GPTQConfig": QuantHandlers.int4_config,
    "AwqConfig": QuantHandlers.int4_config,
    "HqqConfig": QuantHandlers.int4_config,
    "Mxfp4Config": QuantHandlers.int4_config,
    "QuantoConfig": QuantHandlers.int4_config,
}
