"""The kernels against their references at LLaDA-8B / Dream-7B sizes on a GPU (skipped on the CPU).

Run on a GPU machine with scripts/gpu_check.sh. Splits are left to the launchers' defaults, as in the model.
"""
import pytest
import torch

from kernels.attention import attention, attention_ref
from kernels.confidence_argmax import confidence_argmax, confidence_argmax_ref
from kernels.rms_norm import rms_norm, rms_norm_ref
from kernels.rope import rope, rope_ref
from kernels.swiglu import swiglu, swiglu_ref
from tests.conftest import requires_cuda

pytestmark = requires_cuda

# on the GPU every cast rounds to nearest: one output rounding for the elementwise ops
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=1e-3, rtol=1e-3),
       torch.bfloat16: dict(atol=1e-2, rtol=1.6e-2)}
# attention against an fp32 truth: P is rounded to the input dtype before P @ V, as in every flash kernel
ATTENTION_TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=2e-3, rtol=2e-3),
                 torch.bfloat16: dict(atol=1.5e-2, rtol=1.5e-2)}
LLADA_MASK_ID = 126336


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [32, 2048])
def test_rms_norm_at_d_model_4096(rows, dtype):
    x = torch.randn(rows, 4096, device="cuda", dtype=dtype)
    w = torch.randn(4096, device="cuda", dtype=dtype)
    torch.testing.assert_close(rms_norm(x, w, 1e-5), rms_norm_ref(x, w, 1e-5), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seq, heads, kv_heads", [(32, 32, 32), (2080, 32, 32), (2080, 28, 4)])
def test_rope_at_head_dim_128(seq, heads, kv_heads, dtype):
    q = torch.randn(1, seq, heads, 128, device="cuda", dtype=dtype).transpose(1, 2)  # as the model views it
    k = torch.randn(1, seq, kv_heads, 128, device="cuda", dtype=dtype).transpose(1, 2)
    angle = torch.randn(seq, 128, device="cuda")
    cos, sin = angle.cos(), angle.sin()
    want = rope_ref(q.float(), k.float(), cos.to(dtype).float(), sin.to(dtype).float())
    for got, ref in zip(rope(q, k, cos, sin), want):
        torch.testing.assert_close(got.float(), ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [32, 2048])
def test_swiglu_at_mlp_12288(rows, dtype):
    gate = torch.randn(rows, 12288, device="cuda", dtype=dtype) * 4
    up = torch.randn(rows, 12288, device="cuda", dtype=dtype)
    torch.testing.assert_close(swiglu(gate, up), swiglu_ref(gate, up), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads, kv_heads, q_len, k_len, padded", [
    (32, 32, 32, 160, False),  # a block against a short prefix: one split
    (32, 32, 32, 2080, False),  # a block against a 2048 prefix: split keys
    (32, 32, 32, 1056, True),
    (28, 4, 32, 2080, True),  # Dream-7B's grouped-query heads
    (32, 32, 2048, 2048, True),  # prefill
])
def test_attention_at_llada_sizes(heads, kv_heads, q_len, k_len, padded, dtype):
    q = torch.randn(1, q_len, heads, 128, device="cuda", dtype=dtype).transpose(1, 2)
    k = torch.randn(1, kv_heads, k_len, 128, device="cuda", dtype=dtype)
    v = torch.randn(1, kv_heads, k_len, 128, device="cuda", dtype=dtype)
    mask = None
    if padded:
        mask = torch.ones(1, k_len, dtype=torch.bool, device="cuda")
        mask[:, : k_len // 5] = False  # left padding
    want = attention_ref(q.float(), k.float(), v.float(), mask)
    torch.testing.assert_close(attention(q, k, v, mask).float(), want, **ATTENTION_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, vocab, mask_id", [(32, 126464, LLADA_MASK_ID), (32, 152064, None),
                                                  (1, 126464, LLADA_MASK_ID), (2048, 126464, LLADA_MASK_ID)])
def test_confidence_argmax_at_vocab_sizes(rows, vocab, mask_id, dtype):
    logits = (torch.randn(rows, vocab, device="cuda") * 4).to(dtype)
    if mask_id is not None:
        logits[:, mask_id] = 50.0  # the mask token would win every row
    token, conf = confidence_argmax(logits, mask_id)
    ref_token, ref_conf = confidence_argmax_ref(logits, mask_id)
    x = logits.float()
    if mask_id is not None:
        x[:, mask_id] = float("-inf")
    rows_idx = torch.arange(rows, device="cuda")
    assert torch.equal(x[rows_idx, token], x.max(dim=-1).values)  # a maximal logit whatever the tie-break
    unique = (x == x.max(dim=-1, keepdim=True).values).sum(-1) == 1
    assert torch.equal(token[unique], ref_token[unique])
    torch.testing.assert_close(conf, ref_conf, atol=1e-6, rtol=1e-5)
