"""More ways to say each thing, for the training split only (on in `parley adapt`'s recipe).

templates.py gives 8-16 carrier phrases per intent, of which training sees three in four. A model trained from
scratch on them learns those phrasings rather than their words: with 6 phone phrasings it sent "What's the number
there?" to the services. The patterns below add hundreds of training phrasings built from the words callers use
("[a|b]" is a choice, "[a|]" an optional word), so more of the words that carry an intent are seen in more
frames.

NOTE: no variant is within one word edit of a held-out phrasing (`near_heldout`, word edit distance over every
held-out item of templates.py and phrases.TAILS): the held-out split still measures phrasings training never saw,
not one-word edits of them. "thanks" stays a held-out courtesy: no tail here says it. Measured: the seed-0 model
trained with them scored 70.5% held-out exact match against 71.1% without (docs/EXPERIMENT_LOG.md).
"""
import functools
import itertools
import re

from app.training.dialogues import phrases
from app.training.dialogues import templates as T

PATTERNS: dict[str, list[str]] = {
    "BOOK_WITH_SERVICE": [
        "[I'd like|I would like|I'd love|I want] to [book|schedule|get|set up] {service}",
        "[Can|Could|May] I [please|] [book|schedule|get|grab] {service}",
        "[Can|Could] you [please|] [book|schedule|pencil] me in for {service}",
        "I'm [looking|hoping|calling] to [book|get|schedule] {service}",
        "I'm after {service}",
        "[Is it possible|Would it be possible] to [book|get] {service}",
        "I need to [book|get|schedule] {service}",
        "[Book|Schedule] me [in|] for {service}",
        "I'd like to come in for {service}",
        "Do you have [space|time|an opening] for {service}",
    ],
    "BOOK_NO_SERVICE": [
        "[I'd like|I would like|I want|I need] to [book|schedule|make|set up] [an appointment|a booking|a visit]",
        "[Can|Could|May] I [book|schedule|make|set up] [an appointment|a booking]",
        "[Can|Could] you [book|schedule|fit|squeeze] me in",
        "I'm [looking|hoping|calling] to [book|make|set up] [an appointment|a booking]",
        "I [need|want] [a booking|a time slot|to come in]",
        "[Is it possible|Would it be possible] to [book|get] [an appointment|a slot]",
    ],
    "NAME_FIRST": ["[Hi,|Hello,|Yeah,|] [I'm|this is|my name's] {name}[ speaking|].", "It's {name}[ here| calling]."],
    "NAME_LAST": ["[The booking is|It'll be|Put it] [under|for] {name}[, please|].",
                  "[My name's|My name is|I'm|Name is] {name}[, by the way|]."],
    "ANSWER_SERVICE": ["[Oh,|Okay,|Yeah,|] {service}[, please| I think| would be good|]."],
    "ANSWER_DAY": ["[Maybe|Perhaps|Ideally|Um,] {day}[, please| if possible|].",
                   "Is {day} [possible|okay|good]?", "What about {day}?", "[I can do|I'd prefer|I'm free] {day}."],
    "ANSWER_TIME": ["[Maybe|Perhaps|Ideally|Say] {time}[, please| if possible|].",
                    "Is {time} [possible|okay|good]?", "What about {time}?", "[I can do|I'd prefer|I'm free at] {time}."],
    "ANSWER_DAY_TIME": ["[Maybe|Perhaps|Ideally|Say] {day} at {time}[, please| if possible|].",
                        "Is {day} at {time} [possible|okay|good]?", "What about {day} at {time}?",
                        "[I can do|I'd prefer|I'm free] {day} at {time}."],
    "ANSWER_NAME": ["[Oh,|Okay,|Yes,|] [it's|I'm|the name is|put it under|under] {name}[, please|]."],
    "ANSWER_ALTERNATIVE": ["[Okay,|Alright,|Sure,|] [I'll go with|let's go with|book] {time}[ then|]."],
    "ANSWER_OTHER_DAY": ["[Okay,|Alright,|Hmm,|] [maybe|let's go with|I'll try] {day}[ then|]."],
    "AVAILABILITY_DAY": [
        "[Do you have|Have you got|Is there] [anything|any time|an opening|a free slot] {day}?",
        "[What|Which] [times|slots] [do you have|are free|are left] {day}?",
        "[Are you|Is the salon] [busy|fully booked|booked up] {day}?",
        "[Could you|Can you] check [what's free|your availability] {day}?",
    ],
    "AVAILABILITY_TIME": [
        "[Do you have|Have you got|Is there] [anything|a slot|an opening|space] {day} at {time}?",
        "[Could|Can] I [come in|drop by|get in] at {time} {day}?",
        "Is {time} {day} [still free|open|possible|okay]?",
        "[Could you|Can you] check {day} at {time}?",
    ],
    "CANCEL": [
        "[I need|I want|I'd like|I have] to cancel [my appointment|my booking|my visit|it].",
        "[Can|Could] you [please|] cancel my [appointment|booking|visit]?",
        "[I can't|I won't be able to] [make it|come in|come], [please|so] cancel [it|my appointment].",
        "[Please|Just] cancel my [appointment|booking].",
        "I'm calling to cancel [my appointment|my booking|].",
    ],
    "CANCEL_DAY": [
        "[I need|I want|I have] to cancel [my appointment|my booking|the one] {day}.",
        "[Can|Could] you cancel [my appointment|my booking|the appointment] {day}?",
        "I [can't|won't be able to] [come in|come] {day}[, please cancel it|].",
    ],
    "LIST": [
        "[When|What day|What time] is my [appointment|booking|visit]?",
        "[Do I have|Have I got] [an appointment|a booking|anything] [booked|coming up|scheduled]?",
        "[Can|Could] you [check|look up|find] my [appointment|booking|appointments]?",
        "I [can't remember|forgot] [when my appointment is|my appointment time|when I'm booked].",
        "[Am I|Is my name] [on the list|in the book]?", "Am I booked [in|for anything]?",
    ],
    "HOURS": [
        "[What are|Tell me] your [hours|opening hours|opening times]?",
        "[When|What time] do you [open|close|open up|shut]?",
        "[How late|How early|Until when] are you [open|there]?",
        "[Are you|Is the salon] open [now|right now|]?",
        "[What time|When] [does the salon|does the shop] [open|close]?",
    ],
    "HOURS_DAY": [
        "[Are you|Is the salon] open {day}?",
        "[When|What time] do you [open|close|shut] {day}?",
        "[What are|Tell me] [your|the] [hours|opening hours|opening times] {day}?",
        "[How late|How early|Until what time] are you open {day}?",
    ],
    "ADDRESS": [
        "[Where|Where exactly] [are you|is the shop|is your salon|is the place] [located|at|]?",
        "[What is|What's|Tell me] [the|your] [address|street address|location]?",
        "[How|How do I] [get to you|get there|find the salon|find your place]?",
        "[Can|Could] you [tell me|give me] [the|your] [address|location|directions]?",
    ],
    "PHONE": [
        "[What is|What's|Tell me] [your|the|the salon's] [phone number|number|phone|telephone number|contact number]?",
        "[Can|Could] I [have|get|take] [your|the|a] [phone number|number|contact number]?",
        "[Which|What] number [should I call|do I call|can I ring|reaches you]?",
        "[How|How else] can I [reach|call|phone|ring] you?",
        "[Can|Could] you [give me|tell me|read me] [your|the] [phone number|number]?",
    ],
    "SERVICES": [
        "[What|Which] [services|treatments|things] do you [offer|have|do|provide]?",
        "[Can|Could] you [tell me|list] [your|the] [services|treatments]?",
        "What [can I get|can I book|do you do] [there|at the salon|]?",
        "What kind of [things|treatments|services] [can I book|do you do]?",
    ],
    "PRICE_ONE": [
        "How much [is|would be|does it cost to get|do you charge for] {service}?",
        "[What's|What is|Tell me] the [price|cost] [of|for] {service}?",
        "[How much|What] [do you|would you] charge for {service}?",
        "[Can|Could] you tell me [how much|what] {service} costs?",
    ],
    "PRICE_ALL": [
        "[How much|What] do [you|things|your services] [charge|cost]?",
        "[What are|Tell me] your [prices|rates|charges]?",
        "[Can|Could] you [tell me|give me|read me] [your|the] [prices|price list|rates]?",
        "[Is it|Are you] [expensive|pricey|cheap]?",
    ],
    "DATETIME": [
        "[What's|What is|Tell me] [the time|the date|today's date|the day] [now|today|]?",
        "[Do you know|Can you tell me] [what day it is|the date|the time]?",
        "What [time|day|date] is it [now|today|]?",
    ],
    "TRANSFER": [
        "[Can|Could|May] I [talk|speak] [to|with] [a person|a human|someone|the owner|a real person|staff]?",
        "[Put|Transfer|Connect] me [through|] to [a person|a human|someone|the manager|staff][, please|].",
        "I'd [like|prefer] to [talk|speak] to [a person|a human|someone real|the manager].",
        "I'd rather [talk|speak] to [a person|a human|someone real|the manager].",
        "[Is there|Is] [someone|anyone|a human|a real person] I [can|could] [talk|speak] to?",
        "[I'd like|I want|I need] to [talk|speak] [to|with] [the manager|the owner|someone] about [a problem|a "
        "complaint|my bill|a refund|a payment|my last visit].",
        "[Can|Could] I [talk|speak] to someone about [a complaint|a refund|my bill|a payment|a problem]?",
    ],
    "SERVICE_ASK": [
        "Do you [guys|] [do|offer|provide] {service}[ there| at all|]?",
        "[Is|Would] {service} something you [do|offer]?",
        "[Does|Do] [the salon|your place|you] [do|offer] {service} [by any chance|at all|]?",
    ],
    "FOLLOW_UP": [
        "[And|Okay, and|Alright, and|Oh, and] [what about|how about|] {thing}?",
        "[What about|How about] {thing} [then|too|]?",
    ],
    "COMPLIMENT": [
        "[I just wanted to|I'm calling to|Just wanted to] say thank you for [my haircut|the great cut|"
        "the service|last time].",
        "[My|The] [haircut|color|cut|blow dry] [was|looked] [amazing|great|perfect|fantastic] [last time|last week|].",
        "[You|Your stylists] [did|do] [a great|an amazing|a wonderful] job[ on my hair|].",
    ],
    "WHO_ARE_YOU": [
        "[Am I|Are you] [talking|speaking] to a [robot|machine|computer|bot]?",
        "[Are you|Is this] a [bot|machine|recording|computer|real person]?",
        "[Who|What] am I [talking|speaking] to?",
        "[What|Who] is this?",
    ],
    "TAILS": ["thank you so much", "thank you very much", "appreciate it", "if possible",
              "that'd be lovely", "if you can", "ta", "I appreciate it", "that's perfect"],
}


