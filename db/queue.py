"""The job queue as workers see it: claim under a lease, renew it, write fenced, finish.

Fencing: every write a worker makes is an UPDATE of its job row whose WHERE names the attempt and
owner it claimed, requires the job still `running` and the lease still unexpired (by the database
clock). A worker that lost its lease (it was stopped, partitioned, or the job was cancelled or
re-claimed) matches no row; the operation raises `LeaseLost` and the transaction, including any
trial row it was about to insert, is rolled back. So a lost worker changes nothing.

Claiming: `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL (concurrent claimers skip each other's
rows instead of queueing on them); on SQLite the claim runs in a `BEGIN IMMEDIATE` transaction
(db.session), which serialises claimers on the database's single write lock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import and_, case, insert, literal, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from db.clock import UTCDateTime, db_after, db_now, utcnow
from db.errors import Conflict, LeaseLost
from db.models import Job, JobStatus, TrialResult
from db.session import Database
from tuner.core import Bucket, ProblemKey
from tuner.results import TrialRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lease:
    """What a worker holds while it runs a job: the fencing token is (job_id, attempt, owner)."""

    job_id: int
    attempt: int
    owner: str
    key: ProblemKey
    buckets: tuple[Bucket, ...] | None
    trials: int
    search: str
    time_budget_s: float | None
    seed: int


def _fence(s: Session, lease: Lease) -> ColumnElement[bool]:
    return and_(
        Job.id == lease.job_id,
        Job.attempt == lease.attempt,
        Job.lease_owner == lease.owner,
        Job.status == JobStatus.RUNNING.value,
        Job.lease_expires_at > db_now(s),
    )


def _fenced_update(s: Session, lease: Lease, **values: Any) -> None:
    values.setdefault("updated_at", utcnow())
    r = s.execute(update(Job).where(_fence(s, lease)).values(**values))
    if r.rowcount != 1:
        raise LeaseLost(f"job {lease.job_id} attempt {lease.attempt}: lease no longer held by {lease.owner}")


def _any(db: Database, *where: Any) -> bool:
    """A read-only look first, so idle workers polling an empty queue never take SQLite's write lock."""
    return db.run(lambda s: s.scalar(select(Job.id).where(*where).limit(1)) is not None, write=False)


def claim(db: Database, *, arch: str, owner: str, lease_s: float) -> Lease | None:
    """The oldest queued job for `arch`, now running under a fresh lease, or None."""
    if not _any(db, Job.status == JobStatus.QUEUED.value, Job.arch == arch):
        return None

    def tx(s: Session) -> Lease | None:
        q = select(Job.id).where(Job.status == JobStatus.QUEUED.value, Job.arch == arch).order_by(Job.id).limit(1)
        if s.get_bind().dialect.name == "postgresql":
            q = q.with_for_update(skip_locked=True)
        job_id = s.scalar(q)
        if job_id is None:
            return None
        now = utcnow()
        row = s.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.QUEUED.value)
            .values(
                status=JobStatus.RUNNING.value, attempt=Job.attempt + 1, lease_owner=owner,
                lease_expires_at=db_after(s, lease_s), heartbeat_at=db_now(s), started_at=now, updated_at=now,
                error=None, progress={"trials_done": 0, "trials_failed": 0}, best=None,
            )
            .returning(Job.attempt, Job.key_json, Job.buckets, Job.trials, Job.search, Job.time_budget_s, Job.seed)
        ).one_or_none()
        if row is None:  # taken between the select and the update (cannot happen under the locks above)
            return None
        return Lease(
            job_id=job_id, attempt=row.attempt, owner=owner, key=ProblemKey.from_json(row.key_json),
            buckets=tuple(Bucket.from_json(b) for b in row.buckets) if row.buckets else None,
            trials=row.trials, search=row.search, time_budget_s=row.time_budget_s, seed=row.seed,
        )

    return db.run(tx)


