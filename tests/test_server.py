"""The HTTP surface: the page, /healthz, and POST /offer's refusals, cap, connect timeout and shutdown."""
import asyncio
import gc
import json
import re
import time
from pathlib import Path

from collections import Counter

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import AudioStreamTrack
from fastapi.testclient import TestClient

from app.cli import main as parley
from app.server import MAX_OFFER_BYTES, create_app
from app.services import Services
from app.settings import Settings
from tests.fakes import FakeEngine, FakeToolbox
from tests.prom import sample

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


def offer_sdp(audio: bool = True) -> str:
    """A real offer from an aiortc peer (closed at once: these offers never connect)."""

    async def make() -> str:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.createDataChannel("events")
        if audio:
            pc.addTrack(AudioStreamTrack())
        await pc.setLocalDescription(await pc.createOffer())
        await pc.close()
        return pc.localDescription.sdp

    return asyncio.run(make())


def live_peer_connections() -> int:
    gc.collect()
    return sum(type(o) is RTCPeerConnection and o.connectionState != "closed" for o in gc.get_objects())


@pytest.fixture
def served():
    """A running app whose Services hold no speech models: nothing here sends audio."""
    services = Services(asr=None, tts=None, engine=FakeEngine(lambda m: "Hello."), toolbox=FakeToolbox(),
                        system_prompt=None, ready=True)
    app = create_app(Settings(max_sessions=2, connect_timeout_s=1.0), services)
    with TestClient(app) as client:
        yield app, client
    services.shutdown()


def test_page_is_served_and_self_contained(served):
    _, client = served
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="talk"' in page.text
    for asset in re.findall(r'(?:src|href)="(static/[^"]+)"', page.text):
        assert client.get(f"/{asset}").status_code == 200, asset
    for path in WEB_DIR.iterdir():   # works offline: nothing is fetched from another origin
        assert not re.search(r"https?://|//cdn", path.read_text()), path


def test_healthz_reports_readiness_sessions_and_loop_lag(served):
    _, client = served
    time.sleep(0.1)
    health = client.get("/healthz").json()
    assert health["ready"] is True and health["sessions"] == 0 and health["max_sessions"] == 2
    assert health["loop_lag_ms"]["samples"] > 0 and health["loop_lag_ms"]["max"] >= 0


JSON = {"content-type": "application/json"}


def _bad_offers() -> dict[str, tuple[dict, int]]:
    sdp = offer_sdp()
    return {
        "empty body": ({"content": b"", "headers": JSON}, 400),
        "not JSON": ({"content": b"v=0 hello", "headers": JSON}, 400),
        "SDP as text/plain": ({"content": json.dumps({"sdp": sdp, "type": "offer"}),
                               "headers": {"content-type": "text/plain"}}, 415),
        "no content type": ({"content": json.dumps({"sdp": sdp, "type": "offer"})}, 415),
        "a JSON list": ({"json": [sdp, "offer"]}, 400),
        "sdp is a number": ({"json": {"sdp": 42, "type": "offer"}}, 400),
        "type is a list": ({"json": {"sdp": sdp, "type": ["offer"]}}, 400),
        "an answer": ({"json": {"sdp": sdp, "type": "answer"}}, 400),
        "not SDP": ({"json": {"sdp": "hello, I would like a table", "type": "offer"}}, 400),
        "garbage SDP": ({"json": {"sdp": "v=0\r\nm=audio x", "type": "offer"}}, 400),
        "no audio m-line": ({"json": {"sdp": offer_sdp(audio=False), "type": "offer"}}, 400),
        "receive-only audio": ({"json": {"sdp": sdp.replace("a=sendrecv", "a=recvonly"), "type": "offer"}}, 400),
        "no ICE credentials": ({"json": {"sdp": re.sub(r"a=ice-(ufrag|pwd):.*\r\n", "", sdp), "type": "offer"}}, 400),
        "aiortc refuses it": ({"json": {"sdp": sdp.replace("a=rtcp-mux\r\n", ""), "type": "offer"}}, 400),
        "a 1 MB body": ({"content": b'{"sdp": "' + b"v" * 1_000_000 + b'", "type": "offer"}', "headers": JSON}, 413),
    }


def test_bad_offers_get_a_4xx_with_a_reason_and_leave_nothing_behind(served):
    app, client = served
    before = live_peer_connections()
    refused = Counter()
    for name, (request, status) in _bad_offers().items():
        response = client.post("/offer", **request)
        assert response.status_code == status, (name, response.text)
        assert response.json()["error"], name
        assert not app.state.calls, name
        refused[str(status)] += 1
    assert live_peer_connections() == before
    metrics = client.get("/metrics").text
    for reason, count in refused.items():   # (a fresh app: each counter starts at 0)
        assert sample(metrics, "parley_sessions_refused_total", transport="webrtc", reason=reason) == count, reason
    assert MAX_OFFER_BYTES < 1_000_000   # the 1 MB case tests the limit, not a parse error


def test_sessions_are_capped_and_unconnected_offers_expire(served):
    app, client = served
    before = live_peer_connections()
    offer = {"sdp": offer_sdp(), "type": "offer"}
    for _ in range(2):
        answer = client.post("/offer", json=offer)
        assert answer.status_code == 200 and answer.json()["type"] == "answer"
        assert "m=audio" in answer.json()["sdp"]
    refused = client.post("/offer", json=offer)
    assert refused.status_code == 503 and "2 sessions" in refused.json()["error"]
    assert client.get("/healthz").json()["sessions"] == 2
    deadline = time.monotonic() + 10   # connect_timeout_s is 1 s; these peers are gone, so nothing connects
    while client.get("/healthz").json()["sessions"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.get("/healthz").json()["sessions"] == 0
    assert live_peer_connections() == before
    assert client.post("/offer", json=offer).status_code == 200   # room again


def test_shutdown_closes_every_call():
    services = Services(asr=None, tts=None, engine=FakeEngine(lambda m: "Hello."), toolbox=FakeToolbox(),
                        system_prompt=None, ready=True)
    app = create_app(Settings(connect_timeout_s=30.0), services)
    with TestClient(app) as client:
        assert client.post("/offer", json={"sdp": offer_sdp(), "type": "offer"}).status_code == 200
        (call,) = app.state.calls
    services.shutdown()
    assert not app.state.calls and call.pc.connectionState == "closed"


def test_serve_refuses_bad_tls_flags(capsys):
    assert parley(["serve", "--ssl-certfile", "cert.pem"]) == 2
    assert "give both or neither" in capsys.readouterr().err
    assert parley(["serve", "--ssl-certfile", "/nonexistent/cert.pem", "--ssl-keyfile", "/nonexistent/key.pem"]) == 2
    assert "no such file" in capsys.readouterr().err
