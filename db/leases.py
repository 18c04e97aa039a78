"""Leases: what a worker holds while it runs a job, how each of its writes is fenced, and how it
keeps the lease alive (`heartbeat`). The queue (db.queue) claims, records and finishes on top of these.

Fencing: every write a worker makes is an UPDATE of its job row whose WHERE names the attempt and
owner it claimed, requires the job still `running` and the lease still unexpired (by the database
clock). A worker that lost its lease (it was stopped, partitioned, or the job was cancelled or
re-claimed) matches no row; the operation raises `LeaseLost` and the transaction, including any
trial row it was about to insert, is rolled back. So a lost worker changes nothing.

Distributed jobs: each participant has its own row in `job_participants` with its own lease, and its
fencing token is (job_id, attempt, owner): every write it makes first updates the job row, fenced by
(attempt, status running, job lease unexpired), which takes the row lock all participants serialise
on, then its own participant row, fenced by (owner, status live, its own lease unexpired)
(`shared_update`). The job's lease is the latest of its participants' (each heartbeat pushes it out:
`extend_job_lease`), so the job is re-queued only when every participant has gone silent; a new
attempt then fences out all old participants at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from catalog.core import Bucket, ProblemKey
from db.clock import db_after, db_now, utcnow
from db.errors import LeaseLost
from db.models import LIVE_PARTICIPANT, Job, JobParticipant, JobStatus, ParticipantStatus
from db.session import Database


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
    distributed: bool = False  # True: a participant of a distributed job (fenced by its participant row)
    slot: int = 0  # the participant's number in the attempt; its sampler seed is seed + slot


def _fence(s: Session, lease: Lease) -> ColumnElement[bool]:
    return and_(
        Job.id == lease.job_id,
        Job.attempt == lease.attempt,
        Job.lease_owner == lease.owner,
        Job.status == JobStatus.RUNNING.value,
        Job.lease_expires_at > db_now(s),
    )


def fenced_update(s: Session, lease: Lease, **values: Any) -> None:
    values.setdefault("updated_at", utcnow())
    r = s.execute(update(Job).where(_fence(s, lease)).values(**values))
    if r.rowcount != 1:
        raise LeaseLost(f"job {lease.job_id} attempt {lease.attempt}: lease no longer held by {lease.owner}")


def lease_from_row(job_id: int, owner: str, row: Any, *, slot: int) -> Lease:
    return Lease(
        job_id=job_id, attempt=row.attempt, owner=owner, key=ProblemKey.from_json(row.key_json),
        buckets=tuple(Bucket.from_json(b) for b in row.buckets) if row.buckets else None,
        trials=row.trials, search=row.search, time_budget_s=row.time_budget_s, seed=row.seed,
        distributed=bool(row.distributed), slot=slot,
    )


def add_participant(s: Session, job_id: int, attempt: int, owner: str, slot: int, lease_s: float) -> None:
    now = utcnow()
    s.execute(insert(JobParticipant).values(
        job_id=job_id, attempt=attempt, owner=owner, slot=slot, status=ParticipantStatus.ACTIVE.value,
        busy_bucket=None, trials_done=0, lease_expires_at=db_after(s, lease_s), heartbeat_at=db_now(s),
        joined_at=now, finished_at=None,
    ))


def heartbeat(db: Database, lease: Lease, lease_s: float) -> bool:
    """Extend the lease; False when it is no longer ours (expired, re-claimed, cancelled)."""

    def tx(s: Session) -> None:
        if lease.distributed:  # a `done` participant waiting to take over publishing keeps its lease too
            shared_update(s, lease, job={"lease_expires_at": extend_job_lease(s, lease_s), "heartbeat_at": db_now(s)},
                           part={"lease_expires_at": db_after(s, lease_s), "heartbeat_at": db_now(s)},
                           statuses=(*LIVE_PARTICIPANT, ParticipantStatus.DONE.value))
        else:
            fenced_update(s, lease, lease_expires_at=db_after(s, lease_s), heartbeat_at=db_now(s))

    try:
        db.run(tx)
        return True
    except LeaseLost:
        return False


# -- distributed jobs: the participant rows ---------------------------------------------------------
def extend_job_lease(s: Session, lease_s: float) -> ColumnElement[Any]:
    """The job's lease pushed out to now + lease_s, never pulled in: it is the latest of its
    participants' leases, so one participant's heartbeat cannot shorten another's."""
    new = db_after(s, lease_s)
    return case((Job.lease_expires_at > new, Job.lease_expires_at), else_=new)


def participant_fence(s: Session, lease: Lease, statuses: tuple[str, ...] = LIVE_PARTICIPANT) -> ColumnElement[bool]:
    return and_(
        JobParticipant.job_id == lease.job_id,
        JobParticipant.attempt == lease.attempt,
        JobParticipant.owner == lease.owner,
        JobParticipant.status.in_(statuses),
        JobParticipant.lease_expires_at > db_now(s),
    )


def shared_update(s: Session, lease: Lease, *, job: dict[str, Any] | None = None,
                   part: dict[str, Any] | None = None, statuses: tuple[str, ...] = LIVE_PARTICIPANT) -> None:
    """The fenced write of a participant: the job row first (fenced by attempt, running and the job's
    lease; this takes the row lock every participant of the job serialises on, always in this order,
    so two participants never deadlock), then its own participant row (fenced by owner, live status
    and its own lease). Either matching nothing raises LeaseLost and the transaction rolls back."""
    jv = dict(job or {})
    jv.setdefault("updated_at", utcnow())
    r = s.execute(update(Job).where(
        Job.id == lease.job_id, Job.attempt == lease.attempt, Job.status == JobStatus.RUNNING.value,
        Job.lease_expires_at > db_now(s),
    ).values(**jv))
    if r.rowcount != 1:
        raise LeaseLost(f"job {lease.job_id} attempt {lease.attempt}: no longer running under this attempt")
    r = s.execute(update(JobParticipant).where(participant_fence(s, lease, statuses)).values(**(part or {"heartbeat_at": db_now(s)})))
    if r.rowcount != 1:
        raise LeaseLost(f"job {lease.job_id} attempt {lease.attempt}: {lease.owner} is no longer a live participant")


def sweep_lost(s: Session, job_id: int | None = None) -> None:
    """Participants whose own lease expired become `lost` (they are already fenced out by the clock;
    this only keeps them out of the counts)."""
    q = update(JobParticipant).where(JobParticipant.status.in_(LIVE_PARTICIPANT),
                                     JobParticipant.lease_expires_at < db_now(s))
    if job_id is not None:
        q = q.where(JobParticipant.job_id == job_id)
    s.execute(q.values(status=ParticipantStatus.LOST.value, busy_bucket=None))


def live_others(s: Session, lease: Lease, statuses: tuple[str, ...] = LIVE_PARTICIPANT) -> int:
    """Other participants of the attempt in `statuses` whose own lease is unexpired."""
    return int(s.scalar(select(func.count()).select_from(JobParticipant).where(
        JobParticipant.job_id == lease.job_id, JobParticipant.attempt == lease.attempt,
        JobParticipant.owner != lease.owner, JobParticipant.status.in_(statuses),
        JobParticipant.lease_expires_at > db_now(s),
    )) or 0)
