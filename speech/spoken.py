"""Text as a person says it, for the voice only: "$12.50 at 3:05 PM" -> "twelve dollars and fifty cents at three oh
five PM". Piper reads digits one symbol at a time ("9:00" -> "nine zero zero"); the transcript keeps the digits.

How each kind of number is read:
- clock times: "3:30 PM" / "3:30pm" / "3:30 p.m." -> "three thirty PM", "3:05 PM" -> "three oh five PM", "9:00 AM" /
  "9am" -> "nine AM"; 12:00 PM is "noon" and 12:00 AM "midnight" (what people say; "twelve PM" is often misheard).
  A time written 24-hour ("15:30", "09:00", "0:15") gets its AM/PM ("three thirty PM", "nine AM", "twelve fifteen
  AM"); "9:00" with no AM/PM is just "nine", since the writer may mean either.
- money: "$1,200" -> "one thousand two hundred dollars", "$12.50" -> "twelve dollars and fifty cents",
  "$1.5 million" -> "one point five million dollars" (also euros and pounds).
- phone numbers digit by digit, a comma pause between groups: "(555) 123-4567" -> "five five five, one two three, four
  five six seven".
- dates: "Dec 4th" / "December 4" -> "December fourth"; a year next to a month as a year ("December 4, 2026" ->
  "December fourth, twenty twenty-six"); elsewhere "2026" is a plain number ("two thousand twenty-six").
- street numbers before a capitalized street name the way Americans read them, in pairs: "214 Maple Street" -> "two
  fourteen Maple Street", "1600 Pennsylvania Avenue" -> "sixteen hundred ...".
- ranges: "10-15 minutes" -> "ten to fifteen minutes"; "2026-12-04" -> "December fourth, twenty twenty-six".
- ordinals ("4th" -> "fourth"), percentages ("20%" -> "twenty percent"), "&" -> "and", and every other number as
  cardinal words ("30" -> "thirty", "2.5" -> "two point five").

Everything else, punctuation included, is kept as it is. The output has no digits and no "&", so spoken() of spoken
text changes nothing.
"""
import re

from num2words import num2words

_MONTHS = {m[:3]: m for m in "January February March April May June July August September October November December"
           .split()}  # "Dec" -> "December"
_MONTH = (r"(?P<month>(?:January|February|March|April|May|June|July|August|September|October|November|December)\b"
          r"|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\b\.?)")  # "Dec. 4" -> "December fourth"
_STREET_KINDS = ("Street St Avenue Ave Road Rd Boulevard Blvd Lane Ln Drive Dr Way Court Ct Place Pl Terrace Circle "
                 "Parkway Pkwy Highway Hwy Square Sq").split()
_CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
               "£": ("pound", "pounds", "penny", "pence")}
_DIGIT_WORDS = "zero one two three four five six seven eight nine".split()
_MAX_DIGITS = 15  # longer digit runs are read digit by digit (num2words names numbers only so far)

_NUMBER = r"[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+"  # 1,200 or 1200
_HALF = r"(?P<half>[AaPp]\.[Mm]\.|[AaPp]\.?[Mm](?![A-Za-z]))"  # a.m. / am / AM / a.m

_AMPERSAND = re.compile(r"&")
_READ_OUT = re.compile(r"[0-9&]")  # text without these is spoken as written
_PHONE = re.compile(
    r"(?<![\w$.,-])(?:\+?1[-. ])?(?:\([0-9]{3}\) ?|[0-9]{3}[-.])?[0-9]{3}[-.][0-9]{4}(?![\w-]|[.,][0-9])")
_ISO_DATE = re.compile(r"(?<![0-9-])(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})(?![0-9-])")
_RANGE = re.compile(r"(?<=[0-9]) ?[-–] ?(?=[$€£]?[0-9])")  # "10-15 minutes", "9:00–17:00"
_MONEY = re.compile(rf"(?P<sign>[$€£]) ?(?P<whole>{_NUMBER})(?:\.(?P<fraction>[0-9]+))?"
                    r"(?: (?P<scale>thousand|million|billion|trillion)\b)?")
