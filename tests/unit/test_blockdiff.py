"""Block diffusion's sampler on a left-to-right model (llm.blockdiff) and the passes it runs (llm.passes), on tiny
random models: one token per pass is exactly greedy left-to-right decoding, guesses and the prefix cache change
nothing but the cost, and generations sharing forwards write what they write alone. Training: test_adapt.py."""
import dataclasses
import threading

import pytest
import torch

from llm.blockdiff import BlockOptions, PrefixCache, block_reply, known_start
from llm.generate import SpecialIds, autoregressive_reply
from llm.passes import Pass, PassBatcher, alone, passes
from tests.checkpoints import TINY_MASK, random_ids, tiny_block_model

MASK, STOP = TINY_MASK, 1
SPECIAL = SpecialIds(mask=MASK, stop=(STOP,))


def test_one_token_per_pass_is_greedy_left_to_right():
    model = tiny_block_model()
    ids = random_ids()
    ar = autoregressive_reply(model, torch.tensor(ids), SPECIAL, 24, stop_at_eos=False)
    prefix = PrefixCache(model.new_cache(1, 256))
    for block_length in (1, 3, 8):
        out = block_reply(model, ids, SPECIAL, BlockOptions(max_new_tokens=24, block_length=block_length,
                                                            threshold=1.0, stop_at_eos=False), prefix)
        assert out.tokens == ar.tokens  # threshold 1: only the first masked position commits, exactly greedy


class PatternMatcher:
    """A grammar that forces tokens 10, 11, 12 after every token below 10 and allows any other token otherwise;
    with `masks_too`, the mask id is allowed beside every forced token (never chosen: the sampler rules it out),
    so nothing is ever the only token allowed."""

    def __init__(self, masks_too=False):
        self.masks_too, self.owed = masks_too, []

    def allowed(self):
        allowed = torch.zeros(64, dtype=torch.bool)
        if self.owed:
            allowed[self.owed[0]] = True
            allowed[MASK] = self.masks_too
        else:
            allowed[2:60] = True
        return allowed

    def accept(self, token):
        if not self.allowed()[token]:
            return False
        if self.owed:
            self.owed.pop(0)
        elif token < 10:
            self.owed = [10, 11, 12]
        return True


@torch.no_grad()
def test_tokens_the_grammar_forces_are_committed_without_a_pass_and_change_nothing():
    model = tiny_block_model()
    ids = random_ids()
    opts = BlockOptions(max_new_tokens=40, block_length=1, threshold=1.0, stop_at_eos=False)
    fast = block_reply(model, ids, SPECIAL, opts, PrefixCache(model.new_cache(1, 256)), matcher=PatternMatcher())
    slow = block_reply(model, ids, SPECIAL, opts, PrefixCache(model.new_cache(1, 256)),
                       matcher=PatternMatcher(masks_too=True))
    assert fast.tokens == slow.tokens
    assert slow.passes == len(slow.tokens)
    forced_runs = sum(t < 10 for t in fast.tokens[:-3])
    assert forced_runs >= 1 and fast.passes <= slow.passes - 3 * forced_runs + 3


