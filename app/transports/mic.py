"""The desktop transport: this computer's microphone and speakers through PortAudio (sounddevice), glued to a Session.

One duplex stream, 20 ms blocks: each block's input goes to session.push_audio_threadsafe (resampled to 16 kHz
when the device needs another rate) and its output is pulled from session.playback. The sound card is the clock.

Echo: through speakers the microphone hears the agent. By default (`headset=False`) the caller cannot barge in:
the session ignores input while the agent speaks, and this transport also mutes the microphone for
`echo_tail_ms` plus the stream's latency after the agent's last sound, so the tail of its own voice is not taken
for the user. With headphones (`headset=True`) there is no echo path, and speaking interrupts the agent.

sounddevice is imported here, lazily: the server modes never load PortAudio.
"""
import asyncio
import logging
import sys
from dataclasses import dataclass
from typing import TextIO

import numpy as np
import soxr

from app.pipeline.session import Session, SessionOptions
from app.transports.base import Call
from speech.audio import FRAME_MS, SAMPLE_RATE_HZ

log = logging.getLogger(__name__)

PORTAUDIO_FIX = ("install the PortAudio library: Debian/Ubuntu `sudo apt-get install libportaudio2`, "
                 "Fedora `sudo dnf install portaudio`, macOS `brew install portaudio`")


class MicError(RuntimeError):
    """A sound-system problem the user can fix; the message says how."""


@dataclass(frozen=True)
class MicOptions:
    input_device: int | str | None = None    # PortAudio device index or part of its name; None = system default
    output_device: int | str | None = None
    headset: bool = False                     # no echo path (headphones): the user may interrupt the agent
    echo_tail_ms: int = 300                   # speakers: the mic stays muted this long after the agent's last sound

    def __post_init__(self):
        if not 0 <= self.echo_tail_ms <= 5_000:
            raise ValueError(f"echo_tail_ms must be in [0, 5000], got {self.echo_tail_ms}")


def import_sounddevice():
    """The sounddevice module, or a MicError naming the fix when PortAudio is missing."""
    try:
        import sounddevice  # deferred: PortAudio loads only in mic mode (and its absence is a MicError)
    except OSError as exc:  # sounddevice raises OSError when libportaudio cannot be loaded
        raise MicError(f"PortAudio is not available ({exc}); {PORTAUDIO_FIX}") from None
    return sounddevice


def parse_device(value: str | None) -> int | str | None:
    """A --input-device / --output-device value: an index ("3") or part of a device name."""
    if value is None or not value.strip():
        return None
    return int(value) if value.strip().isdigit() else value.strip()


def list_devices() -> str:
    """PortAudio's device table (`>` marks the default input, `<` the default output)."""
    devices = import_sounddevice().query_devices()
    return str(devices) if len(devices) else "PortAudio finds no sound devices on this computer"


@dataclass(frozen=True)
class DevicePlan:
    input_index: int
    input_name: str
    output_index: int
    output_name: str
    rate_hz: int           # the stream's rate, in and out


def plan_devices(options: MicOptions) -> DevicePlan:
    """Resolve the devices and a rate both accept (16 kHz when they can); MicError says what to change."""
    sd = import_sounddevice()
    found = {}
    for kind, wanted, flag in (("input", options.input_device, "--input-device"),
                               ("output", options.output_device, "--output-device")):
        try:
            found[kind] = sd.query_devices(wanted, kind)
        except (ValueError, sd.PortAudioError) as exc:
            what = f"no {kind} device matches {wanted!r}" if wanted is not None else f"no default {kind} device"
            raise MicError(f"{what} ({exc}); pick one with {flag} (see `parley mic --list-devices`)") from None
    inp, out = found["input"], found["output"]
    rates = dict.fromkeys([SAMPLE_RATE_HZ, int(out["default_samplerate"]), int(inp["default_samplerate"])])
    for rate_hz in rates:
        try:
            sd.check_input_settings(inp["index"], channels=1, dtype="int16", samplerate=rate_hz)
            sd.check_output_settings(out["index"], channels=1, dtype="int16", samplerate=rate_hz)
        except sd.PortAudioError:
            continue
        return DevicePlan(inp["index"], inp["name"], out["index"], out["name"], rate_hz)
    raise MicError(f"{inp['name']!r} and {out['name']!r} share no mono 16-bit rate among {list(rates)} Hz; "
                   "choose other devices with --input-device / --output-device")


