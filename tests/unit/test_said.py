"""The one rule for tool arguments the caller must have said (app.agent.said), and the agent asking instead of
running a call whose detail nobody gave."""
import json

from app.agent.profile import load_profile
from app.agent.protocol import format_tool_call, tool_message
from app.agent.said import is_said, names_last, names_tool, settle, unsaid
from app.agent.schemas import SCHEMAS
from app.agent.store import open_store
from app.agent.tools import Toolbox
from tests.scripted_agent import scripted_agent

PROFILE = load_profile(None)


def test_times_are_said_in_any_spoken_form():
    assert is_said("15:30", ["Can I come at half past three in the afternoon?"])
    assert is_said("15:30", ["3:30 pm works"])
    assert not is_said("15:00", ["Can I come in tomorrow?"])


def test_names_are_said_whatever_their_accents_and_case():
    assert is_said("Sofía Ramírez", ["name is sofia ramirez"])
    assert is_said("de la Cruz", ["It's Maria de la Cruz."])
    assert not is_said("Maria Lopez", ["It's Maria."])


def test_unsaid_reads_the_schema_marks_and_the_whole_conversation():
    """The caller's words, the tools' results and the agent's replies that follow a result (a time it offered from
    the free times it looked up) say details; the system prompt does not, nor a reply nothing was looked up for."""
    messages = [{"role": "system", "content": "Maple Street, 15:00, Anna"},
                {"role": "user", "content": "Hi!"},
                {"role": "assistant", "content": "Hello, how can I help you today?"},
                {"role": "user", "content": "A haircut please, I'm Ana."},
                {"role": "assistant", "content": format_tool_call("check_availability", {"day": "tomorrow"})},
                tool_message("check_availability", {"day": "Wednesday", "free": "9:00 AM to 6:00 PM"}),
                {"role": "assistant", "content": "Tomorrow we're free all day. How about 4 PM?"},
                {"role": "user", "content": "Sure."}]
    args = {"name": "Ana", "day": "tomorrow", "time": "16:00", "service": "haircut"}
    assert unsaid("book_appointment", args, SCHEMAS, messages, PROFILE) == []
    assert unsaid("book_appointment", {**args, "time": "15:00"}, SCHEMAS, messages, PROFILE) == ["time"]
    assert unsaid("book_appointment", {**args, "name": "Anna"}, SCHEMAS, messages, PROFILE) == ["name"]
    assert unsaid("book_appointment", {**args, "day": "today"}, SCHEMAS, messages, PROFILE) == ["day"]
    assert unsaid("current_datetime", {}, SCHEMAS, messages, PROFILE) == []
    unlooked = messages[:4] + [{"role": "assistant", "content": "How about 4 PM tomorrow?"}, messages[-1]]
    assert unsaid("book_appointment", args, SCHEMAS, unlooked, PROFILE) == ["day", "time"]


def test_a_call_with_a_detail_nobody_gave_is_not_run_the_model_hears_what_is_missing_and_asks():
    booking = format_tool_call("book_appointment", {"name": "Ana", "day": "tomorrow", "time": "15:00",
                                                    "service": "haircut"})
    agent, engine = scripted_agent([booking, "What time tomorrow works for you?"])
    turn = agent.respond("I'd like a haircut tomorrow, I'm Ana.")
    assert turn.tool_calls == []
    assert turn.reply == "What time tomorrow works for you?"
    assert len(engine.calls) == 2
    # the history holds the call as held (the unsaid time dropped) and what it lacked, in the schema's order
    assert agent.messages[1]["content"] == format_tool_call("book_appointment", {"name": "Ana", "day": "tomorrow",
                                                                                 "service": "haircut"})
    assert json.loads(agent.messages[2]["content"]) == {"name": "book_appointment",
                                                       "result": {"ok": False, "missing": ["time"]}}
    assert engine.calls[1][-1] == agent.messages[2]  # the question was written after it


