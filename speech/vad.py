"""Turn detection: webrtcvad voiced/unvoiced decisions over 20 ms frames, plus an endpoint policy."""
import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import webrtcvad

from speech.audio import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE_HZ, frames

# Noise floor = this percentile of frame levels over the last few seconds: speech has quiet gaps
# (stop closures, pauses) often enough that the low percentile stays on the noise, not the voice.
_FLOOR_WINDOW_FRAMES = 150   # 3 s
_FLOOR_PERCENTILE = 10


@dataclass(frozen=True)
class VadConfig:
    aggressiveness: int = 2       # webrtcvad mode 0-3; higher rejects more noise as non-speech
    start_ms: int = 100           # voiced audio (within a 2 * start_ms window) needed to declare speech_start
    # NOTE: 600 ms from `python -m speech.bench vad` (Piper turns with 300/500/700 ms pauses mid-sentence,
    # clean and in steady noise at 20 and 10 dB SNR): 500 ms split 61-67% of the turns that had a 500 ms
    # pause, 600 ms split 6-11%, 700 ms ~6% but every reply waits 100 ms more; 300 ms pauses never split
    # from 400 ms up. The endpoint lands silence_ms (+0-15 ms) after the last word.
    silence_ms: int = 600         # trailing unvoiced audio that ends the turn
    preroll_ms: int = 200         # audio kept before the first voiced frame, so the first syllable survives
    # NOTE: a lone caller's draft starts here (app.pipeline.session.SessionOptions.speculate_idle_ms). Whisper (with
    # the salon's prompt) on `speech.vocabulary_set`'s 224 clips cut 40 / 60 / 80 / 100 ms after the last voiced
    # frame: WER 0.203 / 0.198 / 0.194 / 0.195; `python -m app.bench` e2e 453 / 442 ms at 80 against 483 / 468 at 100
    # (interleaved, 2 AMD EPYC cores, 2026-12-06)
    tail_ms: int = 80             # unvoiced audio kept after the last voiced frame in SpeechEnd.audio
    max_utterance_ms: int = 20_000  # a turn longer than this is ended anyway (noise that never stops)
    noise_margin_db: float = 3.0  # a voiced frame must also be this much louder than the noise floor; 0 = off
    # NOTE: webrtcvad calls the fading end of a word voice down to an RMS of ~2 (10 dB) where nothing is heard: a
    # phone caller's "What's your address?" after a noise-suppressed line (its last word's decay into digital
    # silence) was voice 100 ms after its level fell under 30 dB (RMS ~32, -60 dBFS), which the caller waits through
    # before the turn can end; the six questions of `app.loadtest`, through the phone line's mu-law and upsampling:
    # 20 / 20 / 60 / 0 / 80 / 60 ms of such a tail at 20 dB, 60 / 40 / 100 / 0 / 100 / 80 at 30. Speech that quiet
    # is none that Whisper hears; the end-of-turn set's turns (`python -m speech.bench endpoint`) end the same. A
    # lone phone caller (`python -m app.loadtest --calls 1 --turns 6`, four runs each, alternated with the code
    # before; 2 AMD EPYC cores, 2026-12-07): p50 720 / 722 / 620 / 681 ms against 799 / 899 / 801 / 800.
    min_level_db: float = 30.0    # a frame under this level (dB re 1 LSB of int16) is never voice

    def __post_init__(self):
        if self.aggressiveness not in (0, 1, 2, 3):
            raise ValueError(f"aggressiveness must be one of 0, 1, 2, 3, got {self.aggressiveness}")
        ranges = {"start_ms": (FRAME_MS, 1_000), "silence_ms": (FRAME_MS, 5_000), "preroll_ms": (0, 2_000),
                  "tail_ms": (0, 1_000), "max_utterance_ms": (1_000, 120_000)}
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            if not low <= value <= high or value % FRAME_MS:
                raise ValueError(f"{name} must be a multiple of {FRAME_MS} ms in [{low}, {high}], got {value}")
        if not 0 <= self.noise_margin_db <= 20:
            raise ValueError(f"noise_margin_db must be in [0, 20] dB, got {self.noise_margin_db}")
        if not 0 <= self.min_level_db <= 60:
            raise ValueError(f"min_level_db must be in [0, 60] dB, got {self.min_level_db}")
        if self.tail_ms > self.silence_ms:
            raise ValueError(f"tail_ms ({self.tail_ms}) must not exceed silence_ms ({self.silence_ms})")


@dataclass(frozen=True)
class SpeechStart:
    time_ms: float                # stream time of the decision (end of the frame that triggered it)


@dataclass(frozen=True)
class SpeechEnd:
    time_ms: float                # stream time of the endpoint decision
    last_voiced_ms: float         # stream time at the end of the last voiced frame
    audio: np.ndarray             # (n,) int16 16 kHz: pre-roll + utterance + up to tail_ms after the last voiced frame


