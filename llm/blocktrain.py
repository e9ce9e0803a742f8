"""Block diffusion's training data and loss (the sampler: llm.blockdiff).

`block_batch` packs a whole dialogue as the clean stream, causal, followed by a noisy copy of each reply block with
some of its tokens masked, which sees the clean tokens before its block and the copy's rows up to its own: exactly
the attention inference gives a block (llm.blockdiff.block_reply), so the loss trains what the sampler meets.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from llm.model import Transformer


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
