"""From what the interpreter saw to a TrainingPlan: follow the trainer, not every object.

Only what reaches the training step counts: the trainer that is trained (else the last one
built), its arguments, its model and that model's adapters and quantization. A config built
but never passed anywhere is ignored.

`Builder` keeps the plan's fields (`put`: every candidate kept, the worst case picked, unknowns
noted) and follows the trainer; one mixin per group of plan fields reads them (extract/fields/:
the model, its quantization, adapters, the trainer, batch and length, precision, activations,
the optimizer, parallelism, hand-written loops).
"""

from __future__ import annotations

import re

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from memlint.extract.launched import all_visible
from memlint.extract.objects import DtypeName, Method, Model, Obj, Trainer
from memlint.extract.values import Const, Dict, Ref, Seq, Unknown, flatten, to_python
from memlint.library import api
from memlint.library.defaults import default as library_default
from memlint.plan import Span, TrainingPlan, Value
from memlint.extract.fields.activations import ActivationFields
from memlint.extract.fields.adapters import AdapterFields
from memlint.extract.fields.convert import _Unconvertible
from memlint.extract.fields.length import LengthFields
from memlint.extract.fields.loops import LoopFields
from memlint.extract.fields.model import ModelFields
from memlint.extract.fields.optimizer import OptimizerFields
from memlint.extract.fields.parallel import ParallelFields
from memlint.extract.fields.precision import PrecisionFields
from memlint.extract.fields.quant import QuantFields
from memlint.extract.fields.trainer import TrainerFields


_NUMERIC = {"lora_r", "lora_alpha", "per_device_batch", "eval_batch", "grad_accum", "max_length", "num_gpus", "target_len"}


# When branches disagree, `value` is the candidate that costs the most memory.
_WORST = {
    "quant_bits": [None, 8, 4],
    "gradient_checkpointing": [False, True],
    "padding": ["max_length", "longest", "packing"],
    "precision": ["fp32", "amp-fp16", "amp-bf16"],
    "torch_dtype": ["fp32", "auto", "bf16", "fp16"],
    # eager keeps the s x s attention scores; the fused kernels do not
    "attn_implementation": None,  # data/library_api.json lists them worst first
    # the full-vocabulary logits of a plain loss cost more than a fused one's chunk
    "fused_loss": [False, "liger", "cce"],
    # DoRA's magnitude products and weight norm cost more than plain LoRA
    "offload_activations": [False, True],
    "use_dora": [True, False],
    # a second model in memory costs the most; precomputed log-probs the least
    "ref_model": ["model", "auto", "precomputed"],
}


