"""GET /v1/configs: the bundle an engine fetches at startup (ETag'd), and GET /v1/kernels/{hash}."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse

from db import configs
from db.bundles import build_bundle
from db.session import Database

from api.deps import get_db, get_settings
from catalog.settings import Settings
from api.validation import check_arch, check_formats, check_shape

router = APIRouter(prefix="/v1", tags=["configs"])


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or etag in tags or f"W/{etag}" in tags


@router.get("/configs")
def get_configs(
    request: Request,
    arch: Annotated[str, Query(max_length=32)],
    heads: Annotated[int, Query(ge=1)],
    topk: Annotated[int, Query(ge=1)],
    window: Annotated[int, Query(ge=0)],
    formats: Annotated[str | None, Query(max_length=200, description="comma-separated record formats")] = None,
    db: Database = Depends(get_db),
    settings: Settings = Depends(get_settings),
) -> Response:
    check_arch(arch)
    check_shape(settings, heads, topk, window)
    fmts = [f for f in (formats or "").split(",") if f] or None
    check_formats(fmts)
    bundle = build_bundle(db, arch=arch, heads=heads, topk=topk, window=window, formats=fmts)
    body = json.dumps(bundle, sort_keys=True, separators=(",", ":")).encode()
    etag = _etag(body)
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    return Response(content=body, media_type="application/json", headers=headers)


@router.get("/warmup-keys")
def get_warmup_keys(
    arch: Annotated[str, Query(max_length=32)],
    heads: Annotated[int, Query(ge=1)],
    topk: Annotated[int, Query(ge=1)],
    window: Annotated[int, Query(ge=0)],
    formats: Annotated[str | None, Query(max_length=200, description="comma-separated record formats")] = None,
    db: Database = Depends(get_db),
    settings: Settings = Depends(get_settings),
) -> dict:
    """The bundle's warmup keys on their own: every binary to compile at startup, each once, with the
    Triton versions they were made for, the source hashes they need, and the buckets without keys.
    A lookup here is not a miss (the bundle request that comes with it records that)."""
    check_arch(arch)
    check_shape(settings, heads, topk, window)
    fmts = [f for f in (formats or "").split(",") if f] or None
    check_formats(fmts)
    bundle = build_bundle(db, arch=arch, heads=heads, topk=topk, window=window, formats=fmts, record_misses=False)
    return bundle["warmup"]


@router.get("/kernels/{source_hash}", response_class=PlainTextResponse)
def get_kernel_source(
    source_hash: Annotated[str, Path(pattern=r"^[0-9a-f]{8,64}$")], db: Database = Depends(get_db)
) -> PlainTextResponse:
    src = configs.get_source(db, source_hash)
    return PlainTextResponse(src.source, headers={"ETag": f'"{src.source_hash}"', "X-Kvtune-Template": src.template})
