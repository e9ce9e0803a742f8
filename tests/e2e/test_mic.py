"""`parley mic` on a real PortAudio device with no sound card.

ALSA's file plugin makes a virtual device (see ASOUNDRC): what PortAudio records is read from IN.raw and what it
plays is written to OUT.raw, 16-bit mono at the rate the stream opens. Capture and playback need separate file
plugins (`asym`): one plugin for both also copies everything it *records* into OUT.raw, so the user's question
would pass for the agent's reply. IN.raw is a FIFO that this test writes at real-time pace, which makes it the
device's clock (ALSA's null device alone runs as fast as the CPU allows: 100 MB of OUT.raw in 3 s).
"""
import builtins
import ctypes.util
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from app.settings import REPO_ROOT
from app.transports.mic import EchoGate, MicError, MicOptions, TerminalView, import_sounddevice, parse_device
from speech.wer import word_error_rate

ASOUNDRC = """\
pcm.!default {{ type asym playback.pcm "speaker" capture.pcm "microphone" }}
pcm.speaker {{ type plug slave.pcm {{ type file slave.pcm "nul" file "{out}" format "raw" }} }}
pcm.microphone {{ type plug slave.pcm {{ type file slave.pcm "nul" file "/dev/null" infile "{infile}" format "raw" }} }}
pcm.nul {{ type null }}
"""
F_SETPIPE_SZ = 1031          # Linux fcntl: a 4 KiB pipe holds ~0.1 s of 16 kHz audio, so the writer sets the pace
BLOCK = 320                  # 20 ms at 16 kHz

REPLY = "We open at nine in the morning, and we close at five."

# The same path as `parley mic` once the models are loaded, with the scripted test-double LLM.
DRIVER = """
import faulthandler, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)   # the test's view of a process that will not exit
from app.commands.mic import talk
from app.transports.mic import MicOptions
from app.pipeline.services import Services
from speech.asr import Transcriber
from speech.tts import Synthesizer
from tests.fakes import FakeEngine, FakeToolbox

reply = sys.argv[1]
services = Services(Transcriber(), Synthesizer(), FakeEngine(lambda messages: reply), FakeToolbox(), system_prompt=None)
services.ready = True
sys.exit(talk(services, MicOptions()))
"""

def require_portaudio() -> None:
    """Skip on a dev machine without PortAudio; under CI (CI=1) that is a failure, not a silent skip."""
    if sys.platform == "linux" and ctypes.util.find_library("portaudio") is not None:
        return
    reason = "needs Linux with PortAudio (Debian/Ubuntu: apt-get install libportaudio2)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; .ci/run installs it")
    pytest.skip(reason)


class FifoMicrophone:
    """Writes 20 ms blocks into the device's FIFO at real-time pace: silence, and what it is told to say."""

    def __init__(self, path: Path):
        os.mkfifo(path)
        # read-write and non-blocking: opening never waits for PortAudio, and a full pipe drops the block
        # (a microphone nobody reads from loses its samples too)
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        fcntl.fcntl(self.fd, F_SETPIPE_SZ, 4096)
        self._speech = np.zeros(0, dtype=np.int16)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def say(self, audio_16k: np.ndarray) -> None:
        with self._lock:
            self._speech = np.concatenate([self._speech, audio_16k])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        os.close(self.fd)

    def _run(self) -> None:
        t0, n = time.monotonic(), 0
        while not self._stop.is_set():
            with self._lock:
                block, self._speech = self._speech[:BLOCK], self._speech[BLOCK:]
            block = np.pad(block, (0, BLOCK - len(block))).astype("<i2")
            try:
                os.write(self.fd, block.tobytes())   # 640 bytes < PIPE_BUF: all or nothing
            except BlockingIOError:
                pass
            n += 1
            time.sleep(max(0.0, t0 + n * BLOCK / 16_000 - time.monotonic()))


@pytest.fixture
def sound_home(tmp_path):
    """A HOME whose .asoundrc makes the default ALSA device the FIFO microphone and an OUT.raw speaker."""
    require_portaudio()
    out = tmp_path / "OUT.raw"
    mic = FifoMicrophone(tmp_path / "IN.raw")
    (tmp_path / ".asoundrc").write_text(ASOUNDRC.format(out=out, infile=tmp_path / "IN.raw"))
    yield tmp_path, mic, out
    mic.close()


