"""Calls the model weighed for a caller's turn but would not make, made for it when the caller's words ask for them.

The model decides; these ask it again, on its own probabilities, and the call it then writes is held by the reply
grammar and `CallCheck.settled` like any other (app.agent.meant):
- a trailing courtesy may turn an answer into small talk for the model: it is asked again without the caller's
  last few words, or its first and last (app.agent.courtesy, `Weighed.acted_on_part`);
- a question the model weighed a call for but would answer otherwise is answered by that call: the question
  before asked about another value (`Weighed.followed_up`), a service the business offers
  (`asked_of_a_service`), a tool's topic (`named_topic`);
- a turn that names what a tool taking no details does is answered by that tool, when the model would call it
  were it to call at all (`Weighed.named_tool`);
- a turn that completes the call the model weighs most (a name given after "Would you like me to book it?") is
  answered by that call (`Weighed.completed`).
A call made up whole gives way to the call of the tool the model weighed next, which `Weighed.one_call` writes
(app.agent.given_way).
"""
import logging
import time
from functools import cached_property

from app.agent.courtesy import courtesy_parts
from app.agent.held import named_alone
from app.agent.protocol import TOOL_CALL_OPEN, parse_tool_calls
from app.agent.history import latest_words, question_before
from app.agent.said import SAID, Said, description_words, is_free, properties_of, rests_on, unsaid
from app.agent.words import SENTENCE_WORDS, name_words

log = logging.getLogger(__name__)

# A caller's last few words may be a courtesy that turns an answer into small talk for the model: "Joaquin Santos,
# thanks." (asked for a name) drew "You're welcome!" with 0.001 of its probability on a call, "Joaquin Santos." a
# call. When the model would not call for the whole turn, it is asked again without up to this many last words
# (and a short first clause: "Hello, Kenji, thanks." drew "You're welcome!" at an optician, 2026-12-04), and the
# reply opens with a call when it would call for what is left (CALL_SHARE of its probability).
COURTESY_WORDS = 4
CALL_SHARE = 0.5

# A question that names only another value for a detail of the question before it ("how much is a haircut?",
# then "okay and uh, a beard trim?") asks that question again (`Weighed.followed_up`). The adapted brain took
# such turns for bookings: it wrote book_appointment with 0.62-0.71 of its probability on the tool's name and the
# question before it, business_info, 0.12-0.47 (the salon, 2026-12-05); a booking said as one ("ok a haircut then
# please", no question) gave business_info 0.08, "can I book a haircut then?" none. Below this share, the model
# did not consider the question before it at all.
FOLLOW_SHARE = 0.05

# A tool that takes no details (a transfer, the date, hanging up) is asked for by what it does, in the words of its
# description: "Connect me to a real person." ("Hand the call to a person on the staff.") drew "I'm sorry, I can't
# help with that." at three of four businesses' held-out calls, the model giving a call 0.25-0.48 of its
# probability and the transfer 0.78-0.96 of a call's (2026-12-05). "I need help" (0.27, the transfer 0.91) names
# nothing the transfer does; "is this a real person?" names a person, and a call would have been business_info
# (the transfer 0.005-0.008). At least this share of a call's probability on the tool's name: the model's choice.
NAMED_SHARE = 0.75

# A turn that gives what a call the model weighs lacked ("Noah Williams" after "Yes, Wednesday, December 9 at 10:30
# AM is free. Would you like me to book it?") drew "I'm sorry, I can't help with that." at an optician and the salon,
# the model giving a call 0.22-0.39 of its probability and book_appointment 0.72-0.82 of a call's (2026-12-05). At
# least this share on a call, and COMPLETED_SHARE of it on one tool, whose call lacks nothing and holds the caller's
# latest words (or, lacking some, a name or service of theirs): the model's own call (`Weighed.completed`). "Mila
# Novak" after a kids haircut's time was offered gave a call 0.21, the booking 0.61 of it (free times 0.36). A turn
# that is nothing but a free detail of that call (a name alone) needs only FOLLOW_SHARE on a call: "Greg Olsen" at a
# bike shop and "Rita Gomez" at an optician, each after "Would you like me to book it?", gave a call 0.13 and 0.11
# (the booking 0.57 and 0.86 of it) and heard "I'm sorry, I can't help with that."; a name has no other answer.
GIVEN_SHARE = 0.2
COMPLETED_SHARE = 0.5



def _a_question(messages: list[dict]) -> bool:
    """Whether `messages` end with the caller's turn, and it ends as a question does."""
    return bool(messages) and messages[-1]["role"] == "user" and messages[-1]["content"].rstrip().endswith("?")


