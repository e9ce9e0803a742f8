"""Kernel benchmarks: `python -m kernels.bench` prints each kernel's time against its torch reference.

On a GPU the sizes are LLaDA-8B's (d_model 4096, 32 heads of 128, MLP 12288, vocab 126464, a block of 32
queries against prefixes of 128 to 2048), then the embedded SmolLM2-135M's (a block of 4), and the times are
medians from triton.testing.do_bench, which flushes L2 between runs. On the CPU the kernels run at small sizes
through Triton's interpreter, to show that the command works: those times say nothing about speed.
"""
import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

from kernels._triton import HAS_TRITON, INTERPRET
from kernels.attention import attention, attention_ref
from kernels.confidence_argmax import confidence_argmax, confidence_argmax_ref
from kernels.rms_norm import rms_norm, rms_norm_ref
from kernels.rope import rope, rope_ref
from kernels.swiglu import swiglu, swiglu_ref

LLADA_MASK_ID = 126336


@dataclass(frozen=True)
class Case:
    op: str
    shape: str  # the sizes, as printed
    kernel: Callable  # the Triton launcher on the prepared inputs
    ref: Callable  # the torch reference on the same inputs
    bytes_moved: int  # the least HBM traffic: each input read once, each output written once
    flops: int = 0  # matmul FLOPs (attention only)


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _norm_case(rows, dev, dt, width=4096):
    x, w = torch.randn(rows, width, device=dev, dtype=dt), torch.randn(width, device=dev, dtype=dt)
    return Case("rms_norm", f"x ({rows}, {width})", lambda: rms_norm(x, w, 1e-5),
                lambda: rms_norm_ref(x, w, 1e-5), 2 * _nbytes(x) + _nbytes(w))


def _rope_case(seq, heads, head_dim, dev, dt):
    q = torch.randn(1, seq, heads, head_dim, device=dev, dtype=dt).transpose(1, 2)  # (1, H, T, D) view
    k = torch.randn(1, seq, heads, head_dim, device=dev, dtype=dt).transpose(1, 2)
    angle = torch.randn(seq, head_dim, device=dev)
    cos, sin = angle.cos(), angle.sin()
    return Case("rope", f"q, k (1, {heads}, {seq}, {head_dim})", lambda: rope(q, k, cos, sin),
                lambda: rope_ref(q, k, cos, sin), 2 * _nbytes(q, k) + _nbytes(cos, sin))


def _swiglu_case(rows, hidden, dev, dt):
    gate, up = torch.randn(rows, hidden, device=dev, dtype=dt), torch.randn(rows, hidden, device=dev, dtype=dt)
    return Case("swiglu", f"({rows}, {hidden})", lambda: swiglu(gate, up),
                lambda: swiglu_ref(gate, up), 3 * _nbytes(gate))


def _attention_case(heads, q_len, k_len, head_dim, dev, dt):
    q = torch.randn(1, q_len, heads, head_dim, device=dev, dtype=dt).transpose(1, 2)  # (1, H, Tq, D) view
    k = torch.randn(1, heads, k_len, head_dim, device=dev, dtype=dt)
    v = torch.randn(1, heads, k_len, head_dim, device=dev, dtype=dt)
    mask = torch.ones(1, k_len, dtype=torch.bool, device=dev)
    return Case("attention", f"H {heads} Tq {q_len} Tk {k_len} D {head_dim}",
                lambda: attention(q, k, v, mask), lambda: attention_ref(q, k, v, mask),
                2 * _nbytes(q) + _nbytes(k, v, mask), 4 * heads * q_len * k_len * head_dim)


def _confidence_case(rows, vocab, dev, dt):
    logits = torch.randn(rows, vocab, device=dev, dtype=dt) * 4
    mask_id = min(LLADA_MASK_ID, vocab - 1)
    return Case("confidence_argmax", f"logits ({rows}, {vocab})",
                lambda: confidence_argmax(logits, mask_id),
                lambda: confidence_argmax_ref(logits, mask_id), _nbytes(logits) + rows * 12)


