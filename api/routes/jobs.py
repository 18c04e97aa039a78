"""Jobs: read one (status, progress, best so far), list, cancel."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query

from db import jobs, queue
from db.session import Database

from api.deps import get_db

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
JobId = Annotated[int, Path(ge=1, le=2**31 - 1)]
Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]


@router.get("")
def list_jobs(
    db: Database = Depends(get_db),
    status: Status | None = None,
    arch: Annotated[str | None, Query(max_length=32)] = None,
    kernel: Annotated[str | None, Query(max_length=32)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="only jobs with a smaller id (paging)")] = None,
) -> dict[str, Any]:
    rows = jobs.list_jobs(db, status=status, arch=arch, kernel=kernel, limit=limit, before_id=before)
    return {"jobs": [jobs.job_summary(j) for j in rows], "next_before": rows[-1].id if len(rows) == limit else None}


@router.get("/{job_id}")
def get_job(job_id: JobId, db: Database = Depends(get_db)) -> dict[str, Any]:
    job = jobs.get(db, job_id)
    out = jobs.job_summary(job)
    out["trials_by_status"] = jobs.trial_counts(db, job_id)
    # A distributed job's workers of the current attempt, each with its lease and trial count.
    out["participants"] = queue.participants(db, job_id) if job.distributed else []
    return out


@router.delete("/{job_id}")
def cancel_job(job_id: JobId, db: Database = Depends(get_db)) -> dict[str, Any]:
    return jobs.job_summary(jobs.cancel(db, job_id))
