"""The reply grammar's hold on x-said arguments (app.agent.held): each held to what the conversation said. A name
called in the fullest form the caller gave it: test_fullest.py."""
import json
import re

from app.agent.held import held, times_answered
from app.agent.profile import load_profile
from app.agent.protocol import format_tool_call, tool_message
from app.agent.schema_grammar import ReplyGrammar
from app.agent.schemas import SCHEMAS
from app.agent.store import open_store
from app.agent.tools import Toolbox
from tests.checkpoints import train_bpe

PROFILE = load_profile(None)


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


def test_clock_times_are_held_to_those_the_conversation_said():
    said = held(SCHEMAS, [{"role": "user", "content": "Friday at 3:30 p.m., or maybe three thirty"}])
    book = next(s for s in said if s["name"] == "book_appointment")["parameters"]["properties"]
    assert book["time"]["enum"] == ["03:30", "15:30"]
    # no time said: the grammar writes none ("what times do you have?" after "tomorrow" checked 10:00, a time the
    # model made up, and the call, dropped as unsaid, was answered "I'm sorry, I can't help with that.")
    free = held(SCHEMAS, [{"role": "user", "content": "Friday, please"}])
    assert "time" not in next(s for s in free if s["name"] == "book_appointment")["parameters"]["properties"]
    assert "time" not in next(s for s in free if s["name"] == "check_availability")["parameters"]["properties"]


def test_a_detail_the_caller_takes_back_in_the_same_breath_is_not_held():
    # "I'd like a trim on thursday, sorry, friday, at six thirty in the evening" was booked on Thursday: the grammar
    # allowed both days, and the model wrote the first
    def days_and_times(words):
        schemas = held(SCHEMAS, [{"role": "user", "content": words}])
        book = next(s for s in schemas if s["name"] == "book_appointment")["parameters"]["properties"]
        return book["day"]["enum"], book["time"]["enum"]

    assert days_and_times("I'd like a trim on thursday, sorry, friday, at six thirty in the evening") == (
        ["friday"], ["18:30"])
    assert days_and_times("what about thursday, no wait, friday, like half past five") == (
        ["friday"], ["05:30", "17:30"])
    assert days_and_times("I can't do monday, sorry. what about tuesday at 2?") == (["tuesday"], ["02:00", "14:00"])
    # a word of repair that takes nothing back, or before the only values said, changes nothing
    assert days_and_times("friday at 3, no problem") == (["friday"], ["03:00", "15:00"])
    assert days_and_times("sorry, is thursday or friday at 4 free?") == (["thursday", "friday"], ["04:00", "16:00"])


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
    assert not any(re.fullmatch(service, words) for words in ("Just", "please", "kids"))  # none of the other words
    assert re.fullmatch(pattern("name"), "Abdul")  # a name is still any of the caller's words
    # naming none of the business's services, the latest words leave the service to what the caller said before
    messages[-1] = {"role": "user", "content": "Hmm, what about at 5 pm?"}
    assert re.fullmatch(pattern("service"), "eyelash extensions")


def test_a_service_said_by_another_word_is_held_to_that_service_not_to_the_other_words_said():
    """A dentist's "I think I have a cavity, can I come in Wednesday at 4 pm?" was booked as "pm": held to any of
    the latest words, the model (which wrote "vacation" unheld) put its little allowed probability there. Any
    business, any alias: the salon's "shave" is its beard trim."""
    import re

    schemas = Toolbox(PROFILE, open_store(":memory:")).schemas()
    messages = [{"role": "user", "content": "I really need a shave, can I come in Friday at 4 pm? It's Dana Lee."}]
    service = next(s for s in held(schemas, messages, PROFILE)
                   if s["name"] == "book_appointment")["parameters"]["properties"]["service"]["pattern"]
    assert re.fullmatch(service, "beard trim") and re.fullmatch(service, "shave")
    assert not any(re.fullmatch(service, words) for words in ("pm", "4 pm", "Dana Lee", "need", "Friday"))


def test_a_service_said_only_inside_another_services_name_is_not_named():
    """An optician's "an eye exam for my daughter" (its kids eye exam's alias) was booked as the eye exam; the
    salon's "trim" (a haircut) is inside "beard trim", its "haircut" inside "haircut for my son"."""
    import re

    schemas = Toolbox(PROFILE, open_store(":memory:")).schemas()

    def service(words):
        messages = [{"role": "user", "content": words}]
        return next(s for s in held(schemas, messages, PROFILE)
                    if s["name"] == "book_appointment")["parameters"]["properties"]["service"]["pattern"]

    beard = service("Can I get a beard trim Friday at 3?")
    assert re.fullmatch(beard, "beard trim") and not re.fullmatch(beard, "haircut")
    son = service("I need a haircut for my son Friday at 3")
    assert re.fullmatch(son, "kids haircut") and not re.fullmatch(son, "haircut")
    both = service("A haircut for me and a kids cut for my son, Friday at 3")
    assert re.fullmatch(both, "haircut") and re.fullmatch(both, "kids haircut")


