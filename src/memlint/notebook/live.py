"""The training plan read off live notebook objects (a model, a Trainer, its dataset and collator).

Exact where the static reader has to guess: parameter counts, dtypes, quantization and
LoRA are read off the modules, the worst micro-batch off the tokenized dataset. torch,
transformers and peft are imported lazily; nothing here runs a training step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from memlint.errors import MemlintError
from memlint.library.api import attention
from memlint.plan import TrainingPlan, Value
from memlint.vocab import dtype_name

# peft's modules that hold adapters; their `base_layer` is the frozen Linear.
_LORA_PREFIX = "lora_"


@dataclass(frozen=True)
class Lengths:
    """Token counts of the training samples after tokenization."""

    count: int
    longest: int
    longest_index: int
    median: int
    p95: int

    @classmethod
    def of(cls, lengths: list[int]) -> "Lengths":
        if not lengths:
            raise MemlintError("the training dataset is empty")
        order = sorted(lengths)
        i = max(range(len(lengths)), key=lengths.__getitem__)
        return cls(len(lengths), lengths[i], i, order[len(order) // 2],
                   order[min(len(order) - 1, math.ceil(0.95 * len(order)) - 1)])


@dataclass(frozen=True)
class LiveFacts:
    """What was read, object by object, to show the user beside the estimate."""

    model_id: str
    model_class: str
    params: int                 # base model parameters (4-bit weights counted unpacked)
    trainable: int
    dtypes: dict[str, int]      # parameter count by dtype (as stored)
    quant: str                  # none | nf4 | fp4 | int8
    double_quant: bool
    lora: dict[str, Any] | None  # r, alpha, dropout, targets (module paths inside a layer)
    recompute: bool
    recompute_from: str
    batch: int | None = None
    grad_accum: int = 1
    optim: str | None = None
    precision: str | None = None
    padding: str | None = None  # longest | max_length | none | padding-free | packing
    pad_to_multiple_of: int | None = None
    lengths: Lengths | None = None
    worst_seq: int | None = None
    worst_batch: int | None = None
    device: str = "cpu"


@dataclass
class LivePlan:
    """The plan (for the rules), the Setup (for the estimator and the confirmation),
    what was read, the user's model object, and notes on every judgement made."""

    plan: TrainingPlan
    setup: Any
    facts: LiveFacts
    model: Any
    notes: list[str] = field(default_factory=list)
    run_setup: Any = None  # the loop as it really runs, where the estimate approximates it (else setup)


# --------------------------------------------------------------------------- the model
def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def base_model(model: Any) -> Any:
    return model.get_base_model() if _is_peft(model) else model


def _numel(p: Any) -> int:
    """Elements a parameter stands for: a quantized Params4bit stores two per byte."""
    qs = getattr(p, "quant_state", None)
    if qs is not None and getattr(qs, "shape", None) is not None:
        return math.prod(qs.shape)
    return p.numel()


def unique_named(model: Any) -> list[tuple[str, Any]]:
    from memlint.measure.core import unique_named_parameters

    return unique_named_parameters(model)


def _layer_path(name: str) -> str:
    """'base_model.model.model.layers.3.self_attn.q_proj' -> 'self_attn.q_proj' (the
    name the catalog gives a Linear repeated in every layer)."""
    from memlint.catalog.meta import _LAYER_INDEX

    m = _LAYER_INDEX.match(name)
    return m.group(2) if m else name.rsplit(".", 1)[-1]


def _quantization(model: Any) -> tuple[str, bool, str | None]:
    """(quant, double_quant, compute dtype) read off bitsandbytes layers, by class name so
    bitsandbytes is never imported here."""
    quant, dq, compute = "none", False, None
    for module in model.modules():
        cls = type(module).__name__
        w = getattr(module, "weight", None)
        if cls == "Linear4bit" and w is not None and hasattr(w, "quant_type"):
            quant = str(w.quant_type)
            dq = bool(getattr(w, "compress_statistics", False))
            qs = getattr(w, "quant_state", None)
            if qs is not None and getattr(qs, "nested", None) is not None:
                dq = bool(qs.nested)
            cd = getattr(module, "compute_dtype", None)
            compute = dtype_name(str(cd)) if cd is not None else None
            break
        if cls == "Linear8bitLt":
            return "int8", False, None
    return quant, dq, compute


