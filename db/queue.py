"""The job queue as workers see it: claim under a lease, write fenced, finish. The lease itself, its
fences and its heartbeat are db.leases.

Claiming: `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL (concurrent claimers skip each other's
rows instead of queueing on them); on SQLite the claim runs in a `BEGIN IMMEDIATE` transaction
(db.session), which serialises claimers on the database's single write lock.

Distributed jobs (`jobs.distributed`): several workers of the job's arch run one attempt together,
sharing its Optuna studies. The first claims it from the queue as above; others `join` it while it
runs. Each participant has its own row in `job_participants` with its own lease (db.leases says how
its writes are fenced); the job is re-queued only when every participant has gone silent.

- Budget: `trials` measurements per bucket for the whole attempt, not per participant. Before each
  measurement a participant `reserve`s one: granted while (trials recorded for the bucket in this
  attempt) + (other live participants holding a reservation on it) < trials. So the attempt never
  measures more than the budget, whatever the number of participants.
- Finishing: a participant whose tuner ran to the end calls `finish`. Under the job row lock it marks
  participants whose lease expired `lost`, and if another live participant remains it becomes `done`
  and waits, still heartbeating (`take_over`): if the others die or leave, it publishes once their
  leases expired (at once for one that left); the last one becomes `publishing` (no one can join
  any more) and publishes the winners of the job's fenced trial rows (`fenced_trials`) with
  `complete_shared`, which turns the job `succeeded` and itself `published` in the transaction that
  writes the configs. Exactly one participant can be the last (the decision is made under the row
  lock), and a publisher that dies leaves a job whose lease expires and is re-queued: the next
  attempt reuses every trial already in the studies.
- Leaving (SIGTERM, a lost database connection): `leave` hands the job to the live participants,
  else to a `done` one waiting (it publishes), else back to the queue.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from sqlalchemy import case, func, insert, literal, select, update
from sqlalchemy.orm import Session

from catalog.results import TrialRecord
from db import leases
from db.clock import UTCDateTime, db_after, db_now, utcnow
from db.errors import Conflict, LeaseLost
from db.leases import Lease
from db.models import LIVE_PARTICIPANT, Job, JobParticipant, JobStatus, ParticipantStatus, TrialResult
from db.session import Database

log = logging.getLogger(__name__)


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
            .returning(Job.attempt, Job.key_json, Job.buckets, Job.trials, Job.search, Job.time_budget_s, Job.seed,
                       Job.distributed)
        ).one_or_none()
        if row is None:  # taken between the select and the update (cannot happen under the locks above)
            return None
        if row.distributed:  # the claimer is participant 0 of the new attempt
            # Whoever was live in an older attempt is fenced out by the attempt already; say so.
            s.execute(update(JobParticipant).where(
                JobParticipant.job_id == job_id, JobParticipant.attempt < row.attempt,
                JobParticipant.status.in_(LIVE_PARTICIPANT)).values(status=ParticipantStatus.LOST.value, busy_bucket=None))
            leases.add_participant(s, job_id, row.attempt, owner, 0, lease_s)
        return leases.lease_from_row(job_id, owner, row, slot=0)

    return db.run(tx)


def _insert_trial(s: Session, lease: Lease, trial: TrialRecord) -> None:
    """The trial's row, written by `lease.owner` in `lease.attempt` (callers fence first)."""
    s.execute(
        insert(TrialResult).values(
            job_id=lease.job_id, attempt=lease.attempt, number=trial.number, bucket=trial.bucket.name(),
            bucket_json=trial.bucket.to_json(), params=trial.config.as_dict(), status=trial.status.value,
            time_us=trial.time_us, timing=trial.timing, compile_stats=trial.compile_stats or None,
            error=trial.error, source_hash=trial.source_hash, worker=lease.owner, created_at=utcnow(),
        )
    )


def record_trial(
    db: Database, lease: Lease, trial: TrialRecord, *, progress: dict[str, Any], best: dict[str, Any]
) -> None:
    """One trial row plus the job's progress and best-so-far, in one fenced transaction."""

    def tx(s: Session) -> None:
        leases.fenced_update(s, lease, progress=progress, best=best)  # first: it takes the row lock
        _insert_trial(s, lease, trial)

    db.run(tx)


