"""POST /v1/misses: an engine's runtime reports the calls its bundle did not cover, in batches.

Engines hold no write token, so this write is open (api/app.py exempts it from the auth
middleware); what bounds it is the body limit every write has (KVTUNE_MAX_BODY_BYTES), the list
length and the ranges below. The counts go into the same in-memory counter as bundle lookups and
reach the table with its next flush; nothing is written in the request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from catalog.keys import make_key

from api.schemas import Arch, Format, Kernel
from api.validation import check_arch, check_formats, check_kernel, check_shape
from db.errors import InvalidRequest

router = APIRouter(prefix="/v1", tags=["configs"])

MAX_ITEMS = 256
MAX_COUNT = 1 << 20


class MissItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # 16, not "16", 16.0 or true

    kernel: Kernel
    arch: Arch
    # The key as the engine's runtime holds it (ProblemKey.to_json): pack's key has no heads or top-k.
    heads: Annotated[int, Field(ge=0, le=2**31 - 1)]
    topk: Annotated[int, Field(ge=0, le=2**31 - 1)]
    window: Annotated[int, Field(ge=0, le=2**31 - 1)]
    head_dim: Annotated[int | None, Field(ge=1, le=1 << 16)] = None
    dim: Annotated[str | None, Field(max_length=8, description="the batch dimension n counts (N, T, B)")] = None
    formats: Annotated[list[Format] | None, Field(max_length=8)] = None
    n: Annotated[int, Field(ge=1, le=1 << 31, description="the batch size of the call that missed")]
    count: Annotated[int, Field(ge=1, le=MAX_COUNT, description="calls of that size since the last report")] = 1


class MissReport(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    misses: Annotated[list[MissItem], Field(min_length=1, max_length=MAX_ITEMS)]
    device: Annotated[str | None, Field(max_length=128, description="the engine's GPU name")] = None
    triton: Annotated[str | None, Field(max_length=64, description="the engine's Triton version")] = None


class MissAccepted(BaseModel):
    accepted: int  # calls counted


@router.post("/misses", status_code=202, response_model=MissAccepted)
def post_misses(report: MissReport, request: Request) -> MissAccepted:
    settings = request.app.state.settings
    keyed = []
    for i, m in enumerate(report.misses):  # every item checked before any is counted
        try:
            check_kernel(m.kernel)
            check_arch(m.arch)
            check_shape(settings, m.heads, m.topk, m.window)
            check_formats(m.formats)
            if m.kernel != "pack" and (m.heads < 1 or m.topk < 1):
                raise InvalidRequest(f"{m.kernel} keys have heads >= 1 and topk >= 1")
            key = make_key(m.kernel, m.arch, m.heads, m.topk, m.window, m.formats)
        except (InvalidRequest, ValueError, TypeError, KeyError) as e:
            raise InvalidRequest(f"misses[{i}]: {e}") from None
        keyed.append((key, m.count))
    counter = request.app.state.read_path.misses
    for key, count in keyed:
        counter.add([key], count)
    return MissAccepted(accepted=sum(c for _, c in keyed))
