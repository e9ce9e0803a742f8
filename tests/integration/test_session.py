"""The whole pipeline on the real bundled ASR and TTS, with a test-double language model."""
import asyncio
import threading
import time

import numpy as np

from app.pipeline.services import Services
from app.pipeline.session import Session, SessionOptions
from app.transports.file import converse
from speech.audio import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE_HZ
from tests.fakes import FakeEngine, FakeToolbox, last_user
from speech.wer import word_error_rate

QUESTION = "Hello there, I would like to know what time you open on Saturday morning, please."
LONG_REPLY = ("We open at nine in the morning on Saturday, and we close at five in the afternoon. "
              "On Sunday we are closed all day, but you can book online at any time you like.")


def trim(audio: np.ndarray, level: int = 500) -> np.ndarray:
    """Piper's speech without its leading and trailing near-silence (which varies from run to run)."""
    loud = np.flatnonzero(np.abs(audio) > level)
    return audio[loud[0]:loud[-1] + 1]


def make_services(transcriber, synthesizer, engine) -> Services:
    return Services(transcriber, synthesizer, engine, FakeToolbox(), "Front desk.")


def test_one_turn_end_to_end(transcriber, synthesizer, speak):
    engine = FakeEngine(lambda m: f"You asked: {last_user(m)}")
    services = make_services(transcriber, synthesizer, engine)
    result = asyncio.run(converse(services, speak(QUESTION)))
    assert word_error_rate(QUESTION, result["transcript"]) <= 0.10, result["transcript"]
    # the agent stage ran on it (a comma's pause may also have drafted, and dropped, a reply to the first words)
    assert any(last_user(call) == result["transcript"] for call in engine.calls)
    assert result["reply"] == f"You asked: {result['transcript']}"
    audio = result["audio"]
    assert len(audio) > synthesizer.sample_rate_hz // 2 and np.abs(audio).max() > 1000   # a spoken reply
    metrics = result["metrics"]
    for key in ("end_of_turn_delay_ms", "asr_ms", "llm_ttft_ms", "tts_ttfb_ms", "e2e_latency_ms"):
        assert metrics[key] >= 0, key
    assert metrics["e2e_latency_ms"] >= metrics["end_of_turn_delay_ms"] + metrics["asr_ms"]
    assert result["errors"] == []


def test_silence_gives_no_turn(transcriber, synthesizer):
    engine = FakeEngine(lambda m: "never")
    result = asyncio.run(converse(make_services(transcriber, synthesizer, engine), np.zeros(SAMPLE_RATE_HZ, np.int16)))
    assert result["transcript"] == "" and engine.calls == [] and len(result["audio"]) == 0


