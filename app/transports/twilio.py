"""The phone transport: Twilio bidirectional Media Streams over a WebSocket, glued to a Session.

Audio in: `media` messages (base64 mu-law, 8 kHz, 20 ms) -> int16 -> 16 kHz -> session.push_audio.
Audio out: 20 ms frames pulled from session.playback at 8 kHz, paced by the wall clock, sent as `media`;
a `mark` follows the last frame of each reply chunk and Twilio echoes it once the caller heard that audio,
so only heard chunks reach the history (Session confirm_marks mode). Barge-in sends `clear`.

The voice webhook that connects a call to this stream, and the action URL that dials a transfer, are
app.transports.twilio_webhooks (this module's router includes theirs).

Transfers: with PARLEY_TRANSFER_TO (a number or a SIP URI), the voice webhook's `<Connect>` names an action URL
(twilio_webhooks.AFTER_PATH); once the caller has heard the agent say it will transfer them, Parley ends the
stream, Twilio asks that URL what follows, and it answers `<Dial>` to that number (any other call that ends:
`<Hangup/>`). Without it, Parley keeps the call open and an integrator's hook may move it.

Integrators: `set_call_event_hook(app, hook)` receives every call's events, among them
{"type": "control", "action": "transfer_to_human"} once the agent has told the caller it will transfer them
(e.g. move the call with Twilio's REST API: update it with `<Dial>` TwiML, which ends this stream with a
`stop`). `end_call` hangs up after the goodbye was heard: the stream closes, and with nothing after `<Connect>`
in the TwiML (or `<Hangup/>` from the action URL), Twilio ends the call.
"""
import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Awaitable, Callable

from fastapi import APIRouter, FastAPI, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from app.pipeline.session import Session, SessionOptions
from app.server.auth import TOKEN_PARAMETER, token_matches
from app.transports import twilio_wire as wire
from app.transports import twilio_webhooks as webhooks
from app.transports.base import PacingClock, SocketCall, no_room, refuse_handshake
from app.transports.twilio_webhooks import (STREAM_PATH, TelephonyStats, Transfers, count_refusal, signed_url,
                                            telephony_stats, transfers)
from app.transports.twilio_wire import TWILIO_FRAME_MS, TWILIO_FRAME_SAMPLES, TWILIO_RATE_HZ, ProtocolError, StreamStart
from speech.audio import SAMPLE_RATE_HZ, Upsampler, mulaw_to_pcm, pcm_to_mulaw

log = logging.getLogger(__name__)

CLOSE_NORMAL, CLOSE_UNSUPPORTED, CLOSE_POLICY, CLOSE_TOO_BIG, CLOSE_ERROR, CLOSE_TRY_LATER = 1000, 1003, 1008, 1009, 1011, 1013

router = APIRouter()
router.include_router(webhooks.router)


@dataclass(frozen=True)
class CallInfo:
    """Who is on the line, from Twilio's `start` message."""
    call_sid: str
    stream_sid: str
    account_sid: str
    custom_parameters: dict


CallEventHook = Callable[[CallInfo, dict], Awaitable[None]]


def set_call_event_hook(app: FastAPI, hook: CallEventHook | None) -> None:
    """`await hook(call, event)` for each call's events: transcript, reply, tool, metrics, error, dtmf, control."""
    app.state.telephony_event_hook = hook


# --- WebSocket: the media stream ----------------------------------------------------------------------------


@router.websocket(STREAM_PATH)
async def twilio_stream(websocket: WebSocket) -> None:
    """One call's Media Stream; refused (HTTP 403/503 at the handshake) before anything is allocated."""
    state = websocket.app.state
    settings, stats = state.settings, telephony_stats(websocket.app)
    if settings.twilio_auth_token:
        url = signed_url(websocket, settings.public_host, "wss")
        if not wire.signature_valid(settings.twilio_auth_token, websocket.headers.get(wire.SIGNATURE_HEADER), url):
            await _deny(websocket, 403, "signature", f"missing or wrong {wire.SIGNATURE_HEADER}")
            return
    elif not stats.warned_unsigned:
        stats.warned_unsigned = True
        log.warning("Twilio streams are not authenticated: set PARLEY_TWILIO_AUTH_TOKEN so only Twilio can call in")
    if (refused := no_room(state)) is not None:
        await _deny(websocket, 503, *refused)
        return
    # a token not shown at the handshake (app.server.auth.TokenGuard) must come in the start message
    token = settings.auth_token if settings.auth_token and not getattr(websocket.state, "authenticated", False) else None
    call = TwilioCall(websocket, state.services, on_closed=state.calls.discard, stats=stats,
                      on_event=getattr(state, "telephony_event_hook", None), metrics=state.metrics,
                      token=token, transfers=transfers(websocket.app))
    state.calls.add(call)
    stats.calls += 1
    try:
        await call.run()
    finally:
        await call.close("server shutting down")  # a no-op unless this handler was cancelled


