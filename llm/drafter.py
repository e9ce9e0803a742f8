"""Guesses of the next tokens, for block decoding to verify in one pass (llm.blockdiff.block_reply).

A guess costs nothing to be wrong about: the sampler keeps only the tokens the model itself would have chosen,
so the reply is the same with or without a drafter, in fewer passes when the guesses are good. The guesses are
prompt lookup: the continuation of the latest earlier occurrence of the last two tokens in the prompt and the
reply so far (a reply repeats the caller's name, the tool result's date and time, the system prompt's address).
"""


class Drafter:
    def __init__(self, lookup: int = 2):
        self.lookup = lookup    # prompt lookup matches this many last tokens

    def propose(self, ids: list[int], k: int) -> list[int]:
        """Up to k guessed tokens after ids: what followed the latest earlier occurrence of its last tokens."""
        n = self.lookup
        if k <= 0 or len(ids) <= n:
            return []
        key = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):  # latest occurrence first
            if ids[start:start + n] == key:
                return ids[start + n:start + n + k]
        return []
