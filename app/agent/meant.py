"""What the model meant by its calls: the shares of its probability a call's values had under the reply grammar,
the details it left out but gives when asked (probes), and the part of a caller's turn it acts on.

The reply grammar holds a call to the details said (app.agent.held.held), so a value the model did not mean may be
forced on it; the decoder says, per token, the share of the model's probability the grammar allowed, and a free
value written with almost none of it is dropped as unsaid (`free_shares`, UNMEANT_SHARE). A required detail the
caller gave and the call left out is probed: the model writes the call again up to it (`probe_prefix`,
`probed_value`). A trailing courtesy may turn an answer into small talk for the model: it is asked again without
the caller's last few words, or its first and last (`courtesy_parts`). A question the model weighed a call for
but would answer otherwise is answered by that call: the question before asked about another value
(`CallCheck.followed_up`), a service the business offers (`asked_of_a_service`), a tool's topic (`named_topic`).
`CallCheck` applies these to an agent's generations.
"""
import json
import logging
import re
import threading
import time

from app.agent import schema_grammar
from app.agent.protocol import TOOL_CALL_OPEN, TOOL_CALL_RE, compact, parse_tool_calls, read_tool_message
from app.agent.held import fullest, held, known, named_alone, says_a_value
from app.agent.said import (SAID, Said, invented, is_free, latest_user, latest_words, name_words, names_last, rests_on,
                            settle, value_words)
from app.agent.spoken_times import times_in

log = logging.getLogger(__name__)

PROBE_TOKENS = 16       # the most tokens a probe writes for one value (a name of a few words, a service, a time)
# A probed value is the call's when the grammar allowed at least this share of the model's probability wherever it
# was written: a value the model meant, not one forced on it. `parley -v eval --dialogues 60` (salon and bike shop,
# 2026-12-04): names the callers gave had 0.72-1.0; greetings, days and sentence starts probed as names ("Hiya",
# "Tuesday", "Could") up to 0.38. Taking every probed value, the salon made 5 calls where none was needed.
PROBED_SHARE = 0.5
# A caller's last few words may be a courtesy that turns an answer into small talk for the model: "Joaquin Santos,
# thanks." (asked for a name) drew "You're welcome!" with 0.001 of its probability on a call, "Joaquin Santos." a
# call. When the model would not call for the whole turn, it is asked again without up to this many last words
# (and a short first clause: "Hello, Kenji, thanks." drew "You're welcome!" at an optician, 2026-12-04), and the
# reply opens with a call when it would call for what is left (CALL_SHARE of its probability).
COURTESY_WORDS = 4
CALL_SHARE = 0.5

# A question that names only another value for a detail of the question before it ("how much is a haircut?",
# then "okay and uh, a beard trim?") asks that question again (`CallCheck.followed_up`). The adapted brain took
# such turns for bookings: it wrote book_appointment with 0.62-0.71 of its probability on the tool's name and the
# question before it, business_info, 0.12-0.47 (the salon, 2026-12-05); a booking said as one ("ok a haircut then
# please", no question) gave business_info 0.08, "can I book a haircut then?" none. Below this share, the model
# did not consider the question before it at all.
FOLLOW_SHARE = 0.05

UNMEANT_SHARE = 0.02  # below this share of the model's probability on what the grammar allowed, a value was forced
_STRING_PAIR = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*"((?:[^"\\]|\\.)*)"')


def free_shares(text: str, offsets: list[int], shares: list[float], schemas: list[dict]) -> list[dict[str, float]]:
    """Per tool call in `text` (a generation's; `offsets[i]` the character where its token i starts, `shares[i]`
    the share of the model's probability the reply grammar allowed where that token was written), each free
    x-said argument's (`is_free`) least share over the tokens of its value and the one that closed it.

    A share below UNMEANT_SHARE means the model did not mean that value. The grammar holds a free value to the
    caller's words (`held`); a model that meant one nobody said (a service the caller never named) then writes
    whichever of their words is left ("please", "put": "We don't offer please."). Such a value was not said by
    anyone: the agent drops it as `settle` drops an unsaid one, and the call asks for it."""
    properties = {s["name"]: s["parameters"].get("properties", {}) for s in schemas}
    out = []
    for call in TOOL_CALL_RE.finditer(text):
        body, start = call.group(1), call.start(1)
        name = re.search(r'"name"\s*:\s*"([^"]*)"', body)
        args_at = body.find('"arguments"')
        least: dict[str, float] = {}
        if name and args_at >= 0:
            free = {k for k, spec in properties.get(name.group(1), {}).items() if is_free(spec)}
            for pair in _STRING_PAIR.finditer(body, args_at + len('"arguments"')):
                if pair.group(1) not in free:
                    continue
                first, last = start + pair.start(2), start + pair.end(2)  # the value, and its closing quote
                tokens = [i for i, at in enumerate(offsets)
                          if at <= last and (offsets[i + 1] if i + 1 < len(offsets) else len(text)) > first]
                if tokens:
                    least[pair.group(1)] = min(shares[i] for i in tokens)
        out.append(least)
    return out


