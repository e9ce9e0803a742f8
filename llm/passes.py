"""One forward pass over several sequences, each on its own KV cache, and the batcher that gathers the passes of
generations running on different threads into one (llm.blockdiff's decoder asks for its passes through it).

On a CPU a pass of a small model is bound by reading its weights, so the rows of several callers' next tokens go
through each projection together at little more than the cost of one caller's.
"""
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import kernels
from llm import openmp
from llm.model import KVCache, Transformer


@dataclass
class Pass:
    """One sequence's share of a forward pass: `ids` (T,) at positions start.., on `cache`, which holds the
    sequence's first `start` positions."""
    cache: KVCache
    start: int
    ids: torch.Tensor

    def check(self, model: Transformer) -> None:
        end = self.start + len(self.ids)
        if end > min(model.args.max_sequence_length, self.cache.max_len):
            raise ValueError(f"sequence of {end} tokens exceeds max_sequence_length={model.args.max_sequence_length}")


def passes(model: Transformer, work: list[Pass]) -> list[torch.Tensor]:
    """Several sequences' passes as one forward: their rows go through each projection together, and each
    attends to its own cache (causal over its rows). On a CPU a pass is bound by reading the weights, so the
    rows of several callers cost about what one caller's do. -> each sequence's hidden (T, d)."""
    for p in work:
        p.check(model)
    device = work[0].ids.device
    positions = torch.cat([torch.arange(p.start, p.start + len(p.ids), device=device) for p in work])
    cos, sin = model.rope_cos[positions], model.rope_sin[positions]  # (T, D)
    spans, masks, row = [], [], 0
    for p in work:
        T = len(p.ids)
        spans.append((row, row + T))
        row += T
        mask = None  # one row sees every key
        if T > 1:
            chunk = torch.ones(T, T, dtype=torch.bool, device=device).tril()  # causal, the canvas included
            mask = torch.cat([torch.ones(T, p.start, dtype=torch.bool, device=device), chunk], dim=1)
        masks.append(mask)
    x = model.embed(torch.cat([p.ids for p in work])[None])  # (1, T, d)
    joint = _JointRope(model.args, cos, sin) if model.transformer.blocks[0].qkv is not None else None
    for i, block in enumerate(model.transformer.blocks):
        if joint is not None:
            q, k, v = joint(block.qkv(block.attn_norm(x))[0])
        else:
            q, k, v = block.project(block.attn_norm(x))  # q (1, H, T, D), k v (1, Hkv, T, D)
            q, k = kernels.rope(q, k, cos, sin)
        ys = []
        for p, (a, b), mask in zip(work, spans, masks):
            end = p.start + b - a
            ck, cv = p.cache.k[i], p.cache.v[i]
            ck[:, :, p.start:end] = k[:, :, a:b]
            cv[:, :, p.start:end] = v[:, :, a:b]
            ys.append(F.scaled_dot_product_attention(q[:, :, a:b], ck[:, :, :end], cv[:, :, :end], attn_mask=mask,
                                                     enable_gqa=True))  # (1, H, T, D)
        y = ys[0] if len(ys) == 1 else torch.cat(ys, dim=2)
        x = block.mlp(x + block.merge(y))
    return [x[0, a:b] for a, b in spans]


class _JointRope:
    """q, k and v from a fused qkv product (llm.quant's packed CPU model), q and k rotated together: one rotation of
    every head a layer, its signed sine made once a forward. The same products bit for bit as project() and
    kernels.rope_ref. NOTE: 2-4% off a pass of 1, 9 or 64 rows (SmolLM2, 2 threads, the two ways alternated in one
    process, 2026-12-06): the CPU's small passes pay per op."""

    def __init__(self, args, cos: torch.Tensor, sin: torch.Tensor):
        self.heads, self.kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        half = args.head_dim // 2
        self.half, self.cos = half, cos[:, None]  # (T, 1, D)
        self.signed = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)[:, None]  # rotate_half's signs folded in

    def __call__(self, qkv: torch.Tensor):
        """qkv (T, (H + 2 Hkv) D) -> q (1, H, T, D), k, v (1, Hkv, T, D), q and k rotated."""
        h, hkv = self.heads, self.kv_heads
        heads = qkv.view(len(qkv), h + 2 * hkv, self.head_dim)
        qk = heads[:, :h + hkv]
        qk = qk * self.cos + qk.roll(self.half, -1) * self.signed
        return (qk[:, :h].transpose(0, 1)[None], qk[:, h:].transpose(0, 1)[None],
                heads[:, h + hkv:].transpose(0, 1)[None])


