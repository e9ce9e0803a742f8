"""Audio format constants, conversions and WAV reading (no models needed)."""
import struct

import numpy as np
import pytest

from speech.audio import (FRAME_BYTES, FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE_HZ, AudioFormatError, Upsampler,
                          alaw_to_pcm, float_to_int16, frames, int16_to_float, mulaw_to_pcm, pcm_to_alaw, pcm_to_mulaw,
                          read_wav, resample, to_mono, write_wav)


def _tone(rate_hz: int, seconds: float = 1.0, amplitude: float = 0.5) -> np.ndarray:
    """440 Hz + 1.3 kHz: well inside every rate's band, so resampling should keep it nearly exact."""
    t = np.arange(int(rate_hz * seconds)) / rate_hz
    return (amplitude * (0.6 * np.sin(2 * np.pi * 440 * t) + 0.4 * np.sin(2 * np.pi * 1300 * t))).astype(np.float32)


def _snr_db(reference: np.ndarray, test: np.ndarray, edge: int = 400) -> float:
    """Signal-to-error ratio away from the edges, where filters ring."""
    ref = reference[edge:-edge].astype(np.float64)
    err = ref - test[edge:-edge].astype(np.float64)
    return 10 * np.log10(np.sum(ref ** 2) / max(np.sum(err ** 2), 1e-20))


def test_format_constants():
    assert (SAMPLE_RATE_HZ, FRAME_MS, FRAME_SAMPLES, FRAME_BYTES) == (16_000, 20, 320, 640)


@pytest.mark.parametrize("other_hz", [8_000, 22_050, 24_000, 44_100, 48_000])
@pytest.mark.parametrize("dtype", [np.int16, np.float32])
def test_resample_round_trip(other_hz, dtype):
    x = _tone(SAMPLE_RATE_HZ)
    x = float_to_int16(x) if dtype == np.int16 else x
    there = resample(x, SAMPLE_RATE_HZ, other_hz)
    back = resample(there, other_hz, SAMPLE_RATE_HZ)
    assert there.dtype == dtype and back.dtype == dtype
    assert abs(there.size - x.size * other_hz / SAMPLE_RATE_HZ) <= 1
    assert abs(back.size - x.size) <= 1
    n = min(back.size, x.size)
    assert _snr_db(x[:n], back[:n]) > 40


def test_resample_matches_a_tone_made_at_the_target_rate():
    down = resample(_tone(48_000), 48_000, SAMPLE_RATE_HZ)
    assert _snr_db(_tone(SAMPLE_RATE_HZ), down) > 40


def test_resample_rejects_bad_input():
    with pytest.raises(ValueError, match="int16 or float32"):
        resample(np.zeros(10, np.float64), 16_000, 8_000)
    with pytest.raises(ValueError, match="positive"):
        resample(np.zeros(10, np.int16), 0, 8_000)
    with pytest.raises(ValueError, match="1-D"):
        resample(np.zeros((10, 2), np.int16), 16_000, 8_000)


def test_to_mono_averages_channels_and_keeps_dtype():
    stereo = np.array([[100, 300], [-32768, -32768], [32767, 32767]], dtype=np.int16)
    mono = to_mono(stereo)
    assert mono.dtype == np.int16 and mono.tolist() == [200, -32768, 32767]
    floats = np.array([[0.5, -0.5], [1.0, 0.0]], dtype=np.float32)
    assert to_mono(floats).dtype == np.float32 and to_mono(floats).tolist() == [0.0, 0.5]
    assert to_mono(np.arange(4, dtype=np.int16)).tolist() == [0, 1, 2, 3]


def test_float_int16_conversions():
    assert float_to_int16(np.array([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0])).tolist() == [-32767, -32767, 0, 16384, 32767, 32767]
    y = int16_to_float(np.array([-32768, 0, 32767], dtype=np.int16))
    assert y.dtype == np.float32 and y[0] == -1.0 and y[1] == 0.0 and y[2] < 1.0
    x = np.arange(-32768, 32768).astype(np.int16)
    back = float_to_int16(int16_to_float(x)).astype(np.int32)
    assert np.max(np.abs(back - x)) <= 1  # 1/32768 in, 32767 out: at most 1 LSB apart


def test_mulaw_round_trip_error_is_within_g711_quantization():
    x = np.arange(-32768, 32768).astype(np.int16)
    encoded = pcm_to_mulaw(x)
    assert isinstance(encoded, bytes) and len(encoded) == x.size  # one byte per sample
    decoded = mulaw_to_pcm(encoded)
    assert decoded.dtype == np.int16 and decoded.size == x.size
    level = np.abs(x.astype(np.int64))
    error = np.abs(decoded.astype(np.int64) - x)
    # mu-law steps grow with level: the error stays under |x| / 32 (+ 8 near zero)
    assert np.all(error <= level / 32 + 8)
    assert np.max(error[level < 256]) <= 16
    # decoded values are code points: encoding them again is lossless
    assert pcm_to_mulaw(decoded) == encoded


