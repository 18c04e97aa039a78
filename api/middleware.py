"""Pure ASGI middlewares: write auth, body size limit, request metrics.

Auth and the body limit run before FastAPI parses anything, so an unauthenticated or oversized
request is refused (401/413) before its body is even read as JSON, and nothing is written.
"""

from __future__ import annotations

import hmac
import json
import threading
import time
from collections import Counter
from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def _json_response(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    data = json.dumps(body).encode()
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers],
    })
    await send({"type": "http.response.body", "body": data})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return v
    return None


# Writes that need no token: an engine's runtime reports its misses with no write token
# (POST /v1/misses bounds its own body and items). The OpenAPI document follows this set.
OPEN_WRITES = frozenset({("POST", "/v1/misses")})


class WriteAuthMiddleware:
    """Every non-read request needs `Authorization: Bearer <KVTUNE_API_TOKEN>`. With no token
    configured, writes are refused: an open write endpoint is never the default. `open_writes` names
    the (method, path) pairs that take no token (engines' reports, which they send without one)."""

    def __init__(self, app: ASGIApp, token: str | None, open_writes: frozenset[tuple[str, str]] = frozenset()) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.open_writes = open_writes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in READ_METHODS:
            return await self.app(scope, receive, send)
        if (scope["method"], scope.get("path", "")) in self.open_writes:
            return await self.app(scope, receive, send)
        auth = _header(scope, b"authorization") or b""
        scheme, _, given = auth.partition(b" ")
        if self.token is None:
            return await _json_response(send, 401, {"detail": "writes are disabled: the server has no KVTUNE_API_TOKEN"},
                                        [(b"www-authenticate", b"Bearer")])
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
            return await _json_response(send, 401, {"detail": "missing or invalid bearer token"},
                                        [(b"www-authenticate", b"Bearer")])
        return await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for bodies over `limit` bytes, whether announced by Content-Length or streamed chunked.
    Bodies here are small JSON documents, so the body is buffered and replayed to the app."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in READ_METHODS:
            return await self.app(scope, receive, send)
        too_big = {"detail": f"request body larger than {self.limit} bytes"}
        length = _header(scope, b"content-length")
        if length is not None:
            try:
                if int(length) > self.limit:
                    return await _json_response(send, 413, too_big)
            except ValueError:
                return await _json_response(send, 400, {"detail": "invalid Content-Length"})
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return await _json_response(send, 413, too_big)
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


class RequestMetrics:
    """Counters for `/metrics`: requests by method, route template and status, and their latency."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, int]] = Counter()
        self.seconds: Counter[tuple[str, str]] = Counter()

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1
            self.seconds[(method, route)] += seconds

    def snapshot(self) -> tuple[dict[tuple[str, str, int], int], dict[tuple[str, str], float]]:
        with self._lock:
            return dict(self.requests), dict(self.seconds)


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: RequestMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500
        t0 = time.perf_counter()

        async def send_wrapper(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = int(msg["status"])
            await send(msg)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(scope["method"], template, status, time.perf_counter() - t0)
