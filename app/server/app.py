"""The HTTP server: the page, WebRTC offers and health. Models are loaded and warmed once, at startup."""
import asyncio
import logging
import math
import os
import statistics
import time
from collections import deque
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from app.api.chat import router as openai_router
from app.api.realtime import router as realtime_router
from app.pipeline.services import Services
from app.server.auth import RateLimit, TokenGuard
from app.server.metrics import Metrics
from app.server.request_body import read_limited
from app.settings import REPO_ROOT, Settings
from app.transports.base import no_room
from app.transports.twilio import STREAM_PATH
from app.transports.twilio import router as telephony_router
from app.transports.webrtc import Call, OfferError, parse_offer

log = logging.getLogger(__name__)

WEB_DIR = REPO_ROOT / "web"
MAX_OFFER_BYTES = 64 * 1024       # a browser offer is ~5 KB; anything far larger is not an offer


class LoopLag:
    """How late the event loop wakes a task sleeping `interval_ms`: the loop's responsiveness, in ms."""

    def __init__(self, interval_ms: float = 10.0, window: int = 3000):
        self.interval_ms = interval_ms
        self.samples_ms: deque[float] = deque(maxlen=window)   # overshoot of each sleep; 3000 x 10 ms = the last ~30 s
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="loop-lag")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        interval_s = self.interval_ms / 1000
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(interval_s)
            self.samples_ms.append(max(0.0, (time.perf_counter() - t0 - interval_s) * 1000))

    def summary(self) -> dict:
        """p50, p99 and max overshoot in ms over the recent window."""
        samples = sorted(self.samples_ms)
        if not samples:
            return {"p50": None, "p99": None, "max": None, "samples": 0}
        p99 = samples[min(len(samples) - 1, int(0.99 * len(samples)))]
        return {"p50": round(statistics.median(samples), 2), "p99": round(p99, 2),
                "max": round(samples[-1], 2), "samples": len(samples)}


def process_stats() -> dict:
    """This process's resident memory (MB), open file descriptors and OS threads (the models' pools included);
    None where there is no /proc."""
    try:
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
        rss_mb = round(int(status["VmRSS"].split()[0]) / 1024, 1)
        return {"rss_mb": rss_mb, "open_fds": len(os.listdir("/proc/self/fd")), "threads": int(status["Threads"])}
    except (OSError, ValueError, KeyError):
        return {"rss_mb": None, "open_fds": None, "threads": None}


def create_app(settings: Settings, services=None) -> FastAPI:
    """The Parley app; `services` (or a test double) skips loading the models named by `settings`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loop = asyncio.get_running_loop()
        owned = services is None
        app.state.services = await loop.run_in_executor(None, _load, settings) if owned else services
        if not app.state.services.ready:
            await loop.run_in_executor(None, app.state.services.warm_up)
        app.state.loop_lag.start()
        try:
            yield
        finally:
            await asyncio.gather(*(call.close("server shutting down") for call in list(app.state.calls)))
            app.state.loop_lag.stop()
            if owned:
                app.state.services.shutdown()

    app = FastAPI(title="Parley", lifespan=lifespan)
    app.state.settings = settings
    app.state.services = services
    app.state.calls = set()           # every live Call; each removes itself when it closes
    app.state.loop_lag = LoopLag()
    app.state.metrics = Metrics(lambda: list(app.state.calls))
    app.state.offer_rate = RateLimit(settings.offer_rate_per_min)
    if settings.auth_token:
        # Twilio's stream may carry the token in its start message instead (app.transports.twilio)
        app.add_middleware(TokenGuard, token=settings.auth_token, deferred=(STREAM_PATH,))

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html")

    @app.get("/healthz")
    async def healthz(request: Request) -> dict:
        state = request.app.state
        return {
            "ready": bool(state.services is not None and state.services.ready),
            "sessions": len(state.calls),
            "max_sessions": state.settings.max_sessions,
            "loop_lag_ms": state.loop_lag.summary(),
            # the event loop's tasks (this request's among them): a call that leaves one behind grows the count
            "process": process_stats() | {"tasks": len(asyncio.all_tasks())},
        }

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        """Prometheus exposition (app.server.metrics)."""
        body, content_type = request.app.state.metrics.render()
        return Response(body, media_type=content_type)

    @app.post("/offer")
    async def offer(request: Request):
        state = request.app.state

        def _refuse(status: int, reason: str, retry_after_s: float | None = None) -> JSONResponse:
            state.metrics.refuse(Call.TRANSPORT, str(status))
            return _refusal(status, reason, retry_after_s)

        origin = request.headers.get("origin")
        if origin is not None and not _origin_allowed(origin, request, state.settings):
            return _refuse(403, f"a page from {origin} may not start a call here (PARLEY_ALLOWED_ORIGINS)")
        client = request.client.host if request.client else "unknown"
        wait_s = state.offer_rate.retry_after_s(client)
        if wait_s:
            return _refuse(429, f"too many calls from {client}: at most {state.settings.offer_rate_per_min} a minute",
                           wait_s)
        media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type != "application/json":
            # a form or text/plain post needs no CORS preflight: any page on any site could open a session
            return _refuse(415, f"the offer must be sent as application/json, not {media_type or 'no content type'}")
        body = await read_limited(request, MAX_OFFER_BYTES)
        if body is None:
            return _refuse(413, f"offer too large: the limit is {MAX_OFFER_BYTES} bytes")
        try:
            description = parse_offer(body)
        except OfferError as exc:
            return _refuse(400, str(exc))
        if (refused := no_room(state)) is not None:
            return _refuse(503, refused[1], 5)
        call = Call(state.services, connect_timeout_s=state.settings.connect_timeout_s,
                    on_closed=state.calls.discard, observer=state.metrics.observer(Call.TRANSPORT))
        state.calls.add(call)
        try:
            answer = await call.answer(description)
        except Exception as exc:  # aiortc rejects what it cannot negotiate with assorted errors
            await call.close("offer rejected")
            return _refuse(400, f"cannot answer this offer: {exc}")
        state.metrics.start(Call.TRANSPORT)
        return {"sdp": answer.sdp, "type": answer.type}

    app.include_router(telephony_router)
    app.include_router(openai_router)
    app.include_router(realtime_router)
    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    return app


def _load(settings: Settings):
    return Services.load(settings)


def _origin_allowed(origin: str, request: Request, settings: Settings) -> bool:
    """The page's own origin (the host it was served from), or one of settings.allowed_origins."""
    allowed = {o.strip().rstrip("/") for o in settings.allowed_origins.split(",") if o.strip()}
    own = {f"{scheme}://{request.headers.get('host', '')}" for scheme in ("http", "https")}
    return origin.rstrip("/") in allowed | own


def _refusal(status: int, reason: str, retry_after_s: float | None = None) -> JSONResponse:
    log.info("offer refused (%d): %s", status, reason)
    headers = None if retry_after_s is None else {"Retry-After": str(math.ceil(retry_after_s))}
    return JSONResponse({"error": reason}, status_code=status, headers=headers)
