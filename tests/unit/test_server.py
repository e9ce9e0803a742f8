"""The HTTP surface: the page, /healthz, and POST /offer's refusals, cap, connect timeout and shutdown."""
import asyncio
import gc
import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import AudioStreamTrack
from fastapi.testclient import TestClient

from app.cli import main as parley
from app.pipeline.services import Services
from app.pipeline.trace import TurnTrace
from app.server.app import MAX_OFFER_BYTES, create_app
from app.settings import Settings
from tests.fakes import FakeEngine, FakeToolbox
from tests.prom import sample

WEB_DIR = Path(__file__).resolve().parents[2] / "web"


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


def test_a_call_is_refused_while_turns_wait_for_the_language_model():
    """Admission by measured load: past max_turn_wait_s of a caller's work waiting for the LLM thread, a new
    call gets 503 though sessions are free; with nobody on the line, or once the wait is old news, it is let in."""
    services = Services(asr=None, tts=None, engine=FakeEngine(lambda m: "Hello."), toolbox=FakeToolbox(),
                        system_prompt=None, ready=True)
    app = create_app(Settings(connect_timeout_s=30.0, max_turn_wait_s=0.2), services)
    offer = {"sdp": offer_sdp(), "type": "offer"}
    with TestClient(app) as client:
        lanes = services.llm_lanes
        for _ in range(lanes.width):                  # every worker busy
            lanes.submit(time.sleep, 0.4)
        lanes.submit(lambda: None).result(5)          # a turn that waited ~0.4 s for the model
        assert lanes.turn_wait_s() >= 0.3
        assert client.post("/offer", json=offer).status_code == 200    # nobody on the line: the wait is history
        refused = client.post("/offer", json=offer)
        assert refused.status_code == 503 and "waiting" in refused.json()["error"]
        assert refused.headers["retry-after"] == "5" and len(app.state.calls) == 1
        assert lanes.turn_wait_s(window_s=0.0) == 0.0   # out of the window, it no longer counts
    services.shutdown()


def test_a_call_is_refused_while_the_calls_on_the_line_are_answered_slowly():
    """Admission by measured load, where no turn waits for a worker (forwards shared by many callers slow every
    turn): a new call gets 503 while half the replies of the calls on the line in the last 30 s came later than
    max_turn_wait_s after the caller's last word; one slow turn among quick ones, or slow turns long past, do not
    refuse it."""
    services = Services(asr=None, tts=None, engine=FakeEngine(lambda m: "Hello."), toolbox=FakeToolbox(),
                        system_prompt=None, ready=True)
    app = create_app(Settings(connect_timeout_s=30.0, max_turn_wait_s=1.5), services)
    offer = {"sdp": offer_sdp(), "type": "offer"}

    def answered(session, reply_s: float, ago_s: float = 1.0) -> None:
        """A turn of `session` whose first reply audio went out ago_s seconds ago, reply_s after the last word."""
        trace = TurnTrace(end_of_turn_delay_ms=300.0, start_s=time.perf_counter() - ago_s - (reply_s - 0.3))
        trace.marks["first_audio_out"] = time.perf_counter() - ago_s
        session.turns.append(trace)

    with TestClient(app) as client:
        assert client.post("/offer", json=offer).status_code == 200
        (session,) = [call.session for call in app.state.calls]
        for reply_s in (0.8, 0.9, 2.5):
            answered(session, reply_s)
        assert client.post("/offer", json=offer).status_code == 200     # one slow turn: the median is 0.9 s
        for reply_s in (1.9, 2.2):
            answered(session, reply_s)
        refused = client.post("/offer", json=offer)
        assert refused.status_code == 503 and "wait 1.9 s for a reply" in refused.json()["error"]
        assert refused.headers["retry-after"] == "5" and len(app.state.calls) == 2
        for turn in session.turns:     # the same turns, half a minute ago
            turn.start_s -= 40.0
            turn.marks["first_audio_out"] -= 40.0
        assert client.post("/offer", json=offer).status_code == 200
    services.shutdown()


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


# --- access: the token, the page's origins, the offer rate ------------------------------------------------------

TOKEN = "s3cret-token"


@pytest.fixture
def guarded():
    services = Services(asr=None, tts=None, engine=FakeEngine(lambda m: "Hello."), toolbox=FakeToolbox(),
                        system_prompt=None, ready=True)
    app = create_app(Settings(max_sessions=2, connect_timeout_s=1.0, auth_token=TOKEN, public_host="example.com",
                              allowed_origins="https://partner.example", offer_rate_per_min=3), services)
    with TestClient(app) as client:
        yield app, client
    services.shutdown()


