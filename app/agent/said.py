"""One rule for every tool and every business: an argument the schema marks `"x-said": true` must have been said.

A model may fill in a detail nobody gave (a time for a booking the caller never timed). The schema declares which
arguments must come from the conversation: in the caller's words, a tool's result, or the agent's own spoken replies
that follow one (a time it offered from the free times it looked up, and the caller took; a greeting's "today"
offers no day: app.agent.history.conversation_text). A value nobody said is dropped from the call; a call that then
lacks a required argument is not run, and the model is told which details are missing, so it asks for them (in
the order of the schema's `required` list); a call none of whose x-said details was said is no call at all
(`invented`: the model answers in words). What "appears"
means depends only on the value's form, never on a list of words:
- a clock time "HH:MM" is said when a message holds a time that may mean it ("half past three", "3:30 pm",
  app.agent.spoken_times);
- a business's service is said when its name or one of its aliases (the profile's) is in a message; one of
  several words also when said with other endings ("my hair colored" says "hair color", "teeth cleaned" says
  "teeth cleaning") or turned around, its last words first ("a haircut for a kid" says "kids haircut"; both
  app.agent.words.phrase_spans), a single word only as it is ("fill me in" says no filling); and, in a message
  that names no service so, by the last word of its name when no other service's name ends so or is that word
  ("a coloring" says the hair coloring: `_heads`);
- the day "today" also when a message names a part of it ("tonight", "this afternoon", "right now":
  app.agent.spoken_times.says_today);
- anything else is said when all its words are, accents, case and plural or possessive endings aside ("Sofia
  Ramirez" for "Sofía Ramírez", "saturday" for "Saturdays"); but a name (or any free value) made only of words
  an argument of any tool takes as its values is that argument's, not a name ("Thursday": `other_values`), as is
  one made only of numbers,
  and one that begins with a possessive ("my daughter": `possessed`) says who, not their name, and one made only
  of hesitation sounds ("Um": `hesitated`) says nothing.
"""
import re

from app.agent.history import conversation_text, details_called, latest_words
from app.agent.protocol import read_tool_message
from app.agent.spoken_times import says_today, times_in
from app.agent.words import (POSSESSIVES, SENTENCE_WORDS, fold, name_words, phrase_spans, root_of, roots_of, stem,
                             value_words, words_of)

SAID = "x-said"  # the schema keyword: this argument must have been said in the conversation
CLOCK_PATTERN = "^[0-2][0-9]:[0-5][0-9]$"  # a schema's "pattern" for a clock time, HH:MM on a 24-hour clock
_HHMM = re.compile(r"^\d{2}:\d{2}$")
_DESCRIPTION_WORD = 4  # the shortest word of a tool's description that names what it does ("call", not "the")


def _heads(profile) -> dict:
    """{word: service} for each service whose name is several words and ends in a noun made from a verb (one the
    stemmer cuts an ending of three letters or more from: "coloring", "adjustment", "fitting", "truing") that is
    its own: no other service's name ends with it, and no name or alias is that word alone. Callers name a
    service by that head ("a coloring" for the hair coloring, "a fitting" for the contact lens fitting); a plain
    word is as likely one of their own sentence ("can you repair my bike" at a shop with a flat tire repair, "my
    hair is dry" beside a blow dry), and "adjustment" at a shop with two adjustments names neither."""
    heads: dict[str, list] = {}
    for service in profile.services:
        parts = service.name.split()
        last = words_of(parts[-1]) if len(parts) > 1 else []
        # "tune-up" is two words to _words: its "up" is no head
        if len(last) == 1 and last[0].startswith(root_of(last[0])) and len(last[0]) - len(root_of(last[0])) >= 3:
            heads.setdefault(last[0], []).append(service)
    whole = {tuple(words_of(form)) for s in profile.services for form in (s.name, *s.aliases)}
    return {word: found[0] for word, found in heads.items() if len(found) == 1 and (word,) not in whole}


def named_service(profile, text: str):
    """The profile's service that `text` names: its name or an alias, or else the longest name or alias among
    its words ("book a haircut" -> haircut, "a kids haircut please" -> kids haircut), or else the one whose
    name's last word it says (`_heads`: "a coloring please" -> hair coloring); None if it names none."""
    service = profile.service(text)
    if service is not None:
        return service
    words = words_of(text)
    roots = roots_of(words)
    named = [(len(words_of(form)), s) for s in profile.services for form in (s.name, *s.aliases)
             if phrase_spans(words, words_of(form), roots)]
    if named:
        return max(named, key=lambda n: n[0])[1]
    by_head = {id(s): s for word, s in _heads(profile).items() if word in words}
    return next(iter(by_head.values())) if len(by_head) == 1 else None


