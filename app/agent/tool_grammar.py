"""Tool calls that always parse: which next token keeps the reply's tool call valid for the tools' schemas.

The left sampler (llm.generate.left_reply) asks `ToolCallGrammar.allows(ids, token)` for the token it would
commit; a token that would break the call is passed over for the model's best token that keeps it valid
(constrained decoding, as JSON-schema guided generation does). Outside `<tool_call>` ... `</tool_call>` the text
is spoken: no quote, brace, bracket, underscore or "<" that does not open a call. Inside, the call must be the
agent's compact JSON (app.agent.protocol.format_tool_call):

    {"name":"<tool>","arguments":{"<key>":"<value>",...}}</tool_call>

with a known tool, its argument keys in the schema's order (the order the training dialogues use), every
required one present, and each value of its kind: one of the enum's values (day, topic), "HH:MM" on a 24-hour
clock (time), or text of letters, spaces and a few marks (name, service; never a comma, a digit or a quote).
Given what the conversation said (`app.agent.heard.heard`), values also come from it:
- a name is a whole run of capitalized words the caller said within one phrase ("Noah Park" from "This is Noah
  Park calling, thanks."; not "Noah" alone, "Park", "Noah Park calling", "Tuesday" or "Hi"): the agent books,
  cancels and looks up under the caller's own name, never under a name it made up or cut short;
- a value with examples (the business's services, app.agent.tools.Toolbox.schemas) is one the caller named, by its
  name or one of the profile's aliases (any of them if the caller named none), or a whole run of the caller's
  words between those that are never part of a service's name ("eyelash extensions" from "Could I get eyelash
  extensions on Thursday?"): a service the business does not offer, which the tool refuses with a reason;
- a time or a day is one the caller or the agent said, those of the caller's latest message if it says any; a
  time is read both ways when it may be either ("three thirty": 03:30 or 15:30, app.agent.spoken_times); an optional
  time or day nobody said is left out ("Anything free on Friday?").
Spoken text, given what the conversation said, reads capitalized words back whole: inside a sentence, a
capitalized word is one a message of the conversation holds (`Heard.speaks`: "You're all set, Samuel.", never
"Samue" or "Ahmehmed"), and the turn does not end inside one. A call opens the reply (or follows another call),
never after speech; no generated reply does either.
The model still chooses every value; the grammar only rules out what the conversation never said. A call that
had to be finished with a value nobody said (a required time, when none was) fails `Heard.grounds`, and the agent
does not run it (app.agent.loop.Agent.respond).
"""
import json
from functools import lru_cache

from app.agent.heard import Heard
from app.agent.protocol import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

_TEXT_MARKS = {"name": " '-.", "service": " '-&"}  # besides letters
_TEXT_MAX = 40  # characters of a name or a service


class _End(Exception):
    """The text ran out where the grammar still expects more: a valid prefix."""


class _Mismatch(Exception):
    """The text breaks the grammar."""


class _Cursor:
    def __init__(self, text: str):
        self.text, self.i = text, 0

    def peek(self) -> str:
        if self.i >= len(self.text):
            raise _End
        return self.text[self.i]

    def literal(self, expected: str) -> None:
        for char in expected:
            if self.peek() != char:
                raise _Mismatch
            self.i += 1

    def value(self, rule) -> str:
        """The text up to the next '"' (consumed), judged by rule = (prefix ok, complete): complete if the quote
        is there, else a valid prefix (the text ran out)."""
        prefix_ok, complete = rule
        end = self.text.find('"', self.i)
        if end < 0:
            raise _End if prefix_ok(self.text[self.i:]) else _Mismatch
        value, self.i = self.text[self.i:end], end + 1
        if not complete(value):
            raise _Mismatch
        return value


def _one_of(options):
    """(prefix ok, complete) for a value that must be one of `options`."""
    return (lambda value: any(o.startswith(value) for o in options)), options.__contains__  # a tuple


def _time_prefix(value: str) -> bool:
    """A prefix of "HH:MM" (00:00-23:59)."""
    pattern = ("012", "0123456789", ":", "012345", "0123456789")
    if len(value) > 5 or any(c not in allowed for c, allowed in zip(value, pattern)):
        return False
    return not (len(value) >= 2 and value[0] == "2" and value[1] > "3")


