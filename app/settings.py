"""One settings object for every mode: defaults, overridden by PARLEY_* environment variables, then CLI flags."""
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SMOLLM2_ADAPTER_DIR = REPO_ROOT / "llm" / "weights" / "parley-smollm2"  # `parley adapt`'s LoRA on SmolLM2
DEFAULT_LLM_DIR = SMOLLM2_ADAPTER_DIR  # the embedded brain: SmolLM2-135M-Instruct with Parley's adapter


def _data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "parley"


@dataclass(frozen=True)
class Settings:
    # server
    host: str = "127.0.0.1"
    port: int = 8000
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    # concurrent voice sessions; more get 503. NOTE: six phone callers at once had a p95 voice-to-voice of at most
    # 1.5 s in three runs of four on 2 CPU cores (app.loadtest, RELIABILITY.md); past that, max_turn_wait_s refuses
    max_sessions: int = 6
    # a new call is refused while the callers on the line are answered slower than this: a turn's work waiting this
    # long for the language model, or half their replies of late (app.transports.base.no_room)
    max_turn_wait_s: float = 1.5
    connect_timeout_s: float = 20.0       # a WebRTC offer that never connects is dropped after this
    # access (app.server.auth)
    auth_token: str | None = None         # when set, every route but the page and /healthz wants it
    allowed_origins: str = ""             # comma-separated origins whose pages may POST /offer, besides our own
    offer_rate_per_min: int = 30          # new browser calls a minute from one client address
    # models (None = the embedded default)
    asr_model: str | None = None          # a CTranslate2 Whisper directory
    voice: str | None = None              # a Piper .onnx voice (its .onnx.json beside it)
    llm_model: str = str(DEFAULT_LLM_DIR)  # an adapter, parley, LLaDA or Dream checkpoint directory, or a .gguf
    llm_device: str | None = None         # None = cuda when available, else cpu
    # language-model generations run at once, their passes sharing forwards (llm.passes.PassBatcher); 1: one
    # after another
    llm_batch: int = 4
    # the business the agent serves
    profile: str | None = None            # business profile YAML; None = the shipped default
    db_path: str = field(default_factory=lambda: str(_data_dir() / "appointments.sqlite3"))
    # telephony
    public_host: str | None = None        # host name Twilio reaches us on, for the TwiML stream URL
    # what a caller hears when every session is in use (Twilio says it, then hangs up)
    busy_message: str = "Sorry, all our lines are busy right now. Please call back in a few minutes."
    twilio_auth_token: str | None = None  # when set, X-Twilio-Signature is verified
    # where transfer_to_human hands a phone call: a number (+15550100199) or a SIP URI; None: the call stays
    # with Parley and an integrator's event hook moves it (app.transports.twilio)
    transfer_to: str | None = None

    def replace(self, **changes) -> "Settings":
        """A copy with the given fields changed; None values are ignored (an absent CLI flag)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def _coerce(value: str, like):
    if isinstance(like, bool):
        return value.lower() in ("1", "true", "yes", "on")
    if isinstance(like, int):
        return int(value)
    if isinstance(like, float):
        return float(value)
    return value


def from_env(environ=os.environ) -> Settings:
    """Settings with PARLEY_<FIELD> environment variables applied (e.g. PARLEY_PORT=9000)."""
    base = Settings()
    changes = {}
    for f in dataclasses.fields(Settings):
        raw = environ.get(f"PARLEY_{f.name.upper()}")
        if raw is not None:
            try:
                changes[f.name] = _coerce(raw, getattr(base, f.name))
            except ValueError:
                raise ValueError(f"PARLEY_{f.name.upper()}={raw!r} is not a valid {f.name}") from None
    return base.replace(**changes)
