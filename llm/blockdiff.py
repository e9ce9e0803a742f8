"""Block diffusion on a pretrained left-to-right model (the recipe of SDAR, Fast-dLLM v2, BD3-LM).

A reply is written a few tokens a pass. Each pass runs the tokens committed last, whose keys join an exact KV
cache (with the prompt's), followed by block_length - 1 masks. Logits are shifted as the pretrained head has
them: row i predicts token i + 1, so the last committed row predicts the next token exactly as the base model
does, and each mask row the token after the one before it. The longest confident prefix (>= threshold) of those
block_length predictions is committed, and always the first: commits stay left to right, so a grammar (a
Matcher) judges each one in order, and a turn's prefill covers only what the cache does not hold yet. With a
Drafter, guessed tokens (prompt lookup) take the masks' place and are verified: the same reply in fewer passes.

Attention is causal everywhere, inside the block too. NOTE: with bidirectional attention inside the block (SDAR,
Fast-dLLM v2), a committed token's row also sees the masks after it, so even one commit per pass differed from
the base model's greedy text (tests/unit/test_blockdiff.py); and since commits are a prefix, the masks after a row
carry nothing but their positions. Causal, a committed row is exactly the base model's, and a mask row is a
placeholder from which the adapter learns to predict one more token ahead.

Training packs what the sampler meets: llm.blocktrain.
"""
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from llm.generate import Decoded, DecodeOptions, SpecialIds
from llm.model import KVCache, Transformer
from llm.passes import Pass, alone


@dataclass(frozen=True)
class BlockOptions:
    max_new_tokens: int = DecodeOptions.max_new_tokens
    block_length: int = 4         # positions filled in parallel (4: close to the pretrained left-to-right behaviour)
    threshold: float = DecodeOptions.threshold  # commit the next masked position while it is at least this confident
    stop_at_eos: bool = True      # False: always write max_new_tokens (benchmarks)
    draft_length: int = 0         # with a drafter: up to this many guessed tokens a pass, verified exactly
    # with a matcher: stop ("unmeant") once a token is committed with less than this share of the model's
    # probability on what the grammar allowed (a probe of a value the model may not mean: app.agent.loop)
    least_share: float = 0.0
    # the most prompt positions one pass takes: a long prefill (a call whose history window moved) shares forwards
    # with other callers' passes instead of holding them for seconds. NOTE: a 700-token prefill took the same
    # time in chunks of 64 as whole (2.76 s against 2.72 s, one thread, SmolLM2 fp16), 3.1 s in chunks of 32
    prefill_chunk: int = 64

    def __post_init__(self):
        if self.max_new_tokens < 1 or self.block_length < 1 or self.draft_length < 0 or self.prefill_chunk < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}, block_length={self.block_length} and "
                             f"prefill_chunk={self.prefill_chunk} must be >= 1, draft_length={self.draft_length} >= 0")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold={self.threshold} must be in (0, 1]")


class Drafter(Protocol):
    """Guesses of the next tokens (llm.drafter.Drafter: prompt lookup)."""
    def propose(self, ids: list[int], k: int) -> list[int]: ...


class Matcher(Protocol):
    """A grammar's state over one reply (app.agent.schema_grammar.ReplyMatcher)."""
    def allowed(self) -> torch.Tensor: ...
    def accept(self, token: int) -> bool: ...


def forced(matcher: Matcher, stop: tuple[int, ...] = ()) -> int | None:
    """The one token the grammar allows next, if it allows exactly one; or the first of the stop ids, if it
    allows nothing else (after a call's `</tool_call>` it allows the end of turn and the end of text: the reply
    is over either way)."""
    mask = matcher.allowed()
    if int(mask.sum()) > max(1, len(set(stop))):  # counted first: listing the ~49k of free text took ~1 ms
        return None
    allowed = mask.nonzero()[:, 0].tolist()
    if len(allowed) == 1 or allowed and set(allowed) <= set(stop):
        return allowed[0]
    return None


@dataclass
class PrefixCache:
    """An exact KV cache and the token ids whose keys it holds (positions 0..len(ids)-1); a new prompt reuses
    the longest common prefix, so a turn's prefill covers only what is new (the system prompt is paid once)."""
    cache: KVCache
    ids: list[int] = field(default_factory=list)

    def reuse(self, prompt: list[int]) -> int:
        """How many leading positions of `prompt` the cache already holds (at most len(prompt) - 1: the last
        prompt row is recomputed, it predicts the reply's first token)."""
        n = min(shared_length(self.ids, prompt), len(prompt) - 1)
        del self.ids[n:]
        return n


