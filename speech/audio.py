"""The pipeline's audio format as named constants, and conversions into and out of it."""
import struct
import sys
import wave
from pathlib import Path
from typing import Iterator

import numpy as np
import soxr

if sys.version_info >= (3, 13):
    import audioop  # provided by the audioop-lts package
else:
    import warnings

    with warnings.catch_warnings():  # stdlib audioop warns that it leaves in 3.13
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop

# The format every stage exchanges: mono int16 PCM.
SAMPLE_RATE_HZ = 16_000
FRAME_MS = 20                                        # webrtcvad accepts 10, 20 or 30 ms
FRAME_SAMPLES = SAMPLE_RATE_HZ * FRAME_MS // 1000    # 320
FRAME_BYTES = FRAME_SAMPLES * 2                      # 640, int16

_INT16_SCALE = 32768.0
_WAVE_PCM, _WAVE_FLOAT, _WAVE_EXTENSIBLE = 0x0001, 0x0003, 0xFFFE


class AudioFormatError(ValueError):
    """A file that is not audio read_wav can decode; the message names the file and the problem."""


def _check_1d(samples: np.ndarray, name: str) -> None:
    if samples.ndim != 1:
        raise ValueError(f"{name} expects 1-D samples, got shape {samples.shape}")


def resample(samples: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """Resample 1-D int16 or float32 audio from `from_hz` to `to_hz`; same dtype out."""
    _check_1d(samples, "resample")
    if samples.dtype not in (np.int16, np.float32):
        raise ValueError(f"resample expects int16 or float32 samples, got {samples.dtype}")
    if from_hz <= 0 or to_hz <= 0:
        raise ValueError(f"sample rates must be positive, got {from_hz} -> {to_hz} Hz")
    if from_hz == to_hz or samples.size == 0:
        return samples.copy()
    return soxr.resample(samples, from_hz, to_hz, quality="HQ")


def to_mono(samples: np.ndarray) -> np.ndarray:
    """(n, channels) or (n,) -> (n,) by averaging channels; same dtype."""
    if samples.ndim == 1:
        return samples
    if samples.ndim != 2:
        raise ValueError(f"to_mono expects (n,) or (n, channels), got shape {samples.shape}")
    if samples.shape[1] == 1:
        return samples[:, 0].copy()
    if np.issubdtype(samples.dtype, np.integer):
        mean = samples.astype(np.int64).sum(axis=1) // samples.shape[1]  # exact, no overflow
        return mean.astype(samples.dtype)
    return samples.mean(axis=1, dtype=np.float64).astype(samples.dtype)


def float_to_int16(x: np.ndarray) -> np.ndarray:
    """[-1, 1] float -> int16; values outside the range are clipped."""
    return np.rint(np.clip(np.asarray(x, dtype=np.float64), -1.0, 1.0) * 32767.0).astype(np.int16)


def int16_to_float(x: np.ndarray) -> np.ndarray:
    """int16 -> float32 in [-1, 1)."""
    return (np.asarray(x, dtype=np.int16).astype(np.float32) / _INT16_SCALE).astype(np.float32)


def mulaw_to_pcm(data: bytes) -> np.ndarray:
    """G.711 mu-law bytes (one per sample) -> int16 samples."""
    return np.frombuffer(audioop.ulaw2lin(bytes(data), 2), dtype="<i2").astype(np.int16)


def pcm_to_mulaw(samples: np.ndarray) -> bytes:
    """int16 samples -> G.711 mu-law bytes (one per sample)."""
    return audioop.lin2ulaw(_int16_bytes(samples, "pcm_to_mulaw"), 2)


def alaw_to_pcm(data: bytes) -> np.ndarray:
    """G.711 A-law bytes (one per sample) -> int16 samples."""
    return np.frombuffer(audioop.alaw2lin(bytes(data), 2), dtype="<i2").astype(np.int16)


def pcm_to_alaw(samples: np.ndarray) -> bytes:
    """int16 samples -> G.711 A-law bytes (one per sample)."""
    return audioop.lin2alaw(_int16_bytes(samples, "pcm_to_alaw"), 2)


def _int16_bytes(samples: np.ndarray, name: str) -> bytes:
    """1-D int16 samples as little-endian bytes, for the G.711 encoders."""
    samples = np.asarray(samples)
    _check_1d(samples, name)
    if samples.dtype != np.int16:
        raise ValueError(f"{name} expects int16 samples, got {samples.dtype}")
    return samples.astype("<i2").tobytes()


def frames(samples: np.ndarray, frame_samples: int = FRAME_SAMPLES) -> Iterator[np.ndarray]:
    """Consecutive frames of `frame_samples` (20 ms by default); the last one is zero-padded."""
    _check_1d(samples, "frames")
    if frame_samples <= 0:
        raise ValueError(f"frame_samples must be positive, got {frame_samples}")
    for start in range(0, samples.size, frame_samples):
        frame = samples[start:start + frame_samples]
        if frame.size < frame_samples:
            frame = np.concatenate([frame, np.zeros(frame_samples - frame.size, dtype=samples.dtype)])
        yield frame


def write_wav(path, samples: np.ndarray, sample_rate_hz: int) -> None:
    """Write mono int16 samples as a 16-bit PCM WAV file."""
    samples = np.asarray(samples)
    _check_1d(samples, "write_wav")
    if samples.dtype != np.int16:
        raise ValueError(f"write_wav expects int16 samples, got {samples.dtype}")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(int(sample_rate_hz))
        wav.writeframes(samples.astype("<i2").tobytes())


def read_wav(path) -> np.ndarray:
    """Any PCM or float WAV (8/16/24/32-bit, any rate, any channels) -> mono int16 at 16 kHz."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AudioFormatError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    fmt, pcm = _parse_riff(path, data)
    fmt_tag, channels, rate_hz, bits = fmt
    samples = _decode_samples(path, pcm, fmt_tag, channels, bits)  # (n, channels) float32
    mono = to_mono(samples)
    return float_to_int16(resample(mono, rate_hz, SAMPLE_RATE_HZ))


def _parse_riff(path: Path, data: bytes) -> tuple[tuple[int, int, int, int], bytes]:
    """The WAV's (format tag, channels, rate_hz, bits per sample) and its raw sample bytes."""
    if not data:
        raise AudioFormatError(f"{path}: file is empty")
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioFormatError(f"{path}: not a WAV file (no RIFF/WAVE header)")
    fmt, pcm, pos = None, None, 12
    while pos + 8 <= len(data):
        chunk_id, size = struct.unpack_from("<4sI", data, pos)
        body = data[pos + 8:pos + 8 + size]
        if chunk_id == b"fmt ":
            fmt = _parse_fmt(path, body)
        elif chunk_id == b"data":
            if len(body) < size:
                raise AudioFormatError(
                    f"{path}: truncated: data chunk declares {size} bytes but only {len(body)} are present")
            pcm = body
            break
        pos += 8 + size + (size & 1)  # chunks are padded to an even size
    if fmt is None:
        raise AudioFormatError(f"{path}: truncated or malformed WAV: no 'fmt ' chunk before the audio")
    if pcm is None:
        raise AudioFormatError(f"{path}: truncated or malformed WAV: no 'data' chunk")
    return fmt, pcm


def _parse_fmt(path: Path, body: bytes) -> tuple[int, int, int, int]:
    if len(body) < 16:
        raise AudioFormatError(f"{path}: truncated 'fmt ' chunk ({len(body)} bytes, need 16)")
    tag, channels, rate_hz, _, _, bits = struct.unpack_from("<HHIIHH", body, 0)
    if tag == _WAVE_EXTENSIBLE and len(body) >= 26:
        tag = struct.unpack_from("<H", body, 24)[0]  # first two bytes of the SubFormat GUID
    if tag not in (_WAVE_PCM, _WAVE_FLOAT):
        raise AudioFormatError(
            f"{path}: unsupported WAV encoding (format tag {tag:#06x}); supported: PCM (1) and IEEE float (3)")
    valid_bits = (8, 16, 24, 32) if tag == _WAVE_PCM else (32, 64)
    if bits not in valid_bits:
        kind = "PCM" if tag == _WAVE_PCM else "float"
        raise AudioFormatError(f"{path}: unsupported {bits}-bit {kind} WAV; supported: {valid_bits} bits")
    if channels == 0 or rate_hz == 0:
        raise AudioFormatError(f"{path}: invalid WAV header ({channels} channels at {rate_hz} Hz)")
    return tag, channels, rate_hz, bits


def _decode_samples(path: Path, pcm: bytes, tag: int, channels: int, bits: int) -> np.ndarray:
    """Raw little-endian sample bytes -> (n, channels) float32 in [-1, 1]."""
    width = bits // 8
    n = len(pcm) // (width * channels)
    if n == 0:
        raise AudioFormatError(f"{path}: WAV has no audio samples")
    raw = pcm[:n * width * channels]
    if tag == _WAVE_FLOAT:
        x = np.frombuffer(raw, dtype="<f4" if bits == 32 else "<f8").astype(np.float32)
    elif bits == 8:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0  # 8-bit is unsigned
    elif bits == 16:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / _INT16_SCALE
    elif bits == 24:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        x = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8  # sign-extend 24 -> 32 bits
        x = x.astype(np.float32) / float(1 << 23)
    else:
        x = (np.frombuffer(raw, dtype="<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
    return np.nan_to_num(x, nan=0.0).reshape(n, channels)


class Upsampler:
    """Streaming integer-factor upsampling (8 kHz telephone audio to the pipeline's 16 kHz) that holds back ~2 ms:
    zero-stuffing and a Kaiser-windowed sinc low-pass, as polyphase filters, with the input's last few samples kept
    between chunks. NOTE: soxr's ResampleStream (the library's streaming resampler) held 8 -> 16 kHz audio back in
    blocks of ~100 ms at HQ and MQ (1660 samples every five 20 ms chunks) and ~60 ms at LQ: on a phone call the
    caller's last word reached the turn detector up to ~100 ms late, a wait no server metric saw (2026-12-06).
    The filter passes the telephone band (to 3.6 kHz) and keeps its image above 4.4 kHz 60 dB down."""

    TAPS_PER_PHASE = 36
    PASS_HZ, STOP_HZ = 3600.0, 4400.0   # at the input rate 8 kHz; scaled for other rates

    def __init__(self, from_hz: int, to_hz: int):
        if from_hz <= 0 or to_hz % from_hz:
            raise ValueError(f"Upsampler needs an integer factor, got {from_hz} -> {to_hz} Hz")
        self.factor = up = to_hz // from_hz
        n = self.TAPS_PER_PHASE * up
        cutoff = (self.PASS_HZ + self.STOP_HZ) / 2 * from_hz / 8000 / to_hz   # cycles per output sample
        t = np.arange(n) - (n - 1) / 2
        taps = 2 * cutoff * np.sinc(2 * cutoff * t) * np.kaiser(n, 5.65) * up   # ~60 dB stopband; gain up
        self._phases = [taps[p::up].copy() for p in range(up)]   # phase p makes output samples p, p + up, ...
        self._history = np.zeros(self.TAPS_PER_PHASE - 1)
        self.delay_s = (n - 1) / 2 / to_hz

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        """int16 samples at from_hz -> int16 at to_hz, `factor` times as many; the filter's state carries over."""
        _check_1d(samples, "Upsampler")
        x = np.concatenate([self._history, samples.astype(np.float64)])
        self._history = x[len(x) - len(self._history):]
        out = np.empty(len(samples) * self.factor)
        for p, phase in enumerate(self._phases):
            out[p::self.factor] = np.convolve(x, phase, mode="valid")
        return np.clip(np.rint(out), -32768, 32767).astype(np.int16)