_CLOCK = re.compile(rf"(?<![0-9:.,])(?P<hour>[0-9]{{1,2}}):(?P<minute>[0-9]{{2}})(?![0-9]|:[0-9])(?: ?{_HALF})?")
_HOUR = re.compile(rf"(?<![0-9:.,])(?P<hour>[0-9]{{1,2}}) ?{_HALF}")
_MONTH_DAY = re.compile(rf"\b{_MONTH}(?P<gap> +)(?P<day>[0-9]{{1,2}})(?:st|nd|rd|th)?(?![0-9A-Za-z:])"
                        r"(?:(?P<before_year>,? +)(?P<year>[0-9]{4})(?![0-9]))?")
_DAY_MONTH = re.compile(rf"(?<![0-9.,])(?P<day>[0-9]{{1,2}})(?:st|nd|rd|th)?(?P<gap> +(?:of +)?){_MONTH}"
                        r"(?:(?P<before_year>,? +)(?P<year>[0-9]{4})(?![0-9]))?")
_MONTH_YEAR = re.compile(rf"\b{_MONTH}(?P<gap>,? +)(?P<year>[0-9]{{4}})(?![0-9])")
_STREET_NUMBER = re.compile(r"(?<![0-9.,$])[0-9]{1,5}(?= +(?:(?:[A-Z][A-Za-z'.-]*|[0-9]+(?:st|nd|rd|th)) +){1,3}"
                            rf"(?:{'|'.join(_STREET_KINDS)})\b)")
_PERCENT = re.compile(rf"(?<![0-9])(?P<number>{_NUMBER})(?:\.(?P<fraction>[0-9]+))? ?%")
_ORDINAL = re.compile(r"(?<![0-9])(?P<number>[0-9]+)(?:st|nd|rd|th|ST|ND|RD|TH)(?![A-Za-z])")
_CARDINAL = re.compile(rf"(?<![0-9])(?P<number>{_NUMBER})(?:\.(?P<fraction>[0-9]+))?")


def spoken(text: str) -> str:
    """`text` with its numbers, times, prices, phone numbers, dates and "&" written out as a person says them."""
    if not _READ_OUT.search(text):
        return text
    text = _AMPERSAND.sub(_padded("and"), text)
    text = _PHONE.sub(_phone, text)
    text = _ISO_DATE.sub(_iso_date, text)
    text = _RANGE.sub(" to ", text)
    text = _MONEY.sub(_money, text)
    text = _CLOCK.sub(_clock, text)
    text = _HOUR.sub(_clock, text)
    text = _MONTH_DAY.sub(_date, text)
    text = _DAY_MONTH.sub(_date, text)
    text = _MONTH_YEAR.sub(lambda m: f"{_MONTHS[m['month'][:3]]}{m['gap']}{_year(m['year'])}", text)
    text = _STREET_NUMBER.sub(lambda m: _year(m[0]) if len(m[0]) <= 4 else _digits(m[0]), text)
    text = _PERCENT.sub(lambda m: f"{_decimal(m['number'], m['fraction'])} percent", text)
    text = _ORDINAL.sub(lambda m: _ordinal(m["number"]), text)
    return _CARDINAL.sub(_padded_number, text)


def _cardinal(number: str) -> str:
    """'1,200' -> 'one thousand two hundred' (American: no 'and', no commas)."""
    digits = number.replace(",", "")
    if len(digits) > _MAX_DIGITS or (len(digits) > 1 and digits.startswith("0")):
        return _digits(digits)  # "007", or too long to name
    return _american(num2words(int(digits)))


def _ordinal(number: str) -> str:
    if len(number) > _MAX_DIGITS:
        return _digits(number)
    return _american(num2words(int(number), to="ordinal"))


def _year(number: str) -> str:
    """'2026' -> 'twenty twenty-six', '1905' -> 'nineteen oh five', '2009' -> 'two thousand nine', '214' -> 'two
    fourteen' (also how street numbers are read)."""
    return _american(num2words(int(number), to="year")).replace("oh-", "oh ")


def _decimal(whole: str, fraction: str | None) -> str:
    """'2', '5' -> 'two point five': the digits after the point one by one."""
    words = _cardinal(whole)
    return f"{words} point {_digits(fraction)}" if fraction else words


def _digits(number: str) -> str:
    return " ".join(_DIGIT_WORDS[int(d)] for d in number if d.isdigit())


