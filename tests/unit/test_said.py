"""The one rule for tool arguments the caller must have said (app.agent.said), and the agent asking instead of
running a call whose detail nobody gave."""
import json
from datetime import datetime

from app.agent.loop import Agent
from app.agent.options import AgentOptions
from app.agent.profile import load_profile
from app.agent.protocol import format_tool_call
from app.agent.meant import UNMEANT_SHARE, free_shares
from app.agent.held import fullest, held
from app.agent.said import is_said, names_last, unsaid
from app.agent.schema_grammar import ReplyGrammar
from app.agent.store import open_store
from app.agent.tools import SCHEMAS, Toolbox
from tests.checkpoints import train_bpe
from tests.fakes import FakeEngine

PROFILE = load_profile(None)


def test_times_are_said_in_any_spoken_form():
    assert is_said("15:30", ["Can I come at half past three in the afternoon?"])
    assert is_said("15:30", ["3:30 pm works"])
    assert not is_said("15:00", ["Can I come in tomorrow?"])


def test_services_are_said_by_the_profiles_names_and_aliases():
    assert is_said("beard trim", ["I need a beard shave"], PROFILE)
    assert is_said("hair coloring", ["do you do highlights?"], PROFILE)
    assert not is_said("hair coloring", ["I need a haircut"], PROFILE)


def test_names_are_said_whatever_their_accents_and_case():
    assert is_said("Sofía Ramírez", ["name is sofia ramirez"])
    assert is_said("de la Cruz", ["It's Maria de la Cruz."])
    assert not is_said("Maria Lopez", ["It's Maria."])


def test_unsaid_reads_the_schema_marks_and_the_whole_conversation():
    messages = [{"role": "system", "content": "Maple Street, 15:00, Anna"},
                {"role": "user", "content": "A haircut tomorrow please, I'm Ana."},
                {"role": "assistant", "content": "How about 4 PM?"},
                {"role": "user", "content": "Sure."}]
    args = {"name": "Ana", "day": "tomorrow", "time": "16:00", "service": "haircut"}
    assert unsaid("book_appointment", args, SCHEMAS, messages, PROFILE) == []
    assert unsaid("book_appointment", {**args, "time": "15:00"}, SCHEMAS, messages, PROFILE) == ["time"]
    assert unsaid("book_appointment", {**args, "name": "Anna"}, SCHEMAS, messages, PROFILE) == ["name"]
    assert unsaid("current_datetime", {}, SCHEMAS, messages, PROFILE) == []


def _agent(replies: list[str]):
    engine = FakeEngine(lambda messages: replies[min(len(engine.calls), len(replies)) - 1])
    toolbox = Toolbox(PROFILE, open_store(":memory:"), now=lambda: datetime(2026, 3, 3, 9, 0))
    options = AgentOptions(cache="block", block_length=4, tool_grammar=False)
    return Agent(engine, toolbox, "system", options), engine


def test_a_call_with_a_detail_nobody_gave_is_not_run_the_model_hears_what_is_missing_and_asks():
    booking = format_tool_call("book_appointment", {"name": "Ana", "day": "tomorrow", "time": "15:00",
                                                    "service": "haircut"})
    agent, engine = _agent([booking, "What time tomorrow works for you?"])
    turn = agent.respond("I'd like a haircut tomorrow, I'm Ana.")
    assert turn.tool_calls == []
    assert turn.reply == "What time tomorrow works for you?"
    assert len(engine.calls) == 2
    # the history holds the call as held (the unsaid time dropped) and what it lacked, in the schema's order
    assert agent.messages[1]["content"] == format_tool_call("book_appointment", {"name": "Ana", "day": "tomorrow",
                                                                                 "service": "haircut"})
    assert json.loads(agent.messages[2]["content"]) == {"name": "book_appointment",
                                                       "result": {"ok": False, "missing": ["time"]}}
    assert engine.calls[1][-1] == agent.messages[2]  # the question was written after it


def test_a_call_that_leaves_out_details_is_answered_with_the_first_missing_in_the_schemas_order():
    booking = format_tool_call("book_appointment", {"name": "Ana"})
    agent, _ = _agent([booking, "What service would you like?"])
    turn = agent.respond("I want to book something, I'm Ana.")
    assert turn.tool_calls == [] and turn.reply == "What service would you like?"
    missing = json.loads(agent.messages[2]["content"])["result"]["missing"]
    assert missing == ["service", "day", "time"]


