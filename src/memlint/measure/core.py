"""Run the real training step(s) of a Setup and measure its memory.

Three ways to run the same code:

- ``cuda``: real tensors on the GPU, real random-init weights, the CUDA caching
  allocator's counters (``max_memory_allocated`` / ``max_memory_reserved``).
- ``cpu``: real tensors on the CPU, counted by the `LiveBytes` storage tracker (small
  models; it is how the trace is proven exact).
- ``trace``: FakeTensor storages (no data, no RAM) counted by the same tracker; the
  model is built on the meta device and materialised as fake tensors. What the CPU build
  of torch cannot fake (CUDA tensors), it replaces by the GPU's defaults, said in `notes`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from memlint import progress
from memlint.errors import MemlintError
from memlint.estimate.setup import Setup
from memlint.library.api import attention
from memlint.measure.cuda_emulation import autocast as cuda_autocast
from memlint.measure.cuda_emulation import cuda_dropout as _cuda_dropout  # noqa: F401 (measure.distributed)
from memlint.measure.cuda_emulation import cuda_kernels

PHASES = ("forward", "backward", "optimizer")
COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")
_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class StepMeasurement:
    step: int
    peak: int
    phase: str
    phases: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "peak": self.peak, "phase": self.phase, "phases": dict(self.phases)}


@dataclass
class Measurement:
    components: dict[str, int]
    steps: list[StepMeasurement]
    device: str
    method: str
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    runtime_s: float = 0.0
    # max_memory_reserved per step and phase: the CUDA allocator's own counter on a GPU, else the
    # traced allocation sequence replayed through memlint.measure.allocator
    reserved: dict[str, Any] | None = None

    @property
    def reserved_peak(self) -> int | None:
        return None if self.reserved is None else self.reserved["peak"]

    @property
    def measured_peak(self) -> int:
        return self.steps[-1].peak

    @property
    def phase(self) -> str:
        return self.steps[-1].phase

    def to_json(self) -> dict[str, Any]:
        return {
            "components": {k: int(self.components[k]) for k in COMPONENTS},
            "measured_peak": int(self.measured_peak),
            "phase": self.phase,
            "steps": [s.to_json() for s in self.steps],
            "device": self.device,
            "method": self.method,
            "notes": list(self.notes),
            "details": dict(self.details),
            "runtime_s": round(self.runtime_s, 2),
            "reserved": self.reserved,
        }


# --------------------------------------------------------------------------- meters
class _CudaMeter:
    """The allocator counters, with the reserved peak remembered across resets, overall and per
    phase of the step (`begin_phase`)."""

    def __init__(self, torch: Any) -> None:
        self.cuda = torch.cuda
        self.max_reserved = 0
        self.label: Any = None
        self.phase_reserved: dict[Any, int] = {}

    def _fold(self) -> None:
        r = self.cuda.max_memory_reserved()
        self.max_reserved = max(self.max_reserved, r)
        self.phase_reserved[self.label] = max(self.phase_reserved.get(self.label, 0), r)

    def begin_phase(self, label: Any) -> None:
        self._fold()
        self.label = label

    def reserved_by_phase(self) -> dict[Any, int]:
        self._fold()
        return dict(self.phase_reserved)

    def memory_allocated(self) -> int:
        return self.cuda.memory_allocated()

    def max_memory_allocated(self) -> int:
        return self.cuda.max_memory_allocated()

    def reset_peak_memory_stats(self) -> None:
        self._fold()
        self.cuda.reset_peak_memory_stats()

    def max_memory_reserved(self) -> int:
        return max(self.max_reserved, self.cuda.max_memory_reserved())


# --------------------------------------------------------------------------- building
def _resolve_device(device: str, model: Any) -> str:
    import torch

    if device in ("trace", "fake", "meta"):
        return "trace"
    if device == "auto":
        if model is not None:
            p = next(model.parameters())
            return {"meta": "trace", "cuda": "cuda"}.get(p.device.type, "trace" if _is_fake(p) else "cpu")
        return "cuda" if torch.cuda.is_available() else "trace"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise MemlintError("device 'cuda' asked for, but torch sees no CUDA device")
        return "cuda"
    if device == "cpu":
        return "cpu"
    raise MemlintError(f"unknown device {device!r}: expected auto, cuda, cpu or trace")


def _is_fake(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def _unique_params(module: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    for p in module.parameters():
        seen.setdefault(id(p), p)
    return list(seen.values())


def _is_tied(model: Any) -> bool:
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    return out is not None and inp is not None and out.weight is inp.weight


def _retie(model: Any) -> None:
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    out.weight = inp.weight


def _build_model(setup: Setup, build_device: str, attn: str) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    spec = setup.model
    if spec.counted_as:
        raise MemlintError(f"{spec.id}: model_type {spec.model_type!r} runs remote code (trust_remote_code), "
                           "which memlint measure never builds; its estimate counts it as "
                           f"{spec.counted_as!r}, whose parameters have the same shapes")
    try:
        cfg = AutoConfig.for_model(spec.model_type, **dict(spec.config))
    except Exception as exc:  # transformers judging a local config.json: the config's error, in one line
        raise MemlintError(f"{spec.id}: transformers cannot build this config ({str(exc).splitlines()[0][:200]})") from None
    cfg.use_cache = False  # training: no KV cache (what Trainer+gradient checkpointing/TRL set)
    dtype = getattr(torch, _TORCH_DTYPES[setup.dtype])
    if setup.seq2seq:
        # transformers' AutoModelForSeq2SeqLM (T5ForConditionalGeneration), lm_head untied as from_pretrained
        # loads a checkpoint whose config says tie_word_embeddings false (catalog/meta.py build_seq2seq)
        from memlint.catalog.meta import build_seq2seq

        return build_seq2seq(spec.model_type, {**dict(spec.config), "use_cache": False}, build_device,
                             dtype=dtype, attn_implementation=attn)[1]
    auto = AutoModelForCausalLM
    if setup.encoder:
        # the head class the script loads: transformers' Auto class for the task head (catalog/meta.py)
        import transformers

        from memlint.catalog.meta import ENCODER_HEADS

        cfg.num_labels = setup.num_labels
        if setup.head == "sequence-classification" and setup.num_labels > 1:
            # what the heads infer from integer labels; DeBERTa's inference path selects the labelled rows with
            # nonzero() (a data-dependent shape fake tensors cannot trace; b x labels logits gathered, a few bytes)
            cfg.problem_type = "single_label_classification"
        auto = getattr(transformers, ENCODER_HEADS[setup.head])
    elif spec.vision:
        # a vision-language model: transformers' image-text-to-text class (Qwen2VLForConditionalGeneration ...)
        from transformers import AutoModelForImageTextToText

        auto = AutoModelForImageTextToText
    elif setup.objective == "reward":
        # TRL's RewardTrainer: AutoModelForSequenceClassification with num_labels=1
        cfg.num_labels = 1
        cfg.pad_token_id = cfg.pad_token_id if cfg.pad_token_id is not None else 0
        auto = AutoModelForSequenceClassification
    with torch.device(build_device):
        model = auto.from_config(cfg, dtype=dtype, attn_implementation=attn)
    return model


def _expected_base_params(setup: Setup) -> int:
    """The catalog's parameter count, with a reward model's score head (h x 1) in place of lm_head, or an
    encoder's task head."""
    from memlint.estimate.model_state import encoder_spec, reward_spec

    if setup.encoder:
        return encoder_spec(setup.model, setup.head, setup.num_labels).params
    return reward_spec(setup.model).params if setup.objective == "reward" else setup.model.params


