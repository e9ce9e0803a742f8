"""Guesses of the next tokens, for the left sampler to verify in one pass (llm.generate.left_reply).

A guess costs nothing to be wrong about: the sampler keeps only the tokens the model itself would have chosen,
so the reply is the same with or without a drafter, in fewer passes when the guesses are good. Two sources:

- prompt lookup: the continuation of the latest earlier occurrence of the last two tokens in the prompt and the
  reply so far (a reply repeats the user's name, the tool result's date and time);
- an n-gram table of the training replies (drafter.json beside the checkpoint): from the longest matching
  context of up to `order - 1` tokens, the most frequent next token, walked greedily.
"""
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

FILE = "drafter.json"


class Drafter:
    def __init__(self, table: dict[tuple[int, ...], int] | None = None, order: int = 4, lookup: int = 2):
        self.table = table or {}
        self.order = order      # n-gram order: contexts of 1 .. order - 1 tokens
        self.lookup = lookup    # prompt lookup matches this many last tokens

    @classmethod
    def build(cls, sequences: Iterable[list[int]], order: int = 4, min_count: int = 2) -> "Drafter":
        """The table from token sequences (a reply, preceded by the few prompt tokens that open it); a context
        seen fewer than min_count times guesses nothing."""
        counts: dict[tuple[int, ...], Counter] = defaultdict(Counter)
        for seq in sequences:
            for i in range(1, len(seq)):
                for n in range(1, min(order - 1, i) + 1):
                    counts[tuple(seq[i - n:i])][seq[i]] += 1
        table = {}
        for context, nexts in counts.items():
            token, count = nexts.most_common(1)[0]
            if count >= min_count:
                table[context] = token
        return cls(table, order)

    def propose(self, ids: list[int], k: int) -> list[int]:
        """Up to k guessed tokens after ids: prompt lookup if the last tokens occurred before, else the table."""
        if k <= 0:
            return []
        return self._lookup(ids, k) or self._walk(ids, k)

    def _lookup(self, ids: list[int], k: int) -> list[int]:
        n = self.lookup
        if len(ids) <= n:
            return []
        key = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):  # latest occurrence first
            if ids[start:start + n] == key:
                return ids[start + n:start + n + k]
        return []

    def _walk(self, ids: list[int], k: int) -> list[int]:
        context, guess = list(ids[-(self.order - 1):]), []
        while len(guess) < k:
            token = next((self.table[c] for n in range(min(self.order - 1, len(context)), 0, -1)
                          if (c := tuple(context[-n:])) in self.table), None)
            if token is None:
                break
            guess.append(token)
            context.append(token)
        return guess

    def save(self, directory) -> Path:
        path = Path(directory) / FILE
        rows = [[*context, token] for context, token in self.table.items()]
        path.write_text(json.dumps({"order": self.order, "lookup": self.lookup, "ngrams": rows},
                                   separators=(",", ":")), encoding="utf-8")
        return path

    @classmethod
    def load(cls, directory) -> "Drafter | None":
        """The checkpoint's drafter; None when it has no drafter.json (a prompt-lookup-only Drafter() still works)."""
        path = Path(directory) / FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            table = {tuple(row[:-1]): row[-1] for row in data["ngrams"]}
            return cls(table, int(data["order"]), int(data.get("lookup", 2)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: not a drafter table ({exc})") from None
