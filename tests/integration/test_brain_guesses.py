"""The embedded brain's guesses, verified: what the drafter studies at start saves passes and changes no word.
The real model, agent, tools and grammar, as in test_brain."""
import pytest

from app.agent.profile import load_profile
from app.training.recipe import study
from llm.drafter import Drafter
from tests.integration.test_brain import BIKE_SHOP, agent_for, calls

pytestmark = pytest.mark.slow


def test_guesses_from_the_studied_dialogues_save_passes_not_words(brain):
    """At start the drafter studies the dialogues the brain was adapted on, written for the business
    (app.training.recipe.study): a first call's reply and tool call are guessed from them, verified, and come out
    word for word as without them, in fewer passes. The bike shop's, a profile the adapter never saw."""
    words = "Hi, I'd like to book a tune-up tomorrow at 3 pm. My name is Dana Okafor."
    kept = brain.drafter
    try:
        brain.drafter = Drafter()
        plain = agent_for(brain, BIKE_SHOP).respond(words)
        brain.drafter = Drafter()
        study(brain, load_profile(BIKE_SHOP), dialogues=300)
        guessed = agent_for(brain, BIKE_SHOP).respond(words)
    finally:
        brain.drafter = kept
    assert calls(guessed) == calls(plain) and guessed.reply == plain.reply
    assert calls(plain)[0][0] == "book_appointment" and "Dana" in plain.reply
    assert guessed.passes <= 0.8 * plain.passes, (guessed.passes, plain.passes)


def test_a_name_guessed_from_a_remembered_reply_is_meant_as_the_model_wrote_it(brain):
    """The drafter remembers each reply it wrote; the next caller with the same words has their call guessed from
    it, token for token, the name included. Its tokens the grammar forced (the rest of a name it holds to the
    caller's words) were read as the model's choice: 0.0096 and 0.0015 of its probability, the name dropped as
    unmeant, and the second caller was asked "Can I have your name, please?"."""
    words = "book me a haircut wednesday at two please, Paulo Santos"
    kept = brain.drafter
    try:
        brain.drafter = Drafter()
        first = agent_for(brain).respond(words)
        again = agent_for(brain).respond(words)
    finally:
        brain.drafter = kept
    assert calls(first)[0][0] == "book_appointment" and calls(again) == calls(first), again.reply
    assert again.passes < first.passes
