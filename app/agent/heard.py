"""What the conversation said: the caller's words, names and services, and the times and days said, which a tool
call's values come from (app.agent.tool_grammar lets a call take no others; `Heard.grounds` tells whether a finished
call's values were all given).

- a name is a whole run of capitalized words the caller said within one phrase ("Noah Park" from "This is Noah
  Park calling, thanks."), never a greeting, an opener, a preposition, a day or a month (NOT_NAMES); in a
  transcript without capitals, any run of the caller's words;
- a service is one the caller named by the profile's name or one of its aliases, the longest that matches; the
  caller's other words, in runs between punctuation and the words that are never part of a service's name
  (_NOT_SERVICE), may name one the business lacks ("eyelash extensions");
- a time or a day is one the caller or the agent said, those of the caller's latest message if it says any (what
  they say now overrides what was said before); a time is read both ways when it may be either, unless the
  business is open at only one of them (app.agent.spoken_times).
"""
import re
from dataclasses import dataclass

from app.agent.profile import WEEKDAYS
from app.agent.spoken_times import times_in

_MARKS = ",.?!;:\"()"  # punctuation: around a word, stripped; between words, the end of a phrase
# Capitalized words that are not names: a name is a run of the caller's other capitalized words. Besides "I", the
# days and the months: greetings and the words that open an answer ("Hi, ...", "Okay, ...", "Wonderful, thank
# you."), which a transcript capitalizes at the start of a sentence. A name made of these alone was not given.
NOT_NAMES = frozenset("""I I'm I'd I'll I've AM PM Monday Tuesday Wednesday Thursday Friday Saturday Sunday January
February March April May June July August September October November December Hi Hello Hey Hiya Yes Yeah Yep No
Nope Okay Ok OK Oh Um Uh Hmm Well So Right Sure Thanks Please Great Perfect Fine Cool Awesome Wonderful Alright
Good Bye Goodbye A An The This That It It's Let's Let What What's How Could Would Is Are Do Does Just Actually And
But Or Also Maybe Then Under For With On At By From To In Of As If Can My Who Whose Where When Why Which Did Have
Has Was Were Should Shall Name Name's Today Tomorrow Tonight Next You Your Our""".split())
# NOTE: "Let's try on Saturday" had booked under "Let's", "A beard." under "A"; "Under Rohan, please." under
# "Under Rohan" (12 of the 28 calls with a wrong value on 200 held-out dialogues, model of 2026-11-30); "Hello,
# Who won the game last night?" cancelled under "Who".


_DAY_WORDS = {d: d for d in ("today", "tomorrow", *WEEKDAYS)} | {"tonight": "today"}
# Words that are never part of a service's name: they end a service the business does not offer and begin the
# next. What follows one is when ("a perm next Tuesday at 2", "a perm this coming Saturday"), a courtesy ("a
# facial, thanks so much") or the rest of the request; what precedes one is the request ("Could I get eyelash
# extensions", "How much does a teeth whitening cost"). So the caller's words for a service it lacks are a whole
# run between them: "eyelash extensions", never "extensions" or "teeth" alone. NOTE: "perm next" and "perm this
# coming" were booked, and "extensions" for "eyelash extensions" and "teeth" for "teeth whitening" (refused as
# services it lacks), model of 2026-11-30.
_NOT_SERVICE = frozenset({*_DAY_WORDS, *"""next this coming on at around about sometime soon later now then
a an the some any my me i i'd i'm i'll it it's you your we us our is are be been was would will could can may
might should do does did have has had get got like love want wanted need needed book booked schedule grab make
come fit put pencil set up in into for to of with under by from and or but so if also just please thanks thank
cheers much how what what's when where which cost costs price charge charged hoping looking calling think
possible there here that's okay ok yes yeah um uh oh hi hello hey well right sure name's""".split()})
_PHRASE_END = re.compile(r'[,?!;:"()]|\.(?=\s|$)')  # a mark that ends a phrase ("p.m." does not)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_FREE_CAPITALIZED = frozenset({"I", "I'm", "I'll", "I'd", "I've"})
_DETAILS = re.compile(r"\b(service|day|time|name)\b", re.IGNORECASE)  # what a question asks for


