"""Flags shared by the commands that load models, and the settings they produce."""
import argparse
import sys

from app.settings import Settings, from_env


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """--asr-model, --voice, --llm-model, --llm-device, --profile, --db: each overrides its PARLEY_* variable."""
    group = parser.add_argument_group("models and business")
    group.add_argument("--asr-model", metavar="DIR", help="CTranslate2 Whisper directory (default: bundled tiny.en)")
    group.add_argument("--voice", metavar="ONNX", help="Piper voice .onnx (default: bundled en_US-joe-medium)")
    group.add_argument("--llm-model", metavar="DIR", help="a Parley adapter, parley, LLaDA or Dream checkpoint "
                       "directory, or a .gguf (default: the embedded SmolLM2 brain)")
    group.add_argument("--llm-device", metavar="DEV", help="cpu or cuda (default: cuda when available)")
    group.add_argument("--profile", metavar="YAML", help="business profile (default: the shipped example)")
    group.add_argument("--db", dest="db_path", metavar="FILE", help="appointments SQLite file")


def settings_from(args: argparse.Namespace, **extra) -> Settings:
    """Defaults, then PARLEY_* variables, then the flags that were given."""
    flags = {name: getattr(args, name, None) for name in ("asr_model", "voice", "llm_model", "llm_device", "profile", "db_path")}
    return from_env().replace(**flags, **extra)


def load_services(args: argparse.Namespace, prog: str):
    """The models named by the flags, warmed up; None (after one line on stderr) when a path is wrong."""
    from app.services import Services

    try:
        services = Services.load(settings_from(args))
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    services.warm_up()
    return services