def probe_prefix(name: str, arguments: dict, key: str, schema: dict) -> str:
    """The start of a call of tool `name` that goes on to argument `key`: its `arguments` that the schema lists
    before `key` (the grammar's order), then `"key`, for the model to write the rest (`CallCheck._probe`). The key's
    closing quote is the model's to write: it writes `":"` as one token, and a prompt cut after `":` reads to it
    as nothing it has seen."""
    order = list(schema["parameters"].get("properties", {}))
    before = {k: arguments[k] for k in order[:order.index(key)] if k in arguments}
    return TOOL_CALL_OPEN + compact({"name": name, "arguments": before})[:-2] + ("," if before else "") + \
        compact(key)[:-1]


def probed_value(text: str, start: int, offsets: list[int], shares: list[float]) -> tuple[str | None, float]:
    """The JSON string value a probe wrote after the key that ends at character `start` of `text` (its
    generation's; `offsets[i]` the character where token i starts, `shares[i]` its share of the model's
    probability the grammar allowed), and the least share over the tokens of the value, quotes included: (None,
    0.0) when the value did not close."""
    value = re.match(r'": ?("(?:[^"\\]|\\.)*")', text[start:])  # the grammar allows one space after ":"
    if value is None:
        return None, 0.0
    first, end = start + value.start(1), start + value.end(1)
    tokens = [i for i, at in enumerate(offsets)
              if at < end and (offsets[i + 1] if i + 1 < len(offsets) else len(text)) > first]
    return json.loads(value.group(1)), min((shares[i] for i in tokens), default=0.0)


_SENTENCE_WORDS = re.compile(r"[\w']+")
_CLAUSE_END = re.compile(r"[,;.?!]+(?=\s)")


def leading_parts(text: str, most_words: int) -> list[str]:
    """`text` without its last clause, then without its last two, and so on, longest first, while the words left
    out are at most `most_words` and some remain: "Joaquin Santos, thanks, thanks." -> ["Joaquin Santos, thanks.",
    "Joaquin Santos."]. A clause ends at a comma or a sentence end; each part ends as a sentence does, as a speech
    recognizer writes it."""
    text = text.strip()
    parts = []
    for cut in reversed(list(_CLAUSE_END.finditer(text))):
        lead = text[:cut.start()].strip()
        if not _SENTENCE_WORDS.search(lead) or len(_SENTENCE_WORDS.findall(text[cut.start():])) > most_words:
            break
        parts.append(lead + (cut.group().strip(",;")[-1:] or "."))
    return parts


def courtesy_parts(text: str, most_words: int) -> list[str]:
    """The parts of `text` a courtesy around it may hide: `leading_parts`, then, when its first clause is shorter
    than the rest (a greeting, not the answer), the text without it and the leading parts of what is left, while
    the words left out in all are at most `most_words`: "Hello, Kenji, thanks." -> ["Hello, Kenji.", "Hello.",
    "Kenji, thanks.", "Kenji."]; "Joaquin Santos, thanks." -> ["Joaquin Santos."]."""
    text = text.strip()
    parts = leading_parts(text, most_words)
    first = _CLAUSE_END.search(text)
    if first is None:
        return parts
    rest, dropped = text[first.end():].strip(), len(_SENTENCE_WORDS.findall(text[:first.start()]))
    if 0 < dropped < min(most_words, len(_SENTENCE_WORDS.findall(rest))):
        parts += [rest, *leading_parts(rest, most_words - dropped)]
    return parts


