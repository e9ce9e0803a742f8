"""RMSNorm: statistics in fp32, normalized value cast back to x's dtype before the weight (LLaDA, Qwen2)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._triton import jit, tl, triton

MAX_FEATURES = 65536  # one program holds a whole row in registers


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype == weight.dtype == torch.float32:  # the same arithmetic as one op (the CPU pays per op)
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


@jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, x_row_stride, out_row_stride, n_features, eps,
                     BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    in_row = cols < n_features
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=in_row, other=0.0)
    x32 = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x32 * x32, axis=0) / n_features + eps)
    normed = (x32 * rstd).to(x.dtype).to(tl.float32)  # round to x's dtype first, as the reference does
    w = tl.load(w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=in_row)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x (..., N), weight (N,) -> (..., N) in the promoted dtype of x and weight, like rms_norm_ref."""
    n_features = x.shape[-1]
    if weight.shape != (n_features,):
        raise ValueError(f"weight shape {tuple(weight.shape)} must be ({n_features},), the last dim of x")
    if n_features > MAX_FEATURES:
        raise ValueError(f"rms_norm kernel handles at most {MAX_FEATURES} features, got {n_features}")
    x2 = x.reshape(-1, n_features)  # (M, N), a view when x's rows are evenly strided
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty(x2.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if out.numel() == 0:
        return out.view(x.shape)
    block_n = triton.next_power_of_2(n_features)
    num_warps = min(max(block_n // 256, 1), 8)  # ~8 bf16 elements per thread per load
    _rms_norm_kernel[(x2.shape[0],)](x2, weight.contiguous(), out, x2.stride(0), out.stride(0), n_features, eps,
                                     BLOCK_N=block_n, num_warps=num_warps)
    return out.view(x.shape)
