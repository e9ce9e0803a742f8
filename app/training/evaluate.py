"""Held-out evaluation of an engine as the front desk: tool calls, grounded replies, small talk, LLM latency.

Each held-out user turn is replayed on its own: the store holds the bookings the reference dialogue had at that
point, the agent holds the reference history, and the model answers the turn through the real Agent and tools.
"""
import statistics
from dataclasses import dataclass, field

from app.agent.loop import Agent
from app.agent.options import AgentOptions
from app.agent.profile import Profile
from app.agent.prompt import system_prompt
from app.agent.store import open_store
from app.agent.tools import Toolbox
from app.training.dialogues import Case, cases, generate
from app.training.dialogues.replies import SMALL_TALK_KEYS, facts


@dataclass
class Tally:
    hits: int = 0
    total: int = 0
    misses: list = field(default_factory=list)  # every failure, to print

    def add(self, ok: bool, detail=None) -> None:
        self.hits += ok
        self.total += 1
        if not ok:
            self.misses.append(detail)

    @property
    def rate(self) -> float:
        return self.hits / self.total if self.total else float("nan")


@dataclass
class Report:
    tool_calls: Tally = field(default_factory=Tally)     # turns that need a call: same calls, same arguments
    no_call: Tally = field(default_factory=Tally)        # turns that need no call: none made
    grounded: Tally = field(default_factory=Tally)       # replies after a call state what the call returned
    small_talk: Tally = field(default_factory=Tally)     # greetings, thanks, who-are-you, out of scope, goodbye
    turn_ms: list = field(default_factory=list)          # LLM time per user turn (all its generations)
    generation_ms: list = field(default_factory=list)    # LLM time per generation that ends in a spoken reply
    passes: int = 0
    tokens: int = 0

    def summary(self) -> dict:
        def pct(values, q):
            return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else float("nan")
        return {
            "tool_call_exact_match": self.tool_calls.rate, "tool_call_turns": self.tool_calls.total,
            "no_call_accuracy": self.no_call.rate, "grounded_replies": self.grounded.rate,
            "grounded_turns": self.grounded.total, "small_talk_fit": self.small_talk.rate,
            "small_talk_turns": self.small_talk.total,
            "turn_ms_median": statistics.median(self.turn_ms) if self.turn_ms else float("nan"),
            "turn_ms_p95": pct(self.turn_ms, 0.95),
            "reply_ms_median": statistics.median(self.generation_ms) if self.generation_ms else float("nan"),
            "reply_ms_p95": pct(self.generation_ms, 0.95),
            "passes_per_token": self.passes / max(1, self.tokens), "tokens_per_pass": self.tokens / max(1, self.passes),
        }


def replay(engine, profile: Profile, case: Case, options: AgentOptions):
    """Answer one held-out turn from its reference state; returns the TurnResult and per-generation times."""
    store = open_store(":memory:")
    for name, service, start, duration_min in case.bookings:
        store.add(name, service, start, duration_min)
    toolbox = Toolbox(profile, store, now=lambda: case.now)
    agent = Agent(_Timed(engine), toolbox, system_prompt(profile, toolbox, engine.chat_style), options)
    agent.messages = [dict(m) for m in case.history]
    turn = agent.respond(case.user)
    store.close()
    return turn, agent.engine.seconds


class _Timed:
    """The engine, recording the seconds of each generate call."""

    def __init__(self, engine):
        self.engine, self.seconds = engine, []

    def __getattr__(self, name):  # chat style, tokenizer, special ids, model: what the agent reads of its engine
        return getattr(self.engine, name)

    def generate(self, messages, **kwargs):
        gen = self.engine.generate(messages, **kwargs)
        self.seconds.append(gen.seconds)
        return gen


def score_case(report: Report, case: Case, turn, seconds: list[float]) -> None:
    got = [(c.name, c.arguments) for c in turn.tool_calls]
    detail = {"user": case.user, "expected": case.calls, "got": got, "reply": turn.reply}
    if case.calls:
        report.tool_calls.add(got == case.calls, detail)
    else:
        report.no_call.add(not got, detail)
    if turn.tool_calls:
        last = turn.tool_calls[-1]
        needed = facts(last.name, last.result)
        report.grounded.add(all(f.lower() in turn.reply.lower() for f in needed), {**detail, "facts": needed})
    if case.intent in SMALL_TALK_KEYS:
        report.small_talk.add(not got and SMALL_TALK_KEYS[case.intent] in turn.reply.lower(), detail)
    elif case.intent == "goodbye":
        report.small_talk.add([n for n, _ in got] == ["end_call"] and "goodbye" in turn.reply.lower(), detail)
    report.turn_ms.append(1000 * turn.llm_s)
    report.generation_ms.append(1000 * seconds[-1])
    report.passes += turn.passes
    report.tokens += turn.tokens


def evaluate(engine, profile: Profile, n_dialogues: int = 200, seed: int = 0,
             options: AgentOptions = AgentOptions(), progress=None) -> Report:
    """Replay every user turn of n held-out dialogues through the agent with `engine`."""
    report = Report()
    held = cases(generate(profile, "heldout", n_dialogues, seed))
    for case in (progress(held) if progress else held):
        turn, seconds = replay(engine, profile, case, options)
        score_case(report, case, turn, seconds)
    return report
