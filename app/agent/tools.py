"""The front desk's tools: plain functions over the profile and the SQLite store, with JSON-schema descriptions.

Results are small JSON objects whose text fields ("when", "error", "hours") are what the model reads back to the
caller, so a reply grounded in a result can copy them word for word.
"""
import copy
import json
import logging
import sqlite3
from datetime import date, datetime, timedelta
from typing import Callable

from app.agent.days import DAYS, Refusal, date_text, parse_time, resolve_day, time_text, when_text
from app.agent.profile import WEEKDAYS, Profile, Service
from app.agent.said import lacking, named_service, properties_of, schema_of
from app.agent.schemas import SCHEMAS, TOPICS
from app.agent.slots import Slots, spoken_list
from app.agent.store import Appointment, Store, UnwrittenStore
from app.agent.words import holds, name_words

log = logging.getLogger(__name__)

# what the model reads when the appointments file fails (read-only, disk full): nothing was changed
STORE_DOWN = "The appointment book cannot be reached right now, so nothing was changed. Please call back later."


def _given(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


class Toolbox:
    """The tools of one business; `call` runs one by name and never raises.

    A tool is its JSON schema in TOOLS and a method `_<name>(**arguments) -> dict`: a new one is one schema and
    one method (in a subclass, or here), and every model, grammar and API sees it through `schemas()`."""

    TOOLS = SCHEMAS
    # tools that only read (MCP's readOnlyHint): a turn's draft may run them while the caller may still go on
    # (app.agent.loop.Agent.draft), and the turn keeps their results
    READ_ONLY = frozenset({"business_info", "check_availability", "list_appointments", "current_datetime"})
    # tools whose only effects are on the appointment book, or on the call once the turn acts on its result
    # (CONTROL_TOOLS): a draft may preview them (`preview`), and the turn runs them and compares. A tool with any
    # other effect is in neither set, and runs only once the turn is the caller's.
    PREVIEWED = frozenset({"book_appointment", "cancel_appointment", "transfer_to_human", "end_call"})
    SLOTTED = frozenset({"check_availability", "book_appointment"})  # tools that take a slot to fill

    def __init__(self, profile: Profile, store: Store, now: Callable[[], datetime] | None = None):
        self.profile, self.store = profile, store
        self._now = now or (lambda: datetime.now(profile.tz))

    def schemas(self) -> list[dict]:
        """TOOLS, with the business's services as the examples of every `service` argument."""
        schemas = json.loads(json.dumps(self.TOOLS))
        for s in schemas:
            service = s["parameters"]["properties"].get("service")
            if service is not None:
                service["examples"] = [x.name for x in self.profile.services]
        return schemas

    def canonical(self, arguments: dict) -> dict:
        """A call's arguments with a service named by one of its aliases named as the business names it ("shave"
        -> "beard trim"), and a day said in more words (`day_phrases`) named as today or a weekday where one names
        it ("the day after tomorrow" -> "thursday" on a Tuesday; "next tuesday" on that Tuesday stays as said): what
        the call books, as its record and the conversation's history say it. Any other value, one no service
        answers to included, stays as written."""
        out = dict(arguments)
        service = arguments.get("service")
        known = named_service(self.profile, service) if isinstance(service, str) else None
        if known is not None:
            out["service"] = known.name
        day = arguments.get("day")
        if isinstance(day, str) and day not in DAYS:
            try:
                out["day"] = self._plain_day(self._day(day)) or day
            except Refusal:
                pass  # the call refuses it, with its reason
        return out

    def _plain_day(self, d: date) -> str | None:
        """today, or the weekday that names date `d` (one within six days: "next Monday" said on a Sunday is
        "monday", as the caller named it, not "tomorrow"), else None."""
        ahead = (d - self.now().date()).days
        return "today" if ahead == 0 else WEEKDAYS[d.weekday()] if 0 < ahead < 7 else None

    def read_only(self, name: str) -> bool:
        """Whether tool `name` changes nothing (its result may be drafted before the turn is sure)."""
        return name in self.READ_ONLY

    def preview(self, name: str, arguments: dict) -> dict | None:
        """What `call(name, arguments)` would return now, with nothing changed: a tool that only reads is run,
        one in PREVIEWED runs against the appointment book with its writes checked but not made; None for any
        other (its result cannot be foreseen without its effect)."""
        if name in self.READ_ONLY:
            return self.call(name, arguments)
        if name not in self.PREVIEWED:
            return None
        view = copy.copy(self)
        view.store = UnwrittenStore(self.store)
        return view.call(name, arguments)

    def refusal(self, name: str, arguments: dict) -> dict | None:
        """What `call` would refuse in a call of tool `name` that lacks required details, judged on the ones it
        has: a service the business does not offer; for a tool that takes a slot to fill (SLOTTED), a day it is
        closed, and a time on it outside the opening hours, passed or taken; None when it refuses none of them. A
        front desk says "we don't offer waxing" or "we close at 4 on Saturdays" before asking for a name, not
        after it."""
        properties = properties_of(name, self.TOOLS)
        service, day, at = arguments.get("service"), arguments.get("day"), arguments.get("time")
        try:
            offered = self._service(service) if "service" in properties and _given(service) else None
            if name in self.SLOTTED and _given(day):
                d = self._day(day)
                self.slots.hours_on(d)
                if _given(at):
                    self.slots.check_free(datetime.combine(d, parse_time(at)), offered)
        except Refusal as exc:
            return {"ok": False, "error": str(exc)}
        return None

    def choices(self, name: str, arguments: dict, missing: list[str]) -> tuple[str, dict] | None:
        """The look-up that lists what the caller may choose from for the first detail a call of tool `name`
        lacks, as (tool, arguments): a time on the call's day (its free times), a day (the opening hours), a
        service (the services); None for a detail without such a list (a name). The agent offers it when the
        caller, asked for that detail, answered without it ("afternoon would be best" asked what time): a front
        desk reads out the free times rather than ask "what time?" again."""
        properties = properties_of(name, self.TOOLS)
        detail = missing[0] if missing else None
        if detail not in properties or name not in self.SLOTTED and detail != "service":
            return None
        day = arguments.get("day")
        if detail == "time" and isinstance(day, str) and day.strip():
            return "check_availability", {"day": day}
        if detail == "day":
            return "business_info", {"topic": "hours"}
        if detail == "service":
            return "business_info", {"topic": "services"}
        return None

    def _day(self, day: str) -> date:
        """The date `day` means at the business now (`resolve_day`); a weekday named on that very day once its
        opening hours are over means that weekday next week: "a trim on Friday at 11:30", said on a Friday
        evening, is not a time that has passed."""
        now = self.now()
        d = resolve_day(day, now.date())
        hours = self.profile.hours[WEEKDAYS[d.weekday()]]
        if d == now.date() and str(day).strip().lower() in WEEKDAYS and hours is not None and now.time() >= hours[1]:
            return d + timedelta(days=7)
        return d

    @property
    def slots(self) -> Slots:
        """The appointment book as times, read from this toolbox's store (a preview's own)."""
        return Slots(self.profile, self.store, self.now)

    def now(self) -> datetime:
        """Naive local wall-clock time of the business."""
        now = self._now()
        return (now.astimezone(self.profile.tz) if now.tzinfo else now).replace(tzinfo=None, second=0, microsecond=0)

    def call(self, name: str, arguments: dict) -> dict:
        """Run tool `name`; unknown tool, bad arguments or a refusal -> {"ok": False, "error": reason}."""
        schema = schema_of(name, self.TOOLS)
        if schema is None:
            return {"ok": False, "error": f"Unknown tool {name!r}; tools: {', '.join(s['name'] for s in self.TOOLS)}."}
        if not isinstance(arguments, dict):
            return {"ok": False, "error": "Arguments must be a JSON object."}
        params = schema["parameters"]
        unknown = set(arguments) - set(params["properties"])
        missing = lacking(schema, arguments)
        if unknown:
            return {"ok": False, "error": f"{name} takes no argument {sorted(unknown)[0]!r}."}
        if missing:
            return {"ok": False, "error": f"{name} needs the {spoken_list(missing)}."}
        args = {k: v for k, v in arguments.items() if v not in (None, "")}
        if any(not isinstance(v, str) for v in args.values()):
            return {"ok": False, "error": f"{name} takes text arguments."}
        try:
            return {"ok": True, **getattr(self, "_" + name)(**args)}
        except Refusal as exc:
            return {"ok": False, "error": str(exc)}
        except sqlite3.Error as exc:  # a read-only, full or locked file: the caller is told, the call goes on
            log.error("%s failed in the appointments store: %s", name, exc)
            return {"ok": False, "error": STORE_DOWN}

    # -- rules ----------------------------------------------------------------------------------------------

    def _service(self, name: str) -> Service:
        service = named_service(self.profile, name)
        if service is None:
            offered = spoken_list([s.name for s in self.profile.services])
            raise Refusal(f"We don't offer {name.strip().lower()}. We offer {offered}.")
        return service

    # -- tools (arguments already checked against the schema) -----------------------------------------------

    def _business_info(self, topic: str, day: str | None = None, service: str | None = None) -> dict:
        topic = topic.strip().lower()
        p = self.profile
        if topic == "hours":
            if day:
                d = self._day(day)
                hours = p.hours[WEEKDAYS[d.weekday()]]
                text = "closed" if hours is None else f"{time_text(hours[0])} to {time_text(hours[1])}"
                return {"day": d.strftime("%A"), "hours": text}
            return {"hours": self._week_hours_text()}
        if topic == "address":
            return {"address": p.address}
        if topic == "phone":
            return {"phone": p.phone}
        if topic == "services":
            asked = named_service(p, service) if service else None   # first: the reply names it first
            return {"services": spoken_list([s.name for s in sorted(p.services, key=lambda s: s != asked)])}
        if topic == "prices":
            if service:
                s = self._service(service)
                return {"service": s.name, "price": p.price_text(s), "duration": f"{s.duration_min} minutes"}
            return {"prices": spoken_list([f"{s.name} {p.price_text(s)}" for s in p.services])}
        raise Refusal(f"I can tell you about {spoken_list(list(TOPICS))}, not {topic!r}.")

    def _week_hours_text(self) -> str:
        """'Tuesday to Wednesday 9:00 AM to 6:00 PM, ...; closed Sunday and Monday': days with equal hours grouped."""
        groups, closed = [], []
        for day in WEEKDAYS:
            hours = self.profile.hours[day]
            if hours is None:
                closed.append(day.capitalize())
            elif groups and groups[-1][2] == hours and WEEKDAYS.index(groups[-1][1]) + 1 == WEEKDAYS.index(day):
                groups[-1][1] = day
            else:
                groups.append([day, day, hours])
        parts = [(a.capitalize() if a == b else f"{a.capitalize()} to {b.capitalize()}")
                 + f" {time_text(h[0])} to {time_text(h[1])}" for a, b, h in groups]
        return ", ".join(parts) + (f"; closed {spoken_list(closed)}" if closed else "")

    def _check_availability(self, day: str, time: str | None = None) -> dict:
        d, slots = self._day(day), self.slots
        shortest = slots.shortest_min()
        if time is None:
            free = slots.free_ranges(d, shortest)
            closes = datetime.combine(d, slots.hours_on(d)[1])
            if not free and self.now() > closes - timedelta(minutes=shortest):
                # not "fully booked": the day is over ("anything open Friday afternoon?" at 8:30 PM on Friday)
                raise Refusal("We're closed for the rest of today.")
            return {"day": date_text(d), "free": spoken_list(free) if free else "nothing"}
        start = datetime.combine(d, parse_time(time))
        slots.check_slot(start, shortest)
        taken = slots.overlaps(start, shortest)
        result = {"when": when_text(start), "available": not taken}
        if taken:
            result["free"] = slots.nearest_text(start, shortest) or "nothing"
        return result

    def _book_appointment(self, name: str, day: str, time: str, service: str) -> dict:
        """A booking; one that names the service a caller already has upcoming, once, under the same name (case and
        accents aside), at another time moves it there ("actually can you make that 3 instead?" after a haircut
        booked at 2 had left both; "can you move my appointment to friday at 3?"), and one at the same time is the
        booking they have."""
        s = self._service(service)
        start = datetime.combine(self._day(day), parse_time(time))
        self.slots.check_slot(start, s.duration_min)
        booked, found = self._booked(name, whole=True)
        same = [a for a in found if a.service == s.name]
        try:
            if len(same) == 1 and same[0].start != start:
                self.store.move(same[0], start)
            elif not any(a.start == start for a in same):
                self.store.add(name, s.name, start, s.duration_min)
                booked = name.strip()
        except ValueError:
            raise self.slots.taken(start, s.duration_min) from None
        return {"name": booked, "service": s.name, "when": when_text(start), "price": self.profile.price_text(s)}

    def _booked(self, name: str, whole: bool = False) -> tuple[str, list[Appointment]]:
        """The upcoming appointments of the person `name` means, and the name they were booked under: the one
        booked under that very name (case and accents aside: "garcia" is "García"), else, unless `whole`, the one
        person whose booked name holds every word of it. A caller gives a part of their name as often as all of it
        ("what appointments do I have? Ahmed Haddad" had the model look up "Haddad", and find nothing). Several
        people holding those words -> Refusal that asks for the whole name (nobody hears another's bookings).
        A change (a cancellation, a move) takes the whole name: "Ahmed" may be another Ahmed."""
        words = name_words(name)
        people: dict[tuple, list[Appointment]] = {}
        for a in self._upcoming():
            people.setdefault(name_words(a.name), []).append(a)
        found = people.get(words, [])
        if not found and not whole and words:
            holding = [found for booked, found in people.items() if holds(booked, words)]
            if len(holding) > 1:
                raise Refusal(f"More than one person is booked under {name.strip()}. What is the whole name?")
            found = holding[0] if holding else []
        return (found[0].name if found else name.strip()), found

    def _cancel_appointment(self, name: str, day: str | None = None, time: str | None = None) -> dict:
        """A cancellation of the one booking under the whole `name` on `day` at `time` (each if given). A time
        the caller gives that no booking of theirs has is refused, not ignored: the model cancelled "I'll call
        back at 4, bye" and "can we make that 4 instead?" (the caller's words held the call to the time said,
        app.agent.held), and the caller lost the booking at 3."""
        name, found = self._booked(name, whole=True)
        if not found and any(holds(name_words(a.name), name_words(name)) for a in self._upcoming()):
            raise Refusal(f"No appointment is booked under {name} alone. What is the whole name?")
        if day:
            d = self._day(day)
            found = [a for a in found if a.start.date() == d]
        at = parse_time(time) if time else None
        if at is not None:
            found = [a for a in found if a.start.time() == at]
        if not found:
            on = f" on {self._day(day).strftime('%A')}" if day else ""
            at_text = f" at {time_text(at)}" if at is not None else ""
            raise Refusal(f"There is no appointment under {name}{on}{at_text}.")
        if len(found) > 1:
            listed = spoken_list([_appointment_text(a) for a in found])
            raise Refusal(f"{name} has {len(found)} appointments: {listed}.")
        self.store.remove(found[0].id)
        return {"name": name, "cancelled": _appointment_text(found[0])}

    def _list_appointments(self, name: str) -> dict:
        name, found = self._booked(name)
        return {"name": name, "appointments": [_appointment_text(a) for a in found]}

    def _upcoming(self) -> list[Appointment]:
        """Every appointment from now on, by start time."""
        return self.store.upcoming(self.now())

    def _current_datetime(self, day: str | None = None) -> dict:
        """Today's date and the time, or the date of the day asked ("and what day is tomorrow?"), and nothing more.

        NOTE: from 2026-12-03 to 2026-12-06 the result named tomorrow beside today ("tomorrow": "Sunday the 6th"),
        for the tomorrow questions. The shipped adapter was never trained on a third value. In the afternoon it read
        that value on after the date: "It's 4:05 PM on Saturday, December 5 and is taken Sunday the 6th." That
        happened at 12 of 36 clock times for "what time is it?" and 20 of 36 for "what's today's date?". It still
        answered "and what day is tomorrow?" with today's date at 33 of 36. A day said in the question is now the
        tool's argument, which the reply grammar holds the call to (`held`). The day's date alone reads "It's Sunday,
        December 6." at 20 of 20 clock times, and "what's the date this friday?" the same. Today's date and the time
        run on at none of the 36."""
        now = self.now()
        if day is not None:
            return {"date": date_text(resolve_day(day, now.date()))}
        return {"date": date_text(now.date()), "time": time_text(now.time())}

    def _transfer_to_human(self) -> dict:
        return {"action": "transfer_to_human"}

    def _end_call(self) -> dict:
        return {"action": "end_call"}


def _appointment_text(a: Appointment) -> str:
    return f"{a.service} on {when_text(a.start)}"
