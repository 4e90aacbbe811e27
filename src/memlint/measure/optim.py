"""Optimizers as HF Trainer builds them, with the GPU's defaults spelled out.

Trainer passes `lr` (5e-5) and, for Adam, betas/eps; two parameter groups (decay /
no decay); torch picks foreach=True on CUDA when nothing is said, so the CPU trace says
it explicitly. Only trainable parameters reach the optimizer.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from memlint.errors import MemlintError

LR = 5e-5
ADAM = {"betas": (0.9, 0.999), "eps": 1e-8}
BNB_PAGED_MIN_NUMEL = 100_000  # bitsandbytes' get_state_buffer: smaller tensors are never paged


def param_groups(model: torch.nn.Module) -> list[dict[str, Any]]:
    """Trainer.create_optimizer's two groups (weight_decay = Trainer's default 0.0)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    try:
        from transformers import Trainer

        decay = set(Trainer.get_decay_parameter_names(None, model))  # does not use self
    except Exception:  # pragma: no cover - transformers API drift
        decay = {n for n, _ in named}
    groups = [
        {"params": [p for n, p in named if n in decay], "weight_decay": 0.0},
        {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


class MasterWeights(torch.optim.Optimizer):
    """bf16 model weights, fp32 master copy + fp32 optimizer states (DeepSpeed's
    BF16_Optimizer / Megatron mixed precision, reduced to what memory sees).

    step(): fp32 copies of all grads are made (DeepSpeed keeps that fp32 gradient buffer
    for the whole run; here it lives only through the step), the inner optimizer updates
    the fp32 masters, and the result is copied back into the bf16 weights in place.
    """

    def __init__(self, groups: list[dict[str, Any]], inner_cls: type, **kwargs: Any) -> None:
        self.model_groups = [list(g["params"]) for g in groups]
        master_groups = []
        for g in groups:
            masters = [torch.nn.Parameter(p.detach().to(torch.float32), requires_grad=True) for p in g["params"]]
            master_groups.append({**g, "params": masters})
        self.inner = inner_cls(master_groups, **kwargs)
        self.master_groups = [g["params"] for g in self.inner.param_groups]
        # Share param_groups/state with the inner optimizer (what schedulers would touch).
        self.param_groups = self.inner.param_groups
        self.state = self.inner.state
        self.defaults = self.inner.defaults

    def masters(self) -> list[torch.Tensor]:
        return [m for g in self.master_groups for m in g]

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        for ps, ms in zip(self.model_groups, self.master_groups):
            for p, m in zip(ps, ms):
                m.grad = None if p.grad is None else p.grad.to(torch.float32)
        self.inner.step()
        for ps, ms in zip(self.model_groups, self.master_groups):
            for p, m in zip(ps, ms):
                p.copy_(m)
                m.grad = None

    def zero_grad(self, set_to_none: bool = True) -> None:  # type: ignore[override]
        for ps in self.model_groups:
            for p in ps:
                p.grad = None


def build_galore(name: str, model: torch.nn.Module, rank: int, targets: Any,
                 fake: bool = False) -> tuple[torch.optim.Optimizer, list[str]]:
    """GaLore as transformers' Trainer builds it: Trainer.get_optimizer_cls_and_kwargs with the run's
    TrainingArguments (optim, optim_target_modules, optim_args) picks galore_torch's class and the parameter
    groups itself (_setup_low_rank_optimizer), and create_optimizer passes its `params`; the layerwise
    variants register transformers' own post-accumulate-grad hooks."""
    import tempfile

    from transformers import Trainer, TrainingArguments

    if "8bit" in name and fake:
        raise MemlintError(f"optim {name!r}: bitsandbytes' 8-bit GaLore step reads tensor values (.item()), which a "
                           "fake-tensor trace cannot; measure it with --device cpu or on a GPU")
    try:
        import galore_torch  # noqa: F401
    except ImportError as exc:
        raise MemlintError(f"optim {name!r} needs galore-torch (pip install galore-torch): {exc}") from exc
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, optim=name, learning_rate=LR, report_to=[],
                                 optim_target_modules=targets if isinstance(targets, str) else list(targets),
                                 optim_args=f"rank={rank}")
    if fake:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    else:
        cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    params = kwargs.pop("params")
    if "optimizer_dict" in kwargs:  # Trainer.create_optimizer: the layerwise dummy takes the per-parameter dict
        params = kwargs.pop("optimizer_dict")
    notes = [f"GaLore: transformers' {cls.__name__} over its own parameter groups (rank {rank}, "
             f"optim_target_modules {targets!r})"]
    return cls(params, **kwargs), notes


def reset_bnb_overrides() -> None:
    """Forget the per-module overrides registered with bitsandbytes' process-wide GlobalOptimManager (transformers'
    Trainer registers 32-bit state for embeddings; memlint.measure does the same): kept, a freed parameter's id can
    come back on a later model's parameter in the same process and carry the override to it."""
    import sys

    bnb_optim = sys.modules.get("bitsandbytes.optim")
    if bnb_optim is None:
        return
    manager = bnb_optim.GlobalOptimManager.get_instance()
    manager.module_weight_config_triple.clear()
    manager.pid2config.clear()
    manager.index2config.clear()


def build_optimizer(name: str, model: torch.nn.Module, *, master_fp32: bool = False,
                    fake: bool = False, params: list | None = None,
                    split_dtensors: bool = False) -> tuple[torch.optim.Optimizer, list[str]]:
    """The optimizer Trainer would build for `optim=name`; returns it and notes. `params`: an
    optimizer over these parameters only (one group), as torchtune builds one per parameter.
    `split_dtensors`: each group split into its DTensor and its plain parameters (a tensor-parallel
    model keeps both; one foreach kernel cannot take a mix)."""
    notes: list[str] = []
    groups = param_groups(model) if params is None else [{"params": list(params), "weight_decay": 0.0}]
    if split_dtensors:
        from torch.distributed.tensor import DTensor

        groups = [{**g, "params": ps} for g in groups
                  for ps in ([p for p in g["params"] if isinstance(p, DTensor)],
                             [p for p in g["params"] if not isinstance(p, DTensor)]) if ps]
    if not groups:
        raise MemlintError("no trainable parameters: nothing for the optimizer to update")

    if name in ("adamw_torch", "adamw_torch_foreach", "adamw_hf"):
        if name == "adamw_hf":
            notes.append("adamw_hf (transformers' own AdamW, removed in 4.46) measured as torch AdamW foreach=False")
            cls, kw = torch.optim.AdamW, {"lr": LR, **ADAM, "foreach": False}
        else:
            cls, kw = torch.optim.AdamW, {"lr": LR, **ADAM, "foreach": True}
    elif name == "adamw_torch_fused":
        cls, kw = torch.optim.AdamW, {"lr": LR, **ADAM, "fused": True}
    elif name == "adamw_torch_forloop":
        cls, kw = torch.optim.AdamW, {"lr": LR, **ADAM, "foreach": False}
    elif name == "sgd":
        cls, kw = torch.optim.SGD, {"lr": LR, "foreach": True}
    elif name == "adafactor":
        from transformers.optimization import Adafactor

        cls, kw = Adafactor, {"lr": LR, "scale_parameter": False, "relative_step": False}
    elif name in ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit",
                  "adamw_bnb_32bit", "lion_8bit", "paged_lion_8bit", "lion_32bit", "paged_lion_32bit"):
        try:
            import bitsandbytes.optim as bo
        except Exception as exc:  # pragma: no cover
            raise MemlintError(f"optim {name!r} needs bitsandbytes: {exc}") from exc
        bits = 8 if "8bit" in name else 32
        paged = name.startswith("paged_")
        if "lion" in name:
            cls = bo.Lion
            kw = {"lr": LR, "betas": (0.9, 0.999), "optim_bits": bits, "is_paged": paged}
        else:
            cls = bo.AdamW
            kw = {"lr": LR, **ADAM, "optim_bits": bits, "is_paged": paged}
        if fake and paged:
            notes.append("paged optimizer states (tensors >= 1e5 elements) live in CUDA unified memory, "
                         "outside max_memory_allocated: taken off the count after each step; the step-1 peak "
                         "still includes them")
        if master_fp32:
            raise MemlintError(f"--precision master-fp32 with {name} is not supported by memlint.measure")
        if bits == 8 and params is None:
            # transformers' Trainer.create_optimizer: every nn.Embedding's weight gets 32-bit state
            manager = bo.GlobalOptimManager.get_instance()
            for module in model.modules():
                if isinstance(module, torch.nn.Embedding):
                    manager.register_module_override(module, "weight", {"optim_bits": 32})
            notes.append("bitsandbytes 8-bit: the embeddings' state 32-bit, as transformers' Trainer registers it")
        if fake:
            # bitsandbytes builds its quantization maps with .tolist(): build it outside the fake mode.
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            with unset_fake_temporarily():
                return cls(groups, **kw), notes
        return cls(groups, **kw), notes
    else:
        raise MemlintError(f"optim {name!r} is not supported by memlint.measure")

    if master_fp32:
        notes.append("master-fp32: fp32 master weights and fp32 optimizer states; fp32 grad copies live "
                     "through the optimizer step only (DeepSpeed keeps them for the whole run)")
        return MasterWeights(groups, cls, **kw), notes
    return cls(groups, **kw), notes


