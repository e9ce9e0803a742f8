"""One rule for every tool and every business: an argument the schema marks `"x-said": true` must have been said.

A model may fill in a detail nobody gave (a time for a booking the caller never timed). The schema declares which
arguments must come from the conversation: in the caller's words, the agent's own spoken replies (a time it
offered and the caller took) or a tool's result. A value nobody said is dropped from the call; a call that then
lacks a required argument is not run, and the model is told which details are missing, so it asks for them (in
the order of the schema's `required` list); a call none of whose x-said details was said is no call at all
(`invented`: the model answers in words). What "appears"
means depends only on the value's form, never on a list of words:
- a clock time "HH:MM" is said when a message holds a time that may mean it ("half past three", "3:30 pm",
  app.agent.spoken_times);
- a business's service is said when its name or one of its aliases (the profile's) is in a message;
- anything else is said when all its words are, accents, case and plural or possessive endings aside ("Sofia
  Ramirez" for "Sofía Ramírez", "saturday" for "Saturdays").
"""
import json
import re
import unicodedata

from app.agent.spoken_times import times_in

SAID = "x-said"  # the schema keyword: this argument must have been said in the conversation
CLOCK_PATTERN = "^[0-2][0-9]:[0-5][0-9]$"  # a schema's "pattern" for a clock time, HH:MM on a 24-hour clock
_HHMM = re.compile(r"^\d{2}:\d{2}$")
_SENTENCE_WORDS = re.compile(r"[\w']+")
_WRITTEN_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # letters and digits, with inner apostrophes (O'Brien)


def fold(text: str) -> str:
    """Lowercase, accents dropped: 'Sofía' -> 'sofia'."""
    text = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in text if not unicodedata.combining(c))


def _stem(word: str) -> str:
    """A word less a plural or possessive ending, so that "Saturdays" says "saturday" and "kid's cut" says "kids
    cut"; both sides of a comparison are read the same way."""
    word = word.removesuffix("'s")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _words(text: str) -> list[str]:
    return [_stem(w) for w in _SENTENCE_WORDS.findall(fold(text))]


def value_words(value: str) -> set[str]:
    """The words of a value as `says` compares them: "Friday" and "fridays" are {"friday"}."""
    return set(_words(value))


def _has_phrase(words: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return n > 0 and any(words[i:i + n] == phrase for i in range(len(words) - n + 1))


def named_service(profile, text: str):
    """The profile's service that `text` names: its name or an alias, or else the longest name or alias among
    its words ("book a haircut" -> haircut, "a kids haircut please" -> kids haircut); None if it names none."""
    service = profile.service(text)
    if service is not None:
        return service
    words = _words(text)
    named = [(len(_words(form)), s) for s in profile.services for form in (s.name, *s.aliases)
             if _has_phrase(words, _words(form))]
    return max(named, key=lambda n: n[0])[1] if named else None


def latest_user(messages: list[dict]) -> int:
    """The index of the caller's latest message in `messages`; -1 when there is none."""
    return max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)


def _latest_words(messages: list[dict]) -> str:
    index = latest_user(messages)
    return messages[index]["content"] if index >= 0 else ""


def names_last(value: str, messages: list[dict], profile) -> bool:
    """Whether `value` is a service of the profile that the caller's latest message names (`named_service`)."""
    last = _latest_words(messages)
    service = named_service(profile, value) if profile is not None and last else None
    return service is not None and named_service(profile, last) == service


def _spoken_reply(message: dict) -> bool:
    """An agent's message that was spoken, not a tool call."""
    return message["role"] == "assistant" and not message["content"].startswith("<")


def conversation_text(messages: list[dict]) -> list[str]:
    """What was said: every message but the system prompt and the agent's tool calls."""
    return [m["content"] for m in messages if m["role"] in ("user", "tool") or _spoken_reply(m)]


