"""The agent loop: streaming, tool calls fed back, markup never spoken, cancellation and barge-in history."""
import json
import threading
from contextlib import contextmanager

from app.agent.loop import Agent
from app.agent.options import AgentOptions
from app.agent.protocol import format_tool_call, parse_tool_calls, tool_message
from app.agent.speech_filter import SpeechFilter
from tests.fakes import FakeEngine, FakeToolbox


def booking_script(messages):
    last = messages[-1]
    if last["role"] == "tool":
        result = json.loads(last["content"])["result"]
        return f"You're booked for {result['time']} on {result['day']}." if result["ok"] else f"Sorry, {result['error']}."
    return format_tool_call("book_appointment", {"name": "Ana", "day": "monday", "time": "15:30"})


def test_plain_reply_streams_blocks_and_records_history():
    engine = FakeEngine(lambda m: "Hello there, how can I help you today?", block_words=2)
    agent = Agent(engine, FakeToolbox(), "Front desk.")
    seen = []
    turn = agent.respond("hi", on_text=seen.append)
    assert len(seen) >= 3 and "".join(seen).strip() == turn.reply == "Hello there, how can I help you today?"
    assert agent.messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": turn.reply}]
    assert engine.calls[0][0] == {"role": "system", "content": "Front desk."}


def test_tool_call_runs_and_result_is_fed_back():
    toolbox = FakeToolbox({"book_appointment": {"ok": True, "day": "Monday 7 December", "time": "15:30"}})
    engine = FakeEngine(booking_script, block_words=3)
    agent = Agent(engine, toolbox, None)
    spoken, tools = [], []
    turn = agent.respond("book me monday at half past three, I'm Ana", on_text=spoken.append, on_tool=tools.append)
    assert toolbox.calls == [("book_appointment", {"name": "Ana", "day": "monday", "time": "15:30"})]
    assert [t.name for t in tools] == ["book_appointment"] and turn.tool_calls[0].result["ok"]
    assert engine.calls[1][-1] == tool_message("book_appointment", toolbox.results["book_appointment"])
    assert turn.reply == "You're booked for 15:30 on Monday 7 December."
    assert "<tool_call>" not in "".join(spoken) and "booked" in "".join(spoken)
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "tool", "assistant"]


def hours_script(messages):
    last = messages[-1]
    if last["role"] == "tool":
        return f"We open at {json.loads(last['content'])['result']['opens']} on Saturday."
    return format_tool_call("business_info", {"topic": "hours", "day": "saturday"})


def test_a_draft_runs_the_tools_that_only_read_and_the_turn_starts_from_it():
    toolbox = FakeToolbox({"business_info": {"ok": True, "opens": "9:00 AM"}}, read_only=("business_info",))
    engine = FakeEngine(hours_script, block_words=2)
    agent = Agent(engine, toolbox, None)
    spoken = []
    drafted = agent.draft("when do you open saturday", on_text=spoken.append)
    assert agent.messages == []                                  # the history waits for the turn
    assert toolbox.calls == [("business_info", {"topic": "hours", "day": "saturday"})]
    assert "".join(spoken).strip() == "We open at 9:00 AM on Saturday."
    turn = agent.respond("when do you open saturday", first=drafted)
    assert len(toolbox.calls) == 1 and len(engine.calls) == 2    # neither run again
    assert turn.reply == "We open at 9:00 AM on Saturday." and turn.tool_calls[0].result["opens"] == "9:00 AM"
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "tool", "assistant"]


def test_a_draft_stops_before_a_call_it_cannot_preview():
    toolbox = FakeToolbox({"book_appointment": {"ok": True, "day": "Monday", "time": "15:30"}},
                          read_only=("business_info",))
    engine = FakeEngine(booking_script)
    agent = Agent(engine, toolbox, None)
    drafted = agent.draft("book me monday at half past three, I'm Ana")
    assert toolbox.calls == [] and len(drafted.steps) == 1 and drafted.steps[0].results is None
    turn = agent.respond("book me monday at half past three, I'm Ana", first=drafted)
    assert toolbox.calls == [("book_appointment", {"name": "Ana", "day": "monday", "time": "15:30"})]
    assert turn.reply == "You're booked for 15:30 on Monday." and len(engine.calls) == 2


