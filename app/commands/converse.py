"""`parley converse`: one conversation on audio files, through the same pipeline as a live call."""
import asyncio
import json
import sys
from pathlib import Path

from app.commands.common import add_model_flags, load_services


def register(subparsers) -> None:
    p = subparsers.add_parser("converse", help="answer a spoken question from a WAV file, into a WAV file")
    p.add_argument("--in", dest="input", required=True, metavar="WAV", help="the user's speech (any PCM WAV)")
    p.add_argument("--out", dest="output", required=True, metavar="WAV", help="where to write the spoken reply")
    p.add_argument("--json", action="store_true", help="print one JSON object: transcript, reply, tool_calls, metrics")
    p.add_argument("--realtime", action="store_true", help="feed and play audio at real-time pace (default: as fast as possible)")
    add_model_flags(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from app.transports.file import converse  # deferred: the model stack (see app/commands/__init__.py)
    from speech.audio import AudioFormatError, read_wav, write_wav  # deferred: the model stack

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
