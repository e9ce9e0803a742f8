"""Which clock times a transcript may mean: "3:30 p.m." -> 15:30, "three thirty" -> 03:30 or 15:30.

The reply grammar (app.agent.held.held) holds a tool call's `time` to the times the caller said, so the model
chooses between readings of what it heard (morning or afternoon) and never writes a time nobody said.
This reads times the way Whisper writes them: digits ("3:30 p.m.", "10am", "7:15"), words ("three thirty",
"one forty-five in the afternoon", "eleven o'clock"), "half past four", "quarter to two", "noon". A time without
a.m./p.m. or a part of the day ("in the evening") may be either, and both readings are kept.
"""
import re
from datetime import time

_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}
_HOUR_WORDS = {w: i for i, w in enumerate(_UNITS[1:13], start=1)} | {"noon": 12, "midday": 12, "midnight": 0}
_MORNING = {"am", "morning"}
_AFTERNOON = {"pm", "afternoon", "evening", "night", "tonight", "noon"}  # "12 noon"
_OFFSETS = {5, 10, 20, 25}  # "ten past six", "twenty five to four" (besides half and quarter)
_PAST, _TO = {"past", "after"}, {"to", "till", "before", "of"}
_NOT_A_TIME_BEFORE = {"the", "that", "this", "which", "first", "second", "last", "later", "earlier", "other",
                      "another", "no", "any", "each", "every"}
_AT_A_TIME = {"at", "around"}  # a bare hour after these is said as a time: "at 10", "around two"
_MONTHS = {"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"}
_ORDINAL_ENDS = {"st", "nd", "rd", "th"}
# a number before a unit of time counts it: "15 minutes late", "in 20 minutes", "my son is 6 years old"
_DURATIONS = {"min", "mins", "minute", "minutes", "hr", "hrs", "hour", "hours", "day", "days", "week", "weeks",
              "month", "months", "year", "years"}
_AT_DIGITS = re.compile(r"\b([Aa]t|[Aa]round) (\d{1,2})\.?(\d{2})\b(?![.,:]\d| +[A-Z])")
# Whisper's digits for a clock said in words with nothing after it but am/pm or a clause's end: "Could I do like,
# 530?" ("five thirty"), "1030am"; not a price ("$530"), a count before its noun ("120 dollars") or a number inside
# one ("555-0142")
_COMPACT_CLOCK = re.compile(r"(?<![$#\d.,:-])\b(\d{1,2})(\d{2})(?=\s?[ap]m\b|[,?!]|\.(?!\d)|$)")
_ISH = re.compile(r"\b(" + "|".join(_UNITS[1:13]) + r")ish\b")  # "tenish": Whisper's one word for "ten-ish"
_WORD = re.compile(r"\d{1,2}:\d{2}|\d+|[a-z]+(?:'[a-z]+)?|[,.?!;]")  # a mark ends a time: "Ten, ten."


def _on_a_clock(hour: str, minute: str) -> bool:
    """Whether digits read as an hour of a 12-hour clock and its minutes ("10", "30"; not "20", "26" of 2026)."""
    return 1 <= int(hour) <= 12 and int(minute) <= 59


def _words(text: str) -> list[str]:
    # "at 4.15", "at 1030": Whisper's digits for "at four fifteen", "at ten thirty", a clock after "at" or "around";
    # but not before a name ("We're at 214 Maple Street" read as 2:14 took the next turn for a booking)
    text = _AT_DIGITS.sub(lambda m: f"{m[1]} {m[2]}:{m[3]}" if _on_a_clock(m[2], m[3]) else m[0], text)
    text = re.sub(r"(?:(?<=\d)|\b)([ap])\.?\s?m\b\.?", r"\1m", text.lower())  # "p.m." "p.m" "p m" -> "pm"
    text = _COMPACT_CLOCK.sub(lambda m: f"{m[1]}:{m[2]}" if _on_a_clock(m[1], m[2]) else m[0], text)
    text = _ISH.sub(r"\1 ish", text)
    # "3.30pm": Whisper's British clock (the spoken "three thirty p.m." of tests/integration/test_agent_model.py), only
    # before am/pm, so "$3.30" and "2.5" stay numbers
    text = re.sub(r"\b(\d{1,2})\.(\d{2})(?=\s?[ap]m\b)", r"\1:\2", text)
    return _WORD.findall(text.replace("-", " "))


def _number(words: list[str], i: int, most: int) -> tuple[int, int] | None:
    """(value, words read) of a number 1..most written in digits or words at words[i] ("forty five": 45)."""
    if i >= len(words):
        return None
    w = words[i]
    if w.isdigit():
        value, read = int(w), 1
    elif w in _TENS:
        value, read = _TENS[w], 1
        if i + 1 < len(words) and words[i + 1] in _UNITS[1:10]:
            value, read = value + _UNITS.index(words[i + 1]), 2
    elif w in _UNITS[1:]:
        value, read = _UNITS.index(w), 1
    else:
        return None
    return (value, read) if 1 <= value <= most else None