def test_a_call_made_only_of_details_nobody_said_is_no_call_the_model_answers_in_words():
    """"is it safe to color my hair while I'm pregnant?" made an availability check for a Friday at 10 nobody
    named: asking which day would answer a question the caller never asked."""
    check = format_tool_call("check_availability", {"day": "friday", "time": "10:00"})
    spoken = "I'm sorry, I can't help with that."
    agent, engine = _agent([check, spoken])
    turn = agent.respond("ok. also, um, is it safe to color my hair while I'm pregnant?")
    assert turn.tool_calls == [] and turn.reply == spoken
    assert [m["role"] for m in agent.messages] == ["user", "assistant"]  # the made-up call left no trace
    assert engine.calls[1] == engine.calls[0]  # the words were written from the same prompt

    # drafted during the caller's silence, the turn keeps the draft's words: the same decision, no new generation
    agent, engine = _agent([check, spoken])
    first = agent.draft("is it safe to color my hair while I'm pregnant?")
    turn = agent.respond("is it safe to color my hair while I'm pregnant?", first=first)
    assert turn.reply == spoken and turn.tool_calls == [] and len(engine.calls) == 2


def test_a_call_with_one_detail_said_still_asks_for_the_rest():
    booking = format_tool_call("book_appointment", {"service": "beard trim", "day": "friday"})
    agent, _ = _agent([booking, "What day would you like to come in?"])
    turn = agent.respond("okay and uh, a beard trim?")
    assert turn.reply == "What day would you like to come in?"
    assert json.loads(agent.messages[2]["content"])["result"]["missing"] == ["day", "time", "name"]


class _Chars:
    """A tokenizer of one token per character, for generations that say how much each token's grammar allowed."""
    @staticmethod
    def decode(ids, skip_special_tokens=True):
        return "".join(map(chr, ids))


def _forced(text: str, value: str, share: float = 0.004) -> list[float]:
    """Per character of `text`, the share the grammar allowed: `share` on the first character of `value`'s
    first appearance after `"service":`, 1.0 elsewhere (the model's own choice)."""
    at = text.index(f'"service":"{value}"') + len('"service":"')
    return [share if i == at else 1.0 for i in range(len(text))]


def _below(text: str, shares: list[float]) -> list[set[str]]:
    least = free_shares(text, list(range(len(text))), shares, SCHEMAS)
    return [{k for k, share in call.items() if share < UNMEANT_SHARE} for call in least]


def test_the_free_values_the_grammar_forced_are_found():
    """A value (a name, a service: no values of its own to choose from) one of whose tokens had almost none of
    the model's probability on what the grammar allowed was not the model's; a day or a time (the model chose
    among values said) and the call's keys are not judged so."""
    call = format_tool_call("book_appointment", {"name": "Victor", "day": "wednesday", "time": "10:30",
                                                 "service": "please"})
    text = f"{call}Sure."
    assert free_shares(text, list(range(len(text))), _forced(text, "please"), SCHEMAS) == [
        {"name": 1.0, "service": 0.004}]
    assert _below(text, _forced(text, "please")) == [{"service"}]
    assert _below(text, _forced(text, "please", share=0.5)) == [set()]
    day = [0.004 if i == text.index("wednesday") else 1.0 for i in range(len(text))]
    assert _below(text, day) == [set()]
    key = [0.004 if i == text.index('"arguments"') + 2 else 1.0 for i in range(len(text))]
    assert _below(text, key) == [set()]
    # the token that closes the value counts: the model wanted to go on ("hair" + "cut" where only "hair" was said)
    closing = [0.004 if i == text.index('please"') + len("please") else 1.0 for i in range(len(text))]
    assert _below(text, closing) == [{"service"}]
    two = text + format_tool_call("list_appointments", {"name": "Victor"})
    assert _below(two, _forced(two, "please")) == [{"service"}, set()]


