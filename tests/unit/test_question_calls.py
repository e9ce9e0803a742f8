"""Questions answered by a call the model weighed but would not make.

A question that names only another value of the question before it asks that question again
(app.agent.weighed.Weighed.followed_up): "okay and uh, a beard trim?" after "how much is a haircut?" was answered
is the beard trim's price. The adapted brain took it for a booking (book_appointment with 0.62 of its probability on
the tool's name, business_info 0.19) and asked "What day would you like to come in?".

A question that names a service the business offers is answered by a call (Weighed.asked_of_a_service): "do you
do fillings?" drew "I'm sorry, I can't help with that." (0.39 of the model's probability on a call).

A turn that names what a tool taking no details does is answered by it when the model would call that tool
(Weighed.named_tool): "Connect me to a real person." is the transfer."""
from datetime import datetime
from types import SimpleNamespace

import pytest
import torch

from app.agent.loop import Agent
from app.agent.options import AgentOptions
from app.agent.profile import load_profile
from app.agent.protocol import TOOL_CALL_OPEN, format_tool_call, tool_message
from app.agent.history import question_before
from app.agent.said import missing_result
from app.agent.store import open_store
from app.agent.tools import Toolbox
from tests.checkpoints import train_bpe
from tests.fakes import SharedGeneration

END = "<|end|>"
TOKENIZER = train_bpe([END])
NAME_AT = TOKENIZER.encode(TOOL_CALL_OPEN + '{"name":"', add_special_tokens=False).ids
OPENING = TOKENIZER.encode(TOOL_CALL_OPEN, add_special_tokens=False).ids
ASKING = "What day would you like to come in?"


def first_name_token(tool: str) -> int:
    return TOKENIZER.encode(TOOL_CALL_OPEN + '{"name":"' + tool, add_special_tokens=False).ids[len(NAME_AT)]


class _Torn:
    """A block engine that opens every reply with a call; at the call's tool name it gives each tool of `names` its
    share. Free, it writes `own`; given a tool's name as written, `forced` (probed for a detail, nothing); after a tool's result, the price
    the result gave or, for a call that lacked details, ASKING. It records what each generation was given."""
    chat_style = "parley"

    def __init__(self, names: dict[str, float], own: str, forced: str, call_share: float = 0.99):
        self.tokenizer = TOKENIZER
        self.special = SimpleNamespace(stop=(TOKENIZER.token_to_id(END),))
        self.model = SimpleNamespace(args=SimpleNamespace(vocab_size=TOKENIZER.get_vocab_size(),
                                                          max_sequence_length=4096))
        self.names, self.own, self.forced, self.call_share = names, own, forced, call_share
        self.written = []

    def first_token_probabilities(self, messages):
        return self.next_token_probabilities(messages, [])

    def next_token_probabilities(self, messages, written):
        probabilities = torch.full((TOKENIZER.get_vocab_size(),), 0.0001)
        if not written:
            probabilities[NAME_AT[0]] = self.call_share
        elif list(written) == NAME_AT:
            for tool, share in self.names.items():
                probabilities[first_name_token(tool)] = share
        return probabilities

    def generate(self, messages, *, matcher=None, written=(), on_block=None, **kwargs):
        self.written.append(self.tokenizer.decode(list(written)))
        if messages[-1]["role"] == "tool":
            result = messages[-1]["content"]
            text = f"That is {result.split('price')[1][3:6]}." if '"price"' in result else ASKING
        elif not written:
            text = self.own
        elif self.forced.startswith(self.tokenizer.decode(list(written))) and list(written) != NAME_AT[:len(written)] \
                or list(written) == OPENING:
            text = self.forced                            # its tool's name, or a call's opening, as written
        else:
            text = self.tokenizer.decode(list(written))   # a probe of a detail its call left out: none
        lead = self.tokenizer.decode(list(written))
        assert text.startswith(lead), (text, lead)
        ids = list(written) + self.tokenizer.encode(text[len(lead):], add_special_tokens=False).ids
        assert matcher is None or all(matcher.accept(t) for t in ids[len(written):]), text
        if on_block is not None:
            on_block(text)
        return SharedGeneration(text, ids, [1.0] * len(ids))


PRICES = format_tool_call("business_info", {"topic": "prices", "service": "beard trim"})
BOOKING = format_tool_call("book_appointment", {"service": "beard trim"})


def _agent(engine, call=("business_info", {"topic": "prices", "service": "haircut"})):
    toolbox = Toolbox(load_profile(None), open_store(":memory:"), now=lambda: datetime(2026, 3, 2, 9, 0))
    agent = Agent(engine, toolbox, "system", AgentOptions(cache="block", block_length=4))
    agent.messages = [{"role": "user", "content": "How much is a haircut?"},
                      {"role": "assistant", "content": format_tool_call(*call)},
                      tool_message(call[0], toolbox.call(*call)),
                      {"role": "assistant", "content": "That is $35."}]
    return agent


