"""The agent's speech waiting for the transport: a thread-safe, pull-based queue of chunks with heard-text accounting.

Transports pull fixed-size frames at their own real-time pace (an aiortc track, a Twilio pacer, a PortAudio
callback). Each chunk carries the clause it speaks, so that on barge-in the history keeps only what was heard.
"""
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass
class Chunk:
    id: int
    text: str
    audio: np.ndarray          # int16 at the playback's rate
    read: int = 0              # samples already pulled by the transport


class Playback:
    """Audio queued for the transport, at the transport's sample rate."""

    def __init__(self, sample_rate_hz: int, confirm_marks: bool = False):
        self.sample_rate_hz = sample_rate_hz
        self.confirm_marks = confirm_marks   # True: a chunk is heard when the far end confirms it, not when pulled
        self._lock = threading.Lock()
        self._queue: deque[Chunk] = deque()
        self._sent: list[Chunk] = []         # fully pulled, awaiting confirmation (confirm_marks mode)
        self._heard: list[str] = []          # clauses heard since the last take_heard()
        self._next_id = 0
        self._listeners = []                 # callables(event: str) on "started", "drained"

    def add_listener(self, callback) -> None:
        """`callback(event)` with "started" (first sample of a chunk pulled) or "drained"; called on the puller's thread."""
        self._listeners.append(callback)

    def enqueue(self, audio: np.ndarray, text: str) -> int:
        """Queue one clause of speech; returns its chunk id."""
        assert audio.dtype == np.int16 and audio.ndim == 1
        with self._lock:
            chunk = Chunk(self._next_id, text, audio)
            self._next_id += 1
            self._queue.append(chunk)
            return chunk.id

    @property
    def busy(self) -> bool:
        """Audio is still queued (or, with confirm_marks, still unconfirmed)."""
        with self._lock:
            return bool(self._queue) or bool(self._sent)

    def read(self, n_samples: int) -> np.ndarray:
        """Exactly n int16 samples: queued speech, then silence."""
        return self.read_frame(n_samples)[0]

    def read_frame(self, n_samples: int) -> tuple[np.ndarray, list[int]]:
        """n samples, and the ids of chunks whose last sample is in them."""
        out = np.zeros(n_samples, dtype=np.int16)
        finished, events = [], []
        with self._lock:
            filled = 0
            while filled < n_samples and self._queue:
                chunk = self._queue[0]
                if chunk.read == 0:
                    events.append("started")
                take = min(n_samples - filled, len(chunk.audio) - chunk.read)
                out[filled:filled + take] = chunk.audio[chunk.read:chunk.read + take]
                chunk.read += take
                filled += take
                if chunk.read == len(chunk.audio):
                    self._queue.popleft()
                    finished.append(chunk.id)
                    if self.confirm_marks:
                        self._sent.append(chunk)
                    else:
                        self._heard.append(chunk.text)
            if finished and not self._queue and not self._sent:
                events.append("drained")
        self._notify(events)
        return out, finished

    def confirm(self, chunk_id: int) -> None:
        """The far end played this chunk (and every chunk before it)."""
        with self._lock:
            while self._sent and self._sent[0].id <= chunk_id:
                self._heard.append(self._sent.pop(0).text)
            drained = not self._queue and not self._sent
        if drained:
            self._notify(["drained"])

    def clear(self) -> str:
        """Drop all queued audio at once (barge-in); returns the text heard since the last take_heard()."""
        with self._lock:
            partial = self._queue[0] if self._queue and self._queue[0].read else None
            if partial is not None and not self.confirm_marks:
                words = partial.text.split()
                heard_words = round(len(words) * partial.read / len(partial.audio))
                if heard_words:
                    self._heard.append(" ".join(words[:heard_words]))
            self._queue.clear()
            self._sent.clear()
        return self.take_heard()

    def take_heard(self) -> str:
        """The text heard since the last call."""
        with self._lock:
            heard, self._heard = self._heard, []
        return " ".join(heard)

    def _notify(self, events: list[str]) -> None:
        for event in events:
            for callback in self._listeners:
                callback(event)