def names_last(value: str, messages: list[dict], profile) -> bool:
    """Whether `value` is a service of the profile that the caller's latest message names (`named_service`)."""
    last = latest_words(messages)
    service = named_service(profile, value) if profile is not None and last else None
    return service is not None and named_service(profile, last) == service


class Said:
    """What a conversation's `texts` said, read once: `says(value)` for as many values as a call or a grammar
    asks about (a long call's grammar asks about every day of every tool, each turn)."""

    def __init__(self, texts: list[str], profile=None):
        self.texts, self.profile = texts, profile
        self.words = [words_of(text) for text in texts]
        self.roots = [roots_of(words) for words in self.words]
        self.vocabulary = set().union(*self.words) if self.words else set()
        self._times: set[str] | None = None
        self._named: dict[str, list[str]] | None = None

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
        if self.profile is not None and self.profile.service(value) is not None:
            return bool(self.service_forms(value))
        wanted = set(words_of(value))
        if wanted == {"today"} and "today" not in self.vocabulary:
            return any(says_today(text) for text in self.texts)
        return bool(wanted) and wanted <= self.vocabulary

    def services_named(self, names) -> dict[str, list[str]]:
        """{name: the forms (`service_forms`) by which the texts name it} for those of the profile's services
        `names` they name somewhere other than inside a longer form of another one: "an eye exam for my daughter"
        (an optician's alias of its kids eye exam) names the kids eye exam, not the eye exam as well."""
        wanted = {service.name for service in map(self.profile.service, names) if service is not None} \
            if self.profile is not None else set()
        if not wanted:
            return {}
        if self._named is None:
            self._named = self._every_service_named()
        return {name: forms for name, forms in self._named.items() if name in wanted}

    def _every_service_named(self) -> dict[str, list[str]]:
        """`services_named` of every service of the profile, worked out once (a call's grammar asks of each)."""
        spans = [(i, start, end, service.name, text_form)
                 for service in self.profile.services
                 for text_form in (service.name, *service.aliases) for form in [words_of(text_form)] if form
                 for i, (words, roots) in enumerate(zip(self.words, self.roots))
                 for start, end in phrase_spans(words, form, roots)]
        by_name = {i for i, *_ in spans}   # the texts that name a service by its name or an alias
        heads = _heads(self.profile)
        spans += [(i, start, start + 1, heads[word].name, heads[word].name)
                  for i, words in enumerate(self.words) if i not in by_name
                  for start, word in enumerate(words) if word in heads]
        named: dict[str, list[str]] = {}
        for i, a, b, name, form in spans:
            inside = any(j == i and other != name and c <= a and b <= d and d - c > b - a
                         for j, c, d, other, _ in spans)
            if not inside and form not in named.setdefault(name, []):
                named[name].append(form)
        return named

    def service_forms(self, value: str) -> list[str]:
        """The forms of the profile's service `value` (its name, then its aliases) that the texts say: ["cavity"] of
        a dentist's filling for "I think I have a cavity"; [] when they name it by none, or `value` is no service."""
        service = self.profile.service(value) if self.profile is not None else None
        if service is None:
            return []
        forms = [form for form in (service.name, *service.aliases)
                 if any(phrase_spans(w, words_of(form), r) for w, r in zip(self.words, self.roots))]
        return forms or ([service.name] if service.name in self.services_named([service.name]) else [])


def is_said(value: str, texts: list[str], profile=None) -> bool:
    """Whether the conversation's `texts` said `value` (see the module's docstring)."""
    return Said(texts, profile).says(value)


def unsaid(name: str, arguments: dict, schemas: list[dict], messages: list[dict], profile=None) -> list[str]:
    """The arguments of a call of tool `name` that its schema marks x-said and the conversation never said: not in
    its messages, nor in a call of the history (each held to what was said when it was made: its words may have
    left the prompt's window since)."""
    said = Said(conversation_text(messages) + details_called(messages), profile)
    return [key for key, value in _said_strings(name, arguments, schemas).items() if not said.says(value)]


def rests_on(name: str, arguments: dict, schemas: list[dict], texts: list[str], profile=None) -> bool:
    """Whether a call of tool `name` holds a detail `texts` say: an x-said argument whose value they say."""
    said = Said(texts, profile)
    return any(said.says(value) for value in _said_strings(name, arguments, schemas).values())


def _said_strings(name: str, arguments: dict, schemas: list[dict]) -> dict:
    """The string arguments of a call of tool `name` that its schema marks x-said (none for an unknown tool)."""
    properties = properties_of(name, schemas)
    return {key: value for key, value in arguments.items()
            if properties.get(key, {}).get(SAID) and isinstance(value, str)}


