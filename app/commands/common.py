"""Flags shared by the commands that load models, the settings they produce, and the operator's mistakes."""
import argparse
import re
import sys

from app.settings import Settings, from_env


class UsageError(Exception):
    """An operator's mistake (a flag, a variable, a file): `parley` prints the one line and exits 2."""


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
    """Defaults, then PARLEY_* variables, then the flags that were given; checked (`check`) before any model loads.
    Raises UsageError."""
    flags = {name: getattr(args, name, None) for name in ("asr_model", "voice", "llm_model", "llm_device", "profile", "db_path")}
    try:
        settings = from_env().replace(**flags, **extra)
    except ValueError as exc:  # PARLEY_PORT=abc
        raise UsageError(str(exc)) from None
    check(settings)
    return settings


def check(settings: Settings) -> None:
    """The settings' mistakes that cost nothing to find, found before seconds of model loading: the device, the
    transfer number, and the business profile (read and parsed). Raises UsageError."""
    check_device(settings.llm_device)
    if settings.llm_batch < 1:
        raise UsageError(f"PARLEY_LLM_BATCH={settings.llm_batch}: generations run at once must be at least 1")
    if settings.transfer_to is not None:
        from app.transports.twilio_wire import dial_target

        try:
            dial_target(settings.transfer_to)
        except ValueError as exc:
            raise UsageError(f"PARLEY_TRANSFER_TO: {exc}") from None
    from app.agent.profile import load_profile

    try:
        load_profile(settings.profile)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_device(device: str | None) -> None:
    """cpu, cuda or cuda:N, and cuda only where this torch has a GPU to run on."""
    if device is None:
        return
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise UsageError(f"--llm-device {device!r}: expected cpu, cuda or cuda:N")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            why = "this torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise UsageError(f"--llm-device {device}: {why}; use --llm-device cpu")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise UsageError(f"--llm-device {device}: there are {torch.cuda.device_count()} CUDA devices")


def study(services) -> None:
    """Have the brain's drafter guess from the dialogues it was adapted on, written for the business
    (app.training.recipe.study; ~3 s at start): a first call's replies in fewer passes, the same words."""
    from app.training.recipe import study as study_dialogues  # deferred: the model stack

    if services.agent_options.draft_length:
        study_dialogues(services.engine, services.toolbox.profile)


def load_services(args: argparse.Namespace, prog: str, speech: bool = True):
    """The models named by the flags, warmed up; None (after one line on stderr) when a path is wrong. speech=False:
    the language model and the tools alone (a text conversation)."""
    from app.pipeline.services import Services

    try:
        services = Services.load(settings_from(args), speech=speech)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    study(services)
    services.warm_up()
    return services