def _lora(model: Any) -> dict[str, Any] | None:
    if not _is_peft(model):
        return None
    name = getattr(model, "active_adapter", None) or "default"
    if isinstance(name, (list, tuple)):
        name = name[0]
    cfg = model.peft_config.get(name)
    if cfg is None or not hasattr(cfg, "r"):
        raise MemlintError(f"peft adapter {name!r} is not LoRA: memlint estimates LoRA adapters only")
    targets: list[str] = []
    r = dtype = None
    for mname, module in model.named_modules():
        a = getattr(module, "lora_A", None)
        if a is None or name not in a:
            continue
        r = a[name].out_features if hasattr(a[name], "out_features") else cfg.r
        dtype = a[name].weight.dtype
        path = _layer_path(mname)
        if path not in targets:
            targets.append(path)
    if not targets:
        raise MemlintError("the peft model has no LoRA layers")
    return {"adapter": name, "r": int(r or cfg.r), "alpha": cfg.lora_alpha, "dropout": float(cfg.lora_dropout),
            "targets": tuple(targets), "dtype": (dtype_name(str(dtype)) or "fp32")}


def _recompute(base: Any) -> bool:
    return any(getattr(m, "gradient_checkpointing", False) is True for m in base.modules())


def _config_dict(config: Any) -> tuple[str, dict[str, Any]]:
    """(model_type, shape config) of a live config, as memlint.catalog counts it."""
    d = config.to_dict()
    if isinstance(d.get("text_config"), dict):  # multimodal: the text tower trains the tokens
        t = dict(d["text_config"])
        d = t
    mt = d.get("model_type") or getattr(config, "model_type", None)
    if not mt:
        raise MemlintError("the model's config has no model_type")
    drop = {"model_type", "transformers_version", "architectures", "_name_or_path", "name_or_path",
            "quantization_config", "torch_dtype", "dtype", "auto_map", "_commit_hash", "id2label", "label2id"}
    return mt, {k: v for k, v in d.items() if k not in drop and not k.startswith("_")}


def model_spec(model: Any, model_id: str | None = None) -> Any:
    """The estimator's ModelSpec of a live model, counted from its config on the meta
    device (memlint.measure.tiny_spec), checked against the live parameters."""
    from memlint.measure import tiny_spec

    base = base_model(model)
    mt, cfg = _config_dict(base.config)
    mid = model_id or getattr(base.config, "name_or_path", "") or f"live-{mt}"
    return tiny_spec(mt, cfg, mid)


def read_model(model: Any) -> dict[str, Any]:
    """Counts, dtypes, quantization, LoRA and recompute state of a live model."""
    if not hasattr(model, "named_parameters") or not hasattr(model, "config"):
        raise MemlintError(f"{type(model).__name__} is not a transformers/peft model (no .config)")
    base = base_model(model)
    head = getattr(base, "get_output_embeddings", None)
    if callable(head) and head() is None:
        raise MemlintError(f"{type(base).__name__} has no language-model head (get_output_embeddings() is None): "
                           "%memcheck sizes a causal-LM training step; pass the model with its head "
                           "(the …ForCausalLM, not its .model)")
    params = trainable = 0
    dtypes: dict[str, int] = {}
    for n, p in unique_named(model):
        k = _numel(p)
        if _LORA_PREFIX not in n:
            params += k
        if p.requires_grad:
            trainable += k
        dt = str(p.dtype).replace("torch.", "")
        dtypes[dt] = dtypes.get(dt, 0) + k
    quant, dq, compute = _quantization(base)
    first = next(model.parameters())
    return {"params": params, "trainable": trainable, "dtypes": dtypes, "quant": quant, "double_quant": dq,
            "compute_dtype": compute, "lora": _lora(model), "recompute": _recompute(base),
            "device": first.device.type, "class": type(model).__name__}


def _weight_dtype(model: Any, quant: str) -> str:
    """The dtype the frozen base weights are held in: the block Linears' dtype, or for a
    4-bit base the dtype of what stayed unquantized (the embeddings)."""
    base = base_model(model)
    if quant == "none":
        for name, module in base.named_modules():
            w = getattr(module, "weight", None)
            if type(module).__name__ == "Linear" and w is not None and module is not base.get_output_embeddings() \
                    and _LORA_PREFIX not in name:
                return (dtype_name(str(w.dtype)) or "fp32")
    emb = base.get_input_embeddings().weight
    return (dtype_name(str(emb.dtype)) or "fp32")


