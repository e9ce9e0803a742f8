"""A turn's calls that give way (app.agent.given_way.GivenWay) and a detail asked for again (CallCheck.offered).

A call made up whole gives way to the tool the model weighed next, or to an answer in words; one that leaves out
the clock time the caller gave, or repeats the agent's last look-up for words that say nothing of it, gives way to
the next tool that holds what was said (a look-up again, else to an answer in words); an unasked transfer the model
barely wrote, to an answer in words; an answer continues the request it answers. A detail asked for again is
answered with the look-up of its choices (Toolbox.choices)."""
import pytest

from app.agent.protocol import format_tool_call, tool_message
from app.agent.said import missing_result
from tests.fakes import SharedGeneration
from tests.unit.torn import ASKING, PRICES, SMALL_TALK, Torn, agent_after


class _MadeUp(Torn):
    """Torn whose reply with no call allowed (after a made-up call) is SMALL_TALK."""

    def generate(self, messages, *, matcher=None, written=(), **kwargs):
        first = self.tokenizer.encode(self.own, add_special_tokens=False).ids[0]
        if messages[-1]["role"] == "user" and not written and matcher is not None and not matcher.allowed()[first]:
            ids = self.tokenizer.encode(SMALL_TALK, add_special_tokens=False).ids
            return SharedGeneration(SMALL_TALK, ids, [1.0] * len(ids))
        return super().generate(messages, matcher=matcher, written=written, **kwargs)


MADE_UP = format_tool_call("check_availability", {"day": "monday"})  # nobody said the day


@pytest.mark.parametrize("draft", [False, True])
def test_a_call_made_up_whole_gives_way_to_the_tool_the_model_weighed_next(draft):
    # "how much for a haircut and a beard trim together?" checked the free times of a day and a time nobody named
    # (check_availability 0.44) and got "I'm sorry, I can't help with that."; business_info had 0.25
    engine = _MadeUp({"check_availability": 0.44, "business_info": 0.25}, own=MADE_UP, forced=PRICES)
    agent = agent_after(engine)
    agent.messages = []
    said = "how much for a beard trim and a haircut together?"
    turn = agent.respond(said, first=agent.draft(said) if draft else None)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("business_info", {"topic": "prices", "service": "beard trim"})]
    assert turn.reply == "That is $15."


@pytest.mark.parametrize("draft", [False, True])
def test_a_call_that_wrote_a_day_said_as_a_name_gives_way_to_the_tool_that_takes_it_however_little_weighed(draft):
    # "what's the latest appointment on saturday?" looked up the appointments of "saturday" (list_appointments
    # 0.93), a name the rule drops as a day, and the caller heard "I'm sorry, I can't help with that."; Saturday's
    # free times had 0.045, under the floor of a call made up of nothing said (below: "the next not weighed").
    # (The test tokenizer writes check_availability with current_datetime's first token: Saturday's hours here.)
    saturday = {"topic": "hours", "day": "saturday"}
    engine = _MadeUp({"list_appointments": 0.93, "business_info": 0.045}, own=format_tool_call(
        "list_appointments", {"name": "saturday"}), forced=format_tool_call("business_info", saturday))
    agent = agent_after(engine)
    agent.messages = []
    said = "what's the latest appointment on saturday?"
    turn = agent.respond(said, first=agent.draft(said) if draft else None)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("business_info", saturday)]
    assert turn.tool_calls[0].result["hours"] == "9:00 AM to 4:00 PM"


@pytest.mark.parametrize("said, names, forced", [
    ("how much for a beard trim and a haircut together?", {"check_availability": 0.44, "business_info": 0.02},
     PRICES),                                                                             # the next not weighed
    ("can you order me a pizza?", {"check_availability": 0.44, "business_info": 0.25},
     format_tool_call("business_info", {"topic": "prices"})),                             # it holds nothing said
])
def test_a_call_made_up_whole_is_answered_in_words_unless_the_next_tool_holds_what_was_said(said, names, forced):
    engine = _MadeUp(names, own=MADE_UP, forced=forced)
    agent = agent_after(engine)
    agent.messages = []
    turn = agent.respond(said)
    assert turn.tool_calls == [] and turn.reply == SMALL_TALK


