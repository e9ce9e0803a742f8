"""What a call over one WebSocket does whatever its protocol (Twilio's Media Streams, OpenAI's Realtime): its
tasks, its Session, and one way to end it. A task that fails ends the call, never the server."""
import asyncio
import logging
from typing import Callable

from fastapi import WebSocket
from fastapi.responses import PlainTextResponse
from starlette.websockets import WebSocketState

log = logging.getLogger(__name__)

CLOSE_NORMAL, CLOSE_ERROR = 1000, 1011


def no_room(state) -> tuple[str, str] | None:
    """Why the server (its app.state) cannot take a new call now, as (kind, reason); None when it can."""
    if state.services is None or not state.services.ready:
        return "not_ready", "models still loading; try again shortly"
    if len(state.calls) >= state.settings.max_sessions:
        return "busy", f"busy: all {state.settings.max_sessions} sessions are in use"
    return None


async def refuse_handshake(websocket: WebSocket, status: int, reason: str) -> None:
    """Answer the WebSocket handshake with an HTTP status and its reason; nothing is allocated for the call."""
    try:
        await websocket.send_denial_response(PlainTextResponse(reason, status_code=status))
    except RuntimeError:   # the server lacks the denial-response extension: a bare 403
        await websocket.close(code=1008, reason=reason)


class SocketCall:
    """The lifecycle of a call on `websocket`; a transport adds its protocol (`name()` names it in the log)."""

    TRANSPORT = "socket"

    def __init__(self, websocket: WebSocket, on_closed: Callable[["SocketCall"], None]):
        self.websocket = websocket
        self.on_closed = on_closed          # the server's: the call leaves its list of live calls
        self.session = None                 # app.session.Session, once the call has one
        self.closing = False
        self._tasks: set[asyncio.Task] = set()
        self._closed = asyncio.Event()

    def name(self) -> str:
        return f"#{id(self):x}"

    async def close(self, reason: str, code: int = CLOSE_NORMAL) -> None:
        """End the call: tasks, session, socket. Idempotent."""
        if self.closing:
            await self._closed.wait()
            return
        self.closing = True
        log.info("%s call %s closing: %s", self.TRANSPORT, self.name(), reason)
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        if self.session is not None:
            try:
                await self.session.close()
            except Exception:
                log.exception("%s call %s: session close failed", self.TRANSPORT, self.name())
        if self.websocket.application_state == WebSocketState.CONNECTED:
            try:
                await self.websocket.close(code=code, reason=reason[:120])
            except Exception:   # the peer went away while we were closing
                log.debug("%s call %s: socket already gone", self.TRANSPORT, self.name(), exc_info=True)
        await self.closed(reason)
        self.on_closed(self)
        self._closed.set()

    async def closed(self, reason: str) -> None:
        """After the socket closed, before the server forgets the call (a transport's last word)."""

    def close_soon(self, reason: str, code: int = CLOSE_NORMAL) -> None:
        """close() from a synchronous callback."""
        if not self.closing:
            asyncio.ensure_future(self.close(reason, code))

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def run_session(self) -> None:
        """The session until it ends (its input ended, or a turn failed): then the call ends."""
        try:
            await self.session.run()
        finally:
            self.close_soon("session ended", CLOSE_ERROR)

    def spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=f"{self.TRANSPORT}-{self.name()}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s call %s: task %s failed", self.TRANSPORT, self.name(), task.get_name(),
                      exc_info=task.exception())
            self.close_soon(f"{task.get_name()} failed", CLOSE_ERROR)