def test_mulaw_keeps_speech_like_signal():
    x = float_to_int16(_tone(SAMPLE_RATE_HZ, amplitude=0.3))
    assert _snr_db(x, mulaw_to_pcm(pcm_to_mulaw(x))) > 30


def test_alaw_round_trip_is_g711s_and_keeps_speech_like_signal():
    x = np.arange(-32768, 32768).astype(np.int16)
    encoded = pcm_to_alaw(x)
    assert isinstance(encoded, bytes) and len(encoded) == x.size
    decoded = alaw_to_pcm(encoded)
    level, error = np.abs(x.astype(np.int64)), np.abs(decoded.astype(np.int64) - x)
    assert np.all(error <= level / 32 + 16)          # A-law: 13-bit segments, steps of 16 near zero
    assert pcm_to_alaw(decoded) == encoded
    assert pcm_to_alaw(np.array([0], np.int16)) == b"\xd5"       # G.711's A-law code for zero (even bits inverted)
    tone = float_to_int16(_tone(SAMPLE_RATE_HZ, amplitude=0.3))
    assert _snr_db(tone, alaw_to_pcm(pcm_to_alaw(tone))) > 30


def test_frames_are_20ms_with_zero_padded_tail():
    x = np.arange(FRAME_SAMPLES * 2 + 5, dtype=np.int16)
    chunks = list(frames(x))
    assert [c.shape for c in chunks] == [(FRAME_SAMPLES,)] * 3
    assert np.array_equal(np.concatenate(chunks)[:x.size], x)
    assert not chunks[-1][5:].any()
    assert list(frames(np.zeros(0, np.int16))) == []


def _write_raw_wav(path, payload: bytes, *, tag: int, channels: int, rate_hz: int, bits: int,
                   extensible: bool = False, data_size: int | None = None) -> None:
    """A WAV written byte by byte, for encodings the stdlib wave module cannot write."""
    block = channels * bits // 8
    if extensible:
        guid_tail = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = struct.pack("<HHIIHHHHI", 0xFFFE, channels, rate_hz, rate_hz * block, block, bits, 22, bits, 0)
        fmt += struct.pack("<H", tag) + guid_tail
    else:
        fmt = struct.pack("<HHIIHH", tag, channels, rate_hz, rate_hz * block, block, bits)
    size = len(payload) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"LIST" + struct.pack("<I", 4) + b"INFO"
    body += b"data" + struct.pack("<I", size) + payload
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


def _encode(x: np.ndarray, bits: int, tag: int = 1) -> bytes:
    """float [-1, 1] samples (any shape, interleaved) -> little-endian bytes of the given encoding."""
    if tag == 3:
        return x.astype("<f4" if bits == 32 else "<f8").tobytes()
    if bits == 8:
        return np.clip(np.rint(x * 127 + 128), 0, 255).astype(np.uint8).tobytes()
    if bits == 24:
        v = np.rint(x * (2 ** 23 - 1)).astype("<i4").reshape(-1, 1).view(np.uint8)
        return v[:, :3].tobytes()
    dtype = {16: "<i2", 32: "<i4"}[bits]
    return np.rint(x * (2 ** (bits - 1) - 1)).astype(dtype).tobytes()


@pytest.mark.parametrize("case", [
    dict(tag=1, bits=16, channels=2, rate_hz=44_100),   # stereo CD audio
    dict(tag=1, bits=16, channels=1, rate_hz=48_000),
    dict(tag=1, bits=8, channels=1, rate_hz=8_000),     # 8-bit unsigned telephony
    dict(tag=1, bits=24, channels=2, rate_hz=48_000),
    dict(tag=1, bits=32, channels=1, rate_hz=22_050),
    dict(tag=3, bits=32, channels=1, rate_hz=24_000),   # float
    dict(tag=3, bits=64, channels=2, rate_hz=16_000),
    dict(tag=1, bits=16, channels=2, rate_hz=48_000, extensible=True),
    dict(tag=3, bits=32, channels=1, rate_hz=44_100, extensible=True),
], ids=lambda c: f"{c['bits']}bit-{'float' if c['tag'] == 3 else 'pcm'}-{c['channels']}ch-{c['rate_hz']}"
                 + ("-ext" if c.get("extensible") else ""))
def test_read_wav_converts_to_mono_16k_int16(tmp_path, case):
    rate_hz, channels = case["rate_hz"], case["channels"]
    tone = _tone(rate_hz)
    # both channels carry the tone, so the mono mix is the tone itself
    interleaved = np.stack([tone, tone], axis=1)[:, :channels] if channels == 2 else tone
    path = tmp_path / "in.wav"
    _write_raw_wav(path, _encode(interleaved, case["bits"], case["tag"]), tag=case["tag"], channels=channels,
                   rate_hz=rate_hz, bits=case["bits"], extensible=case.get("extensible", False))
    out = read_wav(path)
    assert out.dtype == np.int16 and out.ndim == 1
    assert abs(out.size - SAMPLE_RATE_HZ) <= 1
    expected = float_to_int16(_tone(SAMPLE_RATE_HZ))
    n = min(out.size, expected.size)
    assert _snr_db(expected[:n], out[:n]) > (30 if case["bits"] == 8 else 40)