class Said:
    """What a conversation's `texts` said, read once: `says(value)` for as many values as a call or a grammar
    asks about (a long call's grammar asks about every day of every tool, each turn)."""

    def __init__(self, texts: list[str], profile=None):
        self.texts, self.profile = texts, profile
        self.words = [_words(text) for text in texts]
        self.vocabulary = set().union(*self.words) if self.words else set()
        self._times: set[str] | None = None

    @property
    def times(self) -> set[str]:
        """Every "HH:MM" a time in the texts may mean (app.agent.spoken_times)."""
        if self._times is None:
            self._times = set().union(*(times_in(text) for text in self.texts))
        return self._times

    def says(self, value: str) -> bool:
        """Whether the texts said `value` (see the module's docstring)."""
        if _HHMM.match(value):
            return value in self.times
        service = self.profile.service(value) if self.profile is not None else None
        if service is not None:
            return any(_has_phrase(w, _words(form)) for w in self.words for form in (service.name, *service.aliases))
        wanted = set(_words(value))
        return bool(wanted) and wanted <= self.vocabulary


def is_said(value: str, texts: list[str], profile=None) -> bool:
    """Whether the conversation's `texts` said `value` (see the module's docstring)."""
    return Said(texts, profile).says(value)


def unsaid(name: str, arguments: dict, schemas: list[dict], messages: list[dict], profile=None) -> list[str]:
    """The arguments of a call of tool `name` that its schema marks x-said and the conversation never said."""
    said = Said(conversation_text(messages), profile)
    return [key for key, value in _said_strings(name, arguments, schemas).items() if not said.says(value)]


def rests_on(name: str, arguments: dict, schemas: list[dict], texts: list[str], profile=None) -> bool:
    """Whether a call of tool `name` holds a detail `texts` say: an x-said argument whose value they say."""
    said = Said(texts, profile)
    return any(said.says(value) for value in _said_strings(name, arguments, schemas).values())


def _said_strings(name: str, arguments: dict, schemas: list[dict]) -> dict:
    """The string arguments of a call of tool `name` that its schema marks x-said (none for an unknown tool)."""
    schema = next((s for s in schemas if s["name"] == name), None)
    properties = {} if schema is None else schema["parameters"].get("properties", {})
    return {key: value for key, value in arguments.items()
            if properties.get(key, {}).get(SAID) and isinstance(value, str)}


def lacking(schema: dict, arguments: dict) -> list[str]:
    """The required arguments of `schema` that `arguments` lacks (absent or empty), in the order of its `required`
    list (the order the agent asks for them)."""
    return [k for k in schema["parameters"].get("required", ()) if arguments.get(k) in (None, "")]


def settle(name: str, arguments: dict, schemas: list[dict], messages: list[dict], profile=None) -> tuple[dict, list[str]]:
    """The call's arguments less every x-said one nobody said, and the required arguments it then lacks, in the
    order of the schema's `required` list (the order the agent asks for them). A call that lacks none runs ("what
    are your hours" with a day nobody named is still a question about the hours); one that lacks some is not run:
    the model is told what is missing (`missing_result`) and asks the caller."""
    schema = next((s for s in schemas if s["name"] == name), None)
    if schema is None:
        return arguments, []
    unsaid_keys = set(unsaid(name, arguments, schemas, messages, profile))
    kept = {k: v for k, v in arguments.items() if k not in unsaid_keys}
    return kept, lacking(schema, kept)


def invented(name: str, arguments: dict, kept: dict, schemas: list[dict]) -> bool:
    """Whether a call of tool `name` rests on nothing the conversation said: it wrote x-said arguments and `settle`
    kept none of them (`kept`). A model that read no request for the tool in the caller's words still writes a
    call now and then, its details made up ("is it safe to color my hair while I'm pregnant?" made an
    availability check for a Friday at 10 nobody named); asking the caller for what such a call lacks answers a
    question they never asked."""
    schema = next((s for s in schemas if s["name"] == name), None)
    if schema is None:
        return False
    properties = schema["parameters"].get("properties", {})
    written = [k for k in arguments if properties.get(k, {}).get(SAID)]
    return bool(written) and not any(k in kept for k in written)


def is_free(spec: dict) -> bool:
    """An x-said string with no values of its own to choose from (no enum, no clock pattern): a name, a service
    (its examples aside), held to the caller's words by the reply grammar (`held`, `words_pattern`)."""
    return bool(spec.get(SAID)) and spec.get("type") == "string" and "enum" not in spec and \
        spec.get("pattern") != CLOCK_PATTERN


