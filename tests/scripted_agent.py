"""An agent of the real loop and toolbox (the shipped profile, an in-memory store, a fixed clock) on a fake model
that writes the given texts in turn, for tests of the agent's rules."""
from datetime import datetime

from app.agent.loop import Agent
from app.agent.options import AgentOptions
from app.agent.profile import load_profile
from app.agent.store import open_store
from app.agent.tools import Toolbox
from tests.fakes import FakeEngine


def scripted_agent(replies: list[str]) -> tuple[Agent, FakeEngine]:
    """(agent, its engine): the engine's n-th generation is replies[n] (the last one from then on)."""
    engine = FakeEngine(lambda messages: replies[min(len(engine.calls), len(replies)) - 1])
    toolbox = Toolbox(load_profile(None), open_store(":memory:"), now=lambda: datetime(2026, 3, 3, 9, 0))
    options = AgentOptions(cache="block", block_length=4, tool_grammar=False)
    return Agent(engine, toolbox, "system", options), engine
