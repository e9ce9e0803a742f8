"""The phone transport's HTTP side: the voice webhook (TwiML that connects a call to the Media Stream, or says
why not), the `<Connect>` action that dials a call the agent is transferring (PARLEY_TRANSFER_TO), their
signature checks, and what the stream (app.transports.twilio) shares with them: the paths, the counters of
refusals, the pending transfers.
"""
import logging
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from app.server.auth import TOKEN_PARAMETER
from app.server.request_body import read_limited
from app.transports import twilio_wire as wire
from app.transports.base import no_room

log = logging.getLogger(__name__)

TRANSPORT = "twilio"                         # the metrics' name for phone calls
STREAM_PATH = "/telephony/twilio"
VOICE_PATH = "/telephony/twilio/voice"
AFTER_PATH = "/telephony/twilio/after"       # the <Connect> action: what a call does once its stream has ended

router = APIRouter()


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


# --- the webhooks --------------------------------------------------------------------------------


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
        count_refusal(request.app, refused[0])
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
        url = signed_url(request, settings.public_host, "https")
        signature = request.headers.get(wire.SIGNATURE_HEADER)
        if not wire.signature_valid(settings.twilio_auth_token, signature, url, params):
            return _refuse(request.app, 403, f"missing or wrong {wire.SIGNATURE_HEADER}")
    return params


def signed_url(connection, public_host: str | None, scheme: str) -> str:
    """The URL Twilio signed: our public host when configured, else the one this server saw, with Twilio's scheme."""
    url = connection.url
    if public_host:
        return str(url.replace(scheme=scheme, netloc=public_host))
    return str(url.replace(scheme="wss")) if scheme == "wss" else str(url)


def count_refusal(app: FastAPI, kind: str) -> None:
    """A refused webhook or stream, in the telephony counters and the server's metrics."""
    telephony_stats(app).refused[kind] += 1
    app.state.metrics.refuse(TRANSPORT, kind)


def _refuse(app: FastAPI, status: int, reason: str) -> PlainTextResponse:
    count_refusal(app, f"voice_{status}")
    log.info("twilio webhook refused (%d): %s", status, reason)
    return PlainTextResponse(reason, status_code=status)
