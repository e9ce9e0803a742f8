"""Masked-diffusion training (LLaDA's SFT objective) and a byte-level BPE tokenizer, on the CPU, deterministic.

Each example is a prompt and a response. Per sequence a ratio t ~ U(0, 1) is drawn; every response token is masked
with probability t; the loss is the cross-entropy on the masked positions weighted by 1/t, summed and divided by
the response length (LLaDA, Nie et al. 2025, eq. 5). The prompt is never masked. A fraction of the sequences
(suffix_fraction) masks the last t of the response instead: the same loss, on the masks a block sampler sees.
"""
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm import tqdm

from llm.model import ModelArgs, Transformer
from llm.reader import dense


@dataclass(frozen=True)
class TrainOptions:
    # NOTE: 4600, not 5000: the reader's features made a step ~6% dearer, and 5000 steps took 63 min of the 60 the
    # recipe has on 2 cores (with the last layer skipping the masks' rows, 0.71 s a step: 5000 would be ~61 min)
    steps: int = 4600
    batch_size: int = 16              # sequences per step
    lr: float = 3e-3                  # peak AdamW learning rate
    min_lr_ratio: float = 0.1         # cosine decay ends at lr * this
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 100             # steps between held-out losses
    eval_batches: int = 4             # held-out batches per evaluation (fixed masks, same every time)
    # NOTE: 0.2, not LLaDA's 1e-3: at 1e-3 one nearly unmasked sequence weighs ~1000x, its clipped gradient
    # drowned the left-context loss (held-out next-token accuracy 28% after 500 steps).
    min_mask_ratio: float = 0.2       # t is drawn from [min_mask_ratio, 1], so 1/t <= 5
    # NOTE: sequences that mask a suffix (the last t of the response) rather than random tokens. Suffix masks are
    # what the semi-autoregressive sampler meets (masks to the right of what is settled); with none, a 1200-step
    # run (d_model 192) decoded garbled text: 0% tool-call exact match on held-out dialogues.
    suffix_fraction: float = 0.5
    # NOTE: sequences whose response tokens are all predicted in one pass from a clean left context (see
    # left_context_batch; needs a shift_logits model): an autoregressive amount of signal per sequence. With
    # masked-diffusion sequences only, a d_model 128 model fitting 40 dialogue turns for 300 steps predicted
    # nothing but <|end|> (54% of positions), where the same model trained left to right reached 98%.
    causal_fraction: float = 0.75
    # NOTE: a share of the left-context sequences can be replaced by a synthetic copy task (CopyTask: the reply
    # repeats the user's message). Copying is what the front desk needs most (a caller's name into the tool call
    # and the reply) and what the model learned last: teacher-forced on held-out turns, name tokens were 3-10%
    # right with every JSON token around them 98% right. Off by default: at 0.25 (with tied embeddings) a
    # 2500-step run scored 28% held-out tool-call exact match against 40% for 3000 steps without it, and its copy
    # accuracy on the task itself was still 43% at step 700; it did not make copying appear sooner.
    copy_fraction: float = 0.0        # of the left-context sequences, when train() is given a CopyTask
    # an exponential moving average of the weights (0: none): the model returned is the average, the last
    # weights are in the summary's "raw_state"
    ema_decay: float = 0.0
    seed: int = 0
    # NOTE: 1 thread, not 2: on 2 cores shared with other jobs a 2-thread step took 6-8 s against 1.6-2.1 s
    # for 1 thread (d_model 256, 16 x 150 tokens), as the threads wait on each other at every op.
    threads: int = 1                  # torch CPU threads; the result depends on it

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps={self.steps} and batch_size={self.batch_size} must be >= 1")
        if not 0 < self.min_mask_ratio < 1:
            raise ValueError(f"min_mask_ratio={self.min_mask_ratio} must be in (0, 1)")
        if not 0 <= self.copy_fraction <= 1:
            raise ValueError(f"copy_fraction={self.copy_fraction} must be in [0, 1]")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay={self.ema_decay} must be in [0, 1)")


@dataclass
class Example:
    prompt: list[int]      # never masked
    response: list[int]    # the target, end-of-turn (and any padding after it) included
    # for a model with a reader (ModelArgs.reader_dim): what it makes of the caller's words, as
    # llm.reader.read_prompt gives it: [(prompt position, (n, reader_dim))], shared between examples
    read: list = field(default_factory=list)


