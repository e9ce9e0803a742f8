"""Twilio's request signatures on the voice webhook and the media stream, against a live server with no models
(these calls never speak)."""
import asyncio
import json

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from app.pipeline.services import Services
from app.pipeline.session import Session
from app.server.app import create_app
from app.settings import Settings
from app.transports import twilio_wire as twilio
from app.transports.twilio_webhooks import telephony_stats, transfers
from tests.fakes import FakeEngine, FakeToolbox
from tests.rtc_helpers import serve_in_thread

TOKEN = "test-auth-token"
STOP = json.dumps({"event": "stop", "streamSid": "MZsig"})


def start_message(stream_sid: str = "MZsig") -> str:
    return json.dumps({"event": "start", "streamSid": stream_sid, "start": {
        "streamSid": stream_sid, "callSid": "CAsig",
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})


@pytest.fixture(scope="module")
def signed():
    """A server that requires X-Twilio-Signature; no models (these calls never speak)."""
    services = Services(None, None, FakeEngine(lambda messages: "Hello."), FakeToolbox(), system_prompt=None, ready=True)
    app = create_app(Settings(twilio_auth_token=TOKEN, public_host="voice.example.com", max_sessions=2), services)
    with serve_in_thread(app) as url:
        yield url.removeprefix("http://"), app
    services.shutdown()



def test_voice_webhook_returns_twiml_for_a_signed_request(signed):
    host, app = signed
    public_host = app.state.settings.public_host
    form = {"CallSid": "CA42", "From": "+15550100", "To": "+15550199"}
    signature = twilio.compute_signature(TOKEN, f"https://{public_host}/telephony/twilio/voice", form)
    url = f"http://{host}/telephony/twilio/voice"
    ok = httpx.post(url, data=form, headers={twilio.SIGNATURE_HEADER: signature})
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/xml")
    assert f'<Connect><Stream url="wss://{public_host}/telephony/twilio"/></Connect>' in ok.text
    for headers in ({}, {twilio.SIGNATURE_HEADER: signature[:-4] + "AAA="}):
        refused = httpx.post(url, data=form, headers=headers)
        assert refused.status_code == 403 and twilio.SIGNATURE_HEADER in refused.text
    tampered = httpx.post(url, data={**form, "To": "+15550123"}, headers={twilio.SIGNATURE_HEADER: signature})
    assert tampered.status_code == 403


def test_the_action_after_a_stream_dials_only_a_call_being_transferred_and_only_when_signed():
    services = Services(None, None, FakeEngine(lambda messages: "Hello."), FakeToolbox(), system_prompt=None, ready=True)
    settings = Settings(twilio_auth_token=TOKEN, public_host="voice.example.com", transfer_to="+1 555 010 0199",
                        auth_token="parley-token")
    app = create_app(settings, services)
    with serve_in_thread(app) as url:
        # with PARLEY_AUTH_TOKEN, the action URL carries it as the webhook's URL does
        after = f"https://{settings.public_host}/telephony/twilio/after?token=parley-token"
        voice = "/telephony/twilio/voice?token=parley-token"
        form = {"CallSid": "CA42", "CallStatus": "in-progress"}
        signature = twilio.compute_signature(TOKEN, f"https://{settings.public_host}{voice}", form)
        twiml = httpx.post(url + voice, data=form, headers={twilio.SIGNATURE_HEADER: signature}).text
        assert f'<Connect action="{after}">' in twiml

        def ask(form: dict, signed: bool = True) -> httpx.Response:
            headers = {twilio.SIGNATURE_HEADER: twilio.compute_signature(TOKEN, after, form)} if signed else {}
            return httpx.post(f"{url}/telephony/twilio/after?token=parley-token", data=form, headers=headers)

        assert "<Hangup/>" in ask(form).text            # an end_call, a caller who hung up: nothing follows
        transfers(app).mark("CA42")                      # what TwilioCall does once the announcement was heard
        assert ask(form, signed=False).status_code == 403
        assert ask({"CallSid": "CA43"}).text.endswith("<Response><Hangup/></Response>")   # another call
        assert ask(form).text.endswith("<Response><Dial>+15550100199</Dial></Response>")
        assert "<Hangup/>" in ask(form).text            # once
    services.shutdown()


def test_stream_with_a_valid_signature_is_accepted(signed):
    host, app = signed
    calls_before = telephony_stats(app).calls
    signature = twilio.compute_signature(TOKEN, f"wss://{app.state.settings.public_host}/telephony/twilio")

    async def go():
        async with connect(f"ws://{host}/telephony/twilio",
                           additional_headers={twilio.SIGNATURE_HEADER: signature}) as ws:
            await ws.send(start_message())
            await ws.send(STOP)
            await asyncio.wait_for(ws.wait_closed(), 10)
            return ws.close_code

    assert asyncio.run(go()) == 1000
    assert telephony_stats(app).calls == calls_before + 1


@pytest.mark.parametrize("signature", [None, "d3JvbmcgYnV0IHdlbGwgZm9ybWVkIQ=="])
def test_stream_without_a_valid_signature_gets_403_and_no_session(signed, signature, monkeypatch):
    host, app = signed
    created = []
    monkeypatch.setattr(Session, "__init__", lambda self, *a, **k: created.append(self))
    stats = telephony_stats(app)
    calls_before, refused_before = stats.calls, stats.refused["signature"]
    headers = {twilio.SIGNATURE_HEADER: signature} if signature else {}

    async def go():
        async with connect(f"ws://{host}/telephony/twilio", additional_headers=headers):
            pass

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(go())
    assert refused.value.response.status_code == 403
    assert stats.calls == calls_before and stats.refused["signature"] == refused_before + 1
    assert not created and not app.state.calls