def test_a_service_named_before_is_held_to_that_service_or_to_the_latest_words():
    """"A cavity filling." then "Victor, thanks." when asked for a name: held to any word the caller had said, the
    dentist's booking was for "please" (of "... at 9:00 a.m. please."). The service named before, or a stretch of
    the latest words, which may name one the business does not offer (to be refused by name)."""
    import re

    schemas = Toolbox(PROFILE, open_store(":memory:")).schemas()
    messages = [{"role": "user", "content": "Hi. I need an appointment on Wednesday at 9:00 a.m. please."},
                {"role": "assistant", "content": "Sure, what service would you like?"},
                {"role": "user", "content": "A shave."},
                {"role": "assistant", "content": "Can I have your name, please?"},
                {"role": "user", "content": "Victor, thanks."}]

    def service():
        return next(s for s in held(schemas, messages, PROFILE)
                    if s["name"] == "book_appointment")["parameters"]["properties"]["service"]["pattern"]

    assert re.fullmatch(service(), "beard trim") and re.fullmatch(service(), "shave")
    assert not any(re.fullmatch(service(), words) for words in ("please", "need", "appointment", "9:00"))
    messages[-1]["content"] = "Oh and eyebrow waxing too?"
    assert re.fullmatch(service(), "eyebrow waxing") and re.fullmatch(service(), "beard trim")


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


def test_a_bare_hour_is_a_time_when_it_answers_the_agents_question_for_one():
    """"thursday morning, like 9?" answering a booking that lacked the day and the time is booked at 9:00 (the
    model left the time out and asked for it again); the same number opening a call ("can I book one", "two kids")
    or answering a question for a name is no time."""
    schemas = Toolbox(PROFILE, open_store(":memory:")).schemas()
    lacked = lambda missing: [  # noqa: E731
        {"role": "user", "content": "I'd like to schedule a haircut for my daughter, Ana Ferreira"},
        {"role": "assistant", "content": format_tool_call("book_appointment", {"name": "Ana Ferreira",
                                                                               "service": "haircut"})},
        {"role": "tool", "content": json.dumps({"name": "book_appointment",
                                                "result": {"ok": False, "missing": missing}})},
        {"role": "assistant", "content": "What day would you like to come in?"}]

    def booking(messages):
        params = next(s for s in held(schemas, messages, PROFILE) if s["name"] == "book_appointment")["parameters"]
        return params["required"], params["properties"]["time"].get("enum")

    answer = {"role": "user", "content": "thursday morning, like 9?"}
    assert times_answered(lacked(["day", "time"]) + [answer], schemas) == {"09:00", "21:00"}
    required, times = booking(lacked(["day", "time"]) + [answer])
    assert "time" in required and "09:00" in times
    assert times_answered(lacked(["name"]) + [answer], schemas) == set()  # asked for a name: no time was asked
    assert "time" not in booking(lacked(["name"]) + [answer])[0]
    assert times_answered([{"role": "user", "content": "can I book one for thursday"}], schemas) == set()
    assert times_answered(lacked(["time"]) + [{"role": "user", "content": "at 4:30 pm"}], schemas) == {"16:30"}


def test_a_service_a_lookup_of_the_caller_found_is_theirs_to_book_again():
    # after "you have a haircut on Thursday", "can I change it to 4?" had the model, which meant the haircut,
    # forced to "have"; a result about the business (its prices) names no service of the caller's
    def service_pattern(result_of: str, result: dict) -> str | None:
        messages = [{"role": "user", "content": "what appointments do I have? Ahmed Haddad"},
                    {"role": "assistant", "content": format_tool_call(result_of, {"name": "Ahmed Haddad"})},
                    tool_message(result_of, result),
                    {"role": "assistant", "content": "Okay."},
                    {"role": "user", "content": "can I change it to 4?"}]
        schema = next(s for s in held(Toolbox(PROFILE, open_store(":memory:")).schemas(), messages, PROFILE)
                      if s["name"] == "book_appointment")
        return schema["parameters"]["properties"]["service"].get("pattern")

    found = {"ok": True, "name": "Ahmed Haddad", "appointments": ["haircut on Thursday, December 10 at 2:00 PM"]}
    assert re.match(service_pattern("list_appointments", found), "haircut")
    assert not re.match(service_pattern("list_appointments", found), "beard trim")
    prices = {"ok": True, "prices": "haircut $35, kids haircut $20, beard trim $15"}
    assert not re.match(service_pattern("business_info", prices) or "^$", "haircut")


def test_the_one_topic_the_callers_latest_words_name_is_the_topic():
    # "and the address?" after the phone number: the model, copying the call before, asked for the phone again
    def topics(said: str, profile=PROFILE) -> list[str]:
        messages = [{"role": "user", "content": "what's your phone number?"},
                    {"role": "assistant", "content": format_tool_call("business_info", {"topic": "phone"})},
                    tool_message("business_info", {"ok": True, "phone": "555-0142"}),
                    {"role": "assistant", "content": "Our phone number is 555-0142."},
                    {"role": "user", "content": said}]
        schemas = held(Toolbox(profile, open_store(":memory:")).schemas(), messages, profile)
        return next(s for s in schemas if s["name"] == "business_info")["parameters"]["properties"]["topic"]["enum"]

    assert topics("and the address?") == ["address"]
    assert topics("ok, what are your hours on saturday?") == ["hours"]
    assert len(topics("how much is a haircut?")) == 5          # no topic named: the model's choice
    assert len(topics("your address and your hours?")) == 5    # two named
    # a bike shop's "service" is its tune-up too: the words name a service, and the topic is the model's
    bikes = load_profile("app/profiles/bike_repair.yaml")
    assert len(topics("how much is a service?", bikes)) == 5
