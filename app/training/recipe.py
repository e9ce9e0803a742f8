"""The from-scratch front-desk model's recipe (`parley train`): dialogues written for a profile, a tokenizer and a
small masked-diffusion model trained on them, with its drafter table and decoding preferences."""
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

import llm
from app.agent.options import AgentOptions
from app.training.dialogues import examples, generate
from app.training.dialogues.phrases import NUMBER_WORDS
from llm import chat
from llm.drafter import Drafter
from llm.load import save_parley
from llm.model import ModelArgs
from llm.reader import DIM, Reader, read_prompt
from llm.train import CopyTask, Example, train, train_tokenizer
from speech.asr import silence_encoding

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataOptions:
    # NOTE: 12000 (each example seen ~1.7 times in 5000 steps, not ~3.4) lowered the held-out loss 0.397 -> 0.338
    # but scored 63.1% held-out exact match under the grammar against 68.8% (docs/EXPERIMENT_LOG.md)
    train_dialogues: int = 6000
    heldout_dialogues: int = 300
    vocab_size: int = 1024
    # Targets are padded with <|end|> to the agent's whole canvas, as LLaDA pads to the batch: the sampler then
    # meets exactly the canvas length it was trained on. NOTE: padded only to 64 (a random amount), the model
    # decoded garbage on the agent's 96-token canvas and sensible text on a 64-token one.
    response_len: int = AgentOptions.max_new_tokens
    max_prompt_tokens: int = 420                     # longer prompts (rare, long dialogues) are dropped
    # NOTE: on since the reader: ~1100 more training phrasings (app.training.dialogues.variants) took held-out exact match
    # from 86.9% to 94.0% (without the reader they had not helped: 70.5% against 71.1%; docs/EXPERIMENT_LOG.md)
    variants: bool = True


# How the agent should decode this model (generation_config.json, read by app.agent.options.agent_options_for).
# NOTE: block_length 1 (left to right, one token per pass): trained mostly on left-context predictions, the
# shipped model committed wrong tokens far from the settled text when asked for 4 or 32 at once (see
# docs/EXPERIMENT_LOG.md for the measured exact matches). cache "left" runs exactly the attention that training
# taught (llm.generate.left_reply): a pass runs the settled token and the drafter's guesses, not the whole canvas
# (LLM turn median 360 -> 107 ms one token per pass, 45 ms with drafts, on 20 held-out dialogues, same scores).
DECODING = {"max_new_tokens": AgentOptions.max_new_tokens, "block_length": 1, "threshold": 0.9, "cache": "left"}

# Model sizes: "default" is the shipped checkpoint; "tiny" is for tests. Both have a copy head (llm.copy_head.CopyHead;
# --copy-head-dim 0 leaves it out): the caller's words and the tool results are copied, as they are or in
# lowercase. NOTE: without a copy head, names were 10% right teacher-forced on held-out tool calls and grounded
# replies 46%; the copy head copying anything in the prompt (no sinks, no lowercase twins) made names 89% right but
# tool calls and small talk worse (no call when none is needed 58-61% against 90%) and ran names on ("Noah Noah
# Noah"). Hour twins (number_twins: a copied "2" said with "p.m." may be written "14") and copy_lookaround (keys
# read two tokens back, the gate the token after the copied one) are in the shipped recipe since the tools'
# grammar (app.agent.tool_grammar) stops the names they ran on ("Dmitri,"). NOTE: held-out exact match (200 dialogues,
# under the grammar): both with courtesy tails in the data, 5000 steps, 49.3%; both without tails, 4500 steps,
# 47.3%; neither (the checkpoint before), 38.6%. Without the grammar, both had scored 40.0% against its 45.7%.
# shift_logits (raw row i holds token i + 1, as Dream): a settled token's own row predicts the next one, which
# trains about as fast as a left-to-right model. NOTE: without it, held-out next-token accuracy was 27% after
# 300 steps, against 76% for the same network trained left to right.
SIZES = {
    "default": dict(d_model=192, n_layers=4, n_heads=4, n_kv_heads=4, mlp_hidden_size=512, shift_logits=True,
                    copy_head_dim=64),
    "tiny": dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, mlp_hidden_size=64, shift_logits=True,
                 copy_head_dim=16),
}