HOURS = format_tool_call("business_info", {"topic": "hours", "day": "tuesday"})
# (the test tokenizer writes check_availability, cancel_appointment and current_datetime with one first token:
# the booking is the tool here that takes a time and begins with its own)
BOOKING_AT = format_tool_call("book_appointment", {"name": "Ana Lima", "day": "tuesday", "time": "14:30",
                                                   "service": "haircut"})


def _asked_the_hours(engine):
    agent = agent_after(engine, ("business_info", {"topic": "hours", "day": "tuesday"}))
    agent.messages[0]["content"] = "I'm Ana Lima, I'd like a haircut. What are your hours on tuesday?"
    return agent


@pytest.mark.parametrize("draft", [False, True])
@pytest.mark.parametrize("said, names", [
    # at an optician, "2:30" after Thursday's opening hours read them again (business_info 0.84 of a call's
    # probability, check_availability 0.10), and the name given next drew a greeting
    ("2:30", {"business_info": 0.84, "book_appointment": 0.10}),
    # "9:30 then" after Friday's opening hours, the last answer's call again: however little the next was weighed
    ("2:30 then", {"business_info": 0.97, "book_appointment": 0.001}),
])
def test_a_call_that_leaves_out_the_time_the_caller_gave_gives_way_to_the_tool_that_holds_it(said, names, draft):
    engine = Torn(names, own=HOURS, forced=BOOKING_AT)
    agent = _asked_the_hours(engine)
    turn = agent.respond(said, first=agent.draft(said) if draft else None)
    assert [(c.name, c.arguments["time"]) for c in turn.tool_calls] == [("book_appointment", "14:30")]


@pytest.mark.parametrize("said, names, own", [
    # a bare number: maybe no time
    ("2 please", {"business_info": 0.84, "book_appointment": 0.10},
     format_tool_call("business_info", {"topic": "hours"})),
    # the model did not weigh the booking, and the call is not the last answer's again
    ("2:30", {"business_info": 0.97, "book_appointment": 0.01},
     format_tool_call("business_info", {"topic": "hours"})),
    ("and on tuesday, at 2:30?", {"business_info": 0.84, "book_appointment": 0.10}, HOURS),  # the call holds its day
])
def test_a_call_keeps_its_tool_unless_it_leaves_out_a_clock_time_the_model_weighed_a_tool_for(said, names, own):
    engine = Torn(names, own=own, forced=BOOKING_AT)
    turn = _asked_the_hours(engine).respond(said)
    assert [c.name for c in turn.tool_calls] == ["business_info"]


BOOKING_TUESDAY = format_tool_call("book_appointment", {"name": "Ana Lima", "day": "tuesday", "service": "haircut"})


@pytest.mark.parametrize("draft", [False, True])
def test_the_last_look_up_again_gives_way_to_the_next_tool_that_holds_what_was_said(draft):
    # at a dental clinic, after Thursday's opening hours, "the morning", "9" and "Paula Reyes" each read them again
    engine = Torn({"business_info": 0.97, "book_appointment": 0.001}, own=HOURS, forced=BOOKING_TUESDAY)
    agent = _asked_the_hours(engine)
    turn = agent.respond("the morning", first=agent.draft("the morning") if draft else None)
    assert turn.tool_calls == [] and turn.reply == ASKING
    assert agent.messages[-3]["content"] == BOOKING_TUESDAY


@pytest.mark.parametrize("said", [
    "the morning?",                # a question may ask the same again
    "and tuesday morning",         # it says the call's day
    "what are your hours again",   # it names the tool ("hours": business_info's description alone holds it)
])
def test_the_last_look_up_again_stands_when_asked_for(said):
    engine = Torn({"business_info": 0.97, "book_appointment": 0.001}, own=HOURS, forced=BOOKING_TUESDAY)
    turn = _asked_the_hours(engine).respond(said)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("business_info", {"topic": "hours", "day": "tuesday"})]


def test_the_last_look_up_again_is_answered_in_words_when_the_next_tool_takes_a_detail_only_the_agent_said():
    # "that one's fine" after the opening hours: a booking weighed at 0.001 took the closing time of another day;
    # the hours again would say only what the caller just heard ("cool, have a nice evening" read them again)
    closing = format_tool_call("book_appointment", {"name": "Ana Lima", "day": "tuesday", "time": "18:00",
                                                    "service": "haircut"})
    engine = _MadeUp({"business_info": 0.97, "book_appointment": 0.001}, own=HOURS, forced=closing)
    turn = _asked_the_hours(engine).respond("that one's fine")
    assert turn.tool_calls == [] and turn.reply == SMALL_TALK


