"""Domain errors -> HTTP statuses: the only place they meet, and where the OpenAPI document learns
which error statuses each route can answer and with what body (`schemas.ErrorBody` throughout).
Validation errors come back as 422 with a short message and the offending fields (never the raw
input, which may not even be text). An exception nothing else handled is a 500 with the same body,
sent here so the server keeps the client's connection (uvicorn drops it when one escapes the app)."""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from db.errors import Conflict, DatabaseUnavailable, InvalidRequest, LeaseLost, NotFound

from api.middleware import OPEN_WRITES
from api.schemas import ErrorBody

log = logging.getLogger(__name__)

DESCRIPTIONS = {
    400: "malformed request framing (an invalid Content-Length)",
    401: "missing or invalid bearer token (every write needs one)",
    404: "no such resource",
    409: "the request contradicts the current state",
    413: "request body too large",
    422: "the request is invalid; `detail` says why, `errors` lists the fields that failed validation",
    503: "the database is unavailable; retry later (see Retry-After)",
}
WRITE_METHODS = frozenset({"post", "put", "patch", "delete"})
_FASTAPI_422 = "#/components/schemas/HTTPValidationError"


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """Error responses of a route, for its decorator's `responses=` (the rest are added for every
    route by `_document`)."""
    return {s: {"model": ErrorBody, "description": DESCRIPTIONS[s]} for s in statuses}


def _field_errors(exc: RequestValidationError) -> list[dict[str, object]]:
    out = []
    for e in exc.errors():
        loc = [str(x) for x in e.get("loc", ())]
        out.append({"loc": loc, "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))})
    return out


def _message(errors: list[dict[str, Any]]) -> str:
    if any(e["type"] == "json_invalid" for e in errors):
        return "the request body is not valid JSON"
    return "; ".join(f"{'.'.join(e['loc'][1:]) or e['loc'][0] if e['loc'] else 'body'}: {e['msg']}" for e in errors[:5])


def _allowed(request: Request) -> list[str]:
    """Every method some route of the app serves at this request's path."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _field_errors(exc)
        return JSONResponse(status_code=422, content={"detail": _message(errors), "errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI answers a body it cannot even decode (not UTF-8) with a bare 400; to a client that
        # is the same mistake as any other malformed JSON, so it gets the same 422.
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            return JSONResponse(status_code=422, content={"detail": "the request body is not valid JSON (or not UTF-8)"})
        if exc.status_code == 405:  # Starlette's Allow names one route's methods; a path may have several
            return JSONResponse(status_code=405, content={"detail": str(exc.detail)},
                                headers={"Allow": ", ".join(_allowed(request))})
        return await http_exception_handler(request, exc)

    def status(code: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
        async def handler(_: Request, exc: Exception) -> JSONResponse:
            return JSONResponse(status_code=code, content={"detail": str(exc)})
        return handler

    app.add_exception_handler(InvalidRequest, status(422))
    app.add_exception_handler(NotFound, status(404))
    app.add_exception_handler(Conflict, status(409))
    app.add_exception_handler(LeaseLost, status(409))

    @app.exception_handler(DatabaseUnavailable)
    async def _unavailable(_: Request, exc: DatabaseUnavailable) -> JSONResponse:
        log.warning("database unavailable: %s", exc)
        return JSONResponse(status_code=503, content={"detail": "database unavailable, retry later"},
                            headers={"Retry-After": "1"})

    app.add_middleware(_InternalErrors)
    _document(app)


class _InternalErrors:
    """The innermost middleware: an exception no handler took becomes a 500 ErrorBody, logged with its
    traceback, and goes no further (past here uvicorn would log it again and close the connection)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(msg: dict[str, Any]) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if started:  # too late for a status: only dropping the connection tells the client
                raise
            await JSONResponse(status_code=500, content={"detail": "internal server error"})(scope, receive, send)


def _document(app: FastAPI) -> None:
    """Every operation's error statuses in the OpenAPI document, each with `ErrorBody`: 422 as sent
    (FastAPI documents its own HTTPValidationError, which this API never sends), 503 wherever the
    database is read, 404 wherever a path names a resource, and on writes 400/401/413 (the
    middlewares' answers) and the bearer scheme."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = FastAPI.openapi(app)
        comps = schema.setdefault("components", {})
        models = comps.setdefault("schemas", {})
        body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        models.update(body.pop("$defs", {}))
        models["ErrorBody"] = body
        comps["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
        for path, ops in schema.get("paths", {}).items():
            for method, op in ops.items():
                rs = op.setdefault("responses", {})
                takes_input = bool(op.get("parameters") or op.get("requestBody"))
                guarded = method in WRITE_METHODS and (method.upper(), path) not in OPEN_WRITES
                wanted = ([503] + ([422] if takes_input else []) + ([404] if "{" in path else [])
                          + ([400, 413] if method in WRITE_METHODS else []) + ([401] if guarded else []))
                for code in wanted:
                    cur = rs.get(str(code))
                    if cur is None or _FASTAPI_422 in str(cur):
                        rs[str(code)] = {"description": DESCRIPTIONS[code], **ref}
                if guarded:
                    op["security"] = [{"bearer": []}]
        if _FASTAPI_422 not in str(schema.get("paths")):
            models.pop("HTTPValidationError", None)
            models.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
