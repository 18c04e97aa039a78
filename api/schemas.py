"""Request bodies, query shapes and the error bodies the API sends. Static bounds here catch what is
absurd in any deployment (and keep every stored integer inside a 32-bit column); the deployment's
own limits (Settings) are checked in api/validation.py.

Names with a fixed set of values (kernel, arch, formats, search, bucket dim) are enums in the OpenAPI
document, taken from the catalog, but are checked by api/validation.py, whose messages name the known
values ("unknown kernel 'x'; known: [...]")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field

from catalog.families import family_names, get_spec
from catalog.families.logits import Q_DTYPE_NAMES
from catalog.families.pack import QUERY_DEST
from catalog.formats import FORMATS
from catalog.keys import make_key
from catalog.searches import DEFAULT_SEARCH, SEARCHES
from catalog.settings import INT32_MAX  # every integer column is a 32-bit INTEGER on PostgreSQL
from catalog.targets import TARGETS

KERNELS: tuple[str, ...] = family_names()
ARCHS: tuple[str, ...] = tuple(sorted(TARGETS))
# A key's formats: record formats, and for logits the query dtype as its second entry.
# Record formats, the logits query dtypes, and pack's "query" destination (the MXFP4 query quantiser).
FORMAT_NAMES: tuple[str, ...] = (tuple(sorted(FORMATS)) + tuple(q for q in Q_DTYPE_NAMES if q not in FORMATS)
                                 + (QUERY_DEST,))
# The batch dimensions of the families' buckets (pack N; decode T; logits T and B).
BUCKET_DIMS: tuple[str, ...] = tuple(sorted({b.dim for n in KERNELS for b in get_spec(n).buckets(make_key(n, "interp"))}))

Int = Annotated[int, Field(strict=True)]  # 16, not "16", 16.0 or true
Search = Literal[SEARCHES]  # type: ignore[valid-type]


def _enum(values: tuple[str, ...]) -> dict[str, Any]:
    return {"enum": list(values)}


Kernel = Annotated[str, Field(min_length=1, max_length=32, json_schema_extra=_enum(KERNELS))]
Arch = Annotated[str, Field(min_length=1, max_length=32, json_schema_extra=_enum(ARCHS),
                            description="a target name: sm_90, sm_100, gfx942, gfx950, interp")]
Format = Annotated[str, Field(max_length=32, json_schema_extra=_enum(FORMAT_NAMES))]

# Query parameters of the same names (GET routes), with the same enums and bounds.
ArchQuery = Annotated[str, Query(max_length=32, json_schema_extra=_enum(ARCHS))]
KernelQuery = Annotated[str, Query(max_length=32, json_schema_extra=_enum(KERNELS))]
HeadsQuery = Annotated[int, Query(ge=1, le=INT32_MAX)]
TopkQuery = Annotated[int, Query(ge=1, le=INT32_MAX)]
WindowQuery = Annotated[int, Query(ge=0, le=INT32_MAX)]
FormatsQuery = Annotated[str, Query(max_length=200, description=f"comma-separated, of {', '.join(FORMAT_NAMES)}")]


class BucketIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dim: Annotated[str, Field(min_length=1, max_length=8, json_schema_extra=_enum(BUCKET_DIMS))]
    lo: Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)]
    hi: Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)]
    ctx: Annotated[int, Field(strict=True, ge=0, le=INT32_MAX, description="context length (logits); 0: none")] = 0


class TuneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernel: Kernel
    arch: Arch
    heads: Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)]
    topk: Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)]
    window: Annotated[int, Field(strict=True, ge=0, le=INT32_MAX)]
    formats: Annotated[list[Format] | None, Field(max_length=4)] = None
    buckets: Annotated[list[BucketIn] | None, Field(min_length=1, max_length=256)] = None
    trials: Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)] = 32
    search: Search = DEFAULT_SEARCH  # type: ignore[assignment]
    time_budget_s: Annotated[float | None, Field(gt=0, le=1e9, allow_inf_nan=False)] = None
    seed: Annotated[int, Field(strict=True, ge=0, le=INT32_MAX)] = 0
    # Distributed mode: every free worker of `arch` may join the job and share its Optuna studies;
    # `trials` stays the budget per bucket for the whole job. `max_workers` caps the participants.
    distributed: Annotated[bool, Field(strict=True)] = False
    max_workers: Annotated[int | None, Field(strict=True, ge=1, le=INT32_MAX)] = None


# -- bodies of error responses (api/errors.py sends them; the OpenAPI document names them) ------------

class FieldError(BaseModel):
    loc: list[str] = Field(description="where in the request: ['body', 'buckets', '0', 'hi'], ['query', 'heads']")
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx this API sends: a message for a person, and on a request that failed schema
    validation, the offending fields (never the raw input)."""

    detail: str
    errors: list[FieldError] | None = Field(None, description="request validation failures, one per field")


class HealthBody(BaseModel):
    status: Literal["ok", "unavailable"]
    database: str = Field(description="the dialect when ok, else why the database is unavailable")
