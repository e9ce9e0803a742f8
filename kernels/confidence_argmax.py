"""Per row of logits: the most likely token and its softmax probability (the unmasking decision)."""
import torch


def confidence_argmax_ref(logits: torch.Tensor, mask_id: int | None = None):
    """logits (N, V) -> (token (N,) int64, confidence (N,) float32); mask_id is never chosen."""
    logits = logits.float()
    if mask_id is not None:
        logits = logits.clone()
        logits[:, mask_id] = float("-inf")
    probs = torch.softmax(logits, dim=-1)
    confidence, token = probs.max(dim=-1)
    return token, confidence
