"""One Realtime session over its WebSocket: the client's events in, the server's out, a Session in between."""
import asyncio
import base64
import json
import logging
from dataclasses import replace

import numpy as np
import soxr
from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect

from app.api.chat import AGENT_MODEL, model_id
from app.api.realtime.audio import MIN_COMMIT_MS, decode, encode, from_base64, item_audio
from app.api.realtime.config import RATES, Config, EventError
from app.api.realtime.conversation import ClientConversation
from app.api.realtime.events import Conversation, new_id
from app.pipeline.session import Session, SessionOptions
from app.transports.base import PacingClock, SocketCall, no_room, refuse_handshake
from speech.audio import SAMPLE_RATE_HZ

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1")

OUTPUT_RATE_HZ = 24_000
FRAME_MS = 20


@router.websocket("/realtime")
async def realtime(websocket: WebSocket) -> None:
    state = websocket.app.state
    loaded = model_id(state.settings)
    model = websocket.query_params.get("model") or AGENT_MODEL
    if model not in (loaded, AGENT_MODEL):
        await _deny(websocket, 404, "model", f"The model '{model}' does not exist; this server has '{loaded}' "
                                             f"and '{AGENT_MODEL}'")
        return
    if (refused := no_room(state)) is not None:
        await _deny(websocket, 503, *refused)
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
    await refuse_handshake(websocket, status, reason)