class Builder(
        ModelFields, QuantFields, AdapterFields, TrainerFields, LengthFields, PrecisionFields, ActivationFields,
        OptimizerFields, ParallelFields, LoopFields,
):
    """One file's plan from its interpreter facts."""

    def __init__(self, path: str, script: Path, facts: Any, launch: Any = None, source: str = "") -> None:
        self.path = path
        self.script = script
        self.source = source  # the text read (a `memlint diff` base's, not the file's now)
        self.facts = facts
        self.launch = launch
        self.fields: dict[str, Value] = {}
        self.unsloth_trained = False  # the trained model came from unsloth's loader (build() sets it)
        self.notes: list[str] = list(facts.notes)
        self.maybe: dict[str, list[str]] = {}
        self.ds_offload: list[Const] = []  # offload read from a followed DeepSpeed config
        self.ds_optimizer: list[Value] = []  # a followed DeepSpeed config's own optimizer
        self.ds_cpu_optimizer: list[Value] = []  # a followed DeepSpeed config that offloads the optimizer (no optimizer section)
        self.ds_unread: list[str] = []  # why a DeepSpeed config named could not be read (not in the checkout)
        self.read_files: list[str] = []  # other files read (a DeepSpeed JSON): the plan's sources

    def put(self, name: str, av: Any, convert: Callable[[Any], Any] = lambda x: x,
            line: int | None = None, why: str = "") -> None:
        """Set a plan field from an abstract value; every candidate kept, unknowns noted."""
        known: list[tuple[Any, Const]] = []
        whys: list[str] = []
        for o in flatten(av) if av is not None else [Unknown(why or "not found in the script")]:
            if isinstance(o, (Seq, Dict)):
                o = to_python(o)
            if isinstance(o, Ref):
                o = Const(o, o.source, o.line or line)
            elif isinstance(o, DtypeName):
                o = o.name.with_value(o.name.value)
            if isinstance(o, Const):
                try:
                    known.append((convert(o.value), o))
                except _Unconvertible as exc:
                    whys.append(str(exc))
            elif isinstance(o, Unknown):
                whys.append(o.why or why or "cannot be known statically")
            elif isinstance(o, Method):
                whys.append(f"a method of {o.obj.cls}")
            else:
                whys.append(why or "cannot be known statically")
        if not known:
            reason = whys[0] if whys else why
            self.fields[name] = Value(None, "unknown", Span(self.path, line) if line else None, (reason,) if reason else ())
            self.notes.append(f"{name} is unknown ({reason}); pass --assume {name}=VALUE")
            return
        distinct: list[tuple[Any, Const]] = []
        for v, c in known:
            if not any(_eq(v, d) for d, _ in distinct):
                distinct.append((v, c))
        pick = distinct[0]
        if len(distinct) > 1 and name in _NUMERIC:
            nums = [d for d in distinct if isinstance(d[0], (int, float)) and not isinstance(d[0], bool)]
            if nums:
                pick = max(nums, key=lambda d: d[0])
        elif len(distinct) > 1 and name in _WORST:
            order = _WORST[name] or list(api.attention())
            pick = min(distinct, key=lambda d: order.index(d[0]) if d[0] in order else len(order))
        value, c = pick
        span = Span(c.file or self.path, c.line or line or 1) if (c.line or line) else None
        cands = tuple(_jsonable(d[0]) for d in distinct) if len(distinct) > 1 else ()
        self.fields[name] = Value(_jsonable(value), c.source, span, tuple(c.chain), cands)
        if whys:
            self.maybe.setdefault(_reason(whys[0]), []).append(name)

    def lib(self, name: str, cls: str, attr: str, line: int | None, convert: Callable = lambda x: x) -> None:
        d = library_default(cls, attr)
        if d is None:
            self.put(name, Unknown(f"no library default for {cls}.{attr}"), line=line)
            return
        self.put(name, Const(d.value, "library-default", line, (d.why,)), convert, line)

    def build(self) -> TrainingPlan:
        objs = self.facts.objects
        trainers = self.facts.first("objects", Trainer)
        trained = self.facts.first("trained", Trainer)  # those the script's own run trained, before other commands
        trainer = (trained or trainers or [None])[-1]
        if len({id(t) for t in trained}) > 1:
            self.notes.append("more than one trainer is trained; the plan follows the last one")
        model: Any = None
        args: Any = None
        if trainer is not None:
            model = trainer.kwargs.get("model")
            args = trainer.kwargs.get("args")
        else:
            model = self.loop_model(objs)

        model_objs = [m for m in flatten(model) if isinstance(m, Model)]
        if trainer is not None and any(isinstance(m, Const) and isinstance(m.value, str) for m in flatten(model)):
            model_objs += self.string_models(trainer, model, args)
        if trainer is not None and not model_objs:
            # `model = helper(model)` through a function memlint cannot follow loses the
            # object; the model the script loaded last before building the trainer is still the
            # best reading (one loaded after training is for inference).
            before = objs[: next((i for i, o in enumerate(objs) if o is trainer), len(objs))]
            loaded = self.loop_model(before) or self.loop_model(objs)
            if isinstance(loaded, Model):
                model_objs = [loaded]
                why = next((u.why for u in flatten(model) if isinstance(u, Unknown) and u.why), "a value memlint cannot follow")
                self.notes.append(f"the trainer's model is {why}; the plan follows the model loaded at line {self.root(loaded).line}")
        # unsloth's kernels and offloaded checkpoints cost less, so a path without it is the worst case
        unsloth = bool(model_objs) and all(self.root(m).loader == "unsloth" for m in model_objs)
        self.unsloth_trained = unsloth

        self.model_fields(model_objs, trainer)
        self.peft_fields(model_objs, trainer)
        if trainer is not None:
            self.trainer_fields(trainer, args, model_objs, unsloth)
            classes = list(dict.fromkeys(t.cls for t in trained))
            v = self.fields.get("trainer")
            if len(classes) > 1 and v is not None and v.value in classes and not v.candidates:
                # several trainer classes trained on branches memlint cannot decide (a framework's stages): each is a
                # candidate, the last one the value; a recipe that names its stage settles it (extract/__init__.py)
                self.fields["trainer"] = replace(v, candidates=tuple(c for c in classes if c != v.value) + (v.value,))
        else:
            self.loop_fields(objs, model_objs)
        self.forced_gc = self.kbit_checkpointing(trainer) if trainer is not None else None
        self.gc_field(model_objs)
        self.fused_loss_field(model_objs)
        self.optimizer_in_bwd_field()
        self.offload_activations_field()
        self.float8_field()
        self.vision_fields()
        for why, names in self.maybe.items():
            self.notes.append(f"{', '.join(names)}: on some paths {why}; the plan shows the values memlint can read")
        self.visible_gpus_field(model_objs)
        self.one_gpu_runtimes(model_objs)
        plan = TrainingPlan(self.path, self.fields, tuple(dict.fromkeys(self.notes)), kind="notebook" if self.script.suffix == ".ipynb" else "python",
                            spawns=tuple(self.facts.spawns))
        if self.launch is not None:
            from memlint.extract.launched import apply_launcher

            plan = apply_launcher(plan, self.launch, self.script)
        return plan

    def one_gpu_runtimes(self, model_objs: list) -> None:
        """num_gpus where the run has one GPU: a notebook's one process (unless device_map="auto" spreads it over the
        machine's GPUs: unknown), and a model unsloth loads in one process (onto one device: unsloth's own device_map)."""
        if self.fields.get("num_gpus", Value(None, "unknown")).known:
            return
        if any(getattr(self.root(m), "loader", None) == "unsloth" for m in model_objs):
            self.fields["num_gpus"] = Value(1, "library-default", None, (
                "unsloth loads the model onto one GPU in one process (several GPUs take a launcher: torchrun, accelerate)",))
            self.notes[:] = [n for n in self.notes if not n.startswith("num_gpus is unknown")]
        elif self.script.suffix == ".ipynb" and not all_visible(self.fields.get("num_gpus")):
            self.fields["num_gpus"] = Value(1, "library-default", None, ("a notebook runs one process (one GPU)",))
        elif self.script.suffix == ".py" and self.launch is None and self.runs_alone():
            # a script named alone runs as `python script.py` (as `memlint -- python script.py` reads it): one process
            from memlint.library import api

            spread = (" (a Trainer that sees several GPUs replicates the model over them with DataParallel, each GPU "
                      "holding about this much: CUDA_VISIBLE_DEVICES=0 makes it one)"
                      if self.fields["trainer"].value in api.trainers() else "")
            self.fields["num_gpus"] = Value(1, "library-default", None, (
                f"read as `python` runs it: one process{spread}; name the launch command when a launcher starts it",))
            self.notes[:] = [n for n in self.notes if not n.startswith("num_gpus is unknown")]

    def runs_alone(self) -> bool:
        """Whether the script, run by plain `python`, is one process on one GPU: a trainer memlint reads that starts no
        processes itself, no sharding or data parallelism that needs a launcher, no spread over every visible GPU."""
        from memlint.extract.launched import _SELF_LAUNCHING

        trainer, shard = self.fields.get("trainer"), self.fields.get("distributed")
        return trainer is not None and trainer.known and trainer.value not in _SELF_LAUNCHING \
            and shard is not None and shard.value == "none" and not all_visible(self.fields.get("num_gpus")) \
            and not self.facts.spawns and not _made_for_a_launcher(self.script, self.source)

    @staticmethod
    def root(m: Obj) -> Obj:
        while m.base is not None:
            m = m.base
        return m

    def chain(self, m: Obj) -> list[Obj]:
        out = [m]
        while m.base is not None:
            m = m.base
            out.append(m)
        return out


