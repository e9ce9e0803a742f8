"""The agent: dialogue history, the language model, and the tool-call loop.

Synchronous on purpose: the session runs `Agent.respond` in an executor, so generation never blocks the event loop.
The model asks for a tool with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; the agent runs it, feeds
the result back as a `tool` message and lets the model speak a reply grounded in that result.

With the tools' grammar (the embedded model), a turn's first reply also has to take in what the caller just said: a
question for a detail their message gave ("What day?" to "a blow dry today at 3 pm"), or a reply that is no
question to a message that answers the agent's own ("You're welcome!" to "Jacob, thanks." after "What name is the
appointment under?"), is not spoken; the model writes the call it would make of those details instead, and the
reply is spoken after all only if the conversation does not ground that call. The reference dialogues never do
either (0 of 1832 spoken first replies that this vets).
"""
import functools
import logging
import threading
from typing import Callable

from app.agent import schema_grammar, tool_grammar
from app.agent.heard import asked_for, asks_again, details_in, heard
from app.agent.options import AgentOptions
from app.agent.protocol import (TOOL_CALL_OPEN, ToolCall, TurnResult, compact, format_tool_call, parse_tool_calls,
                                retract_last_user_turn, tool_message)
from app.agent.said import held, missing_result, settle
from app.agent.speech_filter import SpeechFilter

log = logging.getLogger(__name__)


def _starting_with(prefixes: list[str], texts: list[str], allows):
    """The grammar `allows` (ids, token) narrowed to replies that begin with one of `prefixes`; `texts`: each
    token's text."""
    def narrowed(ids: list[int], token: int) -> bool:
        text = "".join(texts[i] for i in ids) + texts[token]
        if not any(text.startswith(p) for p in prefixes) and (
                not texts[token] or not any(p.startswith(text) for p in prefixes)):
            return False
        return allows(ids, token)
    return narrowed