def test_a_service_the_grammar_forced_on_the_model_is_asked_for_not_booked():
    """"I want to make a booking Wednesday at 10:30 a.m. please": a model that meant a service nobody named
    could only write one of the caller's words; "please" is no service the caller asked for: the call lacks the
    service, and the agent asks for it ("We don't offer please." was the reply before)."""
    booking = format_tool_call("book_appointment", {"name": "Victor", "day": "wednesday", "time": "10:30",
                                                    "service": "please"})
    question = "Sure, what service would you like?"
    agent, engine = _agent([booking, question])
    engine.tokenizer = _Chars()
    generate = engine.generate

    def with_shares(messages, **kwargs):
        gen = generate(messages, **kwargs)
        gen.ids = [ord(c) for c in gen.text]
        gen.shares = _forced(gen.text, "please") if gen.text == booking else [1.0] * len(gen.text)
        return gen
    engine.generate = with_shares
    turn = agent.respond("Hi. This is Victor calling. I want to make a booking Wednesday at 10:30 a.m. please.")
    assert turn.tool_calls == [] and turn.reply == question
    assert agent.messages[1]["content"] == format_tool_call("book_appointment", {
        "name": "Victor", "day": "wednesday", "time": "10:30"})  # held: the service left out
    assert json.loads(agent.messages[2]["content"])["result"]["missing"] == ["service"]
    assert agent.toolbox.store.for_name("Victor") == []


def test_the_grammar_lets_a_call_leave_out_what_was_not_said_yet():
    schemas = held(SCHEMAS, [{"role": "user", "content": "a haircut please"}])
    book = next(s for s in schemas if s["name"] == "book_appointment")["parameters"]
    assert book["required"] == []
    business = next(s for s in schemas if s["name"] == "business_info")["parameters"]
    assert business["required"] == ["topic"]  # not an x-said argument: still required


def test_a_call_keeps_the_details_the_callers_latest_words_say():
    """"a beard trim Thursday at 5:45" is a call with its service, day and time (the model left the service out
    and then asked for it); a day said in an earlier turn, or a name, still may be left out."""
    schemas = Toolbox(PROFILE, open_store(":memory:")).schemas()  # a service's examples: the profile's services
    messages = [{"role": "user", "content": "what are your hours on Friday?"},
                {"role": "assistant", "content": "We're open nine to eight on Friday."},
                {"role": "user", "content": "Could I get a beard trim at 5:45 pm, I'm Bill?"}]

    def required(tool):
        return next(s for s in held(schemas, messages, PROFILE) if s["name"] == tool)["parameters"]["required"]

    assert required("book_appointment") == ["service", "time"]
    messages[-1]["content"] = "Could I get a beard trim Thursday at 5:45 pm?"
    assert required("book_appointment") == ["service", "day", "time"]
    assert required("check_availability") == ["day", "time"]  # an optional detail the caller just said, too
    messages[-1]["content"] = "This is Tom, I can't make it tomorrow"
    assert required("cancel_appointment") == ["day"]  # the name is no enum: the caller's words decide nothing
    for words in ("I want to book something", "ok I want to book one"):  # "one" is no clock time here
        messages[-1]["content"] = words
        assert required("book_appointment") == []


def test_a_call_whose_details_were_all_said_runs():
    booking = format_tool_call("book_appointment", {"name": "Ana", "day": "tomorrow", "time": "15:00",
                                                    "service": "haircut"})
    agent, _ = _agent([booking, "You're all set."])
    turn = agent.respond("I'd like a haircut tomorrow at 3 pm, I'm Ana.")
    assert [c.name for c in turn.tool_calls] == ["book_appointment"]
    assert turn.tool_calls[0].result["ok"]
    assert turn.reply == "You're all set."


def test_an_optional_detail_nobody_gave_is_dropped_from_the_call():
    hours = format_tool_call("business_info", {"topic": "hours", "day": "friday"})
    agent, _ = _agent([hours, "We're open nine to six."])
    turn = agent.respond("What are your hours?")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("business_info", {"topic": "hours"})]
    assert agent.messages[1]["content"] == format_tool_call("business_info", {"topic": "hours"})


def test_clock_times_are_held_to_those_the_conversation_said():
    said = held(SCHEMAS, [{"role": "user", "content": "Friday at 3:30 p.m., or maybe three thirty"}])
    book = next(s for s in said if s["name"] == "book_appointment")["parameters"]["properties"]
    assert book["time"]["enum"] == ["03:30", "15:30"]
    free = held(SCHEMAS, [{"role": "user", "content": "Friday, please"}])  # no time said: any time
    assert next(s for s in free if s["name"] == "book_appointment")["parameters"]["properties"]["time"] == \
        next(s for s in SCHEMAS if s["name"] == "book_appointment")["parameters"]["properties"]["time"]