def test_a_previewed_booking_is_made_by_the_turn_which_keeps_what_the_draft_wrote_after_it():
    booked = {"ok": True, "day": "Monday", "time": "15:30"}
    toolbox = FakeToolbox({"book_appointment": booked}, previewed=("book_appointment",))
    engine = FakeEngine(booking_script)
    agent = Agent(engine, toolbox, None)
    drafted = agent.draft("book me monday at half past three, I'm Ana")
    assert toolbox.calls == [] and [s.results for s in drafted.steps] == [[booked], None]   # nothing booked yet
    turn = agent.respond("book me monday at half past three, I'm Ana", first=drafted)
    assert toolbox.calls == [("book_appointment", {"name": "Ana", "day": "monday", "time": "15:30"})]
    assert turn.reply == "You're booked for 15:30 on Monday." and len(engine.calls) == 2   # the drafted reply


def test_a_booking_whose_result_is_not_the_previewed_one_is_answered_again():
    toolbox = FakeToolbox({"book_appointment": {"ok": False, "error": "that time was just taken"}},
                          previewed=("book_appointment",))
    toolbox.previews["book_appointment"] = {"ok": True, "day": "Monday", "time": "15:30"}   # before another caller
    engine = FakeEngine(booking_script)
    agent = Agent(engine, toolbox, None)
    drafted = agent.draft("book me monday at half past three, I'm Ana")
    turn = agent.respond("book me monday at half past three, I'm Ana", first=drafted)
    assert len(toolbox.calls) == 1 and len(engine.calls) == 3
    assert turn.reply == "Sorry, that time was just taken."
    assert agent.messages[-2] == tool_message("book_appointment", toolbox.results["book_appointment"])


def test_refused_tool_result_reaches_the_model():
    toolbox = FakeToolbox({"book_appointment": {"ok": False, "error": "we are closed on Sunday"}})
    agent = Agent(FakeEngine(booking_script), toolbox, None)
    assert agent.respond("book sunday").reply == "Sorry, we are closed on Sunday."


def test_markup_split_across_blocks_is_never_spoken():
    spoken = []
    speech = SpeechFilter(spoken.append)
    text = 'Sure. <tool_call>{"name":"x","arguments":{}}</tool_call> Done.'
    for i in range(0, len(text), 5):
        speech.feed(text[i:i + 5])
    assert "".join(spoken).split() == ["Sure.", "Done."]


def test_bad_tool_json_is_reported_to_the_model_not_raised():
    replies = iter(["<tool_call>{not json</tool_call>", "Sorry, something went wrong."])
    engine = FakeEngine(lambda m: next(replies))
    agent = Agent(engine, FakeToolbox(), None)
    turn = agent.respond("book")
    assert turn.tool_calls[0].result["ok"] is False and "not valid JSON" in turn.tool_calls[0].result["error"]
    assert turn.reply == "Sorry, something went wrong."


def test_tool_rounds_are_bounded():
    engine = FakeEngine(lambda m: format_tool_call("current_datetime", {}))
    agent = Agent(engine, FakeToolbox({"current_datetime": {"ok": True}}), None, AgentOptions(max_tool_rounds=2))
    turn = agent.respond("what time is it")
    assert len(turn.tool_calls) == 3 and len(engine.calls) == 3


def test_cancel_stops_generation_and_truncation_keeps_what_was_heard():
    cancel = threading.Event()
    engine = FakeEngine(lambda m: "one two three four five six seven eight", block_words=2)
    agent = Agent(engine, FakeToolbox(), None)

    def on_text(piece):
        if "three" in piece:
            cancel.set()

    turn = agent.respond("count", on_text=on_text, cancel=cancel)
    assert turn.cancelled and turn.reply == "one two three four"
    agent.truncate_last_reply("one two")
    assert agent.messages[-1] == {"role": "assistant", "content": "one two"}
    agent.truncate_last_reply("")
    assert agent.messages[-1]["role"] == "user"


def test_a_forgotten_message_leaves_the_history_and_the_window_keeps_its_place():
    agent = Agent(FakeEngine(lambda m: f"answer {len(m)}"), FakeToolbox(), "S")
    for i in range(3):
        agent.respond(f"turn {i}")
    agent._first = 2                                       # as if the window had moved past the first turn
    first_kept = agent.messages[2]
    assert agent.forget("user", " turn 0 ") and not agent.forget("user", "turn 0")
    assert agent.messages[agent._first] is first_kept      # the same turns in the prompt as before
    assert agent.forget("assistant", agent.messages[-1]["content"])
    assert [m["content"] for m in agent.messages if m["role"] == "user"] == ["turn 1", "turn 2"]
    assert agent.messages[-1] == {"role": "user", "content": "turn 2"}