def test_a_question_naming_another_service_asks_the_question_before_again():
    engine = _Torn({"book_appointment": 0.62, "business_info": 0.19}, own=BOOKING, forced=PRICES)
    turn = _agent(engine).respond("okay and uh, a beard trim?")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("business_info", {"topic": "prices", "service": "beard trim"})]
    assert turn.reply == "That is $15."
    assert engine.written[0] == TOOL_CALL_OPEN + '{"name":"business_info'


@pytest.mark.parametrize("said, names, forced, own", [
    ("okay and uh, a beard trim.", {"book_appointment": 0.62, "business_info": 0.19}, PRICES, BOOKING),  # no "?"
    ("okay and uh, a beard trim?", {"book_appointment": 0.96, "business_info": 0.01}, PRICES, BOOKING),  # unweighed
    ("okay and uh, a beard trim?", {"book_appointment": 0.62, "business_info": 0.19},          # another topic
     format_tool_call("business_info", {"topic": "hours", "service": "beard trim"}), BOOKING),
    ("and a beard trim on monday?", {"book_appointment": 0.62, "business_info": 0.19},         # a detail added
     format_tool_call("business_info", {"topic": "prices", "day": "monday", "service": "beard trim"}),
     format_tool_call("book_appointment", {"day": "monday", "service": "beard trim"})),
])
def test_the_model_answers_its_own_way_unless_the_question_before_is_asked_again(said, names, forced, own):
    engine = _Torn(names, own=own, forced=forced)
    turn = _agent(engine).respond(said)
    assert turn.tool_calls == [] and turn.reply == ASKING


def test_after_a_call_that_changed_something_the_model_answers_its_own_way():
    engine = _Torn({"book_appointment": 0.62, "cancel_appointment": 0.19}, own=BOOKING,
                   forced=format_tool_call("cancel_appointment", {"name": "Ana Lima"}))
    agent = _agent(engine, ("cancel_appointment", {"name": "Ana Lima"}))
    turn = agent.respond("and a beard trim?")
    assert turn.tool_calls == [] and turn.reply == ASKING and engine.written[0] == ""


def test_the_question_before_is_one_call_that_was_answered():
    asked = [{"role": "user", "content": "How much is a haircut?"},
             {"role": "assistant", "content": PRICES},
             tool_message("business_info", {"ok": True, "price": "$15"}),
             {"role": "assistant", "content": "That is $15."},
             {"role": "user", "content": "and a blow dry?"}]
    assert question_before(asked) == ("business_info", {"topic": "prices", "service": "beard trim"})
    refused = asked[:2] + [tool_message("business_info", {"ok": False, "error": "We don't offer that."})] + asked[3:]
    assert question_before(refused) is None
    spoken = asked[:1] + [{"role": "assistant", "content": "What service?"}] + asked[4:]
    assert question_before(spoken) is None
    assert question_before(asked[:1]) is None


SMALL_TALK = "I'm sorry, I can't help with that."


@pytest.mark.parametrize("topic, answer", [("services", "beard trim"), ("prices", "$15")])
def test_a_question_of_a_service_offered_is_answered_by_a_call(topic, answer):
    engine = _Torn({}, own=SMALL_TALK, forced=format_tool_call("business_info", {"topic": topic,
                                                                                "service": "beard trim"}),
                   call_share=0.4)
    agent = _agent(engine)
    agent.messages = []
    turn = agent.respond("do you guys do beard trims?")
    assert [(c.name, c.arguments["service"]) for c in turn.tool_calls] == [("business_info", "beard trim")]
    assert answer in str(turn.tool_calls[0].result)


@pytest.mark.parametrize("said, forced", [
    ("I loved my beard trim, thanks.", PRICES),                                          # not a question
    ("do you guys do manicures?", PRICES.replace("beard trim", "manicures")),            # no service offered
    ("do you guys do beard trims?", format_tool_call("transfer_to_human", {})),           # a call without it
])
def test_the_model_answers_other_questions_its_own_way(said, forced):
    engine = _Torn({}, own=SMALL_TALK, forced=forced, call_share=0.4)
    agent = _agent(engine)
    agent.messages = []
    turn = agent.respond(said)
    assert turn.tool_calls == [] and turn.reply == SMALL_TALK


