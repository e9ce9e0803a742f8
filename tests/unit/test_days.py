"""Days as callers say them (app.agent.days): the day a date question asks, and a day said in more words ("the day
after tomorrow", "next Tuesday", "December 15th"), read, held by the reply grammar and recorded."""
from datetime import date, datetime

import pytest

from app.agent.days import Refusal, day_phrases, resolve_day
from app.agent.held import held
from app.agent.profile import load_profile
from app.agent.protocol import format_tool_call, tool_message
from app.agent.schemas import SCHEMAS
from app.agent.store import open_store
from app.agent.tools import Toolbox

PROFILE = load_profile(None)


def test_a_day_said_in_more_words_is_the_day_a_caller_means():
    today = date(2026, 12, 8)  # a Tuesday
    said = "could I come the day after tomorrow, or next Friday, or a week from today, or on December 3rd?"
    assert [v for v, _, _ in day_phrases(said)] == ["the day after tomorrow", "next friday", "a week from today",
                                                  "december 3rd"]
    assert day_phrases("it's June 3 pm then") == []  # a name and a clock time
    assert resolve_day("the day after tomorrow", today) == date(2026, 12, 10)
    assert resolve_day("next friday", today) == date(2026, 12, 11)  # the coming one
    assert resolve_day("next tuesday", today) == date(2026, 12, 15)  # said on a Tuesday: not today
    assert resolve_day("a week from friday", today) == date(2026, 12, 18)
    assert resolve_day("in a week", today) == date(2026, 12, 15)
    assert resolve_day("december 3rd", today) == date(2027, 12, 3)  # passed this year: the next one
    assert resolve_day("the 15th of january", today) == date(2027, 1, 15)
    assert resolve_day("the 20th", today) == date(2026, 12, 20)
    assert resolve_day("the 3rd", today) == date(2027, 1, 3)  # passed this month: next month's
    with pytest.raises(Refusal, match="February has no day 30"):
        resolve_day("february 30th", today)
    toolbox = Toolbox(load_profile(None), open_store(":memory:"), now=lambda: datetime(2026, 12, 8, 10, 0))
    assert toolbox.call("check_availability", {"day": "next tuesday"})["day"] == "Tuesday, December 15"
    # a call's record names the day as one of the tools' days where one does (the model reads its calls back)
    assert toolbox.canonical({"day": "the day after tomorrow", "service": "shave"}) == {
        "day": "thursday", "service": "beard trim"}
    assert toolbox.canonical({"day": "in a week"}) == {"day": "in a week"}  # Tuesday is today's: as said
    assert toolbox.canonical({"day": "the 9th"}) == {"day": "wednesday"}
    assert toolbox.canonical({"day": "the 8th"}) == {"day": "today"}
    assert toolbox.canonical({"day": "february 30th"}) == {"day": "february 30th"}  # the call refuses it


def test_the_date_of_a_day_asked_is_called_with_that_day():
    """"and what day is tomorrow?" calls the date tool with the day it asks (the tool then gives that day's date
    alone: with tomorrow's date beside today's, the brain read today's out, and in the afternoon ran on into
    tomorrow's); today's date is what it gives with no day."""
    messages = [{"role": "user", "content": "what time is it?"},
                {"role": "assistant", "content": format_tool_call("current_datetime", {})},
                tool_message("current_datetime", {"ok": True, "date": "Saturday, December 5", "time": "4:05 PM"}),
                {"role": "assistant", "content": "It's 4:05 PM on Saturday, December 5."},
                {"role": "user", "content": "and what day is tomorrow?"}]

    def date_tool():
        return next(s for s in held(SCHEMAS, messages, PROFILE) if s["name"] == "current_datetime")["parameters"]

    assert date_tool()["required"] == ["day"] and date_tool()["properties"]["day"]["enum"] == ["tomorrow"]
    messages[-1]["content"] = "what's the date this friday?"
    assert date_tool()["properties"]["day"]["enum"] == ["friday"]
    messages[-1]["content"] = "sorry, what's today's date?"
    assert date_tool().get("required", []) == []


def test_a_day_said_in_more_words_is_held_whole_and_its_echo_is_not_another_day():
    """"the day after tomorrow" is the day, not the "tomorrow" inside it; the model's question "What time tomorrow
    works for you?" (worded from the call) echoes it, and the booking that follows is held to the caller's day:
    it was booked for tomorrow, as "next Tuesday" was for today after "What time on Tuesday works for you?"."""
    messages = [{"role": "user", "content": "can I get a blow dry the day after tomorrow?"}]

    def days(tool="book_appointment"):
        schema = next(s for s in held(SCHEMAS, messages, PROFILE) if s["name"] == tool)["parameters"]
        return schema["properties"]["day"]["enum"], schema["required"]

    assert days() == (["the day after tomorrow"], ["day"])  # said last: the call is written with it
    messages += [{"role": "assistant", "content": format_tool_call("book_appointment", {
                      "service": "blow dry", "day": "the day after tomorrow"})},
                 tool_message("book_appointment", {"ok": False, "missing": ["time", "name"]}),
                 {"role": "assistant", "content": "What time tomorrow works for you?"},
                 {"role": "user", "content": "around 1 pm"}]
    assert days()[0] == ["the day after tomorrow"]
    messages[0]["content"] = "anything next tuesday for a kids haircut"
    messages[3]["content"] = "What time on Tuesday works for you?"
    assert days("check_availability")[0] == ["next tuesday"]
    messages[-1]["content"] = "ok this tuesday then, at 1 pm"  # a plain day said last is the day
    assert days()[0] == ["tuesday"]