class RealtimeCall(SocketCall):
    """One Realtime session: client events in, server events out, a Session in between."""

    TRANSPORT = "realtime"

    def __init__(self, websocket: WebSocket, services, model: str, *, on_closed, metrics):
        super().__init__(websocket, on_closed)
        self.services, self.metrics = services, metrics
        self.config = Config(new_id("sess"), model)
        self.conversation = Conversation(self.config.id)
        self.agent_model = model == AGENT_MODEL
        loop = asyncio.get_running_loop()
        agent = services.new_agent() if self.agent_model else ClientConversation(
            services, self.config, lambda call: loop.call_soon_threadsafe(self.conversation.function_call, call))
        # no partial transcripts: the API's transcription events carry the final one only
        self.session = Session(services, output_rate_hz=OUTPUT_RATE_HZ, send_event=self._on_session_event,
                               on_control=self._on_control, observer=metrics.observer(self.TRANSPORT), agent=agent,
                               options=SessionOptions(partial_interval_ms=None))
        self.session.on_speech = self._on_speech
        self._pending: dict[str, asyncio.Future] = {}     # user items not answered yet: their text, by item id
        self._buffer: list[np.ndarray] = []               # committed-by-hand audio, 16 kHz (turn_detection null)
        self._speech_item: str | None = None              # the user item the turn detector is hearing
        self._committed_item: str | None = None           # the one it ended last, until its transcript comes
        self._set_formats()                               # the input's resampler (_in) and the output's rate

    async def run(self) -> None:
        await self.websocket.accept()
        self.metrics.start(self.TRANSPORT)
        self.conversation.send({"type": "session.created", "session": self.config.describe()})
        for coro, name in ((self._send_loop(), "send"), (self._receive(), "receive"),
                           (self.run_session(), "session"), (self._send_audio(), "audio-out")):
            self.spawn(coro, name)
        await self.wait_closed()

    def name(self) -> str:
        return self.config.id

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
                self.conversation.error(str(exc), exc.code, exc.param, event_id)

    async def _session_update(self, event: dict) -> None:
        changes = self.config.updated(event.get("session"), self.agent_model)
        for key, value in changes.items():
            setattr(self.config, key, value)
        if "input_format" in changes or "output_format" in changes:
            self._set_formats()
        if {"interrupt_response", "create_response", "modalities"} & changes.keys():
            self.session.options = replace(self.session.options, barge_in=self.config.interrupt_response,
                                           answer_turns=self.config.create_response,
                                           speak="audio" in self.config.modalities)
        self.conversation.send({"type": "session.updated", "session": self.config.describe()})

    async def _append(self, event: dict) -> None:
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise EventError("'audio' must be a base64 string", param="audio")
        samples = self._in.resample_chunk(decode(from_base64(audio, "audio"), self.config.input_format))
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
        item_id = new_id("item")
        self.conversation.commit_audio(item_id)
        self._transcribe(item_id, audio)

    def _transcribe(self, item_id: str, audio: np.ndarray) -> None:
        """The user item's audio (16 kHz) is transcribed; its text answered by the next response."""
        transcript = asyncio.get_running_loop().run_in_executor(self.services.asr_pool, self.services.asr.transcribe,
                                                                 audio)
        self._pending[item_id] = transcript
        transcript.add_done_callback(lambda f: f.exception() is None
                                     and self.conversation.transcribed(item_id, f.result()))

    async def _clear(self, event: dict) -> None:
        self._buffer = []
        self.conversation.send({"type": "input_audio_buffer.cleared"})

    async def _item_create(self, event: dict) -> None:
        item = event.get("item")
        if not isinstance(item, dict):
            raise EventError("'item' must be an object", param="item")
        kind, role = item.get("type", "message"), item.get("role")
        item = dict(item, id=item.get("id") or new_id("item"), object="realtime.item", status="completed")
        if item["id"] in self.conversation.items:
            raise EventError(f"the conversation already has an item {item['id']!r}", param="item.id")
        if kind == "message" and role == "user" and (audio := item_audio(item, self.config.input_format)) is not None:
            item["content"] = [{"type": "input_audio", "transcript": None}]   # its text follows, transcribed
            self.conversation.add_item(item, event.get("previous_item_id"), done=False)
            self._transcribe(item["id"], audio)
            return
        if kind == "message" and role in ("user", "system", "assistant"):
            text = _item_text(item)
            if role == "user":
                self._pending[item["id"]] = _done(text)
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
        self.conversation.add_item(item, event.get("previous_item_id"))

    async def _response_create(self, event: dict) -> None:
        if self.conversation.response is not None:
            raise EventError(f"response {self.conversation.response.id} is still in progress",
                             code="conversation_already_has_active_response")
        config = self.config.for_response(event.get("response"), self.agent_model)
        metadata = (event.get("response") or {}).get("metadata")
        pending, self._pending = self._pending, {}
        texts = [text for text in await asyncio.gather(*pending.values(), return_exceptions=True)
                 if isinstance(text, str)]
        text = " ".join(t.strip() for t in texts if t.strip()) or None
        if text is None and self.agent_model:
            raise EventError(f"'{AGENT_MODEL}' answers what the user said: nothing new was said",
                             code="no_user_input")
        self._begin_response(config, metadata)
        await self.session.respond_to(text)

    def _begin_response(self, config: Config, metadata: dict | None = None) -> None:
        """A response under `config` (the session's, or a response.create's own): the model's settings, and
        whether it speaks."""
        if not self.agent_model:
            self.session.agent.config = config
        self.session.options = replace(self.session.options, speak="audio" in config.modalities)
        self.conversation.begin_response(config.modalities, metadata if isinstance(metadata, dict) else None)

    async def _response_cancel(self, event: dict) -> None:
        if self.conversation.response is None:
            raise EventError("there is no response in progress to cancel", code="response_cancel_not_active")
        await self.session.interrupt()
        self._finish_response("cancelled", "client_cancelled")

    async def _truncate(self, event: dict) -> None:
        conversation = self.conversation
        item = conversation.items.get(event.get("item_id"))
        end_ms = event.get("audio_end_ms")
        if item is None or item.get("role") != "assistant" or item["content"][0].get("type") != "output_audio":
            raise EventError(f"no assistant audio item {event.get('item_id')!r} in this conversation",
                             code="item_not_found", param="item_id")
        if not isinstance(end_ms, int) or isinstance(end_ms, bool) or end_ms < 0:
            raise EventError("'audio_end_ms' must be a non-negative integer", param="audio_end_ms")
        if conversation.response is not None and conversation.response.message is item:
            await self.session.interrupt()   # the client stopped playing it: the rest is not said either
            self._finish_response("cancelled", "client_cancelled")
        audio_ms = conversation.audio_ms.get(item["id"], 0.0)
        if end_ms > audio_ms + FRAME_MS:
            raise EventError(f"audio_end_ms {end_ms} is past the item's {audio_ms:.0f} ms of audio",
                             param="audio_end_ms")
        # what was heard, in proportion to the audio played (a reply's words are spoken at an even pace)
        words = item["content"][0]["transcript"].split()
        heard = " ".join(words[:round(len(words) * min(1.0, end_ms / max(audio_ms, 1.0)))])
        if item is conversation.last_assistant_item():
            self.session.agent.truncate_last_reply(heard)
        conversation.truncated(item, heard, end_ms, event.get("content_index", 0))

    async def _item_retrieve(self, event: dict) -> None:
        self.conversation.retrieved(self._item(event))

    async def _item_delete(self, event: dict) -> None:
        """The item leaves the conversation and what the model reads (a call with its output); one the next
        response would answer is not answered."""
        item = self._item(event)
        if self.conversation.response is not None and item in self.conversation.response.output:
            raise EventError(f"item {item['id']!r} belongs to response {self.conversation.response.id}, still in "
                             "progress", code="item_in_progress", param="item_id")
        pending = self._pending.pop(item["id"], None)
        if pending is None:
            self.session.agent.forget(**_history_of(item))
        self.conversation.delete(item)

    def _item(self, event: dict) -> dict:
        item = self.conversation.items.get(event.get("item_id"))
        if item is None:
            raise EventError(f"no item {event.get('item_id')!r} in this conversation", code="item_not_found",
                             param="item_id")
        return item

    HANDLERS = {"session.update": _session_update, "input_audio_buffer.append": _append,
                "input_audio_buffer.commit": _commit, "input_audio_buffer.clear": _clear,
                "conversation.item.create": _item_create, "conversation.item.truncate": _truncate,
                "conversation.item.retrieve": _item_retrieve, "conversation.item.delete": _item_delete,
                "response.create": _response_create, "response.cancel": _response_cancel}

    # --- the session's side ----------------------------------------------------------------------------------------

    def _on_speech(self, what: str, time_ms: float) -> None:
        if what == "started":
            self._speech_item = new_id("item")
            self.conversation.send({"type": "input_audio_buffer.speech_started", "item_id": self._speech_item,
                                    "audio_start_ms": int(time_ms)})
            response = self.conversation.response
            if response is not None and self.config.interrupt_response and (
                    self.session.playback.busy or not response.written):
                self._finish_response("cancelled", "turn_detected")   # the session stops it (barge-in)
            return
        item_id = self._committed_item = self._speech_item or new_id("item")
        self.conversation.send({"type": "input_audio_buffer.speech_stopped", "item_id": item_id,
                                "audio_end_ms": int(time_ms)})
        self.conversation.commit_audio(item_id)

    async def _on_session_event(self, event: dict) -> None:
        conversation, kind = self.conversation, event.get("type")
        if kind == "transcript" and event.get("final"):
            if self._committed_item is not None:      # a turn the detector ended: answered now, or when asked
                conversation.transcribed(self._committed_item, event["text"])
                if not self.config.create_response:
                    self._pending[self._committed_item] = _done(event["text"])
                elif conversation.response is None:
                    self._begin_response(self.config)
                self._committed_item = None
        elif kind == "reply" and conversation.response is not None:
            conversation.transcript_delta(event["text"])
            if event.get("final"):
                conversation.response.written = True
        elif kind == "error":
            conversation.error(event.get("message", "the session failed"), "server_error", kind="server_error")

    async def _on_control(self, action: str) -> None:
        if action == "end_call":   # the goodbye was heard
            self.close_soon("the agent ended the call")

    # --- responses -------------------------------------------------------------------------------------------------

    def _finish_response(self, status: str, reason: str | None = None) -> None:
        self.conversation.finish_response(status, reason, self._usage())

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
            response = self.conversation.response
            if not playback.busy:
                if response is not None and response.written:
                    self._finish_response("completed")
                continue
            samples, _ = playback.read_frame(playback.sample_rate_hz * FRAME_MS // 1000)
            self.conversation.audio_delta(base64.b64encode(encode(samples, self.config.output_format)).decode("ascii"), FRAME_MS)

    # --- audio formats ------------------------------------------------------------------------------------------

    def _set_formats(self) -> None:
        self._in = soxr.ResampleStream(RATES[self.config.input_format], SAMPLE_RATE_HZ, 1, dtype="int16")
        self.session.playback.sample_rate_hz = RATES[self.config.output_format]   # replies are synthesized at it

    async def _send_loop(self) -> None:
        """The conversation's events, in order, onto the socket."""
        while True:
            event = await self.conversation.outbox.get()
            try:
                await self.websocket.send_text(json.dumps(event, ensure_ascii=False))
            except (WebSocketDisconnect, OSError, RuntimeError):
                self.close_soon("the client went away")
                return


def _item_text(item: dict) -> str:
    content = item.get("content")
    texts = [part.get("text") for part in content or () if isinstance(part, dict)
             and part.get("type") in ("input_text", "text", "output_text")]
    if not content or not isinstance(content, list) or len(texts) != len(content) or \
            not all(isinstance(t, str) for t in texts):
        raise EventError("a message's content is a list of text parts (input_text / output_text), or a user "
                         "message's one input_audio part", code="unsupported", param="item.content")
    return "".join(texts)


def _history_of(item: dict) -> dict:
    """What an item is in the model's history (the agent's `forget`): a call or its output by call id, a message
    by its role and text."""
    if item.get("type") == "function_call":
        return {"role": "function_call", "call_id": item.get("call_id")}
    if item.get("type") == "function_call_output":
        return {"role": "tool", "call_id": item.get("call_id")}
    text = "".join(part.get("text") or part.get("transcript") or "" for part in item.get("content") or ())
    return {"role": item.get("role"), "content": text}


def _done(value) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
