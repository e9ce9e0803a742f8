"""The Twilio Media Streams transport, against the real server socket.

A Twilio simulator (a real WebSocket client) speaks mu-law at real-time pace, plays the agent's audio back at
real-time pace, echoes marks once their audio has played and honours `clear` as Twilio does. The speech models
are the real bundled ones; the language model is the scripted test double.
"""
import asyncio
import base64
import re
import time
from contextlib import contextmanager

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect

from app.loadtest.twilio_caller import TwilioSimulator, speak_8k, voiced_seconds, wait_until
from app.pipeline.services import Services
from app.pipeline.session import Session
from app.server.app import create_app
from app.settings import Settings
from app.transports import twilio_wire as twilio
from app.transports.twilio import set_call_event_hook
from app.transports.twilio_webhooks import telephony_stats
from speech.audio import SAMPLE_RATE_HZ, resample
from tests.fakes import FakeEngine, FakeToolbox, last_user
from tests.prom import sample
from tests.rtc_helpers import serve_in_thread

REPLY_HOURS = "We open at nine in the morning. On Saturdays we open at ten. On Sundays we stay closed all day long."
REPLY_GO_AHEAD = "Of course, please go ahead."
REPLY_GOODBYE = "Goodbye, and thank you for calling."
REPLY_TRANSFER = "Of course, let me connect you with a person."
END_CALL = '<tool_call>{"name": "end_call", "arguments": {}}</tool_call>'
TRANSFER = '<tool_call>{"name": "transfer_to_human", "arguments": {}}</tool_call>'


def script(messages: list[dict]) -> str:
    if messages[-1]["role"] == "tool":
        return REPLY_TRANSFER if "transfer_to_human" in messages[-1]["content"] else REPLY_GOODBYE
    heard = last_user(messages).lower()
    if "bye" in heard:
        return END_CALL
    if "human" in heard:
        return TRANSFER
    if "open" in heard:
        return REPLY_HOURS
    return REPLY_GO_AHEAD


# --- a live server --------------------------------------------------------------------------------------------


@contextmanager
def serve(app):
    """The app on a free localhost port in a thread; yields "127.0.0.1:PORT"."""
    with serve_in_thread(app) as url:
        yield url.removeprefix("http://")


@pytest.fixture(scope="module")
def speech(transcriber, synthesizer):
    return transcriber, synthesizer


@pytest.fixture(scope="module")
def phone(speech):
    """A server with the real speech models and the scripted LLM; yields (host, app, engine)."""
    asr, tts = speech
    engine = FakeEngine(script, block_words=4)
    toolbox = FakeToolbox({"end_call": {"ok": True}, "transfer_to_human": {"ok": True}})
    services = Services(asr, tts, engine, toolbox, system_prompt=None, ready=True)
    app = create_app(Settings(max_sessions=2), services)
    with serve(app) as host:
        yield host, app, engine
    services.shutdown()


# --- a call ---------------------------------------------------------------------------------------------------


