"""Kernels for the diffusion LM's hot path, dispatched once: each op runs its Triton kernel or its torch reference.

`PARLEY_KERNELS=auto|triton|torch` (default auto) chooses, or names the ops that run in Triton
(`PARLEY_KERNELS=rms_norm,swiglu`: the others run torch's). auto runs in Triton the ops of AUTO_TRITON_OPS on CUDA
tensors, and torch's everywhere else. With `TRITON_INTERPRET=1 PARLEY_KERNELS=triton` the Triton kernels run on
CPU tensors through Triton's interpreter. The variable is read once, on the first call. Without Triton installed,
or on a CPU without the interpreter (where Triton is not even imported: kernels/_triton.py), auto uses the torch
references.
"""
import functools
import os

from kernels._triton import HAS_TRITON, INTERPRET, WHY_NOT
from kernels import attention as _attention
from kernels import confidence_argmax as _confidence_argmax
from kernels import rms_norm as _rms_norm
from kernels import rope as _rope
from kernels import swiglu as _swiglu
from kernels.attention import attention_ref
from kernels.confidence_argmax import confidence_argmax_ref
from kernels.rms_norm import rms_norm_ref
from kernels.rope import rope_ref
from kernels.swiglu import swiglu_ref

BACKENDS = ("auto", "triton", "torch")
OPS = ("rms_norm", "rope", "swiglu", "attention", "confidence_argmax")
# NOTE: none, by measurement. On an H200 (2026-12-04, BENCHMARKS.md) the embedded brain wrote a reply in 119 ms
# median with torch's ops, 204 ms with every op in Triton, 174 ms with rms_norm, rope and swiglu in Triton, 214 ms
# with attention alone: at 135M parameters a pass is bound by launches (~18 ms for 30 layers), and each Triton
# launch costs more on the host than torch's. Alone, the kernels beat torch eager at LLaDA-8B sizes (rms_norm,
# rope 2-3x, confidence_argmax 2.5-11.7x) but attention loses to torch's SDPA at every size measured (0.26-0.89x).
# An op earns its place here when a whole model's replies are faster with it (`scripts/gpu_check.sh ops`).
AUTO_TRITON_OPS: frozenset[str] = frozenset()

__all__ = ["backend", "rms_norm", "rope", "swiglu", "attention", "confidence_argmax", "rms_norm_ref", "rope_ref",
           "swiglu_ref", "attention_ref", "confidence_argmax_ref"]


@functools.cache
def backend() -> str:
    """The backend chosen by PARLEY_KERNELS (auto, triton, torch, or the ops to run in Triton), read and checked
    once; a list of ops comes back in OPS's order, comma-separated."""
    choice = os.environ.get("PARLEY_KERNELS", "auto").strip().lower()
    if choice not in BACKENDS:
        ops = [op.strip() for op in choice.split(",") if op.strip()]
        unknown = [op for op in ops if op not in OPS]
        if not ops or unknown:
            raise ValueError(f"PARLEY_KERNELS={choice!r}: choose one of {', '.join(BACKENDS)}, or a comma-separated "
                             f"list of the ops to run in Triton ({', '.join(OPS)})")
        choice = ",".join(op for op in OPS if op in ops)
    if choice not in ("auto", "torch") and not HAS_TRITON:
        raise ValueError(f"PARLEY_KERNELS={choice}, but {WHY_NOT}; or choose auto or torch")
    return choice


def _use_triton(x, op: str) -> bool:
    choice = backend()
    if choice == "auto":
        return op in AUTO_TRITON_OPS and HAS_TRITON and x.is_cuda
    chosen = choice == "triton" or op in choice.split(",")
    if chosen and not x.is_cuda and not INTERPRET:
        raise ValueError(f"PARLEY_KERNELS={choice} on CPU tensors needs TRITON_INTERPRET=1 set before kernels is "
                         "imported; or choose auto or torch")
    return chosen


def rms_norm(x, weight, eps):
    """RMSNorm over the last dim of x: fp32 statistics, output in x's dtype (promoted with weight's)."""
    if _use_triton(x, "rms_norm"):
        return _rms_norm.rms_norm(x, weight, eps)
    return rms_norm_ref(x, weight, eps)


def rope(q, k, cos, sin):
    """Rotate-half RoPE on q (B, H, T, D) and k (B, Hkv, T, D), cos/sin (T, D); returns new (q, k)."""
    if _use_triton(q, "rope"):
        return _rope.rope(q, k, cos, sin)
    return rope_ref(q, k, cos, sin)


def swiglu(gate, up):
    """silu(gate) * up."""
    if _use_triton(gate, "swiglu"):
        return _swiglu.swiglu(gate, up)
    return swiglu_ref(gate, up)


def attention(q, k, v, key_padding_mask=None, scale=None):
    """Non-causal GQA attention: q (B, H, Tq, D); k, v (B, Hkv, Tk, D); mask (B, Tk) bool, True = attend."""
    if _use_triton(q, "attention"):
        return _attention.attention(q, k, v, key_padding_mask, scale)
    return attention_ref(q, k, v, key_padding_mask, scale)


def confidence_argmax(logits, mask_id=None):
    """logits (N, V) -> (token (N,) int64, confidence (N,) float32), mask_id never chosen nor in the softmax."""
    if _use_triton(logits, "confidence_argmax"):
        return _confidence_argmax.confidence_argmax(logits, mask_id)
    return confidence_argmax_ref(logits, mask_id)
