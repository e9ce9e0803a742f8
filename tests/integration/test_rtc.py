"""The WebRTC transport end to end: an aiortc client speaks a Piper question to a live server and hears the answer."""
import asyncio
import json
import re
import time

import httpx
import numpy as np
import pytest
from av import AudioFrame

from app.loadtest.webrtc_caller import Client, ScriptedMicrophone
from app.pipeline.playback import Playback
from app.server.app import create_app
from app.settings import Settings
from app.transports.webrtc import RTC_FRAME_SAMPLES, RTC_RATE_HZ, InputResampler, PlaybackTrack
from speech.audio import resample
from tests.prom import sample
from tests.rtc_helpers import ANSWER, QUESTION, QUESTION_WORDS, front_desk_services, serve_in_thread, spoken_question
from speech.wer import word_error_rate

AUDIBLE_RMS = 300.0          # int16 RMS of a 20 ms frame that holds speech (silence decodes to ~0)
BARGE_IN_BOUND_S = 0.6       # VAD start (100 ms) + jitter buffers both ways, with room for a loaded CI machine
QUIET_AFTER_S = 1.0          # longer than any pause inside a reply, shorter than the wait for the next one


@pytest.fixture(scope="module")
def models(transcriber, synthesizer):
    return transcriber, synthesizer  # the session's voice, unvaried: the question sounds the same every run


@pytest.fixture(scope="module")
def server(models):
    services = front_desk_services(*models)
    app = create_app(Settings(max_sessions=2, connect_timeout_s=10.0), services)
    with serve_in_thread(app) as url:
        yield url, app
    services.shutdown()


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


def test_spoken_question_gets_transcript_reply_metrics_and_audio(server, models):
    url, app = server
    question = spoken_question(models[1], RTC_RATE_HZ)

    async def call() -> tuple[Client, dict]:
        client = Client(ScriptedMicrophone(question))
        await client.connect(url)
        await client.wait_for(lambda: any(e["type"] == "metrics" for e in client.events), "the metrics event")
        await client.wait_for(lambda: client.loudest() > AUDIBLE_RMS, "the reply's audio")
        async with httpx.AsyncClient() as http:
            health = (await http.get(f"{url}/healthz")).json()
            health["metrics"] = (await http.get(f"{url}/metrics")).text
        client.channel.send(json.dumps({"type": "dance"}))
        await client.wait_for(lambda: any(e["type"] == "error" for e in client.events), "the unknown-message error")
        client.channel.send(json.dumps({"type": "hangup"}))
        await client.wait_for(lambda: not app.state.calls, "the server to close the call", timeout_s=10)
        await client.pc.close()
        return client, health

    client, health = asyncio.run(call())
    by_type = {}
    for event in client.events:
        by_type.setdefault(event["type"], []).append(event)
    finals = [e["text"] for e in by_type["transcript"] if e["final"]]
    assert len(finals) == 1 and set(QUESTION_WORDS) <= words(finals[0]), finals
    assert word_error_rate(QUESTION, finals[0]) <= 0.3, finals
    assert by_type["tool"][0]["name"] == "business_info" and by_type["tool"][0]["result"]["ok"] is True
    assert [e["text"] for e in by_type["reply"] if e["final"]] == [ANSWER]
    metrics = by_type["metrics"][0]
    for key in ("end_of_turn_delay_ms", "asr_ms", "llm_ttft_ms", "tts_ttfb_ms", "send_ms", "e2e_latency_ms"):
        assert metrics[key] >= 0, (key, metrics)
    assert "hangup" in by_type["error"][0]["message"]
    lag = health["loop_lag_ms"]
    print(f"\nturn metrics (ms): {metrics}\nevent loop lag over the turn (ms): {lag}")
    assert health["sessions"] == 1 and health["ready"] is True
    exposed = health["metrics"]   # /metrics during the call: this turn, this session
    assert sample(exposed, "parley_sessions_active", transport="webrtc") == 1
    assert sample(exposed, "parley_e2e_latency_seconds_count", transport="webrtc") >= 1
    total_s = sample(exposed, "parley_e2e_latency_seconds_sum", transport="webrtc")
    assert total_s >= metrics["e2e_latency_ms"] / 1000 - 1e-6
    # Model work runs in executors: the loop keeps waking on time while the turn runs.
    assert lag["samples"] > 100 and lag["p99"] < 100, lag


def test_barge_in_silences_the_agent_at_once(server, models):
    url, app = server
    tts = models[1]
    interruption = resample(tts.synthesize("Sorry, one moment please."), tts.sample_rate_hz, RTC_RATE_HZ)

    async def call() -> tuple[Client, float]:
        microphone = ScriptedMicrophone(spoken_question(tts, RTC_RATE_HZ))
        client = Client(microphone)
        await client.connect(url)
        await client.wait_for(lambda: client.loudest() > AUDIBLE_RMS, "the reply's audio")
        await asyncio.sleep(0.5)          # well inside the ~4 s reply
        barge_in_s = time.perf_counter()
        microphone.say(interruption)
        await asyncio.sleep(BARGE_IN_BOUND_S + QUIET_AFTER_S + 0.2)
        await client.pc.close()
        await client.wait_for(lambda: not app.state.calls, "the server to close the call", timeout_s=10)
        return client, barge_in_s

    client, barge_in_s = asyncio.run(call())
    after = [(t - barge_in_s, rms) for t, rms in client.heard if t >= barge_in_s]
    quiet_at_s = next(t for t, _ in after
                      if all(rms < AUDIBLE_RMS for u, rms in after if t <= u <= t + QUIET_AFTER_S))
    print(f"\nbarge-in: the agent went quiet {quiet_at_s * 1000:.0f} ms after the user started speaking")
    assert quiet_at_s < BARGE_IN_BOUND_S
    assert any(rms > AUDIBLE_RMS for t, rms in after if t < quiet_at_s) or quiet_at_s < 0.1  # it was talking


