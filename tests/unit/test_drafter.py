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


def test_studied_conversations_guess_what_most_of_them_go_on_with():
    """Before any reply of this run, the conversations the drafter studied (the dialogues the brain was adapted on)
    guess: after a suffix of 4, 8, 16 or 32 tokens, what follows it in a majority of its occurrences, as far as
    that majority agrees."""
    header = [90, 91, 92, 93]
    drafter = Drafter()
    assert drafter.propose([1, 2] + header, 8) == []
    drafter.study([[5] + header + [10, 11, 12, 13],
                   [6] + header + [10, 11, 12, 20, 21],
                   [7] + header + [10, 11, 30],
                   [8, 9, 1]])
    assert drafter.propose([1, 2] + header, 8) == [10, 11, 12]   # 3 of 3 agree on 10 11; 2 of 3 on 12
    assert drafter.propose([1, 2] + header, 2) == [10, 11]        # at most k
    assert drafter.propose(header + [10, 11, 12], 8) == []       # 13 or 20: no majority
    assert drafter.propose([3] + header[1:], 8) == []            # three tokens of a studied suffix: too short
    # a guess never runs into the next conversation
    assert drafter.propose([7] + header[1:] + [10, 11, 30], 8) == []
    # a match in the prompt or a remembered generation as long or longer wins
    assert drafter.propose(header + [40, 41] + header, 8) == [40, 41, 90, 91]
    drafter.remember([0, 1, 2] + header + [50, 51, 52, 53, 54, 55, 56])
    assert drafter.propose([1, 2] + header, 8) == [50, 51, 52, 53, 54, 55]
    drafter.forget()                                          # this run's generations go, the studied stay
    assert drafter.propose([1, 2] + header, 8) == [10, 11, 12]


def test_a_studied_suffix_is_compared_token_by_token(monkeypatch):
    """Windows are found by a hash of their tokens; a window that only shares the hash is no match."""
    import numpy as np

    import llm.drafter

    # every window hashes alike: only the comparison of their tokens tells them apart
    monkeypatch.setattr(llm.drafter, "_window_hashes", lambda tokens, n: np.zeros(max(0, len(tokens) - n + 1),
                                                                                 dtype=np.uint64))
    drafter = Drafter()
    drafter.study([[1, 2, 3, 4, 9], [5, 6, 7, 8, 10]])
    assert drafter.propose([0, 1, 2, 3, 4], 4) == [9]
    assert drafter.propose([0, 5, 6, 7, 8], 4) == [10]
    assert drafter.propose([0, 1, 2, 7, 8], 4) == []
