"""Calls that give way: a generation that is calls alone, which the caller's words did not ask for, gives way to
the call of the tool the model weighed next, or to an answer in words (app.agent.loop.Agent runs it on each
generation of a turn; app.agent.meant.CallCheck says which calls are not the caller's; app.agent.weighed.Weighed
writes the call weighed next)."""
import logging
import time

from app.agent.weighed import FOLLOW_SHARE, NAMED_SHARE

log = logging.getLogger(__name__)

# An unasked call of a tool that takes no details gives way to the first of this many next tools, the most weighed
# first, whose call holds what the caller's latest words say (`GivenWay.instead_of_made_up` with `below`).
UNASKED_TRIED = 3
# Such a call that gives way to none of them is answered in words when the model wrote it with less than this much
# of its probability, a call's times the tool's share of a call: after Friday's opening hours, "ok great, thanks so
# much, talk to you later" was handed to the staff (a call 0.56, the transfer 0.17 of it: 0.10; as a first turn
# 0.04), while "can I just talk to somebody who works there please" gave it 0.54, "is there anybody there I could
# talk to" 0.51 and "I need help" 0.25 (2026-12-07).
UNASKED_CALL_SHARE = 0.2


class GivenWay:
    """What a turn's calls give way to (`__call__`), read by `check` (CallCheck) and written by `weighed`
    (Weighed)."""

    def __init__(self, check, weighed):
        self.check, self.weighed, self.engine = check, weighed, weighed.engine

    def __call__(self, calls, spoken: str, settled, messages: list[dict], cancel):
        """A generation that is calls alone gives way when every call is made up (CallCheck.made_up), or its one
        call leaves out the clock time the caller just gave (CallCheck.leaves_out_a_time), is the agent's last
        look-up again (CallCheck.repeats_last), strays from the request the agent just asked a detail of
        (CallCheck.strays) or is of a tool that takes no details, unnamed by the caller's words and written with
        less than NAMED_SHARE of a call's probability (CallCheck.unnamed_bare): to the call of the tool the model
        weighed next (`instead_of_made_up`; for a stray, the asked request's), or, where the model weighed
        none, to an answer in words for a made-up call, a look-up again or a bare call the model was unsure of.
        -> (that generation, its calls as settled, whether the turn answers in words); (None, None, False) when
        the calls stand."""
        if spoken or not calls:
            return None, None, False
        made_up = self.check.made_up(calls, settled, messages)
        leaves_out = not made_up and self.check.leaves_out_a_time(settled, messages)
        repeated = not made_up and self.check.repeats_last(settled, messages)
        bare = not (made_up or leaves_out or repeated) and self.check.unnamed_bare(settled, messages)
        asked = None if made_up or leaves_out or repeated or bare else self.check.strays(settled, messages)
        if not (made_up or leaves_out or repeated or bare or asked):
            return None, None, False
        # NOTE: the last answer's look-up again would only say that again: "9:30 then" after Friday's opening
        # hours read them again (check_availability 0.009 of a call's probability), and so did "ok let's do the
        # 2 o'clock" (0.03). It gives way to whichever tool the model weighed next, however little, that holds the
        # time; with no time said, one that holds a detail the conversation says ("the morning": Thursday's free
        # times). So does a made-up call that wrote a detail the caller just said where it cannot stand (a day as
        # a name: CallCheck.misplaced): "what's the latest appointment on saturday?" looked up the appointments
        # of "saturday" (list_appointments 0.93) and was refused, where the free times of Saturday (0.045) hold
        # the day said. A call made up of nothing said keeps the floor: "is it safe to color my hair while I'm
        # pregnant?" checked a Friday nobody named, and the coloring's price (0.033) is no answer either. A stray
        # gives way to the request it answers however little the model weighed it: asked the name for a son's
        # haircut, "great, put him down. it's under Carlos Mendoza" gave the booking 0.017 of a call's probability.
        misplaced = made_up and self.check.misplaced(calls, settled, messages)
        other, other_settled, in_words = self.instead_of_made_up(
            messages, calls[0][0], cancel, least=0.0 if repeated or misplaced or asked else FOLLOW_SHARE,
            on_latest=leaves_out or made_up or bare, only=asked, below=NAMED_SHARE if bare else None)
        return other, other_settled, (made_up or repeated or bare and in_words) and other is None

    def instead_of_made_up(self, messages: list[dict], made_up: str, cancel, least: float = FOLLOW_SHARE,
                           on_latest: bool = True, only: str | None = None,
                           below: float | None = None) -> tuple[object | None, list, bool]:
        """The call of the tool the model weighed next after `made_up` (the tool of a call whose details nobody
        said: CallCheck.made_up; or of one that leaves out the time the caller gave: CallCheck.leaves_out_a_time),
        when the model gave it at least `least` of a call's probability and the call it writes holds a detail
        the caller's latest words say (app.agent.said.rests_on; with on_latest False, one the conversation says)
        and is not made up too (with `only`, that tool or none):
        "how much for a haircut and a beard trim together?" had the model check the free times of a day and a time
        nobody named (check_availability 0.44), and the caller heard "I'm sorry, I can't help with that."; its next
        tool, business_info (0.25), reads the haircut's price. The generation, its call as `CallCheck.settled`
        holds it, and True; (None, [], whether the model answers in words instead) otherwise. With `below`, only
        when the model gave `made_up` less than that share of a call's probability (it was unsure; else the call
        stands), and the first of the next UNASKED_TRIED tools whose call holds a detail or a topic the latest words
        name; where none does, the turn is answered in words when the model wrote `made_up` with less than
        UNASKED_CALL_SHARE of its probability (`_barely`)."""
        started = time.perf_counter()
        probabilities = getattr(self.engine, "next_token_probabilities", None)
        replies = None if probabilities is None else self.check.reply_grammar(messages)
        if replies is None or not messages or messages[-1]["role"] != "user":
            return None, [], below is None
        opening, names = self.weighed.names
        shares = probabilities(messages, opening)
        gave_way = names.get(made_up, [])[len(opening):len(opening) + 1]  # the made-up tool's first token
        if below is not None and gave_way and float(shares[gave_way[0]]) >= below:
            return None, [], False
        weighed = [(float(shares[written[len(opening)]]), name, written) for name, written in names.items()
                   if written[len(opening)] not in gave_way and only in (None, name)]
        if not weighed or max(weighed)[0] < least:
            return None, [], self._barely(messages, shares, gave_way, below)
        # an unasked bare call (`below`) gives way to the most weighed of the next few tools whose call holds what
        # the latest words name of it, a detail said or its topic: "Okay never mind what's the address.", heard with
        # no question mark, was transferred (0.47), list_appointments 0.21, business_info 0.17
        tried = sorted(weighed, reverse=True)[:1 if below is None else UNASKED_TRIED]
        for share, name, written in (t for t in tried if t[0] >= least):
            gen, settled = self.weighed.one_call(messages, replies, cancel, written)
            calls = [(n, arguments) for n, arguments, _ in settled]
            details = settled[0][1] if settled else {}
            if below is not None:
                details = self._offered(details)
            rests = settled and (self.weighed.rests(name, details, messages, on_latest)
                                 or below is not None and self.weighed.names_its_topic(name, details, messages))
            if not settled or settled[0][0] != name or self.check.made_up(calls, settled, messages) or not rests:
                log.debug("the call weighed after a made-up %s holds nothing said (share %.3f): %r", made_up, share,
                          gen and gen.text)
                continue
            log.debug("the call weighed after a made-up %s (share %.3f): %r", made_up, share, gen.text)
            gen.seconds = time.perf_counter() - started
            return gen, settled, True
        return None, [], self._barely(messages, shares, gave_way, below)

    def _offered(self, arguments: dict) -> dict:
        """A call's arguments less a service the business does not offer, which says nothing an unasked bare call
        should give way to: "the gears are still skipping, I wanna talk to the mechanic who worked on it" was handed
        to the staff (a call 0.66, the transfer 0.58 of it), then given way to a booking of "skipping" (0.16), and the
        caller heard "We don't offer skipping"."""
        profile = self.weighed.toolbox.profile
        return {key: value for key, value in arguments.items()
                if key != "service" or not isinstance(value, str) or profile.service(value) is not None}

    def _barely(self, messages: list[dict], shares, gave_way: list[int], below: float | None) -> bool:
        """Whether a call that gave way to no other is answered in words: always, unless it is an unasked bare
        call (`below`), whose tool (first token `gave_way`, its share of a call in `shares`) the model wrote with
        less than UNASKED_CALL_SHARE of its probability (where that share cannot be read, the call stands). One pass
        over the prompt's last token for such a call."""
        if below is None:
            return True
        if not gave_way:
            return False
        opening, _ = self.weighed.names
        called = float(self.engine.next_token_probabilities(messages, [])[opening[0]])
        return called * float(shares[gave_way[0]]) < UNASKED_CALL_SHARE
