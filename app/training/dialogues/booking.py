"""Booking dialogues: a request with some slots, questions for the missing ones, the call, and what follows a refusal."""
import re
from datetime import datetime, time, timedelta

from app.agent.days import parse_time
from app.agent.profile import WEEKDAYS
from app.training.dialogues import templates as T
from app.training.dialogues.replies import ASK_DAY, ASK_NAME, ASK_OTHER_NAME, ASK_SERVICE, ask_time
from app.training.dialogues.script import Script, sentence

_TIME_TEXT = re.compile(r"(\d{1,2}):(\d{2}) (AM|PM)")
OUTCOMES = {"ok": 0.55, "taken": 0.17, "unknown": 0.08, "closed": 0.07, "outside": 0.08, "past": 0.05}


def choose_slot(s: Script, outcome: str, duration_min: int) -> tuple[str, datetime]:
    """A (day, start) that leads the real tool to `outcome` (ok/taken/closed/outside/past)."""
    if outcome == "closed":
        closed = [d for d in WEEKDAYS if s.profile.hours[d] is None]
        if closed:
            day = s.rng.choice(closed)
            return day, datetime.combine(s.date_of(day), s.rng.choice(OPEN_TIMES))
        outcome = "outside"
    if outcome == "past" and s.hours("today") and s.now.time() > s.hours("today")[0]:
        opens = datetime.combine(s.now.date(), s.hours("today")[0])
        minutes = int((s.now - opens).total_seconds() // 60) // 15
        if minutes >= 2:
            return "today", opens + timedelta(minutes=15 * s.rng.randrange(0, minutes - 1))
    if outcome in ("past", "outside"):
        day = s.day()
        opens, closes = s.hours(day)
        d = s.date_of(day)
        early = [datetime.combine(d, opens) - timedelta(minutes=m) for m in (30, 60, 90, 120)]
        late = [datetime.combine(d, closes) + timedelta(minutes=m) for m in (0, 30, 60, 120)]
        return day, s.rng.choice([t for t in early + late if 7 <= t.hour <= 21] or early)
    for _ in range(50):
        day = s.day()
        starts = s.free_times(day, duration_min)
        if starts:
            return day, s.rng.choice(starts)
    raise ValueError("no free time in the coming week to write a booking dialogue")


OPEN_TIMES = [datetime(2000, 1, 1, h, m).time() for h in range(9, 18) for m in (0, 30)]


def fill_day(s: Script, day: str, keep: datetime, n: int) -> None:
    """Up to `n` other bookings on `day` that leave `keep` (a start) free, so free ranges vary."""
    for _ in range(n):
        starts = [t for t in s.free_times(day, 30) if abs(t - keep) >= timedelta(minutes=120)]
        if starts:
            s.book_existing(s.name(), s.rng.choice(s.profile.services).name, s.rng.choice(starts))


# refusals of a booking's details a caller answers with another one before the questions go on (a business open an
# hour a week, its hour passed, refuses every day and time)
REFUSALS_ANSWERED = 3


def booking(s: Script, asked: str | None = None) -> None:
    """A booking request, its slot questions, the call, and maybe a second try after a refusal. `asked`: a
    service the caller just asked about, which the request names or calls "it" ("Okay, can I book it for
    Friday at 2?")."""
    outcome = s.rng.choices(list(OUTCOMES), weights=list(OUTCOMES.values()))[0]
    if asked is not None:
        outcome = "ok" if outcome == "unknown" else outcome
        service = asked
        service_said = s.rng.choice(("it", "that", "one", s.with_article(asked)))
    else:
        service, service_said = s.unknown_service() if outcome == "unknown" else s.service()
    known = s.profile.service(service)
    day, start = choose_slot(s, outcome if outcome != "unknown" else "ok", known.duration_min if known else 30)
    if s.hours(day):
        fill_day(s, day, start, s.rng.randrange(0, 3))
    if outcome == "taken":
        offset = timedelta(minutes=s.rng.choice((0, 0, -15, 15)))
        if not s.book_existing(s.name(), s.rng.choice(s.profile.services).name, start + offset):
            s.book_existing(s.name(), s.profile.services[0].name, start)
    name = s.name()
    slots = {"service": service_said, "day": day, "time": start, "name": name}
    given = set(slots) if s.rng.random() < 0.45 else {k for k in slots if s.rng.random() < 0.5}
    if asked is not None:
        given.add("service")
    s.user(request_text(s, slots, given), "book")
    args = {"name": name, "day": day, "time": start.strftime("%H:%M"), "service": service}
    if not ask_missing(s, slots, given, args):
        return
    result = s.call("book_appointment", args)
    if not result["ok"] and s.rng.random() < 0.6:
        retry(s, args, result)
    elif result["ok"] and s.call_turns and s.rng.random() < 0.3:
        another_person(s, args)


def request_text(s: Script, slots: dict, given: set) -> str:
    """The caller's first words: opener, maybe their name, the request with the given slots."""
    name_first = "name" in given and s.rng.random() < 0.4
    core = s.pick(T.BOOK_WITH_SERVICE).format(service=slots["service"]) if "service" in given \
        else s.pick(T.BOOK_NO_SERVICE)
    when = ""
    if {"day", "time"} <= given:
        when = s.pick(T.WHEN).format(day=s.say_day(slots["day"]), time=s.say_time(slots["time"].time()))
    elif "day" in given:
        when = s.pick(T.DAY_ONLY).format(day=s.say_day(slots["day"]))
    elif "time" in given:
        when = s.pick(T.TIME_ONLY).format(time=s.say_time(slots["time"].time()))
    parts = [s.pick(T.OPENERS)]
    if name_first:
        parts.append(s.pick(T.NAME_FIRST).format(name=slots["name"]))
    parts.append(sentence(core, when))
    if "name" in given and not name_first:
        parts.append(s.pick(T.NAME_LAST).format(name=slots["name"]))
    return " ".join(p for p in parts if p)


def ask_missing(s: Script, slots: dict, given: set, args: dict) -> bool:
    """Ask for each missing slot in order service, day, time, name (book_appointment's `required` order); the
    caller answers (day and time at once, sometimes). `args`: the booking's arguments, of which the given ones are
    known when the agent asks (Script.ask). A service, day or time the toolbox refuses is refused before the next
    question, and the caller changes it (`changed`, in `args` and `slots`) before the questions go on.
    -> whether every detail was given (False: a refusal ended the request)."""
    given, changes = set(given), REFUSALS_ANSWERED
    for slot in ("service", "day", "time", "name"):
        while slot not in given:
            known = {k: v for k, v in args.items() if k in given}
            question = {"service": ASK_SERVICE, "day": ASK_DAY, "time": ask_time(slots["day"]), "name": ASK_NAME}[slot]
            refused = s.ask(question, "book_appointment", known)
            if refused is not None:
                changes -= 1
                if not changes or not changed(s, args, refused["error"]):
                    return False  # nothing (more) the caller can change here: the refusal ends the request
                slots["day"] = args["day"]
                slots["time"] = datetime.combine(slots["time"].date(), parse_time(args["time"]))
                continue
            if slot == "service":
                s.user(s.pick(T.ANSWER_SERVICE).format(service=slots["service"]), "book")
            elif slot == "day":
                if "time" not in given and s.rng.random() < 0.5:
                    s.user(s.pick(T.ANSWER_DAY_TIME).format(day=s.say_day(slots["day"]),
                                                            time=s.say_time(slots["time"].time())), "book")
                    given.add("time")
                else:
                    s.user(s.pick(T.ANSWER_DAY).format(day=s.say_day(slots["day"])), "book")
            elif slot == "time":
                s.user(s.pick(T.ANSWER_TIME).format(time=s.say_time(slots["time"].time())), "book")
            else:
                s.user(s.pick(T.ANSWER_NAME).format(name=s.said_name(slots["name"])), "book")
            given.add(slot)
    return True


def another_person(s: Script, args: dict) -> None:
    """Someone else in the call wants one too (Style.call_turns), booked under their own name: at the same
    time (taken now: one of the nearest free times offered is taken for them), or at a time of their own, maybe
    for another service. When the caller does not say their name, the agent asks for it."""
    who = s.pick(list(T.WHO))
    them = T.WHO[who]
    name = s.name()
    if " " in args["name"] and " " not in name and s.rng.random() < 0.6:
        name = f"{name} {args['name'].split()[-1]}"  # family
    other = dict(args, name=name)
    unnamed = lambda: {k: v for k, v in other.items() if k != "name"}  # noqa: E731 (the booking as known so far)
    r = s.rng.random()
    if r < 0.45:
        s.user(s.pick(T.SECOND_SAME).format(who=who, name=name), "book")
    elif r < 0.6:
        s.user(s.pick(T.SECOND_NO_NAME).format(who=who), "book")
        refused = s.ask(ASK_OTHER_NAME, "book_appointment", unnamed())
        if refused is not None:  # the time is the first caller's now: the front desk says so before the name
            if not moved_for(s, refused["error"], other, them) or s.ask(ASK_OTHER_NAME, "book_appointment", unnamed()):
                return
        s.user(s.pick(T.ANSWER_NAME).format(name=s.said_name(name)), "book")
    else:
        template = s.pick(T.SECOND_TIME)
        service_said = ""
        if "{service}" in template:
            other["service"], service_said = s.service()
        known = s.profile.service(other["service"])
        starts = s.free_times(args["day"], known.duration_min if known else 30)
        if not starts:  # the day's last start was theirs
            return
        start = s.rng.choice([t for t in starts if t.strftime("%H:%M") != args["time"]] or starts)
        other["time"] = start.strftime("%H:%M")
        s.user(template.format(who=who, name=name, time=s.say_time(start.time()), service=service_said), "book")
    result = s.call("book_appointment", other)
    if not result["ok"] and "nearest" in result["error"] and moved_for(s, result["error"], other, them):
        s.call("book_appointment", other)


def moved_for(s: Script, error: str, other: dict, them: str) -> bool:
    """Someone else's booking refused its time: the caller takes one of the times offered for them (in `other`);
    False when there is none to take."""
    start = offered_time(s, error, other)
    if start is None:
        return False
    other["time"] = start.strftime("%H:%M")
    s.user(s.pick(T.ALTERNATIVE_FOR).format(time=s.say_time(start), them=them), "book")
    return True


def changed(s: Script, args: dict, error: str) -> bool:
    """After a refusal the caller changes the one thing that was wrong (in `args`): another service, another
    day, or for a time taken or outside the hours, one of the nearest free times offered or another that fits
    the day; False when there is nothing to change to."""
    if "don't offer" in error:
        service, said = s.service()
        args["service"] = service
        s.user(s.pick(T.ANSWER_SERVICE).format(service=said), "book")
    elif "closed" in error or "passed" in error:
        day = s.day()
        args["day"] = day
        s.user(s.pick(T.ANSWER_OTHER_DAY).format(day=s.say_day(day)), "book")
    else:
        start = offered_time(s, error, args)
        if start is None:
            return False
        args["time"] = start.strftime("%H:%M")
        s.user(s.pick(T.ANSWER_ALTERNATIVE).format(time=s.say_time(start)), "book")
    return True


def retry(s: Script, args: dict, result: dict) -> None:
    """After a refusal the caller changes the one thing that was wrong, and the agent books again."""
    args = dict(args)
    if changed(s, args, result["error"]):
        s.call("book_appointment", args)


def offered_time(s: Script, text: str, args: dict) -> time | None:
    """One of the nearest free times a refusal offered, else any time that fits the day."""
    offered = _TIME_TEXT.findall(text.split("nearest")[-1]) if "nearest" in text else []
    if offered:
        hour, minute, half = s.rng.choice(offered)
        return time(int(hour) % 12 + (12 if half == "PM" else 0), int(minute))
    known = s.profile.service(args.get("service", ""))
    starts = s.free_times(args["day"], known.duration_min if known else 30)
    return s.rng.choice(starts).time() if starts else None
