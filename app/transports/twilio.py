"""The phone transport: Twilio bidirectional Media Streams over a WebSocket, glued to a Session.

Audio in: `media` messages (base64 mu-law, 8 kHz, 20 ms) -> int16 -> 16 kHz -> session.push_audio.
Audio out: 20 ms frames pulled from session.playback at 8 kHz, paced by the wall clock, sent as `media`;
a `mark` follows the last frame of each reply chunk and Twilio echoes it once the caller heard that audio,
so only heard chunks reach the history (Session confirm_marks mode). Barge-in sends `clear`.

Transfers: with PARLEY_TRANSFER_TO (a number or a SIP URI), the voice webhook's `<Connect>` names an action URL
(AFTER_PATH); once the caller has heard the agent say it will transfer them, Parley ends the stream, Twilio asks
that URL what follows, and it answers `<Dial>` to that number (any other call that ends: `<Hangup/>`). Without it,
Parley keeps the call open and an integrator's hook may move it.

Integrators: `set_call_event_hook(app, hook)` receives every call's events, among them
{"type": "control", "action": "transfer_to_human"} once the agent has told the caller it will transfer them
(e.g. move the call with Twilio's REST API: update it with `<Dial>` TwiML, which ends this stream with a
`stop`). `end_call` hangs up after the goodbye was heard: the stream closes, and with nothing after `<Connect>`
in the TwiML (or `<Hangup/>` from the action URL), Twilio ends the call.
"""
import asyncio
import logging
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Awaitable, Callable
from urllib.parse import parse_qsl, quote

import soxr
from fastapi import APIRouter, FastAPI, Request, WebSocket
from fastapi.responses import PlainTextResponse, Response
from starlette.websockets import WebSocketDisconnect, WebSocketState

from app.pipeline.session import Session, SessionOptions
from app.server.auth import TOKEN_PARAMETER, token_matches
from app.server.request_body import read_limited
from app.transports import twilio_wire as wire
from app.transports.base import PacingClock, SocketCall, no_room, refuse_handshake
from app.transports.twilio_wire import TWILIO_FRAME_MS, TWILIO_FRAME_SAMPLES, TWILIO_RATE_HZ, ProtocolError, StreamStart
from speech.audio import SAMPLE_RATE_HZ, mulaw_to_pcm, pcm_to_mulaw

log = logging.getLogger(__name__)

STREAM_PATH = "/telephony/twilio"
VOICE_PATH = "/telephony/twilio/voice"
AFTER_PATH = "/telephony/twilio/after"       # the <Connect> action: what a call does once its stream has ended
CLOSE_NORMAL, CLOSE_UNSUPPORTED, CLOSE_POLICY, CLOSE_TOO_BIG, CLOSE_ERROR, CLOSE_TRY_LATER = 1000, 1003, 1008, 1009, 1011, 1013

router = APIRouter()


@dataclass(frozen=True)
class CallInfo:
    """Who is on the line, from Twilio's `start` message."""
    call_sid: str
    stream_sid: str
    account_sid: str
    custom_parameters: dict


CallEventHook = Callable[[CallInfo, dict], Awaitable[None]]


@dataclass
class TelephonyStats:
    """Process-wide counters: streams accepted, connections refused and messages ignored, by reason."""
    calls: int = 0
    warned_unsigned: bool = False         # the "no auth token" warning is logged once per process
    refused: Counter = field(default_factory=Counter)
    ignored: Counter = field(default_factory=Counter)


def telephony_stats(app: FastAPI) -> TelephonyStats:
    if getattr(app.state, "telephony_stats", None) is None:
        app.state.telephony_stats = TelephonyStats()
    return app.state.telephony_stats


class Transfers:
    """Calls the agent is handing to a person: marked as their stream is ended, taken when Twilio asks what
    follows it (AFTER_PATH). At most `limit` are remembered: a call Twilio never asks about is forgotten."""

    def __init__(self, target: str, limit: int = 1000):
        self.target = target                      # twilio_wire.dial_target's
        self.limit = limit
        self._calls: OrderedDict[str, None] = OrderedDict()

    def mark(self, call_sid: str) -> None:
        self._calls[call_sid] = None
        while len(self._calls) > self.limit:
            self._calls.popitem(last=False)

    def take(self, call_sid: str) -> bool:
        """Whether `call_sid` was marked (once: a second ask hangs up)."""
        return self._calls.pop(call_sid, False) is None


def transfers(app: FastAPI) -> Transfers | None:
    """The app's pending transfers; None without a transfer number (PARLEY_TRANSFER_TO)."""
    target = app.state.settings.transfer_to
    if target is None:
        return None
    if getattr(app.state, "transfers", None) is None:
        app.state.transfers = Transfers(wire.dial_target(target))
    return app.state.transfers


def set_call_event_hook(app: FastAPI, hook: CallEventHook | None) -> None:
    """`await hook(call, event)` for each call's events: transcript, reply, tool, metrics, error, dtmf, control."""
    app.state.telephony_event_hook = hook


# --- HTTP: the voice webhook --------------------------------------------------------------------------------


