"""GET /v1/configs answered from the bundle cache before FastAPI routes and parses the request.

A cached bundle is the whole answer to the request fleets send most, and FastAPI's routing and
parameter validation cost more CPU than the rest of that answer (see benchmarks/results/api_*.md).
This middleware parses the query itself, and answers only when it can be sure the route would give
the same answer: every value in the one canonical form the route accepts (integers as plain digits,
lengths under the route's limits) and an entry for that request in the cache, which holds only
requests the route validated and built. Anything else (a cold key, an odd spelling, an invalid
value) goes on to the route, unchanged. The misses are counted as the route counts them.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl

from db.bundles import BundleRequest

from api.read_path import ReadPath

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]

PATH = "/v1/configs"
_DIGITS = re.compile(r"[0-9]{1,9}")
# The route's Query(max_length=...) limits (api/routes/configs.py): longer values go to the route.
_MAX_LEN = {"arch": 32, "formats": 200, "triton": 64, "device": 255}
_ROUTE = SimpleNamespace(path=PATH)  # what MetricsMiddleware labels the request with


def parse(query_string: bytes) -> BundleRequest | None:
    """The request the route would build, or None where the route must decide."""
    try:
        q = dict(parse_qsl(query_string.decode("latin-1"), keep_blank_values=True))  # the last value wins, as in Starlette
    except ValueError:
        return None
    ints = [q.get(k, "") for k in ("heads", "topk", "window")]
    if "arch" not in q or not all(_DIGITS.fullmatch(v) for v in ints):
        return None
    if any(len(q[k]) > n for k, n in _MAX_LEN.items() if k in q):
        return None
    fmts = tuple(f for f in q.get("formats", "").split(",") if f) or None
    heads, topk, window = (int(v) for v in ints)
    return BundleRequest(q["arch"], heads, topk, window, fmts, q.get("triton") or None, q.get("device") or None)


def _matches(if_none_match: bytes | None, etag: bytes) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip() for t in if_none_match.split(b",")]
    return b"*" in tags or etag in tags or b"W/" + etag in tags


class CachedBundleMiddleware:
    def __init__(self, app: ASGIApp, read_path: ReadPath) -> None:
        self.app = app
        self.read_path = read_path

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] != PATH:
            return await self.app(scope, receive, send)
        req = parse(scope.get("query_string", b""))
        entry = self.read_path.cache.get(req) if req is not None else None
        if entry is None:
            return await self.app(scope, receive, send)
        self.read_path.misses.add(entry.miss_keys)
        scope["route"] = _ROUTE
        etag = entry.etag.encode()
        inm = next((v for k, v in scope.get("headers", ()) if k == b"if-none-match"), None)
        headers = [(b"etag", etag), (b"cache-control", b"no-cache")]
        if _matches(inm, etag):
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        headers += [(b"content-length", str(len(entry.body)).encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": entry.body})
