"""Twilio's side of a phone call: Media Streams messages, request signatures, and the TwiML that starts a stream
and says what follows it (a transfer's <Dial>, or hanging up).

Pure functions and constants; the socket and the session live in app/transports/twilio.py.
Message shapes follow Twilio's "Media Streams - WebSocket Messages"; the signature is Twilio's webhook scheme:
base64(HMAC-SHA1(auth token, URL + each POST parameter's name and value, sorted by name)).
"""
import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit
from xml.sax.saxutils import escape, quoteattr

TWILIO_RATE_HZ = 8_000                       # Media Streams audio is always G.711 mu-law, 8 kHz, mono
TWILIO_FRAME_MS = 20                         # Twilio sends one media message per 20 ms
TWILIO_FRAME_SAMPLES = TWILIO_RATE_HZ * TWILIO_FRAME_MS // 1000   # 160 samples = 160 mu-law bytes
MAX_MESSAGE_BYTES = 64 * 1024                # a media message is ~300 bytes; anything this large is not Twilio
SIGNATURE_HEADER = "X-Twilio-Signature"
MEDIA_ENCODING = "audio/x-mulaw"
_DEFAULT_PORTS = {"https": 443, "wss": 443, "http": 80, "ws": 80}


class ProtocolError(ValueError):
    """A message Parley cannot use; `kind` names the counter it is ignored under."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class StreamStart:
    """The `start` message: which call this stream belongs to."""
    stream_sid: str
    call_sid: str = ""
    account_sid: str = ""
    tracks: tuple[str, ...] = ("inbound",)
    custom_parameters: dict = field(default_factory=dict)   # <Parameter> values from the TwiML


def parse_message(text: str) -> dict:
    """A text frame -> its JSON object with a string `event`; ProtocolError("non_json") otherwise."""
    try:
        message = json.loads(text)
    except ValueError:
        raise ProtocolError("non_json", f"not JSON: {text[:60]!r}") from None
    if not isinstance(message, dict) or not isinstance(message.get("event"), str):
        raise ProtocolError("non_json", f"not a Media Streams message (no string 'event'): {text[:60]!r}")
    return message


def parse_start(message: dict) -> StreamStart:
    """The `start` message's metadata; ProtocolError("bad_start") when it is not a mu-law 8 kHz mono stream."""
    start = message.get("start")
    if not isinstance(start, dict):
        raise ProtocolError("bad_start", "start message without a 'start' object")
    stream_sid = start.get("streamSid") or message.get("streamSid")
    if not isinstance(stream_sid, str) or not stream_sid:
        raise ProtocolError("bad_start", "start message without a streamSid")
    media_format = start.get("mediaFormat") or {}
    got = (media_format.get("encoding"), media_format.get("sampleRate"), media_format.get("channels"))
    if got != (MEDIA_ENCODING, TWILIO_RATE_HZ, 1):
        raise ProtocolError("bad_start", f"unsupported mediaFormat {media_format!r}: expected "
                                         f"{MEDIA_ENCODING} at {TWILIO_RATE_HZ} Hz, 1 channel")
    parameters = start.get("customParameters")
    return StreamStart(
        stream_sid=stream_sid,
        call_sid=str(start.get("callSid") or ""),
        account_sid=str(start.get("accountSid") or ""),
        tracks=tuple(start.get("tracks") or ("inbound",)),
        custom_parameters=dict(parameters) if isinstance(parameters, dict) else {},
    )


def media_payload(message: dict) -> bytes:
    """The mu-law bytes of a `media` message; ProtocolError("bad_payload") when they are not valid base64."""
    media = message.get("media")
    payload = media.get("payload") if isinstance(media, dict) else None
    if not isinstance(payload, str):
        raise ProtocolError("bad_payload", "media message without a string media.payload")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError("bad_payload", f"media.payload is not base64: {payload[:40]!r}") from None


def media_message(stream_sid: str, mulaw: bytes) -> str:
    """Outbound audio: mu-law 8 kHz bytes for Twilio to play."""
    return json.dumps({"event": "media", "streamSid": stream_sid,
                       "media": {"payload": base64.b64encode(mulaw).decode("ascii")}})


