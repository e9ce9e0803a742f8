"""Callers of two businesses saying the business's own words, and some not, spoken in several voices, for
`python -m speech.bench vocabulary`: how often a speech recognizer hears the services callers name, with the
business's words as its prompt (speech.asr.AsrOptions.prompt, app.agent.profile.Profile.vocabulary) and without.

Voices: the bundled Piper voice and espeak-ng's (the `espeak-ng` Debian package), whose robotic accents are
harder for Whisper than Piper's, as real callers' are. Each clip clean and at 10 dB SNR.
"""
from dataclasses import dataclass

import numpy as np

from speech.audio import SAMPLE_RATE_HZ
from speech.endpoint_set import add_noise, speakers
from speech.wer import normalize_words

# Written for this set, the way callers talk; none is taken from an evaluation set. profile -> sentences.
SENTENCES = {
    "app/profiles/default.yaml": (
        "Hi, I was hoping to get a blow dry before the wedding on Saturday.",
        "How much do you charge for highlights?",
        "Can my son come in for a kids haircut after school?",
        "I just need a quick beard trim, nothing fancy.",
        "Do you do hair coloring on weekdays?",
        "Could you fit me in for a trim tomorrow around noon?",
        "What's the price of a men's cut these days?",
        "I'd like a blowout and maybe some color too.",
        "Is a shave something you offer?",
        "Is there parking close to the salon?",
        "Sorry, could you repeat that last part?",
        "My name is Tessa Morgan and I'm calling about Friday.",
        "Could I come in Thursday at two thirty for a trim?",
        "Is five forty-five too late for a blow dry?",
    ),
    "app/profiles/bike_repair.yaml": (
        "My back tire has a flat, can you fix it today?",
        "How much is a basic tune-up?",
        "The brakes on my road bike are squeaking.",
        "I think my front wheel needs truing, it's really wobbly.",
        "Do you do brake adjustment while I wait?",
        "I need a tube replacement on a kids bike.",
        "When is the next opening for a tune up?",
        "Can I drop off my bike for a service on Monday?",
        "Is the puncture repair done the same day?",
        "Do you sell helmets or just do repairs?",
        "What time do you open on Saturday?",
        "It's Marcus, I called earlier about my bike.",
        "Can I pick it up at four fifteen?",
        "Do you have anything at ten thirty on Friday?",
    ),
}
ESPEAK_VOICES = ("en-us", "en-us+f3", "en-gb-x-rp")
SNRS_DB = (None, 10)
EDGE_MS = 250                          # silence before and after each clip


@dataclass(frozen=True)
class Clip:
    profile: str               # the business the caller speaks to (a profile path)
    text: str
    voice: str
    snr_db: float | None
    audio: np.ndarray          # int16, 16 kHz


def build(synth=None, voices: tuple[str, ...] | None = None, seed: int = 0) -> list[Clip]:
    """Every sentence in every voice (Piper's when `synth` is given, espeak-ng's when installed) at every SNR."""
    voices = speakers(synth, voices, ESPEAK_VOICES)
    rng = np.random.default_rng(seed)
    edge = np.zeros(EDGE_MS * SAMPLE_RATE_HZ // 1000, dtype=np.int16)
    clips = []
    for profile, sentences in SENTENCES.items():
        for voice, speak in voices:
            for text in sentences:
                voiced = speak(text)
                rms = float(np.sqrt(np.mean(voiced.astype(np.float64) ** 2)))
                speech = np.concatenate([edge, voiced, edge])
                for snr in SNRS_DB:
                    audio = speech if snr is None else add_noise(speech, rms / 10 ** (snr / 20), rng)
                    clips.append(Clip(profile, text, voice, snr, audio))
    return clips


def noise_only(seed: int = 0) -> list[np.ndarray]:
    """Clips of steady room noise alone, 0.5-3 s, from barely there to loud: a recognizer should hear nothing."""
    rng = np.random.default_rng(seed)
    return [add_noise(np.zeros(int(seconds * SAMPLE_RATE_HZ), np.int16), level, rng)
            for seconds in (0.5, 1, 2, 3) for level in (30, 100, 300, 1000, 3000)]


def term_counts(spoken: str, heard: str, terms) -> tuple[int, int, int]:
    """Of the terms (the business's words, each one or more words), how many `spoken` says, how many of those
    `heard` misses, and how many `heard` holds that `spoken` does not say: (said, missed, made up)."""
    said_words, heard_words = normalize_words(spoken), normalize_words(heard)
    said = missed = made_up = 0
    for term in terms:
        words = normalize_words(term)
        in_said, in_heard = _holds(said_words, words), _holds(heard_words, words)
        said += in_said
        missed += in_said and not in_heard
        made_up += in_heard and not in_said
    return said, missed, made_up


def _holds(words: list[str], term: list[str]) -> bool:
    """Whether the words hold the term's words one after the other."""
    n = len(term)
    return any(words[i:i + n] == term for i in range(len(words) - n + 1))