def test_a_deleted_call_takes_its_output_with_it():
    from app.api.realtime.config import Config
    from app.api.realtime.conversation import ClientConversation

    history = ClientConversation(None, Config("sess", "m"), on_call=None)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    for message in ({"role": "user", "content": "weather?"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                    {"role": "assistant", "content": "It is sunny."}):
        history.add(message)
    assert history.forget("function_call", call_id="call_1") and not history.forget("function_call", call_id="call_1")
    assert [m["role"] for m in history.messages] == ["user", "assistant"]
    assert history.forget("assistant", "It is sunny.") and history.messages == [{"role": "user", "content": "weather?"}]


def test_prompt_keeps_the_last_user_turns_only():
    agent = Agent(FakeEngine(lambda m: "ok"), FakeToolbox(), "S", AgentOptions(max_history_turns=2))
    for i in range(4):
        agent.respond(f"turn {i}")
    prompt = agent.prompt()
    assert [m["content"] for m in prompt if m["role"] == "user"] == ["turn 2", "turn 3"]
    assert prompt[0]["role"] == "system"


def test_parse_tool_calls_separates_speech():
    calls, spoken = parse_tool_calls('Let me check. <tool_call>{"name":"a","arguments":{"x":1}}</tool_call>')
    assert calls == [("a", {"x": 1})] and spoken == "Let me check."
    assert parse_tool_calls("Booking <tool_call>{\"name\":") == ([("", {"raw": "{\"name\":"})], "Booking")


def test_an_unfinished_tool_call_is_reported_to_the_model_not_dropped():
    """A call that never closes (a name that ran on to the end of the canvas) gets an error back and a second
    generation, so the caller hears a reply instead of silence."""
    replies = iter(['<tool_call>{"name":"book_appointment","arguments":{"name":"Noah I I I', "Sorry, say that again?"])
    agent = Agent(FakeEngine(lambda m: next(replies)), FakeToolbox(), None)
    turn = agent.respond("This is Noah calling. A haircut on Friday at 3:30 p.m.?")
    assert [c.name for c in turn.tool_calls] == [""] and turn.tool_calls[0].result["ok"] is False
    assert agent.messages[-1] == {"role": "assistant", "content": "Sorry, say that again?"}
    assert turn.reply == "Sorry, say that again?"


def test_checkpoint_decoding_preferences_reach_the_engine(tmp_path):
    from app.agent.options import agent_options_for

    (tmp_path / "generation_config.json").write_text(json.dumps({"block_length": 4, "cache": "dual", "other": 3}))
    options = agent_options_for(tmp_path)
    assert (options.block_length, options.cache, options.threshold) == (4, "dual", AgentOptions.threshold)
    engine = RecordingEngine()
    Agent(engine, FakeToolbox(), None, options).respond("Hi.")
    assert engine.kwargs["use_cache"] == "dual" and engine.kwargs["block_length"] == 4
    assert agent_options_for(tmp_path / "missing").cache == "prefix"


class RecordingEngine(FakeEngine):
    def __init__(self):
        super().__init__(lambda m: "Hello.")

    def generate(self, messages, **kwargs):
        self.kwargs = kwargs
        return super().generate(messages, **kwargs)


class SmallContextEngine(FakeEngine):
    """A model whose context holds `context` words of prompt and reply (one word, one token)."""

    def __init__(self, context: int):
        super().__init__(lambda m: "Okay.")
        self.model = type("M", (), {"args": type("A", (), {"max_sequence_length": context})()})()

    def prompt_ids(self, messages):
        return [word for m in messages for word in m["content"].split()]

    def fits(self, messages, max_new_tokens):
        return len(self.prompt_ids(messages)) + max_new_tokens <= self.model.args.max_sequence_length


def test_a_call_of_any_length_keeps_what_fits_and_moves_its_window_rarely():
    """max_history_turns 0: every turn while they fit; then the window moves past the oldest turns until half the
    context is free, so the following turns share the prompt's start (and so its KV cache)."""
    engine = SmallContextEngine(context=60)
    agent = Agent(engine, FakeToolbox(), "sys", AgentOptions(max_new_tokens=10, max_history_turns=0))
    firsts = []
    for n in range(40):
        agent.respond(f"question number {n}")
        prompt = engine.calls[-1]
        assert prompt[0] == {"role": "system", "content": "sys"} and prompt[-1]["content"] == f"question number {n}"
        assert engine.fits(prompt, 10)
        firsts.append(prompt[1]["content"])
    assert firsts[:8] == ["question number 0"] * 8  # nothing dropped while it fits
    moves = sum(a != b for a, b in zip(firsts, firsts[1:]))
    assert 3 <= moves <= 10  # the window moved several turns at a time, not every turn


def test_a_prompt_budget_keeps_a_long_call_short_of_the_whole_context(tmp_path):
    """max_prompt_tokens (generation_config.json): the adapted brain reads a short prompt better than a long one
    (docs/MODELS.md), so the window keeps the prompt within the budget where the context would hold more."""
    from app.agent.options import agent_options_for

    engine = SmallContextEngine(context=200)
    agent = Agent(engine, FakeToolbox(), "sys", AgentOptions(max_new_tokens=10, max_history_turns=0,
                                                            max_prompt_tokens=30))
    sizes = []
    for n in range(40):
        agent.respond(f"question number {n}")
        sizes.append(len(engine.prompt_ids(engine.calls[-1])))
        assert engine.calls[-1][-1]["content"] == f"question number {n}"
    assert max(sizes) <= 30 and max(sizes) >= 25   # the budget, used
    assert min(sizes[8:]) >= 12                     # a move keeps half the history's room, not the last turn alone
    whole = Agent(engine, FakeToolbox(), "sys", AgentOptions(max_new_tokens=10, max_history_turns=0))
    for n in range(40):
        whole.respond(f"question number {n}")
    assert len(engine.prompt_ids(whole.prompt())) > 30  # without a budget, the context is the limit
    (tmp_path / "generation_config.json").write_text(json.dumps({"max_prompt_tokens": 900}))
    assert agent_options_for(tmp_path).max_prompt_tokens == 900


def test_between_turns_a_long_call_moves_its_window_and_prefills_what_the_next_turn_reads():
    """Agent.prepare_next: the window move a long call needs happens while the caller hears the reply, and the
    engine holds the moved prompt, which the next turn's prompt extends (its cache reused)."""

    class PrefillingEngine(SmallContextEngine):
        def __init__(self, context):
            super().__init__(context)
            self.prefilled = []

        def prefill(self, messages, cancel=None):
            self.prefilled.append(list(messages))

    for context, budget in ((60, 0), (200, 30)):   # the context the limit, or a prompt budget within it
        engine = PrefillingEngine(context=context)
        agent = Agent(engine, FakeToolbox(), "sys", AgentOptions(max_new_tokens=10, max_history_turns=0,
                                                                cache="block", tool_grammar=False,
                                                                max_prompt_tokens=budget))
        moved_by_turns, prompts = 0, []
        for n in range(40):
            first = agent._first
            agent.respond(f"question number {n}")   # 3 words: within the room prepare_next keeps for them
            moved_by_turns += agent._first != first  # a move the caller waited for
            if prompts:
                assert engine.calls[-1][:len(prompts[-1])] == prompts.pop()   # the turn read on from what was held
            if agent.prepare_next(next_tokens=5):
                prompts.append(engine.prefilled[-1])
        assert len(engine.prefilled) >= 3 and moved_by_turns == 0
    other = Agent(SmallContextEngine(context=60), FakeToolbox(), "sys", AgentOptions(max_history_turns=0))
    assert other.prepare_next() is False   # an engine that holds no KV cache: nothing to prepare


def test_every_generation_of_a_turn_or_its_draft_is_its_own_conversations():
    # the engine keeps a conversation's KV cache for its next turn (llm.caches) when the agent names it
    class NamingEngine(FakeEngine):
        def __init__(self, script):
            super().__init__(script)
            self.named, self._now = [], None

        @contextmanager
        def conversation(self, key):
            self._now = key
            try:
                yield
            finally:
                self._now = None

        def generate(self, messages, **kwargs):
            self.named.append(self._now)
            return super().generate(messages, **kwargs)

    engine = NamingEngine(lambda m: format_tool_call("current_datetime", {}) if m[-1]["role"] == "user" else "Noon.")
    first, second = (Agent(engine, FakeToolbox(), "S") for _ in range(2))
    asked = []
    for agent, ask in ((first, first.draft), (second, second.respond), (first, first.respond)):
        before = len(engine.named)
        ask("what time is it")
        asked += [agent] * (len(engine.named) - before)
    assert len(asked) >= 4 and engine.named == asked and engine._now is None
