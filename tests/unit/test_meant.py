"""A value the grammar forced on the model is not the model's (app.agent.meant): the shares of its probability each
token of a call's free values had, and the agent asking for a detail instead of running a call the grammar made."""
import json

import pytest

from app.agent.meant import DOUBTED_SHARE, PROBED_SHARE, UNMEANT_SHARE, free_shares
from app.agent.protocol import format_tool_call, tool_message
from app.agent.said import missing_result
from app.agent.schemas import SCHEMAS
from tests.scripted_agent import scripted_agent


class _Chars:
    """A tokenizer of one token per character, for generations that say how much each token's grammar allowed."""
    @staticmethod
    def decode(ids, skip_special_tokens=True):
        return "".join(map(chr, ids))


def _forced(text: str, value: str, share: float = 0.004, key: str = "service") -> list[float]:
    """Per character of `text`, the share the grammar allowed: `share` on the first character of `value`'s
    first appearance after `"<key>":`, 1.0 elsewhere (the model's own choice)."""
    at = text.index(f'"{key}":"{value}"') + len(f'"{key}":"')
    return [share if i == at else 1.0 for i in range(len(text))]


def _forcing(engine, call: str, value: str, key: str = "service", share: float = 0.004) -> None:
    """Make the fake `engine` say its shares per character (`_Chars`), `value` forced where it writes `call`
    (`_forced`, after `key`, with `share`) and every other token the model's own choice."""
    engine.tokenizer = _Chars()
    generate = engine.generate

    def with_shares(messages, **kwargs):
        gen = generate(messages, **kwargs)
        gen.ids = [ord(c) for c in gen.text]
        gen.shares = _forced(gen.text, value, share, key) if gen.text == call else [1.0] * len(gen.text)
        return gen
    engine.generate = with_shares


def _below(text: str, shares: list[float]) -> list[set[str]]:
    least = free_shares(text, list(range(len(text))), shares, SCHEMAS)
    return [{k for k, share in call.items() if share < UNMEANT_SHARE} for call in least]


def test_the_free_values_the_grammar_forced_are_found():
    """A value (a name, a service: no values of its own to choose from) one of whose tokens had almost none of
    the model's probability on what the grammar allowed was not the model's; a day or a time (the model chose
    among values said) and the call's keys are not judged so."""
    call = format_tool_call("book_appointment", {"name": "Victor", "day": "wednesday", "time": "10:30",
                                                 "service": "please"})
    text = f"{call}Sure."
    assert free_shares(text, list(range(len(text))), _forced(text, "please"), SCHEMAS) == [
        {"name": 1.0, "service": 0.004}]
    assert _below(text, _forced(text, "please")) == [{"service"}]
    assert _below(text, _forced(text, "please", share=0.5)) == [set()]
    day = [0.004 if i == text.index("wednesday") else 1.0 for i in range(len(text))]
    assert _below(text, day) == [set()]
    key = [0.004 if i == text.index('"arguments"') + 2 else 1.0 for i in range(len(text))]
    assert _below(text, key) == [set()]
    # the token that closes the value counts: the model wanted to go on ("hair" + "cut" where only "hair" was said)
    closing = [0.004 if i == text.index('please"') + len("please") else 1.0 for i in range(len(text))]
    assert _below(text, closing) == [{"service"}]
    two = text + format_tool_call("list_appointments", {"name": "Victor"})
    assert _below(two, _forced(two, "please")) == [{"service"}, set()]


def test_a_service_the_grammar_forced_on_the_model_is_asked_for_not_booked():
    """"I want to make a booking Wednesday at 10:30 a.m. please": a model that meant a service nobody named
    could only write one of the caller's words; "please" is no service the caller asked for: the call lacks the
    service, and the agent asks for it ("We don't offer please." was the reply before)."""
    booking = format_tool_call("book_appointment", {"name": "Victor", "day": "wednesday", "time": "10:30",
                                                    "service": "please"})
    question = "Sure, what service would you like?"
    agent, engine = scripted_agent([booking, question])
    _forcing(engine, booking, "please")
    turn = agent.respond("Hi. This is Victor calling. I want to make a booking Wednesday at 10:30 a.m. please.")
    assert turn.tool_calls == [] and turn.reply == question
    assert agent.messages[1]["content"] == format_tool_call("book_appointment", {
        "name": "Victor", "day": "wednesday", "time": "10:30"})  # held: the service left out
    assert json.loads(agent.messages[2]["content"])["result"]["missing"] == ["service"]
    assert agent.toolbox.store.for_name("Victor") == []


