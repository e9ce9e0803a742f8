"""Where a conversation stands: the caller's latest turn, the agent's answer to the turn before it, what was said.

`messages` are a conversation's chat messages as the agent keeps them (app.agent.loop): the caller's ("user"), the
agent's ("assistant": spoken words, or its tool calls as app.agent.protocol writes them) and the tools' results
("tool").
"""
from app.agent.protocol import parse_tool_calls, read_tool_message


def latest_user(messages: list[dict]) -> int:
    """The index of the caller's latest message in `messages`; -1 when there is none."""
    return max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)


def calls_before(messages: list[dict]) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    """The calls (tool name, arguments) the agent made for the caller's turn before their latest in `messages`,
    and their results (tool name, result), in order; ([], []) when there is no turn before."""
    latest = latest_user(messages)
    before = max((i for i in range(max(latest, 0)) if messages[i]["role"] == "user"), default=-1)
    between = messages[before + 1:latest] if before >= 0 else []
    calls = [call for m in between if m["role"] == "assistant" for call in parse_tool_calls(m["content"])[0]]
    return calls, [read for m in between for read in [read_tool_message(m)] if read is not None]


def question_before(messages: list[dict]) -> tuple[str, dict] | None:
    """The one call (tool name, arguments) the agent made for the caller's turn before their latest in
    `messages`, when it made one and its result was not a refusal; else None."""
    calls, results = calls_before(messages)
    if len(calls) != 1 or len(results) != 1 or not calls[0][0] or results[0][1].get("ok") is not True:
        return None
    return calls[0]


def asked_last(messages: list[dict]) -> tuple[tuple[str, dict], str] | None:
    """The one call (tool name, arguments) the agent made for the caller's turn before their latest in `messages`
    when it lacked details (app.agent.said.missing_result: the agent asked for them), and the first detail it
    lacked; else None."""
    calls, results = calls_before(messages)
    missing = results[0][1].get("missing") if len(results) == 1 else None
    if len(calls) != 1 or not calls[0][0] or results[0][0] != calls[0][0] or not missing:
        return None
    return calls[0], missing[0]


def latest_words(messages: list[dict]) -> str:
    """The caller's latest message; "" when there is none."""
    index = latest_user(messages)
    return messages[index]["content"] if index >= 0 else ""


def spoken_reply(message: dict) -> bool:
    """An agent's message that was spoken, not a tool call."""
    return message["role"] == "assistant" and not message["content"].startswith("<")


def conversation_text(messages: list[dict]) -> list[str]:
    """What was said: the caller's words, the tools' results, and the agent's spoken replies that follow a result
    in their turn (an offer it looked up: "How about 4 PM?" after the day's free times). A reply nothing was looked
    up for offers nothing: after "Hello, ... How can I help you today?", "Yes please" to "What day would you like
    to come in?" was a booking for today, and the caller heard that the salon is closed on Mondays."""
    texts, looked_up = [], False
    for m in messages:
        looked_up = m["role"] == "tool" or (looked_up and m["role"] != "user")
        if m["role"] in ("user", "tool") or (looked_up and spoken_reply(m)):
            texts.append(m["content"])
    return texts


def details_called(messages: list[dict]) -> list[str]:
    """The string details of the calls in `messages` (the agent's, as the history holds them: each held to what was
    said when it was made). A long call's prompt window moves past its first turns (Agent.prompt), and with them
    the caller's words that named a service; the calls after them still hold it. ("ok then 11 for Jan", after
    "a kids cut at 10:30 for Zofia Wojcik" left the window and Jan's kids haircut at 10:30 was taken, was forced
    to the service "well" of "as well for Jan Wojcik", and the caller was asked what service they wanted.)"""
    return [value for m in messages if m["role"] == "assistant" for _, arguments in parse_tool_calls(m["content"])[0]
            for value in arguments.values() if isinstance(value, str)]
