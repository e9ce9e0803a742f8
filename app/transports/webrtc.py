"""The browser transport: one WebRTC call through aiortc, glued to a Session.

Audio in: Opus decoded by aiortc (48 kHz, stereo s16) -> mono -> 16 kHz int16 -> session.push_audio.
Audio out: 20 ms frames at 48 kHz pulled from session.playback at real-time pace (silence when idle).
Events: the JSON events of DESIGN.md on the data channel the client opens as `events`; it may send `hangup`.
"""
import asyncio
import fractions
import json
import logging
import time
from typing import Callable

import numpy as np
import soxr
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.sdp import SessionDescription
from av import AudioFrame

from app.pipeline.session import Session
from app.transports import base
from app.transports.base import PacingClock
from speech.audio import SAMPLE_RATE_HZ, to_mono

log = logging.getLogger(__name__)

RTC_RATE_HZ = 48_000                                 # Opus in WebRTC always runs at 48 kHz
RTC_FRAME_MS = 20
RTC_FRAME_SAMPLES = RTC_RATE_HZ * RTC_FRAME_MS // 1000   # 960
# NOTE: a streaming resampler holds samples back; 48 -> 16 kHz holds 21 ms at soxr's HQ, 15 ms at MQ, 6 ms at LQ.
# MQ keeps 16-bit precision and a steep anti-alias filter, which is more than Whisper needs, for 6 ms less delay.
INPUT_QUALITY = "MQ"
# No packets from the browser for MEDIA_GAP_S is silence (Opus DTX, packet loss, a track that ended), fed to the
# session so a turn ends; none for NO_MEDIA_S ends the call: the browser is gone (a closed tab is otherwise noticed
# only when ICE consent fails, ~30 s later). A live page always sends (a muted microphone sends silence; DTX a
# comfort-noise packet at least every 400 ms).
MEDIA_GAP_S = 0.2
NO_MEDIA_S = 5.0
EVENTS_LABEL = "events"
MAX_PENDING_EVENTS = 256          # events held until the client's data channel arrives


class OfferError(ValueError):
    """An offer we refuse; the message says why and goes back to the client as a 400."""


def parse_offer(body: bytes) -> RTCSessionDescription:
    """The request body `{"sdp": str, "type": "offer"}` checked down to an audio m-line Parley can answer."""
    if not body.strip():
        raise OfferError('empty body: expected JSON {"sdp": "...", "type": "offer"}')
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise OfferError('body is not JSON: expected {"sdp": "...", "type": "offer"}') from None
    if not isinstance(payload, dict):
        raise OfferError(f'expected a JSON object {{"sdp", "type"}}, got {type(payload).__name__}')
    sdp, kind = payload.get("sdp"), payload.get("type")
    if not isinstance(sdp, str):
        raise OfferError(f'"sdp" must be a string, got {type(sdp).__name__}')
    if kind != "offer":
        raise OfferError(f'"type" must be "offer", got {kind!r}')
    _check_sdp(sdp)
    return RTCSessionDescription(sdp=sdp, type="offer")


def _check_sdp(sdp: str) -> None:
    if not sdp.lstrip().startswith("v=0"):
        raise OfferError('"sdp" is not a session description (it must start with "v=0")')
    try:
        description = SessionDescription.parse(sdp)
    except Exception as exc:  # aiortc's parser raises assorted errors on garbage
        raise OfferError(f'"sdp" does not parse ({type(exc).__name__}: {exc})') from None
    audio = [m for m in description.media if m.kind == "audio"]
    if not audio:
        raise OfferError("the offer has no audio m-line: Parley needs the microphone")
    media = audio[0]
    if media.direction not in ("sendrecv", "sendonly"):
        raise OfferError("the audio m-line must send the microphone (a=sendrecv or a=sendonly), "
                         f"got {media.direction or 'no direction'}")
    codecs = [c.mimeType.lower() for c in media.rtp.codecs]
    if "audio/opus" not in codecs:
        raise OfferError(f"the audio m-line offers no Opus codec (offered: {', '.join(codecs) or 'none'})")
    if media.ice is None or not media.ice.usernameFragment or not media.ice.password:
        raise OfferError("the audio m-line has no ICE credentials (a=ice-ufrag, a=ice-pwd)")
    if media.dtls is None or not media.dtls.fingerprints:
        raise OfferError("the audio m-line has no DTLS fingerprint (a=fingerprint)")


class InputResampler:
    """Decoded WebRTC frames (s16, any layout, any rate) -> 16 kHz mono int16, filter state kept across frames."""

    def __init__(self):
        self._stream: soxr.ResampleStream | None = None
        self._rate_hz = 0

    def __call__(self, frame: AudioFrame) -> np.ndarray:
        if frame.format.name not in ("s16", "s16p"):
            raise ValueError(f"expected s16 or s16p audio from the decoder, got {frame.format.name}")
        channels = len(frame.layout.channels)
        raw = frame.to_ndarray()  # packed: (1, n * channels); planar: (channels, n)
        samples = raw.T if frame.format.is_planar else raw.reshape(-1, channels)  # (n, channels)
        mono = to_mono(samples)
        if frame.sample_rate != self._rate_hz:
            self._rate_hz = frame.sample_rate
            self._stream = soxr.ResampleStream(self._rate_hz, SAMPLE_RATE_HZ, 1, dtype="int16", quality=INPUT_QUALITY)
        return self._stream.resample_chunk(mono)