def test_a_greetings_today_is_no_day_the_caller_chose():
    """"Yes please" to "What day would you like to come in?", after the greeting "How can I help you today?": a
    booking for today was run (a Monday, and the caller heard the salon is closed on Mondays). Nothing was looked
    up for the greeting, so it offered no day: the agent asks for it again."""
    booking = format_tool_call("book_appointment", {"name": "Sam", "day": "today", "time": "15:00",
                                                    "service": "haircut"})
    agent, _ = scripted_agent([booking, "What day would you like to come in?"])
    agent.messages = [{"role": "user", "content": "Hi there"},
                      {"role": "assistant", "content": "Hello, thank you for calling. How can I help you today?"},
                      {"role": "user", "content": "I'd like to book a haircut for Sam at 3"},
                      {"role": "assistant", "content": "What day would you like to come in?"}]
    turn = agent.respond("Yes please")
    assert turn.tool_calls == [] and turn.reply == "What day would you like to come in?"
    assert json.loads(agent.messages[-2]["content"])["result"]["missing"] == ["day"]
    assert agent.toolbox.store.for_name("Sam") == []


def test_a_call_that_leaves_out_details_is_answered_with_the_first_missing_in_the_schemas_order():
    booking = format_tool_call("book_appointment", {"name": "Ana"})
    agent, _ = scripted_agent([booking, "What service would you like?"])
    turn = agent.respond("I want to book something, I'm Ana.")
    assert turn.tool_calls == [] and turn.reply == "What service would you like?"
    missing = json.loads(agent.messages[2]["content"])["result"]["missing"]
    assert missing == ["service", "day", "time"]


def test_a_call_made_only_of_details_nobody_said_is_no_call_the_model_answers_in_words():
    """"is it safe to color my hair while I'm pregnant?" made an availability check for a Friday at 10 nobody
    named: asking which day would answer a question the caller never asked."""
    check = format_tool_call("check_availability", {"day": "friday", "time": "10:00"})
    spoken = "I'm sorry, I can't help with that."
    agent, engine = scripted_agent([check, spoken])
    turn = agent.respond("ok. also, um, is it safe to color my hair while I'm pregnant?")
    assert turn.tool_calls == [] and turn.reply == spoken
    assert [m["role"] for m in agent.messages] == ["user", "assistant"]  # the made-up call left no trace
    assert engine.calls[1] == engine.calls[0]  # the words were written from the same prompt

    # drafted during the caller's silence, the turn keeps the draft's words: the same decision, no new generation
    agent, engine = scripted_agent([check, spoken])
    first = agent.draft("is it safe to color my hair while I'm pregnant?")
    turn = agent.respond("is it safe to color my hair while I'm pregnant?", first=first)
    assert turn.reply == spoken and turn.tool_calls == [] and len(engine.calls) == 2


def test_a_call_with_one_detail_said_still_asks_for_the_rest():
    booking = format_tool_call("book_appointment", {"service": "beard trim", "day": "friday"})
    agent, _ = scripted_agent([booking, "What day would you like to come in?"])
    turn = agent.respond("okay and uh, a beard trim?")
    assert turn.reply == "What day would you like to come in?"
    assert json.loads(agent.messages[2]["content"])["result"]["missing"] == ["day", "time", "name"]


def test_a_name_made_of_a_day_is_the_days_not_a_name_the_agent_asks_for_one():
    booking = format_tool_call("book_appointment", {"name": "Thursday", "day": "thursday", "time": "13:30",
                                                    "service": "beard trim"})
    agent, _ = scripted_agent(["What time on Thursday works for you?", booking, "Can I have your name, please?"])
    agent.respond("can I get a beard trim on Thursday?")
    turn = agent.respond("1:30 then")
    assert turn.tool_calls == [] and turn.reply == "Can I have your name, please?"
    assert json.loads(agent.messages[-2]["content"])["result"]["missing"] == ["name"]
    # so is one for a tool that takes no day: "which one is the latest one you have?", after "a haircut on
    # friday?", looked up the appointments of "friday"
    said = [{"role": "user", "content": "can I get a haircut on friday? which one is the latest one you have?"}]
    assert settle("list_appointments", {"name": "friday"}, SCHEMAS, said, PROFILE) == ({}, ["name"])
    # a name that holds a day's word beside others is a name
    kept, missing = settle("book_appointment", {"name": "Sunday Rose", "day": "friday", "time": "10:00",
                                                "service": "haircut"}, SCHEMAS,
                           [{"role": "user", "content": "Friday at 10 for a haircut, I'm Sunday Rose"}], PROFILE)
    assert kept["name"] == "Sunday Rose" and missing == []


