"""A business's appointment book as times: the opening hours of a day, the slot grid free times are offered on, what
is in a slot's way, and the refusals a front desk says about a time ("On Saturday we're open 9:00 AM to 4:00 PM.",
"2:00 PM is already taken. The nearest free times are ..."). app.agent.tools's booking and availability tools read
them.
"""
import math
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Callable

from app.agent.days import Refusal, time_text, when_text
from app.agent.profile import WEEKDAYS, Profile, Service
from app.agent.store import Appointment, Store

SLOT_MIN = 30  # availability is offered on this grid, in minutes


def spoken_list(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@dataclass(frozen=True)
class Slots:
    profile: Profile
    store: Store
    now: Callable[[], datetime]   # naive local wall-clock time of the business

    def hours_on(self, d: date) -> tuple[time, time]:
        """(opens, closes) on `d`; Refusal on a day the business is closed."""
        hours = self.profile.hours[WEEKDAYS[d.weekday()]]
        if hours is None:
            raise Refusal(f"We're closed on {d.strftime('%A')}s.")
        return hours

    def shortest_min(self) -> int:
        return min(s.duration_min for s in self.profile.services)

    def check_slot(self, start: datetime, duration_min: int) -> None:
        """Refusal unless `duration_min` from `start` lies within opening hours, later than now."""
        opens, closes = self.hours_on(start.date())
        end = start + timedelta(minutes=duration_min)
        if start.time() < opens or end > datetime.combine(start.date(), closes):
            raise Refusal(f"On {start.strftime('%A')} we're open {time_text(opens)} to {time_text(closes)}.")
        if start < self.now():
            raise Refusal(f"{when_text(start)} has already passed.")

    def check_free(self, start: datetime, service: Service | None) -> None:
        """Refusal unless `service` (else the shortest) fits in opening hours at `start`, later than now, with
        nothing booked in its way."""
        duration = service.duration_min if service else self.shortest_min()
        self.check_slot(start, duration)
        if self.overlaps(start, duration):
            raise self.taken(start, duration)

    def overlaps(self, start: datetime, duration_min: int) -> bool:
        """Whether an appointment on the book runs into `duration_min` minutes from `start`."""
        return _in_way(self.store.on_date(start.date()), start, start + timedelta(minutes=duration_min))

    def taken(self, start: datetime, duration_min: int) -> Refusal:
        """The refusal of a slot someone else holds, with the nearest free times."""
        nearest = self.nearest_text(start, duration_min)
        return Refusal(f"{when_text(start)} is already taken. The nearest free times are {nearest}." if nearest
                       else f"{when_text(start)} is already taken, and that day is fully booked.")

    def nearest_text(self, start: datetime, duration_min: int) -> str:
        """The two free start times nearest `start` on its day, said: '1:30 PM and 3:00 PM'; '' for none."""
        free = sorted(self.free_starts(start.date(), duration_min), key=lambda t: abs(t - start))[:2]
        return spoken_list([time_text(t.time()) for t in sorted(free)]) if free else ""

    def free_starts(self, d: date, duration_min: int) -> list[datetime]:
        """Start times on the slot grid where `duration_min` fits in opening hours, later than now, unbooked."""
        opens, closes = self.hours_on(d)
        booked = self.store.on_date(d)
        t, last = datetime.combine(d, opens), datetime.combine(d, closes) - timedelta(minutes=duration_min)
        free = []
        while t <= last:
            if t >= self.now() and not _in_way(booked, t, t + timedelta(minutes=duration_min)):
                free.append(t)
            t += timedelta(minutes=SLOT_MIN)
        return free

    def free_ranges(self, d: date, min_length_min: int) -> list[str]:
        """Unbooked stretches of opening hours on `d` from now on, at least `min_length_min` long: '9:00 AM to 11:00
        AM'."""
        opens, closes = self.hours_on(d)
        t, close = datetime.combine(d, opens), datetime.combine(d, closes)
        if t < self.now():  # from the first grid point not before now
            t += timedelta(minutes=math.ceil((self.now() - t).total_seconds() / 60 / SLOT_MIN) * SLOT_MIN)
        ranges = []
        for a in self.store.on_date(d) + [Appointment(0, "", "", close, 0)]:
            end = min(a.start, close)
            if end - t >= timedelta(minutes=min_length_min):
                ranges.append(f"{time_text(t.time())} to {time_text(end.time())}")
            t = max(t, a.end)
        return ranges


def _in_way(booked: list[Appointment], start: datetime, end: datetime) -> bool:
    """Whether one of the `booked` appointments runs into the time from `start` to `end`."""
    return any(a.start < end and start < a.end for a in booked)
