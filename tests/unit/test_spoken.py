"""Text for the voice written out as a person says it; Piper speaks it, the clause splitter never cuts a number."""
import time

import numpy as np
import pytest

from speech.spoken import spoken
from speech.tts import ClauseSplitter, split_clauses

CASES = [
    # clock times
    ("9:00 AM", "nine AM"),
    ("9 am", "nine AM"),
    ("9am", "nine AM"),
    ("9:00", "nine"),                                   # no AM/PM: the writer may mean either
    ("09:00", "nine AM"),                               # 24-hour
    ("3:30 PM", "three thirty PM"),
    ("3:30pm", "three thirty PM"),
    ("3:05 pm", "three oh five PM"),
    ("15:30", "three thirty PM"),
    ("0:15", "twelve fifteen AM"),
    ("12:00 PM", "noon"),
    ("at 12 p.m. sharp", "at noon sharp"),
    ("12:00 AM", "midnight"),
    ("12:30 PM", "twelve thirty PM"),
    ("Come at 9 a.m. tomorrow.", "Come at nine AM tomorrow."),
    ("See you at 9 a.m.", "See you at nine AM."),      # the period also ended the sentence
    ("at 9 a.m. Then we start.", "at nine AM. Then we start."),
    ("at 3:30 p.m.?", "at three thirty PM?"),
    ("We open at 8:00, close at 17:30, and that's it!", "We open at eight, close at five thirty PM, and that's it!"),
    # money
    ("$35", "thirty-five dollars"),
    ("$1", "one dollar"),
    ("$12.50", "twelve dollars and fifty cents"),
    ("$1,200", "one thousand two hundred dollars"),
    ("$1.01", "one dollar and one cent"),
    ("$0.99", "ninety-nine cents"),
    ("$40.00", "forty dollars"),
    ("$1.5 million", "one point five million dollars"),
    ("£3.20", "three pounds and twenty pence"),
    ("It costs $10.50 in total.", "It costs ten dollars and fifty cents in total."),
    # phone numbers
    ("555-0142", "five five five, zero one four two"),
    ("(555) 123-4567", "five five five, one two three, four five six seven"),
    ("Call 555-123-4567.", "Call five five five, one two three, four five six seven."),
    ("1-800-555-0142", "one, eight zero zero, five five five, zero one four two"),
    # dates
    ("December 4", "December fourth"),
    ("Dec 4th", "December fourth"),
    ("on Dec. 21st", "on December twenty-first"),
    ("the 4th", "the fourth"),
    ("December 4, 2026", "December fourth, twenty twenty-six"),
    ("in March 2030", "in March twenty thirty"),
    ("the 1st of May, 2009", "the first of May, two thousand nine"),
    ("in 2026", "in two thousand twenty-six"),      # a year only next to a month
    ("2026-12-04", "December fourth, twenty twenty-six"),
    # ranges
    ("10-15 minutes", "ten to fifteen minutes"),
    ("Mon-Fri 9:00–17:00", "Mon-Fri nine to five PM"),
    ("$10-$20", "ten dollars to twenty dollars"),
    # street numbers
    ("214 Maple Street", "two fourteen Maple Street"),
    ("1600 Pennsylvania Avenue", "sixteen hundred Pennsylvania Avenue"),
    ("205 5th Ave", "two oh five fifth Ave"),
    ("12 Main St.", "twelve Main St."),
    # other numbers
    ("30 minutes", "thirty minutes"),
    ("a table for 2", "a table for two"),
    ("1,200 guests", "one thousand two hundred guests"),
    ("101 Dalmatians", "one hundred one Dalmatians"),
    ("20% off", "twenty percent off"),
    ("2.5 %", "two point five percent"),
    ("10.5 miles", "ten point five miles"),
    ("room 007", "room zero zero seven"),
    ("H200", "H two hundred"),
    ("Cut & Color", "Cut and Color"),
    ("B&B", "B and B"),
]

