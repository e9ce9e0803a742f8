"""The block decoder's exact KV caches: lent to generations, kept between a conversation's turns.

Each generation borrows a cache for its duration (`KVCaches.lent`): the one that already holds the longest prefix
of its prompt, so a turn's prefill covers only what is new. A cache new to a prompt starts from a copy of the
longest prefix any cache holds (the system prompt, shared by every caller: a copy of its keys costs milliseconds,
its prefill a second). Up to `keep` idle caches are kept.

A conversation that names itself (`serving`: app.agent.loop.Agent does, for its turns, drafts and window moves)
keeps one idle cache, the one its last generation gave back: that holds its latest prompt and reply, and what its
older ones hold it has moved past (a draft the caller talked over, the turns before its window moved). Its next
generation takes that cache whatever it must cut back. When more caches would be idle than `keep`, those of no
conversation going on go first (`release`), then the least recently given back. Of the caches of conversations
over, one stays idle at most (a spare: the next caller's first turn copies the system prompt into its touched pages);
the others go when their conversation ends, so memory follows the calls going on.
NOTE: before caches had conversations, five phone callers asking for 150 s (app.loadtest --soak, 2026-12-06) gave
26 turns a cache of another caller's (the least recently given back, while its caller listened) and 19 a new one
with the system prompt alone: 8.7k of 16.6k prompt rows re-read, and the callers they were taken from read theirs
again at their next turn. A conversation's dropped draft and its window's move each left an idle cache nobody would
use again, and those took the places of callers' conversations.
"""
import threading
import weakref
from contextlib import contextmanager

from llm.blockdiff import PrefixCache, shared_length
from llm.model import Transformer

KEPT_CACHES = 4   # idle KV caches an engine keeps unless told otherwise (llm.Engine.keep_caches)