# --------------------------------------------------------------------------- the data
def sample_lengths(dataset: Any, column: str = "input_ids") -> list[int]:
    """Token count of every sample of a tokenized dataset (datasets.Dataset, a list of
    dicts or any map-style dataset of dicts)."""
    if dataset is None:
        raise MemlintError("the Trainer has no train_dataset")
    names = getattr(dataset, "column_names", None)
    if isinstance(names, list):
        if column not in names:
            raise MemlintError(f"the training dataset has no {column!r} column (columns: {', '.join(names)}): "
                               "tokenize it first, or pass --seq")
        return [len(x) for x in dataset[column]]
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise MemlintError("the training dataset is iterable-only (streaming): its longest sample is unknown; "
                           "pass --seq")
    out = []
    for i in range(len(dataset)):
        row = dataset[i]
        if not isinstance(row, dict) or column not in row:
            raise MemlintError(f"sample {i} of the training dataset has no {column!r}: "
                               "tokenize it first, or pass --seq")
        out.append(len(row[column]))
    return out


def collator_padding(collator: Any, args: Any = None) -> tuple[str, int | None, int | None]:
    """(padding, pad_to_multiple_of, max_length) of a data collator, read by attribute so
    TRL's and transformers' collators are recognised without importing them."""
    if getattr(args, "packing", False):
        return "packing", None, getattr(args, "max_length", None)
    if getattr(collator, "padding_free", False):
        return "padding-free", None, None
    if collator is None or getattr(collator, "__name__", "") == "default_data_collator":
        return "none", None, None
    multiple = getattr(collator, "pad_to_multiple_of", None)
    padding = getattr(collator, "padding", True)
    padding = getattr(padding, "value", padding)
    if padding == "max_length":
        tok = getattr(collator, "tokenizer", None) or getattr(collator, "processing_class", None)
        max_len = getattr(collator, "max_length", None) or getattr(tok, "model_max_length", None)
        return "max_length", multiple, max_len
    if padding in (False, "do_not_pad"):
        return "none", None, None
    return "longest", multiple, None


