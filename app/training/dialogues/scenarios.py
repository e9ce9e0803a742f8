"""The other dialogues: availability, cancel, look-up, business questions, date and time, transfer, small talk."""
import re
from datetime import datetime, timedelta

from app.agent.profile import WEEKDAYS
from app.agent.schemas import TOPICS
from app.training.dialogues import businesses, phrases
from app.training.dialogues import templates as T
from app.training.dialogues.booking import booking, fill_day, offered_time
from app.training.dialogues.replies import ASK_NAME_FOR_LOOKUP, SMALL_TALK
from app.training.dialogues.script import Script

_SMALL_TALK_LISTS = {"greeting": T.GREETING, "how_are_you": T.HOW_ARE_YOU, "thanks": T.THANKS,
                     "who_are_you": T.WHO_ARE_YOU, "out_of_scope": T.OUT_OF_SCOPE, "compliment": T.COMPLIMENT}
OUT_OF_SCOPE_CATEGORIES = ("ai", "food", "sports", "humor", "trivia", "science", "history", "movies",
                           "literature", "computers", "gossip", "politics", "psychology")


def availability(s: Script) -> None:
    """'Anything free on Friday?' or 'Is 3 pm Friday free?', then maybe a booking from what was offered."""
    day = s.day(open_only=s.rng.random() < 0.9)
    with_time = s.rng.random() < 0.5 and s.hours(day) is not None
    start = s.rng.choice(s.free_times(day, 30) or [None]) if with_time else None
    if s.hours(day):
        fill_day(s, day, start or datetime.combine(s.date_of(day), s.hours(day)[0]), s.rng.randrange(0, 4))
    if start is not None and s.rng.random() < 0.4:
        taken = start + timedelta(minutes=s.rng.choice((0, -15, 15)))
        s.book_existing(s.name(), s.profile.services[0].name, taken)
    args = {"day": day}
    if start is not None:
        args["time"] = start.strftime("%H:%M")
        s.user(s.pick(T.AVAILABILITY_TIME).format(day=s.say_day(day), time=s.say_time(start.time())), "availability")
    else:
        s.user(s.pick(T.AVAILABILITY_DAY).format(day=s.say_day(day)), "availability")
    result = s.call("check_availability", args)
    if not result["ok"] or result.get("free") == "nothing" or s.rng.random() < 0.4:
        follow_ups(s, "check_availability", args, "availability")
        return
    if result.get("available"):
        time_text = args["time"]
        said = ""
    else:
        # a time the agent offered: a nearest free time, or the start of a free range
        starts = [r.split(" to ")[0] for r in re.split(r", | and ", result["free"])]
        t = offered_time(s, "nearest " + " ".join(starts), {"day": day})
        if t is None:
            return
        time_text, said = t.strftime("%H:%M"), s.pick(T.ANSWER_ALTERNATIVE).format(time=s.say_time(t))
    service, service_said = s.service()
    name = s.name()
    s.user(" ".join(filter(None, [said, s.pick(T.ANSWER_YES_BOOK).format(service=service_said, name=name)])), "book")
    s.call("book_appointment", {"name": name, "day": day, "time": time_text, "service": service})


def _existing(s: Script, name: str, count: int) -> list[datetime]:
    """Book `count` appointments for `name` on different days of the coming week."""
    starts = []
    days = [d for d in ("tomorrow", "wednesday", "thursday", "friday", "saturday", "tuesday") if s.free_times(d, 30)]
    s.rng.shuffle(days)
    for day in days[:count]:
        start = s.rng.choice(s.free_times(day, 30))
        if s.book_existing(name, s.rng.choice(s.profile.services).name, start):
            starts.append(start)
    return starts


def _named_request(s: Script, text: str, name: str, intent: str, tool: str, known: dict) -> bool:
    """The caller's request, with their name (True) or without, in which case the agent asks for it (a request
    of `tool`, whose other details `known` the caller gave)."""
    if s.rng.random() < 0.6:
        if s.rng.random() < 0.5:
            s.user(f"{s.pick(T.NAME_FIRST).format(name=name)} {text}", intent)
        else:
            s.user(f"{text} {s.pick(T.NAME_LAST).format(name=name)}", intent)
        return True
    s.user(text, intent)
    s.ask(ASK_NAME_FOR_LOOKUP, tool, known)
    s.user(s.pick(T.ANSWER_NAME).format(name=s.said_name(name)), intent)
    return False


def cancel(s: Script) -> None:
    name = s.name()
    starts = _existing(s, name, s.rng.choices((0, 1, 2), weights=(2, 6, 2))[0])
    args = {"name": name}
    if starts and s.rng.random() < 0.25:
        args["day"] = s.day_key(s.rng.choice(starts).date())
        text = s.pick(T.CANCEL_DAY).format(day=s.say_day(args["day"]))
    else:
        text = s.pick(T.CANCEL)
    _named_request(s, text, name, "cancel", "cancel_appointment", {k: v for k, v in args.items() if k != "name"})
    result = s.call("cancel_appointment", args)
    if not result["ok"] and "appointments:" in result["error"]:
        day = s.day_key(s.rng.choice(starts).date())
        s.user(s.pick(T.WHICH_DAY).format(day=s.say_day(day)), "cancel")
        s.call("cancel_appointment", {"name": name, "day": day})


def look_up(s: Script) -> None:
    """'What appointments do I have?'; with Style.call_turns, then now and then one of them cancelled."""
    name = s.name()
    starts = _existing(s, name, s.rng.choices((0, 1, 2), weights=(2, 5, 3) if s.call_turns else (3, 6, 1))[0])
    _named_request(s, s.pick(T.LIST), name, "list", "list_appointments", {})
    s.call("list_appointments", {"name": name})
    if s.call_turns and starts and s.rng.random() < 0.5:
        cancel_listed(s, name, starts)