def test_the_held_grammar_refuses_a_time_nobody_said():
    tokenizer = train_bpe(["<|end|>"])
    schemas = held(SCHEMAS, [{"role": "user", "content": "a haircut Friday at 3:30 pm for Ana"}])
    grammar = ReplyGrammar(tokenizer, schemas, (tokenizer.token_to_id("<|end|>"),), tokenizer.get_vocab_size())

    def accepts(time):
        call = format_tool_call("book_appointment", {"name": "Ana", "day": "friday", "time": time,
                                                     "service": "haircut"})
        matcher = grammar.start()
        return all(matcher.accept(t) for t in tokenizer.encode(call, add_special_tokens=False).ids)

    assert accepts("15:30")
    assert not accepts("14:30")


def test_names_and_services_are_held_to_words_the_conversation_said():
    import re

    messages = [{"role": "user", "content": "Hi, this is Noah Smith. A kids cut Friday, and one for Jean-Luc O'Brien"}]
    book = next(s for s in held(SCHEMAS, messages, PROFILE) if s["name"] == "book_appointment")
    properties = book["parameters"]["properties"]
    name, service = properties["name"]["pattern"], properties["service"]["pattern"]
    assert re.fullmatch(name, "Noah Smith") and re.fullmatch(name, "Noah") and re.fullmatch(name, "Jean-Luc O'Brien")
    assert not re.fullmatch(name, "Owen Smith") and not re.fullmatch(name, "Noah Smith!")
    assert re.fullmatch(service, "kids haircut")  # the profile's name of the service the caller called "kids cut"
    assert not re.fullmatch(service, "hair coloring")  # a service nobody asked for
    assert "pattern" not in properties["day"]  # a day is held by its enum, a time by the times said

    tokenizer = train_bpe(["<|end|>"])
    grammar = ReplyGrammar(tokenizer, held(SCHEMAS, messages, PROFILE), (tokenizer.token_to_id("<|end|>"),),
                           tokenizer.get_vocab_size())

    def accepts(who):
        call = format_tool_call("list_appointments", {"name": who})
        matcher = grammar.start()
        return all(matcher.accept(t) for t in tokenizer.encode(call, add_special_tokens=False).ids)

    assert accepts("Noah Smith") and not accepts("Owen Smith")


def test_plural_and_possessive_forms_say_the_word():
    assert is_said("saturday", ["Are you open Saturdays?"])
    assert is_said("kids haircut", ["how much for a kid's cut"], PROFILE)  # the alias "kids cut"
    assert is_said("Ross", ["I am Ross"]) and not is_said("Rose", ["I am Ross"])


def test_days_are_held_to_those_the_conversation_said():
    said = held(SCHEMAS, [{"role": "user", "content": "a blowout saturday at noon, or maybe Sundays"}], PROFILE)
    day = next(s for s in said if s["name"] == "book_appointment")["parameters"]["properties"]["day"]
    assert day["enum"] == ["saturday", "sunday"]
    free = held(SCHEMAS, [{"role": "user", "content": "a blowout please"}], PROFILE)  # no day said: any day
    assert next(s for s in free if s["name"] == "book_appointment")["parameters"]["properties"]["day"] == \
        next(s for s in SCHEMAS if s["name"] == "book_appointment")["parameters"]["properties"]["day"]


def _held_property(messages, tool, key):
    return next(s for s in held(SCHEMAS, messages, PROFILE) if s["name"] == tool)["parameters"]["properties"][key]


def test_a_detail_the_caller_changes_is_held_to_the_new_one():
    messages = [{"role": "user", "content": "a color Tuesday at 5pm, I'm Fatima"},
                {"role": "assistant", "content": format_tool_call("book_appointment", {"name": "Fatima"})},
                {"role": "tool", "content": '{"result": {"ok": false, "error": "On Tuesday we close at 6:00 PM."}}'},
                {"role": "assistant", "content": "Sorry, we close at 6:00 PM on Tuesday. Would another time work?"},
                {"role": "user", "content": "fine, 4:30 then, or else Wednesday"}]
    assert _held_property(messages, "book_appointment", "time")["enum"] == ["16:30"]  # the salon is shut at 4:30 am
    assert _held_property(messages, "book_appointment", "day")["enum"] == ["wednesday"]
    # a message that changes neither keeps the caller's last ones, and the times the agent offered after them
    messages += [{"role": "assistant", "content": "Wednesday at 4:30 PM is taken; 5:00 PM is free."},
                 {"role": "user", "content": "ok, that one"}]
    assert _held_property(messages, "book_appointment", "time")["enum"] == ["16:30", "17:00"]
    assert _held_property(messages, "check_availability", "day")["enum"] == ["wednesday"]


