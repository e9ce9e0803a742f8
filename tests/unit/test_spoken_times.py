"""Reading clock times out of transcripts (app.agent.spoken_times), and what the tools' grammar hears in a conversation
(app.agent.heard.heard): the times, names and services a tool call may take."""
from datetime import time

import pytest

from app.agent.heard import asked_for, asks_again, details_in, heard
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
    ("A one o'clock appointment.", {"01:00", "13:00"}),
    ("The nearest free times are 9:00 AM and 10:30 AM.", {"09:00", "10:30"}),
    ("Could I get a haircut on Wednesday at 3.30pm?", {"15:30"}),  # Whisper's transcript of "3:30 p.m." spoken
    ("Could I get a haircut on Thursday at 3 30 p.m?", {"15:30"}),  # Whisper's transcript of the same, another day
    ("two 30 minute slots at 4", {"02:00", "14:00", "04:00", "16:00"}),  # a count before a unit is no minute
    ("At 11.45 a.m. please.", {"11:45"}),                # a dot is a clock's only before am/pm
    ("On Wednesday, December 2 we have openings from 9:00 AM to 6:00 PM.", {"09:00", "18:00"}),  # a date, no time
    ("Friday the 3rd at 4 pm", {"16:00"}),
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


def test_heard_reads_the_callers_services_by_the_profiles_words():
    profile = load_profile(None)
    said = heard([{"role": "user", "content": "Hi, I'd like a haircut for my son, and a beard trim. Also a perm?"}],
                 profile)
    assert said.services == ("kids haircut", "beard trim")  # the longest alias: not a haircut, nor a trim
    assert said.others == (("perm",),)  # the words that name no service, for one it lacks; not "Also a" (never
                                        # part of a service's name: app.agent.heard._NOT_SERVICE)
    assert not any("beard" in run or "haircut" in run for run in said.others)


def test_heard_names_are_capitalized_runs_within_a_phrase():
    said = heard([{"role": "user", "content": "This is Noah Park calling. Tuesday works, thanks."},
                  {"role": "assistant", "content": "Sure, 3 PM?"}])
    assert said.names == (("Noah", "Park"),)  # not "This" (an opener), not the day, not across the full stop
    assert said.times == {"15:00"}                      # times the agent said count too


@pytest.mark.parametrize("said, name, given", [
    ("This is Noah Park calling.", "Noah Park", True),
    ("This is Noah Park calling.", "Noah", False),          # all of it: not cut short
    ("Hi. Could I get a haircut at 3?", "Hi", False),        # a greeting is never a name
    ("Hey. I was hoping to get a haircut.", "was hoping", False),  # nor, in a cased transcript, lowercase words
    ("this is noah calling", "noah", True),                 # a transcript without capitals: any words
    ("hi could i get a haircut", "hi", False),
])
def test_a_name_the_caller_gave(said, name, given):
    assert heard([{"role": "user", "content": said}]).grounds({"name": name}) == given


@pytest.mark.parametrize("said, name", [
    ("Today, please.", None),                 # a day that opens an answer is no name
    ("Next Friday, please.", None),
    ("You can put it under Raj Novak.", "Raj Novak"),   # nor a pronoun that opens a sentence
])
def test_a_day_word_or_a_pronoun_that_opens_a_sentence_is_no_name(said, name):
    names = heard([{"role": "user", "content": said}]).names
    assert names == ((tuple(name.split()),) if name else ())


@pytest.mark.parametrize("said, given", [
    ("Hi, hi. I was hoping to get a blow dry today, at 3 pm. Under Felix, please.", {"service", "day", "time"}),
    ("Could I come in on Friday?", {"day"}),
    ("Half past three, please.", {"time"}),
    ("Just a kids cut.", {"service"}),
    ("Yes, I'd like a perm.", set()),          # a service the business lacks: only the model can tell
    ("This is Noah Park.", set()),             # a name: likewise (any word that opens a sentence may be one)
])
def test_the_details_of_a_booking_a_message_gives(said, given):
    assert details_in(said, load_profile(None)) == given


def test_a_name_is_a_detail_given_in_answer_to_a_question_for_it():
    asked = asked_for("Sure, what name is the appointment under?")
    assert asked == {"name"}
    assert details_in("Jacob, thanks.", None, asked) == {"name"}
    assert details_in("Thanks.", None, asked) == set()                    # a courtesy is no name
    assert details_in("Jacob, thanks.", None, asked_for("How can I help you today?")) == set()
    assert asked_for("Would another day work?") == {"day"} and asked_for("Our hours on that day.") == set()


@pytest.mark.parametrize("question, asks", [
    ("What day would you like to come in?", True),
    ("What time today works for you?", True),      # the time is asked, the day only named
    ("Sure, what service would you like?", False),
    ("How can I help you today?", False),          # "today" asks for no day
    ("We have openings on that day.", False),      # not a question
])
def test_a_question_for_a_detail_already_given(question, asks):
    assert asks_again(question, frozenset({"day", "time"})) == asks


BOOKED = [{"role": "system", "content": "You answer calls for Maple Street Hair Studio."},
          {"role": "user", "content": "A haircut on Friday at 3, under Samuel Muller."},
          {"role": "tool", "content": '{"name":"book_appointment","result":{"ok":true,"name":"Samuel Muller"}}'}]


@pytest.mark.parametrize("text, since, ok", [
    ("You're all set, Samuel Muller.", 0, True),
    ("You're all set, Samue", 20, True),            # unfinished: the start of a word the conversation holds
    ("You're all set, Samue.", 21, False),          # a name read back cut short
    ("You're all set, Ahmeh", 19, False),           # or made up
    ("You're all set, Samue. Samue", 22, True),     # words said before `since` were judged then
    ("Samue is booked.", 0, True),                  # a word that opens a sentence is free, as is "I"
    ("Sorry, I can help with that.", 0, True),
    ("Thank you for calling Maple Street Hair Studio.", 0, True),
])
def test_a_reply_reads_capitalized_words_back_whole(text, since, ok):
    assert heard(BOOKED).speaks(text, since) == ok


def test_what_the_caller_says_now_overrides_what_was_said_before():
    profile = load_profile(None)
    before = [{"role": "user", "content": "Could I get a haircut on Tuesday at 3 pm?"},
              {"role": "assistant", "content": "Tuesday at 3:00 PM is taken. 2:00 PM and 4:00 PM are free."}]
    now = heard(before + [{"role": "user", "content": "Two is fine. Or Friday?"}], profile)
    assert now.times == {"14:00"} and now.days == {"friday"}
    later = heard(before + [{"role": "user", "content": "The later one, please."}], profile)
    assert later.times == {"14:00", "15:00", "16:00"} and later.days == {"tuesday"}  # nothing new: all said
