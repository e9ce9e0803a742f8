"""SwiGLU gate: silu(gate) * up."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._triton import jit, tl, triton

BLOCK_N_MAX = 1024  # elements per program along a row


def swiglu_ref(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


@jit
def _swiglu_kernel(gate_ptr, up_ptr, out_ptr, gate_row_stride, up_row_stride, out_row_stride, n_cols,
                   BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    gate = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0)
    up = tl.load(up_ptr + row * up_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    g = gate.to(tl.float32)
    silu = (g * tl.sigmoid(g)).to(gate.dtype).to(tl.float32)  # rounded to gate's dtype, as F.silu does
    tl.store(out_ptr + row * out_row_stride + cols, (silu * up).to(out_ptr.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """(..., N) -> (M, N) with unit column stride; a view for a slice of a fused projection."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up in one pass; gate and up (..., N) of one shape, out in their promoted dtype."""
    if gate.shape != up.shape:
        raise ValueError(f"gate {tuple(gate.shape)} and up {tuple(up.shape)} must have the same shape")
    gate2, up2 = _rows(gate), _rows(up)
    n_rows, n_cols = gate2.shape
    out = torch.empty((n_rows, n_cols), dtype=torch.promote_types(gate.dtype, up.dtype), device=gate.device)
    if out.numel() == 0:
        return out.view(gate.shape)
    block_n = min(triton.next_power_of_2(n_cols), BLOCK_N_MAX)
    grid = (n_rows, triton.cdiv(n_cols, block_n))
    _swiglu_kernel[grid](gate2, up2, out, gate2.stride(0), up2.stride(0), out.stride(0), n_cols,
                         BLOCK_N=block_n, num_warps=4)
    return out.view(gate.shape)
