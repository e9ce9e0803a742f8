"""Conversations held at once by one process (a server's calls): each keeps its KV cache between its turns, when
the engine keeps as many idle caches as there are conversations (`Engine.keep_caches`, which `Services` sizes to
the calls' sessions going on)."""
import asyncio

import pytest

import llm.passes
from app.agent.options import agent_options_for
from app.agent.profile import load_profile
from app.agent.prompt import system_prompt
from app.agent.store import open_store
from app.agent.tools import Toolbox
from app.pipeline.services import Services
from app.pipeline.session import Session
from app.settings import SMOLLM2_ADAPTER_DIR
from llm.caches import KEPT_CACHES

pytestmark = pytest.mark.slow

QUESTIONS = ("How much is a haircut?", "What time do you open on Saturday?", "What's your address?",
             "Do you do beard trims?", "Are you open on Sunday?")


def reread_first_turns(brain, services, monkeypatch, agents=None) -> list[bool]:
    """Conversations (one a question), turn by turn in turns: for each, whether its second turn read its first
    again."""
    agents = agents or [services.new_agent() for _ in QUESTIONS[:3]]
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


def _services(brain) -> Services:
    profile = load_profile(None)
    toolbox = Toolbox(profile, open_store(":memory:"))
    return Services(None, None, brain, toolbox, system_prompt(profile, toolbox, brain.chat_style),
                    agent_options=agent_options_for(SMOLLM2_ADAPTER_DIR))


async def _ignore(event) -> None:
    pass


def test_every_conversation_a_server_holds_keeps_its_kv_cache(brain, monkeypatch):
    services = _services(brain)
    try:
        brain.forget_earlier()
        brain.keep_caches(3)
        assert reread_first_turns(brain, services, monkeypatch) == [False] * 3
        brain.forget_earlier()
        brain.keep_caches(2)   # fewer than the conversations: one's cache goes to another
        assert any(reread_first_turns(brain, services, monkeypatch))
    finally:
        brain.keep_caches(4)


def test_the_kv_caches_kept_follow_the_calls_going_on(brain, monkeypatch):
    """Five calls at once, more than the engine's default of 4 kept caches: their sessions make the brain keep one
    for each (Services.conversation_started), and none of their second turns reads its first again; once they hang
    up, the brain keeps its default again."""
    services = _services(brain)
    brain.forget_earlier()
    calls = [Session(services, output_rate_hz=16_000, send_event=_ignore) for _ in QUESTIONS]
    try:
        assert len(calls) > KEPT_CACHES
        assert reread_first_turns(brain, services, monkeypatch, [c.agent for c in calls]) == [False] * len(calls)
    finally:
        for call in calls:
            asyncio.run(call.close())
    assert brain._caches.keep == KEPT_CACHES
