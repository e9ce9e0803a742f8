"""The embedded brain end to end, as a caller uses it: SmolLM2 with Parley's block-diffusion adapter, the real
agent, tools, schema grammar and SQLite store, for the shipped business and for a second one it was never
trained on (app/profiles/bike_repair.yaml: the same adapter, only the profile differs)."""
import json
import re
import sqlite3
import subprocess
import sys
import threading
from datetime import datetime, time, timedelta

import pytest

from app.agent.loop import Agent
from app.agent.options import agent_options_for
from app.agent.profile import WEEKDAYS, load_profile
from app.agent.prompt import system_prompt
from app.agent.store import open_store
from app.agent.tools import Toolbox
from app.pipeline.session import SessionOptions
from app.settings import REPO_ROOT, SMOLLM2_ADAPTER_DIR
from speech.tts import ClauseSplitter

pytestmark = pytest.mark.slow
BIKE_SHOP = REPO_ROOT / "app" / "profiles" / "bike_repair.yaml"
DENTIST = REPO_ROOT / "app" / "profiles" / "dental_clinic.yaml"
EYE_CARE = REPO_ROOT / "app" / "profiles" / "eye_care.yaml"


def agent_for(engine, profile_path=None, now=datetime(2026, 3, 2, 9, 0)):  # a Monday morning
    profile = load_profile(profile_path)
    toolbox = Toolbox(profile, open_store(":memory:"), now=lambda: now)
    return Agent(engine, toolbox, system_prompt(profile, toolbox, engine.chat_style),
                 agent_options_for(SMOLLM2_ADAPTER_DIR))


def calls(turn):
    return [(c.name, c.arguments) for c in turn.tool_calls]


def parley(*args, timeout: int = 300):
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=timeout)


def open_day_ahead() -> str:
    """A weekday two or more days from now on which the shipped business is open at 15:30."""
    profile = load_profile(None)
    today = datetime.now(profile.tz).date()
    for offset in range(2, 9):
        day = WEEKDAYS[(today + timedelta(days=offset)).weekday()]
        if profile.hours[day] is not None:
            return day
    raise AssertionError("the shipped profile is never open")


def booked_rows(db) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT name, service, substr(start, 12) FROM appointments").fetchall()


def test_the_shipped_brain_holds_the_16_bit_weights_this_cpu_multiplies_fastest(brain):
    """cpu_weights "auto": bf16 where the CPU multiplies it in hardware (AMX or AVX-512 BF16), else fp16
    (llm.quant.sixteen_bit); the tests below pass on either."""
    from llm.quant import sixteen_bit, weight_format

    chosen = sixteen_bit()
    assert weight_format(brain.model) == (f"{chosen} weights" if chosen else "float32")


def test_hours_come_from_the_tool(brain):
    turn = agent_for(brain).respond("Hi, um, yeah, what are your hours?")
    assert [name for name, _ in calls(turn)] == ["business_info"]
    assert turn.tool_calls[0].arguments["topic"] == "hours"
    assert "9" in turn.reply or "nine" in turn.reply.lower()


@pytest.mark.parametrize("now", [datetime(2026, 12, 4, 14, 15), datetime(2026, 12, 5, 16, 5),
                                 datetime(2026, 12, 13, 16, 15)])
def test_the_date_and_tomorrows_are_read_as_asked(brain, now):
    # with tomorrow's date in the result beside today's, the brain said "It's 2:15 PM on Friday, December 5" for
    # today's, "It's 4:05 PM on Saturday, December 5 and is taken Sunday the 6th." at the second clock time, and
    # today's date again for "and what day is tomorrow?"
    agent = agent_for(brain, now=now)
    turn = agent.respond("hello, uh, yeah, what's today's date?")
    assert calls(turn) == [("current_datetime", {})]
    assert turn.reply == f"It's {now:%-I:%M %p} on {now:%A, %B} {now.day}."
    tomorrow = now + timedelta(days=1)
    turn = agent.respond("and what day is tomorrow?")
    assert calls(turn) == [("current_datetime", {"day": "tomorrow"})]
    assert f"{tomorrow:%A, %B} {tomorrow.day}" in turn.reply and f"{now:%A}" not in turn.reply


def test_a_part_of_today_asks_about_today(brain):
    # "this afternoon" names no day in so many words: the model's day "today" was dropped as unsaid, and the caller
    # heard "I'm sorry, I can't help with that."
    turn = agent_for(brain, now=datetime(2026, 12, 8, 10, 20)).respond("do you have anything this afternoon?")  # a Tuesday
    assert calls(turn) == [("check_availability", {"day": "today"})]
    assert "December 8" in turn.reply