def encode_examples(pairs, tokenizer, opts: DataOptions, reader=None, memo: dict | None = None):
    """(prompt messages, target) pairs -> llm.train.Example list, rendered as the Agent prompts the engine.
    reader: an llm.reader.Reader, to read the callers' messages for a model with one (memo: its features so far)."""
    end = tokenizer.token_to_id(chat.END)
    prompts = tokenizer.encode_batch([chat.render(m, "parley") for m, _ in pairs], add_special_tokens=False)
    targets = tokenizer.encode_batch([t for _, t in pairs], add_special_tokens=False)
    memo = {} if memo is None else memo
    out = []
    for (messages, _), p, t in zip(pairs, prompts, targets):
        if len(p.ids) <= opts.max_prompt_tokens and len(t.ids) < opts.response_len:
            read = read_prompt(reader, messages, p.offsets, memo) if reader is not None else []
            out.append(Example(p.ids, t.ids + [end] * (opts.response_len - len(t.ids)), read))
    return out


def build_data(profile, data: DataOptions, seed: int, tokenizer=None, reader=None):
    """Dialogues of both splits -> (tokenizer, train examples, held-out examples); a tokenizer is trained unless given.
    reader: an llm.reader.Reader whose features of the callers' words the examples carry (a model with a reader)."""
    t0 = time.perf_counter()
    train_pairs = examples(generate(profile, "train", data.train_dialogues, seed, data.variants), profile)
    heldout_pairs = examples(generate(profile, "heldout", data.heldout_dialogues, seed), profile)
    texts = (chat.render(m, "parley") + t + chat.END for m, t in train_pairs)  # the tokenizer sees training text only
    tokenizer = tokenizer or train_tokenizer(texts, data.vocab_size, list(chat.PARLEY_SPECIAL_TOKENS))
    memo = {}
    if reader is not None:  # every caller's message, read in batches
        reader.warm(m["content"] for messages, _ in train_pairs + heldout_pairs for m in messages if m["role"] == "user")
    train_set = encode_examples(train_pairs, tokenizer, data, reader, memo)
    heldout_set = encode_examples(heldout_pairs, tokenizer, data, reader, memo)
    if reader is not None:
        reader.cache.clear()
    log.info("%d train and %d held-out examples from %d + %d dialogues in %.1f s%s", len(train_set), len(heldout_set),
             data.train_dialogues, data.heldout_dialogues, time.perf_counter() - t0,
             f" ({len(memo)} callers' messages read)" if reader is not None else "")
    return tokenizer, train_set, heldout_set


# The drafter's n-gram order: contexts of up to 7 tokens. NOTE: with order 4 (min_count 2), the shipped model's
# 200 held-out dialogues took 5650 passes (4.1 tokens a pass); order 8 (min_count 4), 4514 (5.1 tokens a pass),
# the same replies; order 12, 4388 for a table 4.7x bigger. A table entry seen fewer than DRAFTER_MIN_COUNT times
# is left out: min_count 2 held 2.4x the entries for 7 passes fewer.
DRAFTER_ORDER, DRAFTER_MIN_COUNT = 8, 4


def build_drafter(train_set, end_id: int):
    """The n-gram table of the training replies (each opened by its prompt's last DRAFTER_ORDER - 1 tokens, cut
    after <|end|>, which encode_examples always pads with) that the left sampler's drafter walks
    (llm/drafter.py)."""
    opening = DRAFTER_ORDER - 1
    return Drafter.build((e.prompt[-opening:] + e.response[:e.response.index(end_id) + 1] for e in train_set),
                         order=DRAFTER_ORDER, min_count=DRAFTER_MIN_COUNT)


def write_drafter(profile, out_dir: Path, data: DataOptions, seed: int) -> Path:
    """drafter.json for an existing checkpoint (its tokenizer), from the profile's training dialogues."""
    engine = llm.load(out_dir, device="cpu")
    _, train_set, _ = build_data(profile, data, seed, engine.tokenizer)
    return build_drafter(train_set, engine.tokenizer.token_to_id(chat.END)).save(out_dir)


def lowercase_twins(tokenizer) -> tuple[tuple[int, int], ...]:
    """(token, the token of its lowercase spelling) for the tokens of ASCII letters that have one ("Tuesday")."""
    vocab = tokenizer.get_vocab()
    return tuple(sorted((i, vocab[t.lower()]) for t, i in vocab.items()
                        if t.isascii() and t.isalpha() and not t.islower() and t.lower() in vocab))


