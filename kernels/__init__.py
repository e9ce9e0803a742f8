"""Kernels for the diffusion LM's hot path, dispatched once: Triton on CUDA, the torch reference on the CPU.

`PARLEY_KERNELS=triton|torch|auto` (default auto) overrides the choice; with `TRITON_INTERPRET=1
PARLEY_KERNELS=triton` the Triton kernels run on CPU tensors through Triton's interpreter.
"""
import os

from kernels.rms_norm import rms_norm_ref
from kernels.rope import rope_ref
from kernels.swiglu import swiglu_ref
from kernels.attention import attention_ref
from kernels.confidence_argmax import confidence_argmax_ref

BACKENDS = ("auto", "triton", "torch")


def backend() -> str:
    """The backend chosen by PARLEY_KERNELS (auto, triton or torch)."""
    choice = os.environ.get("PARLEY_KERNELS", "auto").lower()
    if choice not in BACKENDS:
        raise ValueError(f"PARLEY_KERNELS={choice!r}: choose one of {', '.join(BACKENDS)}")
    return choice


def _use_triton(x) -> bool:
    choice = backend()
    if choice == "auto":
        return x.is_cuda
    return choice == "triton"


def rms_norm(x, weight, eps):
    if _use_triton(x):
        from kernels.rms_norm import rms_norm as op
        return op(x, weight, eps)
    return rms_norm_ref(x, weight, eps)


def rope(q, k, cos, sin):
    if _use_triton(q):
        from kernels.rope import rope as op
        return op(q, k, cos, sin)
    return rope_ref(q, k, cos, sin)


def swiglu(gate, up):
    if _use_triton(gate):
        from kernels.swiglu import swiglu as op
        return op(gate, up)
    return swiglu_ref(gate, up)


def attention(q, k, v, key_padding_mask=None, scale=None):
    if _use_triton(q):
        from kernels.attention import attention as op
        return op(q, k, v, key_padding_mask, scale)
    return attention_ref(q, k, v, key_padding_mask, scale)


def confidence_argmax(logits, mask_id=None):
    if _use_triton(logits):
        from kernels.confidence_argmax import confidence_argmax as op
        return op(logits, mask_id)
    return confidence_argmax_ref(logits, mask_id)
