"""The Twilio Media Streams transport's answer to bad input and to a full server, against the real server socket.

Junk between good frames is ignored and counted; an oversized message closes that socket with a reason; a call over
`max_sessions` hears an apology from the webhook, and a stream that comes anyway gets 503. The speech models are
the real bundled ones; the language model is a test double with one reply.
"""
import asyncio
import base64
import json
import time

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from app.loadtest.twilio_caller import wait_until
from app.pipeline.services import Services
from app.server.app import create_app
from app.settings import Settings
from app.transports.twilio_webhooks import telephony_stats
from speech.audio import pcm_to_mulaw
from tests.fakes import FakeEngine, FakeToolbox
from tests.rtc_helpers import serve_in_thread


@pytest.fixture(scope="module")
def phone(transcriber, synthesizer):
    """A server with the real speech models, a one-line LLM and room for two calls; yields (host, app)."""
    engine = FakeEngine(lambda messages: "Of course, please go ahead.", block_words=4)
    services = Services(transcriber, synthesizer, engine, FakeToolbox({}), system_prompt=None, ready=True)
    app = create_app(Settings(max_sessions=2), services)
    with serve_in_thread(app) as url:
        yield url.removeprefix("http://"), app
    services.shutdown()


# --- bad input ------------------------------------------------------------------------------------------------


def start_message(stream_sid: str = "MZbad") -> str:
    return json.dumps({"event": "start", "streamSid": stream_sid, "start": {
        "streamSid": stream_sid, "callSid": "CAbad",
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})


def silence_message(stream_sid: str = "MZbad") -> str:
    payload = base64.b64encode(pcm_to_mulaw(np.zeros(160, dtype=np.int16))).decode()
    return json.dumps({"event": "media", "streamSid": stream_sid, "media": {"payload": payload}})


STOP = json.dumps({"event": "stop", "streamSid": "MZbad"})


def run_messages(host: str, messages: list[str]) -> tuple[int | None, str]:
    """Send the messages in order, then wait for the server to close; returns (close code, reason)."""
    async def go():
        async with connect(f"ws://{host}/telephony/twilio", max_size=None) as ws:
            for message in messages:
                await ws.send(message)
            try:
                await asyncio.wait_for(ws.wait_closed(), 10)
            except asyncio.TimeoutError:
                raise AssertionError("the server did not end the call") from None
            return ws.close_code, ws.close_reason

    return asyncio.run(go())


@pytest.mark.parametrize("kind, junk", [
    ("non_json", "{this is not json"),
    ("unknown_event", json.dumps({"event": "teleport", "streamSid": "MZbad"})),
    ("bad_payload", json.dumps({"event": "media", "streamSid": "MZbad", "media": {"payload": "@@@=="}})),
])
def test_bad_message_during_a_call_is_ignored_and_counted(phone, kind, junk):
    host, app = phone
    before = telephony_stats(app).ignored[kind]
    # junk between two good media frames; the call then ends normally on `stop`
    code, _ = run_messages(host, [start_message(), silence_message(), junk, silence_message(), STOP])
    assert code == 1000
    assert telephony_stats(app).ignored[kind] == before + 1
    assert not app.state.calls


def test_media_before_start_is_ignored_and_counted(phone):
    host, app = phone
    before = telephony_stats(app).ignored["media_before_start"]
    code, _ = run_messages(host, [silence_message(), silence_message(), start_message(), silence_message(), STOP])
    assert code == 1000
    assert telephony_stats(app).ignored["media_before_start"] == before + 2
    assert not app.state.calls


def test_message_over_64_kib_closes_the_socket_with_a_reason(phone):
    host, app = phone
    huge = json.dumps({"event": "media", "streamSid": "MZbad", "media": {"payload": "A" * (64 * 1024)}})
    code, reason = run_messages(host, [start_message(), silence_message(), huge, silence_message()])
    assert code == 1009 and "65536" in reason
    assert not app.state.calls


def test_a_call_over_max_sessions_hears_an_apology_and_a_late_stream_gets_503(phone):
    host, app = phone
    refused_before = app.state.metrics.refused.labels("twilio", "busy")._value.get()

    async def go():
        url = f"ws://{host}/telephony/twilio"
        async with connect(url) as first, connect(url) as second:
            await wait_until(lambda: len(app.state.calls) == 2, 5, "two live calls")
            async with httpx.AsyncClient() as client:   # the third call's webhook: spoken, then hung up
                started = time.perf_counter()
                webhook = await client.post(f"http://{host}/telephony/twilio/voice", data={"CallSid": "CA3"})
                webhook_ms = (time.perf_counter() - started) * 1000
            with pytest.raises(InvalidStatus) as refused:   # a stream that comes anyway (a race): 503
                async with connect(f"ws://{host}/telephony/twilio"):
                    pass
            for ws in (first, second):
                await ws.send(STOP)
                await asyncio.wait_for(ws.wait_closed(), 10)
            return webhook, webhook_ms, refused.value.response

    webhook, webhook_ms, response = asyncio.run(go())
    assert webhook.status_code == 200 and webhook.headers["content-type"].startswith("text/xml")
    assert "<Say>Sorry, all our lines are busy" in webhook.text and "<Hangup/>" in webhook.text
    assert "<Connect>" not in webhook.text and webhook_ms < 100, webhook_ms
    assert response.status_code == 503 and b"busy" in response.body
    assert app.state.metrics.refused.labels("twilio", "busy")._value.get() == refused_before + 2
    assert not app.state.calls
