"""DeepSpeed JSON and accelerate config YAML: how a run is sharded, offloaded and launched.

Read on their own (a plan of kind "deepspeed"/"accelerate"), followed from a framework config
or a script's TrainingArguments(deepspeed=...), or merged onto a script's plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad, Reader, near, shown_near
from memlint.extract.configs.document import Document, load_text
from memlint.files import read_text
from memlint.plan import Diagnostic, Span, Value

_OFFLOAD_DEVICES = ("cpu", "nvme")


@dataclass
class LaunchFacts:
    """What a launcher config says. `fields` override a script's plan; `soft` fill only what the
    script leaves unknown or to a library default ("auto" values are never here)."""

    fields: dict[str, Value] = field(default_factory=dict)
    soft: dict[str, Value] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    optimizer: Value | None = None   # a DeepSpeed config's optimizer section: the engine's own optimizer
    # the config offloads the optimizer and has no optimizer section: accelerate's prepare swaps a client optimizer
    # for DeepSpeed's CPU Adam (library.api.deepspeed_cpu_optimizer); the value says where the config says so
    cpu_optimizer: Value | None = None
    # train_batch_size (the global batch over every rank and micro-batch), when the config gives a number
    train_batch: Value | None = None


def read_json_doc(shown: str, path: Path) -> Document:
    return load_text(read_text(path), shown, is_json=True)


def find_deepspeed(config: Path, shown_config: str, ref: str) -> tuple[Document | None, str]:
    """The DeepSpeed JSON a config names (relative to the config, then the working directory);
    `shown_config` is how the config is named in reports, and the JSON is named the same way."""
    from memlint.files import is_file

    for cand, rel in near(config, ref):
        if is_file(cand):
            shown = shown_near(shown_config, rel) if rel else str(cand)
            try:
                return read_json_doc(shown, cand), shown
            except (OSError, UnicodeDecodeError) as exc:
                return None, f"{ref}: unreadable ({exc.__class__.__name__})"
    return None, f"{ref}: not found next to {shown_config}"


def _spans(data: object, span: Span | None, prefix: tuple = ()) -> dict[tuple, Span]:
    out: dict[tuple, Span] = {}
    if isinstance(data, dict) and span is not None:
        for k, v in data.items():
            out[prefix + (k,)] = span
            out.update(_spans(v, span, prefix + (k,)))
    return out


def shipped_deepspeed(kind: str, ref: str, config: Path, span: Span | None) -> tuple[Document | None, str]:
    """A DeepSpeed file the framework of kind `kind` ships, which its config names by its path in the framework's own
    repository (LLaMA-Factory's examples/deepspeed/ds_z3_offload_config.json, axolotl's deepspeed_configs/zero2.json)
    and the checkout lacks: its memory-relevant sections as the framework shipped them when the config was last
    committed (data/framework_deepspeed.json; the newest without git history), each key placed at `span` (the config's
    `deepspeed:` key). (None, "") when the framework ships no such file, or did not yet at that date."""
    from memlint.data import load
    from memlint.library.dated import last_change

    fw = load("framework_deepspeed.json")["frameworks"].get(kind)
    if fw is None:
        return None, ""
    name = re.sub(r"^(?:\./)+", "", ref.strip().replace("\\", "/"))
    hits = [f for f in fw["files"] if name == f or name.endswith("/" + f)]
    if not hits:  # the file's name alone, when one shipped file has it
        hits = [f for f in fw["files"] if f.rsplit("/", 1)[-1] == name.rsplit("/", 1)[-1]]
    if len(hits) != 1:
        return None, ""
    change = last_change(str(config))
    date = change[0] if change else None
    versions = fw["files"][hits[0]]
    if date is None:
        version = versions[-1]
    else:
        version = next((v for v in versions if v["since"] <= date < v.get("until", "9999")), None)
        if version is None:
            return None, ""
    when = f"as of the config's {change[1]} ({date})" if change else "its newest version (nothing dates the config)"
    shown = f"{fw['repository']}:{hits[0]}"
    doc = Document(shown, version["config"], _spans(version["config"], span))
    return doc, f"{ref} is not in this checkout: read as the file {kind} ships ({version['ref']}), {when}"


_DEEPSPEED = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"}
_ACCELERATE = {"distributed_type", "compute_environment"}


class _DS(Reader):
    kind = "deepspeed"
    rank, launcher = 120, True
    alone = "a DeepSpeed config alone names no model: check the script or framework config that uses it"

    @staticmethod
    def facts(doc: Document, file: Path | None = None) -> LaunchFacts:
        return deepspeed_facts(doc)

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return bool(keys & _DEEPSPEED)

    @staticmethod
    def named(name: str) -> bool:
        lower = name.lower()
        return lower.endswith(".json") and any(w in lower for w in ("deepspeed", "ds_config", "zero"))


def _batch_facts(r: Reader, doc: Document, facts: LaunchFacts) -> None:
    """The micro-batch and accumulation a DeepSpeed config sets (soft: the training arguments' win where they give
    them), and its global batch (train_batch_size) for an engine to derive the accumulation from."""
    for name, key in (("per_device_batch", "train_micro_batch_size_per_gpu"), ("grad_accum", "gradient_accumulation_steps")):
        raw = doc.get(key)
        if raw == "auto":
            facts.notes.append(f"{key}: \"auto\" takes the training arguments' value")
            continue
        try:
            v = r.int_at(key)
        except Bad:
            continue
        if v is not None:
            facts.soft[name] = Value(v, "literal", doc.span(key), (f"{key}: {v}",))

    raw_global = doc.get("train_batch_size")
    if raw_global != "auto":
        try:
            n = r.int_at("train_batch_size")
        except Bad:
            n = None
        if n is not None:
            facts.train_batch = Value(n, "literal", doc.span("train_batch_size"), (f"train_batch_size: {n}",))


def deepspeed_facts(doc: Document) -> LaunchFacts:
    """Stage, offload, micro-batch, accumulation and precision from a DeepSpeed config."""
    r = _DS(doc, Path(doc.path))
    facts = LaunchFacts()
    zero = doc.get("zero_optimization")
    stage = None
    if isinstance(zero, dict):
        try:
            stage = r.int_at("zero_optimization", "stage")
        except Bad:
            stage = None
        if stage is not None and stage not in (0, 1, 2, 3):
            r.bad(f"zero_optimization.stage should be 0, 1, 2 or 3, not {stage}", "zero_optimization", "stage")
            stage = None
    if stage is None and isinstance(zero, dict) and "stage" in zero:
        facts.fields["distributed"] = Value("deepspeed", "literal", doc.span("zero_optimization", "stage"), ("zero_optimization.stage unreadable: stage unknown",))
    elif stage is None:
        d = frameworks.default("deepspeed", "zero_optimization.stage")
        facts.fields["distributed"] = Value("none", "library-default", None, (d.why if d else "no zero_optimization: DeepSpeed without ZeRO",))
    else:
        value = f"zero{stage}" if stage else "none"
        facts.fields["distributed"] = Value(value, "literal", doc.span("zero_optimization", "stage"), (f"zero_optimization.stage: {stage}",))

    deepspeed_tp(doc, facts)
    offload, span, why = "none", None, "no offload_optimizer / offload_param device"
    if isinstance(zero, dict):
        legacy = zero.get("cpu_offload") is True
        opt = zero.get("offload_optimizer")
        par = zero.get("offload_param")
        opt_dev = str(opt.get("device", "none")).lower() if isinstance(opt, dict) else "none"
        par_dev = str(par.get("device", "none")).lower() if isinstance(par, dict) else "none"
        if par_dev in _OFFLOAD_DEVICES:
            offload, span, why = "params", doc.span("zero_optimization", "offload_param", "device"), f"offload_param.device: {par_dev}"
        elif opt_dev in _OFFLOAD_DEVICES:
            offload, span, why = "optimizer", doc.span("zero_optimization", "offload_optimizer", "device"), f"offload_optimizer.device: {opt_dev}"
        elif legacy:
            offload, span, why = "optimizer", doc.span("zero_optimization", "cpu_offload"), "cpu_offload: true (DeepSpeed's older spelling)"
        if offload != "none" and stage in (None, 0, 1) and offload == "params":
            r.bad("offload_param needs ZeRO stage 3; DeepSpeed ignores it below", "zero_optimization", "offload_param")
        if opt_dev in _OFFLOAD_DEVICES and doc.get("optimizer") is None and doc.get("zero_force_ds_cpu_optimizer") is not False:
            facts.cpu_optimizer = Value("deepspeed_adam", "literal", doc.span("zero_optimization", "offload_optimizer", "device"),
                                        (f"zero_optimization.offload_optimizer.device: {opt_dev}",))
    facts.fields["offload"] = Value(offload, "literal" if span else "library-default", span, (why,))

    _batch_facts(r, doc, facts)
    for key, prec in (("fp16", "amp-fp16"), ("bf16", "amp-bf16"), ("bfloat16", "amp-bf16")):
        enabled = doc.get(key, "enabled")
        if enabled is True:
            facts.soft["precision"] = Value(prec, "literal", doc.span(key, "enabled"), (f"{key}.enabled: true",))
            break
        if enabled == "auto":
            facts.notes.append(f"{key}.enabled: \"auto\" follows the training arguments' {key}")
    opt_type = doc.get("optimizer", "type")
    if isinstance(opt_type, str):
        from memlint.library.api import deepspeed_optimizer

        name = deepspeed_optimizer(opt_type)
        if name is not None:  # the engine builds this optimizer (and HF Trainer defers to it)
            facts.optimizer = Value(name, "literal", doc.span("optimizer", "type"), (f"optimizer.type: {opt_type}",))
    r.checked_keys()
    r.checked_keys(frameworks.framework("deepspeed")["zero_keys"], {}, ("zero_optimization",), "zero_optimization ")
    facts.diagnostics.extend(r.diagnostics)
    facts.notes.extend(r.notes)
    return facts


class _Acc(Reader):
    kind = "accelerate"
    rank, launcher = 130, True
    alone = "an accelerate config alone names no model: use it with a script (--config)"

    @staticmethod
    def facts(doc: Document, file: Path | None = None) -> LaunchFacts:
        return accelerate_facts(doc, file)

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        return bool(keys & _ACCELERATE)

    @staticmethod
    def named(name: str) -> bool:
        lower = name.lower()
        return "accelerate" in lower and not lower.endswith(".json")


def accelerate_facts(doc: Document, file: Path | None = None) -> LaunchFacts:
    """Process count, sharding, offload and precision from an `accelerate config` YAML
    (`file`: where it lies, when its name in reports is not a path from here)."""
    r = _Acc(doc, file or Path(doc.path))
    facts = LaunchFacts()
    try:
        n = r.int_at("num_processes")
    except Bad:
        n = None
    if n is not None:
        facts.fields["num_gpus"] = Value(n, "literal", doc.span("num_processes"), (f"num_processes: {n}",))
    elif not doc.has("num_processes"):
        d = frameworks.default("accelerate", "num_processes")
        facts.fields["num_gpus"] = Value(d.value, "library-default", None, (d.why,))
    dtype = str(doc.get("distributed_type") or "NO").upper()
    span = doc.span("distributed_type")
    if dtype == "DEEPSPEED":
        _accelerate_deepspeed(r, doc, facts, span)
    elif dtype == "FSDP":
        _accelerate_fsdp(r, doc, facts)
    elif dtype in ("MULTI_GPU", "NO", "MULTI_CPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU", "MULTI_MUSA", "MULTI_HPU"):
        why = "distributed_type: NO (one process)" if dtype == "NO" else f"distributed_type: {dtype} (DDP: every rank holds the whole model)"
        facts.fields["distributed"] = Value("none", "literal" if span else "library-default", span, (why,))
        facts.fields["offload"] = Value("none", "library-default", None, ("no offload without DeepSpeed or FSDP",))
    else:
        facts.fields["distributed"] = Value(None, "unknown", span, (f"distributed_type {dtype} is not one memlint models",))
        facts.notes.append(f"distributed is unknown (distributed_type {dtype}); pass --assume distributed=...")
    _accelerate_parallelism(doc, facts)
    _accelerate_precision(r, doc, facts)
    r.checked_keys()
    facts.diagnostics.extend(r.diagnostics)
    facts.notes.extend(r.notes)
    return facts


_ACCELERATE_DS_KEYS = (
    "zero_stage", "offload_optimizer_device", "offload_param_device", "offload_optimizer_nvme_path", "offload_param_nvme_path",
    "gradient_accumulation_steps", "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model", "deepspeed_config_file",
    "deepspeed_multinode_launcher", "deepspeed_hostfile", "deepspeed_exclusion_filter", "deepspeed_inclusion_filter",
    "deepspeed_moe_layer_cls_names",
)


def _accelerate_deepspeed(r: Reader, doc: Document, facts: LaunchFacts, span: Span | None) -> None:
    """distributed_type: DEEPSPEED: its deepspeed_config_file, else the inline deepspeed_config."""
    ds = doc.get("deepspeed_config") or {}
    ref = ds.get("deepspeed_config_file") if isinstance(ds, dict) else None
    if isinstance(ref, str) and ref.lower() != "none":
        inner, shown = find_deepspeed(r.file, doc.path, ref)
        if inner is None:
            facts.fields["distributed"] = Value("deepspeed", "literal", doc.span("deepspeed_config", "deepspeed_config_file"), (f"{shown}: stage unknown",))
        else:
            sub = deepspeed_facts(inner)
            facts.cpu_optimizer = sub.cpu_optimizer
            facts.optimizer = sub.optimizer
            facts.fields.update(sub.fields)
            facts.soft.update(sub.soft)
            facts.notes.extend(sub.notes)
            facts.diagnostics.extend(sub.diagnostics)
        return
    if not isinstance(ds, dict):
        return
    try:
        stage = r.int_at("deepspeed_config", "zero_stage")
    except Bad:
        stage = None
    if stage in (1, 2, 3):
        facts.fields["distributed"] = Value(f"zero{stage}", "literal", doc.span("deepspeed_config", "zero_stage"), (f"deepspeed_config.zero_stage: {stage}",))
    elif stage == 0:
        facts.fields["distributed"] = Value("none", "literal", doc.span("deepspeed_config", "zero_stage"), ("zero_stage: 0 (no ZeRO)",))
    else:  # no zero_stage: the DeepSpeedPlugin's own default stage
        d = frameworks.default("accelerate", "zero_stage")
        facts.fields["distributed"] = Value(f"zero{d.value}", "library-default", span,
                                            (f"distributed_type: DEEPSPEED without a zero_stage: {d.why}",))
    par = str(ds.get("offload_param_device", "none")).lower()
    opt = str(ds.get("offload_optimizer_device", "none")).lower()
    if par in _OFFLOAD_DEVICES:
        facts.fields["offload"] = Value("params", "literal", doc.span("deepspeed_config", "offload_param_device"), (f"offload_param_device: {par}",))
    elif opt in _OFFLOAD_DEVICES:
        facts.fields["offload"] = Value("optimizer", "literal", doc.span("deepspeed_config", "offload_optimizer_device"), (f"offload_optimizer_device: {opt}",))
    if opt in _OFFLOAD_DEVICES:  # accelerate writes it into zero_optimization.offload_optimizer.device
        facts.cpu_optimizer = Value("deepspeed_adam", "literal", doc.span("deepspeed_config", "offload_optimizer_device"),
                                    (f"deepspeed_config.offload_optimizer_device: {opt}",))
    else:
        facts.fields["offload"] = Value("none", "literal" if "offload_optimizer_device" in ds else "library-default",
                                        doc.span("deepspeed_config", "offload_optimizer_device"), ("no offload device",))
    try:
        ga = r.int_at("deepspeed_config", "gradient_accumulation_steps")
    except Bad:
        ga = None
    if ga is not None:
        facts.soft["grad_accum"] = Value(ga, "literal", doc.span("deepspeed_config", "gradient_accumulation_steps"), (f"deepspeed_config.gradient_accumulation_steps: {ga}",))
    r.checked_keys(_ACCELERATE_DS_KEYS, {}, ("deepspeed_config",), "deepspeed_config ")


def _accelerate_parallelism(doc: Document, facts: LaunchFacts) -> None:
    """accelerate >= 1.10's parallelism_config (accelerate config writes parallelism_config_tp_size,
    _cp_size, _dp_shard_size, _dp_replicate_size under it; `accelerate launch` exports them as
    PARALLELISM_CONFIG_TP_SIZE ..., ParallelismConfig reads them): the tensor- and context-parallel
    degrees. accelerate's TP applies the model's transformers tp_plan."""
    pc = doc.get("parallelism_config")
    if not isinstance(pc, dict):
        return
    for key, name in (("parallelism_config_tp_size", "tp_size"), ("parallelism_config_cp_size", "cp_size")):
        v = pc.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            facts.fields[name] = Value(v, "literal", doc.span("parallelism_config", key), (f"parallelism_config.{key}: {v}",))
    if facts.fields.get("tp_size") and facts.fields["tp_size"].value > 1:
        facts.fields["tp_stack"] = Value("transformers", "library-default", None,
                                         ("accelerate's tensor parallelism applies the model's tp_plan (transformers)",))


def deepspeed_tp(doc: Document, facts: LaunchFacts) -> None:
    """DeepSpeed AutoTP training (0.16.4+): "tensor_parallel": {"autotp_size": N} splits the linears like
    transformers' tp_plan (counted with that plan; approximate)."""
    tpc = doc.get("tensor_parallel")
    if not isinstance(tpc, dict):
        return
    v = tpc.get("autotp_size")
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        facts.fields["tp_size"] = Value(v, "literal", doc.span("tensor_parallel", "autotp_size"), (f"tensor_parallel.autotp_size: {v}",))
        facts.fields["tp_stack"] = Value("transformers", "library-default", None,
                                         ("DeepSpeed AutoTP: linears split like transformers' tp_plan (approximate)",))


