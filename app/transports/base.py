"""What every call does whatever carries its audio: its Session, its tasks, one way to end it, and the clock that
paces its outgoing audio. A transport adds only its wire format: the browser's peer connection (webrtc), a
WebSocket's protocol (SocketCall: Twilio, OpenAI's Realtime), this computer's sound card (mic), a file (file).
A task that fails ends its call, never the server."""
import asyncio
import logging
import statistics
import time
from typing import Callable

from fastapi import WebSocket
from fastapi.responses import PlainTextResponse
from starlette.websockets import WebSocketState

log = logging.getLogger(__name__)

CLOSE_NORMAL, CLOSE_ERROR = 1000, 1011
REPLY_WINDOW_S = 30.0   # recent_reply_s: the turns that tell the load a new call would join


def no_room(state) -> tuple[str, str] | None:
    """Why the server (its app.state) cannot take a new call now, as (kind, reason); None when it can: a free
    session, and the calls on the line answered within max_turn_wait_s (the measured load: a turn's work waiting for
    a language-model worker, or half their recent turns' replies slower than that)."""
    if state.services is None or not state.services.ready:
        return "not_ready", "models still loading; try again shortly"
    if len(state.calls) >= state.settings.max_sessions:
        return "busy", f"busy: all {state.settings.max_sessions} sessions are in use; try again later"
    limit_s = state.settings.max_turn_wait_s
    wait_s = state.services.llm_lanes.turn_wait_s() if state.calls else 0.0
    if wait_s > limit_s:
        return "busy", f"busy: callers' turns are waiting {wait_s:.1f} s for the language model"
    reply_s = recent_reply_s(state.calls)
    if reply_s > limit_s:
        return "busy", f"busy: the callers on the line wait {reply_s:.1f} s for a reply (their median, of late)"
    return None


def recent_reply_s(calls, window_s: float = REPLY_WINDOW_S) -> float:
    """The median time from a caller's last word to the reply's first audio sent (the turns' e2e_latency), over the
    turns of `calls` answered in the last window_s seconds; 0.0 when there are none.

    NOTE: turns shared forwards slow each other long before a turn waits for a worker (turn_wait_s sees only load
    past PARLEY_LLM_BATCH generations at once): five long calls at once (app.loadtest --soak) waited a median 1.75 s
    at the caller, ~1.5 s by this measure, with no turn waiting for a worker. A median, not a slowest turn: a call
    whose window moved (app.agent.loop.Agent.prompt) pays one slow turn that says little about the load."""
    now, replies = time.perf_counter(), []
    for call in calls:
        session = getattr(call, "session", None)
        for trace in reversed(session.turns if session is not None else []):
            sent = trace.marks.get("first_audio_out")
            if sent is None:
                continue
            if now - sent > window_s:
                break   # newest last: the rest are older still
            replies.append(trace.e2e_latency_ms() / 1000)
    return statistics.median(replies) if replies else 0.0


async def refuse_handshake(websocket: WebSocket, status: int, reason: str) -> None:
    """Answer the WebSocket handshake with an HTTP status and its reason; nothing is allocated for the call."""
    try:
        await websocket.send_denial_response(PlainTextResponse(reason, status_code=status))
    except RuntimeError:   # the server lacks the denial-response extension: a bare 403
        await websocket.close(code=1008, reason=reason)


