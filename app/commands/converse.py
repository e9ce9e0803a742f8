"""`parley converse`: one conversation on audio files, through the same pipeline as a live call."""
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

from app.commands.common import add_model_flags, load_services
from speech.audio import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE_HZ, AudioFormatError, read_wav, write_wav


def register(subparsers) -> None:
    p = subparsers.add_parser("converse", help="answer a spoken question from a WAV file, into a WAV file")
    p.add_argument("--in", dest="input", required=True, metavar="WAV", help="the user's speech (any PCM WAV)")
    p.add_argument("--out", dest="output", required=True, metavar="WAV", help="where to write the spoken reply")
    p.add_argument("--json", action="store_true", help="print one JSON object: transcript, reply, tool_calls, metrics")
    p.add_argument("--realtime", action="store_true", help="feed and play audio at real-time pace (default: as fast as possible)")
    add_model_flags(p)
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        audio = read_wav(args.input)
    except (AudioFormatError, OSError) as exc:
        print(f"parley converse: {exc}", file=sys.stderr)
        return 2
    if len(audio) == 0:
        print(f"parley converse: {args.input} holds no audio", file=sys.stderr)
        return 2
    if not Path(args.output).resolve().parent.is_dir():   # found now, not after the whole conversation
        print(f"parley converse: --out {args.output}: no such directory", file=sys.stderr)
        return 2
    services = load_services(args, "parley converse")
    if services is None:
        return 2
    result = asyncio.run(converse(services, audio, realtime=args.realtime))
    services.shutdown()
    write_wav(args.output, result.pop("audio"), services.tts.sample_rate_hz)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"you:    {result['transcript']}")
        for call in result["tool_calls"]:
            print(f"tool:   {call['name']}({json.dumps(call['arguments'])}) -> {json.dumps(call['result'])}")
        print(f"parley: {result['reply']}")
        print("latency (ms): " + " ".join(f"{k}={v}" for k, v in result["metrics"].items()))
    if not result["transcript"]:
        print(f"parley converse: no speech was heard in {args.input}", file=sys.stderr)
        return 1
    return 0


async def converse(services, audio: np.ndarray, realtime: bool = False, options=None) -> dict:
    """Stream 16 kHz audio through a Session as if live; returns the turn's texts, metrics and reply audio."""
    return summarize(*await talk(services, audio, realtime, options))


async def talk(services, audio: np.ndarray, realtime: bool = False, options=None):
    """converse's conversation itself: -> (its events, the closed Session, the reply's audio chunks)."""
    from app.session import Session, SessionOptions

    events: list[dict] = []

    async def send_event(event: dict) -> None:
        events.append(event)

    rate = services.tts.sample_rate_hz
    session = Session(services, output_rate_hz=rate, send_event=send_event,
                      options=options or SessionOptions(realtime=realtime))
    runner = asyncio.create_task(session.run())
    reply_audio: list[np.ndarray] = []
    frame_out = rate * FRAME_MS // 1000

    async def drain() -> None:
        # the file "speaker": pulls speech as it is queued, at real time or as fast as possible
        while True:
            if session.playback.busy:
                reply_audio.append(session.playback.read(frame_out))
                await asyncio.sleep(FRAME_MS / 1000 if realtime else 0)
            else:
                await asyncio.sleep(0.002)

    speaker = asyncio.create_task(drain())
    # trailing silence so the turn detector can hear the end of the last utterance, however long it waits
    policy = session.options.end_of_turn
    wait_ms = max(services.vad_config.silence_ms, policy.max_silence_ms if policy is not None else 0)
    tail = np.zeros(SAMPLE_RATE_HZ * (wait_ms + 500) // 1000, dtype=np.int16)
    stream = np.concatenate([audio, tail])
    for start in range(0, len(stream), FRAME_SAMPLES):
        session.push_audio(stream[start:start + FRAME_SAMPLES])
        await asyncio.sleep(FRAME_MS / 1000 if realtime else 0)
    session.end_input()
    await runner
    await session.wait_idle()
    speaker.cancel()
    await session.close()
    return events, session, reply_audio


def summarize(events: list[dict], session, reply_audio: list[np.ndarray]) -> dict:
    finals = [e["text"] for e in events if e["type"] == "transcript" and e["final"]]
    replies = [e["text"] for e in events if e["type"] == "reply" and e["final"]]
    turns = [t.metrics() for t in session.turns if t.transcript]
    return {
        "transcript": " ".join(finals),
        "reply": " ".join(replies),
        "tool_calls": [{k: e[k] for k in ("name", "arguments", "result")} for e in events if e["type"] == "tool"],
        "metrics": turns[0] if turns else {},
        "turns": turns,
        "errors": [e["message"] for e in events if e["type"] == "error"],
        "audio": np.concatenate(reply_audio) if reply_audio else np.zeros(0, dtype=np.int16),
    }
