"""GET /v1/configs: the bundle an engine fetches at startup (ETag'd), GET /v1/warmup-keys, and
GET /v1/kernels/{hash}. Bundles come from the read path's cache (api/read_path.py): a request that
hits it touches no database and no worker thread."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from db import configs
from db.bundles import BundleRequest

from api.deps import DatabaseDep
from api.read_path import Entry, ReadPath
from api.validation import check_arch, check_formats, check_shape

router = APIRouter(prefix="/v1", tags=["configs"])

Arch = Annotated[str, Query(max_length=32)]
Heads = Annotated[int, Query(ge=1)]
Topk = Annotated[int, Query(ge=1)]
Window = Annotated[int, Query(ge=0)]
Formats = Annotated[str | None, Query(max_length=200, description="comma-separated record formats")]
Triton = Annotated[str | None, Query(max_length=64, description="the engine's Triton version: configs tuned with it first")]
Device = Annotated[str | None, Query(max_length=255, description="the engine's GPU name: configs tuned on it first")]


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or etag in tags or f"W/{etag}" in tags


async def _entry(request: Request, arch: str, heads: int, topk: int, window: int, formats: str | None,
                 triton: str | None, device: str | None) -> Entry:
    check_arch(arch)
    check_shape(request.app.state.settings, heads, topk, window)
    fmts = [f for f in (formats or "").split(",") if f] or None
    check_formats(fmts)
    req = BundleRequest(arch, heads, topk, window, tuple(fmts) if fmts else None, triton or None, device or None)
    rp: ReadPath = request.app.state.read_path
    return rp.cache.get(req) or await run_in_threadpool(rp.cache.fill, req)


@router.get("/configs")
async def get_configs(request: Request, arch: Arch, heads: Heads, topk: Topk, window: Window, formats: Formats = None,
                      triton: Triton = None, device: Device = None) -> Response:
    entry = await _entry(request, arch, heads, topk, window, formats, triton, device)
    request.app.state.read_path.misses.add(entry.miss_keys)
    headers = {"ETag": entry.etag, "Cache-Control": "no-cache"}
    if _matches(request.headers.get("if-none-match"), entry.etag):
        return Response(status_code=304, headers=headers)
    return Response(content=entry.body, media_type="application/json", headers=headers)


@router.get("/warmup-keys")
async def get_warmup_keys(request: Request, arch: Arch, heads: Heads, topk: Topk, window: Window, formats: Formats = None,
                          triton: Triton = None, device: Device = None) -> Response:
    """The bundle's warmup keys on their own: every binary to compile at startup, each once, with the
    Triton versions they were made for, the source hashes they need, and the buckets without keys.
    A lookup here is not a miss (the bundle request that comes with it counts that)."""
    entry = await _entry(request, arch, heads, topk, window, formats, triton, device)
    return Response(content=entry.warmup_body, media_type="application/json")


@router.get("/kernels/{source_hash}", response_class=PlainTextResponse)
def get_kernel_source(
    source_hash: Annotated[str, Path(pattern=r"^[0-9a-f]{8,64}$")], db: DatabaseDep
) -> PlainTextResponse:
    src = configs.get_source(db, source_hash)
    return PlainTextResponse(src.source, headers={"ETag": f'"{src.source_hash}"', "X-Kvtune-Template": src.template})
