"""Piper synthesis, clause streaming and cancellation, and the clause splitter (batch == streaming)."""
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from speech.audio import SAMPLE_RATE_HZ, resample
from speech.tts import DEFAULT_VOICE, MIN_CLAUSE_WORDS, ClauseSplitter, Synthesizer, split_clauses
from speech.wer import word_error_rate

REPLY = ("Sure, I can help you with that. I have an opening on Tuesday at 3:30 p.m. with Maria, "
         "and another one on Wednesday morning at ten. Which one would you prefer?")


def test_piper_speaks_a_sentence(synthesizer, transcriber):
    text = "Thank you for calling, your table for two is booked for Friday evening at seven."
    audio = synthesizer.synthesize(text)
    assert DEFAULT_VOICE.endswith("en_US-joe-medium.onnx")
    assert synthesizer.sample_rate_hz == 22_050
    assert audio.dtype == np.int16 and audio.ndim == 1
    duration_s = audio.size / synthesizer.sample_rate_hz
    assert 2.5 < duration_s < 8.0
    assert np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 1000  # audible, not silence
    heard = transcriber.transcribe(resample(audio, synthesizer.sample_rate_hz, SAMPLE_RATE_HZ))
    assert word_error_rate(text, heard) <= 0.10, heard


def test_a_voice_on_one_thread_that_never_spins_says_what_piper_says():
    from piper import PiperVoice, SynthesisConfig  # only to compare: the voice as Piper's own loader makes it

    ours = Synthesizer(varied=False, threads=1)
    options = ours._voice.session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    text = "We're open nine to six on Tuesday."
    theirs = PiperVoice.load(DEFAULT_VOICE).synthesize(text, syn_config=SynthesisConfig(noise_scale=0.0,
                                                                                          noise_w_scale=0.0))
    expected = np.concatenate([chunk.audio_int16_array for chunk in theirs])
    audio = ours.synthesize(text)   # Piper's edges cut: a slice of the same samples
    start = int(np.flatnonzero(np.all(
        np.lib.stride_tricks.sliding_window_view(expected, 64) == audio[:64], axis=1))[0])
    assert np.abs(audio.astype(np.int32) - expected[start:start + audio.size]).max() <= 1


def test_stream_yields_the_first_clause_before_the_whole_reply_is_synthesized(synthesizer):
    start = time.perf_counter()
    first_s, clauses = None, []
    for clause, audio in synthesizer.stream(REPLY):
        first_s = first_s if first_s is not None else time.perf_counter() - start
        assert audio.dtype == np.int16 and audio.size > 0
        clauses.append(clause)
    total_s = time.perf_counter() - start
    assert clauses == split_clauses(REPLY) and len(clauses) >= 4
    assert first_s < 0.5 * total_s, (first_s, total_s)


def test_stream_stops_between_clauses_when_cancelled(synthesizer):
    cancel = threading.Event()
    got = []
    for clause, _ in synthesizer.stream(REPLY, cancel=cancel):
        got.append(clause)
        cancel.set()  # barge-in while the first clause plays
    assert got == split_clauses(REPLY)[:1]
    assert list(synthesizer.stream(REPLY, cancel=cancel)) == []


def test_an_unvaried_voice_says_a_text_the_same_way_every_time(synthesizer):
    """The tests' voice samples no noise, so what a test hears is the same every run (Piper's default samples it:
    the same text gives other audio each time)."""
    import numpy as np

    from speech.tts import Synthesizer

    text = "Your table for two is booked for Friday evening at seven."
    assert np.array_equal(synthesizer.synthesize(text), synthesizer.synthesize(text))
    varied = Synthesizer()
    assert not np.array_equal(varied.synthesize(text), varied.synthesize(text))


def _silent_edges_ms(audio: np.ndarray, rate_hz: int) -> tuple[float, float]:
    """Milliseconds before the first and after the last 5 ms frame within 60 dB of the loudest."""
    frame = rate_hz // 200
    n = audio.size // frame
    rms = np.sqrt(np.mean(audio[:n * frame].astype(np.float64).reshape(n, frame) ** 2, axis=1))
    loud = np.flatnonzero(rms > rms.max() * 1e-3)
    return 1000 * loud[0] * frame / rate_hz, 1000 * (audio.size - (loud[-1] + 1) * frame) / rate_hz


def test_speech_starts_at_once_and_a_phrase_cut_mid_sentence_runs_on(synthesizer, transcriber):
    """Piper starts each synthesis with 35-60 ms of silence, which the caller waited for before the first sound, and
    ends a phrase cut mid-sentence ("A haircut is", the session's first phrase) with ~120 ms more, a pause before
    "$35" that nobody makes. A whole sentence keeps the pause after it."""
    rate = synthesizer.sample_rate_hz
    for text in ("A haircut is", "What time on Thursday works for you?", "You're all set, Maria Nguyen."):
        lead, _ = _silent_edges_ms(synthesizer.synthesize(text), rate)
        assert lead <= 15, (text, lead)
    _, open_tail = _silent_edges_ms(synthesizer.synthesize("A haircut is"), rate)
    _, sentence_tail = _silent_edges_ms(synthesizer.synthesize("What time on Thursday works for you?"), rate)
    assert open_tail <= 15 and sentence_tail >= 100, (open_tail, sentence_tail)
    for text in ("A haircut is", "Sure, thanks."):  # nothing of the words was cut
        audio = resample(synthesizer.synthesize(text), rate, SAMPLE_RATE_HZ)
        assert word_error_rate(text, transcriber.transcribe(audio)) == 0.0, text


def test_nothing_to_say_gives_no_audio(synthesizer):
    assert synthesizer.synthesize("").size == 0
    assert list(synthesizer.stream("   ")) == []


