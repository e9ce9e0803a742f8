"""A block engine double for the agent's weighing of calls (app.agent.weighed, app.agent.given_way.GivenWay):
it opens every reply with a call and gives each tool the share of a call's probability a test names, and an agent
after one answered question on it."""
from datetime import datetime
from types import SimpleNamespace

import torch

from app.agent.loop import Agent
from app.agent.options import AgentOptions
from app.agent.profile import load_profile
from app.agent.protocol import TOOL_CALL_OPEN, format_tool_call, tool_message
from app.agent.store import open_store
from app.agent.tools import Toolbox
from tests.checkpoints import train_bpe
from tests.fakes import SharedGeneration

END = "<|end|>"
TOKENIZER = train_bpe([END])
NAME_AT = TOKENIZER.encode(TOOL_CALL_OPEN + '{"name":"', add_special_tokens=False).ids
OPENING = TOKENIZER.encode(TOOL_CALL_OPEN, add_special_tokens=False).ids
ASKING = "What day would you like to come in?"
SMALL_TALK = "I'm sorry, I can't help with that."
PRICES = format_tool_call("business_info", {"topic": "prices", "service": "beard trim"})


def first_name_token(tool: str) -> int:
    return TOKENIZER.encode(TOOL_CALL_OPEN + '{"name":"' + tool, add_special_tokens=False).ids[len(NAME_AT)]


class Torn:
    """A block engine that opens every reply with a call; at the call's tool name it gives each tool of `names` its
    share. Free, it writes `own`; given a tool's name as written, `forced` (probed for a detail, nothing); after a
    tool's result, the price the result gave or, for a call that lacked details, ASKING. It records what each
    generation was given."""
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


def agent_after(engine, call=("business_info", {"topic": "prices", "service": "haircut"})):
    """An agent on `engine` whose caller asked "How much is a haircut?" and heard the answer of `call`."""
    toolbox = Toolbox(load_profile(None), open_store(":memory:"), now=lambda: datetime(2026, 3, 2, 9, 0))
    agent = Agent(engine, toolbox, "system", AgentOptions(cache="block", block_length=4))
    agent.messages = [{"role": "user", "content": "How much is a haircut?"},
                      {"role": "assistant", "content": format_tool_call(*call)},
                      tool_message(call[0], toolbox.call(*call)),
                      {"role": "assistant", "content": "That is $35."}]
    return agent
