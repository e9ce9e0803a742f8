"""Load generator: K simulated phone callers at once against a live server, timed on the caller's side.

    python -m app.loadtest [--url http://HOST:PORT] [--calls 1,2,4] [--turns 3] [--transport twilio,webrtc,realtime]
                           [--soak SECONDS] [--churn 0] [--llm-model DIR]

Each caller is Twilio's half of a Media Stream over the real WebSocket (app.loadtest.twilio_caller): it speaks questions in
the bundled Piper voice at real-time pace, plays the reply back at real-time pace and echoes its marks. With
--transport webrtc each is an aiortc peer that posts its offer to /offer, as the page does (app.loadtest.webrtc_caller); with
realtime, a client of OpenAI's Realtime API with server VAD (app.loadtest.realtime_caller). Several transports (comma-separated)
run one after the other, each level in turn, so their figures come from the same run. A turn's
voice-to-voice latency is the time from the last voiced 20 ms frame the caller sent to the first voiced frame of
the reply it heard: what a caller waits, network and pacing included. Louder than near-silence, that frame misses
a last word's faint ending (the "s" of "address"), which the caller still says: the p50 from the words' end counts
from the question's last frame within 40 dB of its loudest (`faint_ending_ms`). A turn with no reply within
--timeout is unanswered; a call the server closed before the caller hung up is dropped.

Without --url it starts `parley serve` on a free port (the default models, a throwaway appointments file) and
stops it at the end. The server's RSS, open files, threads, event-loop tasks and lag come from its /healthz. The
capacity is the most callers whose p95 was at most 1.5 s with every turn answered. --churn N adds N short calls
(connect, speak, hang up at a random moment) and prints the server's figures before and after them.
"""
import argparse
import asyncio
import itertools
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

import httpx
import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from app.loadtest.realtime_caller import RATE_HZ as REALTIME_RATE_HZ
from app.loadtest.realtime_caller import RealtimeClient
from app.loadtest.twilio_caller import (VOICED_RMS, TwilioSimulator, frame_levels, is_voiced, speak_8k,
                                        wait_until)
from app.loadtest.webrtc_caller import Client, Refused, ScriptedMicrophone
from app.transports.webrtc import RTC_RATE_HZ
from speech.audio import resample
from speech.tts import Synthesizer

QUESTIONS = (
    "Hi, what time do you open on Saturday?",
    "How much is a haircut?",
    "What's your address?",
    "Do you have anything free on Friday afternoon?",
    "What services do you offer?",
    "What's your phone number?",
)
CAPACITY_P95_MS = 1500.0
SPEECH_RANGE_DB = 40.0   # a question's frames within this of its loudest are its words (faint_ending_ms)
RATES_HZ = {"twilio": 8_000, "webrtc": RTC_RATE_HZ, "realtime": REALTIME_RATE_HZ}
QUIET_S = 1.5          # a reply is over when nothing voiced was heard for this long


@dataclass
class CallResult:
    latencies_ms: list[float] = field(default_factory=list)   # one per answered turn
    asked: list[int] = field(default_factory=list)            # the question (index) of each answered turn
    unanswered: int = 0
    dropped: bool = False        # the server closed the call before the caller hung up
    not_closed: bool = False     # the caller hung up and the server never closed the socket
    refused: bool = False        # the server turned the call away (503) before it began


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by the nearest-rank method; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(np.ceil(q * len(ordered))) - 1))]


@dataclass
class _Line:
    """A caller's side of a call, whatever the transport: what the turn loop (`_ask`) needs of it."""
    say: Callable[[np.ndarray], None]   # queue audio to speak at real-time pace
    speaking: Callable[[], bool]        # some of it is not sent yet
    spoken: Callable[[], list[float]]   # perf_counter times of the voiced frames sent
    heard: Callable[[], list[float]]    # perf_counter times of the voiced frames heard
    closed: Callable[[], bool]          # the server ended the call


async def _ask(line: _Line, questions: list[np.ndarray], turns: int, first: int, timeout_s: float,
               until_s: float | None, result: CallResult) -> None:
    """`turns` questions, each after the previous reply is over (with `until_s`, a time.monotonic(), as many as
    fit before then instead), timed into `result`."""
    for turn in itertools.count():
        if turn >= turns if until_s is None else time.monotonic() >= until_s:
            break
        if line.closed():
            break
        line.say(questions[(first + turn) % len(questions)])
        await wait_until(lambda: not line.speaking(), 60, "the question to be sent")
        spoken = line.spoken()
        last_voiced = spoken[-1] if spoken else time.perf_counter()
        first_heard = await _first_after(line.heard, last_voiced, timeout_s, line.closed)
        if first_heard is None:
            result.unanswered += 1
            continue
        result.latencies_ms.append((first_heard - last_voiced) * 1000)
        result.asked.append((first + turn) % len(questions))
        await _quiet(line.heard, 60, line.closed)
    result.dropped = line.closed()


