"""int8 weights for the CPU: a block's linears as dynamically quantized ones (fbgemm, per output channel).

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

import torch
import torch.nn as nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
from torch.ao.quantization import per_channel_dynamic_qconfig

from llm.model import BLOCK_LINEARS, Transformer

INT8_LINEARS = tuple(name for name in BLOCK_LINEARS if name != "ff_out")


def quantize_int8(model: Transformer) -> Transformer:
    """Replace the INT8_LINEARS of every block of a CPU fp32 model by int8 dynamic ones, in place, and give a tied head
    an int8 copy of the embedding as its output projection (the head's product by the 49152 x 576 embedding
    took 10 ms of fp32 per row, 0.8 ms in int8, on this project's machine); returns the model."""
    if model.transformer.wte.weight.device.type != "cpu":
        raise ValueError("int8 weights are for the CPU; on a GPU run the model in bf16 or fp32")
    def int8(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
        plain = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        plain.load_state_dict({"weight": weight} | ({} if bias is None else {"bias": bias}))
        plain.qconfig = per_channel_dynamic_qconfig
        return DynamicLinear.from_float(plain)

    with warnings.catch_warnings():  # torch.ao's eager quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        for block in model.transformer.blocks:
            for name in INT8_LINEARS:
                linear = getattr(block, name)
                setattr(block, name, int8(linear.weight.detach(), linear.bias))
        if model.args.weight_tying:
            model.tied_head = int8(model.transformer.wte.weight.detach(), None)
    return model
