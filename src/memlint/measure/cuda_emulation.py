"""What a CUDA training step runs that the CPU would run differently, for a trace (or real tensors) on the CPU.

Memory is a property of the kernels a step runs and of what autograd saves for them; the CPU build of torch picks
other kernels than CUDA for three things that change the saved tensors of every transformers model:

- **autocast**: CUDA's autocast has its own op lists (torch's `ATen/autocast_mode.h`: `AT_FORALL_LOWER_PRECISION_FP`,
  `AT_FORALL_FP32`, `AT_FORALL_FP32_SET_OPT_DTYPE`, `AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`, `AT_FORALL_PROMOTE`):
  layer_norm, rms_norm, softmax, log_softmax, pow, sum, exp, rsqrt ... run in fp32, while CPU's autocast has a different
  list (no layer_norm, pow or softmax; cat and stack promoted). `cuda_autocast` re-registers the CPU autocast key's
  kernels with CUDA's policies, op by op, read from the installed torch's header (data/cuda_autocast.json where the
  header is absent). The casts happen at the autocast dispatch key, above autograd, exactly where CUDA's happen, so
  autograd saves what it saves on CUDA. The weight cache (a leaf fp32 parameter's half copy reused within one autocast
  region) is kept as CUDA keeps it.
- **scaled_dot_product_attention**: CUDA picks flash (fp16/bf16, no mask; dropout inside), then memory-efficient (fp32
  too, an additive mask, dropout inside), then the math path (attention.cpp / sdp_utils.cpp); a boolean mask is
  converted to an additive one in the query's dtype for every call, and the efficient kernel saves it. None of the
  fused kernels keeps an s x s score matrix: q, k, v, the output and an fp32 logsumexp per query (efficient: padded to
  32 positions). The CPU runs its flash kernel only without dropout and falls back to the math path (the s x s scores)
  otherwise. `cuda_sdpa` runs the CUDA kernels' own ops (their meta kernels) on fake tensors, and the CPU flash kernel
  (the same saved tensors, dropout left out) on real CPU tensors.
- **dropout**: CUDA runs the fused `native_dropout`, which saves a bool mask (1 byte an element); the CPU decomposes
  dropout into `bernoulli_` and keeps a mask in the input's dtype. `cuda_dropout` routes aten::dropout to
  native_dropout.
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

# autocast_mode.h's list macros and the policy CUDA registers each with (autocast_mode.cpp)
_LISTS = {
    "AT_FORALL_LOWER_PRECISION_FP": "lower_precision_fp",
    "AT_FORALL_FP32": "fp32",
    "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32_set_opt_dtype",
    "AT_FORALL_PROMOTE": "promote",
}


def parse_autocast_header(text: str) -> dict[str, str]:
    """{"aten::op.overload": policy} from the text of torch's ATen/autocast_mode.h."""
    out: dict[str, str] = {}
    for macro, policy in _LISTS.items():
        m = re.search(r"#define " + macro + r"\(_\)\s*\\\n(.*?)(?:\n\s*\n|\n#)", text, re.S)
        if m is None:
            continue
        for op, overload in re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", m.group(1)):
            out[f"aten::{op}" + (f".{overload}" if overload else "")] = policy
    m = re.search(r"#define AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE\(_\)(.*?)(?:\n\s*\n|\n#)", text, re.S)
    if m is not None:
        for name in re.findall(r'"(\w+\.\w+)"', m.group(1)):
            out[f"aten::{name}"] = "fp32_append_dtype"
    return out


@lru_cache(maxsize=1)
def autocast_policies() -> tuple[dict[str, str], str]:
    """CUDA autocast's policy per op and where it was read: the installed torch's own header, else the packaged copy
    (data/cuda_autocast.json, copied from the header of the torch version it names)."""
    import torch

    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if header.is_file():
        policies = parse_autocast_header(header.read_text("utf-8", errors="replace"))
        if policies:
            return policies, f"torch {torch.__version__}'s ATen/autocast_mode.h"
    from memlint import data

    doc = data.load("cuda_autocast.json")
    return dict(doc["policies"]), f"data/cuda_autocast.json (torch {doc['torch']})"


