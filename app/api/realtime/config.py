"""What a Realtime session's `session.update` may set, checked before anything is applied, and the session
object that `session.created` / `session.updated` describe."""
from dataclasses import dataclass, field, replace

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
    modalities: list = field(default_factory=lambda: ["audio"])   # or ["text"]: no speech
    server_vad: bool = True
    create_response: bool = True                       # server VAD answers each turn; False: response.create does
    interrupt_response: bool = True
    voice: str = "parley"
    tools: list = field(default_factory=list)          # as the client sent them (the Realtime's flat shape)
    tool_choice: object = "auto"
    max_output_tokens: int | None = None

    def describe(self) -> dict:
        def fmt(kind):
            return {"type": kind, "rate": RATES[kind]} if kind == "audio/pcm" else {"type": kind}
        vad = ({"type": "server_vad", "create_response": self.create_response,
                "interrupt_response": self.interrupt_response}
               if self.server_vad else None)
        return {"type": "realtime", "object": "realtime.session", "id": self.id, "model": self.model,
                "output_modalities": self.modalities, "instructions": self.instructions, "tools": self.tools,
                "tool_choice": self.tool_choice, "max_output_tokens": self.max_output_tokens or "inf",
                "audio": {"input": {"format": fmt(self.input_format), "turn_detection": vad,
                                    "transcription": {"model": "whisper-tiny.en"}},
                          "output": {"format": fmt(self.output_format), "voice": self.voice}}}

    def updated(self, session: dict, agent_model: bool) -> dict:
        """The fields `session` changes, checked; nothing is applied when one is wrong."""
        if not isinstance(session, dict):
            raise EventError("'session' must be an object", param="session")
        changes = self._model_settings(session, agent_model, "session")
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
        return changes

    def for_response(self, params, agent_model: bool) -> "Config":
        """The settings one `response.create` runs under: the session's, with what its `response` sets."""
        if params is None:
            return self
        if not isinstance(params, dict):
            raise EventError("'response' must be an object", param="response")
        if params.get("conversation", "auto") != "auto" or params.get("input") is not None:
            raise EventError("out-of-band responses (conversation 'none', or an 'input' of their own) are not "
                             "supported: a response continues the conversation", code="unsupported",
                             param="response.conversation")
        return replace(self, **self._model_settings(params, agent_model, "response"))

    def _model_settings(self, fields: dict, agent_model: bool, where: str) -> dict:
        """What a session or a response sets for the model's side: modalities, instructions, tools, the limit."""
        changes = {}
        if "instructions" in fields:
            if not isinstance(fields["instructions"], str):
                raise EventError("'instructions' must be a string", param=f"{where}.instructions")
            changes["instructions"] = fields["instructions"]
        modalities = fields.get("output_modalities", fields.get("modalities"))
        if modalities is not None:
            if modalities not in (["text"], ["audio"], ["text", "audio"], ["audio", "text"]):
                raise EventError("output_modalities is ['audio'] (speech with its transcript) or ['text']",
                                 param=f"{where}.output_modalities")
            changes["modalities"] = ["text"] if modalities == ["text"] else ["audio"]
        if "tools" in fields:
            if fields["tools"] and agent_model:
                raise EventError(f"'{AGENT_MODEL}' runs Parley's own tools; connect with the loaded model's id "
                                 "to give yours", code="unsupported", param=f"{where}.tools")
            changes["tools"] = fields["tools"] or []
        if "tool_choice" in fields:
            changes["tool_choice"] = fields["tool_choice"]
        client_tools(changes.get("tools", self.tools), changes.get("tool_choice", self.tool_choice),
                     where)   # checked together
        if "max_output_tokens" in fields:
            limit = fields["max_output_tokens"]
            if limit != "inf" and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
                raise EventError("'max_output_tokens' must be a positive integer or 'inf'",
                                 param=f"{where}.max_output_tokens")
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
    return {"server_vad": True, "create_response": value.get("create_response") is not False,
            "interrupt_response": value.get("interrupt_response") is not False}


def client_tools(tools, choice, where: str = "session") -> tuple[list[dict], object]:
    """The Realtime's flat tools as the chat API's checked schemas, and the tool choice for them."""
    if not isinstance(tools, list):
        raise EventError("'tools' must be a list", param=f"{where}.tools")
    wrapped = [{"type": t.get("type"), "function": {k: v for k, v in t.items() if k != "type"}}
               if isinstance(t, dict) else t for t in tools]
    if isinstance(choice, dict):
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    try:
        checked = parse_tools(wrapped)
        return checked, parse_tool_choice("none" if choice == "auto" and not checked else choice, checked)
    except ApiError as exc:
        raise EventError(str(exc), param=f"{where}.{exc.param}") from None
