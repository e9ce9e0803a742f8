"""An embedding table held in a quarter of its fp32 memory, for a model that only looks rows up (an inference-only
CPU model whose head has its own copy of the tied embedding: llm.quant).

SmolLM2's GGUF ships its embedding in Q8_0 (int8 values, one scale per block of 32), which loading dequantizes to
fp32: 113 MB of `parley serve`'s memory for a lookup of a few rows a pass. Blocks of int8 values and an fp32 scale
give those rows back bit for bit, in 32 MB. `exact_int8` keeps a table that way only where they do; a row they do
not reproduce (the mask token's, the mean of the others or an adapter's trained one) stays fp32 beside them.
"""
import torch
import torch.nn as nn

BLOCK = 32          # values sharing one scale, as in GGUF's Q8_0
MOST_EXTRA = 0.01   # the share of rows fp32 may keep: beyond it the table is not one int8 blocks hold


class Int8Embedding(nn.Module):
    """Rows of int8 values times one fp32 scale per block of BLOCK, with a few rows in fp32 (`extra`); a lookup
    gives fp32 rows (…, d)."""

    def __init__(self, values: torch.Tensor, scales: torch.Tensor, extra_rows: torch.Tensor, extra: torch.Tensor):
        super().__init__()
        self.register_buffer("values", values)          # (V, d) int8
        self.register_buffer("scales", scales)          # (V, d / BLOCK) fp32
        self.register_buffer("extra_rows", extra_rows)  # (V,) int64: the row's index in extra, -1 for none
        self.register_buffer("extra", extra)            # (K, d) fp32

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.values[ids].float().unflatten(-1, (-1, BLOCK)) * self.scales[ids][..., None]
        rows = rows.flatten(-2)
        extra = self.extra_rows[ids]
        held = extra >= 0
        if held.any():
            rows[held] = self.extra[extra[held]]
        return rows


def exact_int8(weight: torch.Tensor) -> Int8Embedding | None:
    """The fp32 table (V, d) as an Int8Embedding that looks up the same rows bit for bit, or None where int8 blocks
    hold too few of its rows exactly (a table trained or stored in more than 8 bits a value)."""
    if weight.dtype != torch.float32 or weight.ndim != 2 or weight.shape[1] % BLOCK:
        return None
    weight = weight.detach()
    blocks = weight.unflatten(1, (-1, BLOCK))                      # (V, d / BLOCK, BLOCK)
    scales = blocks.abs().amax(dim=-1) / 127                       # Q8_0's: the largest value is +-127
    values = torch.round(blocks / torch.where(scales > 0, scales, 1.0)[..., None]).clamp_(-127, 127)
    exact = (values * scales[..., None] == blocks).flatten(1).all(dim=1)
    inexact = (~exact).nonzero().flatten()
    if len(inexact) > MOST_EXTRA * len(weight):
        return None
    extra_rows = torch.full((len(weight),), -1, dtype=torch.int64, device=weight.device)
    extra_rows[inexact] = torch.arange(len(inexact), device=weight.device)
    return Int8Embedding(values.flatten(1).to(torch.int8), scales, extra_rows, weight[inexact].clone())
