"""Non-causal attention with grouped-query heads and an optional key-padding mask.

The kernel is flash attention: each program holds BLOCK_M queries of one head and streams the keys in
BLOCK_N tiles with an online softmax, so the (Tq, Tk) score matrix never exists. When a block of few queries
meets a long prefix there are too few (query tile, head) programs to fill the GPU, so the keys are split
across programs (flash-decoding) and a second kernel merges the partial results.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kernels._triton import jit, tl, triton

BLOCK_N = 64  # keys per loop step
MIN_KEYS_PER_SPLIT = 256  # below this a split's partial write costs more than its parallelism saves
PROGRAMS_PER_SM = 2


def attention_ref(q, k, v, key_padding_mask=None, scale=None):
    """q (B, H, Tq, D); k, v (B, Hkv, Tk, D); key_padding_mask (B, Tk) bool, True = attend."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)  # (B, H, Tk, D)
        v = v.repeat_interleave(groups, dim=1)
    mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


@jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, part_o_ptr, part_ml_ptr,
                      sq_b, sq_h, sq_t, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, so_b, so_h, so_t, smask_b,
                      n_heads, n_groups, q_len, k_len, keys_per_split, head_dim, scale_log2,
                      HAS_MASK: tl.constexpr, SPLIT: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    pid_m, pid_bh, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    b = (pid_bh // n_heads).to(tl.int64)
    h = pid_bh % n_heads
    h_kv = (h // n_groups).to(tl.int64)  # grouped-query: n_groups query heads share one key/value head
    h = h.to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_mask = (rows[:, None] < q_len) & (dims[None, :] < head_dim)
    q = tl.load(q_ptr + b * sq_b + h * sq_h + rows[:, None] * sq_t + dims[None, :], mask=q_mask, other=0.0)
    k_base = k_ptr + b * sk_b + h_kv * sk_h
    v_base = v_ptr + b * sv_b + h_kv * sv_h

    row_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max of scores, log2 units
    row_sum = tl.zeros((BLOCK_M,), tl.float32)  # running sum of exp2(score - row_max)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    start = split * keys_per_split
    stop = tl.minimum(start + keys_per_split, k_len)
    for n0 in range(start, stop, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        valid = cols < stop
        kt = tl.load(k_base + cols[None, :] * sk_t + dims[:, None],
                     mask=valid[None, :] & (dims[:, None] < head_dim), other=0.0)  # (BLOCK_D, BLOCK_N)
        scores = tl.dot(q, kt, input_precision=INPUT_PRECISION) * scale_log2  # (BLOCK_M, BLOCK_N)
        if HAS_MASK:
            valid = valid & (tl.load(mask_ptr + b * smask_b + cols, mask=valid, other=0) != 0)
        scores = tl.where(valid[None, :], scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # rows with no key yet: keep exp2 at 0, not nan
        p = tl.exp2(scores - shift[:, None])
        alpha = tl.exp2(row_max - shift)
        row_sum = row_sum * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + cols[:, None] * sv_t + dims[None, :],
                    mask=valid[:, None] & (dims[None, :] < head_dim), other=0.0)  # (BLOCK_N, BLOCK_D)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=INPUT_PRECISION)
        row_max = new_max

    if SPLIT:  # unnormalized partials, merged by _attention_combine_kernel
        part = (pid_bh * tl.num_programs(2) + split).to(tl.int64) * q_len + rows  # (BLOCK_M,) row in the partials
        tl.store(part_o_ptr + part[:, None] * BLOCK_D + dims[None, :], acc, mask=rows[:, None] < q_len)
        tl.store(part_ml_ptr + part * 2, row_max, mask=rows < q_len)
        tl.store(part_ml_ptr + part * 2 + 1, row_sum, mask=rows < q_len)
    else:
        out = acc / tl.where(row_sum == 0.0, 1.0, row_sum)[:, None]  # a query with no key to attend gets 0
        tl.store(out_ptr + b * so_b + h * so_h + rows[:, None] * so_t + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=q_mask)


@jit
def _attention_combine_kernel(part_o_ptr, part_ml_ptr, out_ptr, so_b, so_h, so_t,
                              n_heads, n_splits, q_len, head_dim,
                              BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    in_rows = rows < q_len
    row_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    for split in range(0, n_splits):
        part = (pid_bh * n_splits + split).to(tl.int64) * q_len + rows
        m = tl.load(part_ml_ptr + part * 2, mask=in_rows, other=float("-inf"))
        s = tl.load(part_ml_ptr + part * 2 + 1, mask=in_rows, other=0.0)
        o = tl.load(part_o_ptr + part[:, None] * BLOCK_D + dims[None, :], mask=in_rows[:, None], other=0.0)
        new_max = tl.maximum(row_max, m)
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        alpha, beta = tl.exp2(row_max - shift), tl.exp2(m - shift)
        row_sum = row_sum * alpha + s * beta
        acc = acc * alpha[:, None] + o * beta[:, None]
        row_max = new_max
    out = acc / tl.where(row_sum == 0.0, 1.0, row_sum)[:, None]
    b, h = (pid_bh // n_heads).to(tl.int64), (pid_bh % n_heads).to(tl.int64)
    tl.store(out_ptr + b * so_b + h * so_h + rows[:, None] * so_t + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=in_rows[:, None] & (dims[None, :] < head_dim))


def _check(q, k, v, key_padding_mask):
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"q must be (B, H, Tq, D) and k, v the same (B, Hkv, Tk, D); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3] or q.shape[1] % k.shape[1]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} need the same B and D, and H a multiple of Hkv")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if key_padding_mask is not None and (key_padding_mask.dtype != torch.bool
                                         or key_padding_mask.shape != (k.shape[0], k.shape[2])):
        raise ValueError(f"key_padding_mask must be bool (B, Tk) = {(k.shape[0], k.shape[2])}; got "
                         f"{key_padding_mask.dtype} {tuple(key_padding_mask.shape)}")


def _num_splits(programs: int, k_len: int, device: torch.device) -> int:
    """Split the keys only when (query tile, head) programs alone cannot fill the GPU."""
    if device.type != "cuda":
        return 1
    target = PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(triton.cdiv(target, programs), k_len // MIN_KEYS_PER_SPLIT))


def _unit_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def attention(q, k, v, key_padding_mask=None, scale=None, num_splits: int | None = None):
    """q (B, H, Tq, D); k, v (B, Hkv, Tk, D); key_padding_mask (B, Tk) bool, True = attend -> (B, H, Tq, D).

    The output is a (B, Tq, H, D) buffer seen as (B, H, Tq, D), so merging heads afterwards is a free view.
    num_splits: key splits per (query tile, head) (default: enough programs to fill the GPU)."""
    _check(q, k, v, key_padding_mask)
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    batch, n_heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    out = torch.empty((batch, q_len, n_heads, head_dim), dtype=q.dtype, device=q.device).transpose(1, 2)
    if out.numel() == 0:
        return out
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    block_m = 64 if q_len > 32 else max(16, triton.next_power_of_2(q_len))
    block_d = max(16, triton.next_power_of_2(head_dim))
    m_tiles = triton.cdiv(q_len, block_m)
    splits = num_splits or _num_splits(m_tiles * batch * n_heads, k_len, q.device)
    keys_per_split = triton.cdiv(triton.cdiv(max(k_len, 1), splits), BLOCK_N) * BLOCK_N  # whole tiles per split
    splits = max(1, triton.cdiv(k_len, keys_per_split))
    mask = key_padding_mask.view(torch.uint8) if key_padding_mask is not None else q  # q: never read
    part_o = part_ml = out  # never written unless split
    if splits > 1:
        part_o = torch.empty((batch * n_heads, splits, q_len, block_d), dtype=torch.float32, device=q.device)
        part_ml = torch.empty((batch * n_heads, splits, q_len, 2), dtype=torch.float32, device=q.device)
    _attention_kernel[(m_tiles, batch * n_heads, splits)](
        q, k, v, mask, out, part_o, part_ml,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3], mask.stride(0),
        n_heads, n_heads // k.shape[1], q_len, k_len, keys_per_split, head_dim, scale * math.log2(math.e),
        HAS_MASK=key_padding_mask is not None, SPLIT=splits > 1,
        INPUT_PRECISION="ieee" if q.dtype == torch.float32 else None,  # fp32 stays fp32, not TF32
        BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_D=block_d, num_warps=4,
        num_stages=3 if q.element_size() <= 2 else 2)  # 3 stages of fp32 K and V tiles: 192 KB of shared memory
    if splits > 1:
        _attention_combine_kernel[(m_tiles, batch * n_heads)](
            part_o, part_ml, out, *out.stride()[:3], n_heads, splits, q_len, head_dim,
            BLOCK_M=block_m, BLOCK_D=block_d, num_warps=4)
    return out