def _accelerate_fsdp(r: Reader, doc: Document, facts: LaunchFacts) -> None:
    """distributed_type: FSDP: the sharding strategy (FSDP1's name or FSDP2's reshard flag) and offload."""
    fsdp = doc.get("fsdp_config") or {}
    fsdp = fsdp if isinstance(fsdp, dict) else {}
    table, ref = frameworks.substitution("accelerate", "fsdp_sharding")
    version = fsdp.get("fsdp_version") or frameworks.default("accelerate", "fsdp_version").value
    strat = fsdp.get("fsdp_sharding_strategy")
    reshard = fsdp.get("fsdp_reshard_after_forward")
    if strat is not None:
        value = table.get(str(strat).upper())
        where: tuple[str, ...] = ("fsdp_config", "fsdp_sharding_strategy")
    elif reshard is not None:
        if isinstance(reshard, bool):
            value = "fsdp" if reshard else "fsdp_shard_grad_op"
        else:
            value = table.get(str(reshard).upper())
        where = ("fsdp_config", "fsdp_reshard_after_forward")
    else:
        value, where = "fsdp", ("distributed_type",)
    if value is None:
        r.bad(f"unknown FSDP sharding strategy {strat if strat is not None else reshard!r}", *where)
        value = "fsdp"
    facts.fields["distributed"] = Value(value, "literal", doc.span(*where), (f"{where[-1]}: {doc.get(*where)!r} (FSDP{version})", ref))
    off = fsdp.get("fsdp_offload_params")
    if off is True or (isinstance(off, str) and off.lower() == "true"):
        facts.fields["offload"] = Value("params", "literal", doc.span("fsdp_config", "fsdp_offload_params"), ("fsdp_offload_params: true (parameters, gradients and optimizer on CPU)",))
    else:
        facts.fields["offload"] = Value("none", "literal" if off is not None else "library-default", doc.span("fsdp_config", "fsdp_offload_params"), ("fsdp_offload_params: false",))
    if fsdp.get("fsdp_activation_checkpointing") is True:
        facts.soft["gradient_checkpointing"] = Value(True, "literal", doc.span("fsdp_config", "fsdp_activation_checkpointing"), ("fsdp_activation_checkpointing: true",))