def _logits(model: Transformer, rows: torch.Tensor, mask_id: int) -> torch.Tensor:
    """The head's logits (fp32) for hidden rows (n, d); the mask token is never a prediction."""
    logits = model.head(rows[None])[0].float()
    logits[:, mask_id] = float("-inf")
    return logits


def forward(model: Transformer, work: list[tuple[Pass, slice]],
            mask_id: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`passes`, then the head on each pass's `rows` of its hidden, all in one product: -> (hidden, logits) each."""
    hidden = passes(model, [p for p, _ in work])
    picked = [h[rows] for h, (_, rows) in zip(hidden, work)]
    rows = torch.cat(picked)
    if not len(rows):   # prefill chunks only: no head
        return [(h, rows.new_zeros(0, model.args.vocab_size)) for h in hidden]
    logits = _logits(model, rows, mask_id).split([len(r) for r in picked])
    return list(zip(hidden, logits))


class PassBatcher:
    """Runs the passes of generations on different threads as one forward (`forward`): on a CPU a pass is bound
    by reading the weights, so several callers' passes cost little more than one's (1.6x the throughput of one
    by one for two one-row passes, 2.1x for four, on 2 AVX2 cores with SmolLM2-135M in fp16).

    A generation `joined()` for its duration; each pass it asks for waits until every generation joined has
    asked for its own, or at most `linger_s` after it asked (a generation busy between passes, building its
    grammar, delays the others no longer). The thread whose arrival completes a batch runs it, on
    `threads(generations joined)` intra-op threads when that is set (llm.openmp.threads: the process that serves
    calls chooses them per forward, app.pipeline.services).
    """

    def __init__(self, model: Transformer, mask_id: int, linger_s: float = 0.005):
        self.model, self.mask_id, self.linger_s = model, mask_id, linger_s
        self._ready = threading.Condition()
        self._joined = 0
        self._waiting: list[_Asked] = []
        self._busy = False       # a batch is running (one at a time: they would share the same cores)
        self._idle_since = 0.0   # when the last one ended
        self.batches = 0         # forwards run, and the passes they held (what batching saved: passes - batches)
        self.passes = 0
        # (generations running now) -> the threads the next forward runs on; None: the running thread's own
        self.threads = None

    @contextmanager
    def joined(self):
        """A generation's span: while inside, its passes wait for the other joined ones' -> `run`."""
        with self._ready:
            self._joined += 1
        try:
            yield self.run
        finally:
            with self._ready:
                self._joined -= 1
                self._ready.notify_all()   # the passes waiting for this one's may go now

    @contextmanager
    def exclusive(self):
        """A span in which the caller's own forwards run between the batches, on the threads a batch would have:
        a pass that cannot share a forward (one with other weights: llm.lora.MergedAdapter.removed)."""
        with self._ready:
            while self._busy:
                self._ready.wait()
            self._busy = True
            running = max(1, self._joined)
        try:
            with openmp.threads(self._threads_for(running)):
                yield
        finally:
            with self._ready:
                self._busy, self._idle_since = False, time.monotonic()
                self._ready.notify_all()

    def _threads_for(self, generations: int) -> int:
        """The intra-op threads a forward runs on with `generations` joined (0: the running thread's own)."""
        return self.threads(generations) if self.threads is not None else 0

    def run(self, p: Pass, rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """The pass's (hidden, logits of `rows`), from a forward it shares with the passes asked alongside it."""
        p.check(self.model)   # a bad pass fails its own generation, not the batch it would have joined
        asked = _Asked(p, rows, time.monotonic())
        with self._ready:
            self._waiting.append(asked)
            self._ready.notify_all()
            while asked.result is None:
                if not self._busy:  # the linger counts from when the pass could have run alone
                    late = self.linger_s - (time.monotonic() - max(self._waiting[0].since, self._idle_since))
                    if len(self._waiting) >= self._joined or late <= 0:
                        batch, self._waiting, self._busy = self._waiting, [], True
                        running = self._joined
                        break
                    self._ready.wait(late)
                else:
                    self._ready.wait()
            else:
                return asked.outcome()
        try:
            with openmp.threads(self._threads_for(running)):
                results = forward(self.model, [(a.p, a.rows) for a in batch], self.mask_id)
        except BaseException as exc:
            results = [exc] * len(batch)
        with self._ready:
            for a, result in zip(batch, results):
                a.result = result
            self._busy, self._idle_since = False, time.monotonic()
            self.batches += 1
            self.passes += len(batch)
            self._ready.notify_all()
        return asked.outcome()


@dataclass
class _Asked:
    p: Pass
    rows: slice
    since: float
    result: tuple | BaseException | None = None

    def outcome(self) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def alone(model: Transformer, mask_id: int):
    """A `run` for one generation on its own: its passes one forward each."""
    return lambda p, rows: forward(model, [(p, rows)], mask_id)[0]