class TurnDetector:
    """Streaming turn detector: push 20 ms frames, get SpeechStart / SpeechEnd events."""

    def __init__(self, config: VadConfig = VadConfig()):
        self.config = config
        self._vad = webrtcvad.Vad(config.aggressiveness)
        self._start_frames = config.start_ms // FRAME_MS
        self._window_frames = 2 * self._start_frames
        self._preroll_frames = config.preroll_ms // FRAME_MS
        self.reset()

    def reset(self) -> None:
        """Back to the initial state: no speech, stream time 0, nothing buffered."""
        self._frames_pushed = 0
        self._levels_db = np.zeros(_FLOOR_WINDOW_FRAMES)  # ring of recent frame levels, dB re 1 LSB
        self._levels_seen = 0
        # Before speech: the last preroll + window frames as (frame, voiced), to seed the utterance.
        self._history: deque[tuple[np.ndarray, bool]] = deque(maxlen=self._preroll_frames + self._window_frames)
        self._utterance: list[np.ndarray] = []  # frames of the current turn, pre-roll included
        self._last_voiced_index = 0             # index into _utterance of the last voiced frame
        self._in_speech = False

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    @property
    def time_ms(self) -> float:
        """Stream time: frames pushed since the last reset * 20 ms."""
        return self._frames_pushed * FRAME_MS

    @property
    def trailing_silence_ms(self) -> float:
        """Unvoiced audio since the last voiced frame of the current turn; 0 outside speech."""
        if not self._in_speech:
            return 0.0
        return (len(self._utterance) - 1 - self._last_voiced_index) * FRAME_MS

    def endpoint_audio(self) -> np.ndarray:
        """The audio SpeechEnd would carry if the turn ended now (for work started during the silence)."""
        silent_frames = len(self._utterance) - 1 - self._last_voiced_index
        keep = self._last_voiced_index + 1 + min(silent_frames, self.config.tail_ms // FRAME_MS)
        return np.concatenate(self._utterance[:keep]) if self._utterance else np.zeros(0, dtype=np.int16)

    def utterance_audio(self) -> np.ndarray:
        """int16 audio of the turn so far (pre-roll included); empty outside speech."""
        if not self._utterance:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(self._utterance)

    def push(self, frame: np.ndarray) -> list[SpeechStart | SpeechEnd]:
        """Feed one 20 ms frame (320 int16 samples); returns the events it caused, in order."""
        if frame.dtype != np.int16 or frame.shape != (FRAME_SAMPLES,):
            raise ValueError(f"push expects a ({FRAME_SAMPLES},) int16 frame (20 ms at 16 kHz), "
                             f"got shape {frame.shape} dtype {frame.dtype}")
        frame = frame.copy()  # kept for the utterance: the caller may reuse its buffer
        voiced = self._is_voiced(frame)
        self._frames_pushed += 1
        if not self._in_speech:
            return self._push_idle(frame, voiced)
        return self._push_speech(frame, voiced)

    def _is_voiced(self, frame: np.ndarray) -> bool:
        """webrtcvad's decision, gated by level: above `min_level_db`, and above the noise floor (alone, webrtcvad
        called 66-84% of steady-noise frames voiced at 15-10 dB SNR and those turns never ended; with a 3 dB gate,
        0%)."""
        voiced = self._vad.is_speech(frame.tobytes(), SAMPLE_RATE_HZ)
        level_db = frame_level_db(frame)
        voiced = voiced and level_db >= self.config.min_level_db
        if self.config.noise_margin_db == 0:
            return voiced
        self._levels_db[self._levels_seen % _FLOOR_WINDOW_FRAMES] = level_db
        self._levels_seen += 1
        n = min(self._levels_seen, _FLOOR_WINDOW_FRAMES)
        k = (n - 1) * _FLOOR_PERCENTILE // 100
        floor_db = np.partition(self._levels_db[:n], k)[k]
        return voiced and level_db > floor_db + self.config.noise_margin_db

    def _push_idle(self, frame: np.ndarray, voiced: bool) -> list[SpeechStart | SpeechEnd]:
        self._history.append((frame, voiced))
        history = list(self._history)
        window = history[-self._window_frames:]
        if sum(v for _, v in window) < self._start_frames:
            return []
        # The utterance starts preroll_ms before the first voiced frame of the triggering window.
        first_voiced = len(history) - len(window) + next(i for i, (_, v) in enumerate(window) if v)
        kept = history[max(0, first_voiced - self._preroll_frames):]
        self._utterance = [f for f, _ in kept]
        self._last_voiced_index = max(i for i, (_, v) in enumerate(kept) if v)
        self._in_speech = True
        self._history.clear()
        return [SpeechStart(time_ms=self.time_ms)]

    def _push_speech(self, frame: np.ndarray, voiced: bool) -> list[SpeechStart | SpeechEnd]:
        self._utterance.append(frame)
        if voiced:
            self._last_voiced_index = len(self._utterance) - 1
        silent_frames = len(self._utterance) - 1 - self._last_voiced_index
        too_long = len(self._utterance) * FRAME_MS >= self.config.max_utterance_ms
        if silent_frames * FRAME_MS < self.config.silence_ms and not too_long:
            return []
        return [self.end_now()]

    def end_now(self) -> SpeechEnd | None:
        """End the current turn at this frame: an end-of-turn decision (speech.endpoint) judged the silence so far
        enough. None outside speech."""
        if not self._in_speech:
            return None
        last_voiced_ms = self.time_ms - self.trailing_silence_ms
        end = SpeechEnd(time_ms=self.time_ms, last_voiced_ms=last_voiced_ms, audio=self.endpoint_audio())
        self._utterance = []
        self._in_speech = False
        return end


def frame_level_db(frame: np.ndarray) -> float:
    """A frame's RMS level in dB re 1 LSB of int16 (+1 inside the log: digital silence is 0 dB)."""
    x = frame.astype(np.float64)
    return 20 * math.log10(math.sqrt(float(np.dot(x, x)) / x.size) + 1.0)


def detect_turns(samples: np.ndarray, config: VadConfig = VadConfig()) -> list[SpeechStart | SpeechEnd]:
    """All events for a whole int16 16 kHz recording, framed in 20 ms (the last frame zero-padded)."""
    detector = TurnDetector(config)
    return [event for frame in frames(samples) for event in detector.push(frame)]
