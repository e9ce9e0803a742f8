"""Reading clock times out of transcripts (app.agent.spoken_times): the times a tool call may take."""
from datetime import time

import pytest

from app.agent.profile import load_profile
from app.agent.spoken_times import times_in
from app.training.dialogues.phrases import time_forms


@pytest.mark.parametrize("text, times", [
    ("Is tomorrow at one fifteen taken?", {"01:15", "13:15"}),
    ("Anything at eleven thirty in the morning on Tuesday?", {"11:30"}),
    ("Could I get a blow dry on Thursday at quarter to four please.", {"03:45", "15:45"}),
    ("quarter to one", {"00:45", "12:45"}),
    ("Is there an opening at half past four?", {"04:30", "16:30"}),
    ("One forty-five in the afternoon is fine.", {"13:45"}),
    ("How about 9AM?", {"09:00"}),
    ("Uh, how about 12:30 p.m?", {"12:30"}),
    ("12 noon", {"12:00"}),
    ("noon", {"12:00"}),
    ("six in the evening", {"18:00"}),
    ("three o'clock in the afternoon", {"15:00"}),
    ("nine oh five", {"09:05", "21:05"}),
    ("ten past six", {"06:10", "18:10"}),
    ("13:45", {"13:45"}),
    ("Ten, ten would be great.", {"10:00", "22:00"}),  # a comma ends a time: not 10:10
    ("Call 555-0142; a haircut is $35.", set()),
    ("The later one, please.", set()),                   # a choice, not a time
    ("That one works, one of those.", set()),
    ("I'll take the earliest one.", set()),              # a superlative's choice: it checked 1:00 PM
    ("yeah, cancel the saturday one please", set()),     # a choice named by its day: it cancelled at 1:00 PM
    ("That early one works.", set()),
    ("this friday one pm", {"13:00"}),                   # an hour's part of the day after it: a time
    ("saturday at one", {"01:00", "13:00"}),
    ("The soonest one, at one.", {"01:00", "13:00"}),
    ("A one o'clock appointment.", {"01:00", "13:00"}),
    ("The nearest free times are 9:00 AM and 10:30 AM.", {"09:00", "10:30"}),
    ("Could I get a haircut on Wednesday at 3.30pm?", {"15:30"}),  # Whisper's transcript of "3:30 p.m." spoken
    ("Could I get a haircut on Thursday at 3 30 p.m?", {"15:30"}),  # Whisper's transcript of the same, another day
    ("two 30 minute slots at 4", {"02:00", "14:00", "04:00", "16:00"}),  # a count before a unit is no minute
    ("Wednesday at 2 30 under Haddad", {"02:30", "14:30"}),  # Whisper's transcript of "at two thirty"
    ("Can I pick it up at 4.15?", {"04:15", "16:15"}),   # Whisper's "at four fifteen"
    ("Do you have anything at 10.30 on Friday?", {"10:30", "22:30"}),  # and "at ten thirty"
    ("Do you have anything at 1030 on Friday?", {"10:30", "22:30"}),  # Whisper's digits without the dot
    ("We're at 214 Maple Street, Springfield.", set()),  # before a name: an address
    ("Is 545 too late?", set()),                          # not after "at": a number, maybe
    ("Could I do like, 530?", {"05:30", "17:30"}),        # but ending the clause: Whisper's "five thirty"
    ("how about 745 p.m. tomorrow", {"19:45"}),           # or before am/pm
    ("Can I come 1030am?", {"10:30"}),
    ("It's $530, or 120 dollars, call 555-0142.", set()),  # a price, a count, a phone number
    ("Saturday morning if you can, like tenish.", {"10:00", "22:00"}),  # Whisper's one word for "ten-ish"
    ("around 2000 dollars", set()),                       # no hour of a clock
    ("At 11.45 a.m. please.", {"11:45"}),                # a dot is a clock's only before am/pm
    ("On Wednesday, December 2 we have openings from 9:00 AM to 6:00 PM.", {"09:00", "18:00"}),  # a date, no time
    ("Friday the 3rd at 4 pm", {"16:00"}),
    # a number that counts a length of time is no clock: "15 minutes late" had allowed a check at 15:00
    ("I have an appointment tomorrow at 2 but I'm gonna be like 15 minutes late, is that ok?", {"02:00", "14:00"}),
    ("I'll be there in 20 minutes.", set()),
    ("It takes two hours, and my son is 6 years old.", set()),
])
def test_times_in(text, times):
    assert times_in(text) == times


def test_every_way_the_dialogues_say_a_time_is_read_right():
    """Each form the training and held-out dialogues write (app.training.dialogues.phrases.time_forms), alone and in a
    sentence, means at most a morning and an afternoon reading, one of them the time meant."""
    checked = 0
    for hour in range(24):
        for minute in (0, 15, 30, 45):
            for implied in {8 <= hour <= 19, False}:
                for form in time_forms(hour, minute, implied):
                    for text in (form, f"At {form}, thanks.", f"How about {form}? Thanks so much."):
                        got = times_in(text)
                        assert f"{hour:02d}:{minute:02d}" in got and len(got) <= 2, (text, got)
                        checked += 1
    assert checked > 3000


def test_opening_hours_choose_between_morning_and_afternoon():
    profile = load_profile(None)  # open 09:00-20:00 at the latest
    assert profile.open_at(time(15, 45)) and not profile.open_at(time(3, 45)) and not profile.open_at(time(20, 0))
    assert times_in("quarter to four", profile.open_at) == {"15:45"}
    assert times_in("ten thirty", profile.open_at) == {"10:30"}
    assert times_in("8:30", profile.open_at) == {"08:30", "20:30"}  # closed at both: both stay
    assert times_in("3 a.m.", profile.open_at) == {"03:00"}          # said: never overruled


def test_clock_only_keeps_times_said_as_clock_times():
    assert times_in("a beard trim at 5:45 pm", clock_only=True) == {"17:45"}
    assert times_in("around eleven in the morning", clock_only=True) == {"11:00"}
    assert times_in("half past four", clock_only=True) == {"04:30", "16:30"}
    assert times_in("three thirty", clock_only=True) == {"03:30", "15:30"}
    assert times_in("noon works", clock_only=True) == {"12:00"}
    assert times_in("ok I want to book one", clock_only=True) == set()
    assert times_in("haircuts for me and my two kids", clock_only=True) == set()
    assert times_in("Saturday at 10 please", clock_only=True) == {"10:00", "22:00"}
    assert times_in("around two, if you can", clock_only=True) == {"02:00", "14:00"}
    assert times_in("Saturday morning if you can, like ten-ish", clock_only=True) == {"10:00", "22:00"}
    assert times_in("ok I want to book one") == {"01:00", "13:00"}  # any reading, for the grammar's choices