class Call:
    """A call's lifecycle: its Session (`session`, once it has one), the tasks it spawns, close() once.

    A transport overrides hang_up() to let go of its medium (a socket, a peer connection, a sound card) and may
    override closed() for a last word after it; `name()` names the call in the log."""

    TRANSPORT = "call"

    def __init__(self, on_closed: Callable[["Call"], None] | None = None):
        self.on_closed = on_closed          # the server's: the call leaves its list of live calls
        self.session = None                 # app.pipeline.session.Session, once the call has one
        self.closing = False
        self._tasks: set[asyncio.Task] = set()
        self._closer: asyncio.Task | None = None   # close_soon's task (a reference keeps it alive)
        self._closed = asyncio.Event()

    def name(self) -> str:
        return f"#{id(self):x}"

    async def close(self, reason: str, code: int = CLOSE_NORMAL, error: bool = False) -> None:
        """End the call: session, tasks, medium. Idempotent; a second caller waits for the first to finish.
        error: the call failed, and the client is told why (an `error` event) before it ends."""
        if self.closing:
            await self._closed.wait()
            return
        self.closing = True
        log.info("%s call %s closing: %s", self.TRANSPORT, self.name(), reason)
        try:
            if error and self.session is not None:
                await self.session.report_error(f"the call failed: {reason}")
            if self.session is not None:
                try:
                    await self.session.close()   # first: its run() ends by itself, its turn is cancelled
                except Exception:
                    log.exception("%s call %s: session close failed", self.TRANSPORT, self.name())
            current = asyncio.current_task()
            for task in list(self._tasks):
                if task is not current:
                    task.cancel()
            await self.hang_up(reason, code)
            await self.closed(reason)
        finally:
            if self.on_closed is not None:
                self.on_closed(self)
            self._closed.set()

    async def hang_up(self, reason: str, code: int) -> None:
        """Let go of the transport's medium (after the session and the tasks have stopped)."""

    async def closed(self, reason: str) -> None:
        """After the medium is let go, before the server forgets the call (a transport's last word)."""

    def close_soon(self, reason: str, code: int = CLOSE_NORMAL, error: bool = False) -> None:
        """close() from a synchronous callback, or from a task close() would cancel."""
        if not self.closing and self._closer is None:
            self._closer = asyncio.create_task(self.close(reason, code, error),
                                               name=f"{self.TRANSPORT}-{self.name()}-close")

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def run_session(self) -> None:
        """The session until it ends (its input ended, or a turn failed): then the call ends."""
        try:
            await self.session.run()
        finally:
            self.close_soon("session ended", CLOSE_ERROR)

    def spawn(self, coro, name: str) -> asyncio.Task:
        """Run coro as one of the call's tasks: cancelled when the call closes; if it fails, the call closes."""
        task = asyncio.create_task(coro, name=f"{self.TRANSPORT}-{self.name()}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s call %s: task %s failed", self.TRANSPORT, self.name(), task.get_name(),
                      exc_info=task.exception())
            self.close_soon(f"{task.get_name()} failed ({type(task.exception()).__name__})", CLOSE_ERROR, error=True)


class SocketCall(Call):
    """A call over one WebSocket (Twilio's Media Streams, OpenAI's Realtime); a subclass adds its protocol."""

    TRANSPORT = "socket"

    def __init__(self, websocket: WebSocket, on_closed: Callable[["SocketCall"], None]):
        super().__init__(on_closed)
        self.websocket = websocket

    async def hang_up(self, reason: str, code: int) -> None:
        if self.websocket.application_state == WebSocketState.CONNECTED:
            try:
                await self.websocket.close(code=code, reason=reason[:120])
            except Exception:   # the peer went away while we were closing
                log.debug("%s call %s: socket already gone", self.TRANSPORT, self.name(), exc_info=True)


class PacingClock:
    """The wall clock that paces a transport's outgoing frames: `await wait()` returns when frame n is due,
    n / frame_rate after the first. A loop that fell more than MAX_LATE_S behind (an event-loop stall) resyncs
    rather than bursting the frames it missed; the frame count goes on (a WebRTC track's timestamps)."""

    MAX_LATE_S = 0.2

    def __init__(self, frame_s: float):
        self.frame_s = frame_s
        self.frames = 0                    # frames due so far, the one being waited for included
        self._start_s: float | None = None  # monotonic time of frame 0

    async def wait(self) -> None:
        now_s = time.monotonic()
        if self._start_s is None:
            self._start_s = now_s
            return
        self.frames += 1
        delay_s = self._start_s + self.frames * self.frame_s - now_s
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        elif delay_s < -self.MAX_LATE_S:
            log.warning("outgoing audio %.0f ms behind the clock; resyncing", -delay_s * 1000)
            self._start_s = now_s - self.frames * self.frame_s
