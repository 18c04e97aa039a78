"""The tables of the service. The migration in db/migrations/versions is the schema's source of truth
for a database; these models must stay equal to it (tests/db/test_migrations.py compares them).

Table names avoid Optuna's (`studies`, `trials`, ...) since the studies live in the same database.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import JSON, Boolean, CheckConstraint, Float, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from db.clock import UTCDateTime, utcnow


class JobStatus(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATUSES = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
_STATUS_VALUES = ", ".join(f"'{s.value}'" for s in JobStatus)


class Base(DeclarativeBase):
    type_annotation_map = {dt.datetime: UTCDateTime(), dict[str, Any]: JSON(), list[Any]: JSON()}


class Job(Base):
    """One tuning request. `attempt` is the fencing token: it grows by one at every claim, and every
    write a worker makes names the attempt (and owner) it holds, so a worker whose lease was lost and
    re-claimed matches no row. `expired_leases` counts attempts that ended without a clean release;
    at `max_attempts` of them the job fails instead of going back to the queue."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(f"status IN ({_STATUS_VALUES})", name="ck_jobs_status"),
        Index("ix_jobs_claim", "status", "arch", "id"),
        Index("ix_jobs_key_slug", "key_slug"),
        Index("uq_jobs_idempotency_key", "idempotency_key", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key_slug: Mapped[str] = mapped_column(String(255))
    key_json: Mapped[dict[str, Any]]
    kernel: Mapped[str] = mapped_column(String(32))
    arch: Mapped[str] = mapped_column(String(32))
    buckets: Mapped[list[Any] | None]  # list of Bucket.to_json(); None = the family's defaults
    trials: Mapped[int] = mapped_column(Integer)
    time_budget_s: Mapped[float | None] = mapped_column(Float)
    search: Mapped[str] = mapped_column(String(32))
    seed: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED.value)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    expired_leases: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[dt.datetime | None]
    heartbeat_at: Mapped[dt.datetime | None]
    progress: Mapped[dict[str, Any] | None]
    best: Mapped[dict[str, Any] | None]  # per bucket name: the best verified trial so far
    error: Mapped[str | None] = mapped_column(Text)
    submitted_by: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    # Distributed mode (revision 0002): several workers of the job's arch take part in one attempt,
    # each under its own lease row in job_participants, all sharing the job's Optuna studies.
    # `max_workers` caps the participants of one attempt (None: as many as come).
    distributed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    max_workers: Mapped[int | None] = mapped_column(Integer)
    # Idempotent submission (revision 0004): the client's Idempotency-Key (unique where set) and the
    # digest of the request it came with; a retry with the key gets this job back.
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))


class ParticipantStatus(str, enum.Enum):
    ACTIVE = "active"  # tuning; its lease must be renewed
    PUBLISHING = "publishing"  # the last one to finish: reading the studies and publishing the winners
    DONE = "done"  # finished its share; someone else publishes
    PUBLISHED = "published"  # finished and published the job's winners (exactly one per succeeded job)
    LEFT = "left"  # stopped early (SIGTERM) and said so
    LOST = "lost"  # its lease expired: fenced out, whatever it still tries to write


LIVE_PARTICIPANT = (ParticipantStatus.ACTIVE.value, ParticipantStatus.PUBLISHING.value)
_PARTICIPANT_VALUES = ", ".join(f"'{s.value}'" for s in ParticipantStatus)