def _hour(words: list[str], i: int) -> tuple[int, int, int] | None:
    """(hour, minute, words read) of a clock reading at words[i]: "3:30", "three thirty", "ten o'clock", "noon"."""
    w = words[i]
    if ":" in w:
        hour, minute = map(int, w.split(":"))
        return (hour, minute, 1) if hour <= 23 and minute <= 59 else None
    if w in ("noon", "midday", "midnight"):
        return _HOUR_WORDS[w], 0, 1
    if w.isdigit():
        hour = int(w)
        if hour > 23:
            return None
    elif w in _HOUR_WORDS:
        hour = _HOUR_WORDS[w]
    else:
        return None
    nxt = words[i + 1] if i + 1 < len(words) else ""
    if i and words[i - 1] in _MONTHS or nxt in _ORDINAL_ENDS:
        return None  # a day of the month: "December 2", "the 3rd"
    if nxt in _DURATIONS:
        return None  # a length of time: "15 minutes", "two hours"
    if nxt == "o'clock":
        return hour, 0, 2
    after = words[i + 2] if i + 2 < len(words) else ""
    if w.isdigit() and len(nxt) == 2 and nxt.isdigit() and int(nxt) <= 59 and (
            after in ("am", "pm") or i and words[i - 1] in _AT_A_TIME):
        # Whisper's "3 30 p.m.", "at 2 30" for "two thirty" (only before am/pm or after "at": "2 30-minute slots"
        # stays numbers)
        return hour, int(nxt), 2
    if nxt == "oh" and not w.isdigit():  # "nine oh five"
        minute = _number(words, i + 2, 9)
        if minute:
            return hour, minute[0], 2 + minute[1]
    if not w.isdigit() and not nxt.isdigit():  # "three thirty", "one forty five"
        minute = _number(words, i + 1, 59)
        if minute and minute[0] >= 10:
            return hour, minute[0], 1 + minute[1]
    if not w.isdigit() and (nxt == "of" or i and _choosing(words[i - 1]) or _chosen_by(words, i)):
        # a bare "one" in "the later one", "that one", "one of those", "the earliest one", "the saturday one": a choice
        return None
    return hour, 0, 1


def _chosen_by(words: list[str], i: int) -> bool:
    """Whether the word hour at words[i] is a choice two words on from a word that picks one ("the saturday one",
    "that early one"), with no hour's part of the day after it ("this friday one pm" is a time)."""
    return (i > 1 and _choosing(words[i - 2]) and words[i - 1].isalpha() and words[i - 1] not in _AT_A_TIME
            and _part_of_day(words, i + 1) is None)


def _choosing(word: str) -> bool:
    """Whether `word` picks one of several, as "the", "that", "other" and superlatives do."""
    return word in _NOT_A_TIME_BEFORE or _superlative(word)


def _superlative(word: str) -> bool:
    """Whether `word` ends as an English superlative does ("earliest", "latest", "soonest"): "I'll take the earliest
    one", offered the free times of a day, checked 1:00 PM."""
    return len(word) > 4 and word.endswith("est")


def _relative(words: list[str], i: int) -> tuple[int, int, int, int] | None:
    """(hour, minutes, words read, -1 if before the hour else 0) of "half past four", "quarter to two",
    "ten past six": the hour named, and the minutes past it or, with -1, the minute of the hour before it."""
    w = words[i]
    if w == "half":
        offset, read = 30, 1
    elif w == "quarter":
        offset, read = 15, 1
    else:
        number = _number(words, i, 25)
        if number is None or number[0] not in _OFFSETS:
            return None
        offset, read = number
    if i + read + 1 >= len(words) or words[i + read] not in _PAST | _TO:
        return None
    before = words[i + read] in _TO
    if w == "half" and before:
        return None
    hour = _hour(words, i + read + 1)
    if hour is None or hour[1] != 0:
        return None
    return hour[0], 60 - offset if before else offset, read + 1 + hour[2], -1 if before else 0


def _part_of_day(words: list[str], i: int) -> str | None:
    """"am" or "pm" when a.m./p.m. or a part of the day ("in the morning", "this evening") follows at words[i]."""
    for w in words[i:i + 3]:
        if w in _MORNING:
            return "am"
        if w in _AFTERNOON:
            return "pm"
        if w not in ("in", "the", "at", "this"):
            return None
    return None


def says_today(text: str) -> bool:
    """Whether `text` names today by a part of it: "tonight", "this afternoon" (morning, evening), "right now"."""
    words = _words(text)
    pairs = set(zip(words, words[1:]))
    return "tonight" in words or ("right", "now") in pairs or \
        any(("this", part) in pairs for part in ("morning", "afternoon", "evening"))


def times_in(text: str, open_at=None, clock_only: bool = False) -> set[str]:
    """Every "HH:MM" (24-hour) that a time in `text` may mean. open_at(datetime.time) -> bool: of a morning and an
    afternoon reading ("quarter to four"), the one the business is open at, when it is open at just one.
    clock_only: only times said as clock times, not a bare number that may be one ("book one", "two kids"): with
    minutes, o'clock, a.m./p.m. or a part of the day, "half past", "noon", or an hour said as one ("at 10",
    "around two", "ten-ish")."""
    words = _words(text)
    found = set()
    i = 0
    while i < len(words):
        reading = _relative(words, i)
        relative = reading is not None
        if reading is None:
            clock = _hour(words, i)
            if clock is None:
                i += 1
                continue
            reading = (*clock, 0)
        hour, minute, read, shift = reading
        part = _part_of_day(words, i + read)
        after = words[i + read] if i + read < len(words) else ""
        if clock_only and not (relative or read > 1 or part or ":" in words[i] or after == "ish"
                               or i and words[i - 1] in _AT_A_TIME or words[i] in ("noon", "midday", "midnight")):
            i += read
            continue
        if hour > 12 or words[i].startswith("0") or words[i] in ("noon", "midday", "midnight"):
            hours = {hour}  # a 24-hour reading, or noon and midnight
        elif part == "am":
            hours = {hour % 12}
        elif part == "pm":
            hours = {hour % 12 + 12}
        else:
            hours = {hour % 12, hour % 12 + 12}
        readings = [time((h + shift) % 24, minute) for h in hours]
        if open_at is not None and len(readings) == 2 and open_at(readings[0]) != open_at(readings[1]):
            readings = [t for t in readings if open_at(t)]
        found |= {t.strftime("%H:%M") for t in readings}
        i += read
    return found