def cancel_listed(s: Script, name: str, starts: list[datetime]) -> None:
    """The caller cancels what was just listed: 'cancel it', or one of two by its day ('cancel Friday, but
    keep Tuesday')."""
    days = [WEEKDAYS[start.weekday()] for start in starts]
    if len(starts) == 1:
        s.user(s.pick(T.CANCEL_IT), "cancel")
        s.call("cancel_appointment", {"name": name})
    elif len(set(days)) == len(days):
        drop, keep = s.rng.sample(days, 2)
        s.user(s.pick(T.CANCEL_ONE).format(day=drop.capitalize(), other=keep.capitalize()), "cancel")
        s.call("cancel_appointment", {"name": name, "day": drop})


def business_question(s: Script) -> None:
    topic = s.rng.choice(TOPICS + ("hours",))
    args = {"topic": topic}
    if topic == "hours" and s.rng.random() < 0.6:
        args["day"] = s.day(open_only=False)
        text = s.pick(T.HOURS_DAY).format(day=s.say_day(args["day"]))
    elif topic == "prices" and s.rng.random() < 0.6:
        args["service"], said = _some_service(s)
        asks = T.SERVICE_ASK if s.conversational and s.rng.random() < 0.3 else T.PRICE_ONE  # "do you do X?"
        text = s.pick(asks).format(service=said)
    else:
        lists = {"hours": T.HOURS, "address": T.ADDRESS, "phone": T.PHONE, "services": T.SERVICES,
                 "prices": T.PRICE_ALL}
        text = s.pick(lists[topic])
    s.user(text, "info")
    s.call("business_info", args)
    args = follow_ups(s, "business_info", args, "info")
    if s.call_turns and "day" in args and s.hours(args["day"]) and s.rng.random() < 0.5:
        s.user(s.pick(T.HOURS_FOLLOW_UP), "info")  # "how late does that go?": that day's hours again
        s.call("business_info", args)
    known = s.profile.service(args.get("service", ""))
    if s.conversational and known and s.rng.random() < 0.5:  # then books what they asked about
        booking(s, asked=known.name)


def _some_service(s: Script) -> tuple[str, str]:
    """A service the business has (85%) or one it does not: (the name, how the caller says it)."""
    return s.service() if s.rng.random() < 0.85 else s.unknown_service()


def follow_ups(s: Script, tool: str, args: dict, intent: str) -> dict:
    """With conversational turns, now and then the caller asks the last question again about another service or
    day ("and a blow dry?", "what about Saturday?"): the same call with that argument changed. Returns the last
    call's arguments."""
    key = "service" if "service" in args else "day" if "day" in args else None
    if not s.conversational or key is None:
        return args
    while s.rng.random() < 0.4:
        for _ in range(10):
            if key == "service":
                value, said = _some_service(s)
            else:
                value = s.day(open_only=tool == "check_availability" and s.rng.random() < 0.9)
                said = s.say_day(value)
            if value != args[key]:
                break
        else:
            return args
        args = {**args, key: value}
        s.user(s.pick(T.FOLLOW_UP).format(thing=said), intent)
        s.call(tool, args)
    return args


def date_and_time(s: Script) -> None:
    """The date or the time; with Style.call_turns, now and then tomorrow's date (the tool's day), first or after it."""
    if s.call_turns and s.rng.random() < 0.3:
        s.user(s.pick(T.DATE_TOMORROW), "datetime")
        s.call("current_datetime", {"day": "tomorrow"})
        return
    s.user(s.pick(T.DATETIME), "datetime")
    s.call("current_datetime", {})
    if s.call_turns and s.rng.random() < 0.4:
        s.user(s.pick(T.DATE_TOMORROW), "datetime")
        s.call("current_datetime", {"day": "tomorrow"})


def transfer(s: Script) -> None:
    s.user(s.pick(T.TRANSFER), "transfer")
    s.call("transfer_to_human", {})


def goodbye(s: Script) -> None:
    s.user(s.pick(T.GOODBYE), "goodbye")
    s.call("end_call", {})


def small_talk(s: Script, intent: str) -> None:
    """A small-talk turn; greetings and off-topic questions come from chatterbot-corpus half of the time."""
    pool = s.pick(_SMALL_TALK_LISTS[intent])
    if intent == "compliment" and s.kind:  # the templates' compliments are about hair
        pool = s.rng.choice(businesses.COMPLIMENTS).format(
            service=s.rng.choice(s.profile.services).name, worker=s.kind.worker, place=s.kind.place)
    elif intent == "out_of_scope" and s.rng.random() < 0.5:
        lines = phrases.chatterbot_lines(OUT_OF_SCOPE_CATEGORIES, s.split)
        pool = _sentence_case(s.rng.choice(lines))
    elif intent in ("greeting", "how_are_you") and s.rng.random() < 0.3:
        ours = {x.lower() for x in T.GREETING + T.HOW_ARE_YOU}  # their own split decides these
        lines = [x for x in phrases.chatterbot_lines(("greetings",), s.split)
                 if ("how" in x.lower()) == (intent == "how_are_you") and x.lower() not in ours]
        pool = s.rng.choice(lines) if lines else pool
    s.user(pool, intent)
    s.say(SMALL_TALK[intent].format(business=s.profile.name))


def _sentence_case(text: str) -> str:
    return text.capitalize() if text.isupper() else text

