"""Smaller CPU weights (llm.quant) on a tiny random model: which projections change, and the logits stay those of
the fp32 model within the rounding of 8 bits (int8), 11 significant bits (fp16 weights, fp32 products) or 8 (bf16
weights and products' inputs); and which 16-bit format a CPU gets."""
import copy

import pytest
import torch

import llm.quant
from llm.model import BLOCK_LINEARS, ModelArgs, Transformer
from llm.quant import (INT8_LINEARS, Bf16Linear, Fp16Linear, bucketed_rows, pack_bf16, pack_fp16, quantize_int8,
                        sixteen_bit, weight_format)


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


@torch.no_grad()
def test_fp16_packs_every_projection_and_the_tied_head_and_keeps_fp32_greedy_tokens():
    ref = tiny()
    model = pack_fp16(copy.deepcopy(ref))
    for block in model.transformer.blocks:  # q, k, v as one product, the gate and up as another
        assert all(isinstance(getattr(block, name), Fp16Linear) for name in ("qkv", "attn_out", "gate_up", "ff_out"))
        assert not any(hasattr(block, name) for name in ("q_proj", "k_proj", "v_proj", "ff_proj", "up_proj"))
    assert isinstance(model.tied_head, Fp16Linear)
    assert weight_format(model) == "float16 weights"
    assert torch.equal(model.transformer.wte.weight, ref.transformer.wte.weight)  # the lookup stays fp32
    assert model.args.n_params == sum(p.numel() for p in ref.parameters())  # what the thread sizing reads

    ids = torch.randint(0, 96, (1, 24), generator=torch.Generator().manual_seed(1))
    want, got = ref(ids), model(ids)
    assert got.dtype == torch.float32
    # only the weights are rounded, to fp16's 11 significant bits (int8 above: 0.05 of the largest logit)
    assert (got - want).abs().max() <= 2e-3 * want.abs().max()
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@torch.no_grad()
def test_fp16_fused_projections_keep_the_q_k_v_biases():
    torch.manual_seed(0)
    args = ModelArgs(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, mlp_hidden_size=128, vocab_size=96,
                     rope_theta=10000.0, max_sequence_length=64, weight_tying=False, shift_logits=True, qkv_bias=True)
    ref = Transformer(args)
    ref.init_weights(std=0.1)
    for block in ref.transformer.blocks:  # Dream's / Qwen2's q, k, v biases, here not zero
        for name in ("q_proj", "k_proj", "v_proj"):
            getattr(block, name).bias.normal_(0, 0.5)
    ids = torch.randint(0, 96, (1, 24), generator=torch.Generator().manual_seed(1))
    want, got = ref.eval()(ids), pack_fp16(copy.deepcopy(ref))(ids)
    assert (got - want).abs().max() <= 2e-3 * want.abs().max()


@torch.no_grad()
def test_a_pass_over_fused_projections_is_the_trunks_causal_forward():
    """llm.passes rotates a packed model's q and k in one product of their heads (llm.passes._JointRope); the trunk
    projects and rotates them apart (Block.project, kernels.rope): the same hidden states, after a cache too."""
    from llm.passes import Pass, passes   # this test's own: the decoder's forward over a packed model

    model = pack_fp16(tiny())
    ids = torch.randint(0, 96, (1, 24), generator=torch.Generator().manual_seed(1))
    want = model.trunk(ids, 0, model.new_cache(1, 24), causal=True)[0]
    cache = model.new_cache(1, 24)
    first, = passes(model, [Pass(cache, 0, ids[0, :17])])
    rest, = passes(model, [Pass(cache, 17, ids[0, 17:])])
    torch.testing.assert_close(torch.cat([first, rest]), want, atol=1e-5, rtol=1e-5)


def test_fp16_linear_is_the_fp32_product_of_fp16_rounded_weights_with_a_bias():
    torch.manual_seed(0)
    weight, bias, x = torch.randn(40, 24), torch.randn(40), torch.randn(3, 5, 24)
    got = Fp16Linear(weight, bias)(x)
    want = x @ weight.half().float().t() + bias
    assert got.shape == (3, 5, 40)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(got, x @ weight.t() + bias, atol=1e-6, rtol=0)  # the rounding is real


def test_fp16_weights_need_fbgemm(monkeypatch):
    monkeypatch.setattr(llm.quant, "fbgemm_available", lambda: False)  # an ARM build of torch
    with pytest.raises(RuntimeError, match="fbgemm"):
        pack_fp16(tiny())


