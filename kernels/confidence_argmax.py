"""Per row of logits: the most likely token and its softmax probability (the unmasking decision).

The kernel streams over the vocabulary once. Each lane of a program keeps a running max, the sum of
exp(logit - max) and the column of its max; the lanes, then the vocabulary splits, merge at the end. The
argmax's probability is exp(max - max) / sum = 1 / sum, so no probability is ever written.
"""
from __future__ import annotations

import torch

from kernels._triton import jit, tl, triton

BLOCK_V = 2048  # vocabulary entries per loop step (per-lane state: 8 per thread at 8 warps)
PROGRAMS_PER_SM = 4  # enough programs in flight to saturate HBM when there are few rows


def confidence_argmax_ref(logits: torch.Tensor, mask_id: int | None = None):
    """logits (N, V) -> (token (N,) int64, confidence (N,) float32); mask_id is never chosen."""
    logits = logits.float()
    if mask_id is not None:
        logits = logits.clone()
        logits[:, mask_id] = float("-inf")
    probs = torch.softmax(logits, dim=-1)
    confidence, token = probs.max(dim=-1)
    return token, confidence


@jit
def _merge(run_max, run_sum, run_arg, NO_COLUMN: tl.constexpr):
    """Merge partial (max, sum of exp(x - max), argmax) along axis 0 into scalars; ties go to the lower column."""
    top = tl.max(run_max, axis=0)
    total = tl.sum(run_sum * tl.exp(run_max - top), axis=0)
    arg = tl.min(tl.where(run_max == top, run_arg, NO_COLUMN), axis=0)
    return top, total, arg


@jit
def _confidence_argmax_kernel(logits_ptr, row_stride, n_vocab, mask_id, chunk,
                              token_ptr, conf_ptr, part_max_ptr, part_sum_ptr, part_arg_ptr, num_splits,
                              HAS_MASK: tl.constexpr, SPLIT: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    lanes = tl.arange(0, BLOCK_V)
    # -FLT_MAX, not -inf, so that exp(-inf - run_max) is 0 rather than nan for -inf or masked logits
    run_max = tl.full((BLOCK_V,), -3.4028234663852886e38, tl.float32)
    run_sum = tl.zeros((BLOCK_V,), tl.float32)
    run_arg = tl.zeros((BLOCK_V,), tl.int32)  # a row of only -inf ends with column 0
    start = split * chunk
    stop = tl.minimum(start + chunk, n_vocab)
    for col0 in range(start, stop, BLOCK_V):
        cols = col0 + lanes
        x = tl.load(logits_ptr + row * row_stride + cols, mask=cols < stop, other=float("-inf")).to(tl.float32)
        if HAS_MASK:
            x = tl.where(cols == mask_id, float("-inf"), x)
        bigger = x > run_max
        # one exp per entry: exp(-|x - run_max|) rescales whichever side is smaller
        e = tl.exp(tl.minimum(x, run_max) - tl.maximum(x, run_max))
        run_sum = tl.where(bigger, run_sum * e + 1.0, run_sum + e)
        run_arg = tl.where(bigger, cols, run_arg)
        run_max = tl.maximum(run_max, x)
    top, total, arg = _merge(run_max, run_sum, run_arg, 2147483647)
    if SPLIT:
        part = row * num_splits + split
        tl.store(part_max_ptr + part, top)
        tl.store(part_sum_ptr + part, total)
        tl.store(part_arg_ptr + part, arg)
    else:
        tl.store(token_ptr + row, arg.to(tl.int64))
        tl.store(conf_ptr + row, 1.0 / tl.where(total > 0.0, total, float("inf")))  # no finite logit: 0


@jit
def _confidence_argmax_combine_kernel(part_max_ptr, part_sum_ptr, part_arg_ptr, token_ptr, conf_ptr, num_splits,
                                      BLOCK_S: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    in_row = s < num_splits
    part_max = tl.load(part_max_ptr + row * num_splits + s, mask=in_row, other=-3.4028234663852886e38)
    part_sum = tl.load(part_sum_ptr + row * num_splits + s, mask=in_row, other=0.0)
    part_arg = tl.load(part_arg_ptr + row * num_splits + s, mask=in_row, other=2147483647)
    top, total, arg = _merge(part_max, part_sum, part_arg, 2147483647)
    tl.store(token_ptr + row, arg.to(tl.int64))
    tl.store(conf_ptr + row, 1.0 / tl.where(total > 0.0, total, float("inf")))  # no finite logit: 0


def _num_splits(n_rows: int, n_vocab: int, device: torch.device) -> int:
    """Split the vocabulary only when there are too few rows to fill the GPU."""
    if device.type != "cuda":
        return 1
    target = PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(triton.cdiv(target, n_rows), triton.cdiv(n_vocab, BLOCK_V)))


def confidence_argmax(logits: torch.Tensor, mask_id: int | None = None, num_splits: int | None = None):
    """logits (N, V) -> (token (N,) int64, confidence (N,) float32); mask_id is never chosen.

    A row with no finite logit gives token 0 and confidence 0 (the reference gives nan).
    num_splits: vocabulary splits per row (default: enough programs to fill the GPU)."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be (N, V), got shape {tuple(logits.shape)}")
    n_rows, n_vocab = logits.shape
    if mask_id is not None and not 0 <= mask_id < n_vocab:
        raise ValueError(f"mask_id {mask_id} is outside the vocabulary [0, {n_vocab})")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    token = torch.empty(n_rows, dtype=torch.int64, device=logits.device)
    conf = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    if n_rows == 0 or n_vocab == 0:
        return token, conf.fill_(float("nan"))
    splits = num_splits or _num_splits(n_rows, n_vocab, logits.device)
    chunk = triton.cdiv(triton.cdiv(n_vocab, splits), BLOCK_V) * BLOCK_V  # whole loop steps per split
    splits = triton.cdiv(n_vocab, chunk)
    part_max = torch.empty((n_rows, splits), dtype=torch.float32, device=logits.device)
    part_sum, part_arg = torch.empty_like(part_max), torch.empty_like(part_max, dtype=torch.int32)
    _confidence_argmax_kernel[(n_rows, splits)](
        logits, logits.stride(0), n_vocab, -1 if mask_id is None else mask_id, chunk,
        token, conf, part_max, part_sum, part_arg, splits,
        HAS_MASK=mask_id is not None, SPLIT=splits > 1, BLOCK_V=BLOCK_V, num_warps=8)
    if splits > 1:
        _confidence_argmax_combine_kernel[(n_rows,)](part_max, part_sum, part_arg, token, conf, splits,
                                                     BLOCK_S=triton.next_power_of_2(splits))
    return token, conf
