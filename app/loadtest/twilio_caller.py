"""Twilio's half of a Media Streams call over a real WebSocket: the telephony tests' caller and the load
generator's (app.loadtest)."""
import asyncio
import base64
import json
import time
from collections import deque

import numpy as np
from websockets.exceptions import ConnectionClosed

from app.transports import twilio_wire as twilio
from speech.audio import mulaw_to_pcm, pcm_to_mulaw, resample


def speak_8k(tts, text: str) -> np.ndarray:
    """Piper's voice saying `text`, as a phone line carries it: int16 at 8 kHz, with 0.2 s of silence before."""
    audio = resample(tts.synthesize(text), tts.sample_rate_hz, twilio.TWILIO_RATE_HZ)
    return np.concatenate([np.zeros(1600, dtype=np.int16), audio])


class TwilioSimulator:
    """Twilio's half of a bidirectional Media Stream, at real-time pace in both directions."""

    def __init__(self, ws, stream_sid: str = "MZsimulated", plays: bool = True):
        self.ws = ws
        self.plays = plays          # False: a phone that went away; nothing is played, no mark comes back
        self.stream_sid = stream_sid
        self.messages: list[tuple[float, dict]] = []      # (perf_counter at arrival, message) from the server
        self.heard_at: list[tuple[float, np.ndarray]] = []   # (perf_counter, 20 ms) of the agent's audio as played
        self.echoed: list[tuple[float, str]] = []         # marks echoed after their audio played
        self.said_at: list[tuple[float, bool]] = []       # (perf_counter, voiced?) of each 20 ms frame sent
        self.close_code: int | None = None
        self.closed_at: float | None = None               # perf_counter when the server closed the stream
        self._speech = np.zeros(0, dtype=np.int16)        # what the caller is about to say, 8 kHz
        self._playout: deque = deque()                    # ("audio", samples) and ("mark", name), in order
        self._lock = asyncio.Lock()
        self._sequence = 0
        self._tasks: list[asyncio.Task] = []

    async def send(self, message: dict | str) -> None:
        if self.closed_at is not None:
            return   # the server hung up: Twilio stops sending too
        async with self._lock:
            self._sequence += 1
            if isinstance(message, dict):
                message = json.dumps({**message, "sequenceNumber": str(self._sequence)})
            try:
                await self.ws.send(message)
            except ConnectionClosed:
                pass

    async def start(self) -> None:
        await self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self.send({"event": "start", "streamSid": self.stream_sid, "start": {
            "streamSid": self.stream_sid, "accountSid": "ACsim", "callSid": "CAsim", "tracks": ["inbound"],
            "customParameters": {"caller": "test"},
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})
        parts = (self._microphone, self._receiver) + ((self._speaker,) if self.plays else ())
        self._tasks = [asyncio.create_task(f()) for f in parts]

    def say(self, audio_8k: np.ndarray) -> None:
        self._speech = np.concatenate([self._speech, audio_8k])

    @property
    def speaking(self) -> bool:
        """Some of what it was given to say is not sent yet."""
        return bool(len(self._speech))

    async def finish(self) -> None:
        await self.send({"event": "stop", "streamSid": self.stream_sid, "stop": {"callSid": "CAsim"}})
        await asyncio.wait_for(self._tasks[1], 10)  # the receiver ends when the server closes
        for task in self._tasks:
            task.cancel()

    @property
    def heard(self) -> list[np.ndarray]:
        return [chunk for _, chunk in self.heard_at]

    def events(self, name: str) -> list[tuple[float, dict]]:
        return [(t, m) for t, m in self.messages if m.get("event") == name]

    async def _microphone(self) -> None:
        # Twilio sends 20 ms of caller audio every 20 ms, silence included, for the whole call.
        t0, n = time.perf_counter(), 0
        while True:
            frame, self._speech = self._speech[:160], self._speech[160:]
            frame = np.pad(frame, (0, 160 - len(frame)))
            self.said_at.append((time.perf_counter(), is_voiced(frame)))
            payload = base64.b64encode(pcm_to_mulaw(frame)).decode()
            await self.send({"event": "media", "streamSid": self.stream_sid,
                             "media": {"track": "inbound", "chunk": str(n + 1), "payload": payload}})
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * 0.02 - time.perf_counter()))

    async def _receiver(self) -> None:
        try:
            async for text in self.ws:
                message = json.loads(text)
                self.messages.append((time.perf_counter(), message))
                assert message["streamSid"] == self.stream_sid
                if message["event"] == "media":
                    self._playout.append(("audio", mulaw_to_pcm(base64.b64decode(message["media"]["payload"]))))
                elif message["event"] == "mark":
                    self._playout.append(("mark", message["mark"]["name"]))
                elif message["event"] == "clear":
                    # Twilio drops its buffer and echoes the marks still pending at once
                    pending = [item[1] for item in self._playout if item[0] == "mark"]
                    self._playout.clear()
                    for name in pending:
                        await self._echo(name, played=False)
        except ConnectionClosed:
            pass
        self.closed_at = time.perf_counter()
        self.close_code = self.ws.close_code

    async def _speaker(self) -> None:
        t0, n = time.perf_counter(), 0
        while True:
            while self._playout and self._playout[0][0] == "mark":
                await self._echo(self._playout.popleft()[1], played=True)
            if self._playout:
                self.heard_at.append((time.perf_counter(), self._playout.popleft()[1]))
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * 0.02 - time.perf_counter()))

    async def _echo(self, name: str, played: bool) -> None:
        if played:
            self.echoed.append((time.perf_counter(), name))
        await self.send({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})


async def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


VOICED_RMS = 300.0   # int16 RMS of a 20 ms frame louder than near-silence


def is_voiced(frame: np.ndarray) -> bool:
    return bool(len(frame)) and float(np.sqrt(np.mean(frame.astype(np.float64) ** 2))) > VOICED_RMS


def frame_levels(audio: np.ndarray, rate_hz: int = twilio.TWILIO_RATE_HZ) -> np.ndarray:
    """The RMS of each whole 20 ms frame of int16 audio at rate_hz."""
    n = rate_hz // 50
    return np.sqrt((audio[: len(audio) // n * n].reshape(-1, n).astype(np.float64) ** 2).mean(axis=1))


def voiced_seconds(chunks: list[np.ndarray]) -> float:
    """Seconds of 8 kHz audio in 20 ms frames louder than near-silence."""
    audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
    return float((frame_levels(audio) > VOICED_RMS).sum() * 0.02)
