"""Conversations held at once by one process (a server's calls): each keeps its KV cache between its turns, when
the engine keeps as many idle caches as there are conversations (`Engine.keep_caches`, which `Services.load` sizes
to the sessions a server admits)."""
import pytest

import llm.passes
from app.agent.options import agent_options_for
from app.agent.profile import load_profile
from app.agent.prompt import system_prompt
from app.agent.store import open_store
from app.agent.tools import Toolbox
from app.pipeline.services import Services
from app.settings import SMOLLM2_ADAPTER_DIR

pytestmark = pytest.mark.slow

QUESTIONS = ("How much is a haircut?", "What time do you open on Saturday?", "What's your address?")


def reread_first_turns(brain, services, monkeypatch) -> list[bool]:
    """Three conversations, turn by turn in turns: for each, whether its second turn read its first again."""
    agents = [services.new_agent() for _ in QUESTIONS]
    for agent, question in zip(agents, QUESTIONS):
        agent.respond(question)
    reread, forward = [], llm.passes.forward
    for agent in agents:
        asked = len(brain.prompt_ids(agent.prompt()[:2]))   # the system prompt and the caller's first words
        starts = []
        monkeypatch.setattr(llm.passes, "forward", lambda model, work, mask_id: (
            starts.extend(p.start for p, _ in work), forward(model, work, mask_id))[1])
        agent.respond("And is there parking?")
        monkeypatch.setattr(llm.passes, "forward", forward)
        reread.append(min(starts) < asked)
    return reread


def test_every_conversation_a_server_holds_keeps_its_kv_cache(brain, monkeypatch):
    profile = load_profile(None)
    toolbox = Toolbox(profile, open_store(":memory:"))
    services = Services(None, None, brain, toolbox, system_prompt(profile, toolbox, brain.chat_style),
                        agent_options=agent_options_for(SMOLLM2_ADAPTER_DIR))
    try:
        brain.forget_earlier()
        brain.keep_caches(3)
        assert reread_first_turns(brain, services, monkeypatch) == [False] * 3
        brain.forget_earlier()
        brain.keep_caches(2)   # fewer than the conversations: one's cache goes to another
        assert any(reread_first_turns(brain, services, monkeypatch))
    finally:
        brain.keep_caches(4)
