"""The drafter that block decoding verifies: prompt lookup."""
from llm.drafter import Drafter


def test_prompt_lookup_takes_the_latest_occurrence_of_the_last_two_tokens():
    drafter = Drafter()
    # "5 6" occurred twice before: the latest continuation (7 8 9) is guessed
    assert drafter.propose([5, 6, 1, 1, 5, 6, 7, 8, 9, 0, 5, 6], 3) == [7, 8, 9]
    assert drafter.propose([5, 6, 1, 1, 5, 6, 7, 8, 9, 0, 5, 6], 2) == [7, 8]
    assert drafter.propose([4, 4, 4], 8) == [4]
    assert drafter.propose([5, 6, 1, 2], 3) == []          # "1 2" never occurred before: no guess
    assert drafter.propose([5, 6, 5, 6], 0) == [] and drafter.propose([5], 3) == []