UNCHANGED = [
    "",
    "Thank you for calling, how can I help?",
    "Mr. Smith will see you at noon; bring your card: it's needed... okay?!",
    "I am free in the a.m. or the p.m., in May or in December.",
    "  spaces   stay \t as they are  ",
]


@pytest.mark.parametrize("text, said", CASES)
def test_spoken(text, said):
    assert spoken(text) == said


@pytest.mark.parametrize("text", [t for t, _ in CASES] + UNCHANGED)
def test_spoken_twice_is_spoken_once(text):
    once = spoken(text)
    assert spoken(once) == once
    assert not any(c.isdigit() for c in once) and "&" not in once


@pytest.mark.parametrize("text", UNCHANGED)
def test_text_without_numbers_is_unchanged(text):
    assert spoken(text) == text


def test_spoken_takes_well_under_a_millisecond_a_sentence():
    text = "Sure! Your appointment is on Dec 4th at 3:30 p.m., it costs $12.50, call 555-0142 to change it."
    best_s = min(_timed(spoken, text, repeats=50) for _ in range(5))
    assert best_s < 1e-3, best_s


def _timed(fn, arg, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn(arg)
    return (time.perf_counter() - start) / repeats


# --- the streaming path: a clause never ends inside a time, a price, a phone number or a date ---------------------

WHOLE = ["9:00", "3:30 p.m.", "$12.50", "$1,200", "555-0142", "(555) 123-4567", "10.5", "Dec. 4th, 2026",
         "December 4, 2026"]
STREAMED = [
    "Sure, we open at 9:00 and close at 3:30 p.m. today. The cut is $12.50, and the color is $1,200, all included.",
    "Please call us at 555-0142, or at (555) 123-4567, for the 10.5 mile route. Thanks for calling.",
    "Your visit is booked for Dec. 4th, 2026 at noon, and the next one for December 4, 2026 at nine.",
]


@pytest.mark.parametrize("text", STREAMED)
def test_the_streamed_clauses_keep_times_prices_phone_numbers_and_dates_whole(text):
    expected = split_clauses(text)
    assert len(expected) >= 2
    for whole in WHOLE:
        if whole in text:
            assert any(whole in clause for clause in expected), (whole, expected)
    for cut in range(len(text) + 1):  # the model's text arrives in any pieces: the clauses are the same
        splitter = ClauseSplitter()
        clauses = splitter.push(text[:cut]) + splitter.push(text[cut:])
        rest = splitter.flush()
        assert clauses + ([rest] if rest else []) == expected, cut


def test_a_year_after_a_date_stays_in_its_clause():
    assert split_clauses("We can book you on December 4, 2026 in the morning, if that works for you.") == [
        "We can book you on December 4, 2026 in the morning,", "if that works for you."]
    assert split_clauses("Pick one of the rooms 1, 2 or 3 for the night, please.") == [
        "Pick one of the rooms 1, 2 or 3 for the night, please."]


# --- Piper speaks the spoken form; the clause text (the transcript) keeps its digits ------------------------------

def test_the_synthesizer_speaks_the_spoken_form(synthesizer):
    """The tests' voice samples no noise, so the same words give the same samples: "$35" is read as "thirty-five
    dollars" (Piper alone says "dollar thirty five")."""
    assert np.array_equal(synthesizer.synthesize("It's $35."), synthesizer.synthesize("It's thirty-five dollars."))
    reply = "Your cut costs $12.50 in total, and we will see you at 3:05 p.m. tomorrow."
    streamed = list(synthesizer.stream(reply))
    assert [clause for clause, _ in streamed] == split_clauses(reply)  # what the app shows keeps its digits
    assert [clause for clause, _ in streamed][0] == "Your cut costs $12.50 in total,"
    for (clause, audio), said in zip(streamed, ["Your cut costs twelve dollars and fifty cents in total,",
                                                "and we will see you at three oh five PM tomorrow."]):
        assert np.array_equal(audio, synthesizer.synthesize(said)), clause
