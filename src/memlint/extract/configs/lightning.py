"""LightningCLI configs (`my-cli fit --config cfg.yaml`, `python main.py fit -c cfg.yaml`): jsonargparse YAML with a
`trainer:` section of Lightning Trainer arguments and `model:` / `data:` sections that name the user's own
LightningModule and LightningDataModule as class_path / init_args trees.

The Trainer's arguments are Lightning's (precision, strategy, devices, accumulate_grad_batches); the model's and data
module's are the user's, read by name from a vocabulary of the argument names Hugging Face-based modules use for the
same things (frameworks.json "lightning-cli": vocabulary), each looked for under the section it belongs to.
"""

from __future__ import annotations

from typing import Any, Iterator

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import optimizer_of_class
from memlint.extract.configs.readers import FrameworkReader

Key = tuple  # the key path as the document holds it (a dotted key `init_args.config` is one part)


def looks_like(keys: set[str], text: str = "") -> bool:
    """A LightningCLI config: a `trainer:` section beside a model or data module given by class_path."""
    if "trainer" not in keys:
        return False
    if keys & {"model.class_path", "data.class_path"}:
        return True
    return bool(text) and "class_path:" in text and ("model:" in text or "data:" in text)


class LightningCLI(FrameworkReader):
    kind = "lightning-cli"
    rank = 20

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:  # LightningCLI / jsonargparse: trainer: beside class_path model:
        return looks_like(keys, text)

    def _fw(self) -> dict:
        return frameworks.framework(self.kind)

    def _walk(self, node: Any, path: Key, depth: int = 0) -> Iterator[tuple[Key, str, Any]]:
        """(key path, the key's last name, value) of every key under `node`, depth first in file order; a dotted key
        (`init_args.config`) is named by its last part."""
        if not isinstance(node, dict) or depth > 32:
            return
        for k, v in node.items():
            if not isinstance(k, str):
                continue
            yield (*path, k), k.rsplit(".", 1)[-1], v
            yield from self._walk(v, (*path, k), depth + 1)
            if isinstance(v, list):
                for i, item in enumerate(v[:64]):
                    yield from self._walk(item, (*path, k, i), depth + 1)

    def _find(self, field: str, sections: tuple[str, ...], want=lambda v: v is not None) -> tuple[Key, Any] | None:
        """The first key of `field`'s vocabulary under `sections` (in that order) whose value `want` accepts; the
        vocabulary's order is the preference (model_name_or_path before model_name)."""
        names = self._fw()["vocabulary"][field]
        for section in sections:
            found = [(path, name, v) for path, name, v in self._walk(self.doc.get(section), (section,))
                     if name in names and want(v)]
            if found:
                path, _, v = min(found, key=lambda f: names.index(f[1]))
                return path, v
        return None

    def _lit(self, name: str, value: Any, path: Key, why: str = "") -> None:
        self.lit(name, value, *path, chain=(f"{'.'.join(map(str, path))}: {self.doc.get(*path)!r}" + why,))

    def read(self) -> None:
        self._model_id()
        strategy = self._strategy()
        self._precision(strategy)
        self._method()
        self._int("per_device_batch", ("data", "model"))
        self._int("max_length", ("data", "model"))
        self._grad_accum()
        self._packing()
        self._flag("gradient_checkpointing", ("model",), "no gradient checkpointing argument in the model's config")
        self._optimizer()
        attn = self._find("attn_implementation", ("model",), lambda v: isinstance(v, str) and v.strip())
        if attn:
            self._lit("attn_implementation", attn[1].strip(), attn[0])
        else:
            self.unknown("attn_implementation", "the model class's own choice (no attn_implementation in its config)")
        self._devices()
        cls = self.doc.get("model", "class_path")
        self.lit("trainer", "lightning", *(("model", "class_path") if isinstance(cls, str) else ()),
                 chain=(f"LightningCLI fit: the model class {cls} under lightning's Trainer" if isinstance(cls, str)
                        else "LightningCLI fit: lightning's Trainer",))

    def _model_id(self) -> None:
        hit = self._find("model_id", ("model", "data"),
                         lambda v: isinstance(v, str) and bool(v.strip()) and not v.strip().startswith(("$", "<")))
        if hit:
            self._lit("model_id", hit[1].strip(), hit[0])
        else:
            self.unknown("model_id", "no checkpoint name in the model's config")

    def _int(self, name: str, sections: tuple[str, ...]) -> None:
        hit = self._find(name, sections, lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0)
        if hit:
            self._lit(name, hit[1], hit[0])
        else:
            self.unknown(name, f"no {' / '.join(self._fw()['vocabulary'][name][:3])} in the {' or '.join(sections)} config")

    def _flag(self, name: str, sections: tuple[str, ...], absent: str) -> None:
        hit = self._find(name, sections, lambda v: isinstance(v, bool))
        if hit:
            self._lit(name, hit[1], hit[0])
        else:
            self.lib(name, False, absent)

    def _trainer(self, key: str) -> tuple[Any, bool]:
        """(a Trainer argument, given in the file?): the file's value, else Lightning's default."""
        if self.doc.has("trainer", key):
            return self.doc.get("trainer", key), True
        d = frameworks.default(self.kind, f"trainer.{key}")
        return (d.value if d else None), False

    def _grad_accum(self) -> None:
        v, given = self._trainer("accumulate_grad_batches")
        if given and isinstance(v, int) and not isinstance(v, bool) and v > 0:
            self.lit("grad_accum", v, "trainer", "accumulate_grad_batches")
        elif given:
            self.unknown("grad_accum", f"trainer.accumulate_grad_batches {v!r}", "trainer", "accumulate_grad_batches")
        else:
            self.fw("grad_accum", "trainer.accumulate_grad_batches")

    def _strategy(self) -> str | None:
        """distributed and offload from trainer.strategy: a registered name, or a class_path/init_args tree (its class
        name read as the strategy it is or extends: DeepSpeedStrategy's stage from init_args, 2 by default)."""
        from memlint.library import api

        v, given = self._trainer("strategy")
        if isinstance(v, dict):
            cls = str(v.get("class_path", ""))
            args = v.get("init_args") if isinstance(v.get("init_args"), dict) else {}
            short = cls.rsplit(".", 1)[-1]
            name = short.lower().removesuffix("strategy")
            if name.endswith("deepspeed"):
                stage = args.get("stage", 2)
                value, why = {1: "zero1", 2: "zero2", 3: "zero3"}.get(stage, "deepspeed"), f"{short}(stage={stage})"
            else:
                value, why = api.lightning_strategy(name), short
            if value is None:
                self.unknown("distributed", f"trainer.strategy {cls}: a strategy memlint does not know", "trainer", "strategy")
                return None
            self.lit("distributed", value, "trainer", "strategy", chain=(f"trainer.strategy {why}",))
            if args.get("offload_parameters") or args.get("cpu_offload"):
                self.lit("offload", "params", "trainer", "strategy")
            elif args.get("offload_optimizer"):
                self.lit("offload", "optimizer", "trainer", "strategy")
            else:
                self.lit("offload", "none", "trainer", "strategy", chain=(f"trainer.strategy {why}: no offload",))
            return value
        value = api.lightning_strategy(str(v)) if isinstance(v, str) else None
        if value is None and v == "auto":
            value = "none"
        if value is None:
            self.unknown("distributed", f"trainer.strategy {v!r}", *(("trainer", "strategy") if given else ()))
            return None
        if given:
            self.lit("distributed", value, "trainer", "strategy")
            self.lit("offload", "params" if "offload" in str(v) else "none", "trainer", "strategy")
        else:
            self.fw("distributed", "trainer.strategy", lambda _: value)
            self.lib("offload", "none", "no DeepSpeed or FSDP offload")
        return value

    def _precision(self, strategy: str | None) -> None:
        from memlint.library import api
        from memlint.vocab import dtype_name

        v, given = self._trainer("precision")
        text = str(v).strip().lower()
        precision = api.lightning_precision(text)
        if precision is None:
            self.unknown("precision", f"trainer.precision {v!r}", *(("trainer", "precision") if given else ()))
            return
        # *-true converts the module to the dtype (HalfPrecision); *-mixed autocasts over fp32 weights
        dtype = "bf16" if text == "bf16-true" else "fp16" if text == "16-true" else "fp32"
        why = ""
        if strategy in ("zero1", "zero2", "zero3", "deepspeed") and precision.startswith("pure-"):
            precision = "amp-" + precision[5:]
            why = " under DeepSpeedStrategy: DeepSpeed's half-precision mode keeps fp32 master weights"
        hit = self._find("torch_dtype", ("model",), lambda x: isinstance(x, str) and x.strip() not in ("", "auto"))
        if hit and dtype_name(hit[1]):
            self._lit("torch_dtype", dtype_name(hit[1]), hit[0])
        elif given:
            self.lit("torch_dtype", dtype, "trainer", "precision", chain=(f"trainer.precision {v}: {dtype} weights",))
        else:
            self.fw("torch_dtype", "trainer.precision", lambda _: dtype)
        if given:
            self.lit("precision", precision, "trainer", "precision", chain=(f"trainer.precision {v}{why}",))
        else:
            self.fw("precision", "trainer.precision", lambda _: precision)

    def _method(self) -> None:
        r = self._find("lora_r", ("model",), lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0)
        q4 = self._find("load_in_4bit", ("model",), lambda v: v is True)
        q8 = self._find("load_in_8bit", ("model",), lambda v: v is True)
        bits = 4 if q4 else 8 if q8 else None
        if bits:
            self._lit("quant_bits", bits, (q4 or q8)[0])
        else:
            self.lib("quant_bits", None, "no load_in_4bit / load_in_8bit in the model's config")
        if r:
            self._lit("lora_r", r[1], r[0])
            self._lit("method", "qlora" if bits == 4 else "lora", r[0])
        else:
            self.lib("method", "full", "no LoRA rank in the model's config: every parameter trains")

    def _packing(self) -> None:
        off = self._fw()["vocabulary"]["no_packing"]
        hit = self._find("packing", ("data", "model"), lambda v: isinstance(v, (bool, str)) or v is None)
        if hit and hit[1] not in off:
            self._lit("packing", True, hit[0])
            self._lit("padding", "packing", hit[0])
            return
        if hit:
            self._lit("packing", False, hit[0])
        else:
            self.lib("packing", False, "no packing argument in the data module's config")
        multiple = self._find("pad_to_multiple_of", ("data", "model"), lambda v: isinstance(v, int) and not isinstance(v, bool))
        if multiple:  # a collator that pads to a multiple pads each batch to its longest sample, rounded up
            self._lit("padding", "longest", multiple[0], " (each batch padded to its longest sample, rounded up)")
        else:
            self.unknown("padding", "the data module's own collator (no padding argument in its config)")

    def _optimizer(self) -> None:
        # LightningCLI's own `optimizer:` section, else an optimizer class or name the model takes
        top = self.doc.get("optimizer")
        if isinstance(top, dict) and isinstance(top.get("class_path"), str):
            hit: tuple | None = (("optimizer", "class_path"), top["class_path"])
        elif isinstance(top, str):
            hit = (("optimizer",), top)
        else:
            hit = self._find("optimizer", ("model",), lambda v: isinstance(v, str) and v.strip()
                             or isinstance(v, dict) and isinstance(v.get("class_path"), str))
            if hit and isinstance(hit[1], dict):
                hit = ((*hit[0], "class_path"), hit[1]["class_path"])
        if not hit:
            self.unknown("optimizer", "the model's configure_optimizers (no optimizer in its config)")
            return
        path, name = hit
        from memlint import data

        known = data.load("optimizers.json")["optimizers"]
        optim = optimizer_of_class(name) if "." in name else name.strip().lower() if name.strip().lower() in known else None
        if optim is None:
            self.unknown("optimizer", f"{name}: an optimizer memlint does not know", *path)
            return
        self._lit("optimizer", optim, path)

    def _devices(self) -> None:
        v, given = self._trainer("devices")
        nodes = self.doc.get("trainer", "num_nodes")
        nodes = nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 0 else 1
        n = len(v) if isinstance(v, list) else v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
        if isinstance(v, str) and v.strip().isdigit() and int(v) > 0:
            n = int(v)
        if given and n:
            self.lit("num_gpus", n * nodes, "trainer", "devices")
        else:
            self.unknown("num_gpus", f"trainer.devices {v!r}: every visible GPU", *(("trainer", "devices") if given else ()))