class FallsSilent(ScriptedMicrophone):
    """A microphone that stops sending packets once its words are said: a tab closed without hanging up, or a
    track muted at the source. No RTP comes after the last word, not even silence."""

    async def recv(self) -> AudioFrame:
        if not len(self._pending):
            await asyncio.Event().wait()   # forever: aiortc sends nothing more
        return await super().recv()


def test_a_peer_that_stops_sending_gets_its_turn_answered_then_is_hung_up_on(server, models):
    url, app = server
    question = spoken_question(models[1], RTC_RATE_HZ, tail_s=0.0)   # not one packet after the last word

    async def call() -> tuple[Client, float, float]:
        client = Client(FallsSilent(question))
        await client.connect(url)
        spoken_s = time.monotonic() + len(question) / RTC_RATE_HZ
        await client.wait_for(lambda: any(e["type"] == "reply" and e["final"] for e in client.events), "the reply")
        answered_s = time.monotonic()
        await client.wait_for(lambda: not app.state.calls, "the server to hang up", timeout_s=15)
        hung_up_s = time.monotonic()
        await client.pc.close()
        return client, answered_s - spoken_s, hung_up_s - spoken_s

    client, answered_s, hung_up_s = asyncio.run(call())
    finals = [e["text"] for e in client.events if e["type"] == "transcript" and e["final"]]
    assert len(finals) == 1 and set(QUESTION_WORDS) <= words(finals[0]), finals
    print(f"\nno packets after the question: answered {answered_s:.1f} s, hung up {hung_up_s:.1f} s after it")
    assert hung_up_s <= 10.0


def test_input_resampler_turns_48k_stereo_frames_into_16k_mono():
    t = np.arange(RTC_RATE_HZ) / RTC_RATE_HZ                       # 1 s
    left = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    stereo = np.stack([left, left], axis=1)                        # (n, 2)
    resample = InputResampler()
    out = []
    for start in range(0, len(left), RTC_FRAME_SAMPLES):
        frame = AudioFrame.from_ndarray(stereo[start:start + RTC_FRAME_SAMPLES].reshape(1, -1), format="s16", layout="stereo")
        frame.sample_rate = RTC_RATE_HZ
        out.append(resample(frame))
    mono16k = np.concatenate(out)
    assert mono16k.dtype == np.int16
    assert 16_000 - 320 <= len(mono16k) <= 16_000                 # the resampler holds back under one 20 ms frame
    spectrum = np.abs(np.fft.rfft(mono16k[2000:14000].astype(np.float64)))
    peak_hz = np.argmax(spectrum) * 16_000 / 12_000
    assert abs(peak_hz - 440) < 3, peak_hz
    assert 0.6 * 8000 < np.abs(mono16k[2000:14000]).max() < 1.1 * 8000


def test_playback_track_is_paced_at_real_time_and_plays_queued_speech_then_silence():
    playback = Playback(RTC_RATE_HZ)
    speech = np.full(RTC_FRAME_SAMPLES * 3 // 2, 1000, dtype=np.int16)   # 1.5 frames
    playback.enqueue(speech, "hello")
    track = PlaybackTrack(playback)

    async def pull(n: int):
        t0 = time.monotonic()
        frames = [await track.recv() for _ in range(n)]
        return frames, time.monotonic() - t0

    frames, elapsed_s = asyncio.run(pull(11))
    samples = [f.to_ndarray().reshape(-1) for f in frames]
    assert all(f.sample_rate == RTC_RATE_HZ and len(s) == RTC_FRAME_SAMPLES for f, s in zip(frames, samples))
    assert [f.pts for f in frames] == [i * RTC_FRAME_SAMPLES for i in range(11)]
    assert (samples[0] == 1000).all() and (samples[1][:RTC_FRAME_SAMPLES // 2] == 1000).all()
    assert not samples[1][RTC_FRAME_SAMPLES // 2:].any() and not any(s.any() for s in samples[2:])
    assert 0.19 <= elapsed_s < 0.4, elapsed_s                      # 10 frame periods after the first


def test_the_load_generator_drives_browser_callers_too(server, models):
    from app.loadtest import run_level

    url, app = server
    question = spoken_question(models[1], RTC_RATE_HZ, lead_s=0.3, tail_s=0.0)
    row = asyncio.run(run_level(url, 1, [question], turns=2, timeout_s=30, transport="webrtc"))
    assert row["turns"] == row["answered"] == 2 and not row["dropped"], row
    assert 600 <= row["p50"] <= row["p95"] < 10_000, row   # at least the end-of-turn silence