def worst_micro_batch(lengths: list[int], batch: int, padding: str, multiple: int | None,
                      max_length: int | None) -> tuple[int, int, str]:
    """(rows, columns, why) of the largest micro-batch this data and collator can make."""
    n = len(lengths)
    rows = min(batch, n)
    longest = max(lengths)
    if padding == "padding-free":
        # one row: the micro-batch's samples concatenated; the worst holds the longest ones
        cols = sum(sorted(lengths, reverse=True)[:rows])
        return 1, cols, f"padding-free collator: the {rows} longest samples concatenated in one row"
    if padding == "max_length" and max_length:
        return rows, int(max_length), f"the collator pads every batch to max_length={max_length}"
    cols = longest
    why = f"padding to the longest sample in the batch: the batch holding the longest sample ({longest} tokens)"
    if padding == "none":
        why = "no padding: rows are as long as the samples; the longest is {longest}".format(longest=longest)
    if padding == "packing":
        why = f"packed rows: the longest is {longest} tokens"
    if multiple:
        cols = -(-cols // multiple) * multiple
        why += f", rounded up to a multiple of {multiple}"
    return rows, cols, why


# --------------------------------------------------------------------------- plan + setup
def _precision(dtype: str, bf16: bool, fp16: bool, notes: list[str]) -> tuple[str, str]:
    """(weights dtype, precision) in the estimator's terms, as Trainer runs them."""
    if bf16:
        if dtype == "fp16":
            notes.append("bf16 autocast over fp16 weights: estimated with fp32 weights")
            return "fp32", "amp-bf16"
        return dtype, "amp-bf16"
    if fp16:
        if dtype == "bf16":
            notes.append("fp16=True on a bf16 model: estimated as bf16 autocast")
            return dtype, "amp-bf16"
        return dtype, "amp-fp16"
    if dtype == "fp32":
        return "fp32", "fp32"
    # half weights without autocast: weights, gradients and optimizer states in that dtype
    if dtype != "bf16":
        dtype = "fp16"
    return dtype, f"pure-{dtype}"


def _default_optim() -> str:
    """The optimizer of a bare model: the default estimate and plan take too (run_defaults)."""
    from memlint.library.defaults import run_default

    return run_default("optim").value


def from_trainer(trainer: Any, *, batch: int | None = None, seq: int | None = None) -> LivePlan:
    """The plan of a live transformers Trainer (or TRL SFTTrainer): its model, arguments,
    collator and training dataset. `batch` / `seq` override what was read."""
    args = getattr(trainer, "args", None)
    if args is None or not hasattr(args, "per_device_train_batch_size"):
        raise MemlintError(f"{type(trainer).__name__} has no TrainingArguments (.args)")
    model = trainer.model
    notes: list[str] = []
    padding, multiple, max_len = collator_padding(getattr(trainer, "data_collator", None), args)
    rows = batch or int(args.per_device_train_batch_size)
    lengths = None
    if seq is None:
        each = sample_lengths(trainer.train_dataset)
        lengths = Lengths.of(each)
        rows, cols, why = worst_micro_batch(each, rows, padding, multiple, max_len)
        notes.append(f"worst micro-batch {rows} × {cols}: {why}")
        if getattr(args, "group_by_length", False):
            notes.append("group_by_length sorts samples by length: the longest samples share a batch, "
                         "which is the worst case above")
    else:
        cols = seq
        notes.append(f"micro-batch {rows} × {cols} as given (--batch/--seq)")
    optim = getattr(args.optim, "value", args.optim)
    recompute_args = bool(getattr(args, "gradient_checkpointing", False))
    return _build(model, rows, cols, grad_accum=int(args.gradient_accumulation_steps), optim=str(optim),
                  bf16=bool(args.bf16), fp16=bool(args.fp16), recompute_args=recompute_args,
                  padding=padding, multiple=multiple, lengths=lengths,
                  batch_asked=int(args.per_device_train_batch_size), notes=notes, kind="trainer",
                  group_by_length=bool(getattr(args, "group_by_length", False)))


def from_model(model: Any, *, batch: int, seq: int, optim: str | None = None, precision: str | None = None,
               grad_accum: int = 1) -> LivePlan:
    """The plan of a bare model trained at micro-batch `batch` × `seq`. Without a Trainer,
    precision follows the weights (fp32: none; bf16: pure bf16) unless `precision` says."""
    notes = [f"micro-batch {batch} × {seq} as given (--batch/--seq)"]
    if precision is None:
        notes.append("no Trainer: precision follows the weights (fp32 weights train in fp32, "
                     "bf16 / fp16 weights in pure bf16 / fp16)")
    bf16 = precision == "amp-bf16"
    fp16 = precision == "amp-fp16"
    optim = optim or _default_optim()
    if optim == _default_optim():
        notes.append(f"optimizer {optim}: the TrainingArguments default of the installed transformers")
    return _build(model, batch, seq, grad_accum=grad_accum, optim=optim, bf16=bf16, fp16=fp16,
                  recompute_args=False, padding=None, multiple=None, lengths=None, batch_asked=batch,
                  notes=notes, kind="model", group_by_length=False)


def _build(model: Any, rows: int, cols: int, *, grad_accum: int, optim: str, bf16: bool, fp16: bool,
           recompute_args: bool, padding: str | None, multiple: int | None, lengths: Lengths | None,
           batch_asked: int, notes: list[str], kind: str, group_by_length: bool) -> LivePlan:
    from memlint.estimate.setup import Setup, known_optim

    info = read_model(model)
    spec = model_spec(model)
    if info["params"] != spec.params:
        notes.append(f"the live model has {info['params']:,} base parameters, its config counts {spec.params:,}: "
                     "estimated from the config")
    quant, lora = info["quant"], info["lora"]
    if quant == "int8":
        raise MemlintError("an 8-bit (LLM.int8) base is not estimated by %memcheck yet")
    method = "full"
    if lora is not None:
        method = "qlora" if quant in ("nf4", "fp4") else "lora"
    elif quant != "none":
        raise MemlintError("a quantized base without LoRA adapters cannot be trained")
    elif info["trainable"] != info["params"]:
        notes.append(f"{info['trainable']:,} of {info['params']:,} parameters trainable without peft: "
                     "estimated as full fine-tuning (an upper bound)")
    dtype = _weight_dtype(model, quant)
    kbit_prep = False
    if quant != "none":
        compute = info["compute_dtype"] or "fp32"
        kbit_prep = dtype == "fp32" and compute != "fp32"
        if kbit_prep:
            notes.append("embeddings, norms and lm_head are fp32 next to a 4-bit base: "
                         "prepare_model_for_kbit_training was applied")
            dtype = compute
    dtype, precision = _precision(dtype, bf16, fp16, notes)
    run_precision = precision  # what the training loop really does, for the confirmation
    adapter_dtype = None
    if precision in ("pure-bf16", "pure-fp16") and lora is not None and lora["dtype"] == "fp32":
        # peft's autocast_adapter_dtype keeps adapters fp32 and computes them in fp32, each
        # adapter keeping an fp32 copy of its input: the estimator's adapter_dtype "fp32"
        adapter_dtype = "fp32"
        notes.append(f"fp32 LoRA adapters on a {dtype} base without autocast (peft's autocast_adapter_dtype)")
    optim = known_optim(optim, notes)
    recompute = info["recompute"] or recompute_args
    recompute_from = ("TrainingArguments(gradient_checkpointing=True)" if recompute_args
                      else "the model (gradient_checkpointing_enable / prepare_model_for_kbit_training)"
                      if info["recompute"] else "off")
    attn = getattr(base_model(model).config, "_attn_implementation", None) or "sdpa"
    if attn not in attention():
        notes.append(f"attention {attn!r}: estimated as sdpa")
        attn = "sdpa"
    kw: dict[str, Any] = {}
    if lora is not None:
        kw.update(lora_r=lora["r"], lora_targets=lora["targets"], lora_dropout=lora["dropout"])
    setup = Setup(model=spec, method=method, quant=quant if quant != "none" else "none",
                  double_quant=info["double_quant"], dtype=dtype, precision=precision, optim=optim, batch=rows,
                  seq=cols, grad_accum=grad_accum, recompute=recompute, attn=attn, kbit_prep=kbit_prep,
                  adapter_dtype=adapter_dtype, **kw)
    from memlint.estimate.model_state import trainable_params

    if trainable_params(setup) != info["trainable"] and method != "full":
        notes.append(f"the live model trains {info['trainable']:,} parameters, the estimator counts "
                     f"{trainable_params(setup):,} for these adapters")

    facts = LiveFacts(
        model_id=spec.id, model_class=info["class"], params=info["params"], trainable=info["trainable"],
        dtypes=info["dtypes"], quant=quant, double_quant=info["double_quant"], lora=lora, recompute=recompute,
        recompute_from=recompute_from, batch=batch_asked, grad_accum=grad_accum, optim=optim, precision=precision,
        padding=padding, pad_to_multiple_of=multiple, lengths=lengths, worst_seq=cols, worst_batch=rows,
        device=info["device"],
    )
    plan = _plan(facts, setup, kind, group_by_length)
    run = setup if run_precision == precision else setup.with_(precision=run_precision)
    return LivePlan(plan, setup, facts, model, notes, run)


def _plan(f: LiveFacts, s: Any, kind: str, group_by_length: bool) -> TrainingPlan:
    """The same facts as a TrainingPlan for the rules (every value read, so 'literal')."""

    def lit(v: Any) -> Value:
        return Value(v, "literal", chain=("read off the live object",))

    padding = {"longest": "longest", "max_length": "max_length", "packing": "packing"}.get(f.padding or "", None)
    fields = {
        "model_id": lit(f.model_id),
        "torch_dtype": lit({"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[s.dtype]),
        "method": lit(s.method),
        "quant_bits": lit({"none": None, "nf4": 4, "fp4": 4, "int8": 8}[s.quant]),
        "per_device_batch": lit(s.batch),
        "grad_accum": lit(s.grad_accum),
        "max_length": lit(s.seq),
        "gradient_checkpointing": lit(s.recompute),
        "optimizer": lit(s.optim),
        "precision": lit(s.precision),
        "attn_implementation": lit(s.attn),
        "group_by_length": lit(group_by_length),
        "packing": lit(f.padding == "packing"),
        "distributed": lit("none"),
        "num_gpus": lit(1),
        "offload": lit("none"),
        "trainer": lit(kind),
    }
    if padding:
        fields["padding"] = lit(padding)
    if s.method != "full":
        fields.update(lora_r=lit(s.lora_r), lora_targets=lit(list(s.lora_targets)),
                      lora_alpha=lit(f.lora["alpha"] if f.lora else None))
    if s.quant != "none":
        fields.update(quant_type=lit(s.quant), double_quant=lit(s.double_quant), compute_dtype=lit(s.compute_dtype))
    return TrainingPlan(f"<live {f.model_class}>", fields, kind="python")
