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

Before any call of the run has been answered, the dialogues the brain was adapted on, written for the business
(`Drafter.study`; app.training.recipe.study at start, 1000 dialogues in ~3 s), stand in for the earlier
generations: after the last 32, 16, 8 or 4 tokens (the longest found, when it is longer than the match in the
prompt or the remembered generations), what follows them in most of their occurrences.

NOTE: 20 conversations of the development set (28 turns, a fresh drafter each as a fresh `parley chat` has, 2
threads, bf16 weights on a Xeon with AMX, 2026-12-06): 554 passes without the studied dialogues, 306 with them,
26.2 -> 17.2 s of LLM, the same replies word for word. Suffixes of 16 / 8 / 4 tokens: 310 passes; 8 / 6 / 4 / 3:
346; 16 / 8 / 4 / 2: 308; 64 / 32 / 16 / 8 / 4: 306. 100 / 300 / 1000 dialogues: 370 / 338 / 310 passes. Guessing
8 tokens whatever the length of the match: 298 passes in the same time; draft_length 12: 294, the same time.
"""


import numpy as np

# The suffix lengths looked up in the studied conversations (`Drafter.study`), the longest first.
STUDIED_SUFFIXES = (32, 16, 8, 4)
STUDIED_GUESS = 12  # the longest guess from the studied conversations
STUDIED_KEPT = 50_000  # guesses kept once worked out (then they are worked out again)


class Studied:
    """Conversations (token ids) indexed by their n-token windows, for each n of STUDIED_SUFFIXES: `after(ids, n)`
    is what follows the last n tokens of ids in a majority of their occurrences, as far as the majority agrees
    (at most STUDIED_GUESS tokens). Windows are found by a polynomial hash of their tokens (sorted, searched by
    bisection) and compared token by token, so a collision is no match."""

    def __init__(self, sequences: list[list[int]]):
        parts = [np.asarray(seq, dtype=np.int32) for seq in sequences if seq]
        # -1 ends each conversation: no window or guess runs across it
        self.tokens = np.concatenate([np.append(p, -1) for p in parts]) if parts else np.full(1, -1)
        self._sorted: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        ends = np.flatnonzero(self.tokens < 0)
        for n in STUDIED_SUFFIXES:
            last = np.arange(n - 1, len(self.tokens))          # window ends
            hashes = _window_hashes(self.tokens, n)
            # a window holding an end of conversation is none
            crossing = np.searchsorted(ends, last - n + 1) < np.searchsorted(ends, last, side="right")
            last, hashes = last[~crossing], hashes[~crossing]
            order = np.argsort(hashes, kind="stable")
            self._sorted[n] = (hashes[order], last[order].astype(np.int32))
        self._guesses: dict[tuple[int, ...], list[int]] = {}

    def after(self, ids: list[int], n: int) -> list[int]:
        if len(ids) < n:
            return []
        key = tuple(ids[-n:])
        known = self._guesses.get(key)
        if known is not None:
            return known
        hashes, last = self._sorted[n]
        h = _window_hashes(np.asarray(key, dtype=np.int32), n)[0]
        lo, hi = np.searchsorted(hashes, h), np.searchsorted(hashes, h, side="right")
        ends = last[lo:hi]
        window = self.tokens[ends[:, None] + np.arange(1 - n, 1)]
        ends = ends[(window == np.asarray(key)).all(axis=1)]
        guess: list[int] = []
        if len(ends):
            index = np.minimum(ends[:, None] + np.arange(1, STUDIED_GUESS + 1), len(self.tokens) - 1)
            guess = _agreed(self.tokens[index], len(ends))
        if len(self._guesses) >= STUDIED_KEPT:
            self._guesses = {}
        self._guesses[key] = guess
        return guess


def _window_hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """A 32-bit hash of each n-token window of tokens, by the window's last position (len(tokens) - n + 1 of
    them): a polynomial one modulo 2**64, its halves folded (the index's four tables take ~12 MB, not ~21)."""
    count = max(0, len(tokens) - n + 1)
    h = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            h = h * np.uint64(1_000_003) + tokens[j:j + count].astype(np.uint64)
    return ((h ^ (h >> np.uint64(32))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _agreed(afters: np.ndarray, occurrences: int) -> list[int]:
    """The tokens that follow in a majority of the occurrences (rows of afters, -1 past a conversation's end), as
    far as the majority agrees."""
    guess: list[int] = []
    held = afters
    for d in range(afters.shape[1]):
        column = held[:, d]
        column = column[column >= 0]
        if not len(column):
            break
        tokens, counts = np.unique(column, return_counts=True)
        best = int(counts.argmax())
        if 2 * counts[best] <= occurrences:
            break
        guess.append(int(tokens[best]))
        held = held[held[:, d] == tokens[best]]
    return guess


class Drafter:
    """Prompt lookup, over the prompt and reply so far and then over the engine's earlier generations (`remember`):
    a front desk's replies repeat across calls ("You're all set, ...", a tool call's keys), and a guess is verified
    like any other, so a guess from another call never changes what this one writes. Before any call has been
    answered, the conversations it `study`s (the dialogues the model was adapted on, written for this business)
    stand in for the earlier generations."""

    def __init__(self, lookup: int = 2, memory: int = 64, reach: int = 32):
        self.lookup = lookup    # the shortest suffix that makes a guess
        self.memory = memory    # earlier generations searched, the latest first
        self.reach = reach      # the longest suffix compared: of two matches, the longer says more alike
        self._remembered: list[list[int]] = []
        self._studied: Studied | None = None

    def study(self, sequences: list[list[int]]) -> None:
        """Guess from these conversations (token ids) too, where neither this generation nor a remembered one has
        a longer match (`Studied`). Replaces what was studied before; `forget` keeps it (it is not this run's)."""
        self._studied = Studied(sequences)

    def remember(self, ids: list[int]) -> None:
        """Keep a finished generation (with the end of its prompt before it, where a reply's start is matched)
        for later guesses. The list is replaced, not changed: a propose() on another thread reads the old one."""
        self._remembered = (self._remembered + [list(ids)])[-self.memory:]

    def forget(self) -> None:
        """Drop the remembered generations (the studied conversations stay)."""
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
        for n in STUDIED_SUFFIXES if self._studied is not None else ():
            if n <= best:
                break
            guess = self._studied.after(ids, n)
            if guess:
                return guess[:k]
        return source[at + 1:at + 1 + min(best, k)] if best >= self.lookup else []


def _longest_match(seq: list[int], last: int, ids: list[int], k: int) -> tuple[int, int]:
    """The longest match (at most k tokens) of a suffix of ids ending in seq at or before position `last` (the
    latest of equals): (its length, where it ends in seq)."""
    end = len(ids) - 1
    best, at = 0, -1
    for i in reversed(_occurrences(seq, ids[end], last)):  # i: an earlier copy of the last token, latest first
        n = 1
        while n < k and n <= end and i - n >= 0 and seq[i - n] == ids[end - n]:
            n += 1
        if n > best:
            best, at = n, i
            if best == k:
                break
    return best, at


def _occurrences(seq: list[int], token: int, last: int) -> list[int]:
    """Where `token` is in seq[:last + 1], in order. NOTE: list.index scans in C; a Python loop over every position
    made prompt lookup ~7 ms of a development-set turn's LLM time (2026-12-06)."""
    found, i = [], 0
    while True:
        try:
            i = seq.index(token, i, last + 1)
        except ValueError:
            return found
        found.append(i)
        i += 1
