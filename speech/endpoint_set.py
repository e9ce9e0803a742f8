"""A labeled end-of-turn set, generated here (nothing downloaded): spoken turns that are complete, and turns
with a pause at a point where the sentence is not finished ("I'd like to book a | haircut for Saturday"),
in several voices and noise levels. `python -m speech.bench endpoint` runs the end-of-turn policies on it.

Voices: the bundled Piper voice, whose pieces around a pause are synthesized apart and joined by silence, and
espeak-ng (two of its voices; the `espeak-ng` Debian package), which speaks the whole sentence with an SSML
break at the pause, so the words before it keep the pitch of a sentence that goes on.
"""
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speech.audio import SAMPLE_RATE_HZ, read_wav, resample

# Written for this set (several businesses, the way callers talk); none is taken from an evaluation set.
COMPLETE = (
    "What time do you close tonight?",
    "I'd like to book a haircut for Friday afternoon.",
    "Can you tell me how much a tune-up costs?",
    "My name is Daniel Kim.",
    "Yes, that works for me.",
    "Do you have anything open tomorrow morning?",
    "I need to cancel my appointment on Monday.",
    "Is there parking near your shop?",
    "Thanks, that's all I needed.",
    "Could I speak with someone at the front desk?",
    "We'd like a table for four at seven thirty.",
    "How long does a cleaning usually take?",
)
PAUSED = (
    ("I'd like to book a", "haircut for Saturday."),
    ("My name is", "Priya Raman."),
    ("Can I get an appointment on", "Thursday at two?"),
    ("I was wondering if you", "have anything this week."),
    ("The best number to reach me is", "five five five, one two three four."),
    ("Could you tell me how much it costs to", "replace a flat tire?"),
    ("I need to move my appointment from Tuesday to", "Wednesday."),
    ("We're looking for a table for", "six people tonight."),
    ("Um, so I wanted to ask about", "your opening hours."),
    ("Is it possible to", "bring my dog along?"),
    ("What's the earliest you could", "fit me in?"),
    ("I'd like the, uh,", "the deluxe package."),
)
PAUSES_MS = (300, 500, 800)
SNRS_DB = (None, 20, 10)              # None: clean; the noise is steady and pinkish, like a room
ESPEAK_VOICES = ("en-us", "en-us+f3")
EDGE_MS = 500                          # silence before each turn and after it
_VOICED_LEVEL = 500                    # |int16| above this is speech, when trimming a synthesizer's edges


@dataclass(frozen=True)
class Case:
    text: str                  # the whole turn
    voice: str
    snr_db: float | None
    pause_ms: int | None       # None: a complete turn with no pause inside
    head: str                  # the words before the pause (the whole text for a complete turn)
    audio: np.ndarray          # int16, 16 kHz: EDGE_MS of silence, the turn, EDGE_MS of silence (noise over all)
    end_ms: float              # where the speech ends in `audio`


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def build(synth=None, voices: tuple[str, ...] | None = None, seed: int = 0) -> list[Case]:
    """Every text in every voice (Piper's when `synth` is given, espeak-ng's when installed) at every SNR; the
    paused turns cycle through PAUSES_MS."""
    rng = np.random.default_rng(seed)
    clean = []
    for name, speak in speakers(synth, voices, ESPEAK_VOICES):
        for text in COMPLETE:
            clean.append((text, name, None, text, speak(text, None, None)))
        for i, (head, tail) in enumerate(PAUSED):
            pause = PAUSES_MS[i % len(PAUSES_MS)]
            clean.append((f"{head} {tail}", name, pause, head, speak(head, tail, pause)))
    loud = np.concatenate([a for *_, a in clean]).astype(np.float64)
    speech_rms = float(np.sqrt(np.mean(loud[np.abs(loud) > _VOICED_LEVEL] ** 2)))
    cases = []
    for snr in SNRS_DB:
        for text, voice, pause, head, speech in clean:
            edge = np.zeros(EDGE_MS * SAMPLE_RATE_HZ // 1000, dtype=np.int16)
            audio = np.concatenate([edge, speech, edge])
            if snr is not None:
                audio = add_noise(audio, speech_rms / 10 ** (snr / 20), rng)
            cases.append(Case(text, voice, snr, pause, head, audio, EDGE_MS + speech.size * 1000 / SAMPLE_RATE_HZ))
    return cases


def speakers(synth, voices: tuple[str, ...] | None, default_voices: tuple[str, ...]) -> list[tuple[str, object]]:
    """[(voice name, speak)]: Piper's when `synth` is given, then each espeak-ng voice of `voices` (None:
    `default_voices` when espeak-ng is installed, else none). RuntimeError when that leaves no voice."""
    voices = voices if voices is not None else default_voices if espeak_available() else ()
    chosen = ([("piper", piper_speaker(synth))] if synth is not None else []) + [
        (voice, espeak_speaker(voice)) for voice in voices]
    if not chosen:
        raise RuntimeError("no voice: pass Piper's synthesizer or install espeak-ng")
    return chosen


def piper_speaker(synth):
    """speak(head, tail=None, pause_ms=None) -> int16 16 kHz speech in Piper's voice, trimmed: `head`, or `head`,
    `pause_ms` of silence and `tail`."""
    def speak(head: str, tail: str | None = None, pause_ms: int | None = None) -> np.ndarray:
        first = trimmed(resample(synth.synthesize(head), synth.sample_rate_hz, SAMPLE_RATE_HZ))
        if tail is None:
            return first
        rest = trimmed(resample(synth.synthesize(tail), synth.sample_rate_hz, SAMPLE_RATE_HZ))
        return np.concatenate([first, np.zeros(pause_ms * SAMPLE_RATE_HZ // 1000, np.int16), rest])
    return speak


def espeak_speaker(voice: str):
    """speak(head, tail=None, pause_ms=None) in an espeak-ng voice (the whole sentence, an SSML break between head
    and tail)."""
    def speak(head: str, tail: str | None = None, pause_ms: int | None = None) -> np.ndarray:
        ssml = head if tail is None else f'{head} <break time="{pause_ms}ms"/> {tail}'
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "turn.wav"
            subprocess.run(["espeak-ng", "-v", voice, "-s", "165", "-m", "-w", str(path), f"<speak>{ssml}</speak>"],
                           check=True, capture_output=True)
            return trimmed(read_wav(path))
    return speak


def trimmed(audio: np.ndarray) -> np.ndarray:
    """Speech with a synthesizer's leading and trailing silence cut off."""
    voiced = np.flatnonzero(np.abs(audio) > _VOICED_LEVEL)
    return audio[voiced[0]:voiced[-1] + 1]


def add_noise(audio: np.ndarray, rms: float, rng: np.random.Generator) -> np.ndarray:
    """Steady noise of this RMS over `audio`, with more low-frequency energy than white, like a room or a fan."""
    if rms == 0:
        return audio
    white = rng.normal(0.0, 1.0, audio.size + 7)
    pinkish = np.convolve(white, np.ones(8), mode="valid")
    return np.clip(audio + pinkish * rms / pinkish.std(), -32768, 32767).astype(np.int16)