@router.post(VOICE_PATH)
async def twilio_voice(request: Request) -> Response:
    """The call's webhook: TwiML connecting it to our Media Streams endpoint."""
    settings = request.app.state.settings
    params = await _twilio_form(request)
    if isinstance(params, Response):
        return params
    host = settings.public_host or request.headers.get("host")
    if not host:
        return _refuse(request.app, 400, "no public host: set PARLEY_PUBLIC_HOST (or send a Host header)")
    if (refused := no_room(request.app.state)) is not None:
        # no session for this call now: the caller hears why (Twilio says it), not a stream refused in silence
        _count_refusal(request.app, refused[0])
        log.info("twilio call refused: %s", refused[1])
        return Response(wire.busy_twiml(settings.busy_message), media_type="text/xml")
    # with PARLEY_AUTH_TOKEN, the stream carries it as a <Parameter> (Twilio takes no query string there), and
    # the action URL in its query
    parameters = {TOKEN_PARAMETER: settings.auth_token} if settings.auth_token else None
    action = None
    if transfers(request.app) is not None:
        query = f"?{TOKEN_PARAMETER}={quote(settings.auth_token, safe='')}" if settings.auth_token else ""
        action = f"https://{host}{AFTER_PATH}{query}"
    twiml = wire.connect_stream_twiml(f"wss://{host}{STREAM_PATH}", parameters, action)
    return Response(twiml, media_type="text/xml")


@router.post(AFTER_PATH)
async def twilio_after(request: Request) -> Response:
    """The <Connect> action, asked once a call's stream has ended: `<Dial>` the transfer number for a call the
    agent is transferring, `<Hangup/>` for any other."""
    params = await _twilio_form(request)
    if isinstance(params, Response):
        return params
    call_sid = dict(params).get("CallSid", "")
    pending = transfers(request.app)
    if pending is not None and call_sid and pending.take(call_sid):
        log.info("twilio call %s transferred to %s", call_sid, pending.target)
        return Response(wire.dial_twiml(pending.target), media_type="text/xml")
    return Response(wire.hangup_twiml(), media_type="text/xml")


async def _twilio_form(request: Request) -> list[tuple[str, str]] | Response:
    """A webhook's form parameters, its signature checked when PARLEY_TWILIO_AUTH_TOKEN is set; or the 4xx
    response refusing it."""
    settings = request.app.state.settings
    body = await read_limited(request, wire.MAX_MESSAGE_BYTES)
    if body is None:
        return _refuse(request.app, 413, f"body too large: the limit is {wire.MAX_MESSAGE_BYTES} bytes")
    try:
        params = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError:
        return _refuse(request.app, 400, "body is not UTF-8 form data")
    if settings.twilio_auth_token:
        url = _signed_url(request, settings.public_host, "https")
        signature = request.headers.get(wire.SIGNATURE_HEADER)
        if not wire.signature_valid(settings.twilio_auth_token, signature, url, params):
            return _refuse(request.app, 403, f"missing or wrong {wire.SIGNATURE_HEADER}")
    return params


def _signed_url(connection, public_host: str | None, scheme: str) -> str:
    """The URL Twilio signed: our public host when configured, else the one this server saw, with Twilio's scheme."""
    url = connection.url
    if public_host:
        return str(url.replace(scheme=scheme, netloc=public_host))
    return str(url.replace(scheme="wss")) if scheme == "wss" else str(url)


def _count_refusal(app: FastAPI, kind: str) -> None:
    """A refused webhook or stream, in the telephony counters and the server's metrics."""
    telephony_stats(app).refused[kind] += 1
    app.state.metrics.refuse(TwilioCall.TRANSPORT, kind)


def _refuse(app: FastAPI, status: int, reason: str) -> PlainTextResponse:
    _count_refusal(app, f"voice_{status}")
    log.info("twilio webhook refused (%d): %s", status, reason)
    return PlainTextResponse(reason, status_code=status)


# --- WebSocket: the media stream ----------------------------------------------------------------------------


@router.websocket(STREAM_PATH)
async def twilio_stream(websocket: WebSocket) -> None:
    """One call's Media Stream; refused (HTTP 403/503 at the handshake) before anything is allocated."""
    state = websocket.app.state
    settings, stats = state.settings, telephony_stats(websocket.app)
    if settings.twilio_auth_token:
        url = _signed_url(websocket, settings.public_host, "wss")
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
    _count_refusal(websocket.app, kind)
    log.info("twilio stream refused (%d): %s", status, reason)
    await refuse_handshake(websocket, status, reason)


class TwilioCall(SocketCall):
    """One phone call: Twilio's audio into a Session, the agent's audio back at real-time pace."""

    TRANSPORT = "twilio"

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
        self._resampler = soxr.ResampleStream(TWILIO_RATE_HZ, SAMPLE_RATE_HZ, 1, dtype="int16", quality="HQ")
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
            self.session.push_audio(self._resampler.resample_chunk(mulaw_to_pcm(mulaw)))

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
            self.transfers.mark(self.info.call_sid)   # Twilio asks AFTER_PATH what follows, and dials
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