def _offered(engine):
    check = ("check_availability", {"day": "tuesday", "time": "14:30"})
    agent = agent_after(engine, check)
    agent.messages[0]["content"] = "Is 2:30 on tuesday free for a haircut?"
    agent.messages[-1]["content"] = "Yes, Tuesday at 2:30 PM is free. Would you like me to book it?"
    return agent


def test_a_name_alone_after_an_offer_makes_the_call_the_model_weighs_though_it_hardly_weighs_one():
    # "Greg Olsen" (a bike shop) and "Rita Gomez" (an optician) after "Would you like me to book it?": a call 0.13
    # and 0.11 of the model's probability, the booking 0.57 and 0.86 of a call's; they heard "I'm sorry, I can't
    # help with that."
    engine = Torn({"book_appointment": 0.6, "business_info": 0.1}, own=SMALL_TALK, forced=BOOKING_AT, call_share=0.13)
    turn = _offered(engine).respond("Ana Lima")
    assert [(c.name, c.arguments["name"]) for c in turn.tool_calls] == [("book_appointment", "Ana Lima")]


@pytest.mark.parametrize("said, call_share", [
    ("Ana Lima, and thanks for being so quick.", 0.13),   # more than the name: the model's own answer
    ("Ana Lima", 0.03),                                    # a call the model does not weigh
])
def test_a_call_the_model_hardly_weighs_is_made_only_for_a_turn_that_is_its_detail_alone(said, call_share):
    engine = Torn({"book_appointment": 0.6, "business_info": 0.1}, own=SMALL_TALK, forced=BOOKING_AT,
                   call_share=call_share)
    turn = _offered(engine).respond(said)
    assert turn.tool_calls == [] and turn.reply == SMALL_TALK


BOOKING_FRIDAY = {"name": "Ana Lima", "day": "friday", "service": "haircut"}


def _asked(engine, call: dict, missing: list[str], question: str):
    """An agent that asked the caller for `missing[0]`: its call `call` (a booking) lacked `missing`."""
    agent = agent_after(engine)
    agent.messages = [{"role": "user", "content": "I'm Ana Lima, I'd like a haircut on friday"},
                      {"role": "assistant", "content": format_tool_call("book_appointment", call)},
                      tool_message("book_appointment", missing_result(missing)),
                      {"role": "assistant", "content": question}]
    return agent


@pytest.mark.parametrize("draft", [False, True])
def test_a_detail_asked_for_again_is_answered_with_its_choices(draft):
    # "afternoon would be best", asked what time on Wednesday, wrote the booking without a time again, and the
    # caller heard "What time on Wednesday works for you?" again
    own = format_tool_call("book_appointment", BOOKING_FRIDAY)
    engine = Torn({"book_appointment": 0.99}, own=own, forced=own)
    agent = _asked(engine, BOOKING_FRIDAY, ["time"], "What time on Friday works for you?")
    said = "morning if possible"
    turn = agent.respond(said, first=agent.draft(said) if draft else None)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("check_availability", {"day": "friday"})]
    assert turn.tool_calls[0].result["free"].startswith("9:00 AM")
    assert agent.messages[-3]["content"] == format_tool_call("check_availability", {"day": "friday"})


@pytest.mark.parametrize("asked", [False, True])
def test_a_detail_not_asked_for_before_or_asked_for_a_call_the_answer_changed_is_asked_for(asked):
    # "Thursday", asked what time on Saturday, changed the booking's day: "What time on Thursday ...?"
    call = BOOKING_FRIDAY | {"day": "saturday"}
    own = format_tool_call("book_appointment", call)
    engine = Torn({"book_appointment": 0.99}, own=own, forced=own)
    if asked:
        agent = _asked(engine, BOOKING_FRIDAY, ["time"], "What time on Friday works for you?")
        turn = agent.respond("sorry, saturday")
    else:
        agent = agent_after(engine)
        turn = agent.respond("I'm Ana Lima, I'd like a haircut on saturday")
    assert turn.tool_calls == [] and turn.reply == ASKING


