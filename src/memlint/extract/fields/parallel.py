"""Parallelism: DeepSpeed configs (read by the same reader as framework configs) and FSDP from the
training arguments, tensor and context parallelism (tp_plan, accelerate's ParallelismConfig), Lightning's
strategies, and the GPUs a single process spreads over (device_map="auto", DataParallel, mp.spawn).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memlint.extract.objects import LightningTrainer, Obj, Plugin, field_value
from memlint.extract.values import Alts, Const, DeviceCount, Dict, Unknown, flatten, to_python
from memlint.library import api
from memlint.plan import SOURCES, Span, Value
from memlint.extract.fields.convert import _alts, _int, _map_const


class ParallelFields:
    """distributed, offload, tp_size, cp_size, tp_stack, num_gpus."""

    def visible_gpus_field(self, models: list[Obj]) -> None:
        """num_gpus of a run that spreads over the machine's GPUs itself: from_pretrained(device_map="auto") in one
        process, DataParallel(model), mp.spawn(nprocs=torch.cuda.device_count()). A count the code gives (device_ids,
        nprocs=4, CUDA_VISIBLE_DEVICES in the launch) is the value; else it is unknown, every GPU the machine shows,
        which a launcher's own process count does not replace (extract/launched.py)."""
        cur = self.fields.get("num_gpus")
        if cur is not None and cur.known:
            return
        found: list = self.facts.gpu_counts[: self.facts.reached.get("gpu_counts", len(self.facts.gpu_counts))]
        remote = self.remote_gpus(models)
        if remote is not None:
            found = [remote]
        for m in models:
            dm = self.root(m).kwargs.get("device_map")
            if isinstance(dm, Const) and isinstance(dm.value, str) and dm.value in _SPREAD_MAPS:
                found.append(DeviceCount(f'from_pretrained(device_map="{dm.value}") (line {dm.line or self.root(m).line}) '
                                         "places the model's layers over every visible GPU", dm.line or self.root(m).line))
        known = [f for f in found if isinstance(f, Const)]
        if known:
            self.put("num_gpus", _alts(known), _int)
            return
        spread = next((f for f in found if isinstance(f, DeviceCount)), None)
        if spread is None:
            return
        why = f"{spread.why}: as many as the machine shows"
        self.fields["num_gpus"] = Value(None, "unknown", Span(self.path, spread.line) if spread.line else None, (why,),
                                        shape=(("gpus", "all-visible"),))
        self.notes.append(f"num_gpus is unknown ({why}); pass --assume num_gpus=N")

    def remote_gpus(self, models: list[Obj]) -> Any:
        """The GPUs of the decorated remote function (Modal's @app.function(gpu=...)) that built the trained model: the
        machine the run has, whatever spreads over it."""
        roots = {id(self.root(m)) for m in models}
        for gpus, first, end in self.facts.remote_runs:
            if any(id(o) in roots for o in self.facts.objects[first:end]):
                return gpus
        return None

    def parallelism_fields(self, configs: list) -> None:
        """accelerate's ParallelismConfig(tp_size=N, cp_size=N, ...) (accelerate >= 1.10), given to
        TrainingArguments(parallelism_config=...) or Accelerator(parallelism_config=...): the tensor- and
        context-parallel degrees; accelerate's TP applies the model's transformers tp_plan."""
        for pc in configs:
            for o in flatten(pc) if pc is not None else []:
                if not (isinstance(o, Plugin) and o.cls == "ParallelismConfig"):
                    continue
                for key in ("tp_size", "cp_size"):
                    if o.get(key) is not None:
                        self.put(key, o.get(key), _int, o.line)
                tp = self.fields.get("tp_size")
                if tp is not None and tp.known and tp.value != 1:
                    self.fields["tp_stack"] = Value("transformers", "library-default", None,
                                                    ("accelerate's ParallelismConfig(tp_size=...) applies the model's "
                                                     "tp_plan (transformers)",))
                return

    def tp_fields(self, models: list) -> None:
        """from_pretrained(..., tp_plan="auto"): transformers splits the model by its config's base_model_tp_plan
        over every rank of the launcher's world (tp_size "world"), or over `tp_size=` ranks when given."""
        for m in models:
            root = self.root(m)
            plan = root.kwargs.get("tp_plan")
            if not (isinstance(plan, Const) and plan.value not in (None, False)):
                continue
            size = root.kwargs.get("tp_size")
            if isinstance(size, Const) and isinstance(size.value, int) and not isinstance(size.value, bool):
                self.put("tp_size", size, _int, root.line)
            else:
                self.fields["tp_size"] = Value("world", plan.source if plan.source in SOURCES else "literal",
                                               Span(self.path, plan.line or root.line),
                                               (f"from_pretrained(tp_plan={plan.value!r}): the model split over every rank "
                                                "(WORLD_SIZE, the launcher's process count)",))
            self.fields["tp_stack"] = Value("transformers", "library-default", None,
                                            ("transformers' tp_plan: the config class's base_model_tp_plan",))
            return

    def distributed_from(self, arg_objs: list[Obj]) -> None:
        vals = []
        for a in arg_objs:
            ds = a.get("deepspeed")
            fsdp = a.get("fsdp")
            if ds is not None and not (isinstance(ds, Const) and ds.value is None):
                vals.extend(self.deepspeed(x) for x in flatten(ds))
            elif fsdp is not None and not (isinstance(fsdp, Const) and fsdp.value in ("", None, False)):
                vals.extend(_map_const(x, _fsdp) for x in flatten(fsdp))
            elif a.open:
                vals.append(Unknown("deepspeed/fsdp may be set by **kwargs"))
            else:
                d = field_value(a, "deepspeed")
                vals.append(d.with_value("none", "no deepspeed or fsdp") if isinstance(d, Const) else d)
        self.put("distributed", _alts(vals), line=arg_objs[0].line)
        if self.ds_offload:
            self.put("offload", _alts(self.ds_offload), line=arg_objs[0].line)

    def deepspeed(self, v: Any) -> Any:
        """distributed from TrainingArguments(deepspeed=...); the config's offload is kept for `offload`.

        Read by the same DeepSpeed reader as framework configs, so both agree on stage and offload."""
        facts, v = self.deepspeed_config(v)
        if facts is None:
            if isinstance(v, Const) and v.value == "deepspeed":
                self.ds_unread.append(v.chain[-1] if v.chain else "a DeepSpeed config memlint could not read")
            return v
        if facts.cpu_optimizer is not None:
            self.ds_cpu_optimizer.append(facts.cpu_optimizer)
        dist, off = facts.fields["distributed"], facts.fields["offload"]
        if off.span is not None:
            self.ds_offload.append(Const(off.value, off.source, off.span.line, off.chain, off.span.path))
        else:
            self.ds_offload.append(Const(off.value, off.source, v.line, v.chain + off.chain, v.file))
        if facts.optimizer is not None:
            self.ds_optimizer.append(facts.optimizer)
        if dist.value == "deepspeed" or dist.source == "library-default" and dist.value != "none":
            return v.with_value("deepspeed", "no integer zero_optimization.stage")
        return v.with_value(dist.value, dist.chain[0] if dist.chain else None)

    def deepspeed_config(self, v: Any) -> tuple[Any, Any]:
        """(LaunchFacts of the DeepSpeed config `v` names or builds, the value), or (None, why not)."""
        from memlint.extract.configs.document import Document, load_text
        from memlint.extract.configs.launchers import deepspeed_facts
        from memlint.files import read_text

        if isinstance(v, Dict):
            v = Const(_known_python(v), "literal", None, ("a DeepSpeed config dict built in the script",))
        if not isinstance(v, Const):
            return None, Unknown("a deepspeed config memlint could not follow") if not isinstance(v, Unknown) else v
        cfg = v.value
        if isinstance(cfg, str):
            found = self._find_file(cfg)
            if found is None:
                from memlint.extract.configs.readers import stage_hint

                if hint := stage_hint(cfg):
                    self.notes.append(f"distributed: {cfg} is not in the checkout{hint}")
                return None, v.with_value("deepspeed", f"{cfg}: not found next to the script, stage unknown")
            p, shown = found
            self.read_files.append(str(p))
            try:
                doc = load_text(read_text(p), shown, is_json=p.suffix.lower() in (".json", ".conf"))
            except (OSError, UnicodeDecodeError):
                return None, v.with_value("deepspeed", f"{cfg}: unreadable, stage unknown")
        elif isinstance(cfg, dict):
            doc = Document(self.path, cfg)
        else:
            return None, Unknown("a deepspeed value memlint could not read")
        if not doc.ok:
            return None, v.with_value("deepspeed", f"{cfg}: unreadable, stage unknown")
        return deepspeed_facts(doc), v

    def _find_file(self, ref: str) -> tuple[Path, str] | None:
        """A file the script names by a relative path: beside it, in the working directory, in the launch folder."""
        from memlint.files import is_file

        bases = [self.script.parent, Path.cwd()]
        if self.launch is not None and self.launch.cwd:
            bases.insert(1, Path.cwd() / self.launch.cwd)
        for base in bases:
            p = base / os.path.expanduser(ref)
            if is_file(p):
                shown = os.path.normpath(os.path.join(os.path.dirname(self.path), ref)) if base == self.script.parent \
                    else os.path.relpath(p)
                return p, shown
        if os.path.isabs(os.path.expanduser(ref)):
            # `--deepspeed $prefix/repo/scripts/zero3.json` (an empty or author's-machine prefix): the checkout's file
            # of the same longest tail, as the script itself is found
            from memlint.extract.launched import author_file

            found = author_file(ref, bases)
            if found is not None:
                self.notes.append(found[1])
                return found[0], os.path.relpath(found[0])
        # a folder renamed since the launcher was written: the checkout's one file of that name
        from memlint.extract.launched import checkout_namesake
        from memlint.files import checkout_root

        found = checkout_namesake(ref, checkout_root(self.script)) if is_file(self.script) else None
        if found is not None:  # (a script read from text, not from its checkout, has no checkout to search)
            self.notes.append(found[1])
            return found[0], os.path.relpath(found[0])
        return None

    def lightning_strategy(self, tr: LightningTrainer, line: int) -> None:
        strat = tr.get("strategy")
        vals, offload = [], []
        for s in flatten(strat) if strat is not None else [Const("auto", "library-default", line, ("strategy default 'auto'",))]:
            if isinstance(s, Const) and isinstance(s.value, str):
                name = api.lightning_strategy(s.value)
                vals.append(s.with_value(name) if name else Unknown(f"lightning strategy {s.value!r}"))
                if "offload" in s.value:
                    offload.append(s.with_value("params" if "stage_3" in s.value or "fsdp" in s.value else "optimizer"))
            elif isinstance(s, LightningTrainer) and s.cls == "lightning.DeepSpeedStrategy":
                st = s.get("stage")
                zero = s.get("zero_optimization")
                if st is None and "config" not in s.kwargs and (zero is None or isinstance(zero, Const) and zero.value is True):
                    # DeepSpeedStrategy(zero_optimization=True, stage=2) by default
                    st = Const(2, "library-default", s.line, ("DeepSpeedStrategy() stage default 2 (lightning's "
                                                              "strategies/deepspeed.py)",))
                vals.append(st.with_value(f"zero{st.value}") if isinstance(st, Const) and st.value in (1, 2, 3)
                            else Const("deepspeed", "literal", s.line, ("DeepSpeedStrategy",)))
                for key, what in (("offload_parameters", "params"), ("offload_optimizer", "optimizer")):
                    v = s.get(key)
                    if isinstance(v, Const) and v.value:
                        offload.append(v.with_value(what))
                        break
            elif isinstance(s, LightningTrainer) and s.cls == "lightning.FSDPStrategy":
                vals.append(Const("fsdp", "literal", s.line, ("FSDPStrategy",)))
                co = s.get("cpu_offload")
                if isinstance(co, Const) and co.value:
                    offload.append(co.with_value("params"))
            elif isinstance(s, LightningTrainer):
                vals.append(Const("none", "literal", s.line, (f"{s.cls.split('.')[-1]}",)))
            else:
                vals.append(s if isinstance(s, Unknown) else Unknown("a lightning strategy"))
        self.put("distributed", _alts(vals), line=line)
        if offload:
            self.put("offload", _alts(offload), line=line)


_SPREAD_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's device maps over every visible GPU


def _known_python(d: Dict) -> dict:
    """A dict's entries that are known, as plain data (unknown entries left out: the reader's defaults apply)."""
    out = {}
    for k, x in d.items.items():
        if isinstance(x, Alts) and k in d.last:
            # an item written under a test memlint cannot decide: its last write in the script's text, as the dict's
            # readers take one value (`if dynamic: ds["micro"] = 1 else: ds["micro"] = args.micro`)
            x = d.last[k]
        if isinstance(x, Dict):
            out[k] = _known_python(x)
            continue
        p = to_python(x)
        if isinstance(p, Const):
            out[k] = p.value
    return out


def _fsdp(v: Any) -> str:
    if v is True:
        return "fsdp"
    text = " ".join(v) if isinstance(v, (list, tuple)) else str(v)
    if "shard_grad_op" in text:
        return "fsdp_shard_grad_op"
    if "full_shard" in text or "hybrid_shard" in text or text.strip():
        return "fsdp"
    return "none"
