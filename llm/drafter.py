"""Guesses of the next tokens, for block decoding to verify in one pass (llm.blockdiff.block_reply).

A guess costs nothing to be wrong about: the sampler keeps only the tokens the model itself would have chosen,
so the reply is the same with or without a drafter, in fewer passes when the guesses are good. The guesses are
prompt lookup: what followed the earlier occurrence of the longest suffix of the prompt and the reply so far (at
least two tokens, compared up to 32; the latest of equals), as many tokens as that suffix is long, at most the
pass's draft length; then the same over the engine's earlier generations (`Drafter.remember`). A reply repeats
the caller's name, the tool result's date and time, the system prompt's address: the longer the words it is
repeating, the further ahead it is likely to go on repeating them.

NOTE: a guessed row is not free on a CPU (a pass over 9 rows cost ~1.8x one over 1 here). Over 13 turns of three
`parley chat` scripts, interleaved 4 times on 2 threads (2026-12-03), the same replies took 12.8 s of LLM time
with 8 guesses whenever the last two tokens matched, 12.7 s with 4, and 11.5 s (0.89x) guessing as many tokens
as matched, in as many passes as with 8 (283 against 284).

NOTE: the held-out split (`parley eval --dialogues 60 --threads 2`, one process, 2026-12-03) went from 1.96 to 3.76
tokens a pass and 755 to 560 ms of LLM a turn (median; replies 452 to 280 ms) when the engine's earlier
generations were searched too (3.67 and 618 ms comparing 8 tokens, not up to 32), the same calls and replies:
its 60 dialogues share their templates, as a front desk's calls share their replies.
"""


class Drafter:
    """Prompt lookup, over the prompt and reply so far and then over the engine's earlier generations (`remember`):
    a front desk's replies repeat across calls ("You're all set, ...", a tool call's keys), and a guess is verified
    like any other, so a guess from another call never changes what this one writes."""

    def __init__(self, lookup: int = 2, memory: int = 64, reach: int = 32):
        self.lookup = lookup    # the shortest suffix that makes a guess
        self.memory = memory    # earlier generations searched, the latest first
        self.reach = reach      # the longest suffix compared: of two matches, the longer says more alike
        self._remembered: list[list[int]] = []

    def remember(self, ids: list[int]) -> None:
        """Keep a finished generation (with the end of its prompt before it, where a reply's start is matched)
        for later guesses. The list is replaced, not changed: a propose() on another thread reads the old one."""
        self._remembered = (self._remembered + [list(ids)])[-self.memory:]

    def forget(self) -> None:
        self._remembered = []

    def propose(self, ids: list[int], k: int) -> list[int]:
        """Up to k guessed tokens after ids: what followed the earlier occurrence of its longest suffix (of at
        least `lookup` and at most `reach` tokens; the latest of equals), as many tokens as that suffix is long,
        at most k; in ids itself first, then in the remembered generations, the latest first (a longer match
        wins)."""
        end = len(ids) - 1
        if k <= 0 or end < self.lookup:
            return []
        reach = max(k, self.reach)
        best, at = _longest_match(ids, end - 1, ids, reach)
        source = ids
        for earlier in reversed(self._remembered):
            if best == reach:
                break
            n, i = _longest_match(earlier, len(earlier) - 2, ids, reach)
            if n > best:
                best, at, source = n, i, earlier
        return source[at + 1:at + 1 + min(best, k)] if best >= self.lookup else []


def _longest_match(seq: list[int], last: int, ids: list[int], k: int) -> tuple[int, int]:
    """The longest match (at most k tokens) of a suffix of ids ending in seq at or before position `last` (the
    latest of equals): (its length, where it ends in seq)."""
    end = len(ids) - 1
    best, at = 0, -1
    for i in range(last, -1, -1):  # i: an earlier copy of the last token, latest first
        if seq[i] != ids[end]:
            continue
        n = 1
        while n < k and n <= end and i - n >= 0 and seq[i - n] == ids[end - n]:
            n += 1
        if n > best:
            best, at = n, i
            if best == k:
                break
    return best, at