def test_a_service_named_last_is_held_to_the_latest_words():
    """"Just a kids cut please." after a refused "eyelash extensions" was booked as eyelash extensions again."""
    import re

    messages = [{"role": "user", "content": "Hiya. I'd like eyelash extensions Thursday at 4:45 pm. I'm Abdul."},
                {"role": "assistant", "content": format_tool_call("book_appointment", {
                    "name": "Abdul", "day": "thursday", "time": "16:45", "service": "eyelash extensions"})},
                {"role": "tool", "content": '{"result": {"ok": false, "error": "We don\'t offer eyelash extensions."}}'},
                {"role": "assistant", "content": "I'm sorry. We don't offer eyelash extensions. Which one would you like?"},
                {"role": "user", "content": "Just a kids cut please."}]
    schemas = Toolbox(PROFILE, open_store(":memory:")).schemas()  # the services as the examples of `service`

    def pattern(key):
        return next(s for s in held(schemas, messages, PROFILE)
                    if s["name"] == "book_appointment")["parameters"]["properties"][key]["pattern"]

    service = pattern("service")
    assert re.fullmatch(service, "kids haircut") and not re.fullmatch(service, "eyelash extensions")
    assert re.fullmatch(pattern("name"), "Abdul")  # a name is still any of the caller's words
    # naming none of the business's services, the latest words leave the service to what the caller said before
    messages[-1] = {"role": "user", "content": "Hmm, what about at 5 pm?"}
    assert re.fullmatch(pattern("service"), "eyelash extensions")


def test_the_clock_of_a_tool_result_is_no_time_the_caller_asked_for():
    messages = [{"role": "user", "content": "what time is it?"},
                {"role": "assistant", "content": format_tool_call("current_datetime", {})},
                {"role": "tool", "content": '{"result": {"ok": true, "time": "2:51 PM"}}'},
                {"role": "assistant", "content": "It's 2:51 PM."},
                {"role": "user", "content": "a blow dry Thursday, uh, 7 pm?"}]
    assert _held_property(messages, "book_appointment", "time")["enum"] == ["19:00"]


def test_names_are_held_to_the_callers_words_not_the_agents():
    import re

    messages = [{"role": "user", "content": "a blow dry Thursday at 7 pm"},
                {"role": "assistant", "content": "You've got it. Who is it for?"},
                {"role": "user", "content": "García. Lucía García."}]
    name = _held_property(messages, "book_appointment", "name")["pattern"]
    assert re.fullmatch(name, "Lucía García")
    assert not re.fullmatch(name, "got") and not re.fullmatch(name, "Who")


def test_a_name_is_made_of_the_callers_own_words_not_the_ones_they_repeat():
    import re

    messages = [{"role": "system", "content": "You answer phone calls for a salon. Prices: haircut $35.\n"
                                              "Tools: book_appointment(name?, day?, time?, service?)"},
                {"role": "user", "content": "what services do you have?"},
                {"role": "assistant", "content": "We offer haircuts. Would you like to book?"},
                {"role": "user", "content": "ok I want to book one, I'm dana lee. Or put it under Sarah Price."}]
    name = _held_property(messages, "book_appointment", "name")["pattern"]
    assert re.fullmatch(name, "dana lee") and re.fullmatch(name, "Sarah Price")  # a capitalized name stays one
    assert not re.fullmatch(name, "you") and not re.fullmatch(name, "book")  # the other side said them first
    assert re.fullmatch(name, "want")  # the caller's own word: a name for all the grammar knows
    messages[-1]["content"] = "I need an appointment on Thursday. Under Rohan."
    name = _held_property(messages, "book_appointment", "name")["pattern"]
    assert re.fullmatch(name, "Rohan") and not re.fullmatch(name, "appointment")  # a word of a tool's name


