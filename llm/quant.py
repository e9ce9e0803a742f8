"""Smaller weights for the CPU, where a pass is bound by reading them: 16-bit (fp16 for fbgemm, or bf16 for
oneDNN's AMX tiles) or int8.

fp16: every projection's weight is stored in fp16 and packed for fbgemm, whose product converts it to fp32 in
registers (F16C) and multiplies fp32 inputs in fp32; only the weights are rounded (to 11 significant bits), never
the activations. NOTE: on this project's 2-core AVX2 machine, one thread, the brain's pass over one new position
took 39 ms instead of 53 and the head's 4 ms instead of 10; over 9 positions 66 + 10 ms against 131 + 29 (MKL's
fp32 product of a few rows runs far below this CPU's peak), and the greedy token of every row was fp32's
(2026-12-02; `python -m llm.bench`-style passes over a 400-token cache).

bf16 (`pack_bf16`): every block projection's weight in bf16, packed for oneDNN; a product rounds its input and its
output to bf16 (8 significant bits), and everything between the products (norms, attention, the residual stream)
stays fp32, as does the tied head's output (its product is fp16's). On a CPU with AMX (bf16 tile products: Intel
Xeon since Sapphire Rapids) a product of 64 rows costs what one row's does, where fbgemm's fp16 one grows with the
rows. NOTE: on such a 2-core Xeon, 30 blocks' 120 products
(SmolLM2-135M) took 11.2 / 11.2 / 11.5 / 11.6 ms over 1 / 5 / 9 / 64 rows in bf16, against 11.2 / 15.8 / 19.9 /
27.5 ms in fp16; 28 development-set turns (2 threads) spent 14.3 s in the model instead of 17.7 (prefill 3.2 s
instead of 5.2), with the same 28 replies (2026-12-05). With AVX-512 BF16 instructions but no AMX (AMD Zen 4 and
later, Intel Cooper Lake) bf16 costs no time and holds the weights in less memory: fbgemm's packed fp16 matrix
took 1.8 bytes for each byte of fp16 weights, oneDNN's bf16 one 1.09 (2 AMD EPYC cores, 2026-12-06, stop 66). A
whole pass over 1 / 4 / 16 / 64 rows (2 threads, a 400-token cache) took 13.4 / 14.6 / 21.9 / 42.4 ms in bf16
against 11.3 / 13.4 / 22.4 / 52.7 ms in fp16; the development set's median turn 245.6 ms against 246.8, the same
calls and replies but one (a better one); `python -m app.bench --repeats 2` 603.9 ms e2e against 604.0; `parley
serve` 1310 MB resident when idle against 1402, 1590 against 1636 with four callers. `cpu_weights: "auto"` (the
shipped adapter's) picks bf16 where the CPU multiplies it in hardware, and fp16 elsewhere (`sixteen_bit`).

int8: a block's linears as dynamically quantized ones (fbgemm, per output channel).

A dynamic linear also rounds its input to 8 bits, one scale for all the rows of a pass, so a row's output depends
a little on the other rows beside it. The down projection (ff_out) stays fp32: its input, the SwiGLU product, has
the outlier dimensions that 8 bits lose. Teacher-forced on 509 reply tokens of SmolLM2 with the shipped adapter,
decoded a row at a time, the int8 model's next token agreed with fp32's 98.2% of the time with ff_out in fp32 and
the head in int8, 96.0% with ff_out in int8 too (2026-12-01).

NOTE: on this project's 2-core AVX2 machine (no bf16 instructions: a bf16 or fp16 matmul ran ~7-20x slower than
fp32; torch's weight-only int8 product ~5x slower), a 576 -> 1536 product of 4 rows took 97 us in int8 against
307 us in fp32 (1 row: 75 against 116 us); the fp32 model's passes are bound by reading its weights from memory.
"""
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
import torch.nn as nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
from torch.ao.quantization import per_channel_dynamic_qconfig

from llm.embedding import exact_int8
from llm.model import BLOCK_LINEARS, FUSED_LINEARS, Transformer

INT8_LINEARS = tuple(name for name in BLOCK_LINEARS if name != "ff_out")


def fbgemm_available() -> bool:
    """Whether this torch has fbgemm's CPU products (x86 builds; not ARM's)."""
    return "fbgemm" in torch.backends.quantized.supported_engines


def onednn_bf16_available() -> bool:
    """Whether this torch's oneDNN multiplies bf16 on this CPU (AVX-512 or newer; fast only with AMX)."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def hardware_bf16_available() -> bool:
    """Whether this CPU multiplies bf16 in hardware, in AMX tiles (Intel Xeon since Sapphire Rapids) or with AVX-512
    BF16 instructions (AMD Zen 4 and later, Intel Cooper Lake), and this torch's oneDNN can use them. NOTE: oneDNN
    also runs bf16 products on plain AVX-512 by converting in software; fbgemm's fp16 is the better choice there."""
    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    in_hardware = capabilities.get("amx_bf16") or capabilities.get("avx512_bf16")
    return bool(in_hardware) and onednn_bf16_available()


