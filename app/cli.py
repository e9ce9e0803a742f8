"""The `parley` command. Each subcommand lives in its own module with `register(subparsers)`."""
import argparse
import importlib
import logging
import sys

from app.commands.common import UsageError

# The module that adds each subcommand (or group of them) to the parser.
COMMAND_MODULES = {
    "serve": "app.commands.serve",
    "converse": "app.commands.converse",
    "chat": "app.commands.chat",
    "mic": "app.commands.mic",
    "llm": "app.commands.llm",
    "adapt": "app.commands.adapt",
    "eval": "app.commands.eval",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or only of the command argv names: `parley llm bench` then never imports
    the modules of the others (adapt's defaults import the model stack; a machine that only benchmarks the LLM
    need not have the speech stack)."""
    parser = argparse.ArgumentParser(prog="parley", description="A real-time voice agent.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    subparsers = parser.add_subparsers(dest="command", required=True)
    words = [a for a in argv or () if not a.startswith("-")]
    named = words[0] if words and words[0] in COMMAND_MODULES else None
    for command, module in COMMAND_MODULES.items():
        if named in (None, command):
            importlib.import_module(module).register(subparsers)
    return parser


def flush_denormals() -> None:
    """Denormal floats compute as zeros, in every torch CPU thread started after this (they inherit the setting).

    NOTE: a trained model's activations underflow into denormals, which the CPU handles many times slower: a
    training step of Parley's earlier from-scratch model took 0.68 s fresh and 1.10 s by step 1500 (2 threads; 1.19 and 1.98 s on
    1), and set after torch had started its threads the flag helped only its own thread (1.09 s).
    """
    import torch  # deferred: the model stack (see app/commands/__init__.py)

    torch.set_flush_denormal(True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    flush_denormals()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        logging.getLogger("aioice").setLevel(logging.WARNING)   # a few INFO lines per WebRTC call
    try:
        return args.func(args) or 0
    except UsageError as exc:
        print(f"parley {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