def _text(marks: str):
    """(prefix ok, complete) for a name or a service: letters and `marks`, a letter first, no double spaces."""
    def prefix_ok(value: str) -> bool:
        return (len(value) <= _TEXT_MAX - value.endswith(" ") and all(c.isalpha() or c in marks for c in value)
                and (not value or value[0].isalpha()) and "  " not in value)
    return prefix_ok, lambda value: bool(value) and not value.endswith(" ") and prefix_ok(value)


def _said_run(rule, said: tuple[tuple[str, ...], ...]):
    """`rule` (prefix ok, complete) narrowed to a run of consecutive words of one caller message that the rule
    takes whole (so every prefix it allows can be finished); `rule` itself if no word is one."""
    prefix_ok, complete = rule
    if not any(complete(w) for words in said for w in words):
        return rule

    def runs(value: str, partial: bool) -> bool:
        parts = value.split(" ")
        for words in said:
            for i in range(len(words) - len(parts) + 1):
                run = words[i:i + len(parts)]
                if run[:-1] == tuple(parts[:-1]) and (run[-1] == parts[-1] or
                                                      partial and run[-1].startswith(parts[-1])):
                    if complete(" ".join(run)):
                        return True
        return False

    return (lambda value: prefix_ok(value) and runs(value, True)), (lambda value: complete(value) and
                                                                     runs(value, False))


def _whole_run(rule, runs: tuple[tuple[str, ...], ...]):
    """`rule` narrowed to all the words of one of `runs` ("Noah Park", not "Noah" or "Park"); `rule` itself if
    it takes none of them."""
    values = tuple(v for v in dict.fromkeys(" ".join(run) for run in runs) if rule[1](v))
    return _one_of(values) if values else rule


# Marks no spoken reply holds (none of the generated dialogues' replies does; a "<" may open a call).
_NOT_SPOKEN = frozenset('"{}[]<>_|\\=')


def _markup(text: str) -> bool:
    """Does spoken text hold what only a tool call may: a quote, a brace, or a "<" that does not open a call (a
    stray '"}}</tool_call>' or '","day":"tomorrow"' after a reply would be spoken)?"""
    tag = text.rfind("<")
    if tag >= 0:
        if not TOOL_CALL_OPEN.startswith(text[tag:]) or text[:tag].strip():
            return True     # a call opens a reply, never after speech (no generated reply does that)
        text = text[:tag]  # the call opening after it
    return any(c in _NOT_SPOKEN for c in text)


def _either(a, b):
    """(prefix ok, complete) of values that either rule takes."""
    return (lambda value: a[0](value) or b[0](value)), (lambda value: a[1](value) or b[1](value))


def _value_rule(key: str, spec: dict):
    if "enum" in spec:
        return _one_of(spec["enum"])
    if key == "time":
        return _time_prefix, lambda value: len(value) == 5 and _time_prefix(value)
    return _text(_TEXT_MARKS.get(key, _TEXT_MARKS["name"]))


