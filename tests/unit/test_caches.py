"""The block decoder's KV caches (llm.caches): a prompt reuses the longest prefix held, conversations keep theirs."""
import torch

from llm.blockdiff import BlockOptions, PrefixCache, block_reply
from llm.caches import KEPT_CACHES, KVCaches
from llm.generate import SpecialIds
from tests.checkpoints import TINY_MASK, random_ids, tiny_block_model

SPECIAL = SpecialIds(mask=TINY_MASK, stop=(1,))


class Conversation:
    """What names a conversation to the caches (an app.agent.loop.Agent in the server)."""


def pool(keep: int = KEPT_CACHES, conversations: int = 0) -> tuple[KVCaches, list[Conversation], list[int]]:
    """Caches keeping `keep` idle, the conversations, and the system prompt they share."""
    return KVCaches(tiny_block_model(), keep=keep), [Conversation() for _ in range(conversations)], random_ids(30, 1)


def written(model, prompt: list[int], prefix: PrefixCache, tokens: int = 4):
    """A reply of `tokens` tokens after prompt on prefix's cache (its keys join the cache)."""
    return block_reply(model, prompt, SPECIAL, BlockOptions(max_new_tokens=tokens, stop_at_eos=False), prefix)


@torch.no_grad()
def test_a_cache_new_to_a_prompt_starts_from_the_prefix_another_generation_holds():
    caches, _, system = pool()
    model = caches.model
    first, second = system + random_ids(5, 2), system + random_ids(7, 3)
    with caches.lent(first) as a:
        written(model, first, a)
        with caches.lent(second) as b:   # lent while a is: a new cache, with the system prompt's keys copied
            assert b is not a and b.ids == system
            torch.testing.assert_close(b.cache.k[:, :, :, :30], a.cache.k[:, :, :, :30])
            warm = written(model, second, b, 6)
    cold = written(model, second, PrefixCache(model.new_cache(1, 256)), 6)
    assert warm.tokens == cold.tokens
    with caches.lent(second) as again:   # idle now: the one that held this very prompt
        assert again is b and again.ids == second[:-1]


@torch.no_grad()
def test_a_caller_never_takes_the_cache_of_another_callers_conversation():
    # two callers' conversations after the same system prompt: neither A's turn nor A's draft, lent a cache while
    # B's conversation is idle, takes B's (which shares only the system prompt with them); B's next turn finds its
    # conversation where it left it
    caches, _, system = pool()
    model = caches.model
    a_turn, b_turn = system + random_ids(12, 2), system + random_ids(9, 3)
    with caches.lent(b_turn) as b:
        written(model, b_turn, b)
    b_held = list(b.ids)   # B's turn and its reply
    with caches.lent(a_turn) as a_draft:   # a new cache, the system prompt copied from B's
        assert a_draft is not b and a_draft.ids == system
        torch.testing.assert_close(a_draft.cache.k[:, :, :, :30], b.cache.k[:, :, :, :30])
        written(model, a_turn, a_draft)
        with caches.lent(a_turn + [5, 6]) as a:   # A's turn while its draft holds A's cache: A's prompt copied
            assert a not in (a_draft, b) and a.ids == a_turn
            torch.testing.assert_close(a.cache.k[:, :, :, :len(a_turn)], a_draft.cache.k[:, :, :, :len(a_turn)])
    assert b.ids == b_held
    with caches.lent(b_held + [7, 8]) as again:   # B's next turn: its reply, then the caller's words
        assert again is b and again.ids == b_held


@torch.no_grad()
def test_with_every_idle_cache_kept_a_new_conversation_takes_the_one_given_back_next():
    caches, _, system = pool(keep=2)
    held = []
    for seed in (2, 3):
        with caches.lent(system + random_ids(8, seed)) as c:
            c.ids += system[len(c.ids):] + random_ids(8, seed)   # as if its prompt had been run
            held.append(c)
    with caches.lent(system + random_ids(8, 4)) as third:
        assert third is held[0] and third.ids == system   # the least recently returned, cut back: no new cache
    assert caches._idle == [held[1], third]