def number_twins(tokenizer) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Two twin maps for the spoken numbers of a time: (hour or minute -> its two digits, morning or as said:
    "9" and "nine" -> "09", "thirty" -> "30"), (hour -> its afternoon hour: "2" and "two" -> "14"). Only the
    spellings that are one token, and the pairs that change the token."""
    def one(text):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        return ids[0] if len(ids) == 1 else None

    said = {str(h): h for h in range(1, 13)} | {NUMBER_WORDS[h]: h for h in range(1, 13)}
    digits = said | {"fifteen": 15, "thirty": 30, "noon": 12}
    afternoon = {text: h + 12 for text, h in said.items() if h < 12}
    def pairs(spoken):
        both = ((one(text), one(f"{n:02d}")) for text, n in spoken.items())
        return tuple(sorted({(a, b) for a, b in both if None not in (a, b) and a != b}))

    return pairs(digits), pairs(afternoon)


def copy_task_for(train_set, tokenizer, response_len: int):
    """llm.train.CopyTask over the callers' words of the training split (each example's last user message)."""
    user, end, assistant = (tokenizer.token_to_id(t) for t in (chat.PARLEY_ROLE_TOKENS["user"], chat.END,
                                                              chat.PARLEY_ROLE_TOKENS["assistant"]))
    text = []
    for e in train_set:
        start = len(e.prompt) - 1 - e.prompt[::-1].index(user)
        text += e.prompt[start + 1:e.prompt.index(end, start)]
    return CopyTask(text, [user], [end, assistant], end, response_len)


def run_training(profile, out_dir: Path, size: str, data: DataOptions, opts, init: str | None = None,
                 copy_head_dim: int | None = None, hours: bool = True, lookaround: bool = True,
                 raw_dir: Path | None = None, reader: bool = False) -> dict:
    """The whole pipeline; writes the checkpoint to out_dir and returns the summary.

    init: a parley checkpoint directory to continue from (its tokenizer and weights; `size` is then ignored).
    copy_head_dim: the copy head's width instead of the size's (0: none; llm.copy_head.CopyHead).
    hours: the copy head may also write a spoken hour or minute in two digits (number_twins); lookaround: its
    pointer reads around the position (ModelArgs.copy_lookaround). Both in the shipped recipe (see SIZES).
    raw_dir: with opts.ema_decay, also write the last weights (not the average) there, to compare the two.
    reader: the model also reads Whisper's features of the caller's words (llm.reader; an init checkpoint's own
    setting wins).
    """
    start = llm.load(init, device="cpu") if init else None
    reading = start.reader if start else (Reader.fresh(torch.from_numpy(silence_encoding())) if reader else None)
    tokenizer, train_set, heldout_set = build_data(profile, data, opts.seed, start.tokenizer if start else None,
                                                   reading)
    longest = max(len(e.prompt) + len(e.response) for e in train_set + heldout_set)  # rope positions
    fields = {**SIZES[size], **({} if copy_head_dim is None else {"copy_head_dim": copy_head_dim}),
              "reader_dim": DIM if reading is not None else 0}
    if fields.get("copy_head_dim"):  # it copies the caller's words and the tool results (llm.copy_head.CopyHead)
        fields.update(copy_roles=tuple(tokenizer.token_to_id(chat.PARLEY_ROLE_TOKENS[r]) for r in ("user", "tool")),
                      copy_never=tuple(tokenizer.token_to_id(t) for t in chat.PARLEY_SPECIAL_TOKENS),
                      copy_twins=(lowercase_twins(tokenizer), *(number_twins(tokenizer) if hours else ())),
                      copy_lookaround=lookaround)
    args = start.model.args if start else ModelArgs(**fields, vocab_size=tokenizer.get_vocab_size(),
                                                    max_sequence_length=1024)
    assert longest <= args.max_sequence_length
    init_state = {k: v.float() for k, v in start.model.state_dict().items()} if start else None
    # how to decode it and the drafter's table first: the checkpoint saved at every evaluation is then complete
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "generation_config.json").write_text(json.dumps(DECODING, indent=2) + "\n", encoding="utf-8")
    build_drafter(train_set, tokenizer.token_to_id(chat.END)).save(out_dir)
    if reading is not None:
        reading.save(out_dir)
    model, summary = train(args, train_set, heldout_set, mask_id=tokenizer.token_to_id(chat.MASK), init_state=init_state,
                           pad_id=tokenizer.token_to_id(chat.PAD), stop_id=tokenizer.token_to_id(chat.END), opts=opts, log=tqdm.write,
                           on_eval=lambda m, step: save_parley(m, tokenizer, out_dir),  # a usable model at every eval
                           copy_task=copy_task_for(train_set, tokenizer, data.response_len) if opts.copy_fraction else None)
    save_parley(model, tokenizer, out_dir)
    raw_state = summary.pop("raw_state", None)
    if raw_dir is not None and raw_state is not None:
        shutil.copytree(out_dir, raw_dir, dirs_exist_ok=True)
        raw = type(model)(model.args)
        raw.load_state_dict(raw_state)
        save_parley(raw, tokenizer, raw_dir)
    summary.update(profile=profile.name, size=size, init=init, copy_head_dim=model.args.copy_head_dim,
                   reader_dim=model.args.reader_dim,
                   data=asdict(data), train=asdict(opts), parameters=sum(p.numel() for p in model.parameters()),
                   train_examples=len(train_set))
    (out_dir / "training.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary
