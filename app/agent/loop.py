"""The agent: dialogue history, the language model, and the tool-call loop.

Synchronous on purpose: the session runs `Agent.respond` in an executor, so generation never blocks the event loop.
The model asks for a tool with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; the agent runs it, feeds
the result back as a `tool` message and lets the model speak a reply grounded in that result. With the embedded
brain (cache "block"), the reply is decoded under a grammar of the tools' schemas (app.agent.schema_grammar), its
calls held to the details the conversation said (app.agent.said) and to what the model meant (app.agent.meant), and
made where the model weighed one the caller's words ask for (app.agent.weighed).
"""
import functools
import logging
import threading
from contextlib import nullcontext
from dataclasses import dataclass, field

from app.agent.given_way import GivenWay
from app.agent.meant import CallCheck
from app.agent.options import AgentOptions
from app.agent.protocol import (TOOL_CALL_OPEN, ToolCall, TurnResult, forget_message, format_tool_call,
                                parse_tool_calls, retract_last_user_turn, tool_message)
from app.agent.said import missing_result
from app.agent.speech_filter import SpeechFilter
from app.agent.weighed import Weighed

log = logging.getLogger(__name__)

NEXT_TURN_TOKENS = 64   # room prepare_next keeps for the caller's next words (a spoken turn is rarely longer)


def _its_own_cache(method):
    """The method's generations are this conversation's: the engine keeps the KV cache of its last one for its
    next, whatever other calls' generations do meanwhile (llm.Engine.conversation)."""
    @functools.wraps(method)
    def serving(self, *args, **kwargs):
        conversation = getattr(self.engine, "conversation", None)
        with nullcontext() if conversation is None else conversation(self):
            return method(self, *args, **kwargs)
    return serving


@dataclass
class DraftStep:
    """One generation of a drafted turn, and the results of the calls it made when the draft ran them."""
    generation: object          # llm.engine.Generation; "cancelled": stopped early, the turn goes on from its ids
    results: list | None = None  # per call (CallCheck.settled's order): its result, or None for one lacking details
    settled: list | None = None  # its calls as CallCheck.settled held them, probes included
    probes: list = field(default_factory=list)  # the generations of those probes (their cost is the turn's)


@dataclass
class DraftedTurn:
    """A turn's first generations, written during the caller's silence (Agent.draft) for `respond` to start from."""
    steps: list[DraftStep] = field(default_factory=list)


