"""Training and evaluation dialogues for the front desk, written from templates and run against the real tools.

`generate(profile, split, n, seed)` writes n dialogues; `token_examples(...)` turns them into training sequences
for `parley adapt`; `cases(...)` into per-turn evaluation cases (`parley eval`).
"""
import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.agent.profile import Profile
from app.agent.protocol import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from app.training.dialogues import businesses, scenarios
from app.training.dialogues.booking import booking
from app.training.dialogues.script import Booking, Dialogue, Script
from llm import chat
from llm.adapt import Example

SPLITS = ("train", "heldout")
# The main request of a dialogue, by weight.
MAIN = {booking: 40, scenarios.availability: 14, scenarios.cancel: 10, scenarios.look_up: 6,
        scenarios.business_question: 14, scenarios.date_and_time: 3, scenarios.transfer: 3}
MAIN_SMALL_TALK = {"who_are_you": 3, "out_of_scope": 5}
# With conversational turns (Style.conversational), small talk that a front desk hears more of.
MAIN_SMALL_TALK_CONVERSATIONAL = {**MAIN_SMALL_TALK, "out_of_scope": 10, "compliment": 3}
# With turns about what the call holds (Style.call_turns), the requests they follow (a look-up's cancel, tomorrow's
# date) a little more often.
MAIN_CALL_TURNS = {**MAIN, scenarios.look_up: 10, scenarios.date_and_time: 6}


@dataclass(frozen=True)
class Style:
    """How dialogues are written. The defaults write the plain templates (the held-out split of `parley eval`);
    the SmolLM2 recipe (`parley adapt`) turns all three on."""
    variants: bool = False       # training also draws from app.training.dialogues.variants
    ask_by_call: bool = False    # a question for a missing detail follows a call that lacked it (Script.ask)
    more_requests: float = 0.0   # after each main request, another one with this probability (at most MAX_REQUESTS)
    # turns that go on from the last one, as callers talk: a follow-up asking the last question about another
    # service or day ("and a blow dry?"), "do you do X?", a name said in part and then whole ("Ana. Ana
    # Ruiz."), a compliment; and more off-topic requests
    conversational: bool = False
    # turns about what the call already holds: that day's hours asked again ("how late does that go?"), someone
    # else booked under their own name ("can you book my wife as well? same time, Leila"), one of two appointments
    # just listed cancelled by its day, tomorrow's date; look-ups and date questions a little more often
    call_turns: bool = False
    # this share of the training dialogues is written for a made-up business of another kind (businesses.py):
    # its services, prices, hours and name, in its own system prompt
    other_businesses: float = 0.0


MAX_REQUESTS = 4


def write_dialogue(profile: Profile, split: str, rng: random.Random, style: Style = Style()) -> Dialogue:
    """One dialogue: maybe a greeting, a main request (or small talk) and maybe more of them, maybe thanks and
    goodbye."""
    now = datetime(2026, 1, 5, 8, 0) + timedelta(days=rng.randrange(0, 700), minutes=15 * rng.randrange(0, 44))
    kind = None
    if style.other_businesses and split == "train" and rng.random() < style.other_businesses:
        profile, kind = businesses.made_up_profile(rng)
    s = Script(profile, split, rng, now, style.variants, style.ask_by_call, style.conversational, kind,
               style.call_turns)
    if rng.random() < 0.25:
        scenarios.small_talk(s, rng.choice(("greeting", "greeting", "how_are_you")))
    main = MAIN_CALL_TURNS if s.call_turns else MAIN
    small_talk = MAIN_SMALL_TALK_CONVERSATIONAL if s.conversational else MAIN_SMALL_TALK
    kinds = list(main) + list(small_talk)
    weights = list(main.values()) + list(small_talk.values())
    for n in range(MAX_REQUESTS):  # no draw at all without more_requests: those dialogues stay as they were written
        if n and (style.more_requests == 0.0 or not rng.random() < style.more_requests):
            break
        kind = rng.choices(kinds, weights=weights)[0]
        if kind in small_talk:
            scenarios.small_talk(s, kind)
        else:
            kind(s)
        if rng.random() < 0.3:
            scenarios.small_talk(s, "thanks")
    if rng.random() < 0.3:
        scenarios.goodbye(s)
    return s.finish()


