"""The end-of-turn decision: the policy, the model's judgement of the words so far, and a spoken pause mid-sentence
through the whole pipeline (real Whisper and Piper), with the language model's judgement and without it."""
import asyncio
import dataclasses
import os
import threading

import numpy as np
import pytest

from app.pipeline.services import Services
from app.pipeline.session import SessionOptions
from app.transports.file import talk
from speech import endpoint_set
from speech.audio import FRAME_SAMPLES, SAMPLE_RATE_HZ
from speech.endpoint import EndpointPolicy
from speech.vad import SpeechEnd, TurnDetector, VadConfig
from tests.fakes import FakeEngine, FakeToolbox, last_user
from tests.integration.test_session import trim

HEAD, TAIL = "I would like to book a haircut", "on Friday afternoon please."


def test_the_policy_waits_by_the_judgement():
    policy = EndpointPolicy(check_ms=200, complete_at=0.5, unfinished_below=0.005, silence_ms=600, max_silence_ms=1500)
    assert policy.wait_ms(0.9) == 200          # complete: ends at once
    assert policy.wait_ms(0.1) == 600          # unsure: the plain VAD's wait
    assert policy.wait_ms(0.0001) == 1500      # cannot end there: the caller gets time to go on


def test_a_turn_ends_now_when_told(speak):
    detector = TurnDetector(VadConfig(silence_ms=1500))
    words = trim(speak("Hello there."))
    for i in range(0, len(words) - FRAME_SAMPLES, FRAME_SAMPLES):
        detector.push(words[i:i + FRAME_SAMPLES])
    for _ in range(10):
        assert detector.push(np.zeros(FRAME_SAMPLES, np.int16)) == []
    end = detector.end_now()
    assert isinstance(end, SpeechEnd) and 200 <= end.time_ms - end.last_voiced_ms < 300   # the silence so far
    assert end.time_ms == detector.time_ms and len(end.audio) > len(words) // 2
    assert not detector.in_speech and detector.end_now() is None


def _longest_gap_ms(audio: np.ndarray, level: int = 300) -> float:
    loud = np.flatnonzero(np.abs(audio) > level)
    return float(np.diff(loud).max()) * 1000 / SAMPLE_RATE_HZ if len(loud) > 1 else 0.0


@pytest.mark.skipif(not endpoint_set.espeak_available() and not os.environ.get("CI"),
                    reason="espeak-ng is not installed (apt-get install espeak-ng; .ci/run does)")
def test_the_endpoint_set_is_labeled_turns_in_several_voices_and_noise(synthesizer):
    cases = endpoint_set.build(synthesizer, voices=("en-us",))
    texts = len(endpoint_set.COMPLETE) + len(endpoint_set.PAUSED)
    assert len(cases) == 2 * texts * len(endpoint_set.SNRS_DB)
    assert {c.voice for c in cases} == {"piper", "en-us"} and {c.snr_db for c in cases} == {None, 20, 10}
    clean = [c for c in cases if c.snr_db is None]
    for case in clean:
        gap = _longest_gap_ms(case.audio[: int(case.end_ms * SAMPLE_RATE_HZ / 1000)])
        if case.pause_ms is None:
            assert gap < 300, (case.text, case.voice, gap)               # no pause inside a complete turn
        else:
            assert gap >= case.pause_ms - 100, (case.text, case.voice, case.pause_ms, gap)   # the pause is there
    noisy = next(c for c in cases if c.snr_db == 10)
    assert np.abs(noisy.audio[:1000]).mean() > 50                     # noise under the leading silence too


@pytest.mark.slow
def test_the_model_hears_whether_a_sentence_can_end_there(brain):
    """The pretrained base's reading, not the adapted model's: the adapter read "What's your address" as a sentence
    that goes on (0.004), so a finished question waited 1.5 s."""
    complete = [brain.end_of_turn_probability(t) for t in
                ("Do you have anything open tomorrow morning?", "Thanks, that's all I needed.", "What's your address?")]
    unfinished = [brain.end_of_turn_probability(t) for t in
                  ("I'd like to book a", "Can I get an appointment on", "The best number to reach me is.")]
    policy = EndpointPolicy()
    assert min(complete) >= policy.complete_at and max(unfinished) < policy.unfinished_below, (complete, unfinished)


class JudgingEngine(FakeEngine):
    """A left-to-right model double whose end-of-turn judgement is that the sentence is over once it names a
    day (this test's sentence does at its end)."""

    left_to_right = True

    def end_of_turn_probability(self, text):
        self.judged.append(text)
        return 0.9 if "friday" in text.lower() else 0.0001