@pytest.mark.parametrize("words, booked", [
    ("can I get a blow dry the day after tomorrow?", "Thursday, December 10"),
    ("do you have anything next tuesday for a blow dry", "Tuesday, December 15")])
def test_a_day_said_in_more_words_is_booked_on_that_day(brain, words, booked):
    # on a Tuesday, "the day after tomorrow" was booked for tomorrow and "next tuesday" for today: the tools took
    # today, tomorrow and weekdays only, and the model wrote the nearest
    agent = agent_for(brain, now=datetime(2026, 12, 8, 10, 20))
    agent.respond(words)
    agent.respond("around 1 pm")
    turn = agent.respond("Ivy Chen")
    assert [name for name, _ in calls(turn)] == ["book_appointment"]
    assert f"{booked} at 1:00 PM" in turn.reply


def test_a_booking_for_someone_named_by_who_they_are_asks_for_their_name(brain):
    agent = agent_for(brain, now=datetime(2026, 12, 8, 10, 20))
    first = agent.respond("hi I'd like to book for my daughter, a kids haircut saturday at 10")
    assert first.tool_calls == [] and "name" in first.reply.lower()   # not booked under "my daughter"
    second = agent.respond("her name is Mia Chen")
    assert calls(second) == [("book_appointment", {"name": "Mia Chen", "day": "saturday", "time": "10:00",
                                                   "service": "kids haircut"})]
    assert second.tool_calls[0].result["ok"]


@pytest.mark.parametrize("booking, change, moved_to", [
    ("book a haircut thursday at 2, I'm Omar Haddad", "actually can you make that 3 instead?",
     datetime(2026, 12, 10, 15, 0)),
    ("book a haircut thursday at 2 for Omar Haddad", "can you move my appointment to friday at 3?",
     datetime(2026, 12, 11, 15, 0)),   # another day
])
def test_a_changed_time_moves_the_booking_made_before_it(brain, booking, change, moved_to):
    agent = agent_for(brain, now=datetime(2026, 12, 8, 10, 20))
    assert agent.respond(booking).tool_calls[0].result["ok"]
    turn = agent.respond(change)
    assert "3:00 PM" in turn.reply
    assert [(a.name, a.start) for a in agent.toolbox.store.all()] == [("Omar Haddad", moved_to)]


def test_a_caller_looked_up_by_part_of_their_name_moves_the_booking_found(brain):
    # a new call: "what appointments do I have? Ahmed Haddad" was looked up as "Haddad" and found nothing, then
    # "can I change it to 4?" booked a second haircut under "Haddad"
    agent = agent_for(brain, now=datetime(2026, 12, 8, 10, 20))
    agent.toolbox.store.add("Ahmed Haddad", "haircut", datetime(2026, 12, 10, 14, 0), 30)
    turn = agent.respond("what appointments do I have? Ahmed Haddad")
    assert turn.tool_calls[0].result["appointments"] == ["haircut on Thursday, December 10 at 2:00 PM"]
    assert "2:00 PM" in turn.reply
    turn = agent.respond("can I change it to 4?")
    assert "4:00 PM" in turn.reply
    assert [(a.name, a.start) for a in agent.toolbox.store.all()] == [("Ahmed Haddad", datetime(2026, 12, 10, 16, 0))]


def test_a_booking_for_someone_else_asks_their_name(brain):
    # the sister had been booked under the caller's name, which moved the caller's own booking
    agent = agent_for(brain, now=datetime(2026, 12, 8, 10, 20))
    assert agent.respond("book a blow dry on Tuesday at 11, Emma Lindqvist").tool_calls[0].result["ok"]
    turn = agent.respond("my sister also wants a blow dry Tuesday at 11:30")
    assert turn.tool_calls == [] and "name" in turn.reply
    turn = agent.respond("Grace Kim")
    assert [(a.name, a.start.time()) for a in agent.toolbox.store.all()] == [
        ("Emma Lindqvist", time(11, 0)), ("Grace Kim", time(11, 30))]


def test_a_time_said_with_a_goodbye_cancels_nothing(brain):
    # "I'll call back at 4, bye" cancelled the eye exam booked at 3 (0.95 of the model's probability on the
    # cancellation's name); the cancellation now holds the time said, and no booking has it
    agent = agent_for(brain, EYE_CARE)
    assert agent.respond("I'd like to book an eye test friday at 3 for Rahul Mehta").tool_calls[0].result["ok"]
    agent.respond("I'll call back at 4, bye")
    assert [(a.name, a.start.time()) for a in agent.toolbox.store.all()] == [("Rahul Mehta", time(15, 0))]