def test_call_answers_marks_what_was_heard_and_clears_on_barge_in(phone, speech, monkeypatch):
    host, app, engine = phone
    asr, tts = speech
    question = speak_8k(tts, "What time do you open tomorrow?")
    interruption = speak_8k(tts, "Sorry, one more question.")
    speech_starts: list[float] = []   # perf_counter when the server's turn detector declared speech_start
    original = Session._on_speech_start

    async def record_speech_start(self, event):
        speech_starts.append(time.perf_counter())
        await original(self, event)

    monkeypatch.setattr(Session, "_on_speech_start", record_speech_start)
    engine.calls.clear()
    ignored_before = dict(telephony_stats(app).ignored)

    async def call() -> tuple[TwilioSimulator, list[np.ndarray]]:
        async with connect(f"ws://{host}/telephony/twilio") as ws:
            sim = TwilioSimulator(ws)
            await sim.start()
            # junk a flaky integration might deliver mid-call: each is ignored and counted, the call goes on
            await sim.send("this is not JSON")
            await sim.send({"event": "bogus", "streamSid": sim.stream_sid})
            await sim.send({"event": "media", "streamSid": sim.stream_sid, "media": {"payload": "%%not base64%%"}})
            sim.say(question)
            await wait_until(lambda: sim.echoed, 30, "the first reply chunk to be played (its mark echoed)")
            sim.say(interruption)   # the caller talks over the rest of the reply
            await wait_until(lambda: sim.events("clear"), 10, "clear after the barge-in")
            first_reply = list(sim.heard)
            await wait_until(lambda: len(engine.calls) >= 2, 20, "the interruption's turn")
            marks_after_clear = lambda: [n for t, n in sim.echoed if t > sim.events("clear")[0][0]]  # noqa: E731
            await wait_until(marks_after_clear, 20, "the second reply to be played")
            await sim.finish()
            return sim, first_reply

    sim, first_reply = asyncio.run(call())

    # the question went in as 8 kHz mu-law and came out of the ASR
    assert "open" in last_user(engine.calls[0]).lower()
    # media frames: 20 ms of mu-law at 8 kHz each, and the reply is speech, not silence
    for _, message in sim.events("media"):
        assert len(base64.b64decode(message["media"]["payload"])) == twilio.TWILIO_FRAME_SAMPLES
    assert voiced_seconds(first_reply) > 1.0
    heard_16k = resample(np.concatenate(first_reply), twilio.TWILIO_RATE_HZ, SAMPLE_RATE_HZ)
    assert "open at" in asr.transcribe(heard_16k).lower()
    # marks: one per reply chunk, named by chunk id; barge-in clear within 100 ms of the server's speech_start
    assert sim.events("mark") and all(m["mark"]["name"].isdigit() for _, m in sim.events("mark"))
    t_clear = sim.events("clear")[0][0]
    t_start = max(t for t in speech_starts if t <= t_clear)
    assert t_clear - t_start < 0.100, f"clear came {1000 * (t_clear - t_start):.0f} ms after speech_start"
    # only what the caller heard (chunks whose marks came back before the clear) stays in the history
    kept = [m["content"] for m in engine.calls[1] if m["role"] == "assistant"][-1]
    played = len([name for t, name in sim.echoed if t < t_clear])   # one chunk per sentence of REPLY_HOURS
    sentences = [s if s.endswith(".") else s + "." for s in REPLY_HOURS.split(". ")]
    # (a mark echoed in the same millisecond as the server's barge-in may miss it: then one chunk less)
    heard = {" ".join(sentences[:played]), " ".join(sentences[:played - 1])}
    assert played < len(sentences) and kept in heard, (kept, played)
    # the junk was counted, the call ended cleanly, nothing leaked
    ignored = {k: v - ignored_before.get(k, 0) for k, v in telephony_stats(app).ignored.items()}
    assert ignored.get("non_json") == 1 and ignored.get("unknown_event") == 1 and ignored.get("bad_payload") == 1
    assert sim.close_code == 1000
    assert not app.state.calls


def test_partial_transcripts_run_only_where_an_event_hook_would_show_them(phone, speech, monkeypatch):
    """Each partial transcript is a Whisper run: on a phone call nobody sees them but an integrator's hook."""
    host, app, engine = phone
    _, tts = speech
    pool, runs, events = app.state.services.partial_pool, [], []
    submit = pool.submit
    monkeypatch.setattr(pool, "submit", lambda fn, *args: (runs.append(fn), submit(fn, *args))[1])
    question = speak_8k(tts, "Hello, I would like to know what time you open on Saturday morning.")

    async def call():
        engine.calls.clear()
        async with connect(f"ws://{host}/telephony/twilio") as ws:
            sim = TwilioSimulator(ws)
            await sim.start()
            sim.say(question)
            # the turn on the whole question (a draft may start at the comma's pause, a lone caller's from 100 ms)
            await wait_until(lambda: any("saturday" in last_user(c).lower() for c in engine.calls), 30, "the turn")
            await sim.finish()

    async def hook(info, event):
        events.append(event)

    asyncio.run(call())
    assert runs == []
    set_call_event_hook(app, hook)
    try:
        asyncio.run(call())
    finally:
        set_call_event_hook(app, None)
    assert runs and any(e["type"] == "transcript" and not e["final"] for e in events), events


