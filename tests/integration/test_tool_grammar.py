"""The tools' grammar (app.agent.tool_grammar): every call the agent is trained to write passes it token by token,
and what no tool could take is refused."""
import dataclasses
from datetime import datetime

import pytest

import llm
from app.agent.heard import heard, said_words
from app.agent.loop import Agent
from app.agent.options import agent_options_for
from app.agent.profile import load_profile
from app.agent.protocol import parse_tool_calls
from app.agent.store import open_store
from app.agent.tool_grammar import ToolCallGrammar
from app.agent.tools import SCHEMAS, Toolbox, system_prompt
from app.settings import FRONTDESK_LLM_DIR
from app.training.dialogues import cases, examples, generate


@pytest.fixture(scope="module")
def engine():
    return llm.load(FRONTDESK_LLM_DIR, device="cpu")


@pytest.fixture(scope="module")
def grammar(engine):
    """The shipped profile's tools: the services are the examples of `service`."""
    return ToolCallGrammar.for_tokenizer(Toolbox(load_profile(None), open_store(":memory:")).schemas(),
                                         engine.tokenizer)


def call(tool, body):
    return f'<tool_call>{{"name":"{tool}","arguments":{{{body}'


SAID = heard([{"role": "user", "content": "Hi. This is Noah Park calling, thanks."},
              {"role": "assistant", "content": "What day and time?"},
              {"role": "user", "content": "Tuesday at half past three. Can I get a perm?"}])
NOTHING_SAID = heard([{"role": "user", "content": "Is anything open on Monday? This is Noah."}])
BOOK = '"name":"Noah Park","day":"tuesday","time":"15:30","service":'



@pytest.mark.parametrize("text, state", [
    ("Sure, what day?", "free"),
    (call("book_appointment", '"name":"Noah Park","day":"tuesday","time":"15:30","service":"haircut"}}</tool_call>'),
     "free"),
    (call("book_appointment", '"name":"Noah Park","day":"tuesday","time":"03:30"'), "open"),  # a.m. or p.m.
    (call("end_call", "}}</tool_call>Goodbye!"), "free"),
    (call("end_call", '}}</tool_call>Goodbye!"}}</tool_call>'), "broken"),  # markup after the call is spoken
    ('You are all set."}}</tool_call>', "broken"),                     # a close with no call open
    ("Sure <tool_c", "broken"),                                        # a call never opens after speech
    ("<tool_c", "free"),                                               # a call opening
    ("Two < three", "broken"),
    ('Thank you for calling Maple Street","day":"tomorrow', "broken"),  # JSON run into speech
    (call("book_appointment", '"name":"Noah'), "open"),
    (call("book_appointment", '"name":"Noah Park","day":"tu'), "open"),
    (call("check_availability", '"day":"tuesday","time":"1'), "open"),
    (call("check_availability", '"day":"monday"'), "broken"),           # a day nobody said
    (call("check_availability", '"day":"tuesday"}}</tool'), "open"),
    ('<tool_call>{"name":"check_av', "open"),
    ('<tool_call>{"name":"check_avx', "broken"),                      # no such tool
    (call("book_appointment", '"name":"Noah,'), "broken"),            # a comma in a name
    (call("book_appointment", '"name":"Noah"}}'), "broken"),          # day, time and service are required
    (call("book_appointment", '"name":"Noah","day":"wex'), "broken"),  # not a day
    (call("check_availability", '"day":"tuesday","time":"24'), "broken"),
    (call("check_availability", '"day":"tuesday","time":"9:30"'), "broken"),  # HH:MM, two digits
    (call("check_availability", '"time":"14:00","day":"tuesday"}}'), "broken"),  # the schema's order
    (call("check_availability", '"day":"tuesday","day"'), "broken"),   # a key twice
    (call("book_appointment", '"name":"Noah","time"'), "broken"),     # the day, required, skipped
    (call("business_info", '"topic":"prices","service"'), "open"),    # the day, optional, skipped
    (call("cancel_appointment", '"name":"Noah","service"'), "broken"),  # not one of its keys
    (call("list_appointments", '"name":" Noah'), "broken"),           # a letter first
    (call("list_appointments", '"name":"Noah Noah'), "broken"),       # not what the caller said
    (call("list_appointments", '"name":"Noah Pa"'), "broken"),        # a word cut short
    (call("list_appointments", '"name":"Noah"}}</tool_call>'), "broken"),   # said, but cut short
    (call("list_appointments", '"name":"Park"'), "broken"),                # nor from its second word
    (call("list_appointments", '"name":"Noah Park calling"'), "broken"),   # "calling" is not a name
    (call("list_appointments", '"name":"Park Tuesday"'), "broken"),        # nor a day, nor across phrases
    (call("check_availability", '"day":"tuesday","time":"15:00"'), "broken"),  # a time nobody said
    (call("book_appointment", BOOK + '"kids haircut"}}</tool_call>'), "free"),  # one of the services
    (call("book_appointment", BOOK + '"perm"}}</tool_call>'), "free"),          # said (refused by the tool)
    (call("book_appointment", BOOK + '"get a perm"'), "broken"),                # the request is not the service
    (call("book_appointment", BOOK + '"hair col'), "open"),
    (call("book_appointment", BOOK + '"percoloring"'), "broken"),               # neither
    (call("business_info", '"topic":"prices","service":"beard trim"}}</tool_call>'), "free"),
])
def test_state_of_a_reply(grammar, text, state):
    assert grammar.state(text, SAID) == state


