"""The tool-call protocol every model speaks: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the
assistant's text, its result fed back as a `tool` message, and the history operations that respect it."""
import json
import re
from dataclasses import dataclass, field

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_CALL_RE = re.compile(f"{TOOL_CALL_OPEN}(.*?){TOOL_CALL_CLOSE}", re.DOTALL)


def compact(value) -> str:
    """JSON without spaces, characters as they are: how calls and results are written into the prompt."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def token_starts(tokenizer, ids: list[int]) -> list[int]:
    """The character where each token of `ids` starts in their decoded text (special tokens left out)."""
    return [len(tokenizer.decode(ids[:i], skip_special_tokens=True)) for i in range(len(ids))]


def tokens_over(starts: list[int], text_length: int, first: int, end: int) -> list[int]:
    """The tokens (starting at `starts` in a text `text_length` long) that write any of characters first..end-1:
    those a value in a call was written with, whose shares of the model's probability say whether it was meant."""
    return [i for i, at in enumerate(starts)
            if at < end and (starts[i + 1] if i + 1 < len(starts) else text_length) > first]


def format_tool_call(name: str, arguments: dict) -> str:
    """The exact assistant text for one tool call (compact JSON)."""
    return f"{TOOL_CALL_OPEN}{compact({'name': name, 'arguments': arguments})}{TOOL_CALL_CLOSE}"


def tool_message(name: str, result: dict) -> dict:
    """The exact message that feeds a tool's result back to the model."""
    return {"role": "tool", "content": compact({"name": name, "result": result})}


def read_tool_message(message: dict) -> tuple[str, dict] | None:
    """The tool's name and its result from a message `tool_message` wrote; None for any other message."""
    if message.get("role") != "tool":
        return None
    try:
        content = json.loads(message["content"])
    except ValueError:
        return None
    result = content.get("result") if isinstance(content, dict) else None
    return (content.get("name"), result) if isinstance(result, dict) else None


@dataclass
class ToolCall:
    name: str
    arguments: dict
    result: dict


@dataclass
class TurnResult:
    reply: str                      # the spoken text of the turn (tool-call markup excluded)
    tool_calls: list[ToolCall] = field(default_factory=list)
    passes: int = 0                 # denoising passes over all generations of the turn
    tokens: int = 0
    llm_s: float = 0.0              # seconds spent in the language model
    cancelled: bool = False

    def count(self, gen) -> None:
        """Add one generation's cost (llm.engine.Generation)."""
        self.llm_s += gen.seconds
        self.passes += gen.passes
        self.tokens += gen.tokens


def parse_tool_calls(text: str) -> tuple[list[tuple[str, dict]], str]:
    """The (name, arguments) calls in an assistant text, and the text outside them.

    A call whose JSON does not parse, or that never closes, is returned with name "" so the loop can tell the
    model (and the caller is not left in silence by a reply that was all an unfinished call).
    """
    calls = []
    for body in TOOL_CALL_RE.findall(text):
        try:
            payload = json.loads(body)
            name, arguments = payload["name"], payload.get("arguments", {})
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            name, arguments = "", {"raw": body}
        calls.append((name, arguments))
    spoken, opened, unfinished = TOOL_CALL_RE.sub(" ", text).partition(TOOL_CALL_OPEN)  # never spoken after it
    if opened:
        calls.append(("", {"raw": unfinished}))
    return calls, " ".join(spoken.split())


def retract_last_user_turn(messages: list[dict]) -> bool:
    """Delete the last user message and everything after it, unless a tool was called or answered since
    (returns whether it did)."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last is None or any(m["role"] == "tool" or m.get("tool_calls") for m in messages[last:]):
        return False
    del messages[last:]
    return True


def forget_message(messages: list[dict], role: str, content: str) -> int | None:
    """Delete the last message of `role` that says `content` (a client deleted it from its conversation);
    returns where it was, or None if no message says that."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == role and (messages[i].get("content") or "").strip() == content.strip():
            del messages[i]
            return i
    return None