def missing_result(missing: list[str]) -> dict:
    """What a call that lacks required details returns to the model instead of running."""
    return {"ok": False, "missing": list(missing)}


_SENTENCE_START = re.compile(r"(?:^|[.?!]\s+)$")
_JOINS_RUN = re.compile(r"[\s-]*")  # what may stand between two words of one run: spaces, a hyphen


def callers_own_runs(messages: list[dict]) -> list[tuple[int, list[str]]]:
    """The words the caller brought to the conversation, as written, in the runs they said them in, each with the
    index of its message in `messages`: every word of
    their messages but one written in lowercase that the other side (system prompt, the agent's replies and calls,
    tool results) used before the caller did. A name the caller gives is new to the conversation: "you" or "book"
    never is one, while "Price" written as a name (capitalized, not starting a sentence) stays one. A run ends at
    a word that is not the caller's own and at punctuation other than a hyphen: "García. Lucía García." holds
    the runs "García" and "Lucía García"."""
    theirs: set[str] = set()
    runs: list[tuple[int, list[str]]] = []
    for index, m in enumerate(messages):
        if m["role"] != "user":  # the words of a tool's name too: "appointment" of book_appointment
            theirs.update(_stem(fold(word)) for word in _WRITTEN_WORD.findall(m["content"]))
            continue
        text, run, end = m["content"], [], 0
        for match in _WRITTEN_WORD.finditer(text):
            form = match.group()
            capitalized = form[0].isupper() and not _SENTENCE_START.search(text[:match.start()])
            own = capitalized or _stem(fold(form)) not in theirs
            if run and (not own or not _JOINS_RUN.fullmatch(text[end:match.start()])):
                runs.append((index, run))
                run = []
            if own:
                run.append(form)
            end = match.end()
        if run:
            runs.append((index, run))
    return runs


def fullest(name: str, arguments: dict, schemas: list[dict], messages: list[dict]) -> dict:
    """The call's arguments with each free x-said string that gives no `examples` (a name) in the fullest form the
    caller's latest message says it: a value that is a whole run of the caller's own words there becomes the
    longer run that holds it, when every word of that run is written capitalized, as a name is. People give a
    surname and then the whole name: for "García. Lucía García." the model wrote "García", and the caller was
    booked, then looked up, under half of it. A run that adds a word not written as a name ("Rose is fine"), a
    value that is only part of a run, or a longer run that does not hold the value ("Ahmed. My wife Leila Haddad")
    leave the value as written."""
    schema = next((s for s in schemas if s["name"] == name), None)
    last_index = latest_user(messages)
    if schema is None or last_index < 0:
        return arguments
    properties = schema["parameters"].get("properties", {})
    runs = [run for i, run in callers_own_runs(messages) if i == last_index]
    out = dict(arguments)
    for key, value in arguments.items():
        spec = properties.get(key, {})
        if not isinstance(value, str) or not is_free(spec) or spec.get("examples"):
            continue
        words = _WRITTEN_WORD.findall(value)
        if words not in runs:
            continue
        holding = [run for run in runs if len(run) > len(words) and all(w[0].isupper() for w in run)
                   and any(run[i:i + len(words)] == words for i in range(len(run) - len(words) + 1))]
        if holding:
            longest = max(holding, key=len)
            written = re.search(r"(?<![^\W_])" + r"[\s-]+".join(map(re.escape, longest)) + r"(?![^\W_])",
                                messages[last_index]["content"])
            if written is not None:
                out[key] = written.group()
    return out


def _run_pattern(run: list[str]) -> str:
    """A regex of every stretch of consecutive words of `run`, joined by a space or a hyphen; a stretch is never
    one letter alone (the caller's "I" is no name)."""
    words = [re.escape(w) for w in run]
    starts = []
    for i in range(len(words)):
        rest = ""
        for word in reversed(words[i + 1:]):
            rest = f"(?:[ -]{word}{rest})?"
        if len(run[i]) == 1:  # a letter goes on to the next word (an initial) or is no stretch at all
            if i + 1 == len(words):
                continue
            rest = rest[3:-2]  # the optional group made required
        starts.append(words[i] + rest)
    return "|".join(starts)