@pytest.mark.parametrize("text, state", [
    (call("check_availability", '"day":"monday"}}</tool_call>'), "free"),
    (call("check_availability", '"day":"monday","time"'), "broken"),  # optional, and no time was said
    (call("book_appointment", '"name":"Noah","day":"monday","time":"11:45"'), "open"),  # required: any
    (call("list_appointments", '"name":"Noah"}}</tool_call>'), "free"),
    (call("list_appointments", '"name":"Is"'), "broken"),  # capitalized, but it opens a question: never a name
    (call("list_appointments", '"name":"anything"'), "broken"),
])
def test_state_when_no_time_was_said(grammar, text, state):
    assert grammar.state(text, NOTHING_SAID) == state


def test_a_preposition_that_opens_the_sentence_is_not_part_of_the_name(grammar):
    under = heard([{"role": "user", "content": "Could I get a haircut on Saturday at 9AM? Under Rohan, please."}])
    assert grammar.state(call("list_appointments", '"name":"Rohan"}}</tool_call>'), under) == "free"
    assert grammar.state(call("list_appointments", '"name":"Under'), under) == "broken"
    who = heard([{"role": "user", "content": "Hello, Who won the game last night? Thanks so much."}])
    assert not who.names  # a question word a transcript capitalized is no name: no name was given
    assert not who.grounds({"name": "Who"})


def test_a_two_word_name_is_given_whole(grammar):
    """"Under Arjun Jensen, please." is booked under "Arjun Jensen", never "Arjun" or "Jensen" alone."""
    said = heard([{"role": "user", "content": "What time is my appointment? Under Arjun Jensen, please."}])
    assert grammar.state(call("list_appointments", '"name":"Arjun Jensen"}}</tool_call>'), said) == "free"
    assert grammar.state(call("list_appointments", '"name":"Arjun"}}</tool_call>'), said) == "broken"
    assert grammar.state(call("list_appointments", '"name":"Jen'), said) == "broken"
    assert said.grounds({"name": "Arjun Jensen"})
    assert not said.grounds({"name": "Jensen"}) and not said.grounds({"name": "Arjun"})


def test_a_service_it_lacks_ends_where_the_day_begins(grammar):
    said = heard([{"role": "user", "content": "This is Noah. I'd like a perm next Tuesday, at 2:30. Or a perm this "
                                              "coming Tuesday."}], load_profile(None))
    book = '"name":"Noah","day":"tuesday","time":"14:30","service":'
    assert grammar.state(call("book_appointment", book + '"perm"}}</tool_call>'), said) == "free"
    assert grammar.state(call("book_appointment", book + '"perm n'), said) == "broken"
    assert grammar.state(call("book_appointment", book + '"perm th'), said) == "broken"


