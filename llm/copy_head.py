"""Parley's copy head: a pointer into the prompt mixed with the vocabulary head (llm.model.Transformer uses it)."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm.linear import Linear


@dataclass
class CopySource:
    """What a CopyHead points into, for the source positions (the prompt): keys (B, S, copy_head_dim), token ids
    (B, S) and the normalized embedding of each position's token (B, S, d_model); valid (B, S) bool (False: never
    pointed at, e.g. padding or the reply) or None for all; copyable (B, S) bool, the valid positions whose token
    may be copied (the others are sinks: the pointer's mass there goes to the vocabulary head), or None for all."""
    keys: torch.Tensor
    ids: torch.Tensor
    values: torch.Tensor
    valid: torch.Tensor | None = None
    copyable: torch.Tensor | None = None
    twins: torch.Tensor | None = None        # (B, K, S): each token's twin in each of ModelArgs.copy_twins' K maps
    next_values: torch.Tensor | None = None  # (B, S, d): the normalized embedding of the token after each position


class CopyHead(nn.Module):
    """A pointer into the prompt, mixed with the vocabulary head (the pointer-generator of See et al., 2017).

    p(token) = (g + (1 - g) * s) * softmax(vocabulary logits) + (1 - g) * (attention of the row on the copyable
    prompt positions holding that token), g = sigmoid(gate(row) + copy_gate(embedding the pointer would copy)),
    s the attention on the positions that may not be copied (role and end tokens, the system prompt and the
    agent's own turns: ModelArgs.copy_roles). A prompt position's key reads its final hidden state and the
    embedding of the token before it, so "the token that followed the one I just wrote" is a key the query can
    match directly. At the end of a name that ends the caller's turn, that token is the turn's end, a sink: the
    pointer following the name yields to the vocabulary, which closes the quote. With ModelArgs.copy_twins, a
    softmax on the row chooses how the copied mass is written: as the token itself or as its twin in one of the
    maps, so "Tuesday" said by the caller is "tuesday" in the tool call and "2" said with "p.m." is "14".
    With ModelArgs.copy_lookaround, the key also reads the token two before the position (spaces are tokens of
    their own, so after "Felix" and a space, one token before matches every word after a space in the prompt and
    the pointer jumped back: "Felix Felix Felix Novak"); the copy gate also reads the token after the one it would
    copy (after "Colin" the pointer sits on the space before "calling": copying it or closing the quote depends on
    the next word); and the choice of twin also reads the token the pointer is on (a bare "2:30" is the afternoon,
    a bare "9:30" the morning). NOTE: on a toy of names among other words it copies 86% of the name tokens and
    closes every quote, against 57% and 78% without it (tests/integration/test_copy_head.py); the embedded model trained with
    it wrote names that ran on into the comma after them, so `parley train` leaves it off (app/commands/train.py).
    NOTE: without a copy head the embedded model never learned to copy: teacher-forced on held-out tool calls the
    caller's name was 3-10% right (the JSON around it 98%), after 3000 steps and with a synthetic copy task; with
    it, 89%. With a gate on the row alone and no sinks, names ran on past their end ("Colin Col", "Noah p p p");
    with the gate also reading the copied embedding, still "Noah Noah Noah". NOTE: feeding what the pointer looks
    at into the vocabulary head (See et al.'s context vector), so that "Tuesday" could become "tuesday", broke
    copying on a toy (copy 2-87%, lowercased 1% after 600 steps, against 95% and 20% without it); the fold gate
    lowercased 93% after 300 steps.
    """

    def __init__(self, args):  # llm.model.ModelArgs
        super().__init__()
        d, c = args.d_model, args.copy_head_dim
        self.query = Linear(d, c, bias=False)
        self.key = Linear(d, c, bias=False)
        self.prev_key = Linear(d, c, bias=False)  # on the (normalized) embedding of the previous token
        self.gate = Linear(d, 1)
        self.copy_gate = Linear(d, 1, bias=False)  # on the expected embedding of the copied token
        if args.copy_lookaround:
            self.prev2_key = Linear(d, c, bias=False)  # the token two before
            self.next_gate = Linear(d, 1, bias=False)  # on the expected embedding of the token after the copied
        if args.copy_twins:
            self.fold = Linear(d, len(args.copy_twins))  # copy the token as it is (logit 0) or as a twin
            if args.copy_lookaround:
                self.fold_copy = Linear(d, len(args.copy_twins), bias=False)  # on the copied token

    def keys(self, normed, before):
        """Final-normed hidden states (B, S, d) and the normalized embeddings of the tokens 1 (and, with
        copy_lookaround, 2) before each position [(B, S, d), ...] -> keys (B, S, copy_head_dim)."""
        keys = self.key(normed) + self.prev_key(before[0])
        return keys + self.prev2_key(before[1]) if len(before) > 1 else keys

    def mix(self, normed, logits, source: CopySource):
        """Rows (B, T, d) and their vocabulary logits (B, T, V) -> log-probabilities (B, T, V) fp32."""
        B, T, V = logits.shape
        scores = self.query(normed) @ source.keys.transpose(1, 2) / math.sqrt(source.keys.shape[-1])  # (B, T, S)
        if source.valid is not None:
            scores = scores.masked_fill(~source.valid[:, None], float("-inf"))
        pointer = torch.softmax(scores.float(), dim=-1)
        weights = pointer.to(source.values.dtype)
        would_copy = weights @ source.values  # (B, T, d)
        gate = self.gate(normed) + self.copy_gate(would_copy)
        if source.next_values is not None:
            gate = gate + self.next_gate(weights @ source.next_values)
        g = torch.sigmoid(gate.float())  # (B, T, 1)
        vocabulary = g
        if source.copyable is not None:
            vocabulary = g + (1 - g) * (pointer * ~source.copyable[:, None]).sum(-1, keepdim=True)  # the sinks
            pointer = pointer * source.copyable[:, None]
        copied = torch.zeros((B, T, V), device=logits.device)  # (B, T, V): the pointer's mass per token
        if source.twins is not None:
            choice = self.fold(normed)
            if source.next_values is not None:  # copy_lookaround
                choice = choice + self.fold_copy(would_copy)
            choice = torch.softmax(F.pad(choice.float(), (1, 0)), dim=-1)  # (B, T, 1 + K): as it is, twin 1..K
            for k in range(source.twins.shape[1]):
                copied.scatter_add_(2, source.twins[:, k, None].expand(B, T, -1), pointer * choice[..., k + 1:k + 2])
            pointer = pointer * choice[..., :1]
        copied.scatter_add_(2, source.ids[:, None].expand(B, T, -1), pointer)
        p = vocabulary * torch.softmax(logits.float(), dim=-1) + (1 - g) * copied
        return p.clamp_min(1e-12).log()  # clamp, not an epsilon: no gradient through log(0)