def _every_nth_layer(model: Any, n: int) -> None:
    """torchtune's selective checkpointing by layers (training/activations.py apply_selective_activation_checkpointing:
    a counter from 1 wraps layer i when i % n == 0): transformers' decoder layers checkpoint themselves when their
    own `gradient_checkpointing` flag is set, so the other layers' flags are cleared."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise MemlintError("--recompute-every: the model has no transformers GradientCheckpointingLayer decoder layers")
    for i, layer in enumerate(layers, start=1):
        layer.gradient_checkpointing = i % n == 0


def _prepare_for_kbit(model: Any) -> None:
    """peft.prepare_model_for_kbit_training itself, on the quantized base, as a script calls it before
    get_peft_model: its casts are peft's, at the installed version. The trace adds the adapters first
    (on the meta model), so what the call does to them is undone: they are created after it in a real
    run (trainable, in peft's adapter dtype). Checkpointing stays the Setup's (use_gradient_checkpointing=False)."""
    from peft import prepare_model_for_kbit_training

    adapters = [(p, p.dtype) for p in model.parameters() if p.requires_grad]
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)
    for p, dtype in adapters:
        if p.dtype != dtype:
            p.data = p.data.to(dtype)
        p.requires_grad_(True)


def _selective_log_softmax(logits: Any, index: Any) -> Any:
    """Per-token log-probs of `index`, as trl.trainer.utils.selective_log_softmax does without
    Triton: fp32 logits by gather - logsumexp row by row, half ones by log_softmax per row (the
    loop variable keeps the previous row's result while the next one is computed)."""
    import torch
    import torch.nn.functional as F

    if logits.dtype in (torch.float32, torch.float64):
        sel = torch.gather(logits, -1, index.unsqueeze(-1)).squeeze(-1)
        lse = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
        return sel - lse
    out = []
    for row, idx in zip(logits, index):
        lp = F.log_softmax(row, dim=-1)
        out.append(lp.gather(-1, idx.unsqueeze(-1)).squeeze(-1))
    return torch.stack(out)


def _entropy_metric(logits: Any) -> Any:
    """trl.trainer.utils.entropy_from_logits over the detached logits, 128 tokens at a time."""
    import torch.nn.functional as F

    flat = logits.reshape(-1, logits.shape[-1])
    out = []
    for chunk in flat.split(128, dim=0):
        logps = F.log_softmax(chunk, dim=-1)
        out.append(-(logps.exp() * logps).sum(-1))
    return out


def _preference_loss(model: Any, ref: Any, setup: Setup, ids: Any, autocast: Any, amp: bool) -> Any:
    """One micro-batch of TRL's preference step (data/preference.json) under HF Trainer: the model's
    forward runs under accelerate's autocast wrapper, which converts half outputs to fp32
    (ConvertOutputsToFp32), so TRL sees fp32 logits; then the log-probs, the reference forward under
    no_grad while the policy's graph is alive, the loss, and the version's metrics. Returns the loss."""
    import torch
    import torch.nn.functional as F

    from memlint.estimate.activations import logps_layout
    from memlint.estimate.setup import preference

    def forward(m: Any) -> Any:  # accelerate's prepared model.forward
        with autocast():
            out = m(input_ids=ids).logits
        return out.float() if amp else out

    obj = preference()["objectives"][setup.objective]
    b = setup.batch
    if setup.objective == "reward":
        chosen, rejected = torch.chunk(forward(model).squeeze(-1), 2)
        return -F.logsigmoid(chosen - rejected).mean()
    layout = logps_layout(setup)
    copy = layout.get("shift_copy", False)
    labels = ids[:, 1:]
    full = forward(model)
    logits = full[:, :-1, :]
    if copy:  # TRL 0.29: shift_logits = outputs.logits[..., :-1, :].contiguous()
        logits = logits.contiguous()
    nll = None
    if obj["nll_chosen"]:  # ORPO / CPO: cross-entropy on a contiguous copy of the chosen half
        chosen = logits[:b].contiguous()
        nll = F.cross_entropy(chosen.view(-1, chosen.shape[-1]), labels[:b].reshape(-1))
        del chosen
    logps = _selective_log_softmax(logits, labels).sum(-1)
    if layout.get("metrics") == "masked_mean":
        # 0.12-0.28: logits[:b][loss_mask[:b]].mean(): boolean indexing copies the masked logits. Every
        # token counts here (the worst case), and a fake tensor cannot index by a mask: clone instead.
        _ = full[:b].reshape(-1, full.shape[-1]).clone().mean(), full[b:].reshape(-1, full.shape[-1]).clone().mean()
        del _
    if not layout["policy_logits_during_ref"] and not obj["nll_chosen"]:
        del full, logits
    ref_logps = r_full = r_logits = None
    if setup.reference in ("copy", "adapter-disabled"):
        with torch.no_grad():
            if setup.reference == "copy":
                r_full = forward(ref)
            else:
                with model.disable_adapter():
                    r_full = forward(model)
            r_logits = r_full[:, :-1, :]
            if copy:
                r_logits = r_logits.contiguous()
            ref_logps = _selective_log_softmax(r_logits, labels).sum(-1)
            if not copy:  # TRL 0.29 keeps ref_outputs and ref_shift_logits until the end of _compute_loss
                r_full = r_logits = None
    elif setup.reference == "precomputed":
        ref_logps = torch.zeros(logps.shape, dtype=logps.dtype, device=logps.device)
    pc, pr = logps.chunk(2)
    if ref_logps is not None:
        rc, rr = ref_logps.chunk(2)
        pc, pr = pc - rc, pr - rr
    loss = -F.logsigmoid(0.1 * (pc - pr)).mean()
    if nll is not None:  # ORPO's odds ratio / CPO's sigmoid on the log-prob margin, plus the chosen NLL
        loss = loss + nll
    if layout.get("metrics") == "entropy":  # 0.29: entropy and masked mean logits of the detached logits
        with torch.no_grad():
            ent = _entropy_metric(logits.detach())
            del ent
            c, r = logits.detach().chunk(2)  # chosen_logits[chosen_mask.bool()]: a copy (every token here)
            _ = c.reshape(-1, c.shape[-1]).clone().mean(-1).sum(), r.reshape(-1, r.shape[-1]).clone().mean(-1).sum()
            del c, r, _
    del r_full, r_logits
    return loss


def _peft_task_type(setup: Setup) -> str | None:
    """peft's task_type for the model: an encoder's head (SEQ_CLS / TOKEN_CLS add the classifier to
    modules_to_save as scripts get it from LoraConfig(task_type=...)), a reward model's SEQ_CLS, else CAUSAL_LM."""
    if setup.encoder:
        return setup.lora_task
    return "SEQ_CLS" if setup.objective == "reward" else "SEQ_2_SEQ_LM" if setup.seq2seq else "CAUSAL_LM"


def _freeze_vision(model: Any, setup: Setup) -> list[str]:
    """What of a vision-language model's tower trains: LLaMA-Factory's freeze_vision_tower (visual.patch_embed,
    visual.blocks) and freeze_multi_modal_projector (visual.merger), by requires_grad as it sets them."""
    from memlint.estimate.vision import trains

    tower, merger = trains(setup)
    inner = model.model
    if not hasattr(inner, "visual"):  # LLaVA: vision_tower, Mllama: vision_model; multi_modal_projector (LLaMA-Factory)
        if not tower:
            (inner.vision_tower if hasattr(inner, "vision_tower") else inner.vision_model).requires_grad_(False)
        if not merger:
            inner.multi_modal_projector.requires_grad_(False)
        return [f"vision tower {'trained' if tower else 'frozen'}, projector {'trained' if merger else 'frozen'}"]
    visual = inner.visual
    if not tower:
        visual.patch_embed.requires_grad_(False)
        visual.blocks.requires_grad_(False)
    if not merger:
        visual.merger.requires_grad_(False)
    return [f"vision tower {'trained' if tower else 'frozen'}, merger {'trained' if merger else 'frozen'}"]


def _text_lora_targets(model: Any, setup: Setup) -> list[str]:
    """The adapted modules of a vision-language model's LoRA: the text model's linears (all of them for all-linear,
    else those named), by full name, as LLaMA-Factory's patch_target_modules passes them to peft."""
    import torch

    names = []
    for name, mod in model.named_modules():
        vision = any(f".{k}." in f".{name}." for k in ("visual", "vision_tower", "vision_model", "multi_modal_projector"))
        if not isinstance(mod, torch.nn.Linear) or vision or mod is model.get_output_embeddings():
            continue
        if setup.lora_targets == "all-linear" or any(name == t or name.endswith("." + t) for t in setup.lora_targets):
            names.append(name)
    return names


def _apply_lora(model: Any, setup: Setup, dropout: float) -> Any:
    from peft import LoraConfig, get_peft_model

    targets = "all-linear" if setup.lora_targets == "all-linear" else list(setup.lora_targets)
    if setup.model.vision:
        targets = _text_lora_targets(model, setup)
    config = LoraConfig(r=setup.lora_r, lora_alpha=2 * setup.lora_r, target_modules=targets,
                        lora_dropout=dropout, use_dora=setup.use_dora,
                        modules_to_save=list(setup.modules_to_save) or None,
                        task_type=_peft_task_type(setup))
    # peft's default autocast_adapter_dtype=True keeps fp16/bf16 adapters in fp32 (a plain bf16
    # loop, adapter_dtype "fp32"); pure-bf16 recipes that keep them bf16 ask peft not to.
    bf16_adapters = setup.adapter_dtype in ("bf16", "fp16") or (setup.adapter_dtype is None and setup.precision in ("pure-bf16", "pure-fp16"))
    return get_peft_model(model, config, autocast_adapter_dtype=not bf16_adapters)



def _quantize(model: Any, setup: Setup, use_bnb_matmul: bool) -> int:
    """Replace every Linear inside the decoder (not lm_head, not LoRA adapters) by the
    4-bit layer, as transformers' bitsandbytes integration does; LoRA wrappers keep their
    adapters and get peft's lora.bnb.Linear4bit forward (with its defensive clone)."""
    import torch
    from peft.tuners.lora import layer as lora_layer

    from memlint.measure.quant import Linear4bit

    qlora_cls = _qlora_class()
    compute = getattr(torch, _TORCH_DTYPES[setup.compute_dtype])
    out_emb = model.get_output_embeddings()
    replaced = 0

    def make(lin: Any) -> Any:
        return Linear4bit(lin, setup.quant, setup.double_quant, compute, use_bnb_matmul)

    todo = []
    for name, module in model.named_modules():
        if isinstance(module, lora_layer.Linear):
            todo.append(("lora", name, module))
    for _, _, module in todo:
        base = module.base_layer
        if base is out_emb or not isinstance(base, torch.nn.Linear):
            continue
        module.base_layer = make(base)
        module.__class__ = qlora_cls
        replaced += 1
    lora_owned = {id(m) for _, _, mod in todo for m in mod.modules()}
    plain = [(n, m) for n, m in model.named_modules()
             if type(m) is torch.nn.Linear and m is not out_emb and id(m) not in lora_owned]
    for name, module in plain:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, make(module))
        replaced += 1
    return replaced


@contextlib.contextmanager
def _no_ctx():
    yield


@contextlib.contextmanager
def _unpacked_sequences_on_fake():
    """transformers reads data to decide whether the batch is packed (several sequences
    per row): `(mask[:, -1] == 0).all()`. A FakeTensor has no data, so transformers then
    assumes packing and builds an explicit mask (no is_causal, no GQA in SDPA, repeated
    K/V): a different program than the GPU runs. Our rows are one sequence each
    (position_ids = arange): run the same ops, answer "not packed"."""
    import torch
    from transformers import masking_utils

    orig = masking_utils.find_packed_sequence_indices

    def find_packed_sequence_indices(position_ids: Any) -> Any:
        if not _is_fake(position_ids):
            return orig(position_ids)
        first = position_ids[:, :1] - 1
        diff = torch.diff(position_ids, prepend=first, dim=-1)
        mask = (diff != 1).cumsum(-1)
        _ = (mask[:, -1] == 0).all()  # then read on the host: a fake tensor cannot say
        return None

    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = orig


@contextlib.contextmanager
def _unpadded_masks_on_fake():
    """transformers skips an all-ones padding mask for SDPA (is_causal instead: the flash kernel) only when it can
    read it (`fast_all(padding_mask)`); on a FakeTensor it keeps the explicit mask, and the CPU's SDPA then runs the
    math path. Our rows are unpadded (BART's decoder makes its own torch.ones mask): answer as the GPU does."""
    from transformers import masking_utils

    orig = masking_utils._ignore_causal_mask_sdpa

    def _ignore_causal_mask_sdpa(padding_mask: Any, *args: Any, **kwargs: Any) -> bool:
        if padding_mask is not None and _is_fake(padding_mask):
            padding_mask = None
        return orig(padding_mask, *args, **kwargs)

    masking_utils._ignore_causal_mask_sdpa = _ignore_causal_mask_sdpa
    try:
        yield
    finally:
        masking_utils._ignore_causal_mask_sdpa = orig


def _qlora_class() -> type:
    from peft.tuners.lora import bnb as lora_bnb
    from peft.tuners.lora import layer as lora_layer

    global _QLORA
    if _QLORA is None:
        _QLORA = type("QLoraLinear4bit", (lora_layer.Linear,), {"forward": lora_bnb.Linear4bit.forward})
    return _QLORA


_QLORA = None


# --------------------------------------------------------------------------- measure
def measure(setup: Setup, *, device: str = "auto", steps: int = 2, model: Any = None,
            lora_dropout: float | None = None, seed: int = 0, alloc_conf: str | None = None) -> Measurement:
    """Run `steps` training steps of `setup` and measure live tensor memory.

    device: "auto" (cuda when torch sees one, else the fake-tensor trace), "cuda",
    "cpu" (real tensors, storage tracker) or "trace". `model`: an already built model to
    measure instead of building one from `setup.model` (no LoRA/quantization applied).
    `lora_dropout` overrides `setup.lora_dropout`. `alloc_conf`: the PYTORCH_CUDA_ALLOC_CONF
    settings the replayed allocator uses without CUDA (default: the environment's, as the CUDA
    allocator would read them).
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memlint.measure.tracker import LiveBytes

    # Import now what the step imports lazily: module-level tensors (peft's
    # `scale=torch.tensor(1)` defaults...) must not be counted as the step's memory.
    import peft  # noqa: F401
    import transformers.trainer  # noqa: F401

    if steps < 1:
        raise MemlintError("steps must be >= 1")
    if setup.gpus != 1 or setup.shard != "none" or setup.offload != "none":
        raise MemlintError("memlint.measure runs one process on one device: use gpus=1, shard=none, offload=none")
    t0 = time.perf_counter()
    mode = _resolve_device(device, model)
    notes: list[str] = []
    details: dict[str, Any] = {}
    torch.manual_seed(seed)
    attn = _traced_attention(setup, mode, notes)
    dropout = setup.lora_dropout if lora_dropout is None else lora_dropout
    _refuse_unsupported(setup, model)
    if mode == "trace" and setup.model.vision and setup.images:
        raise MemlintError(f"{setup.model.id}: the image path is measured on real tensors only (Qwen2-VL's vision "
                           "code reads image_grid_thw and cu_seqlens values (.tolist()), which fake tensors do not have; "
                           "LLaVA's and Mllama's are not traced on fake tensors either): measure it on real tensors "
                           "(device='cpu', a small config) or a GPU")
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True) if mode == "trace" else None
    tracker = LiveBytes() if mode != "cuda" else None
    run = _Run(setup, mode, "cuda" if mode == "cuda" else "cpu", notes, details)
    with contextlib.ExitStack() as stack:
        if mode == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        progress.note("building the model")
        model, ref = run.prepare(stack, model, attn, dropout, fake_mode)
        meter = run.meter(stack, tracker, model, ref)
        weights = meter.memory_allocated()
        trainable = [p for p in _unique_params(model) if p.requires_grad]
        details["trainable_params"] = sum(p.numel() for p in trainable)
        details["trainable_bytes"] = sum(p.numel() * p.element_size() for p in trainable)
        details["param_dtypes"] = _dtype_census(model)

        optimizer, onotes = _step_optimizer(setup, model, mode)
        notes += onotes
        try:
            step_results, comp, paged_bytes = run.steps(model, ref, trainable, optimizer, meter, tracker, steps)
        finally:
            from memlint.measure.optim import reset_bnb_overrides

            reset_bnb_overrides()
        if setup.optimizer_in_bwd:
            optimizer.remove()  # the hooks of a model the caller passed in stay its own
        if paged_bytes:
            details["paged_optimizer_bytes"] = paged_bytes
        dev_name, method, overhead = _device_and_method(mode, meter, step_results)
        components = {"weights": weights, **comp, "overhead": max(overhead, 0)}
        reserved = _reserved(mode, meter, tracker, steps, alloc_conf, notes)

    return Measurement(components=components, steps=step_results, device=dev_name, method=method,
                       notes=notes, details=details, runtime_s=time.perf_counter() - t0, reserved=reserved)


def _device_and_method(mode: str, meter: Any, step_results: list) -> tuple[str, str, int]:
    """What measured the step, in words and as a method name, and the overhead it sees (CUDA: reserved past the
    allocated peak; a trace or a CPU run has none)."""
    if mode == "cuda":
        import torch

        return (torch.cuda.get_device_name(), "cuda-allocator",
                meter.max_memory_reserved() - max(s.peak for s in step_results))
    if mode == "cpu":
        return "cpu (storage tracker, real tensors)", "cpu-tensor-tracker", 0
    return "cpu (fake-tensor trace)", "fake-tensor-trace", 0


def _step_optimizer(setup: Setup, model: Any, mode: str) -> tuple[Any, list[str]]:
    """The optimizer as Trainer builds it, or, for the optimizer step fused into backward, one optimizer per
    parameter stepped by its post-accumulate-grad hook; (optimizer, notes)."""
    from memlint.measure.optim import InBackward, build_optimizer

    master = setup.precision == "master-fp32"
    if setup.optimizer.get("galore"):
        from memlint.measure.optim import build_galore

        return build_galore(setup.optim, model, setup.galore_rank, setup.galore_targets, fake=mode == "trace")
    if not setup.optimizer_in_bwd:
        return build_optimizer(setup.optim, model, master_fp32=master, fake=mode == "trace")
    optimizer = InBackward(setup.optim, model, master_fp32=master, fake=mode == "trace")
    return optimizer, optimizer.notes + [
        "optimizer in backward: one optimizer per parameter, stepped and zeroed by its post-accumulate-grad hook "
        "(torchtune's register_optim_in_bwd_hooks); no gradient clipping (torchtune refuses it)"]


def _per_step(values: dict[Any, int], steps: int) -> list[dict[str, int]]:
    return [{p: int(values.get((n, p), 0)) for p in PHASES} for n in range(1, steps + 1)]


def _reserved(mode: str, meter: Any, tracker: Any, steps: int, alloc_conf: str | None,
              notes: list[str]) -> dict[str, Any]:
    """max_memory_reserved per step and phase: the CUDA allocator's counter, or (no CUDA) the
    tracker's allocation sequence replayed through the allocator model, with the configured
    settings and with expandable_segments:True beside them."""
    import os
    from dataclasses import replace

    from memlint.measure.allocator import AllocatorConfig, replay

    conf = alloc_conf if alloc_conf is not None else (os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
                                                      or os.environ.get("PYTORCH_ALLOC_CONF"))

    def doc(reserved: list[dict[str, int]], allocated: list[dict[str, int]] | None) -> dict[str, Any]:
        last = reserved[-1]
        phase = max(PHASES, key=lambda k: last[k])  # reserved only grows: the first phase at the top
        out: dict[str, Any] = {"peak": last[phase], "phase": phase,
                               "steps": [{"step": n + 1, "phases": r} for n, r in enumerate(reserved)]}
        if allocated is not None:  # the allocator's max_memory_allocated: blocks, 512-byte rounded
            out["allocated_peak"] = max(allocated[-1].values())
            for st, a in zip(out["steps"], allocated):
                st["allocated"] = a
        return out

    if mode == "cuda":
        return {"method": "cuda-allocator", "alloc_conf": conf or "default",
                **doc(_per_step(meter.reserved_by_phase(), steps), None)}
    cfg = AllocatorConfig.parse(conf)
    progress.note(f"replaying {len(tracker.events):,} allocations through the CUDA allocator model")
    r = replay(tracker.events, cfg)
    out = {"method": "allocator-model", "alloc_conf": cfg.describe(),
           **doc(_per_step({k: v.reserved for k, v in r.phases.items()}, steps),
                 _per_step({k: v.allocated for k, v in r.phases.items()}, steps))}
    if not cfg.expandable_segments:
        e = replay(tracker.events, replace(cfg, expandable_segments=True))
        out["expandable_segments"] = doc(_per_step({k: v.reserved for k, v in e.phases.items()}, steps), None)
    notes.append("reserved: the traced allocation sequence replayed through a model of the CUDA caching allocator "
                 f"({cfg.describe()}), the weights allocated in parameter order before step 1")
    return out


def _traced_attention(setup: Setup, mode: str, notes: list[str]) -> str:
    """The attention implementation the step runs: a kernel the CPU lacks runs as its stand-in."""
    attn = setup.attn
    if setup.encoder and setup.model.arch.get("model_type") == "deberta-v2":
        return "eager"  # DisentangledSelfAttention: its own eager code (transformers has no SDPA path for it)
    if not (setup.encoder or setup.seq2seq or setup.model.vision or setup.model_code != "transformers"):
        from memlint.estimate.decoder import effective_attn

        if effective_attn(setup) != attn:  # the family's class has no SDPA path: transformers runs eager
            notes.append(f"{setup.model.model_type}: transformers' class has no SDPA path; attention runs eager")
            return effective_attn(setup)
    trace_as = attention()[attn].trace_as
    if attn != trace_as and mode != "cuda":
        attn = trace_as
        notes.append(f"{setup.attn} cannot run on CPU: traced with {trace_as} (flash kernel: out + fp32 logsumexp "
                     f"saved, like {setup.attn})")
    if mode != "cuda":
        notes.append("CPU stand-ins for the GPU defaults: AdamW/clip_grad_norm foreach set explicitly; CUDA's SDPA "
                     "kernel choice (flash, memory-efficient with a mask, dropout inside; no score matrix), CUDA "
                     "autocast's op lists (layer_norm, softmax, pow, sum ... in fp32), fused native_dropout (bool mask)"
                     + ("; on real CPU tensors the fused attention runs without its dropout" if mode == "cpu" else ""))
    return attn


def _trl_fused_head(setup: Setup) -> bool:
    """SFTTrainer's step at a trl version with the fused LM head (no full logits)."""
    from memlint.estimate.activations import sft_layout

    layout = sft_layout(setup)
    return layout is not None and layout["layout"] == "chunked"


def _refuse_unsupported(setup: Setup, model: Any) -> None:
    if setup.modules_to_save and setup.model.tied_embeddings:
        raise MemlintError("memlint.measure does not trace modules_to_save on a model with tied embeddings (peft's copy "
                           "of a tied module unties it; memlint counts an untied copy, not trace-validated)")
    if setup.model_code == "litgpt":
        raise MemlintError("memlint measure runs transformers' modules; LitGPT's own code is traced by "
                           "`python -m memlint.measure.litgpt --name <LitGPT config> --batch B --seq S ...`")
    if setup.float8 != "none" and setup.precision in ("amp-bf16", "amp-fp16"):
        raise MemlintError("memlint.measure traces float8 training without autocast only: Float8Linear reads CUDA's "
                           "autocast state (torch.is_autocast_enabled()), which the CPU trace does not set")
    if setup.quant == "hqq" and setup.use_dora:
        raise MemlintError("memlint.measure does not trace DoRA on an HQQ base")
    if setup.quant == "int8":
        raise MemlintError("an 8-bit (LLM.int8) base is not supported by memlint.measure yet")
    if setup.quant in ("gptq", "awq"):
        raise MemlintError(f"memlint.measure does not trace a {setup.quant.upper()} base: its training kernels live in "
                           "gptqmodel (transformers >= 5), which needs torch >= 2.14 and its own stack; the estimate "
                           "is read off gptqmodel's source (docs/accounting.md)")
    if setup.use_dora and setup.quant != "none":
        raise MemlintError("memlint.measure traces DoRA on an unquantized base only (peft dequantizes a bitsandbytes "
                           "weight in every DoRA forward, which memlint's 4-bit stand-in does not model)")
    if setup.objective == "kto":
        raise MemlintError("memlint.measure does not trace KTO's step (its KL pass) yet")
    if setup.objective in ("dpo",):
        from memlint.estimate.activations import logps_layout

        if logps_layout(setup)["layout"] != "logits":
            raise MemlintError(f"memlint.measure traces TRL's materialised-logits DPO step (trl < 1.15); trl "
                               f"{setup.trl_version or '(newest known)'} uses the fused LM head: pass trl_version")
    if setup.reference == "copy" and (setup.quant != "none" or model is not None):
        raise MemlintError("memlint.measure builds a reference copy only for an unquantized model it builds itself")


@dataclass
class _Run:
    """One measured run: how the model is built and counted, and the training steps."""

    setup: Setup
    mode: str                      # cuda | cpu | trace
    dev: str                       # the torch device tensors are made on
    notes: list[str]
    details: dict[str, Any]

    # ---- build -------------------------------------------------------------------------
    def prepare(self, stack: Any, model: Any, attn: str, dropout: float, fake_mode: Any) -> tuple[Any, Any]:
        """(the model to train, its frozen reference or None): built (or taken), materialised as
        fake tensors for a trace, quantized and given adapters as the setup says."""
        import torch

        ref = None
        if model is None:
            model, ref = self._build(stack, attn, dropout, fake_mode)
        elif fake_mode is not None:
            stack.enter_context(fake_mode)
            if next(model.parameters()).device.type == "meta":
                tied = _is_tied(model)
                model._apply(lambda t: torch.empty_like(t, device="cpu"))
                if tied and not _is_tied(model):
                    _retie(model)
        if self.setup.float8 != "none":
            self._float8(model)
        if fake_mode is not None:
            stack.enter_context(_unpacked_sequences_on_fake())
        if self.mode != "cuda":
            # what CUDA runs: its autocast op lists, its SDPA kernels, its fused dropout (measure/cuda_emulation.py)
            stack.enter_context(cuda_kernels(fake=fake_mode is not None))
            if self.setup.model.arch.get("post_norm") and fake_mode is not None:
                stack.enter_context(_unpadded_masks_on_fake())
        if self.setup.recompute:
            kwargs: dict[str, Any] = {"use_reentrant": False}
            if self.setup.recompute_policy == "op-sac":
                # torchtitan's op-level policy (measure/sac.py) through transformers' gradient_checkpointing_kwargs:
                # torch.utils.checkpoint.checkpoint(layer, ..., context_fn=...) for every decoder layer
                from memlint.measure.sac import context_fn

                kwargs["context_fn"] = context_fn(cpu_stand_in=self.mode != "cuda")
                self.notes.append("op-level SAC: torchtitan v0.2.2's policy (73a0e69) in torch's create_selective_checkpoint_"
                                  "contexts" + ("; CPU's flash SDPA kernel saved in place of CUDA's" if self.mode != "cuda" else ""))
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            if self.setup.recompute_every > 1:
                _every_nth_layer(model, self.setup.recompute_every)
            if self.setup.method in ("lora", "qlora"):
                model.enable_input_require_grads()
        if _trl_fused_head(self.setup):
            self._trl_fused_head(stack, model, fake_mode is not None)
        model.train()
        return model, ref

    def _trl_fused_head(self, stack: Any, model: Any, fake: bool) -> None:
        """TRL's SFTTrainer >= 1.15 (data/preference.json sft_layouts): its own add_fused_lm_head on the model, the
        step calls it with fused_lm_head=True; CUDA's Triton kernels stood in (measure/trainer_step.py). On fake
        tensors every position is scored (transformers' mask indexing has a data-dependent shape): with every label
        trained, the same tokens as CUDA's valid positions."""
        from memlint.measure.trainer_step import cuda_trl_kernels

        try:
            from trl.trainer.utils import add_fused_lm_head
        except ImportError as exc:
            raise MemlintError(f"SFTTrainer's fused LM head (trl >= 1.15) needs trl installed to be traced: {exc}") from exc
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        add_fused_lm_head(base, outputs=("log_probs", "entropy", "is_top1"))
        stack.enter_context(cuda_trl_kernels(compact=not fake))
        self.notes.append("SFTTrainer's fused LM head: trl's add_fused_lm_head and ChunkedLogProbFunction, the Triton "
                          "tile kernels stood in (in place, no allocation)")

    def _build(self, stack: Any, attn: str, dropout: float, fake_mode: Any) -> tuple[Any, Any]:
        import torch

        setup = self.setup
        build_device = {"trace": "meta", "cpu": "cpu", "cuda": "cuda"}[self.mode]
        model = _build_model(setup, build_device, attn)
        if setup.model.vision:
            self.notes.extend(_freeze_vision(model, setup))
        tied = _is_tied(model)
        ref = None
        if setup.reference == "copy":
            # TRL's create_reference_model / an explicit ref_model: a frozen second copy in eval mode
            ref = _build_model(setup.with_(method="full", objective="sft", ref_model="none"), build_device, attn)
            ref.requires_grad_(False)
            ref.eval()
        if setup.quant == "hqq":  # quantized first, then peft wraps the HQQLinear layers (dispatch_hqq)
            self._check_params(model)
            model = self._quantize_hqq(model, dropout, build_device == "meta")
        elif setup.method in ("lora", "qlora"):
            model = _apply_lora(model, setup, dropout)
        if fake_mode is not None:
            stack.enter_context(fake_mode)
            model._apply(lambda t: torch.empty_like(t, device="cpu"))
            if setup.quant == "hqq":
                from memlint.measure.quant import hqq_repoint

                hqq_repoint(model)
            if ref is not None:
                ref._apply(lambda t: torch.empty_like(t, device="cpu"))
        if tied and not _is_tied(model):
            _retie(model)  # materialising on fake storages silently unties them
        if setup.seq2seq:  # and T5's stacks from the shared embedding they read
            base = getattr(model, "base_model", model)
            while not hasattr(base, "shared") and hasattr(base, "model"):  # peft's LoraModel, BART's BartModel
                base = base.model
            for stack in (base.encoder, base.decoder):
                stack.embed_tokens.weight = base.shared.weight
        if setup.encoder and fake_mode is not None:
            model.tie_weights()  # and a masked-LM decoder's bias from the head's `bias`
        if ref is not None and tied and not _is_tied(ref):
            _retie(ref)
        if setup.quant != "hqq":
            self._check_params(model)
        if setup.method == "qlora" and setup.quant != "hqq":
            self._quantize(model)
        return model, ref

    def _float8(self, model: Any) -> None:
        """torchao's own convert_to_float8_training (default Float8LinearConfig: dynamic tensorwise scaling, e4m3
        input/weight, e5m2 grad_output); "layers" keeps lm_head in high precision as torchtitan and accelerate do.
        torch._scaled_mm has a fake kernel, so the trace runs the real (not emulated) float8 path."""
        try:
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        except ImportError:
            raise MemlintError("memlint.measure traces float8 training with torchao's Float8Linear: pip install torchao") from None
        head = model.get_output_embeddings()
        keep = {id(head)} if self.setup.float8 == "layers" and head is not None else set()
        convert_to_float8_training(model, config=Float8LinearConfig(),
                                   module_filter_fn=lambda mod, fqn: id(mod) not in keep)
        from torchao.float8.float8_linear import Float8Linear

        n = sum(isinstance(m, Float8Linear) for m in model.modules())
        self.details["float8_linears"] = n
        self.notes.append(f"float8 training: torchao's convert_to_float8_training swapped {n} linears for Float8Linear"
                          + (" (lm_head kept)" if keep else ""))

    def _check_params(self, model: Any) -> None:
        setup = self.setup
        base_params = sum(p.numel() for n, p in unique_named_parameters(model)
                          if "lora_" not in n and "modules_to_save" not in n)
        if base_params != _expected_base_params(setup):
            raise MemlintError(f"built {setup.model.id} has {base_params:,} parameters, "
                               f"catalog says {_expected_base_params(setup):,}")

    def _quantize_hqq(self, model: Any, dropout: float, meta: bool) -> Any:
        import torch

        from memlint.measure.quant import hqq_quantize

        try:
            import hqq.core.quantize  # noqa: F401
        except ImportError:
            raise MemlintError("memlint.measure traces an HQQ base with hqq's own HQQLinear: pip install hqq") from None
        compute = getattr(torch, _TORCH_DTYPES[self.setup.dtype])
        self.details["quantized_linears"] = hqq_quantize(model, self.setup.quant_bits, self.setup.quant_group_size,
                                                         compute, "meta" if meta else self.dev, meta)
        model.quantization_method = "hqq"  # what transformers' quantizer sets (peft reads it)
        if self.setup.kbit_prep:
            from peft import prepare_model_for_kbit_training

            prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
            self.notes.append("kbit_prep: peft's prepare_model_for_kbit_training ran on the HQQ base (it skips the "
                              "fp32 upcast for is_hqq_quantized)")
        self.notes.append(f"HQQ {self.setup.quant_bits}-bit base: hqq's HQQLinear (group {self.setup.quant_group_size}"
                          f"{', optimize=False on the meta device' if meta else ''}), LoRA through peft's HqqLoraLinear")
        setup = self.setup
        if setup.lora_targets == "all-linear":
            # peft's all-linear matches nn.Linear / Conv1D only, and HQQLinear is neither: a real run must name the
            # modules; the trace names every quantized one
            from hqq.core.quantize import HQQLinear

            names = sorted({n.rpartition(".")[2] for n, m in model.named_modules() if isinstance(m, HQQLinear)})
            setup = setup.with_(lora_targets=tuple(names))
            self.notes.append("peft's all-linear does not match HQQLinear (not an nn.Linear); the adapters target "
                              f"{', '.join(names)} by name")
        return _apply_lora(model, setup, dropout)

    def _quantize(self, model: Any) -> None:
        self.details["quantized_linears"] = _quantize(model, self.setup, use_bnb_matmul=self.mode == "cuda")
        if self.setup.kbit_prep:
            _prepare_for_kbit(model)
            self.notes.append("kbit_prep: peft's own prepare_model_for_kbit_training cast the base's fp16/bf16 "
                              "parameters (embeddings, norms, lm_head) to fp32")
        else:
            self.notes.append("QLoRA base: embeddings, norms and lm_head stay in the compute dtype "
                              "(no prepare_model_for_kbit_training)")

    # ---- count -----------------------------------------------------------------------------
    def meter(self, stack: Any, tracker: Any, model: Any, ref: Any) -> Any:
        """What reads the live bytes: the storage tracker (CPU, trace) or the CUDA allocator."""
        import torch

        if tracker is not None:
            stack.enter_context(tracker)
            tracker.track_all(list(model.parameters()) + list(model.buffers())
                              + ([] if ref is None else list(ref.parameters()) + list(ref.buffers())))
            return tracker
        import gc

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return _CudaMeter(torch)

    def _precision(self) -> tuple[Any, Any]:
        """(an autocast context factory, a GradScaler or None) as HF Trainer sets them up."""
        import torch

        setup = self.setup
        if setup.precision in ("amp-bf16", "amp-fp16"):
            amp_dtype = torch.bfloat16 if setup.precision == "amp-bf16" else torch.float16
            if self.mode == "cuda":
                autocast = lambda: torch.autocast("cuda", dtype=amp_dtype)  # noqa: E731
            else:  # CPU's autocast key running CUDA autocast's policies (cuda_emulation.cuda_kernels)
                autocast = lambda: cuda_autocast(amp_dtype)  # noqa: E731
        else:
            autocast = _no_ctx
        scaler = None
        if setup.precision == "amp-fp16":
            if self.mode == "cuda" and setup.dtype == "fp32":
                scaler = torch.amp.GradScaler("cuda")
            else:
                self.notes.append("amp-fp16: GradScaler left out (it unscales in place; only scalars added)")
        return autocast, scaler

    # ---- the steps ------------------------------------------------------------------------------
    def steps(self, model: Any, ref: Any, trainable: list, optimizer: Any, meter: Any, tracker: Any,
              steps: int) -> tuple[list[StepMeasurement], dict[str, int], int]:
        """Run the steps; (per-step peaks, the last step's components, paged optimizer bytes)."""
        autocast, scaler = self._precision()
        setup = self.setup
        if setup.encoder:
            head = _encoder_head(model)
        elif setup.seq2seq:
            head = model.get_output_embeddings()
        elif _trl_fused_head(setup):  # lm_head's weight is read by TRL's kernel, not called: mark at the final norm
            head = model.get_decoder().norm
        else:
            head = model.get_output_embeddings() if setup.objective != "reward" else _score_head(model)
        marks, handle = mark_head(head, meter)
        step_results: list[StepMeasurement] = []
        comp: dict[str, int] = {}
        paged_bytes = 0
        for step in range(1, steps + 1):
            phases = {"forward": 0, "backward": 0}
            activations, logits = self._micro_batches(model, ref, marks, meter, autocast, scaler, phases, step)
            grads = _storage_bytes(p.grad for p in trainable if p.grad is not None)
            meter.begin_phase((step, "optimizer"))
            progress.note(f"step {step} of {steps}: optimizer")
            opt_state, paged_bytes = self._optimizer_step(trainable, optimizer, meter, tracker, scaler, phases)
            phase = max(PHASES, key=lambda k: phases[k])
            step_results.append(StepMeasurement(step, phases[phase], phase, phases))
            comp = {"gradients": grads, "optimizer": opt_state, "activations": activations, "logits": logits}
        handle.remove()
        return step_results, comp, paged_bytes

    def _micro_batches(self, model: Any, ref: Any, marks: dict, meter: Any, autocast: Any, scaler: Any,
                       phases: dict[str, int], step: int) -> tuple[int, int]:
        """Forward and backward of every micro-batch of one step (2.. run with the gradients alive);
        the activations (saved before lm_head) and logits (after) of the largest."""
        import torch

        setup = self.setup
        rows = setup.batch * _rows(setup)
        amp = setup.precision in ("amp-bf16", "amp-fp16")
        accum = setup.grad_accum
        activations = logits = 0
        for _micro in range(accum):
            marks.clear()
            seq = setup.seq
            if setup.model.vision:  # the text and image tokens (measure._vision_inputs puts the image tokens in)
                from memlint.estimate.vision import text_seq

                seq = text_seq(setup)
            input_ids = torch.randint(0, setup.model.vocab, (rows, seq), device=self.dev)
            labels = input_ids
            if setup.seq2seq:  # the decoder's targets (T5 shifts them right into decoder_input_ids)
                labels = torch.randint(0, setup.model.vocab, (rows, setup.tgt), device=self.dev)
            if setup.encoder and setup.head == "sequence-classification":
                labels = torch.randint(0, setup.num_labels, (rows,), device=self.dev)
            elif setup.encoder and setup.head == "token-classification":
                labels = torch.randint(0, setup.num_labels, (rows, setup.seq), device=self.dev)

            images = _vision_inputs(setup, input_ids, self.dev) if setup.model.vision and setup.images else {}

            # forward (+ loss), as Trainer.compute_loss: only the loss survives
            meter.begin_phase((step, "forward"))
            progress.note(f"step {step}: forward" + (f", micro-batch {_micro + 1} of {accum}" if accum > 1 else ""))
            meter.reset_peak_memory_stats()
            start = meter.memory_allocated()
            if setup.objective == "sft":
                with autocast():
                    fused = {"fused_lm_head": True} if _trl_fused_head(setup) else {}
                    loss = model(input_ids=input_ids, labels=labels, **images, **fused).loss
            else:
                loss = _preference_loss(model, ref, setup, input_ids, autocast, amp)
            if accum > 1:
                loss = loss / accum
            after_head_peak = meter.max_memory_allocated()
            phases["forward"] = max(phases["forward"], marks.get("pre_head_peak", 0), after_head_peak)
            activations = max(activations, marks["head"] - start)
            logits = max(logits, after_head_peak - marks["head"])

            # backward
            meter.begin_phase((step, "backward"))
            progress.note(f"step {step}: backward" + (f", micro-batch {_micro + 1} of {accum}" if accum > 1 else ""))
            meter.reset_peak_memory_stats()
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            del loss, input_ids, labels, images
            phases["backward"] = max(phases["backward"], meter.max_memory_allocated())
        return activations, logits

    def _optimizer_step(self, trainable: list, optimizer: Any, meter: Any, tracker: Any, scaler: Any,
                        phases: dict[str, int]) -> tuple[int, int]:
        """Trainer's optimizer phase: clip (max_grad_norm=1.0), step, zero_grad; (state bytes, paged bytes)."""
        import torch

        from memlint.measure.optim import paged_state_tensors, state_tensors

        meter.reset_peak_memory_stats()
        if scaler is not None:
            scaler.unscale_(optimizer)
        if not self.setup.optimizer_in_bwd:  # torchtune refuses clip_grad_norm with the optimizer in backward
            torch.nn.utils.clip_grad_norm_(trainable, 1.0, foreach=True)  # CUDA's default: foreach
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        paged = list(paged_state_tensors(optimizer))
        paged_bytes = _storage_bytes(paged)
        opt_state = _storage_bytes(state_tensors(optimizer)) - paged_bytes
        if tracker is not None:
            for t in paged:
                tracker.exclude(t)
        optimizer.zero_grad(set_to_none=True)
        phases["optimizer"] = meter.max_memory_allocated()
        return opt_state, paged_bytes


def _vision_inputs(setup: Setup, input_ids: Any, dev: str) -> dict[str, Any]:
    """What Qwen2-VL's processor hands the model for `setup.images` images per row: each row's text tokens with the
    image tokens in place (written into `input_ids`, which then holds the text and image tokens: the text model's
    sequence), fp32 pixel_values (patches x C·T·P·P) and image_grid_thw (1, grid_h, grid_w per image)."""
    import torch

    from memlint.estimate.vision import image_grid, image_tokens, kind

    v = setup.model.vision
    if kind(setup.model) == "llava":
        return _llava_inputs(setup, input_ids, dev)
    if kind(setup.model) == "mllama":
        return _mllama_inputs(setup, input_ids, dev)
    gh, gw = image_grid(setup)
    n_img = image_tokens(setup) * setup.images
    rows = input_ids.shape[0]
    specials = [t for t in (v["image_token_id"], setup.model.config.get("video_token_id"),
                            setup.model.config.get("vision_start_token_id"), setup.model.config.get("vision_end_token_id"))
                if t is not None]
    for t in specials:  # random text ids must not read as image placeholders
        input_ids.masked_fill_(input_ids == t, 0)
    per = image_tokens(setup)
    if setup.seq < 2 * setup.images + 1:
        raise MemlintError(f"--seq {setup.seq}: too short for {setup.images} images between vision start/end tokens")
    start, end = setup.model.config.get("vision_start_token_id"), setup.model.config.get("vision_end_token_id")
    types = torch.zeros_like(input_ids)
    p = 1
    for _ in range(setup.images):  # <|vision_start|> <|image_pad|> x tokens <|vision_end|>, as the chat template writes it
        if start is not None:
            input_ids[:, p] = start
        input_ids[:, p + 1:p + 1 + per] = v["image_token_id"]
        types[:, p + 1:p + 1 + per] = 1
        if end is not None:
            input_ids[:, p + 1 + per] = end
        p += per + 2
    assert int((input_ids == v["image_token_id"]).sum()) == rows * n_img
    k = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2
    pixel_values = torch.randn(rows * setup.images * gh * gw, k, device=dev)
    grid = torch.tensor([[1, gh, gw]] * (rows * setup.images), device=dev)
    return {"pixel_values": pixel_values, "image_grid_thw": grid, "mm_token_type_ids": types}


def _llava_inputs(setup: Setup, input_ids: Any, dev: str) -> dict[str, Any]:
    """What LlavaProcessor hands the model: each row's text tokens with image_tokens(setup) <image> tokens per image in
    place (written into `input_ids`), and fp32 pixel_values (images x C x image_size x image_size)."""
    import torch

    from memlint.estimate.vision import image_tokens

    v = setup.model.vision
    input_ids.masked_fill_(input_ids == v["image_token_id"], 0)
    per = image_tokens(setup)
    p = 1
    for _ in range(setup.images):
        input_ids[:, p:p + per] = v["image_token_id"]
        p += per + 1
    rows = input_ids.shape[0]
    side = v["image_size"]
    return {"pixel_values": torch.randn(rows * setup.images, v["in_channels"], side, side, device=dev)}


def _mllama_inputs(setup: Setup, input_ids: Any, dev: str) -> dict[str, Any]:
    """What MllamaProcessor hands the model for `setup.images` images per row: fp32 pixel_values of max_image_tiles
    tiles per image (rows x images x tiles x C x H x W), aspect_ratio_ids of a full-tile arrangement, an all-ones
    aspect_ratio_mask, and a cross_attention_mask letting every text token attend to every tile (the <|image|> token
    itself is an ordinary text token: the random ids stand for it)."""
    import torch

    from memlint.estimate.vision import tiles

    v = setup.model.vision
    rows, n, t, side = input_ids.shape[0], setup.images, tiles(setup), v["image_size"]
    ratios = setup.model.config.get("vision_config", {}).get("supported_aspect_ratios") or \
        [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]]
    ratio_id = 1 + next(i for i, (w, h) in enumerate(ratios) if w * h == t)
    return {"pixel_values": torch.randn(rows, n, t, v["in_channels"], side, side, device=dev),
            "aspect_ratio_ids": torch.full((rows, n), ratio_id, dtype=torch.long, device=dev),
            "aspect_ratio_mask": torch.ones(rows, n, t, dtype=torch.long, device=dev),
            "cross_attention_mask": torch.ones(rows, input_ids.shape[1], n, t, dtype=torch.long, device=dev)}


