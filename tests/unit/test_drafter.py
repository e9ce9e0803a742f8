"""The drafter that block decoding verifies: prompt lookup."""
from llm.drafter import Drafter


def test_prompt_lookup_continues_the_longest_earlier_match_as_far_as_it_matched():
    drafter = Drafter()
    # "5 6" occurred twice before: the latest continuation, two tokens of it for a match of two
    assert drafter.propose([5, 6, 1, 1, 5, 6, 7, 8, 9, 0, 5, 6], 3) == [7, 8]
    # "0 5 6" matches three tokens at the first occurrence: three guessed, at most k
    assert drafter.propose([0, 5, 6, 7, 8, 9, 4, 5, 6, 3, 0, 5, 6], 8) == [7, 8, 9]
    assert drafter.propose([0, 5, 6, 7, 8, 9, 4, 5, 6, 3, 0, 5, 6], 2) == [7, 8]  # k 2: two of the longest match
    assert drafter.propose([4, 4, 4], 8) == [4]
    assert drafter.propose([5, 6, 1, 2], 3) == []          # "1 2" never occurred before: no guess
    assert drafter.propose([1, 2, 3, 2], 3) == []          # one token matched: too little to guess on
    assert drafter.propose([5, 6, 5, 6], 0) == [] and drafter.propose([5], 3) == []


def test_earlier_generations_are_searched_after_the_prompt():
    """A reply's start has no earlier copy in its own prompt on a call's first turn, but the engine's earlier
    generations (another call's) hold one: the header before it matches, and what followed is guessed."""
    drafter = Drafter()
    header = [90, 91, 92]
    assert drafter.propose([1, 2, 3] + header, 8) == []
    drafter.remember([70] + header + [10, 11, 12, 13, 14])   # an earlier reply, after the end of its prompt
    assert drafter.propose([1, 2, 3] + header, 8) == [10, 11, 12]   # matched 3 tokens: 3 guessed
    assert drafter.propose([70] + header, 8) == [10, 11, 12, 13]
    # the prompt's own match wins when it is as long; a longer remembered one wins over it
    assert drafter.propose(header + [40, 41, 5] + header, 8) == [40, 41, 5]
    assert drafter.propose(header + [40, 41, 70] + header, 8) == [10, 11, 12, 13]
    for n in range(100):                                     # the memory keeps the latest generations only
        drafter.remember([200 + n, 201 + n])
    assert drafter.propose([1, 2, 3] + header, 8) == [] and len(drafter._remembered) == drafter.memory