@pytest.mark.parametrize("said, names, tool", [
    ("great, what was the price again?", {"check_availability": 0.75, "business_info": 0.16}, "business_info"),
    ("great, what was the price again.", {"check_availability": 0.75, "business_info": 0.16}, "check_availability"),
    ("great, what was the price again?", {"check_availability": 0.97, "business_info": 0.01}, "check_availability"),
])
def test_a_question_that_names_a_topic_calls_the_tool_of_that_topic_the_model_weighed(said, names, tool):
    # "great, what was the price again?", after a booking, checked the free times of the booking's day
    engine = _Torn(names, own=format_tool_call("check_availability", {"day": "monday"}),
                   forced=format_tool_call("business_info", {"topic": "prices"}))
    agent = _agent(engine, ("book_appointment", {"name": "Ana Lima", "day": "monday", "time": "10:00",
                                                 "service": "beard trim"}))
    agent.messages[0]["content"] = "Can I get a beard trim on Monday at 10? I'm Ana Lima."
    turn = agent.respond(said)
    assert [c.name for c in turn.tool_calls] == [tool]


TRANSFER = format_tool_call("transfer_to_human", {})


def test_a_turn_that_names_what_a_tool_without_details_does_calls_it_when_the_model_would():
    # "Connect me to a real person." drew "I'm sorry, I can't help with that." (a call 0.25-0.48 of the model's
    # probability, the transfer 0.78-0.96 of a call's); the transfer's description: "Hand the call to a person ..."
    engine = _Torn({"transfer_to_human": 0.9}, own=SMALL_TALK, forced=TRANSFER, call_share=0.3)
    agent = _agent(engine)
    agent.messages = []
    turn = agent.respond("Connect me to a real person.")
    assert [(c.name, c.result["action"]) for c in turn.tool_calls] == [("transfer_to_human", "transfer_to_human")]
    assert engine.written[0] == TOOL_CALL_OPEN + '{"name":"transfer_to_human'


@pytest.mark.parametrize("said, share, call_share", [
    ("I need help.", 0.9, 0.3),                          # names nothing the transfer does
    ("is this a real person?", 0.01, 0.3),               # a person, but a call would not be the transfer
    ("Connect me to a real person.", 0.5, 0.3),          # the model not sure of the transfer
])
def test_the_model_answers_in_words_unless_it_would_call_the_tool_the_turn_names(said, share, call_share):
    engine = _Torn({"transfer_to_human": share, "business_info": 0.9 - share}, own=SMALL_TALK, forced=TRANSFER,
                   call_share=call_share)
    agent = _agent(engine)
    agent.messages = []
    turn = agent.respond(said)
    assert turn.tool_calls == [] and turn.reply == SMALL_TALK


class _MadeUp(_Torn):
    """_Torn whose reply with no call allowed (after a made-up call) is SMALL_TALK."""

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
    agent = _agent(engine)
    agent.messages = []
    said = "how much for a beard trim and a haircut together?"
    turn = agent.respond(said, first=agent.draft(said) if draft else None)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("business_info", {"topic": "prices", "service": "beard trim"})]
    assert turn.reply == "That is $15."


@pytest.mark.parametrize("said, names, forced", [
    ("how much for a beard trim and a haircut together?", {"check_availability": 0.44, "business_info": 0.02},
     PRICES),                                                                             # the next not weighed
    ("can you order me a pizza?", {"check_availability": 0.44, "business_info": 0.25},
     format_tool_call("business_info", {"topic": "prices"})),                             # it holds nothing said
])
def test_a_call_made_up_whole_is_answered_in_words_unless_the_next_tool_holds_what_was_said(said, names, forced):
    engine = _MadeUp(names, own=MADE_UP, forced=forced)
    agent = _agent(engine)
    agent.messages = []
    turn = agent.respond(said)
    assert turn.tool_calls == [] and turn.reply == SMALL_TALK


HOURS = format_tool_call("business_info", {"topic": "hours", "day": "tuesday"})
# (the test tokenizer writes check_availability, cancel_appointment and current_datetime with one first token:
# the booking is the tool here that takes a time and begins with its own)
BOOKING_AT = format_tool_call("book_appointment", {"name": "Ana Lima", "day": "tuesday", "time": "14:30",
                                                   "service": "haircut"})


def _asked_the_hours(engine):
    agent = _agent(engine, ("business_info", {"topic": "hours", "day": "tuesday"}))
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
    engine = _Torn(names, own=HOURS, forced=BOOKING_AT)
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
    engine = _Torn(names, own=own, forced=BOOKING_AT)
    turn = _asked_the_hours(engine).respond(said)
    assert [c.name for c in turn.tool_calls] == ["business_info"]


BOOKING_TUESDAY = format_tool_call("book_appointment", {"name": "Ana Lima", "day": "tuesday", "service": "haircut"})