class ToolCallGrammar:
    """allows(ids, token): may `token` follow the reply `ids`? Built from the tools' JSON-schema descriptions
    (app.agent.tools.SCHEMAS) and the text of every token of the model's vocabulary."""

    def __init__(self, schemas: list[dict], token_texts: list[str]):
        self.texts = token_texts  # "" for special tokens (end of turn, roles, mask)
        self.tools = {}
        for s in schemas:
            params = s.get("parameters", {})
            props = params.get("properties", {})
            self.tools[s["name"]] = ({k: (_value_rule(k, v), tuple(v.get("examples", ()))) for k, v in props.items()},
                                     set(params.get("required", ())))
        self._names = _one_of(tuple(self.tools))

    @classmethod
    def for_tokenizer(cls, schemas: list[dict], tokenizer) -> "ToolCallGrammar":
        size = tokenizer.get_vocab_size()
        return cls(schemas, [tokenizer.decode([i], skip_special_tokens=True) for i in range(size)])

    def allows(self, ids: list[int], token: int, heard: Heard | None = None) -> bool:
        """May `token` follow the reply `ids`? heard: what the conversation said (`heard`), which names,
        services and times must come from; None: only the schemas hold."""
        before = "".join(self.texts[i] for i in ids)
        if not self.texts[token]:  # a special token (end of turn) may not cut a call or a name short
            return self.state(before, heard) != "open" and (heard is None or heard.speaks(before + " ", len(before)))
        text = before + self.texts[token]
        state = self.state(text, heard)
        return state == "open" or state == "free" and (heard is None or heard.speaks(text, len(before)))

    def no_call(self, ids: list[int], token: int, heard: Heard | None = None) -> bool:
        """May `token` follow the reply `ids` in a reply that makes no tool call? Spoken text only: no "<", which
        opens one, no quote or brace, and no start that spells the tag without its "<" (a model that wanted to
        call and may not wrote "tool_call>"); given what the conversation said, only its capitalized words inside
        a sentence (Heard.speaks)."""
        before = "".join(self.texts[i] for i in ids)
        text = (before + self.texts[token]).lstrip()
        return not any(c in self.texts[token] for c in _NOT_SPOKEN) and not (
            text and (TOOL_CALL_OPEN[1:].startswith(text) or text.startswith(TOOL_CALL_OPEN[1:5]))) and (
            heard is None or heard.speaks(before + self.texts[token], len(before)))

    def state(self, text: str, heard: Heard | None = None) -> str:
        """"free" (no call open), "open" (a valid call so far, unfinished) or "broken" for a reply text."""
        start = text.rfind(TOOL_CALL_OPEN)
        if start < 0:
            return "broken" if _markup(text) else "free"
        if text[:start].strip() and not text[:start].rstrip().endswith(TOOL_CALL_CLOSE):
            return "broken"  # a call opens a reply (or follows another), never after speech
        cursor = _Cursor(text[start + len(TOOL_CALL_OPEN):])
        try:
            self._call(cursor, heard)
        except _End:
            return "open"
        except _Mismatch:
            return "broken"
        return "broken" if _markup(cursor.text[cursor.i:]) else "free"

    def _call(self, c: _Cursor, heard: Heard | None) -> None:
        c.literal('{"name":"')
        tool = c.value(self._names)
        c.literal(',"arguments":{')
        rules, required = self.tools[tool]
        values = {k: self._rule(k, *rules[k], heard, k in required) for k in rules}
        keys = [k for k in rules if values[k] is not None]  # an optional value nobody said is left out
        seen, later = set(), keys  # keys come in the schema's order, each at most once, none required skipped
        while True:
            if c.peek() == "}" and required <= seen:
                c.i += 1
                break
            if seen:
                c.literal(",")
            c.literal('"')
            stop = next((i for i, k in enumerate(later) if k in required), len(later) - 1)
            key = c.value(_one_of(tuple(later[:stop + 1])))
            later = keys[keys.index(key) + 1:]
            seen.add(key)
            c.literal(':"')
            c.value(values[key])
        c.literal("}" + TOOL_CALL_CLOSE)

    @staticmethod
    def _rule(key: str, rule, examples: tuple[str, ...], heard: Heard | None, required: bool):
        """A value's rule in this conversation (None: no value it could take, so an optional key is left out).

        A name is a whole run of the caller's capitalized words (any run of their words if none is capitalized).
        A time or a day is one said (any, if required and none was). A service is one the caller named, else one
        of the business's (examples); or a whole run of the caller's words that name none of them (a service it
        does not offer)."""
        if heard is None:
            return _either(_one_of(examples), rule) if examples else rule
        if key in ("time", "day"):
            said = heard.times if key == "time" else heard.days
            if said:
                return _one_of(tuple(sorted(said)))
            return rule if required else None
        if key == "name":
            named = _whole_run(rule, heard.names)
            return named if named is not rule else _said_run(rule, heard.words)
        if examples:
            return _either(_one_of(heard.services or examples), _whole_run(rule, heard.others))
        return rule


def grammar_for(tokenizer, schemas: list[dict]) -> ToolCallGrammar:
    """The grammar of `schemas` for `tokenizer`, built once per pair (an agent is made per session)."""
    return _grammar_for(tokenizer, json.dumps(schemas))  # the key order is the grammar's


@lru_cache(maxsize=8)
def _grammar_for(tokenizer, schemas_json: str) -> ToolCallGrammar:
    return ToolCallGrammar.for_tokenizer(json.loads(schemas_json), tokenizer)