class PlaybackTrack(MediaStreamTrack):
    """The agent's voice: 20 ms frames at 48 kHz from a Playback, paced by the wall clock; silence when idle."""

    kind = "audio"

    def __init__(self, playback):
        super().__init__()
        assert playback.sample_rate_hz == RTC_RATE_HZ, playback.sample_rate_hz
        self.playback = playback
        self._clock = PacingClock(RTC_FRAME_MS / 1000)

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await self._clock.wait()
        samples = self.playback.read(RTC_FRAME_SAMPLES)
        frame = AudioFrame(format="s16", layout="mono", samples=RTC_FRAME_SAMPLES)
        frame.planes[0].update(samples.tobytes())
        frame.pts = self._clock.frames * RTC_FRAME_SAMPLES
        frame.sample_rate = RTC_RATE_HZ
        frame.time_base = fractions.Fraction(1, RTC_RATE_HZ)
        return frame


class Call(base.Call):
    """One browser call: its peer connection, Session, microphone pump and events channel."""

    TRANSPORT = "webrtc"

    def __init__(self, services, *, connect_timeout_s: float, on_closed: Callable[["Call"], None], observer=None):
        super().__init__(on_closed)
        self.connect_timeout_s = connect_timeout_s
        # No STUN server: nothing here may reach the internet, and host candidates cover localhost and the LAN.
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.session = Session(services, output_rate_hz=RTC_RATE_HZ,
                               send_event=self._send_event, on_control=self._on_control, observer=observer)
        self.channel = None
        self.connected = asyncio.Event()
        self._pending: list[str] = []          # events (JSON) waiting for the channel
        self._track: PlaybackTrack | None = None
        self._has_mic = False
        self.pc.on("datachannel", self._on_datachannel)
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_connection_state)

    async def answer(self, offer: RTCSessionDescription) -> RTCSessionDescription:
        """Accept the offer and start the session; raises ValueError when aiortc cannot answer it."""
        await self.pc.setRemoteDescription(offer)
        self._track = PlaybackTrack(self.session.playback)
        self.pc.addTrack(self._track)
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        self.spawn(self.run_session(), "session")
        self.spawn(self._expire_unconnected(), "connect-timeout")
        return self.pc.localDescription

    async def close(self, reason: str, code: int = base.CLOSE_NORMAL, error: bool = False) -> None:
        if self._track is not None:
            self._track.stop()   # silence at once, before the session winds down
        await super().close(reason, code, error)

    async def hang_up(self, reason: str, code: int) -> None:
        await self.pc.close()

    async def _expire_unconnected(self) -> None:
        try:
            await asyncio.wait_for(self.connected.wait(), self.connect_timeout_s)
        except asyncio.TimeoutError:
            await self.close(f"not connected after {self.connect_timeout_s:g} s")

    async def _pump_microphone(self, track: MediaStreamTrack) -> None:
        resample = InputResampler()
        gap = np.zeros(round(SAMPLE_RATE_HZ * MEDIA_GAP_S), dtype=np.int16)
        last_frame_s, ended = time.monotonic(), False
        while True:
            if ended:
                await asyncio.sleep(MEDIA_GAP_S)
            else:
                try:
                    frame = await asyncio.wait_for(track.recv(), MEDIA_GAP_S)
                except asyncio.TimeoutError:
                    frame = None
                except MediaStreamError:   # the browser's track ended
                    frame, ended = None, True
                if frame is not None:
                    self.session.push_audio(resample(frame))
                    last_frame_s = time.monotonic()
                    continue
            if time.monotonic() - last_frame_s > NO_MEDIA_S:
                self.close_soon(f"no audio from the browser for {NO_MEDIA_S:g} s")
                return
            self.session.push_audio(gap)   # no packets: the caller is silent, so a turn can end

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind != "audio" or self._has_mic:
            return  # one microphone per call; video is never asked for
        self._has_mic = True
        self.spawn(self._pump_microphone(track), "microphone")

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        log.info("webrtc call %s: connection %s", self.name(), state)
        if state == "connected":
            self.connected.set()
        elif state in ("failed", "closed", "disconnected"):
            self.close_soon(f"connection {state}")

    def _on_datachannel(self, channel) -> None:
        if channel.label != EVENTS_LABEL or self.channel is not None:
            log.info("webrtc call %s: ignoring data channel %r", self.name(), channel.label)
            return
        self.channel = channel
        channel.on("message", self._on_message)
        pending, self._pending = self._pending, []
        for text in pending:
            channel.send(text)

    def _on_message(self, message) -> None:
        try:
            event = json.loads(message)
        except (ValueError, TypeError):
            event = None
        if isinstance(event, dict) and event.get("type") == "hangup":
            self.close_soon("client hung up")
            return
        text = message if isinstance(message, str) else f"<{len(message)} bytes>"
        self._send_now({"type": "error",
                        "message": f'unknown message {text[:80]!r}: the only one accepted is {{"type": "hangup"}}'})

    async def _send_event(self, event: dict) -> None:
        self._send_now(event)

    def _send_now(self, event: dict) -> None:
        text = json.dumps(event, ensure_ascii=False)
        if self.channel is not None and self.channel.readyState == "open":
            self.channel.send(text)
        elif self.channel is None and len(self._pending) < MAX_PENDING_EVENTS:
            self._pending.append(text)

    async def _on_control(self, action: str) -> None:
        # The reply announcing it has been played. A browser call has no human to transfer to: both end it.
        # Scheduled, not awaited: session.close() may cancel the task that called us.
        self.close_soon(f"agent asked to {action.replace('_', ' ')}")