def said_words(texts: list[str]) -> tuple[tuple[str, ...], ...]:
    """The words of each caller message, without the punctuation around them."""
    return tuple(tuple(w for w in (w.strip(_MARKS) for w in t.split()) if w) for t in texts)


def _phrases(texts: list[str]) -> tuple[tuple[str, ...], ...]:
    """The words of each phrase (between the marks that end one) of the caller's messages."""
    return said_words([phrase for text in texts for phrase in _PHRASE_END.split(text)])


def _name_runs(texts: list[str]) -> tuple[tuple[str, ...], ...]:
    """The runs of capitalized words in the caller's messages, each within one phrase (between punctuation):
    "This is Noah Park calling, thanks." -> ("This",), ("Noah", "Park")."""
    runs = []
    for text in texts:
        for phrase in re.split(f"[{re.escape(_MARKS)}]", text):
            run = []
            for word in phrase.split() + [""]:
                if word[:1].isupper() and word not in NOT_NAMES:
                    run.append(word)
                elif run:
                    runs.append(tuple(run))
                    run = []
    return tuple(runs)


def _services_named(said: tuple[tuple[str, ...], ...], profile) -> tuple[tuple[str, ...], tuple]:
    """(the services the caller named, by name or by one of the profile's aliases, the longest that matches:
    "kids cut" is the kids haircut, not a haircut; the runs of the caller's words between those names and the
    words that are never part of one, _NOT_SERVICE), from the words of each of the caller's phrases, `said`;
    without a `profile`, no services."""
    services = () if profile is None else profile.services
    phrases = sorted(((tuple(w.lower() for w in phrase.split()), s.name) for s in services
                      for phrase in (s.name, *s.aliases)), key=lambda p: -len(p[0]))
    named, others = [], []
    for words in said:
        lower, start, i = [w.lower() for w in words], 0, 0
        while i < len(words):
            hit = next(((len(p), name) for p, name in phrases if tuple(lower[i:i + len(p)]) == p), None)
            if hit is None:
                if lower[i] in _NOT_SERVICE:
                    others.append(words[start:i])
                    start = i + 1
                i += 1
                continue
            named.append(hit[1])
            others.append(words[start:i])
            i = start = i + hit[0]
        others.append(words[start:])
    return tuple(dict.fromkeys(named)), tuple(run for run in others if run)


@dataclass(frozen=True)
class Heard:
    """What the conversation said, that a call's values come from (ToolCallGrammar._rule)."""
    words: tuple[tuple[str, ...], ...]   # the caller's words, message by message
    names: tuple[tuple[str, ...], ...]   # runs of the caller's capitalized words
    times: frozenset[str]                # "HH:MM" a time said may mean (app.agent.spoken_times): in the caller's
                                         # latest message if it says one, else in the whole conversation
    services: tuple[str, ...]            # the business's services the caller named (by name or alias)
    others: tuple[tuple[str, ...], ...]  # runs of the caller's words between those names (_services_named)
    days: frozenset[str]                 # the days (today, tomorrow, a weekday) said, likewise
    cased: bool                          # the caller's transcript has capitals, so names are capitalized
    capitalized: frozenset[str] = frozenset()  # the capitalized words of every message (system, tool results too)

    def grounds(self, arguments: dict) -> bool:
        """Did the conversation give the day, time, service and name of a call's `arguments` (those it has)? A
        call that fails is one the model completed with a value of its own (a time nobody said, the first service
        on the list, "Hi" for a name): the agent asks for the missing detail instead of running it."""
        day, time, service, name = (arguments.get(k) for k in ("day", "time", "service", "name"))
        return ((day is None or day in self.days) and (time is None or time in self.times)
                and (service is None or service in self.services or self._said(service))
                and (name is None or self._named(name)))

    def speaks(self, text: str, since: int = 0) -> bool:
        """May a spoken reply say `text`, given that it already said text[:since]? Every capitalized word that does
        not open a sentence, and that ends after `since`, is one a message of the conversation holds
        (`capitalized`): a name read back from a tool result is read back whole ("You're all set, Samuel.", never
        "Samue" or "Ahmehmed"); the last word, unfinished, the start of one. Words that open a sentence, and
        "I", are free."""
        for match in _WORD.finditer(text, text.rfind(" ", 0, since) + 1):  # from the word `since` falls in
            word = match.group()
            if match.end() < since or not word[0].isupper() or word in _FREE_CAPITALIZED or word in self.capitalized:
                continue
            before = text[:match.start()].rstrip()
            if not before or before[-1] in ".?!>":
                continue
            if match.end() < len(text) or not any(w.startswith(word) for w in self.capitalized):
                return False
        return True

    def _named(self, name: str) -> bool:
        """Is `name` one the caller gave? In a transcript with capitals (Whisper's), all of a run of `names`; in
        one without, any words of the caller's but those that are never names ("hi", "okay")."""
        if not self.cased:
            return not all(w.capitalize() in NOT_NAMES for w in name.split())
        return tuple(name.split()) in self.names

    def _said(self, text: str) -> bool:
        """Is `text` all the words of one of `others`, a run of the caller's that names none of the business's
        services?"""
        return tuple(text.lower().split()) in {tuple(w.lower() for w in run) for run in self.others}