class TerminalView:
    """Prints the live transcript, the replies and each turn's latencies."""

    def __init__(self, out: TextIO = sys.stdout):
        self.out = out
        self.live = out.isatty()    # partial lines are redrawn in place on a terminal, skipped in a pipe

    async def show(self, event: dict) -> None:
        kind = event.get("type")
        if kind in ("transcript", "reply"):
            who = "you   " if kind == "transcript" else "parley"
            if event.get("final"):
                self.line(f"{who}: {event['text']}")
            elif self.live:
                self.out.write(f"\r\033[K{who}: {event['text']}…")
                self.out.flush()
        elif kind == "tool":
            self.line(f"  tool {event['name']}({event['arguments']}) -> {event['result']}")
        elif kind == "metrics":
            self.line("  latency: " + ", ".join(_metric(k, v) for k, v in event.items() if k != "type"))
        elif kind == "error":
            self.line(f"  error: {event.get('message')}")

    def line(self, text: str) -> None:
        self.out.write(("\r\033[K" if self.live else "") + text + "\n")
        self.out.flush()


def _metric(name: str, value) -> str:
    return f"{name[:-3]} {value:.0f} ms" if name.endswith("_ms") and value is not None else f"{name} {value}"


class EchoGate:
    """Speakers mode: the microphone is muted while the agent sounds and for `tail_samples` after its last sound."""

    def __init__(self, tail_samples: int, enabled: bool = True):
        self.tail_samples = tail_samples
        self.enabled = enabled          # False with a headset: no echo path, the user may barge in
        self._mute_left = 0             # samples still muted after the agent's last sound

    def __call__(self, played: np.ndarray, mic: np.ndarray) -> np.ndarray:
        """The microphone block to pass on, given the block played at the same time."""
        if not self.enabled:
            return mic
        if played.any():
            self._mute_left = self.tail_samples
            return np.zeros_like(mic)
        if self._mute_left > 0:
            self._mute_left -= len(mic)
            return np.zeros_like(mic)   # the tail of the agent's own voice, still in the room
        return mic


class MicCall(Call):
    """A conversation at this computer: one duplex PortAudio stream and one Session."""

    TRANSPORT = "mic"

    def __init__(self, services, options: MicOptions = MicOptions(), view: TerminalView | None = None):
        super().__init__()
        self.services = services
        self.options = options
        self.view = view or TerminalView()
        self.plan = plan_devices(options)
        self.xruns = 0                      # blocks PortAudio flagged (overflow/underflow)
        self._resample_in = None            # device rate -> 16 kHz, when they differ
        self._echo_gate = EchoGate(0, enabled=not options.headset)

    async def run(self) -> None:
        """Converse until cancelled (Ctrl-C) or until the agent ends the call."""
        sd, plan = import_sounddevice(), self.plan
        self.session = Session(self.services, output_rate_hz=plan.rate_hz, send_event=self.view.show,
                               on_control=self._on_control, options=SessionOptions(barge_in=self.options.headset))
        if plan.rate_hz != SAMPLE_RATE_HZ:
            self._resample_in = soxr.ResampleStream(plan.rate_hz, SAMPLE_RATE_HZ, 1, dtype="int16")
        self.spawn(self.run_session(), "session")
        await asyncio.sleep(0)   # the session knows its loop before the first block arrives
        try:
            stream = sd.Stream(samplerate=plan.rate_hz, blocksize=plan.rate_hz * FRAME_MS // 1000, channels=1,
                               dtype="int16", device=(plan.input_index, plan.output_index), callback=self._on_block)
        except sd.PortAudioError as exc:
            await self.close("the sound card would not open")
            raise MicError(f"cannot open {plan.input_name!r} / {plan.output_name!r} "
                           f"at {plan.rate_hz} Hz: {exc}") from None
        try:
            with stream:
                latency_s = sum(stream.latency)   # (input, output): the echo arrives this much later
                self._echo_gate.tail_samples = int(plan.rate_hz * (self.options.echo_tail_ms / 1000 + latency_s))
                self._announce(latency_s)
                await self.wait_closed()
        finally:
            await self.close("mic mode ended")
            if self.xruns:
                log.info("PortAudio flagged %d blocks (input overflow / output underflow)", self.xruns)

    def _on_block(self, indata: np.ndarray, outdata: np.ndarray, frames: int, time_info, status) -> None:
        # PortAudio's thread, every 20 ms: keep it short and exception-free
        if status:
            self.xruns += 1
        played = self.session.playback.read(frames)
        outdata[:, 0] = played
        mic = self._echo_gate(played, indata[:, 0])
        if self._resample_in is not None:
            mic = self._resample_in.resample_chunk(mic)
        self.session.push_audio_threadsafe(mic)

    async def _on_control(self, action: str) -> None:
        if action == "end_call":
            self.close_soon("the agent ended the call")
        else:
            self.view.line(f"  ({action.replace('_', ' ')}: the agent would hand over to a person here; "
                            "mic mode has no one to hand over to)")

    def _announce(self, latency_s: float) -> None:
        plan = self.plan
        mode = ("headset: speak any time, even over the agent" if self.options.headset else
                "speakers: the agent cannot be interrupted while it speaks (use --headset with headphones)")
        self.view.line(f"listening on {plan.input_name!r}, speaking on {plan.output_name!r} "
                        f"({plan.rate_hz} Hz, {latency_s * 1000:.0f} ms device latency); {mode}. Ctrl-C quits.")
