"""Triton, imported so that the torch references still load on a machine without it (macOS, Windows).

Kernel files do `from __future__ import annotations` (Triton reads the string `tl.constexpr` annotations)
and take `jit`, `triton` and `tl` from here. Without Triton, `jit` leaves a kernel a plain function that the
dispatcher never launches, and `HAS_TRITON` is False. `INTERPRET` says whether the kernels were decorated
for Triton's CPU interpreter (TRITON_INTERPRET=1 is read when a kernel is decorated, so it must be set first).
"""
try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
    INTERPRET = bool(triton.knobs.runtime.interpret)
    jit = triton.jit
except ImportError:
    triton = None
    tl = None
    HAS_TRITON = False
    INTERPRET = False

    def jit(fn):
        """Without Triton a kernel stays an undecorated function; kernels/__init__.py never launches it."""
        return fn