def heard(messages: list[dict], profile=None) -> Heard:
    """What the conversation `messages` (role, content) said: the caller's words and names, and the times and days
    the caller or the agent said (those of the caller's latest message, if it says any: what they say now
    overrides what was said before). With the business's `profile` (app.agent.profile.Profile), a time that may be
    morning or afternoon is the one the business is open at, when just one is ("quarter to four": 15:45), and the
    caller's words for its services (names and aliases) are read as the services they name."""
    said = [m["content"] for m in messages if m["role"] == "user"]
    spoken = said + [m["content"] for m in messages if m["role"] == "assistant"]
    open_at = None if profile is None else profile.open_at

    def times(texts):
        return frozenset(t for text in texts for t in times_in(text, open_at))

    def days(texts):
        return frozenset(_DAY_WORDS[w.lower()] for text in texts for w in said_words([text])[0]
                         if w.lower() in _DAY_WORDS)

    words = said_words(said)
    services, others = _services_named(_phrases(said), profile)
    latest = said[-1:]  # what the caller says now overrides what was said before ("Two is fine.", "on Friday")
    capitalized = frozenset(w for m in messages for w in _WORD.findall(m["content"]) if w[0].isupper())
    return Heard(words, _name_runs(said), times(latest) or times(spoken), services, others,
                 days(latest) or days(spoken), any(c.isupper() for c in "".join(said)), capitalized)


def details_in(text: str, profile=None, asked: frozenset[str] = frozenset()) -> frozenset[str]:
    """The details of a request ("service", "day", "time", "name") a caller's message gives: a business's service
    by its name or an alias, a day, a time; a name only in answer to a question that `asked` for it (any
    capitalized word that opens a sentence may be one: "Cancel my appointment, please.")."""
    open_at = None if profile is None else profile.open_at
    given = {"service": bool(_services_named(_phrases([text]), profile)[0]),
             "day": any(w.lower() in _DAY_WORDS for w in said_words([text])[0]),
             "time": bool(times_in(text, open_at)), "name": "name" in asked and bool(_name_runs([text]))}
    return frozenset(detail for detail, yes in given.items() if yes)


def asked_for(message: str) -> frozenset[str]:
    """The details an agent's `message` asks for, if it ends in a question: "Can I have your name, please?"."""
    return frozenset(d.lower() for d in _DETAILS.findall(message)) if message.rstrip().endswith("?") else frozenset()


def asks_again(sentence: str, given: frozenset[str]) -> bool:
    """Is `sentence` a question for one of the details `given` (`details_in`): "What day would you like to come
    in?" to "I was hoping to get a blow dry today, at 3 pm"?"""
    return bool(asked_for(sentence) & given)