@pytest.mark.parametrize("text, service", [
    ("Hiya. This is Abdul calling. Could I get eyelash extensions on Thursday, at quarter to five.",
     "eyelash extensions"),
    ("Right, a teeth whitening, thanks so much.", "teeth whitening"),
    ("How much does a hot stone massage cost?", "hot stone massage"),
])
def test_a_service_it_lacks_is_all_the_words_the_caller_named_it_with(grammar, text, service):
    """The words for a service the business lacks are taken whole: "eyelash extensions" was booked as
    "extensions" and "teeth whitening" as "teeth" (and refused as such) before."""
    said = heard([{"role": "user", "content": text}], load_profile(None))
    assert said.grounds({"service": service})
    head, tail = service.split(" ", 1)
    assert not said.grounds({"service": head}) and not said.grounds({"service": tail})
    book = '"name":"Abdul","day":"thursday","time":"16:45","service":'
    said = heard([{"role": "user", "content": text + " Under Abdul."}], load_profile(None))
    assert grammar.state(call("book_appointment", book + f'"{service}"}}}}</tool_call>'), said) == "free"
    assert grammar.state(call("book_appointment", book + f'"{tail}'), said) == "broken"
    assert grammar.state(call("book_appointment", book + f'"{head}"'), said) == "broken"


def test_names_of_words_when_none_is_capitalized(grammar):
    lower = heard([{"role": "user", "content": "this is noah park calling"}])
    assert grammar.state(call("list_appointments", '"name":"noah park"}}</tool_call>'), lower) == "free"
    assert grammar.state(call("list_appointments", '"name":"noah bark"'), lower) == "broken"


def test_without_the_callers_words_names_and_services_are_any_text(grammar):
    assert grammar.state(call("list_appointments", '"name":"Noah Noah"}}</tool_call>')) == "free"
    assert grammar.state(call("list_appointments", '"name":"Noah, Noah"}}</tool_call>')) == "broken"
    assert grammar.state(call("book_appointment", BOOK + '"percoloring"}}</tool_call>')) == "free"


def test_the_schemas_alone_leave_services_free(engine):
    bare = ToolCallGrammar.for_tokenizer(SCHEMAS, engine.tokenizer)  # no examples: any text
    assert bare.state(call("book_appointment", BOOK + '"percoloring"}}</tool_call>'), SAID) == "free"


def test_a_grammar_needs_left_to_right_decoding(engine):
    with pytest.raises(ValueError, match="left"):
        engine.generate([{"role": "user", "content": "Hi."}], use_cache="prefix", allows=lambda ids, token: True)


def test_end_of_turn_only_outside_a_call(grammar, engine):
    end = engine.tokenizer.token_to_id("<|end|>")
    ids = engine.tokenizer.encode(call("list_appointments", '"name":"Noah"'), add_special_tokens=False).ids
    assert not grammar.allows(ids, end)
    closed = engine.tokenizer.encode(call("list_appointments", '"name":"Noah"}}</tool_call>'),
                                     add_special_tokens=False).ids
    assert grammar.allows(closed, end) and grammar.allows([], end)


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_call_of_the_dialogues_passes_token_by_token(grammar, engine, split):
    """The grammar never stands in the way of a right reply: each training target, call or spoken reply, is allowed
    token by token with what its prompt said, and the agent would run its calls (the conversation gave their
    details)."""
    profile = load_profile(None)
    end = engine.tokenizer.token_to_id("<|end|>")
    checked = 0
    for messages, target in examples(generate(profile, split, 150, seed=5), profile):
        said = heard(messages, profile)
        ids = engine.tokenizer.encode(target, add_special_tokens=False).ids + [end]
        refused = [k for k in range(len(ids)) if not grammar.allows(ids[:k], ids[k], said)]
        assert not refused, (target, engine.tokenizer.decode(ids[:refused[0] + 1]))
        assert all(said.grounds(arguments) for _, arguments in parse_tool_calls(target)[0]), target
        checked += "<tool_call>" in target
    assert checked > 100


