"""The OpenMP runtime torch's CPU ops run on (the libgomp its wheel ships): how many threads one thread's next ops
use, and handing a thread's pool of OpenMP workers back.

libgomp keeps the workers of each thread that ran a parallel region, and while it manages more threads than the
machine has CPUs, every worker sleeps at once after each region instead of spinning for the next, so each region
pays a wake-up (the GOMP_SPINCOUNT entry of its manual). CTranslate2's Whisper runs on the same runtime. On 2 cores
a process that had loaded the brain (the main thread's pool, two threads) and run Whisper on two threads ran the
brain's two-thread passes slower than its one-thread ones from any other thread (a 24-token reply 2.1 s against
1.9 s); with the main thread's pool handed back and Whisper on one thread, 1.2 s. So whoever runs torch on more
than one thread off the main thread hands its pool back afterwards (`threads`).
"""
import ctypes
import logging
import os
from contextlib import contextmanager
from glob import glob

import torch

log = logging.getLogger(__name__)

OMP_PAUSE_HARD = 2   # omp_pause_resource_t: the pool's threads end


def _runtime():
    """torch's libgomp, or None (another OpenMP runtime, or none: nothing here then changes anything)."""
    for path in sorted(glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libgomp*.so*"))):
        try:
            lib = ctypes.CDLL(path)
            lib.omp_set_num_threads, lib.omp_pause_resource_all   # OpenMP 5.0's pause: GCC 9 and later
        except (OSError, AttributeError):
            continue
        lib.omp_set_num_threads.argtypes = [ctypes.c_int]
        lib.omp_pause_resource_all.argtypes = [ctypes.c_int]
        return lib
    return None


_LIB = _runtime()


def available() -> bool:
    """Whether a thread's pool can be handed back here (torch on libgomp, OpenMP 5.0)."""
    return _LIB is not None


def release() -> None:
    """End the OpenMP workers the calling thread's parallel regions started (its next region starts them again,
    ~50 us a thread)."""
    if _LIB is not None and _LIB.omp_pause_resource_all(OMP_PAUSE_HARD) != 0:
        log.debug("omp_pause_resource_all failed")


@contextmanager
def threads(n: int):
    """The calling thread's torch ops run on n threads inside, on its own threads' count after, and its pool is
    handed back (`release`). Only this thread changes: torch.set_num_threads would also change the count every
    thread that has not run torch yet starts with. n <= 1, or no runtime here: nothing changes."""
    if n <= 1 or _LIB is None:
        yield
        return
    before = torch.get_num_threads()   # this thread's
    _LIB.omp_set_num_threads(n)
    try:
        yield
    finally:
        _LIB.omp_set_num_threads(before)
        release()