def test_transfer_reaches_the_integrator_and_end_call_hangs_up_once_the_goodbye_was_heard(phone, speech):
    host, app, engine = phone
    _, tts = speech
    events: list[dict] = []
    times: list[float] = []     # perf_counter of each event

    async def hook(info, event):
        assert info.call_sid == "CAsim" and info.custom_parameters == {"caller": "test"}
        events.append(event)
        times.append(time.perf_counter())

    set_call_event_hook(app, hook)

    async def call() -> TwilioSimulator:
        async with connect(f"ws://{host}/telephony/twilio") as ws:
            sim = TwilioSimulator(ws)
            await sim.start()
            sim.say(speak_8k(tts, "Can I talk to a human, please?"))
            await wait_until(lambda: {"type": "control", "action": "transfer_to_human"} in events, 40, "the transfer")
            assert sim.close_code is None          # a transfer is the integrator's move: the call stays up
            sim.say(speak_8k(tts, "Never mind. Thanks, that is all. Goodbye."))
            await wait_until(lambda: sim.close_code is not None, 40, "the agent to hang up")
            return sim

    try:
        sim = asyncio.run(call())
    finally:
        set_call_event_hook(app, None)
    assert sim.close_code == 1000
    sent = [m["mark"]["name"] for _, m in sim.events("mark")]
    assert sent and [name for _, name in sim.echoed] == sent     # every reply chunk was played ...
    assert 0 <= sim.closed_at - sim.echoed[-1][0] < 1.0          # ... and the hang-up followed the goodbye's mark
    t_transfer = times[events.index({"type": "control", "action": "transfer_to_human"})]
    goodbye = [chunk for t, chunk in sim.heard_at if t > t_transfer]
    assert voiced_seconds(goodbye) > 0.8
    kinds = [e["type"] for e in events]
    assert kinds[0] == "call" and kinds[-1] == "call" and kinds.count("control") == 2
    assert [e["name"] for e in events if e["type"] == "tool"] == ["transfer_to_human", "end_call"]
    assert not app.state.calls


def test_a_transfer_ends_the_stream_once_heard_and_twilio_is_told_to_dial_the_staff(phone, speech):
    """With PARLEY_TRANSFER_TO, the agent's announcement is played, the stream then ends, and the <Connect>
    action Twilio asks next dials the number; the same server hangs up a call that ends any other way."""
    _, shared, _ = phone
    _, tts = speech
    app = create_app(Settings(max_sessions=2, transfer_to="+1 (555) 010-0199"), shared.state.services)
    with serve(app) as host:
        twiml = httpx.post(f"http://{host}/telephony/twilio/voice", data={"CallSid": "CAsim"}).text
        assert f'<Connect action="https://{host}/telephony/twilio/after">' in twiml

        async def call() -> TwilioSimulator:
            async with connect(f"ws://{host}/telephony/twilio") as ws:
                sim = TwilioSimulator(ws)
                await sim.start()
                sim.say(speak_8k(tts, "Can I talk to a human, please?"))
                await wait_until(lambda: sim.close_code is not None, 40, "the stream to end for the transfer")
                return sim

        sim = asyncio.run(call())
        assert sim.close_code == 1000
        sent = [m["mark"]["name"] for _, m in sim.events("mark")]
        assert sent and [name for _, name in sim.echoed] == sent     # the announcement was heard whole ...
        assert 0 <= sim.closed_at - sim.echoed[-1][0] < 1.0          # ... and the stream ended right after it
        assert voiced_seconds([chunk for _, chunk in sim.heard_at]) > 0.8
        after = f"http://{host}/telephony/twilio/after"
        assert httpx.post(after, data={"CallSid": "CAsim"}).text.endswith(
            "<Response><Dial>+15550100199</Dial></Response>")
        assert httpx.post(after, data={"CallSid": "CAsim"}).text.endswith("<Response><Hangup/></Response>")
        assert not app.state.calls


def test_callers_who_hang_up_at_any_moment_leave_no_session_behind(phone, speech):
    # Hang-ups at every stage of a turn: while speaking, while the agent thinks, mid-reply, and after a goodbye
    # whose marks never come back (the phone went away), so the agent is still waiting to hang up itself. Each
    # call must close its socket and leave the session count; with the 2-session cap, one leak shows at once.
    host, app, _ = phone
    _, tts = speech
    hours, goodbye = speak_8k(tts, "What time do you open?"), speak_8k(tts, "That is all, goodbye.")

    async def call(words, plays: bool, hang_up_after_s: float):
        async with connect(f"ws://{host}/telephony/twilio") as ws:
            sim = TwilioSimulator(ws, plays=plays)
            await sim.start()
            sim.say(words)
            await asyncio.sleep(len(words) / twilio.TWILIO_RATE_HZ + hang_up_after_s)
            await sim.finish()          # `stop`, then the server must close the socket within 10 s
            return sim

    async def churn():
        for after_s in (0.0, 0.5, 1.0, 1.5, 2.5):
            sims = await asyncio.gather(call(hours, True, after_s), call(goodbye, False, after_s))
            assert all(sim.close_code == 1000 for sim in sims), [sim.close_code for sim in sims]
            await wait_until(lambda: not app.state.calls, 2, "every call to be closed")

    tasks = asyncio.run(healthz(host))["process"]["tasks"]
    asyncio.run(churn())
    health = asyncio.run(healthz(host))
    assert health["sessions"] == 0
    assert health["process"]["tasks"] == tasks, "a call left a task running on the server's event loop"


