"""The Realtime's audio formats: a client's base64 audio in, the reply's audio out, checked as events are."""
import base64
import binascii

import numpy as np

from app.api.realtime.config import RATES, EventError
from speech.audio import SAMPLE_RATE_HZ, alaw_to_pcm, mulaw_to_pcm, pcm_to_alaw, pcm_to_mulaw, resample

MIN_COMMIT_MS = 100                       # OpenAI's smallest committable buffer


def from_base64(text: str, param: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EventError(f"'{param}' is not valid base64", code="invalid_base64", param=param) from None


def decode(data: bytes, kind: str, param: str = "audio") -> np.ndarray:
    """Audio in the input format `kind`, at its rate."""
    if kind == "audio/pcm":
        if len(data) % 2:
            raise EventError("audio/pcm is 16-bit: an odd number of bytes", code="invalid_audio", param=param)
        return np.frombuffer(data, dtype="<i2").astype(np.int16)
    return mulaw_to_pcm(data) if kind == "audio/pcmu" else alaw_to_pcm(data)


def encode(samples: np.ndarray, kind: str) -> bytes:
    if kind == "audio/pcm":
        return samples.astype("<i2").tobytes()
    return pcm_to_mulaw(samples) if kind == "audio/pcmu" else pcm_to_alaw(samples)


def item_audio(item: dict, kind: str) -> np.ndarray | None:
    """A user message's `input_audio` content (in the input format `kind`) at 16 kHz, or None for a message of
    text."""
    content = item.get("content")
    if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == "input_audio"
                                                for p in content):
        return None
    if len(content) != 1 or not isinstance(content[0].get("audio"), str):
        raise EventError("a message with audio has one input_audio part, its 'audio' base64 in the session's "
                         "input format", code="unsupported", param="item.content")
    param = "item.content[0].audio"
    samples = decode(from_base64(content[0]["audio"], param), kind, param)
    if len(samples) < RATES[kind] * MIN_COMMIT_MS // 1000:
        raise EventError(f"the message's audio is under {MIN_COMMIT_MS} ms", code="invalid_audio", param=param)
    return resample(samples, RATES[kind], SAMPLE_RATE_HZ)