def read_batch(batch: list[Example], length: int) -> torch.Tensor | None:
    """The examples' reader features laid out over their prompts (B, length, reader_dim), prompts at position 0
    (as collate and left_context_batch put them); None when no example has any."""
    chunks = [c for e in batch for c in e.read]
    if not chunks:
        return None
    return torch.stack([dense(e.read, length, chunks[0][1].shape[-1]) for e in batch])


@dataclass(frozen=True)
class CopyTask:
    """Synthetic copy examples: prompt = opener + a span of `text` + closer, response = the span, end, padding."""
    text: list[int]        # a token stream to cut spans from (e.g. the training callers' words)
    opener: list[int]      # e.g. "<|user|>"
    closer: list[int]      # e.g. "<|end|><|assistant|>"
    end_id: int
    response_len: int
    min_len: int = 3
    max_len: int = 24

    def sample(self, n: int, generator) -> list[Example]:
        out = []
        for _ in range(n):
            length = int(torch.randint(self.min_len, self.max_len + 1, (), generator=generator))
            start = int(torch.randint(0, len(self.text) - length, (), generator=generator))
            span = self.text[start:start + length]
            out.append(Example(self.opener + span + self.closer,
                               span + [self.end_id] * (self.response_len - len(span))))
        return out


def train_tokenizer(texts: Iterable[str], vocab_size: int, special_tokens: list[str]) -> Tokenizer:
    """Byte-level BPE trained on `texts`; special_tokens get ids 0.. in order and are never split.

    Spaces are tokens of their own, so a word is the same tokens after a space as after a quote: the agent copies
    "Dmitri", "10:00" and "blow dry" from what the caller said into a tool call's JSON, and with GPT-2's usual
    pre-tokenizer " Dmitri" and "Dmitri" share no token. NOTE: with the usual one, a model teacher-forced on
    held-out tool calls got the first token of the name, the hour and the service wrong even where the rest of
    the call was right ("10:00" -> "11:00"), after 1900 steps. Costs ~30% more tokens per prompt.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(" ", "isolated"),
                                                       pre_tokenizers.ByteLevel(add_prefix_space=False)])
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


def forward_with_mask(model: Transformer, ids, positions, allowed, copy_from=None) -> torch.Tensor:
    """The model's raw logits with an explicit attention mask: ids, positions (B, T), allowed (B, T, T) bool (query,
    key) True = attend; copy_from (B, T) bool: what a copy head may point at (default all). The same weights and
    function as Transformer.forward, which is the all-True case."""
    hidden = model.trunk_masked(ids, positions, allowed)[0]
    return model.head(hidden, model.copy_source(hidden, ids, copy_from))


def left_context_batch(batch: list[Example], pad_id: int, mask_id: int, stop_id: int | None = None,
                       extra_stops: int = 4):
    """Every response token predicted at once, each in the state a left-to-right sampler meets it in.

    For a shift_logits model (raw row r holds the logits of token r + 1). Layout [prompt | response | masks],
    the masks spanning the whole response at its positions, as the sampler's canvas does; the clean copy ends a
    few tokens after the first stop_id. The last prompt row predicts the first token, clean row j the token
    after it. The prompt sees itself and the masks; clean token j sees the prompt, the clean tokens up to j and
    the masks after j; the masks see the prompt and the masks. No row sees a token it (or a row it sees) predicts.
    -> ids, positions (B, T), allowed (B, T, T), targets (B, T) (-100 where no loss), lengths (B,), is_prompt (B, T)
    (what a copy head points into).
    """
    lengths = [min(len(e.response), e.response.index(stop_id) + 1 + extra_stops) if stop_id in e.response
               else len(e.response) for e in batch]
    T = max(len(e.prompt) + n + len(e.response) for e, n in zip(batch, lengths))
    ids = torch.full((len(batch), T), pad_id, dtype=torch.long)
    positions = torch.zeros((len(batch), T), dtype=torch.long)
    allowed = torch.eye(T, dtype=torch.bool).repeat(len(batch), 1, 1)  # padding rows attend to themselves only
    targets = torch.full((len(batch), T), -100, dtype=torch.long)
    is_prompt = torch.zeros((len(batch), T), dtype=torch.bool)
    for b, (e, L) in enumerate(zip(batch, lengths)):
        P, C = len(e.prompt), len(e.response)
        clean, masks = slice(P, P + L), slice(P + L, P + L + C)
        settled = torch.ones(L, C, dtype=torch.bool).tril()  # (clean j, position k): k <= j
        ids[b, :P + L + C] = torch.tensor(e.prompt + e.response[:L] + [mask_id] * C)
        positions[b, :P + L] = torch.arange(P + L)
        positions[b, masks] = torch.arange(P, P + C)
        allowed[b, :P + L + C, :P] = True  # every row sees the prompt
        allowed[b, :P, masks] = True  # the prompt sees the canvas of masks, as in the sampler's first pass
        allowed[b, clean, clean] = settled[:, :L]
        allowed[b, clean, masks] = ~settled  # settled tokens see the masks after them, as in the sampler
        allowed[b, masks, masks] = True
        targets[b, P - 1:P + L - 1] = torch.tensor(e.response[:L])  # row r predicts the token at r + 1
        is_prompt[b, :P] = True
    return ids, positions, allowed, targets, torch.tensor(lengths), is_prompt


def head_at(model: Transformer, hidden, rows, source) -> torch.Tensor:
    """The model's head on the rows (B, R) of the residual stream hidden (B, T, d) -> (B, R, V): a loss reads a
    few rows, and the output layers cost per row (a copy head's mixture is (rows, vocabulary) wide)."""
    return model.head(hidden.gather(1, rows[..., None].expand(-1, -1, hidden.shape[-1])), source)


def left_context_loss(model: Transformer, batch: list[Example], pad_id: int, mask_id: int,
                      stop_id: int | None = None) -> torch.Tensor:
    """Mean over sequences of the mean cross-entropy of every response token given the settled ones before it."""
    ids, positions, allowed, targets, lengths, is_prompt = left_context_batch(batch, pad_id, mask_id, stop_id)
    prompt_len = is_prompt.sum(1)
    # the rows with a target (the last prompt row and the clean ones before the last), up to the longest: the
    # last layer skips the canvas of masks after them, and the head runs on them only
    wanted = min(ids.shape[1], int((prompt_len + lengths.max()).max()))
    hidden = model.trunk_masked(ids, positions, allowed, read=read_batch(batch, ids.shape[1]),
                                rows=wanted)[0]  # (B, wanted, d)
    rows = (prompt_len[:, None] - 1 + torch.arange(int(lengths.max()))).clamp(max=wanted - 1)  # (B, R)
    S = int(prompt_len.max())
    source = model.copy_source(hidden[:, :S], ids[:, :S], is_prompt[:, :S])
    logits = head_at(model, hidden, rows, source)  # (B, R, V)
    ce = F.cross_entropy(logits.transpose(1, 2), targets.gather(1, rows), reduction="none")  # (B, R), 0: no target
    return (ce.sum(1) / lengths).mean()


def masked_diffusion_loss(model: Transformer, ids, is_response, attend, mask_id: int, ratio, generator=None,
                          suffix=None, read=None):
    """LLaDA loss for one batch; ratio (B,) is each sequence's mask fraction t. Returns a scalar.

    suffix (B,) bool: those sequences mask the last t of their response instead of each token with probability t.
    read: the reader's features (read_batch), for a model with a reader.
    """
    noise = torch.rand(ids.shape, generator=generator)  # (B, T)
    if suffix is not None:
        # position within the response as a fraction of its length: (B, T) in [0, 1)
        rank = (is_response.cumsum(1) - 1).clamp(min=0) / is_response.sum(1, keepdim=True).clamp(min=1)
        noise = torch.where(suffix[:, None], 1 - rank - 1e-6, noise)  # the last t of the response falls below t
    masked = is_response & (noise < ratio[:, None])
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    # the head on the rows that predict a masked token only (Transformer.forward's logits, gathered)
    hidden = model.trunk(noisy, key_padding_mask=attend, read=read)  # (B, T, d)
    source = model.copy_source(hidden, noisy, attend & ~is_response)
    counts = masked.sum(1)
    R = max(1, int(counts.max()))
    where = masked.float().argsort(dim=1, descending=True, stable=True)[:, :R]  # (B, R): masked positions, in order
    rows = (where - int(model.args.shift_logits)).clamp(min=0)  # a shift_logits row predicts the token after it
    logits = head_at(model, hidden, rows, source)  # (B, R, V)
    found = torch.arange(R) < counts[:, None]  # (B, R): row-major, the order of ids[masked]
    ce = F.cross_entropy(logits[found], ids.gather(1, where)[found], reduction="none")  # (n_masked,)
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
    for ids, is_response, attend, *read in batches:  # (collate's three, and read_batch's features)
        ratio = stratified_ratios(ids.shape[0], 0.05, generator)
        total += masked_diffusion_loss(model, ids, is_response, attend, mask_id, ratio, generator,
                                       read=read[0] if read else None).item()
    model.train()
    return total / max(1, len(batches))


def train(args: ModelArgs, train_set: list[Example], heldout_set: list[Example], mask_id: int, pad_id: int,
          stop_id: int | None = None, opts: TrainOptions = TrainOptions(), log: Callable[[str], None] = print,
          on_eval: Callable[[Transformer, int], None] | None = None,
          init_state: dict | None = None, copy_task: CopyTask | None = None) -> tuple[Transformer, dict]:
    """Train a new model on train_set; returns it and a summary (losses, seconds). Same inputs, same weights.

    on_eval(model, step) runs after each held-out evaluation (e.g. to save a checkpoint of the run so far).
    """
    torch.set_flush_denormal(True)  # this thread, and the CPU threads torch starts after it (app.cli.flush_denormals)
    torch.set_num_threads(opts.threads)
    torch.manual_seed(opts.seed)
    generator = torch.Generator().manual_seed(opts.seed)
    if opts.causal_fraction and not args.shift_logits:
        raise ValueError("left-context sequences (causal_fraction > 0) need a model with shift_logits=True")
    model = Transformer(args)
    model.init_weights()
    if init_state is not None:  # continue from a checkpoint's weights
        model.load_state_dict(init_state)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": opts.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=opts.lr, betas=(0.9, 0.95))
    eval_batches = []
    for i in range(0, min(len(heldout_set), opts.eval_batches * opts.batch_size), opts.batch_size):
        ids, is_response, attend = collate(heldout_set[i:i + opts.batch_size], pad_id)
        eval_batches.append((ids, is_response, attend, read_batch(heldout_set[i:i + opts.batch_size], ids.shape[1])))
    summary = {"heldout_loss": [], "train_loss": []}
    params = list(model.parameters())
    average = [p.detach().clone() for p in params] if opts.ema_decay else None
    start, running = time.perf_counter(), None
    batches = length_grouped_batches(train_set, opts.batch_size, generator)
    bar = tqdm(range(opts.steps), desc="train", unit="step", dynamic_ncols=True)
    for step in bar:
        batch = next(batches)
        batch = [batch[i] for i in torch.randperm(len(batch), generator=generator).tolist()]  # lengths sorted
        n_causal = round(opts.causal_fraction * len(batch))  # the batch is in random order: take the first ones
        if copy_task is not None and opts.copy_fraction:
            n_copy = round(opts.copy_fraction * n_causal)
            batch = copy_task.sample(n_copy, generator) + batch[n_copy:]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, opts)
        loss = torch.zeros(())
        if n_causal < len(batch):
            ids, is_response, attend = collate(batch[n_causal:], pad_id)
            ratio = stratified_ratios(len(batch) - n_causal, opts.min_mask_ratio, generator)
            suffix = torch.rand(len(batch) - n_causal, generator=generator) < opts.suffix_fraction
            mdm = masked_diffusion_loss(model, ids, is_response, attend, mask_id, ratio, generator, suffix,
                                        read_batch(batch[n_causal:], ids.shape[1]))
            loss = loss + mdm * (len(batch) - n_causal) / len(batch)
        if n_causal:
            causal = left_context_loss(model, batch[:n_causal], pad_id, mask_id, stop_id)
            loss = loss + causal * n_causal / len(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), opts.grad_clip)
        optimizer.step()
        if average is not None:  # the decay ramps up, so the first steps' weights do not linger
            with torch.no_grad():
                torch._foreach_lerp_(average, params, 1 - min(opts.ema_decay, (1 + step) / (10 + step)))
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
    if average is not None:
        summary["raw_state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            for p, a in zip(params, average):
                p.copy_(a)
        if eval_batches:
            summary["ema_heldout_loss"] = heldout_loss(model, eval_batches, mask_id, opts.seed)
    model.eval()
    return model, summary