def expand(pattern: str) -> list[str]:
    """Every phrasing of `pattern`: "[a|b]" is a choice, "[a|]" an optional word; spaces tidied."""
    parts = re.split(r"\[([^\]]*)\]", pattern)
    choices = [[p] if i % 2 == 0 else p.split("|") for i, p in enumerate(parts)]
    out = []
    for combo in itertools.product(*choices):
        text = re.sub(r"\s+", " ", "".join(combo)).strip()
        text = re.sub(r"\s+([,.?])", r"\1", text)
        out.append(text[0].upper() + text[1:] if text else text)
    return list(dict.fromkeys(out))


def _words(text: str) -> list[str]:
    return re.findall(r"\{\w+\}|[\w']+", text.lower())


def _distance(a: list[str], b: list[str]) -> int:
    """Word-level edit distance."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def heldout_items() -> list[str]:
    lists = [v for k, v in vars(T).items() if k.isupper() and isinstance(v, list)] + [phrases.TAILS]
    return [x for items in lists for x in phrases.split_items(items, "heldout")]


def near_heldout(text: str, held: list[list[str]]) -> bool:
    """Within one word edit of a held-out phrasing (or equal to it, for phrasings of one or two words)."""
    words = _words(text)
    return any(_distance(words, h) < (2 if len(h) > 2 else 1) for h in held)


def template_list(name: str) -> list[str]:
    """The list a PATTERNS key widens: templates.py's list of that name, or phrases.TAILS."""
    return phrases.TAILS if name == "TAILS" else getattr(T, name)


@functools.cache
def _by_list() -> dict[int, list[str]]:
    held = [_words(x) for x in heldout_items()]
    out = {}
    for name, patterns in PATTERNS.items():
        items = template_list(name)
        variants = [v for p in patterns for v in expand(p)]
        if name == "TAILS":  # a courtesy is spoken lowercase after a comma
            variants = [v[0].lower() + v[1:] for v in variants]
        out[id(items)] = [v for v in variants if not near_heldout(v, held) and v not in items]
    return out


def more(items: list) -> list[str]:
    """The training-only variants of a templates.py list (or phrases.TAILS); [] for any other list."""
    return _by_list().get(id(items), [])
