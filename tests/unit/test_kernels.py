"""Each Triton kernel against its torch reference over odd shapes: through Triton's interpreter on the CPU,
on the GPU where there is one.

bfloat16 attention runs only on a GPU: the interpreter (Triton 3.9) multiplies bf16 tl.dot operands as raw
integers (measured: error 3e10 on a 16x16 product), while bf16 loads, stores and arithmetic work.
"""
import os

import pytest
import torch

from kernels.attention import attention, attention_ref
from kernels.confidence_argmax import confidence_argmax, confidence_argmax_ref
from kernels.rms_norm import rms_norm, rms_norm_ref
from kernels.rope import rope, rope_ref
from kernels.swiglu import swiglu, swiglu_ref

# about one rounding of the output dtype; for bf16 two or three, because the interpreter casts fp32 to bf16 by
# truncation (Triton 3.9 _convert_float without a rounding mode), one ulp (2^-7 relative) per cast
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=1e-3, rtol=1e-3),
       torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}
DTYPES = list(TOL)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ATTENTION_DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])

pytestmark = pytest.mark.skipif(DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1",
                                reason="Triton needs a GPU or TRITON_INTERPRET=1")


@pytest.fixture(autouse=True)
def _seeded_on_device():
    """Seed, and make the GPU (when there is one) the default device of every tensor a test creates."""
    torch.manual_seed(0)
    torch.set_default_device(DEVICE)
    yield
    torch.set_default_device("cpu")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows, dim", [(1, 64), (7, 1000), (33, 128), (130, 96)])
def test_rms_norm_matches_reference(rows, dim, dtype):
    x = torch.randn(rows, dim, dtype=dtype) * 3
    weight = torch.randn(dim, dtype=dtype)
    torch.testing.assert_close(rms_norm(x, weight, 1e-5), rms_norm_ref(x, weight, 1e-5), **TOL[dtype])


def test_rms_norm_strided_rows_and_fp32_weight():
    x = torch.randn(2, 7, 300, dtype=torch.float16)[:, :, :256]  # row stride 300, last dim 256
    weight = torch.randn(256)
    out = rms_norm(x, weight, 1e-6)
    assert out.dtype == torch.float32 and out.shape == (2, 7, 256)
    torch.testing.assert_close(out, rms_norm_ref(x, weight, 1e-6), **TOL[torch.float16])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seq, head_dim, kv_heads", [(1, 64, 1), (7, 128, 4), (33, 64, 4), (130, 128, 1)])
def test_rope_matches_reference_and_leaves_inputs(seq, head_dim, kv_heads, dtype):
    q = torch.randn(2, 4, seq, head_dim, dtype=dtype)
    k = torch.randn(2, kv_heads, seq, head_dim, dtype=dtype)
    angle = torch.randn(seq, head_dim)  # not of the duplicated-halves form: each half is read separately
    cos, sin = angle.cos(), angle.sin()
    q0, k0 = q.clone(), k.clone()
    q_out, k_out = rope(q, k, cos, sin)
    # truth in fp32 from the same dtype-rounded cos/sin; the reference in fp16/bf16 rounds thrice and can
    # lose most digits to cancellation (measured: 10% off in bf16), the kernel rounds once
    q_ref, k_ref = rope_ref(q.float(), k.float(), cos.to(dtype).float(), sin.to(dtype).float())
    torch.testing.assert_close(q_out.float(), q_ref, **TOL[dtype])
    torch.testing.assert_close(k_out.float(), k_ref, **TOL[dtype])
    assert q_out.dtype == k_out.dtype == dtype
    assert torch.equal(q, q0) and torch.equal(k, k0)  # out of place


def test_rope_on_transposed_projection_view():
    qkv = torch.randn(2, 33, 3, 4, 64)  # (B, T, 3, H, D), as a fused projection would lay it out
    q, k = qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)  # (B, H, T, D), strided views
    angle = torch.randn(33, 64)
    for got, want in zip(rope(q, k, angle.cos(), angle.sin()), rope_ref(q, k, angle.cos(), angle.sin())):
        torch.testing.assert_close(got, want, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1000), (7, 33), (2, 7, 3000), (130, 130)])
def test_swiglu_matches_reference(shape, dtype):
    gate, up = torch.randn(shape, dtype=dtype) * 4, torch.randn(shape, dtype=dtype)
    torch.testing.assert_close(swiglu(gate, up), swiglu_ref(gate, up), **TOL[dtype])


def test_swiglu_on_halves_of_a_fused_projection():
    fused = torch.randn(7, 2 * 1000)
    gate, up = fused[:, :1000], fused[:, 1000:]  # row stride 2000
    torch.testing.assert_close(swiglu(gate, up), swiglu_ref(gate, up), **TOL[torch.float32])


ATTENTION_CASES = [  # (B, H, Hkv, Tq, Tk, D)
    (1, 2, 1, 1, 7, 64),
    (2, 4, 4, 7, 33, 128),
    (1, 4, 2, 33, 130, 64),
    (2, 2, 1, 130, 33, 64),
    (1, 2, 2, 33, 33, 128),
]


