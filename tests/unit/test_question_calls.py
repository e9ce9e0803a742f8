"""Questions answered by a call the model weighed but would not make.

A question that names only another value of the question before it asks that question again
(app.agent.weighed.Weighed.followed_up): "okay and uh, a beard trim?" after "how much is a haircut?" was answered
is the beard trim's price. The adapted brain took it for a booking (book_appointment with 0.62 of its probability on
the tool's name, business_info 0.19) and asked "What day would you like to come in?".

A question that names a service the business offers is answered by a call (Weighed.asked_of_a_service): "do you
do fillings?" drew "I'm sorry, I can't help with that." (0.39 of the model's probability on a call).

A turn that names what a tool taking no details does is answered by it when the model would call that tool
(Weighed.named_tool): "Connect me to a real person." is the transfer."""
import pytest

from app.agent.history import question_before
from app.agent.protocol import TOOL_CALL_OPEN, format_tool_call, tool_message
from tests.unit.torn import ASKING, PRICES, SMALL_TALK, Torn, agent_after


BOOKING = format_tool_call("book_appointment", {"service": "beard trim"})


def test_a_question_naming_another_service_asks_the_question_before_again():
    engine = Torn({"book_appointment": 0.62, "business_info": 0.19}, own=BOOKING, forced=PRICES)
    turn = agent_after(engine).respond("okay and uh, a beard trim?")
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
    engine = Torn(names, own=own, forced=forced)
    turn = agent_after(engine).respond(said)
    assert turn.tool_calls == [] and turn.reply == ASKING


def test_after_a_call_that_changed_something_the_model_answers_its_own_way():
    engine = Torn({"book_appointment": 0.62, "cancel_appointment": 0.19}, own=BOOKING,
                   forced=format_tool_call("cancel_appointment", {"name": "Ana Lima"}))
    agent = agent_after(engine, ("cancel_appointment", {"name": "Ana Lima"}))
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


@pytest.mark.parametrize("topic, answer", [("services", "beard trim"), ("prices", "$15")])
def test_a_question_of_a_service_offered_is_answered_by_a_call(topic, answer):
    engine = Torn({}, own=SMALL_TALK, forced=format_tool_call("business_info", {"topic": topic,
                                                                                "service": "beard trim"}),
                   call_share=0.4)
    agent = agent_after(engine)
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
    engine = Torn({}, own=SMALL_TALK, forced=forced, call_share=0.4)
    agent = agent_after(engine)
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
    engine = Torn(names, own=format_tool_call("check_availability", {"day": "monday"}),
                   forced=format_tool_call("business_info", {"topic": "prices"}))
    agent = agent_after(engine, ("book_appointment", {"name": "Ana Lima", "day": "monday", "time": "10:00",
                                                 "service": "beard trim"}))
    agent.messages[0]["content"] = "Can I get a beard trim on Monday at 10? I'm Ana Lima."
    turn = agent.respond(said)
    assert [c.name for c in turn.tool_calls] == [tool]


TRANSFER = format_tool_call("transfer_to_human", {})


def test_a_turn_that_names_what_a_tool_without_details_does_calls_it_when_the_model_would():
    # "Connect me to a real person." drew "I'm sorry, I can't help with that." (a call 0.25-0.48 of the model's
    # probability, the transfer 0.78-0.96 of a call's); the transfer's description: "Hand the call to a person ..."
    engine = Torn({"transfer_to_human": 0.9}, own=SMALL_TALK, forced=TRANSFER, call_share=0.3)
    agent = agent_after(engine)
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
    engine = Torn({"transfer_to_human": share, "business_info": 0.9 - share}, own=SMALL_TALK, forced=TRANSFER,
                   call_share=call_share)
    agent = agent_after(engine)
    agent.messages = []
    turn = agent.respond(said)
    assert turn.tool_calls == [] and turn.reply == SMALL_TALK
