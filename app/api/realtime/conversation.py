"""The loaded model's side of a Realtime conversation whose tools the client runs (`?model=<loaded model>`)."""
import threading

from app.agent.protocol import TurnResult, forget_message, retract_last_user_turn
from app.api.chat import ApiError, ModelJob, conversation_messages
from app.api.realtime.config import Config, client_tools


class ClientConversation:
    """The loaded model's side of a conversation whose tools the client runs: the agent Session drives for
    `?model=<loaded model>`. Its history is in the chat API's shape (calls with ids, results named by them)."""

    def __init__(self, services, config: Config, on_call):
        self.services, self.config, self.on_call = services, config, on_call
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
        return conversation_messages(request["messages"], request["tools"])

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

    def retract_last_turn(self) -> bool:
        """As Agent.retract_last_turn: an unanswered user turn the caller went on from leaves the history."""
        with self._lock:
            return retract_last_user_turn(self.messages)

    def forget(self, role: str, content: str = "", call_id: str | None = None) -> bool:
        """A message the client deleted leaves the history: a call ("function_call") with its output, or a
        call's output ("tool") alone, by call id; any other by its role and text."""
        with self._lock:
            if role not in ("function_call", "tool"):
                return forget_message(self.messages, role, content) is not None
            kept = []
            for m in self.messages:
                if m["role"] == "tool" and m.get("tool_call_id") == call_id:
                    continue
                if role == "function_call" and any(c["id"] == call_id for c in m.get("tool_calls", ())):
                    calls = [c for c in m["tool_calls"] if c["id"] != call_id]
                    m = dict(m, tool_calls=calls) if calls else {k: v for k, v in m.items() if k != "tool_calls"}
                    if not calls and not m["content"]:
                        continue
                kept.append(m)
            changed = kept != self.messages
            self.messages[:] = kept
            return changed

    def truncate_last_reply(self, heard_text: str) -> None:
        with self._lock:
            for i in range(len(self.messages) - 1, -1, -1):
                if self.messages[i]["role"] == "user":
                    return
                if self.messages[i]["role"] == "assistant":
                    self.messages[i] = dict(self.messages[i], content=heard_text.strip())
                    return

    def _request(self) -> dict:
        tools, choice = client_tools(self.config.tools, self.config.tool_choice)
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
