"""POST /v1/tune: queue a tuning job (202 with the job)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response

from db import jobs
from db.session import Database

from api.deps import get_db, get_settings
from api.schemas import TuneRequest
from api.settings import Settings
from api.validation import tune_spec

router = APIRouter(prefix="/v1", tags=["tune"])


@router.post("/tune", status_code=202)
def submit_tune(req: TuneRequest, response: Response, db: Database = Depends(get_db),
                settings: Settings = Depends(get_settings)) -> dict[str, Any]:
    job = jobs.submit(db, tune_spec(req, settings))
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return jobs.job_summary(job)
