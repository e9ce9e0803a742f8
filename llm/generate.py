"""The masked-diffusion sampler: semi-autoregressive blocks, each filled in a few parallel denoising passes.

The canvas is the prompt followed by max_new_tokens masks. Blocks of block_length tokens are filled left to
right; each pass scores every masked position of the block (chosen token + its softmax probability) and a
commit policy fixes some of them for good: `threshold` (Fast-dLLM) or a fixed count per pass (`steps`, LLaDA's
low-confidence remasking). A denoiser supplies the block's logits, from the model with or without a KV cache.
"""
import threading
from dataclasses import dataclass, field
from typing import Callable

import torch

import kernels

CACHE_MODES = ("prefix", "dual", "none")


@dataclass(frozen=True)
class SpecialIds:
    mask: int                # the token every canvas position starts as; never chosen
    stop: tuple[int, ...]    # end of turn / EOS ids: the reply ends before the first one


@dataclass(frozen=True)
class DecodeOptions:
    """How a reply is decoded. These defaults are the project's one set (BlockOptions, app.agent.options.AgentOptions,
    llm.bench.BenchOptions, Engine.generate and `parley llm` start from them); a checkpoint's generation_config.json
    overrides them for the agent."""
    max_new_tokens: int = 96      # a spoken reply is short; a tool call fits in the same budget
    block_length: int = 32        # tokens per semi-autoregressive block (each block is streamed when settled)
    threshold: float = 0.9        # commit every masked token at least this confident (and the best one)
    steps: int | None = None      # instead: passes per block, each committing ~block_length/steps tokens
    temperature: float = 0.0      # > 0: Gumbel noise on the choice (LLaDA); confidence is still softmax prob
    cache: str = "prefix"         # prefix: KV before the block reused by its passes; dual: also after; none
    refresh_passes: int = 0       # with a cache: recompute it every this many passes of a block (0 = once)
    stop_at_eos: bool = True      # False: always fill max_new_tokens (benchmarks)

    def __post_init__(self):
        if self.max_new_tokens < 1 or self.block_length < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} and block_length={self.block_length} "
                             "must be >= 1")
        if self.steps is None and not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold={self.threshold} must be in (0, 1]")
        if self.steps is not None and not 1 <= self.steps <= self.block_length:
            raise ValueError(f"steps={self.steps} must be between 1 and block_length={self.block_length}")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} must be >= 0")
        if self.cache not in CACHE_MODES:
            raise ValueError(f"cache={self.cache!r}: choose one of {', '.join(CACHE_MODES)}")
        if self.refresh_passes < 0:
            raise ValueError(f"refresh_passes={self.refresh_passes} must be >= 0")


@dataclass
class Decoded:
    tokens: list[int]   # the reply's ids, up to (not including) the first stop id
    passes: int         # denoising forward passes
    stopped: str        # "eos", "length", "cancelled" or "unmeant" (BlockOptions.least_share)
    # under a grammar (block_reply's matcher): per token, the share of the model's probability the grammar allowed
    # where it was committed (1.0 for one the grammar forced); empty without a grammar
    shares: list[float] = field(default_factory=list)


# A denoiser: (canvas (1, T), block_start, block_end, pass_in_block) -> logits (block_end - block_start, V),
# logit row i for the token at block_start + i.
Denoiser = Callable[[torch.Tensor, int, int, int], torch.Tensor]


class ModelDenoiser:
    """Block logits from a Transformer: a full pass fills the KV cache, later passes recompute only part."""

    def __init__(self, model, canvas_len: int, cache: str = "prefix", refresh_passes: int = 0):
        self.model = model
        self.mode = cache
        self.refresh_passes = refresh_passes
        self.shift = int(model.args.shift_logits)  # raw row i - shift holds the logits of token i
        self.cache = None if cache == "none" else model.new_cache(1, canvas_len)

    def __call__(self, canvas, block_start, block_end, pass_in_block):
        lo, hi = block_start - self.shift, block_end - self.shift  # raw rows that hold the block's logits
        full = (self.cache is None or pass_in_block == 0
                or (self.refresh_passes and pass_in_block % self.refresh_passes == 0))
        if full:
            hidden = self.model.trunk(canvas, 0, self.cache)[:, lo:hi]  # (1, L, d)
        elif self.mode == "prefix":
            # the block and everything after it, attending to the cached prefix
            hidden = self.model.trunk(canvas[:, lo:], lo, self.cache)[:, :hi - lo]
        else:
            # dual: only the block (and Dream's one row before it), attending to cached keys on both sides
            hidden = self.model.trunk(canvas[:, lo:block_end], lo, self.cache, kv_len=canvas.shape[1])
            hidden = hidden[:, :hi - lo]
        return self.model.head(hidden)[0]  # (L, V)


def score(logits: torch.Tensor, mask_id: int, temperature: float = 0.0, generator=None):
    """logits (L, V) -> (token (L,), confidence (L,) fp32): the choice and its softmax probability."""
    if temperature <= 0:
        return kernels.confidence_argmax(logits, mask_id)
    logits = logits.float().clone()  # (L, V); the caller's logits stay as they were
    logits[:, mask_id] = float("-inf")
    probs = torch.softmax(logits, dim=-1)
    uniform = torch.rand(logits.shape, device=logits.device, generator=generator).clamp_(min=1e-20)
    gumbel = -torch.log(-torch.log(uniform))  # argmax(l/T + g) samples softmax(l/T)
    token = (logits / temperature + gumbel).argmax(dim=-1)
    return token, probs.gather(-1, token[:, None])[:, 0]


