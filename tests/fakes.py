"""Test doubles for the language model and the toolbox. They live only in tests: the product never uses them."""
import threading
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class FakeGeneration:
    text: str
    passes: int
    tokens: int
    seconds: float
    first_block_s: float
    stopped: str


@dataclass
class SharedGeneration:
    """A block engine's generation under a reply grammar (llm.engine.Generation): its ids, and per id the share of
    the model's probability the grammar allowed there."""
    text: str
    ids: list
    shares: list
    passes: int = 1
    tokens: int = 1
    seconds: float = 0.0
    first_block_s: float = 0.0
    stopped: str = "eos"


class FakeEngine:
    """Engine.generate's signature; the reply is `script(messages)`, streamed in blocks of `block_words` words.

    `block_delay_s` makes each block take time, so tests can interrupt a reply mid-generation.
    """

    chat_style = "parley"

    def __init__(self, script: Callable[[list[dict]], str], block_words: int = 4, block_delay_s: float = 0.0):
        self.script = script
        self.block_words = block_words
        self.block_delay_s = block_delay_s
        self.calls: list[list[dict]] = []

    def generate(self, messages, *, max_new_tokens=128, block_length=32, threshold=0.9, steps=None,
                 temperature=0.0, on_block=None, cancel: threading.Event | None = None, use_cache=True, seed=None,
                 matcher=None, draft_length=0):
        self.calls.append([dict(m) for m in messages])
        t0 = time.perf_counter()
        words = self.script(messages).split(" ")
        text, first_block_s, passes = "", 0.0, 0
        for i in range(0, len(words), self.block_words):
            if cancel is not None and cancel.is_set():
                return FakeGeneration(text, passes, len(text.split()), time.perf_counter() - t0, first_block_s, "cancelled")
            time.sleep(self.block_delay_s)
            block = " ".join(words[i:i + self.block_words]) + (" " if i + self.block_words < len(words) else "")
            text += block
            passes += 1
            if on_block is not None:
                first_block_s = first_block_s or time.perf_counter() - t0
                on_block(block)
        return FakeGeneration(text, passes, len(text.split()), time.perf_counter() - t0, first_block_s, "eos")

    def hold_only(self, messages) -> None:
        """Engine.hold_only: no KV caches here to cut back."""

    def keep_caches(self, conversations: int) -> None:
        """Engine.keep_caches: no KV caches here to keep."""

    def conversation_over(self, key) -> None:
        """Engine.conversation_over: no KV caches here to give up."""


def last_user(messages: list[dict]) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


class FakeToolbox:
    """Records calls; answers from a dict of name -> result."""

    def __init__(self, results: dict[str, dict] | None = None, read_only: tuple[str, ...] = (),
                 previewed: tuple[str, ...] = ()):
        self.results = results or {}
        self.calls: list[tuple[str, dict]] = []
        # as app.agent.tools.Toolbox: the tools a draft may run, and those it may preview (`previews` their results)
        self._read_only, self.previews = read_only, {name: self.results.get(name) for name in previewed}

    def read_only(self, name: str) -> bool:
        return name in self._read_only

    def preview(self, name: str, arguments: dict) -> dict | None:
        return self.call(name, arguments) if self.read_only(name) else self.previews.get(name)

    def schemas(self) -> list[dict]:
        return [{"name": n, "description": n, "parameters": {"type": "object"}} for n in self.results]

    def call(self, name: str, arguments: dict) -> dict:
        self.calls.append((name, arguments))
        return self.results.get(name, {"ok": False, "error": f"unknown tool {name}"})