def _floating(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


class _Cache:
    """autocast's weight cache (autocast_mode.cpp cached_cast): the half copy of a leaf fp32 tensor that requires grad,
    made once per autocast region."""

    def __init__(self) -> None:
        self.copies: dict[int, tuple[Any, Any]] = {}

    def cast(self, t: Any, dtype: Any) -> Any:
        import torch

        if not _floating(t) or t.dtype == dtype:
            return t
        cacheable = (dtype != torch.float32 and t.dtype == torch.float32 and t.requires_grad and t.is_leaf
                     and not t._is_view())
        if not cacheable:
            return t.to(dtype)
        hit = self.copies.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        out = t.to(dtype)
        self.copies[id(t)] = (t, out)
        return out


def _map(fn: Any, value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_map(fn, v) for v in value)
    return fn(value)


def _tensors(values: Any) -> Iterator[Any]:
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _tensors(v)
        else:
            yield v


class _AutocastKernels:
    """Python kernels at the AutocastCPU key that apply CUDA's policy to each op (and no cast to an op only CPU's
    autocast lists)."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.cache = _Cache()
        self.policies, self.source = autocast_policies()
        self.lib: Any = None

    def _kernel(self, op: Any, policy: str | None) -> Any:
        torch = self.torch
        keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
        dtype_arg = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"), None)
        dtype_kwonly = dtype_arg is not None and op._schema.arguments[dtype_arg].kwarg_only

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with torch._C._ExcludeDispatchKeyGuard(keyset):
                low = torch.get_autocast_dtype("cpu")
                if policy == "lower_precision_fp":
                    args, kwargs = self._cast_all(args, kwargs, low)
                elif policy == "fp32":
                    args, kwargs = self._cast_all(args, kwargs, torch.float32)
                elif policy == "promote":
                    wide = torch.float32 if any(_floating(t) and t.dtype == torch.float32
                                                for t in _tensors(list(args) + list(kwargs.values()))) else low
                    args, kwargs = self._cast_all(args, kwargs, wide)
                elif policy == "fp32_set_opt_dtype" and args and _floating(args[0]):
                    if dtype_kwonly:
                        if kwargs.get("dtype") is None:
                            kwargs = {**kwargs, "dtype": torch.float32}
                    elif dtype_arg is not None:
                        args = list(args) + [None] * max(0, dtype_arg + 1 - len(args))
                        if args[dtype_arg] is None:
                            args[dtype_arg] = torch.float32
                elif policy == "fp32_append_dtype" and args and _floating(args[0]):
                    target = {"Scalar": torch.ops.aten.norm.ScalarOpt_dtype,
                              "ScalarOpt_dim": torch.ops.aten.norm.ScalarOpt_dim_dtype}[op._overloadname]
                    return target(*args, **kwargs, dtype=torch.float32)
                return op(*args, **kwargs)

        return kernel

    def _cast_all(self, args: tuple, kwargs: dict, dtype: Any) -> tuple[tuple, dict]:
        cast = lambda t: self.cache.cast(t, dtype) if _floating(t) else t  # noqa: E731
        return _map(cast, args), {k: _map(cast, v) for k, v in kwargs.items()}

    def register(self) -> None:
        torch = self.torch
        cpu_ops = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU"))
        names = sorted(cpu_ops | set(self.policies))
        self.lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            for name in names:
                op = _op(torch, name)
                if op is None:
                    continue
                policy = self.policies.get(name)
                # an op only CPU's autocast lists falls through, as it does on CUDA: a composite (cross_entropy_loss)
                # then decomposes with autocast still on, its parts (log_softmax, nll_loss) taking CUDA's policies
                kernel = self._kernel(op, policy) if policy else torch.library.fallthrough_kernel
                self.lib.impl(name.split("::", 1)[1], kernel, "AutocastCPU")

    def unregister(self) -> None:
        if self.lib is not None:
            self.lib._destroy()
            self.lib = None


def _op(torch: Any, name: str) -> Any:
    base, _, overload = name.split("::", 1)[1].partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


_ACTIVE: list[_AutocastKernels] = []


@contextlib.contextmanager
def cuda_autocast_kernels() -> Iterator[_AutocastKernels]:
    """Inside, the CPU autocast key runs CUDA autocast's policies (enter `autocast(dtype)` for a region). Their weight
    cache empties where torch empties its own: when the outermost autocast region closes (torch.autocast.__exit__ calls
    torch.clear_autocast_cache; also the regions torch.utils.checkpoint opens to recompute a layer)."""
    import torch

    kernels = _AutocastKernels()
    kernels.register()
    _ACTIVE.append(kernels)
    clear = torch.clear_autocast_cache

    def clear_autocast_cache() -> None:
        clear()
        for k in _ACTIVE:
            k.cache.copies.clear()

    torch.clear_autocast_cache = clear_autocast_cache
    try:
        yield kernels
    finally:
        torch.clear_autocast_cache = clear
        _ACTIVE.remove(kernels)
        kernels.unregister()


@contextlib.contextmanager
def autocast(dtype: Any) -> Iterator[None]:
    """One autocast region, as `torch.autocast("cuda", dtype)` opens one: CPU's autocast key switched on (running
    CUDA's policies when `cuda_autocast_kernels` is active; their weight cache emptied when the region closes)."""
    import torch

    with torch.autocast("cpu", dtype=dtype):
        yield


# ------------------------------------------------------------------------------------------------ attention
def sdpa_kernel(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float) -> str:
    """The kernel CUDA's SDPA picks on an sm80+ GPU for these tensors (estimate.decoder.sdpa_kernel, from
    data/cuda_sdpa.json): flash, efficient or math."""
    from memlint.estimate.decoder import sdpa_kernel as pick

    return pick(query.element_size(), attn_mask is not None, query.shape[-1], value.shape[-1],
                key.shape[-3] != query.shape[-3])


def _additive(mask: Any, dtype: Any) -> Any:
    """attention.cpp convert_boolean_attn_mask: zeros of the query's dtype, -inf where the bool mask is False (a new
    tensor every call); an additive mask as it is."""
    import torch

    if mask is None or mask.dtype != torch.bool:
        return mask
    out = torch.zeros_like(mask, dtype=dtype)
    return out.masked_fill_(mask.logical_not(), float("-inf"))


_FUSED: list[Any] = []


def _fused_on_cpu() -> Any:
    """An autograd Function for real CPU tensors that computes attention with the CPU flash kernel (dropout left out: it
    has none) and allocates and keeps what CUDA's fused kernel does (their meta kernels in torch/_meta_registrations.py):
    flash: its output laid out like the query (empty_like), an fp32 logsumexp (b, heads, q), a (2,) and a () uint64
    philox seed and offset; memory-efficient: its output (b, q, heads, d) transposed, the logsumexp padded to 32 query
    positions, two () int64 seeds, and the additive mask. Backward runs the CPU flash kernel's backward on them."""
    if _FUSED:
        return _FUSED[0]
    import torch

    class FusedOnCpu(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, query: Any, key: Any, value: Any, mask: Any, efficient: bool, is_causal: bool,
                    scale: Any) -> Any:
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, 0.0, is_causal, attn_mask=mask, scale=scale)
            b, h, m, d = query.shape[0], query.shape[1], query.shape[2], value.shape[-1]
            if efficient:
                res = torch.empty(b, m, h, d, dtype=query.dtype).transpose(1, 2)
                kept = torch.empty(b, h, 32 * math.ceil(m / 32), dtype=torch.float32)
                kept[..., :m] = lse
                seeds = (torch.empty((), dtype=torch.long), torch.empty((), dtype=torch.long))
            else:
                res = torch.empty_like(query)
                kept = lse
                seeds = (torch.empty(2, dtype=torch.uint64), torch.empty((), dtype=torch.uint64))
            res.copy_(out)
            del out
            ctx.is_causal, ctx.scale, ctx.has_mask = is_causal, scale, mask is not None
            ctx.save_for_backward(query, key, value, res, kept, *((mask,) if mask is not None else ()), *seeds)
            ctx.rows = m
            return res

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            query, key, value, res, kept, *rest = ctx.saved_tensors
            mask = rest[0] if ctx.has_mask else None
            gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                grad, query, key, value, res, kept[..., :ctx.rows], 0.0, ctx.is_causal, attn_mask=mask,
                scale=ctx.scale)
            return gq, gk, gv, None, None, None, None

    _FUSED.append(FusedOnCpu)
    return FusedOnCpu