async def one_call(ws_url: str, questions: list[np.ndarray], turns: int, first: int, timeout_s: float,
                   until_s: float | None = None) -> CallResult:
    """A phone caller asking its questions (`_ask`) over Twilio's WebSocket (app.loadtest.twilio_caller), 8 kHz audio."""
    result = CallResult()
    async with connect(ws_url, max_size=None) as ws:
        sim = TwilioSimulator(ws, stream_sid=f"MZload{first}")
        await sim.start()
        line = _Line(say=sim.say, speaking=lambda: sim.speaking,
                     spoken=lambda: [t for t, voiced in sim.said_at if voiced],
                     heard=lambda: [t for t, chunk in sim.heard_at if is_voiced(chunk)],
                     closed=lambda: sim.close_code is not None)
        await _ask(line, questions, turns, first, timeout_s, until_s, result)
        try:
            await sim.finish()
        except asyncio.TimeoutError:
            result.not_closed = True
    return result


async def one_browser_call(url: str, questions: list[np.ndarray], turns: int, first: int, timeout_s: float,
                           until_s: float | None = None) -> CallResult:
    """one_call over WebRTC: an aiortc peer posts its offer to /offer and speaks 48 kHz audio (app.loadtest.webrtc_caller)."""
    result = CallResult()
    microphone = ScriptedMicrophone(np.zeros(0, dtype=np.int16))
    client = Client(microphone)
    await client.connect(url)
    line = _Line(say=microphone.say, speaking=lambda: microphone.speaking,
                 spoken=lambda: [t for t, voiced in microphone.said_at if voiced],
                 heard=lambda: [t for t, rms in client.heard if rms > VOICED_RMS],
                 closed=lambda: client.pc.connectionState in ("failed", "closed"))
    try:
        await _ask(line, questions, turns, first, timeout_s, until_s, result)
        client.channel.send(json.dumps({"type": "hangup"}))
        await asyncio.sleep(0.5)
    finally:
        await client.pc.close()
    return result


async def one_realtime_call(url: str, questions: list[np.ndarray], turns: int, first: int, timeout_s: float,
                            until_s: float | None = None) -> CallResult:
    """one_call over OpenAI's Realtime API (/v1/realtime, server VAD): 24 kHz pcm16 (app.loadtest.realtime_caller)."""
    result = CallResult()
    async with RealtimeClient(url) as client:
        line = _Line(say=client.say, speaking=lambda: client.speaking,
                     spoken=lambda: [t for t, voiced in client.said_at if voiced],
                     heard=lambda: [t for t, voiced in client.heard_at if voiced],
                     closed=lambda: client.closed)
        await _ask(line, questions, turns, first, timeout_s, until_s, result)
    return result


CALLERS = {"twilio": one_call, "webrtc": one_browser_call, "realtime": one_realtime_call}


async def refusable(call) -> CallResult:
    """A call's result; one the server turned away (503, the admission's answer past capacity) is refused."""
    try:
        return await call
    except InvalidStatus as exc:
        if exc.response.status_code != 503:
            raise
    except Refused:
        pass
    return CallResult(refused=True)


def faint_ending_ms(audio: np.ndarray, rate_hz: int) -> float:
    """How long a question's last word goes on, fading, after its last frame loud enough to count as voiced
    (VOICED_RMS): to its last frame within SPEECH_RANGE_DB of its loudest. NOTE: "What's your address?" ends in an
    "s" held ~120 ms at RMS ~220 over the line, which a caller says and the server's VAD hears: timed from the last
    loud frame, its turn counted ~200 ms the caller did not wait (2026-12-06)."""
    levels = frame_levels(audio, rate_hz)
    loud = np.flatnonzero(levels > VOICED_RMS)
    if not len(loud):
        return 0.0
    said = np.flatnonzero(levels > levels.max() * 10 ** (-SPEECH_RANGE_DB / 20))
    return float(max(0, said[-1] - loud[-1]) * 20)