@pytest.mark.parametrize("share", [UNMEANT_SHARE, (UNMEANT_SHARE + DOUBTED_SHARE) / 2, DOUBTED_SHARE])
def test_a_value_the_business_refuses_is_refused_only_where_the_model_meant_it(share):
    """"and my wife wants one too, same time, Leila Haddad": the model wrote the service "wife-wants" with 0.02005
    of its probability, and the caller heard "We don't offer wife-wants". A value the toolbox refuses is dropped
    below DOUBTED_SHARE, and the caller is asked for the service; the model's own "eyelash extensions" (0.72-0.99
    in the held-out calls) is refused. A value the business takes is held to UNMEANT_SHARE alone: a name the
    model wrote with as little is booked."""
    wife = format_tool_call("book_appointment", {"name": "Leila Haddad", "day": "wednesday", "time": "10:30",
                                                 "service": "wife-wants"})
    question, sorry = "Sure, what service would you like?", "I'm sorry, we don't offer that."
    agent, engine = scripted_agent([wife, question if share < DOUBTED_SHARE else sorry])
    _forcing(engine, wife, "wife-wants", share=share)
    turn = agent.respond("and my wife wants one too, Wednesday at 10:30, Leila Haddad")
    if share < DOUBTED_SHARE:
        assert turn.tool_calls == [] and turn.reply == question
        assert json.loads(agent.messages[2]["content"])["result"]["missing"] == ["service"]
    else:
        assert [c.result["ok"] for c in turn.tool_calls] == [False] and turn.reply == sorry
        assert "We don't offer wife-wants" in turn.tool_calls[0].result["error"]

    booking = format_tool_call("book_appointment", {"name": "Leila Haddad", "day": "wednesday", "time": "10:30",
                                                    "service": "haircut"})
    agent, engine = scripted_agent([booking, "You're all set."])
    _forcing(engine, booking, "Leila Haddad", key="name", share=share)
    agent.respond("a haircut Wednesday at 10:30, Leila Haddad")
    assert [a.service for a in agent.toolbox.store.for_name("Leila Haddad")] == ["haircut"]


@pytest.mark.parametrize("answer, name, share, booked", [
    ("They'll, they'll knock em' your arm.", "PM", 0.09, False),     # misheard; "PM" from before the question
    ("They'll, they'll knock em' your arm.", "PM", PROBED_SHARE, True),   # the model means it: its call
    ("It's Bill Nakamura.", "Bill Nakamura", 0.09, True),            # the answer says it
])
def test_a_detail_asked_for_is_not_taken_from_before_the_question_unless_the_model_means_it(answer, name, share,
                                                                                          booked):
    """Asked for a name after "a beard trim Thursday at 5.45 PM", the answer misheard, the model wrote the name
    "PM" with 0.09 of its probability and the trim was booked under it. A detail the agent asked for and the answer
    does not say is the call's only where a probe would have taken it (PROBED_SHARE)."""
    trim = {"day": "thursday", "time": "17:45", "service": "beard trim"}
    call = format_tool_call("book_appointment", {"name": name} | trim)
    question = "Can I have your name, please?"
    agent, engine = scripted_agent([call, "You're all set." if booked else question])
    _forcing(engine, call, name, key="name", share=share)
    agent.messages = [{"role": "user", "content": "Could I get a beard trim Thursday at 5.45 PM?"},
                      {"role": "assistant", "content": format_tool_call("book_appointment", trim)},
                      tool_message("book_appointment", missing_result(["name"])),
                      {"role": "assistant", "content": question}]
    turn = agent.respond(answer)
    assert [a.service for a in agent.toolbox.store.for_name(name)] == (["beard trim"] if booked else [])
    if not booked:
        assert turn.tool_calls == [] and turn.reply == question


