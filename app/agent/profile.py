"""The business profile: name, hours, address, phone, services. Loaded from YAML; a default ships with Parley."""
from dataclasses import dataclass
from datetime import time
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

DEFAULT_PROFILE = Path(__file__).resolve().parents[1] / "profiles" / "default.yaml"  # app/profiles
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


@dataclass(frozen=True)
class Service:
    name: str                     # canonical name, the `service` argument of book_appointment
    duration_min: int
    price: float                  # in the profile's currency
    aliases: tuple[str, ...] = ()  # other words callers use for it ("trim" for "haircut")


@dataclass(frozen=True)
class Profile:
    name: str
    timezone: str                 # IANA name; days and times are resolved in it
    address: str
    phone: str
    hours: dict                   # weekday name -> (open, close) as datetime.time, or None when closed
    services: tuple[Service, ...]
    currency: str = "$"

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def service(self, name: str) -> Service | None:
        """The service called `name` (canonical name or alias, any case), or None."""
        key = " ".join(name.lower().split())
        for s in self.services:
            if key == s.name or key in s.aliases:
                return s
        return None

    def open_at(self, t: time) -> bool:
        """Is the business open at `t` on some day of the week?"""
        return any(hours[0] <= t < hours[1] for hours in self.hours.values() if hours)

    def price_text(self, service: Service) -> str:
        return f"{self.currency}{service.price:g}"


def _fail(path, field, why) -> ValueError:
    return ValueError(f"{path}: field '{field}' {why}")


def _parse_hhmm(text: str, path, field) -> time:
    try:
        hh, mm = text.strip().split(":")
        return time(int(hh), int(mm))
    except ValueError:
        raise _fail(path, field, f"has {text!r}; expected HH:MM on a 24-hour clock") from None


def _parse_hours(raw, path) -> dict:
    if not isinstance(raw, dict):
        raise _fail(path, "hours", "must map each weekday to 'HH:MM-HH:MM' or 'closed'")
    unknown = set(map(str.lower, raw)) - set(WEEKDAYS)
    if unknown:
        raise _fail(path, "hours", f"has unknown days {sorted(unknown)}; valid: {', '.join(WEEKDAYS)}")
    hours = {}
    for day in WEEKDAYS:
        value = {k.lower(): v for k, v in raw.items()}.get(day, "closed")
        field = f"hours.{day}"
        if value is None or str(value).strip().lower() == "closed":
            hours[day] = None
            continue
        if "-" not in str(value):
            raise _fail(path, field, f"has {value!r}; expected 'HH:MM-HH:MM' or 'closed'")
        start, end = str(value).split("-", 1)
        opens, closes = _parse_hhmm(start, path, field), _parse_hhmm(end, path, field)
        if closes <= opens:
            raise _fail(path, field, f"closes ({end}) before it opens ({start})")
        hours[day] = (opens, closes)
    return hours


def _parse_services(raw, path) -> tuple[Service, ...]:
    if not isinstance(raw, list) or not raw:
        raise _fail(path, "services", "must be a non-empty list of {name, duration_min, price}")
    services = []
    for i, item in enumerate(raw):
        field = f"services[{i}]"
        if not isinstance(item, dict) or not item.get("name"):
            raise _fail(path, field, "needs a name")
        try:
            duration_min, price = int(item["duration_min"]), float(item["price"])
        except (KeyError, TypeError, ValueError):
            raise _fail(path, field, "needs a whole duration_min and a numeric price") from None
        if duration_min <= 0:
            raise _fail(path, f"{field}.duration_min", "must be positive")
        aliases = tuple(" ".join(str(a).lower().split()) for a in item.get("aliases") or ())
        services.append(Service(" ".join(str(item["name"]).lower().split()), duration_min, price, aliases))
    return tuple(services)


def parse_profile(data: dict, path="<profile>") -> Profile:
    """A Profile from a YAML mapping; a missing or bad field -> ValueError naming `path` and the field."""
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a YAML mapping with name, timezone, hours, services")
    for field in ("name", "timezone", "address", "phone"):
        if not isinstance(data.get(field), (str, int)) or not str(data[field]).strip():
            raise _fail(path, field, "is missing or empty")
    try:
        ZoneInfo(str(data["timezone"]))
    except (ZoneInfoNotFoundError, ValueError):
        raise _fail(path, "timezone", f"has unknown zone {data['timezone']!r} (use an IANA name)") from None
    return Profile(
        name=str(data["name"]).strip(),
        timezone=str(data["timezone"]),
        address=str(data["address"]).strip(),
        phone=str(data["phone"]).strip(),
        hours=_parse_hours(data.get("hours"), path),
        services=_parse_services(data.get("services"), path),
        currency=str(data.get("currency", "$")),
    )


def load_profile(path: str | None = None) -> Profile:
    """The profile in the YAML file at `path`; None = the shipped default."""
    file = Path(path) if path else DEFAULT_PROFILE
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{file}: cannot read the profile ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{file}: not valid YAML: {problem}{where}") from None
    return parse_profile(data, file)
