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

Training (`block_batch`) packs a whole dialogue as the clean stream, causal, followed by a noisy copy of each
reply block with some of its tokens masked, which sees the clean tokens before its block and the copy's rows up to
its own: exactly the attention inference gives a block, so the loss trains what the sampler meets.
"""
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch
import torch.nn.functional as F

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
                      run: Callable | None = None) -> torch.Tensor:
    """The head's logits (fp32, (vocab,)) for the token after `prompt`, on the reused cache: one pass over what
    the cache does not hold yet, whose keys stay there for the reply that may follow. run: a PassBatcher's
    (the pass shares a forward with other generations')."""
    run = run or alone(model, mask_id)
    start, clean = prefill_prompt(run, prefix, prompt, BlockOptions.prefill_chunk)
    _, logits = run(Pass(prefix.cache, start, torch.tensor(clean, dtype=torch.long, device=prefix.cache.k.device)),
                    slice(-1, None))
    prefix.ids += clean
    return logits[0]


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
        new, new_shares, stopped, unmeant = [], [], False, False
        for j, row in enumerate(logits[:len(guess) + 1] if guess else logits):
            if guess and j and guess[j - 1] != new[-1]:
                break  # this row read a guess that was not committed
            if matcher is not None:
                held_row = row.masked_fill(~matcher.allowed(), float("-inf"))
                held = torch.logsumexp(held_row, -1)
                share = torch.exp(held - torch.logsumexp(row, -1)).item()
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
                stopped = True
                break
            new.append(token)
            if matcher is not None:
                new_shares.append(share)
                if share < opts.least_share:
                    unmeant = True
                    break
        committed = len(new)
        # row j predicts token j; those after the committed read masks (every guess before them held): guesses
        drafted = logits[committed:].argmax(-1).tolist() if committed > len(guess) else []
        while matcher is not None and not stopped and not unmeant and new and len(tokens) + len(new) < opts.max_new_tokens:
            token = forced(matcher, special.stop)  # the only one the grammar allows: the model's, whatever its logits
            if token is None:
                break
            matcher.accept(token)
            if opts.stop_at_eos and token in special.stop:
                stopped = True
                break
            new.append(token)
            new_shares.append(1.0)
        tokens += new
        shares += new_shares
        if on_block is not None and new:
            on_block(new)
        if unmeant:
            return Decoded(tokens, passes, "unmeant", shares)
        if stopped or not new:  # the end of turn, or nothing the grammar allows
            return Decoded(tokens, passes, "eos", shares)
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


# -- training ---------------------------------------------------------------------------------------------------

@dataclass
class Packed:
    """One training sequence: the clean dialogue, then noisy copies of its reply blocks."""
    ids: torch.Tensor        # (T,) int64: clean tokens, then noisy block copies (masks where masked)
    positions: torch.Tensor  # (T,) int64: each token's position in the dialogue (a copy reuses its block's)
    allowed: torch.Tensor    # (T, T) bool: True = may attend
    targets: torch.Tensor    # (T,) int64: the token each row predicts (-100 where no loss)
    weights: torch.Tensor    # (T,) fp32: the loss weight of each row's prediction
    clean_len: int = 0       # the clean dialogue's tokens (the first clean_len rows)
    kept: torch.Tensor | None = None  # (T,) bool: clean rows whose next-token distribution stays the base's


def block_batch(ids: list[int], reply_spans: list[tuple[int, int]], block_length: int, mask_id: int,
                generator: torch.Generator, ar_weight: float = 0.5,
                kept_spans: list[tuple[int, int]] = ()) -> Packed:
    """Pack a dialogue `ids` whose assistant replies span `reply_spans` [(start, end)) into a block-diffusion
    training sequence. kept_spans [(start, end)): tokens (the caller's words) whose prediction by the clean
    stream is to stay the base model's (`packed_loss`'s teacher).

    Each reply is cut into blocks aligned at its start; each block gets a noisy copy as the sampler meets it: the
    first c ~ U{0..L-1} tokens committed, masks after them. A masked token j >= 1 of a block is predicted by the
    copy's row j - 1 (shifted logits), weight 1; the block's first token by the clean row before the block,
    weight 1; every other reply token by the clean stream left to right, weight ar_weight, which keeps the
    pretrained next-token skill.
    """
    n = len(ids)
    clean = torch.tensor(ids, dtype=torch.long)
    noisy_ids, noisy_pos, block_of, block_start = [], [], [], []
    targets = torch.full((n,), -100, dtype=torch.long)
    weights = torch.zeros(n)
    copy_targets: list[tuple[int, int]] = []  # (copy row, the masked token it predicts)
    for s, e in reply_spans:
        targets[s - 1:e - 1] = clean[s:e]  # the clean stream predicts every reply token left to right
        weights[s - 1:e - 1] = ar_weight
        for b0 in range(s, e, block_length):
            b1 = min(b0 + block_length, e)
            L = b1 - b0
            weights[b0 - 1] = 1.0  # a block's first token always comes from the clean row before it
            # the sampler's canvas: a committed prefix of c tokens, masks after it (commits are left to right)
            c = int(torch.randint(L, (), generator=generator))
            masked = torch.arange(L) >= c
            k = len(block_start)
            block_start.append(b0)
            for j in range(L):
                if j and masked[j]:  # the copy's row j - 1 predicts its masked token j
                    copy_targets.append((len(noisy_ids) + j - 1, ids[b0 + j]))
            noisy_ids += [mask_id if masked[j] else ids[b0 + j] for j in range(L)]
            noisy_pos += range(b0, b1)
            block_of += [k] * L
    m = len(noisy_ids)
    T = n + m
    all_ids = torch.cat([clean, torch.tensor(noisy_ids, dtype=torch.long)])
    positions = torch.cat([torch.arange(n), torch.tensor(noisy_pos, dtype=torch.long)])
    all_targets = torch.cat([targets, torch.full((m,), -100, dtype=torch.long)])
    all_weights = torch.cat([weights, torch.zeros(m)])
    for row, target in copy_targets:
        all_targets[n + row] = target
        all_weights[n + row] = 1.0
    allowed = torch.zeros(T, T, dtype=torch.bool)
    allowed[:n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
    if m:
        blocks = torch.tensor(block_of)
        starts = torch.tensor(block_start)[blocks]  # (m,) each copy row's block start
        allowed[n:, :n] = torch.arange(n)[None, :] < starts[:, None]
        allowed[n:, n:] = (blocks[:, None] == blocks[None, :]) & torch.ones(m, m, dtype=torch.bool).tril()
    kept = torch.zeros(T, dtype=torch.bool)
    for s, e in kept_spans:
        kept[s - 1:e - 1] = True  # the clean rows that predict the span's tokens
    return Packed(all_ids, positions, allowed, all_targets, all_weights, n, kept)


@torch.no_grad()
def kept_log_probs(model: Transformer, batch: list[Packed], prefix_len: int = 0) -> list[torch.Tensor]:
    """The model's log-probabilities (K, V) fp32 at each sequence's K kept rows, in order: its clean stream run
    left to right (the batch's shared prefix_len tokens once). With llm.lora.off, the base model's: the
    teacher of `packed_loss`."""
    device = model.device
    cache = model.new_cache(1, max(p.clean_len for p in batch))
    if prefix_len:
        model.trunk(batch[0].ids[:prefix_len][None].to(device), 0, cache, causal=True)
    out = []
    for p in batch:
        rows = p.kept[:p.clean_len].nonzero()[:, 0]
        assert not len(rows) or rows[0] >= prefix_len, "no kept row may lie in the shared prefix"
        if not len(rows):
            out.append(torch.zeros(0, model.args.vocab_size, device=device))
            continue
        hidden = model.trunk(p.ids[prefix_len:p.clean_len][None].to(device), prefix_len, cache, causal=True)
        out.append(F.log_softmax(model.head(hidden[:, rows.to(device) - prefix_len])[0].float(), dim=-1))
    return out


def packed_loss(model: Transformer, batch: list[Packed], mask_embedding: torch.Tensor | None = None,
                mask_id: int | None = None, prefix_len: int = 0, teacher: list[torch.Tensor] | None = None,
                teacher_weight: float = 0.0) -> torch.Tensor:
    """The weighted cross-entropy of a batch of packed sequences (padded to the longest; pads attend to
    themselves only and carry no loss). mask_embedding (d,): the trainable embedding of mask_id.

    teacher: `kept_log_probs` of each sequence (the base's); then teacher_weight times the mean KL divergence of
    the model's prediction at the kept rows from the teacher's is added: the adapter learns the replies without
    unlearning how the base reads the caller's words (where a turn ends: llm.Engine.end_of_turn_probability).

    prefix_len: the sequences share their first prefix_len tokens (the system prompt) and no loss row lies in
    them; those are run once, without gradients, and their keys serve the whole batch. The forward pass is the
    same; the LoRA matrices only get no gradient through the prompt's keys. NOTE: the system prompt is about half
    of a front-desk dialogue's tokens, so a step costs ~0.6x.
    """
    device = model.device
    past = None
    if prefix_len:
        head = batch[0].ids[:prefix_len]
        assert all(torch.equal(p.ids[:prefix_len], head) for p in batch), "the batch must share its prefix"
        assert all(not p.weights[:prefix_len].any() for p in batch), "no loss row may lie in the shared prefix"
        with torch.no_grad():
            cache = model.new_cache(1, prefix_len)
            model.trunk(head[None].to(device), 0, cache, causal=True)
            past = cache
            past.k, past.v = cache.k.expand(-1, len(batch), -1, -1, -1), cache.v.expand(-1, len(batch), -1, -1, -1)
    P = prefix_len
    T = max(p.ids.numel() for p in batch) - P
    B = len(batch)
    ids = torch.zeros(B, T, dtype=torch.long)
    positions = torch.zeros(B, T, dtype=torch.long)
    allowed = torch.cat([torch.zeros(B, T, P, dtype=torch.bool), torch.eye(T, dtype=torch.bool).repeat(B, 1, 1)], 2)
    targets = torch.full((B, T), -100, dtype=torch.long)
    weights = torch.zeros(B, T)
    for b, p in enumerate(batch):
        t = p.ids.numel() - P
        ids[b, :t], positions[b, :t] = p.ids[P:], p.positions[P:]
        targets[b, :t], weights[b, :t] = p.targets[P:], p.weights[P:]
        allowed[b, :t, :P + t] = p.allowed[P:]
    ids, positions, allowed = ids.to(device), positions.to(device), allowed.to(device)
    targets, weights = targets.to(device), weights.to(device)
    embeds = model.transformer.wte(ids)  # (B, T, d)
    if mask_embedding is not None:
        embeds = torch.where((ids == mask_id)[..., None], mask_embedding.to(embeds.dtype), embeds)
    hidden, _ = model.trunk_masked(ids, positions, allowed, past=past, past_len=P, embeds=embeds)
    rows = weights > 0
    logits = model.head(hidden[rows][None])[0].float()  # (N, V)
    loss = F.cross_entropy(logits, targets[rows], reduction="none")
    loss = (loss * weights[rows]).sum() / weights[rows].sum()
    if teacher is None or not sum(len(t) for t in teacher):
        return loss
    kept = torch.zeros(B, T, dtype=torch.bool)
    for b, p in enumerate(batch):
        kept[b, :p.ids.numel() - P] = p.kept[P:]
    student = F.log_softmax(model.head(hidden[kept.to(device)][None])[0].float(), dim=-1)  # (K, V), row order
    return loss + teacher_weight * F.kl_div(student, torch.cat(teacher), log_target=True, reduction="batchmean")