def mark_message(stream_sid: str, name: str) -> str:
    """A mark after outbound audio; Twilio echoes it once everything before it has played."""
    return json.dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}})


def clear_message(stream_sid: str) -> str:
    """Drop the audio Twilio has buffered (barge-in); Twilio then echoes the marks still pending."""
    return json.dumps({"event": "clear", "streamSid": stream_sid})


def compute_signature(auth_token: str, url: str, params: list[tuple[str, str]] | dict | None = None) -> str:
    """Twilio's X-Twilio-Signature for a request to `url` with these POST parameters (none for a WebSocket)."""
    pairs = sorted(params.items() if isinstance(params, dict) else (params or []))
    data = url + "".join(name + value for name, value in pairs)
    digest = hmac.new(auth_token.encode("utf-8"), data.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signature_valid(auth_token: str, signature: str | None, url: str,
                    params: list[tuple[str, str]] | dict | None = None) -> bool:
    """Whether `signature` is Twilio's for this URL and parameters (with or without the scheme's default port)."""
    if not signature:
        return False
    for candidate in _url_variants(url):
        if hmac.compare_digest(compute_signature(auth_token, candidate, params), signature):
            return True
    return False


def _url_variants(url: str) -> list[str]:
    # Twilio signs the URL as configured; a proxy may add or drop the default port (":443") on the way here.
    parts = urlsplit(url)
    default = _DEFAULT_PORTS.get(parts.scheme)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    variants = [url]
    if default is not None and parts.port in (None, default):
        for netloc in (host, f"{host}:{default}"):
            variant = urlunsplit(parts._replace(netloc=netloc))
            if variant not in variants:
                variants.append(variant)
    return variants


def busy_twiml(message: str) -> str:
    """TwiML for a call Parley cannot take now: Twilio says `message` in its own voice, then hangs up."""
    return (f'<?xml version="1.0" encoding="UTF-8"?><Response><Say>{escape(message)}</Say><Hangup/></Response>')


def connect_stream_twiml(stream_url: str, parameters: dict[str, str] | None = None, action: str | None = None) -> str:
    """TwiML that connects the call to a bidirectional Media Stream. When the stream ends, the call ends; with an
    `action` URL, Twilio asks it instead what the call does next (Twilio's <Connect action>: a transfer's
    `dial_twiml`, or `hangup_twiml`)."""
    inner = "".join(f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in (parameters or {}).items())
    url = quoteattr(stream_url)
    stream = f"<Stream url={url}>{inner}</Stream>" if inner else f"<Stream url={url}/>"
    connect = f"<Connect action={quoteattr(action)}>" if action else "<Connect>"
    return f'<?xml version="1.0" encoding="UTF-8"?><Response>{connect}{stream}</Connect></Response>'


_PHONE_SEPARATORS = re.compile(r"[\s().-]")
_PHONE = re.compile(r"\+?[0-9]{3,15}")           # E.164 allows 15 digits; short codes and extensions have 3+
_SIP = re.compile(r"sips?:[^\s<>\"'&]+", re.IGNORECASE)


def dial_target(text: str) -> str:
    """Where a transfer dials: a phone number ("+1 (555) 010-0199" -> "+15550100199") or a SIP URI
    ("sip:frontdesk@pbx.example.com"). Raises ValueError saying what is expected."""
    text = text.strip()
    if _SIP.fullmatch(text):
        return text
    number = _PHONE_SEPARATORS.sub("", text)
    if _PHONE.fullmatch(number):
        return number
    raise ValueError(f"{text!r} is neither a phone number (+15550100199) nor a SIP URI (sip:desk@pbx.example.com)")


def dial_twiml(target: str) -> str:
    """TwiML that hands the call to `target` (dial_target's): the number or SIP address rings, and the caller
    talks to whoever answers."""
    noun = f"<Sip>{escape(target)}</Sip>" if _SIP.fullmatch(target) else escape(target)
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Dial>{noun}</Dial></Response>'


def hangup_twiml() -> str:
    return '<?xml version="1.0" encoding="UTF-8"?><Response><Hangup/></Response>'