def test_a_name_made_only_of_the_services_words_is_no_name():
    # "do you do emergency exams?" at a dentist's looked up the appointments of "emergency": "I don't see any
    # upcoming emergency appointments."
    dentist = load_profile("app/profiles/dental_clinic.yaml")
    schemas = Toolbox(dentist, open_store(":memory:")).schemas()
    said = [{"role": "user", "content": "do you do emergency exams? for Jo Cleary, Emergency Exam, tomorrow at 9"}]
    assert settle("list_appointments", {"name": "emergency"}, schemas, said, dentist) == ({}, ["name"])
    for name, kept in (("Emergency Exam", False), ("Jo Cleary", True)):
        arguments = {"name": name, "day": "tomorrow", "time": "09:00", "service": "emergency exam"}
        kept_arguments = settle("book_appointment", arguments, schemas, said, dentist)[0]
        assert ("name" in kept_arguments) == kept and kept_arguments["service"] == "emergency exam", name


def test_a_name_that_begins_with_a_possessive_says_who_not_their_name():
    booking = format_tool_call("book_appointment", {"name": "my daughter", "day": "saturday", "time": "10:00",
                                                    "service": "kids haircut"})
    agent, _ = scripted_agent([booking, "Can I have your name, please?"])
    turn = agent.respond("hi I'd like to book for my daughter, a kids haircut saturday at 10")
    assert turn.tool_calls == [] and turn.reply == "Can I have your name, please?"
    assert json.loads(agent.messages[-2]["content"])["result"]["missing"] == ["name"]
    said = [{"role": "user", "content": "for My Son and for Myra Hill, Saturday at 10, a kids haircut"}]
    for name, kept in (("My Son", False), ("Myra Hill", True)):
        arguments = {"name": name, "day": "saturday", "time": "10:00", "service": "kids haircut"}
        assert ("name" in settle("book_appointment", arguments, SCHEMAS, said, PROFILE)[0]) == kept, name


def test_a_name_made_only_of_numbers_is_a_time_or_a_count_not_a_name():
    # "oh, ok. then 2:30 for her", heard "Okay, 9 2 30 further.", was booked under the name "9 2 30"
    said = [{"role": "user", "content": "Okay, 9 2 30 further. It's for Lee 2."}]
    for name, kept in (("9 2 30", False), ("2", False), ("Lee 2", True)):
        arguments = {"name": name, "day": "today", "time": "14:30", "service": "haircut"}
        assert ("name" in settle("book_appointment", arguments, SCHEMAS, said, PROFILE)[0]) == kept, name


def test_a_name_made_only_of_hesitation_sounds_says_nothing():
    # "Okay so, Um, 5:30 in the afternoon.", asked for a time, was booked under the name "Um" (an optician)
    said = [{"role": "user", "content": "Okay so, Um, 5:30 in the afternoon. Uh, Erma Hill, uh."}]
    for name, kept in (("Um", False), ("Uh, um", False), ("Erma Hill", True)):
        arguments = {"name": name, "day": "today", "time": "17:30", "service": "haircut"}
        assert ("name" in settle("book_appointment", arguments, SCHEMAS, said, PROFILE)[0]) == kept, name


def test_a_tool_is_named_by_a_word_of_its_description_no_other_tools_holds():
    assert names_tool("cancel_appointment", SCHEMAS, "ok just cancel it")
    assert names_tool("book_appointment", SCHEMAS, "can you book me in?")
    assert not names_tool("cancel_appointment", SCHEMAS, "I'd like an appointment")  # the list's too ("appointments")
    assert not names_tool("list_appointments", SCHEMAS, "what appointments do I have?")
    assert not names_tool("check_availability", SCHEMAS, "is it safe to color my hair while I'm pregnant?")


def test_a_call_whose_details_were_all_said_runs():
    booking = format_tool_call("book_appointment", {"name": "Ana", "day": "tomorrow", "time": "15:00",
                                                    "service": "haircut"})
    agent, _ = scripted_agent([booking, "You're all set."])
    turn = agent.respond("I'd like a haircut tomorrow at 3 pm, I'm Ana.")
    assert [c.name for c in turn.tool_calls] == ["book_appointment"]
    assert turn.tool_calls[0].result["ok"]
    assert turn.reply == "You're all set."


def test_an_optional_detail_nobody_gave_is_dropped_from_the_call():
    hours = format_tool_call("business_info", {"topic": "hours", "day": "friday"})
    agent, _ = scripted_agent([hours, "We're open nine to six."])
    turn = agent.respond("What are your hours?")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("business_info", {"topic": "hours"})]
    assert agent.messages[1]["content"] == format_tool_call("business_info", {"topic": "hours"})


