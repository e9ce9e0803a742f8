"""A required detail the model left out of a call, while the conversation said a value it may take, is probed
(app.agent.meant.CallCheck._probed): the model writes the call again up to that argument, and the value it writes is
the call's when the model meant it (PROBED_SHARE of its probability on what the grammar allowed)."""
import json
import re
from datetime import datetime
from types import SimpleNamespace

from app.agent.loop import Agent
from app.agent.meant import PROBED_SHARE
from app.agent.probes import probe_prefix, probed_value
from app.agent.options import AgentOptions
from app.agent.profile import load_profile
from app.agent.protocol import format_tool_call
from app.agent.schemas import SCHEMAS
from app.agent.store import open_store
from app.agent.tools import Toolbox
from tests.checkpoints import train_bpe
from tests.fakes import SharedGeneration

PROFILE = load_profile(None)
BOOK = next(s for s in SCHEMAS if s["name"] == "book_appointment")
END = "<|end|>"
TOKENIZER = train_bpe([END])


class _Scripted:
    """A block engine whose replies are scripted and whose probes (a generation given the `written` start of a
    call, as Engine.generate takes it) write `values[key]` with the share given on each of its tokens. Whatever
    it writes, the agent's reply grammar must take."""
    chat_style = "parley"

    def __init__(self, replies: list[str], values: dict[str, tuple[str, float]] | None = None):
        self.tokenizer = TOKENIZER
        self.special = SimpleNamespace(stop=(TOKENIZER.token_to_id(END),))
        self.model = SimpleNamespace(args=SimpleNamespace(vocab_size=TOKENIZER.get_vocab_size(),
                                                          max_sequence_length=4096))
        self.replies, self.values, self.probed = list(replies), values or {}, []

    def generate(self, messages, *, matcher=None, written=(), on_block=None, **kwargs):
        encode = lambda text: self.tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
        if written:
            key = re.search(r'"(\w+)$', self.tokenizer.decode(list(written))).group(1)
            self.probed.append(key)
            value, share = self.values[key]
            new = encode(f'":"{value}"')
            ids, shares = list(written) + new, [1.0] * len(written) + [share] * len(new)
        else:
            ids = encode(self.replies.pop(0))
            new, shares = ids, [1.0] * len(ids)
        assert matcher is None or all(matcher.accept(t) for t in new), self.tokenizer.decode(ids)
        text = self.tokenizer.decode(ids)
        if on_block is not None:
            on_block(text)
        return SharedGeneration(text, ids, shares)


HISTORY = [{"role": "user", "content": "Hello, my name is Ingrid. I'd like to come in for a haircut."},
           {"role": "assistant", "content": "What day would you like to come in?"},
           {"role": "user", "content": "Friday works."},
           {"role": "assistant", "content": "What time on Friday works for you?"}]
NAMELESS = format_tool_call("book_appointment", {"day": "friday", "time": "14:00", "service": "haircut"})


def _agent(engine):
    toolbox = Toolbox(PROFILE, open_store(":memory:"), now=lambda: datetime(2026, 3, 2, 9, 0))  # a Monday
    agent = Agent(engine, toolbox, "system", AgentOptions(cache="block", block_length=4))
    agent.messages = [dict(m) for m in HISTORY]
    return agent


def test_a_name_given_turns_ago_that_the_model_meant_is_booked():
    engine = _Scripted([NAMELESS, "You're all set, Ingrid."], {"name": ("Ingrid", 0.9)})
    agent = _agent(engine)
    turn = agent.respond("Two in the afternoon, please.")
    assert engine.probed == ["name"]
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("book_appointment", {
        "day": "friday", "time": "14:00", "service": "haircut", "name": "Ingrid"})]
    assert [(r.service, r.start) for r in agent.toolbox.store.for_name("Ingrid")] == [
        ("haircut", datetime(2026, 3, 6, 14, 0))]
    assert json.loads(agent.messages[-3]["content"][len("<tool_call>"):-len("</tool_call>")])["arguments"][
        "name"] == "Ingrid"  # the history holds the call as it ran


def test_a_probed_value_the_model_did_not_mean_is_asked_for():
    engine = _Scripted([NAMELESS, "Can I have your name, please?"], {"name": ("Ingrid", PROBED_SHARE / 2)})
    agent = _agent(engine)
    turn = agent.respond("Two in the afternoon, please.")
    assert engine.probed == ["name"]
    assert turn.tool_calls == [] and turn.reply == "Can I have your name, please?"
    assert json.loads(agent.messages[-2]["content"])["result"]["missing"] == ["name"]


def test_a_word_the_call_holds_as_another_detail_is_no_probed_value():
    """With the day in the call before it, asked for the name the adapter copied the day (0.69 of its
    probability): "You're all set, Friday"."""
    engine = _Scripted([format_tool_call("book_appointment", {"day": "friday", "time": "17:30",
                                                               "service": "blow dry"}),
                        "Can I have your name, please?"], {"name": ("friday", 0.69)})
    agent = _agent(engine)
    agent.messages = [{"role": "user", "content": "hi, I want to come in for a blow dry"},
                      {"role": "assistant", "content": "What day would you like to come in?"},
                      {"role": "user", "content": "um friday"},
                      {"role": "assistant", "content": "What time on Friday works for you?"}]
    turn = agent.respond("could I do like, five thirty?")
    assert engine.probed == ["name"] and turn.tool_calls == []
    assert json.loads(agent.messages[-2]["content"])["result"]["missing"] == ["name"]


