"""The sampler against a scripted denoiser: commit policies, block order, EOS, streaming, cancel, caches."""
import math
import threading

import pytest
import torch

import llm
from llm.generate import (DecodeOptions, ModelDenoiser, SpecialIds, commit_count, commit_threshold, denoise_reply,
                          score, step_schedule)
from tests.checkpoints import single_thread  # noqa: F401 (autouse)
from tests.checkpoints import write_dream, write_parley

V, MASK, EOS = 50, 49, 48
SPECIAL = SpecialIds(mask=MASK, stop=(EOS,))
PROMPT = torch.tensor([1, 2, 3, 4, 5])


class Scripted:
    """Logits making target(pos, pass) the choice at each position with softmax prob confidence(pos, pass)."""

    def __init__(self, target, confidence):
        self.target, self.confidence = target, confidence
        self.calls = []  # (canvas snapshot, block_start, block_end, pass, {pos: confidence})

    def __call__(self, canvas, block_start, block_end, pass_in_block):
        logits = torch.zeros(block_end - block_start, V)
        confs = {}
        for row, pos in enumerate(range(block_start, block_end)):
            c = confs[pos] = self.confidence(pos, pass_in_block)
            # softmax over the V - 1 non-mask tokens: p = e^x / (e^x + V - 2)
            logits[row, self.target(pos, pass_in_block)] = math.log(c * (V - 2) / (1 - c))
        self.calls.append((canvas.clone(), block_start, block_end, pass_in_block, confs))
        return logits


def run(script, **options):
    blocks = []
    opts = DecodeOptions(**{"max_new_tokens": 48, "block_length": 16, **options})
    decoded = denoise_reply(script, PROMPT, SPECIAL, opts, on_block=blocks.append)
    return decoded, blocks


def varied_confidence(pos, p):
    return [0.3, 0.95, 0.6, 0.91, 0.2, 0.89][(pos * 7 + p * 3) % 6]


def test_commit_threshold_exact_set():
    confidence = torch.tensor([0.95, 0.5, 0.9, 0.89, 0.99])
    masked = torch.tensor([True, True, True, True, False])
    assert commit_threshold(confidence, masked, 0.9).tolist() == [True, False, True, False, False]
    low = torch.tensor([0.1, 0.3, 0.2, 0.9])
    assert commit_threshold(low, torch.tensor([True, True, True, False]), 0.8).tolist() == [False, True, False, False]


def test_commit_count_takes_most_confident_masked():
    confidence = torch.tensor([0.2, 0.9, 0.5, 0.99, 0.7])
    masked = torch.tensor([True, True, True, False, True])
    assert commit_count(confidence, masked, 2).tolist() == [False, True, False, False, True]
    assert step_schedule(16, 5) == [4, 3, 3, 3, 3] and step_schedule(3, 8) == [1, 1, 1]


def test_threshold_policy_commits_exactly_the_confident_tokens():
    script = Scripted(lambda pos, p: pos % 40, varied_confidence)
    run(script)
    for (canvas, lo, hi, p, confs), nxt in zip(script.calls, script.calls[1:] + [None]):
        if nxt is None or nxt[1] != lo:
            continue  # the next call is another block
        before, after = canvas[0, lo:hi], nxt[0][0, lo:hi]
        masked = [pos for pos in range(lo, hi) if before[pos - lo] == MASK]
        committed = {pos for pos in masked if after[pos - lo] != MASK}
        confident = {pos for pos in masked if confs[pos] >= 0.9}
        if confident:
            assert committed == confident
        else:  # none reached the threshold: exactly one of the most confident
            assert len(committed) == 1 and confs[committed.pop()] == max(confs[q] for q in masked)


def test_committed_tokens_never_change():
    # the script's preferred token moves every pass; committed positions must keep their first value
    script = Scripted(lambda pos, p: (pos + p) % 40, varied_confidence)
    decoded, _ = run(script)
    seen = {}
    for canvas, *_ in script.calls:
        for pos, token in enumerate(canvas[0].tolist()):
            if token != MASK:
                assert seen.setdefault(pos, token) == token
    assert len(seen) > 40  # (the last pass's commits are never seen by a later call)
    assert all(decoded.tokens[pos - 5] == token for pos, token in seen.items() if pos >= 5)


def test_blocks_fill_left_to_right():
    script = Scripted(lambda pos, p: pos % 40, varied_confidence)
    run(script)
    starts = [lo for _, lo, *_ in script.calls]
    assert starts == sorted(starts) and sorted(set(starts)) == [5, 21, 37]
    for canvas, lo, hi, *_ in script.calls:
        assert MASK not in canvas[0, :lo].tolist()
        assert set(canvas[0, hi:].tolist()) <= {MASK}


def test_on_block_sees_each_block_once_in_order():
    decoded, blocks = run(Scripted(lambda pos, p: pos % 40, varied_confidence))
    assert blocks == [[pos % 40 for pos in range(s, s + 16)] for s in (5, 21, 37)]
    assert decoded.tokens == sum(blocks, []) and decoded.stopped == "length"