class Agent:
    """One conversation: history, model, tools."""

    def __init__(self, engine, toolbox, system_prompt: str | None, options: AgentOptions = AgentOptions()):
        self.engine = engine
        self.toolbox = toolbox
        self.system_prompt = system_prompt
        self.options = options
        self.check = CallCheck(engine, toolbox, options)  # what the model meant by its calls, and what they lack
        self.weighed = Weighed(self.check)  # calls the model weighed but would not make, made when asked for
        self.given_way = GivenWay(self.check, self.weighed)  # calls that give way, and to what
        self.messages: list[dict] = []   # the dialogue so far, system excluded
        self._first = 0                  # with max_history_turns 0, the first message the prompt keeps (prompt)
        self._lock = threading.Lock()    # respond and truncate_last_reply come from different threads

    def prompt(self, extra_tokens: int = 0) -> list[dict]:
        """The messages the model sees: system prompt, then the last `max_history_turns` user turns, fewer when
        they would not fit the prompt's budget with a reply (a call of any length never outgrows it).

        The budget: the model's context less the reply, and at most `max_prompt_tokens` (the adapted brain
        reads short prompts better: docs/MODELS.md). max_history_turns 0: every turn since the window last moved,
        while they fit. When they no longer do, the window moves past the oldest turns until half the history's
        room is free, so the turns after it reuse the prompt's KV cache again (the engine keeps its last prompt's
        longest common prefix): moving one turn at a time would change the prompt's start, and so make each turn
        prefill the whole history. extra_tokens: room kept besides the reply's (prepare_next: the caller's next
        words)."""
        user_idx = [i for i, m in enumerate(self.messages) if m["role"] == "user"]
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        size = getattr(self.engine, "prompt_ids", None)
        if size is None:  # an engine that does not say how long a prompt is: the turns asked for
            keep = self.options.max_history_turns
            return system + (self.messages[user_idx[-keep]:] if keep and len(user_idx) > keep else self.messages)
        budget = self.prompt_budget(extra_tokens)
        fits = lambda messages, limit=budget: len(size(messages)) <= limit  # noqa: E731
        keep = self.options.max_history_turns
        if keep == 0:
            messages = system + self.messages[self._first:]
            if fits(messages):
                return messages
            half = (budget + len(size(system))) // 2
            starts = [i for i in user_idx if i > self._first]
            self._first = next((i for i in starts if fits(system + self.messages[i:], half)), starts[-1] if starts
                               else self._first)
            return system + self.messages[self._first:]
        starts = user_idx[-keep:] if len(user_idx) > keep else [0] + user_idx[1:]
        for start in starts:
            messages = system + self.messages[start:]
            if fits(messages):
                return messages
        return messages  # the last user turn alone: the engine says why it does not fit

    def prompt_budget(self, extra_tokens: int = 0) -> int:
        """The most prompt tokens a turn's prompt may hold: the model's context less the reply (and
        extra_tokens), and at most options.max_prompt_tokens when set."""
        room = self.engine.model.args.max_sequence_length - self.options.max_new_tokens
        return min(room, self.options.max_prompt_tokens or room) - extra_tokens

    @_its_own_cache
    def prepare_next(self, cancel: threading.Event | None = None, next_tokens: int = NEXT_TURN_TOKENS) -> bool:
        """Between turns, while the caller hears the reply: when the next turn would not fit the context (its words
        and a reply), move the window now and have the engine hold the moved prompt in a KV cache the next turn
        reuses. A long call's window move re-reads ~700 tokens of history (~0.45 s on 2 CPU cores, bf16 weights):
        paid here, not by the caller waiting for an answer. next_tokens: room for the caller's next words. -> whether
        it moved."""
        prefill = getattr(self.engine, "prefill", None)
        if prefill is None or self.options.cache != "block" or self.options.max_history_turns != 0:
            return False
        with self._lock:
            first = self._first
            messages = self.prompt(extra_tokens=next_tokens)
            moved = self._first != first
        if moved:
            prefill(messages, cancel=cancel)
        return moved

    def _generate(self, messages: list[dict], on_block=None, cancel: threading.Event | None = None,
                  speech_only: bool = False, resume=None):
        """The model's next message; with the embedded brain, its tool calls held to the tools' schemas, and
        with speech_only, no call at all. resume: a generation on the same messages that stopped early (a
        draft's), which this one goes on from (the embedded brain; any other starts over)."""
        opts = self.options
        if opts.cache == "block":  # the embedded SmolLM2 brain: its calls are held to the tools' schemas
            replies = self.check.reply_grammar(messages, speech_only=speech_only)
            matcher = None if replies is None else replies.start()
            written, asked = list(getattr(resume, "ids", None) or []), 0.0
            if matcher is not None and not written and not speech_only:
                acted, asked = self.weighed.acted_on_part(messages, replies, cancel)
                if acted is not None:
                    return acted
                for ask in (self.weighed.followed_up, self.weighed.asked_of_a_service, self.weighed.named_topic,
                            self.weighed.named_tool, self.weighed.completed):
                    called, seconds = ask(messages, replies, cancel)
                    asked += seconds
                    if called is not None:
                        called.seconds = asked
                        return called
            if matcher is not None and not all(matcher.accept(t) for t in written):
                matcher, written = replies.start(), []  # not this grammar's start: written again
            resumed = {"written": written} if written else {}
            gen = self.engine.generate(messages, max_new_tokens=opts.max_new_tokens, block_length=opts.block_length,
                                       threshold=opts.threshold, use_cache="block", on_block=on_block,
                                       cancel=cancel, matcher=matcher, draft_length=opts.draft_length, **resumed)
            before = list(getattr(resume, "shares", None) or [])
            if written and len(before) == len(written) and len(gen.shares) >= len(written):
                gen.shares[:len(written)] = before  # how the draft wrote them
            gen.seconds += asked
            return gen
        return self.engine.generate(messages, max_new_tokens=opts.max_new_tokens, block_length=opts.block_length,
                                    threshold=opts.threshold, use_cache=opts.cache, on_block=on_block, cancel=cancel)

    def _written(self, gen, calls, spoken: str, settled) -> dict:
        """The assistant message a generation leaves in the history: its calls as held, when it is only calls."""
        written = gen.text.strip()
        if self.options.cache == "block" and calls and all(name for name, _ in calls) and not spoken:
            written = "".join(format_tool_call(name, arguments) for name, arguments, _ in settled)  # as held
        return {"role": "assistant", "content": written}

    @property
    def resumes_drafts(self) -> bool:
        """Whether `respond` goes on from a drafted generation that was stopped (the embedded brain's block
        decoding) rather than writing it again."""
        return self.options.cache == "block"

    @_its_own_cache
    def draft(self, user_text: str, cancel=None, on_text=None) -> DraftedTurn:
        """The turn's answer to `user_text` as far as it can go without changing anything: the history stays as
        it is, and the calls a generation makes are previewed (Toolbox.preview: a tool that only reads is run, a
        booking is checked but not made) or lack details (not run), and the next generation reads their results.
        A call whose result cannot be foreseen ends the draft. `respond` runs every call that changes something
        and keeps what the draft wrote after it only if the result is the one previewed.

        The session drafts during the user's end-of-turn silence; if the turn really ends with these words,
        `respond(..., first=draft)` starts from it. on_text gets the spoken text as `respond`'s does; `cancel`
        (is_set) may stop the draft at any point (the session stops it once its first phrase is written), and
        the turn goes on from there.
        """
        messages = self.prompt() + [{"role": "user", "content": user_text}]
        turn, lacking = DraftedTurn(), False
        for _ in range(self.options.max_tool_rounds + 1):
            speech = SpeechFilter(on_text)
            gen = self._generate(messages, on_block=speech.feed, cancel=cancel, speech_only=lacking)
            speech.finish()
            step = DraftStep(gen)
            turn.steps.append(step)
            calls, spoken = parse_tool_calls(gen.text)
            if gen.stopped == "cancelled" or not calls:
                break
            settled = step.settled = self.check.settled(calls, gen, messages, spent=step.probes)
            other, other_settled, in_words = self.given_way(calls, spoken, settled, messages, cancel)
            if in_words:
                lacking = True   # answered in words, from the same prompt (as `respond` does)
                continue
            if other is not None:
                step.generation, step.settled = gen, settled = other, other_settled   # as `respond` does
                calls, spoken = parse_tool_calls(gen.text)
            if not spoken and (offered := self.check.offered(settled, messages)) is not None:
                step.settled = settled = offered   # the look-up of the choices for what it asked again, as `respond`
                calls = [(name, arguments) for name, arguments, _ in offered]
            results = [None if missing else self._preview_tool(name, arguments) for name, arguments, missing in settled]
            if any(result is None and not missing for (_, _, missing), result in zip(settled, results)):
                break   # a call whose result only its effect would tell runs once the turn is sure
            step.results = results
            messages = messages + [self._written(gen, calls, spoken, settled)] + [
                tool_message(name, self._lacking_result(name, arguments, missing) if missing else result)
                for (name, arguments, missing), result in zip(settled, step.results)]
            lacking = any(missing for _, _, missing in settled)
        return turn

    @_its_own_cache
    def respond(self, user_text: str, on_text=None, on_tool=None, cancel: threading.Event | None = None,
                first=None) -> TurnResult:
        """Answer one user turn; `on_text` gets spoken text as each block settles, `on_tool` each ToolCall.

        `first` is a DraftedTurn of `draft(user_text)` to start from: its finished generations and the results of
        the calls they made are the turn's, and a generation it stopped goes on from where it stopped.
        """
        opts = self.options
        turn = TurnResult(reply="")
        with self._lock:
            self.messages.append({"role": "user", "content": user_text})
        drafted = list(first.steps) if first is not None else []
        read_only = getattr(self.toolbox, "read_only", lambda name: False)   # a drafted result of these is kept
        lacking = False
        for _ in range(opts.max_tool_rounds + 1):
            speech = SpeechFilter(on_text)
            step = drafted.pop(0) if drafted else None
            drafted_gen = step is not None and step.generation.stopped != "cancelled"
            messages = None   # this round's prompt, once it is needed (the history does not change within a round)
            if drafted_gen:
                gen = step.generation                       # drafted during the user's silence
                speech.feed(gen.text)
            else:  # after a call that lacked details, a question for them, not the same call again
                if step is not None:
                    turn.count(step.generation)             # the draft's share of the generation it goes on from
                messages = self.prompt()
                gen = self._generate(messages, on_block=speech.feed, cancel=cancel, speech_only=lacking,
                                     resume=None if step is None else step.generation)
            speech.finish()
            turn.count(gen)
            calls, spoken = parse_tool_calls(gen.text)
            turn.reply = " ".join(filter(None, [turn.reply, spoken]))
            if gen.stopped == "cancelled":
                turn.cancelled = True
                with self._lock:
                    if spoken:
                        self.messages.append({"role": "assistant", "content": spoken})
                return turn
            if drafted_gen and step.settled is not None:
                settled, probes = step.settled, step.probes  # held by the draft, probes and all
            else:
                probes = []
                messages = messages or self.prompt()
                settled = self.check.settled(calls, gen, messages, spent=probes)
            for probe in probes:
                turn.count(probe)
            if calls and not spoken:
                messages = messages or self.prompt()   # the checks of its calls read the caller's latest words
            other, other_settled, in_words = self.given_way(calls, spoken, settled, messages, cancel)
            if in_words:
                lacking = True   # no call: the model answers in words, from the same prompt
                continue
            if other is not None:
                turn.count(other)    # the call of the tool the model weighed next
                gen, settled = other, other_settled
                calls, spoken = parse_tool_calls(gen.text)
            if calls and not spoken and (offered := self.check.offered(settled, messages)) is not None:
                settled, calls = offered, [(name, arguments) for name, arguments, _ in offered]
            with self._lock:
                self.messages.append(self._written(gen, calls, spoken, settled))
            if not calls:
                return turn
            previews = [None] * len(settled)
            if step is not None and step.results is not None and len(step.results) == len(settled):
                previews = step.results                     # the draft's results for these calls
            for (name, arguments, missing), preview in zip(settled, previews):
                if missing:  # not run: the model hears what the caller has not said yet, and asks for it
                    lacking = True
                    with self._lock:
                        self.messages.append(tool_message(name, self._lacking_result(name, arguments, missing)))
                    continue
                if preview is not None and read_only(name):
                    result = preview                        # run by the draft: it changed nothing
                else:
                    result = self._call_tool(name, arguments)
                    if preview is not None and result != preview:
                        drafted.clear()   # the draft read another result: what it wrote after is written again
                call = ToolCall(name, arguments, result)
                turn.tool_calls.append(call)
                with self._lock:
                    self.messages.append(tool_message(name, result))
                if on_tool is not None:
                    on_tool(call)
        log.warning("tool rounds exhausted after %d calls", len(turn.tool_calls))
        return turn

    def _lacking_result(self, name: str, arguments: dict, missing: list[str]) -> dict:
        """What a call that lacks details returns to the model instead of running: the toolbox's refusal of a
        detail it has (Toolbox.refusal: a service not offered), else the details missing, which the model asks
        for."""
        refusal = getattr(self.toolbox, "refusal", None)
        return (refusal(name, arguments) if refusal else None) or missing_result(missing)

    def _preview_tool(self, name: str, arguments: dict) -> dict | None:
        """The toolbox's preview of a call (Toolbox.preview), or None: a toolbox without previews, a call without
        a valid name, or a preview that failed."""
        preview = getattr(self.toolbox, "preview", None)
        if not name or preview is None:
            return None
        try:
            return preview(name, arguments)
        except Exception:  # a tool bug: the turn runs the call and reports it
            log.exception("preview of %s failed", name)
            return None

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

    def forget(self, role: str, content: str = "", call_id: str | None = None) -> bool:
        """A message the client deleted (app.api.realtime) leaves the history; the prompt's window stays where
        it was."""
        with self._lock:
            where = forget_message(self.messages, role, content)
            if where is not None and where < self._first:
                self._first -= 1
            return where is not None

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
