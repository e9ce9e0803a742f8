"""Rotary position embedding, rotate-half form, on (B, H, T, D) queries and keys.

The kernel is out of place, like the reference: it returns new q and k and leaves its inputs untouched, so a
caller may rotate a cached or shared tensor safely. (In place would save one write of q and k, about 0.5 MB per
LLaDA-8B layer at a 32-token block: not worth an aliasing hazard in the model code.)
"""
from __future__ import annotations

import torch

from kernels._triton import jit, tl, triton

TILE_ELEMENTS = 4096  # elements of one (BLOCK_T, D) tile per program


def rope_ref(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """q (B, H, T, D), k (B, Hkv, T, D), cos/sin (T, D) (or broadcastable to q); returns new (q, k), inputs
    untouched. x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]: written as roll(x) * [-sin1, sin2], the
    same products bit for bit in fewer ops (the CPU's small decoding passes pay per op)."""
    cos = cos.to(q.dtype)
    half = q.shape[-1] // 2
    signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1).to(q.dtype)
    return q * cos + q.roll(half, -1) * signed, k * cos + k.roll(half, -1) * signed


@jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr,
                 x_stride_b, x_stride_h, x_stride_t, out_stride_b, out_stride_h, out_stride_t,
                 cs_stride_t, n_heads, seq_len, half_dim,
                 BLOCK_T: tl.constexpr, BLOCK_HALF: tl.constexpr):
    pid_bh = tl.program_id(0)
    b = (pid_bh // n_heads).to(tl.int64)
    h = (pid_bh % n_heads).to(tl.int64)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)  # (BLOCK_T,)
    d = tl.arange(0, BLOCK_HALF)  # (BLOCK_HALF,) index into each half of D
    mask = (t[:, None] < seq_len) & (d[None, :] < half_dim)  # (BLOCK_T, BLOCK_HALF)

    x_rows = x_ptr + b * x_stride_b + h * x_stride_h + t[:, None].to(tl.int64) * x_stride_t
    x1 = tl.load(x_rows + d[None, :], mask=mask, other=0.0)
    x2 = tl.load(x_rows + half_dim + d[None, :], mask=mask, other=0.0)
    cs_rows = t[:, None] * cs_stride_t + d[None, :]
    # cos/sin rounded to x's dtype first, as the reference does
    cos1 = tl.load(cos_ptr + cs_rows, mask=mask, other=0.0).to(x1.dtype).to(tl.float32)
    cos2 = tl.load(cos_ptr + cs_rows + half_dim, mask=mask, other=0.0).to(x1.dtype).to(tl.float32)
    sin1 = tl.load(sin_ptr + cs_rows, mask=mask, other=0.0).to(x1.dtype).to(tl.float32)
    sin2 = tl.load(sin_ptr + cs_rows + half_dim, mask=mask, other=0.0).to(x1.dtype).to(tl.float32)
    a, c = x1.to(tl.float32), x2.to(tl.float32)
    out1 = a * cos1 - c * sin1  # rotate_half(x) = (-x2, x1)
    out2 = c * cos2 + a * sin2

    out_rows = out_ptr + b * out_stride_b + h * out_stride_h + t[:, None].to(tl.int64) * out_stride_t
    tl.store(out_rows + d[None, :], out1.to(x1.dtype), mask=mask)
    tl.store(out_rows + half_dim + d[None, :], out2.to(x1.dtype), mask=mask)


def _rope_one(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    batch, n_heads, seq_len, head_dim = x.shape
    out = torch.empty_like(x)  # keeps x's layout when x is dense, e.g. a transposed (B, T, H, D) projection
    if out.numel() == 0:
        return out
    block_half = triton.next_power_of_2(head_dim // 2)
    block_t = min(triton.next_power_of_2(seq_len), max(1, TILE_ELEMENTS // (2 * block_half)))
    grid = (batch * n_heads, triton.cdiv(seq_len, block_t))
    _rope_kernel[grid](x, cos, sin, out, *x.stride()[:3], *out.stride()[:3], cos.stride(0),
                       n_heads, seq_len, head_dim // 2, BLOCK_T=block_t, BLOCK_HALF=block_half)
    return out


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """q (B, H, T, D), k (B, Hkv, T, D), cos/sin (T, D); returns new (q, k), inputs untouched."""
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q and k must be (B, H, T, D); got {tuple(q.shape)} and {tuple(k.shape)}")
    seq_len, head_dim = q.shape[2], q.shape[3]
    if head_dim % 2 or k.shape[2:] != q.shape[2:]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} need the same even D and the same T")
    if cos.shape != (seq_len, head_dim) or sin.shape != (seq_len, head_dim):
        raise ValueError(f"cos/sin must be (T, D) = ({seq_len}, {head_dim}); got {tuple(cos.shape)}")
    cos, sin = cos.contiguous(), sin.contiguous()
    return _rope_one(q, cos, sin), _rope_one(k, cos, sin)