def spoken_questions(tts, transport: str) -> list[np.ndarray]:
    """QUESTIONS in the bundled voice as the transport's caller speaks them: 8 kHz for Twilio (after 0.2 s of
    silence), 48 kHz for WebRTC, 24 kHz for the Realtime API."""
    if transport == "twilio":
        return [speak_8k(tts, q) for q in QUESTIONS]
    return [resample(tts.synthesize(q), tts.sample_rate_hz, RATES_HZ[transport]) for q in QUESTIONS]


async def _first_after(times, t0: float, timeout_s: float, closed) -> float | None:
    """The first of times() after t0, waiting up to timeout_s; None if none came (or the call closed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not closed():
        heard = next((t for t in times() if t > t0), None)
        if heard is not None:
            return heard
        await asyncio.sleep(0.01)
    return None


async def _quiet(times, timeout_s: float, closed) -> None:
    """Until QUIET_S passed since the last of times() (the reply is over)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not closed():
        heard = times()
        if heard and time.perf_counter() - heard[-1] > QUIET_S:
            return
        await asyncio.sleep(0.05)


async def churn_call(ws_url: str, words: np.ndarray, hang_up_after_s: float) -> CallResult:
    """Connect, say something, hang up `hang_up_after_s` after the words (whatever the agent is doing)."""
    result = CallResult()
    async with connect(ws_url, max_size=None) as ws:
        sim = TwilioSimulator(ws, stream_sid="MZchurn")
        await sim.start()
        sim.say(words)
        await asyncio.sleep(len(words) / 8000 + hang_up_after_s)
        try:
            await sim.finish()
        except asyncio.TimeoutError:
            result.not_closed = True
    return result


async def health(url: str) -> dict:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"{url}/healthz", timeout=10)).json()


async def run_level(url: str, k: int, questions, turns: int, timeout_s: float, soak_s: float | None = None,
                    transport: str = "twilio") -> dict:
    """K callers at once, `turns` questions each (or, with soak_s, as many as fit in that many seconds); questions
    are audio at the transport's rate (`spoken_questions`)."""
    target = url.replace("http", "ws", 1) + "/telephony/twilio" if transport == "twilio" else url
    before = await health(url)
    until_s = None if soak_s is None else time.monotonic() + soak_s
    results = await asyncio.gather(*(refusable(CALLERS[transport](target, questions, turns, i, timeout_s, until_s))
                                     for i in range(k)))
    after = await health(url)
    latencies = [ms for r in results for ms in r.latencies_ms]
    endings = [faint_ending_ms(q, RATES_HZ[transport]) for q in questions]
    from_end = [ms - endings[i] for r in results for ms, i in zip(r.latencies_ms, r.asked)]
    asked = sum(len(r.latencies_ms) + r.unanswered for r in results)
    return {"transport": transport, "calls": k, "turns": asked, "answered": len(latencies),
            "p50": percentile(latencies, 0.5), "p95": percentile(latencies, 0.95),
            "p50_end": percentile(from_end, 0.5),
            "refused": sum(r.refused for r in results), "dropped": sum(r.dropped for r in results),
            "not_closed": sum(r.not_closed for r in results),
            "rss_mb": after["process"]["rss_mb"], "fds": after["process"]["open_fds"],
            "threads": after["process"]["threads"], "tasks": after["process"]["tasks"],
            "lag_p99": after["loop_lag_ms"]["p99"],
            "sessions_after": after["sessions"], "rss_before": before["process"]["rss_mb"]}


def table(rows: list[dict]) -> str:
    out = ["| transport | calls | refused | turns | answered | v2v p50 ms | v2v p95 ms | p50 from the words' end ms "
           "| dropped | not closed | RSS MB | fds | threads | tasks | loop lag p99 ms |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['transport']} | {r['calls']} | {r['refused']} | {r['turns']} | {r['answered']} | "
                   f"{r['p50']:.0f} | {r['p95']:.0f} | {r['p50_end']:.0f} | {r['dropped']} | {r['not_closed']} | "
                   f"{r['rss_mb']} | {r['fds']} | {r['threads']} | {r['tasks']} | {r['lag_p99']} |")
    return "\n".join(out)


def capacity(rows: list[dict]) -> int:
    """The most calls whose p95 was within CAPACITY_P95_MS with every turn answered and no call refused or lost."""
    ok = [r["calls"] for r in rows if r["answered"] == r["turns"] and r["p95"] <= CAPACITY_P95_MS
          and not r["refused"] and not r["dropped"] and not r["not_closed"]]
    return max(ok, default=0)