def _rows(setup: Setup) -> int:
    from memlint.estimate.setup import preference

    return preference()["objectives"][setup.objective]["rows"]


def _encoder_head(model: Any) -> Any:
    """The first module after an encoder's last layer: BERT's pooler, RoBERTa's classification head, the
    token-classification dropout, the masked-LM head (what `mark_head` splits activations from logits at)."""
    base = getattr(model, model.base_model_prefix)
    if getattr(base, "pooler", None) is not None:
        return base.pooler
    # DeBERTa's ContextPooler, DistilBERT's pre_classifier; the MLM heads (BERT's cls, RoBERTa's lm_head,
    # DistilBERT's vocab_transform); token classification's dropout before its classifier
    for name in ("pooler", "pre_classifier", "cls", "lm_predictions", "lm_head", "vocab_transform", "dropout",
                 "classifier"):
        if getattr(model, name, None) is not None:
            return getattr(model, name)
    raise MemlintError("no task head found on the encoder")


def _score_head(model: Any) -> Any:
    """A sequence-classification model's head (`score` in transformers' Llama-style models)."""
    for name in ("score", "classifier"):
        head = getattr(model, name, None)
        if head is None and hasattr(model, "base_model") and hasattr(model.base_model, "model"):
            head = getattr(model.base_model.model, name, None)
        if head is not None:
            return head
    raise MemlintError("no score head found on the reward model")