def _accelerate_precision(r: Reader, doc: Document, facts: LaunchFacts) -> None:
    mp = doc.get("mixed_precision")
    if isinstance(mp, str):
        prec = {"bf16": "amp-bf16", "fp16": "amp-fp16", "no": "fp32", "fp8": "amp-bf16"}.get(mp.lower())
        if prec is None:
            r.bad(f"mixed_precision should be no, fp16, bf16 or fp8, not {mp!r}", "mixed_precision")
        else:
            facts.soft["precision"] = Value(prec, "literal", doc.span("mixed_precision"), (f"mixed_precision: {mp}",))
            backend = str((doc.get("fp8_config") or {}).get("backend", "AO") if isinstance(doc.get("fp8_config"), dict) else "AO").upper()
            if mp.lower() == "fp8" and backend == "AO":
                # accelerate's AO recipe (the default backend with torchao installed): convert_model_to_fp8_ao keeps
                # the first and last linear
                facts.soft["float8_training"] = Value("layers", "literal", doc.span("mixed_precision"),
                                                      ("mixed_precision: fp8 (accelerate AO backend: torchao Float8Linear)",))
    elif mp is False:  # YAML reads an unquoted `no` as false
        facts.soft["precision"] = Value("fp32", "literal", doc.span("mixed_precision"), ("mixed_precision: no",))


