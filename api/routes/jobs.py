"""Jobs: read one (status, progress, best so far), list, cancel."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from db import jobs, queue, workers
from db.models import JobStatus

from api.deps import DatabaseDep
from api.errors import responses
from api.schemas import ARCHS, INT32_MAX, KERNELS

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
JobId = Annotated[int, Path(ge=1, le=INT32_MAX)]
Status = Literal[tuple(s.value for s in JobStatus)]  # type: ignore[valid-type]
# A filter by a name that no job can have is a mistake (422), not an empty list.
ArchFilter = Literal[ARCHS] | None  # type: ignore[valid-type]
KernelFilter = Literal[KERNELS] | None  # type: ignore[valid-type]


@router.get("")
def list_jobs(
    db: DatabaseDep,
    status: Status | None = None,
    arch: ArchFilter = None,
    kernel: KernelFilter = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[int | None, Query(ge=1, le=INT32_MAX, description="only jobs with a smaller id (paging)")] = None,
) -> dict[str, Any]:
    rows = jobs.list_jobs(db, status=status, arch=arch, kernel=kernel, limit=limit, before_id=before)
    return {"jobs": [jobs.job_summary(j) for j in rows], "next_before": rows[-1].id if len(rows) == limit else None}


@router.get("/{job_id}", responses=responses(404))
def get_job(job_id: JobId, db: DatabaseDep) -> dict[str, Any]:
    job = jobs.get(db, job_id)
    out = jobs.job_summary(job)
    out["trials_by_status"] = jobs.trial_counts(db, job_id)
    # A distributed job's workers of the current attempt, each with its lease and trial count.
    out["participants"] = queue.participants(db, job_id) if job.distributed else []
    if job.status == "queued":
        out["warnings"] = [w for w in [workers.no_worker_warning(db, job.arch)] if w]
    return out


@router.delete("/{job_id}", responses=responses(404, 409))
def cancel_job(job_id: JobId, db: DatabaseDep) -> dict[str, Any]:
    return jobs.job_summary(jobs.cancel(db, job_id))