@torch.no_grad()
def test_each_token_says_the_share_of_the_models_probability_the_grammar_allowed():
    """A token the model wrote freely had the whole of it; one the grammar forced had 1.0; elsewhere the share is
    the model's own probability of the allowed tokens, as a full forward over the reply reads it."""
    model = tiny_block_model()
    ids = random_ids()
    opts = BlockOptions(max_new_tokens=30, block_length=1, threshold=1.0, stop_at_eos=False)
    out = block_reply(model, ids, SPECIAL, opts, PrefixCache(model.new_cache(1, 256)), matcher=PatternMatcher())
    assert len(out.shares) == len(out.tokens)
    # causal, unshifted: row len(ids) - 1 + i predicts token i; the mask is never a prediction
    logits = model.head(model.trunk(torch.tensor([ids + out.tokens]), causal=True))[0].float()
    probs = logits.index_fill(1, torch.tensor([MASK]), float("-inf")).softmax(-1)
    replay, owed = PatternMatcher(), 0
    for i, token in enumerate(out.tokens):
        allowed = replay.allowed()
        if owed:  # forced: 10, 11, 12 after a token below 10
            assert out.shares[i] == 1.0
            owed -= 1
        else:
            assert out.shares[i] == pytest.approx(probs[len(ids) - 1 + i][allowed].sum().item(), rel=1e-4)
            owed = 3 if token < 10 else 0
        replay.accept(token)
    assert min(out.shares) < 0.999  # the grammar ruled out some of the model's probability somewhere
    free = block_reply(model, ids, SPECIAL, opts, PrefixCache(model.new_cache(1, 256)))
    assert free.shares == []  # no grammar, nothing to say

    # least_share: the reply stops at its first token under it, that token committed, the rest as before
    least = sorted(out.shares)[len(out.shares) // 2]
    first = next(i for i, share in enumerate(out.shares) if share < least)
    cut = block_reply(model, ids, SPECIAL, dataclasses.replace(opts, least_share=least), PrefixCache(model.new_cache(1, 256)),
                      matcher=PatternMatcher())
    assert cut.stopped == "unmeant" and cut.tokens == out.tokens[:first + 1] and cut.shares == out.shares[:first + 1]


@torch.no_grad()
@pytest.mark.parametrize("with_grammar", [False, True])
def test_tokens_whose_logits_are_known_start_the_reply_without_a_pass(with_grammar):
    """The agent's checks ask for the next token's probabilities after the prompt (and after a call's opening)
    before the reply is written: known_start commits those tokens from them, as a pass's first row would have,
    with what the grammar forces after them, and block_reply goes on: the same reply, a pass fewer for each."""
    model, ids = tiny_block_model(), random_ids()
    opts = BlockOptions(max_new_tokens=20, block_length=1, threshold=1.0, stop_at_eos=False)
    truth = block_reply(model, ids, SPECIAL, opts, PrefixCache(model.new_cache(1, 256)),
                        matcher=PatternMatcher() if with_grammar else None)
    logits = model.head(model.trunk(torch.tensor([ids + truth.tokens]), causal=True))[0].float()
    logits = logits.index_fill(1, torch.tensor([MASK]), float("-inf"))   # as a pass's rows have them
    asked = []

    def known(seq):  # the prompt's and the prompt and first token's, as the checks would have asked
        asked.append(len(seq) - len(ids))
        return logits[len(seq) - 1] if len(seq) - len(ids) in (0, 1) else None

    matcher = PatternMatcher() if with_grammar else None
    start, ended = known_start(ids, known, SPECIAL, opts, matcher)
    forced = 3 if with_grammar and truth.tokens[0] < 10 else 0   # 10, 11, 12 after a token below 10
    assert not ended and start.passes == 0 and start.tokens == truth.tokens[:len(start.tokens)]
    assert len(start.tokens) == (1 + forced if forced else 2) and asked[-1] == len(start.tokens)
    rest = block_reply(model, ids + start.tokens, SPECIAL, dataclasses.replace(opts, max_new_tokens=20 -
                       len(start.tokens)), PrefixCache(model.new_cache(1, 256)), matcher=matcher)
    assert start.tokens + rest.tokens == truth.tokens
    assert start.shares + rest.shares == pytest.approx(truth.shares, rel=1e-4)
    assert rest.passes == truth.passes - (1 if forced else 2)


class EndsAfter:
    """A grammar that allows any token but stops for `n` tokens, then only the stop ids `stops` (and, with
    `masks_too`, the mask id, which the sampler never chooses: so the end is never forced)."""

    def __init__(self, n, stops, masks_too=False):
        self.n, self.stops, self.masks_too, self.seen = n, stops, masks_too, 0

    def allowed(self):
        allowed = torch.zeros(64, dtype=torch.bool)
        if self.seen < self.n:
            allowed[2:60] = True
        else:
            allowed[list(self.stops)] = True
            allowed[MASK] = self.masks_too
        return allowed

    def accept(self, token):
        ok = token != MASK and bool(self.allowed()[token])
        self.seen += ok
        return ok


@torch.no_grad()
def test_an_end_the_grammar_leaves_no_choice_but_is_committed_without_a_pass():
    """After a call's `</tool_call>` the grammar allows the end of turn and the end of text, nothing else: the
    reply ends there, without a pass to choose between two ways of ending."""
    model = tiny_block_model()
    special = SpecialIds(mask=MASK, stop=(STOP, 0))
    opts = BlockOptions(max_new_tokens=40, block_length=1, threshold=1.0)
    fast = block_reply(model, random_ids(), special, opts, PrefixCache(model.new_cache(1, 256)),
                       matcher=EndsAfter(6, special.stop))
    slow = block_reply(model, random_ids(), special, opts, PrefixCache(model.new_cache(1, 256)),
                       matcher=EndsAfter(6, special.stop, masks_too=True))
    assert fast.tokens == slow.tokens and len(fast.tokens) == 6
    assert fast.stopped == slow.stopped == "eos"
    assert fast.passes == slow.passes - 1 == 6


class Oracle:
    """A drafter that knows the reply (`truth`, after `prompt_len` prompt tokens) and gets every `wrong`-th
    guess wrong."""

    def __init__(self, truth, prompt_len, wrong):
        self.truth, self.prompt_len, self.wrong = truth, prompt_len, wrong

    def propose(self, ids, k):
        n = len(ids) - self.prompt_len
        guess = self.truth[n:n + k]
        return [t if (n + i) % self.wrong else (t + 1) % 60 for i, t in enumerate(guess)]


@torch.no_grad()
@pytest.mark.parametrize("with_grammar", [False, True])
def test_guessed_tokens_change_the_passes_not_the_reply(with_grammar):
    from llm.drafter import Drafter

    model = tiny_block_model()
    ids = random_ids()
    plain = BlockOptions(max_new_tokens=40, block_length=1, threshold=1.0, stop_at_eos=False)
    drafted = dataclasses.replace(plain, draft_length=6)

    def reply(opts, drafter=None):
        matcher = PatternMatcher() if with_grammar else None
        return block_reply(model, ids, SPECIAL, opts, PrefixCache(model.new_cache(1, 256)), matcher=matcher,
                           drafter=drafter)

    truth = reply(plain)
    good = reply(drafted, Oracle(truth.tokens, len(ids), wrong=7))
    assert good.tokens == truth.tokens
    assert good.passes <= truth.passes // 3
    # and the shares: a guessed token the grammar forces is no choice of the model's either (a name remembered
    # from an earlier reply, guessed token by token, was dropped as unmeant)
    assert good.shares == pytest.approx(truth.shares, rel=1e-4)
    for drafter in (Oracle(truth.tokens, len(ids), wrong=1), Drafter()):  # every guess wrong; prompt lookup
        assert reply(drafted, drafter).tokens == truth.tokens
    assert reply(plain, Oracle(truth.tokens, len(ids), wrong=7)).passes == truth.passes  # draft_length 0: off


class Scripted:
    """A `run` standing in for a model that writes `truth` whatever it reads: the row at position p predicts
    truth[p + 1 - prompt_len], masks or not; so the mask rows' guesses are right. Keeps each pass's (start, ids)."""

    def __init__(self, truth, prompt_len):
        self.truth, self.prompt_len, self.seen = truth, prompt_len, []

    def __call__(self, p, rows):
        self.seen.append((p.start, p.ids.tolist()))
        at = torch.arange(p.start, p.start + len(p.ids))[rows] + 1 - self.prompt_len
        logits = torch.zeros(len(at), 64)
        for row, i in enumerate(at.tolist()):
            logits[row, self.truth[i] if 0 <= i < len(self.truth) else STOP] = 10.0
        return None, logits


@torch.no_grad()
def test_a_committed_guess_keeps_its_keys_and_is_not_run_again():
    """A pass is causal over its rows, so a guessed token the model committed has its exact keys in the cache:
    the next pass starts after it with the one new token no row has read yet."""
    model, ids = tiny_block_model(), random_ids()
    truth = random_ids(24, seed=5)
    opts = BlockOptions(max_new_tokens=24, block_length=1, threshold=1.0, stop_at_eos=False, draft_length=5)
    run, blocks = Scripted(truth, len(ids)), []
    out = block_reply(model, ids, SPECIAL, opts, PrefixCache(model.new_cache(1, 256)), on_block=blocks.append,
                      drafter=Oracle(truth, len(ids), wrong=4), run=run)
    assert out.tokens == truth
    committed = 0
    for (start, rows), block in zip(run.seen[1:], blocks):
        committed += len(block)
        # the pass reads the last token committed, then its guesses: the guesses committed before it are not read
        assert start == len(ids) + committed - 1 and rows[0] == out.tokens[committed - 1]
        assert rows[1:] == [t if i % 4 else (t + 1) % 60 for i, t in enumerate(truth[committed:], committed)][:min(5, 24 - committed - 1)]
    assert len(run.seen) < len(truth) // 2


@torch.no_grad()
def test_at_threshold_one_the_mask_rows_guess_the_next_pass():
    """At threshold 1.0 a mask row commits nothing (the reply is the greedy one); its prediction is the next
    pass's guess, verified there like a drafter's: the right guesses of a pass's masks save passes."""
    model, ids = tiny_block_model(), random_ids()
    truth = random_ids(24, seed=5)
    for block_length, most in ((1, 24), (4, 24 // 2)):
        run = Scripted(truth, len(ids))
        out = block_reply(model, ids, SPECIAL, BlockOptions(max_new_tokens=24, block_length=block_length,
                                                            threshold=1.0, stop_at_eos=False),
                          PrefixCache(model.new_cache(1, 256)), run=run)
        assert out.tokens == truth and out.passes == len(run.seen) <= most
    # the first pass's mask rows are guessed in the second, which carries no masks (a guess's row costs as much as
    # a mask's): it commits those three and one more, and the third pass's masks guess again
    assert run.seen[0][1][len(ids):] == [MASK] * 3 and run.seen[1][1] == truth[:4] and run.seen[2][1][1:] == [MASK] * 3
    # a random model's mask rows guess wrong more often than not: the reply is the one of a token a pass all the
    # same, under a grammar too (whose forced tokens come between a pass's masks and the tokens they guessed)
    for with_grammar in (False, True):
        one, four = (block_reply(model, ids, SPECIAL, BlockOptions(max_new_tokens=24, block_length=n, threshold=1.0,
                                                                   stop_at_eos=False),
                                 PrefixCache(model.new_cache(1, 256)), matcher=PatternMatcher() if with_grammar else None)
                     for n in (1, 4))
        assert four.tokens == one.tokens


@torch.no_grad()
def test_prefix_cache_reuse_changes_nothing_but_cost():
    model = tiny_block_model()
    ids = random_ids(30)
    opts = BlockOptions(max_new_tokens=16, block_length=4, threshold=0.5, stop_at_eos=False)
    cold = block_reply(model, ids, SPECIAL, opts, PrefixCache(model.new_cache(1, 256)))
    prefix = PrefixCache(model.new_cache(1, 256))
    block_reply(model, ids[:25] + [5, 6, 7], SPECIAL, opts, prefix)  # leaves the cache holding a shared prefix
    assert prefix.reuse(ids) == 25
    warm = block_reply(model, ids, SPECIAL, opts, prefix)
    assert warm.tokens == cold.tokens


@torch.no_grad()
def test_passes_of_several_sequences_in_one_forward_are_each_ones_own():
    model = tiny_block_model()
    a, b = random_ids(20, 1), random_ids(13, 2)

    def run(together):
        caches = [model.new_cache(1, 256), model.new_cache(1, 256)]
        first = [Pass(caches[0], 0, torch.tensor(a)), Pass(caches[1], 0, torch.tensor(b))]
        then = [Pass(caches[0], 20, torch.tensor([5, 6, MASK])), Pass(caches[1], 13, torch.tensor([7]))]
        if together:
            return passes(model, first) + passes(model, then)
        return [passes(model, [p])[0] for p in first + then]

    for shared, apart in zip(run(True), run(False)):
        torch.testing.assert_close(shared, apart, rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_generations_on_threads_share_forwards_and_write_what_they_write_alone():
    model = tiny_block_model()
    prompts = [random_ids(20, seed) for seed in (1, 2, 3)]
    opts = BlockOptions(max_new_tokens=16, block_length=3, threshold=0.9, stop_at_eos=False)
    alone = [block_reply(model, p, SPECIAL, opts, PrefixCache(model.new_cache(1, 256))) for p in prompts]
    batcher = PassBatcher(model, MASK, linger_s=5.0)  # every generation joins before any pass: lockstep
    everyone_in, out = threading.Barrier(len(prompts)), [None] * len(prompts)

    def generate(i):
        with torch.no_grad(), batcher.joined() as run:
            everyone_in.wait(5)
            out[i] = block_reply(model, prompts[i], SPECIAL, opts, PrefixCache(model.new_cache(1, 256)), run=run)

    threads = [threading.Thread(target=generate, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [o.tokens for o in out] == [a.tokens for a in alone]
    assert batcher.passes == sum(a.passes for a in alone)
    assert batcher.batches == max(a.passes for a in alone)  # each forward held every generation still writing


@torch.no_grad()
def test_a_pass_too_long_fails_its_own_generation_not_the_batch():
    model = tiny_block_model()
    batcher = PassBatcher(model, MASK, linger_s=5.0)
    errors, results = [], []

    def ask(p):
        with batcher.joined() as run:
            try:
                results.append(run(p, slice(-1, None)))
            except ValueError as exc:
                errors.append(exc)

    good = threading.Thread(target=ask, args=(Pass(model.new_cache(1, 256), 0, torch.tensor(random_ids(10))),))
    bad = threading.Thread(target=ask, args=(Pass(model.new_cache(1, 256), 250, torch.tensor(random_ids(10))),))
    good.start(), bad.start()
    good.join(10), bad.join(10)
    assert len(results) == 1 and results[0][1].shape == (1, 64)
    assert len(errors) == 1 and "exceeds max_sequence_length" in str(errors[0])


@torch.no_grad()
def test_a_long_prompt_is_prefilled_a_chunk_a_pass_with_the_same_reply():
    model = tiny_block_model()
    ids = random_ids(100)
    opts = BlockOptions(max_new_tokens=12, block_length=3, threshold=0.9, stop_at_eos=False)
    whole = block_reply(model, ids, SPECIAL, dataclasses.replace(opts, prefill_chunk=1000),
                        PrefixCache(model.new_cache(1, 256)))
    rows, one = [], alone(model, MASK)
    chunked = block_reply(model, ids, SPECIAL, dataclasses.replace(opts, prefill_chunk=16),
                          PrefixCache(model.new_cache(1, 256)),
                          run=lambda p, r: (rows.append(len(p.ids)), one(p, r))[1])
    assert chunked.tokens == whole.tokens
    assert rows[:7] == [16] * 6 + [4 + 2]   # 6 chunks without a head, then the prompt's last 4 and 2 masks
    with pytest.raises(ValueError, match="prefill_chunk"):
        BlockOptions(prefill_chunk=0)
