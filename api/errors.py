"""Domain errors -> HTTP statuses: the only place they meet. Validation errors come back as 422
with a short message and the offending fields (never the raw input, which may not even be text)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from db.errors import Conflict, DatabaseUnavailable, InvalidRequest, LeaseLost, NotFound

log = logging.getLogger(__name__)


def _field_errors(exc: RequestValidationError) -> list[dict[str, object]]:
    out = []
    for e in exc.errors():
        loc = [str(x) for x in e.get("loc", ())]
        out.append({"loc": loc, "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))})
    return out


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _field_errors(exc)
        if any(e["type"] == "json_invalid" for e in errors):
            message = "the request body is not valid JSON"
        else:
            message = "; ".join(f"{'.'.join(e['loc'][1:]) or e['loc'][0] if e['loc'] else 'body'}: {e['msg']}" for e in errors[:5])  # type: ignore[index]
        return JSONResponse(status_code=422, content={"detail": message, "errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI answers a body it cannot even decode (not UTF-8) with a bare 400; to a client that
        # is the same mistake as any other malformed JSON, so it gets the same 422.
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            return JSONResponse(status_code=422, content={"detail": "the request body is not valid JSON (or not UTF-8)"})
        return await http_exception_handler(request, exc)

    @app.exception_handler(InvalidRequest)
    async def _invalid(_: Request, exc: InvalidRequest) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.exception_handler(LeaseLost)
    async def _lease(_: Request, exc: LeaseLost) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.exception_handler(DatabaseUnavailable)
    async def _unavailable(_: Request, exc: DatabaseUnavailable) -> JSONResponse:
        log.warning("database unavailable: %s", exc)
        return JSONResponse(status_code=503, content={"detail": "database unavailable, retry later"},
                            headers={"Retry-After": "1"})