def cases(dev: torch.device, dt: torch.dtype) -> list[Case]:
    """LLaDA-8B sizes on a GPU; small odd sizes on the CPU (the interpreter runs one program at a time)."""
    if dev.type != "cuda":
        return [_norm_case(7, dev, dt), _rope_case(33, 4, 128, dev, dt), _swiglu_case(7, 1000, dev, dt),
                _attention_case(4, 32, 160, 128, dev, dt), _confidence_case(7, 32003, dev, dt)]
    out = [_norm_case(32, dev, dt), _norm_case(2080, dev, dt),
           _rope_case(32, 32, 128, dev, dt), _rope_case(2080, 32, 128, dev, dt),
           _swiglu_case(32, 12288, dev, dt), _swiglu_case(2080, 12288, dev, dt)]
    out += [_attention_case(32, 32, prefix + 32, 128, dev, dt) for prefix in (128, 512, 1024, 2048)]
    out += [_attention_case(32, 2048, 2048, 128, dev, dt)]
    out += [_confidence_case(32, 126464, dev, dt), _confidence_case(2080, 126464, dev, dt)]
    # the embedded brain's sizes (SmolLM2-135M: d_model 576, 9 heads of 64, MLP 1536, vocab 49152 + the mask): a
    # block of 4 against a 512-token prompt, and the prompt's prefill; launch latency, not bandwidth, bounds these
    out += [_norm_case(4, dev, dt, 576), _norm_case(512, dev, dt, 576), _swiglu_case(4, 1536, dev, dt),
            _rope_case(4, 9, 64, dev, dt), _attention_case(9, 4, 516, 64, dev, dt),
            _attention_case(9, 512, 512, 64, dev, dt)]
    return out + [_confidence_case(4, 49153, dev, dt)]


def time_us(fn: Callable, dev: torch.device, reps: int) -> float:
    """Median time of one call in µs: do_bench (L2 flushed) on a GPU, wall clock on the CPU."""
    if dev.type == "cuda":
        from triton.testing import do_bench  # deferred: Triton's GPU timer, only where there is a GPU
        return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
    fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def _max_error(got, want) -> float:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return max((g.double() - w.double()).abs().max().item() for g, w in zip(got, want) if g.is_floating_point())


def _compiled_us(case: Case, dev: torch.device, reps: int) -> str:
    """The torch.compile'd reference's time, or why there is none."""
    try:
        compiled = torch.compile(case.ref, dynamic=False)
        compiled()
        return f"{time_us(compiled, dev, reps):.1f}"
    except Exception as error:  # a compiler missing or failing is a row note, not a failed benchmark
        return f"n/a ({type(error).__name__})"


def copy_gbps(dev: torch.device, reps: int) -> float:
    """Bandwidth of torch's own device copy, the baseline the kernels' GB/s compare to."""
    n_bytes = (1 << 30) if dev.type == "cuda" else (64 << 20)
    src = torch.empty(n_bytes // 2, dtype=torch.bfloat16, device=dev)
    dst = torch.empty_like(src)
    return 2 * n_bytes / time_us(lambda: dst.copy_(src), dev, reps) / 1e3


def run(dev: torch.device, dt: torch.dtype, compile_ref: bool, reps: int) -> list[list[str]]:
    """One table row per case: sizes, times (µs), speedup over eager, GB/s, TFLOP/s, error against eager."""
    rows = []
    for case in cases(dev, dt):
        error = _max_error(case.kernel(), case.ref())
        kernel_us = time_us(case.kernel, dev, reps)
        eager_us = time_us(case.ref, dev, reps)
        compiled = _compiled_us(case, dev, reps) if compile_ref else "skipped"
        tflops = f"{case.flops / kernel_us / 1e6:.3g}" if case.flops else ""
        rows.append([case.op, case.shape, f"{kernel_us:.1f}", f"{eager_us:.1f}", compiled,
                     f"{eager_us / kernel_us:.2f}", f"{case.bytes_moved / kernel_us / 1e3:.3g}", tflops,
                     f"{error:.1e}"])
    return rows


HEADER = ["op", "sizes", "kernel µs", "eager µs", "compile µs", "eager/kernel", "kernel GB/s", "TFLOP/s",
          "max err"]


def print_table(rows: list[list[str]]) -> None:
    """A Markdown table, so that BENCHMARKS.md can take it as printed."""
    widths = [max(len(r[i]) for r in [HEADER] + rows) for i in range(len(HEADER))]
    for row in [HEADER, ["-" * w for w in widths]] + rows:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")


def _hardware(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    cpu = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return f"{cpu}, {os.cpu_count()} cores (Triton interpreter)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd reference")
    parser.add_argument("--reps", type=int, default=5, help="timed calls per CPU measurement")
    args = parser.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cpu" and not INTERPRET:  # decorated already, or Triton not imported: run again, interpreted
        os.environ["TRITON_INTERPRET"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "kernels.bench", *sys.argv[1:]])
    if not HAS_TRITON:
        sys.exit("kernels.bench needs Triton: pip install triton")
    dt = getattr(torch, args.dtype)
    if dev.type == "cpu":
        torch.set_num_threads(1)  # NOTE: 2 OpenMP threads on a shared 2-core box stalled compiled refs 12-16 ms
        if dt == torch.bfloat16:
            dt = torch.float32  # the interpreter's bf16 tl.dot is wrong (see tests/unit/test_kernels.py)
    torch.manual_seed(0)
    print(f"# {_hardware(dev)}, torch {torch.__version__}, {dt}; medians; "
          f"torch copy baseline {copy_gbps(dev, args.reps):.0f} GB/s")
    print_table(run(dev, dt, not args.no_compile, args.reps))


if __name__ == "__main__":
    main()
