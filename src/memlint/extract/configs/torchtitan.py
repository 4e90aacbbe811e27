"""torchtitan job TOML files (`torchrun ... -m torchtitan.train --job.config_file train_configs/llama3_8b.toml`),
read with the standard library's tomllib as torchtitan's JobConfig reads them (torchtitan <= 0.2.2; later
releases replaced the TOML files with Python config registries).

torchtitan trains every parameter of its own model (name + flavor, mapped to the catalog model of the same
architecture), sharded by FSDP2 over `data_parallel_shard_degree` ranks with tensor, context and pipeline
parallelism beside it, in `mixed_precision_param` with fp32 sharded parameters; activation checkpointing is
`full`, `selective` by layers (selective_ac_option "N") or by ops ("op"). Field names that changed between
releases are data (frameworks.json "torchtitan" "fields"): the first name the file uses is read.
"""

from __future__ import annotations

from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad
from memlint.extract.configs.readers import FrameworkReader
from memlint.library.versions import in_range, installed_version
from memlint.plan import Value
from memlint.vocab import ascii_digits


# torchtitan's JobConfig sections beside [model] flavor (a job TOML names its model by name + flavor)
SECTIONS = {"job", "parallelism", "activation_checkpoint", "lr_scheduler", "float8", "quantize", "compile", "checkpoint"}


def job_sections(top_keys: tuple[str, ...]) -> bool:
    """A TOML file's tables look like a torchtitan job file's (also when it does not parse)."""
    keys = set(top_keys)
    return {"model", "training"} <= keys and bool(keys & SECTIONS)


