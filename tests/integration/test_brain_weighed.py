"""The embedded brain's calls that the model weighed but would not make, made when the caller's words ask for
them (app.agent.weighed): follow-ups, questions of a service or a topic, a tool named by what it does, a call made
up whole, a turn that completes the call weighed, and an answer with thanks after it. The real model, agent, tools
and grammar, as in test_brain."""
import pytest

from tests.integration.test_brain import BIKE_SHOP, DENTIST, EYE_CARE, agent_for, calls

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("profile, question, follow_up, service, price", [
    (None, "how much is a blow dry?", "what about hair coloring?", "hair coloring", "$90"),
    (None, "Um, hi, how much is a men's haircut?", "okay and uh, a beard trim?", "beard trim", "$15"),
    (BIKE_SHOP, "how much is a tune-up?", "and a flat fix?", "flat tire repair", "$15"),
])
def test_a_follow_up_asks_the_last_question_about_another_service(brain, profile, question, follow_up, service,
                                                                   price):
    # the last two were taken for bookings: "What day would you like to come in?" (Weighed.followed_up)
    agent = agent_for(brain, profile)
    agent.respond(question)
    turn = agent.respond(follow_up)
    assert calls(turn) == [("business_info", {"topic": "prices", "service": service})], turn.reply
    assert price in turn.reply


@pytest.mark.parametrize("profile, question, service", [
    (DENTIST, "do you do fillings?", "filling"),
    (None, "is hair coloring something you do?", "hair coloring"),
])
def test_a_question_of_a_service_offered_is_answered_from_the_profile(brain, profile, question, service):
    # both drew "I'm sorry, I can't help with that." (Weighed.asked_of_a_service); the model writes the
    # services or the price, with the service
    turn = agent_for(brain, profile).respond(question)
    assert [(name, args.get("service")) for name, args in calls(turn)] == [("business_info", service)], turn.reply
    assert service in turn.reply and "sorry" not in turn.reply


@pytest.mark.parametrize("profile", [EYE_CARE, DENTIST])
def test_a_caller_who_asks_for_a_person_is_transferred(brain, profile):
    # "Connect me to a real person." drew "I'm sorry, I can't help with that." (a call 0.25-0.41 of the model's
    # probability, the transfer 0.95 of a call's: Weighed.named_tool); "I need help" names nothing a tool does
    assert calls(agent_for(brain, profile).respond("Connect me to a real person.")) == [("transfer_to_human", {})]
    assert calls(agent_for(brain, profile).respond("I need help")) == []


@pytest.mark.parametrize("goodbye", ["ok great, thanks so much, talk to you later", "cool, have a nice evening"])
def test_a_goodbye_in_other_words_is_not_handed_to_the_staff_nor_read_the_hours_again(brain, goodbye):
    # after Friday's hours, the model handed "talk to you later" to the staff (a call 0.56 of its probability, the
    # transfer 0.17 of a call's), no other call holding anything said, and read Friday's hours again for "have a
    # nice evening"; a request for a person, as unsure of its tool (0.61 of a call's), is written with 0.54 of the
    # model's probability (GivenWay.instead_of_made_up)
    agent = agent_for(brain)
    agent.respond("what time do you close on friday?")
    turn = agent.respond(goodbye)
    assert calls(turn) == [] and "transfer" not in turn.reply.lower() and "PM" not in turn.reply, turn.reply
    turn = agent_for(brain).respond("can I just talk to somebody who works there please")
    assert calls(turn) == [("transfer_to_human", {})], turn.reply


def test_a_name_given_when_asked_for_books_though_the_words_sound_like_a_cancellation(brain):
    # asked the name for a son's haircut, "great, put him down. it's under Carlos Mendoza" cancelled under that
    # name (0.81 of a call's probability, the booking 0.017): the caller heard there was no such appointment
    agent = agent_for(brain)
    agent.respond("my son needs a haircut, do you have saturday at 11?")
    turn = agent.respond("great, put him down. it's under Carlos Mendoza")
    assert [(name, args["name"]) for name, args in calls(turn)] == [("book_appointment", "Carlos Mendoza")], turn.reply
    assert "booked" in turn.reply


def test_a_call_made_up_whole_gives_way_to_the_one_the_model_weighed_next(brain):
    # the model checked the free times of a day and a time nobody named (check_availability 0.44), a call made up
    # whole, and the caller heard "I'm sorry, I can't help with that." (GivenWay.instead_of_made_up)
    turn = agent_for(brain).respond("how much for a haircut and a beard trim together?")
    assert [name for name, _ in calls(turn)] == ["business_info"] and "$" in turn.reply, turn.reply


