"""The browser's half of a WebRTC call, in Python: a scripted microphone and a peer that logs what it hears and
the events it gets. The WebRTC tests' caller and the load generator's (app.loadtest --transport webrtc)."""
import asyncio
import fractions
import json
import time

import httpx
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from app.loadtest.twilio_caller import is_voiced
from app.transports.webrtc import RTC_FRAME_SAMPLES, RTC_RATE_HZ

TURN_TIMEOUT_S = 60.0


class ScriptedMicrophone(MediaStreamTrack):
    """A microphone that says what it is given (int16, 48 kHz) at real-time pace, and silence in between."""

    kind = "audio"

    def __init__(self, samples: np.ndarray):
        super().__init__()
        self._pending = samples
        self._pts = 0
        self._start_s = None
        self.said_at: list[tuple[float, bool]] = []   # (perf_counter, voiced?) of each 20 ms frame sent

    @property
    def speaking(self) -> bool:
        """Some of what it was given to say is not sent yet."""
        return bool(len(self._pending))

    def say(self, samples: np.ndarray) -> None:
        self._pending = np.concatenate([self._pending, samples])

    async def recv(self) -> AudioFrame:
        if self._start_s is None:
            self._start_s = time.monotonic()
        await asyncio.sleep(max(0.0, self._start_s + self._pts / RTC_RATE_HZ - time.monotonic()))
        chunk, self._pending = self._pending[:RTC_FRAME_SAMPLES], self._pending[RTC_FRAME_SAMPLES:]
        chunk = np.pad(chunk, (0, RTC_FRAME_SAMPLES - len(chunk)))
        self.said_at.append((time.perf_counter(), is_voiced(chunk)))
        frame = AudioFrame(format="s16", layout="mono", samples=RTC_FRAME_SAMPLES)
        frame.planes[0].update(chunk.astype(np.int16).tobytes())
        frame.pts, frame.sample_rate, frame.time_base = self._pts, RTC_RATE_HZ, fractions.Fraction(1, RTC_RATE_HZ)
        self._pts += RTC_FRAME_SAMPLES
        return frame


class Refused(Exception):
    """The server turned the call away (503: every line busy, or its callers already wait too long)."""


class Client:
    """A Python peer that behaves like the page: an `events` channel, a microphone track, a loudness log."""

    def __init__(self, microphone: MediaStreamTrack):
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.events: list[dict] = []
        self.heard: list[tuple[float, float]] = []     # (perf_counter, int16 RMS) per received 20 ms frame
        self.channel = self.pc.createDataChannel("events")
        self.channel.on("message", lambda m: self.events.append(json.loads(m)))
        self.pc.addTrack(microphone)
        self.pc.on("track", lambda track: asyncio.ensure_future(self._listen(track)))

    async def connect(self, url: str) -> None:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = {"sdp": self.pc.localDescription.sdp, "type": self.pc.localDescription.type}
        async with httpx.AsyncClient() as http:
            response = await http.post(f"{url}/offer", json=offer, timeout=30)
        if response.status_code == 503:
            await self.pc.close()
            raise Refused(response.json().get("error", response.text))
        assert response.status_code == 200, response.text
        await self.pc.setRemoteDescription(RTCSessionDescription(**response.json()))

    async def _listen(self, track) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            x = frame.to_ndarray().astype(np.float64)
            self.heard.append((time.perf_counter(), float(np.sqrt(np.mean(x * x)))))

    def loudest(self) -> float:
        return max((rms for _, rms in self.heard), default=0.0)

    async def wait_for(self, predicate, what: str, timeout_s: float = TURN_TIMEOUT_S):
        deadline = time.monotonic() + timeout_s
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; events so far: {self.events}"
            await asyncio.sleep(0.05)