def schema_of(name: str, schemas: list[dict]) -> dict | None:
    """The schema of tool `name` among `schemas`; None for a tool they do not have."""
    return next((s for s in schemas if s["name"] == name), None)


def properties_of(name: str, schemas: list[dict]) -> dict:
    """The arguments the schema of tool `name` takes, by name ({} for a tool `schemas` do not have)."""
    schema = schema_of(name, schemas)
    return {} if schema is None else schema["parameters"].get("properties", {})


def lacking(schema: dict, arguments: dict) -> list[str]:
    """The required arguments of `schema` that `arguments` lacks (absent or empty), in the order of its `required`
    list (the order the agent asks for them)."""
    return [k for k in schema["parameters"].get("required", ()) if arguments.get(k) in (None, "")]


def settle(name: str, arguments: dict, schemas: list[dict], messages: list[dict], profile=None) -> tuple[dict, list[str]]:
    """The call's arguments less every x-said one nobody said, and the required arguments it then lacks, in the
    order of the schema's `required` list (the order the agent asks for them). A call that lacks none runs ("what
    are your hours" with a day nobody named is still a question about the hours); one that lacks some is not run:
    the model is told what is missing (`missing_result`) and asks the caller."""
    schema = schema_of(name, schemas)
    if schema is None:
        return arguments, []
    unsaid_keys = {*unsaid(name, arguments, schemas, messages, profile), *other_values(schema, arguments, schemas),
                   *possessed(schema, arguments), *hesitated(schema, arguments),
                   *someone_else(schema, arguments, messages, profile)}
    kept = {k: v for k, v in arguments.items() if k not in unsaid_keys}
    return kept, lacking(schema, kept)


def other_values(schema: dict, arguments: dict, schemas: list[dict] = ()) -> list[str]:
    """The free arguments (`is_free`) of a call whose value is made only of words that an argument of the tool, or
    an x-said one of another tool of `schemas`, takes as its values (its `enum`, or its `examples`: the business's
    services): a booking's name "Thursday" is the day's (its enum), said, but not as a name. ("1:30 then", asked
    for a time after "a beard trim on Thursday", was booked under the name Thursday; "which one is the latest one
    you have?", after "a haircut on friday?", looked up the appointments of "friday", a tool that takes no day;
    "do you do emergency exams?" at a dentist's, those of "emergency".) So is one made only of numbers, a time's or
    a count's: "Okay, 9 2 30 further." (Whisper's hearing of "oh, ok. then 2:30 for her") was booked under the
    name "9 2 30"."""
    properties = [*schema["parameters"].get("properties", {}).items(),  # the tool's own; others' the caller says
                  *((k, spec) for s in schemas for k, spec in s["parameters"].get("properties", {}).items()
                    if spec.get(SAID))]

    def others(key: str) -> set[str]:   # a service is made of the services' words: those of other arguments
        return set().union(*(value_words(v) for k, spec in properties if k != key
                             for v in (*spec.get("enum", ()), *spec.get("examples", ())) if isinstance(v, str)))
    return [key for key, value in _free_values(schema, arguments)
            if value_words(value) <= others(key) or not any(c.isalpha() for c in value)]


def possessed(schema: dict, arguments: dict) -> list[str]:
    """The free arguments (`is_free`) of a call whose value begins with a possessive determiner: "my daughter" says
    who, not their name. ("I'd like to book for my daughter, a kids haircut saturday at 10" was booked under the
    name "my daughter", and her own name, given next, found the slot taken by it.)"""
    return [key for key, value in _free_values(schema, arguments)
            if SENTENCE_WORDS.findall(fold(value))[0] in POSSESSIVES]


# English's filled pauses as speech recognizers write them ("Okay so, Um, 5:30 in the afternoon.")
_HESITATIONS = frozenset({"um", "umm", "uh", "uhh", "uhm", "er", "erm", "ah", "hmm", "hm", "mm", "mhm"})


def hesitated(schema: dict, arguments: dict) -> list[str]:
    """The free arguments (`is_free`) of a call whose value is made only of hesitation sounds: "Okay so, Um, 5:30 in
    the afternoon.", asked for a time, was booked under the name "Um" (the probe of the name wrote it with 0.85 of
    the model's probability, an optician's held-out call, 2026-12-05)."""
    return [key for key, value in _free_values(schema, arguments)
            if set(SENTENCE_WORDS.findall(fold(value))) <= _HESITATIONS]


