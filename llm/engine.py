"""The Engine: a loaded model, its tokenizer and chat format, and `generate` with per-block streaming."""
import threading
import time
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
from tokenizers import Tokenizer

from llm import chat
from llm.blockdiff import BlockOptions, Matcher, block_reply, known_start, next_token_logits, prefill_prompt
from llm.caches import KVCaches
from llm.drafter import Drafter
from llm.generate import Decoded, DecodeOptions, ModelDenoiser, SpecialIds, denoise_reply
from llm.model import Transformer
from llm.lora import MergedAdapter
from llm.passes import Pass, PassBatcher, forward
from llm.tokenizer import TurnEncoder


# next-token answers kept (logits, and probabilities where asked: ~200-400 KB with SmolLM2's vocabulary): a turn's
# checks ask for ~2 prompts' and a call's opening's 8 tokens (app.agent.weighed), a few sessions at once
KEPT_PROBABILITIES = 24


@dataclass
class Generation:
    text: str             # the reply, up to (not including) end of turn / EOS
    passes: int           # denoising forward passes
    tokens: int           # tokens generated (excluding the dropped canvas after EOS)
    seconds: float
    first_block_s: float  # time to the first on_block call (the whole run when no block settled)
    stopped: str          # "eos", "length", "cancelled" or "unmeant" (least_share)
    ids: list[int] = field(default_factory=list)  # the reply's token ids (a block engine's; `written` included)
    # per id, the share of the model's probability the reply grammar allowed there (llm.generate.Decoded.shares;
    # 1.0 for `written` ids); empty without a grammar
    shares: list[float] = field(default_factory=list)


class TextStream:
    """Turns settled token blocks into text pieces whose concatenation is the decoded reply.

    The whole reply so far is decoded each time (byte-level BPE may split a character across blocks) and a
    trailing U+FFFD (an unfinished UTF-8 sequence) is held back until the next block completes it.
    """

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""  # what has been handed out so far

    def push(self, ids: list[int], final: bool = False) -> str:
        self.ids += ids
        decoded = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not final:
            decoded = decoded.rstrip("\ufffd")
        if decoded.startswith(self.text):
            piece = decoded[len(self.text):]
        else:  # a decoder that rewrote earlier text: what was spoken stays, add only the new ids' text
            piece = self.tokenizer.decode(ids, skip_special_tokens=True)
        self.text += piece
        return piece


class _Streamed:
    """One generation's text stream and clock: `settled(ids)` hands each block's new text to on_block, and
    `finish(decoded)` flushes a held-back character and makes the Generation."""

    def __init__(self, tokenizer: Tokenizer, on_block: Callable[[str], None] | None, written: int = 0):
        self.stream, self.on_block, self.written = TextStream(tokenizer), on_block, written
        self.start, self.first_block_s = time.perf_counter(), None

    def settled(self, ids: list[int]) -> None:
        piece = self.stream.push(ids)
        if self.first_block_s is None:
            self.first_block_s = time.perf_counter() - self.start
        if self.on_block is not None and piece:
            self.on_block(piece)

    def finish(self, decoded) -> Generation:
        tail = self.stream.push([], final=True)  # a held-back partial character, if the reply ended on one
        if self.on_block is not None and tail:
            self.on_block(tail)
        seconds = time.perf_counter() - self.start
        return Generation(text=self.stream.text, passes=decoded.passes, tokens=len(decoded.tokens), seconds=seconds,
                          first_block_s=seconds if self.first_block_s is None else self.first_block_s,
                          stopped=decoded.stopped, ids=self.stream.ids,
                          shares=[1.0] * self.written + decoded.shares
                          if len(decoded.shares) == len(decoded.tokens) else [])


def _cache_mode(use_cache) -> str:
    if use_cache is True:
        return "prefix"
    if use_cache is False:
        return "none"
    return use_cache  # "prefix" | "dual" | "none", checked by DecodeOptions