class Torchtitan(FrameworkReader):
    kind = "torchtitan"
    rank = 40

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return "model.flavor" in keys and "training" in keys and bool(keys & SECTIONS)

    @staticmethod
    def toml_tables(keys: tuple[str, ...]) -> bool:
        return job_sections(keys)

    def read(self) -> None:
        self.facts = frameworks.framework(self.kind)
        self.old_layout = ""  # the first key of the pre-785c34c99 layout the file names ([training] tensor_parallel_degree ...)
        self._model()
        self._training()
        self._parallelism()
        self._checkpointing()
        self._optimizer()
        self._float8()
        self._compile()
        self.trainer(*frameworks.substitution(self.kind, "trainer"))
        for name in ("method", "padding"):
            self.lib(name, *frameworks.substitution(self.kind, name))
        self.lib("packing", True, frameworks.substitution(self.kind, "padding")[1])
        self.lib("group_by_length", False, "torchtitan's dataloader does not group by length")
        self.lib("fused_loss", False, "torchtitan's cross-entropy runs on the full logits (loss_parallel splits them under TP)")
        self._check_keys()

    # ---- helpers -------------------------------------------------------------------------------

    def _default(self, key: str) -> Any:
        d = frameworks.default(self.kind, key)
        assert d is not None, key
        return d

    def _scalar(self, name: str | None, section: str, key: str, kind: type) -> Any:
        """The file's value at [section] key (literal), else torchtitan's default; None when of a wrong type."""
        v = self.doc.get(section, key)
        if v is None:
            d = self._default(f"{section}.{key}")
            if name:
                self.lib(name, d.value, d.why)
            return d.value
        if kind is int:
            try:
                n = self.int_at(section, key)
            except Bad:
                if name:
                    self.unknown(name, f"{section}.{key} is not an integer", section, key)
                return None
            if name:
                self.lit(name, n, section, key)
            return n
        if not isinstance(v, kind):
            self.bad(f"{section}.{key} should be a {kind.__name__}, not {v!r}", section, key)
            if name:
                self.unknown(name, f"{section}.{key} is not a {kind.__name__}", section, key)
            return None
        if name:
            self.lit(name, v, section, key)
        return v

    def _renamed(self, field: str) -> tuple[tuple[str, ...] | None, dict]:
        """The first of a renamed field's names the file uses (as a key path), and its data entry; a name of an
        older torchtitan than the installed one is said."""
        entries = self.facts["fields"][field]
        for e in entries:
            path = tuple(e["key"].split("."))
            if self.doc.has(*path) or self.doc.get(*path) is not None:
                version = installed_version(self.kind)
                if version is not None and not in_range(version, e["versions"]):
                    self.notes.append(f"{e['key']} is read by torchtitan {e['versions']}, not by the installed {version}: {e['ref']}")
                return path, e
        return None, entries[0]

    # ---- sections ------------------------------------------------------------------------------

    def _model(self) -> None:
        name = self._scalar(None, "model", "name", str)
        flavor = self._scalar(None, "model", "flavor", str)
        where = ("model", "flavor") if self.doc.has("model", "flavor") else ("model", "name") if self.doc.has("model", "name") else ()
        models = self.facts["models"]
        chain = (f"[model] name = {name!r}, flavor = {flavor!r}", models["_doc"])
        if not isinstance(name, str) or not isinstance(flavor, str):
            self.unknown("model_id", "[model] name or flavor is not a string", *where)
        elif name not in models or flavor not in models[name]:
            self.unknown("model_id", f"torchtitan model {name} flavor {flavor} is not mapped to a catalog model", *where)
        elif models[name][flavor] is None:
            self.unknown("model_id", f"torchtitan {name} flavor {flavor} is a test-sized model with no checkpoint in the "
                                     "catalog", *where)
        else:
            span = self.doc.span(*where) if where else None
            self.fields["model_id"] = Value(models[name][flavor], "literal" if where else "library-default", span, chain)
        attn, why = frameworks.substitution(self.kind, "attn_implementation")
        if isinstance(flavor, str) and "flex" in flavor:
            self.lit("attn_implementation", "flex_attention", *where, chain=(f"flavor {flavor!r}: use_flex_attn", why))
        else:
            self.lib("attn_implementation", attn, why + ("; the varlen flavors' attention counted like SDPA's flash kernel"
                                                         if isinstance(flavor, str) and "varlen" in flavor else ""))

    def _training(self) -> None:
        path, entry = self._renamed("local_batch_size")
        if path is None:
            d = self._default("training.local_batch_size")
            self.lib("per_device_batch", d.value, d.why)
            self.local = d.value
        else:
            try:
                self.local = self.int_at(*path)
                self.lit("per_device_batch", self.local, *path, chain=(f"{'.'.join(path)}: {self.local!r}", entry["ref"]))
            except Bad:
                self.local = None
                self.unknown("per_device_batch", f"{'.'.join(path)} is not an integer", *path)
        self._scalar("max_length", "training", "seq_len", int)
        self.mp = self._scalar(None, "training", "mixed_precision_param", str)
        if self.doc.get("training", "enable_cpu_offload") is True:
            self.lit("offload", "params", "training", "enable_cpu_offload",
                     chain=("training.enable_cpu_offload: FSDP2 CPUOffloadPolicy (parameters, gradients, optimizer on CPU)",))
        else:
            self.lib("offload", "none", "training.enable_cpu_offload false (torchtitan's default)")

    def _degree(self, name: str | None, key: str) -> Any:
        """A parallel degree: [parallelism] key, or the [training]/[experimental] key of torchtitan before 785c34c99."""
        path, _entry = self._renamed(key)
        if path is not None and path[0] != "parallelism":
            self.old_layout = ".".join(path)
        return self._scalar(name, *(path or ("parallelism", key)), int)

    def _parallelism(self) -> None:
        s = "parallelism"
        shard = self._degree(None, "data_parallel_shard_degree")
        rep = self._degree(None, "data_parallel_replicate_degree")
        tp = self._degree("tp_size", "tensor_parallel_degree")
        cp = self._degree("cp_size", "context_parallel_degree")
        pp = self._degree(None, "pipeline_parallel_degree")
        if tp and tp > 1:
            self.lib("sequence_parallel", True, "torchtitan's apply_tp shards norms and the residual stream by the sequence")
            self.lib("tp_stack", "torchtitan", "torchtitan's own TP plan (models/llama3/infra/parallelize.py apply_tp)")
        shard_key = self._renamed("data_parallel_shard_degree")[0] or (s, "data_parallel_shard_degree")
        where = shard_key if self.doc.has(*shard_key) else ()
        if shard == 1 and isinstance(cp, int) and cp > 1:
            # FSDP's mesh dimension is dp_shard × cp (parallel_dims.py): the context-parallel ranks shard the states
            self.fields["distributed"] = Value("fsdp", "literal" if where else "library-default", self.doc.span(*where) if where else None,
                                               (f"data_parallel_shard_degree = 1 with context_parallel_degree = {cp}: FSDP2 "
                                                f"fully_shard over the dp_shard × cp = {cp} ranks",))
        elif shard == 1:
            self.fields["distributed"] = Value("none", "literal" if where else "library-default", self.doc.span(*where) if where else None,
                                               ("data_parallel_shard_degree = 1: no FSDP (each data-parallel rank holds the whole model)",))
        elif isinstance(shard, int):
            self.fields["distributed"] = Value("fsdp", "literal" if where else "library-default", self.doc.span(*where) if where else None,
                                               (f"data_parallel_shard_degree = {shard}: FSDP2 fully_shard over "
                                                f"{'every rank left over' if shard == -1 else f'{shard} ranks'}",))
        if pp and pp > 1:
            self.notes.append(f"pipeline_parallel_degree = {pp}: pipeline parallelism is not modelled; estimated as if one "
                              "stage held every layer (an upper bound per rank)")
        if isinstance(shard, int) and shard > 0 and all(isinstance(x, int) and x > 0 for x in (rep, tp, cp)):
            n = shard * rep * tp * cp
            self.fields["num_gpus"] = Value(n, "literal", self.doc.span(*where) if where else None,
                                            (f"data_parallel_replicate {rep} × shard {shard} × tensor {tp} × context {cp}"
                                             + (f" (one of {pp} pipeline stages)" if pp and pp > 1 else ""),))
        elif shard == -1:
            self.notes.append("data_parallel_shard_degree = -1 shards over every rank torchrun starts, which the config does "
                              "not say: the launch command's (torchrun --nproc_per_node × --nnodes) when memlint reads one, "
                              "else pass --gpus N (or --assume gpus=N)")
        self._accumulation(shard, rep)
        self._precision(shard != 1 or (isinstance(cp, int) and cp > 1), tp, pp)

    def _precision(self, fsdp: bool, tp: Any, pp: Any) -> None:
        """torchtitan's mixed precision (distributed/utils.py maybe_enable_amp, parallelize's fully_shard): under
        FSDP (shard degree other than 1, or context parallelism) MixedPrecisionPolicy(param_dtype=mixed_precision_param,
        reduce_dtype=float32) over fp32 sharded parameters, no autocast; without FSDP, autocast for DDP or one device,
        and no mixed precision at all under TP or PP."""
        mp, where = self.mp, ("training", "mixed_precision_param")
        if mp not in ("bfloat16", "float32"):
            if mp is not None:
                self.bad(f"training.mixed_precision_param should be bfloat16 or float32, not {mp!r}", *where)
            self.unknown("precision", "training.mixed_precision_param", *where)
            self.lib("torch_dtype", "fp32", frameworks.substitution(self.kind, "torch_dtype")[1])
            return
        if mp == "float32":
            prec, dtype, how = "fp32", "fp32", "fp32 throughout"
        elif fsdp:
            # fp32 shard + bf16 compute: counted as bf16 weights with an fp32 master copy (the same 4 + 4 + 8 B per
            # sharded parameter as fp32 weights, fp32 gradients and AdamW), no autocast copies
            prec, dtype, how = "master-fp32", "bf16", ("FSDP2 MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) "
                                                       "over fp32 sharded parameters, no autocast (counted as bf16 weights "
                                                       "+ an fp32 master copy: the same bytes per sharded parameter)")
        elif (isinstance(tp, int) and tp > 1) or (isinstance(pp, int) and pp > 1):
            prec, dtype, how = "fp32", "fp32", "without FSDP, TP/PP disable mixed precision (maybe_enable_amp)"
        else:
            prec, dtype, how = "amp-bf16", "fp32", "without FSDP: torch.autocast(bfloat16) over fp32 weights (DDP or one device)"
        chain = (f"mixed_precision_param = {mp!r}: {how}",)
        if self.doc.has(*where):
            self.lit("precision", prec, *where, chain=chain)
        else:
            self.lib("precision", prec, self._default("training.mixed_precision_param").why + "; " + how)
        self.lib("torch_dtype", dtype, frameworks.substitution(self.kind, "torch_dtype")[1] + "; " + how)

    def _accumulation(self, shard: Any, rep: Any) -> None:
        g = self.doc.get("training", "global_batch_size")
        if not isinstance(g, int) or isinstance(g, bool) or g <= 0:
            self.lib("grad_accum", 1, "training.global_batch_size -1 (torchtitan's default): local_batch_size × data-parallel "
                                      "ranks, no accumulation")
            return
        if isinstance(shard, int) and shard > 0 and isinstance(rep, int) and rep > 0 and isinstance(self.local, int) and self.local > 0:
            per_step = self.local * shard * rep
            if g % per_step:
                self.bad(f"training.global_batch_size {g} is not a multiple of local_batch_size × data-parallel ranks "
                         f"({per_step}): torchtitan refuses it", "training", "global_batch_size")
                self.unknown("grad_accum", "global_batch_size does not divide", "training", "global_batch_size")
                return
            self.lit("grad_accum", g // per_step, "training", "global_batch_size",
                     chain=(f"global_batch_size {g} / (local_batch_size {self.local} × {shard * rep} data-parallel ranks)",))
        else:
            self.unknown("grad_accum", "training.global_batch_size over an unknown number of data-parallel ranks",
                         "training", "global_batch_size")

    def _checkpointing(self) -> None:
        s = "activation_checkpoint"
        mode = self._scalar(None, s, "mode", str)
        opt = self._scalar(None, s, "selective_ac_option", str)
        where = (s, "mode") if self.doc.has(s, "mode") else ()
        src = "literal" if where else "library-default"
        span = self.doc.span(*where) if where else None
        if mode == "none":
            self.fields["gradient_checkpointing"] = Value(False, src, span, ("activation_checkpoint.mode = 'none'",))
        elif mode == "full":
            self.fields["gradient_checkpointing"] = Value(True, src, span, ("activation_checkpoint.mode = 'full': every "
                                                                            "transformer block recomputed",))
        elif mode == "selective" and opt == "op":
            self.fields["gradient_checkpointing"] = Value(True, src, span, ("mode = 'selective', selective_ac_option = 'op'",))
            self.fields["recompute_policy"] = Value("op-sac", "literal" if self.doc.has(s, "selective_ac_option") else "library-default",
                                                    self.doc.span(s, "selective_ac_option"),
                                                    ("selective_ac_option = 'op': torchtitan's op-level SAC (every second mm, "
                                                     "the attention outputs kept)",))
        elif mode == "selective" and isinstance(opt, str) and ascii_digits(opt):
            n = int(opt)
            self.fields["gradient_checkpointing"] = Value(True, src, span, (f"mode = 'selective', selective_ac_option = {opt!r}",))
            # torchtitan's _apply_layer_sac: a counter from 1 wraps block i when i % n == 0; n = 0 wraps every block
            self.fields["recompute_every"] = Value(max(n, 1), "literal" if self.doc.has(s, "selective_ac_option") else "library-default",
                                                   self.doc.span(s, "selective_ac_option"),
                                                   (f"selective_ac_option = {opt!r}: every {max(n, 1)}th transformer block "
                                                    "checkpointed (torchtitan _apply_layer_sac)",))
        elif mode == "memory_budget":
            self.unknown("gradient_checkpointing", "activation_checkpoint.mode = 'memory_budget' lets the compiler's "
                                                   "partitioner choose what to save", *where)
        else:
            if mode == "selective":
                self.bad(f"activation_checkpoint.selective_ac_option should be 'op' or a positive integer, not {opt!r} "
                         "(torchtitan raises ValueError)", s, "selective_ac_option")
            else:
                self.bad(f"activation_checkpoint.mode should be none, selective or full, not {mode!r}", *where)
            self.unknown("gradient_checkpointing", f"activation_checkpoint mode {mode!r}, option {opt!r}", *where)

    def _optimizer(self) -> None:
        name = self._scalar(None, "optimizer", "name", str)
        path, entry = self._renamed("optimizer_implementation")
        if path == ("optimizer", "fused"):  # torchtitan before 6e4988550: a flag, foreach when false
            flag = self.doc.get(*path)
            impl = entry["values"][str(flag).lower()] if isinstance(flag, bool) else None
            how = f"[optimizer] fused = {flag!r} ({entry['ref']})"
        elif path is None and self.old_layout:
            impl = self.facts["old_layout"]["implementation"]
            how = f"no [optimizer] implementation in a file of the older layout ({self.old_layout}): " + self.facts["old_layout"]["_doc"]
        else:
            impl = self._scalar(None, "optimizer", "implementation", str)
            how = f"implementation = {impl!r}"
        table = self.facts["optimizers"]
        where = ("optimizer", "name") if self.doc.has("optimizer", "name") else ()
        if name in table and impl in table[name]:
            chain = (f"[optimizer] name = {name!r}, {how}", table["_doc"])
            self.fields["optimizer"] = Value(table[name][impl], "literal" if where else "library-default",
                                             self.doc.span(*where) if where else None, chain)
        else:
            self.bad(f"optimizer {name!r} with implementation {impl!r}: torchtitan builds only Adam and AdamW "
                     "(fused, foreach or for-loop)", *where)
            self.unknown("optimizer", f"optimizer {name!r} / {impl!r}", *where)
        if self.doc.get("optimizer", "early_step_in_backward") is True:
            self.lit("optimizer_in_bwd", True, "optimizer", "early_step_in_backward")

    def _float8(self) -> None:
        conv = self.doc.get("model", "converters")
        if isinstance(conv, str):
            conv = [c.strip() for c in conv.split(",")]
        conv = conv if isinstance(conv, list) else []
        path, entry = self._renamed("float8")
        named = next((e for e in self.facts["fields"]["float8"] if e["converter"] in conv), None)
        old, old_entry = self._renamed("float8_linear")
        if named is None and old is not None:  # [float8] enable_float8_linear (before the converters)
            on = self.doc.get(*old) is True
            self.lit("float8_training", "layers" if on else "none", *old,
                     chain=(f"{'.'.join(old)} = {self.doc.get(*old)!r}: {old_entry['ref']}",
                            *(("convert_to_float8_training(module_filter_fn=fqn != 'output'): lm_head kept in high precision",)
                              if on else ())))
            if on:
                self._float8_gather(old[:-1])
            return
        if named is None:
            self.lib("float8_training", "none", "no float8 converter in [model] converters" +
                     (f" ([{entry['key']}] configures it only)" if path else ""))
            return
        section = tuple(named["key"].split("."))
        if path is not None and path != section:
            # a converter name of one release beside the section of another (torchtitan v0.2.2's own llama3_405b.toml:
            # converters = ["float8"] with [quantize.linear.float8]): the registry has no such name
            self.bad(f"model.converters names {named['converter']!r} (torchtitan {named['versions']}) but the file configures "
                     f"[{'.'.join(path)}] (torchtitan {entry['versions']}): that release registers the converter as "
                     f"{entry['converter']!r} and fails on {named['converter']!r} (KeyError in ModelConvertersContainer)",
                     "model", "converters")
            section = path
        fq = self.doc.get(*section, "filter_fqns")
        fq = fq if isinstance(fq, list) else self._default("quantize.linear.float8.filter_fqns").value
        scope = "layers" if "output" in fq else "all"
        self._float8_gather(section)
        self.lit("float8_training", scope, "model", "converters",
                 chain=(f"model.converters {conv!r}: torchao Float8Linear ({named['ref']})",
                        f"filter_fqns {fq!r}: " + ("lm_head ('output') kept in high precision" if scope == "layers" else
                                                   "every linear converted")))

    def _float8_gather(self, section: tuple[str, ...]) -> None:
        """enable_fsdp_float8_all_gather in the float8 section (torchtitan's default: false)."""
        v = self.doc.get(*section, "enable_fsdp_float8_all_gather")
        if isinstance(v, bool):
            self.lit("float8_all_gather", v, *section, "enable_fsdp_float8_all_gather",
                     chain=(f"{'.'.join(section)}.enable_fsdp_float8_all_gather = {str(v).lower()}: FSDP2 all-gathers the "
                            "Float8Linear weights in float8",))
        else:
            self.lib("float8_all_gather", False, f"{'.'.join(section)}.enable_fsdp_float8_all_gather false (torchtitan's default)")

    def _compile(self) -> None:
        path, entry = self._renamed("compile")
        if path is None:
            return
        v = self.doc.get(*path)
        if v is True:
            self.notes.append(f"{'.'.join(path)} = true: torch.compile fuses elementwise ops and may save fewer "
                              "activations than the eager modules estimated; " + self.facts["compile_note"])
            if path == ("compile", "enable"):  # [compile] components, ["model", "loss"] by default (v0.2.x Compile)
                comps = self.doc.get("compile", "components")
                comps = comps if isinstance(comps, list) else ["model", "loss"]
                self.lit("compiled_loss", "loss" in comps, *path,
                         chain=(f"[compile] enable = true, components {comps!r}",))
            else:  # before v0.2.0 train.py left the loss uncompiled (its torch.compile(loss_fn) commented out)
                self.lit("compiled_loss", False, *path, chain=("training.compile: the model's blocks only",))

    def _check_keys(self) -> None:
        fw = self.facts
        self.checked_keys()
        for section, known in fw["section_keys"].items():
            prefix = tuple(section.split("."))
            if isinstance(self.doc.get(*prefix), dict):
                sub = {k.split(".")[len(prefix)] for k in fw["section_keys"] if k.startswith(section + ".")}
                self.checked_keys(set(known) | sub, {}, prefix, f"[{section}] ")
