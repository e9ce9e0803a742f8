"""The Engine: a loaded model, its tokenizer and chat format, and `generate` with per-block streaming."""
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch
from tokenizers import Tokenizer

from llm import chat
from llm.blockdiff import BlockOptions, Matcher, PrefixCache, block_reply, next_token_logits
from llm.drafter import Drafter
from llm.generate import DecodeOptions, ModelDenoiser, SpecialIds, denoise_reply
from llm.model import Transformer


@dataclass
class Generation:
    text: str             # the reply, up to (not including) end of turn / EOS
    passes: int           # denoising forward passes
    tokens: int           # tokens generated (excluding the dropped canvas after EOS)
    seconds: float
    first_block_s: float  # time to the first on_block call (the whole run when no block settled)
    stopped: str          # "eos", "length" or "cancelled"


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

    def __init__(self, tokenizer: Tokenizer, on_block: Callable[[str], None] | None):
        self.stream, self.on_block = TextStream(tokenizer), on_block
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
                          stopped=decoded.stopped)


def _cache_mode(use_cache) -> str:
    if use_cache is True:
        return "prefix"
    if use_cache is False:
        return "none"
    return use_cache  # "prefix" | "dual" | "none", checked by DecodeOptions


class Engine:
    """A diffusion LM ready to chat: `generate(messages)` writes the assistant's reply."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, chat_style: str, special: SpecialIds,
                 bos_token: str | None = None, left_to_right: bool = False):
        if chat_style not in chat.STYLES:
            raise ValueError(f"chat_style {chat_style!r}: choose one of {', '.join(chat.STYLES)}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.chat_style = chat_style
        self.special = special
        self.bos_token = bos_token  # LLaDA's template opens with it
        self.drafter = Drafter()  # guesses for cache="block" to verify (draft_length): prompt lookup
        weight = model.transformer.wte.weight
        self.device, self.dtype = weight.device, weight.dtype
        # a model pretrained left to right (SmolLM2): block diffusion with causal attention is its decoder
        self.left_to_right = left_to_right
        self._prefix: PrefixCache | None = None  # cache="block": the last prompt's exact KV cache, reused

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """The conversation in this model's chat format, tokenized, ending with the assistant header."""
        return self._encode(messages).ids

    def fits(self, messages: list[dict], max_new_tokens: int) -> bool:
        """Whether messages and a reply of max_new_tokens fit the model's context."""
        return len(self.prompt_ids(messages)) + max_new_tokens <= self.model.args.max_sequence_length

    def _check_fits(self, prompt_len: int, max_new_tokens: int) -> None:
        limit = self.model.args.max_sequence_length
        if prompt_len + max_new_tokens > limit:
            raise ValueError(f"prompt of {prompt_len} tokens + max_new_tokens={max_new_tokens} exceeds "
                             f"the model's max_sequence_length={limit}")

    def _encode(self, messages: list[dict]):
        text = chat.render(messages, self.chat_style, add_generation_prompt=True, bos_token=self.bos_token)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def generate(self, messages: list[dict], *, max_new_tokens: int = DecodeOptions.max_new_tokens,
                 block_length: int = DecodeOptions.block_length, threshold: float = DecodeOptions.threshold, steps: int | None = None, temperature: float = 0.0,
                 on_block: Callable[[str], None] | None = None, cancel: threading.Event | None = None,
                 use_cache: bool | str = True, seed: int | None = None, stop_at_eos: bool = True,
                 matcher: Matcher | None = None, draft_length: int = 0) -> Generation:
        """The assistant's reply to messages; on_block(text) gets each block's new text as soon as it settles.

        use_cache: True/"prefix" (Fast-dLLM prefix cache), "dual" (prefix and suffix), False/"none", or
        "block": block diffusion on a left-to-right model with an exact, reused KV cache
        (llm.blockdiff); matcher: the reply grammar's state (app.agent.schema_grammar), which judges every commit;
        draft_length: up to this many tokens a pass guessed by the engine's drafter (prompt lookup) and verified,
        which changes the passes, not the reply.
        """
        if use_cache == "block":
            return self.generate_blocks(self.prompt_ids(messages), BlockOptions(
                max_new_tokens=max_new_tokens, block_length=block_length, threshold=threshold,
                stop_at_eos=stop_at_eos, draft_length=draft_length), on_block=on_block, cancel=cancel,
                matcher=matcher)
        if matcher is not None:
            raise ValueError(f"a reply grammar's matcher needs use_cache='block', not {use_cache!r}")
        opts = DecodeOptions(max_new_tokens=max_new_tokens, block_length=block_length, threshold=threshold,
                             steps=steps, temperature=temperature, cache=_cache_mode(use_cache),
                             stop_at_eos=stop_at_eos)
        return self.generate_ids(self.prompt_ids(messages), opts, on_block=on_block, cancel=cancel, seed=seed)

    @torch.inference_mode()
    def end_of_turn_probability(self, messages: list[dict], text: str) -> float:
        """The model's probability that the user's words so far are a finished turn, given the conversation
        before them: that a sentence end (its end-of-turn token, ".", "?" or "!") comes next after `text` with
        its closing punctuation taken off. A speech recognizer ends every segment with a stop, finished or not,
        and after one the model expects the turn to end; without it, whether the sentence can end there is what
        the model knows. LiveKit's first turn detector was this idea on a fine-tuned SmolLM2; here it is the
        model already in memory: one pass over the words the reused KV cache does not hold (a reply to the same
        words reuses them). Needs a model decoded left to right with the block cache (SmolLM2's)."""
        if not self.left_to_right:
            raise ValueError("the end-of-turn probability needs a model pretrained left to right")
        words = text.strip().rstrip(".?!,;: ")
        prompt = chat.render_open_turn(messages, words, self.chat_style, self.bos_token)
        ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids
        if self._prefix is None:
            self._prefix = PrefixCache(self.model.new_cache(1, self.model.args.max_sequence_length))
        self._check_fits(len(ids), 1)
        probabilities = torch.softmax(next_token_logits(self.model, ids, self._prefix, self.special.mask), dim=-1)
        ends = {self.tokenizer.token_to_id(t) for t in (chat.END_OF_TURN[self.chat_style], ".", "?", "!")} - {None}
        return float(probabilities[sorted(ends)].sum())

    def forget_prefix(self) -> None:
        """Drop the reused KV cache: the next block generation prefills its whole prompt."""
        if self._prefix is not None:
            self._prefix.ids.clear()

    @torch.inference_mode()
    def generate_blocks(self, prompt_ids: list[int], opts: BlockOptions, on_block=None, cancel=None,
                        matcher: Matcher | None = None) -> Generation:
        """generate(use_cache="block") on an already tokenized prompt."""
        self._check_fits(len(prompt_ids), opts.max_new_tokens)
        if self._prefix is None:
            self._prefix = PrefixCache(self.model.new_cache(1, self.model.args.max_sequence_length))
        streamed = _Streamed(self.tokenizer, on_block)
        decoded = block_reply(self.model, prompt_ids, self.special, opts, self._prefix, on_block=streamed.settled,
                              cancel=cancel, matcher=matcher, drafter=self.drafter if opts.draft_length else None)
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