def heartbeat(db: Database, lease: Lease, lease_s: float) -> bool:
    """Extend the lease; False when it is no longer ours (expired, re-claimed, cancelled)."""

    def tx(s: Session) -> None:
        _fenced_update(s, lease, lease_expires_at=db_after(s, lease_s), heartbeat_at=db_now(s))

    try:
        db.run(tx)
        return True
    except LeaseLost:
        return False


def record_trial(
    db: Database, lease: Lease, trial: TrialRecord, *, progress: dict[str, Any], best: dict[str, Any]
) -> None:
    """One trial row plus the job's progress and best-so-far, in one fenced transaction."""

    def tx(s: Session) -> None:
        _fenced_update(s, lease, progress=progress, best=best)  # first: it takes the row lock
        s.execute(
            insert(TrialResult).values(
                job_id=lease.job_id, attempt=lease.attempt, number=trial.number, bucket=trial.bucket.name(),
                bucket_json=trial.bucket.to_json(), params=trial.config.as_dict(), status=trial.status.value,
                time_us=trial.time_us, timing=trial.timing, compile_stats=trial.compile_stats or None,
                error=trial.error, source_hash=trial.source_hash, worker=lease.owner, created_at=utcnow(),
            )
        )

    db.run(tx)


def release(db: Database, lease: Lease, reason: str) -> bool:
    """Give the job back to the queue (a clean shutdown): not counted against max_attempts."""

    def tx(s: Session) -> None:
        _fenced_update(s, lease, status=JobStatus.QUEUED.value, lease_owner=None, lease_expires_at=None,
                       error=f"released: {reason}")

    try:
        db.run(tx)
        return True
    except LeaseLost:
        return False


def fail(db: Database, lease: Lease, error: str) -> bool:
    def tx(s: Session) -> None:
        _fenced_update(s, lease, status=JobStatus.FAILED.value, lease_owner=None, lease_expires_at=None,
                       error=error[:4000], finished_at=utcnow())

    try:
        db.run(tx)
        return True
    except LeaseLost:
        return False


def complete(db: Database, lease: Lease, publish: Callable[[Session], dict[str, Any]], *, progress: dict[str, Any]) -> None:
    """Mark the job succeeded and publish its configs in one fenced transaction. `publish(session)`
    writes the configs and returns the job's final `best` summary. Raises LeaseLost when the lease is
    gone (nothing is published then)."""

    def tx(s: Session) -> None:
        _fenced_update(s, lease, status=JobStatus.SUCCEEDED.value, lease_owner=None, finished_at=utcnow(),
                       progress=progress)
        best = publish(s)
        s.execute(update(Job).where(Job.id == lease.job_id).values(best=best))

    # Two jobs of one key publishing at once can still trip the one-active-config index (the second
    # saw no row to deactivate): the retry sees the first one's row and supersedes it.
    for i in range(5):
        try:
            db.run(tx)
            return
        except Conflict:
            if i == 4:
                raise
            log.info("publish of job %d raced another publisher; retrying", lease.job_id)


def requeue_expired(db: Database) -> int:
    """Running jobs whose lease expired go back to the queue, or fail after max_attempts lost leases.
    Safe to run from every worker at once: each row is changed by exactly one of them."""
    if db.is_sqlite and not _any(db, Job.status == JobStatus.RUNNING.value, Job.lease_expires_at < utcnow()):
        return 0

    def tx(s: Session) -> int:
        gives_up = Job.expired_leases + 1 >= Job.max_attempts
        r = s.execute(
            update(Job)
            .where(Job.status == JobStatus.RUNNING.value, Job.lease_expires_at < db_now(s))
            .values(
                status=case((gives_up, JobStatus.FAILED.value), else_=JobStatus.QUEUED.value),
                expired_leases=Job.expired_leases + 1,
                lease_owner=None,
                lease_expires_at=None,
                error=case((gives_up, "lease expired on every attempt; giving up"), else_="lease expired; re-queued"),
                finished_at=case((gives_up, literal(utcnow(), UTCDateTime())), else_=None),
                updated_at=utcnow(),
            )
        )
        return int(r.rowcount)

    return db.run(tx)
