"""Guesses of the next tokens, for block decoding to verify in one pass (llm.blockdiff.block_reply).

A guess costs nothing to be wrong about: the sampler keeps only the tokens the model itself would have chosen,
so the reply is the same with or without a drafter, in fewer passes when the guesses are good. The guesses are
prompt lookup: what followed the latest earlier occurrence of the longest suffix of the prompt and the reply so
far (at least two tokens), as many tokens as that suffix is long. A reply repeats the caller's name, the tool
result's date and time, the system prompt's address: the longer the words it is repeating, the further ahead
it is likely to go on repeating them.

NOTE: a guessed row is not free on a CPU (a pass over 9 rows cost ~1.8x one over 1 here). Over 13 turns of three
`parley chat` scripts, interleaved 4 times on 2 threads (2026-12-03), the same replies took 12.8 s of LLM time
with 8 guesses whenever the last two tokens matched, 12.7 s with 4, and 11.5 s (0.89x) guessing as many tokens
as matched, in as many passes as with 8 (283 against 284).
"""


class Drafter:
    def __init__(self, lookup: int = 2):
        self.lookup = lookup    # the shortest suffix that makes a guess

    def propose(self, ids: list[int], k: int) -> list[int]:
        """Up to k guessed tokens after ids: what followed the latest earlier occurrence of its longest suffix
        (of at least `lookup` and at most k tokens), as many tokens as that suffix is long."""
        end = len(ids) - 1
        if k <= 0 or end < self.lookup:
            return []
        best, at = 0, -1
        for i in range(end - 1, -1, -1):  # i: an earlier copy of the last token, latest first
            if ids[i] != ids[end]:
                continue
            n = 1
            while n < k and i - n >= 0 and ids[i - n] == ids[end - n]:
                n += 1
            if n > best:
                best, at = n, i
                if best == k:
                    break
        return ids[at + 1:at + 1 + best] if best >= self.lookup else []