def commit_threshold(confidence: torch.Tensor, masked: torch.Tensor, threshold: float) -> torch.Tensor:
    """Masked positions with confidence >= threshold, and at least the single most confident one."""
    confidence = confidence.masked_fill(~masked, -1.0)  # (L,)
    commit = confidence >= threshold
    commit[confidence.argmax()] = True
    return commit & masked


def commit_count(confidence: torch.Tensor, masked: torch.Tensor, count: int) -> torch.Tensor:
    """The `count` most confident masked positions (LLaDA's low-confidence remasking)."""
    confidence = confidence.masked_fill(~masked, float("-inf"))
    commit = torch.zeros_like(masked)
    commit[confidence.topk(count).indices] = True
    return commit & masked


def step_schedule(block_len: int, steps: int) -> list[int]:
    """Tokens committed by each pass of a block: block_len spread over steps passes, the extra ones first."""
    steps = min(steps, block_len)
    return [block_len // steps + (1 if i < block_len % steps else 0) for i in range(steps)]


def first_stop(ids: list[int], stop: tuple[int, ...]) -> int | None:
    return next((i for i, t in enumerate(ids) if t in stop), None)


def fill_block(denoise: Denoiser, canvas, block_start, block_end, special: SpecialIds, opts: DecodeOptions,
               cancel=None, generator=None) -> tuple[list[int] | None, int]:
    """Denoise canvas[block_start:block_end] in place until settled -> (its ids, passes); ids None if cancelled.

    The threshold policy reads the block back after each pass (one host sync) and also stops early once a
    stop token is committed with every position before it settled; the steps policy syncs once per block.
    """
    block = canvas[0, block_start:block_end]  # (L,) view into the canvas
    masked = block == special.mask  # (L,) bool
    schedule = step_schedule(block.numel(), opts.steps) if opts.steps else None
    passes = 0
    while True:
        if cancel is not None and cancel.is_set():
            return None, passes
        logits = denoise(canvas, block_start, block_end, passes)  # (L, V)
        token, confidence = score(logits, special.mask, opts.temperature, generator)
        if schedule:
            commit = commit_count(confidence, masked, schedule[passes])
        else:
            commit = commit_threshold(confidence, masked, opts.threshold)
        block.copy_(torch.where(commit, token, block))
        masked &= ~commit
        passes += 1
        if schedule:
            if passes == len(schedule):
                return block.tolist(), passes
            continue
        ids = block.tolist()
        cut = first_stop(ids, special.stop) if opts.stop_at_eos else None
        if special.mask not in ids[:cut]:
            return ids, passes


def denoise_reply(denoise: Denoiser, prompt: torch.Tensor, special: SpecialIds, opts: DecodeOptions,
                  on_block: Callable[[list[int]], None] | None = None, cancel: threading.Event | None = None,
                  generator=None) -> Decoded:
    """Write a reply after prompt (P,) int64 block by block; on_block gets each settled block's new ids."""
    n_prompt = prompt.numel()
    if n_prompt == 0:
        raise ValueError("the prompt is empty: render at least the assistant header")
    canvas = torch.full((1, n_prompt + opts.max_new_tokens), special.mask, dtype=torch.long, device=prompt.device)
    canvas[0, :n_prompt] = prompt
    tokens, passes = [], 0
    for block_start in range(n_prompt, canvas.shape[1], opts.block_length):
        block_end = min(block_start + opts.block_length, canvas.shape[1])
        ids, block_passes = fill_block(denoise, canvas, block_start, block_end, special, opts, cancel, generator)
        passes += block_passes
        if ids is None:
            return Decoded(tokens, passes, "cancelled")
        cut = first_stop(ids, special.stop) if opts.stop_at_eos else None
        tokens += ids[:cut]
        if on_block is not None and ids[:cut]:
            on_block(ids[:cut])
        if cut is not None:
            return Decoded(tokens, passes, "eos")
    return Decoded(tokens, passes, "length")


def autoregressive_reply(model, prompt: torch.Tensor, special: SpecialIds, max_new_tokens: int,
                         stop_at_eos: bool = True, on_token=None) -> Decoded:
    """Baseline: the same weights under a causal mask with a KV cache, one greedy token per pass.

    The last position's raw logits pick the next token, so only a model trained left to right (Dream's
    shifted head) says anything sensible; for the others this measures the cost of decoding this way.
    """
    n_prompt = prompt.numel()
    cache = model.new_cache(1, n_prompt + max_new_tokens)
    hidden = model.trunk(prompt[None], 0, cache, causal=True)[:, -1:]  # (1, 1, d)
    tokens = []
    for pos in range(n_prompt, n_prompt + max_new_tokens):
        token, _ = kernels.confidence_argmax(model.head(hidden)[0], special.mask)  # (1,)
        token_id = token.item()
        if stop_at_eos and token_id in special.stop:
            return Decoded(tokens, len(tokens) + 1, "eos")
        tokens.append(token_id)
        if on_token is not None:
            on_token(len(tokens))
        if pos + 1 < n_prompt + max_new_tokens:
            hidden = model.trunk(token[None], pos, cache, causal=True)  # (1, 1, d)
    return Decoded(tokens, len(tokens), "length")
