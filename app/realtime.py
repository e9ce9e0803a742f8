"""OpenAI's Realtime API at `/v1/realtime` (WebSocket): a voice client written for OpenAI talks to Parley.

The call is one Session (app.session) like a phone call's: appended audio goes through Parley's turn detector,
Whisper, the agent and Piper, and the reply's audio comes back as `response.output_audio.delta` events at
real-time pace (so a barge-in knows what was heard). The event names and shapes are those of the `openai`
package's `types.realtime` (the GA protocol); the protocol's side is here, the pipeline's in Session.

`?model=parley-agent` (the default) is Parley's front desk: its own tools, run here, and the business of its
profile. `?model=<the loaded model>` (e.g. parley-smollm2) writes the conversation's next message under the
session's `instructions`, and calls the client's `tools`: a call comes back as a `function_call` item for the
client to run, which sends its `function_call_output` and a `response.create`.

Not supported (each gets an `error` event, and the session goes on): text-only output, `create_response: false`,
audio content in `conversation.item.create`, item deletion and retrieval. Accepted and not used: `voice` (the
bundled voice speaks), the VAD's tuning (Parley's own end of turn decides), `transcription` settings (the input
is always transcribed, with the bundled Whisper).
"""
import asyncio
import base64
import binascii
import itertools
import json
import logging
import threading
import uuid
from dataclasses import dataclass, field, replace

import numpy as np
import soxr
from fastapi import APIRouter, WebSocket
from fastapi.responses import PlainTextResponse
from starlette.websockets import WebSocketDisconnect, WebSocketState

from app.agent import TurnResult
from app.openai_api import AGENT_MODEL, ApiError, ModelJob, _conversation, _tool_choice, _tools, model_id
from app.playback import PacingClock
from app.session import Session
from speech.audio import SAMPLE_RATE_HZ, alaw_to_pcm, mulaw_to_pcm, pcm_to_alaw, pcm_to_mulaw

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1")

