"""Masked-diffusion training (LLaDA's SFT objective) and a byte-level BPE tokenizer, on the CPU, deterministic.

Each example is a prompt and a response. Per sequence a ratio t ~ U(0, 1) is drawn; every response token is masked
with probability t; the loss is the cross-entropy on the masked positions weighted by 1/t, summed and divided by
the response length (LLaDA, Nie et al. 2025, eq. 5). The prompt is never masked.
"""
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm import tqdm

from llm.model import ModelArgs, Transformer


@dataclass(frozen=True)
class TrainOptions:
    steps: int = 1200
    batch_size: int = 16              # sequences per step
    lr: float = 3e-3                  # peak AdamW learning rate
    min_lr_ratio: float = 0.1         # cosine decay ends at lr * this
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 100             # steps between held-out losses
    eval_batches: int = 4             # held-out batches per evaluation (fixed masks, same every time)
    min_mask_ratio: float = 1e-3      # t is drawn from [min_mask_ratio, 1] so 1/t stays finite
    seed: int = 0
    # NOTE: 1 thread, not 2: on 2 cores shared with other jobs a 2-thread step took 6-8 s against 1.6-2.1 s
    # for 1 thread (d_model 256, 16 x 150 tokens), as the threads wait on each other at every op.
    threads: int = 1                  # torch CPU threads; the result depends on it

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps={self.steps} and batch_size={self.batch_size} must be >= 1")
        if not 0 < self.min_mask_ratio < 1:
            raise ValueError(f"min_mask_ratio={self.min_mask_ratio} must be in (0, 1)")


@dataclass
class Example:
    prompt: list[int]      # never masked
    response: list[int]    # the target, end-of-turn (and any padding after it) included


def train_tokenizer(texts: Iterable[str], vocab_size: int, special_tokens: list[str]) -> Tokenizer:
    """Byte-level BPE trained on `texts`; special_tokens get ids 0.. in order and are never split."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def collate(batch: list[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> ids (B, T) right-padded, is_response (B, T) bool, attend (B, T) bool (False on padding)."""
    T = max(len(e.prompt) + len(e.response) for e in batch)
    ids = torch.full((len(batch), T), pad_id, dtype=torch.long)
    is_response = torch.zeros((len(batch), T), dtype=torch.bool)
    attend = torch.zeros((len(batch), T), dtype=torch.bool)
    for i, e in enumerate(batch):
        p, n = len(e.prompt), len(e.prompt) + len(e.response)
        ids[i, :n] = torch.tensor(e.prompt + e.response)
        is_response[i, p:n] = True
        attend[i, :n] = True
    return ids, is_response, attend


def length_grouped_batches(examples: list[Example], batch_size: int, generator, pool_batches: int = 32):
    """Endless batches: shuffled, then sorted by length within pools of pool_batches batches, so little padding."""
    while True:
        order = torch.randperm(len(examples), generator=generator).tolist()
        for start in range(0, len(order), batch_size * pool_batches):
            pool = sorted(order[start:start + batch_size * pool_batches],
                          key=lambda i: len(examples[i].prompt) + len(examples[i].response))
            groups = [pool[j:j + batch_size] for j in range(0, len(pool), batch_size)]
            for g in torch.randperm(len(groups), generator=generator).tolist():
                yield [examples[i] for i in groups[g]]


def masked_diffusion_loss(model: Transformer, ids, is_response, attend, mask_id: int, ratio, generator=None):
    """LLaDA loss for one batch; ratio (B,) is each sequence's mask probability t. Returns a scalar."""
    noise = torch.rand(ids.shape, generator=generator)  # (B, T)
    masked = is_response & (noise < ratio[:, None])
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    logits = model(noisy, key_padding_mask=attend)  # (B, T, V)
    ce = F.cross_entropy(logits[masked], ids[masked], reduction="none")  # (n_masked,)
    weight = (1.0 / ratio)[:, None].expand_as(ids)[masked]  # 1/t of each masked token's sequence
    lengths = is_response.sum(1).clamp(min=1)[:, None].expand_as(ids)[masked].float()
    return (ce * weight / lengths).sum() / ids.shape[0]


def stratified_ratios(batch_size: int, min_ratio: float, generator) -> torch.Tensor:
    """One t per sequence, spread evenly over [min_ratio, 1] (lower variance than i.i.d. draws)."""
    u = (torch.arange(batch_size) + torch.rand(batch_size, generator=generator)) / batch_size
    return min_ratio + (1 - min_ratio) * u[torch.randperm(batch_size, generator=generator)]


def learning_rate(step: int, opts: TrainOptions) -> float:
    if step < opts.warmup_steps:
        return opts.lr * (step + 1) / opts.warmup_steps
    progress = (step - opts.warmup_steps) / max(1, opts.steps - opts.warmup_steps)
    return opts.lr * (opts.min_lr_ratio + (1 - opts.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def heldout_loss(model, batches: list, mask_id: int, seed: int) -> float:
    """Mean loss over fixed batches with fixed ratios and masks, so evaluations are comparable."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    total = 0.0
    for ids, is_response, attend in batches:
        ratio = stratified_ratios(ids.shape[0], 0.05, generator)
        total += masked_diffusion_loss(model, ids, is_response, attend, mask_id, ratio, generator).item()
    model.train()
    return total / max(1, len(batches))


def train(args: ModelArgs, train_set: list[Example], heldout_set: list[Example], mask_id: int, pad_id: int,
          opts: TrainOptions = TrainOptions(), log: Callable[[str], None] = print,
          on_eval: Callable[[Transformer, int], None] | None = None) -> tuple[Transformer, dict]:
    """Train a new model on train_set; returns it and a summary (losses, seconds). Same inputs, same weights.

    on_eval(model, step) runs after each held-out evaluation (e.g. to save a checkpoint of the run so far).
    """
    torch.set_num_threads(opts.threads)
    torch.manual_seed(opts.seed)
    generator = torch.Generator().manual_seed(opts.seed)
    model = Transformer(args)
    model.init_weights()
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": opts.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=opts.lr, betas=(0.9, 0.95))
    eval_batches = [collate(heldout_set[i:i + opts.batch_size], pad_id)
                    for i in range(0, min(len(heldout_set), opts.eval_batches * opts.batch_size), opts.batch_size)]
    summary = {"heldout_loss": [], "train_loss": []}
    start, running = time.perf_counter(), None
    batches = length_grouped_batches(train_set, opts.batch_size, generator)
    bar = tqdm(range(opts.steps), desc="train", unit="step", dynamic_ncols=True)
    for step in bar:
        batch = next(batches)
        ids, is_response, attend = collate(batch, pad_id)
        ratio = stratified_ratios(len(batch), opts.min_mask_ratio, generator)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, opts)
        loss = masked_diffusion_loss(model, ids, is_response, attend, mask_id, ratio, generator)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), opts.grad_clip)
        optimizer.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        bar.set_postfix(loss=f"{running:.3f}")
        if eval_batches and ((step + 1) % opts.eval_every == 0 or step + 1 == opts.steps):
            held = heldout_loss(model, eval_batches, mask_id, opts.seed)
            summary["heldout_loss"].append((step + 1, held))
            summary["train_loss"].append((step + 1, running))
            log(f"step {step + 1}: train loss {running:.4f}, held-out loss {held:.4f}, "
                f"{time.perf_counter() - start:.0f} s")
            if on_eval is not None:
                on_eval(model, step + 1)
    summary["seconds"] = time.perf_counter() - start
    model.eval()
    return model, summary
