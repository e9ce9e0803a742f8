"""The drafter that block decoding verifies: prompt lookup."""
from llm.drafter import Drafter


def test_prompt_lookup_continues_the_longest_earlier_match_as_far_as_it_matched():
    drafter = Drafter()
    # "5 6" occurred twice before: the latest continuation, two tokens of it for a match of two
    assert drafter.propose([5, 6, 1, 1, 5, 6, 7, 8, 9, 0, 5, 6], 3) == [7, 8]
    # "0 5 6" matches three tokens at the first occurrence: three guessed, at most k
    assert drafter.propose([0, 5, 6, 7, 8, 9, 4, 5, 6, 3, 0, 5, 6], 8) == [7, 8, 9]
    assert drafter.propose([0, 5, 6, 7, 8, 9, 4, 5, 6, 3, 0, 5, 6], 2) == [3, 0]  # k 2: the latest match of two
    assert drafter.propose([4, 4, 4], 8) == [4]
    assert drafter.propose([5, 6, 1, 2], 3) == []          # "1 2" never occurred before: no guess
    assert drafter.propose([1, 2, 3, 2], 3) == []          # one token matched: too little to guess on
    assert drafter.propose([5, 6, 5, 6], 0) == [] and drafter.propose([5], 3) == []
