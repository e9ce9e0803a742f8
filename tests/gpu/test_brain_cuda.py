"""The embedded brain (SmolLM2 + Parley's adapter) on a CUDA GPU, its hot path through the Triton kernels or torch's
ops, against the same model on the CPU (torch references): the same first-token probabilities and greedy reply."""
import pytest

import kernels

from app.settings import SMOLLM2_ADAPTER_DIR
from llm import load
from tests.conftest import requires_cuda

MESSAGES = [
    {"role": "system", "content": "You answer phone calls for Maple Street Hair Studio, 214 Maple Street. "
                                  "Open Tuesday to Saturday, 9 AM to 6 PM. A women's haircut is $45."},
    {"role": "user", "content": "Hi, what's the address there?"},
]


@pytest.fixture(scope="module")
def on_cpu():
    engine = load(SMOLLM2_ADAPTER_DIR, device="cpu", dtype="float32")
    return engine.first_token_probabilities(MESSAGES), engine.generate(MESSAGES, max_new_tokens=24, block_length=4).text


@requires_cuda
@pytest.mark.parametrize("choice, dtype, most_apart", [("triton", "float32", 1e-3), ("triton", "bfloat16", 0.05),
                                                       ("auto", "float32", 1e-3)])
def test_the_brain_on_the_gpu_reads_the_prompt_as_the_cpu_does(on_cpu, monkeypatch, request, choice, dtype,
                                                                most_apart):
    cpu_probabilities, cpu_reply = on_cpu
    monkeypatch.setenv("PARLEY_KERNELS", choice)
    kernels.backend.cache_clear()  # read again now, and again after the test
    request.addfinalizer(kernels.backend.cache_clear)
    engine = load(SMOLLM2_ADAPTER_DIR, device="cuda", dtype=dtype)
    probabilities = engine.first_token_probabilities(MESSAGES).float().cpu()
    # half the L1 distance: the most probability any set of tokens gains or loses between the two devices
    assert 0.5 * (probabilities - cpu_probabilities).abs().sum().item() < most_apart
    assert probabilities.argmax() == cpu_probabilities.argmax()
    if dtype == "float32":  # block diffusion commits by confidence: bf16 may settle a block in another order
        assert engine.generate(MESSAGES, max_new_tokens=24, block_length=4).text == cpu_reply
