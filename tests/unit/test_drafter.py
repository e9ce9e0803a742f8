"""The left sampler's drafter: prompt lookup first, then the n-gram table of the training replies."""
import pytest

import llm
from llm.drafter import Drafter
from llm.tokenizer import CheckpointError
from tests.checkpoints import write_parley


def test_table_keeps_the_most_frequent_next_token_seen_often_enough():
    drafter = Drafter.build([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 4], [7, 8]], order=3, min_count=2)
    assert drafter.table[(2, 3)] == 4 and drafter.table[(3,)] == 4
    assert (7,) not in drafter.table                       # seen once: no guess
    assert drafter.propose([9, 1], 5) == [2, 3, 4]         # walked greedily until no context matches
    assert drafter.propose([9, 1], 2) == [2, 3] and drafter.propose([9, 1], 0) == []


def test_prompt_lookup_comes_first_and_takes_the_latest_occurrence():
    drafter = Drafter.build([[1, 2, 3, 4]] * 3, order=3)
    # "5 6" occurred twice before: the latest continuation (7 8 9) is guessed, not the table's
    assert drafter.propose([5, 6, 1, 1, 5, 6, 7, 8, 9, 0, 5, 6], 3) == [7, 8, 9]
    assert drafter.propose([5, 6, 1, 2], 3) == [3, 4]      # "1 2" never occurred before: the table
    assert Drafter().propose([4, 4, 4], 8) == [4]          # no table: lookup alone


def test_saved_table_loads_with_the_checkpoint(tmp_path):
    write_parley(tmp_path)
    assert llm.load(tmp_path).drafter.table == {}          # no drafter.json: prompt lookup only
    Drafter.build([[1, 2, 3, 4]] * 2).save(tmp_path)
    drafter = llm.load(tmp_path).drafter
    assert drafter.table[(1, 2, 3)] == 4 and drafter.propose([1, 2], 2) == [3, 4]
    (tmp_path / "drafter.json").write_text('{"order": 4, "ngrams": [[1, "x"]]', encoding="utf-8")
    with pytest.raises(CheckpointError, match="drafter.json: not a drafter table"):
        llm.load(tmp_path)


def test_the_shipped_drafter_guesses_most_of_a_held_out_reply():
    """A left pass commits the guesses the model agrees with and one token more: walked over the reference replies
    of held-out dialogues (the model's own choices, where it answers as trained), the shipped table must guess
    enough that a pass commits 5 tokens on average. The order-4 table it replaced committed 4.3, no table 1.5."""
    from app.agent.profile import load_profile
    from app.settings import FRONTDESK_LLM_DIR
    from app.training.dialogues import examples, generate
    from llm import chat

    engine = llm.load(FRONTDESK_LLM_DIR, device="cpu")
    end = engine.tokenizer.token_to_id(chat.END)
    profile = load_profile(None)
    tokens = passes = 0
    for messages, target in examples(generate(profile, "heldout", 40, seed=3), profile):
        context = engine.prompt_ids(messages)
        reply = engine.tokenizer.encode(target, add_special_tokens=False).ids + [end]
        i, passes = 1, passes + 1  # the prompt's pass commits the first token
        while i < len(reply):
            guess = engine.drafter.propose(context + reply[:i], 16)
            agreed = next((k for k, g in enumerate(guess) if i + k >= len(reply) or g != reply[i + k]), len(guess))
            i, passes = i + agreed + 1, passes + 1
        tokens += len(reply)
    assert tokens / passes >= 5.0