def test_agent_with_the_grammar_writes_only_calls_the_tools_take(engine):
    """The shipped model on held-out booking turns: with the grammar every call parses, the tool takes its
    arguments and the name is words the caller said; without it, the same turns break some calls."""
    profile = load_profile(None)
    held = [c for c in cases(generate(profile, "heldout", 60, seed=0)) if c.intent == "book" and c.calls]

    def calls(case, grammar_on):
        store = open_store(":memory:")
        for name, service, start, duration in case.bookings:
            store.add(name, service, start, duration)
        toolbox = Toolbox(profile, store, now=lambda: case.now)
        options = dataclasses.replace(agent_options_for(FRONTDESK_LLM_DIR), tool_grammar=grammar_on)
        agent = Agent(engine, toolbox, system_prompt(profile, toolbox, "parley"), options)
        agent.messages = [dict(m) for m in case.history]
        return agent.respond(case.user).tool_calls, [m["content"] for m in agent.messages if m["role"] == "user"]

    broken_free = 0
    for case in held:
        made, said = calls(case, True)
        words = {w for message in said_words(said) for w in message}
        for c in made:
            assert c.name and "raw" not in c.arguments, c
            assert c.result["ok"] or not c.result["error"].startswith(c.name), c  # not "book_appointment needs"
            assert set(c.arguments.get("name", "").split()) <= words, c
        free, _ = calls(case, False)
        broken_free += sum(not c.name or not c.result["ok"] and c.result["error"].startswith(c.name) for c in free)
    assert broken_free, "without the grammar no call broke in these turns: the test would prove nothing"


class _PreferenceModel:
    """A test double of the embedded engine: it would write the first of `replies(messages)` that the decoding
    filter (`allows`, the tools' grammar) lets through token by token, as constrained decoding would."""

    chat_style = "parley"

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.filters = tokenizer, replies, []

    def generate(self, messages, *, allows=None, on_block=None, cancel=None, **_):
        from tests.fakes import FakeGeneration

        self.filters.append(allows)
        for text in self.replies(messages):
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
            if allows is None or all(allows(ids[:k], ids[k]) for k in range(len(ids))):
                words = text.split(" ") if on_block is not None else []
                for i, word in enumerate(words):  # streamed a word at a time
                    on_block(word + (" " if i < len(words) - 1 else ""))
                return FakeGeneration(text, 1, len(ids), 0.001, 0.001, "eos")
        raise AssertionError(f"the grammar refused every reply: {self.replies(messages)}")


@pytest.mark.parametrize("said, name, runs", [
    ("Could you book me a haircut on Thursday? This is Noah.", "Noah", False),        # no time: it asks
    ("Could you book me on Thursday at 3 pm? This is Noah.", "Noah", False),          # no service: it asks
    ("Hi. Could you book me a haircut on Thursday at 3 pm?", "Hi", False),            # no name: it asks
    ("Could you book me a haircut on Thursday at 3 pm? This is Noah.", "Noah", True),  # all given: it books
])
def test_the_agent_asks_for_a_detail_the_caller_never_gave(engine, said, name, runs):
    """A call the model completes with a value of its own (a time nobody said, the first service on the list) is
    not run: the agent writes the model's best reply without a call instead."""
    profile = load_profile(None)
    toolbox = Toolbox(profile, open_store(":memory:"), now=lambda: datetime(2027, 1, 4, 9, 0))  # a Monday
    call = f'<tool_call>{{"name":"book_appointment","arguments":{{"name":"{name}","day":"thursday","time":"15:00",' \
           '"service":"haircut"}}</tool_call>'

    def replies(messages):
        if messages[-1]["role"] == "tool":
            return [f"You're all set, {name}."]
        return [call, "What time and service would you like?"]

    model = _PreferenceModel(engine.tokenizer, replies)
    agent = Agent(model, toolbox, None, agent_options_for(FRONTDESK_LLM_DIR))
    turn = agent.respond(said)
    assert [c.name for c in turn.tool_calls] == (["book_appointment"] if runs else [])
    assert turn.reply == (f"You're all set, {name}." if runs else "What time and service would you like?")
    assert bool(toolbox.store.for_name(name)) == runs
    assert all("<tool_call>" not in m["content"] for m in agent.messages if m["role"] == "assistant") != runs