def launch_plan_fields(facts: LaunchFacts) -> dict[str, Value]:
    """A launcher config read on its own: its settings, soft ones included."""
    out = dict(facts.soft)
    out.update(facts.fields)
    return out


def apply_launch(fields: dict[str, Value], facts: LaunchFacts, origin: str,
                 kind: str = "deepspeed") -> tuple[dict[str, Value], list[str], list[Diagnostic]]:
    """Launcher settings over a plan's fields: sharding always; batch, accumulation and precision
    only where the plan leaves them open, and a conflict is reported (transformers refuses one).
    `kind`: the config's kind (an accelerate config is prepared by accelerate whatever trains)."""
    merged = dict(fields)
    notes = list(facts.notes)
    diags = list(facts.diagnostics)
    merged.update(facts.fields)
    swapped = offloaded_optimizer(merged.get("optimizer"), merged.get("trainer"), facts.cpu_optimizer, kind)
    if kind == "accelerate" and facts.optimizer is not None and _defers_optimizer(merged):
        # beside a DeepSpeed optimizer section accelerate's prepare takes only DummyOptim (as the Trainer passes): the
        # engine builds the section's optimizer (accelerator.py _prepare_deepspeed)
        v = facts.optimizer
        merged["optimizer"] = Value(v.value, v.source, v.span, v.chain + (
            "the DeepSpeed config's optimizer section: the engine builds it in place of the script's DummyOptim",))
    elif kind == "accelerate" and facts.optimizer is not None:
        notes.append(f"{origin}: the DeepSpeed config has an optimizer section and the script builds its own optimizer "
                     f"({merged['optimizer'].value}); accelerate's prepare() refuses both (use accelerate.utils.DummyOptim)")
    elif swapped is not None:
        merged["optimizer"] = swapped
    for name, v in facts.soft.items():
        cur = merged.get(name)
        if cur is None or cur.source in ("unknown", "library-default"):
            merged[name] = v
        elif cur.value != v.value and name in ("per_device_batch", "grad_accum"):
            said = v.chain[0] if v.chain else f"{name}={v.value!r}"
            diags.append(Diagnostic("bad-value", f"DeepSpeed config {said}, but the training arguments give {name}={cur.value!r}: "
                                    f"transformers refuses to start when a non-\"auto\" DeepSpeed value disagrees (use \"auto\")",
                                    v.span or Span(origin, 1, 1)))
    return merged, notes, diags