@pytest.mark.parametrize("said, tool", [
    ("great, put him down. it's under Carlos Mendoza", "book_appointment"),   # the name asked for, given
    ("actually cancel my appointment instead, it's Carlos Mendoza", "cancel_appointment"),   # named
])
def test_the_detail_asked_for_continues_the_request_however_little_the_model_weighs_it(said, tool):
    # asked the name for a son's haircut, "great, put him down. it's under Carlos Mendoza" cancelled under that
    # name (0.81 of a call's probability, the booking 0.017)
    lacking = {"day": "friday", "time": "10:00", "service": "haircut"}
    engine = Torn({"cancel_appointment": 0.81, "book_appointment": 0.017},
                  own=format_tool_call("cancel_appointment", {"name": "Carlos Mendoza"}),
                  forced=format_tool_call("book_appointment", {"name": "Carlos Mendoza"} | lacking))
    agent = agent_after(engine)
    agent.messages = [{"role": "user", "content": "my son needs a haircut, do you have friday at 10?"},
                      {"role": "assistant", "content": format_tool_call("book_appointment", lacking)},
                      tool_message("book_appointment", missing_result(["name"])),
                      {"role": "assistant", "content": "Can I have your name, please?"}]
    turn = agent.respond(said)
    assert [(c.name, c.arguments["name"]) for c in turn.tool_calls] == [(tool, "Carlos Mendoza")]


@pytest.mark.parametrize("said, tool", [
    ("perfect, put me down for that", "check_availability"),   # the booking asked again: its free times
    ("actually, just cancel it", "cancel_appointment"),        # the words name the cancellation
])
def test_an_answer_to_a_question_continues_the_request_unless_it_names_another(said, tool):
    # asked "What time today works for you?" for a blow dry, "Perfect, put me down for that." cancelled (0.82 of a
    # call's probability, the booking 0.14)
    cancelled = format_tool_call("cancel_appointment", {"name": "Ana Lima"})
    engine = Torn({"cancel_appointment": 0.82, "book_appointment": 0.14}, own=cancelled,
                   forced=format_tool_call("book_appointment", BOOKING_FRIDAY))
    agent = _asked(engine, BOOKING_FRIDAY, ["time"], "What time on Friday works for you?")
    turn = agent.respond(said)
    assert [c.name for c in turn.tool_calls] == [tool]


TRANSFER = format_tool_call("transfer_to_human", {})
BOOKING_HER = format_tool_call("book_appointment", {"name": "Leila Haddad", "day": "tuesday", "time": "14:00",
                                                    "service": "haircut"})


def _booked(engine):
    agent = agent_after(engine, ("book_appointment", {"name": "Ana Lima", "day": "tuesday", "time": "14:00",
                                                      "service": "haircut"}))
    agent.messages[0]["content"] = "Hi, I'd like a haircut tuesday at 2 pm for Ana Lima."
    return agent


@pytest.mark.parametrize("draft", [False, True])
def test_a_transfer_nobody_asked_for_gives_way_to_the_call_the_callers_words_hold(draft):
    # "and my wife wants one too, same time, Leila Haddad", after the caller's own haircut was booked, was handed
    # to the staff (transfer_to_human 0.52 of a call's probability, book_appointment 0.29)
    engine = Torn({"transfer_to_human": 0.52, "book_appointment": 0.29}, own=TRANSFER, forced=BOOKING_HER)
    agent = _booked(engine)
    said = "and my wife wants a haircut too, same time, Leila Haddad"
    turn = agent.respond(said, first=agent.draft(said) if draft else None)
    assert [(c.name, c.arguments["name"]) for c in turn.tool_calls] == [("book_appointment", "Leila Haddad")]
    assert turn.tool_calls[0].result["ok"] is False   # Ana Lima has that time: the caller hears so


ANA_AGAIN = format_tool_call("book_appointment", {"name": "Ana Lima", "day": "tuesday", "time": "14:00",
                                                  "service": "haircut"})


