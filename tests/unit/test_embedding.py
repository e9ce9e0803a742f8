"""The embedding table held as int8 blocks (llm.embedding): bit for bit the rows of a table those blocks hold (a
GGUF's Q8_0 one), with the rows they don't in fp32; a table they don't hold is left as it is."""
import copy

import pytest
import torch

from llm.embedding import BLOCK, Int8Embedding, exact_int8
from llm.quant import fbgemm_available, onednn_bf16_available, pack_bf16, pack_fp16
from tests.unit.test_quant import tiny


def q8_0_table(rows: int, d: int, seed: int = 0) -> torch.Tensor:
    """A table as llama.cpp stores Q8_0 and loading dequantizes it: int8 values times an fp16 scale a block."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randint(-127, 128, (rows, d // BLOCK, BLOCK), generator=g).float()
    values[:, :, 0] = 127   # the largest of a block is +-127
    scales = (torch.rand(rows, d // BLOCK, 1, generator=g) * 0.01).half().float()
    return (values * scales).flatten(1)


def test_a_q8_0_table_is_looked_up_bit_for_bit_in_a_quarter_of_the_memory():
    table = q8_0_table(200, 64)
    table[7] = table.mean(dim=0)   # a row the blocks don't hold (a mask token's: the mean of the others)
    compact = exact_int8(table)
    assert isinstance(compact, Int8Embedding) and len(compact.extra) == 1
    ids = torch.arange(200).reshape(4, 50)
    assert torch.equal(compact(ids), torch.nn.functional.embedding(ids, table))
    held = sum(t.numel() * t.element_size() for t in compact.buffers())
    assert held < 0.35 * table.numel() * table.element_size()


def test_a_table_of_fp32_values_is_not_held_as_int8():
    assert exact_int8(torch.randn(200, 64)) is None   # trained values: 8 bits a value would change them
    assert exact_int8(q8_0_table(10, 64)[:, :48]) is None   # rows that are not whole blocks


@pytest.mark.parametrize("pack, available", [(pack_fp16, fbgemm_available), (pack_bf16, onednn_bf16_available)])
@torch.no_grad()
def test_a_packed_model_looks_its_q8_0_embedding_up_as_int8_with_the_same_logits(pack, available):
    if not available():
        pytest.skip("this CPU or torch has no such products")
    model = tiny()
    model.transformer.wte.weight.copy_(q8_0_table(96, 64))
    packed = pack(copy.deepcopy(model))
    assert isinstance(packed.transformer.wte, Int8Embedding)
    ids = torch.randint(0, 96, (1, 24), generator=torch.Generator().manual_seed(1))
    got = packed(ids)
    packed.transformer.wte = model.transformer.wte   # the fp32 table the lookup replaced
    assert torch.equal(got, packed(ids))
