"""`parley mic`: talk to Parley through this computer's microphone and speakers (PortAudio)."""
import asyncio
import sys

from app.commands.common import add_model_flags, load_services


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "mic", help="talk to Parley with this computer's microphone and speakers",
        description="Talk to Parley on the default sound devices. Through speakers the agent would hear itself, so "
                    "by default you cannot interrupt it while it speaks; with headphones pass --headset to allow it. "
                    "Needs the PortAudio library (Debian/Ubuntu: apt-get install libportaudio2).")
    p.add_argument("--input-device", metavar="DEV",
                   help="microphone: a device index or part of its name (see --list-devices)")
    p.add_argument("--output-device", metavar="DEV", help="speakers: a device index or part of its name")
    p.add_argument("--list-devices", action="store_true", help="print the sound devices and exit")
    p.add_argument("--headset", action="store_true",
                   help="no echo path (headphones): you may talk over the agent to interrupt it")
    add_model_flags(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from app.transports.mic import MicError, MicOptions, list_devices, parse_device, plan_devices

    try:
        if args.list_devices:
            print(list_devices())
            return 0
        options = MicOptions(parse_device(args.input_device), parse_device(args.output_device), headset=args.headset)
        plan_devices(options)   # a missing PortAudio or device fails here, before seconds of model loading
    except MicError as exc:
        print(f"parley mic: {exc}", file=sys.stderr)
        return 2
    services = load_services(args, "parley mic")
    if services is None:
        return 2
    try:
        return talk(services, options)
    finally:
        services.shutdown()


def talk(services, options) -> int:
    """Converse on the sound devices until Ctrl-C or the agent hangs up; the exit status."""
    from app.transports.mic import MicCall, MicError

    try:
        asyncio.run(MicCall(services, options).run())
    except MicError as exc:
        print(f"parley mic: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nbye", flush=True)
    return 0
