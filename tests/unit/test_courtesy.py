"""A caller's last few words do not turn an answer into small talk (app.agent.weighed.Weighed._called_part): when the
model would open its reply to the turn without them with a call, and would not to the whole turn, the reply opens
with the call it writes for those words. "Joaquin Santos, thanks." after "Can I have your name?" drew "You're
welcome!" from the adapted brain; "Joaquin Santos." a booking."""
from datetime import datetime
from types import SimpleNamespace

import pytest
import torch

from app.agent.loop import Agent
from app.agent.options import AgentOptions
from app.agent.profile import load_profile
from app.agent.protocol import TOOL_CALL_OPEN, format_tool_call
from app.agent.courtesy import courtesy_parts, leading_parts
from app.agent.store import open_store
from app.agent.tools import Toolbox
from tests.checkpoints import train_bpe
from tests.fakes import SharedGeneration

END = "<|end|>"
TOKENIZER = train_bpe([END])
OPENING = TOKENIZER.encode(TOOL_CALL_OPEN, add_special_tokens=False).ids
BOOKING = format_tool_call("book_appointment", {"name": "Joaquin Santos", "day": "friday", "time": "14:00",
                                                "service": "haircut"})
HISTORY = [{"role": "user", "content": "Hi, a haircut on Friday at two in the afternoon, please."},
           {"role": "assistant", "content": "Can I have your name, please?"}]


@pytest.mark.parametrize("text, parts", [
    ("Joaquin Santos, thanks.", ["Joaquin Santos."]),
    ("Jacob Nguyen, thanks, thanks.", ["Jacob Nguyen, thanks.", "Jacob Nguyen."]),
    ("Fine, 5:15, thanks so much.", ["Fine, 5:15."]),
    ("What are you? Thanks.", ["What are you?"]),
    ("Thanks so much.", []),                                   # one clause: nothing to leave out
    ("Friday, and could you tell me what time you close on Saturdays?", []),  # more than a few words
])
def test_leading_parts_leave_out_a_few_last_words(text, parts):
    assert leading_parts(text, 4) == parts


@pytest.mark.parametrize("text, parts", [
    ("Hello, Kenji, thanks.", ["Hello, Kenji.", "Hello.", "Kenji, thanks.", "Kenji."]),
    ("Joaquin Santos, thanks.", ["Joaquin Santos."]),       # the first clause is the answer, not a greeting
    ("What are you? Thanks.", ["What are you?"]),
    ("Yeah, it's Kenji Sato, thank you so much.", ["Yeah, it's Kenji Sato.", "it's Kenji Sato, thank you so much."]),
    ("Yeah, it's Kenji Sato, thanks.", ["Yeah, it's Kenji Sato.", "Yeah.", "it's Kenji Sato, thanks.",
                                        "it's Kenji Sato."]),
])
def test_courtesy_parts_also_leave_out_a_short_first_clause(text, parts):
    assert courtesy_parts(text, 4) == parts


def test_an_answer_between_a_greeting_and_a_courtesy_is_acted_on():
    """"Hello, Kenji, thanks." (asked for a name) drew "You're welcome!" at an optician: the greeting stayed in
    every part that left out the thanks."""
    engine = _Minded(calls_for={"Kenji."}, call=BOOKING.replace("Joaquin Santos", "Kenji"))
    turn = _agent(engine).respond("Hello, Kenji, thanks.")
    assert engine.asked == ["Hello, Kenji, thanks.", "Hello, Kenji.", "Hello.", "Kenji, thanks.", "Kenji."]
    assert [(c.name, c.arguments["name"]) for c in turn.tool_calls] == [("book_appointment", "Kenji")]


class _Minded:
    """A block engine that opens its reply with a call to the caller's words in `calls_for` (its first token's
    probability on a call's first token), and otherwise says `small_talk`; given a call's opening as `written`,
    it writes `call`. It records the caller's last words each generation and each probability was asked for."""
    chat_style = "parley"

    def __init__(self, calls_for: set[str], call: str = BOOKING, small_talk: str = "You're welcome!"):
        self.tokenizer = TOKENIZER
        self.special = SimpleNamespace(stop=(TOKENIZER.token_to_id(END),))
        self.model = SimpleNamespace(args=SimpleNamespace(vocab_size=TOKENIZER.get_vocab_size(),
                                                          max_sequence_length=4096))
        self.calls_for, self.call, self.small_talk = calls_for, call, small_talk
        self.asked, self.generated = [], []

    def first_token_probabilities(self, messages):
        self.asked.append(messages[-1]["content"])
        probabilities = torch.full((TOKENIZER.get_vocab_size(),), 0.001)
        probabilities[OPENING[0]] = 0.99 if messages[-1]["content"] in self.calls_for else 0.01
        return probabilities

    def generate(self, messages, *, matcher=None, written=(), on_block=None, **kwargs):
        encode = lambda text: self.tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
        share = 1.0
        if messages[-1]["role"] == "tool":
            text = "You're all set, Joaquin Santos."
        elif written and list(written) != OPENING:  # a probe of a detail the call left out: not meant
            probe = self.tokenizer.decode(list(written))
            value = {"day": '":"friday"', "time": '":"14:00"'}.get(probe.rsplit('"', 1)[-1], "")  # a name: none
            text, share = probe + value, 0.01
        elif written:
            text = self.call
        else:
            text = self.call if messages[-1]["content"] in self.calls_for else self.small_talk
        self.generated.append((messages[-1]["content"], list(written)))
        ids = encode(text)
        assert list(written) == ids[:len(written)]
        assert matcher is None or all(matcher.accept(t) for t in ids[len(written):]), text  # written: taken
        if on_block is not None:
            on_block(text)
        return SharedGeneration(text, ids, [1.0] * len(written) + [share] * (len(ids) - len(written)))


