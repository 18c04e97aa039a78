"""POST /v1/tune: queue a tuning job (202 with the job).

With an `Idempotency-Key` header the submission is idempotent: a retry with the same key and the
same request is answered with the job the first made (202, the same body, `Idempotent-Replayed:
true`), never a second job; the key with a different request is a 422."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Header, Response

from catalog.keys import key_notes
from db import jobs, workers
from db.errors import InvalidRequest

from api.deps import DatabaseDep, SettingsDep
from api.errors import responses
from api.schemas import TuneRequest
from api.validation import request_digest, tune_spec

router = APIRouter(prefix="/v1", tags=["tune"])
IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$",
    description="makes the submission idempotent: a retry with the same key and body returns the first job",
)]


@router.post("/tune", status_code=202, responses=responses(409))
def submit_tune(req: TuneRequest, response: Response, db: DatabaseDep, settings: SettingsDep,
                idempotency_key: IdempotencyKey = None) -> dict[str, Any]:
    spec = tune_spec(req, settings)
    if req.distributed:
        if req.search == "grid":  # an ordered walk: every worker would enqueue the same points
            raise InvalidRequest("a grid search runs on one worker; use search 'tpe' or 'random' with distributed")
        if req.max_workers is not None and req.max_workers > settings.max_workers_per_job:
            raise InvalidRequest(f"max_workers={req.max_workers} is more than {settings.max_workers_per_job}")
        spec = dataclasses.replace(spec, distributed=True, max_workers=req.max_workers)
    elif req.max_workers is not None:
        raise InvalidRequest("max_workers applies to distributed jobs only (set distributed: true)")
    if idempotency_key is not None:
        spec = dataclasses.replace(spec, idempotency_key=idempotency_key, request_hash=request_digest(req))
    job, created = jobs.submit_idempotent(db, spec)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    out = jobs.job_summary(job)
    out["notes"] = key_notes(spec.key, req.formats)  # the request's own formats: say what was defaulted
    out["warnings"] = [w for w in [workers.no_worker_warning(db, spec.key.arch)] if w]
    return out
