"""Turn detection on real Piper speech: one turn per utterance, streaming == offline, pre-roll, noise."""
import numpy as np
import pytest

from speech.audio import (FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE_HZ, Upsampler, frames, mulaw_to_pcm, pcm_to_mulaw,
                          resample)
from speech.vad import SpeechEnd, SpeechStart, TurnDetector, VadConfig, detect_turns, frame_level_db
from speech.wer import word_error_rate

SENTENCE = "Please book me a table for four people tomorrow evening."
_SPEECH_LEVEL = 500  # |int16| above this is speech, for finding the true onset and end


def _silence(ms: int) -> np.ndarray:
    return np.zeros(ms * SAMPLE_RATE_HZ // 1000, dtype=np.int16)


def _trimmed(audio: np.ndarray) -> np.ndarray:
    loud = np.flatnonzero(np.abs(audio) > _SPEECH_LEVEL)
    return audio[loud[0]:loud[-1] + 1]


def _noise(n: int, rms: float, seed: int = 0) -> np.ndarray:
    """Steady noise, pinkish (more low-frequency energy than white), like a fan or a room."""
    noise = np.convolve(np.random.default_rng(seed).normal(0.0, 1.0, n + 7), np.ones(8), mode="valid")
    return noise * rms / noise.std()


def _noisy(audio: np.ndarray, snr_db: float) -> np.ndarray:
    speech_rms = np.sqrt(np.mean(audio[np.abs(audio) > _SPEECH_LEVEL].astype(np.float64) ** 2))
    noise = _noise(audio.size, speech_rms / 10 ** (snr_db / 20))
    return np.clip(audio + noise, -32768, 32767).astype(np.int16)


def _kinds(events) -> list[str]:
    return [type(e).__name__ for e in events]


def test_one_utterance_with_silence_around(speak):
    speech = _trimmed(speak(SENTENCE))
    audio = np.concatenate([_silence(1000), speech, _silence(1500)])
    speech_end_ms = 1000 + speech.size * 1000 / SAMPLE_RATE_HZ
    config = VadConfig()
    events = detect_turns(audio, config)
    assert _kinds(events) == ["SpeechStart", "SpeechEnd"]
    start, end = events
    assert 1000 < start.time_ms <= 1000 + 2 * config.start_ms + FRAME_MS
    assert abs(end.last_voiced_ms - speech_end_ms) <= 3 * FRAME_MS
    assert end.time_ms == pytest.approx(end.last_voiced_ms + config.silence_ms)
    # pre-roll + the speech + a little tail, not the trailing silence
    expected_ms = config.preroll_ms + speech.size * 1000 / SAMPLE_RATE_HZ + config.tail_ms
    assert abs(end.audio.size * 1000 / SAMPLE_RATE_HZ - expected_ms) <= 3 * FRAME_MS
    assert end.audio.dtype == np.int16


def test_streaming_frames_equal_whole_file_and_never_rewrite_output(speak):
    audio = np.concatenate([_silence(600), speak(SENTENCE), _silence(900), speak("Thank you so much."),
                            _silence(800)])
    offline = detect_turns(audio)
    assert _kinds(offline) == ["SpeechStart", "SpeechEnd", "SpeechStart", "SpeechEnd"]
    detector = TurnDetector()
    streamed, partials = [], []
    buffer = np.zeros(FRAME_SAMPLES, np.int16)  # one reused buffer, as a transport might do
    for frame in frames(audio):
        buffer[:] = frame
        streamed.extend(detector.push(buffer))
        if detector.in_speech:
            partials.append(detector.utterance_audio())
    assert [(type(e), e.time_ms) for e in streamed] == [(type(e), e.time_ms) for e in offline]
    ends = [(s, o) for s, o in zip(streamed, offline) if isinstance(s, SpeechEnd)]
    for s, o in ends:
        assert s.last_voiced_ms == o.last_voiced_ms and np.array_equal(s.audio, o.audio)
    # each partial is a prefix of the final utterance: audio already handed out never changes
    finals = [s.audio for s, _ in ends]
    for partial in partials:
        assert any(np.array_equal(partial[:min(partial.size, f.size)], f[:min(partial.size, f.size)])
                   for f in finals)
    assert max(p.size for p in partials) > finals[0].size // 2


def test_preroll_keeps_the_first_syllable(speak, transcriber):
    text = "Peter will pick up the package at the front desk tomorrow morning."  # starts on a plosive
    speech = _trimmed(speak(text))
    onset = 800 * SAMPLE_RATE_HZ // 1000
    audio = np.concatenate([_silence(800), speech, _silence(1000)])
    with_preroll = [e for e in detect_turns(audio) if isinstance(e, SpeechEnd)]
    without = [e for e in detect_turns(audio, VadConfig(preroll_ms=0)) if isinstance(e, SpeechEnd)]
    assert len(with_preroll) == len(without) == 1
    utterance = with_preroll[0].audio
    assert utterance.size - without[0].audio.size == 0.2 * SAMPLE_RATE_HZ
    # the utterance is the input verbatim from at least 150 ms before the first loud sample
    lead = np.flatnonzero(np.abs(utterance) > _SPEECH_LEVEL)[0]
    assert lead >= 0.15 * SAMPLE_RATE_HZ
    assert np.array_equal(audio[onset - lead:onset - lead + utterance.size], utterance)
    # Whisper needs that lead-in: on the speech cut at its first loud sample it heard "The will pick up..."
    # 5 times of 5; with the pre-roll, "Peter" (about 1 time in 5 "Gator": one slip, within 10%).
    heard = transcriber.transcribe(utterance)
    assert word_error_rate(text, heard) <= 0.1, heard


def test_mid_sentence_pause_does_not_end_the_turn_but_a_long_one_does(speak):
    first, second = _trimmed(speak("I would like to book")), _trimmed(speak("a haircut for Tuesday."))
    for pause_ms, turns in ((300, 1), (1500, 2)):
        audio = np.concatenate([_silence(500), first, _silence(pause_ms), second, _silence(1000)])
        events = detect_turns(audio)
        assert _kinds(events) == ["SpeechStart", "SpeechEnd"] * turns, pause_ms


@pytest.mark.parametrize("snr_db", [20, 10])
def test_turn_ends_in_steady_noise(speak, snr_db):
    speech = _trimmed(speak(SENTENCE))
    audio = _noisy(np.concatenate([_silence(2000), speech, _silence(1500)]), snr_db)
    events = detect_turns(audio)
    assert _kinds(events) == ["SpeechStart", "SpeechEnd"]
    speech_end_ms = 2000 + speech.size * 1000 / SAMPLE_RATE_HZ
    # the fading last syllable sinks under loud noise: up to ~220 ms seen at 10 dB SNR
    assert abs(events[1].last_voiced_ms - speech_end_ms) <= (100 if snr_db >= 20 else 300)


def test_noise_alone_starts_no_turn():
    noise = _noise(4 * SAMPLE_RATE_HZ, rms=1500).astype(np.int16)  # as loud as 10 dB SNR to Piper's speech
    assert detect_turns(noise) == []
    assert detect_turns(np.zeros(3 * SAMPLE_RATE_HZ, np.int16)) == []


def test_max_utterance_ends_a_turn_that_never_pauses(speak):
    audio = np.concatenate([_silence(400), _trimmed(speak(SENTENCE)), _silence(1000)])
    events = detect_turns(audio, VadConfig(max_utterance_ms=1000))
    first_end = next(e for e in events if isinstance(e, SpeechEnd))
    assert first_end.audio.size == SAMPLE_RATE_HZ  # cut at exactly 1 s of utterance
    assert _kinds(events)[:2] == ["SpeechStart", "SpeechEnd"]


def test_state_reset_and_input_checks(speak):
    detector = TurnDetector()
    audio = np.concatenate([_silence(200), speak(SENTENCE)])
    started = [e for frame in frames(audio) for e in detector.push(frame) if isinstance(e, SpeechStart)]
    assert len(started) == 1 and detector.in_speech and detector.utterance_audio().size > 0
    detector.reset()
    assert not detector.in_speech and detector.time_ms == 0 and detector.utterance_audio().size == 0
    with pytest.raises(ValueError, match="320"):
        detector.push(np.zeros(160, np.int16))
    with pytest.raises(ValueError, match="int16"):
        detector.push(np.zeros(FRAME_SAMPLES, np.float32))


@pytest.mark.parametrize("bad, message", [
    (dict(aggressiveness=4), "one of 0, 1, 2, 3"),
    (dict(silence_ms=10), r"silence_ms must be a multiple of 20 ms in \[20, 5000\]"),
    (dict(start_ms=30), "start_ms must be a multiple of 20"),
    (dict(preroll_ms=-20), "preroll_ms"),
    (dict(tail_ms=200, silence_ms=100), "tail_ms"),
    (dict(noise_margin_db=-1), r"noise_margin_db must be in \[0, 20\]"),
    (dict(min_level_db=70), r"min_level_db must be in \[0, 60\]"),
])
def test_config_validation_names_the_valid_range(bad, message):
    with pytest.raises(ValueError, match=message):
        VadConfig(**bad)


def test_endpoint_audio_during_the_silence_is_what_speech_end_carries(speak):
    # app/ starts transcribing during the trailing silence; the audio it took must be the final audio
    audio = np.concatenate([_silence(300), _trimmed(speak(SENTENCE)), _silence(1000)])
    detector, config = TurnDetector(), VadConfig()
    early, end = None, None
    for frame in frames(audio):
        events = detector.push(frame)
        end = next((e for e in events if isinstance(e, SpeechEnd)), end)
        if detector.in_speech and detector.trailing_silence_ms >= config.silence_ms // 2 and early is None:
            early = detector.endpoint_audio()
    assert early is not None and end is not None
    assert np.array_equal(early, end.audio)
    assert detector.trailing_silence_ms == 0.0 and detector.endpoint_audio().size == 0


def test_a_words_fading_end_under_hearing_is_no_voice(speak):
    # a phone line: the words at 8 kHz through mu-law, upsampled as app.transports.twilio hears them, then the
    # digital silence of a noise-suppressed line; webrtcvad alone calls the last word's decay voice down to RMS ~2
    line = mulaw_to_pcm(pcm_to_mulaw(resample(speak("What's your address?"), SAMPLE_RATE_HZ, 8000)))
    audio = np.concatenate([_silence(500), Upsampler(8000, SAMPLE_RATE_HZ)(line), _silence(1500)])
    levels = [frame_level_db(f) for f in frames(audio)]
    heard_ms = (max(i for i, level in enumerate(levels) if level >= VadConfig().min_level_db) + 1) * FRAME_MS
    ends = {}
    for floor in (VadConfig().min_level_db, 0.0):
        events = detect_turns(audio, VadConfig(min_level_db=floor))
        assert _kinds(events) == ["SpeechStart", "SpeechEnd"]
        ends[floor] = events[1].last_voiced_ms
    assert ends[VadConfig().min_level_db] <= heard_ms
    assert ends[0.0] >= heard_ms + 3 * FRAME_MS   # the decay the floor leaves out