class KVCaches:
    """The caches of one engine (see the module)."""

    def __init__(self, model: Transformer, keep: int = KEPT_CACHES):
        self.model, self.keep = model, keep
        self._idle: list[PrefixCache] = []   # least recently given back first
        self._lent: list[PrefixCache] = []
        self._owners: dict[int, weakref.ref] = {}   # id(cache) -> the conversation it serves, where one is named
        self._spare: PrefixCache | None = None   # the idle cache of the conversation over last (_keep_spare)
        self._lock = threading.Lock()
        self._local = threading.local()

    @contextmanager
    def serving(self, conversation):
        """Within it, the caches this thread borrows are `conversation`'s (an object that lives as long as it)."""
        before = getattr(self._local, "owner", None)
        self._local.owner = weakref.ref(conversation)
        try:
            yield
        finally:
            self._local.owner = before

    def release(self, conversation) -> None:
        """The conversation is over: its idle cache is the first to go (another may still copy its prefix)."""
        owner = weakref.ref(conversation)
        with self._lock:
            for key in [key for key, ref in self._owners.items() if ref == owner]:
                del self._owners[key]
                ended = next((c for c in self._idle if id(c) == key), None)
                if ended is not None:
                    self._keep_spare(ended)

    @contextmanager
    def lent(self, prompt: list[int]):
        owner = getattr(self._local, "owner", None)
        with self._lock:
            prefix = self._borrow(prompt, owner)
        try:
            yield prefix
        finally:
            with self._lock:
                self._lent.remove(prefix)
                if owner is not None:   # its older idle caches hold what the conversation has moved past
                    for older in [c for c in self._idle if self._owners.get(id(c)) == owner]:
                        self._drop(older)
                self._idle.append(prefix)
                if owner is not None and id(prefix) not in self._owners:   # the call ended while it was lent
                    self._keep_spare(prefix)
                self._trim()

    def _keep_spare(self, prefix: PrefixCache) -> None:
        """`prefix`, idle, is the last cache of a conversation over: the spare, and the spare before goes (a long
        call's cache holds ~50 MB: SmolLM2, 46 KB a position)."""
        before, self._spare = self._spare, prefix
        if before is not None and before is not prefix:
            self._drop(before)

    def _borrow(self, prompt: list[int], owner: weakref.ref | None) -> PrefixCache:
        """A cache for `prompt`, its held ids already cut to the prefix it shares (PrefixCache.reuse), and the
        longest prefix any other cache holds copied in where that is longer: under the lock, so the prefix another
        borrower's cache holds stays as it is while it is copied (a borrower only writes past what its cache held
        when it was lent).

        The conversation's own idle cache, where it has one. Else an idle cache of no other conversation going on
        that holds nothing the prompt does not start with, or holds the whole prompt (a reply was written after
        it), or is the spare of a conversation over; of those, the one sharing the longest prefix. Where there is
        none, a new cache; or, with `keep` idle already, the one the next give-back would drop anyway (a new cache's
        fresh pages cost a fresh process's first turns: `python ../shared/evalsets/check_dev.py` 263.2 ms a turn
        against 248.4).
        NOTE: taking the idle cache that shared the longest prefix (of those sharing only the system prompt, the
        oldest) let a phone caller's turn take another caller's conversation while its own cache was lent to its
        draft: with two callers at once (app.loadtest, 2026-12-06) turns re-read 117-233 prompt tokens that a lone
        caller's never did, and the other caller's next turn again."""
        def shared(c: PrefixCache) -> int:
            return shared_length(c.ids, prompt)

        def whole(c: PrefixCache) -> bool:   # it holds the prompt's start, or the prompt holds all it holds
            return shared(c) in (len(c.ids), len(prompt))

        mine = [c for c in self._idle if owner is not None and self._owners.get(id(c)) == owner]
        free = [c for c in self._idle
                if (whole(c) or c is self._spare) and not self._serves_another(c, owner)]
        best = max(mine or free, key=shared, default=None)
        if best is None and len(self._idle) >= self.keep:
            best = self._next_to_go()
        if best is not None:
            self._drop(best)   # from the idle ones: lent now
            prefix = best
        else:
            prefix = PrefixCache(self.model.new_cache(1, self.model.args.max_sequence_length))
        held = prefix.reuse(prompt)
        source = max(self._idle + self._lent, key=shared, default=None)
        n = 0 if source is None else min(shared(source), len(prompt) - 1)
        if n > held:
            prefix.cache.k[:, :, :, :n] = source.cache.k[:, :, :, :n]
            prefix.cache.v[:, :, :, :n] = source.cache.v[:, :, :, :n]
            prefix.ids[:] = prompt[:n]
        if owner is None:
            self._owners.pop(id(prefix), None)
        else:
            self._owners[id(prefix)] = owner
        self._lent.append(prefix)
        return prefix

    def _serves_another(self, c: PrefixCache, owner: weakref.ref | None) -> bool:
        ref = self._owners.get(id(c))
        return ref is not None and ref != owner and ref() is not None

    def _next_to_go(self) -> PrefixCache:
        """The idle cache to give up first: one of no conversation going on, else the least recently given back."""
        return next((c for c in self._idle if not self._serves_another(c, None)), self._idle[0])

    def _drop(self, prefix: PrefixCache) -> None:
        self._idle.remove(prefix)
        self._owners.pop(id(prefix), None)
        if prefix is self._spare:
            self._spare = None

    def _trim(self) -> None:
        while len(self._idle) > self.keep:
            self._drop(self._next_to_go())

    def resize(self, keep: int) -> None:
        """Keep up to `keep` idle caches from now on (which go first: `_next_to_go`)."""
        with self._lock:
            self.keep = keep
            self._trim()

    def hold_only(self, ids: list[int]) -> None:
        """Cut every idle cache back to the prefix it shares with ids."""
        with self._lock:
            for prefix in self._idle:
                del prefix.ids[shared_length(prefix.ids, ids):]

    def forget(self) -> None:
        with self._lock:
            for prefix in self._idle:
                prefix.ids.clear()