def _defers_optimizer(fields: dict[str, Value]) -> bool:
    """Whether the run hands accelerate a DummyOptim: a library Trainer (its create_optimizer does under a DeepSpeed
    optimizer section) or a loop whose optimizer memlint does not read as a torch optimizer (DummyOptim is none)."""
    from memlint.library import api

    opt, trainer = fields.get("optimizer"), fields.get("trainer")
    return opt is None or not opt.known or (trainer is not None and trainer.value in api.trainers())


def offloaded_optimizer(cur: Value | None, trainer: Value | None, cpu: Value | None, kind: str) -> Value | None:
    """The optimizer a run really steps when its DeepSpeed config offloads the optimizer (`cpu`: where the config
    says so) and accelerate prepares the optimizer the script or the Trainer built: DeepSpeed's CPU Adam
    (library.api.deepspeed_cpu_optimizer). None: unchanged (no offload, an engine of the script's own
    deepspeed.initialize, an optimizer memlint does not know, or versions that do not swap)."""
    from memlint.library import api

    if cpu is None or cur is None or not cur.known or not isinstance(cur.value, str):
        return None
    name = trainer.value if trainer is not None and trainer.known else None
    if name is not None and (api.trainer(str(name)) is not None or name in ("Trainer", "unsloth")):
        via = "trainer"
    elif name == "custom-loop" and kind == "accelerate":  # an accelerate config: the loop prepares with accelerate
        via = "accelerate"
    else:
        return None
    got = api.deepspeed_cpu_optimizer(cur.value, via)
    if got is None:
        return None
    value, why = got
    return Value(value, cpu.source, cpu.span, (*cur.chain, *cpu.chain, why))
