"""Triton, imported so that the torch references still load on a machine without it (macOS, Windows), and only
where a kernel can run.

Kernel files do `from __future__ import annotations` (Triton reads the string `tl.constexpr` annotations)
and take `jit`, `triton` and `tl` from here. Without Triton, `jit` leaves a kernel a plain function that the
dispatcher never launches, and `HAS_TRITON` is False (`WHY_NOT` says why). `INTERPRET` says whether the kernels
were decorated for Triton's CPU interpreter (TRITON_INTERPRET=1 is read when a kernel is decorated, so it must be
set first).

Triton is imported where a kernel can run (a CUDA GPU, or its interpreter) or where it was loaded already (the
compile test): a CPU process that runs torch's ops, `parley serve` on a CPU, never pays for it. NOTE: importing it
took ~70 MB of resident memory (218 -> 289 MB after torch, 2026-12-06), 5% of `parley serve`'s.
"""
import os
import sys

import torch

_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").strip().lower() not in ("", "0", "false", "off", "no")
_WANTED = "triton" in sys.modules or _INTERPRETED or torch.cuda.is_available()

try:
    if not _WANTED:
        raise ImportError("not imported")
    import triton
    import triton.language as tl

    HAS_TRITON, WHY_NOT = True, None
    INTERPRET = bool(triton.knobs.runtime.interpret)
    jit = triton.jit
except ImportError:
    triton = None
    tl = None
    HAS_TRITON = False
    INTERPRET = False
    WHY_NOT = ("Triton runs its kernels on a CUDA GPU, or on the CPU with TRITON_INTERPRET=1 set before kernels is "
               "imported" if not _WANTED else "Triton is not installed: install it")

    def jit(fn):
        """Without Triton a kernel stays an undecorated function; kernels/__init__.py never launches it."""
        return fn
