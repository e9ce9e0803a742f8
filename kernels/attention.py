"""Non-causal attention with grouped-query heads and an optional key-padding mask."""
import torch
import torch.nn.functional as F


def attention_ref(q, k, v, key_padding_mask=None, scale=None):
    """q (B, H, Tq, D); k, v (B, Hkv, Tk, D); key_padding_mask (B, Tk) bool, True = attend."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)  # (B, H, Tk, D)
        v = v.repeat_interleave(groups, dim=1)
    mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