def release(db: Database, lease: Lease, reason: str) -> bool:
    """Give the job back to the queue (a clean shutdown): not counted against max_attempts.
    A participant of a distributed job leaves it instead (`leave` says what becomes of the job)."""
    if lease.distributed:
        return leave(db, lease, reason) is not None

    def tx(s: Session) -> None:
        leases.fenced_update(s, lease, status=JobStatus.QUEUED.value, lease_owner=None, lease_expires_at=None,
                       error=f"released: {reason}")

    try:
        db.run(tx)
        return True
    except LeaseLost:
        return False


def fail(db: Database, lease: Lease, error: str) -> bool:
    """The job failed (the tuner crashed, nothing verified, ...). For a distributed job a failure of one
    participant fails the job for all (they are fenced out at their next write): a crash that repeats on
    every worker must end the job, not bounce it between them."""

    def tx(s: Session) -> None:
        if lease.distributed:
            leases.shared_update(s, lease, job=dict(status=JobStatus.FAILED.value, lease_owner=None, lease_expires_at=None,
                                              error=error[:4000], finished_at=utcnow()),
                           part={"status": ParticipantStatus.LEFT.value, "finished_at": utcnow(), "busy_bucket": None})
            return
        leases.fenced_update(s, lease, status=JobStatus.FAILED.value, lease_owner=None, lease_expires_at=None,
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
        leases.fenced_update(s, lease, status=JobStatus.SUCCEEDED.value, lease_owner=None, finished_at=utcnow(),
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
        leases.sweep_lost(s)
        return int(r.rowcount)

    return db.run(tx)


def join(db: Database, *, arch: str, owner: str, lease_s: float, exclude_owner_prefix: str | None = None) -> Lease | None:
    """Become one more participant of a running distributed job of `arch`, or None.

    Joinable: running, its lease unexpired, nobody publishing yet, fewer live participants than its
    `max_workers`, and `owner` not already in this attempt. `exclude_owner_prefix` keeps the slots of
    one worker process (KVTUNE_CONCURRENCY > 1) from joining the same job twice (one GPU, one study)."""
    if not _any(db, Job.status == JobStatus.RUNNING.value, Job.arch == arch, Job.distributed.is_(True)):
        return None

    def tx(s: Session) -> Lease | None:
        q = (select(Job.id, Job.attempt, Job.max_workers)
             .where(Job.status == JobStatus.RUNNING.value, Job.arch == arch, Job.distributed.is_(True),
                    Job.lease_expires_at > db_now(s))
             .order_by(Job.id).limit(20))
        if s.get_bind().dialect.name == "postgresql":
            q = q.with_for_update(skip_locked=True)  # a job whose row a participant holds is tried next poll
        for job in s.execute(q).all():
            leases.sweep_lost(s, job.id)
            parts = s.execute(select(JobParticipant.owner, JobParticipant.slot, JobParticipant.status).where(
                JobParticipant.job_id == job.id, JobParticipant.attempt == job.attempt)).all()
            live = [p for p in parts if p.status in LIVE_PARTICIPANT]
            if any(p.status == ParticipantStatus.PUBLISHING.value for p in parts):
                continue  # the winners are being published: too late to help
            if any(p.owner == owner for p in parts):
                continue
            if exclude_owner_prefix and any(p.owner.startswith(exclude_owner_prefix) for p in live):
                continue
            if job.max_workers is not None and len(live) >= job.max_workers:
                continue
            slot = max((p.slot for p in parts), default=-1) + 1
            row = s.execute(
                update(Job).where(Job.id == job.id, Job.attempt == job.attempt, Job.status == JobStatus.RUNNING.value)
                .values(lease_expires_at=leases.extend_job_lease(s, lease_s), updated_at=utcnow())
                .returning(Job.attempt, Job.key_json, Job.buckets, Job.trials, Job.search, Job.time_budget_s,
                           Job.seed, Job.distributed)
            ).one()
            leases.add_participant(s, job.id, job.attempt, owner, slot, lease_s)
            return leases.lease_from_row(job.id, owner, row, slot=slot)
        return None

    return db.run(tx)


def reserve(db: Database, lease: Lease, bucket: str, trials: int) -> bool:
    """Ask for one more measurement of `bucket` for this attempt: True (go on; this participant now
    holds the reservation until it records a trial or asks again) or False (the budget is spent or
    held by others: stop this bucket). Raises LeaseLost when the participant is fenced out."""

    def tx(s: Session) -> bool:
        leases.shared_update(s, lease)  # the job row lock: reservations of one job are serialised
        done = int(s.scalar(select(func.count()).select_from(TrialResult).where(
            TrialResult.job_id == lease.job_id, TrialResult.attempt == lease.attempt, TrialResult.bucket == bucket)) or 0)
        held = int(s.scalar(select(func.count()).select_from(JobParticipant).where(
            JobParticipant.job_id == lease.job_id, JobParticipant.attempt == lease.attempt,
            JobParticipant.owner != lease.owner, JobParticipant.status == ParticipantStatus.ACTIVE.value,
            JobParticipant.lease_expires_at > db_now(s), JobParticipant.busy_bucket == bucket)) or 0)
        ok = done + held < trials
        s.execute(update(JobParticipant).where(leases.participant_fence(s, lease)).values(busy_bucket=bucket if ok else None))
        return ok

    return db.run(tx)


def merge_best(best: dict[str, Any], trial: TrialRecord, *, is_default: bool) -> None:
    """Fold one trial into a job's per-bucket best-so-far summary (in place)."""
    entry = best.setdefault(trial.bucket.name(), {"time_us": None, "params": None, "number": None, "default_time_us": None})
    if is_default and trial.ok:  # measured in the same run, on the same kind of device
        entry["default_time_us"] = trial.time_us
    if trial.ok and (entry["time_us"] is None or trial.time_us < entry["time_us"]):  # type: ignore[operator]
        entry.update(time_us=trial.time_us, params=trial.config.as_dict(), number=trial.number,
                     source_hash=trial.source_hash)


def record_shared_trial(db: Database, lease: Lease, trial: TrialRecord, *, is_default: bool, total: int) -> None:
    """A participant's trial: the row, its reservation returned, and the job's progress and best so
    far updated from what is in the row (under its lock), so participants never overwrite each other."""

    def tx(s: Session) -> None:
        leases.shared_update(s, lease, part={"busy_bucket": None, "trials_done": JobParticipant.trials_done + 1})
        cur = s.execute(select(Job.progress, Job.best).where(Job.id == lease.job_id)).one()
        progress = dict(cur.progress or {})
        failed = dict(progress.get("failed_by_status") or {})
        if not trial.ok:
            failed[trial.status.value] = failed.get(trial.status.value, 0) + 1
        workers = s.scalar(select(func.count()).select_from(JobParticipant).where(
            JobParticipant.job_id == lease.job_id, JobParticipant.attempt == lease.attempt))
        progress.update(trials_done=int(progress.get("trials_done") or 0) + 1, trials_total=total,
                        trials_failed=sum(failed.values()), failed_by_status=failed, bucket=trial.bucket.name(),
                        participants=int(workers or 0))
        best = {k: dict(v) for k, v in (cur.best or {}).items()}
        merge_best(best, trial, is_default=is_default)
        s.execute(update(Job).where(Job.id == lease.job_id).values(progress=progress, best=best))
        _insert_trial(s, lease, trial)

    db.run(tx)


def fenced_trials(db: Database, lease: Lease, *, all_attempts: bool = True) -> list[tuple[int, str, TrialRecord]]:
    """(attempt, owner, record) of every trial row of the job (or of this attempt only): what the
    lease fence let through, so what a job may publish (`tuner.search.collect_confirmed`)."""

    def tx(s: Session) -> list[tuple[int, str, TrialRecord]]:
        q = select(TrialResult).where(TrialResult.job_id == lease.job_id)
        if not all_attempts:
            q = q.where(TrialResult.attempt == lease.attempt)
        rows = s.execute(q.order_by(TrialResult.attempt, TrialResult.number)).scalars().all()
        return [(r.attempt, r.worker, TrialRecord.from_json({
            "number": r.number, "bucket": r.bucket_json, "config": r.params, "status": r.status,
            "time_us": r.time_us, "error": r.error, "source_hash": r.source_hash,
            "compile_stats": r.compile_stats or {}, "timing": r.timing,
        })) for r in rows]

    return db.run(tx, write=False)


def finish(db: Database, lease: Lease) -> bool:
    """This participant's tuner ran to its end. True: it is the last live participant and must now
    publish (`complete_shared`); False: others are still tuning, it is done. Raises LeaseLost."""

    def tx(s: Session) -> bool:
        leases.shared_update(s, lease)
        leases.sweep_lost(s, lease.job_id)
        last = leases.live_others(s, lease) == 0
        status = ParticipantStatus.PUBLISHING if last else ParticipantStatus.DONE
        s.execute(update(JobParticipant).where(leases.participant_fence(s, lease)).values(
            status=status.value, busy_bucket=None, finished_at=None if last else utcnow()))
        return last

    return db.run(tx)


def take_over(db: Database, lease: Lease) -> str:
    """A `done` participant waiting for the others (it keeps heartbeating): "published" when another
    participant published the job, "ended" when the attempt is over otherwise (failed, cancelled,
    re-queued), "last" when every other participant has finished, left or lost its lease, so this
    one now publishes (`complete_shared`), else "wait". Raises LeaseLost when its own lease is gone.
    This is what makes a participant that dies or leaves mid-job cost no re-queue: a waiting
    participant takes the publishing over."""

    def tx(s: Session) -> str:
        job = s.execute(select(Job.status, Job.attempt).where(Job.id == lease.job_id)).one()
        if job.attempt != lease.attempt or job.status != JobStatus.RUNNING.value:
            return "published" if (job.attempt, job.status) == (lease.attempt, JobStatus.SUCCEEDED.value) else "ended"
        leases.shared_update(s, lease, statuses=(ParticipantStatus.DONE.value,))
        leases.sweep_lost(s, lease.job_id)
        if leases.live_others(s, lease) > 0:
            return "wait"
        s.execute(update(JobParticipant).where(leases.participant_fence(s, lease, (ParticipantStatus.DONE.value,)))
                  .values(status=ParticipantStatus.PUBLISHING.value, finished_at=None))
        return "last"

    return db.run(tx)


def complete_shared(db: Database, lease: Lease, publish: Callable[[Session], dict[str, Any]]) -> None:
    """The publishing participant: job `succeeded`, itself `published`, and the configs written by
    `publish(session)`, in one fenced transaction. Raises LeaseLost (nothing published)."""

    def tx(s: Session) -> None:
        now = utcnow()
        leases.shared_update(s, lease, job=dict(status=JobStatus.SUCCEEDED.value, lease_owner=None, finished_at=now),
                       part=dict(status=ParticipantStatus.PUBLISHED.value, finished_at=now, busy_bucket=None))
        best = publish(s)
        s.execute(update(Job).where(Job.id == lease.job_id).values(best=best))

    for i in range(5):  # see complete(): a concurrent publisher of the same key
        try:
            db.run(tx)
            return
        except Conflict:
            if i == 4:
                raise
            log.info("publish of job %d raced another publisher; retrying", lease.job_id)


LEFT_TO_OTHERS = "others tune on"
LEFT_TO_DONE = "a done participant publishes"
LEFT_TO_QUEUE = "back in the queue"


def leave(db: Database, lease: Lease, reason: str) -> str | None:
    """A participant stops early (SIGTERM). Returns what happens to the job: `LEFT_TO_OTHERS` (live
    participants carry on), `LEFT_TO_DONE` (none is live, but one that finished its share is waiting,
    heartbeating: its next `take_over` makes it the publisher of what the attempt measured), or
    `LEFT_TO_QUEUE` (nobody is left: the job goes back to the queue as `release` does, not counted
    against max_attempts; the next attempt reuses every trial in the studies). None when the
    participant was already fenced out."""

    def tx(s: Session) -> str:
        leases.shared_update(s, lease, part={"status": ParticipantStatus.LEFT.value, "busy_bucket": None,
                                       "finished_at": utcnow()})
        leases.sweep_lost(s, lease.job_id)
        if leases.live_others(s, lease) > 0:
            return LEFT_TO_OTHERS
        if leases.live_others(s, lease, (ParticipantStatus.DONE.value,)) > 0:
            return LEFT_TO_DONE
        s.execute(update(Job).where(Job.id == lease.job_id).values(
            status=JobStatus.QUEUED.value, lease_owner=None, lease_expires_at=None, error=f"released: {reason}"))
        return LEFT_TO_QUEUE

    try:
        return db.run(tx)
    except LeaseLost:
        return None


def participants(db: Database, job_id: int) -> list[dict[str, Any]]:
    """The participants of a job's current attempt, for the job's JSON."""

    def tx(s: Session) -> list[dict[str, Any]]:
        attempt = select(Job.attempt).where(Job.id == job_id).scalar_subquery()
        rows = s.execute(select(JobParticipant).where(JobParticipant.job_id == job_id, JobParticipant.attempt == attempt)
                         .order_by(JobParticipant.slot)).scalars().all()
        return [{"owner": p.owner, "slot": p.slot, "status": p.status, "trials_done": p.trials_done,
                 "lease_expires_at": p.lease_expires_at.isoformat() if p.lease_expires_at else None} for p in rows]

    return db.run(tx, write=False)