def test_a_day_written_as_a_name_gives_way_to_the_tool_that_takes_the_day(brain):
    # the model looked up the appointments of "saturday" (list_appointments 0.93), a name the rule drops as a
    # day, and the caller heard "I'm sorry, I can't help with that."; Saturday's free times had 0.045
    turn = agent_for(brain).respond("what's the latest appointment on saturday?")
    assert calls(turn) == [("check_availability", {"day": "saturday"})], turn.reply


def test_a_service_named_turned_around_is_the_service_priced(brain):
    # "a haircut for a kid" was priced as the haircut, $35 (app.agent.words.phrase_spans)
    turn = agent_for(brain).respond("how much is a haircut for a kid?")
    assert calls(turn) == [("business_info", {"topic": "prices", "service": "kids haircut"})], turn.reply
    assert "$20" in turn.reply


def test_the_price_asked_for_after_a_booking_is_read_not_the_free_times(brain):
    # the free times of the booking's day were read out (Weighed.named_topic)
    agent = agent_for(brain)
    assert agent.respond("can I get a blow dry tomorrow at 10? name's Priya Shah").tool_calls[0].result["ok"]
    turn = agent.respond("great, what was the price again?")
    assert [(name, args["topic"]) for name, args in calls(turn)] == [("business_info", "prices")], turn.reply
    assert "$30" in turn.reply


def test_a_service_chosen_after_its_price_is_booked_not_priced(brain):
    agent = agent_for(brain)
    agent.respond("how much is a beard trim?")
    turn = agent.respond("ok a haircut then please")
    assert "business_info" not in [name for name, _ in calls(turn)] and "?" in turn.reply, turn.reply


@pytest.mark.parametrize("profile, history, last, booking", [
    (None, ["Hi, could I get a blow dry on Thursday at eleven in the morning?", "Can I have your name, please?"],
     "Priya Natarajan, thanks.", {"name": "Priya Natarajan", "day": "thursday", "time": "11:00",
                                  "service": "blow dry"}),
    (BIKE_SHOP, ["Hello, I need a flat tire repair tomorrow at 2 pm.", "Can I have your name, please?"],
     "Kenji Watanabe, thanks.", {"name": "Kenji Watanabe", "day": "tomorrow", "time": "14:00",
                                 "service": "flat tire repair"}),
])
def test_an_answer_with_thanks_after_it_is_acted_on(brain, profile, history, last, booking):
    """Asked for a detail, a caller who gives it and thanks the agent in the same breath was told "You're
    welcome!" by the adapter (training holds "thanks" out as a tail); the turn without its courtesy is acted on
    (Weighed._called_part)."""
    agent = agent_for(brain, profile)
    agent.messages = [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(history)]
    turn = agent.respond(last)
    assert calls(turn) == [("book_appointment", booking)], (turn.reply, agent.messages)


def test_a_name_given_after_a_free_time_is_offered_books_it(brain):
    """"Noah Williams" after "Yes, Wednesday ... at 10:30 AM is free. Would you like me to book it?" drew "I'm sorry, I
    can't help with that.": the model gave a call 0.22 of its probability and the booking 0.82 of a call's
    (Weighed.completed). The booking holds the time offered, the service asked about and the name."""
    agent = agent_for(brain, EYE_CARE)
    checked = agent.respond("I need an eye exam, do you have anything wednesday morning?")
    assert [name for name, _ in calls(checked)] == ["check_availability"], checked.reply
    offered = agent.respond("10:30 works")
    assert calls(offered) == [("check_availability", {"day": "wednesday", "time": "10:30"})], offered.reply
    turn = agent.respond("Noah Williams")
    assert calls(turn) == [("book_appointment", {"name": "Noah Williams", "day": "wednesday", "time": "10:30",
                                                 "service": "eye exam"})], (turn.reply, agent.messages)
    assert "all set" in turn.reply.lower() or "booked" in turn.reply.lower()


def test_a_name_given_where_the_service_was_never_said_is_asked_for_the_service(brain):
    """The same offer answered with a name, the service never said: the booking the model weighs lacks the service,
    and the caller is asked for it, not told "I'm sorry, I can't help with that."."""
    agent = agent_for(brain, EYE_CARE)
    offered = agent.respond("can I swing by tomorrow around 2?")
    assert [name for name, _ in calls(offered)] == ["check_availability"], offered.reply
    turn = agent.respond("Carmen Diaz")
    assert turn.tool_calls == [] and "can't help" not in turn.reply and turn.reply.endswith("?"), turn.reply
    held = [m["content"] for m in agent.messages if m["role"] == "assistant" and "book_appointment" in m["content"]]
    assert held and "Carmen Diaz" in held[-1], agent.messages