def known(messages: list[dict], key: str) -> list[str]:
    """The string values that tools' successful results in `messages` gave for `key`, in order."""
    results = [result for _, result in filter(None, map(read_tool_message, messages))]
    return [result[key] for result in results if result.get("ok", True) and isinstance(result.get(key), str)]


def someone_else(schema: dict, arguments: dict, messages: list[dict], profile=None) -> list[str]:
    """The free arguments of a call that give no `examples` (a name) whose value is one a tool's result confirmed
    in the call (`known`: the caller's booking, a lookup) and the caller's latest message does not say, when that
    message speaks of someone else: a possessive determiner before a word that names nothing of the business's (its
    prompt's words, its services and their aliases): "my sister", "her brother", "my wife", but not "my
    appointment" or "my haircut"; "his" and "their" whatever follows. "book a blow dry on Tuesday at 11, Emma
    Lindqvist" then "my sister also wants a blow dry Tuesday at 11:30" had the model book the sister under Emma's
    name, which moved Emma's own booking; the name is asked for instead. The sister's own name, given in a turn
    before ("10:30 for her is fine" after her booking was refused), stays hers."""
    last = latest_words(messages)
    words = SENTENCE_WORDS.findall(fold(last))
    if not POSSESSIVES.intersection(words):
        return []
    texts = [m["content"].replace("_", " ") for m in messages if m["role"] == "system"]
    if profile is not None:
        texts += [profile.name, profile.address] + [" ".join([s.name, *s.aliases]) for s in profile.services]
    business = set(words_of(" ".join(texts)))
    others = any(w in ("his", "their") or (w in POSSESSIVES - {"your"} and i + 1 < len(words)
                                           and stem(words[i + 1]) not in business)
                 for i, w in enumerate(words))
    if not others:
        return []
    properties = schema["parameters"].get("properties", {})
    said_last = Said([last], profile)
    return [key for key, value in _free_values(schema, arguments)
            if not properties[key].get("examples") and not said_last.says(value)
            and name_words(value) in {name_words(v) for v in known(messages, key)}]


def _free_values(schema: dict, arguments: dict) -> list[tuple[str, str]]:
    """(key, value) of a call's free arguments (`is_free`) that hold a word."""
    properties = schema["parameters"].get("properties", {})
    return [(key, value) for key, value in arguments.items()
            if is_free(properties.get(key, {})) and isinstance(value, str) and SENTENCE_WORDS.search(fold(value))]


def description_words(schema: dict) -> set[str]:
    """The words of a tool's description that may name what it does: "Hand the call to a person on the staff." ->
    {"hand", "call", "person", "staff"}."""
    return {w for w in SENTENCE_WORDS.findall(schema.get("description", "").lower()) if len(w) >= _DESCRIPTION_WORD}


def names_tool(name: str, schemas: list[dict], text: str) -> bool:
    """Whether `text` says a word of tool `name`'s description that no other tool's description holds: "just
    cancel it please" names the cancellation ("Cancel the caller's upcoming appointment ..."); "appointment" alone
    names none: the list's description holds "appointments" (words are compared without a plural's "s")."""
    singular = lambda w: w[:-1] if w.endswith("s") and len(w) > _DESCRIPTION_WORD else w  # noqa: E731
    words = {s["name"]: set(map(singular, description_words(s))) for s in schemas}
    if name not in words:
        return False
    own = words[name].difference(*(w for other, w in words.items() if other != name))
    return bool(own & set(map(singular, SENTENCE_WORDS.findall(text.lower()))))


def invented(name: str, arguments: dict, kept: dict, schemas: list[dict]) -> bool:
    """Whether a call of tool `name` rests on nothing the conversation said: it wrote x-said arguments and `settle`
    kept none of them (`kept`). A model that read no request for the tool in the caller's words still writes a
    call now and then, its details made up ("is it safe to color my hair while I'm pregnant?" made an
    availability check for a Friday at 10 nobody named); asking the caller for what such a call lacks answers a
    question they never asked."""
    schema = schema_of(name, schemas)
    if schema is None:
        return False
    properties = schema["parameters"].get("properties", {})
    written = [k for k in arguments if properties.get(k, {}).get(SAID)]
    return bool(written) and not any(k in kept for k in written)


def is_free(spec: dict) -> bool:
    """An x-said string with no values of its own to choose from (no enum, no clock pattern): a name, a service
    (its examples aside), held to the caller's words by the reply grammar (app.agent.held: `held`, `words_pattern`)."""
    return bool(spec.get(SAID)) and spec.get("type") == "string" and "enum" not in spec and \
        spec.get("pattern") != CLOCK_PATTERN


def missing_result(missing: list[str]) -> dict:
    """What a call that lacks required details returns to the model instead of running."""
    return {"ok": False, "missing": list(missing)}
