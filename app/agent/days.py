"""How the front desk reads and says days and times: the days a tool takes, a clock time parsed from what a model
wrote, and the forms results say them in ("3:30 PM", "Friday, December 4"); and `Refusal`, the
error a tool speaks to the caller, which a day or a time that cannot be read is.
"""
import re
from datetime import date, datetime, time, timedelta

from app.agent.profile import WEEKDAYS

DAYS = ("today", "tomorrow") + WEEKDAYS
_TIME_RE = re.compile(r"^(\d{1,2})(?::(\d{2}))?\s*([ap])?\.?\s*m?\.?$")


class Refusal(Exception):
    """A request the business rules refuse; the message is spoken to the caller."""


def time_text(t: time) -> str:
    """'3:30 PM' for 15:30: how results and replies say a time."""
    return f"{(t.hour - 1) % 12 + 1}:{t.minute:02d} {'AM' if t.hour < 12 else 'PM'}"


def date_text(d: date) -> str:
    """'Friday, December 4'."""
    return f"{d.strftime('%A')}, {d.strftime('%B')} {d.day}"


def when_text(start: datetime) -> str:
    return f"{date_text(start.date())} at {time_text(start.time())}"


def parse_time(value: str) -> time:
    """'15:30' (the normalized form); '3:30 pm' and '15' are accepted too. Bad input -> Refusal."""
    m = _TIME_RE.match(str(value).strip().lower())
    if not m:
        raise Refusal(f"I need the time as HH:MM on a 24-hour clock, not {value!r}.")
    hour, minute = int(m.group(1)), int(m.group(2) or 0)
    if m.group(3) == "p" and hour < 12:
        hour += 12
    elif m.group(3) == "a" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59:
        raise Refusal(f"{value!r} is not a time of day.")
    return time(hour, minute)


def resolve_day(day: str, today: date) -> date:
    """today, tomorrow or a weekday (its next occurrence, today included) -> a date. Bad input -> Refusal."""
    key = str(day).strip().lower()
    if key == "today":
        return today
    if key == "tomorrow":
        return today + timedelta(days=1)
    if key in WEEKDAYS:
        return today + timedelta(days=(WEEKDAYS.index(key) - today.weekday()) % 7)
    try:
        return date.fromisoformat(key)
    except ValueError:
        raise Refusal(f"I need the day as one of {', '.join(DAYS)}, not {day!r}.") from None