@contextlib.contextmanager
def cuda_sdpa(fake: bool) -> Iterator[None]:
    """F.scaled_dot_product_attention as CUDA runs it (module docstring). `fake`: the tensors are FakeTensors (the CUDA
    kernels' meta kernels run); else real CPU tensors, where the CPU flash kernel (the same saved tensors as CUDA's
    fused kernels, the mask kept as the efficient kernel keeps it) runs, without dropout (it has none)."""
    import torch
    import torch.nn.functional as F

    orig = F.scaled_dot_product_attention

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                     enable_gqa=False):
        if torch.is_autocast_enabled("cpu"):  # SDPA is on CUDA autocast's lower-precision list
            low = torch.get_autocast_dtype("cpu")
            query, key, value = (t.to(low) if _floating(t) else t for t in (query, key, value))
            if attn_mask is not None and _floating(attn_mask):
                attn_mask = attn_mask.to(low)
        kernel = sdpa_kernel(query, key, value, attn_mask, dropout_p)
        if kernel == "math":  # CUDA's math path is the same composite as the CPU's (scores kept)
            with torch.autocast("cpu", enabled=False):
                return torch.ops.aten._scaled_dot_product_attention_math(
                    query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]
        with torch.autocast("cpu", enabled=False):
            mask = _additive(attn_mask, query.dtype)
            if not fake:  # the CPU flash kernel computes, laid out and kept as the CUDA kernel keeps it
                return _fused_on_cpu().apply(query, key, value, mask, kernel == "efficient", is_causal, scale)
            if kernel == "flash":
                return torch.ops.aten._scaled_dot_product_flash_attention(
                    query, key, value, dropout_p, is_causal, False, scale=scale)[0]
            if mask is not None:  # preprocess_mask: expanded to (b, heads, q, k), a view
                mask = mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, mask, True, dropout_p, is_causal, scale=scale)[0]

    F.scaled_dot_product_attention = scaled_dot_product_attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = orig


@contextlib.contextmanager
def cuda_dropout() -> Iterator[None]:
    """aten::dropout as CUDA runs it in training: the fused native_dropout (a bool mask saved), not CPU's bernoulli_
    mask in the input's dtype. Registered at the autograd key of CPU tensors, so F.dropout, nn.Dropout and torch.dropout
    all take it."""
    import torch

    lib = torch.library.Library("aten", "IMPL")

    def dropout(input: Any, p: float, train: bool) -> Any:
        if not train or p == 0.0 or input.numel() == 0:
            return input  # as aten's dropout returns it
        if p == 1.0:
            return input.mul(0.0)
        return torch.ops.aten.native_dropout(input, p, True)[0]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib.impl("dropout", dropout, "AutogradCPU")
    try:
        yield
    finally:
        lib._destroy()


@contextlib.contextmanager
def cuda_kernels(fake: bool) -> Iterator[None]:
    """All three: CUDA autocast's policies (effective inside `autocast(dtype)` regions), CUDA's SDPA kernels, CUDA's
    fused dropout."""
    with cuda_autocast_kernels(), cuda_sdpa(fake), cuda_dropout():
        yield
