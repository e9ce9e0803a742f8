"""Shared by the server tests: a real server in a thread (with a scripted LLM, or the embedded brain), and the
spoken question."""
import contextlib
import socket
import threading
import time
from datetime import datetime

import numpy as np
import uvicorn

from app.agent.options import agent_options_for
from app.agent.profile import load_profile
from app.agent.prompt import system_prompt
from app.agent.store import open_store
from app.agent.tools import Toolbox
from app.pipeline.services import Services
from app.server.app import create_app
from app.settings import SMOLLM2_ADAPTER_DIR, Settings
from speech.audio import resample
from tests.fakes import FakeEngine, FakeToolbox

QUESTION = "What time do you open on Saturday?"
QUESTION_WORDS = ("what", "time")   # words Whisper never misses here ("Saturday" became "setter day" once)
ANSWER = "We open at nine in the morning on Saturday, and close at two."
HOURS = {"ok": True, "day": "Saturday", "open": "9:00", "close": "14:00"}


def front_desk_script(messages: list[dict]) -> str:
    """Ask for the hours first; once the tool has answered, speak the answer."""
    if messages[-1]["role"] == "tool":
        return ANSWER
    return '<tool_call>{"name": "business_info", "arguments": {"topic": "hours", "day": "saturday"}}</tool_call>'


def front_desk_services(asr, tts) -> Services:
    """The real speech models with a scripted LLM and toolbox (the trained LLM is not needed here)."""
    return Services(asr=asr, tts=tts, engine=FakeEngine(front_desk_script), toolbox=FakeToolbox({"business_info": HOURS}),
                    system_prompt=None)


def spoken_question(tts, rate_hz: int, lead_s: float = 0.5, tail_s: float = 1.5) -> np.ndarray:
    """QUESTION in Piper's voice, int16 mono at rate_hz, with silence before and after."""
    speech = resample(tts.synthesize(QUESTION), tts.sample_rate_hz, rate_hz)
    silence = lambda s: np.zeros(int(s * rate_hz), dtype=np.int16)  # noqa: E731
    return np.concatenate([silence(lead_s), speech, silence(tail_s)])


@contextlib.contextmanager
def serve_in_thread(app, timeout_s: float = 60.0):
    """Run `app` with uvicorn on a free localhost port in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@contextlib.contextmanager
def serve_brain(brain, asr=None, tts=None):
    """A live server on the embedded brain (the shipped salon, its clock at a fixed Monday morning) and the given
    speech models; yields its base URL."""
    profile = load_profile(None)
    toolbox = Toolbox(profile, open_store(":memory:"), now=lambda: datetime(2026, 3, 2, 9, 0))
    services = Services(asr, tts, brain, toolbox, system_prompt(profile, toolbox, brain.chat_style),
                        agent_options=agent_options_for(SMOLLM2_ADAPTER_DIR), ready=True)
    try:
        with serve_in_thread(create_app(Settings(llm_model=str(SMOLLM2_ADAPTER_DIR)), services)) as url:
            yield url
    finally:
        services.shutdown()