def test_a_name_is_a_stretch_of_words_the_caller_said_together():
    """A name or service the caller gave is words they said one after the other: the grammar never lets the
    model string together a name of its own from words scattered over the call."""
    import re

    messages = [{"role": "system", "content": "You answer phone calls for a salon. Prices: haircut $35."},
                {"role": "user", "content": "hey, good morning, I wanna get haircuts for me and my two kids"},
                {"role": "assistant", "content": "What day would you like?"},
                {"role": "user", "content": "Saturday, ten-ish. García. Lucía García, J Smith"}]
    name = _held_property(messages, "book_appointment", "name")["pattern"]
    assert re.fullmatch(name, "Lucía García") and re.fullmatch(name, "García") and re.fullmatch(name, "J Smith")
    assert re.fullmatch(name, "wanna get") and re.fullmatch(name, "ten-ish")
    assert not re.fullmatch(name, "my-wanna-haircut") and not re.fullmatch(name, "kids wanna")
    assert not re.fullmatch(name, "García Lucía")  # a full stop ends a stretch
    assert not re.fullmatch(name, "I") and not re.fullmatch(name, "J")  # a letter alone is no name
    service = _held_property(messages, "book_appointment", "service")["pattern"]
    assert re.fullmatch(service, "haircut") and not re.fullmatch(service, "be and gonna")


def test_a_name_the_agent_asked_for_is_written_when_the_caller_answers_with_it():
    """A call that lacked the service and the name was answered with the agent's question for the service; a
    caller who answers with their name instead gets it in the next call, while one who answers with the service
    does not get a name made of their words."""
    messages = [{"role": "user", "content": "can I book one friday at 4pm"},
                {"role": "assistant", "content": format_tool_call("book_appointment", {"day": "friday", "time": "16:00"})},
                {"role": "tool", "content": '{"name":"book_appointment","result":{"ok":false,"missing":["service","name"]}}'},
                {"role": "assistant", "content": "Sure, what service would you like?"},
                {"role": "user", "content": "it's Dana Okafor"}]

    schemas = Toolbox(PROFILE, open_store(":memory:")).schemas()  # a service's examples: the profile's services

    def required(messages):
        return next(s for s in held(schemas, messages, PROFILE) if s["name"] == "book_appointment")["parameters"]["required"]

    assert "name" in required(messages)
    assert "name" not in required(messages[:-1] + [{"role": "user", "content": "a beard trim please"}])
    assert "name" not in required(messages[:-1] + [{"role": "user", "content": "what service would you like?"}])
    assert "name" not in required(messages[:2] + [{"role": "user", "content": "it's Dana Okafor"}])  # nobody asked


def _booked_by(*said: str, name: str) -> str:
    messages = [{"role": "system", "content": "You answer calls for a salon. Book, cancel, and tell the hours."}]
    for words in said:
        messages += [{"role": "user", "content": words}, {"role": "assistant", "content": "Can I have your name?"}]
    args = {"name": name, "day": "thursday", "time": "19:00", "service": "blow dry"}
    return fullest("book_appointment", args, SCHEMAS, messages[:-1])["name"]


def test_a_surname_then_the_whole_name_books_the_whole_name():
    assert _booked_by("García. Lucía García.", name="García") == "Lucía García"
    assert _booked_by("Sayed. Fatima Al-Sayed", name="Sayed") == "Fatima Al-Sayed"     # as it was written
    assert _booked_by("Lucía García.", name="Lucía García") == "Lucía García"


def test_a_name_is_not_lengthened_past_what_the_caller_wrote_as_a_name():
    assert _booked_by("Ahmed. My wife is Leila Haddad", name="Ahmed") == "Ahmed"     # no run holds it
    assert _booked_by("Rose. Rose, fine", name="Rose") == "Rose"                     # "fine" is no name
    assert _booked_by("Tom Baker please", name="Tom") == "Tom"                       # part of a run, not a run
    assert _booked_by("Dana Reyes.", "uh, Reyes. yes", name="Reyes") == "Reyes"      # the latest message only


def test_a_service_is_named_last_by_its_name_or_an_alias_in_the_latest_words_only():
    refused = [{"role": "user", "content": "Can I book eyelash extensions?"},
               {"role": "assistant", "content": "I'm sorry. We don't offer eyelash extensions."}]
    assert names_last("blow dry", refused + [{"role": "user", "content": "Just a styling please."}], PROFILE)
    assert names_last("styling", refused + [{"role": "user", "content": "a blow dry then"}], PROFILE)
    assert not names_last("haircut", refused + [{"role": "user", "content": "Just a styling please."}], PROFILE)
    assert not names_last("blow dry", [{"role": "user", "content": "a blowout"},
                                       {"role": "user", "content": "Rohan. Thanks."}], PROFILE)
    assert not names_last("please", [{"role": "user", "content": "a perm please"}], PROFILE)  # no service