def test_the_topic_the_caller_names_is_the_one_read(brain):
    # "and the address?" after the phone number read the phone number again
    agent = agent_for(brain)
    assert "555-0142" in agent.respond("what's your phone number?").reply
    turn = agent.respond("and the address?")
    assert [c.arguments.get("topic") for c in turn.tool_calls] == ["address"] and "214 Maple Street" in turn.reply


def test_a_booking_with_every_detail_is_booked_and_read_back(brain):
    agent = agent_for(brain)
    turn = agent.respond("Hi, I'd like to book a haircut tomorrow at 3 pm. My name is Sofía Ramírez.")
    assert calls(turn) == [("book_appointment", {"name": "Sofía Ramírez", "day": "tomorrow", "time": "15:00",
                                                 "service": "haircut"})]
    assert turn.tool_calls[0].result["ok"]
    assert "Sofía" in turn.reply and "\ufffd" not in turn.reply
    rows = agent.toolbox.store.for_name("Sofía Ramírez")
    assert [(r.service, r.start) for r in rows] == [("haircut", datetime(2026, 3, 3, 15, 0))]


@pytest.mark.parametrize("request_words", [
    "Hi. This is Marta calling. I'd like to book an appointment Friday at 11 a.m. please.",
    "Good morning, I need an appointment Tuesday at 4 p.m. under Olga, thanks.",
    "Hello, I want to make a booking for Wednesday at 10 in the morning, it's for Daniel.",
])
def test_a_booking_that_names_no_service_asks_for_one(brain, request_words):
    """The model meant a service nobody named, and the grammar, holding it to the caller's words, let it write
    only one of theirs: "We don't offer please." was the reply. Such a value is no one's (its share of the model's
    probability, app.agent.meant.free_shares): the call lacks the service, nothing is booked, the agent asks."""
    agent = agent_for(brain)
    turn = agent.respond(request_words)
    assert turn.tool_calls == [] and "?" in turn.reply and "offer" not in turn.reply, (turn.reply, agent.messages)
    assert "service" in json.loads(agent.messages[2]["content"])["result"]["missing"], agent.messages


def test_a_booking_without_a_time_gets_a_question(brain):
    turn = agent_for(brain).respond("Can I get a beard trim on Friday? It's for Tom.")
    assert [name for name, _ in calls(turn)] in ([], ["check_availability"])
    assert "?" in turn.reply


def test_a_new_business_is_answered_and_booked_from_its_profile_alone(brain):
    agent = agent_for(brain, BIKE_SHOP)
    turn = agent.respond("what services do you offer?")
    # the profile calls a tune-up a "service" too, so the call may name it: the services are listed either way
    assert [(name, args["topic"]) for name, args in calls(turn)] == [("business_info", "services")]
    assert "tune-up" in turn.reply and "wheel truing" in turn.reply
    turn = agent.respond("Can I book a tune-up Friday at 10 am? I am Sam Lee.")
    assert calls(turn) == [("book_appointment", {"name": "Sam Lee", "day": "friday", "time": "10:00",
                                                 "service": "tune-up"})]
    assert turn.tool_calls[0].result["price"] == "$65"  # the bike shop's price, from its profile
    assert "Sam Lee" in turn.reply and "tune-up" in turn.reply


def test_a_service_named_by_another_word_is_booked_as_the_business_names_it(brain):
    """A dentist's caller says "cavity", its profile's word for the filling. Held to any of the caller's words, the
    service was booked as "pm" (of "4 pm"), and in a second call as "please" once the caller had given the service
    a turn before: the model, unheld, wrote "vacation" and "pavine"."""
    agent = agent_for(brain, DENTIST)
    turn = agent.respond("I think I have a cavity, can I come in Wednesday at 4 pm? My name is Priya Natarajan.")
    assert calls(turn) == [("book_appointment", {"name": "Priya Natarajan", "day": "wednesday", "time": "16:00",
                                                 "service": "filling"})]
    assert turn.tool_calls[0].result["ok"] and "filling" in turn.reply
    agent = agent_for(brain, DENTIST)
    agent.messages = [{"role": "user", "content": "Hi. I need an appointment on Thursday at 9:00 a.m. please."},
                      {"role": "assistant", "content": "Sure, what service would you like?"},
                      {"role": "user", "content": "A cavity filling."},
                      {"role": "assistant", "content": "Can I have your name, please?"}]  # as parley eval's turns
    turn = agent.respond("Victor, thanks.")
    assert calls(turn) == [("book_appointment", {"name": "Victor", "day": "thursday", "time": "09:00",
                                                 "service": "filling"})]