async def _deny(websocket: WebSocket, status: int, kind: str, reason: str) -> None:
    count_refusal(websocket.app, kind)
    log.info("twilio stream refused (%d): %s", status, reason)
    await refuse_handshake(websocket, status, reason)


class TwilioCall(SocketCall):
    """One phone call: Twilio's audio into a Session, the agent's audio back at real-time pace."""

    TRANSPORT = webhooks.TRANSPORT

    def __init__(self, websocket: WebSocket, services, *, on_closed: Callable[["TwilioCall"], None],
                 stats: TelephonyStats, metrics, on_event: CallEventHook | None = None, token: str | None = None,
                 transfers: Transfers | None = None):
        super().__init__(websocket, on_closed)
        self.token = token                          # the token the start message must carry, if any
        self.transfers = transfers                  # where a transfer goes; None: the integrator's hook moves it
        self.metrics = metrics                      # app.server.metrics.Metrics
        self.services = services
        self.stats = stats
        self.on_event = on_event
        self.info: CallInfo | None = None           # the session is created by `start`
        self.ignored: Counter = Counter()           # this call's ignored messages, by reason
        self._upsample = Upsampler(TWILIO_RATE_HZ, SAMPLE_RATE_HZ)   # ~2 ms held back (soxr's stream: ~100 ms)
        self._marks: set[str] = set()              # marks sent, not yet echoed, since the last clear
        self._send_lock = asyncio.Lock()

    async def run(self) -> None:
        """Accept the socket and serve the call until either side ends it."""
        await self.websocket.accept()
        self.spawn(self._receive(), "receive")
        await self.wait_closed()

    async def closed(self, reason: str) -> None:
        if self.ignored:
            log.info("twilio call %s ignored: %s", self.name(), dict(self.ignored))
        if self.info is not None:
            await self._emit({"type": "call", "status": "ended", "reason": reason})

    # --- inbound ---------------------------------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                await self.close("Twilio closed the stream")
                return
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            size = len(data.encode("utf-8")) if isinstance(data, str) else len(data)
            if size > wire.MAX_MESSAGE_BYTES:
                self._ignore("too_big", f"{size}-byte message")
                await self.close(f"message of {size} bytes is over the {wire.MAX_MESSAGE_BYTES}-byte limit",
                                 CLOSE_TOO_BIG)
                return
            if not isinstance(data, str):
                self._ignore("binary", f"{size}-byte binary frame")
                continue
            try:
                done = await self._handle(wire.parse_message(data))
            except ProtocolError as exc:
                self._ignore(exc.kind, str(exc))
                continue
            if done is not None:
                await self.close(*done)
                return

    async def _handle(self, message: dict) -> tuple[str, int] | None:
        """Act on one message; returns (reason, close code) when the call is over."""
        event = message["event"]
        if event == "media":
            self._on_media(message)
        elif event == "mark":
            self._on_mark(message)
        elif event == "start":
            return await self._on_start(message)
        elif event == "stop":
            return "Twilio stopped the stream", CLOSE_NORMAL
        elif event == "dtmf":
            dtmf = message.get("dtmf")
            await self._emit({"type": "dtmf", "digit": str(dtmf.get("digit")) if isinstance(dtmf, dict) else ""})
        elif event == "connected":
            log.info("twilio stream connected (protocol %s %s)", message.get("protocol"), message.get("version"))
        else:
            raise ProtocolError("unknown_event", f"unknown event {event[:40]!r}")
        return None

    async def _on_start(self, message: dict) -> tuple[str, int] | None:
        if self.session is not None:
            raise ProtocolError("duplicate_start", "a second start message")
        try:
            start: StreamStart = wire.parse_start(message)
        except ProtocolError as exc:
            self._ignore(exc.kind, str(exc))
            return str(exc), CLOSE_UNSUPPORTED
        parameters = dict(start.custom_parameters)
        given = parameters.pop(TOKEN_PARAMETER, None)   # never handed on to the integrator's hook
        if self.token is not None and not token_matches(self.token, given):
            self._ignore("token", "start without the right token")
            self.metrics.refuse(self.TRANSPORT, "token")
            return "missing or wrong token", CLOSE_POLICY
        self.info = CallInfo(start.call_sid, start.stream_sid, start.account_sid, parameters)
        self.metrics.start(self.TRANSPORT)
        # partial transcripts only for an event hook: nobody else would see them, and each is a Whisper run
        options = SessionOptions() if self.on_event is not None else SessionOptions(partial_interval_ms=None)
        self.session = Session(self.services, output_rate_hz=TWILIO_RATE_HZ, send_event=self._emit,
                               on_control=self._on_control, confirm_marks=True,
                               observer=self.metrics.observer(self.TRANSPORT), options=options)
        self.session.on_clear = self._on_clear
        log.info("twilio call %s started (stream %s)", start.call_sid, start.stream_sid)
        self.spawn(self.run_session(), "session")
        self.spawn(self._send_audio(), "audio-out")
        await self._emit({"type": "call", "status": "started"})
        return None

    def _on_media(self, message: dict) -> None:
        if self.session is None:
            raise ProtocolError("media_before_start", "media before start")
        media = message.get("media")
        if isinstance(media, dict) and media.get("track", "inbound") not in ("inbound", "inbound_track"):
            return  # a unidirectional fork of our own audio: not the caller
        mulaw = wire.media_payload(message)
        if mulaw:
            self.session.push_audio(self._upsample(mulaw_to_pcm(mulaw)))

    def _on_mark(self, message: dict) -> None:
        mark = message.get("mark")
        name = mark.get("name") if isinstance(mark, dict) else None
        if name not in self._marks:
            # cleared by a barge-in (Twilio echoes those at once) or never ours: not heard
            raise ProtocolError("unknown_mark", f"mark {str(name)[:40]!r} is not pending")
        self._marks.discard(name)
        self.session.playback.confirm(int(name))

    def _ignore(self, kind: str, detail: str) -> None:
        self.ignored[kind] += 1
        self.stats.ignored[kind] += 1
        log.debug("twilio call %s: ignored %s: %s", self.name(), kind, detail)

    # --- outbound --------------------------------------------------------------------------------------------

    async def _send_audio(self) -> None:
        """20 ms of the agent's voice per tick while it speaks, each finished chunk followed by its mark."""
        playback, stream_sid = self.session.playback, self.info.stream_sid
        clock = PacingClock(TWILIO_FRAME_MS / 1000)
        while True:
            await clock.wait()
            samples, finished = playback.read_frame(TWILIO_FRAME_SAMPLES)
            # NOTE: an all-zero frame with no finished chunk is idle time (digital silence inside speech is
            # rare); Twilio needs no audio between replies.
            if not finished and not samples.any():
                continue
            await self._send(wire.media_message(stream_sid, pcm_to_mulaw(samples)))
            for chunk_id in finished:
                name = str(chunk_id)
                self._marks.add(name)
                await self._send(wire.mark_message(stream_sid, name))

    def _on_clear(self) -> None:
        # Barge-in (the session already dropped its queue): the caller must stop hearing us now.
        self._marks.clear()
        self.spawn(self._send(wire.clear_message(self.info.stream_sid)), "clear")

    async def _send(self, text: str) -> None:
        async with self._send_lock:
            if self.websocket.application_state != WebSocketState.CONNECTED:
                return
            try:
                await self.websocket.send_text(text)
            except (WebSocketDisconnect, OSError, RuntimeError):  # Twilio hung up mid-send
                self.close_soon("Twilio closed the stream")

    # --- session glue ----------------------------------------------------------------------------------------

    async def _on_control(self, action: str) -> None:
        # Called once the reply announcing the action was heard (its marks echoed).
        await self._emit({"type": "control", "action": action})
        if action == "end_call":
            self.close_soon("the agent ended the call")
        elif action == "transfer_to_human" and self.transfers is not None and self.info.call_sid:
            self.transfers.mark(self.info.call_sid)   # Twilio asks the action URL what follows, and dials
            self.close_soon("the agent transferred the call")

    async def _emit(self, event: dict) -> None:
        if self.on_event is None or self.info is None:
            return
        try:
            await self.on_event(self.info, event)
        except Exception:  # an integrator's bug must not take the call down
            log.exception("twilio call %s: event hook failed on %s", self.name(), event.get("type"))

    def name(self) -> str:
        return self.info.call_sid if self.info is not None and self.info.call_sid else super().name()