OUTPUT_RATE_HZ = 24_000
FRAME_MS = 20
RATES = {"audio/pcm": 24_000, "audio/pcmu": 8_000, "audio/pcma": 8_000}
BETA_FORMATS = {"pcm16": "audio/pcm", "g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}  # the beta's names
MIN_COMMIT_MS = 100                       # OpenAI's smallest committable buffer
CLOSE_NORMAL, CLOSE_ERROR = 1000, 1011


class EventError(Exception):
    """A client event Parley cannot act on: an `error` event, and the session goes on."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None):
        super().__init__(message)
        self.code, self.param = code, param


@router.websocket("/realtime")
async def realtime(websocket: WebSocket) -> None:
    state = websocket.app.state
    loaded = model_id(state.settings)
    model = websocket.query_params.get("model") or AGENT_MODEL
    if model not in (loaded, AGENT_MODEL):
        await _deny(websocket, 404, "model", f"The model '{model}' does not exist; this server has '{loaded}' "
                                             f"and '{AGENT_MODEL}'")
        return
    if state.services is None or not state.services.ready:
        await _deny(websocket, 503, "not_ready", "models still loading; try again shortly")
        return
    if len(state.calls) >= state.settings.max_sessions:
        await _deny(websocket, 503, "busy", f"busy: all {state.settings.max_sessions} sessions are in use")
        return
    call = RealtimeCall(websocket, state.services, model, on_closed=state.calls.discard, metrics=state.metrics)
    state.calls.add(call)
    try:
        await call.run()
    finally:
        await call.close("server shutting down")   # a no-op unless this handler was cancelled


async def _deny(websocket: WebSocket, status: int, kind: str, reason: str) -> None:
    websocket.app.state.metrics.refuse(RealtimeCall.TRANSPORT, kind)
    log.info("realtime session refused (%d): %s", status, reason)
    try:
        await websocket.send_denial_response(PlainTextResponse(reason, status_code=status))
    except RuntimeError:   # the server lacks the denial-response extension: a bare 403
        await websocket.close(code=1008, reason=reason)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


# --- the session's configuration -------------------------------------------------------------------------------


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
        _client_tools(tools, changes.get("tool_choice", self.tool_choice))   # checked together
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


def _client_tools(tools, choice) -> tuple[list[dict], object]:
    """The Realtime's flat tools as the chat API's checked schemas, and the tool choice for them."""
    if not isinstance(tools, list):
        raise EventError("'tools' must be a list", param="session.tools")
    wrapped = [{"type": t.get("type"), "function": {k: v for k, v in t.items() if k != "type"}}
               if isinstance(t, dict) else t for t in tools]
    if isinstance(choice, dict):
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    try:
        checked = _tools(wrapped)
        return checked, _tool_choice("none" if choice == "auto" and not checked else choice, checked)
    except ApiError as exc:
        raise EventError(str(exc), param=f"session.{exc.param}") from None


# --- the loaded model, with the client's tools ---------------------------------------------------------------


class ClientConversation:
    """The loaded model's side of a conversation whose tools the client runs: the agent Session drives for
    `?model=<loaded model>`. Its history is in the chat API's shape (calls with ids, results named by them)."""

    def __init__(self, services, config: Config, on_call):
        self.services, self.config, self.on_call = services, config, on_call
        self.engine = services.engine
        self.messages: list[dict] = []
        self._lock = threading.Lock()       # the model's thread and the event loop both touch the history

    def add(self, message: dict) -> None:
        with self._lock:
            self.messages.append(message)

    def answers(self, call_id: str) -> bool:
        """A call of this conversation has this id."""
        return any(call["id"] == call_id for m in self.messages for call in m.get("tool_calls", ()))

    def prompt(self) -> list[dict]:
        request = self._request()
        return _conversation(request["messages"], request["tools"])

    def draft(self, text, cancel=None):
        return None   # the client may change the conversation between turns: no speculative replies

    def respond(self, text: str | None, on_text=None, on_tool=None, cancel=None, first=None) -> TurnResult:
        if text:
            self.add({"role": "user", "content": text})
        job = self._job()
        result = job.run(on_text, cancel or threading.Event())
        gen = result["generation"]
        turn = TurnResult(reply=result["content"] or "", passes=gen.passes, tokens=gen.tokens, llm_s=gen.seconds,
                          cancelled=gen.stopped == "cancelled")
        message = {"role": "assistant", "content": result["content"] or ""}
        if result["tool_calls"] and not turn.cancelled:
            message["tool_calls"] = result["tool_calls"]
        self.add(message)
        for call in message.get("tool_calls", ()):
            self.on_call(call)
        return turn

    def truncate_last_reply(self, heard_text: str) -> None:
        with self._lock:
            for i in range(len(self.messages) - 1, -1, -1):
                if self.messages[i]["role"] == "user":
                    return
                if self.messages[i]["role"] == "assistant":
                    self.messages[i] = dict(self.messages[i], content=heard_text.strip())
                    return

    def _request(self) -> dict:
        tools, choice = _client_tools(self.config.tools, self.config.tool_choice)
        with self._lock:
            messages = list(self.messages)
        system = [{"role": "system", "content": self.config.instructions}] if self.config.instructions else []
        return {"messages": system + messages, "tools": tools, "tool_choice": choice,
                "max_tokens": self.config.max_output_tokens}

    def _job(self) -> ModelJob:
        """The next message's job; the oldest messages leave while the conversation overflows the context."""
        while True:
            try:
                return ModelJob(self.services, self._request())
            except ApiError as exc:
                if exc.code != "context_length_exceeded" or not self.messages:
                    raise
                with self._lock:
                    del self.messages[0]


# --- one response ------------------------------------------------------------------------------------------------


@dataclass
class Response:
    id: str
    output: list = field(default_factory=list)        # its items, in order
    message: dict | None = None                       # the assistant message item, once it speaks
    transcript: str = ""
    audio_ms: float = 0.0
    written: bool = False                             # the model is done; the response ends when its audio has

    def payload(self, status: str = "in_progress", details: dict | None = None, usage: dict | None = None) -> dict:
        return {"object": "realtime.response", "id": self.id, "status": status, "status_details": details,
                "output": self.output, "output_modalities": ["audio"], "usage": usage}


# --- the call ------------------------------------------------------------------------------------------------------


class RealtimeCall:
    """One Realtime session: client events in, server events out, a Session in between."""

    TRANSPORT = "realtime"

    def __init__(self, websocket: WebSocket, services, model: str, *, on_closed, metrics):
        self.websocket, self.services, self.on_closed, self.metrics = websocket, services, on_closed, metrics
        self.config = Config(_new_id("sess"), model)
        self.agent_model = model == AGENT_MODEL
        loop = asyncio.get_running_loop()
        agent = services.new_agent() if self.agent_model else ClientConversation(
            services, self.config, lambda call: loop.call_soon_threadsafe(self._on_call, call))
        self.session = Session(services, output_rate_hz=OUTPUT_RATE_HZ, send_event=self._on_session_event,
                               on_control=self._on_control, observer=metrics.observer(self.TRANSPORT), agent=agent)
        self.session.on_speech = self._on_speech
        self.items: dict[str, dict] = {}                  # the conversation's items by id, in order
        self.response: Response | None = None
        self.closing = False
        self._pending: list[asyncio.Future] = []          # user text not answered yet (typed, or committed audio)
        self._buffer: list[np.ndarray] = []               # committed-by-hand audio, 16 kHz (turn_detection null)
        self._speech_item: str | None = None              # the user item the turn detector is hearing
        self._committed_item: str | None = None           # the one it ended last, until its transcript comes
        self._audio_ms: dict[str, float] = {}             # each assistant item's audio sent
        self._in = None
        self._set_formats()
        self._out: asyncio.Queue[dict | None] = asyncio.Queue()
        self._event_ids = itertools.count()
        self._tasks: set[asyncio.Task] = set()
        self._closed = asyncio.Event()

    async def run(self) -> None:
        await self.websocket.accept()
        self.metrics.start(self.TRANSPORT)
        self._send({"type": "session.created", "session": self.config.describe()})
        for coro, name in ((self._send_loop(), "send"), (self._receive(), "receive"),
                           (self._run_session(), "session"), (self._send_audio(), "audio-out")):
            self._spawn(coro, name)
        await self._closed.wait()

    async def close(self, reason: str, code: int = CLOSE_NORMAL) -> None:
        """End the session: tasks, Session, socket. Idempotent."""
        if self.closing:
            await self._closed.wait()
            return
        self.closing = True
        log.info("realtime session %s closing: %s", self.config.id, reason)
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        try:
            await self.session.close()
        except Exception:
            log.exception("realtime session %s: session close failed", self.config.id)
        if self.websocket.application_state == WebSocketState.CONNECTED:
            try:
                await self.websocket.close(code=code, reason=reason[:120])
            except Exception:   # the client went away while we were closing
                log.debug("realtime session %s: socket already gone", self.config.id, exc_info=True)
        self.on_closed(self)
        self._closed.set()

    def close_soon(self, reason: str, code: int = CLOSE_NORMAL) -> None:
        if not self.closing:
            asyncio.ensure_future(self.close(reason, code))

    # --- client events -------------------------------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                await self.close("the client closed the session")
                return
            event_id = None
            try:
                text = message.get("text")
                if text is None:
                    raise EventError("events are JSON text messages", code="invalid_json")
                try:
                    event = json.loads(text)
                except ValueError:
                    raise EventError("the message is not JSON", code="invalid_json") from None
                if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                    raise EventError("an event is a JSON object with a 'type'", code="invalid_event", param="type")
                event_id = event.get("event_id")
                handler = self.HANDLERS.get(event["type"])
                if handler is None:
                    raise EventError(f"unknown event type {event['type'][:60]!r}", code="invalid_event", param="type")
                await handler(self, event)
            except EventError as exc:
                self._error(str(exc), exc.code, exc.param, event_id)

    async def _session_update(self, event: dict) -> None:
        changes = self.config.updated(event.get("session"), self.agent_model)
        for key, value in changes.items():
            setattr(self.config, key, value)
        if "input_format" in changes or "output_format" in changes:
            self._set_formats()
        if "interrupt_response" in changes:
            self.session.options = replace(self.session.options, barge_in=self.config.interrupt_response)
        self._send({"type": "session.updated", "session": self.config.describe()})

    async def _append(self, event: dict) -> None:
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise EventError("'audio' must be a base64 string", param="audio")
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise EventError("'audio' is not valid base64", code="invalid_base64", param="audio") from None
        samples = self._decode(data)
        if self.config.server_vad:
            self.session.push_audio(samples)
        else:
            self._buffer.append(samples)

    async def _commit(self, event: dict) -> None:
        if self.config.server_vad:
            raise EventError("with server VAD the turn detector commits the buffer; set turn_detection to null "
                             "to commit by hand", code="unsupported")
        audio = np.concatenate(self._buffer) if self._buffer else np.zeros(0, np.int16)
        if len(audio) < SAMPLE_RATE_HZ * MIN_COMMIT_MS // 1000:
            raise EventError(f"the buffer holds {len(audio) * 1000 // SAMPLE_RATE_HZ} ms of audio; at least "
                             f"{MIN_COMMIT_MS} ms are needed", code="input_audio_buffer_commit_empty")
        self._buffer = []
        item_id = _new_id("item")
        self._send({"type": "input_audio_buffer.committed", "item_id": item_id,
                    "previous_item_id": self._last_item_id()})
        self._add_user_audio_item(item_id)
        loop = asyncio.get_running_loop()
        transcript = loop.run_in_executor(self.services.asr_pool, self.services.asr.transcribe, audio)
        self._pending.append(transcript)
        transcript.add_done_callback(lambda f: f.exception() is None and self._transcribed(item_id, f.result()))

    async def _clear(self, event: dict) -> None:
        self._buffer = []
        self._send({"type": "input_audio_buffer.cleared"})

    async def _item_create(self, event: dict) -> None:
        item = event.get("item")
        if not isinstance(item, dict):
            raise EventError("'item' must be an object", param="item")
        kind, role = item.get("type", "message"), item.get("role")
        item = dict(item, id=item.get("id") or _new_id("item"), object="realtime.item", status="completed")
        if kind == "message" and role in ("user", "system", "assistant"):
            text = _item_text(item)
            if role == "user":
                self._pending.append(_done(text))
            elif self.agent_model and role == "system":
                raise EventError(f"'{AGENT_MODEL}' takes its instructions from its business profile",
                                 code="unsupported", param="item.role")
            else:
                self.session.agent.messages.append({"role": role, "content": text})
        elif kind == "function_call_output" and not self.agent_model:
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(output, str) or not self.session.agent.answers(call_id):
                raise EventError(f"function_call_output needs a string 'output' and the call_id of a call of this "
                                 f"conversation, not {call_id!r}", param="item.call_id")
            self.session.agent.add({"role": "tool", "tool_call_id": call_id, "content": output})
        else:
            raise EventError(f"items of type {kind!r}{f' and role {role!r}' if role else ''} are not supported "
                             f"here", code="unsupported", param="item.type")
        self._add_item(item, event.get("previous_item_id"))

    async def _response_create(self, event: dict) -> None:
        if self.response is not None:
            raise EventError(f"response {self.response.id} is still in progress",
                             code="conversation_already_has_active_response")
        pending, self._pending = self._pending, []
        texts = [text for text in await asyncio.gather(*pending, return_exceptions=True) if isinstance(text, str)]
        text = " ".join(t.strip() for t in texts if t.strip()) or None
        if text is None and self.agent_model:
            raise EventError(f"'{AGENT_MODEL}' answers what the user said: nothing new was said",
                             code="no_user_input")
        self._begin_response()
        await self.session.respond_to(text)

    async def _response_cancel(self, event: dict) -> None:
        if self.response is None:
            raise EventError("there is no response in progress to cancel", code="response_cancel_not_active")
        await self.session.interrupt()
        self._finish_response("cancelled", "client_cancelled")

    async def _truncate(self, event: dict) -> None:
        item = self.items.get(event.get("item_id"))
        end_ms = event.get("audio_end_ms")
        if item is None or item["id"] not in self._audio_ms:
            raise EventError(f"no assistant audio item {event.get('item_id')!r} in this conversation",
                             code="item_not_found", param="item_id")
        if not isinstance(end_ms, int) or isinstance(end_ms, bool) or end_ms < 0:
            raise EventError("'audio_end_ms' must be a non-negative integer", param="audio_end_ms")
        if self.response is not None and self.response.message is item:
            await self.session.interrupt()
            self._finish_response("cancelled", "client_cancelled")
        audio_ms = self._audio_ms[item["id"]]
        if end_ms > audio_ms + FRAME_MS:
            raise EventError(f"audio_end_ms {end_ms} is past the item's {audio_ms:.0f} ms of audio",
                             param="audio_end_ms")
        # what was heard, in proportion to the audio played (a reply's words are spoken at an even pace)
        words = item["content"][0]["transcript"].split()
        heard = " ".join(words[:round(len(words) * min(1.0, end_ms / max(audio_ms, 1.0)))])
        if item is self._last_assistant_item():
            self.session.agent.truncate_last_reply(heard)
        item["content"][0]["transcript"] = heard
        self._send({"type": "conversation.item.truncated", "item_id": item["id"],
                    "content_index": event.get("content_index", 0), "audio_end_ms": end_ms})

    HANDLERS = {"session.update": _session_update, "input_audio_buffer.append": _append,
                "input_audio_buffer.commit": _commit, "input_audio_buffer.clear": _clear,
                "conversation.item.create": _item_create, "conversation.item.truncate": _truncate,
                "response.create": _response_create, "response.cancel": _response_cancel}

    # --- the session's side ----------------------------------------------------------------------------------------

    def _on_speech(self, what: str, time_ms: float) -> None:
        if what == "started":
            self._speech_item = _new_id("item")
            self._send({"type": "input_audio_buffer.speech_started", "item_id": self._speech_item,
                        "audio_start_ms": int(time_ms)})
            response = self.response
            if response is not None and self.config.interrupt_response and (
                    self.session.playback.busy or not response.written):
                self._finish_response("cancelled", "turn_detected")   # the session stops it (barge-in)
            return
        item_id = self._committed_item = self._speech_item or _new_id("item")
        self._send({"type": "input_audio_buffer.speech_stopped", "item_id": item_id, "audio_end_ms": int(time_ms)})
        self._send({"type": "input_audio_buffer.committed", "item_id": item_id,
                    "previous_item_id": self._last_item_id()})
        self._add_user_audio_item(item_id)

    async def _on_session_event(self, event: dict) -> None:
        kind, response = event.get("type"), self.response
        if kind == "transcript" and event.get("final"):
            if self._committed_item is not None:      # a turn the detector ended: answered now
                self._transcribed(self._committed_item, event["text"])
                self._committed_item = None
                if self.response is None:
                    self._begin_response()
        elif kind == "reply" and response is not None:
            text = event["text"]
            if not event.get("final"):
                self._transcript_delta(response, text)
            else:
                response.written = True
                if response.message is not None and text.startswith(response.transcript):
                    self._transcript_delta(response, text)
        elif kind == "error":
            self._error(event.get("message", "the session failed"), "server_error", kind="server_error")

    def _transcript_delta(self, response: Response, text: str) -> None:
        delta = text[len(response.transcript):] if text.startswith(response.transcript) else ""
        if not delta:
            return
        message = self._message(response)
        response.transcript += delta
        self._send({"type": "response.output_audio_transcript.delta", **self._part_ids(response, message),
                    "delta": delta})

    def _on_call(self, call: dict) -> None:
        """A call of the client's tools (on the loop's thread): a function_call item of the response."""
        response = self.response
        if response is None:
            return
        function = call["function"]
        item = {"id": _new_id("item"), "object": "realtime.item", "type": "function_call", "status": "completed",
                "call_id": call["id"], "name": function["name"], "arguments": function["arguments"]}
        ids = {"response_id": response.id, "item_id": item["id"], "output_index": len(response.output)}
        self._send({"type": "response.output_item.added", "response_id": response.id,
                    "output_index": ids["output_index"], "item": dict(item, status="in_progress", arguments="")})
        self._send({"type": "response.function_call_arguments.delta", **ids, "call_id": call["id"],
                    "delta": function["arguments"]})
        self._send({"type": "response.function_call_arguments.done", **ids, "call_id": call["id"],
                    "name": function["name"], "arguments": function["arguments"]})
        self._send({"type": "response.output_item.done", "response_id": response.id,
                    "output_index": ids["output_index"], "item": item})
        response.output.append(item)
        self._add_item(item)

    async def _on_control(self, action: str) -> None:
        if action == "end_call":   # the goodbye was heard
            self.close_soon("the agent ended the call")

    async def _run_session(self) -> None:
        try:
            await self.session.run()
        finally:
            self.close_soon("session ended", CLOSE_ERROR)

    # --- responses -------------------------------------------------------------------------------------------------

    def _begin_response(self) -> None:
        self.response = Response(_new_id("resp"))
        self._send({"type": "response.created", "response": self.response.payload()})

    def _message(self, response: Response) -> dict:
        """The response's assistant message item, added when it first speaks."""
        if response.message is None:
            item = {"id": _new_id("item"), "object": "realtime.item", "type": "message", "role": "assistant",
                    "status": "in_progress", "content": [{"type": "output_audio", "transcript": ""}]}
            response.message = item
            index = len(response.output)
            response.output.append(item)
            self._send({"type": "response.output_item.added", "response_id": response.id, "output_index": index,
                        "item": dict(item, content=[])})
            self._add_item(item, done=False)
            self._send({"type": "response.content_part.added", **self._part_ids(response, item),
                        "part": {"type": "audio", "transcript": ""}})
        return response.message

    def _part_ids(self, response: Response, item: dict) -> dict:
        return {"response_id": response.id, "item_id": item["id"], "output_index": response.output.index(item),
                "content_index": 0}

    def _finish_response(self, status: str, reason: str | None = None) -> None:
        response, self.response = self.response, None
        if response is None:
            return
        item = response.message
        if item is not None:
            ids = self._part_ids(response, item)
            item["status"] = "completed" if status == "completed" else "incomplete"
            item["content"][0]["transcript"] = response.transcript
            self._audio_ms[item["id"]] = response.audio_ms
            self._send({"type": "response.output_audio.done", **ids})
            self._send({"type": "response.output_audio_transcript.done", **ids, "transcript": response.transcript})
            self._send({"type": "response.content_part.done", **ids,
                        "part": {"type": "audio", "transcript": response.transcript}})
            self._send({"type": "response.output_item.done", "response_id": response.id,
                        "output_index": ids["output_index"], "item": item})
            self._send({"type": "conversation.item.done", "item": item})
        details = {"type": status, "reason": reason} if reason else None
        self._send({"type": "response.done", "response": response.payload(status, details, self._usage())})

    def _usage(self) -> dict:
        trace = self.session.turns[-1] if self.session.turns else None
        output = trace.llm_tokens if trace is not None and trace.llm_tokens else 0
        prompt = len(self.services.engine.prompt_ids(self.session.agent.prompt()))
        return {"total_tokens": prompt + output, "input_tokens": prompt, "output_tokens": output,
                "input_token_details": {"text_tokens": prompt, "audio_tokens": 0, "cached_tokens": 0},
                "output_token_details": {"text_tokens": output, "audio_tokens": 0}}

    async def _send_audio(self) -> None:
        """20 ms of the reply's audio per tick while it speaks; a response whose model is done and whose audio
        has all gone out is finished."""
        playback = self.session.playback
        clock = PacingClock(FRAME_MS / 1000)
        while True:
            await clock.wait()
            response = self.response
            if not playback.busy:
                if response is not None and response.written:
                    self._finish_response("completed")
                continue
            samples, _ = playback.read_frame(playback.sample_rate_hz * FRAME_MS // 1000)
            if response is None:
                continue   # the tail of a cancelled response
            message = self._message(response)
            response.audio_ms += FRAME_MS
            self._send({"type": "response.output_audio.delta", **self._part_ids(response, message),
                        "delta": base64.b64encode(self._encode(samples)).decode("ascii")})

    # --- audio formats ------------------------------------------------------------------------------------------

    def _set_formats(self) -> None:
        self._in = soxr.ResampleStream(RATES[self.config.input_format], SAMPLE_RATE_HZ, 1, dtype="int16")
        self.session.playback.sample_rate_hz = RATES[self.config.output_format]   # replies are synthesized at it

    def _decode(self, data: bytes) -> np.ndarray:
        kind = self.config.input_format
        if kind == "audio/pcm":
            if len(data) % 2:
                raise EventError("audio/pcm is 16-bit: an odd number of bytes", code="invalid_audio", param="audio")
            samples = np.frombuffer(data, dtype="<i2").astype(np.int16)
        else:
            samples = mulaw_to_pcm(data) if kind == "audio/pcmu" else alaw_to_pcm(data)
        return self._in.resample_chunk(samples)

    def _encode(self, samples: np.ndarray) -> bytes:
        kind = self.config.output_format
        if kind == "audio/pcm":
            return samples.astype("<i2").tobytes()
        return pcm_to_mulaw(samples) if kind == "audio/pcmu" else pcm_to_alaw(samples)

    # --- the conversation's items -----------------------------------------------------------------------------

    def _add_user_audio_item(self, item_id: str) -> None:
        self._add_item({"id": item_id, "object": "realtime.item", "type": "message", "role": "user",
                        "status": "completed", "content": [{"type": "input_audio", "transcript": None}]}, done=False)

    def _transcribed(self, item_id: str, text: str) -> None:
        item = self.items.get(item_id)
        if item is None:
            return
        item["content"][0]["transcript"] = text
        self._send({"type": "conversation.item.input_audio_transcription.completed", "item_id": item_id,
                    "content_index": 0, "transcript": text, "usage": {"type": "duration", "seconds": 0}})
        self._send({"type": "conversation.item.done", "item": item})

    def _add_item(self, item: dict, previous_item_id: str | None = None, done: bool = True) -> None:
        previous = previous_item_id or self._last_item_id()
        self.items[item["id"]] = item
        self._send({"type": "conversation.item.added", "previous_item_id": previous, "item": item})
        if done:
            self._send({"type": "conversation.item.done", "previous_item_id": previous, "item": item})

    def _last_item_id(self) -> str | None:
        return next(reversed(self.items), None)

    def _last_assistant_item(self) -> dict | None:
        return next((i for i in reversed(self.items.values()) if i.get("role") == "assistant"), None)

    # --- sending ------------------------------------------------------------------------------------------------

    def _error(self, message: str, code: str, param: str | None = None, event_id: str | None = None,
               kind: str = "invalid_request_error") -> None:
        log.info("realtime session %s: %s (%s)", self.config.id, message, code)
        self._send({"type": "error", "error": {"type": kind, "code": code, "message": message, "param": param,
                                               "event_id": event_id}})

    def _send(self, event: dict) -> None:
        """Queue a server event; the send loop writes them in order."""
        self._out.put_nowait(dict(event, event_id=f"event_{next(self._event_ids)}"))

    async def _send_loop(self) -> None:
        while (event := await self._out.get()) is not None:
            try:
                await self.websocket.send_text(json.dumps(event, ensure_ascii=False))
            except (WebSocketDisconnect, OSError, RuntimeError):
                self.close_soon("the client went away")
                return

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=f"realtime-{self.config.id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("realtime session %s: task %s failed", self.config.id, task.get_name(),
                      exc_info=task.exception())
            self.close_soon(f"{task.get_name()} failed", CLOSE_ERROR)


def _item_text(item: dict) -> str:
    content = item.get("content")
    texts = [part.get("text") for part in content or () if isinstance(part, dict)
             and part.get("type") in ("input_text", "text", "output_text")]
    if not content or not isinstance(content, list) or len(texts) != len(content) or \
            not all(isinstance(t, str) for t in texts):
        raise EventError("a message's content is a list of text parts (input_text / output_text); audio content "
                         "is not supported here: append it to the input audio buffer", code="unsupported",
                         param="item.content")
    return "".join(texts)


def _done(value) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