def test_a_new_business_price_question_is_answered_from_its_profile(brain):
    """Before the adapter's conversational stage, the bike shop's price question got check_availability."""
    agent = agent_for(brain, BIKE_SHOP)
    turn = agent.respond("how much do you charge for a tune-up?")
    assert [name for name, _ in calls(turn)] == ["business_info"]
    assert turn.tool_calls[0].result["price"] == "$65"  # the bike shop's price, from its profile
    assert "65" in turn.reply or "sixty-five" in turn.reply.lower()


def test_a_name_given_before_the_request_is_booked_under_it(brain):
    """The adapter alone wrote "Owen Smith" for "Noah Smith"; a name is held to words the caller said."""
    turn = agent_for(brain).respond("Hi, this is Noah Smith. Could I get a haircut tomorrow at 3:30 p.m.?")
    assert calls(turn) == [("book_appointment", {"name": "Noah Smith", "day": "tomorrow", "time": "15:30",
                                                 "service": "haircut"})]


@pytest.mark.parametrize("history, last, booking", [
    (["Hello, my name is Ingrid. I'd like to come in for a haircut.", "What day would you like to come in?",
      "Friday works.", "What time on Friday works for you?"], "Two in the afternoon, please.",
     {"name": "Ingrid", "day": "friday", "time": "14:00", "service": "haircut"}),
    (["Hi there, Marcus here. Can I get a beard trim?", "What day would you like to come in?",
      "How about Wednesday?", "What time on Wednesday works for you?"], "Ten thirty in the morning.",
     {"name": "Marcus", "day": "wednesday", "time": "10:30", "service": "beard trim"}),
    (["Hey, this is Lucas. I need a kids haircut for my son.", "What day would you like to come in?"],
     "Thursday at 4 pm if you can.", {"name": "Lucas", "day": "thursday", "time": "16:00", "service": "kids haircut"}),
])
def test_a_name_given_turns_ago_is_booked_not_asked_for_again(brain, history, last, booking):
    """A history of spoken turns (as an API client sends one): the adapter closed the call without the name the
    caller gave at the start and asked for it again; asked for the name (CallCheck._probed), it writes it."""
    agent = agent_for(brain)
    agent.messages = [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(history)]
    turn = agent.respond(last)
    assert calls(turn) == [("book_appointment", booking)], (turn.reply, agent.messages)


@pytest.mark.parametrize("answer", ["thursday morning, like 9?", "Thursday, um, 9 works"])
def test_a_bare_hour_answering_the_question_for_a_time_is_booked(brain, answer):
    """At the dental clinic, a cleaning that lacked the day and the time was answered with a question for them; the
    caller's "like 9" is the time. The model left it out and asked for the time again while a bare number counted
    as a time only with "at" or "around" before it (app.agent.held.times_answered)."""
    agent = agent_for(brain, DENTIST)
    first = agent.respond("yeah hi I'd like to schedule a cleaning for my daughter, her name is Ana Lucia Ferreira")
    assert not first.tool_calls, first.reply  # it lacked the day and the time: a question for them
    turn = agent.respond(answer)
    assert calls(turn) == [("book_appointment", {"name": "Ana Lucia Ferreira", "day": "thursday", "time": "09:00",
                                                 "service": "cleaning"})], (turn.reply, agent.messages)


def test_the_free_times_asked_for_mid_booking_are_checked_on_the_day_given(brain):
    """"what times do you have?" after the day of a booking: the model checked 10:00, a time nobody said, left the
    day out, and the caller heard "I'm sorry, I can't help with that." With no time said, the grammar writes none."""
    agent = agent_for(brain)
    for said in ("I'd like to book a haircut", "tomorrow"):
        assert not agent.respond(said).tool_calls
    turn = agent.respond("what times do you have?")
    assert calls(turn) == [("check_availability", {"day": "tomorrow"})], (turn.reply, agent.messages)


def test_a_name_given_alone_when_asked_for_is_booked_not_asked_for_again(brain):
    """Asked for the name after the time and the service, "Mei Lin" was written with 0.0012 of the model's probability,
    dropped as unmeant, and the caller was asked for the name again (CallCheck._answered_with)."""
    agent = agent_for(brain)
    for said in ("do you have anything friday at 5?", "yes please", "a blow dry"):
        agent.respond(said)
    turn = agent.respond("Mei Lin")
    assert calls(turn) == [("book_appointment", {"name": "Mei Lin", "day": "friday", "time": "17:00",
                                                 "service": "blow dry"})], (turn.reply, agent.messages)