def _paused_turn(speak, pause_ms: int) -> np.ndarray:
    pause = np.zeros(SAMPLE_RATE_HZ * pause_ms // 1000, np.int16)
    return np.concatenate([trim(speak(HEAD)), pause, trim(speak(TAIL))])


def _services(transcriber, synthesizer, engine) -> Services:
    return Services(transcriber, synthesizer, engine, FakeToolbox(), "Front desk.")


def _finals(events, kind: str) -> list[str]:
    return [e["text"] for e in events if e["type"] == kind and e.get("final")]


def test_an_unfinished_turn_waits_through_its_pause_and_a_finished_one_ends_at_once(transcriber, synthesizer, speak):
    engine = JudgingEngine(lambda m: f"You said: {last_user(m)}")
    engine.judged = []
    events, session, _ = asyncio.run(talk(_services(transcriber, synthesizer, engine), _paused_turn(speak, 900),
                                          options=SessionOptions(realtime=False)))
    transcripts = _finals(events, "transcript")
    assert len(transcripts) == 1, transcripts                       # one turn: the 900 ms pause did not end it
    assert "haircut" in transcripts[0].lower() and "friday" in transcripts[0].lower()
    assert any("friday" not in t.lower() for t in engine.judged)   # the pause was judged, and waited through
    metrics = session.turns[0].metrics()
    assert metrics["end_of_turn"] == "lm" and metrics["p_complete"] == 0.9
    assert metrics["end_of_turn_delay_ms"] < 600                    # the plain VAD would have waited 600 ms
    assert _finals(events, "reply") == [f"You said: {transcripts[0]}"]


def test_a_caller_who_goes_on_after_the_turn_ended_is_answered_once_for_all_of_it(transcriber, synthesizer, speak):
    # the plain VAD ends the turn 600 ms into the pause, its words are transcribed, and the caller goes on before
    # any reply is heard. NOTE: with a 900 ms pause, a loaded 2-core machine took more than the 300 ms left to
    # transcribe the first half (2 runs of 3 that night): the caller went on first, and the turn was one from the
    # start (right too, but not what this test is about)
    engine = FakeEngine(lambda m: f"You said: {last_user(m)}", block_delay_s=1.5)   # no reply before they go on
    services = _services(transcriber, synthesizer, engine)
    options = dataclasses.replace(SessionOptions(realtime=True), end_of_turn=None)
    events, session, _ = asyncio.run(talk(services, _paused_turn(speak, 1400), realtime=True, options=options))
    transcripts = _finals(events, "transcript")
    assert len(transcripts) == 2 and "friday" not in transcripts[0].lower(), transcripts
    assert "haircut" in transcripts[1].lower() and "friday" in transcripts[1].lower()   # the whole turn, again
    assert _finals(events, "reply") == [f"You said: {transcripts[1]}"]
    users = [m["content"] for m in session.agent.messages if m["role"] == "user"]
    assert users == [transcripts[1]]                                 # the cut-off half left the history


def test_a_lone_callers_turn_is_judged_beside_its_first_phrase_and_a_busy_servers_first(transcriber, synthesizer,
                                                                                          speak):
    # alone, the judgement waits for the draft's first phrase (the reply could not start before its audio); while
    # another call's generation runs, it comes first, so that the decision adopts the draft (app.pipeline.lanes)
    engine = JudgingEngine(lambda m: "Friday works. We have three openings that afternoon.")
    engine.judged = []
    generated_before = []
    judge = engine.end_of_turn_probability

    def spy(text):
        generated_before.append(len(engine.calls))
        return judge(text)

    engine.end_of_turn_probability = spy
    services, turn = _services(transcriber, synthesizer, engine), trim(speak(f"{HEAD} {TAIL}"))
    options = SessionOptions(realtime=True)
    events, session, _ = asyncio.run(talk(services, turn, realtime=True, options=options))
    alone = list(generated_before)
    assert session.turns[0].metrics()["p_complete"] == 0.9 and alone[-1] == 1, alone   # after the draft's generation
    engine.calls.clear()
    generated_before.clear()
    busy = threading.Event()
    services.llm_lanes.submit(busy.wait)   # another caller's generation, running
    try:
        events, session, _ = asyncio.run(talk(services, turn, realtime=True, options=options))
    finally:
        busy.set()
    assert session.turns[0].metrics()["p_complete"] == 0.9 and generated_before[-1] == 0, generated_before
    assert _finals(events, "reply") == ["Friday works. We have three openings that afternoon."]


class _HeardTwice:
    """The bundled Whisper, its words without the prompt marked ("unprompted: ..."), or none at all (`plain_heard`
    False), and every transcription the session asks of it recorded (prompted or not)."""

    def __init__(self, asr, plain_heard: bool = True):
        self.asr, self.plain_heard, self.asked = asr, plain_heard, []

    def transcribe(self, audio, prompted: bool = True) -> str:
        self.asked.append(prompted)
        text = self.asr.transcribe(audio)
        return text if prompted else f"unprompted: {text}" if self.plain_heard else ""

    def __getattr__(self, name):   # the recognizer's options, warm_up, ...
        return getattr(self.asr, name)


@pytest.mark.parametrize("plain_heard, busy", [(True, False), (False, False), (True, True)])
def test_the_judgement_reads_the_words_heard_without_the_prompt_and_the_reply_the_transcript(
        transcriber, synthesizer, speak, plain_heard, busy):
    # The business's words as Whisper's prompt make it finish what the caller left unfinished (speech.bench
    # endpoint: 25.9% of paused turns cut off judged on those words, 19.4% on the words heard without them); where
    # Whisper hears nothing without the prompt, the judgement reads the transcript, and so it does while another
    # call's generation runs (the second decode's CPU goes to the turns)
    engine = JudgingEngine(lambda m: f"You said: {last_user(m)}")
    engine.judged = []
    asr = _HeardTwice(transcriber, plain_heard)
    services, turn, other = _services(asr, synthesizer, engine), trim(speak(f"{HEAD} {TAIL}")), threading.Event()
    if busy:
        services.llm_lanes.submit(other.wait)   # another caller's generation, running
    try:
        events, session, _ = asyncio.run(talk(services, turn, realtime=True, options=SessionOptions(realtime=True)))
    finally:
        other.set()
    transcripts = _finals(events, "transcript")
    assert len(transcripts) == 1 and _finals(events, "reply") == [f"You said: {transcripts[0]}"]
    unprompted = plain_heard and not busy
    assert engine.judged == [f"unprompted: {transcripts[0]}" if unprompted else transcripts[0]]
    assert session.turns[0].metrics()["p_complete"] == 0.9 and (False in asr.asked) == (not busy)
