"""The dispatcher: PARLEY_KERNELS read once; Triton where chosen (on CUDA, or the interpreter on request), torch
otherwise."""
import os
import subprocess
import sys

import pytest
import torch

import kernels
from tests.conftest import requires_cuda

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def choose(monkeypatch):
    """Set PARLEY_KERNELS for one test and forget the cached choice before and after."""
    def _choose(value):
        monkeypatch.setenv("PARLEY_KERNELS", value)
        kernels.backend.cache_clear()
    yield _choose
    kernels.backend.cache_clear()


def _spy(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, spy)
    return calls


def test_backend_is_read_once_and_validated(choose, monkeypatch):
    choose("Torch")
    assert kernels.backend() == "torch"
    monkeypatch.setenv("PARLEY_KERNELS", "triton")
    assert kernels.backend() == "torch"  # decided once
    choose("cuda")
    with pytest.raises(ValueError, match="auto, triton, torch"):
        kernels.backend()


def test_auto_uses_the_reference_on_cpu_tensors(choose, monkeypatch):
    choose("auto")
    calls = _spy(monkeypatch, kernels._rms_norm, "rms_norm")
    x, w = torch.randn(3, 16), torch.randn(16)
    torch.testing.assert_close(kernels.rms_norm(x, w, 1e-5), kernels.rms_norm_ref(x, w, 1e-5))
    assert calls == []


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")
def test_triton_choice_runs_every_kernel_on_cpu_through_the_interpreter(choose, monkeypatch):
    choose("triton")
    modules = [(kernels._rms_norm, "rms_norm"), (kernels._rope, "rope"), (kernels._swiglu, "swiglu"),
               (kernels._attention, "attention"), (kernels._confidence_argmax, "confidence_argmax")]
    calls = [c for m, name in modules for c in [_spy(monkeypatch, m, name)]]
    x = torch.randn(2, 4, 5, 64)
    kernels.rms_norm(x, torch.ones(64), 1e-5)
    kernels.rope(x, x[:, :1], torch.ones(5, 64), torch.zeros(5, 64))
    kernels.swiglu(x, x)
    out = kernels.attention(x, x[:, :2], x[:, :2])
    token, conf = kernels.confidence_argmax(torch.randn(3, 100), mask_id=0)
    assert [len(c) for c in calls] == [1] * 5
    torch.testing.assert_close(out, kernels.attention_ref(x, x[:, :2], x[:, :2]))
    assert token.shape == conf.shape == (3,)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")
def test_a_list_of_ops_runs_those_in_triton_and_the_rest_in_torch(choose, monkeypatch):
    choose(" swiglu, RMS_NORM ")
    assert kernels.backend() == "rms_norm,swiglu"
    norm, glu, attend = (_spy(monkeypatch, m, name) for m, name in (
        (kernels._rms_norm, "rms_norm"), (kernels._swiglu, "swiglu"), (kernels._attention, "attention")))
    x = torch.randn(2, 4, 5, 64)
    kernels.rms_norm(x, torch.ones(64), 1e-5)
    kernels.swiglu(x, x)
    kernels.attention(x, x[:, :2], x[:, :2])
    assert (norm, glu, attend) == (["rms_norm"], ["swiglu"], [])
    choose("swiglu,softmax")
    with pytest.raises(ValueError, match="confidence_argmax"):
        kernels.backend()


def test_without_triton_auto_falls_back_and_triton_choice_explains(tmp_path):
    script = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` raise ImportError
        "import os, torch, kernels\n"
        "x = torch.randn(3, 16)\n"
        "assert torch.equal(kernels.swiglu(x, x), kernels.swiglu_ref(x, x))\n"
        "os.environ['PARLEY_KERNELS'] = 'triton'; kernels.backend.cache_clear()\n"
        "try:\n    kernels.swiglu(x, x)\nexcept ValueError as e:\n    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PARLEY_KERNELS", "TRITON_INTERPRET")}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Triton is not installed" in done.stdout


def test_triton_choice_without_interpreter_explains(choose, monkeypatch):
    choose("triton")
    monkeypatch.setattr(kernels, "INTERPRET", False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        kernels.swiglu(torch.randn(2, 3), torch.randn(2, 3))


@requires_cuda
@pytest.mark.parametrize("choice, in_triton", [("auto", "swiglu" in kernels.AUTO_TRITON_OPS), ("triton", True),
                                               ("swiglu", True), ("rms_norm", False), ("torch", False)])
def test_each_choice_runs_swiglu_on_cuda_tensors_where_it_says(choose, monkeypatch, choice, in_triton):
    choose(choice)
    calls = _spy(monkeypatch, kernels._swiglu, "swiglu")
    x = torch.randn(3, 16, device="cuda")
    torch.testing.assert_close(kernels.swiglu(x, x), kernels.swiglu_ref(x, x))
    assert calls == (["swiglu"] if in_triton else [])


def test_a_cpu_process_without_the_interpreter_never_imports_triton():
    """Where no kernel can run (no GPU, no TRITON_INTERPRET), neither Triton nor torch._dynamo is imported (~140 MB
    of memory), not even by a model made on the meta device; the torch references run, and asking for the kernels
    says what they need."""
    script = (
        "import os, sys, torch, llm, kernels\n"
        "from llm.model import ModelArgs, Transformer\n"
        "with torch.device('meta'):\n"   # as a checkpoint's model is made, before its weights are loaded
        "    Transformer(ModelArgs(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, mlp_hidden_size=128,"
        " vocab_size=96, max_sequence_length=64))\n"
        "x = torch.randn(3, 16)\n"
        "assert torch.equal(kernels.swiglu(x, x), kernels.swiglu_ref(x, x))\n"
        "print('triton' in sys.modules or 'torch._dynamo' in sys.modules)\n"
        "os.environ['PARLEY_KERNELS'] = 'triton'; kernels.backend.cache_clear()\n"
        "try:\n    kernels.swiglu(x, x)\nexcept ValueError as e:\n    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PARLEY_KERNELS", "TRITON_INTERPRET")}
    env["CUDA_VISIBLE_DEVICES"] = ""   # no GPU, on a machine with one too
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    imported, reason = done.stdout.splitlines()[:2]
    assert imported == "False" and "TRITON_INTERPRET=1" in reason