def voiced_s(samples: np.ndarray) -> float:
    frames = samples[: len(samples) // BLOCK * BLOCK].reshape(-1, BLOCK).astype(np.float64)
    return float((np.sqrt((frames ** 2).mean(axis=1)) > 300).sum() * BLOCK / 16_000)


def voiced_part(samples: np.ndarray, margin_s: float = 0.2) -> np.ndarray:
    """The samples from the first voiced block to the last, with a margin: Whisper tiny, given the reply after
    3 s of silence, once heard it twice ("We open at 9 ... close at 5. We open at 9 ... close at 5.")."""
    frames = samples[: len(samples) // BLOCK * BLOCK].reshape(-1, BLOCK).astype(np.float64)
    voiced = np.flatnonzero(np.sqrt((frames ** 2).mean(axis=1)) > 300)
    if len(voiced) == 0:
        return samples[:0]
    margin = int(margin_s * 16_000)
    return samples[max(0, voiced[0] * BLOCK - margin):(voiced[-1] + 1) * BLOCK + margin]


def wait_for(condition, timeout_s: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"parley mic exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def test_mic_mode_answers_a_spoken_question_on_a_sound_device(sound_home, speak, transcriber):
    home, mic, out = sound_home
    lines: list[str] = []
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, REPLY], cwd=REPO_ROOT, env={**os.environ, "HOME": str(home)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("listening on" in line for line in lines), 60, "the device to open", proc)
        mic.say(speak("What time do you open tomorrow?"))
        wait_for(lambda: any("latency:" in line for line in lines), 40, "the reply", proc)
        # the reply is playing: wait until OUT.raw has gone quiet again
        played = lambda: np.fromfile(out, dtype="<i2") if out.exists() else np.zeros(0, np.int16)  # noqa: E731
        wait_for(lambda: voiced_s(played()) > 1.5 and voiced_s(played()[-12800:]) == 0, 20, "the reply to finish", proc)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)   # every thread's stack to stderr, then the failure shows them
            time.sleep(1)
            proc.kill()
            raise AssertionError(f"parley mic did not exit on Ctrl-C:\n{proc.stderr.read()[-6000:]}") from None
        reader.join(2)
    errors = proc.stderr.read()
    assert code == 0, errors
    text = "".join(lines)
    assert "you   : What time do you open tomorrow?" in text
    assert f"parley: {REPLY}" in text
    assert "speakers: the agent cannot be interrupted" in text       # the echo-safe default
    reply = np.fromfile(out, dtype="<i2")
    assert voiced_s(reply) > 1.5
    heard = transcriber.transcribe(voiced_part(reply))
    assert word_error_rate(REPLY, heard) <= 0.35, heard                 # OUT.raw holds the spoken reply, once


def test_a_process_whose_threads_will_not_let_go_still_ends_after_ctrl_c():
    """`parley mic` once did not end within 15 s of Ctrl-C (where it waited is not known): after Ctrl-C the
    process ends within EXIT_GRACE_S whatever its threads do. Here a thread that never ends holds it open."""
    stuck = ("import signal, sys, threading, time\n"
             "from app.commands import mic\n"
             "mic.EXIT_GRACE_S = 1.0\n"
             "signal.signal(signal.SIGINT, mic._interrupt)\n"
             "threading.Thread(target=threading.Event().wait).start()   # not a daemon: never lets the process end\n"
             "try:   # 'ready' inside: Ctrl-C may come before print returns\n"
             "    print('ready', flush=True)\n"
             "    time.sleep(60)\n"
             "except KeyboardInterrupt:\n"
             "    print('bye', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", stuck], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0 and proc.stdout.read().strip() == "bye"
    assert 0.9 < time.monotonic() - started < 5


def test_list_devices_and_a_missing_device_fail_fast_with_a_clear_message(sound_home):
    home, _, _ = sound_home
    env = {**os.environ, "HOME": str(home)}
    listed = subprocess.run([sys.executable, "-m", "app.cli", "mic", "--list-devices"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "microphone" in listed.stdout and "speaker" in listed.stdout
    missing = subprocess.run([sys.executable, "-m", "app.cli", "mic", "--input-device", "no-such-microphone"],
                             cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2
    assert "no input device matches 'no-such-microphone'" in missing.stderr and "--list-devices" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_missing_portaudio_is_a_clear_error_naming_the_fix(monkeypatch):
    real_import = builtins.__import__

    def no_portaudio(name, *args, **kwargs):
        if name == "sounddevice":
            raise OSError("PortAudio library not found")   # what sounddevice raises without libportaudio
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_portaudio)
    with pytest.raises(MicError, match="apt-get install libportaudio2"):
        import_sounddevice()


def test_server_modes_never_load_portaudio():
    code = ("import sys; from app.server.app import create_app; from app.settings import Settings; "
            "import app.transports.twilio, app.commands.serve; create_app(Settings()); "
            "assert 'sounddevice' not in sys.modules, 'the server imported sounddevice'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_device_flags_and_options():
    assert parse_device("3") == 3 and parse_device(" USB Mic ") == "USB Mic" and parse_device(None) is None
    with pytest.raises(ValueError, match="echo_tail_ms"):
        MicOptions(echo_tail_ms=-1)


def test_echo_gate_mutes_the_agents_voice_and_its_tail_unless_headset():
    voice, quiet, user = np.full(BLOCK, 900, np.int16), np.zeros(BLOCK, np.int16), np.full(BLOCK, 500, np.int16)
    gate = EchoGate(tail_samples=2 * BLOCK)
    passed = [gate(played, user).any() for played in (quiet, voice, quiet, quiet, quiet, voice, quiet)]
    # open; muted while the agent sounds; muted for the 2-block tail; open; muted again
    assert passed == [True, False, False, False, True, False, False]
    headset = EchoGate(tail_samples=2 * BLOCK, enabled=False)
    assert all(headset(played, user).any() for played in (voice, quiet, voice))


def test_terminal_view_prints_finals_and_latencies(capsys):
    import asyncio
    import sys as _sys

    view = TerminalView(_sys.stdout)   # not a terminal under pytest: partial lines are skipped

    async def show():
        await view.show({"type": "transcript", "text": "hel", "final": False})
        await view.show({"type": "transcript", "text": "hello there", "final": True})
        await view.show({"type": "reply", "text": "Hi! How can I help?", "final": True})
        await view.show({"type": "metrics", "asr_ms": 120.4, "e2e_latency_ms": 812.0, "llm_passes": 3})

    asyncio.run(show())
    assert capsys.readouterr().out.splitlines() == [
        "you   : hello there", "parley: Hi! How can I help?", "  latency: asr 120 ms, e2e_latency 812 ms, llm_passes 3"]