def question_before(messages: list[dict]) -> tuple[str, dict] | None:
    """The one call (tool name, arguments) the agent made for the caller's turn before their latest in
    `messages`, when it made one and its result was not a refusal; else None."""
    latest = latest_user(messages)
    before = max((i for i in range(max(latest, 0)) if messages[i]["role"] == "user"), default=-1)
    if before < 0:
        return None
    between = messages[before + 1:latest]
    calls = [call for m in between if m["role"] == "assistant" for call in parse_tool_calls(m["content"])[0]]
    results = [read for m in between for read in [read_tool_message(m)] if read is not None]
    if len(calls) != 1 or len(results) != 1 or not calls[0][0] or results[0][1].get("ok") is not True:
        return None
    return calls[0]


def _a_question(messages: list[dict]) -> bool:
    """Whether `messages` end with the caller's turn, and it ends as a question does."""
    return bool(messages) and messages[-1]["role"] == "user" and messages[-1]["content"].rstrip().endswith("?")


class CallCheck:
    """An agent's calls held to what the model meant and the caller said: `settled` (each call and what it lacks),
    `made_up`, `acted_on_part`, the questions answered by a call the model weighed (`followed_up`,
    `asked_of_a_service`, `named_topic`) and the `reply_grammar` the generations are decoded under."""

    def __init__(self, engine, toolbox, options):
        self.engine, self.toolbox, self.options = engine, toolbox, options

    def acted_on_part(self, messages: list[dict], replies, cancel) -> tuple[object | None, float]:
        """The call the model writes for the caller's last turn without its last few words (`_called_part`), when
        it lacks nothing the tool needs (`settled`, probes included) and holds a detail the part says
        (app.agent.said.rests_on), and the seconds this took (the generation's own included); (None, seconds)
        otherwise: a call the caller's words did not ask for is not made for them, the model answers the whole
        turn its own way."""
        started = time.perf_counter()
        opening = self.engine.tokenizer.encode(TOOL_CALL_OPEN, add_special_tokens=False).ids
        part = self._called_part(messages, opening[0])
        matcher = None if part is None else replies.start()
        if matcher is None or not all(matcher.accept(t) for t in opening):
            return None, time.perf_counter() - started
        opts = self.options
        gen = self.engine.generate(messages[:-1] + [{"role": "user", "content": part}],
                                   max_new_tokens=opts.max_new_tokens, block_length=opts.block_length,
                                   threshold=opts.threshold, use_cache="block", cancel=cancel, matcher=matcher,
                                   draft_length=opts.draft_length, written=opening)
        calls, spoken = parse_tool_calls(gen.text)
        settled = self.settled(calls, gen, messages) if calls and not spoken else []
        seconds = time.perf_counter() - started
        if gen.stopped == "cancelled" or not settled or any(not name or missing for name, _, missing in settled):
            log.debug("the call for %r lacks details: %r", part, gen.text)
            return None, seconds
        schemas, profile = self.toolbox.schemas(), self.toolbox.profile
        if not any(rests_on(name, arguments, schemas, [part], profile) for name, arguments, _ in settled):
            # "Okay so, Awesome." drew the bike shop's hours, where "Okay so, Awesome, thank you." wanted small talk
            log.debug("the call for %r holds nothing its words said: %r", part, gen.text)
            return None, seconds
        gen.seconds = seconds
        return gen, seconds

    def followed_up(self, messages: list[dict], replies, cancel) -> tuple[object | None, float]:
        """The call that asks the caller's question before again, for a question that says nothing but another
        value of its details: "okay and uh, a beard trim?" after "how much is a haircut?" was answered. The
        model, opening its reply with a call, considered the call before (`question_before`, a tool that only
        reads) but preferred another (at least FOLLOW_SHARE of its probability on that tool's name, not the
        most); it writes the call before's tool with the details of its choice, and that call is the reply's
        when it lacks nothing and differs from the call before only in details it had, each of which the
        caller's latest words say (app.agent.said.rests_on). The generation and the seconds this took; (None,
        seconds) otherwise, and the model answers its own way. One pass over a few tokens past the prompt (whose
        keys the reply reuses) for each question after a call that read."""
        started = time.perf_counter()
        before = question_before(messages)
        read_only = getattr(self.toolbox, "read_only", None)
        if before is None or read_only is None or not read_only(before[0]) or not _a_question(messages):
            return None, time.perf_counter() - started
        name, asked = before
        gen, settled, share = self._weighed(messages, replies, cancel, name)
        seconds = time.perf_counter() - started
        if not settled or settled[0][2]:
            return None, seconds
        arguments, schemas, last = settled[0][1], self.toolbox.schemas(), [latest_words(messages)]
        changed = {k for k in asked.keys() | arguments.keys() if asked.get(k) != arguments.get(k)}
        if not changed or any(k not in asked or k not in arguments or not rests_on(
                name, {k: arguments[k]}, schemas, last, self.toolbox.profile) for k in changed):
            log.debug("the question before, asked again, is not the caller's (share %.3f): %r", share, gen.text)
            return None, seconds
        log.debug("the question before, asked again (share %.3f): %r", share, gen.text)
        gen.seconds = seconds
        return gen, seconds

    def named_topic(self, messages: list[dict], replies, cancel) -> tuple[object | None, float]:
        """The call of the one tool a question names the topic of: "great, what was the price again?" names
        business_info's topic "prices" (app.agent.held.named_alone: an enum the caller need not say, named by
        the latest words alone), and the model, which gave that tool 0.16 of its probability, checked free times
        (0.76). When the model weighed the tool (`_weighed`) it writes that tool's call, and that is the reply's
        when it lacks nothing and holds the value named. The generation and the seconds this took; (None,
        seconds) otherwise."""
        started = time.perf_counter()
        if not _a_question(messages):
            return None, time.perf_counter() - started
        said_last = Said([messages[-1]["content"]], self.toolbox.profile)
        named = {(s["name"], key, value) for s in self.toolbox.schemas()
                 for properties in [s["parameters"].get("properties", {})]
                 for key, spec in properties.items()
                 if not spec.get(SAID) and spec.get("type") == "string" and "enum" in spec
                 for value in [named_alone(key, properties, said_last)] if value is not None}
        if len({name for name, _, _ in named}) != 1:
            return None, time.perf_counter() - started
        (name, key, value), = named
        gen, settled, share = self._weighed(messages, replies, cancel, name)
        seconds = time.perf_counter() - started
        if not settled or settled[0][2] or settled[0][1].get(key) != value:
            return None, seconds
        log.debug("the tool whose topic the question names (share %.3f): %r", share, gen.text)
        gen.seconds = seconds
        return gen, seconds

    def _weighed(self, messages: list[dict], replies, cancel, name: str) -> tuple[object | None, list, float]:
        """The model's reply to `messages` written as a call of tool `name`, when the model, opening its reply
        with a call (CALL_SHARE), weighed that tool but preferred another: at least FOLLOW_SHARE of its
        probability on the first token of the tool's name (the tools' names begin with different tokens), not
        the most. The generation, its call as `settled` holds it (`_one_call`; [] unless it is one call of
        `name`), and that share; (None, [], share) when the model called it on its own or did not weigh it."""
        probabilities = getattr(self.engine, "next_token_probabilities", None)
        if probabilities is None:
            return None, [], 0.0
        tokenizer = self.engine.tokenizer
        opening = tokenizer.encode(TOOL_CALL_OPEN + '{"name":"', add_special_tokens=False).ids
        written = tokenizer.encode(TOOL_CALL_OPEN + '{"name":"' + name, add_special_tokens=False).ids
        if written[:len(opening)] != opening or len(written) == len(opening) \
                or float(probabilities(messages, [])[opening[0]]) < CALL_SHARE:
            return None, [], 0.0
        shares = probabilities(messages, opening)
        share = float(shares[written[len(opening)]])
        if share < FOLLOW_SHARE or share >= float(shares.max()):
            return None, [], share
        gen, settled = self._one_call(messages, replies, cancel, written)
        return gen, [call for call in settled if call[0] == name], share

    def asked_of_a_service(self, messages: list[dict], replies, cancel) -> tuple[object | None, float]:
        """The call the model writes for a question that names a service the business offers, when it would
        answer in words: "do you do fillings?" and "do you offer teeth whitening?" drew "I'm sorry, I can't help
        with that." from the adapted brain (0.39-0.47 of its probability on a call; given one, it wrote
        business_info with 0.82-0.94). What a business offers is a fact of its tools, as the system prompt says:
        the reply opens with a call, the model writes which, and it is the reply's when it holds a service the
        question names (a booking that lacks the day asks for it). The generation and the seconds this took;
        (None, seconds) otherwise. One pass over the question's few tokens the reused KV cache does not hold."""
        started = time.perf_counter()
        probabilities = getattr(self.engine, "first_token_probabilities", None)
        profile, text = self.toolbox.profile, messages[-1]["content"] if messages else ""
        if probabilities is None or profile is None or not _a_question(messages):
            return None, time.perf_counter() - started
        named = Said([text], profile).services_named([s.name for s in profile.services])
        opening = self.engine.tokenizer.encode(TOOL_CALL_OPEN, add_special_tokens=False).ids
        if not named or float(probabilities(messages)[opening[0]]) >= CALL_SHARE:
            return None, time.perf_counter() - started  # no service named, or the model calls on its own
        gen, settled = self._one_call(messages, replies, cancel, opening)
        seconds = time.perf_counter() - started
        service = lambda value: getattr(profile.service(value), "name", None) if isinstance(value, str) else None  # noqa: E731
        if not settled or not any(service(v) in named for v in settled[0][1].values()):
            log.debug("the call for a question of a service holds none it names: %r", gen and gen.text)
            return None, seconds
        log.debug("a question of a service, answered by a call: %r", gen.text)
        gen.seconds = seconds
        return gen, seconds

    def _one_call(self, messages: list[dict], replies, cancel, written: list[int]) -> tuple[object | None, list]:
        """The model's reply to `messages` that begins with the tokens `written` (a call's opening), under the
        reply grammar, and its one call as `settled` holds it ([] for a reply that is not one call alone, or was
        cancelled); (None, []) when the grammar does not take `written`."""
        matcher = replies.start()
        if not all(matcher.accept(t) for t in written):
            return None, []
        opts = self.options
        gen = self.engine.generate(messages, max_new_tokens=opts.max_new_tokens, block_length=opts.block_length,
                                   threshold=opts.threshold, use_cache="block", cancel=cancel, matcher=matcher,
                                   draft_length=opts.draft_length, written=written)
        calls, spoken = parse_tool_calls(gen.text)
        if gen.stopped == "cancelled" or len(calls) != 1 or spoken or not calls[0][0]:
            return gen, []
        return gen, self.settled(calls, gen, messages)

    def _called_part(self, messages: list[dict], opening: int) -> str | None:
        """The caller's last turn in `messages` without a few words at its end or its start (`courtesy_parts`,
        COURTESY_WORDS), when the model would open its reply to that with a call and would not to the whole turn
        (CALL_SHARE of its probability on a call's first token); else None. The decision to act is the model's, on
        what the caller asked: a trailing "thanks" or "see you then" does not make an answer small talk, and the
        call is the one the model writes for the words it acts on (for the whole turn, having begun a call, it
        may write another: "Emeka, thanks." after "Can I have your name?" transferred the call). One pass over the
        few tokens the reused KV cache does not hold, per part asked; none for a turn of one clause. opening: the
        id of a call's first token."""
        probabilities = getattr(self.engine, "first_token_probabilities", None)
        if probabilities is None or not messages or messages[-1]["role"] != "user":
            return None
        parts = courtesy_parts(messages[-1]["content"], COURTESY_WORDS)
        if not parts:
            return None
        if float(probabilities(messages)[opening]) >= CALL_SHARE:
            return None  # the model opens with a call on its own
        for part in parts:
            share = float(probabilities(messages[:-1] + [{"role": "user", "content": part}])[opening])
            if share >= CALL_SHARE:
                log.debug("a call for %r without its last words (%r: %.3f)", messages[-1]["content"], part, share)
                return part
        return None

    def settled(self, calls: list[tuple[str, dict]], gen, messages: list[dict],
                spent: list | None = None) -> list[tuple[str, dict, list[str]]]:
        """Each call of generation `gen` with what it lacks: with the embedded brain, less the x-said arguments
        nobody said in `messages` (the prompt's) and the free ones the grammar forced on the model
        (`_unmeant`), plus the required ones it left out that the model gives when asked (`_probed`), a name in
        the fullest form the caller just said it (`fullest`), and the required arguments it then lacks
        (app.agent.said.settle); a call that lacks some is not run. spent gets the probes' generations."""
        if self.options.cache != "block":
            return [(name, arguments, []) for name, arguments in calls]
        schemas = self.toolbox.schemas()
        forced = self._unmeant(gen, schemas)
        if len(forced) != len(calls):  # an unfinished call (parse_tool_calls's last) is not in the text's calls
            forced = forced + [set()] * (len(calls) - len(forced))
        out = []
        for (name, arguments), drop in zip(calls, forced):
            if not name:
                out.append((name, arguments, []))
                continue
            # NOTE: a service the caller's latest words name is held to them (`held`), so the model, which meant
            # another ("Just a styling please." after a refused "eyelash extensions": 98.7% on "ey"), is forced
            # to it; that value is said now, not unmeant: dropped, the booking asked "what service?" again. So is
            # the only service the caller has named in the call: asked for a name, "Sean, thanks." after "a
            # filling" had the model, which meant "vacation", forced to the filling (0.0015), and the caller
            # heard "You're welcome!" (`parley eval --dialogues 60`, 2026-12-05: one more held-out call exact at
            # the salon, the dental clinic and the optician, none lost)
            said_now = {k for k in drop if names_last(str(arguments.get(k, "")), messages, self.toolbox.profile)
                        or self._only_service_named(str(arguments.get(k, "")), messages)}
            if drop - said_now:
                log.info("dropped, as unsaid: %s", ", ".join(sorted(drop - said_now)))
            drop -= said_now
            kept, missing = settle(name, {k: v for k, v in arguments.items() if k not in drop}, schemas, messages,
                                   self.toolbox.profile)
            if missing and not invented(name, arguments, kept, schemas):
                kept, missing = self._probed(name, arguments, kept, missing, messages, schemas, spent)
            kept = fullest(name, kept, schemas, messages)
            canonical = getattr(self.toolbox, "canonical", None)
            out.append((name, canonical(kept) if canonical else kept, missing))
        return out

    def _only_service_named(self, value: str, messages: list[dict]) -> bool:
        """Whether `value` is the one service of the business the caller has named in `messages` (by its name or
        an alias: `Said.services_named`), in any turn."""
        profile = self.toolbox.profile
        service = profile.service(value) if profile is not None else None
        if service is None:
            return False
        callers = Said([m["content"] for m in messages if m["role"] == "user"], profile)
        return list(callers.services_named([s.name for s in profile.services])) == [service.name]

    def _probed(self, name: str, written: dict, kept: dict, missing: list[str], messages: list[dict],
                schemas: list[dict], spent: list | None) -> tuple[dict, list[str]]:
        """The call's arguments and what it lacks after probing each required argument the model left out of it
        (`written`) while the caller said a value it may take (a name or a service: words of their own; a time: a
        clock time, not the time a tool result gave; a day: one of the schema's; the reply grammar holds it to
        what the conversation said: `held`):
        the model writes the call again up to that argument (`_probe`), and the value it writes is the call's
        when it is said and the model meant it (PROBED_SHARE). A model may close a call before details the caller
        gave turns ago ("this is Tyler", then the day, then the time): asking for them again is not what a
        person at a front desk does. An argument the model wrote and `settle` dropped (nobody said it, or the
        grammar forced it) is not probed: asked, the model would write it again. Nor is a value kept whose words
        the call holds as another detail: with the call `{"day":"friday", ...}` before it in the history, asked
        for the name the model copied "friday" (0.69 of its probability). A service the business does not offer
        is a value too ("eyebrow waxing"): the call that holds it, lacking the name still, gets the toolbox's
        refusal (Agent._lacking_result), not a question for the service the caller just named."""
        profile = self.toolbox.profile
        schema = next(s for s in schemas if s["name"] == name)
        spec = schema["parameters"].get("properties", {})
        callers = [m["content"] for m in messages if m["role"] == "user"]
        said, times = Said(callers, profile), set().union(*(times_in(text, clock_only=True) for text in callers))
        for key in missing:
            values = {"enum", "pattern"} & spec.get(key, {}).keys()  # none: any words (a name, a service)
            if key in written or values and not says_a_value(spec[key], said, times):
                continue  # written and dropped, or the caller said no value it may take: they have not given it
            confirmed = {name_words(v) for v in known(messages, key)}
            least = UNMEANT_SHARE if confirmed else PROBED_SHARE
            value, share = self._probe(messages, name, kept, key, schema, spent, least)
            log.debug("probed %s of %s: %r (share %.4f)", key, name, value, share)
            if value is None or share < (UNMEANT_SHARE if name_words(value) in confirmed else PROBED_SHARE) or any(
                    value_words(value) <= value_words(v) for v in kept.values() if isinstance(v, str)):
                continue  # not meant, or a word the call already holds as another detail ("friday" as a name)
            candidate, lack = settle(name, {**kept, key: value}, schemas, messages, profile)
            if key in candidate:
                kept, missing = candidate, lack
        return kept, missing

    def _probe(self, messages: list[dict], name: str, arguments: dict, key: str, schema: dict,
               spent: list | None, least: float = PROBED_SHARE) -> tuple[str | None, float]:
        """The value the model writes for argument `key` of a call of tool `name` that begins with `arguments`
        (`probe_prefix`), under the reply grammar, and the least share of the model's probability
        the grammar allowed over its tokens (`probed_value`); (None, 0.0) if it wrote none. The probe stops at a
        token written with less than `least` of it."""
        replies = self.reply_grammar(messages)
        if replies is None:
            return None, 0.0
        tokenizer, matcher = self.engine.tokenizer, replies.start()
        ids = tokenizer.encode(probe_prefix(name, arguments, key, schema), add_special_tokens=False).ids
        if not all(matcher.accept(t) for t in ids):
            log.debug("a probe of %s: the grammar does not take %r", key, probe_prefix(name, arguments, key, schema))
            return None, 0.0
        start = len(tokenizer.decode(ids, skip_special_tokens=True))
        closed, text = threading.Event(), []

        def on_block(piece: str) -> None:  # stop once the value's closing quote is written
            text.append(piece)
            if probed_value("".join(text), start, [], [])[0] is not None:
                closed.set()

        gen = self.engine.generate(messages, max_new_tokens=len(ids) + PROBE_TOKENS, block_length=1,
                                   threshold=self.options.threshold, use_cache="block", on_block=on_block,
                                   cancel=closed, matcher=matcher, draft_length=self.options.draft_length,
                                   written=ids, least_share=least)  # an unmeant token ends it at once
        if spent is not None:
            spent.append(gen)
        log.debug("a probe of %s wrote %r in %.0f ms", key, gen.text[start:], 1000 * gen.seconds)
        if len(gen.shares) != len(gen.ids):
            return None, 0.0
        offsets = [len(tokenizer.decode(gen.ids[:i], skip_special_tokens=True)) for i in range(len(gen.ids))]
        return probed_value(gen.text, start, offsets, gen.shares)

    def _unmeant(self, gen, schemas: list[dict]) -> list[set[str]]:
        """Per call of `gen`, the free arguments whose value the grammar forced on the model (a share below
        UNMEANT_SHARE: `free_shares`); nothing for a generation that does not say its shares."""
        shares, ids = getattr(gen, "shares", None), getattr(gen, "ids", None)
        if not shares or not ids or len(shares) != len(ids) or TOOL_CALL_OPEN not in gen.text:
            return []
        decode = self.engine.tokenizer.decode
        offsets = [len(decode(ids[:i], skip_special_tokens=True)) for i in range(len(ids))]
        least = free_shares(gen.text, offsets, shares, schemas)
        log.debug("the free values' least shares: %s in %r", least, gen.text)
        forced = [{k for k, share in call.items() if share < UNMEANT_SHARE} for call in least]
        for drop, call in zip(forced, least):
            if drop:
                log.info("the grammar forced %s on the model",
                         ", ".join(f"{k} (share {call[k]:.4f})" for k in sorted(drop)))
        return forced

    def made_up(self, calls: list[tuple[str, dict]], settled) -> bool:
        """Whether every call of a generation is made up (app.agent.said.invented: each wrote details for the
        caller to have said, nobody said any) and lacks required ones: not what the caller asked, so the turn
        leaves it out of the history and the model answers in words instead of asking for what it lacks. A call
        that rests on one detail said still asks for the rest ("a beard trim?" lacking a day); one that lacks
        nothing runs."""
        if self.options.cache != "block" or not calls:
            return False
        schemas = self.toolbox.schemas()
        return all(name and missing and invented(name, arguments, kept, schemas)
                   for (name, arguments), (_, kept, missing) in zip(calls, settled))

    def reply_grammar(self, messages: list[dict], speech_only: bool = False):
        """The reply grammar of this engine's tokenizer and these tools (app.agent.schema_grammar) for `messages`, its
        calls held to the details said (app.agent.held.held); speech_only: a reply that makes no call."""
        tokenizer = getattr(self.engine, "tokenizer", None)
        if not self.options.holds_calls or tokenizer is None:
            return None
        schemas = [] if speech_only else held(self.toolbox.schemas(), messages, self.toolbox.profile)
        return schema_grammar.grammar_for(tokenizer, schemas, self.engine.special.stop,
                                          self.engine.model.args.vocab_size)
