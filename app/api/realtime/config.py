"""What a Realtime session's `session.update` may set, checked before anything is applied, and the session
object that `session.created` / `session.updated` describe."""
from dataclasses import dataclass, field

from app.api.chat import AGENT_MODEL, ApiError, parse_tool_choice, parse_tools

RATES = {"audio/pcm": 24_000, "audio/pcmu": 8_000, "audio/pcma": 8_000}
BETA_FORMATS = {"pcm16": "audio/pcm", "g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}  # the beta's names


class EventError(Exception):
    """A client event Parley cannot act on: an `error` event, and the session goes on."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None):
        super().__init__(message)
        self.code, self.param = code, param


@dataclass
class Config:
    """What `session.update` set; `describe` is the session object of `session.created` / `session.updated`."""
    id: str
    model: str
    instructions: str = ""
    input_format: str = "audio/pcm"
    output_format: str = "audio/pcm"
    server_vad: bool = True
    interrupt_response: bool = True
    voice: str = "parley"
    tools: list = field(default_factory=list)          # as the client sent them (the Realtime's flat shape)
    tool_choice: object = "auto"
    max_output_tokens: int | None = None

    def describe(self) -> dict:
        def fmt(kind):
            return {"type": kind, "rate": RATES[kind]} if kind == "audio/pcm" else {"type": kind}
        vad = ({"type": "server_vad", "create_response": True, "interrupt_response": self.interrupt_response}
               if self.server_vad else None)
        return {"type": "realtime", "object": "realtime.session", "id": self.id, "model": self.model,
                "output_modalities": ["audio"], "instructions": self.instructions, "tools": self.tools,
                "tool_choice": self.tool_choice, "max_output_tokens": self.max_output_tokens or "inf",
                "audio": {"input": {"format": fmt(self.input_format), "turn_detection": vad,
                                    "transcription": {"model": "whisper-tiny.en"}},
                          "output": {"format": fmt(self.output_format), "voice": self.voice}}}

    def updated(self, session: dict, agent_model: bool) -> dict:
        """The fields `session` changes, checked; nothing is applied when one is wrong."""
        if not isinstance(session, dict):
            raise EventError("'session' must be an object", param="session")
        changes = {}
        if "instructions" in session:
            if not isinstance(session["instructions"], str):
                raise EventError("'instructions' must be a string", param="session.instructions")
            changes["instructions"] = session["instructions"]
        modalities = session.get("output_modalities", session.get("modalities"))
        if modalities is not None and "audio" not in (modalities if isinstance(modalities, list) else []):
            raise EventError("Parley answers in audio (with its transcript): output_modalities must hold 'audio'",
                             code="unsupported", param="session.output_modalities")
        audio = session.get("audio") or {}
        if not isinstance(audio, dict):
            raise EventError("'audio' must be an object", param="session.audio")
        audio_in, audio_out = audio.get("input") or {}, audio.get("output") or {}
        if "format" in audio_in or "input_audio_format" in session:
            changes["input_format"] = _format(audio_in.get("format", session.get("input_audio_format")),
                                              "session.audio.input.format")
        if "format" in audio_out or "output_audio_format" in session:
            changes["output_format"] = _format(audio_out.get("format", session.get("output_audio_format")),
                                               "session.audio.output.format")
        voice = audio_out.get("voice", session.get("voice"))
        if voice is not None:
            changes["voice"] = str(voice)
        if "turn_detection" in audio_in or "turn_detection" in session:
            changes.update(_turn_detection(audio_in.get("turn_detection", session.get("turn_detection"))))
        if "tools" in session:
            if session["tools"] and agent_model:
                raise EventError(f"'{AGENT_MODEL}' runs Parley's own tools; connect with the loaded model's id "
                                 "to give yours", code="unsupported", param="session.tools")
            changes["tools"] = session["tools"] or []
        if "tool_choice" in session:
            changes["tool_choice"] = session["tool_choice"]
        tools = changes.get("tools", self.tools)
        client_tools(tools, changes.get("tool_choice", self.tool_choice))   # checked together
        if "max_output_tokens" in session:
            limit = session["max_output_tokens"]
            if limit != "inf" and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
                raise EventError("'max_output_tokens' must be a positive integer or 'inf'",
                                 param="session.max_output_tokens")
            changes["max_output_tokens"] = None if limit == "inf" else limit
        return changes


def _format(value, param: str) -> str:
    kind = value.get("type") if isinstance(value, dict) else BETA_FORMATS.get(value, value)
    if kind not in RATES:
        raise EventError(f"unsupported audio format {value!r}: use audio/pcm (24 kHz), audio/pcmu or audio/pcma",
                         code="unsupported", param=param)
    rate = value.get("rate") if isinstance(value, dict) else None
    if rate is not None and rate != RATES[kind]:
        raise EventError(f"{kind} is {RATES[kind]} Hz here, not {rate}", code="unsupported", param=param)
    return kind


def _turn_detection(value) -> dict:
    if value is None:
        return {"server_vad": False}
    if not isinstance(value, dict) or value.get("type") not in ("server_vad", "semantic_vad"):
        raise EventError("turn_detection must be null, server_vad or semantic_vad",
                         param="session.audio.input.turn_detection")
    if value.get("create_response") is False:
        raise EventError("create_response false is not supported: with server VAD every turn is answered; "
                         "set turn_detection to null to commit and create responses yourself",
                         code="unsupported", param="session.audio.input.turn_detection.create_response")
    return {"server_vad": True, "interrupt_response": value.get("interrupt_response") is not False}


def client_tools(tools, choice) -> tuple[list[dict], object]:
    """The Realtime's flat tools as the chat API's checked schemas, and the tool choice for them."""
    if not isinstance(tools, list):
        raise EventError("'tools' must be a list", param="session.tools")
    wrapped = [{"type": t.get("type"), "function": {k: v for k, v in t.items() if k != "type"}}
               if isinstance(t, dict) else t for t in tools]
    if isinstance(choice, dict):
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    try:
        checked = parse_tools(wrapped)
        return checked, parse_tool_choice("none" if choice == "auto" and not checked else choice, checked)
    except ApiError as exc:
        raise EventError(str(exc), param=f"session.{exc.param}") from None
