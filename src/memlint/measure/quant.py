"""A bitsandbytes 4-bit linear layer that also works on fake tensors.

`bnb.nn.Params4bit` cannot wrap a FakeTensor, but bitsandbytes' functional ops
(`quantize_4bit`, `dequantize_4bit`, `dequantize_blockwise`) have fake kernels. So the
layer stores exactly what `bnb.nn.Linear4bit` stores (the packed uint8 weight, numel/2
bytes, and its `QuantState`: absmax fp32 per 64 weights, or with double quantization
uint8 per 64 + fp32 per 256 blocks + offset + the shared 256-entry code) and its
autograd function replays `bnb.autograd.MatMul4Bit` op for op with the dequantize +
F.linear fallback that CUDA takes for more than 1536 rows: forward dequantizes to the
compute dtype (a transient), saves only the packed weight; backward dequantizes again.
On CUDA with real tensors the layer calls `bnb.matmul_4bit` itself.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def _dequant_absmax(state: Any) -> torch.Tensor:
    """The per-64 absmax in fp32 (double quant: dequantize the uint8 absmax, add offset)."""
    if not state.nested:
        return state.absmax
    absmax = torch.ops.bitsandbytes.dequantize_blockwise.default(
        state.absmax, state.state2.absmax, state.state2.code, state.state2.blocksize, torch.float32
    )
    return absmax + state.offset


def _dequant(packed: torch.Tensor, state: Any, dtype: torch.dtype) -> torch.Tensor:
    absmax = _dequant_absmax(state)
    return torch.ops.bitsandbytes.dequantize_4bit.default(
        packed, absmax, state.blocksize, state.quant_type, list(state.shape), dtype
    )


class _MatMul4Bit(torch.autograd.Function):
    """bnb.autograd._functions.MatMul4Bit, CUDA fallback path, spelled in visible ops."""

    @staticmethod
    def forward(ctx, A, packed, bias, state, keep_input=False):  # type: ignore[override]
        W = _dequant(packed, state, A.dtype)
        out = F.linear(A, W, bias)
        ctx.state = state
        ctx.dtype_bias = None if bias is None else bias.dtype
        # bnb >= 0.43.2 keeps (None, B): the packed weight only; before (bitsandbytes#1270) it kept
        # ctx.tensors = (A, B), the layer's input too, whenever an input needed a gradient
        ctx.save_for_backward(packed, A) if keep_input else ctx.save_for_backward(packed)
        return out

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        packed = ctx.saved_tensors[0]
        grad_A = grad_bias = None
        if ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0, dtype=ctx.dtype_bias)
        if ctx.needs_input_grad[0]:
            W = _dequant(packed, ctx.state, ctx.state.dtype).to(grad_output.dtype)
            grad_A = torch.matmul(grad_output, W)
        return grad_A, None, grad_bias, None, None


def _prefill_dynamic_map(device: torch.device) -> None:
    """bitsandbytes builds its 256-entry 'dynamic' code lazily with .tolist(), which a
    fake tensor cannot answer: build it (once, real) outside any fake mode."""
    import bitsandbytes.functional as bnbF
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    if "dynamic" not in bnbF.name2qmap:
        with unset_fake_temporarily():
            dev = "cpu" if device.type == "meta" else device
            bnbF.name2qmap["dynamic"] = bnbF.create_dynamic_map().to(dev)


class Linear4bit(torch.nn.Module):
    """Frozen 4-bit linear: packed weight + QuantState buffers, compute in `compute_dtype`."""

    def __init__(self, linear: torch.nn.Linear, quant_type: str, double_quant: bool,
                 compute_dtype: torch.dtype, use_bnb_matmul: bool = False, keep_input: bool = False) -> None:
        super().__init__()
        self.keep_input = keep_input  # bitsandbytes < 0.43.2: MatMul4Bit keeps its input for backward
        import bitsandbytes.functional as bnbF

        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.compute_dtype = compute_dtype
        self.use_bnb_matmul = use_bnb_matmul
        _prefill_dynamic_map(linear.weight.device)
        w = linear.weight.detach().to(compute_dtype)
        packed, state = bnbF.quantize_4bit(
            w, blocksize=64, compress_statistics=double_quant, quant_type=quant_type, quant_storage=torch.uint8
        )
        del w
        self.quant_state = state
        # Register every tensor the quant state holds, so model.buffers() sees them.
        self.register_buffer("weight", packed, persistent=False)
        self.register_buffer("absmax", state.absmax, persistent=False)
        self.register_buffer("code", state.code, persistent=False)
        if state.nested:
            self.register_buffer("absmax2", state.state2.absmax, persistent=False)
            self.register_buffer("code2", state.state2.code, persistent=False)
            self.register_buffer("offset", state.offset, persistent=False)
        self.bias = linear.bias  # stays a (frozen) parameter in its dtype, as in bnb
        if self.bias is not None:
            self.bias.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # bnb.nn.Linear4bit.forward: bias to x.dtype; x cast to compute_dtype
        bias = None if self.bias is None else self.bias.to(self.compute_dtype)
        inp_dtype = x.dtype
        x = x.to(self.compute_dtype)
        self.quant_state.dtype = self.compute_dtype
        if self.use_bnb_matmul:
            import bitsandbytes as bnb

            out = bnb.matmul_4bit(x, self.weight, bias=bias, quant_state=self.quant_state)
        else:
            out = _MatMul4Bit.apply(x, self.weight, bias, self.quant_state, self.keep_input)
        return out.to(inp_dtype)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"quant_type={self.quant_state.quant_type}, nested={self.quant_state.nested}")


def hqq_quantize(model: Any, bits: int, group_size: int, compute_dtype: torch.dtype, device: str,
                 meta: bool) -> int:
    """Replace every Linear inside the decoder (not lm_head: HqqConfig's skip_modules default) by hqq's own
    `HQQLinear`, as transformers' HQQ quantizer (4.x create_quantized_param) does: HQQLinear(module,
    BaseQuantizeConfig(nbits, group_size, axis=1), compute_dtype=<the load dtype>, del_orig=True), default backend
    (HQQBackend.PYTORCH: HQQMatmulNoCacheMul). scale and zero live in the layer's `meta` dict, which
    `model.buffers()` does not see: they are registered as non-persistent buffers (the same storages) so the
    meter counts them. On the meta device (the trace quantizes there, then materialises fake tensors) the proximal
    optimiser's early stop (`if current_error < best_error`) cannot be decided, so the layer is quantized with
    `optimize=False`: the same tensors, shapes and dtypes, only the values are not refined."""
    from hqq.core.quantize import BaseQuantizeConfig, HQQLinear

    out_emb = model.get_output_embeddings()
    cfg = BaseQuantizeConfig(nbits=bits, group_size=None if group_size == -1 else group_size, axis=1)
    if meta:
        cfg["weight_quant_params"]["optimize"] = False
    plain = [(n, m) for n, m in model.named_modules() if type(m) is torch.nn.Linear and m is not out_emb]
    for name, module in plain:
        module.requires_grad_(False)
        layer = HQQLinear(module, cfg, del_orig=True, compute_dtype=compute_dtype, device=device)
        for key in ("scale", "zero"):
            if isinstance(layer.meta.get(key), torch.Tensor):
                layer.register_buffer(f"hqq_{key}", layer.meta[key], persistent=False)
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer)
    return len(plain)


def hqq_repoint(model: Any) -> None:
    """After the model's tensors were materialised (model._apply), point each HQQLinear's meta dict at its new
    scale / zero buffers again (the dict still holds the meta-device originals)."""
    from hqq.core.quantize import HQQLinear

    for m in model.modules():
        if isinstance(m, HQQLinear):
            for key in ("scale", "zero"):
                if hasattr(m, f"hqq_{key}"):
                    m.meta[key] = getattr(m, f"hqq_{key}")