@pytest.mark.parametrize("said, books", [
    ("I was hoping to get a blow dry on Thursday at 3 pm. Under Felix, please.", True),  # the day was just given
    ("I was hoping to get a blow dry at 3 pm. Under Felix, please.", False),   # no day: the question stands
    ("Could I come in on Thursday at 3 pm? Under Felix, please.", False),      # a booking would need a service
])
def test_the_agent_does_not_ask_for_a_detail_the_caller_just_gave(engine, said, books):
    """A model that would rather ask "What day would you like to come in?" than book: when the caller's message
    gave the day and a booking of what was said is complete, the agent books, and the question is never spoken;
    otherwise the question is spoken as it was written."""
    profile = load_profile(None)
    toolbox = Toolbox(profile, open_store(":memory:"), now=lambda: datetime(2027, 1, 4, 9, 0))  # a Monday
    question = "What day would you like to come in?"
    call = '<tool_call>{"name":"book_appointment","arguments":{"name":"Felix","day":"thursday","time":"15:00",' \
           '"service":"blow dry"}}</tool_call>'

    def replies(messages):
        return ["You're all set, Felix."] if messages[-1]["role"] == "tool" else [question, call]

    agent = Agent(_PreferenceModel(engine.tokenizer, replies), toolbox, None, agent_options_for(FRONTDESK_LLM_DIR))
    pieces = []
    turn = agent.respond(said, on_text=pieces.append)
    assert [c.name for c in turn.tool_calls] == (["book_appointment"] if books else [])
    assert turn.reply == ("You're all set, Felix." if books else question)
    assert "".join(pieces).strip() == turn.reply            # what was spoken is the reply: the question or nothing
    assert [a.service for a in toolbox.store.for_name("Felix")] == (["blow dry"] if books else [])


def test_the_shipped_model_books_a_request_it_would_have_asked_the_day_of(engine):
    """A held-out request the shipped model answers "What day would you like to come in?" though it says "today":
    the agent books it instead, under the caller's name, with what they said."""
    profile = load_profile(None)
    toolbox = Toolbox(profile, open_store(":memory:"), now=lambda: datetime(2027, 1, 6, 9, 0))  # a Wednesday
    agent = Agent(engine, toolbox, system_prompt(profile, toolbox, "parley"), agent_options_for(FRONTDESK_LLM_DIR))
    turn = agent.respond("Hi, hi. I was hoping to get a blow dry today, at 3 pm. Under Felix, please.")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("book_appointment", {"name": "Felix", "day": "today", "time": "15:00", "service": "blow dry"})]
    assert [(a.service, a.start) for a in toolbox.store.for_name("Felix")] == [("blow dry", datetime(2027, 1, 6, 15))]