def state_tensors(optimizer: torch.optim.Optimizer) -> Iterable[torch.Tensor]:
    """Every tensor the optimizer keeps between steps (states, master copies)."""
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                yield v
    if isinstance(optimizer, MasterWeights):
        yield from optimizer.masters()


def paged_state_tensors(optimizer: torch.optim.Optimizer) -> Iterable[torch.Tensor]:
    """bitsandbytes paged optimizers: the state buffers that get_state_buffer pages."""
    if not getattr(optimizer, "is_paged", False):
        return
    for p, state in optimizer.state.items():
        if p.numel() < BNB_PAGED_MIN_NUMEL:
            continue
        for key in ("state1", "state2"):
            v = state.get(key)
            if isinstance(v, torch.Tensor):
                yield v


class InBackward:
    """The optimizer step fused into backward, the way torchtune runs `optimizer_in_bwd: True`
    (torchtune/training/memory.py register_optim_in_bwd_hooks, after PyTorch's "How to save memory
    by fusing the optimizer step into the backward pass" tutorial): one optimizer per trainable
    parameter, and a post-accumulate-grad hook on each parameter that steps its optimizer and
    zeroes (frees) its gradient. The step after backward has nothing left to do."""

    def __init__(self, name: str, model: torch.nn.Module, *, master_fp32: bool = False, fake: bool = False) -> None:
        if master_fp32:
            raise MemlintError("--precision master-fp32 with the optimizer in backward is not supported by memlint.measure")
        self.optim_dict: dict[Any, torch.optim.Optimizer] = {}
        self.notes: list[str] = []
        for p in model.parameters():  # model.parameters() yields a tied weight once, as torchtune's dict does
            if p.requires_grad:
                self.optim_dict[p], notes = build_optimizer(name, model, fake=fake, params=[p])
                self.notes = self.notes or notes
        if not self.optim_dict:
            raise MemlintError("no trainable parameters: nothing for the optimizer to update")
        optim_dict = self.optim_dict

        def optim_step(param: Any) -> None:
            optim_dict[param].step()
            optim_dict[param].zero_grad()

        self.handles = [p.register_post_accumulate_grad_hook(optim_step) for p in optim_dict]

    @property
    def state(self) -> dict[Any, Any]:
        return {p: st for opt in self.optim_dict.values() for p, st in opt.state.items()}

    def step(self) -> None:
        """Every parameter was stepped in backward."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Every gradient was freed by its hook."""

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