def _topics_named(schemas: list[dict], said_last: Said) -> set[tuple[str, str, str]]:
    """(tool, argument, value) of each enum argument the caller need not say (a topic) whose one value the caller's
    latest words (`said_last`) alone name (app.agent.held.named_alone)."""
    return {(s["name"], key, value) for s in schemas
            for properties in [s["parameters"].get("properties", {})]
            for key, spec in properties.items()
            if not spec.get(SAID) and spec.get("type") == "string" and "enum" in spec
            for value in [named_alone(key, properties, said_last)] if value is not None}


class Weighed:
    """The calls a turn's first generation may be made to open with (`acted_on_part`, `followed_up`,
    `asked_of_a_service`, `named_topic`, `named_tool`), each with the seconds it took; `check`
    (app.agent.meant.CallCheck) holds them as the model's own calls are held."""

    def __init__(self, check):
        self.check = check
        self.engine, self.toolbox, self.options = check.engine, check.toolbox, check.options

    @cached_property
    def names(self) -> tuple[list[int], dict[str, list[int]]]:
        """A call's opening up to its tool's name (`<tool_call>{"name":"`, as ids), and per tool whose name begins
        with a token of its own after it, the opening and the name: the model's share of a call's probability on
        that tool is its probability at that first token (the tools' names begin with different tokens)."""
        tokenizer = self.engine.tokenizer
        opening = tokenizer.encode(TOOL_CALL_OPEN + '{"name":"', add_special_tokens=False).ids
        names = {}
        for schema in self.toolbox.schemas():
            written = tokenizer.encode(TOOL_CALL_OPEN + '{"name":"' + schema["name"], add_special_tokens=False).ids
            if written[:len(opening)] == opening and len(written) > len(opening):
                names[schema["name"]] = written
        return opening, names

    def acted_on_part(self, messages: list[dict], replies, cancel) -> tuple[object | None, float]:
        """The call the model writes for the caller's last turn without its last few words (`_called_part`), when
        it lacks nothing the tool needs (`CallCheck.settled`, probes included) and holds a detail the part says
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
        settled = self.check.settled(calls, gen, messages) if calls and not spoken else []
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
        named = _topics_named(self.toolbox.schemas(), Said([messages[-1]["content"]], self.toolbox.profile))
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

    def named_tool(self, messages: list[dict], replies, cancel) -> tuple[object | None, float]:
        """The call of a tool that takes no details, for a turn that says a word of its description, when the model
        would answer in words but, opening a call, would write that tool's (NAMED_SHARE of its probability on the
        name): "Connect me to a real person." is the transfer. Nothing the call holds can be made up: it holds
        nothing. The generation and the seconds this took; (None, seconds) otherwise. One pass over a few tokens
        past the prompt, for a turn that names such a tool."""
        started = time.perf_counter()
        probabilities = getattr(self.engine, "next_token_probabilities", None)
        if probabilities is None or not messages or messages[-1]["role"] != "user":
            return None, time.perf_counter() - started
        said = set(SENTENCE_WORDS.findall(messages[-1]["content"].lower()))
        opening, names = self.names
        named = [s["name"] for s in self.toolbox.schemas()
                 if s["name"] in names and not s["parameters"].get("properties") and said & description_words(s)]
        if not named or float(probabilities(messages, [])[opening[0]]) >= CALL_SHARE:
            return None, time.perf_counter() - started  # nothing named, or the model calls on its own
        shares = probabilities(messages, opening)
        for name in named:
            written = names[name]
            share = float(shares[written[len(opening)]])
            if share < NAMED_SHARE:
                continue
            gen, settled = self.one_call(messages, replies, cancel, written)
            if settled and settled[0][0] == name and not settled[0][2]:
                log.debug("a tool named by what it does (share %.3f): %r", share, gen.text)
                gen.seconds = time.perf_counter() - started
                return gen, gen.seconds
        return None, time.perf_counter() - started

    def completed(self, messages: list[dict], replies, cancel) -> tuple[object | None, float]:
        """The call of the tool the model weighs most, for a turn that completes it: when the model would answer in
        words but gives a call at least GIVEN_SHARE of its probability (FOLLOW_SHARE when the turn is nothing but
        one of the call's free details: a name alone), and COMPLETED_SHARE of a call's to one tool,
        whose call (`CallCheck.settled`, probes included) holds a detail the caller's latest words say
        (app.agent.said.rests_on): a name given after "Would you like me to book it?" is the booking. A call that
        still lacks details is the reply's when those words give one of its free details (a name, a service:
        words of the caller's own), and the caller is asked for the rest: "Eli Brown", asked for the time of a flat
        fix, had drawn "I'm sorry, I can't help with that."
        The generation and the seconds this took; (None, seconds) otherwise. One pass over a few tokens past the
        prompt, and the call's generation when the model weighs one tool so."""
        started = time.perf_counter()
        probabilities = getattr(self.engine, "next_token_probabilities", None)
        if probabilities is None or not messages or messages[-1]["role"] != "user":
            return None, time.perf_counter() - started
        opening, names = self.names
        called = float(probabilities(messages, [])[opening[0]])
        if not FOLLOW_SHARE <= called < CALL_SHARE:
            return None, time.perf_counter() - started  # the model calls on its own, or does not weigh a call
        shares = probabilities(messages, opening)
        share, name, written = max((float(shares[w[len(opening)]]), n, w) for n, w in names.items())
        if share < COMPLETED_SHARE:
            return None, time.perf_counter() - started
        gen, settled = self.one_call(messages, replies, cancel, written)
        seconds = time.perf_counter() - started
        schemas = self.toolbox.schemas()
        if not settled or settled[0][0] != name:
            return None, seconds
        _, arguments, missing = settled[0]
        properties = properties_of(name, schemas)
        if missing:  # then it is answered with a question for the rest, when the latest words give a name or service
            arguments = {k: v for k, v in arguments.items() if is_free(properties.get(k, {}))}
        last = latest_words(messages)
        if not rests_on(name, arguments, schemas, [last], self.toolbox.profile):
            log.debug("the call weighed (share %.3f) holds nothing said last: %r", share, gen.text)
            return None, seconds
        whole = any(is_free(properties.get(k, {})) and name_words(str(v)) == name_words(last)
                    for k, v in arguments.items())
        if called < GIVEN_SHARE and not whole:
            log.debug("a call hardly weighed (%.3f) for words that are more than its detail: %r", called, gen.text)
            return None, seconds
        log.debug("the call the turn completes (share %.3f): %r", share, gen.text)
        gen.seconds = seconds
        return gen, seconds

    def rests(self, name: str, arguments: dict, messages: list[dict], on_latest: bool) -> bool:
        """Whether a call holds a detail the caller's latest words say (app.agent.said.rests_on); with on_latest
        False, one their words say anywhere in the conversation, and none that only the agent said: after the
        opening hours, "that one's fine" had a booking weighed at 0.001 take 4:00 PM, the closing time of another
        day, and the next turn booked it."""
        schemas, profile = self.toolbox.schemas(), self.toolbox.profile
        if on_latest:
            return rests_on(name, arguments, schemas, [latest_words(messages)], profile)
        callers = [m for m in messages if m["role"] == "user"]
        return rests_on(name, arguments, schemas, [m["content"] for m in callers], profile) and \
            not unsaid(name, arguments, schemas, callers, profile)

    def names_its_topic(self, name: str, arguments: dict, messages: list[dict]) -> bool:
        """Whether a call of tool `name` holds a topic the caller's latest words alone name (`_topics_named`)."""
        named = _topics_named(self.toolbox.schemas(), Said([latest_words(messages)], self.toolbox.profile))
        return any(tool == name and arguments.get(key) == value for tool, key, value in named)

    def _weighed(self, messages: list[dict], replies, cancel, name: str) -> tuple[object | None, list, float]:
        """The model's reply to `messages` written as a call of tool `name`, when the model, opening its reply
        with a call (CALL_SHARE), weighed that tool but preferred another: at least FOLLOW_SHARE of its
        probability on the first token of the tool's name (the tools' names begin with different tokens), not
        the most. The generation, its call as `CallCheck.settled` holds it (`one_call`; [] unless it is one call of
        `name`), and that share; (None, [], share) when the model called it on its own or did not weigh it."""
        probabilities = getattr(self.engine, "next_token_probabilities", None)
        if probabilities is None:
            return None, [], 0.0
        opening, names = self.names
        written = names.get(name)
        if written is None or float(probabilities(messages, [])[opening[0]]) < CALL_SHARE:
            return None, [], 0.0
        shares = probabilities(messages, opening)
        share = float(shares[written[len(opening)]])
        if share < FOLLOW_SHARE or share >= float(shares.max()):
            return None, [], share
        gen, settled = self.one_call(messages, replies, cancel, written)
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
        gen, settled = self.one_call(messages, replies, cancel, opening)
        seconds = time.perf_counter() - started
        values = settled[0][1].values() if settled else ()
        if not {getattr(profile.service(v), "name", None) for v in values if isinstance(v, str)} & named.keys():
            log.debug("the call for a question of a service holds none it names: %r", gen and gen.text)
            return None, seconds
        log.debug("a question of a service, answered by a call: %r", gen.text)
        gen.seconds = seconds
        return gen, seconds

    def one_call(self, messages: list[dict], replies, cancel, written: list[int]) -> tuple[object | None, list]:
        """The model's reply to `messages` that begins with the tokens `written` (a call's opening), under the
        reply grammar, and its one call as `CallCheck.settled` holds it ([] for a reply that is not one call
        alone, or was cancelled); (None, []) when the grammar does not take `written`."""
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
        return gen, self.check.settled(calls, gen, messages)

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