# what a script written for a process launcher does itself (a process group, its rank, a DDP wrap, accelerate's or
# DeepSpeed's engine), and the launchers that run a script in several processes
_RANKED = re.compile(r"init_process_group|LOCAL_RANK|WORLD_SIZE|DistributedDataParallel|\bAccelerator\(|"
                     r"deepspeed\.initialize|fully_shard|FullyShardedDataParallel")
_LAUNCHERS = re.compile(r"torchrun|torch\.distributed\.(run|launch)|accelerate\s+launch|\bdeepspeed\b|\bsrun\b|"
                        r"\bmpirun\b|--nproc[_-]per[_-]node")


def _made_for_a_launcher(script: Path, source: str) -> bool:
    """Whether a script named alone (its text `source`) is written for a process launcher (it sets up its own rank or
    process group) or a launcher or README beside it runs it with one (torchrun, accelerate launch, deepspeed, srun):
    then plain `python` is not how it runs, and its GPUs are the launcher's."""
    from memlint import files
    from memlint.errors import MemlintError

    def text(p: Path) -> str:
        try:
            return files.read_text(p, 400_000, what="launcher scan") if files.allowed(p) and files.is_file(p) else ""
        except (OSError, UnicodeDecodeError, MemlintError):  # over a limit, unreadable: nothing learnt from it
            return ""

    if _RANKED.search(source):
        return True
    seen = 0
    for folder in [script.parent, *script.parent.parents][:3]:
        if not files.allowed(folder):
            break
        try:
            near = sorted(p for p in folder.iterdir() if p.suffix in (".sh", ".slurm", ".md") or p.name == "Makefile")
        except OSError:
            continue
        for p in near[:20]:
            seen += 1
            body = text(p).replace("\\\n", " ")  # a command continued over lines is one line
            if script.name in body and any(script.name in ln and _LAUNCHERS.search(ln) for ln in body.splitlines()):
                return True
        if seen >= 40:
            break
    return False


def _reason(why: str) -> str:
    """'optim comes from a config file given at run time' -> 'the value comes from ...'."""
    for marker in (" comes from ", " may be set by "):
        if marker in why:
            return "the value" + why[why.index(marker):]
    return why


def _eq(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return list(v)
    return v