onednn_bf16 = pytest.mark.skipif(not llm.quant.onednn_bf16_available(),
                                 reason="this CPU or torch has no oneDNN bf16 products")


@onednn_bf16
@torch.no_grad()
def test_bf16_packs_every_projection_and_the_tied_head_and_keeps_the_logits():
    ref = tiny()
    model = pack_bf16(copy.deepcopy(ref))
    for block in model.transformer.blocks:
        assert all(isinstance(getattr(block, name), Bf16Linear) for name in ("qkv", "attn_out", "gate_up", "ff_out"))
        assert not any(hasattr(block, name) for name in ("q_proj", "k_proj", "v_proj", "ff_proj", "up_proj"))
    # the head's logits are not rounded to bf16: its product is fp16's (fp32 out) where fbgemm is
    assert isinstance(model.tied_head, Fp16Linear if llm.quant.fbgemm_available() else Bf16Linear)
    assert weight_format(model) == "bfloat16 weights"
    assert torch.equal(model.transformer.wte.weight, ref.transformer.wte.weight)  # the lookup stays fp32

    ids = torch.randint(0, 96, (1, 24), generator=torch.Generator().manual_seed(1))
    want, got = ref(ids), model(ids)
    assert got.dtype == torch.float32
    # weights and the products' inputs rounded to 8 significant bits: coarser than fp16's, finer than int8's
    error = (got - want).abs().max() / want.abs().max()
    assert error <= 0.03  # measured: 0.008 (fp16 weights: under 0.002)
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.9


@onednn_bf16
def test_bf16_linear_is_the_product_of_bf16_rounded_weights_and_inputs_with_a_bias():
    torch.manual_seed(0)
    weight, bias, x = torch.randn(40, 24), torch.randn(40), torch.randn(3, 5, 24)
    got = Bf16Linear(weight, bias)(x)
    want = x.bfloat16().float() @ weight.bfloat16().float().t() + bias.bfloat16().float()
    assert got.shape == (3, 5, 40) and got.dtype == torch.float32
    assert torch.allclose(got, want, atol=0.1, rtol=0)  # measured: 0.03 of ~14 (the sum is rounded to bf16 at the end)
    assert (got - (x @ weight.t() + bias)).abs().max() > 1e-3  # the rounding is real


def test_products_run_on_few_row_counts_however_many_rows_a_pass_has():
    """oneDNN keeps what it builds for each shape for the life of the process: a server's passes of 1 to 200 rows
    must meet a few dozen shapes, not 200, and a pass of up to 9 rows (one token and 8 guesses) runs as it is."""
    buckets = [bucketed_rows(rows) for rows in range(1, 201)]
    assert buckets[:9] == list(range(1, 10))
    assert all(rows <= bucket <= max(rows * 1.34, rows + 3) for rows, bucket in enumerate(buckets, 1))
    assert len(set(buckets)) <= 30


@onednn_bf16
def test_bf16_rows_are_their_own_whatever_rows_pad_the_product():
    torch.manual_seed(0)
    linear, x = Bf16Linear(torch.randn(40, 24), torch.randn(40)), torch.randn(70, 24)
    whole = linear(x)
    for rows in (1, 9, 10, 13, 31, 57, 70):
        assert linear(x[:rows]).shape == (rows, 40)
        torch.testing.assert_close(linear(x[:rows]), whole[:rows], rtol=0, atol=0.1)  # bf16 sums: ~0.03


@pytest.mark.parametrize("capabilities, in_hardware", [({"amx_bf16": True}, True), ({"avx512_bf16": True}, True),
                                                       ({"avx512_bf16": False, "avx512_bw": True}, False), ({}, False)])
def test_bf16_is_in_hardware_with_amx_or_avx512_bf16(monkeypatch, capabilities, in_hardware):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)
    monkeypatch.setattr(llm.quant, "onednn_bf16_available", lambda: True)
    assert llm.quant.hardware_bf16_available() == in_hardware


@pytest.mark.parametrize("bf16, fbgemm, chosen", [(True, True, "bfloat16"), (False, True, "float16"),
                                                  (False, False, None)])
def test_the_16_bit_format_is_bf16_in_hardware_else_fp16_else_none(monkeypatch, bf16, fbgemm, chosen):
    monkeypatch.setattr(llm.quant, "hardware_bf16_available", lambda: bf16)
    monkeypatch.setattr(llm.quant, "fbgemm_available", lambda: fbgemm)
    assert sixteen_bit() == chosen