@pytest.mark.parametrize("draft", [False, True])
def test_the_last_look_up_again_gives_way_to_the_next_tool_that_holds_what_was_said(draft):
    # at a dental clinic, after Thursday's opening hours, "the morning", "9" and "Paula Reyes" each read them again
    engine = _Torn({"business_info": 0.97, "book_appointment": 0.001}, own=HOURS, forced=BOOKING_TUESDAY)
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
    engine = _Torn({"business_info": 0.97, "book_appointment": 0.001}, own=HOURS, forced=BOOKING_TUESDAY)
    turn = _asked_the_hours(engine).respond(said)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("business_info", {"topic": "hours", "day": "tuesday"})]


def test_the_last_look_up_again_stands_when_the_next_tool_takes_a_detail_only_the_agent_said():
    # "that one's fine" after the opening hours: a booking weighed at 0.001 took the closing time of another day
    closing = format_tool_call("book_appointment", {"name": "Ana Lima", "day": "tuesday", "time": "18:00",
                                                    "service": "haircut"})
    engine = _Torn({"business_info": 0.97, "book_appointment": 0.001}, own=HOURS, forced=closing)
    turn = _asked_the_hours(engine).respond("that one's fine")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("business_info", {"topic": "hours", "day": "tuesday"})]


def _offered(engine):
    check = ("check_availability", {"day": "tuesday", "time": "14:30"})
    agent = _agent(engine, check)
    agent.messages[0]["content"] = "Is 2:30 on tuesday free for a haircut?"
    agent.messages[-1]["content"] = "Yes, Tuesday at 2:30 PM is free. Would you like me to book it?"
    return agent


def test_a_name_alone_after_an_offer_makes_the_call_the_model_weighs_though_it_hardly_weighs_one():
    # "Greg Olsen" (a bike shop) and "Rita Gomez" (an optician) after "Would you like me to book it?": a call 0.13
    # and 0.11 of the model's probability, the booking 0.57 and 0.86 of a call's; they heard "I'm sorry, I can't
    # help with that."
    engine = _Torn({"book_appointment": 0.6, "business_info": 0.1}, own=SMALL_TALK, forced=BOOKING_AT, call_share=0.13)
    turn = _offered(engine).respond("Ana Lima")
    assert [(c.name, c.arguments["name"]) for c in turn.tool_calls] == [("book_appointment", "Ana Lima")]


@pytest.mark.parametrize("said, call_share", [
    ("Ana Lima, and thanks for being so quick.", 0.13),   # more than the name: the model's own answer
    ("Ana Lima", 0.03),                                    # a call the model does not weigh
])
def test_a_call_the_model_hardly_weighs_is_made_only_for_a_turn_that_is_its_detail_alone(said, call_share):
    engine = _Torn({"book_appointment": 0.6, "business_info": 0.1}, own=SMALL_TALK, forced=BOOKING_AT,
                   call_share=call_share)
    turn = _offered(engine).respond(said)
    assert turn.tool_calls == [] and turn.reply == SMALL_TALK


BOOKING_FRIDAY = {"name": "Ana Lima", "day": "friday", "service": "haircut"}


def _asked(engine, call: dict, missing: list[str], question: str):
    """An agent that asked the caller for `missing[0]`: its call `call` (a booking) lacked `missing`."""
    agent = _agent(engine)
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
    engine = _Torn({"book_appointment": 0.99}, own=own, forced=own)
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
    engine = _Torn({"book_appointment": 0.99}, own=own, forced=own)
    if asked:
        agent = _asked(engine, BOOKING_FRIDAY, ["time"], "What time on Friday works for you?")
        turn = agent.respond("sorry, saturday")
    else:
        agent = _agent(engine)
        turn = agent.respond("I'm Ana Lima, I'd like a haircut on saturday")
    assert turn.tool_calls == [] and turn.reply == ASKING


@pytest.mark.parametrize("said, tool", [
    ("perfect, put me down for that", "check_availability"),   # the booking asked again: its free times
    ("actually, just cancel it", "cancel_appointment"),        # the words name the cancellation
])
def test_an_answer_to_a_question_continues_the_request_unless_it_names_another(said, tool):
    # asked "What time today works for you?" for a blow dry, "Perfect, put me down for that." cancelled (0.82 of a
    # call's probability, the booking 0.14)
    cancelled = format_tool_call("cancel_appointment", {"name": "Ana Lima"})
    engine = _Torn({"cancel_appointment": 0.82, "book_appointment": 0.14}, own=cancelled,
                   forced=format_tool_call("book_appointment", BOOKING_FRIDAY))
    agent = _asked(engine, BOOKING_FRIDAY, ["time"], "What time on Friday works for you?")
    turn = agent.respond(said)
    assert [c.name for c in turn.tool_calls] == [tool]