def shared_length(a: list[int], b: list[int]) -> int:
    """The length of the common prefix of a and b."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def prefill_prompt(run, prefix: PrefixCache, prompt: list[int], chunk: int, cancel=None) -> tuple[int, list[int]]:
    """Run the prompt's positions the cache does not hold, but the last `chunk` or fewer, a chunk a pass (no head);
    -> (the position after them, the prompt's rest: the first pass's clean tokens)."""
    start = prefix.reuse(prompt)
    device = prefix.cache.k.device
    while len(prompt) - start > chunk and not (cancel is not None and cancel.is_set()):
        ids = prompt[start:start + chunk]
        run(Pass(prefix.cache, start, torch.tensor(ids, dtype=torch.long, device=device)), slice(0, 0))
        prefix.ids += ids
        start += len(ids)
    return start, prompt[start:]


def next_token_logits(model: Transformer, prompt: list[int], prefix: PrefixCache, mask_id: int,
                      run: Callable | None = None, last: int = 1) -> torch.Tensor:
    """The head's logits (fp32, (k, vocab)) for the token after `prompt` and after each of its `last` - 1 prefixes
    before it (k <= last: those the pass runs; the last row is the whole prompt's), on the reused cache: one pass
    over what the cache does not hold yet, whose keys stay there for the reply that may follow. run: a
    PassBatcher's (the pass shares a forward with other generations')."""
    run = run or alone(model, mask_id)
    start, clean = prefill_prompt(run, prefix, prompt, BlockOptions.prefill_chunk)
    _, logits = run(Pass(prefix.cache, start, torch.tensor(clean, dtype=torch.long, device=prefix.cache.k.device)),
                    slice(-min(last, len(clean)), None))
    prefix.ids += clean
    return logits


def block_reply(model: Transformer, prompt: list[int], special: SpecialIds, opts: BlockOptions,
                prefix: PrefixCache, on_block: Callable[[list[int]], None] | None = None,
                cancel: threading.Event | None = None, matcher: Matcher | None = None,
                drafter: Drafter | None = None, run: Callable | None = None) -> Decoded:
    """Write a reply after `prompt`, up to block_length tokens a pass; on_block gets each pass's committed ids
    (the stop token excluded).

    Each pass runs the tokens committed last (the prompt's new part, the first time), whose keys join the cache,
    then block_length - 1 masks: the last committed row predicts the next token, exactly as the base model
    would, and mask row j the token j + 1 after it. The confident prefix of those predictions is committed.
    Tokens the grammar forces after it (the only one it allows: a tool call's keys and punctuation) are
    committed without a pass, as the model would have written them, and run with the next pass's.

    With a drafter and opts.draft_length, a guess of the next tokens (prompt lookup: a reply repeats the caller's
    name, the tool result's date, the system prompt's address) takes the masks' place when there is one. A row
    after a guessed token is the base model's own when the guess was what it committed, so it commits whatever
    its confidence; the first wrong guess ends the pass. The reply is the one without a drafter, in fewer passes.
    A guess committed has its exact keys in the cache already (the pass is causal over its rows): the next pass
    starts after it. At threshold 1.0 the mask rows commit nothing (the reply is the greedy one); what they
    predict is the next pass's guess when the drafter has none.

    run: a PassBatcher's, whose forwards this generation's passes share with other generations' (the same reply).
    """
    if not model.args.shift_logits:
        raise ValueError("block diffusion reuses a left-to-right head: it needs a shift_logits model")
    if not prompt:
        raise ValueError("the prompt is empty: render at least the assistant header")
    device = prefix.cache.k.device
    run = run or alone(model, special.mask)
    start, clean = prefill_prompt(run, prefix, prompt, opts.prefill_chunk, cancel)
    tokens: list[int] = []
    shares: list[float] = []  # with a matcher: per token, the share of the model's probability the grammar allowed
    passes = 0
    drafted: list[int] = []   # the last pass's mask rows: their guesses of the tokens after what it committed
    while True:
        if cancel is not None and cancel.is_set():
            return Decoded(tokens, passes, "cancelled", shares)
        left = opts.max_new_tokens - len(tokens)
        looked = drafter.propose(prefix.ids + clean, min(opts.draft_length, left - 1)) if drafter else []
        # NOTE: 28 turns of the development set (2 threads, 2026-12-05; the same replies in each): 17.1 s of LLM
        # one token a pass, 15.5 s with block_length 4 (three mask rows where there is no guess); 16.2 s when the
        # masks' guesses went before the lookup's; block_length 3 16.0 s, 6 16.2 s. Masks after a guess too cost
        # more rows than they saved passes (a row ~2 ms, a pass ~16 ms; the masks guessed 1.9 of 3 tokens right).
        guess = looked or drafted[:left - 1]
        canvas = guess or [special.mask] * (min(opts.block_length, left) - 1)
        # NOTE: the head runs on every row of the pass, in its forward. Run on a guessed pass's first row alone,
        # then on the others when the first guess was right, it took the same time alone (3.8 s against 3.7 s for
        # four replies) and kept a product out of the batch a generation's pass shares with others'.
        first = len(clean) - 1  # row first + j predicts new token j
        _, logits = run(Pass(prefix.cache, start, torch.tensor(clean + canvas, dtype=torch.long, device=device)),
                        slice(first, None))
        passes += 1
        prefix.ids += clean
        start += len(clean)
        new, new_shares, committed, end = _committed(logits[:len(guess) + 1] if guess else logits, guess, matcher,
                                                     special, opts, opts.max_new_tokens - len(tokens))
        # row j predicts token j; those after the committed read masks (every guess before them held): guesses
        drafted = logits[committed:].argmax(-1).tolist() if committed > len(guess) else []
        tokens += new
        shares += new_shares
        if on_block is not None and new:
            on_block(new)
        if end is not None:
            return Decoded(tokens, passes, end, shares)
        if len(tokens) >= opts.max_new_tokens:
            return Decoded(tokens, passes, "length", shares)
        # A guess the model committed already has its exact keys in the cache (a pass is causal over its rows,
        # and every row before it held what the model wrote): the next pass starts after it, not at it. At least
        # the last new token is run again, so that a row predicts the next.
        drafted = drafted[len(new) - committed:]  # past the tokens the grammar forced
        kept = min(shared_length(guess, new), len(new) - 1)
        prefix.ids += new[:kept]
        start += kept
        clean = new[kept:]


def known_start(prompt: list[int], known: Callable[[list[int]], torch.Tensor | None], special: SpecialIds,
                opts: BlockOptions, matcher: Matcher | None = None) -> tuple[Decoded, bool]:
    """The first tokens of the reply to `prompt` whose logits are known already, without a pass: `known(ids)` gives
    the head's logits after ids (the agent's checks asked for the reply's first token's, and after a call's
    opening for its tool's name's: app.agent.weighed), or None. Each is committed as a pass's first row would
    commit it, with the tokens the grammar forces after it; `block_reply` goes on after them, their keys mostly
    in the cache the checks left. -> (those tokens, whether the reply ended with them: Decoded.stopped says how)."""
    tokens, shares = [], []
    while len(tokens) < opts.max_new_tokens and (row := known(prompt + tokens)) is not None:
        new, new_shares, _, end = _committed([row], [], matcher, special, opts, opts.max_new_tokens - len(tokens))
        tokens += new
        shares += new_shares
        if end is not None:
            return Decoded(tokens, 0, end, shares), True
    return Decoded(tokens, 0, "length", shares), len(tokens) >= opts.max_new_tokens


def _committed(rows: torch.Tensor | list[torch.Tensor], guess: list[int], matcher: Matcher | None,
               special: SpecialIds, opts: BlockOptions, room: int) -> tuple[list[int], list[float], int, str | None]:
    """What a pass commits from its rows (row j predicts new token j; a row after a guess counts only when the
    guess was committed): the first row's token always, each next one's while it is at least opts.threshold
    confident (a guessed one whatever its confidence), the grammar allows it and it is no stop token; then the
    tokens the grammar forces after them (the only one it allows: the model's, whatever its logits), up to `room`
    tokens in all. -> (the tokens, per token the share of the model's probability the grammar allowed (with a
    matcher), how many of them came from the rows, and how the reply ended with them: "eos" (a stop token, or
    nothing the grammar allows), "unmeant" (a share under opts.least_share) or None)."""
    new, new_shares = [], []
    for j, row in enumerate(rows):
        if guess and j and guess[j - 1] != new[-1]:
            break  # this row read a guess that was not committed
        if matcher is not None:
            held_row = row.masked_fill(~matcher.allowed(), float("-inf"))
            held = torch.logsumexp(held_row, -1)
            # a token the grammar forces is no choice of the model's, on a row as after one (share 1.0): a guess
            # of a name remembered from an earlier reply ("P", "aul", "o") read 0.0096 and 0.0015 on the rows the
            # grammar allowed one token, and the caller's name was dropped as unmeant
            share = 1.0 if forced(matcher, special.stop) is not None else \
                torch.exp(held - torch.logsumexp(row, -1)).item()
            top, token = held_row.max(dim=-1)
            confidence = torch.exp(top - held)  # the softmax's largest, without the softmax
        else:
            confidence, token = torch.softmax(row, dim=-1).max(dim=-1)
        if new and not guess and (opts.threshold == 1.0 or confidence.item() < opts.threshold):
            break  # a mask row commits only what it is sure enough of, at 1.0 nothing: it is a guess
        token = token.item()
        if matcher is not None and not matcher.accept(token):
            break  # the grammar allows nothing here
        if opts.stop_at_eos and token in special.stop:
            return new, new_shares, len(new), "eos"
        new.append(token)
        if matcher is not None:
            new_shares.append(share)
            if share < opts.least_share:
                return new, new_shares, len(new), "unmeant"
    committed = len(new)
    while matcher is not None and new and len(new) < room:
        token = forced(matcher, special.stop)
        if token is None:
            break
        matcher.accept(token)
        if opts.stop_at_eos and token in special.stop:
            return new, new_shares, committed, "eos"
        new.append(token)
        new_shares.append(1.0)
    return new, new_shares, committed, None if new else "eos"   # nothing the grammar allows: the end