@pytest.mark.parametrize("question, answer, acts", [
    ("Sure, what name is the appointment under?", "Jacob, thanks.", True),   # the name asked for: it looks it up
    ("Sure, what name is the appointment under?", "Thanks.", False),         # no name given: a courtesy
    ("How can I help you today?", "Jacob, thanks.", False),                  # no name was asked for
])
def test_an_answer_to_the_agents_question_is_acted_on(engine, question, answer, acts):
    """A model that would rather say "You're welcome!" to "Jacob, thanks." than look the appointment up: when the
    caller's message answers the agent's question for their name, the agent makes the call the model would make
    of it (a tool that takes a name), and nothing else is spoken."""
    profile = load_profile(None)
    toolbox = Toolbox(profile, open_store(":memory:"), now=lambda: datetime(2027, 1, 4, 9, 0))
    welcome = "You're welcome!"
    call = '<tool_call>{"name":"list_appointments","arguments":{"name":"Jacob"}}</tool_call>'

    def replies(messages):
        return ["Jacob, you have nothing booked."] if messages[-1]["role"] == "tool" else [welcome, call]

    agent = Agent(_PreferenceModel(engine.tokenizer, replies), toolbox, None, agent_options_for(FRONTDESK_LLM_DIR))
    agent.messages = [{"role": "user", "content": "What time is my appointment?"},
                      {"role": "assistant", "content": question}]
    pieces = []
    turn = agent.respond(answer, on_text=pieces.append)
    assert [c.name for c in turn.tool_calls] == (["list_appointments"] if acts else [])
    assert "".join(pieces).strip() == turn.reply == ("Jacob, you have nothing booked." if acts else welcome)


def test_the_shipped_model_cancels_under_the_name_given_with_thanks(engine):
    """A held-out answer the shipped model took for thanks ("You're welcome! ..."): the name asked for, with a
    courtesy after it. The agent cancels under it."""
    profile = load_profile(None)
    store = open_store(":memory:")
    store.add("Omar", "haircut", datetime(2027, 1, 8, 11, 0), 30)
    toolbox = Toolbox(profile, store, now=lambda: datetime(2027, 1, 6, 9, 0))
    agent = Agent(engine, toolbox, system_prompt(profile, toolbox, "parley"), agent_options_for(FRONTDESK_LLM_DIR))
    agent.messages = [{"role": "user", "content": "Something came up, I have to cancel, thanks so much."},
                      {"role": "assistant", "content": "Sure, what name is the appointment under?"}]
    turn = agent.respond("Omar, thanks.")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("cancel_appointment", {"name": "Omar"})]
    assert turn.tool_calls[0].result["ok"] and not store.for_name("Omar")


def test_the_shipped_model_reads_the_name_back_whole(engine):
    """A held-out booking whose confirmation the shipped model had read back as "You're all set, Samue. Samue is
    booked ...": under the grammar a name from the tool result is read back whole, and the turn may not end in
    the middle of one."""
    profile = load_profile(None)
    toolbox = Toolbox(profile, open_store(":memory:"), now=lambda: datetime(2027, 1, 4, 9, 0))  # a Monday
    agent = Agent(engine, toolbox, system_prompt(profile, toolbox, "parley"), agent_options_for(FRONTDESK_LLM_DIR))
    turn = agent.respond("Hiya. I'd love to book a hair cut this coming Thursday at 3:15 pm please. Under Samuel, "
                         "please.")
    assert [c.name for c in turn.tool_calls] == ["book_appointment"] and turn.tool_calls[0].result["ok"]
    assert turn.reply.startswith("You're all set, Samuel.") and "Samue " not in turn.reply, turn.reply
    grammar, said = agent._grammar(), heard(agent.prompt(), profile)
    end = grammar.texts.index("")  # a special token: the end of the turn
    cut, whole = (engine.tokenizer.encode(f"You're all set, {name}", add_special_tokens=False).ids
                  for name in ("Samue", "Samuel"))
    assert grammar.allows(cut[:-1], cut[-1], said) and not grammar.allows(cut, end, said)
    assert grammar.allows(whole, end, said)


def test_a_reply_that_may_not_call_is_spoken_text_only(grammar, engine):
    """The agent's reply after a call it would not run: no "<", no brace, nor the tag spelled without its "<"."""
    def ok(text):
        ids = engine.tokenizer.encode(text, add_special_tokens=False).ids
        return all(grammar.no_call(ids[:k], ids[k]) for k in range(len(ids)))
    assert ok("What time on Friday works for you?")
    assert not ok("<tool_call>") and not ok("tool_call>") and not ok('Sure "}}')
