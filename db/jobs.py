"""Jobs as the API sees them: submit, read, list, cancel. (The worker's side is db/queue.py.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from db.clock import utcnow
from db.errors import Conflict, InvalidRequest, NotFound
from db.models import ACTIVE_STATUSES, Job, JobStatus, TrialResult
from db.session import Database
from catalog.keys import key_notes
from catalog.core import Bucket, ProblemKey


@dataclass(frozen=True)
class JobSpec:
    """What a tune request asks for, already validated (api/validation.py)."""

    key: ProblemKey
    buckets: tuple[Bucket, ...] | None = None  # None: the family's default buckets
    trials: int = 32
    search: str = "tpe"
    time_budget_s: float | None = None
    seed: int = 0
    max_attempts: int = 3
    submitted_by: str | None = None
    distributed: bool = False  # several workers of the arch may run it together, sharing its studies
    max_workers: int | None = None  # at most this many participants at once (None: no cap)
    idempotency_key: str | None = None  # the client's Idempotency-Key: a retry with it gets this job back
    request_hash: str | None = None  # digest of the request, to tell a retry from a reuse of the key


def _insert(s: Session, spec: JobSpec) -> Job:
    now = utcnow()
    job = Job(
        key_slug=spec.key.slug(),
        key_json=spec.key.to_json(),
        kernel=spec.key.kernel,
        arch=spec.key.arch,
        buckets=[b.to_json() for b in spec.buckets] if spec.buckets else None,
        trials=spec.trials,
        time_budget_s=spec.time_budget_s,
        search=spec.search,
        seed=spec.seed,
        status=JobStatus.QUEUED.value,
        attempt=0,
        max_attempts=spec.max_attempts,
        expired_leases=0,
        submitted_by=spec.submitted_by,
        distributed=spec.distributed,
        max_workers=spec.max_workers if spec.distributed else None,
        idempotency_key=spec.idempotency_key,
        request_hash=spec.request_hash,
        created_at=now,
        updated_at=now,
        progress={"trials_done": 0, "trials_failed": 0},
    )
    s.add(job)
    s.flush()
    return job


def submit(db: Database, spec: JobSpec) -> Job:
    return db.run(lambda s: _insert(s, spec))


class IdempotencyKeyReused(InvalidRequest):
    """An Idempotency-Key already names a job submitted with a different request."""


def submit_idempotent(db: Database, spec: JobSpec) -> tuple[Job, bool]:
    """(job, created): a new job, or where `spec.idempotency_key` already names one submitted with
    the same `request_hash`, that job (created False), so a client's retry never makes a second.
    The same key with another request is IdempotencyKeyReused."""
    if spec.idempotency_key is None:
        return submit(db, spec), True

    def tx(s: Session) -> tuple[Job, bool]:
        job = s.scalar(select(Job).where(Job.idempotency_key == spec.idempotency_key))
        if job is None:
            return _insert(s, spec), True
        if job.request_hash != spec.request_hash:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {spec.idempotency_key!r} was used for a different request (job {job.id})")
        return job, False

    try:
        return db.run(tx)
    except Conflict:  # a concurrent retry inserted the key first (the unique index): it is ours to return
        return db.run(tx)


def submit_many(db: Database, specs: list[JobSpec]) -> list[int]:
    """Bulk submit in one transaction (tests and scripted sweeps)."""
    return db.run(lambda s: [_insert(s, spec).id for spec in specs])


def get(db: Database, job_id: int) -> Job:
    def tx(s: Session) -> Job:
        job = s.get(Job, job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        return job

    return db.run(tx, write=False)


def trial_counts(db: Database, job_id: int) -> dict[str, int]:
    """Trials recorded for a job's current attempt, by status."""

    def tx(s: Session) -> dict[str, int]:
        attempt = select(Job.attempt).where(Job.id == job_id).scalar_subquery()
        rows = s.execute(
            select(TrialResult.status, func.count())
            .where(TrialResult.job_id == job_id, TrialResult.attempt == attempt)
            .group_by(TrialResult.status)
        ).all()
        return {status: int(n) for status, n in rows}

    return db.run(tx, write=False)


def list_jobs(
    db: Database, *, status: str | None = None, arch: str | None = None, kernel: str | None = None,
    limit: int = 50, before_id: int | None = None,
) -> list[Job]:
    def tx(s: Session) -> list[Job]:
        q = select(Job).order_by(Job.id.desc()).limit(limit)
        if status:
            q = q.where(Job.status == status)
        if arch:
            q = q.where(Job.arch == arch)
        if kernel:
            q = q.where(Job.kernel == kernel)
        if before_id is not None:
            q = q.where(Job.id < before_id)
        return list(s.scalars(q))

    return db.run(tx, write=False)


def cancel(db: Database, job_id: int) -> Job:
    """Queued or running -> cancelled. A running job's worker finds its fenced writes matching nothing
    at its next heartbeat or trial, and stops. Cancelling a cancelled job is a no-op."""

    def tx(s: Session) -> Job:
        now = utcnow()
        r = s.execute(
            update(Job)
            .where(Job.id == job_id, Job.status.in_(ACTIVE_STATUSES))
            .values(status=JobStatus.CANCELLED.value, lease_owner=None, lease_expires_at=None,
                    finished_at=now, updated_at=now, error="cancelled by request")
        )
        job = s.get(Job, job_id, populate_existing=True)
        if job is None:
            raise NotFound(f"no job {job_id}")
        if r.rowcount == 0 and job.status != JobStatus.CANCELLED.value:
            raise Conflict(f"job {job_id} already {job.status}")
        return job

    return db.run(tx)


def counts_by_status(db: Database) -> dict[str, int]:
    def tx(s: Session) -> dict[str, int]:
        rows = s.execute(select(Job.status, func.count()).group_by(Job.status)).all()
        out = {st.value: 0 for st in JobStatus}
        out.update({st: int(n) for st, n in rows})
        return out

    return db.run(tx, write=False)


def job_summary(job: Job) -> dict[str, Any]:
    """The JSON a client sees for a job (also what `GET /v1/jobs/{id}` returns, plus trial counts)."""
    return {
        "id": job.id,
        "status": job.status,
        "key": job.key_json,
        "key_slug": job.key_slug,
        "kernel": job.kernel,
        "arch": job.arch,
        "buckets": job.buckets,
        "trials": job.trials,
        "time_budget_s": job.time_budget_s,
        "search": job.search,
        "distributed": bool(job.distributed),
        "max_workers": job.max_workers,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "expired_leases": job.expired_leases,
        "lease_owner": job.lease_owner,
        "lease_expires_at": _iso(job.lease_expires_at),
        "heartbeat_at": _iso(job.heartbeat_at),
        "progress": job.progress or {},
        "best": job.best or {},
        "error": job.error,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        # What the key's kernel ignores or fixes (pack: heads/topk/window; logits: 64 index heads).
        "notes": key_notes(ProblemKey.from_json(job.key_json), job.key_json.get("formats")),
        "warnings": [],
    }


def _iso(t: Any) -> str | None:
    return t.isoformat() if t is not None else None