async def churn(url: str, words: np.ndarray, cycles: int, parallel: int = 2, seed: int = 0) -> str:
    """`cycles` short calls, `parallel` at a time, each hung up 0-3 s after its words. RSS is read before, half way
    and after: a server's first calls at once grow it to a plateau (a KV cache for each, the allocators' pools),
    where a leak would go on growing through the second half."""
    ws_url = url.replace("http", "ws", 1) + "/telephony/twilio"
    rng = random.Random(seed)
    before = await health(url)
    half, not_closed = None, 0
    for batch in range(0, cycles, parallel):
        if half is None and batch >= cycles // 2:
            half = await health(url)
        calls = [churn_call(ws_url, words, rng.uniform(0.0, 3.0)) for _ in range(min(parallel, cycles - batch))]
        not_closed += sum(r.not_closed for r in await asyncio.gather(*calls))
    await asyncio.sleep(2.0)
    after = await health(url)
    b, h, a = before["process"], (half or before)["process"], after["process"]
    return (f"churn: {cycles} calls hung up at random moments; not closed by the server: {not_closed}; "
            f"sessions left: {after['sessions']}; RSS {b['rss_mb']} -> {h['rss_mb']} (half way) -> {a['rss_mb']} MB; "
            f"fds {b['open_fds']} -> {a['open_fds']}; threads {b['threads']} -> {a['threads']}; "
            f"event-loop tasks {b['tasks']} -> {a['tasks']}")


def start_server(args, workdir: str) -> tuple[subprocess.Popen, str]:
    """`parley serve` on a free localhost port with room for every caller; returns it and its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PARLEY_MAX_SESSIONS": str(max(args.calls + [args.churn_parallel]) + 2),
           "PARLEY_DB_PATH": os.path.join(workdir, "load.sqlite3")}
    command = [sys.executable, "-m", "app.cli", "serve", "--port", str(port)]
    if args.llm_model:
        command += ["--llm-model", args.llm_model]
    log = open(os.path.join(workdir, "server.log"), "w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    return server, f"http://127.0.0.1:{port}"


async def wait_ready(url: str, server: subprocess.Popen | None, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode} before it was ready")
        try:
            if (await health(url)).get("ready"):
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.5)
    raise SystemExit(f"{url} was not ready after {timeout_s:g} s")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app.loadtest", description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start `parley serve` here)")
    parser.add_argument("--calls", default="1,2,4", help="comma-separated numbers of simultaneous callers")
    parser.add_argument("--turns", type=int, default=3, help="questions per caller")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a turn counts as unanswered")
    parser.add_argument("--churn", type=int, default=0, help="short calls hung up at random moments, after the levels")
    parser.add_argument("--churn-parallel", type=int, default=2, help="churn calls at a time")
    parser.add_argument("--soak", type=float, help="seconds each level's callers keep asking (instead of --turns)")
    parser.add_argument("--transport", default="twilio",
                        help="comma-separated: twilio (Twilio's WebSocket), webrtc (aiortc peers through /offer), "
                             "realtime (OpenAI's Realtime API)")
    parser.add_argument("--llm-model", help="the server's model (only when this command starts it)")
    args = parser.parse_args(argv)
    args.calls = [int(k) for k in args.calls.split(",") if k.strip()]
    transports = [t.strip() for t in args.transport.split(",") if t.strip()]
    if not transports or set(transports) - set(CALLERS):
        parser.error(f"--transport: a comma-separated list of {', '.join(CALLERS)}")

    tts = Synthesizer()
    questions = {transport: spoken_questions(tts, transport) for transport in transports}
    with tempfile.TemporaryDirectory() as workdir:
        server, url = start_server(args, workdir) if args.url is None else (None, args.url.rstrip("/"))
        try:
            asyncio.run(wait_ready(url, server))
            rows = []
            for k in args.calls:
                for transport in transports:
                    rows.append(asyncio.run(run_level(url, k, questions[transport], args.turns, args.timeout,
                                                      args.soak, transport)))
                    print(f"{k} {transport} calls done: p95 {rows[-1]['p95']:.0f} ms", file=sys.stderr, flush=True)
            asked = f"questions for {args.soak:g} s" if args.soak else f"{args.turns} spoken questions"
            print(f"# {asked} per caller, callers at once; server {url}")
            print(table(rows))
            for transport in transports:
                mine = [r for r in rows if r["transport"] == transport]
                print(f"capacity over {transport} (p95 <= {CAPACITY_P95_MS:.0f} ms, every turn answered): "
                      f"{capacity(mine)} calls")
            if args.churn:
                # (hang-ups are Twilio calls: their words are 8 kHz)
                print(asyncio.run(churn(url, speak_8k(tts, QUESTIONS[0]), args.churn, args.churn_parallel)))
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)