def mark_head(head: Any, meter: Any) -> tuple[dict[str, int], Any]:
    """Record the live bytes (and the peak so far) when the forward reaches lm_head, then
    restart the peak: the split between activations and logits. Returns (marks, hook handle)."""
    marks: dict[str, int] = {}

    def head_pre_hook(module: Any, args: Any) -> None:
        if "head" not in marks:
            marks["head"] = meter.memory_allocated()
            marks["pre_head_peak"] = meter.max_memory_allocated()
            meter.reset_peak_memory_stats()

    return marks, head.register_forward_pre_hook(head_pre_hook)


def unique_named_parameters(model: Any) -> list[tuple[str, Any]]:
    """(name, parameter) once per parameter: tied weights are counted once."""
    seen: set[int] = set()
    out = []
    for n, p in model.named_parameters(remove_duplicate=False):
        if id(p) not in seen:
            seen.add(id(p))
            out.append((n, p))
    return out


def _storage_bytes(tensors: Any) -> int:
    from memlint.measure.tracker import storage_bytes

    return storage_bytes(tensors)


def _dtype_census(model: Any) -> dict[str, int]:
    """Bytes of parameters+buffers by dtype (each storage once)."""
    seen: dict[int, tuple[str, int]] = {}
    for t in list(model.parameters()) + list(model.buffers()):
        st = t.untyped_storage()
        seen[st._cdata] = (str(t.dtype).replace("torch.", ""), st.nbytes())
    out: dict[str, int] = {}
    for dt, n in seen.values():
        out[dt] = out.get(dt, 0) + n
    return out