def test_every_route_but_the_page_and_health_wants_the_token(guarded):
    from starlette.routing import Mount, WebSocketRoute
    from starlette.websockets import WebSocketDisconnect

    from app.server.auth import is_public
    from app.transports.twilio import STREAM_PATH

    app, client = guarded
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    walked = set()
    for route in _every_route(app.routes):
        if isinstance(route, Mount) or is_public(route.path):
            continue
        walked.add(route.path)
        if isinstance(route, WebSocketRoute):
            if route.path == STREAM_PATH:
                continue   # its token may come in Twilio's start message: the next test
            with pytest.raises(WebSocketDisconnect) as denied:
                with client.websocket_connect(route.path + "?token=wrong"):
                    pass
            assert denied.value.code == 1008, route.path
            continue
        for method in route.methods - {"HEAD"}:
            without = client.request(method, route.path)
            wrong = client.request(method, route.path, headers={"Authorization": "Bearer nope"})
            with_header = client.request(method, route.path, headers=bearer)
            with_query = client.request(method, route.path, params={"token": TOKEN})
            assert without.status_code == wrong.status_code == 401, (method, route.path, without.text)
            assert without.headers["www-authenticate"] == "Bearer"
            assert with_header.status_code != 401 and with_query.status_code != 401, (method, route.path)
    assert {"/offer", "/metrics", "/telephony/twilio/voice", "/telephony/twilio", "/v1/realtime"} <= walked
    for path in ("/", "/healthz", "/static/app.js"):
        assert client.get(path).status_code == 200, path


def _every_route(routes, prefix=""):
    """Routes, with those of included routers (FastAPI keeps them apart), their paths prefixed."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _every_route(included.routes, prefix + route.include_context.prefix)
        else:
            assert not prefix, "a prefixed router: give the walk its prefix"
            yield route


def test_twilio_carries_the_token_from_the_webhook_into_its_stream(guarded):
    from starlette.websockets import WebSocketDisconnect

    app, client = guarded
    twiml = client.post("/telephony/twilio/voice", params={"token": TOKEN}, content=b"CallSid=CA1",
                        headers={"content-type": "application/x-www-form-urlencoded"}).text
    assert f'<Parameter name="token" value="{TOKEN}"/>' in twiml

    def start(parameters):
        return {"event": "start", "streamSid": "MZ1", "start": {
            "streamSid": "MZ1", "callSid": "CA1", "customParameters": parameters,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}

    with client.websocket_connect("/telephony/twilio") as ws:      # no token at the handshake ...
        ws.send_json(start({"caller": "x"}))                         # ... nor in the start message
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert closed.value.code == 1008 and not app.state.calls
    with client.websocket_connect("/telephony/twilio") as ws:
        ws.send_json(start({"token": TOKEN}))
        deadline = time.monotonic() + 5
        while not any(call.info for call in app.state.calls):
            assert time.monotonic() < deadline, "the call with the token did not start"
            time.sleep(0.01)
        assert next(iter(app.state.calls)).info.custom_parameters == {}   # the token is not handed on
        ws.send_json({"event": "stop", "streamSid": "MZ1"})
    with client.websocket_connect(f"/telephony/twilio?token={TOKEN}") as ws:   # a client that can show it at once
        ws.send_json(start({}))
        deadline = time.monotonic() + 5
        while not any(call.info for call in app.state.calls):
            assert time.monotonic() < deadline, "the call with the token at the handshake did not start"
            time.sleep(0.01)
        ws.send_json({"event": "stop", "streamSid": "MZ1"})


def test_offers_from_other_sites_and_too_many_offers_are_refused(guarded):
    app, client = guarded
    bearer = {"Authorization": f"Bearer {TOKEN}", **JSON}
    body = json.dumps({"sdp": "v=0 not really", "type": "offer"})
    other = client.post("/offer", content=body, headers={**bearer, "Origin": "https://evil.example"})
    assert other.status_code == 403 and "evil.example" in other.json()["error"]
    for origin in ("http://testserver", "https://partner.example", None):   # our own page, a listed one, no browser
        headers = bearer if origin is None else {**bearer, "Origin": origin}
        assert client.post("/offer", content=body, headers=headers).status_code == 400   # let in, then refused as SDP
    limited = client.post("/offer", content=body, headers=bearer)    # the 4th in a minute, limit 3
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
