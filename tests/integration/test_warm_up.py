"""What `Services.warm_up` leaves ready for the first turn: for a text conversation (`parley chat`, no speech
models) as for a call, the system prompt's KV cache."""
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


def test_a_text_conversation_warmed_up_as_a_call_is_pays_for_no_system_prompt_in_its_first_turn(brain, monkeypatch):
    """`parley chat` warms up as `parley serve` does: the system prompt's KV cache is computed before the first
    line, so the first turn's forwards start after it (a fresh `parley chat` prefilled ~250 tokens in its first
    turn: the development set's median turn 247 ms against ~380)."""
    brain.forget_earlier()
    profile = load_profile(None)
    toolbox = Toolbox(profile, open_store(":memory:"))
    services = Services(None, None, brain, toolbox, system_prompt(profile, toolbox, brain.chat_style),
                        agent_options=agent_options_for(SMOLLM2_ADAPTER_DIR))
    services.warm_up()
    starts, forward = [], llm.passes.forward
    monkeypatch.setattr(llm.passes, "forward", lambda model, work, mask_id: (
        starts.extend(p.start for p, _ in work), forward(model, work, mask_id))[1])
    made, new_cache = [], brain.model.new_cache
    monkeypatch.setattr(brain.model, "new_cache", lambda *a: (made.append(a), new_cache(*a))[1])
    turn = services.new_agent().respond("Hi, how much is a haircut?")
    # the system prompt's own tokens: its prompt ids end with the assistant's header, which no turn shares
    system = len(brain.prompt_ids([{"role": "system", "content": services.system_prompt}])) - len(brain.prompt_ids([]))
    assert turn.reply and min(starts) >= system
    assert not made   # the warm-up's cache, cut back to the system prompt: no new cache's pages to fault in
