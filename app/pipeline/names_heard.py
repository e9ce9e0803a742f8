"""Names on the books, heard as booked: a caller's name that Whisper wrote close to a booked one is checked again
against the audio, with that name as a hint.

Whisper tiny.en spells a name it does not know as it hears it: "Kenji Watanabe" heard "Kenji Watanade". The lookup
of his appointments (exact, case and accents aside: app.agent.tools.Toolbox._booked) then finds nobody, and the
cancellation after it neither. A receptionist would hear the name they have on the books. Here, when a run of
capitalized words in a transcript is spelled close to the name of an upcoming booking, the turn's audio is
transcribed again with that name as Whisper's previous text; only if Whisper then writes the booked name is the run
replaced by it. The audio decides, not the spelling: "Kenji Watanada", said as such, stays as it was heard if the
hint does not make Whisper write "Watanabe" (the hint does make a name it expects likelier: a caller whose name
differs from a booked one by a sound or two may be heard as that one, as a person at a front desk might).

NOTE: the booked names as a standing part of the prompt (every turn) were measured first (docs/EXPERIMENT_LOG.md,
stop 77): with only the callers' own bookings in the store they were heard right, but twenty names of other people
moved the words of unrelated turns both ways. Here a turn is transcribed again only when a name is near one
booked, and only the name's words may change.
"""
from difflib import SequenceMatcher
from typing import Callable

import numpy as np

from app.agent.words import WRITTEN_WORD, name_words, stands_in

NEAR_SPELLING = 0.6    # SequenceMatcher's ratio from which a run of words is spelled close to a booked name
# NOTE: Whisper tiny.en's spellings of names spoken by Piper and espeak-ng (scripts/spoken_set.py), against the
# name: "Kenji Watanade" 0.93, "Maria Newyin" 0.75, "Thomas Wodsy" (Tomasz Wojcik) 0.64, "Chitty Ockifer" (Chidi
# Okafor) 0.62, "Thomas Wabsyk" 0.62; missed: "Shavano Bryan" (Siobhan O'Brien) 0.59, "Kenji Y" 0.57, "all my
# bellow" (Olumide Bello; not capitalized either). Any two names that differ by a letter or two are 0.9 ("Mary
# Jones", "Mark Jones"): the audio decides between those (below); a near spelling costs a second transcription.
MOST_HINTS = 2         # the closest booked names given to Whisper at once


def near_names(text: str, booked: list[str]) -> list[tuple[str, tuple[int, int]]]:
    """(booked name, (start, end) character span of `text`) for each booked name of two words or more that a run of
    as many capitalized words of `text` spells close to (NEAR_SPELLING) but not as it is booked, closest first,
    at most MOST_HINTS. A name booked as the text already says it anywhere gives none (its caller was heard right).
    One-word names are left out: a short word is close to too many others."""
    words = [(m.group(), m.start(), m.end()) for m in WRITTEN_WORD.finditer(text)]
    folded = tuple(" ".join(name_words(w)) for w, _, _ in words)
    found: dict[str, tuple[float, tuple[int, int]]] = {}
    for name in dict.fromkeys(booked):
        want = name_words(name)
        n = len(want)
        if n < 2 or stands_in(folded, want):
            continue
        for i in range(len(words) - n + 1):
            run = words[i:i + n]
            if not all(w[:1].isupper() for w, _, _ in run):
                continue
            ratio = SequenceMatcher(None, " ".join(folded[i:i + n]), " ".join(want)).ratio()
            if ratio >= NEAR_SPELLING and ratio > found.get(name, (0.0,))[0]:
                found[name] = (ratio, (run[0][1], run[-1][2]))
    closest = sorted(found.items(), key=lambda item: -item[1][0])[:MOST_HINTS]
    return [(name, span) for name, (_, span) in closest]


class NamesHeard:
    """A speech recognizer (speech.asr.Transcriber) whose transcripts hear the names on the books as booked.
    `booked()`: the names of the upcoming bookings (read when a transcript holds a capitalized run of words)."""

    def __init__(self, recognizer, booked: Callable[[], list[str]]):
        self.recognizer = recognizer
        self.booked = booked

    def __getattr__(self, name):   # the recognizer's options, warm_up, ...
        if name == "recognizer":   # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.recognizer, name)

    def transcribe(self, audio: np.ndarray, prompted: bool = True) -> str:
        if not prompted:   # the words' shape only (an end-of-turn judgement's): no name is looked for
            return self.recognizer.transcribe(audio, prompted=False)
        text = self.recognizer.transcribe(audio)
        capitals = [w[:1].isupper() for w in WRITTEN_WORD.findall(text)]
        if not any(a and b for a, b in zip(capitals, capitals[1:])):
            return text   # no run of two capitalized words: no name to check (and no read of the store)
        near = near_names(text, self.booked())
        if not near:
            return text
        again = name_words(self.recognizer.transcribe(audio, hint=f"Appointments for {', '.join(n for n, _ in near)}."))
        for name, (start, end) in near:
            if stands_in(again, name_words(name)):
                return text[:start] + name + text[end:]
        return text
