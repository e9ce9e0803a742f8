"""One dialogue being written: the real Toolbox on a private SQLite store, and the messages the Agent would keep."""
import random
import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from app.agent.profile import WEEKDAYS, Profile, Service
from app.agent.protocol import format_tool_call, tool_message
from app.agent.said import lacking, missing_result, schema_of
from app.agent.store import open_store
from app.agent.tools import Toolbox
from app.training.dialogues import businesses, phrases, variants
from app.training.dialogues.replies import reply_to

Booking = tuple[str, str, datetime, int]  # name, service, local start, duration_min

_LOWER_FIRST = set("""can could what how do is are when where please yes yeah okay let's just the my it's this hi
hello that's thanks thank cancel any would sure perfect great fine then so good hey at and oh also actually
keep till until which sorry hmm same""".split())
_NO_TAIL = {"thanks", "goodbye", "greeting", "how_are_you"}  # small talk that a tail would turn into another


@dataclass
class Dialogue:
    """A written dialogue: the clock and bookings it started from, and the messages (system excluded)."""
    now: datetime
    setup: list[Booking]
    messages: list[dict] = field(default_factory=list)
    intents: list[str] = field(default_factory=list)               # one per user message
    snapshots: list[list[Booking]] = field(default_factory=list)   # the store before each user message
    profile: Profile | None = None                                 # the business it was written for