class JobParticipant(Base):
    """One worker's part in one attempt of a distributed job: its own lease (renewed by its own
    heartbeat) and its fencing token (job_id, attempt, owner). The job row stays the one place every
    participant's write serialises on (each write first updates it, fenced by attempt and status),
    so "who finishes last" and "who publishes" are decided under one row lock.

    `slot` numbers the participants of an attempt (0 = the claimer); a participant's sampler seed is
    the job's seed + slot so that two workers never propose the same sequence. `busy_bucket` is the
    bucket whose trial budget this participant has reserved one measurement of (see db.queue.reserve)."""

    __tablename__ = "job_participants"
    __table_args__ = (
        CheckConstraint(f"status IN ({_PARTICIPANT_VALUES})", name="ck_job_participants_status"),
        Index("uq_job_participants_owner", "job_id", "attempt", "owner", unique=True),
        Index("uq_job_participants_slot", "job_id", "attempt", "slot", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    owner: Mapped[str] = mapped_column(String(255))
    slot: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=ParticipantStatus.ACTIVE.value)
    busy_bucket: Mapped[str | None] = mapped_column(String(64))
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    lease_expires_at: Mapped[dt.datetime | None]
    heartbeat_at: Mapped[dt.datetime | None]
    joined_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[dt.datetime | None]


class TrialResult(Base):
    """One trial as a worker reported it, under the attempt that ran it."""

    __tablename__ = "trial_results"
    __table_args__ = (Index("ix_trial_results_job", "job_id", "attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    number: Mapped[int] = mapped_column(Integer)
    bucket: Mapped[str] = mapped_column(String(64))
    bucket_json: Mapped[dict[str, Any]]
    params: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(32))
    time_us: Mapped[float | None] = mapped_column(Float)
    timing: Mapped[str] = mapped_column(String(64), default="")
    compile_stats: Mapped[dict[str, Any] | None]
    error: Mapped[str | None] = mapped_column(Text)
    source_hash: Mapped[str] = mapped_column(String(64), default="")
    worker: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class KernelConfig(Base):
    """A published winner for one (key, bucket). Superseded rows stay (active = false) as history;
    a partial unique index keeps exactly one active row per key and bucket."""

    __tablename__ = "configs"
    __table_args__ = (
        Index(
            "uq_configs_active",
            "key_slug",
            "bucket",
            unique=True,
            postgresql_where=text("active"),
            sqlite_where=text("active"),
        ),
        Index("ix_configs_lookup", "arch", "heads", "topk", "window"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key_slug: Mapped[str] = mapped_column(String(255))
    key_json: Mapped[dict[str, Any]]
    kernel: Mapped[str] = mapped_column(String(32))
    arch: Mapped[str] = mapped_column(String(32))
    heads: Mapped[int] = mapped_column(Integer)
    topk: Mapped[int] = mapped_column(Integer)
    window: Mapped[int] = mapped_column(Integer)
    bucket: Mapped[str] = mapped_column(String(64))
    bucket_json: Mapped[dict[str, Any]]
    params: Mapped[dict[str, Any]]
    source_hash: Mapped[str] = mapped_column(String(64))
    time_us: Mapped[float | None] = mapped_column(Float)
    default_params: Mapped[dict[str, Any] | None]
    default_time_us: Mapped[float | None] = mapped_column(Float)
    timing: Mapped[str] = mapped_column(String(64), default="")
    trials_run: Mapped[int] = mapped_column(Integer, default=0)
    trials_failed: Mapped[dict[str, Any] | None]  # failed trials by status
    triton_version: Mapped[str] = mapped_column(String(64), default="")
    torch_version: Mapped[str] = mapped_column(String(64), default="")
    device_name: Mapped[str] = mapped_column(String(255), default="")
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class KernelSource(Base):
    """Generated Triton modules by content hash (templates.render.source_hash), served to engines."""

    __tablename__ = "kernel_sources"

    source_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    template: Mapped[str] = mapped_column(String(128))
    source: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class LookupMiss(Base):
    """A key an engine asked for that had no tuned config (the dashboard's to-do list)."""

    __tablename__ = "lookup_misses"

    key_slug: Mapped[str] = mapped_column(String(255), primary_key=True)
    key_json: Mapped[dict[str, Any]]
    kernel: Mapped[str] = mapped_column(String(32))
    arch: Mapped[str] = mapped_column(String(32))
    count: Mapped[int] = mapped_column(Integer, default=1)
    first_seen: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[dt.datetime] = mapped_column(default=utcnow)


class WorkerPresence(Base):
    """A worker process that announced itself: refreshed every few seconds while it lives (a
    heartbeat row), removed when it exits cleanly. A job for an arch no live worker announced is
    answered with a warning (it would stay queued)."""

    __tablename__ = "worker_presence"

    owner: Mapped[str] = mapped_column(String(255), primary_key=True)
    arch: Mapped[str] = mapped_column(String(32), index=True)
    gpu: Mapped[int | None] = mapped_column(Integer, nullable=True)
    started_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[dt.datetime] = mapped_column(default=utcnow)
