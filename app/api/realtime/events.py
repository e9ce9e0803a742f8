"""The server's side of a Realtime conversation: its items, the response in progress, and the events that
describe them, queued in order for the socket."""
import asyncio
import itertools
import logging
import uuid
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class Response:
    id: str
    modalities: list = field(default_factory=lambda: ["audio"])   # or ["text"]: text events, no audio
    metadata: dict | None = None                      # the client's, as it sent them
    output: list = field(default_factory=list)        # its items, in order
    message: dict | None = None                       # the assistant message item, once it speaks
    transcript: str = ""
    audio_ms: float = 0.0
    written: bool = False                             # the model is done; the response ends when its audio has

    @property
    def spoken(self) -> bool:
        return "audio" in self.modalities

    def payload(self, status: str = "in_progress", details: dict | None = None, usage: dict | None = None) -> dict:
        return {"object": "realtime.response", "id": self.id, "status": status, "status_details": details,
                "output": self.output, "output_modalities": self.modalities, "metadata": self.metadata,
                "usage": usage}


class Conversation:
    """Items and responses as the client sees them; every change goes out as its events (`outbox`)."""

    def __init__(self, name: str):
        self.name = name                                  # for the log
        self.items: dict[str, dict] = {}                  # by id, in order
        self.response: Response | None = None
        self.audio_ms: dict[str, float] = {}              # each finished assistant item's audio sent
        self.outbox: asyncio.Queue[dict] = asyncio.Queue()
        self._event_ids = itertools.count()

    def send(self, event: dict) -> None:
        self.outbox.put_nowait(dict(event, event_id=f"event_{next(self._event_ids)}"))

    def error(self, message: str, code: str, param: str | None = None, event_id: str | None = None,
              kind: str = "invalid_request_error") -> None:
        log.info("realtime session %s: %s (%s)", self.name, message, code)
        self.send({"type": "error", "error": {"type": kind, "code": code, "message": message, "param": param,
                                              "event_id": event_id}})

    # --- items ---------------------------------------------------------------------------------------------------

    def add_item(self, item: dict, previous_item_id: str | None = None, done: bool = True) -> None:
        previous = previous_item_id or self.last_item_id()
        self.items[item["id"]] = item
        self.send({"type": "conversation.item.added", "previous_item_id": previous, "item": item})
        if done:
            self.send({"type": "conversation.item.done", "previous_item_id": previous, "item": item})

    def commit_audio(self, item_id: str) -> None:
        """The input audio became a user item; its transcript follows (`transcribed`)."""
        self.send({"type": "input_audio_buffer.committed", "item_id": item_id, "previous_item_id": self.last_item_id()})
        self.add_item({"id": item_id, "object": "realtime.item", "type": "message", "role": "user",
                       "status": "completed", "content": [{"type": "input_audio", "transcript": None}]}, done=False)

    def transcribed(self, item_id: str, text: str) -> None:
        item = self.items.get(item_id)
        if item is None:
            return
        item["content"][0]["transcript"] = text
        self.send({"type": "conversation.item.input_audio_transcription.completed", "item_id": item_id,
                   "content_index": 0, "transcript": text, "usage": {"type": "duration", "seconds": 0}})
        self.send({"type": "conversation.item.done", "item": item})

    def truncated(self, item: dict, heard: str, audio_end_ms: int, content_index: int) -> None:
        item["content"][0]["transcript"] = heard
        self.send({"type": "conversation.item.truncated", "item_id": item["id"], "content_index": content_index,
                   "audio_end_ms": audio_end_ms})

    def retrieved(self, item: dict) -> None:
        self.send({"type": "conversation.item.retrieved", "item": item})

    def delete(self, item: dict) -> None:
        del self.items[item["id"]]
        self.audio_ms.pop(item["id"], None)
        self.send({"type": "conversation.item.deleted", "item_id": item["id"]})

    def last_item_id(self) -> str | None:
        return next(reversed(self.items), None)

    def last_assistant_item(self) -> dict | None:
        return next((i for i in reversed(self.items.values()) if i.get("role") == "assistant"), None)

    # --- the response in progress --------------------------------------------------------------------------------

    def begin_response(self, modalities: list | None = None, metadata: dict | None = None) -> None:
        self.response = Response(new_id("resp"), modalities or ["audio"], metadata)
        self.send({"type": "response.created", "response": self.response.payload()})

    def transcript_delta(self, text: str) -> None:
        """The reply's text so far: what is new goes out as a transcript delta."""
        response = self.response
        if response is None or not text.startswith(response.transcript) or text == response.transcript:
            return
        delta, message = text[len(response.transcript):], self._message(response)
        response.transcript = text
        kind = "response.output_audio_transcript.delta" if response.spoken else "response.output_text.delta"
        self.send({"type": kind, **self._part_ids(response, message), "delta": delta})

    def audio_delta(self, audio: str, ms: float) -> None:
        """`ms` of the reply's audio, base64 in the output format."""
        response = self.response
        if response is None:
            return   # the tail of a cancelled response
        message = self._message(response)
        response.audio_ms += ms
        self.send({"type": "response.output_audio.delta", **self._part_ids(response, message), "delta": audio})

    def function_call(self, call: dict) -> None:
        """A call of the client's tools (the chat API's shape): a function_call item of the response."""
        response = self.response
        if response is None:
            return
        function = call["function"]
        item = {"id": new_id("item"), "object": "realtime.item", "type": "function_call", "status": "completed",
                "call_id": call["id"], "name": function["name"], "arguments": function["arguments"]}
        ids = {"response_id": response.id, "item_id": item["id"], "output_index": len(response.output)}
        self.send({"type": "response.output_item.added", "response_id": response.id,
                   "output_index": ids["output_index"], "item": dict(item, status="in_progress", arguments="")})
        self.send({"type": "response.function_call_arguments.delta", **ids, "call_id": call["id"],
                   "delta": function["arguments"]})
        self.send({"type": "response.function_call_arguments.done", **ids, "call_id": call["id"],
                   "name": function["name"], "arguments": function["arguments"]})
        self.send({"type": "response.output_item.done", "response_id": response.id,
                   "output_index": ids["output_index"], "item": item})
        response.output.append(item)
        self.add_item(item)

    def finish_response(self, status: str, reason: str | None, usage: dict) -> None:
        response, self.response = self.response, None
        if response is None:
            return
        item = response.message
        if item is not None:
            ids = self._part_ids(response, item)
            item["status"] = "completed" if status == "completed" else "incomplete"
            item["content"] = [_content(response, response.transcript)]
            if response.spoken:
                self.audio_ms[item["id"]] = response.audio_ms
                self.send({"type": "response.output_audio.done", **ids})
                self.send({"type": "response.output_audio_transcript.done", **ids,
                           "transcript": response.transcript})
            else:
                self.send({"type": "response.output_text.done", **ids, "text": response.transcript})
            self.send({"type": "response.content_part.done", **ids, "part": _part(response, response.transcript)})
            self.send({"type": "response.output_item.done", "response_id": response.id,
                       "output_index": ids["output_index"], "item": item})
            self.send({"type": "conversation.item.done", "item": item})
        details = {"type": status, "reason": reason} if reason else None
        self.send({"type": "response.done", "response": response.payload(status, details, usage)})

    def _message(self, response: Response) -> dict:
        """The response's assistant message item, added when it first speaks."""
        if response.message is None:
            item = {"id": new_id("item"), "object": "realtime.item", "type": "message", "role": "assistant",
                    "status": "in_progress", "content": [_content(response, "")]}
            response.message = item
            index = len(response.output)
            response.output.append(item)
            self.send({"type": "response.output_item.added", "response_id": response.id, "output_index": index,
                       "item": dict(item, content=[])})
            self.add_item(item, done=False)
            self.send({"type": "response.content_part.added", **self._part_ids(response, item),
                       "part": _part(response, "")})
        return response.message

    @staticmethod
    def _part_ids(response: Response, item: dict) -> dict:
        return {"response_id": response.id, "item_id": item["id"], "output_index": response.output.index(item),
                "content_index": 0}


def _content(response: Response, text: str) -> dict:
    """The assistant message item's content: spoken audio with its transcript, or text."""
    return {"type": "output_audio", "transcript": text} if response.spoken else {"type": "output_text", "text": text}


def _part(response: Response, text: str) -> dict:
    """The same, as the content part of `response.content_part.added` / `done`."""
    return {"type": "audio", "transcript": text} if response.spoken else {"type": "text", "text": text}