def words_pattern(said: Said, runs: list[list[str]] | None = None) -> str | None:
    """A pattern (for a schema's "pattern") of the strings the conversation said, as they were written: a stretch
    of consecutive words of one of `runs` (default: every message's words, one run each), joined by a space or a
    hyphen; the words of a profile's service are a run when the service was said (by its name or an alias: "kids
    haircut" for "a haircut for my son"). None: nothing said. The model writes "Tomasz Wojcik", not a string
    of its own made of the caller's words ("my-wanna-haircut" from "I wanna get haircuts for me and my kids").

    NOTE: with each word also capitalized, the adapter wrote "On Noah" for "This is Noah calling": it had begun a
    name of its own ("O" for "Owen") and "On" was the allowed word that went on from there."""
    runs = [_WRITTEN_WORD.findall(text) for text in said.texts] if runs is None else list(runs)
    for service in getattr(said.profile, "services", ()):
        if said.says(service.name):
            runs.append(_WRITTEN_WORD.findall(service.name))
    alternatives = sorted({p for p in (_run_pattern(run) for run in runs if run) if p})
    if not alternatives:
        return None
    return "^(?:" + "|".join(alternatives) + ")$"


def latest(messages: list[dict], values_in) -> set[str]:
    """The values (`values_in(text)`: the ones a text says) of the caller's latest message that says any, and of
    the agent's spoken replies after it (a time it offered then); empty if the caller said none. A caller who
    changes a detail ("fine, 4:30 then") means the new one: the earlier ones, and the clock times of tool
    results (the time now, a day's opening hours), are not what they asked for."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "user" and (values := set(values_in(messages[i]["content"]))):
            return values.union(*(values_in(m["content"]) for m in messages[i + 1:] if _spoken_reply(m)))
    return set()


def _said_in(values, text: str, profile) -> list[str]:
    """The `values` that `text` says, the text read once."""
    said = Said([text], profile)
    return [v for v in values if said.says(v)]


def says_a_value(spec: dict, said: Said, times: set[str]) -> bool:
    """Whether `said` (with the clock times `times` it holds) says a value an argument of schema `spec` may take:
    a clock time for a clock pattern, else one of its `enum` or `examples` values (a day, a business's service).
    `held` passes only the times said as clock times: "I want to book one" says no time."""
    if spec.get("pattern") == CLOCK_PATTERN:
        return bool(times)
    return any(said.says(v) for v in (*spec.get("enum", ()), *spec.get("examples", ())) if isinstance(v, str))


def asked_for(messages: list[dict], schemas: list[dict], own: list[tuple[int, list[str]]], said_last: Said,
              times_last: set[str]) -> dict[str, list[str]]:
    """{tool: the free x-said details (no enum, examples or pattern: a name) its last call lacked} when the agent
    asked for them (`missing_result`) and the caller's latest message answers with words of their own (`own`:
    callers_own_runs) and no other detail that call lacked: "it's Dana Okafor" after a call that lacked the
    service and the name is the name, whatever the agent asked for first, while "a beard trim" is the service.
    Empty otherwise."""
    last = latest_user(messages)
    if last < 0 or not any(index == last for index, _ in own):
        return {}  # no words of the caller's own in their latest message
    for m in reversed(messages[:last]):
        if m["role"] == "user":
            return {}
        if m["role"] != "tool":
            continue
        try:
            content = json.loads(m["content"])
        except json.JSONDecodeError:
            return {}
        missing = content.get("result", {}).get("missing") if isinstance(content, dict) else None
        schema = next((s for s in schemas if s["name"] == content.get("name")), None)
        if not isinstance(missing, list) or schema is None:
            return {}
        properties = schema["parameters"].get("properties", {})
        specs = {k: properties[k] for k in missing if k in properties}
        free = [k for k, spec in specs.items() if spec.get(SAID) and not {"enum", "examples", "pattern"} & spec.keys()]
        if any(says_a_value(spec, said_last, times_last) for k, spec in specs.items() if k not in free):
            return {}  # the caller answered another detail the call lacked
        return {schema["name"]: free} if free else {}
    return {}


def held(schemas: list[dict], messages: list[dict], profile=None) -> list[dict]:
    """The schemas as the reply grammar holds a call to them, for `messages`:
    - a required x-said argument may be left out: the caller may not have said it yet, and a call that lacks it
      is answered with what is missing (`settle`), so the model writes the details it has instead of inventing
      the rest;
    - an x-said argument, required or not, is written when the caller's latest message says a value it may take
      (`says_a_value`): "a beard trim Thursday at 5:45" makes a call with the service, the day and the time,
      never one that leaves the service out and then asks the caller for it, and "I can't make it tomorrow" a
      cancellation for tomorrow, "do you do highlights?" the coloring's price. NOTE: a service alias that is a
      common word names that service whenever it is said: at the bike shop (its tune-up is also "service"),
      "what services do you offer?" is called with the tune-up, which the services answer ignores. Held to
      enums and clock times only, optional arguments left that call alone, but "do you do highlights?" got
      every price again (development set 81.6% against 82.5% of turns). `parley eval --dialogues 60`,
      2026-12-03: calls exact 82.2% of the salon's held-out turns and 70.9% of the bike shop's, against 81.1%
      and 68.6% when only required arguments were held so, and 81.1% and 67.4% before either;
    - an x-said clock time (CLOCK_PATTERN) or enum (a day) is one of the values the caller said last (`latest`),
      when they said any; else one of those the conversation said, when it said any. The model chooses between
      readings ("three thirty": 03:30 or 15:30; "3:30 p.m.": 15:30 alone; the one the business is open at,
      when it is open at one only) but never writes a time nobody said;
    - a string the schema gives `examples` of (a service) is made of the caller's latest words when they name one
      of them: "Just a kids cut please." after "I'm sorry. We don't offer eyelash extensions." was booked as
      eyelash extensions again, copied from the refused call (as a day and a time, the service the caller names
      last is the one they mean);
    - any other x-said string without a pattern of its own (a name, a service) is made of words the caller said
      (`words_pattern`, `callers_own_runs`): the model picks the caller's words ("Noah Smith"), never a name of
      its own ("Owen Smith", which `settle` would drop, leaving the call to ask for the name again), nor a word
      of the agent's own replies ("got" from "you've got"), nor a word the caller only repeated ("you")."""
    said = Said(conversation_text(messages), profile)
    open_at = getattr(profile, "open_at", None)
    heard = sorted(latest(messages, lambda text: times_in(text, open_at)) or said.times)
    last = _latest_words(messages)
    said_last, times_last = Said([last], profile), times_in(last, open_at, clock_only=True)
    own = callers_own_runs(messages)
    asked = asked_for(messages, schemas, own, said_last, times_last)
    free = words_pattern(Said([m["content"] for m in messages if m["role"] == "user"], profile),
                         [run for _, run in own])
    last_index = latest_user(messages)
    named_last = words_pattern(said_last, [run for i, run in own if i == last_index])
    enums: dict[tuple, list[str]] = {}  # the days of every tool that takes one are held alike
    out = json.loads(json.dumps(schemas))
    for s in out:
        params = s["parameters"]
        properties = params.get("properties", {})
        said_now = [k for k, spec in properties.items() if spec.get(SAID) and says_a_value(spec, said_last, times_last)]
        said_now += [k for k in asked.get(s["name"], ()) if k in properties and k not in said_now]
        required = [k for k in params.get("required", ()) if not properties.get(k, {}).get(SAID) or k in said_now]
        required += [k for k in said_now if k not in required]
        if required or "required" in params:
            params["required"] = required
        for spec in properties.values():
            if not spec.get(SAID) or spec.get("type") != "string":
                continue
            if spec.get("pattern") == CLOCK_PATTERN:
                if heard:
                    del spec["pattern"]
                    spec["enum"] = list(heard)
            elif "enum" in spec:
                values = tuple(spec["enum"])
                if values not in enums:
                    last = latest(messages, lambda text: _said_in(values, text, profile))
                    enums[values] = [v for v in values if v in last] or [v for v in values if said.says(v)] or values
                spec["enum"] = list(enums[values])
            elif "pattern" in spec:
                continue
            elif "examples" in spec and named_last and says_a_value(spec, said_last, times_last):
                spec["pattern"] = named_last  # a service the business offers, named last: the latest words'
            elif free:
                spec["pattern"] = free
    return out