def test_plural_and_possessive_forms_say_the_word():
    assert is_said("saturday", ["Are you open Saturdays?"])
    assert is_said("kids haircut", ["how much for a kid's cut"], PROFILE)  # the alias "kids cut"
    assert is_said("Ross", ["I am Ross"]) and not is_said("Rose", ["I am Ross"])


def test_today_is_said_by_a_part_of_it():
    # "do you have anything this afternoon?": the model wrote check_availability(day=today), which was dropped as
    # unsaid, and the caller heard "I'm sorry, I can't help with that."
    for text in ("do you have anything this afternoon?", "how late are you open tonight?", "can I come in right now?",
                 "This evening, if you can.", "today please"):
        assert is_said("today", [text]), text
    for text in ("I was there this week", "I came in the afternoon", "now what about Friday?", "tomorrow night"):
        assert not is_said("today", [text]), text


def test_a_service_is_named_last_by_its_name_or_an_alias_in_the_latest_words_only():
    refused = [{"role": "user", "content": "Can I book eyelash extensions?"},
               {"role": "assistant", "content": "I'm sorry. We don't offer eyelash extensions."}]
    assert names_last("blow dry", refused + [{"role": "user", "content": "Just a styling please."}], PROFILE)
    assert names_last("styling", refused + [{"role": "user", "content": "a blow dry then"}], PROFILE)
    assert not names_last("haircut", refused + [{"role": "user", "content": "Just a styling please."}], PROFILE)
    assert not names_last("blow dry", [{"role": "user", "content": "a blowout"},
                                       {"role": "user", "content": "Rohan. Thanks."}], PROFILE)
    assert not names_last("please", [{"role": "user", "content": "a perm please"}], PROFILE)  # no service


def test_a_turn_that_speaks_of_someone_else_books_no_name_given_before_it():
    # "book a blow dry on Tuesday at 11, Emma Lindqvist", then "my sister also wants a blow dry Tuesday at 11:30"
    # had the model book the sister under Emma's name, which moved Emma's own booking
    profile = load_profile(None)
    schemas = Toolbox(profile, open_store(":memory:")).schemas()
    system = {"role": "system", "content": "You answer phone calls. Tools: book_appointment(name, day, time, service)"}

    def kept_name(latest: str, name: str = "Emma Lindqvist", before: tuple = ()):
        booked = {"ok": True, "name": "Emma Lindqvist", "service": "blow dry", "when": "Tuesday, December 8 at 11:00 AM"}
        messages = [system, {"role": "user", "content": "book a blow dry on Tuesday at 11, Emma Lindqvist"},
                    {"role": "assistant", "content": format_tool_call("book_appointment", {"name": "Emma Lindqvist"})},
                    tool_message("book_appointment", booked),
                    {"role": "assistant", "content": "You're all set, Emma Lindqvist."},
                    *before, {"role": "user", "content": latest}]
        kept, missing = settle("book_appointment", {"name": name, "day": "tuesday", "time": "11:00",
                                                    "service": "blow dry"}, schemas, messages, profile)
        return kept.get("name"), missing

    assert kept_name("my sister also wants a blow dry Tuesday at 11") == (None, ["name"])
    assert kept_name("and her brother too, at 11")[0] is None
    assert kept_name("my sister Grace Kim wants one at 11", name="Grace Kim")[0] == "Grace Kim"  # said now
    # the caller's own things are the business's words: their booking, their haircut
    assert kept_name("can you move my appointment to tuesday at 11?")[0] == "Emma Lindqvist"
    assert kept_name("actually make my blow dry 11 instead")[0] == "Emma Lindqvist"
    assert kept_name("yes please, tuesday at 11")[0] == "Emma Lindqvist"
    # a name no result confirmed is not the caller's booking: "10:30 for her is fine" after her booking was
    # refused books her under the name given for her
    refused = [{"role": "user", "content": "also my wife, Leila Haddad, at the same slot"},
               {"role": "assistant", "content": "Sorry, 11:00 AM is taken. The nearest free time is 11:30 AM."}]
    assert kept_name("11:30 for her is fine", name="Leila Haddad", before=refused)[0] == "Leila Haddad"
    assert kept_name("11:30 for her is fine", before=refused)[0] is None