def test_an_unasked_transfer_gives_way_to_the_topic_the_callers_words_name():
    # espeak's "oh ok never mind. what's the address?", heard with no question mark after a cancellation found
    # nothing, was transferred (0.47; list_appointments 0.21, business_info 0.17)
    address = format_tool_call("business_info", {"topic": "address"})
    engine = Torn({"transfer_to_human": 0.47, "list_appointments": 0.21, "business_info": 0.17}, own=TRANSFER,
                  forced=address)
    turn = _booked(engine).respond("Okay never mind what's the address.")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("business_info", {"topic": "address"})]
    hours = format_tool_call("business_info", {"topic": "hours"})   # a topic the words do not name
    turn = _booked(Torn({"transfer_to_human": 0.6, "business_info": 0.3}, own=TRANSFER, forced=hours)).respond(
        "Okay never mind that.")
    assert [c.name for c in turn.tool_calls] == ["transfer_to_human"]


def test_an_unasked_transfer_the_model_barely_wrote_is_answered_in_words():
    # "ok great, thanks so much, talk to you later" after the opening hours was handed to the staff: a call 0.56 of
    # the model's probability, the transfer 0.17 of a call's, and the call weighed next held nothing said
    hours = format_tool_call("business_info", {"topic": "hours"})
    engine = _MadeUp({"transfer_to_human": 0.17, "business_info": 0.28}, own=TRANSFER, forced=hours, call_share=0.56)
    turn = _booked(engine).respond("ok great, thanks so much, talk to you later")
    assert turn.tool_calls == [] and turn.reply == SMALL_TALK


@pytest.mark.parametrize("said, names, forced", [
    # the model is sure of it
    ("and my wife wants one too, same time, Leila Haddad", {"transfer_to_human": 0.9, "book_appointment": 0.09},
     BOOKING_HER),
    # the caller's words name what it does ("Hand the call to a person on the staff.")
    ("can I talk to a person about Leila Haddad's booking?", {"transfer_to_human": 0.52, "book_appointment": 0.29},
     BOOKING_HER),
    # the call weighed next holds nothing the caller's latest words say
    ("and my wife wants to come too", {"transfer_to_human": 0.52, "book_appointment": 0.29}, ANA_AGAIN),
])
def test_a_transfer_stands_when_asked_for_when_the_model_is_sure_or_when_nothing_else_was_said(said, names, forced):
    turn = _booked(Torn(names, own=TRANSFER, forced=forced)).respond(said)
    assert [c.name for c in turn.tool_calls] == ["transfer_to_human"]


@pytest.mark.parametrize("service, stands", [("nails", True), ("haircut", False)])
def test_an_unasked_transfer_gives_way_to_a_booking_only_of_a_service_the_business_offers(service, stands):
    # "the gears are still skipping, I wanna talk to the mechanic who worked on it" (a bike shop) was handed to the
    # staff (a call 0.66, the transfer 0.58 of it), then given way to a booking of "skipping" (0.16): the caller
    # heard "We don't offer skipping"
    booking = format_tool_call("book_appointment", {"name": "Ana Lima", "day": "tuesday", "time": "14:00",
                                                    "service": service})
    engine = _MadeUp({"transfer_to_human": 0.58, "book_appointment": 0.16}, own=TRANSFER, forced=booking,
                     call_share=0.66)
    turn = _booked(engine).respond(f"I wanna talk to the girl who did my {service} yesterday")
    assert [c.name for c in turn.tool_calls] == (["transfer_to_human"] if stands else ["book_appointment"])


LISTED = format_tool_call("list_appointments", {})   # a call that holds no detail of its tool


def test_a_call_written_with_no_details_nobody_asked_for_gives_way_to_the_topic_the_callers_words_name():
    # "what's the address again, I always forget", after a booking, looked the appointments up with no name
    # (written bare), and the caller was asked "what name is the appointment under?"
    address = format_tool_call("business_info", {"topic": "address"})
    engine = Torn({"list_appointments": 0.5, "business_info": 0.3}, own=LISTED, forced=address)
    turn = _booked(engine).respond("what's the address again, I always forget")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("business_info", {"topic": "address"})]
    # asked for by its words ("The caller's upcoming appointments."), it stands and asks for what it lacks
    turn = _booked(Torn({"list_appointments": 0.5, "business_info": 0.3}, own=LISTED, forced=address)).respond(
        "and what appointments do I have now")
    assert turn.tool_calls == [] and turn.reply == ASKING