def test_the_only_service_the_caller_named_is_theirs_even_where_the_grammar_forced_it():
    """Asked for a name, "Sean, thanks." after "a beard trim": a model that meant another service could only
    write the one the caller named, and that one is what they asked for. With two named in the call, it may not
    be: the agent asks."""
    def booked(earlier: str) -> list:
        booking = format_tool_call("book_appointment", {"name": "Sean", "day": "wednesday", "time": "10:30",
                                                        "service": "beard trim"})
        agent, engine = scripted_agent([booking, "You're all set, Sean."])
        _forcing(engine, booking, "beard trim")
        agent.messages = [{"role": "user", "content": earlier},
                          {"role": "assistant", "content": "Can I have your name, please?"}]
        agent.respond("Sean, thanks.")
        return [a.service for a in agent.toolbox.store.for_name("Sean")]

    assert booked("A beard trim on Wednesday at 10:30.") == ["beard trim"]
    assert booked("A haircut, or a beard trim? Wednesday at 10:30.") == []


@pytest.mark.parametrize("name", ["beard trim", "beard"])
def test_a_value_the_model_meant_for_one_detail_is_not_said_for_another(name):
    """"do you guys do beard trims?": the model wrote the beard trim as the service, its own choice, and as the
    name, forced by the grammar (0.0185 of its probability); kept as the only service named, the booking went on
    under the name "beard trim". One value is one detail: the agent asks for the rest. So is a part of one: at an
    optician, "contact lens fitting" was booked under the name "contact lens" (0.013)."""
    booking = format_tool_call("book_appointment", {"name": name, "service": "beard trim"})
    agent, engine = scripted_agent([booking, "What day would you like to come in?"])
    _forcing(engine, booking, name, key="name")
    turn = agent.respond("do you guys do beard trims?")
    assert turn.tool_calls == [] and turn.reply == "What day would you like to come in?"
    assert agent.messages[1]["content"] == format_tool_call("book_appointment", {"service": "beard trim"})
    assert json.loads(agent.messages[2]["content"])["result"]["missing"] == ["day", "time", "name"]


def test_a_made_up_call_of_the_tool_the_caller_names_asks_for_what_it_lacks():
    """"just cancel it please", the name never said: the grammar let the model write only the caller's words, it
    wrote "I think" (0.004 of its probability), and the call, made up whole, was answered "I'm sorry, I can't help
    with that." The caller named the cancellation (a word of its description no other tool's holds): they are asked
    for the name. A made-up call of a tool the words do not name is still answered in words."""
    cancel = format_tool_call("cancel_appointment", {"name": "I think"})
    question = "Sure, what name is the appointment under?"
    agent, engine = scripted_agent([cancel, question])
    _forcing(engine, cancel, "I think", key="name")
    agent.messages = [{"role": "user", "content": "hi, I think I have an appointment, can you check?"},
                      {"role": "assistant", "content": "I'm sorry, I can't help with that."}]
    turn = agent.respond("just cancel it please")
    assert turn.tool_calls == [] and turn.reply == question
    assert agent.messages[-3]["content"] == format_tool_call("cancel_appointment", {})
    assert json.loads(agent.messages[-2]["content"])["result"]["missing"] == ["name"]

    agent, engine = scripted_agent([cancel, "I'm sorry, I can't help with that."])
    _forcing(engine, cancel, "I think", key="name")
    agent.messages = [{"role": "user", "content": "hi, I think I have an appointment"},
                      {"role": "assistant", "content": "I'm sorry, I can't help with that."}]
    turn = agent.respond("what do you think of it?")
    assert turn.tool_calls == [] and [m["role"] for m in agent.messages[2:]] == ["user", "assistant"]