def generate(profile: Profile, split: str, n: int, seed: int = 0, variants: bool = False,
             style: Style | None = None) -> list[Dialogue]:
    """n dialogues of `split` (train or heldout); the same arguments always give the same dialogues.

    variants: training also draws from app.training.dialogues.variants (in the shipped recipe: docs/MODELS.md);
    style: all of how they are written (Style), instead.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    rng = random.Random(f"{seed}:{split}")
    style = style or Style(variants=variants)
    return [write_dialogue(profile, split, rng, style) for _ in range(n)]


@dataclass
class Case:
    """One user turn to replay: the store and history before it, and what the reference agent did."""
    now: datetime
    bookings: list[Booking]
    history: list[dict]
    user: str
    intent: str
    calls: list[tuple[str, dict]]   # expected tool calls, in order
    results: list[dict]             # what they returned in the reference
    reply: str                      # the reference's spoken reply


def cases(dialogues: list[Dialogue]) -> list[Case]:
    out = []
    for d in dialogues:
        user_idx = [i for i, m in enumerate(d.messages) if m["role"] == "user"]
        for k, i in enumerate(user_idx):
            end = user_idx[k + 1] if k + 1 < len(user_idx) else len(d.messages)
            turn = d.messages[i + 1:end]
            calls, results, reply = [], [], ""
            for m in turn:
                if m["role"] == "assistant" and m["content"].startswith(TOOL_CALL_OPEN):
                    payload = json.loads(m["content"][len(TOOL_CALL_OPEN):-len(TOOL_CALL_CLOSE)])
                    calls.append((payload["name"], payload["arguments"]))
                elif m["role"] == "tool":
                    results.append(json.loads(m["content"])["result"])
                elif m["role"] == "assistant":
                    reply = m["content"]
            out.append(Case(d.now, d.snapshots[k], d.messages[:i], d.messages[i]["content"], d.intents[k],
                            calls, results, reply))
    return out


def token_examples(dialogues: list[Dialogue], system, encode, style: str, end_of_turn: str):
    """Each dialogue as one llm.adapt.Example: its tokens in chat `style` (system message first), the token
    span of every assistant reply and of every caller's turn's words, end-of-turn token included. `system`: the
    system message, or a function of the dialogue's profile that writes it. `encode(text) -> ids` is the engine's tokenizer;
    a span is found by encoding the conversation up to the reply's header and up to its end, so the tokens are
    exactly those the agent's prompt would have."""
    out = []
    for d in dialogues:
        messages = [{"role": "system", "content": system(d.profile) if callable(system) else system}] + d.messages
        ids = encode(chat.render(messages, style, add_generation_prompt=False))
        spans, user_spans = [], []
        for i, m in enumerate(messages):
            if m["role"] == "user":   # the caller's words and the end of their turn, for the teacher to keep
                upto = chat.render(messages[:i + 1], style, add_generation_prompt=False)
                end = upto.rindex(end_of_turn)
                head, words = encode(upto[:end - len(m["content"])]), encode(upto[:end + len(end_of_turn)])
                if ids[:len(words)] != words or words[:len(head)] != head:
                    raise ValueError(f"turn {i} of a dialogue does not tokenize as a prefix of the whole")
                user_spans.append((len(head), len(words)))
            if m["role"] != "assistant":
                continue
            head = encode(chat.render(messages[:i], style, add_generation_prompt=True))
            upto = chat.render(messages[:i + 1], style, add_generation_prompt=False)
            reply = encode(upto[:upto.rindex(end_of_turn) + len(end_of_turn)])  # ends with the end-of-turn token
            if ids[:len(reply)] != reply or reply[:len(head)] != head:
                raise ValueError(f"reply {i} of a dialogue does not tokenize as a prefix of the whole")
            spans.append((len(head), len(reply)))
        out.append(Example(ids, spans, user_spans))
    return out