def test_read_wav_averages_different_channels(tmp_path):
    left = _tone(16_000)
    stereo = np.stack([left, np.zeros_like(left)], axis=1)
    path = tmp_path / "stereo.wav"
    _write_raw_wav(path, _encode(stereo, 16), tag=1, channels=2, rate_hz=16_000, bits=16)
    out = read_wav(path)
    assert _snr_db(float_to_int16(left / 2), out) > 40


def test_write_wav_read_wav_round_trip(tmp_path):
    x = float_to_int16(_tone(SAMPLE_RATE_HZ))
    write_wav(tmp_path / "x.wav", x, SAMPLE_RATE_HZ)
    assert np.array_equal(read_wav(tmp_path / "x.wav"), x)
    with pytest.raises(ValueError, match="int16"):
        write_wav(tmp_path / "y.wav", x.astype(np.float32), SAMPLE_RATE_HZ)


def test_bad_files_raise_audio_format_error_naming_file_and_problem(tmp_path):
    good = tmp_path / "good.wav"
    write_wav(good, float_to_int16(_tone(SAMPLE_RATE_HZ)), SAMPLE_RATE_HZ)
    cases = {
        "empty.wav": (b"", "empty"),
        "notes.txt": (b"this is plain text, not audio\n" * 4, "not a WAV"),
        "truncated.wav": (good.read_bytes()[:5000], "truncated"),
        "header-only.wav": (good.read_bytes()[:30], "truncated"),
    }
    for name, (content, problem) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(AudioFormatError, match=problem) as caught:
            read_wav(path)
        assert name in str(caught.value)
    silent = tmp_path / "no-samples.wav"
    write_wav(silent, np.zeros(0, np.int16), SAMPLE_RATE_HZ)
    with pytest.raises(AudioFormatError, match="no audio samples"):
        read_wav(silent)
    adpcm = tmp_path / "adpcm.wav"
    _write_raw_wav(adpcm, b"\x00" * 64, tag=2, channels=1, rate_hz=8_000, bits=4)
    with pytest.raises(AudioFormatError, match="unsupported WAV encoding"):
        read_wav(adpcm)
    with pytest.raises(AudioFormatError, match="missing.wav"):
        read_wav(tmp_path / "missing.wav")
    assert issubclass(AudioFormatError, ValueError)


def test_word_error_rate_helper():
    from speech.wer import word_error_rate

    assert word_error_rate("Book a table for seven.", "book a table for 7") == 0.0
    assert word_error_rate("one two three four", "one three four five") == 0.5  # 1 deletion + 1 insertion
    assert word_error_rate("a b c d", "a x c d") == 0.25
    assert word_error_rate("", "") == 0.0 and word_error_rate("", "extra") == 1.0


def test_the_phone_line_upsampler_holds_back_2_ms_and_keeps_the_band():
    """8 -> 16 kHz for a phone call: every chunk comes back at once, twice as long (soxr's stream held ~100 ms
    back), a tone in the telephone band comes through at its level ~2 ms late, its image above 4 kHz 55 dB down,
    and chunks of any size give the samples of one call."""
    t = np.arange(8000) / 8000
    for f_hz in (300.0, 1000.0, 3400.0):
        tone = (8000 * np.sin(2 * np.pi * f_hz * t)).astype(np.int16)
        up = Upsampler(8000, 16000)
        out = [up(tone[i:i + 160]) for i in range(0, 8000, 160)]
        assert all(len(chunk) == 320 for chunk in out)
        y = np.concatenate(out).astype(np.float64)[400:]
        want = 8000 * np.sin(2 * np.pi * f_hz * (np.arange(400, 16000) / 16000 - up.delay_s))
        assert up.delay_s < 0.003
        assert np.sqrt(np.mean((y - want) ** 2)) < 0.01 * np.sqrt(np.mean(want ** 2))
        spectrum = np.abs(np.fft.rfft(y * np.hanning(len(y))))
        bin_of = lambda hz: int(round(hz * len(y) / 16000))  # noqa: E731
        assert spectrum[bin_of(8000 - f_hz)] < spectrum[bin_of(f_hz)] * 10 ** (-55 / 20)
    noise = (np.random.default_rng(0).standard_normal(4000) * 3000).astype(np.int16)
    up = Upsampler(8000, 16000)
    assert np.array_equal(np.concatenate([up(noise[i:i + 137]) for i in range(0, 4000, 137)]),
                          Upsampler(8000, 16000)(noise))
    with pytest.raises(ValueError, match="integer factor"):
        Upsampler(16000, 8000)