def test_a_fault_in_one_calls_model_ends_that_call_and_the_other_goes_on(speech):
    asr, tts = speech

    def faulty(messages):
        if "open" in last_user(messages).lower():
            raise RuntimeError("injected fault")
        return script(messages)

    services = Services(asr, tts, FakeEngine(faulty), FakeToolbox({"transfer_to_human": {"ok": True}}),
                        system_prompt=None, ready=True)
    app = create_app(Settings(max_sessions=2), services)
    events: dict[str, list[dict]] = {"MZfaulty": [], "MZfine": []}

    async def hook(info, event):
        events[info.stream_sid].append(event)

    set_call_event_hook(app, hook)

    async def calls(host):
        async with connect(f"ws://{host}/telephony/twilio") as a, connect(f"ws://{host}/telephony/twilio") as b:
            faulty_call, fine_call = TwilioSimulator(a, "MZfaulty"), TwilioSimulator(b, "MZfine")
            await faulty_call.start()
            await fine_call.start()
            faulty_call.say(speak_8k(tts, "What time do you open?"))
            fine_call.say(speak_8k(tts, "Can I talk to a human, please?"))
            await wait_until(lambda: faulty_call.close_code is not None, 30, "the faulty call to end")
            await wait_until(lambda: {"type": "control", "action": "transfer_to_human"} in events["MZfine"], 30,
                             "the other call's transfer")
            assert fine_call.close_code is None and len(app.state.calls) == 1
            await fine_call.finish()
            return faulty_call, fine_call

    with serve(app) as host:
        faulty_call, fine_call = asyncio.run(calls(host))
        exposed = httpx.get(f"http://{host}/metrics").text
    services.shutdown()
    assert sample(exposed, "parley_sessions_total", transport="twilio") == 2
    assert sample(exposed, "parley_sessions_failed_total", transport="twilio") == 1
    assert sample(exposed, "parley_errors_total", kind="turn") == 1
    assert sample(exposed, "parley_sessions_active", transport="twilio") == 0
    assert faulty_call.close_code == 1011
    errors = [e["message"] for e in events["MZfaulty"] if e["type"] == "error"]
    assert errors == ["turn failed: injected fault"], events["MZfaulty"]
    assert not any(e["type"] == "error" for e in events["MZfine"]) and fine_call.close_code == 1000
    assert not app.state.calls


async def healthz(host: str) -> dict:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"http://{host}/healthz")).json()


def test_the_load_generator_times_every_turn_from_the_callers_side(phone, speech):
    from app.loadtest import capacity, churn, faint_ending_ms, percentile, run_level, table

    host, app, _ = phone
    _, tts = speech
    questions = [speak_8k(tts, "What time do you open?"), speak_8k(tts, "Is there anything else?")]
    row = asyncio.run(run_level(f"http://{host}", 2, questions, turns=2, timeout_s=30))
    assert row["turns"] == row["answered"] == 4 and not row["refused"] and not row["dropped"] and not row["not_closed"]
    # the caller waits at least the server's end-of-turn silence, and far less than the timeout
    assert 600 <= row["p50"] <= row["p95"] < 10_000, row
    # timed from the words' end, the faint ending of the last word counts as said
    assert row["p50_end"] <= row["p50"]
    assert faint_ending_ms(speak_8k(tts, "What's your address?"), 8000) >= 100   # its "s", quiet over the line
    tone = (3000 * np.sin(np.arange(8000) / 3)).astype(np.int16)
    faded = np.concatenate([tone[:1600], tone[:800] // 15, np.zeros(1600, np.int16)])   # 200 ms, 100 ms at -24 dB
    assert faint_ending_ms(faded, 8000) == 100.0 and faint_ending_ms(tone[:1600], 8000) == 0.0
    assert row["rss_mb"] > 0 and row["fds"] > 0 and row["threads"] > 0 and row["tasks"] > 0
    assert row["sessions_after"] == 0
    assert "| twilio | 2 | 0 | 4 | 4 |" in table([row])
    assert capacity([row]) == (2 if row["p95"] <= 1500 else 0)
    assert capacity([dict(row, answered=3)]) == 0 and capacity([dict(row, refused=1)]) == 0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0 and percentile([1.0, 2.0, 3.0, 4.0], 0.95) == 4.0
    report = asyncio.run(churn(f"http://{host}", questions[1], cycles=4, parallel=2))
    assert "not closed by the server: 0; sessions left: 0" in report and "(half way)" in report, report
    assert re.search(r"event-loop tasks (\d+) -> \1$", report), report