def _agent(engine):
    toolbox = Toolbox(load_profile(None), open_store(":memory:"), now=lambda: datetime(2026, 3, 2, 9, 0))
    agent = Agent(engine, toolbox, "system", AgentOptions(cache="block", block_length=4))
    agent.messages = [dict(m) for m in HISTORY]
    return agent


def test_an_answer_with_a_courtesy_after_it_is_acted_on():
    engine = _Minded(calls_for={"Joaquin Santos."})
    agent = _agent(engine)
    turn = agent.respond("Joaquin Santos, thanks.")
    assert engine.asked == ["Joaquin Santos, thanks.", "Joaquin Santos."]
    assert engine.generated[0] == ("Joaquin Santos.", OPENING)  # the call written for the words it acts on
    assert [(c.name, c.arguments["name"]) for c in turn.tool_calls] == [("book_appointment", "Joaquin Santos")]
    assert [r.service for r in agent.toolbox.store.for_name("Joaquin Santos")] == ["haircut"]
    assert agent.messages[2] == {"role": "user", "content": "Joaquin Santos, thanks."}  # the history: as said
    assert turn.reply == "You're all set, Joaquin Santos."


def test_small_talk_stays_small_talk_when_no_part_of_it_asks_for_a_call():
    engine = _Minded(calls_for=set())
    agent = _agent(engine)
    turn = agent.respond("Okay, perfect, thanks.")
    assert engine.asked == ["Okay, perfect, thanks.", "Okay, perfect.", "Okay.", "perfect, thanks.", "perfect."]
    assert turn.tool_calls == [] and turn.reply == "You're welcome!"
    assert engine.generated == [("Okay, perfect, thanks.", [])]


def test_a_call_the_model_makes_for_the_whole_turn_is_its_own():
    engine = _Minded(calls_for={"Joaquin Santos, thanks.", "Joaquin Santos."})
    turn = _agent(engine).respond("Joaquin Santos, thanks.")
    assert engine.asked == ["Joaquin Santos, thanks."]            # no part asked: the model calls on its own
    assert engine.generated[0] == ("Joaquin Santos, thanks.", [])
    assert [c.name for c in turn.tool_calls] == ["book_appointment"]


def test_a_turn_of_one_clause_costs_no_pass():
    engine = _Minded(calls_for=set())
    assert _agent(engine).respond("Thanks so much.").reply == "You're welcome!"
    assert engine.asked == []



def test_a_call_that_lacks_details_is_not_made_for_a_part():
    """The model's call for "Okay, perfect." lacks the day, the time and the name: "Okay, perfect, thanks." is
    answered the model's own way, and the history holds no call."""
    engine = _Minded(calls_for={"Okay, perfect."}, call=format_tool_call("book_appointment", {"service": "haircut"}))
    agent = _agent(engine)
    turn = agent.respond("Okay, perfect, thanks.")
    replies = [said for said, written in engine.generated if written in ([], OPENING)]  # the probes' left out
    assert replies == ["Okay, perfect.", "Okay, perfect, thanks."]
    assert turn.tool_calls == [] and turn.reply == "You're welcome!"
    assert agent.messages[2:] == [{"role": "user", "content": "Okay, perfect, thanks."},
                                  {"role": "assistant", "content": "You're welcome!"}]


def test_a_call_that_holds_nothing_the_part_said_is_not_made_for_it():
    """"Okay so, Awesome." drew the bike shop's hours from the adapter: a complete call, resting on no detail."""
    engine = _Minded(calls_for={"Okay so, Awesome."}, call=format_tool_call("business_info", {"topic": "hours"}))
    agent = _agent(engine)
    turn = agent.respond("Okay so, Awesome, thank you.")
    assert [said for said, _ in engine.generated] == ["Okay so, Awesome.", "Okay so, Awesome, thank you."]
    assert turn.tool_calls == [] and turn.reply == "You're welcome!"