class Agent:
    """One conversation: history, model, tools."""

    def __init__(self, engine, toolbox, system_prompt: str | None, options: AgentOptions = AgentOptions()):
        self.engine = engine
        self.toolbox = toolbox
        self.system_prompt = system_prompt
        self.options = options
        self.messages: list[dict] = []   # the dialogue so far, system excluded
        self._first = 0                  # with max_history_turns 0, the first message the prompt keeps (prompt)
        self._lock = threading.Lock()    # respond and truncate_last_reply come from different threads

    def prompt(self) -> list[dict]:
        """The messages the model sees: system prompt, then the last `max_history_turns` user turns, fewer when
        they would not fit the model's context with a reply (a call of any length never outgrows it).

        max_history_turns 0: every turn since the window last moved, while they fit. When they no longer do, the
        window moves past the oldest turns until half the context is free, so the turns after it reuse the
        prompt's KV cache again (the engine keeps its last prompt's longest common prefix): moving one turn at a
        time would change the prompt's start, and so make each turn prefill the whole history."""
        user_idx = [i for i, m in enumerate(self.messages) if m["role"] == "user"]
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        fits = getattr(self.engine, "fits", None)
        keep, reply = self.options.max_history_turns, self.options.max_new_tokens
        if keep == 0:
            messages = system + self.messages[self._first:]
            if fits is None or fits(messages, reply):
                return messages
            room = reply + self.engine.model.args.max_sequence_length // 2
            starts = [i for i in user_idx if i > self._first]
            self._first = next((i for i in starts if fits(system + self.messages[i:], room)), starts[-1] if starts
                               else self._first)
            return system + self.messages[self._first:]
        starts = user_idx[-keep:] if len(user_idx) > keep else [0] + user_idx[1:]
        for start in starts:
            messages = system + self.messages[start:]
            if fits is None or fits(messages, reply):
                return messages
        return messages  # the last user turn alone: the engine says why it does not fit

    def _generate(self, messages: list[dict], on_block=None, cancel: threading.Event | None = None,
                  call: bool | None = None, tools: tuple[str, ...] = ()):
        """The model's next message; with the tools' grammar, its tool calls are held to it. call=None: it may
        make a call; False: none; True: it must begin with a call of one of `tools`."""
        opts = self.options
        if opts.cache == "block":  # the embedded SmolLM2 brain: its calls are held to the tools' schemas
            replies = self._reply_grammar(messages, speech_only=call is False)
            return self.engine.generate(messages, max_new_tokens=opts.max_new_tokens, block_length=opts.block_length,
                                        threshold=opts.threshold, use_cache="block", on_block=on_block,
                                        cancel=cancel, matcher=None if replies is None else replies.start(),
                                        draft_length=opts.draft_length)
        grammar = self._grammar()
        extra = {}
        said = None if grammar is None else heard(messages, self.toolbox.profile)
        if grammar is not None and call is False:
            extra["allows"] = functools.partial(grammar.no_call, heard=said)
        elif grammar is not None:
            extra["allows"] = functools.partial(grammar.allows, heard=said)
            if call:
                extra["allows"] = _starting_with([TOOL_CALL_OPEN + compact({"name": t})[:-1] for t in tools],
                                                 grammar.texts, extra["allows"])
        return self.engine.generate(messages, max_new_tokens=opts.max_new_tokens, block_length=opts.block_length,
                                    threshold=opts.threshold, use_cache=opts.cache, on_block=on_block, cancel=cancel,
                                    **extra)

    def _settled(self, calls: list[tuple[str, dict]]) -> list[tuple[str, dict, list[str]]]:
        """Each call with what it lacks: with the embedded brain, less the x-said arguments nobody said, and the
        required arguments it then lacks (app.agent.said.settle); a call that lacks some is not run."""
        if self.options.cache != "block":
            return [(name, arguments, []) for name, arguments in calls]
        messages, schemas = self.prompt(), self.toolbox.schemas()
        return [(name, *settle(name, arguments, schemas, messages, self.toolbox.profile)) if name
                else (name, arguments, []) for name, arguments in calls]

    def _grounded(self, calls: list[tuple[str, dict]]) -> bool:
        """Did the conversation give every day, time, service and name of these calls (Heard.grounds)?
        Always, without the grammar (a big checkpoint's calls run as written)."""
        if self._grammar() is None:
            return True
        said = heard(self.prompt(), self.toolbox.profile)
        return all(not name or said.grounds(arguments) for name, arguments in calls)

    def _vet(self) -> tuple[Callable[[str], bool] | None, tuple[str, ...]]:
        """For the first generation of a turn whose message gives details of a request (a service, a day, a time;
        a name, if the agent just asked for one: app.agent.heard.details_in): the check its first sentence must pass
        before it is spoken, and the tools to call if it fails. It fails if it asks for a detail the message just
        gave, or if it is no question when the message answered the agent's question. The tools are those that
        take every detail given. (None, ()) when nothing is held back."""
        if self._grammar() is None:
            return None, ()
        messages = self.prompt()
        before = messages[-2]["content"] if len(messages) > 1 and messages[-2]["role"] == "assistant" else ""
        asked = asked_for(before)
        given = details_in(messages[-1]["content"], self.toolbox.profile, asked)
        tools = tuple(s["name"] for s in self.toolbox.schemas() if given <= s["parameters"]["properties"].keys())
        if not given or not tools:
            return None, ()
        answered = bool(asked & given)
        return (lambda sentence: not asks_again(sentence, given)
                and not (answered and not sentence.rstrip().endswith("?"))), tools

    def _reply_grammar(self, messages: list[dict], speech_only: bool = False):
        """The reply grammar of this engine's tokenizer and these tools (app.agent.schema_grammar) for `messages`, its
        calls held to the details said (app.agent.said.held); speech_only: a reply that makes no call."""
        tokenizer = getattr(self.engine, "tokenizer", None)
        if not self.options.tool_grammar or tokenizer is None:
            return None
        schemas = [] if speech_only else held(self.toolbox.schemas(), messages, self.toolbox.profile)
        return schema_grammar.grammar_for(tokenizer, schemas, self.engine.special.stop, self.engine.model.args.vocab_size)

    def _grammar(self):
        """The tools' grammar for this engine's vocabulary, when the options ask for it and decoding allows it."""
        tokenizer = getattr(self.engine, "tokenizer", None)
        if not (self.options.grammar_applies and tokenizer is not None):
            return None
        return tool_grammar.grammar_for(tokenizer, self.toolbox.schemas())

    def draft(self, user_text: str, cancel: threading.Event | None = None):
        """The model's first answer to `user_text`, computed without touching the history or running tools.

        The session drafts during the user's end-of-turn silence; if the turn really ends with these words,
        `respond(..., first=draft)` uses it instead of generating again.
        """
        return self._generate(self.prompt() + [{"role": "user", "content": user_text}], cancel=cancel)

    def respond(self, user_text: str, on_text=None, on_tool=None, cancel: threading.Event | None = None,
                first=None) -> TurnResult:
        """Answer one user turn; `on_text` gets spoken text as each block settles, `on_tool` each ToolCall.

        `first` is a finished `draft(user_text)` to use as the first generation.
        """
        opts = self.options
        turn = TurnResult(reply="")
        with self._lock:
            self.messages.append({"role": "user", "content": user_text})
        lacking = False
        for round_ in range(opts.max_tool_rounds + 1):
            vet, tools = self._vet() if round_ == 0 else (None, ())
            speech = SpeechFilter(on_text, vet)
            if first is not None and first.stopped != "cancelled":
                gen, first = first, None                   # drafted during the user's silence
                speech.feed(gen.text)
            else:  # after a call that lacked details, a question for them, not the same call again
                gen = self._generate(self.prompt(), on_block=speech.feed, cancel=cancel, call=False if lacking else None)
            speech.finish()
            turn.count(gen)
            calls, spoken = parse_tool_calls(gen.text)
            if calls and not spoken and gen.stopped != "cancelled" and not self._grounded(calls):
                # the model filled in a detail nobody gave (a time, a service): it asks for it instead
                gen = self._generate(self.prompt(), on_block=speech.feed, cancel=cancel, call=False)
                turn.count(gen)
                calls, spoken = parse_tool_calls(gen.text)
            elif speech.withheld and gen.stopped != "cancelled":
                # the reply passed over the details the caller just gave: the call the model would make of them
                # instead, if the conversation grounds it, else the reply after all
                acting = self._generate(self.prompt(), cancel=cancel, call=True, tools=tools)
                turn.count(acting)
                made, after = parse_tool_calls(acting.text)
                if acting.stopped == "cancelled" or made and not after and self._grounded(made):
                    gen, calls, spoken = acting, made, after
                else:
                    speech.release()
            if speech.withheld:
                spoken = ""                                # never spoken (a cancelled turn)
            turn.reply = " ".join(filter(None, [turn.reply, spoken]))
            if gen.stopped == "cancelled":
                turn.cancelled = True
                with self._lock:
                    if spoken:
                        self.messages.append({"role": "assistant", "content": spoken})
                return turn
            settled = self._settled(calls)
            written = gen.text.strip()
            if self.options.cache == "block" and calls and all(name for name, _ in calls) and not spoken:
                written = "".join(format_tool_call(name, arguments) for name, arguments, _ in settled)  # as held
            with self._lock:
                self.messages.append({"role": "assistant", "content": written})
            if not calls:
                return turn
            for name, arguments, missing in settled:
                if missing:  # not run: the model hears what the caller has not said yet, and asks for it
                    lacking = True
                    with self._lock:
                        self.messages.append(tool_message(name, missing_result(missing)))
                    continue
                result = self._call_tool(name, arguments)
                call = ToolCall(name, arguments, result)
                turn.tool_calls.append(call)
                with self._lock:
                    self.messages.append(tool_message(name, result))
                if on_tool is not None:
                    on_tool(call)
        log.warning("tool rounds exhausted after %d calls", len(turn.tool_calls))
        return turn

    def _call_tool(self, name: str, arguments: dict) -> dict:
        if not name:
            return {"ok": False, "error": "the tool call was not valid JSON with a name and arguments"}
        try:
            return self.toolbox.call(name, arguments)
        except Exception as exc:  # a tool bug must not end the conversation
            log.exception("tool %s failed", name)
            return {"ok": False, "error": f"{name} failed: {exc}"}

    def retract_last_turn(self) -> bool:
        """The caller went on speaking before hearing any answer to their last turn: it leaves the history (its
        words will be heard again with what follows). False, and it stays, if it ran a tool."""
        with self._lock:
            return retract_last_user_turn(self.messages)

    def truncate_last_reply(self, heard_text: str) -> None:
        """Barge-in: the last assistant reply becomes only what the user heard (dropped if nothing was)."""
        with self._lock:
            for i in range(len(self.messages) - 1, -1, -1):
                message = self.messages[i]
                if message["role"] == "user":
                    return
                if message["role"] == "assistant" and not message["content"].startswith(TOOL_CALL_OPEN):
                    if heard_text.strip():
                        self.messages[i] = {"role": "assistant", "content": heard_text.strip()}
                    else:
                        del self.messages[i]
                    return