def sixteen_bit() -> str | None:
    """The 16-bit weight format for this CPU: "bfloat16" where it multiplies bf16 in hardware, else "float16" with
    fbgemm, else None (fp32: an ARM build of torch)."""
    if hardware_bf16_available():
        return "bfloat16"
    return "float16" if fbgemm_available() else None


class Fp16Linear(nn.Module):
    """A linear whose weight is held in fp16, packed for fbgemm; inputs and outputs fp32. Inference only."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.quantized.linear_prepack_fp16(weight.detach().float().contiguous(),
                                                              None if bias is None else bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x, self.packed)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weight=fp16"


def bucketed_rows(rows: int) -> int:
    """The rows a oneDNN product runs for `rows` (Bf16Linear): up to 9 as they are (a pass of one committed token
    and 8 guesses), then rounded up to a multiple of 4 up to 32, of 8 up to 64, of 16 up to 128, of 32 beyond."""
    if rows <= 9:
        return rows
    step = next((step for most, step in ((32, 4), (64, 8), (128, 16)) if rows <= most), 32)
    return -(-rows // step) * step


class Bf16Linear(nn.Module):
    """A linear whose weight is held in bf16, packed for oneDNN (AMX tiles where the CPU has them); inputs fp32,
    rounded to bf16 for the product, whose bf16 output is returned as fp32. Inference only.

    The product runs on `bucketed_rows` rows, the input's padded with zeros. NOTE: oneDNN keeps what it builds for
    each shape of a product (its kernels, ~0.5 MB a shape, not all of it in the primitive cache that
    ONEDNN_PRIMITIVE_CACHE_CAPACITY bounds) for the life of the process: the passes of a server's callers, of 1 to
    ~200 rows, grew SmolLM2's process by ~420 MB once each row count had been seen (1 to 199 rows: 705 -> 1131 MB;
    capacity 16: 948 MB). Rows count in steps where they cost the same: 4 products of a SmolLM2 block took 437 /
    556 / 719 / 884 us at 5 / 8 / 12 / 16 rows, the same at 10-12 and at 13-16 (2 AMD EPYC cores, one thread)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(torch.bfloat16).contiguous())
        self.bias = None if bias is None else bias.detach().to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        flat = x.reshape(rows, self.in_features).to(torch.bfloat16)
        if (padded := bucketed_rows(rows)) > rows:
            flat = torch.cat([flat, flat.new_zeros(padded - rows, self.in_features)])
        y = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return y[:rows].float().reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weight=bf16"


def weight_format(model: Transformer) -> str:
    """How the model's projections hold their weights: "float16 weights" (pack_fp16), "bfloat16 weights"
    (pack_bf16), "int8 weights" (quantize_int8) or the dtype's name."""
    block = model.transformer.blocks[0] if len(model.transformer.blocks) else None
    projection = None if block is None else block.qkv if block.qkv is not None else block.q_proj
    if isinstance(projection, Fp16Linear):
        return "float16 weights"
    if isinstance(projection, Bf16Linear):
        return "bfloat16 weights"
    if isinstance(projection, DynamicLinear):
        return "int8 weights"
    return str(model.dtype).removeprefix("torch.")


def _require_cpu(model: Transformer, what: str) -> None:
    if model.device.type != "cpu":
        raise ValueError(f"{what} weights are for the CPU; on a GPU run the model in bf16 or fp32")


@contextmanager
def _maker(threads: int = 1):
    """-> made(jobs): make(weight, bias) for each (make, weight, bias) of `jobs`, on up to `threads` Python threads
    (torch's packing ops release the GIL)."""
    if threads <= 1:
        yield lambda jobs: [make(weight, bias) for make, weight, bias in jobs]
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="pack") as pool:
        yield lambda jobs: list(pool.map(lambda job: job[0](job[1], job[2]), jobs))