def _american(words: str) -> str:
    return words.replace(",", "").replace(" and ", " ")


def _padded(words: str):
    """A replacement that keeps `words` apart from letters it would touch: "AT&T" -> "AT and T"."""
    def replace(m: re.Match) -> str:
        before = m.start() > 0 and not m.string[m.start() - 1].isspace()
        after = m.end() < len(m.string) and not m.string[m.end()].isspace()
        return f"{' ' if before else ''}{words}{' ' if after else ''}"
    return replace


def _padded_number(m: re.Match) -> str:
    before = m.start() > 0 and m.string[m.start() - 1].isalpha()  # "H200" -> "H two hundred"
    after = m.end() < len(m.string) and m.string[m.end()].isalpha()  # "30min" -> "thirty min"
    words = _decimal(m["number"], m["fraction"])
    return f"{' ' if before else ''}{words}{' ' if after else ''}"


def _phone(m: re.Match) -> str:
    groups = re.findall(r"[0-9]+", m[0])
    return ", ".join(_digits(group) for group in groups)


def _money(m: re.Match) -> str:
    one, many, cent, cents = _CURRENCIES[m["sign"]]
    whole, fraction = m["whole"].replace(",", ""), m["fraction"]
    if m["scale"]:  # "$1.5 million" -> "one point five million dollars"
        return f"{_decimal(whole, fraction)} {m['scale']} {many}"
    if fraction is not None and len(fraction) != 2:  # "$2.5": not cents
        return f"{_decimal(whole, fraction)} {many}"
    units, hundredths = int(whole), int(fraction or 0)
    parts = []
    if units or not hundredths:
        parts.append(f"{_cardinal(whole)} {one if units == 1 else many}")
    if hundredths:
        parts.append(f"{_cardinal(str(hundredths))} {cent if hundredths == 1 else cents}")
    return " and ".join(parts)


def _clock(m: re.Match) -> str:
    """'3:05 p.m.' -> 'three oh five PM'; a 24-hour '15:30' -> 'three thirty PM'."""
    hour, minute = int(m["hour"]), int(m.groupdict().get("minute") or 0)
    half = m["half"][0].upper() + "M" if m["half"] else None
    if minute > 59 or hour > (12 if half else 23) or (half and hour == 0):
        return m[0]  # not a clock time: the numbers are read one by one later
    if half is None and (hour > 12 or m["hour"].startswith("0")):  # written 24-hour: "15:30", "09:00", "0:15"
        half = "AM" if hour < 12 else "PM"
    if half is not None:
        hour = (hour - 1) % 12 + 1
    if hour == 12 and minute == 0 and half is not None:
        words = "noon" if half == "PM" else "midnight"
    else:
        words = _cardinal(str(hour))
        if minute:
            words += f" oh {_cardinal(str(minute))}" if minute < 10 else f" {_cardinal(str(minute))}"
        if half is not None:
            words += f" {half}"
    return words + _kept_period(m)


def _kept_period(m: re.Match) -> str:
    """The period of a final 'a.m.'/'p.m.' where it also ends the sentence ("at 9 a.m." or "at 9 a.m. Then")."""
    if not (m["half"] or "").endswith("."):
        return ""
    rest = m.string[m.end():]
    if not rest.strip():
        return "."
    return "." if rest[0].isspace() and rest.lstrip()[0].isupper() else ""


def _iso_date(m: re.Match) -> str:
    """'2026-12-04' -> 'December fourth, twenty twenty-six'."""
    month, day = int(m["month"]), int(m["day"])
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m[0]
    return f"{list(_MONTHS.values())[month - 1]} {_ordinal(str(day))}, {_year(m['year'])}"


def _date(m: re.Match) -> str:
    """'Dec 4th, 2026' -> 'December fourth, twenty twenty-six'; '4 December' -> 'fourth December'."""
    day = int(m["day"])
    if not 1 <= day <= 31:
        return m[0]  # not a day of the month: the numbers are read as numbers later
    month = _MONTHS[m["month"][:3]]
    year = f"{m['before_year']}{_year(m['year'])}" if m["year"] else ""
    if m.re is _MONTH_DAY:
        return f"{month}{m['gap']}{_ordinal(str(day))}{year}"
    return f"{_ordinal(str(day))}{m['gap']}{month}{year}"
