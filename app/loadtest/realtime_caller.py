"""A Realtime API client's half of a voice session (/v1/realtime), at real-time pace: for the load generator.

Like a voice app with server VAD, it streams its microphone (24 kHz pcm16, silence included) as
`input_audio_buffer.append` every 20 ms, and plays the `response.output_audio.delta` audio as it arrives
(the server sends it at real-time pace).
"""
import asyncio
import base64
import json
import time

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from app.loadtest.twilio_caller import is_voiced

RATE_HZ = 24_000
FRAME = RATE_HZ // 50   # 20 ms


class RealtimeClient:
    def __init__(self, url: str, model: str = "parley-agent", token: str | None = None):
        self.url = url.replace("http", "ws", 1) + f"/v1/realtime?model={model}"
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.events: list[tuple[float, dict]] = []        # (perf_counter at arrival, event) from the server
        self.heard_at: list[tuple[float, bool]] = []      # (perf_counter, voiced?) of each audio delta heard
        self.said_at: list[tuple[float, bool]] = []       # (perf_counter, voiced?) of each 20 ms frame sent
        self.closed = False
        self._speech = np.zeros(0, dtype=np.int16)
        self._ws = None
        self._tasks: list[asyncio.Task] = []

    async def __aenter__(self) -> "RealtimeClient":
        self._ws = await connect(self.url, additional_headers=self.headers, max_size=None)
        self._tasks = [asyncio.create_task(self._microphone()), asyncio.create_task(self._receiver())]
        return self

    async def __aexit__(self, *exc) -> None:
        for task in self._tasks:
            task.cancel()
        await self._ws.close()

    def say(self, audio_24k: np.ndarray) -> None:
        self._speech = np.concatenate([self._speech, audio_24k])

    @property
    def speaking(self) -> bool:
        return bool(len(self._speech))

    async def _microphone(self) -> None:
        t0, n = time.perf_counter(), 0
        while not self.closed:
            frame, self._speech = self._speech[:FRAME], self._speech[FRAME:]
            frame = np.pad(frame, (0, FRAME - len(frame)))
            self.said_at.append((time.perf_counter(), is_voiced(frame)))
            audio = base64.b64encode(frame.astype("<i2").tobytes()).decode()
            try:
                await self._ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
            except ConnectionClosed:
                return
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * 0.02 - time.perf_counter()))

    async def _receiver(self) -> None:
        try:
            async for text in self._ws:
                now, event = time.perf_counter(), json.loads(text)
                self.events.append((now, event))
                if event["type"] == "response.output_audio.delta":
                    samples = np.frombuffer(base64.b64decode(event["delta"]), "<i2")
                    self.heard_at.append((now, is_voiced(samples)))
        except ConnectionClosed:
            pass
        self.closed = True
