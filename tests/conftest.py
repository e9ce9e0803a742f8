"""Shared test set-up. Kernel tests run Triton through its interpreter when there is no GPU."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# --- speech: the real bundled models, loaded once per test session -------------------------------------

@pytest.fixture(scope="session")
def synthesizer():
    """The bundled Piper voice (en_US-joe-medium, 22.05 kHz), warmed up; without sampled noise, so a test hears the
    same audio every run."""
    from speech.tts import Synthesizer

    synth = Synthesizer(varied=False)
    synth.warm_up()
    return synth


@pytest.fixture(scope="session")
def transcriber():
    """The bundled Whisper tiny.en on the CPU, warmed up."""
    from speech.asr import Transcriber

    asr = Transcriber()
    asr.warm_up()
    return asr


@pytest.fixture(scope="session")
def speak(synthesizer):
    """speak(text) -> int16 16 kHz Piper speech; cached, so the same text gives the same audio all session."""
    from speech.audio import SAMPLE_RATE_HZ, resample

    cache = {}  # text -> int16 16 kHz audio

    def speak(text: str):
        if text not in cache:
            cache[text] = resample(synthesizer.synthesize(text), synthesizer.sample_rate_hz, SAMPLE_RATE_HZ)
        return cache[text].copy()

    return speak


# --- the embedded brain: SmolLM2 with Parley's adapter, loaded once per test session ----------------------------

@pytest.fixture(scope="session")
def brain():
    """The shipped SmolLM2 adapter's Engine (llm/weights/parley-smollm2) on the CPU, one torch thread."""
    import llm
    from app.settings import SMOLLM2_ADAPTER_DIR

    torch.set_num_threads(1)
    return llm.load(SMOLLM2_ADAPTER_DIR, device="cpu")