def test_eos_ends_generation_and_drops_the_rest():
    stop_at = 5 + 16 + 6  # inside the second block
    target = lambda pos, p: EOS if pos == stop_at else pos % 40  # noqa: E731
    script = Scripted(target, lambda pos, p: 0.95 if pos <= stop_at else 0.1)
    decoded, blocks = run(script)
    assert decoded.stopped == "eos"
    assert decoded.tokens == [pos % 40 for pos in range(5, stop_at)]
    assert blocks == [decoded.tokens[:16], decoded.tokens[16:]]
    assert max(lo for _, lo, *_ in script.calls) == 21  # the third block never ran
    # everything before EOS settled in one pass, so the block stopped without filling its tail
    assert decoded.passes == 2


def test_steps_policy_commits_a_fixed_count_per_pass():
    script = Scripted(lambda pos, p: pos % 40, varied_confidence)
    decoded, _ = run(script, steps=4, max_new_tokens=40)
    assert decoded.passes == 4 + 4 + 4  # blocks of 16, 16 and 8 tokens
    per_pass = [sum(t != MASK for t in canvas[0, lo:hi].tolist()) for canvas, lo, hi, *_ in script.calls]
    assert per_pass == [0, 4, 8, 12] * 2 + [0, 2, 4, 6]
    assert decoded.tokens == [pos % 40 for pos in range(5, 45)]


def test_mask_token_is_never_chosen():
    script = Scripted(lambda pos, p: MASK, lambda pos, p: 0.99)  # the mask is the script's favourite
    decoded, _ = run(script, max_new_tokens=16)
    assert MASK not in decoded.tokens and len(decoded.tokens) == 16


def test_temperature_samples_reproducibly_and_reports_softmax_confidence():
    logits = torch.randn(64, V)
    t1, c1 = score(logits, MASK, 1.0, torch.Generator().manual_seed(3))
    t2, _ = score(logits, MASK, 1.0, torch.Generator().manual_seed(3))
    t3, _ = score(logits, MASK, 1.0, torch.Generator().manual_seed(4))
    assert torch.equal(t1, t2) and not torch.equal(t1, t3) and MASK not in t1.tolist()
    probs = torch.softmax(logits.masked_fill(torch.arange(V) == MASK, float("-inf")), dim=-1)
    assert torch.allclose(c1, probs.gather(1, t1[:, None])[:, 0])


def test_cancel_stops_between_passes():
    cancel = threading.Event()
    blocks = []

    def settled(ids):
        blocks.append(ids)
        cancel.set()  # e.g. barge-in while the first block is being spoken
    opts = DecodeOptions(max_new_tokens=48, block_length=16)
    decoded = denoise_reply(Scripted(lambda pos, p: pos % 40, varied_confidence), PROMPT, SPECIAL, opts,
                            on_block=settled, cancel=cancel)
    assert decoded.stopped == "cancelled" and len(blocks) == 1 and decoded.tokens == blocks[0]


@pytest.mark.parametrize("writer", [write_parley, write_dream])
@pytest.mark.parametrize("mode", ["prefix", "dual"])
def test_cache_refreshed_every_pass_equals_uncached(tmp_path, writer, mode):
    writer(tmp_path)
    model = llm.load(tmp_path).model
    prompt = torch.tensor([7, 30, 100, 21, 5, 64, 9, 200])
    opts = DecodeOptions(max_new_tokens=24, block_length=8, threshold=0.05, stop_at_eos=False)
    with torch.inference_mode():
        plain = denoise_reply(ModelDenoiser(model, 32, "none"), prompt, SPECIAL_FOR(model), opts)
        refreshed = denoise_reply(ModelDenoiser(model, 32, mode, refresh_passes=1), prompt, SPECIAL_FOR(model), opts)
        cached = denoise_reply(ModelDenoiser(model, 32, mode), prompt, SPECIAL_FOR(model), opts)
    assert refreshed.tokens == plain.tokens and refreshed.passes == plain.passes
    assert len(cached.tokens) == 24  # the stale cache may choose differently, but it must run


def SPECIAL_FOR(model):
    return SpecialIds(mask=model.args.vocab_size - 1, stop=(model.args.vocab_size - 2,))


def test_cached_partial_pass_reads_the_cache(tmp_path):
    """With a cache filled from the same canvas, a partial pass reproduces the full pass's block logits."""
    write_parley(tmp_path)
    model = llm.load(tmp_path).model
    canvas = torch.randint(0, 300, (1, 30))
    with torch.inference_mode():
        for mode in ("prefix", "dual"):
            denoise = ModelDenoiser(model, 30, mode)
            full = denoise(canvas, 12, 20, 0)
            partial = denoise(canvas, 12, 20, 1)
            assert (full - partial).abs().max() <= 1e-5
            stale = denoise(canvas.roll(3, dims=1), 12, 20, 2)  # prefix changed, cache not refreshed
            assert (stale - model(canvas.roll(3, dims=1))[0, 12:20]).abs().max() > 1e-3


def test_decode_options_reject_bad_values():
    with pytest.raises(ValueError, match="prefix, dual, none"):
        DecodeOptions(cache="lru")
    with pytest.raises(ValueError, match="threshold"):
        DecodeOptions(threshold=1.5)
    with pytest.raises(ValueError, match="steps"):
        DecodeOptions(steps=64, block_length=32)
