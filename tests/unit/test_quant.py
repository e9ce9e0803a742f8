"""int8 weights for the CPU (llm.quant) on a tiny random model: which projections turn int8, and the logits stay
those of the fp32 model within the rounding of 8 bits."""
import copy

import torch

from llm.model import BLOCK_LINEARS, ModelArgs, Transformer
from llm.quant import INT8_LINEARS, quantize_int8


def tiny() -> Transformer:
    torch.manual_seed(0)
    args = ModelArgs(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, mlp_hidden_size=128, vocab_size=96,
                     rope_theta=10000.0, max_sequence_length=64, weight_tying=True, shift_logits=True)
    model = Transformer(args)
    model.init_weights(std=0.1)
    return model.eval()


@torch.no_grad()
def test_int8_keeps_the_down_projection_and_gives_a_tied_head_its_own_int8_product():
    ref = tiny()
    model = quantize_int8(copy.deepcopy(ref))
    assert "ff_out" in BLOCK_LINEARS and "ff_out" not in INT8_LINEARS
    for block, plain in zip(model.transformer.blocks, ref.transformer.blocks):
        for name in INT8_LINEARS:
            assert type(getattr(block, name)).__name__ == "Linear" and getattr(block, name).weight().is_quantized
        assert torch.equal(block.ff_out.weight, plain.ff_out.weight)
    assert model.tied_head is not None
    assert torch.equal(model.transformer.wte.weight, ref.transformer.wte.weight)  # the embedding stays fp32

    ids = torch.randint(0, 96, (1, 24), generator=torch.Generator().manual_seed(1))
    want, got = ref(ids), model(ids)
    assert (got - want).abs().max() <= 0.1 * want.abs().max()  # measured: 0.05
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.9
