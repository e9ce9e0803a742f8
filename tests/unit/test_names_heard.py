"""A caller's name spelled close to a booked one is checked against the audio with that name as a hint
(app.pipeline.names_heard)."""
import numpy as np

from app.pipeline.names_heard import NamesHeard, near_names

AUDIO = np.zeros(16_000, np.int16)


class Recognizer:
    """Hears `plain`; with a hint, `hinted` (what Whisper writes when it expects the hinted names)."""

    def __init__(self, plain: str, hinted: str | None = None):
        self.plain, self.hinted, self.hints = plain, hinted, []
        self.options = "the recognizer's options"

    def transcribe(self, audio, hint: str = "") -> str:
        if hint:
            self.hints.append(hint)
            return self.hinted
        return self.plain


def test_a_run_of_capitalized_words_spelled_close_to_a_booked_name_is_near_it():
    text = "Hi, can you check, Kenji Watanade? Thanks."
    assert near_names(text, ["Bill Nakamura", "Kenji Watanabe"]) == [("Kenji Watanabe", (19, 33))]
    assert text[19:33] == "Kenji Watanade"
    assert near_names("Sofia Ramirez here.", ["Sofía Ramírez"]) == []       # heard as booked, accents aside
    assert near_names("Kenji Watanabe, and Kenji Watanade", ["Kenji Watanabe"]) == []   # the name was heard
    assert near_names("can you check kenji watanade", ["Kenji Watanabe"]) == []   # not written as a name
    assert near_names("Is Bell free?", ["Bill"]) == []                        # a one-word name: too many near it
    assert near_names("Can you check, Chidi Akhifer?", ["Kenji Watanabe"]) == []  # nothing near


def test_the_name_is_heard_as_booked_when_the_audio_says_so_and_nothing_else_changes():
    recognizer = Recognizer("Um, can you check, Kenji Watanade?", "Can you check Kenji Watanabe.")
    heard = NamesHeard(recognizer, lambda: ["Kenji Watanabe"])
    assert heard.transcribe(AUDIO) == "Um, can you check, Kenji Watanabe?"
    assert recognizer.hints == ["Appointments for Kenji Watanabe."]
    assert heard.options == "the recognizer's options"


def test_a_name_the_hinted_audio_does_not_say_stays_as_heard():
    recognizer = Recognizer("Can you check, Kenji Watanada?", "Can you check, Kenji Watanada?")
    assert NamesHeard(recognizer, lambda: ["Kenji Watanabe"]).transcribe(AUDIO) == "Can you check, Kenji Watanada?"


def test_a_transcript_with_no_name_in_it_is_heard_once_and_reads_no_bookings():
    def booked():
        raise AssertionError("the bookings were read for a transcript with no name in it")

    for plain in ("what time do you close on Friday?", "I'd like Friday at 3, thanks."):   # no two together
        recognizer = Recognizer(plain)
        assert NamesHeard(recognizer, booked).transcribe(AUDIO) == plain
        assert recognizer.hints == []
