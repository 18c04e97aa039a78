"""POST /v1/tune: queue a tuning job (202 with the job)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Depends, Response

from db import jobs
from db.errors import InvalidRequest
from db.session import Database

from api.deps import get_db, get_settings
from api.schemas import TuneRequest
from catalog.settings import Settings
from api.validation import tune_spec

router = APIRouter(prefix="/v1", tags=["tune"])


@router.post("/tune", status_code=202)
def submit_tune(req: TuneRequest, response: Response, db: Database = Depends(get_db),
                settings: Settings = Depends(get_settings)) -> dict[str, Any]:
    spec = tune_spec(req, settings)
    if req.distributed:
        if req.search == "grid":  # an ordered walk: every worker would enqueue the same points
            raise InvalidRequest("a grid search runs on one worker; use search 'tpe' or 'random' with distributed")
        if req.max_workers is not None and req.max_workers > settings.max_workers_per_job:
            raise InvalidRequest(f"max_workers={req.max_workers} is more than {settings.max_workers_per_job}")
        spec = dataclasses.replace(spec, distributed=True, max_workers=req.max_workers)
    elif req.max_workers is not None:
        raise InvalidRequest("max_workers applies to distributed jobs only (set distributed: true)")
    job = jobs.submit(db, spec)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return jobs.job_summary(job)