async def _barge_in(services, question, interruption):
    """Real-time: ask, let the reply play ~1 s, talk over it. Returns the session and the pulled frames."""
    events = []

    async def send_event(event):
        events.append(event)

    out_rate = 16_000
    session = Session(services, output_rate_hz=out_rate, send_event=send_event)
    starts = []
    original = session._on_speech_start

    async def spy(event):
        starts.append(time.perf_counter())
        await original(event)

    session._on_speech_start = spy
    runner = asyncio.create_task(session.run())
    pulled = []   # (wall time, loud?)

    async def speaker():
        while True:
            frame = session.playback.read(out_rate * FRAME_MS // 1000)
            pulled.append((time.perf_counter(), bool(np.abs(frame).max() > 0)))
            await asyncio.sleep(FRAME_MS / 1000)

    speaker_task = asyncio.create_task(speaker())

    async def say(audio):
        for i in range(0, len(audio), FRAME_SAMPLES):
            session.push_audio(audio[i:i + FRAME_SAMPLES])
            await asyncio.sleep(FRAME_MS / 1000)

    await say(np.concatenate([question, np.zeros(SAMPLE_RATE_HZ // 2, np.int16)]))
    while not any(loud for _, loud in pulled):          # wait for the reply to start playing
        session.push_audio(np.zeros(FRAME_SAMPLES, np.int16))
        await asyncio.sleep(FRAME_MS / 1000)
    await say(np.zeros(SAMPLE_RATE_HZ, np.int16))       # ~1 s of the reply is heard
    interrupt_at = len(starts)
    await say(interruption)
    await say(np.zeros(SAMPLE_RATE_HZ // 10, np.int16))
    speaker_task.cancel()
    await session.close()
    runner.cancel()
    return session, events, pulled, starts[interrupt_at:]


def test_barge_in_stops_output_and_history_keeps_what_was_heard(transcriber, synthesizer, speak):
    # keyed on the dialogue, not on the call count: a pause at the comma may draft (and drop) an extra call
    engine = FakeEngine(lambda m: LONG_REPLY if sum(x["role"] == "user" for x in m) == 1 else "Okay.", block_words=3)
    services = make_services(transcriber, synthesizer, engine)
    session, events, pulled, starts = asyncio.run(_barge_in(services, speak(QUESTION), speak("Wait, stop please.")))
    assert starts, "the interruption was not heard as speech"
    t_start = starts[0]
    loud_after = [t for t, loud in pulled if loud and t > t_start]
    # the last loud frame pulled after speech_start is within 100 ms of it (none when the reply was cut at once)
    assert not loud_after or loud_after[-1] - t_start <= 0.100, loud_after[-1] - t_start
    assistant = [m["content"] for m in session.agent.messages if m["role"] == "assistant"]
    heard = assistant[0]
    assert heard and heard != LONG_REPLY and LONG_REPLY.startswith(heard.rstrip(".,")), heard
    assert session.turns[0].heard == heard


def test_reply_is_drafted_during_the_silence(transcriber, synthesizer, speak):
    engine = FakeEngine(lambda m: f"You asked: {last_user(m)}")
    result = asyncio.run(converse(make_services(transcriber, synthesizer, engine), speak(QUESTION)))
    assert result["metrics"]["drafted"] is True
    finals = [call for call in engine.calls if last_user(call) == result["transcript"]]
    assert len(finals) == 1                             # the draft was used, not generated again
    assert result["reply"] == f"You asked: {result['transcript']}"


def test_a_draft_starts_sooner_into_the_silence_while_no_model_has_work(transcriber, synthesizer, speak, monkeypatch):
    # a lone caller's draft starts at speculate_idle_ms (the cores would idle), and at speculate_ms while another
    # job holds a model (a draft the caller's next words drop would take from another caller)
    started_at, make_draft = [], Session._make_draft

    def spy(session, audio, draft):
        started_at.append(session.detector.trailing_silence_ms)
        return make_draft(session, audio, draft)

    monkeypatch.setattr(Session, "_make_draft", spy)
    options, question = SessionOptions(), speak("What time do you open on Saturday?")
    engine = FakeEngine(lambda m: "We open at nine.")
    services = make_services(transcriber, synthesizer, engine)
    asyncio.run(converse(services, question, realtime=True, options=options))
    alone, started_at[:] = list(started_at), []
    busy = threading.Event()
    services.llm_lanes.submit(busy.wait)   # another caller's work, running
    try:
        asyncio.run(converse(services, question, realtime=True, options=options))
    finally:
        busy.set()
    assert alone[-1] == options.speculate_idle_ms, alone          # the turn's own draft, at its end
    assert set(started_at) == {options.speculate_ms}, started_at


def test_a_draft_reads_with_the_tools_that_only_read_and_the_turn_uses_their_results(transcriber, synthesizer, speak):
    from app.agent.protocol import format_tool_call

    def script(messages):
        if messages[-1]["role"] == "tool":
            return "We open at nine on Saturday."
        return format_tool_call("business_info", {"said": last_user(messages)})

    class Toolbox(FakeToolbox):
        def call(self, name, arguments):   # records whether the session's draft (Agent.draft) ran it
            return super().call(name, dict(arguments, drafted=getattr(in_draft, "now", False)))

    in_draft = threading.local()
    engine = FakeEngine(script)
    toolbox = Toolbox({"business_info": {"ok": True}}, read_only=("business_info",))
    services = Services(transcriber, synthesizer, engine, toolbox, None)
    submit = services.llm_lanes.submit

    def spy(fn, *args, speculative=False, **kwargs):
        def marked(*a, **k):
            in_draft.now = getattr(fn, "__name__", "") == "draft"
            try:
                return fn(*a, **k)
            finally:
                in_draft.now = False
        return submit(marked, *args, speculative=speculative, **kwargs)

    services.llm_lanes.submit = spy
    result = asyncio.run(converse(services, speak(QUESTION)))
    assert result["metrics"]["drafted"] is True
    final = [args for _, args in toolbox.calls if args["said"] == result["transcript"]]
    assert [args["drafted"] for args in final] == [True]    # run by the draft, not again by the turn
    replies = [call for call in engine.calls if call[-1]["role"] == "tool" and last_user(call) == result["transcript"]]
    assert len(replies) == 1 and result["reply"] == "We open at nine on Saturday."


def test_a_pause_mid_sentence_discards_the_draft_without_side_effects(transcriber, synthesizer, speak):
    from app.agent.protocol import format_tool_call

    def script(messages):
        if messages[-1]["role"] == "tool":
            return "Done."
        return format_tool_call("book_appointment", {"said": last_user(messages)})

    engine = FakeEngine(script)
    toolbox = FakeToolbox({"book_appointment": {"ok": True}})
    services = Services(transcriber, synthesizer, engine, toolbox, None)
    drafted = []   # the utterance lengths the drafts asked Whisper for
    submit = services.asr_lanes.submit

    def spy(fn, *args, speculative=False, **kwargs):
        if speculative:
            drafted.append(len(args[0]))
        return submit(fn, *args, speculative=speculative, **kwargs)

    services.asr_lanes.submit = spy
    pause = np.zeros(SAMPLE_RATE_HZ * 350 // 1000, np.int16)     # longer than speculate_ms, shorter than silence_ms
    audio = np.concatenate([trim(speak("I would like to book a haircut")), pause, trim(speak("on Friday afternoon please."))])
    result = asyncio.run(converse(services, audio))
    assert drafted and min(drafted) < len(audio) * 0.6, drafted   # a draft of the first half was started
    assert len(toolbox.calls) == 1, toolbox.calls       # a stale draft never runs a tool; the final turn's call did
    said = toolbox.calls[0][1]["said"].lower()
    assert "haircut" in said and "friday" in said
    assert result["reply"] == "Done."


def test_close_while_the_reply_waits_to_be_played_ends_the_session(transcriber, synthesizer, speak):
    # A caller who hangs up once the reply is queued but before any of it was sent: nobody will ever pull the
    # audio, so the turn's wait for its first frame must end with the call (a Twilio `stop` left such sessions
    # open, counted against the session cap forever).
    engine = FakeEngine(lambda m: "We open at nine.")
    services = make_services(transcriber, synthesizer, engine)

    async def go():
        async def send_event(event):
            pass

        session = Session(services, output_rate_hz=16_000, send_event=send_event)
        runner = asyncio.create_task(session.run())
        session.push_audio(np.concatenate([speak(QUESTION), np.zeros(SAMPLE_RATE_HZ, np.int16)]))
        deadline = time.monotonic() + 30
        while not (session.turns and session.turns[-1].reply):   # the reply is written and queued; nobody reads it
            assert time.monotonic() < deadline, "no reply was written"
            await asyncio.sleep(0.01)
        assert session.playback.busy
        started = time.monotonic()
        await asyncio.wait_for(session.close(), 5)   # (a timeout here cancels the turn: the time tells)
        await asyncio.wait_for(runner, 5)
        return session, time.monotonic() - started

    session, close_s = asyncio.run(go())
    assert close_s < 0.5, f"close took {close_s:.1f} s"
    assert session.turns and session.turns[-1].reply == "We open at nine."
