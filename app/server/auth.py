"""Who may use the server: an optional shared token, the page's origins, and a rate limit on new browser calls.

With PARLEY_AUTH_TOKEN set, every route but the page, its static files and /healthz wants the token: as
`Authorization: Bearer <token>`, or as `?token=<token>` where a client cannot set headers (a browser's WebSocket,
the page opened as `/?token=...`, which then sends it with its offer). A route added later is guarded too. Twilio
cannot put a query string in a Media Stream URL, so its stream may instead carry the token as the `token`
<Parameter> of its `start` message, which the voice webhook writes into its TwiML (app.transports.twilio).
"""
import hmac
import time
from collections import deque

from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

PUBLIC_PATHS = ("/", "/healthz", "/favicon.ico")
PUBLIC_PREFIXES = ("/static/",)
TOKEN_PARAMETER = "token"


def token_matches(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def presented_token(scope: Scope) -> str | None:
    """The token a request or WebSocket handshake carries (bearer header first, then the query)."""
    authorization = Headers(scope=scope).get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return QueryParams(scope.get("query_string", b"").decode("latin-1")).get(TOKEN_PARAMETER)


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


class TokenGuard:
    """ASGI middleware: a request to a guarded path without the token gets 401 (a WebSocket handshake: 403).
    `deferred` paths (Twilio's stream) are let through: their handler checks the token later."""

    def __init__(self, app: ASGIApp, token: str, deferred: tuple[str, ...] = ()):
        self.app, self.token, self.deferred = app, token, deferred

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or is_public(scope["path"]):
            return await self.app(scope, receive, send)
        if token_matches(self.token, presented_token(scope)):
            scope.setdefault("state", {})["authenticated"] = True
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket" and scope["path"] in self.deferred:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})   # before the accept: the handshake gets 403
            return
        response = JSONResponse({"error": "missing or wrong token: send Authorization: Bearer <token>"},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


class RateLimit:
    """At most `per_minute` events per key over any sliding minute."""

    def __init__(self, per_minute: int, clock=time.monotonic):
        self.per_minute, self.clock = per_minute, clock
        self._seen: dict[str, deque[float]] = {}

    def retry_after_s(self, key: str) -> float:
        """0 and the event counted when `key` is within its limit; else the seconds until it will be."""
        now = self.clock()
        seen = self._seen.setdefault(key, deque())
        while seen and seen[0] <= now - 60:
            seen.popleft()
        if len(seen) >= self.per_minute:
            return max(0.0, seen[0] + 60 - now)
        seen.append(now)
        if len(self._seen) > 10_000:   # forget idle clients
            for other in [k for k, v in self._seen.items() if not v or v[-1] <= now - 60]:
                del self._seen[other]
        return 0.0