def drafted_to_first_phrase(agent, text):
    """agent.draft(text) stopped as the session stops it: once the first phrase of its speech is written."""
    phrased, spoken = threading.Event(), []

    def on_text(piece):
        spoken.append(piece)
        if ClauseSplitter(SessionOptions().first_phrase_words).push("".join(spoken)):
            phrased.set()

    return agent.draft(text, phrased, on_text), "".join(spoken)


def test_a_turn_goes_on_from_a_draft_stopped_at_its_first_phrase(brain):
    """The session drafts through the tools' previews and stops at the reply's first phrase; the turn goes on
    from there and says what it would have said without the draft. A booking is previewed, made by the turn."""
    question = "Hi, um, how much is a haircut?"
    plain = agent_for(brain).respond(question)
    agent = agent_for(brain)
    drafted, phrase = drafted_to_first_phrase(agent, question)
    assert [s.generation.stopped for s in drafted.steps] == ["eos", "cancelled"]  # the price, then its phrase
    assert drafted.steps[0].results[0]["price"] == "$35" and agent.messages == []
    pieces = []
    turn = agent.respond(question, on_text=pieces.append, first=drafted)
    assert pieces[0].startswith(phrase.strip()) and turn.reply == plain.reply and calls(turn) == calls(plain)
    assert "$35" in turn.reply

    booking = "Can I get a haircut tomorrow at 3 pm? My name is Noah Smith."
    plain = agent_for(brain).respond(booking)
    agent = agent_for(brain)
    drafted, phrase = drafted_to_first_phrase(agent, booking)
    assert [s.generation.stopped for s in drafted.steps] == ["eos", "cancelled"]
    assert drafted.steps[0].results[0]["ok"] and agent.toolbox.store.for_name("Noah Smith") == []  # previewed
    pieces = []
    turn = agent.respond(booking, on_text=pieces.append, first=drafted)
    assert [name for name, _ in calls(turn)] == ["book_appointment"] and turn.tool_calls[0].result["ok"]
    assert len(agent.toolbox.store.for_name("Noah Smith")) == 1     # booked once, by the turn
    assert pieces[0].startswith(phrase.strip()) and turn.reply == plain.reply


def test_parley_converse_books_a_spoken_request_with_the_default_brain(tmp_path):
    """`parley converse` on its defaults (the brain above, Whisper, Piper): a spoken booking request is booked in
    SQLite, and the spoken confirmation, heard back, says the time."""
    from speech.asr import Transcriber
    from speech.audio import read_wav, write_wav
    from speech.tts import Synthesizer

    day = open_day_ahead()  # two or more days ahead: the booking is never in the past
    tts = Synthesizer(varied=False)
    speech = tts.synthesize(f"Hi, this is Noah Smith. Could I get a haircut on {day.capitalize()} at 3:30 p.m.?")
    question, answer, db = tmp_path / "question.wav", tmp_path / "answer.wav", tmp_path / "appointments.sqlite3"
    write_wav(question, speech, tts.sample_rate_hz)
    result = parley("converse", "--in", str(question), "--out", str(answer), "--json", "--db", str(db),
                    "--llm-device", "cpu", timeout=600)
    assert result.returncode == 0, result.stderr
    turn = json.loads(result.stdout.splitlines()[-1])
    assert [c["name"] for c in turn["tool_calls"]] == ["book_appointment"], turn
    # the name as Whisper heard it (on some days' sentences "no a Smith"), never one it did not
    [(name, service, time)] = booked_rows(db)
    assert name.endswith("Smith") and name.lower() in turn["transcript"].lower(), turn
    assert (service, time) == ("haircut", "15:30"), turn
    # Whisper punctuates the spoken time its own way ("3:30", "3.30", "3, 30"): compare the words alone
    heard = " ".join(re.findall(r"\w+", Transcriber().transcribe(read_wav(answer)).lower()))
    assert re.search(r"(?<!\d)3 30(?!\d)|three thirty", heard), (heard, turn["reply"])


def test_a_forty_turn_call_answers_the_same_question_the_same_way(brain):
    """The prompt keeps the system facts and the recent turns that fit (the window moved on the way: the call
    outgrows the 2048-token context): turn 40 is answered as turn 2 was."""
    agent = agent_for(brain)
    agent.respond("Hello there.")
    first = agent.respond("What's your address?")
    for _ in range(38):
        turn = agent.respond("What's your address?")
    assert agent._first > 0  # the oldest turns left the prompt
    assert calls(turn) == calls(first) == [("business_info", {"topic": "address"})]
    assert turn.reply == first.reply and "214" in turn.reply

