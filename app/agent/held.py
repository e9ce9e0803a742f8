"""The reply grammar's hold on a call's x-said arguments: each is held to what the conversation said (`held`), so
the model chooses between what the caller said and never writes a value nobody did; and a name is called in the
fullest form the caller gave it (`fullest`). What "said" means is app.agent.said's rule.
"""
import json
import re

from app.agent.days import DAYS, day_phrases
from app.agent.protocol import read_tool_message
from app.agent.history import conversation_text, details_called, latest_user, latest_words, spoken_reply
from app.agent.said import CLOCK_PATTERN, SAID, Said, is_free, known, schema_of
from app.agent.spoken_times import times_in
from app.agent.words import WRITTEN_WORD, fold, holds, name_words, stands_in, stem, value_words

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
            theirs.update(stem(fold(word)) for word in WRITTEN_WORD.findall(m["content"]))
            continue
        text, run, end = m["content"], [], 0
        for match in WRITTEN_WORD.finditer(text):
            form = match.group()
            capitalized = form[0].isupper() and not _SENTENCE_START.search(text[:match.start()])
            own = capitalized or stem(fold(form)) not in theirs
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
    conversation gives it:

    - a value that is a whole run of the caller's own words in their latest message becomes the longer run there
      that holds it, when every word of that run is written capitalized, as a name is. People give a surname and
      then the whole name: for "García. Lucía García." the model wrote "García", and the caller was booked, then
      looked up, under half of it. A run that adds a word not written as a name ("Rose is fine"), a value that is
      only part of a run, or a longer run that does not hold the value ("Ahmed. My wife Leila Haddad") leave the
      value as written;
    - a value whose words are a part of the one value a tool's result gave for the same argument in this call
      (`known`: the name a lookup found the caller booked under) becomes that value. After "you have a haircut on
      Thursday" for a lookup of "Haddad" that found Ahmed Haddad, "can I change it to 4?" was booked under
      "Haddad", beside the haircut it meant to move."""
    schema = schema_of(name, schemas)
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
        words = WRITTEN_WORD.findall(value)
        holding = [run for run in runs if len(run) > len(words) and all(w[0].isupper() for w in run)
                   and stands_in(run, words)]
        if words in runs and holding:
            longest = max(holding, key=len)
            written = re.search(r"(?<![^\W_])" + r"[\s-]+".join(map(re.escape, longest)) + r"(?![^\W_])",
                                messages[last_index]["content"])
            if written is not None:
                out[key] = written.group()
        part = name_words(out[key])
        longer = {name_words(v): v for v in known(messages, key) if len(name_words(v)) > len(part)}
        longer = [v for words_of, v in longer.items() if part and holds(words_of, part)]
        if len(longer) == 1:
            out[key] = longer[0]
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
    runs = [WRITTEN_WORD.findall(text) for text in said.texts] if runs is None else list(runs)
    for service in getattr(said.profile, "services", ()):
        if said.says(service.name):
            runs.append(WRITTEN_WORD.findall(service.name))
    alternatives = sorted({p for p in (_run_pattern(run) for run in runs if run) if p})
    if not alternatives:
        return None
    return "^(?:" + "|".join(alternatives) + ")$"


def services_pattern(said: Said, services, runs: list[list[str]] = ()) -> str | None:
    """A pattern (for a schema's "pattern") of the `services` (the business's names: a schema's examples) that
    `said` names, each as the business names it or as it was said (an alias: "cavity" for a dentist's filling,
    which Toolbox.canonical books as the filling; not one named only inside another's longer name: `Said.
    services_named`), or a stretch of one of `runs` (words that may name a service the business does not offer).
    None: it names none."""
    forms = {form for name, said_as in said.services_named(services).items() for form in (name, *said_as)}
    if not forms:
        return None
    alternatives = sorted({*map(re.escape, forms), *filter(None, map(_run_pattern, filter(None, runs)))})
    return "^(?:" + "|".join(alternatives) + ")$"


# Words with which a speaker takes back what they just said ("thursday, sorry, friday"; "no wait"; "I mean").
_REPAIRS = re.compile(r"\b(?:no|sorry|wait|actually|i mean)\b", re.IGNORECASE)


def latest(messages: list[dict], values_in) -> set[str]:
    """The values (`values_in(text)`: the ones a text says) of the caller's latest message that says any, and of
    the agent's spoken replies after it (a time it offered then); empty if the caller said none. A caller who
    changes a detail ("fine, 4:30 then") means the new one: the earlier ones, and the clock times of tool
    results (the time now, a day's opening hours), are not what they asked for. So within one message: the
    values after its last word of repair (`repaired`)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "user" and (values := set(repaired(messages[i]["content"], values_in))):
            return values.union(*(values_in(m["content"]) for m in messages[i + 1:] if spoken_reply(m)))
    return set()


def repaired(text: str, values_in) -> list[str]:
    """The values `text` says after its last word of repair (`_REPAIRS`) that some follow, else all it says: "I'd
    like a trim on thursday, sorry, friday, at six thirty" was booked on Thursday, and "what about thursday, no
    wait, friday, like half past five" checked Thursday (the grammar allowed both days, and the model wrote the
    first); "no problem, friday at 3" is Friday at 3, and "friday at 3, no problem" too."""
    for repair in reversed(list(_REPAIRS.finditer(text))):
        if values := values_in(text[repair.end():]):
            return list(values)
    return list(values_in(text))


def _said_in(values, text: str, profile) -> list[str]:
    """The `values` that `text` says, the text read once. Of a tool's days, also the days it says in more words
    (`day_phrases`: "next tuesday", "the day after tomorrow"), and none of `values` only inside one of those: the
    caller of "the day after tomorrow" did not say tomorrow."""
    if not is_days(values):
        said = Said([text], profile)
        return [v for v in values if said.says(v)]
    phrases = day_phrases(text)
    for _, start, end in phrases:
        text = text[:start] + " " * (end - start) + text[end:]
    said = Said([text], profile)
    return [v for v, _, _ in phrases] + [v for v in values if said.says(v)]


def _days_in_order(values, found) -> list[str]:
    """The days `found`: those of `values` in their order, then the day phrases sorted; but none of `values` whose
    words a phrase found holds. A reply that asks "What time tomorrow works for you?" after "the day after
    tomorrow" (the model words its question from the call) or "What time on Tuesday?" after "next Tuesday" echoes
    the caller's day: a later call is held to theirs."""
    phrases = sorted(set(found) - set(values))
    return [v for v in values if v in found and not any(value_words(v) <= value_words(p) for p in phrases)] + phrases


def is_days(values) -> bool:
    """Whether an enum's `values` are days a tool takes (app.agent.days.DAYS, all or some)."""
    return bool(values) and set(values) <= set(DAYS)


def says_a_value(spec: dict, said: Said, times: set[str]) -> bool:
    """Whether `said` (with the clock times `times` it holds) says a value an argument of schema `spec` may take:
    a clock time for a clock pattern, else one of its `enum` or `examples` values (a day, a business's service).
    `held` passes only the times said as clock times: "I want to book one" says no time."""
    if spec.get("pattern") == CLOCK_PATTERN:
        return bool(times)
    if is_days(spec.get("enum")) and any(day_phrases(text) for text in said.texts):
        return True
    return any(said.says(v) for v in (*spec.get("enum", ()), *spec.get("examples", ())) if isinstance(v, str))


def _last_lacking(messages: list[dict], schemas: list[dict]) -> tuple[dict, list[str]] | None:
    """(the schema, the details it lacked) of the call whose lack the agent answered just before the caller's latest
    message (`missing_result`: the question the caller is answering); None when there was none."""
    last = latest_user(messages)
    for m in reversed(messages[:last] if last >= 0 else []):
        if m["role"] == "user":
            return None
        if m["role"] != "tool":
            continue
        read = read_tool_message(m)
        if read is None:
            return None
        tool, result = read
        missing = result.get("missing")
        schema = schema_of(tool, schemas)
        return (schema, missing) if isinstance(missing, list) and schema is not None else None
    return None


def times_answered(messages: list[dict], schemas: list[dict], open_at=None) -> set[str]:
    """The clock times the caller's latest message says: those said as clock times (`times_in`'s clock_only), or,
    when the agent has just asked for a time (the call before lacked a clock-pattern detail), any number that may
    be one: "thursday morning, like 9?" answers "What day would you like to come in?" after a booking that lacked
    the day and the time, while "I want to book one" opening a call says no time."""
    last = latest_words(messages)
    clock = times_in(last, open_at, clock_only=True)
    lacking = None if clock else _last_lacking(messages, schemas)
    if lacking is None:
        return clock
    schema, missing = lacking
    properties = schema["parameters"].get("properties", {})
    asked = any(properties.get(k, {}).get("pattern") == CLOCK_PATTERN for k in missing)
    return times_in(last, open_at) if asked else clock


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
    lacking = _last_lacking(messages, schemas)
    if lacking is None:
        return {}
    schema, missing = lacking
    properties = schema["parameters"].get("properties", {})
    specs = {k: properties[k] for k in missing if k in properties}
    free = [k for k, spec in specs.items() if spec.get(SAID) and not {"enum", "examples", "pattern"} & spec.keys()]
    if any(says_a_value(spec, said_last, times_last) for k, spec in specs.items() if k not in free):
        return {}  # the caller answered another detail the call lacked
    return {schema["name"]: free} if free else {}


def about_a_person(messages: list[dict], schemas: list[dict]) -> list[str]:
    """The texts of the results in `messages` of calls about a person: of tools that take a name (a free x-said
    string with no examples, enum or pattern), such as a lookup of the caller's bookings; a result's values, not
    its keys (a bike shop's tune-up is also "service"). What such a result names (a haircut on Thursday) is theirs,
    as what they said is; a result about the business (its prices) names what it offers."""
    about = {s["name"] for s in schemas
             if any(spec.get(SAID) and is_free(spec) and not spec.get("examples")
                    for spec in s["parameters"].get("properties", {}).values())}
    results = [result for tool, result in filter(None, map(read_tool_message, messages)) if tool in about]
    return [v for result in results for value in result.values()
            for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]


def named_alone(key: str, properties: dict, said_last: Said) -> str | None:
    """The one value of enum argument `key` that the caller's latest words (`said_last`) name, when they name one and
    the words that name it name no value of another argument: "and the address?" after the phone number is the
    address (the model, copying the call before, asked for the phone again), while a bike shop's "how much is a
    service?" names its tune-up (an alias) as well as the topic "services", and is left to the model. None
    otherwise."""
    named = [v for v in properties[key]["enum"] if isinstance(v, str) and said_last.says(v)]
    if len(named) != 1:
        return None
    words = value_words(named[0])
    for other, spec in properties.items():
        values = [v for v in (*spec.get("enum", ()), *spec.get("examples", ())) if isinstance(v, str)]
        if other == key or not values:
            continue
        for value in values:
            forms = said_last.service_forms(value) or ([value] if said_last.says(value) else [])
            if any(words & value_words(form) for form in forms):
                return None
    return named[0]


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
      when they said any; else one of those the conversation said, when it said any; else no time at all. The
      model chooses between readings ("three thirty": 03:30 or 15:30; "3:30 p.m.": 15:30 alone; the one the
      business is open at, when it is open at one only) but never writes a time nobody said: "what times do you
      have?" after "tomorrow" was a check of 10:00, dropped as unsaid with the day left out, and the caller heard
      "I'm sorry, I can't help with that.";
    - a string the schema gives `examples` of (a service) is one of those the caller's latest words name, as the
      business names it or as they said it (`services_pattern`), when they name any: "Just a kids cut please."
      after "I'm sorry. We don't offer eyelash extensions." was booked as eyelash extensions again, copied from
      the refused call (as a day and a time, the service the caller names last is the one they mean). NOTE: held
      to any of the latest words instead (until 2026-12-04), a dentist's "I think I have a cavity, can I come in
      Wednesday at 4 pm?" was booked as "pm" (the model, unheld, wrote "vacation"; held, 0.03 of its probability
      went to the words allowed), and the caller heard "We don't offer PM."; named by the caller before, one of
      those or a stretch of the latest words (which may name a service the business does not offer, to be
      refused): "A cavity filling." then "Victor, thanks." (asked for a name) had the model, which would have
      written "pavine", book "please" from the caller's first words;
    - any other x-said string without a pattern of its own (a name, a service) is made of words the caller said
      (`words_pattern`, `callers_own_runs`): the model picks the caller's words ("Noah Smith"), never a name of
      its own ("Owen Smith", which `settle` would drop, leaving the call to ask for the name again), nor a word
      of the agent's own replies ("got" from "you've got"), nor a word the caller only repeated ("you").
    A service "named before" is one the caller named, or one a result about them named (`about_a_person`): after
    "you have a haircut on Thursday", "can I change it to 4?" had the model, which meant the haircut, forced to
    "have", and the caller was asked what service they wanted."""
    said = Said(conversation_text(messages), profile)
    open_at = getattr(profile, "open_at", None)
    heard = sorted(latest(messages, lambda text: times_in(text, open_at)) or said.times)
    last = latest_words(messages)
    said_last, times_last = Said([last], profile), times_answered(messages, schemas, open_at)
    own = callers_own_runs(messages)
    asked = asked_for(messages, schemas, own, said_last, times_last)
    said_callers = Said([m["content"] for m in messages if m["role"] == "user"], profile)
    free = words_pattern(said_callers, [run for _, run in own])
    theirs = Said(said_callers.texts + about_a_person(messages, schemas) + details_called(messages), profile)
    last_index = latest_user(messages)
    runs_last = [run for i, run in own if i == last_index]
    enums: dict[tuple, list[str]] = {}  # the days of every tool that takes one are held alike
    out = json.loads(json.dumps(schemas))
    for s in out:
        params = s["parameters"]
        properties = params.get("properties", {})
        unsaid_times: list[str] = []
        said_now = [k for k, spec in properties.items() if spec.get(SAID) and says_a_value(spec, said_last, times_last)]
        said_now += [k for k in asked.get(s["name"], ()) if k in properties and k not in said_now]
        required = [k for k in params.get("required", ()) if not properties.get(k, {}).get(SAID) or k in said_now]
        required += [k for k in said_now if k not in required]
        if required or "required" in params:
            params["required"] = required
        for key, spec in properties.items():
            if not spec.get(SAID) and spec.get("type") == "string" and "enum" in spec:
                named = named_alone(key, properties, said_last)
                if named is not None:
                    spec["enum"] = [named]
            if not spec.get(SAID) or spec.get("type") != "string":
                continue
            if spec.get("pattern") == CLOCK_PATTERN:
                if heard:
                    del spec["pattern"]
                    spec["enum"] = list(heard)
                else:
                    unsaid_times.append(key)
            elif "enum" in spec:
                values = tuple(spec["enum"])
                if values not in enums:
                    last = latest(messages, lambda text: _said_in(values, text, profile))
                    if is_days(values):  # a day said in more words too, and no day said only inside one
                        enums[values] = (_days_in_order(values, last) or _days_in_order(
                            values, {v for text in said.texts for v in _said_in(values, text, profile)}) or values)
                    else:
                        enums[values] = ([v for v in values if v in last]
                                         or [v for v in values if said.says(v)] or values)
                spec["enum"] = list(enums[values])
            elif "pattern" in spec:
                continue
            elif "examples" in spec and (named := services_pattern(said_last, spec["examples"])):
                spec["pattern"] = named  # a service the business offers, named last: one of those
            elif "examples" in spec and (named := services_pattern(theirs, spec["examples"], runs_last)):
                spec["pattern"] = named  # named before: one of those, or another the latest words name
            elif free:
                spec["pattern"] = free
        for key in unsaid_times:   # nobody said a time: the grammar writes none (settle would drop it)
            del properties[key]
    return out