def turn(caches: KVCaches, conversation, prompt: list[int], reply: list[int] = ()) -> PrefixCache:
    """A generation of `conversation` on `prompt` (as if its prompt had been run and `reply` written after it)."""
    with caches.serving(conversation), caches.lent(prompt) as c:
        c.ids += prompt[len(c.ids):] + list(reply)
        return c


def test_a_draft_the_caller_talked_over_leaves_its_conversation_one_cache_and_takes_no_other():
    # a phone caller's draft at "Hi," is dropped when the caller goes on: the turn on the whole question takes the
    # conversation's cache back (cut after "Hi") where a new one would have left two of its own idle, and with the
    # pool full would have taken the cache of the other caller, who is listening
    caches, (a, b), system = pool(keep=2, conversations=2)
    history_a, history_b = system + random_ids(20, 2), system + random_ids(20, 3)
    first_a = turn(caches, a, history_a, random_ids(6, 4))
    first_b = turn(caches, b, history_b, random_ids(6, 5))
    b_held = list(first_b.ids)
    said = first_a.ids + [7]
    turn(caches, a, said, random_ids(3, 6))                  # the draft at "Hi,", dropped
    again = turn(caches, a, said + [8, 9, 10], random_ids(6, 7))   # the turn on the whole question
    assert again is first_a and again.ids[:len(said) + 3] == said + [8, 9, 10]
    assert caches._idle == [first_b, first_a] and first_b.ids == b_held


def test_a_conversation_whose_window_moved_reuses_its_cache_and_leaves_no_other_idle():
    caches, (a, b), system = pool(keep=4, conversations=2)
    first_a = turn(caches, a, system + random_ids(40, 2), random_ids(6, 3))
    first_b = turn(caches, b, system + random_ids(40, 4), random_ids(6, 5))
    moved = turn(caches, a, system + random_ids(12, 6))    # the oldest turns left the prompt: only the system shared
    assert moved is first_a
    assert caches._idle == [first_b, first_a]


def test_the_cache_of_a_conversation_over_goes_before_those_of_calls_going_on():
    caches, (a, b, c), system = pool(keep=2, conversations=3)
    of_b = turn(caches, b, system + random_ids(10, 2))     # B's is the least recently given back
    of_a = turn(caches, a, system + random_ids(10, 3))
    caches.release(a)                                       # A hung up
    of_c = turn(caches, c, system + random_ids(10, 4))     # the pool is full: C takes A's, not B's
    assert of_c is of_a and caches._idle == [of_b, of_c]
    caches.release(c)
    caches.resize(1)                                        # as calls end, the pool shrinks from the ended ones
    assert caches._idle == [of_b]


def test_of_the_conversations_over_one_cache_stays_idle_for_the_next_caller():
    # a long call's cache holds ~50 MB: those of calls over go when the call ends, all but the last one's
    caches, (a, b, c, d), system = pool(keep=4, conversations=4)
    of_a = turn(caches, a, system + random_ids(10, 2))
    of_b = turn(caches, b, system + random_ids(10, 3))
    of_c = turn(caches, c, system + random_ids(10, 4))
    caches.release(a)
    assert caches._idle == [of_a, of_b, of_c]               # room to spare, yet only one call is over
    caches.release(b)
    assert caches._idle == [of_b, of_c]                     # A's went when B's call ended too
    of_d = turn(caches, d, system + random_ids(10, 5))     # a new caller takes the spare, system prompt held
    assert of_d is of_b and caches._idle == [of_c, of_d]
    caches.release(c)
    caches.release(d)
    assert caches._idle == [of_d]


def test_a_call_that_ends_while_its_generation_runs_leaves_the_spare_when_it_gives_its_cache_back():
    caches, (a, b), system = pool(keep=4, conversations=2)
    of_a = turn(caches, a, system + random_ids(10, 2))
    caches.release(a)                                       # A's is the spare
    with caches.serving(b), caches.lent(system + random_ids(10, 3)) as of_b:
        assert of_b is of_a                                 # B, new, takes it
        of_b.ids += random_ids(5, 4)
        caches.release(b)                                   # B hangs up while its generation runs
    assert caches._idle == [of_b] and caches._spare is of_b
    c = Conversation()
    of_c = turn(caches, c, system + random_ids(10, 5))
    assert of_c is of_b                                     # the next caller takes it