def test_a_service_the_business_does_not_offer_is_probed_and_refused_before_the_name_is_asked():
    """The model left "eyebrow waxing" out of the call; probed, it is the call's, and the call, which still lacks
    the name, returns the toolbox's refusal of the service (Agent._lacking_result): not a question for the service
    the caller just named, nor for the name of a booking that cannot be made."""
    engine = _Scripted([format_tool_call("book_appointment", {"day": "wednesday", "time": "10:00"}),
                        "I'm sorry. We don't offer eyebrow waxing."],
                       {"service": ("eyebrow waxing", 0.9), "name": ("Lars", 0.1)})
    agent = _agent(engine)
    agent.messages = [{"role": "user", "content": "Hi, Lars here. Do you do massages?"},
                      {"role": "assistant", "content": "I'm sorry, I can't help with that."}]
    turn = agent.respond("ok what about eyebrow waxing, can I book that for Wednesday at 10")
    assert engine.probed == ["service", "name"] and turn.tool_calls == []
    assert agent.messages[-3]["content"] == format_tool_call("book_appointment", {
        "day": "wednesday", "time": "10:00", "service": "eyebrow waxing"})
    result = json.loads(agent.messages[-2]["content"])["result"]
    assert result["ok"] is False and result["error"].startswith("We don't offer eyebrow waxing.")
    assert turn.reply == "I'm sorry. We don't offer eyebrow waxing."


def test_a_detail_nobody_gave_is_not_probed():
    """No time was said (but the clock a tool gave): the call lacks it, and the model is not made to write one."""
    engine = _Scripted([format_tool_call("book_appointment", {"name": "Ingrid", "day": "friday",
                                                               "service": "haircut"}),
                        "What time on Friday works for you?"])
    agent = _agent(engine)
    agent.messages = agent.messages[:2] + [
        {"role": "assistant", "content": format_tool_call("current_datetime", {})},
        {"role": "tool", "content": '{"name":"current_datetime","result":{"ok":true,"time":"3:52 AM"}}'},
        {"role": "assistant", "content": "It's 3:52 AM."}]
    turn = agent.respond("Friday works.")
    assert engine.probed == [] and turn.tool_calls == []
    assert json.loads(agent.messages[-2]["content"])["result"]["missing"] == ["time"]


def test_a_drafted_probe_is_the_turns():
    """The draft probes and previews the booking; the turn books it without probing again."""
    engine = _Scripted([NAMELESS, "You're all set, Ingrid."], {"name": ("Ingrid", 0.9)})
    agent = _agent(engine)
    draft = agent.draft("Two in the afternoon, please.")
    assert agent.toolbox.store.for_name("Ingrid") == []  # a draft changes nothing
    turn = agent.respond("Two in the afternoon, please.", first=draft)
    assert engine.probed == ["name"]
    assert [c.arguments["name"] for c in turn.tool_calls] == ["Ingrid"] and turn.reply == "You're all set, Ingrid."
    assert len(agent.toolbox.store.for_name("Ingrid")) == 1


def test_a_probe_writes_the_call_in_the_grammars_order_up_to_the_key():
    assert probe_prefix("book_appointment", {"day": "friday", "time": "14:00", "service": "haircut"}, "name",
                        BOOK) == '<tool_call>{"name":"book_appointment","arguments":{"name'
    assert probe_prefix("book_appointment", {"service": "haircut", "name": "Ana", "day": "friday"}, "time",
                        BOOK) == '<tool_call>{"name":"book_appointment","arguments":{"name":"Ana","day":"friday","time'


def test_a_probed_value_and_its_least_share():
    text = '{"name":"Ana Lí","day'
    start = len('{"name')
    offsets = list(range(len(text)))  # a token a character
    shares = [1.0] * len(text)
    shares[text.index("L")] = 0.3
    assert probed_value(text, start, offsets, shares) == ("Ana Lí", 0.3)
    shares[text.index("day") - 3] = 0.2   # the value's closing quote: the model wanted to go on
    assert probed_value(text, start, offsets, shares) == ("Ana Lí", 0.2)
    assert probed_value('{"name": "Ana"}', start, list(range(15)), [1.0] * 15) == ("Ana", 1.0)  # ": " allowed
    assert probed_value('{"name":"An', start, list(range(11)), [1.0] * 11) == (None, 0.0)  # not closed


def test_a_service_named_by_an_alias_is_called_by_its_name():
    toolbox = Toolbox(PROFILE, open_store(":memory:"))
    assert toolbox.canonical({"service": "shave", "day": "friday"}) == {"service": "beard trim", "day": "friday"}
    assert toolbox.canonical({"service": "facial"}) == {"service": "facial"}  # no service of ours: as written
    assert toolbox.canonical({"day": "friday"}) == {"day": "friday"}