class Script:
    """Writes one dialogue; picks values and phrasings from its split only."""

    def __init__(self, profile: Profile, split: str, rng: random.Random, now: datetime, variants: bool = False,
                 ask_by_call: bool = False, conversational: bool = False, kind: businesses.Kind | None = None,
                 call_turns: bool = False):
        self.profile, self.split, self.rng, self.now = profile, split, rng, now
        self.kind = kind  # a made-up business of this kind (businesses.made_up_profile), or None
        self.variants = variants and split == "train"  # app.training.dialogues.variants: more phrasings for training
        self.ask_by_call = ask_by_call  # the agent asks for a detail after a call that lacked it (ask)
        self.conversational = conversational and split == "train"  # Style.conversational
        self.call_turns = call_turns and split == "train"  # Style.call_turns
        self.store = open_store(":memory:")
        self.toolbox = Toolbox(profile, self.store, now=lambda: now)
        self.dialogue = Dialogue(now=now, setup=[], profile=profile)

    # -- choices ---------------------------------------------------------------------------------------------

    def pick(self, items: list):
        """One of the split's items; training also draws from the list's variants (variants.more)."""
        pool = phrases.split_items(items, self.split) or items
        return self.rng.choice(pool + variants.more(items) if self.variants else pool)

    def name(self) -> str:
        made_up = self.split == "train" and self.rng.random() < 0.8
        first = self.made_up_name() if made_up else self.pick(phrases.FIRST_NAMES)
        if self.rng.random() >= 0.3:
            return first
        last = self.made_up_name() if made_up else self.pick(phrases.LAST_NAMES)
        return f"{first} {last}"

    def said_name(self, name: str) -> str:
        """How a caller answers with `name`: as it is, or with conversational turns now and then a part of it
        first and then the whole ("Ana. Ana Ruiz.")."""
        parts = name.split()
        if self.conversational and len(parts) > 1 and self.rng.random() < 0.35:
            return f"{self.rng.choice(parts)}. {name}"
        return name

    def made_up_name(self) -> str:
        """A made-up name; with variants, never a capitalized word that is no name ("Hi", "No", "So":
        phrases.NOT_NAMES). Without variants, about 1 made-up name in 1000 is such a word."""
        name = phrases.made_up_name(self.rng)
        while self.variants and name in phrases.NOT_NAMES:
            name = phrases.made_up_name(self.rng)
        return name

    def service(self) -> tuple[str, str]:
        """(canonical name, how the caller says it)."""
        s: Service = self.rng.choice(self.profile.services)
        word = self.rng.choice((s.name,) * 2 + s.aliases)
        return s.name, self.with_article(word)

    def unknown_service(self) -> tuple[str, str]:
        word = self.rng.choice(businesses.unknown_services(self.profile)) if self.kind else \
            self.pick(phrases.UNKNOWN_SERVICES)
        return word, self.with_article(word)

    def with_article(self, word: str) -> str:
        if word.endswith("s") and not word.endswith("ss"):
            return word
        return ("an " if word[0] in "aeiou" else "a ") + word

    def date_of(self, day: str) -> date:
        today = self.now.date()
        if day in ("today", "tomorrow"):
            return today + timedelta(days=day == "tomorrow")
        return today + timedelta(days=(WEEKDAYS.index(day) - today.weekday()) % 7)

    def day_key(self, d: date) -> str:
        """How a date within the coming week is named as a `day` argument."""
        offset = (d - self.now.date()).days
        assert 0 <= offset < 7, "only dates in the coming week have a day name"
        return "today" if offset == 0 else "tomorrow" if offset == 1 else WEEKDAYS[d.weekday()]

    def hours(self, day: str) -> tuple[time, time] | None:
        return self.profile.hours[WEEKDAYS[self.date_of(day).weekday()]]

    def day(self, open_only: bool = True) -> str:
        for _ in range(50):
            r = self.rng.random()
            day = "today" if r < 0.1 else "tomorrow" if r < 0.3 else self.rng.choice(WEEKDAYS)
            if not open_only or self.free_times(day, 15):
                return day
        raise ValueError(f"{self.profile.name} has no opening hours in the coming week")

    def free_times(self, day: str, duration_min: int) -> list[datetime]:
        """Start times on the 15-minute grid within hours, after now, that fit `duration_min`."""
        hours = self.hours(day)
        if hours is None:
            return []
        d = self.date_of(day)
        t, last = datetime.combine(d, hours[0]), datetime.combine(d, hours[1]) - timedelta(minutes=duration_min)
        starts = []
        while t <= last:
            if t > self.now + timedelta(minutes=30):
                starts.append(t)
            t += timedelta(minutes=15)
        return starts

    def say_time(self, t: time) -> str:
        return phrases.time_phrase(self.rng, t.hour, t.minute, self.split)

    def say_day(self, day: str) -> str:
        return phrases.day_phrase(self.rng, day)

    # -- writing ---------------------------------------------------------------------------------------------

    def book_existing(self, name: str, service: str, start: datetime) -> bool:
        """Put a booking in the store before the call starts; False if it overlaps one already there."""
        s = self.profile.service(service)
        try:
            self.store.add(name, s.name, start, s.duration_min)
        except ValueError:
            return False
        self.dialogue.setup.append((name, s.name, start, s.duration_min))
        return True

    def user(self, text: str, intent: str) -> None:
        if self.kind:  # the templates' salon and stylist are this business's place and staff
            text = re.sub(r"\bsalon\b", self.kind.place, re.sub(r"\bstylist", self.kind.worker, text))
        snapshot = [(a.name, a.service, a.start, a.duration_min) for a in self.store.all()]
        self.dialogue.messages.append({"role": "user", "content": self.noisy(text, tail=intent not in _NO_TAIL)})
        self.dialogue.intents.append(intent)
        self.dialogue.snapshots.append(snapshot)

    def noisy(self, text: str, tail: bool = False) -> str:
        """A filler or a repeated first word now and then, as callers speak and Whisper writes; with `tail`, now
        and then a closing courtesy ("..., thank you.")."""
        text = " ".join(text.split()).replace("..", ".").replace(".?", "?")  # "a.m.." -> "a.m."
        first = text.split(" ", 1)[0]
        r = self.rng.random()
        if r < 0.18:
            head = first.lower() if first.lower().strip(",.?") in _LOWER_FIRST else first
            filler = self.rng.choice(phrases.FILLERS)
            if filler == "um" and self.split == "heldout":  # "Um, {service}." is a training template
                filler = "uh"
            text = f"{filler.capitalize()}, {head}{text[len(first):]}"
        elif r < 0.24 and len(text.split()) > 2:
            head = first.lower() if first.lower().strip(",.?") in _LOWER_FIRST else first
            text = f"{first.rstrip(',.?')}, {head}{text[len(first):]}"
        if tail and self.rng.random() < 0.12:
            courtesy = self.pick(phrases.TAILS)  # after a question, a sentence of its own
            text = f"{text} {courtesy.capitalize()}." if text[-1] == "?" else f"{text.rstrip('.')}, {courtesy}."
        return text[0].upper() + text[1:]

    def say(self, text: str) -> None:
        self.dialogue.messages.append({"role": "assistant", "content": text})

    def ask(self, question: str, tool: str, known: dict) -> dict | None:
        """The agent asks for a detail of a `tool` request. With ask_by_call, as the SmolLM2 brain does: first a
        call of `tool` with the details `known` so far, which is not run but answered with the required ones it
        lacks, in the schema's order (app.agent.said), then the question for the first of them; or, when the
        toolbox refuses a detail it has (Toolbox.refusal: a service not offered, a closed day), with that refusal,
        which the agent says instead of asking (app.agent.loop.Agent._lacking_result). -> the refusal, or None."""
        if self.ask_by_call:
            schema = schema_of(tool, self.toolbox.schemas())
            refused = self.toolbox.refusal(tool, known)
            self.dialogue.messages.append({"role": "assistant", "content": format_tool_call(tool, known)})
            self.dialogue.messages.append(tool_message(tool, refused or missing_result(lacking(schema, known))))
            if refused is not None:
                self.say(reply_to(tool, known, refused, self.profile.name))
                return refused
        self.say(question)
        return None

    def call(self, tool: str, arguments: dict, reply=None) -> dict:
        """The assistant calls `tool`; the real tool runs; its result is fed back; the grounded reply follows
        (replies.reply_to's, or `reply(result)`'s)."""
        self.dialogue.messages.append({"role": "assistant", "content": format_tool_call(tool, arguments)})
        result = self.toolbox.call(tool, arguments)
        self.dialogue.messages.append(tool_message(tool, result))
        self.say(reply(result) if reply else reply_to(tool, arguments, result, self.profile.name))
        return result

    def finish(self) -> Dialogue:
        self.store.close()
        return self.dialogue


def sentence(*parts: str) -> str:
    """Join clause parts into one utterance: capitalized, with a closing mark."""
    text = " ".join(p.strip() for p in parts if p and p.strip())
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".?!" else text + "."
