"""The file transport: a recording played into a Session as if live (at real-time pace or as fast as possible), and
the reply's audio collected as a file's "speaker" would play it. `parley converse` and the benchmarks use it."""
import asyncio

import numpy as np

from app.pipeline.session import Session, SessionOptions
from app.transports.base import Call, PacingClock
from speech.audio import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE_HZ


async def converse(services, audio: np.ndarray, realtime: bool = False, options=None) -> dict:
    """Stream 16 kHz audio through a Session as if live; returns the turn's texts, metrics and reply audio."""
    return summarize(*await talk(services, audio, realtime, options))


async def talk(services, audio: np.ndarray, realtime: bool = False, options=None):
    """converse's conversation itself: -> (its events, the closed Session, the reply's audio chunks)."""
    call = FileCall(services, realtime, options)
    await call.play(audio)
    return call.events, call.session, call.reply_audio


class FileCall(Call):
    """A recording as the caller: its audio pushed frame by frame, the reply's audio pulled as it is queued."""

    TRANSPORT = "file"

    def __init__(self, services, realtime: bool = False, options=None):
        super().__init__()
        self.realtime = realtime              # at real-time pace, or as fast as the pipeline goes
        self.events: list[dict] = []
        self.reply_audio: list[np.ndarray] = []
        self.session = Session(services, output_rate_hz=services.tts.sample_rate_hz, send_event=self._record,
                               options=options or SessionOptions(realtime=realtime))
        # trailing silence so the turn detector can hear the end of the last utterance, however long it waits
        policy = self.session.options.end_of_turn
        wait_ms = max(services.vad_config.silence_ms, policy.max_silence_ms if policy is not None else 0)
        self.tail = np.zeros(SAMPLE_RATE_HZ * (wait_ms + 500) // 1000, dtype=np.int16)

    async def play(self, audio: np.ndarray) -> None:
        """The whole conversation: every frame of `audio` heard, every reply to it spoken; then the call ends."""
        runner = self.spawn(self.session.run(), "session")
        self.spawn(self._speaker(), "speaker")
        clock = PacingClock(FRAME_MS / 1000) if self.realtime else None
        stream = np.concatenate([audio, self.tail])
        for start in range(0, len(stream), FRAME_SAMPLES):
            self.session.push_audio(stream[start:start + FRAME_SAMPLES])
            await (clock.wait() if clock is not None else asyncio.sleep(0))
        self.session.end_input()
        await runner
        await self.session.wait_idle()
        await self.close("the recording ended")

    async def _record(self, event: dict) -> None:
        self.events.append(event)

    async def _speaker(self) -> None:
        # pulls speech as it is queued, at real time or as fast as possible
        playback = self.session.playback
        frame = playback.sample_rate_hz * FRAME_MS // 1000
        while True:
            if playback.busy:
                self.reply_audio.append(playback.read(frame))
                await asyncio.sleep(FRAME_MS / 1000 if self.realtime else 0)
            else:
                await asyncio.sleep(0.002)


def summarize(events: list[dict], session, reply_audio: list[np.ndarray]) -> dict:
    finals = [e["text"] for e in events if e["type"] == "transcript" and e["final"]]
    replies = [e["text"] for e in events if e["type"] == "reply" and e["final"]]
    turns = [t.metrics() for t in session.turns if t.transcript]
    return {
        "transcript": " ".join(finals),
        "reply": " ".join(replies),
        "tool_calls": [{k: e[k] for k in ("name", "arguments", "result")} for e in events if e["type"] == "tool"],
        "metrics": turns[0] if turns else {},
        "turns": turns,
        "errors": [e["message"] for e in events if e["type"] == "error"],
        "audio": np.concatenate(reply_audio) if reply_audio else np.zeros(0, dtype=np.int16),
    }