def _replace_products(model: Transformer, groups, make, threads: int = 1, head=None) -> Transformer:
    """Replace each group of projections of every block, (name, parts), by one make(weight, bias) of their weights
    stacked (FUSED_LINEARS: q, k and v as `qkv`; a single projection: (name, (name,))), in place, and give a tied
    head (head or make)(embedding, None) as its output projection; the embedding, then only looked up, is held as
    int8 blocks where they give its rows back exactly (llm.embedding). A block at a time, so that its fp32 weights
    are freed as its packed ones are made: packing SmolLM2 all at once held the stacked fp32 copies of every block
    beside the model (`llm.load`'s peak RSS 1693 MB, 1161 after)."""
    with _maker(threads) as made:
        for block in model.transformer.blocks:
            places, jobs = [], []
            for name, parts in groups:
                linears = [getattr(block, part) for part in parts]
                weight = torch.cat([linear.weight.detach() for linear in linears])
                bias = None if linears[0].bias is None else torch.cat([linear.bias.detach() for linear in linears])
                places.append((name, parts))
                jobs.append((make, weight, bias))
            for (name, parts), module in zip(places, made(jobs)):
                for part in parts:
                    delattr(block, part)
                setattr(block, name, module)
        if model.args.weight_tying:
            model.tied_head = made([(head or make, model.transformer.wte.weight.detach(), None)])[0]
    compact = exact_int8(model.transformer.wte.weight)
    if compact is not None:   # SmolLM2's Q8_0 table: 32 MB where its fp32 copy took 113
        model.transformer.wte = compact
    return model


def pack_fp16(model: Transformer) -> Transformer:
    """Replace every projection of every block of a CPU fp32 model by an Fp16Linear, in place, and give a tied head
    an fp16 copy of the embedding as its output projection (the embedding itself is then only looked up);
    returns the model. The projections of one input become one product (FUSED_LINEARS: q, k and v; the SwiGLU's
    gate and up). Raises RuntimeError where this torch has no fbgemm (see fbgemm_available). The weights are
    packed on torch's CPU threads' count of Python threads.

    NOTE: fused, SmolLM2's 30 blocks' q, k, v, gate and up products of one row took 6.1 ms instead of 9.0 (9 rows:
    11.2 against 13.3), 2 threads on this project's 2-core machine (2026-12-03): fewer, larger products.
    NOTE: packing SmolLM2's 121 weights took 1.34 s one after another and 0.82 s on two Python threads (fbgemm's
    prepack runs on one core), 2 AMD EPYC cores, 2026-12-04."""
    _require_cpu(model, "fp16-packed")
    if not fbgemm_available():
        raise RuntimeError("this torch build has no fbgemm (an x86 CPU build has it): fp16 weights need it")
    return _pack(model, Fp16Linear)


def pack_bf16(model: Transformer) -> Transformer:
    """`pack_fp16` with Bf16Linear: bf16 weights packed for oneDNN, products of bf16-rounded inputs, fp32 outputs
    (fast where the CPU multiplies bf16 in hardware: hardware_bf16_available). Raises RuntimeError where this torch's
    oneDNN has no bf16."""
    _require_cpu(model, "bf16-packed")
    if not onednn_bf16_available():
        raise RuntimeError("this CPU or torch build has no oneDNN bf16 products: bf16 weights need them")
    # NOTE: oneDNN's bf16 product returns bf16: logits of ~24 rounded to steps of 0.125. With the tied head bf16 too,
    # the held-out split's bike shop lost a booking ("Tomorrow, please." got "What time tomorrow works for you?"):
    # 83 of 86 calls exact against 84 with fp16; with the head's fp16 product (fp32 logits) 84, at ~5% more of the
    # model's time (28 development-set turns 14.4 s against 13.7 s), 2026-12-05.
    return _pack(model, Bf16Linear, head=Fp16Linear if fbgemm_available() else Bf16Linear)


def _pack(model: Transformer, make, head=None) -> Transformer:
    """Every projection of every block by make(weight, bias), the FUSED_LINEARS' parts as one product each, and a
    tied head by (head or make)(embedding, None); in place."""
    fused = {name for names in FUSED_LINEARS.values() for name in names}
    groups = list(FUSED_LINEARS.items()) + [(name, (name,)) for name in BLOCK_LINEARS if name not in fused]
    return _replace_products(model, groups, make, torch.get_num_threads(), head)


def quantize_int8(model: Transformer) -> Transformer:
    """Replace the INT8_LINEARS of every block of a CPU fp32 model by int8 dynamic ones, in place, and give a tied head
    an int8 copy of the embedding as its output projection (the head's product by the 49152 x 576 embedding
    took 10 ms of fp32 per row, 0.8 ms in int8, on this project's machine); returns the model."""
    _require_cpu(model, "int8")
    def int8(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
        plain = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        plain.load_state_dict({"weight": weight} | ({} if bias is None else {"bias": bias}))
        plain.qconfig = per_channel_dynamic_qconfig
        return DynamicLinear.from_float(plain)

    with warnings.catch_warnings():  # torch.ao's eager quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        return _replace_products(model, [(name, (name,)) for name in INT8_LINEARS], int8)