def test_bad_voice_path_raises_value_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="nope.onnx"):
        Synthesizer(str(tmp_path / "nope.onnx"))
    (tmp_path / "voice.onnx").write_bytes(b"not an onnx model")
    with pytest.raises(ValueError, match=r"voice.onnx.json"):
        Synthesizer(str(tmp_path / "voice.onnx"))
    (tmp_path / "voice.onnx.json").write_text(Path(DEFAULT_VOICE + ".json").read_text())
    with pytest.raises(ValueError, match=r"cannot load the Piper voice .*voice.onnx"):
        Synthesizer(str(tmp_path / "voice.onnx"))


@pytest.mark.parametrize("text, clauses", [
    ("Sure! Your appointment is at 3:30 p.m. tomorrow, and it costs $10.50 in total.",
     ["Sure! Your appointment is at 3:30 p.m. tomorrow,", "and it costs $10.50 in total."]),
    ("Yes, I can do that. Mr. Smith will see you at 9 a.m. Bring your card, please.",
     ["Yes, I can do that.", "Mr. Smith will see you at 9 a.m.", "Bring your card, please."]),
    ("The U.S. office opens at 10.5... Maybe later; we will see: call us back \"soon.\" Thanks a lot!",
     ["The U.S. office opens at 10.5...", "Maybe later; we will see:", "call us back \"soon.\" Thanks a lot!"]),
    ("We open at 8:00, close at 17:30, and serve 1,200 guests a day!",
     ["We open at 8:00,", "close at 17:30,", "and serve 1,200 guests a day!"]),
    ("Okay.", ["Okay."]),
    ("  ", []),
])
def test_split_clauses(text, clauses):
    assert split_clauses(text) == clauses


def test_split_clauses_avoids_one_and_two_word_chunks():
    for clause in split_clauses(REPLY + " Okay, thanks. Bye now, Bob. Yes. No, not today, sorry."):
        assert len(clause.split()) >= MIN_CLAUSE_WORDS, clause


TEXTS = [
    REPLY,
    "Hi. How are you today? I booked it for you, Bob. See you at 5 p.m. Then we can talk, e.g. about Dr. Who.",
    "Our address is 12 Main St. Springfield, and we're open 9 a.m. to 5:30 p.m. on weekdays... Anything else?",
    "One, two, three, four, five; six: seven! eight? nine. ten",
]


@pytest.mark.parametrize("first_phrase_words", [None, 3, 6])
@pytest.mark.parametrize("text", TEXTS + [
    "Your appointment for a beard trim with us is on Friday at 3:30 PM, see you then.",
    "We are located at 12 Main Street in Springfield right next to the library and the bank.",
])
def test_clause_splitter_over_any_chunking_equals_split_clauses(text, first_phrase_words):
    expected = split_clauses(text, first_phrase_words)
    rng = random.Random(1234)
    chunkings = [[text[:i], text[i:]] for i in range(len(text) + 1)]      # every single cut
    chunkings.append(list(text))                                         # character by character
    for _ in range(200):                                                 # random multi-cut
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(1, 15)))
        chunkings.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])])
    for pieces in chunkings:
        splitter, emitted = ClauseSplitter(first_phrase_words), []
        for piece in pieces:
            new = splitter.push(piece)
            emitted.extend(new)
            assert emitted == expected[:len(emitted)]  # what was emitted is final
        rest = splitter.flush()
        assert emitted + ([rest] if rest else []) == expected, pieces


def test_the_first_phrase_is_short_and_keeps_numbers_and_clause_ends_whole():
    first = lambda text: split_clauses(text, first_phrase_words=6)  # noqa: E731
    # at the first boundary, however short, and with no wait for the words after it
    assert first("Sure, we can do that. What day would you like?") == ["Sure,", "we can do that.",
                                                                     "What day would you like?"]
    assert ClauseSplitter(6).push("I'm sorry. We") == ["I'm sorry."]
    assert ClauseSplitter().push("I'm sorry. We") == []                    # (the usual rule waits)
    # before the first figure, from three words on
    assert first("A haircut is $35 and takes 30 minutes.") == ["A haircut is", "$35 and takes 30 minutes."]
    assert first("On Saturday we're open from 9:00 AM to 4:00 PM.") == ["On Saturday we're open from",
                                                                      "9:00 AM to 4:00 PM."]
    assert first("A haircut is $35.") == ["A haircut is $35."]           # the clause ends within two words
    # in a long run of words, after six, never within two words after a figure nor two before the clause's end
    assert first("Your appointment for a beard trim with us is on Friday at 3:30 PM.") == [
        "Your appointment for a beard trim", "with us is on Friday at 3:30 PM."]
    assert first("At 12 Main Street in Springfield right next to the library you will find us.") == [
        "At 12 Main Street in Springfield", "right next to the library you will find us."]
    question = "What day and time would you like to come in?"
    assert split_clauses(question, 8) == [question]              # "come in?" ends it within two words of the 8th
    # only the first chunk is short: the rest follows the usual rules
    assert first("Okay, I can book that. Okay. Bye.") == ["Okay,", "I can book that. Okay. Bye."]


def test_clause_splitter_emits_before_the_text_ends():
    splitter = ClauseSplitter()
    # a clause waits for 3 whole words after it: had the text ended at "I have.", it would have joined them
    assert splitter.push("Sure, I can help you with that. I have") == []
    assert splitter.push(" an opening") == ["Sure, I can help you with that."]
    assert splitter.push(" on Tuesday") == []
    assert splitter.flush() == "I have an opening on Tuesday"
    assert splitter.flush() is None