def _qkv(batch, heads, kv_heads, q_len, k_len, head_dim, dtype):
    return (torch.randn(batch, heads, q_len, head_dim, dtype=dtype),
            torch.randn(batch, kv_heads, k_len, head_dim, dtype=dtype),
            torch.randn(batch, kv_heads, k_len, head_dim, dtype=dtype))


@pytest.mark.parametrize("dtype", ATTENTION_DTYPES)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_attention_matches_reference(case, padded, dtype):
    q, k, v = _qkv(*case, dtype)
    mask = torch.rand(case[0], case[4]) > 0.3 if padded else None
    if padded:
        mask[:, 0] = True  # every query has a key to attend
    want = attention_ref(q.float(), k.float(), v.float(), mask)  # fp32 truth
    torch.testing.assert_close(attention(q, k, v, mask).float(), want, **TOL[dtype])


@pytest.mark.parametrize("num_splits", [2, 3])
def test_attention_split_keys_match_reference(num_splits):
    q, k, v = _qkv(2, 4, 2, 33, 130, 64, torch.float32)
    mask = torch.ones(2, 130, dtype=torch.bool)
    mask[0, :70] = False  # batch 0: the first split sees no key at all
    mask[1, 100:] = False
    want = attention_ref(q, k, v, mask)
    torch.testing.assert_close(attention(q, k, v, mask, num_splits=num_splits), want, **TOL[torch.float32])


def test_attention_scale_strided_q_and_fully_masked_batch():
    q = torch.randn(2, 7, 4, 64).transpose(1, 2)  # (B, H, Tq, D) view of a (B, Tq, H, D) projection
    k, v = torch.randn(2, 2, 33, 64), torch.randn(2, 2, 33, 64)
    mask = torch.ones(2, 33, dtype=torch.bool)
    mask[1] = False  # nothing to attend: zeros, as the reference gives
    out = attention(q, k, v, mask, scale=0.3)
    torch.testing.assert_close(out, attention_ref(q, k, v, mask, scale=0.3), **TOL[torch.float32])
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert out.transpose(1, 2).is_contiguous()  # heads merge with a free view


def _check_confidence(logits, mask_id, token, conf, tol):
    ref_token, ref_conf = confidence_argmax_ref(logits, mask_id)
    x = logits.float()
    if mask_id is not None:
        x[:, mask_id] = float("-inf")
        assert not (token == mask_id).any()
    rows = torch.arange(len(x))
    assert torch.equal(x[rows, token], x.max(dim=-1).values)  # a maximal logit, whatever the tie-break
    unique = (x == x.max(dim=-1, keepdim=True).values).sum(-1) == 1
    assert torch.equal(token[unique], ref_token[unique])
    assert token.dtype == torch.int64 and conf.dtype == torch.float32
    torch.testing.assert_close(conf, ref_conf, **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_id", [None, 3])
@pytest.mark.parametrize("rows, vocab, splits", [(1, 1000, None), (7, 1000, 3), (7, 32003, None), (2, 32003, 5)])
def test_confidence_argmax_matches_reference(rows, vocab, splits, mask_id, dtype):
    logits = (torch.randn(rows, vocab) * 4).to(dtype)
    logits[0, 3] = 40.0  # row 0: the mask token would win; with mask_id=3 it must not
    token, conf = confidence_argmax(logits, mask_id, num_splits=splits)
    _check_confidence(logits, mask_id, token, conf, TOL[torch.float32])


def test_confidence_argmax_ties_and_infinities():
    logits = torch.full((4, 5000), float("-inf"))
    logits[0, [10, 2500, 4999]] = 1.0  # a three-way tie across lanes and splits: the lowest column wins
    logits[1, 4321] = -1e30
    logits[2, :] = 0.0
    logits[3, 7] = 5.0  # only the mask token is finite: nothing can be chosen
    for splits in (1, 2):
        token, conf = confidence_argmax(logits, mask_id=7, num_splits=splits)
        assert token.tolist() == [10, 4321, 0, 0]
        torch.testing.assert_close(conf, torch.tensor([1 / 3, 1.0, 1 / 4999, 0.0]))


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="weight shape"):
        rms_norm(torch.randn(2, 8), torch.randn(7), 1e-5)
    with pytest.raises(ValueError, match="mask_id"):
        confidence_argmax(torch.randn(2, 8), mask_id=8)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        attention(*_qkv(1, 3, 2, 4, 4, 64, torch.float32))
    with pytest.raises(ValueError, match="key_padding_mask"):
        attention(*_qkv(1, 2, 1, 4, 4, 64, torch.float32), torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="same shape"):
        swiglu(torch.randn(2, 8), torch.randn(2, 9))
    with pytest.raises(ValueError, match="cos/sin"):
        rope(torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(4, 6), torch.randn(4, 6))