class Engine:
    """A diffusion LM ready to chat: `generate(messages)` writes the assistant's reply."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, chat_style: str, special: SpecialIds,
                 bos_token: str | None = None, left_to_right: bool = False, adapter: MergedAdapter | None = None):
        if chat_style not in chat.STYLES:
            raise ValueError(f"chat_style {chat_style!r}: choose one of {', '.join(chat.STYLES)}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self._turns = TurnEncoder(tokenizer)  # a prompt's ids, its earlier turns' remembered
        self.chat_style = chat_style
        self.special = special
        self.bos_token = bos_token  # LLaDA's template opens with it
        self.drafter = Drafter()  # guesses for cache="block" to verify (draft_length): prompt lookup
        self.device, self.dtype = model.device, model.dtype
        # a model pretrained left to right (SmolLM2): block diffusion with causal attention is its decoder
        self.left_to_right = left_to_right
        # the LoRA adapter merged into the weights, taken off to read the base model (end_of_turn_probability)
        self.adapter = adapter
        # cache="block": exact KV caches of earlier prompts, reused (one per generation running at once), and
        # the batcher whose forwards the generations running at once share
        self._caches = KVCaches(model)
        self.batcher = PassBatcher(model, special.mask)
        # _next_probabilities's latest answers, by the ids asked (a turn's checks ask for a few, each more than once)
        self._known: OrderedDict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]] = OrderedDict()  # logits, p
        self._lock = threading.Lock()

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """The conversation in this model's chat format, tokenized, ending with the assistant header."""
        text = chat.render(messages, self.chat_style, add_generation_prompt=True, bos_token=self.bos_token)
        return self._turns(text)

    def fits(self, messages: list[dict], max_new_tokens: int) -> bool:
        """Whether messages and a reply of max_new_tokens fit the model's context."""
        return len(self.prompt_ids(messages)) + max_new_tokens <= self.model.args.max_sequence_length

    def _check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        limit = self.model.args.max_sequence_length
        if prompt_len + max_new_tokens > limit:
            raise ValueError(f"prompt of {prompt_len} tokens + max_new_tokens={max_new_tokens} exceeds "
                             f"the model's max_sequence_length={limit}")

    def generate(self, messages: list[dict], *, max_new_tokens: int = DecodeOptions.max_new_tokens,
                 block_length: int = DecodeOptions.block_length, threshold: float = DecodeOptions.threshold,
                 steps: int | None = None, temperature: float = 0.0,
                 on_block: Callable[[str], None] | None = None, cancel: threading.Event | None = None,
                 use_cache: bool | str = True, seed: int | None = None, stop_at_eos: bool = True,
                 matcher: Matcher | None = None, draft_length: int = 0, written: list[int] = (),
                 least_share: float = 0.0) -> Generation:
        """The assistant's reply to messages; on_block(text) gets each block's new text as soon as it settles.

        use_cache: True/"prefix" (Fast-dLLM prefix cache), "dual" (prefix and suffix), False/"none", or
        "block": block diffusion on a left-to-right model with an exact, reused KV cache
        (llm.blockdiff); matcher: the reply grammar's state (app.agent.schema_grammar), which judges every commit;
        draft_length: up to this many tokens a pass guessed by the engine's drafter (prompt lookup) and verified,
        which changes the passes, not the reply; written: the ids of a reply begun earlier on these messages and
        stopped (a draft's Generation.ids), which the reply goes on from (see generate_blocks); least_share: with a
        matcher, stop ("unmeant") at the first token committed with less than this share of the model's probability
        on what the grammar allowed (BlockOptions.least_share).
        """
        if use_cache == "block":
            return self.generate_blocks(self.prompt_ids(messages), BlockOptions(
                max_new_tokens=max_new_tokens, block_length=block_length, threshold=threshold,
                stop_at_eos=stop_at_eos, draft_length=draft_length, least_share=least_share), on_block=on_block,
                cancel=cancel, matcher=matcher, written=written)
        if matcher is not None or written:
            raise ValueError(f"a reply grammar's matcher and a written start need use_cache='block', not {use_cache!r}")
        opts = DecodeOptions(max_new_tokens=max_new_tokens, block_length=block_length, threshold=threshold,
                             steps=steps, temperature=temperature, cache=_cache_mode(use_cache),
                             stop_at_eos=stop_at_eos)
        return self.generate_ids(self.prompt_ids(messages), opts, on_block=on_block, cancel=cancel, seed=seed)

    @torch.inference_mode()
    def end_of_turn_probability(self, text: str) -> float:
        """The pretrained base model's probability that the caller's words so far are a finished turn: that a
        sentence end (its end-of-turn token, ".", "?" or "!") comes next after `text` with its closing punctuation
        taken off, in a user turn of its own. A speech recognizer ends every segment with a stop, finished or not,
        and after one the model expects the turn to end; without it, whether the sentence can end there is what
        the model knows. LiveKit's first turn detector was this idea on a fine-tuned SmolLM2; here it is the model
        already in memory, one pass over the words.
        NOTE: the base, not the adapted model: the adapter, trained on the replies, moved its predictions of the
        caller's words ~3 nats a token from the base's, and finished questions with them ("What's your address"
        0.004 against the base's 0.65, "Is there parking" 0.0000 against 0.009: under the unfinished turns'
        0.0001-0.003, so they waited 1.5 s). Kept close to the base by a training term instead (llm.adapt's
        teacher), the development set lost 7% of its turns. The words alone, with no conversation before them:
        the base read the same with the salon's system prompt and without it (137 finished turns, 21 unfinished,
        docs/EXPERIMENT_LOG.md). Needs a model pretrained left to right (SmolLM2's)."""
        if not self.left_to_right:
            raise ValueError("the end-of-turn probability needs a model pretrained left to right")
        words = text.strip().rstrip(".?!,;: ")
        prompt = chat.render_open_turn([], words, self.chat_style, self.bos_token)
        ids = torch.tensor(self.tokenizer.encode(prompt, add_special_tokens=False).ids, device=self.device)
        self._check_fits(len(ids), 1)
        base = self.adapter.removed() if self.adapter is not None else nullcontext()
        with self.batcher.exclusive(), base:
            cache = self.model.new_cache(1, len(ids))   # its own: the base's keys must not serve a reply
            _, logits = forward(self.model, [(Pass(cache, 0, ids), slice(-1, None))], self.special.mask)[0]
        probabilities = torch.softmax(logits[0], dim=-1)
        ends = {self.tokenizer.token_to_id(t) for t in (chat.END_OF_TURN[self.chat_style], ".", "?", "!")} - {None}
        return float(probabilities[sorted(ends)].sum())

    def first_token_probabilities(self, messages: list[dict]) -> torch.Tensor:
        """The model's probabilities (fp32, (vocab,)) for the first token of its reply to `messages`
        (`next_token_probabilities`)."""
        return self.next_token_probabilities(messages, ())

    @torch.inference_mode()
    def next_token_probabilities(self, messages: list[dict], written=()) -> torch.Tensor:
        """The model's probabilities (fp32, (vocab,)) for the token of its reply to `messages` that follows the
        reply's first tokens `written`: one pass over the positions the reused KV cache does not hold, whose keys
        stay there for the reply that follows; none when one of the last few calls asked for the same tokens (the
        agent's checks of one turn ask for its first token's and a call's name's, each more than once, and the
        reply commits from them without a pass: llm.blockdiff.known_start). Needs a model decoded left to right
        with the block cache (SmolLM2's)."""
        if not self.left_to_right:
            raise ValueError("the next token's probabilities need a model pretrained left to right")
        prompt = self.prompt_ids(messages)
        return self._next_probabilities(prompt + list(written), 1 + len(written))

    def _next_probabilities(self, ids: list[int], rows: int = 1) -> torch.Tensor:
        """The probabilities after `ids`; the head's logits after each of the `rows` - 1 prefixes before it too,
        where its pass runs them, kept for the reply (the tokens of a call's opening the checks wrote, which the
        grammar leaves open: `known_start` commits them from these)."""
        known = self._known.get(tuple(ids))  # one read: another session's call may change the dict meanwhile
        if known is not None:
            return known[1] if known[1] is not None else torch.softmax(known[0], dim=-1)
        self._check_fits(len(ids), 1)
        with self._caches.lent(ids) as prefix, self.batcher.joined() as run:
            logits = next_token_logits(self.model, ids, prefix, self.special.mask, run=run, last=rows)
        probabilities = torch.softmax(logits[-1], dim=-1)
        with self._lock:
            for k, row in enumerate(logits[:-1], len(ids) - len(logits) + 1):
                self._known.setdefault(tuple(ids[:k]), (row, None))
            self._known[tuple(ids)] = (logits[-1], probabilities)
            while len(self._known) > KEPT_PROBABILITIES:
                self._known.popitem(last=False)
        return probabilities

    def _known_logits(self, ids: list[int]) -> torch.Tensor | None:
        """The head's logits after `ids` when `_next_probabilities` computed them lately (llm.blockdiff.known_start)."""
        known = self._known.get(tuple(ids))
        return None if known is None else known[0]

    @torch.inference_mode()
    def prefill(self, messages: list[dict], cancel: threading.Event | None = None) -> None:
        """Hold the prompt of `messages` in a reused KV cache (but its last positions, up to a chunk), ahead of
        the generation that will extend it; a block engine (cache "block")."""
        if not self.left_to_right:
            raise ValueError("prefill holds a block engine's KV cache: it needs a model pretrained left to right")
        ids = self.prompt_ids(messages)
        with self._caches.lent(ids) as prefix, self.batcher.joined() as run:
            prefill_prompt(run, prefix, ids, BlockOptions.prefill_chunk, cancel)

    def study(self, conversations: list[list[dict]]) -> None:
        """Have the drafter index these conversations (message lists, each opening with the system message, which
        is left out) for its guesses: a reply's words as the model was adapted to write them, before any call of
        this run has been answered. A guess is verified like any other: what is written stays the same."""
        sequences, skips = [], {}   # the opening's length, by its text: one system message for all, as a rule
        for messages in conversations:
            text = chat.render(messages, self.chat_style, add_generation_prompt=False, bos_token=self.bos_token)
            opening = chat.render(messages[:1], self.chat_style, add_generation_prompt=False, bos_token=self.bos_token)
            if opening not in skips:
                skips[opening] = len(self.tokenizer.encode(opening, add_special_tokens=False).ids)
            sequences.append(self.tokenizer.encode(text, add_special_tokens=False).ids[skips[opening]:])
        self.drafter.study(sequences)

    def keep_caches(self, conversations: int) -> None:
        """Keep up to this many idle KV caches (default llm.caches.KEPT_CACHES): one for each conversation a server
        holds at once, so that no caller's next turn reads its whole conversation again
        (app.pipeline.services.Services.conversation_started).
        With fewer, the caches over the count go at once (their memory with them), ended conversations' first.
        NOTE: with six phone callers at once and 4 kept (app.loadtest, 2026-12-06), callers' turns took each other's
        caches, and 14 of the 47 prefills of 18 turns re-read a conversation from its system prompt on: 8.7 s of the
        brain's forwards against 5.6 s with a cache each."""
        if conversations < 1:
            raise ValueError(f"conversations={conversations} must be >= 1")
        self._caches.resize(conversations)

    def conversation(self, key):
        """A span in which this thread's generations are the conversation `key`'s (an object as long-lived as it):
        it keeps the KV cache of its last one for its next, whatever the others do (llm.caches)."""
        return self._caches.serving(key)

    def conversation_over(self, key) -> None:
        """The conversation `key` is over: its KV cache is the first to go."""
        self._caches.release(key)

    def hold_only(self, messages: list[dict]) -> None:
        """Cut every idle KV cache back to what it shares with `messages` (a system prompt): what the warm-up's
        turn wrote after it is no conversation's, and a cache holding only the shared prefix is every caller's."""
        self._caches.hold_only(self.prompt_ids(messages))

    def forget_earlier(self) -> None:
        """Drop what earlier generations left: the reused KV caches (the next block generation prefills its whole
        prompt), the drafter's remembered replies (a benchmark's repeats would guess themselves whole) and the
        next-token probabilities kept (`next_token_probabilities`)."""
        self._caches.forget()
        self.drafter.forget()
        with self._lock:
            self._known.clear()

    @torch.inference_mode()
    def generate_blocks(self, prompt_ids: list[int], opts: BlockOptions, on_block=None, cancel=None,
                        matcher: Matcher | None = None, written: list[int] = ()) -> Generation:
        """generate(use_cache="block") on an already tokenized prompt; generations on other threads at the same
        time share their passes' forwards with this one (PassBatcher).

        written: the first ids of the reply, already written (a draft stopped at its first phrase): on_block gets
        their text at once, and the reply goes on after them as the model's greedy decoding would have, their
        keys mostly in a reused cache already; matcher, if any, has accepted them. The Generation's text and ids
        hold them, its tokens, passes and seconds count only what this call wrote."""
        written = list(written)
        self._check_fits(len(prompt_ids), opts.max_new_tokens)
        streamed = _Streamed(self.tokenizer, on_block, len(written))
        if written:
            streamed.settled(written)
        left = opts.max_new_tokens - len(written)
        if left < 1:  # written to the length already
            return streamed.finish(Decoded([], 0, "length"))
        prompt, opts = prompt_ids + written, replace(opts, max_new_tokens=left)
        # its first tokens without a pass, where the agent's checks read their probabilities already
        start, ended = known_start(prompt, self._known_logits, self.special, opts, matcher)
        if start.tokens:
            streamed.settled(start.tokens)
        if ended:
            decoded = start
        else:
            with self._caches.lent(prompt + start.tokens) as prefix, self.batcher.joined() as run:
                rest = block_reply(self.model, prompt + start.tokens, self.special,
                                   replace(opts, max_new_tokens=left - len(start.tokens)), prefix,
                                   on_block=streamed.settled, cancel=cancel, matcher=matcher,
                                   drafter=self.drafter if opts.draft_length else None, run=run)
            decoded = Decoded(start.tokens + rest.tokens, rest.passes, rest.stopped, start.shares + rest.shares)
        if opts.draft_length and decoded.stopped == "eos":  # with as much of its prompt as a match compares
            self.drafter.remember(prompt[-self.drafter.reach:] + decoded.tokens + list(self.special.stop[:1]))
        return streamed.finish(decoded)

    @torch.inference_mode()
    def generate_ids(self, prompt_ids: list[int], opts: DecodeOptions, on_block=None, cancel=None,
                     seed: int | None = None) -> Generation:
        """generate() on an already tokenized prompt."""
        self._check_fits(len(prompt_ids), opts.max_new_tokens)
        streamed = _Streamed(self.tokenizer, on_block)
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(seed)
        prompt = torch.tensor(prompt_ids, dtype=torch.long, device=self.device)
        denoise = ModelDenoiser(self.model, len(prompt_ids) + opts.max_new_tokens, opts.cache, opts.refresh_passes)
        decoded = denoise_reply(denoise, prompt, self.special, opts, on_block=streamed.settled, cancel=cancel,
                                generator=generator)
        return streamed.finish(decoded)
