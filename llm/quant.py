"""int8 weights for the CPU: each block's linears as dynamically quantized ones (fbgemm, per output channel).

NOTE: on this project's 2-core AVX2 machine (no bf16 instructions: a bf16 matmul ran ~20x slower than fp32), a
576 -> 1536 product of 4 rows took 97 us in int8 against 307 us in fp32 (1 row: 75 against 116 us); measured
for the whole model in docs/EMBEDDED_MODEL.md. Activations stay fp32; only the weights are int8.
"""
import warnings

import torch
import torch.nn as nn

from llm.model import BLOCK_LINEARS, Transformer


def quantize_int8(model: Transformer) -> Transformer:
    """Replace every block linear of a CPU fp32 model by an int8 dynamic one, in place; returns the model."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    if model.transformer.wte.weight.device.type != "cpu":
        raise ValueError("int8 weights are for the CPU; on a GPU run the model in bf16 or fp32")
    with warnings.catch_warnings():  # torch.ao's eager quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        for block in model.transformer.blocks:
            for name in BLOCK_LINEARS:
                linear = getattr(block, name)
                plain = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
                plain.load_state_dict(linear.state_dict())
                plain.qconfig = per_channel_dynamic_qconfig
                setattr(block, name, DynamicLinear.from_float(plain))
    return model
